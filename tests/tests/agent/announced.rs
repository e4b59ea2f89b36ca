//! The cluster-wide view: the `announcer.dev/Announced` condition on each Service names the
//! node announcing each of its VIPs, follows a failover, and is not rewritten in a steady
//! state. On both API servers (`on_both_api_servers!`).

use std::time::{Duration, Instant};

use announcer::state::announced::{self, CONDITION_TYPE};
use announcer_tests::{env::cluster::Cluster, on_both_api_servers};

use crate::world::{NODES, web};

const VIPS: [&str; 2] = ["10.0.0.5", "fd00::5"];
const T: Duration = Duration::from_secs(20);

/// The condition's (status, entries as "ip node") and its Service's resourceVersion.
async fn condition(c: &Cluster) -> Option<(String, Vec<String>, String)> {
    let svc = c.service("default", "web").await?;
    let rv = svc.metadata.resource_version.clone().unwrap_or_default();
    let cond = svc
        .status?
        .conditions?
        .into_iter()
        .find(|c| c.type_ == CONDITION_TYPE)?;
    let entries = announced::parse(&cond.message)
        .into_iter()
        .map(|e| format!("{} {}", e.ip, e.node))
        .collect();
    Some((cond.status, entries, rv))
}

/// What the agents' `/state` says, in the condition's terms.
fn expected(c: &Cluster) -> Option<Vec<String>> {
    VIPS.iter()
        .map(|v| match c.owners(v).as_slice() {
            [one] => Some(format!("{v} {one}")),
            _ => None,
        })
        .collect()
}

async fn wait_condition_matches_owners(c: &Cluster, what: &str, alive: &[&str]) -> String {
    // Ownership first settles on the rendezvous owners (a node starting later takes its VIPs
    // back), then the condition must say so.
    c.wait_for("every VIP on its rendezvous owner", T, |c| {
        c.settled(&VIPS, alive)
    })
    .await;
    let deadline = Instant::now() + T;
    loop {
        let want = expected(c);
        let got = condition(c).await;
        if let (Some(want), Some((status, entries, rv))) = (&want, &got)
            && status == "True"
            && entries == want
        {
            return rv.clone();
        }
        assert!(
            Instant::now() < deadline,
            "{what}: condition {got:?}, owners {want:?}\n{}",
            c.log_tails()
        );
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
}

/// The web world, agents with lenient death detection (ten missed heartbeats).
async fn cluster(name: &str, api: announcer_tests::env::ApiKind) -> Cluster {
    web(api, name, &VIPS, &["--heartbeat-misses", "10"]).await
}

on_both_api_servers! {
/// Every VIP's entry names the node whose `/state` says it announces it.
async fn the_announced_condition_names_each_vips_owner(api) {
    let c = cluster("announced", api).await;
    wait_condition_matches_owners(&c, "after start", &NODES).await;
}
}

on_both_api_servers! {
/// A crashed owner's entries move to its successor.
async fn the_announced_condition_follows_a_failover(api) {
    let mut c = cluster("announced-fo", api).await;
    wait_condition_matches_owners(&c, "after start", &NODES).await;
    let owner = c.owners(VIPS[0])[0].clone();
    c.kill(&owner);
    c.wait_for("a new owner", T, |c| {
        let o = c.owners(VIPS[0]);
        o.len() == 1 && o[0] != owner
    })
    .await;
    let alive: Vec<&str> = NODES.into_iter().filter(|n| *n != owner).collect();
    wait_condition_matches_owners(&c, "after the failover", &alive).await;
}
}

on_both_api_servers! {
/// Once it says the truth nobody rewrites it: the Service's resourceVersion stays put.
async fn a_settled_announced_condition_is_not_rewritten(api) {
    let c = cluster("announced-calm", api).await;
    let rv = wait_condition_matches_owners(&c, "after start", &NODES).await;
    tokio::time::sleep(Duration::from_secs(5)).await;
    let now = condition(&c).await.map(|(_, _, rv)| rv);
    assert_eq!(now.as_deref(), Some(rv.as_str()), "the Service was rewritten");
}
}

on_both_api_servers! {
/// Another writer's stale entries (a node that claimed a VIP for a moment, then released it,
/// removing what the owner had written) are put right by the owners without any ownership
/// change: each node re-asserts its own entries when the condition disagrees with them.
async fn a_condition_a_stale_writer_emptied_names_the_owners_again(api) {
    use k8s_openapi::api::core::v1::Service;
    use kube::api::{Api, Patch, PatchParams};
    let c = cluster("announced-heal", api).await;
    wait_condition_matches_owners(&c, "after start", &NODES).await;
    let emptied = serde_json::json!({"status": {"conditions": [{
        "type": CONDITION_TYPE,
        "status": "False",
        "reason": announced::REASON_PARTIAL,
        "message": "",
        "lastTransitionTime": "2026-01-01T00:00:00Z",
    }]}});
    Api::<Service>::namespaced(c.client(), "default")
        .patch_status("web", &PatchParams::default(), &Patch::Merge(&emptied))
        .await
        .expect("empty the Announced condition");
    wait_condition_matches_owners(&c, "after a stale writer emptied it", &NODES).await;
}
}
