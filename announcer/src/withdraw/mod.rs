//! Fast endpoint withdrawal: the rules that decide when a node is proven gone from the segment
//! and its Pods' readiness may be withdrawn, sans-IO (time is an argument, nothing here talks to
//! the API server or the network).
//!
//! Why: with `externalTrafficPolicy: Cluster`, moving a VIP is half of a failover. Every
//! kube-proxy keeps sending a share of new connections to the dead node's Pods until the node
//! lifecycle controller notices the node (`node-monitor-grace-period`, 40–50 s by default) and
//! sets their `Ready` condition to False. The agents know within a fraction of a second that a
//! node is gone; this module turns what they observe into that same action, and only when the
//! evidence is strong enough that a healthy Pod is never marked not ready.
//!
//! The parts:
//! - [`report`]: what one agent observed, written in its own Lease
//!   ([`report::UNREACHABLE_ANNOTATION`]). An agent lists a peer only when all three of its
//!   heartbeats, its data plane and its *kernel* (ARP or NS for the node's own InternalIP, which
//!   depends on neither our agent nor our program) have gone silent. An agent in a crash loop
//!   on a live node, or a heartbeat port blocked everywhere, leaves the kernel answering, so it
//!   is never listed.
//! - [`tracker`]: what the withdrawal controller decides from every agent's report and every
//!   sign of life: a node is withdrawn only on a quorum of fresh reporters, never more than a
//!   configured number at once, and not again while it shows life.
//!
//! Pitfall: the decision is per node, the action is per Pod, and a Pod's readiness matters to
//! every Service that selects it, to PodDisruptionBudgets and to rollouts, not only to ours.
//! That is why the controller acts only in namespaces that opt in, and only writes `Ready`
//! False: the kubelet's status manager sets it back when the node returns.

pub mod report;
pub mod tracker;

pub use report::{Report, ReportError, UNREACHABLE_ANNOTATION};
pub use tracker::{Decision, Tracker, TrackerConfig};
