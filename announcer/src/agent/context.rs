//! What both election shells share ([`Context`]): the configuration, the Kubernetes side
//! ([`KubeSide`]: client, watches, Events), the node's network side ([`NodeNet`]: interfaces,
//! data plane, heartbeat address) and what the agent publishes ([`Reporting`]: metrics, the
//! state endpoint), and the steps both take with them
//! (wait for the first lists, learn this node's addresses, plan, choose interfaces, report
//! problems, probe).
//!
//! Why apart from [`super::run`]: `run` only wires the parts together; what the shells do with
//! them is here, where both modes' uses can be read side by side.

use std::{
    collections::{BTreeMap, BTreeSet},
    net::IpAddr,
};

use kube::{Client, runtime::events::EventType};

use super::{
    config::AgentArgs,
    error::AgentError,
    kube::{
        announced::Announced,
        events::Events,
        plan_feed::{self, PlanFeed},
        watch::Watches,
    },
    metrics::{Recorder, Sources},
    net::{
        iface::{self, IfaceConfig, LocalIface},
        plane::{self, Plane, PlaneChange},
        probe::{self, Probes},
    },
    published::PublishedState,
    shutdown::Shutdown,
    unreachable::KernelTarget,
};
use crate::{
    election::{Core, IfaceName, ServiceRef, VipSpec},
    placement::{
        eligibility::{Placement, Problem, Selection, VipPlacement},
        planner::Planner,
        refusal::Refusal,
        selector,
    },
    state::AgentState,
    wire::MacAddr,
};

/// An interface's name, state and addresses, compared to notice changes.
pub(super) type IfaceFingerprint = (String, bool, Vec<(IpAddr, u8)>);

/// What both election modes share, in three parts: the Kubernetes side, this node's network
/// side, and what the agent publishes about itself.
pub(super) struct Context {
    pub(super) args: AgentArgs,
    pub(super) kube: KubeSide,
    pub(super) net: NodeNet,
    pub(super) report: Reporting,
    /// The agent is done: background tasks end.
    pub(super) stop: Shutdown,
    /// SIGTERM: hand the VIPs over, then stop.
    pub(super) term: Shutdown,
}

/// The API side: the client, the watches and what they select, and Events.
pub(super) struct KubeSide {
    pub(super) client: Client,
    /// The runtime the API side (watches, writes) runs on; the election thread spawns its
    /// Lease writes there.
    pub(super) rt: tokio::runtime::Handle,
    pub(super) watches: Watches,
    pub(super) events: Events,
    /// The `announcer.dev/Announced` condition writer.
    pub(super) announced: Announced,
    /// The Services of each planned VIP (more than one when they share it), as last planned.
    pub(super) vip_services: BTreeMap<IpAddr, Vec<ServiceRef>>,
    pub(super) selection: Selection,
    /// The watches' first lists are in.
    pub(super) synced: bool,
}

/// This node's network side: the data plane, the interfaces VIPs go on, and the heartbeat
/// address.
pub(super) struct NodeNet {
    pub(super) plane: Plane,
    pub(super) iface_cfg: IfaceConfig,
    pub(super) ifaces: Vec<LocalIface>,
    /// Interfaces VIPs have been placed on: their link state is reported to the core. One
    /// that no longer exists is reported down once, then forgotten ([`Context::link_states`]).
    pub(super) used_ifaces: BTreeSet<String>,
    pub(super) heartbeat_ip: IpAddr,
    pub(super) heartbeat_mac: Option<MacAddr>,
}

/// What the agent tells about itself: metrics, the `/state` endpoint, and problems logged.
pub(super) struct Reporting {
    /// Durations and heartbeat loss, as they happen.
    pub(super) recorder: Recorder,
    /// What `/metrics` reads at scrape time (the modes add their parts).
    pub(super) sources: Sources,
    pub(super) published: PublishedState,
    /// Problems already logged (each once while it lasts).
    pub(super) reported: BTreeSet<String>,
}

