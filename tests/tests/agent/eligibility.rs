//! Agents against the in-repo API server and a real kube-apiserver (`on_both_api_servers!`):
//! which nodes may announce a VIP, checked the way an operator would (`/state` of every agent,
//! Events on the Service).
//!
//! The rules (see `announcer::placement::eligibility`): `externalTrafficPolicy: Local` restricts a
//! VIP to nodes hosting a ready endpoint; the `exclude-from-external-load-balancers` label, a
//! `--node-selector` and a not-Ready node take a node out; a Service with no ready endpoint is
//! announced nowhere; Services of another `loadBalancerClass` are ignored; a bad ingress IP is
//! reported and skipped without losing the Service's other VIPs. What an agent refuses to
//! announce whatever the status says (`announcer::placement::refusal`): a node's own address, a
//! link-local one, one outside every pool once a pool exists (unless `announceOutsidePools`),
//! and the younger of a Local and a Cluster Service sharing one address.

use std::time::Duration;

use announcer::ipam::{ALLOW_SHARED_IP_ANNOTATION, AddressPool, AddressPoolSpec};
use announcer_tests::{
    env::{
        ApiKind,
        cluster::{Cluster, rendezvous_owner},
    },
    on_both_api_servers,
};
use k8s_openapi::api::{core::v1::Node, events::v1::Event};
use kube::api::{Api, Patch, PatchParams, PostParams};

use crate::world::{NODES, successor, three_nodes};

/// Generous: convergence takes about a second (warm-up, heartbeats), the host may be loaded.
const T: Duration = Duration::from_secs(15);
/// How long "nothing is announced" must keep holding once the agents have acted on the change.
const HOLD: Duration = Duration::from_secs(1);
const EXCLUDE: &str = "node.kubernetes.io/exclude-from-external-load-balancers";

/// Starts the three agents. Lenient death detection (1 s instead of 0.3 s): these tests change
/// eligibility, not liveness, and a loaded test host must not fake a dead owner.
fn start_all(c: &mut Cluster, args: &[&str]) {
    let mut all = vec!["--heartbeat-misses", "10"];
    all.extend_from_slice(args);
    for n in NODES {
        c.start_agent(n, &all);
    }
}

/// The control VIP: Service `control` (cluster policy, a ready endpoint on node-a), which must
/// stay announced by its rendezvous owner while a check says another VIP is announced by
/// nobody, so that agents that stopped (or never started) working fail the check.
const CONTROL: &str = "10.0.9.1";

async fn add_control(c: &Cluster) {
    c.add_service("default", "control", &[CONTROL], false).await;
    c.set_endpoints("default", "control", &[("node-a", true)])
        .await;
}

/// Whether the control VIP is announced by its rendezvous owner alone.
fn control_answered(c: &Cluster) -> bool {
    c.owners(CONTROL) == [rendezvous_owner(CONTROL, &NODES)]
}

/// A Warning Event on Service `svc` with this reason.
fn warning(svc: &'static str, reason: &'static str) -> impl Fn(&Event) -> bool {
    move |e| {
        e.type_.as_deref() == Some("Warning")
            && e.reason.as_deref() == Some(reason)
            && e.regarding.as_ref().and_then(|r| r.name.as_deref()) == Some(svc)
    }
}

/// Waits (up to [`T`]) for a [`warning`] on Service `svc` with this reason; returns it.
async fn warned(c: &Cluster, svc: &'static str, reason: &'static str) -> Event {
    let what = format!("{reason} on {svc}");
    c.wait_for_event("default", &what, T, warning(svc, reason))
        .await
}

on_both_api_servers! {
async fn etp_local_vip_follows_its_ready_endpoint(api) {
    const VIP: &str = "10.0.1.5";
    let mut c = three_nodes(api, "etp-local").await;
    // Endpoints on nodes that are NOT the rendezvous top among all three, so that an owner
    // there can only come from the Local rule.
    let top = rendezvous_owner(VIP, &NODES);
    let others: Vec<&str> = NODES.iter().copied().filter(|n| *n != top).collect();
    let (first, second) = (others[0], others[1]);
    c.add_service("default", "web", &[VIP], true).await;
    c.set_endpoints("default", "web", &[(first, true)]).await;
    start_all(&mut c, &[]);
    c.wait_for(
        &format!("only {first} (hosting the endpoint) owns"),
        T,
        |c| c.owners(VIP) == [first],
    )
    .await;

    // The endpoint moves: not ready on the first node, ready on the second.
    c.set_endpoints("default", "web", &[(first, false), (second, true)])
        .await;
    c.wait_for(&format!("ownership moves to {second}"), T, |c| {
        c.owners(VIP) == [second]
    })
    .await;
}
}

