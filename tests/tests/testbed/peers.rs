//! The real peers beside the agent on the real control plane (`env::lan::peers`): MetalLB and
//! kube-vip each announce a VIP of their own that a client on the LAN reaches, and move it
//! when its node crashes. And the API faults of the testbed on the real control plane: an
//! outage and a slow API server, as a process in a node namespace sees them.
//!
//! Not timed: the bounds are generous (the failover bench measures how long it takes).

use std::{
    net::IpAddr,
    time::{Duration, Instant},
};

use announcer_tests::env::{
    ApiKind,
    lan::{BRIDGE_V4, KubeVipTimings, Peer, PeerKind, Testbed, TestbedConfig},
};

/// Generous: the peers start, sync with the API server and elect.
const ANNOUNCED_WITHIN: Duration = Duration::from_secs(90);
/// Generous: memberlist's failure detection, a lease expiry, on a loaded machine.
const FAILOVER_WITHIN: Duration = Duration::from_secs(90);

async fn kube_testbed(tag: &str) -> Testbed {
    Testbed::start(TestbedConfig {
        nodes: 3,
        tag: tag.into(),
        api: ApiKind::Kube,
        ..Default::default()
    })
    .await
}

/// The client reaches `vip` on one node; that node crashes; another node answers it.
fn answers_and_fails_over(tb: &mut Testbed, peer: &Peer, vip: IpAddr) {
    let nodes = tb.nodes();
    let all: Vec<&str> = nodes.iter().map(String::as_str).collect();
    peer.add_service(tb, "peer-web", vip, false, &all);
    let owner = peer.wait_announced(tb, vip, ANNOUNCED_WITHIN);
    assert_eq!(
        tb.ask(vip, Duration::from_secs(2)).as_deref(),
        Some(owner.as_str()),
        "the client reaches {vip} on its announcer {owner}"
    );

    tb.crash(&owner);
    let after = peer.wait_announced(tb, vip, FAILOVER_WITHIN);
    assert_ne!(after, owner, "{vip} moved off the crashed {owner}");
    assert_eq!(
        tb.ask(vip, Duration::from_secs(2)).as_deref(),
        Some(after.as_str()),
        "the client reaches {vip} on {after} after the crash"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn metallb_answers_its_vip_and_fails_over_after_a_crash() {
    let mut tb = kube_testbed("metallb").await;
    let peer = tb.start_metallb();
    let vip = IpAddr::V4(PeerKind::MetalLb.vip4(1));
    answers_and_fails_over(&mut tb, &peer, vip);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn kube_vip_answers_its_vip_and_fails_over_after_a_crash() {
    let mut tb = kube_testbed("kube-vip").await;
    let peer = tb.start_kube_vip(KubeVipTimings::DEFAULTS);
    let vip = IpAddr::V4(PeerKind::KubeVip(KubeVipTimings::DEFAULTS).vip4(1));
    answers_and_fails_over(&mut tb, &peer, vip);
}

/// `curl` of the API server's `/readyz` from inside `node`'s namespace, through the relay
/// the agents use: whether an HTTP answer came (any status: the request is anonymous), and
/// how long it took.
fn api_request_from(tb: &Testbed, node: &str) -> (bool, Duration) {
    let url = format!(
        "https://{BRIDGE_V4}:{}/readyz",
        announcer_tests::env::lan::API_PORT
    );
    let started = Instant::now();
    let out = tb.node_ns(node).exec(&[
        "curl",
        "-sk",
        "-o",
        "/dev/null",
        "-w",
        "%{http_code}",
        "--max-time",
        "10",
        &url,
    ]);
    let code = String::from_utf8_lossy(&out.stdout).trim().to_owned();
    (code != "000" && !code.is_empty(), started.elapsed())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_api_outage_on_the_real_control_plane_fails_the_nodes_api_requests_until_it_ends() {
    let tb = kube_testbed("kube-outage").await;
    assert!(
        api_request_from(&tb, "node-a").0,
        "the API answers before the outage"
    );
    tb.api_outage(true);
    assert!(
        !api_request_from(&tb, "node-a").0,
        "a node's API request fails during the outage"
    );
    tb.api_outage(false);
    assert!(
        api_request_from(&tb, "node-a").0,
        "the API answers after the outage"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn api_latency_on_the_real_control_plane_delays_the_nodes_api_requests() {
    let tb = kube_testbed("kube-latency").await;
    let delay = Duration::from_millis(700);
    tb.api_latency(Some(delay));
    let (ok, took) = api_request_from(&tb, "node-a");
    tb.api_latency(None);
    assert!(ok, "a slow API still answers");
    assert!(
        took >= delay,
        "a request through the slowed path took {took:?}, less than the {delay:?} added"
    );
}
