//! The vocabulary of the election core: its configuration, inputs and outputs.

use std::{collections::BTreeSet, fmt, net::IpAddr, sync::Arc, time::Duration};

use announcer_ebpf::wire::MacAddr;

/// A Kubernetes node name. Cheap to clone; ordered so that sets of nodes iterate the same way
/// on every agent.
#[derive(Clone, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct NodeName(Arc<str>);

impl NodeName {
    /// The name as a string.
    pub fn as_str(&self) -> &str {
        &self.0
    }
}

impl From<&str> for NodeName {
    fn from(s: &str) -> Self {
        NodeName(Arc::from(s))
    }
}

impl From<String> for NodeName {
    fn from(s: String) -> Self {
        NodeName(Arc::from(s))
    }
}

impl std::borrow::Borrow<str> for NodeName {
    fn borrow(&self) -> &str {
        &self.0
    }
}

impl fmt::Display for NodeName {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.0)
    }
}

impl fmt::Debug for NodeName {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        fmt::Debug::fmt(&*self.0, f)
    }
}

/// A set of nodes, shared by every VIP that has the same one (most VIPs of a cluster share
/// their eligible set): a clone is a reference count, and comparing two clones of one set is a
/// pointer comparison ([`Arc`]'s `PartialEq` for `Eq` types).
pub type NodeSet = Arc<BTreeSet<NodeName>>;

/// A Service, by namespace and name: where Events about its VIPs are recorded.
#[derive(Clone, Debug, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct ServiceRef {
    /// `metadata.namespace`.
    pub namespace: String,
    /// `metadata.name`.
    pub name: String,
}

impl fmt::Display for ServiceRef {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}/{}", self.namespace, self.name)
    }
}

/// A local interface the agent can announce on, as chosen by the shell for a VIP. The core
/// only passes it back in [`Output`]s; the shell maps it to an ifindex, VLAN and MAC.
pub type IfaceName = Arc<str>;

/// One VIP the cluster wants announced, with what the watches say about it.
///
/// Every agent computes the same `eligible` set from the same watch data (Service, its
/// EndpointSlices, Nodes), so every agent ranks the same candidates.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct VipSpec {
    /// The address (`status.loadBalancer.ingress[].ip`).
    pub vip: IpAddr,
    /// The Service it belongs to (for Events).
    pub service: ServiceRef,
    /// Nodes that may announce it: Ready, not excluded, matching the node selector, and with
    /// a ready local endpoint under `externalTrafficPolicy: Local`. Empty: announce nowhere.
    pub eligible: NodeSet,
    /// The interface this node would announce it on; `None` if this node has none that fits
    /// (the core then never takes it, and reports why once).
    pub local: Option<IfaceName>,
    /// Only interfaces with these names (`*` globs) may announce it (its `AddressPool`'s
    /// `interfaces`): a peer is ranked only if it publishes a link so named. Empty: any link
    /// by the usual rule ([`Link::mac_for`]).
    pub interfaces: Vec<String>,
    /// Eligible nodes ranked before the others (its `AddressPool`'s `preferredNodes`, from
    /// [`crate::placement`]); among themselves and behind them, rendezvous order
    /// ([`rendezvous::ranking_preferring`](super::rendezvous::ranking_preferring)). Empty: plain
    /// rendezvous.
    pub preferred: NodeSet,
}

