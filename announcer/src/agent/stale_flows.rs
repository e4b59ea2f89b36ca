//! Sweeping this node's conntrack table of the flows kube-proxy DNATed to a dead peer's Pods,
//! while this node lists the peer unreachable ([`super::unreachable`]).
//!
//! Why: between a node's crash and kube-proxy's removal of its endpoints (about a second with
//! fast endpoint withdrawal, the node lifecycle controller's 40–50 s without), every node's
//! kube-proxy keeps sending a share of new connections to the dead Pods. Each of those leaves
//! an unreplied `SYN_SENT` entry for 120 s, and a client that reuses a source port in that time
//! is sent to the dead Pod again by the stale entry, whatever kube-proxy's rules say by then:
//! measured in the failover bench, bursts of connection timeouts 5–55 s after the crash
//! ([`crate::agent::net::conntrack`] has the mechanism and the upstream issue). kube-proxy
//! clears such entries for UDP only.
//!
//! What: every [`SWEEP_EVERY`] for [`SWEEP_FOR`] after a peer is first listed (and not after it
//! is unlisted), the unreplied TCP entries whose reply comes from an endpoint address on that
//! node (every EndpointSlice's, not only our Services': kube-proxy DNATs ClusterIP traffic the
//! same way) are deleted. [`SWEEP_FOR`] is conntrack's `SYN_SENT` timeout: no entry made
//! before the listing outlives it, and kube-proxy stops making new ones once the endpoint
//! leaves (well within it, with or without withdrawal).
//!
//! Pitfall: an entry is unreplied for the round trip of every healthy connection too. A sweep
//! that catches one towards a live Pod costs that connection its SYN-ACK (the client
//! retransmits the SYN after 1 s, load-balanced afresh). So sweeps only target a node this one
//! proved unreachable (its heartbeats, data plane and kernel silent), where no SYN-ACK comes.

use std::{
    collections::{BTreeMap, BTreeSet},
    net::IpAddr,
    time::{Duration, Instant},
};

use k8s_openapi::api::discovery::v1::EndpointSlice;
use kube::runtime::reflector::Store;
use tokio::sync::watch;

use super::{
    metrics::Recorder,
    net::conntrack::{Conntrack, Swept},
    shutdown::Shutdown,
};
use crate::election::NodeName;

/// How often a listed peer's flows are swept: kube-proxy's `minSyncPeriod` (1 s), so that the
/// entries made before its resync are gone about a second after it.
pub const SWEEP_EVERY: Duration = Duration::from_secs(1);
/// How long after the listing: `nf_conntrack_tcp_timeout_syn_sent` (120 s).
pub const SWEEP_FOR: Duration = Duration::from_secs(120);

/// When each listed peer was first listed; which are due.
#[derive(Debug, Default)]
pub struct Schedule {
    listed: BTreeMap<NodeName, Instant>,
}

impl Schedule {
    /// The peers listed now: new ones start their [`SWEEP_FOR`], unlisted ones are dropped
    /// (listed again later, they start again).
    pub fn set_listed(&mut self, now: Instant, nodes: &BTreeSet<NodeName>) {
        self.listed.retain(|n, _| nodes.contains(n));
        for n in nodes {
            self.listed.entry(n.clone()).or_insert(now);
        }
    }

    /// The peers to sweep now: listed less than [`SWEEP_FOR`] ago.
    pub fn due(&self, now: Instant) -> Vec<NodeName> {
        self.listed
            .iter()
            .filter(|(_, since)| now.saturating_duration_since(**since) < SWEEP_FOR)
            .map(|(n, _)| n.clone())
            .collect()
    }
}

/// Every endpoint address on `node`, in every EndpointSlice of `slices`.
pub fn endpoint_addresses(
    slices: &[impl AsRef<EndpointSlice>],
    node: &NodeName,
) -> BTreeSet<IpAddr> {
    slices
        .iter()
        .flat_map(|s| s.as_ref().endpoints.iter().flatten())
        .filter(|e| e.node_name.as_deref() == Some(node.as_str()))
        .flat_map(|e| e.addresses.iter())
        .filter_map(|a| a.parse().ok())
        .collect()
}

