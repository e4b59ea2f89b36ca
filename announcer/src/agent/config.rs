//! `announcer agent` flags. Every timing has a default that meets the project's targets and can
//! be set lower; `--help` says what each one trades.
//!
//! The same settings can come from a YAML file (`--config`, in a cluster the `announcer-config`
//! ConfigMap, see [`file`](mod@file)), because a DaemonSet's argument list is a poor place to document
//! and review them. A flag given on the command line (or through its environment variable)
//! always wins over the file, so an operator can override one setting for one node without
//! editing the ConfigMap. The merge happens while clap builds [`AgentArgs`], so every caller
//! of the parser gets the merged settings without knowing a file exists.

pub mod file;
pub mod yaml;

use std::{
    net::SocketAddr,
    ops::{Deref, DerefMut},
    path::{Path, PathBuf},
    time::Duration,
};

use clap::{ArgMatches, Args, FromArgMatches, ValueEnum};

use crate::{
    agent::kube::lease_per_service::Timing,
    dataplane::{announce::BurstConfig, loader::Mode},
    election::{self, defaults},
};

/// How VIP owners are elected.
#[derive(Clone, Copy, Debug, PartialEq, Eq, ValueEnum, serde::Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum Election {
    /// One Lease per node plus UDP heartbeats and rendezvous hashing (the default: sub-second
    /// failover, API writes independent of the number of Services).
    NodeLease,
    /// One Lease per Service, renewed by its holder and polled by every candidate (the way
    /// Cilium and kube-vip elect): for comparison.
    LeasePerService,
}

/// XDP attach mode for the agent.
#[derive(Clone, Copy, Debug, PartialEq, Eq, ValueEnum, serde::Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum XdpMode {
    /// Native, falling back to generic.
    Auto,
    /// Native only.
    Native,
    /// Generic only.
    Generic,
}

impl From<XdpMode> for Mode {
    fn from(m: XdpMode) -> Mode {
        match m {
            XdpMode::Auto => Mode::Auto,
            XdpMode::Native => Mode::Native,
            XdpMode::Generic => Mode::Generic,
        }
    }
}

fn dur(s: &str) -> Result<Duration, humantime::DurationError> {
    humantime::parse_duration(s)
}

/// A [`Duration`] constant as a flag's default text (`100ms`, `10s`), formatted once: the
/// flags default to the named constants ([`election::defaults`] and the like) rather than to
/// copies of their values. [`dur`] parses the text back to the same value.
macro_rules! human {
    ($d:expr) => {{
        static TEXT: std::sync::OnceLock<String> = std::sync::OnceLock::new();
        TEXT.get_or_init(|| humantime::format_duration($d).to_string())
            .as_str()
    }};
}

/// `announcer agent`: the flags, with the `--config` file merged under them. Derefs to the
/// [`AgentFlags`].
#[derive(Clone, Debug)]
pub struct AgentArgs(pub AgentFlags);

impl Deref for AgentArgs {
    type Target = AgentFlags;
    fn deref(&self) -> &AgentFlags {
        &self.0
    }
}

impl DerefMut for AgentArgs {
    fn deref_mut(&mut self) -> &mut AgentFlags {
        &mut self.0
    }
}

impl Args for AgentArgs {
    fn augment_args(cmd: clap::Command) -> clap::Command {
        AgentFlags::augment_args(cmd)
    }
    fn augment_args_for_update(cmd: clap::Command) -> clap::Command {
        AgentFlags::augment_args_for_update(cmd)
    }
}

impl FromArgMatches for AgentArgs {
    /// Parses the flags, then fills every setting not given explicitly from `--config`. A bad
    /// file is a usage error (exit 2) that names the file, the key and the line.
    fn from_arg_matches(matches: &ArgMatches) -> Result<Self, clap::Error> {
        let mut flags = AgentFlags::from_arg_matches(matches)?;
        if let Some(path) = flags.config.clone() {
            let explicit = |id: &str| {
                matches!(
                    matches.value_source(id),
                    Some(clap::parser::ValueSource::CommandLine)
                        | Some(clap::parser::ValueSource::EnvVariable)
                )
            };
            file::ConfigFile::load(&path)
                .map(|f| f.apply(&mut flags, explicit))
                .map_err(|e| {
                    clap::Error::raw(clap::error::ErrorKind::InvalidValue, e.to_string())
                })?;
        }
        Ok(AgentArgs(flags))
    }

    fn update_from_arg_matches(&mut self, matches: &ArgMatches) -> Result<(), clap::Error> {
        *self = Self::from_arg_matches(matches)?;
        Ok(())
    }
}