impl Context {
    /// Waits for the watches' first lists, then learns this node's addresses and interfaces.
    /// `false`: shutdown came first.
    pub(super) async fn start(&mut self) -> Result<bool, AgentError> {
        let mut healthy = self.kube.watches.healthy.clone();
        let mut term = self.term.clone();
        let mut waited = 0u32;
        loop {
            if *healthy.borrow_and_update() {
                break;
            }
            tokio::select! {
                _ = healthy.changed() => {}
                () = term.recv() => return Ok(false),
                () = tokio::time::sleep(std::time::Duration::from_secs(5)) => {
                    waited += 5;
                    tracing::warn!(waited_s = waited, "waiting for the API server (first list of Services, EndpointSlices, Nodes, Leases)");
                }
            }
        }
        self.kube.synced = true;
        // The kubelet registers the Node and fills its addresses a moment later: wait for an
        // InternalIP to send heartbeats from (unless one was given), as the log promises.
        let mut changed = self.kube.watches.changed.clone();
        let mut waited = 0u32;
        let internal = loop {
            let node = self
                .kube
                .watches
                .nodes
                .state()
                .into_iter()
                .find(|n| n.metadata.name.as_deref() == Some(self.args.node_name.as_str()));
            let internal = node.as_deref().map(iface::internal_ips).unwrap_or_default();
            if self.args.heartbeat_address.is_some() || !internal.is_empty() {
                break internal;
            }
            if waited.is_multiple_of(30) {
                if node.is_none() {
                    tracing::warn!(node = %self.args.node_name, "no Node object with this name (check NODE_NAME); announcing nothing until it appears");
                } else {
                    tracing::warn!(node = %self.args.node_name, "the Node has no InternalIP yet (the kubelet fills it in after registering); waiting for it, or set --heartbeat-address");
                }
            }
            tokio::select! {
                _ = changed.changed() => {}
                () = term.recv() => return Ok(false),
                () = tokio::time::sleep(std::time::Duration::from_secs(1)) => waited += 1,
            }
        };
        self.net.iface_cfg.internal_ips = internal.clone();
        self.net.heartbeat_ip = match self.args.heartbeat_address {
            Some(ip) => ip,
            None => internal
                .iter()
                .copied()
                .min_by_key(|ip| ip.is_ipv6())
                .expect("waited for one"),
        };
        self.refresh_interfaces();
        self.net.heartbeat_mac = self
            .net
            .ifaces
            .iter()
            .find(|i| i.addrs.iter().any(|a| a.ip == self.net.heartbeat_ip))
            .and_then(|i| i.mac);
        // The interfaces VIPs are known to land on (the InternalIP's, and `--interface` names
        // that are not globs) get the program before the election starts; see
        // `Plane::prepare`.
        let early: Vec<String> = self
            .net
            .ifaces
            .iter()
            .filter(|i| {
                i.addrs.iter().any(|a| a.ip == self.net.heartbeat_ip)
                    || self.args.interfaces.contains(&i.name)
            })
            .map(|i| i.name.clone())
            .collect();
        self.net.plane.prepare(&early);
        tracing::info!(
            node = %self.args.node_name,
            heartbeat = %self.net.heartbeat_ip,
            mac = ?self.net.heartbeat_mac,
            election = ?self.args.election,
            dataplane = self.net.plane.enabled(),
            "agent started"
        );
        Ok(true)
    }

    /// Entries still answering from a previous run on interfaces we have.
    pub(super) fn existing(&mut self) -> Vec<(IpAddr, IfaceName)> {
        let names: Vec<String> = self.net.ifaces.iter().map(|i| i.name.clone()).collect();
        self.net.plane.existing(&names)
    }

    pub(super) fn refresh_interfaces(&mut self) {
        match iface::snapshot() {
            Ok(s) => self.net.ifaces = s,
            Err(e) => tracing::warn!(error = %e, "cannot list interfaces"),
        }
    }

    /// The interfaces whose data plane is down, for the Lease.
    pub(super) fn dataplane_down(&self) -> Vec<String> {
        self.net.plane.down_names().map(str::to_owned).collect()
    }

