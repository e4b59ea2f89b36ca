//! The simulated shell and the infrastructure it talks to: what happens to each [`Output`] of
//! an agent (heartbeats over the network, Lease writes to the API server, data-plane writes,
//! probes, announcements), and the API server's answers and watch events.
//!
//! Why separate from the event loop: this is the part that must behave like the real agent's
//! shell and the real cluster (409 on a stale `resourceVersion`, a probe answered only by a
//! data plane that is up, reachable and still holds the entry), so it is kept in one place to
//! read against them.

use std::{hash::Hash, net::IpAddr};

use announcer::election::{
    IfaceName, Input, LeaseView, LeaseWriteResult, Link, Output, ServiceRef, Subnet, VipSpec,
};
use announcer_ebpf::wire::MacAddr;
use rand::Rng;

use super::{
    super::scenario::{SUBNET_A, SUBNET_B, in_subnet_b},
    Agent, Ev, IFACE, IFACE_B, LeaseBody, StoredLease, VTime, What, World, bit, hash_beat, us,
};

impl<A: Agent> World<A> {
    pub(super) fn reachable(&self, a: usize, b: usize) -> bool {
        let (x, y) = (&self.nodes[a], &self.nodes[b]);
        x.up && x.link && y.up && y.link && self.groups[a] == self.groups[b]
    }

    pub(super) fn answers(&self, node: usize, vip: usize) -> bool {
        let n = &self.nodes[node];
        n.up && n.link && n.dp.get(&vip).is_some_and(|exp| *exp > self.now)
    }

    /// Whether the node's data plane answers a unicast probe for `vip` sent to `mac`: only on
    /// the link the entry is installed under, with that link's MAC.
    fn answers_probe(&self, node: usize, vip: usize, mac: MacAddr) -> bool {
        let n = &self.nodes[node];
        let on_b = n.dp_b.get(&vip).copied().unwrap_or(false);
        let want = if on_b { n.mac_b } else { n.mac };
        self.answers(node, vip) && mac == want
    }

