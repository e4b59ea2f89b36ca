//! End to end as a user of a LoadBalancer Service sees it: HTTP from the client to the VIP,
//! through the real kube-proxy (nftables) on the node that owns the VIP, to real Pods (their
//! own namespaces and addresses) whose EndpointSlices the real endpointslice controller writes
//! (see `announcer_tests::env::lan::datapath`). Correctness only: waits are generous bounds,
//! the timings are the failover bench's `crash-e2e-*` scenarios. Needs root and the Kubernetes
//! binaries (`cargo xtask setup`); never skips.

use std::{
    net::{IpAddr, SocketAddr},
    time::Duration,
};

use announcer_tests::env::{
    ApiKind,
    lan::{
        Testbed, TestbedConfig,
        datapath::{
            Announcer, DataPath, HttpClient, SERVICE_PORT, add_http_service, fetch, http_outcome,
            proxy_log_tail, wait_service_ready,
        },
        vip4,
    },
};

/// Generous bound for anything the agents, kube-proxy or the controllers have to do.
const T: Duration = Duration::from_secs(60);

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn http_through_kube_proxy_recovers_after_the_owner_crashes_with_local_policy() {
    let mut tb = Testbed::start(TestbedConfig {
        nodes: 3,
        tag: "e2ehttp".into(),
        api: ApiKind::Kube,
        ..Default::default()
    })
    .await;
    let mut dp = DataPath::install(&mut tb).expect("kube-proxy on every node");
    let nodes = tb.nodes();
    let all: Vec<&str> = nodes.iter().map(String::as_str).collect();
    dp.add_pods(&tb, "web", &all).expect("one Pod per node");
    let vip = IpAddr::V4(vip4(60));
    add_http_service(tb.kube(), "web", vip, true, "web", Announcer::OURS)
        .await
        .expect("the Service");
    wait_service_ready(&tb, "web", vip, &all, T).expect("endpoints and kube-proxy rules");
    tb.start_agents(&[]);
    let owner = tb.wait_owner(vip, T);
    let target = SocketAddr::new(vip, SERVICE_PORT);

    // Local policy: the owner's kube-proxy sends the client to the owner's own Pod.
    let mut body = None;
    tb.wait_for(
        &format!("HTTP through {target} answered by web-{owner} (last: {body:?})"),
        T,
        |tb| {
            body = fetch(tb.client(), target);
            body.as_deref() == Some(format!("web-{owner}").as_str())
        },
    );

    let client = HttpClient::start(tb.client(), target);
    std::thread::sleep(Duration::from_secs(1));
    // Marked once the link is down: a request sent after that cannot reach the old owner.
    tb.crash(&owner);
    let crashed = client.mark(&format!("crash {owner}"));
    let mut recovered = None;
    tb.wait_for(
        &format!("an HTTP request sent after the crash of {owner} answered by another Pod"),
        T,
        |_| {
            recovered = client
                .samples_since(crashed)
                .into_iter()
                .find(|s| s.ok)
                .and_then(|s| s.pod);
            recovered.is_some()
        },
    );
    // Keep requesting a moment, for the figures printed below.
    std::thread::sleep(Duration::from_secs(2));
    let until = client.now();
    let timeline = client.stop();
    let o = http_outcome(&timeline.samples, crashed, until);
    let new_owner = tb.wait_owner(vip, T);
    eprintln!(
        "owner {owner} -> {new_owner}; first answer by {recovered:?}; {o:?}; kube-proxy on \
         {new_owner}:\n{}",
        proxy_log_tail(&tb, &new_owner)
    );
    let pod = recovered.expect("an answer");
    assert_ne!(
        pod,
        format!("web-{owner}"),
        "the crashed node's Pod is unreachable: another Pod answered"
    );
    assert_eq!(
        pod,
        format!("web-{new_owner}"),
        "Local policy: the new owner's own Pod answers"
    );
    assert!(
        timeline.samples.iter().any(|s| s.sent < crashed && s.ok),
        "HTTP through the VIP worked before the crash"
    );
}