/// What the agent knows of one node's Lease (`coordination.k8s.io/v1`), as last listed or
/// watched.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct LeaseView {
    /// The node whose Lease this is (`spec.holderIdentity`).
    pub node: NodeName,
    /// `metadata.resourceVersion`: every write must carry the one last seen.
    pub resource_version: String,
    /// `spec.renewTime`, verbatim. Only compared for change: expiry is judged on the local
    /// monotonic clock from when the Lease was last seen to change, never on the remote clock.
    pub renew_time: Option<String>,
    /// `spec.leaseDurationSeconds`.
    pub duration: Duration,
    /// Set by a node that is leaving for good (SIGTERM handover done): do not wait for expiry.
    pub released: bool,
    /// Set by a node that stepped back because it cannot exchange heartbeats with peers whose
    /// Leases renew (`announcer.dev/standby`): not a candidate; its VIPs are taken without a
    /// probe while it keeps answering them for a moment (make before break through the API).
    pub standby: bool,
    /// How many peers it exchanged heartbeats with both ways at its last renewal
    /// (`announcer.dev/connected`): an isolated node steps back only for a better-connected
    /// peer, so a two-node partition never darkens a VIP. `None`: it publishes none (an older
    /// agent, during a rolling upgrade); such a peer never makes a node step back.
    pub connected: Option<u32>,
    /// The links it can announce on (`announcer.dev/links`), or `None` if it publishes none
    /// (an older agent): then it is assumed to announce anything, from its heartbeat MAC.
    pub links: Option<Vec<Link>>,
}

/// One link a node can announce VIPs on, as published in its Lease: peers rank it only for
/// VIPs it can announce, and probe the MAC it answers that VIP with.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Link {
    /// The interface's name, if the node publishes it (agents before pools did not).
    pub name: Option<IfaceName>,
    /// The MAC its data plane answers with on this link.
    pub mac: MacAddr,
    /// The subnets on the link: a VIP inside one is announced here.
    pub subnets: Vec<Subnet>,
    /// VIPs in no subnet of any link are announced here (the InternalIP's link, or the first
    /// allowed interface).
    pub fallback: bool,
    /// The node's data plane is down on this link (its XDP program could not be attached):
    /// the VIPs that belong here cannot be announced by the node, on this link or any other.
    pub down: bool,
}

/// An IP network: an address and a prefix length.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct Subnet {
    /// Any address in it (host bits are ignored).
    pub addr: IpAddr,
    /// Prefix length: at most 32 for IPv4, 128 for IPv6.
    pub prefix: u8,
}

impl Subnet {
    /// Whether `ip` is inside (same family, same first `prefix` bits).
    pub fn contains(&self, ip: IpAddr) -> bool {
        match (self.addr, ip) {
            (IpAddr::V4(n), IpAddr::V4(a)) if self.prefix <= 32 => {
                let mask = u32::MAX
                    .checked_shl(32 - u32::from(self.prefix))
                    .unwrap_or(0);
                u32::from(n) & mask == u32::from(a) & mask
            }
            (IpAddr::V6(n), IpAddr::V6(a)) if self.prefix <= 128 => {
                let mask = u128::MAX
                    .checked_shl(128 - u32::from(self.prefix))
                    .unwrap_or(0);
                u128::from(n) & mask == u128::from(a) & mask
            }
            _ => false,
        }
    }
}

impl fmt::Display for Subnet {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}/{}", self.addr, self.prefix)
    }
}

impl std::str::FromStr for Subnet {
    type Err = String;
    fn from_str(s: &str) -> Result<Self, String> {
        let (a, p) = s
            .split_once('/')
            .ok_or_else(|| format!("{s:?}: expected address/prefix"))?;
        let addr: IpAddr = a.parse().map_err(|_| format!("{s:?}: bad address"))?;
        let prefix: u8 = p.parse().map_err(|_| format!("{s:?}: bad prefix length"))?;
        let max = if addr.is_ipv4() { 32 } else { 128 };
        if prefix > max {
            return Err(format!("{s:?}: prefix longer than {max}"));
        }
        Ok(Subnet { addr, prefix })
    }
}

