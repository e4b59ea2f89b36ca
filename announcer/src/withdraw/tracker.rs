//! The withdrawal controller's decisions: which nodes are proven gone (a quorum of fresh
//! reports), which of them may be withdrawn now (at most [`TrackerConfig::max_withdrawn`]),
//! and which have come back. A deterministic state machine in the style of quinn-proto: the
//! shell feeds what its watches see through the `handle_*` methods, with its own monotonic
//! clock, and takes [`Decision`]s from [`Tracker::poll_decision`] and its next deadline from
//! [`Tracker::poll_timeout`].
//!
//! The rules, each against a bad day:
//! - **Quorum of fresh reporters.** A node is proven gone when at least
//!   [`TrackerConfig::min_quorum`] agents, and more than half of the agents whose Leases the
//!   controller saw renewed within [`TrackerConfig::reporter_fresh`] (the suspect not
//!   counted), list it. One compromised node listing every peer, or one observer cut off from
//!   the segment, is one report: never a quorum.
//! - **Life outranks reports.** Any renewal of the suspect's kubelet Lease or of its agent's
//!   Lease, seen after a report began, voids that report: only reports that began after the
//!   node's last sign of life count. So a node that came back is not withdrawn again on the
//!   reports that were already there, and a replica that starts up takes no Lease it lists
//!   for a renewal (it cannot tell), only what changes afterwards.
//! - **Timed by the controller's clock.** Reports carry no time; "began" and "renewed" are
//!   when this controller saw them, so no node's clock, stepped or skewed, enters a decision.
//! - **Bounded.** At most [`TrackerConfig::max_withdrawn`] nodes are withdrawn at once; a
//!   further proven node is [`Decision::Capped`] and withdrawn when a slot frees (a withdrawn
//!   node returns, or the node lifecycle controller takes it over).
//! - **Never writes True.** A returned node's Pods are set ready again by its kubelet's status
//!   manager; [`Decision::Returned`] only frees the slot and says how long it took.

use std::{
    collections::{BTreeMap, BTreeSet, VecDeque},
    time::{Duration, Instant},
};

use super::report::Report;
use crate::election::NodeName;

/// The rules' knobs.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct TrackerConfig {
    /// How long after its last renewal an agent still counts as a reporter (its node Lease's
    /// duration: a crashed node's agent stops counting once its Lease has expired).
    pub reporter_fresh: Duration,
    /// The fewest agreeing reports that prove a node gone (at least 2, so that one node can
    /// never do it).
    pub min_quorum: usize,
    /// The most nodes withdrawn at once.
    pub max_withdrawn: usize,
}

impl Default for TrackerConfig {
    fn default() -> Self {
        TrackerConfig {
            reporter_fresh: Duration::from_secs(10),
            min_quorum: 2,
            max_withdrawn: 2,
        }
    }
}

/// What the shell should do.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Decision {
    /// Set `Ready` False on `node`'s Pods in opted-in namespaces: these agents proved it gone.
    Withdraw {
        /// The node.
        node: NodeName,
        /// The agents whose reports made the quorum.
        reporters: Vec<NodeName>,
        /// The agents that could have reported (fresh, the node itself not counted).
        expected: usize,
    },
    /// `node` is proven gone but `withdrawn` are withdrawn already (the cap): left to the node
    /// lifecycle controller unless a slot frees.
    Capped {
        /// The node.
        node: NodeName,
        /// The nodes holding the slots.
        withdrawn: Vec<NodeName>,
    },
    /// `node` showed life after its withdrawal: its kubelet sets its Pods ready again; it no
    /// longer counts against the cap.
    Returned {
        /// The node.
        node: NodeName,
        /// How long it was withdrawn.
        after: Duration,
    },
    /// The node lifecycle controller has taken `node` over (its `Ready` is no longer True) or
    /// it was deleted: its slot is free.
    HandedOver {
        /// The node.
        node: NodeName,
    },
}

/// One agent, as a reporter.
#[derive(Debug)]
struct Reporter {
    /// When its Lease was last seen renewed (or first seen).
    seen: Instant,
    /// Whom it lists, and since when (first seen listed, without a gap).
    lists: BTreeMap<NodeName, Instant>,
}