/// Starts the sweeper on `rt`: it follows `listed` (the peers this node lists unreachable)
/// and sweeps their endpoints' flows until `stop`.
pub fn spawn(
    rt: &tokio::runtime::Handle,
    slices: Store<EndpointSlice>,
    mut listed: watch::Receiver<BTreeSet<NodeName>>,
    recorder: Recorder,
    mut stop: Shutdown,
) {
    rt.spawn(async move {
        let mut schedule = Schedule::default();
        let mut tick = tokio::time::interval(SWEEP_EVERY);
        tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
        let mut warned = false;
        loop {
            tokio::select! {
                _ = stop.recv() => return,
                changed = listed.changed() => {
                    if changed.is_err() {
                        return;
                    }
                    schedule.set_listed(Instant::now(), &listed.borrow_and_update());
                }
                _ = tick.tick() => {}
            }
            let due = schedule.due(Instant::now());
            if due.is_empty() {
                continue;
            }
            let state = slices.state();
            let addrs: BTreeSet<IpAddr> = due
                .iter()
                .flat_map(|n| endpoint_addresses(&state, n))
                .collect();
            if addrs.is_empty() {
                continue;
            }
            let swept = tokio::task::spawn_blocking(move || sweep(&addrs)).await;
            match swept {
                Ok(Ok(s)) => {
                    if s.deleted > 0 {
                        tracing::info!(peers = ?due, deleted = s.deleted, "deleted unreplied conntrack entries towards unreachable peers' Pods");
                        recorder.stale_flows_deleted(s.deleted);
                    }
                }
                Ok(Err(e)) => {
                    recorder.stale_flow_sweep_failed();
                    if !warned {
                        warned = true;
                        tracing::warn!(error = %e, "cannot sweep conntrack of the flows towards unreachable peers' Pods (clients reusing a port may time out until the entries expire)");
                    }
                }
                Err(e) => tracing::warn!(error = %e, "the conntrack sweep did not finish"),
            }
        }
    });
}

/// One sweep of every address (blocking: netlink).
fn sweep(addrs: &BTreeSet<IpAddr>) -> Result<Swept, super::net::conntrack::ConntrackError> {
    let mut ct = Conntrack::open()?;
    let mut total = Swept::default();
    for a in addrs {
        let s = ct.delete_unreplied_tcp(*a)?;
        total.deleted += s.deleted;
        total.replied += s.replied;
    }
    Ok(total)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn n(s: &str) -> NodeName {
        NodeName::from(s)
    }

    fn set(names: &[&str]) -> BTreeSet<NodeName> {
        names.iter().map(|s| n(s)).collect()
    }

    #[test]
    fn a_listed_peer_is_swept_for_the_syn_sent_timeout_and_no_longer() {
        let t0 = Instant::now();
        let mut s = Schedule::default();
        s.set_listed(t0, &set(&["node-c"]));
        assert_eq!(s.due(t0), vec![n("node-c")]);
        assert_eq!(
            s.due(t0 + SWEEP_FOR - Duration::from_millis(1)),
            vec![n("node-c")]
        );
        assert!(s.due(t0 + SWEEP_FOR).is_empty());
    }

    #[test]
    fn a_peer_listed_again_keeps_its_first_listing_time() {
        let t0 = Instant::now();
        let mut s = Schedule::default();
        s.set_listed(t0, &set(&["node-c"]));
        s.set_listed(t0 + Duration::from_secs(60), &set(&["node-b", "node-c"]));
        assert_eq!(
            s.due(t0 + SWEEP_FOR + Duration::from_secs(1)),
            vec![n("node-b")]
        );
    }

    #[test]
    fn an_unlisted_peer_is_not_swept_and_starts_again_when_listed_anew() {
        let t0 = Instant::now();
        let mut s = Schedule::default();
        s.set_listed(t0, &set(&["node-c"]));
        s.set_listed(t0 + Duration::from_secs(5), &set(&[]));
        assert!(s.due(t0 + Duration::from_secs(6)).is_empty());
        let t1 = t0 + Duration::from_secs(200);
        s.set_listed(t1, &set(&["node-c"]));
        assert_eq!(s.due(t1 + Duration::from_secs(100)), vec![n("node-c")]);
    }

    #[test]
    fn the_addresses_swept_are_every_slices_endpoints_on_the_node() {
        let slice = |eps: serde_json::Value| -> std::sync::Arc<EndpointSlice> {
            std::sync::Arc::new(
                serde_json::from_value(serde_json::json!({
                    "metadata": {"name": "s"}, "addressType": "IPv4", "endpoints": eps
                }))
                .expect("slice"),
            )
        };
        let slices = vec![
            slice(serde_json::json!([
                {"addresses": ["10.244.3.2"], "nodeName": "node-c"},
                {"addresses": ["10.244.1.2"], "nodeName": "node-a"},
            ])),
            slice(serde_json::json!([
                {"addresses": ["10.244.3.7"], "nodeName": "node-c"},
                {"addresses": ["not-an-ip"], "nodeName": "node-c"},
                {"addresses": ["10.244.9.9"]},
            ])),
        ];
        let got = endpoint_addresses(&slices, &n("node-c"));
        let want: BTreeSet<IpAddr> = ["10.244.3.2", "10.244.3.7"]
            .iter()
            .map(|a| a.parse().unwrap())
            .collect();
        assert_eq!(got, want);
    }
}