/// The `announcer agent` flags as given (before the `--config` file is merged).
#[derive(Args, Clone, Debug)]
pub struct AgentFlags {
    /// YAML file with agent settings (in a cluster: the `announcer-config` ConfigMap). Flags
    /// given on the command line override it; see docs/configure.md for its keys.
    #[arg(long, env = "ANNOUNCER_CONFIG")]
    pub config: Option<PathBuf>,
    /// This node's name (from the downward API).
    #[arg(long, env = "NODE_NAME")]
    pub node_name: String,
    /// Namespace of the agent's node Leases and (with lease-per-service) Service Leases.
    #[arg(long, env = "POD_NAMESPACE", default_value = "announcer-system")]
    pub namespace: String,
    /// kubeconfig to use (default: in-cluster config, else $KUBECONFIG / ~/.kube/config).
    #[arg(long, env = "ANNOUNCER_KUBECONFIG")]
    pub kubeconfig: Option<PathBuf>,
    /// Directory for this node's heartbeat identity and incarnation counter (default
    /// `/var/lib/announcer/<node-name>`); keep it on the host (hostPath) so restarts keep both.
    #[arg(long, env = "ANNOUNCER_STATE_DIR")]
    pub state_dir: Option<PathBuf>,
    /// Election mode.
    #[arg(long, value_enum, default_value_t = Election::NodeLease)]
    pub election: Election,

