//! The scrape-time families: read from where the numbers already live, when Prometheus asks.
//!
//! Why at scrape time: the data plane's counters are per-CPU map values that only the kernel
//! updates, and the agent's counters are kept by their owners (the core, the heartbeat socket,
//! the Event recorder, the watches). Reading them when scraped costs nothing between scrapes
//! and is never stale; polling them into metric objects would be both.

use std::{
    collections::BTreeMap,
    fmt,
    path::PathBuf,
    sync::{Arc, Mutex},
};

use prometheus_client::{
    encoding::{DescriptorEncoder, EncodeLabelSet, EncodeMetric},
    metrics::{MetricType, counter::ConstCounter, gauge::ConstGauge},
};

use crate::{
    agent::{
        kube::{
            events::{EventStats, Events},
            lease_per_service::LeaseApiStats,
            watch::WatchCounters,
        },
        net::{heartbeat_socket::HeartbeatStats, probe::ProbeStats},
        published::PublishedState,
    },
    dataplane::{Dataplane, mcast::MembershipStats},
    maps::Outcome,
};

/// What the collector reads; filled in by the agent as it starts each part. A part not (yet)
/// started contributes no families.
#[derive(Clone, Default)]
pub struct Sources(Arc<Mutex<Inner>>);

#[derive(Clone, Default)]
struct Inner {
    state: Option<PublishedState>,
    heartbeat: Option<Arc<HeartbeatStats>>,
    events: Option<Events>,
    watches: Option<Arc<WatchCounters>>,
    service_leases: Option<Arc<LeaseApiStats>>,
    probes: Option<Arc<ProbeStats>>,
    dataplane: Option<PathBuf>,
    mcast: Option<Arc<MembershipStats>>,
}

impl fmt::Debug for Sources {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let i = self.get();
        f.debug_struct("Sources")
            .field("state", &i.state.is_some())
            .field("heartbeat", &i.heartbeat.is_some())
            .field("events", &i.events.is_some())
            .field("watches", &i.watches.is_some())
            .field("service_leases", &i.service_leases.is_some())
            .field("probes", &i.probes.is_some())
            .field("dataplane", &i.dataplane)
            .field("mcast", &i.mcast.is_some())
            .finish()
    }
}

impl Sources {
    fn get(&self) -> Inner {
        self.0.lock().unwrap_or_else(|e| e.into_inner()).clone()
    }

    fn with(&self, f: impl FnOnce(&mut Inner)) {
        f(&mut self.0.lock().unwrap_or_else(|e| e.into_inner()));
    }

    /// The probe answer filter's counters.
    pub fn set_probes(&self, stats: Arc<ProbeStats>) {
        self.with(|i| i.probes = Some(stats));
    }

    /// The agent's published state (`/state`): ownership, peers, the core's counters.
    pub fn set_state(&self, state: PublishedState) {
        self.with(|i| i.state = Some(state));
    }

    /// The heartbeat socket's counters.
    pub fn set_heartbeat(&self, stats: Arc<HeartbeatStats>) {
        self.with(|i| i.heartbeat = Some(stats));
    }

    /// The Event recorder's counters.
    pub fn set_events(&self, events: Events) {
        self.with(|i| i.events = Some(events));
    }

    /// The watches' restart and error counters.
    pub fn set_watches(&self, counters: Arc<WatchCounters>) {
        self.with(|i| i.watches = Some(counters));
    }

    /// The lease-per-service mode's API request counters.
    pub fn set_service_leases(&self, stats: Arc<LeaseApiStats>) {
        self.with(|i| i.service_leases = Some(stats));
    }

    /// The solicited-node memberships' counters (`Plane::mcast_stats`).
    pub fn set_mcast(&self, stats: Arc<MembershipStats>) {
        self.with(|i| i.mcast = Some(stats));
    }

    /// The data plane pinned under `pin_root` (never called with `--no-dataplane`).
    pub fn set_dataplane(&self, pin_root: PathBuf) {
        self.with(|i| i.dataplane = Some(pin_root));
    }
}

/// The [`prometheus_client::collector::Collector`] over [`Sources`].
#[derive(Debug)]
pub struct Collector {
    sources: Sources,
}

impl Collector {
    /// A collector reading `sources`.
    pub fn new(sources: Sources) -> Self {
        Collector { sources }
    }
}

