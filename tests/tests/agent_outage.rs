//! Agents against the in-repo API server while the API server is unreachable for everyone.
//!
//! The design (`announcer::election::core`): while the API cannot be trusted, known Leases do
//! not expire, membership freezes and heartbeats alone decide. So an outage longer than the
//! Lease duration must change no ownership, and a crash during the outage must still fail over.
//! The agents run with a 2 s Lease so that the 5 s outage outlasts it.

use std::time::Duration;

use announcer_tests::{
    apiserver::{Fault, OutageMode},
    cluster::{Cluster, rendezvous_owner},
};

const NODES: [&str; 3] = ["node-a", "node-b", "node-c"];
/// Generous: convergence takes about a second (warm-up, heartbeats), the host may be loaded.
const T: Duration = Duration::from_secs(15);
/// kube's watcher backoff tops out at 30 s.
const RECOVERY: Duration = Duration::from_secs(60);
/// Longer than the Lease duration below.
const OUTAGE: Duration = Duration::from_secs(5);
/// Lease 2 s; lenient death detection (1 s) so that a loaded host does not fake a dead peer.
const ARGS: [&str; 6] = [
    "--lease-duration",
    "2s",
    "--lease-renew",
    "1s",
    "--heartbeat-misses",
    "10",
];

async fn cluster(name: &str, vips: &[&str]) -> Cluster {
    let mut c = Cluster::start(name).await;
    for n in NODES {
        c.add_node(n, &[], true).await;
    }
    c.add_service("default", "web", vips, false).await;
    c.set_endpoints("default", "web", &[("node-a", true)]).await;
    for n in NODES {
        c.start_agent(n, &ARGS);
    }
    c.wait_for("every VIP on its rendezvous owner", T, |c| {
        settled(c, vips, &NODES)
    })
    .await;
    c.wait_for("every agent trusts the API", T, |c| api_ok(c, true))
        .await;
    c
}

fn settled(c: &Cluster, vips: &[&str], nodes: &[&str]) -> bool {
    c.owners_of(vips)
        .iter()
        .all(|(vip, o)| *o == [rendezvous_owner(&vip.to_string(), nodes)])
}

/// Whether every running agent's `/state` says `api_ok == ok`.
fn api_ok(c: &Cluster, ok: bool) -> bool {
    c.nodes()
        .iter()
        .filter_map(|n| c.state(n))
        .all(|s| s["api_ok"] == ok)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn outage_for_all_agents_changes_no_ownership() {
    let vips = ["10.0.20.1", "10.0.20.2", "10.0.20.3", "fd00::20:4"];
    let c = cluster("outage", &vips).await;

    c.api.set_faults(vec![Fault::outage(OutageMode::Refuse)]);
    c.hold("ownership unchanged during the outage", OUTAGE, |c| {
        settled(c, &vips, &NODES)
    })
    .await;
    // The agents did notice (otherwise the hold above proved nothing).
    c.wait_for("every agent reports the API down", T, |c| api_ok(c, false))
        .await;
    c.hold(
        "ownership unchanged during the outage",
        Duration::from_secs(1),
        |c| settled(c, &vips, &NODES),
    )
    .await;

    c.api.clear_faults();
    // Past a Lease duration (2 s): nothing expires when the API comes back. (Until the agent's
    // watch-health bug is fixed, see `api_ok_returns_after_an_outage_without_changes`, the
    // agents keep distrusting the API here, so this does not yet cover trust returning.)
    c.hold(
        "ownership unchanged after the outage",
        Duration::from_secs(3),
        |c| settled(c, &vips, &NODES),
    )
    .await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn owner_crash_during_outage_still_fails_over() {
    const VIP: &str = "10.0.21.1";
    let mut c = cluster("outage-crash", &[VIP]).await;
    let top = rendezvous_owner(VIP, &NODES);

    c.api.set_faults(vec![Fault::outage(OutageMode::Refuse)]);
    c.wait_for("every agent reports the API down", T, |c| api_ok(c, false))
        .await;
    c.kill(&top);
    let rest: Vec<&str> = NODES.iter().copied().filter(|n| *n != top).collect();
    let next = rendezvous_owner(VIP, &rest);
    c.wait_for(
        &format!("{next} takes over from the crashed {top} with the API down"),
        T,
        |c| c.owners(VIP) == [next.as_str()],
    )
    .await;

    c.api.clear_faults();
    c.hold(
        &format!("{next} keeps it once the API is back"),
        Duration::from_secs(3),
        |c| c.owners(VIP) == [next.as_str()],
    )
    .await;
}

/// After an outage, `/state` must say the API is trusted again once the watches are back,
/// even if none of the watched objects changed meanwhile. (The freeze of Lease expiry, the
/// fencing and `api_ok` all depend on it.)
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn api_ok_returns_after_an_outage_without_changes() {
    const VIP: &str = "10.0.22.1";
    let mut c = Cluster::start("outage-recovery").await;
    c.add_node("node-a", &[], true).await;
    c.add_service("default", "web", &[VIP], false).await;
    c.set_endpoints("default", "web", &[("node-a", true)]).await;
    c.start_agent("node-a", &ARGS);
    c.wait_for("node-a owns", T, |c| c.owners(VIP) == ["node-a"])
        .await;
    c.wait_for("the agent trusts the API", T, |c| api_ok(c, true))
        .await;
    c.api.set_faults(vec![Fault::outage(OutageMode::Refuse)]);
    c.wait_for("the agent reports the API down", T, |c| api_ok(c, false))
        .await;
    tokio::time::sleep(Duration::from_secs(2)).await;
    c.api.clear_faults();
    // The watches re-open within kube's watcher backoff (at most 30 s).
    c.wait_for("open watches for the agent again", RECOVERY, |c| {
        c.api
            .open_watches()
            .iter()
            .filter(|w| w.client == "node-a")
            .count()
            >= announcer::agent::kube::watch::Source::ALL.len()
    })
    .await;
    c.wait_for("the agent trusts the API again", T, |c| api_ok(c, true))
        .await;
    assert_eq!(c.owners(VIP), ["node-a"]);
}
