//! Agents on a real control plane through real faults (the in-repo server's injected ones are
//! in `outage`): kube-apiserver SIGSTOPped (every connection hangs, nothing is refused),
//! SIGKILLed and started again (a new watch cache), and a Service removed from etcd behind
//! the agents' watches while the history they would resume from is compacted away (so their
//! watches resume with 410 Gone and must relist to learn of it).
//!
//! The agents run with lenient death detection (1 to 1.5 s) so that a loaded host does not fake a
//! dead peer, as in `outage`. With kube-apiserver SIGKILLed every request is refused at once,
//! so a 2 s Lease (and a shorter test) will do; a SIGSTOPped one fails nothing, it only hangs,
//! so those tests keep the default Lease (10 s, renewed every 3 s: a hung renewal counts as
//! failed after a renewal period, and the Lease must outlast three of them) and stop it for
//! longer than that.

use std::time::Duration;

use announcer_tests::env::{
    ApiKind,
    cluster::{Cluster, rendezvous_owner},
};

use crate::world::{NODES, SHORT_LEASE, owner_crash_fails_over_without_the_api, settled_web};

/// Generous: convergence takes about a second, a real control plane adds its latency, and the
/// host may be loaded.
const T: Duration = Duration::from_secs(20);
/// kube's watcher backoff tops out at 30 s.
const RECOVERY: Duration = Duration::from_secs(60);
/// Longer than the default Lease duration (10 s).
const STOPPED: Duration = Duration::from_secs(12);
/// Default Lease; lenient death detection (1.5 s): these tests hold ownership still for 12 s
/// next to a stopped API server on a loaded 2-core host, where CI once saw one agent's
/// heartbeats pause for over 750 ms (`10` misses) and a peer take its VIP.
const DEFAULT_LEASE: [&str; 2] = ["--heartbeat-misses", "20"];
async fn cluster(name: &str, vips: &[&str], args: &[&str]) -> Cluster {
    settled_web(ApiKind::Kube, name, vips, args, T).await
}

fn kube(c: &Cluster) -> &announcer_tests::env::kube::KubeControlPlane {
    c.kube().expect("a real control plane")
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_stopped_kube_apiserver_changes_no_ownership() {
    let vips = ["10.0.30.1", "10.0.30.2", "10.0.30.3", "fd00::30:4"];
    let c = cluster("sigstop", &vips, &DEFAULT_LEASE).await;

    kube(&c).pause_apiserver();
    c.wait_for("every agent reports the API down", T, |c| c.api_ok(false))
        .await;
    c.hold("ownership unchanged while it is stopped", STOPPED, |c| {
        c.settled(&vips, &NODES)
    })
    .await;
    kube(&c).resume_apiserver();
    c.wait_for("every agent trusts the API again", RECOVERY, |c| {
        c.api_ok(true)
    })
    .await;
    c.hold(
        "ownership unchanged after it continued",
        Duration::from_secs(3),
        |c| c.settled(&vips, &NODES),
    )
    .await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_owner_crash_while_kube_apiserver_is_stopped_still_fails_over() {
    const VIP: &str = "10.0.31.1";
    let mut c = cluster("sigstop-crash", &[VIP], &DEFAULT_LEASE).await;
    owner_crash_fails_over_without_the_api(
        &mut c,
        VIP,
        "with the API stopped",
        T,
        |c| kube(c).pause_apiserver(),
        |c| kube(c).resume_apiserver(),
    )
    .await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn after_a_kube_apiserver_restart_the_agents_see_new_services() {
    let vips = ["10.0.32.1", "10.0.32.2"];
    let mut c = cluster("restart", &vips, &SHORT_LEASE).await;

    c.kube_mut().expect("real").kill_apiserver();
    c.wait_for("every agent reports the API down", T, |c| c.api_ok(false))
        .await;
    c.kube_mut()
        .expect("real")
        .start_apiserver()
        .await
        .unwrap_or_else(|e| panic!("kube-apiserver restarts: {e}"));
    c.wait_for("every agent trusts the API again", RECOVERY, |c| {
        c.api_ok(true)
    })
    .await;
    assert!(
        c.settled(&vips, &NODES),
        "ownership moved: {:?}",
        c.ownership()
    );

    const NEW: &str = "10.0.32.9";
    c.add_service("default", "new", &[NEW], false).await;
    c.set_endpoints("default", "new", &[("node-b", true)]).await;
    let owner = rendezvous_owner(NEW, &NODES);
    c.wait_for(
        &format!("{owner} announces a Service created after the restart"),
        T,
        |c| c.owners(NEW) == [owner.as_str()],
    )
    .await;
}

/// The Service's object is deleted in etcd while kube-apiserver is down, and etcd is compacted
/// past the agents' last resourceVersion: their watches resume with 410 Gone (the new watch
/// cache starts after it), so only a relist can tell them the Service is gone.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_service_deleted_behind_compacted_watches_is_released_after_the_relist() {
    const GONE: &str = "10.0.33.1";
    const KEPT: &str = "10.0.33.2";
    let mut c = cluster("compaction", &[GONE], &SHORT_LEASE).await;
    c.add_service("default", "kept", &[KEPT], false).await;
    c.set_endpoints("default", "kept", &[("node-b", true)])
        .await;
    let kept_owner = rendezvous_owner(KEPT, &NODES);
    c.wait_for("the second Service announced", T, |c| {
        c.owners(KEPT) == [kept_owner.as_str()]
    })
    .await;

    let cp = c.kube_mut().expect("real");
    cp.kill_apiserver();
    cp.etcd_delete("/registry/services/specs/default/web")
        .unwrap_or_else(|e| panic!("{e}"));
    let compacted = cp.compact_etcd().unwrap_or_else(|e| panic!("{e}"));
    cp.start_apiserver()
        .await
        .unwrap_or_else(|e| panic!("kube-apiserver restarts: {e}"));

    c.wait_for(
        &format!(
            "nobody announces {GONE} once the watches relisted (etcd compacted at {compacted})"
        ),
        RECOVERY,
        |c| c.owners(GONE).is_empty(),
    )
    .await;
    assert_eq!(
        c.owners(KEPT),
        [kept_owner.as_str()],
        "the other Service keeps its owner through the relist"
    );
}