    /// Reports what happened to the data plane since the last call (logs, metrics, a Warning
    /// Event on the Node when an interface goes down, a Normal one when it is back). `true`
    /// when an interface went down or came back: the links to publish and the interfaces
    /// VIPs may go on changed.
    pub(super) fn report_plane_changes(&mut self) -> bool {
        let mut changed = false;
        for c in self.net.plane.take_changes() {
            match c {
                PlaneChange::Failed {
                    iface,
                    reason,
                    message,
                    first,
                } => {
                    self.report.recorder.attach_failed(&iface, reason);
                    self.report.recorder.dataplane_up(&iface, false);
                    if first {
                        changed = true;
                        let note = format!(
                            "data plane down on {iface}: this node announces no VIP there until the XDP program is attached (retrying): {message}"
                        );
                        tracing::error!(%iface, reason, "{note}");
                        self.kube
                            .events
                            .record_on_node(EventType::Warning, "DataplaneDown", &note);
                    } else {
                        tracing::debug!(%iface, reason, "XDP attach retry failed: {message}");
                    }
                }
                PlaneChange::Up {
                    iface,
                    program_id,
                    recovered,
                } => {
                    self.report.recorder.dataplane_up(&iface, true);
                    if recovered {
                        changed = true;
                        let note = format!(
                            "data plane up on {iface} (XDP program {program_id} attached): this node announces VIPs there again"
                        );
                        tracing::info!(%iface, program_id, "{note}");
                        self.kube
                            .events
                            .record_on_node(EventType::Normal, "DataplaneUp", &note);
                    }
                }
            }
        }
        changed
    }

    /// What decides interface choice and link state, to notice changes (an interface whose
    /// data plane is down counts as down).
    pub(super) fn iface_fingerprint(&self) -> Vec<IfaceFingerprint> {
        self.net
            .ifaces
            .iter()
            .map(|i| {
                (
                    i.name.clone(),
                    i.up && !self.net.plane.is_down(&i.name),
                    i.addrs.iter().map(|a| (a.ip, a.prefix)).collect(),
                )
            })
            .collect()
    }

    /// The links to write in our Lease (`None` without a data plane: then every VIP is
    /// "announced" nowhere, and peers need not know where); those whose data plane is down
    /// marked so ([`plane::mark_links_down`]).
    pub(super) fn links(&self) -> Option<Vec<crate::election::Link>> {
        self.net.plane.enabled().then(|| {
            let mut links = iface::links(&self.net.ifaces, &self.net.iface_cfg);
            plane::mark_links_down(&mut links, self.net.plane.down_names());
            links
        })
    }

    /// Link state of the interfaces VIPs were placed on (down too where the data plane is:
    /// the core then withdraws the VIPs on it, and does not take them). An interface that was deleted is
    /// reported down this once and then forgotten: the core withdraws the VIPs on it (and
    /// only those), and forgets it too once no VIP is on it, so a deleted interface is not
    /// held against the node until the agent restarts.
    pub(super) fn link_states(&mut self) -> Vec<(IfaceName, bool)> {
        let ifaces = &self.net.ifaces;
        let plane = &self.net.plane;
        let states = self
            .net
            .used_ifaces
            .iter()
            .map(|name| {
                let up = ifaces.iter().any(|i| i.name == *name && i.up) && !plane.is_down(name);
                (IfaceName::from(name.as_str()), up)
            })
            .collect();
        self.net
            .used_ifaces
            .retain(|name| ifaces.iter().any(|i| i.name == *name));
        states
    }

    /// The placement of every VIP (`None` before the first lists): the watches' planner,
    /// started here with the agent's selection the first time. O(V): a copy of every VIP.
    pub(super) fn plan(&self) -> Option<Placement> {
        self.with_feed(|f| f.planner().map(Planner::placement))?
    }