    /// Only Services with this `spec.loadBalancerClass` (or none, unless `--class-only`) are
    /// announced.
    #[arg(long, default_value = "announcer.dev/l2")]
    pub load_balancer_class: String,
    /// Ignore Services with no `spec.loadBalancerClass`: announce (and allocate for) only those
    /// of our class. Set it when another load balancer (MetalLB) serves class-less Services.
    #[arg(long)]
    pub class_only: bool,
    /// Serve class-less Services (without `--class-only`) even when another announcer is
    /// installed: by default, when API discovery finds MetalLB (`metallb.io`) or Cilium's
    /// `CiliumL2AnnouncementPolicy`, class-less Services are left to it, since two announcers
    /// answering for one address make clients flip between two MACs.
    #[arg(long)]
    pub force_classless: bool,
    /// Deprecated, ignored with a warning: the allocator left the agents (issue 25); it is the
    /// `announcer-allocator` Deployment. Set by `--no-allocator`, `--allocate-classless` or the
    /// file's `allocator:` section, all accepted so an old DaemonSet or ConfigMap still starts.
    #[arg(
        long = "no-allocator",
        alias = "allocate-classless",
        hide = true,
        action = clap::ArgAction::SetTrue
    )]
    pub allocator_settings: bool,
    /// Only Services matching this label selector (e.g. `l2=true,tier in (web)`).
    #[arg(long)]
    pub service_selector: Option<String>,
    /// Only nodes matching this label selector announce.
    #[arg(long)]
    pub node_selector: Option<String>,
    /// Let nodes labelled `node.kubernetes.io/exclude-from-external-load-balancers` announce
    /// too (like MetalLB's `--ignore-exclude-lb`): for clusters of control-plane nodes only,
    /// which kubeadm and Talos label so (otherwise every VIP is `NoEligibleNode`).
    #[arg(long)]
    pub ignore_exclude_label: bool,
    /// Interfaces to announce on (names or globs like `eth*`; default: the one whose subnet
    /// contains the VIP, else the one with the node's InternalIP).
    #[arg(long = "interface", value_delimiter = ',')]
    pub interfaces: Vec<String>,
    /// Do not announce IPv4 VIPs.
    #[arg(long)]
    pub no_ipv4: bool,
    /// Do not announce IPv6 VIPs.
    #[arg(long)]
    pub no_ipv6: bool,
    /// Once an `AddressPool` exists, also announce addresses outside every pool (assigned by
    /// another IPAM). Off: only pool addresses are (with no pool at all, every address is).
    #[arg(long)]
    pub announce_outside_pools: bool,

    /// Heartbeat UDP port (the same on every node). Not 7946: that is MetalLB's memberlist.
    #[arg(long, default_value_t = crate::agent::net::heartbeat_socket::DEFAULT_PORT)]
    pub heartbeat_port: u16,
    /// Address this node's peers send heartbeats to (default: the node's InternalIP).
    #[arg(long)]
    pub heartbeat_address: Option<std::net::IpAddr>,
    /// Heartbeat period.
    #[arg(long, value_parser = dur, default_value = human!(defaults::HEARTBEAT_INTERVAL))]
    pub heartbeat_interval: Duration,
    /// A peer is dead after this many heartbeat periods of silence.
    #[arg(long, default_value_t = defaults::HEARTBEAT_MISSES)]
    pub heartbeat_misses: u32,
    /// Node Lease duration (node-lease mode).
    #[arg(long, value_parser = dur, default_value = human!(defaults::LEASE_DURATION))]
    pub lease_duration: Duration,
    /// Node Lease renewal period: one API write per node per this period.
    #[arg(long, value_parser = dur, default_value = human!(defaults::LEASE_RENEW))]
    pub lease_renew: Duration,
    /// How long this node's entries keep answering after its agent dies (data-plane TTL); a
    /// restart within it is invisible to clients.
    #[arg(long, value_parser = dur, default_value = human!(defaults::GRACE))]
    pub grace: Duration,
    /// How long to wait for the old owner's data plane to answer a probe.
    #[arg(long, value_parser = dur, default_value = human!(defaults::PROBE_TIMEOUT))]
    pub probe_timeout: Duration,
    /// After start, listen this long for peers before taking VIPs.
    #[arg(long, value_parser = dur, default_value = human!(defaults::WARMUP))]
    pub warmup: Duration,
    /// On SIGTERM, wait at most this long for successors to take over.
    #[arg(long, value_parser = dur, default_value = human!(defaults::HANDOVER_TIMEOUT))]
    pub handover_timeout: Duration,

    /// Lease-per-service: lease duration (Cilium 15s, kube-vip tuned 5s).
    #[arg(long, value_parser = dur, default_value = human!(Timing::CILIUM.lease_duration))]
    pub service_lease_duration: Duration,
    /// Lease-per-service: renew deadline (Cilium 5s, kube-vip tuned 3s).
    #[arg(long, value_parser = dur, default_value = human!(Timing::CILIUM.renew_deadline))]
    pub service_lease_renew_deadline: Duration,
    /// Lease-per-service: retry period (Cilium 2s, kube-vip tuned 1s).
    #[arg(long, value_parser = dur, default_value = human!(Timing::CILIUM.retry_period))]
    pub service_lease_retry: Duration,

    /// Announcement rounds per takeover.
    #[arg(long, default_value_t = BurstConfig::default().count)]
    pub burst_count: u32,
    /// Pause between announcement rounds.
    #[arg(long, value_parser = dur, default_value = human!(BurstConfig::default().interval))]
    pub burst_interval: Duration,
    /// Announcement frames this node sends per second at most (gratuitous ARPs count 2 per
    /// VIP and round, unsolicited NAs 1), first rounds before repeats; up to 200 go out at
    /// once. The default, 1000, is a quarter of a Catalyst 9400's ARP policer: a node taking
    /// 10,000 IPv4 VIPs has every first round out within 20 s instead of flooding the gateway's
    /// control plane, whose policer would drop announcements (docs/configure.md).
    #[arg(long, default_value_t = crate::dataplane::pace::PaceConfig::DEFAULT.rate)]
    pub announce_rate: u32,
    /// While owning, re-send one gratuitous ARP / unsolicited NA per VIP every this long,
    /// spread over the interval (off unless set; at least 1s, 10s or more advised: RFC 5227
    /// §2.4 defends an address at most every 10s). For switches and routers that age entries
    /// or missed the takeover burst.
    #[arg(long, value_parser = dur)]
    pub announce_refresh_interval: Option<Duration>,
    /// XDP attach mode.
    #[arg(long, value_enum, default_value_t = XdpMode::Auto)]
    pub xdp_mode: XdpMode,
    /// Run the election only: no XDP, no map writes, no bursts (control-plane benchmarks).
    #[arg(long)]
    pub no_dataplane: bool,
    /// Do not report peers proven unreachable (`announcer.dev/unreachable` in this node's
    /// Lease, read by the fast endpoint withdrawal controller). By default each agent lists a
    /// peer whose heartbeats, data plane and kernel (ARP/NS for its InternalIP) are all
    /// silent; reporting costs a few ARP/NS frames a second per silent peer.
    #[arg(long)]
    pub no_report_unreachable: bool,
    /// Health, readiness, metrics and state endpoint (`/healthz`, `/readyz`, `/metrics` to
    /// anyone who can reach it; `/state` to loopback peers only).
    #[arg(long, default_value = "0.0.0.0:9746")]
    pub http_address: SocketAddr,
}

/// Where the per-node state directories live unless `--state-dir` says otherwise (the
/// DaemonSet mounts this host directory).
pub const DEFAULT_STATE_ROOT: &str = "/var/lib/announcer";

impl AgentFlags {
    /// This node's state directory: `--state-dir`, else [`DEFAULT_STATE_ROOT`]`/<node-name>`.
    pub fn state_dir(&self) -> PathBuf {
        self.state_dir
            .clone()
            .unwrap_or_else(|| Path::new(DEFAULT_STATE_ROOT).join(&self.node_name))
    }