impl Link {
    /// The MAC `node` answers `vip` with, by the same rule the agent picks interfaces: the
    /// link whose subnet contains it (longest prefix), else the fallback link. `None`: the node
    /// cannot announce it, also when that link's data plane is down ([`Link::down`]: the VIP
    /// does not move to another link of the node, where its clients would not ask).
    ///
    /// With `interfaces` (an `AddressPool`'s names or globs), only links whose name matches
    /// count, and the first of them is the fallback.
    pub fn mac_for(links: &[Link], vip: IpAddr, interfaces: &[String]) -> Option<MacAddr> {
        let named = |l: &&Link| {
            interfaces.is_empty()
                || l.name
                    .as_ref()
                    .is_some_and(|n| interfaces.iter().any(|p| glob_match(p, n)))
        };
        let allowed: Vec<&Link> = links.iter().filter(named).collect();
        let fallback = if interfaces.is_empty() {
            allowed.iter().find(|l| l.fallback)
        } else {
            allowed.first()
        };
        allowed
            .iter()
            .filter_map(|l| {
                let best = l
                    .subnets
                    .iter()
                    .filter(|s| s.contains(vip))
                    .map(|s| s.prefix)
                    .max()?;
                Some((best, *l))
            })
            .max_by_key(|(p, _)| *p)
            .map(|(_, l)| l)
            .or_else(|| fallback.copied())
            .filter(|l| !l.down)
            .map(|l| l.mac)
    }
}

/// Whether interface `name` matches `pattern`, where `*` matches any run of characters (the
/// one glob syntax of `--interface` and of an `AddressPool`'s `interfaces`).
pub fn glob_match(pattern: &str, name: &str) -> bool {
    let mut parts = pattern.split('*');
    let first = parts.next().unwrap_or("");
    let Some(mut rest) = name.strip_prefix(first) else {
        return false;
    };
    let tail: Vec<&str> = parts.collect();
    let Some((last, middle)) = tail.split_last() else {
        return rest.is_empty(); // no `*`: exact match
    };
    for part in middle {
        match rest.find(part) {
            Some(i) => rest = &rest[i + part.len()..],
            None => return false,
        }
    }
    rest.len() >= last.len() && rest.ends_with(last)
}

/// How a Lease write the core asked for ([`Output::WriteLease`]) ended.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum LeaseWriteResult {
    /// Written; the new `resourceVersion`.
    Written {
        /// `metadata.resourceVersion` of the stored object.
        resource_version: String,
    },
    /// 409 Conflict: someone wrote since we read (or it already exists, for a create). The
    /// shell re-reads and delivers the fresh [`Input::LeaseSeen`] before or with this.
    Conflict,
    /// Anything else (timeout, 5xx, refused): the API server is unreachable from here.
    Failed,
}

/// A verified heartbeat from a peer (authentication and replay checks happen before the core
/// sees it, in [`crate::heartbeat`]).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Beat {
    /// Sender.
    pub node: NodeName,
    /// Sender's incarnation: grows on every agent start. A new incarnation means the agent
    /// restarted (its data plane may have kept answering meanwhile).
    pub incarnation: u64,
    /// The MAC of the interface the sender sends heartbeats from: where to probe its data plane.
    pub mac: MacAddr,
    /// The sender is shutting down and hands its VIPs over (SIGTERM).
    pub leaving: bool,
    /// The sender can reach the API server (its last Lease write or watch succeeded recently).
    pub api_ok: bool,
    /// The sender has finished its startup warm-up and takes VIPs.
    pub ready: bool,
    /// Leaving nodes whose VIPs the sender has taken over and announced (handover acks).
    /// Sorted by name.
    pub acks: Vec<NodeName>,
    /// Peers whose heartbeats the sender hears (one arrived within its dead-after time). On
    /// the wire each recipient learns only whether it is among them, so in a received beat
    /// this is empty or holds just the receiver. Sorted by name (sealing looks each
    /// recipient up by binary search).
    pub hears: Vec<NodeName>,
    /// Fingerprint of the sender's configuration as far as it changes the ranking (selectors,
    /// class, families, timings): a peer with another one is mid-roll and may rank
    /// differently ([`ElectionConfig::config_hash`]).
    pub config: u64,
    /// Fingerprint of the sender's view of the cluster: the VIPs and their eligible sets. A
    /// successor with another view may not have the VIP yet (a lagging watch), so the old owner
    /// holds on to it a little longer.
    pub view: u64,
}

