//! The seed's scenario, on a real control plane: a node crashes (link down, agent and kubelet
//! gone). The agents fail over at once, on their heartbeats; about 40 s later Kubernetes
//! catches up (the node lifecycle controller marks the Node NotReady and its Pods not ready, so
//! the endpointslice controller marks their endpoints not ready). That late news must move
//! nothing again: the VIPs stay with the successors that took them, with no flap. When the
//! node comes back, every VIP settles with a single owner.

use std::{
    collections::BTreeMap,
    net::IpAddr,
    time::{Duration, Instant},
};

use announcer_tests::env::{
    ApiKind,
    kube::NODE_MONITOR_GRACE,
    lan::{ProbeKind, Testbed, TestbedConfig, vip4, vip6},
};
use k8s_openapi::api::{core::v1::Node, discovery::v1::EndpointSlice};
use kube::{Api, api::ListParams};

/// Generous: the agents attach XDP and the host may be loaded.
const T: Duration = Duration::from_secs(30);
/// The node lifecycle controller's grace, plus its monitor period, plus slack.
const NOT_READY_WITHIN: Duration = Duration::from_secs(NODE_MONITOR_GRACE.as_secs() + 30);
/// How long ownership is watched after Kubernetes caught up.
const AFTER: Duration = Duration::from_secs(5);

/// The Node's Ready condition (`True`, `False`, `Unknown`).
async fn node_ready(tb: &Testbed, node: &str) -> Option<String> {
    let n = Api::<Node>::all(tb.kube()).get(node).await.ok()?;
    n.status?
        .conditions?
        .into_iter()
        .find(|c| c.type_ == "Ready")
        .map(|c| c.status)
}

/// Whether every endpoint of Service `svc` on `node` is not ready (and there is one).
async fn endpoints_not_ready(tb: &Testbed, svc: &str, node: &str) -> bool {
    let Ok(slices) = Api::<EndpointSlice>::namespaced(tb.kube(), "default")
        .list(&ListParams::default().labels(&format!("kubernetes.io/service-name={svc}")))
        .await
    else {
        return false;
    };
    let on_node: Vec<bool> = slices
        .items
        .iter()
        .flat_map(|s| s.endpoints.iter().flatten())
        .filter(|e| e.node_name.as_deref() == Some(node))
        .map(|e| e.conditions.as_ref().and_then(|c| c.ready) == Some(true))
        .collect();
    !on_node.is_empty() && on_node.iter().all(|ready| !ready)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_crashed_node_going_not_ready_later_moves_no_vip_again_and_its_return_settles() {
    let mut tb = Testbed::start(TestbedConfig {
        nodes: 3,
        tag: "lifecycle".into(),
        api: ApiKind::Kube,
        ..Default::default()
    })
    .await;
    let nodes = tb.nodes();
    let all: Vec<&str> = nodes.iter().map(String::as_str).collect();
    // Cluster traffic policy, endpoints everywhere; and Local, endpoints on two nodes.
    let web = [IpAddr::V4(vip4(40)), IpAddr::V6(vip6(40))];
    let local = [IpAddr::V4(vip4(41))];
    tb.add_service("web", &web, false, &all).await;
    tb.add_service("local", &local, true, &all[..2]).await;
    let vips: Vec<IpAddr> = web.iter().chain(&local).copied().collect();
    tb.start_agents(&[]);
    let before: BTreeMap<IpAddr, String> =
        vips.iter().map(|v| (*v, tb.wait_owner(*v, T))).collect();
    // The node that owns the Local VIP (one of the two with its endpoints) crashes.
    let victim = before[&local[0]].clone();

    let prober = tb.start_prober(&vips, Duration::from_millis(10));
    // Setup, not an assertion: the client resolves every VIP to its owner before the crash, so
    // the gaps printed below are failovers, not first resolutions.
    std::thread::sleep(Duration::from_secs(1));
    let crashed = prober.mark("crash");
    tb.crash(&victim);
    let crashed_at = Instant::now();
    let mut after: BTreeMap<IpAddr, String> = BTreeMap::new();
    for v in &vips {
        let o = tb.wait_owner(*v, T);
        assert_ne!(o, victim, "{v} left the crashed node");
        after.insert(*v, o);
    }

    // Kubernetes catches up: NotReady, then the victim's endpoints not ready. Meanwhile, and
    // for a while after, the VIPs stay where they went.
    let mut saw_not_ready = None;
    let mut saw_endpoints = None;
    let mut caught_up: Option<Instant> = None;
    while caught_up.is_none_or(|t| t.elapsed() < AFTER) {
        for v in &vips {
            assert_eq!(
                tb.owners(*v),
                [after[v].as_str()],
                "{v} moved again after the takeover ({:.1} s after the crash; Node {victim} \
                 NotReady: {saw_not_ready:?}, its endpoints not ready: {saw_endpoints:?})",
                crashed_at.elapsed().as_secs_f64()
            );
        }
        if saw_not_ready.is_none() && node_ready(&tb, &victim).await.as_deref() == Some("Unknown") {
            saw_not_ready = Some(crashed_at.elapsed());
        }
        if saw_endpoints.is_none() && endpoints_not_ready(&tb, "local", &victim).await {
            saw_endpoints = Some(crashed_at.elapsed());
        }
        if caught_up.is_none() && saw_not_ready.is_some() && saw_endpoints.is_some() {
            caught_up = Some(Instant::now());
        }
        assert!(
            caught_up.is_some() || crashed_at.elapsed() < NOT_READY_WITHIN,
            "Kubernetes did not catch up within {NOT_READY_WITHIN:?}: Node {victim} NotReady \
             at {saw_not_ready:?}, endpoints not ready at {saw_endpoints:?}"
        );
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
    let timeline = prober.stop();
    for v in &vips {
        let o = timeline.outage(*v, ProbeKind::Udp, crashed);
        eprintln!(
            "{v}: {} -> {} after {:?} ({} probes lost; Node NotReady after {:?}, endpoints \
             not ready after {:?})",
            before[v], after[v], o.gap, o.lost, saw_not_ready, saw_endpoints
        );
    }

    // The node comes back (kubelet first, then the DaemonSet's agent): one owner per VIP.
    tb.revive(&victim);
    tb.start_agent(&victim, &[]);
    tb.wait_for("every VIP with a single owner after the return", T, |tb| {
        vips.iter().all(|v| tb.owners(*v).len() == 1)
    });
}