    /// The election core's configuration.
    pub fn election_config(&self, mac: crate::wire::MacAddr) -> election::ElectionConfig {
        let mut c = election::ElectionConfig::new(self.node_name.as_str());
        c.mac = mac;
        c.heartbeat_interval = self.heartbeat_interval;
        c.heartbeat_misses = self.heartbeat_misses;
        c.lease_duration = self.lease_duration;
        c.lease_renew = self.lease_renew;
        c.grace = self.grace;
        c.probe_timeout = self.probe_timeout;
        c.warmup = self.warmup;
        c.handover_timeout = self.handover_timeout;
        c
    }

    /// The announcement burst.
    pub fn burst(&self) -> BurstConfig {
        BurstConfig {
            count: self.burst_count,
            interval: self.burst_interval,
        }
    }

    /// The announcements' pace.
    pub fn pace(&self) -> crate::dataplane::pace::PaceConfig {
        crate::dataplane::pace::PaceConfig {
            rate: self.announce_rate,
            ..crate::dataplane::pace::PaceConfig::DEFAULT
        }
    }

    /// Checks that the timings make sense together; the error says which flag to change.
    pub fn validate(&self) -> Result<(), ConfigError> {
        let bad = |msg: String| Err(ConfigError(msg));
        if self.heartbeat_misses == 0 {
            return bad("--heartbeat-misses (heartbeat.misses) must be at least 1".into());
        }
        if self.heartbeat_interval < Duration::from_millis(5) {
            return bad(
                "--heartbeat-interval (heartbeat.interval) below 5ms is not supported".into(),
            );
        }
        if self.lease_renew >= self.lease_duration {
            return bad(format!(
                "--lease-renew (lease.renew, {:?}) must be shorter than --lease-duration (lease.duration, {:?})",
                self.lease_renew, self.lease_duration
            ));
        }
        if self.lease_duration.as_secs() == 0 || self.lease_duration.subsec_nanos() != 0 {
            return bad(
                "--lease-duration (lease.duration) must be a whole number of seconds (leaseDurationSeconds)".into(),
            );
        }
        if self.grace < self.heartbeat_interval * 3 {
            return bad("--grace (grace) must be at least three heartbeat intervals".into());
        }
        if self.service_lease_renew_deadline >= self.service_lease_duration
            || self.service_lease_retry >= self.service_lease_renew_deadline
        {
            return bad("lease-per-service timings need --service-lease-retry < --service-lease-renew-deadline < --service-lease-duration (serviceLease.retry < renewDeadline < duration)".into());
        }
        if self.burst_count == 0 {
            return bad("--burst-count (announcement.count) must be at least 1".into());
        }
        if self.announce_rate == 0 {
            return bad(
                "--announce-rate (announcement.rate) must be at least 1 frame per second".into(),
            );
        }
        if let Some(every) = self.announce_refresh_interval
            && every < crate::agent::refresh::MIN_INTERVAL
        {
            return bad(format!(
                "--announce-refresh-interval (announcement.refreshInterval, {every:?}) must be at \
                 least {:?} (RFC 4861 RetransTimer; 10s or more is advised)",
                crate::agent::refresh::MIN_INTERVAL
            ));
        }
        if self.no_ipv4 && self.no_ipv6 {
            return bad(
                "--no-ipv4 and --no-ipv6 (ipv4: false, ipv6: false) together announce nothing"
                    .into(),
            );
        }
        Ok(())
    }
}

/// Flags that do not fit together.
#[derive(Debug, thiserror::Error)]
#[error("invalid agent configuration: {0}")]
pub struct ConfigError(pub String);

/// `announcer agent --node-name n1 EXTRA...` as main.rs parses it, for tests.
#[cfg(test)]
pub(crate) fn parse_for_test(extra: &[&str]) -> AgentArgs {
    use clap::Parser;
    /// `announcer agent` as main.rs embeds it.
    #[derive(Parser)]
    struct Cli {
        #[command(flatten)]
        agent: AgentArgs,
    }
    let args = ["agent", "--node-name", "n1"].iter().chain(extra);
    Cli::try_parse_from(args)
        .unwrap_or_else(|e| panic!("{extra:?}: {e}"))
        .agent
}

#[cfg(test)]
mod tests {
    use super::*;

    fn defaults() -> AgentArgs {
        parse_for_test(&[])
    }

    #[test]
    fn service_lease_flags_default_to_ciliums_timings() {
        let a = defaults();
        let got = Timing {
            lease_duration: a.service_lease_duration,
            renew_deadline: a.service_lease_renew_deadline,
            retry_period: a.service_lease_retry,
        };
        assert_eq!(got, Timing::CILIUM);
    }

    #[test]
    fn burst_flags_default_to_the_default_burst() {
        assert_eq!(defaults().burst(), BurstConfig::default());
    }
}