/// Events fed to [`Core::handle`](super::Core::handle). Time is passed alongside.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Input {
    /// Nothing happened but time passed (a timer from [`Core::poll_timeout`](super::Core::poll_timeout) fired).
    Tick,
    /// The full set of VIPs the cluster wants.
    Vips(Vec<VipSpec>),
    /// Some VIPs of the set changed: `placed` are new or changed, `gone` are no longer
    /// wanted; the others stay as they were. What a watch event usually costs: O(changes),
    /// where [`Input::Vips`] is O(V). Before the first [`Input::Vips`] it is ignored.
    VipsChanged {
        /// New or changed VIPs.
        placed: Vec<VipSpec>,
        /// VIPs no longer wanted.
        gone: Vec<IpAddr>,
    },
    /// A node Lease was listed, added or modified.
    LeaseSeen(LeaseView),
    /// A node Lease was deleted.
    LeaseGone(NodeName),
    /// The result of the last [`Output::WriteLease`].
    LeaseWrite(LeaseWriteResult),
    /// Whether the watches are healthy (connected and not erroring).
    WatchHealth(bool),
    /// A verified peer heartbeat.
    Heartbeat(Beat),
    /// A peer's data plane answered our unicast probe ([`Output::Probe`]) for this VIP.
    ProbeAnswered {
        /// The VIP probed.
        vip: IpAddr,
        /// The MAC that answered.
        mac: MacAddr,
    },
    /// An announcing interface went down or came up.
    Link {
        /// The interface.
        iface: IfaceName,
        /// Operational state.
        up: bool,
    },
    /// Entries found in the data plane at start (pinned maps survive agent restarts): the
    /// core keeps them answering through its warm-up instead of dropping and re-announcing.
    Existing(Vec<(IpAddr, IfaceName)>),
    /// SIGTERM: hand every VIP over, then emit [`Output::Exit`].
    Shutdown,
}

/// Why the core raised an Event (the shell turns these into Kubernetes Events and logs).
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum EventKind {
    /// This node now announces the VIP (Normal, reason `Announcing`).
    Announcing,
    /// This node stopped announcing the VIP (Normal, reason `Released`).
    Released,
    /// No eligible node; the VIP is not announced (Warning, `NoEligibleNode`).
    NoEligibleNode,
    /// This node is the owner but has no interface for it (Warning, `NoInterface`).
    NoInterface,
    /// Two nodes answered the VIP at once: a partition between them (Warning, `Overlap`).
    Overlap,
}

/// Why the core raised an Event about this node rather than a VIP (recorded on the Node).
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum NodeEventKind {
    /// This node cannot exchange heartbeats with peers whose Leases renew, and steps back
    /// (Warning, `Isolated`).
    Isolated,
    /// Heartbeats flow both ways again; the node takes VIPs again (Normal, `Rejoined`).
    Rejoined,
    /// A peer runs with another configuration fingerprint (Warning, `ConfigMismatch`).
    ConfigMismatch,
    /// Fenced: our Lease has been stale for a Lease duration, or our watches for
    /// [`ElectionConfig::watch_stale_after`], while peers reach the API (Warning, `Fenced`).
    Fenced,
}