    /// The interface a node announces `vip` on, if it has one.
    fn iface_for(&self, node: usize, vip: usize) -> Option<&'static str> {
        if !self.plan.two_nics || !in_subnet_b(self.plan.vips[vip].addr) {
            Some(IFACE)
        } else if self.plan.one_nic == Some(node) {
            None
        } else {
            Some(IFACE_B)
        }
    }

    /// The links a node publishes in its Lease (with [`super::Plan::two_nics`]).
    fn links_of(&self, node: usize) -> Vec<Link> {
        let parse = |v: &[&str; 2]| -> Vec<Subnet> {
            v.iter().map(|s| s.parse().expect("valid")).collect()
        };
        let n = &self.nodes[node];
        let single = self.plan.one_nic == Some(node);
        let mut links = vec![Link {
            name: None,
            mac: n.mac,
            subnets: parse(&SUBNET_A),
            fallback: !single,
            down: false,
        }];
        if !single {
            links.push(Link {
                name: None,
                mac: n.mac_b,
                subnets: parse(&SUBNET_B),
                fallback: false,
                down: false,
            });
        }
        links
    }

    /// The simulated shell: carry out one output of the node's agent.
    pub(super) fn output(&mut self, node: usize, out: Output) {
        if let Output::SendHeartbeat(b) = &out {
            self.now.hash(&mut self.hasher);
            node.hash(&mut self.hasher);
            hash_beat(b, &mut self.hasher);
            for peer in 0..self.nodes.len() {
                if peer != node
                    && self.nodes[peer].agent.is_some()
                    && self.reachable(node, peer)
                    && self.beat_accepted(node, peer)
                {
                    if self.plan.loss > 0.0 && self.rng.random_bool(self.plan.loss) {
                        continue;
                    }
                    // The shell seals one datagram per recipient: it learns only whether it
                    // is among those heard and acked.
                    let me = &self.nodes[peer].name;
                    let only =
                        |v: &Vec<_>| v.iter().filter(|x| *x == me).take(1).cloned().collect();
                    let mut beat = b.clone();
                    beat.hears = only(&b.hears);
                    beat.acks = only(&b.acks);
                    let at = self.now + us(&mut self.rng, 100, 2000);
                    self.deliver(at, peer, None, Input::Heartbeat(beat));
                }
            }
            return;
        }
        format!("{out:?}").hash(&mut self.hasher);
        let vip_of = |w: &Self, vip: &IpAddr| w.vip_index.get(vip).copied();
        let run = self.nodes[node].run;
        let mut changed = false;
        match &out {
            Output::WriteLease {
                resource_version,
                release,
                standby,
                connected,
            } => {
                if self.api[node] {
                    let at = self.now + us(&mut self.rng, 500, 5000);
                    let rv = resource_version.clone();
                    let body = LeaseBody {
                        released: *release,
                        standby: *standby,
                        connected: *connected,
                    };
                    self.queue.push(
                        at,
                        Ev::ApiWrite {
                            node,
                            run,
                            rv,
                            body,
                        },
                    );
                } else {
                    let at = self.now + us(&mut self.rng, 200_000, 1_000_000);
                    self.deliver(
                        at,
                        node,
                        Some(run),
                        Input::LeaseWrite(LeaseWriteResult::Failed),
                    );
                }
            }
            Output::Install { vip, iface, .. }
            | Output::Remove { vip, iface }
            | Output::Announce { vip, iface }
            | Output::Probe { vip, iface, .. } => {
                let Some(v) = vip_of(self, vip) else {
                    self.bad(Some(node), format!("{out:?} names a VIP nobody asked for"));
                    return;
                };
                if Some(&**iface) != self.iface_for(node, v) {
                    self.bad(
                        Some(node),
                        format!("{out:?} names an interface the node does not announce it on"),
                    );
                }
                match &out {
                    Output::Install { ttl, .. } => {
                        let expiry = self.now + *ttl;
                        let n = &mut self.nodes[node];
                        changed = n.dp.insert(v, expiry).is_none_or(|old| old <= self.now);
                        n.dp_b.insert(v, &**iface == IFACE_B);
                    }
                    Output::Remove { .. } => {
                        changed = self.nodes[node]
                            .dp
                            .remove(&v)
                            .is_some_and(|old| old > self.now);
                    }
                    Output::Announce { .. } => {
                        changed = true;
                        let n = &self.nodes[node];
                        if n.up && n.link {
                            for client in 0..self.clients.len() {
                                let at = self.now + us(&mut self.rng, 100, 2000);
                                self.queue.push(
                                    at,
                                    Ev::Garp {
                                        client,
                                        vip: v,
                                        node,
                                    },
                                );
                            }
                        }
                    }
                    Output::Probe { mac, .. } => {
                        let target = self
                            .nodes
                            .iter()
                            .position(|n| n.mac == *mac || (self.plan.two_nics && n.mac_b == *mac));
                        let lost = self.probe_loss > 0
                            && self.rng.random_range(0..1000u16) < self.probe_loss;
                        if let Some(t) = target
                            && t != node
                            && self.frames_pass(node, t)
                            && self.frames_pass(t, node)
                            && self.answers_probe(t, v, *mac)
                            && !lost
                        {
                            let at = self.now + us(&mut self.rng, 200, 4000);
                            self.deliver(
                                at,
                                node,
                                Some(run),
                                Input::ProbeAnswered {
                                    vip: *vip,
                                    mac: *mac,
                                },
                            );
                        }
                    }
                    _ => unreachable!(),
                }
            }
            Output::Event { .. } | Output::NodeEvent { .. } | Output::SendHeartbeat(_) => {}
            Output::Exit => {}
        }
        let exit = out == Output::Exit;
        self.record(Some(node), What::Out { out, changed });
        if exit {
            self.stop_agent(node);
            if self.nodes[node].leaving {
                self.machine_down(node);
            }
        }
    }

    pub(super) fn lease_view(&self, node: usize) -> Option<LeaseView> {
        let l = self.leases.get(&node)?;
        Some(LeaseView {
            node: self.nodes[node].name.clone(),
            resource_version: l.rv.to_string(),
            renew_time: Some(l.renew.clone()),
            duration: self.plan.timing.lease_duration,
            released: l.body.released,
            standby: l.body.standby,
            connected: l.body.connected,
            links: self.plan.two_nics.then(|| self.links_of(node)),
        })
    }

    /// The API server: a create or a replace with a `resourceVersion` precondition.
    pub(super) fn api_write(&mut self, node: usize, run: u64, rv: Option<String>, body: LeaseBody) {
        let reply = self.now + us(&mut self.rng, 500, 5000);
        if !self.api[node] {
            self.deliver(
                reply,
                node,
                Some(run),
                Input::LeaseWrite(LeaseWriteResult::Failed),
            );
            return;
        }
        let current = self.leases.get(&node).map(|l| l.rv.to_string());
        let ok = match (&rv, &current) {
            (None, None) => true,
            (Some(want), Some(have)) => want == have,
            _ => false,
        };
        if !ok {
            // The shell re-reads before reporting the conflict.
            let fresh = match self.lease_view(node) {
                Some(v) => Input::LeaseSeen(v),
                None => Input::LeaseGone(self.nodes[node].name.clone()),
            };
            self.deliver(reply, node, Some(run), fresh);
            self.deliver(
                reply,
                node,
                Some(run),
                Input::LeaseWrite(LeaseWriteResult::Conflict),
            );
            return;
        }
        let new_rv = self.next_rv;
        self.next_rv += 1;
        self.leases.insert(
            node,
            StoredLease {
                rv: new_rv,
                renew: format!("{}us", self.now.as_micros()),
                body,
            },
        );
        let written = LeaseWriteResult::Written {
            resource_version: new_rv.to_string(),
        };
        self.deliver(reply, node, Some(run), Input::LeaseWrite(written));
        let view = self.lease_view(node).expect("just written");
        for watcher in 0..self.nodes.len() {
            if self.nodes[watcher].agent.is_some() && self.api[watcher] {
                let at = self.now + us(&mut self.rng, 1000, 20_000);
                self.deliver(at, watcher, None, Input::LeaseSeen(view.clone()));
            }
        }
    }

    /// The VIPs as `node`'s watches and configuration compute them.
    pub(super) fn specs_for(&self, node: usize) -> Vec<VipSpec> {
        let elig = &self.eligibility[self.nodes[node].view];
        self.plan
            .vips
            .iter()
            .enumerate()
            .map(|(i, v)| VipSpec {
                vip: v.addr,
                service: ServiceRef {
                    namespace: "default".into(),
                    name: format!("svc-{i}"),
                },
                eligible: std::sync::Arc::new(
                    (0..self.nodes.len())
                        .filter(|j| elig[i] & bit(*j) != 0)
                        .map(|j| self.nodes[j].name.clone())
                        .collect(),
                ),
                local: self.iface_for(node, i).map(IfaceName::from),
                interfaces: Vec::new(),
                preferred: Default::default(),
            })
            .collect()
    }

    /// The shell's list of every Lease, then the watch health, as after a (re)connect.
    pub(super) fn relist(&mut self, node: usize, run: u64, at: VTime) {
        for l in 0..self.nodes.len() {
            if let Some(v) = self.lease_view(l) {
                self.deliver(at, node, Some(run), Input::LeaseSeen(v));
            }
        }
        self.deliver(at, node, Some(run), Input::WatchHealth(true));
    }
}