on_both_api_servers! {
async fn etp_local_vip_without_ready_endpoints_is_announced_by_nobody_and_a_warning_says_why(api) {
    const VIP: &str = "10.0.1.6";
    let mut c = three_nodes(api, "etp-local-none").await;
    c.add_service("default", "web", &[VIP], true).await;
    c.set_endpoints("default", "web", &[("node-b", true)]).await;
    add_control(&c).await;
    start_all(&mut c, &[]);
    c.wait_for("node-b (hosting the endpoint) owns", T, |c| {
        c.owners(VIP) == ["node-b"] && control_answered(c)
    })
    .await;

    // No ready endpoint anywhere: nobody announces, and a Warning says why.
    c.set_endpoints("default", "web", &[("node-b", false)])
        .await;
    c.wait_for("nobody announces, the control VIP still is", T, |c| {
        c.owners(VIP).is_empty() && control_answered(c)
    })
    .await;
    let e = warned(&c, "web", "NoReadyEndpoints").await;
    assert!(
        e.note.as_deref().is_some_and(|n| n.contains(VIP)),
        "the Event names the VIP: {e:?}"
    );
    c.hold("nobody announces, the control VIP still is", HOLD, |c| {
        c.owners(VIP).is_empty() && control_answered(c)
    })
    .await;
}
}

on_both_api_servers! {
async fn exclusion_label_moves_the_vip_and_back(api) {
    const VIP: &str = "10.0.2.5";
    let mut c = three_nodes(api, "exclude").await;
    c.add_service("default", "web", &[VIP], false).await;
    c.set_endpoints("default", "web", &[("node-a", true)]).await;
    start_all(&mut c, &[]);
    let top = rendezvous_owner(VIP, &NODES);
    c.wait_for("the rendezvous owner owns", T, |c| {
        c.owners(VIP) == [top.as_str()]
    })
    .await;

    c.label_node(&top, &[(EXCLUDE, Some(""))]).await;
    let next = successor(VIP, &top);
    c.wait_for(
        &format!("{top} (excluded) gives the VIP to {next}"),
        T,
        |c| c.owners(VIP) == [next.as_str()],
    )
    .await;

    c.label_node(&top, &[(EXCLUDE, None)]).await;
    c.wait_for(&format!("{top} (label removed) owns again"), T, |c| {
        c.owners(VIP) == [top.as_str()]
    })
    .await;
}
}

/// VIPs some of which node-c would own without a selector: two of its, two of the others'.
fn zone_vips(candidates: &[String]) -> Vec<&str> {
    let mut vips: Vec<&str> = candidates
        .iter()
        .map(String::as_str)
        .filter(|v| rendezvous_owner(v, &NODES) == "node-c")
        .take(2)
        .collect();
    vips.extend(
        candidates
            .iter()
            .map(String::as_str)
            .filter(|v| rendezvous_owner(v, &NODES) != "node-c")
            .take(2),
    );
    assert_eq!(vips.len(), 4);
    vips
}

async fn zones(api: ApiKind, name: &str) -> Cluster {
    // The server in the name: both variants run at once, and the scratch directory is named by it.
    let c = Cluster::start_on(api, &format!("{name}-{api}")).await;
    c.add_node("node-a", &[("zone", "a")], true).await;
    c.add_node("node-b", &[("zone", "a")], true).await;
    c.add_node("node-c", &[("zone", "b")], true).await;
    c
}