/// Actions the core asks of the shell, drained with [`Core::poll_output`](super::Core::poll_output).
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Output {
    /// Create (`resource_version: None`) or update (carrying the last seen
    /// `resourceVersion`) this node's Lease with `renewTime = now`. `release: true` marks the
    /// Lease released (handover complete). Answer with [`Input::LeaseWrite`].
    WriteLease {
        /// `None`: create. `Some`: replace with this precondition (409 if stale).
        resource_version: Option<String>,
        /// Mark the Lease released (graceful leave).
        release: bool,
        /// Publish that this node stepped back ([`LeaseView::standby`]).
        standby: bool,
        /// Publish how many peers it exchanges heartbeats with both ways
        /// ([`LeaseView::connected`]); always `Some` from this core.
        connected: Option<u32>,
    },
    /// Send one heartbeat to every peer.
    SendHeartbeat(Beat),
    /// Write the map entry (vip → this node's MAC on `iface`) expiring after `ttl`. Also used
    /// to refresh an entry before it expires.
    Install {
        /// The VIP.
        vip: IpAddr,
        /// The interface.
        iface: IfaceName,
        /// Data-plane lifetime from now.
        ttl: Duration,
    },
    /// Delete the map entry.
    Remove {
        /// The VIP.
        vip: IpAddr,
        /// The interface.
        iface: IfaceName,
    },
    /// Send the gratuitous ARP / unsolicited NA burst for the VIP (after its Install).
    Announce {
        /// The VIP.
        vip: IpAddr,
        /// The interface.
        iface: IfaceName,
    },
    /// Send a unicast ARP request / NS for `vip` to `mac` on `iface`; deliver an answer as
    /// [`Input::ProbeAnswered`]. Silence until the core's probe timeout means nobody answers.
    Probe {
        /// The VIP.
        vip: IpAddr,
        /// Our interface to send on.
        iface: IfaceName,
        /// The old owner's MAC.
        mac: MacAddr,
    },
    /// Record an Event on the Service and log it.
    Event {
        /// The Service.
        service: ServiceRef,
        /// The VIP.
        vip: IpAddr,
        /// Kind (maps to reason and type).
        kind: EventKind,
        /// Human-readable message.
        message: String,
    },
    /// Record an Event about this node (on its Node object) and log it.
    NodeEvent {
        /// Kind (maps to reason and type).
        kind: NodeEventKind,
        /// Human-readable message.
        message: String,
    },
    /// Shutdown handover complete: the shell may exit.
    Exit,
}

impl Output {
    /// Whether it acts on the wire or the data plane (heartbeats, map writes, announcements,
    /// probes), as opposed to the API (Lease, Events) or the process: what the shell carries
    /// out first in a batch.
    pub fn is_data_plane(&self) -> bool {
        matches!(
            self,
            Output::SendHeartbeat(_)
                | Output::Install { .. }
                | Output::Remove { .. }
                | Output::Announce { .. }
                | Output::Probe { .. }
        )
    }
}

/// The default timings of the node-lease election, named once: [`ElectionConfig::new`] takes them,
/// the agent's flags default to them (`announcer agent --help` shows them), and the simulator
/// runs the core with them, so the timings the simulator checks are the ones that ship.
pub mod defaults {
    use std::time::Duration;

    /// [`ElectionConfig::heartbeat_interval`](super::ElectionConfig::heartbeat_interval),
    /// `--heartbeat-interval`.
    pub const HEARTBEAT_INTERVAL: Duration = Duration::from_millis(75);
    /// [`ElectionConfig::heartbeat_misses`](super::ElectionConfig::heartbeat_misses), `--heartbeat-misses`.
    pub const HEARTBEAT_MISSES: u32 = 3;
    /// [`ElectionConfig::lease_duration`](super::ElectionConfig::lease_duration), `--lease-duration`.
    pub const LEASE_DURATION: Duration = Duration::from_secs(10);
    /// [`ElectionConfig::lease_renew`](super::ElectionConfig::lease_renew), `--lease-renew`.
    pub const LEASE_RENEW: Duration = Duration::from_secs(3);
    /// [`ElectionConfig::grace`](super::ElectionConfig::grace), `--grace`.
    pub const GRACE: Duration = Duration::from_secs(5);
    /// [`ElectionConfig::probe_timeout`](super::ElectionConfig::probe_timeout), `--probe-timeout`.
    pub const PROBE_TIMEOUT: Duration = Duration::from_millis(75);
    /// [`ElectionConfig::warmup`](super::ElectionConfig::warmup), `--warmup`.
    pub const WARMUP: Duration = Duration::from_millis(500);
    /// [`ElectionConfig::handover_timeout`](super::ElectionConfig::handover_timeout), `--handover-timeout`.
    pub const HANDOVER_TIMEOUT: Duration = Duration::from_secs(2);
    /// The longest wait between a failed API watch and its replacement (the watches' backoff
    /// cap). An API server that came back is noticed within this, so the core gives a watch
    /// this long on top of a Lease duration before it calls our view stale
    /// ([`ElectionConfig::watch_stale_after`](super::ElectionConfig::watch_stale_after)).
    pub const WATCH_RETRY_MAX: Duration = Duration::from_secs(5);
}