/// Where a node stands with the controller.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Standing {
    /// Nothing done.
    Normal,
    /// Withdrawn at this instant.
    Withdrawn(Instant),
    /// Proven gone, not withdrawn for the cap.
    Capped,
}

/// One node, as a possible suspect.
#[derive(Debug)]
struct Suspect {
    /// Its last sign of life (kubelet or agent Lease renewal) this controller saw.
    life: Option<Instant>,
    standing: Standing,
}

impl Default for Suspect {
    fn default() -> Self {
        Suspect {
            life: None,
            standing: Standing::Normal,
        }
    }
}

/// The decisions' state.
#[derive(Debug)]
pub struct Tracker {
    config: TrackerConfig,
    reporters: BTreeMap<NodeName, Reporter>,
    suspects: BTreeMap<NodeName, Suspect>,
    out: VecDeque<Decision>,
}

impl Tracker {
    /// A controller that has seen nothing yet.
    pub fn new(config: TrackerConfig) -> Self {
        Tracker {
            config: TrackerConfig {
                min_quorum: config.min_quorum.max(2),
                ..config
            },
            reporters: BTreeMap::new(),
            suspects: BTreeMap::new(),
            out: VecDeque::new(),
        }
    }

    /// `node`'s agent Lease as the watch delivered it: `renewed` when its resourceVersion moved
    /// since this controller last saw it (false the first time: a Lease in the initial list
    /// may be long dead).
    pub fn handle_agent_lease(
        &mut self,
        now: Instant,
        node: NodeName,
        report: &Report,
        renewed: bool,
    ) {
        let first = !self.reporters.contains_key(&node);
        let r = self.reporters.entry(node.clone()).or_insert(Reporter {
            seen: now,
            lists: BTreeMap::new(),
        });
        if renewed || first {
            r.seen = now;
        }
        r.lists.retain(|n, _| report.unreachable.contains(n));
        for n in &report.unreachable {
            if *n != node {
                r.lists.entry(n.clone()).or_insert(now);
            }
        }
        if renewed {
            self.life(now, &node);
        }
        self.evaluate(now);
    }

    /// `node`'s agent Lease was deleted (the agent was uninstalled): it reports nothing.
    pub fn handle_agent_lease_deleted(&mut self, now: Instant, node: &NodeName) {
        self.reporters.remove(node);
        self.evaluate(now);
    }

    /// `node`'s kubelet Lease (`kube-node-lease`), `renewed` as for
    /// [`Self::handle_agent_lease`].
    pub fn handle_kubelet_lease(&mut self, now: Instant, node: NodeName, renewed: bool) {
        if renewed {
            self.life(now, &node);
            self.evaluate(now);
        }
    }

    /// `node`'s `Ready` condition (`None`: Unknown or absent). Not True means the node
    /// lifecycle controller (or the kubelet) has acted: a withdrawal is handed over.
    pub fn handle_node_ready(&mut self, now: Instant, node: &NodeName, ready: Option<bool>) {
        if ready != Some(true) {
            self.hand_over(node);
            self.evaluate(now);
        }
    }

    /// `node` was deleted.
    pub fn handle_node_deleted(&mut self, now: Instant, node: &NodeName) {
        self.hand_over(node);
        self.suspects.remove(node);
        self.reporters.remove(node);
        self.evaluate(now);
    }

    /// Re-evaluates at a deadline [`Self::poll_timeout`] gave (reporters going stale change
    /// the quorum).
    pub fn handle_timeout(&mut self, now: Instant) {
        self.evaluate(now);
    }

    /// The next decision, if any.
    pub fn poll_decision(&mut self) -> Option<Decision> {
        self.out.pop_front()
    }

    /// When a reporter next goes stale (call [`Self::handle_timeout`] then).
    pub fn poll_timeout(&self, now: Instant) -> Option<Instant> {
        self.reporters
            .values()
            .map(|r| r.seen + self.config.reporter_fresh)
            .filter(|t| *t > now)
            .min()
    }

    /// The nodes withdrawn now, sorted.
    pub fn withdrawn(&self) -> Vec<NodeName> {
        self.suspects
            .iter()
            .filter(|(_, s)| matches!(s.standing, Standing::Withdrawn(_)))
            .map(|(n, _)| n.clone())
            .collect()
    }