on_both_api_servers! {
async fn node_selector_leaves_unselected_nodes_announcing_nothing(api) {
    let mut c = zones(api, "selector").await;
    let candidates: Vec<String> = (1..=40).map(|i| format!("10.0.3.{i}")).collect();
    let vips = zone_vips(&candidates);
    c.add_service("default", "web", &vips, false).await;
    c.set_endpoints("default", "web", &[("node-c", true)]).await;
    start_all(&mut c, &["--node-selector", "zone=a"]);
    let zone_a = ["node-a", "node-b"];
    let in_zone_a = |c: &Cluster| {
        c.owners_of(&vips)
            .iter()
            .all(|(vip, o)| *o == [rendezvous_owner(&vip.to_string(), &zone_a)])
    };
    c.wait_for(
        "each VIP on its rendezvous owner within zone a",
        T,
        in_zone_a,
    )
    .await;
    // node-c answers `/state` (so it runs) and claims nothing, while zone a has every VIP.
    c.hold("node-c (zone b) announces nothing", HOLD, |c| {
        c.ownership().get("node-c").is_some_and(Vec::is_empty) && in_zone_a(c)
    })
    .await;
}
}

on_both_api_servers! {
async fn a_node_that_is_not_ready_announces_nothing(api) {
    let mut c = zones(api, "readiness").await;
    let candidates: Vec<String> = (1..=40).map(|i| format!("10.0.7.{i}")).collect();
    let vips = zone_vips(&candidates);
    c.add_service("default", "web", &vips, false).await;
    c.set_endpoints("default", "web", &[("node-c", true)]).await;
    start_all(&mut c, &["--node-selector", "zone=a"]);
    let zone_a = ["node-a", "node-b"];
    c.wait_for("each VIP on its rendezvous owner within zone a", T, |c| {
        c.owners_of(&vips)
            .iter()
            .all(|(vip, o)| *o == [rendezvous_owner(&vip.to_string(), &zone_a)])
    })
    .await;

    // node-a is not Ready: node-b announces everything.
    c.set_node_ready("node-a", false).await;
    let b_has_all = |c: &Cluster| c.owners_of(&vips).values().all(|o| *o == ["node-b"]);
    c.wait_for("node-b owns every VIP", T, b_has_all).await;
    c.hold("node-a (not Ready) announces nothing", HOLD, |c| {
        c.ownership().get("node-a").is_some_and(Vec::is_empty) && b_has_all(c)
    })
    .await;
}
}

on_both_api_servers! {
async fn cluster_policy_vips_without_ready_endpoints_are_announced_by_nobody(api) {
    const UNREADY: &str = "10.0.4.2";
    const NO_SLICE: &str = "10.0.4.3";
    let mut c = three_nodes(api, "no-endpoints").await;
    add_control(&c).await;
    c.add_service("default", "unready", &[UNREADY], false).await;
    c.set_endpoints(
        "default",
        "unready",
        &[("node-a", false), ("node-b", false)],
    )
    .await;
    c.add_service("default", "noslice", &[NO_SLICE], false)
        .await;
    start_all(&mut c, &[]);
    c.wait_for(
        "the control VIP on its rendezvous owner",
        T,
        control_answered,
    )
    .await;
    for svc in ["unready", "noslice"] {
        warned(&c, svc, "NoReadyEndpoints").await;
    }
    c.hold(
        "VIPs without ready endpoints are not announced, the control VIP is",
        HOLD,
        |c| {
            c.owners_of(&[UNREADY, NO_SLICE])
                .values()
                .all(Vec::is_empty)
                && control_answered(c)
        },
    )
    .await;
}
}

on_both_api_servers! {
async fn a_vip_whose_endpoint_becomes_ready_is_announced_by_its_rendezvous_owner(api) {
    const UNREADY: &str = "10.0.4.4";
    let mut c = three_nodes(api, "endpoint-ready").await;
    c.add_service("default", "unready", &[UNREADY], false).await;
    c.set_endpoints(
        "default",
        "unready",
        &[("node-a", false), ("node-b", false)],
    )
    .await;
    start_all(&mut c, &[]);
    warned(&c, "unready", "NoReadyEndpoints").await;
    c.set_endpoints("default", "unready", &[("node-a", false), ("node-b", true)])
        .await;
    let top = rendezvous_owner(UNREADY, &NODES);
    c.wait_for("the VIP is announced once ready", T, |c| {
        c.owners(UNREADY) == [top.as_str()]
    })
    .await;
}
}