impl prometheus_client::collector::Collector for Collector {
    fn encode(&self, mut enc: DescriptorEncoder) -> fmt::Result {
        let i = self.sources.get();
        if let Some(s) = &i.state {
            state(&mut enc, s)?;
        }
        if let Some(h) = &i.heartbeat {
            heartbeat(&mut enc, h)?;
        }
        api(
            &mut enc,
            i.state.as_ref(),
            i.events.as_ref().map(Events::stats),
            i.watches.as_deref(),
        )?;
        if let Some(s) = &i.service_leases {
            service_leases(&mut enc, s)?;
        }
        if let Some(m) = &i.mcast {
            let n = |c: &std::sync::atomic::AtomicU64| c.load(std::sync::atomic::Ordering::Relaxed);
            gauge(
                &mut enc,
                "announcer_solicited_node_groups",
                "IPv6 solicited-node groups joined for owned VIPs",
                n(&m.groups) as i64,
            )?;
            counter(
                &mut enc,
                "announcer_solicited_node_join_failures",
                "Joins of a VIP's solicited-node group that failed (its NS may be dropped by a NIC filter or a snooping switch)",
                n(&m.join_failures),
            )?;
        }
        if let Some(p) = &i.probes {
            let s = p.snapshot();
            counter(
                &mut enc,
                "announcer_probe_answers_accepted",
                "Answers to a probe in flight, with its nonce, passed to the election",
                s.answers_accepted,
            )?;
            counters(
                &mut enc,
                "announcer_probe_answers_dropped",
                "Frames on the probe answer socket that answered no probe of ours (forged, late, or another host's), by reason",
                [
                    ([("reason", "no_probe")], s.dropped_no_probe),
                    ([("reason", "bad_nonce")], s.dropped_bad_nonce),
                    ([("reason", "mismatch")], s.dropped_mismatch),
                ],
            )?;
        }
        if let Some(root) = &i.dataplane {
            dataplane(&mut enc, root)?;
        }
        Ok(())
    }
}

/// A counter without labels (the encoder appends `_total` to `name`).
fn counter(enc: &mut DescriptorEncoder, name: &str, help: &str, v: u64) -> fmt::Result {
    let m = enc.encode_descriptor(name, help, None, MetricType::Counter)?;
    ConstCounter::new(v).encode(m)
}

/// A gauge without labels.
fn gauge(enc: &mut DescriptorEncoder, name: &str, help: &str, v: i64) -> fmt::Result {
    let m = enc.encode_descriptor(name, help, None, MetricType::Gauge)?;
    ConstGauge::new(v).encode(m)
}

/// A family of counters (the encoder appends `_total` to `name`).
fn counters<L: EncodeLabelSet>(
    enc: &mut DescriptorEncoder,
    name: &str,
    help: &str,
    rows: impl IntoIterator<Item = (L, u64)>,
) -> fmt::Result {
    let mut m = enc.encode_descriptor(name, help, None, MetricType::Counter)?;
    for (labels, v) in rows {
        ConstCounter::new(v).encode(m.encode_family(&labels)?)?;
    }
    Ok(())
}

/// A family of gauges.
fn gauges<L: EncodeLabelSet, V>(
    enc: &mut DescriptorEncoder,
    name: &str,
    help: &str,
    rows: impl IntoIterator<Item = (L, V)>,
) -> fmt::Result
where
    ConstGauge<V>: EncodeMetric,
{
    let mut m = enc.encode_descriptor(name, help, None, MetricType::Gauge)?;
    for (labels, v) in rows {
        ConstGauge::new(v).encode(m.encode_family(&labels)?)?;
    }
    Ok(())
}