    fn life(&mut self, now: Instant, node: &NodeName) {
        let s = self.suspects.entry(node.clone()).or_default();
        s.life = Some(now);
        match std::mem::replace(&mut s.standing, Standing::Normal) {
            Standing::Withdrawn(at) => self.out.push_back(Decision::Returned {
                node: node.clone(),
                after: now.saturating_duration_since(at),
            }),
            Standing::Capped | Standing::Normal => {}
        }
    }

    fn hand_over(&mut self, node: &NodeName) {
        if let Some(s) = self.suspects.get_mut(node)
            && s.standing != Standing::Normal
        {
            let was_withdrawn = matches!(s.standing, Standing::Withdrawn(_));
            s.standing = Standing::Normal;
            // Not withdrawn again on the reports that are there now.
            s.life = s.life.max(
                self.reporters
                    .values()
                    .flat_map(|r| r.lists.get(node))
                    .copied()
                    .max(),
            );
            if was_withdrawn {
                self.out
                    .push_back(Decision::HandedOver { node: node.clone() });
            }
        }
    }

    /// Withdraws every node a quorum proves gone, as far as the cap allows.
    fn evaluate(&mut self, now: Instant) {
        let fresh: BTreeSet<&NodeName> = self
            .reporters
            .iter()
            .filter(|(_, r)| now.saturating_duration_since(r.seen) < self.config.reporter_fresh)
            .map(|(n, _)| n)
            .collect();
        let listed: BTreeSet<NodeName> = fresh
            .iter()
            .flat_map(|n| self.reporters[*n].lists.keys())
            .cloned()
            .collect();
        for suspect in listed {
            let standing = self.suspects.get(&suspect).map(|s| s.standing);
            if matches!(standing, Some(Standing::Withdrawn(_))) {
                continue;
            }
            let life = self.suspects.get(&suspect).and_then(|s| s.life);
            let expected = fresh.iter().filter(|n| ***n != suspect).count();
            let reporters: Vec<NodeName> = fresh
                .iter()
                .filter(|n| ***n != suspect)
                .filter(|n| {
                    self.reporters[**n]
                        .lists
                        .get(&suspect)
                        .is_some_and(|since| life.is_none_or(|l| *since > l))
                })
                .map(|n| (*n).clone())
                .collect();
            let proven =
                reporters.len() >= self.config.min_quorum && reporters.len() * 2 > expected;
            self.suspects.entry(suspect.clone()).or_default();
            if !proven {
                // A capped node stays capped (one Capped decision) until it shows life; it is
                // withdrawn only on a quorum, when a slot frees.
                continue;
            }
            let withdrawn: Vec<NodeName> = self.withdrawn();
            let s = self.suspects.get_mut(&suspect).expect("inserted");
            if withdrawn.len() < self.config.max_withdrawn {
                s.standing = Standing::Withdrawn(now);
                self.out.push_back(Decision::Withdraw {
                    node: suspect,
                    reporters,
                    expected,
                });
            } else if s.standing != Standing::Capped {
                s.standing = Standing::Capped;
                self.out.push_back(Decision::Capped {
                    node: suspect,
                    withdrawn,
                });
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const S: Duration = Duration::from_secs(1);

    fn n(s: &str) -> NodeName {
        s.into()
    }

    fn report(nodes: &[&str]) -> Report {
        Report::of(nodes.iter().map(|s| n(s)))
    }

    /// A controller that has seen `nodes`' agent Leases renewed, each reporting nobody.
    fn world(nodes: &[&str], config: TrackerConfig) -> (Tracker, Instant) {
        let t0 = Instant::now();
        let mut t = Tracker::new(config);
        for node in nodes {
            t.handle_agent_lease(t0, n(node), &Report::default(), true);
        }
        (t, t0)
    }

    fn decisions(t: &mut Tracker) -> Vec<Decision> {
        std::iter::from_fn(|| t.poll_decision()).collect()
    }

    fn withdrawn_nodes(d: &[Decision]) -> Vec<&str> {
        d.iter()
            .filter_map(|d| match d {
                Decision::Withdraw { node, .. } => Some(node.as_str()),
                _ => None,
            })
            .collect()
    }

    #[test]
    fn a_node_both_other_agents_of_three_list_is_withdrawn() {
        let (mut t, t0) = world(&["a", "b", "c"], TrackerConfig::default());
        t.handle_agent_lease(t0 + S, n("a"), &report(&["c"]), true);
        assert_eq!(decisions(&mut t), vec![], "one report is no quorum");
        t.handle_agent_lease(t0 + S, n("b"), &report(&["c"]), true);
        assert_eq!(
            decisions(&mut t),
            vec![Decision::Withdraw {
                node: n("c"),
                reporters: vec![n("a"), n("b")],
                expected: 2,
            }]
        );
        assert_eq!(t.withdrawn(), vec![n("c")]);
    }

    #[test]
    fn one_compromised_agent_listing_every_peer_withdraws_nobody() {
        let (mut t, t0) = world(&["a", "b", "c", "d", "e"], TrackerConfig::default());
        for i in 1..20 {
            t.handle_agent_lease(t0 + S * i, n("e"), &report(&["a", "b", "c", "d"]), true);
        }
        assert_eq!(decisions(&mut t), vec![]);
    }

    #[test]
    fn an_observer_cut_off_from_the_segment_withdraws_nobody_even_with_a_second_one() {
        // Two of five agents list everyone: no majority for anyone.
        let (mut t, t0) = world(&["a", "b", "c", "d", "e"], TrackerConfig::default());
        t.handle_agent_lease(t0 + S, n("d"), &report(&["a", "b", "c", "e"]), true);
        t.handle_agent_lease(t0 + S, n("e"), &report(&["a", "b", "c", "d"]), true);
        assert_eq!(withdrawn_nodes(&decisions(&mut t)), Vec::<&str>::new());
    }

    #[test]
    fn a_two_node_cluster_never_withdraws() {
        let (mut t, t0) = world(&["a", "b"], TrackerConfig::default());
        t.handle_agent_lease(t0 + S, n("a"), &report(&["b"]), true);
        t.handle_timeout(t0 + S * 30);
        assert_eq!(decisions(&mut t), vec![]);
    }

    #[test]
    fn a_kubelet_renewal_returns_a_withdrawn_node_and_the_same_reports_do_not_withdraw_it_again() {
        let (mut t, t0) = world(&["a", "b", "c"], TrackerConfig::default());
        t.handle_agent_lease(t0 + S, n("a"), &report(&["c"]), true);
        t.handle_agent_lease(t0 + S, n("b"), &report(&["c"]), true);
        assert_eq!(withdrawn_nodes(&decisions(&mut t)), ["c"]);
        t.handle_kubelet_lease(t0 + S * 4, n("c"), true);
        assert_eq!(
            decisions(&mut t),
            vec![Decision::Returned {
                node: n("c"),
                after: S * 3,
            }]
        );
        // The reports stay up (say the segment still does not reach it); renewals of the
        // reporters re-evaluate, and nothing is withdrawn while the node shows life.
        t.handle_agent_lease(t0 + S * 5, n("a"), &report(&["c"]), true);
        t.handle_agent_lease(t0 + S * 5, n("b"), &report(&["c"]), true);
        assert_eq!(decisions(&mut t), vec![]);
        assert!(t.withdrawn().is_empty());
    }

    #[test]
    fn reports_that_began_after_the_last_sign_of_life_withdraw_again() {
        let (mut t, t0) = world(&["a", "b", "c"], TrackerConfig::default());
        t.handle_agent_lease(t0 + S, n("c"), &Report::default(), true);
        // c came back, then died again: the agents cleared their reports and list it anew.
        t.handle_agent_lease(t0 + S * 2, n("a"), &report(&["c"]), true);
        t.handle_agent_lease(t0 + S * 2, n("b"), &report(&["c"]), true);
        assert_eq!(withdrawn_nodes(&decisions(&mut t)), ["c"]);
    }

    #[test]
    fn a_suspects_own_agent_renewal_voids_the_reports_that_began_before_it() {
        // An agent in a crash loop on a live node writes its Lease at every start.
        let (mut t, t0) = world(&["a", "b", "c"], TrackerConfig::default());
        t.handle_agent_lease(t0 + S, n("a"), &report(&["c"]), true);
        t.handle_agent_lease(t0 + S * 2, n("c"), &Report::default(), true);
        t.handle_agent_lease(t0 + S * 3, n("b"), &report(&["c"]), true);
        assert_eq!(
            decisions(&mut t),
            vec![],
            "a's report began before c's renewal"
        );
    }

    #[test]
    fn at_most_max_withdrawn_nodes_are_withdrawn_and_a_capped_one_follows_when_a_slot_frees() {
        let config = TrackerConfig {
            max_withdrawn: 1,
            ..TrackerConfig::default()
        };
        let (mut t, t0) = world(&["a", "b", "c", "d", "e"], config);
        for r in ["a", "b", "c"] {
            t.handle_agent_lease(t0 + S, n(r), &report(&["d", "e"]), true);
        }
        assert_eq!(
            decisions(&mut t),
            vec![
                Decision::Withdraw {
                    node: n("d"),
                    reporters: vec![n("a"), n("b"), n("c")],
                    expected: 4,
                },
                Decision::Capped {
                    node: n("e"),
                    withdrawn: vec![n("d")],
                },
            ]
        );
        for r in ["a", "b", "c"] {
            t.handle_agent_lease(t0 + S * 39, n(r), &report(&["d", "e"]), true);
        }
        assert_eq!(decisions(&mut t), vec![], "e waits for a slot");
        t.handle_node_ready(t0 + S * 40, &n("d"), None);
        let d = decisions(&mut t);
        assert_eq!(d[0], Decision::HandedOver { node: n("d") });
        assert_eq!(withdrawn_nodes(&d), ["e"], "{d:?}");
    }

    #[test]
    fn reporters_whose_leases_expired_stop_counting_and_the_rest_then_make_the_quorum() {
        // Three of five die at once: two reports of four fresh reporters is no majority until
        // the dead agents' Leases have gone stale.
        let config = TrackerConfig {
            max_withdrawn: 3,
            ..TrackerConfig::default()
        };
        let (mut t, t0) = world(&["a", "b", "c", "d", "e"], config.clone());
        t.handle_agent_lease(t0 + S, n("a"), &report(&["c", "d", "e"]), true);
        t.handle_agent_lease(t0 + S, n("b"), &report(&["c", "d", "e"]), true);
        assert_eq!(decisions(&mut t), vec![]);
        let due = t.poll_timeout(t0 + S).expect("a deadline");
        assert_eq!(due, t0 + config.reporter_fresh, "c, d and e go stale then");
        t.handle_timeout(due);
        assert_eq!(withdrawn_nodes(&decisions(&mut t)), ["c", "d", "e"]);
    }

    #[test]
    fn a_replica_started_after_the_crash_takes_no_lease_of_its_first_list_for_life() {
        let t0 = Instant::now();
        let mut t = Tracker::new(TrackerConfig::default());
        t.handle_agent_lease(t0, n("c"), &Report::default(), false);
        t.handle_kubelet_lease(t0, n("c"), false);
        t.handle_agent_lease(t0, n("a"), &report(&["c"]), false);
        t.handle_agent_lease(t0, n("b"), &report(&["c"]), false);
        assert_eq!(withdrawn_nodes(&decisions(&mut t)), ["c"]);
    }

    #[test]
    fn an_agent_listing_itself_is_ignored() {
        let (mut t, t0) = world(&["a", "b", "c"], TrackerConfig::default());
        t.handle_agent_lease(t0 + S, n("c"), &report(&["c"]), true);
        t.handle_agent_lease(t0 + S, n("a"), &report(&["c"]), true);
        assert_eq!(decisions(&mut t), vec![]);
    }

    #[test]
    fn a_min_quorum_below_two_is_raised_to_two() {
        let config = TrackerConfig {
            min_quorum: 1,
            ..TrackerConfig::default()
        };
        let (mut t, t0) = world(&["a", "b"], config);
        t.handle_agent_lease(t0 + S, n("a"), &report(&["b"]), true);
        assert_eq!(decisions(&mut t), vec![]);
    }
}
