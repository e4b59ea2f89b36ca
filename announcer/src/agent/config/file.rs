//! The agent's configuration file (`announcer agent --config PATH`): the settings users tune,
//! in YAML, mounted from the `announcer-config` ConfigMap in a cluster.
//!
//! Why a file and not only flags: a ConfigMap can be reviewed, diffed and documented key by
//! key, and kustomize's `configMapGenerator` gives it a content hash in its name, so editing it
//! rolls the DaemonSet. Why strict: a misspelt key silently ignored is a setting silently not
//! applied, so unknown keys are errors (`deny_unknown_fields`), and every value is checked
//! while it is read (durations, label selectors, interface patterns), so an error names the
//! key and the line. Timings that must fit together are checked afterwards by
//! [`AgentFlags::validate`](super::AgentFlags::validate), for flags and file alike.
//!
//! Keys are camelCase, like a Kubernetes object; docs/configure.md lists them. Every key is
//! optional; a missing key leaves the flag's value (its default, or what the command line says).

use std::{
    fmt,
    path::{Path, PathBuf},
    time::Duration,
};

use serde::{Deserialize, Deserializer, de};

use super::{
    AgentFlags, Election, XdpMode,
    yaml::{self, YamlError},
};
use crate::placement::selector;

/// A configuration file that cannot be used.
#[derive(Debug, thiserror::Error)]
pub enum ConfigFileError {
    /// The file cannot be read.
    #[error("cannot read the configuration file {path}: {error}")]
    Read {
        /// The file.
        path: PathBuf,
        /// Why.
        error: std::io::Error,
    },
    /// The file is not valid YAML, has an unknown key or a bad value (the message names the
    /// key and the line).
    #[error("configuration file {path}: {error}")]
    Parse {
        /// The file.
        path: PathBuf,
        /// What is wrong, where.
        error: YamlError,
    },
}

/// The file's contents. Every key is optional.
#[derive(Debug, Default, Clone, PartialEq, Deserialize)]
#[serde(deny_unknown_fields, rename_all = "camelCase")]
pub struct ConfigFile {
    /// `--load-balancer-class`.
    pub load_balancer_class: Option<String>,
    /// `--class-only`: ignore class-less Services.
    pub class_only: Option<bool>,
    /// `--force-classless`: serve class-less Services even when another announcer is found.
    pub force_classless: Option<bool>,
    /// Deprecated and ignored with a warning: the allocator is the `announcer-allocator`
    /// Deployment now (issue 25). Still parsed, so an old ConfigMap does not stop the agents.
    pub allocator: Option<AllocatorSection>,
    /// `--service-selector`: a label selector string, e.g. `l2=true,tier in (web)`.
    pub service_selector: Option<Selector>,
    /// `--node-selector`.
    pub node_selector: Option<Selector>,
    /// `--ignore-exclude-label`: nodes labelled exclude-from-external-load-balancers announce.
    pub ignore_exclude_label: Option<bool>,
    /// `--interface`: names or globs (`eth*`).
    pub interfaces: Option<Vec<InterfacePattern>>,
    /// Announce IPv4 VIPs (`false` = `--no-ipv4`).
    pub ipv4: Option<bool>,
    /// Announce IPv6 VIPs (`false` = `--no-ipv6`).
    pub ipv6: Option<bool>,
    /// `--election`: `node-lease` or `lease-per-service`.
    pub election: Option<Election>,
    /// Heartbeats.
    pub heartbeat: Option<HeartbeatSection>,
    /// The node Lease (node-lease mode).
    pub lease: Option<LeaseSection>,
    /// The per-Service Leases (lease-per-service mode).
    pub service_lease: Option<ServiceLeaseSection>,
    /// The gratuitous ARP / unsolicited NA burst after a takeover.
    pub announcement: Option<AnnouncementSection>,
    /// `--grace`.
    pub grace: Option<Dur>,
    /// `--probe-timeout`.
    pub probe_timeout: Option<Dur>,
    /// `--warmup`.
    pub warmup: Option<Dur>,
    /// `--handover-timeout`.
    pub handover_timeout: Option<Dur>,
    /// `--xdp-mode`: `auto`, `native` or `generic`.
    pub xdp_mode: Option<XdpMode>,
    /// `--state-dir`: this node's heartbeat identity and incarnation counter.
    pub state_dir: Option<StateDirPath>,
    /// `--announce-outside-pools`: announce addresses outside every `AddressPool` too.
    pub announce_outside_pools: Option<bool>,
}

