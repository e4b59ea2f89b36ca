//! The cluster world most agent tests start from: three Ready nodes, Service `default/web` with
//! its endpoint on node-a, and an agent on every node.
//!
//! Why shared: a dozen tests built it line by line, each slightly differently named; the
//! tests now say only what they vary (the API server, the VIPs, the agents' flags).

use std::time::Duration;

use announcer_tests::env::{
    ApiKind,
    cluster::{Cluster, rendezvous_owner},
};

/// The nodes of the three-node worlds.
pub const NODES: [&str; 3] = ["node-a", "node-b", "node-c"];

/// A 2 s Lease renewed every second, so an outage or a refused renewal outlasts it within a
/// short test; lenient death detection (ten missed heartbeats, 1 s) so that a loaded host does
/// not fake a dead peer.
pub const SHORT_LEASE: [&str; 6] = [
    "--lease-duration",
    "2s",
    "--lease-renew",
    "1s",
    "--heartbeat-misses",
    "10",
];

/// The API server of `api` with the Ready [`NODES`], no agents yet. The server is in the name:
/// a test on both servers runs both at once.
pub async fn three_nodes(api: ApiKind, name: &str) -> Cluster {
    let c = Cluster::start_on(api, &format!("{name}-{api}")).await;
    for n in NODES {
        c.add_node(n, &[], true).await;
    }
    c
}

/// [`three_nodes`] with Service `default/web` (`vips`, its one ready endpoint on node-a) and
/// an agent with `args` on every node; returns without waiting for them.
pub async fn web(api: ApiKind, name: &str, vips: &[&str], args: &[&str]) -> Cluster {
    let mut c = three_nodes(api, name).await;
    c.add_service("default", "web", vips, false).await;
    c.set_endpoints("default", "web", &[("node-a", true)]).await;
    for n in NODES {
        c.start_agent(n, args);
    }
    c
}

/// [`web`], returned once (within `timeout`) every VIP is on its rendezvous owner and every
/// agent trusts the API.
pub async fn settled_web(
    api: ApiKind,
    name: &str,
    vips: &[&str],
    args: &[&str],
    timeout: Duration,
) -> Cluster {
    let c = web(api, name, vips, args).await;
    c.wait_for("every VIP on its rendezvous owner", timeout, |c| {
        c.settled(vips, &NODES)
    })
    .await;
    c.wait_for("every agent trusts the API", timeout, |c| c.api_ok(true))
        .await;
    c
}

/// The rendezvous owner of `vip` among [`NODES`] once `gone` is: who must take over from it.
pub fn successor(vip: &str, gone: &str) -> String {
    let rest: Vec<&str> = NODES.iter().copied().filter(|n| *n != gone).collect();
    rendezvous_owner(vip, &rest)
}

/// Every agent loses the API (`cut_off`), then the owner of `vip` is SIGKILLed: its successor
/// must take the VIP over without the API (`how`: "with the API down"), and keep it once
/// `restore` has brought the API back.
pub async fn owner_crash_fails_over_without_the_api(
    c: &mut Cluster,
    vip: &str,
    how: &str,
    timeout: Duration,
    cut_off: impl FnOnce(&Cluster),
    restore: impl FnOnce(&Cluster),
) {
    let top = rendezvous_owner(vip, &NODES);
    cut_off(c);
    c.wait_for("every agent reports the API down", timeout, |c| {
        c.api_ok(false)
    })
    .await;
    c.kill(&top);
    let next = successor(vip, &top);
    c.wait_for(
        &format!("{next} takes over from the crashed {top} {how}"),
        timeout,
        |c| c.owners(vip) == [next.as_str()],
    )
    .await;
    restore(c);
    c.hold(
        &format!("{next} keeps it once the API is back"),
        Duration::from_secs(3),
        |c| c.owners(vip) == [next.as_str()],
    )
    .await;
}