on_both_api_servers! {
async fn a_service_of_another_class_is_not_announced_and_gets_no_events(api) {
    const FOREIGN: &str = "10.0.5.2";
    let mut c = three_nodes(api, "foreign").await;
    add_control(&c).await;
    c.create_service(
        "default",
        "foreign",
        &[FOREIGN],
        serde_json::json!({"loadBalancerClass": "other.example/lb"}),
    )
    .await;
    c.set_endpoints("default", "foreign", &[("node-a", true)])
        .await;
    start_all(&mut c, &[]);
    c.wait_for(
        "the control VIP on its rendezvous owner",
        T,
        control_answered,
    )
    .await;
    c.hold(
        "the foreign-class VIP is not announced, the control VIP is",
        HOLD,
        |c| c.owners(FOREIGN).is_empty() && control_answered(c),
    )
    .await;
    let events = c.event_objects("default").await;
    assert!(
        events
            .iter()
            .any(|e| e.regarding.as_ref().and_then(|r| r.name.as_deref()) == Some("control")),
        "the control Service got its Events: {events:?}"
    );
    assert!(
        !events
            .iter()
            .any(|e| e.regarding.as_ref().and_then(|r| r.name.as_deref()) == Some("foreign")),
        "a Service of another class gets no Events from us: {events:?}"
    );
}
}

on_both_api_servers! {
async fn a_bad_ingress_ip_is_reported_and_skipped_while_the_services_good_vip_is_announced(api) {
    const BAD: &str = "224.0.0.1";
    const GOOD: &str = "10.0.5.3";
    let mut c = three_nodes(api, "bad-ip").await;
    c.add_service("default", "mixed", &[BAD, GOOD], false).await;
    c.set_endpoints("default", "mixed", &[("node-a", true)])
        .await;
    start_all(&mut c, &[]);
    let top = rendezvous_owner(GOOD, &NODES);
    let good = |c: &Cluster| c.owners(GOOD) == [top.as_str()];
    c.wait_for("mixed's good VIP on its rendezvous owner", T, good)
        .await;
    let e = warned(&c, "mixed", "BadAddress").await;
    assert!(
        e.note.as_deref().is_some_and(|n| n.contains(BAD)),
        "the Event names the bad address: {e:?}"
    );
    c.hold("the bad IP is not announced, the good one is", HOLD, |c| {
        c.owners(BAD).is_empty() && good(c)
    })
    .await;
}
}

on_both_api_servers! {
async fn a_deleted_services_vip_is_announced_by_nobody(api) {
    const WEB: &str = "10.0.5.1";
    let mut c = three_nodes(api, "deleted").await;
    add_control(&c).await;
    c.add_service("default", "web", &[WEB], false).await;
    c.set_endpoints("default", "web", &[("node-a", true)]).await;
    start_all(&mut c, &[]);
    let top = rendezvous_owner(WEB, &NODES);
    c.wait_for(
        "web and the control VIP on their rendezvous owners",
        T,
        |c| c.owners(WEB) == [top.as_str()] && control_answered(c),
    )
    .await;

    c.delete_service("default", "web").await;
    let gone = |c: &Cluster| c.owners(WEB).is_empty() && control_answered(c);
    c.wait_for(
        "nobody announces the deleted Service's VIP, the control VIP still is",
        T,
        gone,
    )
    .await;
    c.hold("the deleted Service stays unannounced", HOLD, gone)
        .await;
}
}