fn state(enc: &mut DescriptorEncoder, shared: &PublishedState) -> fmt::Result {
    let (st, _) = shared.get();
    gauges(
        enc,
        "announcer_agent_info",
        "This agent: its node and election mode",
        [(
            [("node", st.node.clone()), ("election", st.election.clone())],
            1i64,
        )],
    )?;
    gauge(
        enc,
        "announcer_ready",
        "1 once the warm-up is over and this node takes VIPs",
        i64::from(st.ready),
    )?;
    gauge(
        enc,
        "announcer_standby",
        "1 while this node has stepped back: it exchanges heartbeats with no peer while the API shows peers alive",
        i64::from(st.standby),
    )?;
    gauge(
        enc,
        "announcer_api_reachable",
        "1 while every watch of the API server is listed and healthy",
        i64::from(st.api_ok),
    )?;
    let mut per_iface: BTreeMap<&str, i64> = BTreeMap::new();
    for o in st.owned.iter() {
        *per_iface.entry(o.iface.as_str()).or_default() += 1;
    }
    gauges(
        enc,
        "announcer_vips_owned",
        "VIPs this node announces, per interface (\"none\" with --no-dataplane)",
        per_iface.into_iter().map(|(i, n)| ([("iface", i)], n)),
    )?;
    gauge(
        enc,
        "announcer_peers",
        "Peers known (by Lease or heartbeat)",
        st.peers.len() as i64,
    )?;
    gauge(
        enc,
        "announcer_peers_alive",
        "Peers counted in the ranking now",
        st.peers.iter().filter(|p| p.alive).count() as i64,
    )?;
    gauges(
        enc,
        "announcer_peer_heartbeat_age_seconds",
        "Time since the peer's last heartbeat",
        st.peers.iter().filter_map(|p| {
            let age = p.heartbeat_age_ms? as f64 / 1000.0;
            Some(([("peer", p.node.as_str())], age))
        }),
    )?;
    let s = &st.stats;
    counter(
        enc,
        "announcer_takeovers",
        "VIPs this node took (installed and announced)",
        s.takeovers,
    )?;
    counter(
        enc,
        "announcer_handovers",
        "VIPs this node released to another node (or withdrew)",
        s.releases,
    )?;
    counter(
        enc,
        "announcer_probes",
        "Probes of a silent owner's data plane sent",
        s.probes,
    )?;
    counter(
        enc,
        "announcer_probes_answered",
        "Probes answered: the old owner's data plane still answered, takeover deferred",
        s.probes_answered,
    )?;
    counter(
        enc,
        "announcer_partition_overlaps",
        "VIPs found answered by two nodes after a partition healed",
        s.overlaps,
    )?;
    counter(
        enc,
        "announcer_standbys",
        "Times this node stepped back (isolated: no heartbeats both ways with any peer)",
        s.standbys,
    )?;
    counter(
        enc,
        "announcer_config_mismatches",
        "Peers found running another configuration fingerprint for over 10 s",
        s.config_mismatches,
    )?;
    counter(
        enc,
        "announcer_lease_writes",
        "Writes of this node's Lease attempted",
        s.lease_writes,
    )?;
    counters(
        enc,
        "announcer_lease_renew_errors",
        "Lease writes that did not succeed, by reason (conflict: 409, re-read and retried)",
        [
            ([("reason", "conflict")], s.lease_conflicts),
            ([("reason", "failed")], s.lease_failures),
        ],
    )
}

fn heartbeat(enc: &mut DescriptorEncoder, h: &HeartbeatStats) -> fmt::Result {
    let s = h.snapshot();
    counter(
        enc,
        "announcer_heartbeats_sent",
        "Heartbeat datagrams sent (one per peer)",
        s.sent,
    )?;
    counter(
        enc,
        "announcer_heartbeat_send_errors",
        "Heartbeat datagrams that could not be sent",
        s.send_errors,
    )?;
    counter(
        enc,
        "announcer_heartbeats_received",
        "Heartbeats verified and accepted",
        s.accepted,
    )?;
    counter(
        enc,
        "announcer_heartbeat_receive_errors",
        "Failed receives on the heartbeat socket",
        s.receive_errors,
    )?;
    counters(
        enc,
        "announcer_heartbeats_rejected",
        "Datagrams rejected on the heartbeat port, by reason",
        s.rejects().map(|(r, n)| ([("reason", r)], n)),
    )
}

fn api(
    enc: &mut DescriptorEncoder,
    state: Option<&PublishedState>,
    events: Option<EventStats>,
    watches: Option<&WatchCounters>,
) -> fmt::Result {
    let mut errors: Vec<([(&str, &str); 2], u64)> = Vec::new();
    if let Some(w) = watches {
        let snap = w.snapshot();
        counters(
            enc,
            "announcer_watch_restarts",
            "Watches replaced by a fresh list+watch after an error or the end of their stream",
            snap.iter()
                .map(|(s, restarts, _, _)| ([("resource", s.name())], *restarts)),
        )?;
        counters(
            enc,
            "announcer_watch_changes_ignored",
            "Watched changes that alter nothing the VIP plan reads (Service conditions, Node status heartbeats): stored, not re-planned",
            snap.iter()
                .map(|(s, _, _, alike)| ([("resource", s.name())], *alike)),
        )?;
        errors.extend(
            snap.iter()
                .map(|(s, _, e, _)| ([("request", "watch"), ("resource", s.name())], *e)),
        );
    }
    if let Some(s) = state {
        let failures = s.get().0.stats.lease_failures;
        errors.push(([("request", "write"), ("resource", "leases")], failures));
    }
    if let Some(e) = events {
        errors.push(([("request", "create"), ("resource", "events")], e.failed));
        counters(
            enc,
            "announcer_events",
            "Kubernetes Events on Services, by outcome (suppressed: repeats; rate_limited: logged only)",
            [
                ([("outcome", "sent")], e.sent),
                ([("outcome", "suppressed")], e.suppressed),
                ([("outcome", "failed")], e.failed),
                ([("outcome", "rate_limited")], e.rate_limited),
            ],
        )?;
    }
    if errors.is_empty() {
        return Ok(());
    }
    counters(
        enc,
        "announcer_api_errors",
        "Requests to the API server that failed, by request and resource",
        errors,
    )
}