    /// Runs `f` on the watches' plan feed with its planner started (`None` before the first
    /// lists). The first start reads the stores: O(objects).
    fn with_feed<T>(&self, f: impl FnOnce(&mut PlanFeed) -> T) -> Option<T> {
        if !self.kube.synced {
            return None;
        }
        let w = &self.kube.watches;
        let mut feed = plan_feed::lock(&w.plan);
        feed.start(
            &self.kube.selection,
            plan_feed::Stores {
                services: &w.services,
                slices: &w.slices,
                nodes: &w.nodes,
                pools: &w.pools,
            },
        );
        Some(f(&mut feed))
    }

    /// The interface for `vip` on this node, or why there is none. `interfaces` (its
    /// `AddressPool`'s) replace the `--interface` allow list when given.
    pub(super) fn choose(&mut self, vip: IpAddr, interfaces: &[String]) -> Option<IfaceName> {
        if !self.net.plane.enabled() {
            // No interface: the core's Events then say "(no data plane)".
            return Some(IfaceName::from(""));
        }
        let pool_cfg;
        let cfg = if interfaces.is_empty() {
            &self.net.iface_cfg
        } else {
            pool_cfg = IfaceConfig {
                allow: interfaces.to_vec(),
                internal_ips: self.net.iface_cfg.internal_ips.clone(),
            };
            &pool_cfg
        };
        match iface::choose(vip, &self.net.ifaces, cfg) {
            Ok(c) if self.refused_on_link(vip, &c.iface) => None,
            Ok(c) => {
                self.net.used_ifaces.insert(c.iface.to_string());
                Some(c.iface)
            }
            Err(e) => {
                if self.report.reported.insert(format!("noiface {vip}")) {
                    tracing::warn!(%vip, "{e}");
                }
                None
            }
        }
    }

    /// Whether `vip` must not be announced on `iface`, being its subnet's network or broadcast
    /// address; the first time, logged, counted and raised as a Warning on its Services.
    fn refused_on_link(&mut self, vip: IpAddr, iface: &IfaceName) -> bool {
        let Some(link) = self.net.ifaces.iter().find(|i| *i.name == **iface) else {
            return false;
        };
        let addrs: Vec<(IpAddr, u8)> = link.addrs.iter().map(|a| (a.ip, a.prefix)).collect();
        let Some(r) = Refusal::on_link(vip, &addrs) else {
            return false;
        };
        if self
            .report
            .reported
            .insert(format!("refused {vip} on {iface}"))
        {
            self.report.recorder.refused_on_link();
            let note = format!("not announcing {vip} from {}: {r}", self.args.node_name);
            tracing::warn!(%vip, %iface, reason = r.label(), "{note}");
            for svc in self.kube.vip_services.get(&vip).into_iter().flatten() {
                let warning = EventType::Warning;
                self.kube
                    .events
                    .record(svc, warning, "AddressRefused", &note);
            }
        }
        true
    }

    /// The core's VIP specs, every one, with problems reported (by one node per Service).
    /// Changes the watches noted until now are in them: [`Context::spec_changes`] gives only
    /// later ones.
    pub(super) fn specs(
        &mut self,
        core: &Core,
        services: &mut BTreeMap<IpAddr, String>,
    ) -> Option<Vec<VipSpec>> {
        // Under one lock: a change fed meanwhile is either in these or left pending.
        let (vips, problems) = self.with_feed(|feed| {
            feed.take();
            let p = feed.planner()?;
            let vips: Vec<VipPlacement> = p.vips().cloned().collect();
            Some((vips, p.problems().cloned().collect::<Vec<_>>()))
        })??;
        self.report_problems(&problems, |key| {
            core.is_reporter(key, std::time::Instant::now())
        });
        services.clear();
        self.kube.vip_services.clear();
        Some(vips.iter().map(|v| self.spec_of(v, services)).collect())
    }

