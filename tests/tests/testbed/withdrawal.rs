//! Fast endpoint withdrawal end to end (issue 28): real agents report a crashed node, the
//! withdrawal controller (two replicas, its own ServiceAccount under the admission policy of
//! `deploy/`) sets its Pods' `Ready` False, the real endpointslice controller drops them and
//! kube-proxy stops sending new connections there, long before the node lifecycle controller's
//! grace (40–50 s) would. Correctness only: the bound here ([`FAST`]) is far below that grace so
//! that only the withdrawal can meet it; the timings are the failover bench's
//! `crash-e2e-cluster` cells for `announcer-withdraw`. Needs root and the Kubernetes binaries
//! (`cargo xtask setup`); never skips.

use std::{net::IpAddr, time::Duration};

use announcer_tests::env::{
    ApiKind,
    lan::{
        SERVICE_NAMESPACE, Testbed, TestbedConfig, WITHDRAWN_REASON,
        datapath::{Announcer, DataPath, add_http_service, wait_service_ready},
        opt_in, vip4, withdrawn_pods,
    },
};

/// Generous bound for setup and for anything the controllers have to do.
const T: Duration = Duration::from_secs(60);
/// Well below the node lifecycle controller's grace (40 s, 50 s since 1.32) plus its 5 s
/// monitor period: an endpoint gone within this was withdrawn by us.
const FAST: Duration = Duration::from_secs(20);

/// A 3-node testbed on the real control plane with kube-proxy, one Pod per node behind a
/// `Cluster` Service, the agents and two withdrawer replicas (on the first two nodes); the
/// Services' namespace opted in if `opted_in`. Returns the bed, its data path and the node to
/// crash (the third, which runs no withdrawer).
async fn bed(tag: &str, opted_in: bool) -> (Testbed, DataPath, String) {
    let mut tb = Testbed::start(TestbedConfig {
        nodes: 3,
        tag: tag.into(),
        api: ApiKind::Kube,
        ..Default::default()
    })
    .await;
    let mut dp = DataPath::install(&mut tb).expect("kube-proxy on every node");
    let nodes = tb.nodes();
    let all: Vec<&str> = nodes.iter().map(String::as_str).collect();
    dp.add_pods(&tb, "web", &all).expect("one Pod per node");
    let vip = IpAddr::V4(vip4(61));
    add_http_service(tb.kube(), "web", vip, false, "web", Announcer::OURS)
        .await
        .expect("the Service");
    wait_service_ready(&tb, "web", vip, &all, T).expect("endpoints and kube-proxy rules");
    opt_in(tb.kube(), SERVICE_NAMESPACE, opted_in)
        .await
        .expect("the namespace label");
    tb.start_agents(&[]);
    tb.wait_owner(vip, T);
    for n in &nodes[..2] {
        tb.start_withdrawer(n);
    }
    let victim = nodes[2].clone();
    (tb, dp, victim)
}

/// Whether `node` has a ready endpoint of the `web` Service.
fn ready_on(tb: &Testbed, node: &str) -> bool {
    let client = tb.kube();
    let node = node.to_owned();
    tb.block_on(async move {
        announcer_tests::env::kube::workloads::ready_endpoint_nodes(
            client,
            SERVICE_NAMESPACE,
            "web",
        )
        .await
    })
    .expect("the EndpointSlices")
    .contains(&node)
}

fn withdrawn(tb: &Testbed) -> Vec<(String, String)> {
    let client = tb.kube();
    tb.block_on(async move { withdrawn_pods(client, SERVICE_NAMESPACE).await })
        .expect("the Pods")
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_crashed_nodes_pod_in_an_opted_in_namespace_stops_being_an_endpoint_long_before_the_grace()
 {
    let (mut tb, _dp, victim) = bed("wdcrash", true).await;
    assert!(
        ready_on(&tb, &victim),
        "{victim}'s Pod is an endpoint before the crash"
    );
    tb.crash(&victim);
    tb.wait_for(
        &format!("{victim}'s endpoint of web not ready within {FAST:?} of the crash"),
        FAST,
        |tb| !ready_on(tb, &victim),
    );
    let w = withdrawn(&tb);
    assert_eq!(
        w,
        vec![(format!("web-{victim}"), victim.clone())],
        "exactly the crashed node's Pod is withdrawn, with our reason ({WITHDRAWN_REASON})"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_crash_of_a_node_running_a_withdrawer_replica_is_withdrawn_by_the_other_replica() {
    let (mut tb, _dp, _) = bed("wdreplica", true).await;
    // The first node runs a replica (see `bed`); there is no leader to wait for.
    let victim = tb.nodes()[0].clone();
    tb.crash(&victim);
    tb.wait_for(
        &format!("{victim}'s endpoint of web not ready within {FAST:?} of the crash"),
        FAST,
        |tb| !ready_on(tb, &victim),
    );
    assert_eq!(
        withdrawn(&tb),
        vec![(format!("web-{victim}"), victim.clone())],
        "exactly the crashed node's Pod is withdrawn"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_crashed_nodes_pod_in_a_namespace_that_did_not_opt_in_is_left_to_the_node_lifecycle_controller()
 {
    let (mut tb, _dp, victim) = bed("wdoptout", false).await;
    tb.crash(&victim);
    std::thread::sleep(FAST);
    assert!(
        withdrawn(&tb).is_empty(),
        "no Pod withdrawn in a namespace without the label"
    );
    assert!(
        ready_on(&tb, &victim),
        "{victim}'s endpoint stays until the node lifecycle controller's grace"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_returned_nodes_pod_is_ready_again_and_not_withdrawn_again() {
    let (mut tb, dp, victim) = bed("wdreturn", true).await;
    tb.crash(&victim);
    tb.wait_for(&format!("{victim}'s endpoint withdrawn"), FAST, |tb| {
        !ready_on(tb, &victim)
    });
    dp.revive(&mut tb, &victim).expect("the node returns");
    tb.start_agent(&victim, &[]);
    tb.wait_for(&format!("{victim}'s endpoint ready again"), T, |tb| {
        ready_on(tb, &victim)
    });
    // The withdrawer sees the node's kubelet Lease renewed: it must not act on the reports
    // that were there before.
    for _ in 0..20 {
        std::thread::sleep(Duration::from_millis(500));
        assert!(
            withdrawn(&tb).is_empty(),
            "a returned node's Pod is not withdrawn again"
        );
    }
    assert!(ready_on(&tb, &victim), "{victim}'s endpoint stays ready");
}
