//! A deliberately naive election core, to test the simulator itself.
//!
//! Why: a simulator whose invariants never fail proves nothing. This core does the obvious
//! thing (heartbeats, rendezvous owner among peers heard recently, install and announce when
//! owner, remove otherwise, renew its Lease) and nothing clever: no probe of the old owner, no
//! handover on shutdown, no overlap accounting. The simulator's tests check that it passes the
//! simple scenarios (crash, link down, join, eligibility change) and that the invariants catch
//! it in the others (a restart within grace triggers a needless takeover, a SIGTERM loses
//! traffic).

use std::{
    collections::{BTreeMap, VecDeque},
    net::IpAddr,
};

use announcer::election::{
    Beat, ElectionConfig, IfaceName, Input, Instant, LeaseWriteResult, NodeName, Output, VipSpec,
    rendezvous, stats::ElectionStats as Stats,
};

use super::agent::Agent;

/// See the module docs.
pub struct NaiveCore {
    cfg: ElectionConfig,
    incarnation: u64,
    started: Instant,
    vips: Vec<VipSpec>,
    peers: BTreeMap<NodeName, Instant>,
    owned: BTreeMap<IpAddr, (IfaceName, Instant)>,
    out: VecDeque<Output>,
    next_beat: Instant,
    next_renew: Instant,
    rv: Option<String>,
    writing: bool,
    stats: Stats,
}

impl NaiveCore {
    fn step(&mut self, now: Instant) {
        if now >= self.next_beat {
            self.out.push_back(Output::SendHeartbeat(Beat {
                node: self.cfg.node.clone(),
                incarnation: self.incarnation,
                mac: self.cfg.mac,
                leaving: false,
                api_ok: true,
                ready: now >= self.started + self.cfg.warmup,
                acks: Vec::new(),
                hears: Vec::new(),
                config: 0,
                view: 0,
            }));
            self.next_beat = now + self.cfg.heartbeat_interval;
        }
        if now >= self.next_renew && !self.writing {
            self.out.push_back(Output::WriteLease {
                resource_version: self.rv.clone(),
                release: false,
                standby: false,
                connected: None,
            });
            self.stats.lease_writes += 1;
            self.writing = true;
            self.next_renew = now + self.cfg.lease_renew;
        }
        if now < self.started + self.cfg.warmup {
            return;
        }
        let dead_after = self.cfg.dead_after();
        let me = self.cfg.node.clone();
        for i in 0..self.vips.len() {
            let spec = &self.vips[i];
            let alive = spec
                .eligible
                .iter()
                .filter(|n| **n == me || self.peers.get(*n).is_some_and(|t| now < *t + dead_after));
            let mine = rendezvous::owner(spec.vip, alive) == Some(&me);
            let (vip, local) = (spec.vip, spec.local.clone());
            match (mine, local, self.owned.get(&vip).cloned()) {
                (true, Some(iface), None) => {
                    self.out.push_back(Output::Install {
                        vip,
                        iface: iface.clone(),
                        ttl: self.cfg.grace,
                    });
                    self.out.push_back(Output::Announce {
                        vip,
                        iface: iface.clone(),
                    });
                    self.owned.insert(vip, (iface, now));
                    self.stats.takeovers += 1;
                }
                (true, Some(_), Some((iface, at))) if now >= at + self.cfg.refresh_interval() => {
                    self.out.push_back(Output::Install {
                        vip,
                        iface: iface.clone(),
                        ttl: self.cfg.grace,
                    });
                    self.owned.insert(vip, (iface, now));
                }
                (false, _, Some((iface, _))) => {
                    self.out.push_back(Output::Remove { vip, iface });
                    self.owned.remove(&vip);
                    self.stats.releases += 1;
                }
                _ => {}
            }
        }
    }
}

impl Agent for NaiveCore {
    fn start(cfg: ElectionConfig, now: Instant, incarnation: u64) -> Self {
        NaiveCore {
            cfg,
            incarnation,
            started: now,
            vips: Vec::new(),
            peers: BTreeMap::new(),
            owned: BTreeMap::new(),
            out: VecDeque::new(),
            next_beat: now,
            next_renew: now,
            rv: None,
            writing: false,
            stats: Stats::default(),
        }
    }

    fn handle(&mut self, now: Instant, input: Input) {
        match input {
            Input::Heartbeat(b) => {
                if b.leaving {
                    self.peers.remove(&b.node);
                } else {
                    self.peers.insert(b.node, now);
                }
                // Acted upon at the next tick (at most one heartbeat interval later).
                return;
            }
            Input::Vips(v) => self.vips = v,
            Input::LeaseWrite(r) => {
                self.writing = false;
                if let LeaseWriteResult::Written { resource_version } = r {
                    self.rv = Some(resource_version);
                }
            }
            Input::LeaseSeen(view) if view.node == self.cfg.node => {
                self.rv = Some(view.resource_version)
            }
            Input::Existing(entries) => {
                // Keep them, refreshing at once; the next step releases what is not ours.
                for (vip, iface) in entries {
                    self.out.push_back(Output::Install {
                        vip,
                        iface: iface.clone(),
                        ttl: self.cfg.grace,
                    });
                    self.owned.insert(vip, (iface, now));
                }
            }
            Input::Shutdown => {
                for (vip, (iface, _)) in std::mem::take(&mut self.owned) {
                    self.out.push_back(Output::Remove { vip, iface });
                }
                self.out.push_back(Output::WriteLease {
                    resource_version: self.rv.clone(),
                    release: true,
                    standby: false,
                    connected: None,
                });
                self.out.push_back(Output::Exit);
                return;
            }
            _ => {}
        }
        self.step(now);
    }

    fn poll_output(&mut self) -> Option<Output> {
        self.out.pop_front()
    }

    fn poll_timeout(&self) -> Option<Instant> {
        Some(self.next_beat.min(self.next_renew))
    }

    fn stats(&self) -> Stats {
        self.stats.clone()
    }

    fn peer_count(&self, _now: Instant) -> usize {
        self.peers.len()
    }
}