    /// What changed in the core's VIP specs since the last [`Context::specs`] or call:
    /// the new or changed specs and the addresses gone; `None` if nothing did (the watch
    /// events changed nothing the placement depends on). O(changes).
    pub(super) fn spec_changes(
        &mut self,
        core: &Core,
        services: &mut BTreeMap<IpAddr, String>,
    ) -> Option<(Vec<VipSpec>, Vec<IpAddr>)> {
        if !self.kube.synced {
            return None;
        }
        let (delta, problems) = {
            let mut feed = plan_feed::lock(&self.kube.watches.plan);
            let delta = feed.take();
            let planner = feed.planner()?;
            let problems = delta
                .problems_changed
                .then(|| planner.problems().cloned().collect::<Vec<_>>());
            (delta, problems)
        };
        if let Some(problems) = problems {
            self.report_problems(&problems, |key| {
                core.is_reporter(key, std::time::Instant::now())
            });
        }
        if delta.placed.is_empty() && delta.gone.is_empty() {
            return None;
        }
        for ip in &delta.gone {
            services.remove(ip);
            self.kube.vip_services.remove(ip);
        }
        let placed = delta
            .placed
            .values()
            .map(|v| self.spec_of(v, services))
            .collect();
        Some((placed, delta.gone.into_iter().collect()))
    }

    /// A VIP's spec with the interface this node would use; `services` and
    /// `kube.vip_services` learn its Services.
    fn spec_of(&mut self, v: &VipPlacement, services: &mut BTreeMap<IpAddr, String>) -> VipSpec {
        services.insert(v.vip, v.service.to_string());
        let all = std::iter::once(&v.service).chain(&v.shared_with).cloned();
        self.kube.vip_services.insert(v.vip, all.collect());
        let local = self.choose(v.vip, &v.interfaces);
        v.spec(local)
    }

    /// Logs each problem once, and raises it as an Event if `reporter` says this node is
    /// the one to (so that N nodes do not raise the same Event N times).
    pub(super) fn report_problems(
        &mut self,
        problems: &[Problem],
        reporter: impl Fn(&str) -> bool,
    ) {
        self.report.recorder.refusals(problems);
        let mut now_seen = BTreeSet::new();
        for p in problems {
            let key = format!("{}|{}", p.service, p.message);
            now_seen.insert(key.clone());
            if self.report.reported.contains(&key) {
                continue;
            }
            self.report.reported.insert(key);
            tracing::warn!(service = %p.service, vip = ?p.vip, reason = p.reason.event_reason(), "{}", p.message);
            if reporter(&p.service.to_string()) {
                self.kube.events.record(
                    &p.service,
                    EventType::Warning,
                    p.reason.event_reason(),
                    &p.message,
                );
            }
        }
        // Forget problems that went away, so a recurrence is reported again.
        self.report
            .reported
            .retain(|k| !k.contains('|') || now_seen.contains(k));
    }

    /// Sends a probe of `mac` for `vip` on `iface` (its prober and answer listener are opened
    /// on first use); answerable for the core's probe timeout. A failure is logged: silence,
    /// the core takes over after its timeout.
    pub(super) fn probe(
        &mut self,
        probes: &mut Probes,
        iface: &IfaceName,
        vip: IpAddr,
        mac: MacAddr,
    ) {
        if !self.net.plane.enabled() {
            return; // No data plane to ask: silence, the core takes over after its timeout.
        }
        let Some((index, src)) = self.probe_source(iface) else {
            return;
        };
        let window = self.args.probe_timeout;
        if let Err(e) = probes.send(iface, index, src, vip, mac, window) {
            tracing::warn!(%vip, %iface, error = %e, "probe not sent; taking over on silence");
        }
    }

    /// Our side of `iface` for probes: its index and what probes are sent from (our MAC,
    /// our IPv4 address, our IPv6 link-local address).
    pub(super) fn probe_source(&self, iface: &IfaceName) -> Option<(u32, probe::ProbeSource)> {
        let li = self.net.ifaces.iter().find(|i| *i.name == **iface)?;
        let src = probe::ProbeSource {
            mac: li.mac.unwrap_or(MacAddr::ZERO),
            ipv4: li.addrs.iter().find_map(|a| match a.ip {
                IpAddr::V4(v) => Some(v),
                _ => None,
            }),
            ipv6: li.addrs.iter().find_map(|a| match a.ip {
                IpAddr::V6(v) if v.is_unicast_link_local() => Some(v),
                _ => None,
            }),
            vlan: None,
        };
        Some((li.index, src))
    }