fn service_leases(enc: &mut DescriptorEncoder, s: &LeaseApiStats) -> fmt::Result {
    use std::sync::atomic::Ordering::Relaxed;
    counters(
        enc,
        "announcer_service_lease_requests",
        "Lease-per-service mode: API requests on Service Leases, by verb",
        [
            ([("verb", "get")], s.gets.load(Relaxed)),
            ([("verb", "write")], s.writes.load(Relaxed)),
        ],
    )?;
    counter(
        enc,
        "announcer_service_lease_conflicts",
        "Lease-per-service mode: Service Lease writes that hit 409",
        s.conflicts.load(Relaxed),
    )
}

/// Labels of one data-plane entry.
type VipLabels = [(&'static str, String); 3];

fn dataplane(enc: &mut DescriptorEncoder, root: &std::path::Path) -> fmt::Result {
    let mut frames = Vec::new();
    let mut entries = Vec::new();
    let mut vips: Vec<(VipLabels, crate::dataplane::VipStatus)> = Vec::new();
    let mut info = Vec::new();
    for iface in crate::dataplane::pins::pinned_interfaces(root) {
        match crate::dataplane::loader::running(root, &iface) {
            Ok(r) => info.push((
                [
                    ("iface", iface.clone()),
                    ("mode", r.mode.map_or("none", |m| m.as_str()).to_owned()),
                    ("tag", r.tag.to_string()),
                ],
                1i64,
            )),
            Err(e) => {
                tracing::debug!(%iface, error = %e, "cannot read the running program for /metrics")
            }
        }
        let read = Dataplane::open(root, &iface).and_then(|dp| Ok((dp.counters()?, dp.list()?)));
        let (counters, list) = match read {
            Ok(r) => r,
            Err(e) => {
                tracing::debug!(%iface, error = %e, "cannot read the data plane for /metrics");
                continue;
            }
        };
        for (o, n) in counters {
            frames.push((
                [("iface", iface.clone()), ("outcome", o.name().to_owned())],
                n,
            ));
        }
        entries.push(([("iface", iface.clone())], list.len() as i64));
        for r in list {
            let labels = [
                ("iface", iface.clone()),
                ("vip", r.vip.addr.to_string()),
                ("vlan", r.vip.vlan.to_string()),
            ];
            vips.push((labels, r));
        }
    }
    debug_assert!(Outcome::ALL.len() == Outcome::COUNT as usize);
    gauges(
        enc,
        "announcer_dataplane_info",
        "The XDP program running on the interface: its tag (as bpftool and ip link print it) and attach mode (native, generic); always 1",
        info,
    )?;
    counters(
        enc,
        "announcer_dataplane_frames",
        "Frames the XDP program saw, per interface and outcome (arp_answered, ns_answered, passed, malformed, expired)",
        frames,
    )?;
    gauges(
        enc,
        "announcer_dataplane_vips",
        "Entries in the interface's VIP maps (live or expired)",
        entries,
    )?;
    let per_vip = |f: fn(&crate::maps::VipStats) -> u64| {
        vips.iter()
            .map(move |(l, r)| (l.clone(), f(&r.stats)))
            .collect::<Vec<_>>()
    };
    counters(
        enc,
        "announcer_dataplane_answered",
        "ARP requests / Neighbor Solicitations answered for the VIP",
        per_vip(|s| s.answered),
    )?;
    counters(
        enc,
        "announcer_dataplane_expired",
        "Requests for the VIP seen after its entry expired (left to the kernel)",
        per_vip(|s| s.expired),
    )?;
    counters(
        enc,
        "announcer_dataplane_malformed",
        "Malformed requests for the VIP (left to the kernel)",
        per_vip(|s| s.malformed),
    )?;
    gauges(
        enc,
        "announcer_dataplane_vip_expires_in_seconds",
        "Time before the program stops answering for the VIP unless refreshed (+Inf: permanent; 0: expired)",
        vips.iter().map(|(l, r)| {
            let left = r.expires_in.map_or(f64::INFINITY, |d| d.as_secs_f64());
            (l.clone(), left)
        }),
    )
}