/// `allocator:` (deprecated, ignored: see [`ConfigFile::allocator`]).
#[derive(Debug, Default, Clone, PartialEq, Deserialize)]
#[serde(deny_unknown_fields, rename_all = "camelCase")]
pub struct AllocatorSection {
    /// Was `--no-allocator`.
    pub enabled: Option<bool>,
    /// Was `--allocate-classless` (now `announcer allocator --classless`).
    pub classless: Option<bool>,
}

/// `heartbeat:`.
#[derive(Debug, Default, Clone, PartialEq, Deserialize)]
#[serde(deny_unknown_fields, rename_all = "camelCase")]
pub struct HeartbeatSection {
    /// `--heartbeat-interval`.
    pub interval: Option<Dur>,
    /// `--heartbeat-misses`.
    pub misses: Option<u32>,
    /// `--heartbeat-port`.
    pub port: Option<u16>,
}

/// `lease:`.
#[derive(Debug, Default, Clone, PartialEq, Deserialize)]
#[serde(deny_unknown_fields, rename_all = "camelCase")]
pub struct LeaseSection {
    /// `--lease-duration`.
    pub duration: Option<Dur>,
    /// `--lease-renew`.
    pub renew: Option<Dur>,
}

/// `serviceLease:`.
#[derive(Debug, Default, Clone, PartialEq, Deserialize)]
#[serde(deny_unknown_fields, rename_all = "camelCase")]
pub struct ServiceLeaseSection {
    /// `--service-lease-duration`.
    pub duration: Option<Dur>,
    /// `--service-lease-renew-deadline`.
    pub renew_deadline: Option<Dur>,
    /// `--service-lease-retry`.
    pub retry: Option<Dur>,
}

/// `announcement:`.
#[derive(Debug, Default, Clone, PartialEq, Deserialize)]
#[serde(deny_unknown_fields, rename_all = "camelCase")]
pub struct AnnouncementSection {
    /// `--burst-count`.
    pub count: Option<u32>,
    /// `--burst-interval`.
    pub interval: Option<Dur>,
    /// `--announce-refresh-interval`: re-announce each owned VIP this often (off if unset).
    pub refresh_interval: Option<Dur>,
    /// `--announce-rate`: announcement frames per second, at most.
    pub rate: Option<u32>,
}

/// A duration written the humantime way (`100ms`, `3s`, `1m30s`); a bare number is rejected
/// because its unit would be a guess.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Dur(pub Duration);

impl<'de> Deserialize<'de> for Dur {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        checked_str(d, "a duration with a unit, such as 100ms, 3s or 1m", |s| {
            humantime::parse_duration(s)
                .map(Dur)
                .map_err(|e| format!("invalid duration {s:?}: {e}"))
        })
    }
}

/// Deserializes a string and checks it with `check` *inside* the deserializer, so that the
/// YAML error carries the key path and the line.
fn checked_str<'de, D: Deserializer<'de>, T>(
    d: D,
    expecting: &'static str,
    check: fn(&str) -> Result<T, String>,
) -> Result<T, D::Error> {
    struct V<T> {
        expecting: &'static str,
        check: fn(&str) -> Result<T, String>,
    }
    impl<T> de::Visitor<'_> for V<T> {
        type Value = T;
        fn expecting(&self, f: &mut fmt::Formatter) -> fmt::Result {
            f.write_str(self.expecting)
        }
        fn visit_str<E: de::Error>(self, s: &str) -> Result<T, E> {
            (self.check)(s).map_err(E::custom)
        }
    }
    d.deserialize_str(V { expecting, check })
}

/// The `stateDir` value: a path, which must be absolute (the file is shared by every node, so a
/// relative one would depend on each agent's working directory). The directory, opened, is
/// [`StateDir`](crate::agent::persist::StateDir).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct StateDirPath(pub PathBuf);