/// A suspect that never answered is asked this many times, `probe_timeout / FIRST_PROBES`
/// apart, before its silence counts: the verdict still comes `probe_timeout` after the first
/// probe, but lost answers (on top of late heartbeats, all it takes to become a suspect at
/// [`ElectionConfig::suspect_after`]) no longer make two owners unless every one of them is lost. An
/// answer to any of them counts. (With two, the simulator's adversary, which loses 30 % of the
/// answers, made two owners in 5 of 10,000 runs: two heartbeats lost in a row and both answers.)
pub const FIRST_PROBES: u32 = 3;

/// Timings of the node-lease election. At the defaults ([`defaults`]): crash failover within
/// [`suspect_after`](ElectionConfig::suspect_after) + `probe_timeout` = 112.5 + 75 = 187.5 ms of the
/// old owner's last heartbeat, and `1 / lease_renew` = 0.33 Lease writes per second per node.
///
/// Why 75 ms heartbeats and a 75 ms probe: the takeover must come after the heartbeat that
/// follows a lost one (`2 × interval` after the last, 150 ms), so that one lost heartbeat
/// cancels nothing it should not even if every probe answer is lost, and it must come soon
/// enough for a crash p99 of 250 ms as a client sees it. `1.5 × interval + probe_timeout` is
/// 187.5 ms: 37.5 ms of slack for the heartbeat after a lost one, 60 ms for the rest (the
/// announcement reaching the client, its next request). At 100 ms heartbeats the same slack
/// would need a 100 ms probe and a 250 ms takeover.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ElectionConfig {
    /// This node.
    pub node: NodeName,
    /// The MAC our heartbeats are sent from, put in every [`Beat`]: peers probe our data
    /// plane at this address when our heartbeats stop.
    pub mac: MacAddr,
    /// Heartbeat period.
    pub heartbeat_interval: Duration,
    /// A peer is dead after this many periods without a heartbeat.
    pub heartbeat_misses: u32,
    /// `leaseDurationSeconds` written in our Lease, and the default for peers'.
    pub lease_duration: Duration,
    /// How often we renew our Lease.
    pub lease_renew: Duration,
    /// How long a node keeps answering after its agent dies, at least: entries live
    /// [`entry_ttl`](Self::entry_ttl), refreshed every [`refresh_interval`](Self::refresh_interval).
    pub grace: Duration,
    /// How long to wait for an answer to a probe of the old owner's data plane.
    pub probe_timeout: Duration,
    /// After start and the first complete lists of the watches, how long to listen for peers
    /// before taking or dropping VIPs.
    pub warmup: Duration,
    /// On shutdown, the longest to wait for successors' acks before leaving anyway.
    pub handover_timeout: Duration,
    /// Fingerprint of this agent's ranking-relevant configuration, sent in every heartbeat
    /// ([`Beat::config`]); the shell computes it.
    pub config_hash: u64,
    /// Whether data planes can be asked (`false` with `--no-dataplane`, where no probe is
    /// sent): then a VIP is handed over as soon as its new owner is ready, on its heartbeats'
    /// word.
    pub data_plane: bool,
}