on_both_api_servers! {
/// A Service without ready endpoints must be explained by one Warning that says so, not also
/// by a `NoEligibleNode` Warning blaming the nodes ("none Ready, matching the node selector…")
/// while every node is Ready and selected: `kubectl describe service` would contradict itself.
async fn no_ready_endpoints_is_not_blamed_on_nodes(api) {
    const OK: &str = "10.0.6.1";
    const UNREADY: &str = "10.0.6.2";
    let mut c = three_nodes(api, "no-ep-blame").await;
    c.add_service("default", "ok", &[OK], false).await;
    c.set_endpoints("default", "ok", &[("node-a", true)]).await;
    c.add_service("default", "unready", &[UNREADY], false).await;
    c.set_endpoints("default", "unready", &[("node-a", false)])
        .await;
    start_all(&mut c, &[]);
    c.wait_for("the control VIP has one owner", T, |c| {
        c.owners(OK).len() == 1
    })
    .await;
    warned(&c, "unready", "NoReadyEndpoints").await;
    tokio::time::sleep(HOLD).await;
    // The agents still run and announce (so no Warning below was withheld by a dead agent).
    assert_eq!(
        c.owners(OK),
        [rendezvous_owner(OK, &NODES)],
        "the control VIP on its rendezvous owner\n{}",
        c.log_tails()
    );
    let blamed: Vec<Event> = c
        .event_objects("default")
        .await
        .into_iter()
        .filter(warning("unready", "NoEligibleNode"))
        .collect();
    assert!(
        blamed.is_empty(),
        "no ready endpoints, yet a Warning blames the nodes: {:?}",
        blamed.iter().map(|e| &e.note).collect::<Vec<_>>()
    );
}
}

/// Replaces Node `name`'s addresses (status subresource, as the kubelet reports them).
async fn set_node_addresses(c: &Cluster, name: &str, addrs: &[(&str, &str)]) {
    let list: Vec<serde_json::Value> = addrs
        .iter()
        .map(|(t, a)| serde_json::json!({"type": t, "address": a}))
        .collect();
    Api::<Node>::all(c.client())
        .patch_status(
            name,
            &PatchParams::default(),
            &Patch::Merge(serde_json::json!({"status": {"addresses": list}})),
        )
        .await
        .expect("node addresses");
}

/// Waits until `vip` is announced by nobody while the control VIP is, then for the Warning
/// `AddressRefused` on `svc` naming `vip` and `rule`, then checks it stays so for [`HOLD`].
async fn refused(c: &Cluster, svc: &'static str, vip: &str, rule: &str) {
    let nobody = |c: &Cluster| c.owners(vip).is_empty() && control_answered(c);
    c.wait_for(
        &format!("the control VIP is announced and {vip} by nobody"),
        T,
        nobody,
    )
    .await;
    c.hold(&format!("{vip} is announced by nobody"), HOLD, nobody)
        .await;
    let e = warned(c, svc, "AddressRefused").await;
    let note = e.note.as_deref().unwrap_or("");
    assert!(
        note.contains(vip) && note.contains(rule),
        "the Event names the address and the rule ({rule}): {e:?}"
    );
}