    /// Whether an interface VIPs were placed on is down, or its data plane is (like
    /// [`link_states`](Self::link_states), without forgetting deleted interfaces).
    pub(super) fn any_link_down(&self) -> bool {
        self.net.used_ifaces.iter().any(|name| {
            !self.net.ifaces.iter().any(|i| i.name == *name && i.up) || self.net.plane.is_down(name)
        })
    }

    /// Where to ask `node`'s kernel (the unreachable report's rule 3): its InternalIPs from
    /// its Node object (never from anything the peer publishes), each with our interface
    /// whose subnet contains it, else the one carrying our InternalIP ([`iface::choose`]).
    /// An address we cannot ask (no interface up for it; IPv6 without a link-local address of
    /// ours to send from) is left out: its silence would prove nothing.
    pub(super) fn kernel_targets(&self, node: &crate::election::NodeName) -> Vec<KernelTarget> {
        let Some(n) = self
            .kube
            .watches
            .nodes
            .get(&kube::runtime::reflector::ObjectRef::new(node.as_str()))
        else {
            return Vec::new();
        };
        iface::internal_ips(&n)
            .into_iter()
            .filter_map(|ip| {
                let c = iface::choose(ip, &self.net.ifaces, &self.net.iface_cfg).ok()?;
                let (_, src) = self.probe_source(&c.iface)?;
                (c.mac.is_some() && (ip.is_ipv4() || src.ipv6.is_some()))
                    .then_some(KernelTarget { iface: c.iface, ip })
            })
            .collect()
    }

    /// Publishes `state` as the `/state` document (also the loop's liveness beacon).
    pub(super) fn publish_state(&self, state: AgentState) {
        self.report.published.set(state);
    }
}

/// The fingerprint of what in this agent's configuration changes how it ranks VIPs, sent in
/// heartbeats so that a node left on another configuration during a ConfigMap roll is
/// noticed (a `ConfigMismatch` Event on the Node).
pub(crate) fn config_fingerprint(args: &AgentArgs) -> u64 {
    let relevant = format!(
        "{:?}|{:?}|{:?}|{}|{}|{}|{:?}|{:?}|{}|{:?}|{}|{}|{}",
        args.service_selector,
        args.node_selector,
        args.load_balancer_class,
        args.class_only,
        args.no_ipv4,
        args.no_ipv6,
        args.interfaces,
        args.heartbeat_interval,
        args.heartbeat_misses,
        args.grace,
        // Which Services and nodes count: nodes disagreeing rank different sets.
        args.force_classless,
        args.ignore_exclude_label,
        args.announce_outside_pools,
    );
    xxhash_rust::xxh3::xxh3_64(relevant.as_bytes())
}

/// The Services and Nodes the flags select.
pub(crate) fn selection_from(args: &AgentArgs) -> Result<Selection, AgentError> {
    Ok(Selection {
        ipv4: !args.no_ipv4,
        ipv6: !args.no_ipv6,
        load_balancer_class: Some(args.load_balancer_class.clone()),
        class_only: args.class_only,
        announce_outside_pools: args.announce_outside_pools,
        ignore_exclude_label: args.ignore_exclude_label,
        ..Selection::with_selectors(
            args.service_selector
                .as_deref()
                .map(selector::parse)
                .transpose()?,
            args.node_selector
                .as_deref()
                .map(selector::parse)
                .transpose()?,
        )?
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::agent::config::parse_for_test;

    #[test]
    fn each_flag_that_changes_what_is_ranked_changes_the_config_fingerprint() {
        let base = config_fingerprint(&parse_for_test(&[]));
        for flag in [
            "--force-classless",
            "--ignore-exclude-label",
            "--announce-outside-pools",
            "--class-only",
        ] {
            assert_ne!(config_fingerprint(&parse_for_test(&[flag])), base, "{flag}");
        }
    }
}