impl<'de> Deserialize<'de> for StateDirPath {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        checked_str(d, "an absolute directory path", |s| {
            if Path::new(s).is_absolute() {
                Ok(StateDirPath(PathBuf::from(s)))
            } else {
                Err(format!(
                    "invalid state directory {s:?}: not an absolute path"
                ))
            }
        })
    }
}

/// A label selector string, checked with the agent's own parser.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Selector(pub String);

impl<'de> Deserialize<'de> for Selector {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        checked_str(d, "a label selector string", |s| {
            selector::parse(s)
                .map(|_| Selector(s.to_owned()))
                .map_err(|e| format!("invalid label selector {s:?}: {e}"))
        })
    }
}

impl Selector {
    /// The flag's value: `None` (everything) for an empty selector.
    fn or_all(&self) -> Option<String> {
        (!self.0.is_empty()).then(|| self.0.clone())
    }
}

/// An interface name or glob (`*` matches any run of characters).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct InterfacePattern(pub String);

/// Linux interface names are at most 15 bytes (`IFNAMSIZ` - 1).
const IFNAME_MAX: usize = 15;

impl<'de> Deserialize<'de> for InterfacePattern {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        checked_str(d, "an interface name or glob", |s| {
            let bad = |why: &str| Err(format!("invalid interface pattern {s:?}: {why}"));
            if s.is_empty() {
                return bad("empty");
            }
            if s.chars().any(|c| c.is_whitespace() || c == '/' || c == ':') {
                return bad("interface names contain no whitespace, '/' or ':'");
            }
            if s.chars().any(|c| "^$[](){}+?|\\".contains(c)) {
                return bad("patterns are globs like eth* (only * is special), not regexes");
            }
            if !s.contains('*') && s.len() > IFNAME_MAX {
                return bad("longer than the 15 bytes Linux allows");
            }
            Ok(InterfacePattern(s.to_owned()))
        })
    }
}

/// Keys that existed in earlier versions: (section, key, why it is gone). A file that still
/// sets one is rejected like any unknown key, but the error says that the key was removed and
/// why, instead of "unknown field" (and the key is not offered in "expected one of").
const REMOVED: &[(&str, &str, &str)] = &[(
    "heartbeat",
    "secret",
    "heartbeats are no longer authenticated with a shared Secret but with per-node keys (each \
     agent keeps its own key pair in its state directory, see stateDir, and publishes the \
     public key in its node Lease); delete the key",
)];

/// Rewrites serde's "unknown field" error for a [`REMOVED`] key, keeping the position.
fn explain_removed(e: YamlError) -> YamlError {
    for (section, key, why) in REMOVED {
        if e.path.as_deref() == Some(*section)
            && e.message.starts_with(&format!("unknown field `{key}`,"))
        {
            return e.with_message(
                Some(format!("{section}.{key}")),
                format!("this key was removed: {why}"),
            );
        }
    }
    e
}

impl ConfigFile {
    /// Parses YAML text. An empty document (or only comments) is an empty configuration.
    pub fn parse(text: &str) -> Result<ConfigFile, YamlError> {
        yaml::from_str::<Option<ConfigFile>>(text)
            .map(Option::unwrap_or_default)
            .map_err(explain_removed)
    }

    /// Reads and parses `path`.
    pub fn load(path: &Path) -> Result<ConfigFile, ConfigFileError> {
        let text = std::fs::read_to_string(path).map_err(|error| ConfigFileError::Read {
            path: path.to_owned(),
            error,
        })?;
        ConfigFile::parse(&text).map_err(|error| ConfigFileError::Parse {
            path: path.to_owned(),
            error,
        })
    }