impl ElectionConfig {
    /// Defaults for `node`: the timings of [`defaults`].
    pub fn new(node: impl Into<NodeName>) -> Self {
        ElectionConfig {
            node: node.into(),
            mac: MacAddr([0; 6]),
            heartbeat_interval: defaults::HEARTBEAT_INTERVAL,
            heartbeat_misses: defaults::HEARTBEAT_MISSES,
            lease_duration: defaults::LEASE_DURATION,
            lease_renew: defaults::LEASE_RENEW,
            grace: defaults::GRACE,
            probe_timeout: defaults::PROBE_TIMEOUT,
            warmup: defaults::WARMUP,
            handover_timeout: defaults::HANDOVER_TIMEOUT,
            config_hash: 0,
            data_plane: true,
        }
    }

    /// How long after its last heartbeat a peer counts as dead: it is no longer counted as
    /// connected (isolation), and its return is a revival (owners re-announce).
    pub fn dead_after(&self) -> Duration {
        self.heartbeat_interval * self.heartbeat_misses
    }

    /// How long after its last heartbeat a peer is a *suspect*: one and a half periods, one
    /// heartbeat overdue by half a period. Only the node ranked next for a VIP then probes
    /// the owner's data plane ([`FIRST_PROBES`] probes over `probe_timeout`) and takes the
    /// VIP if nothing answers while the heartbeats stay silent; a heartbeat meanwhile cancels.
    /// A crash is therefore taken over `suspect_after + probe_timeout` = 187.5 ms after the
    /// owner's last heartbeat at the defaults, and a false takeover needs a late heartbeat
    /// *and* every probe answer lost. A peer quiet this long still counts in everyone's
    /// ranking until [`dead_after`](Self::dead_after) (or until the probe goes unanswered),
    /// so a busy node that is only slow moves nothing.
    pub fn suspect_after(&self) -> Duration {
        self.heartbeat_interval * 3 / 2
    }

    /// How long after the API is trusted again (a peer reports `api_ok`) our watches may stay
    /// failed before we fence: a Lease duration plus the watches' retry cap
    /// ([`defaults::WATCH_RETRY_MAX`]). Without the cap, a short Lease fenced a healthy node
    /// whose watch was still waiting out its backoff after an outage.
    pub fn watch_stale_after(&self) -> Duration {
        self.lease_duration + defaults::WATCH_RETRY_MAX
    }

    /// How often owned entries are rewritten: five times per grace.
    pub fn refresh_interval(&self) -> Duration {
        self.grace / 5
    }

    /// The lifetime written with every entry: `grace` plus one refresh interval, so that at
    /// every moment each entry has at least `grace` left. An agent that dies therefore leaves
    /// its entries answering for between `grace` and `grace + grace / 5` (5–6 s at the
    /// defaults), and one restarted within `grace` of its death finds them all alive. (With a
    /// lifetime of exactly `grace`, an agent that died just before a refresh left entries with
    /// two thirds of it: a restart 3.5 s after a SIGKILL lost its VIPs at the 5 s default.)
    pub fn entry_ttl(&self) -> Duration {
        self.grace + self.refresh_interval()
    }

    /// How long each of the [`FIRST_PROBES`] probes of a suspect that never answered waits
    /// for its answer: together, `probe_timeout`.
    pub fn first_probe_wait(&self) -> Duration {
        self.probe_timeout / FIRST_PROBES
    }

    /// How often an old owner whose data plane still answers is probed again.
    pub fn reprobe_interval(&self) -> Duration {
        self.heartbeat_interval.max(self.probe_timeout) * 2
    }

