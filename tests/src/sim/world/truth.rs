//! Ground truth and the clients: every [`super::SAMPLE_EVERY`], which nodes answer each VIP,
//! where each client's neighbour cache points, and whether its traffic flows.
//!
//! Why clients at all: "exactly one node answers" is not what users feel; a client keeps
//! sending to the MAC in its neighbour cache until an announcement moves it or, much later,
//! the entry goes stale and is re-resolved. Traffic flows while that MAC belongs to a node
//! that is up with its link up (its kernel accepts the VIP's traffic even if its agent died).

use std::time::Duration;

use rand::Rng;

use super::{
    super::scenario::{NodeMask, Scenario},
    Agent, CLIENT_STALE_AFTER, Sample, VipState, World, bit,
};

impl<A: Agent> World<A> {
    /// Ground truth now; clients re-resolve stale entries.
    pub(super) fn sample(&mut self) {
        let now = self.now;
        let live = (0..self.nodes.len())
            .filter(|i| {
                let n = &self.nodes[*i];
                n.agent.is_some()
                    && !n.leaving
                    && n.up
                    && n.link
                    && now >= n.started_at + self.plan.timing.warmup
            })
            .fold(0, |m: NodeMask, i| m | bit(i));
        let mut answering: Vec<NodeMask> = vec![0; self.plan.vips.len()];
        for (i, n) in self
            .nodes
            .iter()
            .enumerate()
            .filter(|(_, n)| n.up && n.link)
        {
            for (v, exp) in &n.dp {
                if *exp > now {
                    answering[*v] |= bit(i);
                }
            }
        }
        let mut vips = Vec::with_capacity(self.plan.vips.len());
        for (v, &answerers) in answering.iter().enumerate() {
            let (mut cached, mut flows, mut cut_off) = (0 as NodeMask, true, false);
            for c in 0..self.clients.len() {
                let mut target = self.clients[c].cache[v];
                let ok = target.is_some_and(|t| self.nodes[t].up && self.nodes[t].link);
                cut_off |= target.is_some() && !ok;
                let cl = &mut self.clients[c];
                if ok {
                    cl.stale_since[v] = None;
                } else if target.is_some() && cl.stale_since[v].is_none() {
                    cl.stale_since[v] = Some(now);
                }
                let stale = cl.stale_since[v].is_some_and(|s| now >= s + CLIENT_STALE_AFTER);
                if stale || now >= cl.next_resolve[v] {
                    // Broadcast ARP / NS: the first answer wins.
                    let who: Vec<usize> = (0..self.nodes.len())
                        .filter(|i| answerers & bit(*i) != 0)
                        .collect();
                    let cl = &mut self.clients[c];
                    if who.is_empty() {
                        cl.next_resolve[v] = now + Duration::from_secs(1);
                    } else {
                        let pick = who[self.rng.random_range(0..who.len())];
                        cl.cache[v] = Some(pick);
                        cl.stale_since[v] = None;
                        cl.next_resolve[v] =
                            now + Duration::from_secs(self.rng.random_range(15..45));
                        target = Some(pick);
                    }
                }
                if let Some(t) = target {
                    cached |= bit(t);
                }
                flows &= ok;
            }
            vips.push(VipState {
                answerers,
                cached,
                flows,
                cut_off,
            });
        }
        let latest = self.eligibility.len() - 1;
        let rolling = self
            .nodes
            .iter()
            .any(|n| n.agent.is_some() && n.view != latest);
        let mixed = rolling.then(|| {
            (0..self.plan.vips.len())
                .map(|v| {
                    (0..self.nodes.len())
                        .filter(|i| {
                            let n = &self.nodes[*i];
                            n.agent.is_some() && self.eligibility[n.view][v] & bit(*i) != 0
                        })
                        .fold(0, |m: NodeMask, i| m | bit(i))
                })
                .collect()
        });
        self.samples.push(Sample {
            t: now,
            live,
            epoch: latest,
            mixed,
            vips,
        });
        // Every sample where forged names arrive; every tenth elsewhere (real nodes only ever
        // add their own name, so a slower look catches the same).
        let forged = matches!(
            self.plan.scenario,
            Scenario::ForgedHeartbeats | Scenario::Flood
        );
        if forged || self.samples.len() % 10 == 1 {
            self.check_peer_tables();
        }
    }

    /// Bounded memory: an agent's peer table never outgrows the Leases (strict) or the
    /// Leases and the real nodes (loose: a real node's heartbeat may arrive before its
    /// Lease). Recorded once per node, at the first sample that breaks each bound.
    fn check_peer_tables(&mut self) {
        let at = self.origin + self.now;
        let leases = self.leases.len();
        let real = self.nodes.len() - 1;
        for i in 0..self.nodes.len() {
            // Once both bounds broke, only the peak is still of interest.
            if self.mem_strict[i].is_some()
                && self.mem_loose[i].is_some()
                && self.samples.len() % 10 != 1
            {
                continue;
            }
            let Some(a) = &self.nodes[i].agent else {
                continue;
            };
            let peers = a.peer_count(at);
            if peers > leases && self.mem_strict[i].is_none_or(|(_, p, l)| peers - leases > p - l) {
                self.mem_strict[i] = Some((self.now, peers, leases));
            }
            if peers > leases.max(real) && self.mem_loose[i].is_none() {
                self.mem_loose[i] = Some((self.now, peers, leases));
            }
        }
    }
}