    /// Sets every flag the file gives a value for, except those for which `explicit(id)` (the
    /// clap argument id, i.e. the field name) says the command line or the environment set it.
    pub fn apply(&self, flags: &mut AgentFlags, explicit: impl Fn(&str) -> bool) {
        let keep = |id: &str| explicit(id);
        fn set<T>(keep: &dyn Fn(&str) -> bool, id: &str, from: Option<T>, to: &mut T) {
            if let Some(v) = from
                && !keep(id)
            {
                *to = v;
            }
        }
        let d = |o: &Option<Dur>| o.map(|d| d.0);
        set(
            &keep,
            "load_balancer_class",
            self.load_balancer_class.clone(),
            &mut flags.load_balancer_class,
        );
        set(
            &keep,
            "service_selector",
            self.service_selector.as_ref().map(Selector::or_all),
            &mut flags.service_selector,
        );
        set(
            &keep,
            "node_selector",
            self.node_selector.as_ref().map(Selector::or_all),
            &mut flags.node_selector,
        );
        set(
            &keep,
            "interfaces",
            self.interfaces
                .as_ref()
                .map(|l| l.iter().map(|p| p.0.clone()).collect()),
            &mut flags.interfaces,
        );
        set(&keep, "class_only", self.class_only, &mut flags.class_only);
        set(
            &keep,
            "ignore_exclude_label",
            self.ignore_exclude_label,
            &mut flags.ignore_exclude_label,
        );
        set(
            &keep,
            "force_classless",
            self.force_classless,
            &mut flags.force_classless,
        );
        // Deprecated: the agent warns and ignores it (the allocator is a Deployment now).
        if self.allocator.is_some() {
            flags.allocator_settings = true;
        }
        set(&keep, "no_ipv4", self.ipv4.map(|b| !b), &mut flags.no_ipv4);
        set(&keep, "no_ipv6", self.ipv6.map(|b| !b), &mut flags.no_ipv6);
        set(
            &keep,
            "announce_outside_pools",
            self.announce_outside_pools,
            &mut flags.announce_outside_pools,
        );
        set(&keep, "election", self.election, &mut flags.election);
        if let Some(h) = &self.heartbeat {
            set(
                &keep,
                "heartbeat_interval",
                d(&h.interval),
                &mut flags.heartbeat_interval,
            );
            set(
                &keep,
                "heartbeat_misses",
                h.misses,
                &mut flags.heartbeat_misses,
            );
            set(&keep, "heartbeat_port", h.port, &mut flags.heartbeat_port);
        }
        if let Some(l) = &self.lease {
            set(
                &keep,
                "lease_duration",
                d(&l.duration),
                &mut flags.lease_duration,
            );
            set(&keep, "lease_renew", d(&l.renew), &mut flags.lease_renew);
        }
        if let Some(s) = &self.service_lease {
            set(
                &keep,
                "service_lease_duration",
                d(&s.duration),
                &mut flags.service_lease_duration,
            );
            set(
                &keep,
                "service_lease_renew_deadline",
                d(&s.renew_deadline),
                &mut flags.service_lease_renew_deadline,
            );
            set(
                &keep,
                "service_lease_retry",
                d(&s.retry),
                &mut flags.service_lease_retry,
            );
        }
        if let Some(a) = &self.announcement {
            set(&keep, "burst_count", a.count, &mut flags.burst_count);
            set(&keep, "announce_rate", a.rate, &mut flags.announce_rate);
            set(
                &keep,
                "burst_interval",
                d(&a.interval),
                &mut flags.burst_interval,
            );
            set(
                &keep,
                "announce_refresh_interval",
                a.refresh_interval.map(|d| Some(d.0)),
                &mut flags.announce_refresh_interval,
            );
        }
        set(&keep, "grace", d(&self.grace), &mut flags.grace);
        set(
            &keep,
            "probe_timeout",
            d(&self.probe_timeout),
            &mut flags.probe_timeout,
        );
        set(&keep, "warmup", d(&self.warmup), &mut flags.warmup);
        set(
            &keep,
            "handover_timeout",
            d(&self.handover_timeout),
            &mut flags.handover_timeout,
        );
        set(&keep, "xdp_mode", self.xdp_mode, &mut flags.xdp_mode);
        set(
            &keep,
            "state_dir",
            self.state_dir.as_ref().map(|d| Some(d.0.clone())),
            &mut flags.state_dir,
        );
    }
}

#[cfg(test)]
mod golden;
#[cfg(test)]
mod tests;