    /// How long an old owner keeps asking a new owner that shares its view, but whose data
    /// plane does not answer the VIP, before letting go anyway (its data plane is broken).
    pub fn view_hold(&self) -> Duration {
        (self.heartbeat_interval * 20).max(Duration::from_secs(2))
    }

    /// How long a node that stepped back keeps answering after its Lease says so: peers see
    /// the Lease (a watch event, milliseconds) and take its VIPs before it lets go.
    pub fn standby_hold(&self) -> Duration {
        (self.heartbeat_interval * 10).max(Duration::from_secs(1))
    }

    /// How long heartbeats must flow both ways again before a node that stepped back takes
    /// VIPs again (so a flapping path does not move VIPs back and forth).
    pub fn rejoin_after(&self) -> Duration {
        (self.heartbeat_interval * 10).max(Duration::from_secs(1))
    }

    /// The documented bound for an isolated node: it has stepped back, and its VIPs have one
    /// owner, this long after it stopped exchanging heartbeats with its peers. Detection takes
    /// [`dead_after`](Self::dead_after), proof that a peer is alive takes one of its Lease
    /// renewals (`lease_renew`), the handover [`standby_hold`](Self::standby_hold); a second
    /// of slack covers watch and write latency.
    pub fn isolation_bound(&self) -> Duration {
        self.dead_after() + self.lease_renew + self.standby_hold() + Duration::from_secs(1)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn link(name: Option<&str>, mac: &str, subnets: &[&str], fallback: bool) -> Link {
        Link {
            name: name.map(Into::into),
            mac: mac.parse().unwrap(),
            subnets: subnets.iter().map(|s| s.parse().unwrap()).collect(),
            fallback,
            down: false,
        }
    }

    #[test]
    fn a_link_whose_data_plane_is_down_announces_nothing_and_hands_nothing_to_the_fallback() {
        let mut eth1 = link(Some("eth1"), "02:00:00:00:01:01", &["10.1.0.0/16"], false);
        eth1.down = true;
        let mut links = vec![
            link(Some("eth0"), "02:00:00:00:00:01", &["10.0.0.0/24"], true),
            eth1,
        ];
        let on = |ip: &str, links: &[Link]| Link::mac_for(links, ip.parse().unwrap(), &[]);
        assert_eq!(on("10.1.2.3", &links), None, "moved to the fallback link");
        assert_eq!(
            on("10.0.0.9", &links),
            Some("02:00:00:00:00:01".parse().unwrap())
        );
        assert_eq!(
            on("192.168.9.9", &links),
            Some("02:00:00:00:00:01".parse().unwrap())
        );
        links[0].down = true;
        assert_eq!(on("192.168.9.9", &links), None, "the fallback link is down");
    }

    #[test]
    fn with_pool_interfaces_only_links_so_named_can_announce() {
        let links = [
            link(Some("eth0"), "02:00:00:00:00:01", &["10.0.0.0/24"], true),
            link(Some("eth1"), "02:00:00:00:00:02", &["10.1.0.0/24"], false),
        ];
        let vip = "10.0.0.5".parse().unwrap();
        let only = |p: &str| vec![p.to_string()];
        assert_eq!(
            Link::mac_for(&links, vip, &[]),
            Some("02:00:00:00:00:01".parse().unwrap()),
            "the subnet's link"
        );
        assert_eq!(
            Link::mac_for(&links, vip, &only("eth1")),
            Some("02:00:00:00:00:02".parse().unwrap()),
            "the named link, though the VIP is in another's subnet"
        );
        assert_eq!(Link::mac_for(&links, vip, &only("bond*")), None);
    }

    #[test]
    fn links_without_names_never_match_pool_interfaces() {
        let links = [link(None, "02:00:00:00:00:01", &["10.0.0.0/24"], true)];
        let vip = "10.0.0.5".parse().unwrap();
        assert_eq!(Link::mac_for(&links, vip, &["eth*".to_string()]), None);
    }
}