on_both_api_servers! {
/// Issue 25, finding 1 (reproduced on the real control plane): an address written into a
/// Service's status that is another node's InternalIP must not be answered by any node.
async fn a_vip_that_is_a_nodes_internal_ip_is_announced_by_no_node_and_warned(api) {
    const NODE_B_IP: &str = "10.0.10.2";
    let mut c = three_nodes(api, "node-ip").await;
    set_node_addresses(
        &c,
        "node-b",
        &[("InternalIP", NODE_B_IP), ("Hostname", "node-b")],
    )
    .await;
    add_control(&c).await;
    c.add_service("default", "hijack", &[NODE_B_IP], false).await;
    c.set_endpoints("default", "hijack", &[("node-a", true)])
        .await;
    start_all(&mut c, &[]);
    refused(&c, "hijack", NODE_B_IP, "Node node-b").await;
}
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_link_local_vip_is_announced_by_no_node_and_warned() {
    const LINK_LOCAL: &str = "169.254.7.1";
    let mut c = three_nodes(ApiKind::InRepo, "link-local").await;
    add_control(&c).await;
    c.add_service("default", "ll", &[LINK_LOCAL], false).await;
    c.set_endpoints("default", "ll", &[("node-a", true)]).await;
    start_all(&mut c, &[]);
    refused(&c, "ll", LINK_LOCAL, "link-local").await;
}

/// Creates AddressPool `name` with `addresses`.
async fn add_pool(c: &Cluster, name: &str, addresses: &[&str]) {
    let pool = AddressPool::new(
        name,
        AddressPoolSpec {
            addresses: addresses.iter().map(|a| a.to_string()).collect(),
            auto_assign: true,
            ..Default::default()
        },
    );
    Api::<AddressPool>::all(c.client())
        .create(&PostParams::default(), &pool)
        .await
        .expect("create pool");
}

/// The pool of the pool tests: the control VIP is in it.
const POOL: &str = "10.0.9.0/24";
/// An address in no pool: the testbed's API relay address, as in the finding.
const OUTSIDE: &str = "10.78.0.254";

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn with_a_pool_an_address_outside_every_pool_is_announced_by_no_node_and_warned() {
    let mut c = three_nodes(ApiKind::InRepo, "outside-pools").await;
    add_pool(&c, "lan", &[POOL]).await;
    add_control(&c).await;
    c.add_service("default", "foreign", &[OUTSIDE], false).await;
    c.set_endpoints("default", "foreign", &[("node-a", true)])
        .await;
    start_all(&mut c, &[]);
    refused(&c, "foreign", OUTSIDE, "announceOutsidePools").await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn with_announce_outside_pools_an_address_outside_every_pool_is_announced() {
    let mut c = three_nodes(ApiKind::InRepo, "outside-pools-on").await;
    add_pool(&c, "lan", &[POOL]).await;
    add_control(&c).await;
    c.add_service("default", "foreign", &[OUTSIDE], false).await;
    c.set_endpoints("default", "foreign", &[("node-a", true)])
        .await;
    let config = std::env::temp_dir().join(format!(
        "announcer-outside-pools-{}.yaml",
        std::process::id()
    ));
    std::fs::write(&config, "announceOutsidePools: true\n").expect("write the config file");
    start_all(&mut c, &["--config", config.to_str().expect("utf-8")]);
    let top = rendezvous_owner(OUTSIDE, &NODES);
    c.wait_for("the address in no pool on its rendezvous owner", T, |c| {
        c.owners(OUTSIDE) == [top.as_str()] && control_answered(c)
    })
    .await;
    let _ = std::fs::remove_file(&config);
}

on_both_api_servers! {
/// Issue 25, finding 4: a Local and a Cluster Service sharing one address. The older (Local,
/// its endpoint on a node that is not the rendezvous top) keeps the address, placed by its own
/// rule; the younger (Cluster) is refused with a Warning naming both. Before, the union of the
/// two placed the address on the rendezvous top, where kube-proxy drops the Local one's traffic.
async fn a_local_and_a_cluster_service_sharing_an_address_announce_it_for_the_older_only(api) {
    const VIP: &str = "10.0.8.53";
    let mut c = three_nodes(api, "share-etp").await;
    let top = rendezvous_owner(VIP, &NODES);
    let first = NODES.iter().copied().find(|n| *n != top).expect("another node");
    let share = serde_json::json!({ ALLOW_SHARED_IP_ANNOTATION: "dns" });
    let create = |name: &'static str, policy: &'static str| {
        let c = &c;
        let share = share.clone();
        async move {
            c.create_service(
                "default",
                name,
                &[VIP],
                serde_json::json!({"externalTrafficPolicy": policy}),
            )
            .await;
            Api::<k8s_openapi::api::core::v1::Service>::namespaced(c.client(), "default")
                .patch(
                    name,
                    &PatchParams::default(),
                    &Patch::Merge(serde_json::json!({"metadata": {"annotations": share}})),
                )
                .await
                .expect("annotate");
        }
    };
    create("old-local", "Local").await;
    // creationTimestamp has a resolution of one second: make the ages differ.
    tokio::time::sleep(Duration::from_millis(1100)).await;
    create("young-cluster", "Cluster").await;
    c.set_endpoints("default", "old-local", &[(first, true)]).await;
    c.set_endpoints("default", "young-cluster", &[("node-a", true), ("node-b", true), ("node-c", true)])
        .await;
    start_all(&mut c, &[]);
    c.wait_for(
        &format!("only {first} (hosting the Local Service's endpoint) announces"),
        T,
        |c| c.owners(VIP) == [first],
    )
    .await;
    let e = warned(&c, "young-cluster", "SharingConflict").await;
    let note = e.note.as_deref().unwrap_or("");
    assert!(
        note.contains("default/old-local") && note.contains("default/young-cluster"),
        "the Event names both Services: {e:?}"
    );
    c.hold(&format!("{first} alone announces"), HOLD, |c| {
        c.owners(VIP) == [first]
    })
    .await;
}
}
