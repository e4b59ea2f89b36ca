//! Agents against the in-repo API server: which nodes may announce a VIP, checked the way an
//! operator would (`/state` of every agent, Events on the Service).
//!
//! The rules (see `announcer::agent::eligibility`): `externalTrafficPolicy: Local` restricts a
//! VIP to nodes hosting a ready endpoint; the `exclude-from-external-load-balancers` label, a
//! `--node-selector` and a not-Ready node take a node out; a Service with no ready endpoint is
//! announced nowhere; Services of another `loadBalancerClass` are ignored; a bad ingress IP is
//! reported and skipped without losing the Service's other VIPs.

use std::time::Duration;

use announcer_tests::cluster::{Cluster, rendezvous_owner};
use k8s_openapi::api::events::v1::Event;

const NODES: [&str; 3] = ["node-a", "node-b", "node-c"];
/// Generous: convergence takes about a second (warm-up, heartbeats), the host may be loaded.
const T: Duration = Duration::from_secs(15);
/// How long "nothing is announced" must keep holding once the agents have acted on the change.
const HOLD: Duration = Duration::from_secs(1);
const EXCLUDE: &str = "node.kubernetes.io/exclude-from-external-load-balancers";

async fn three_nodes(name: &str) -> Cluster {
    let c = Cluster::start(name).await;
    for n in NODES {
        c.add_node(n, &[], true).await;
    }
    c
}

/// Starts the three agents. Lenient death detection (1 s instead of 0.3 s): these tests change
/// eligibility, not liveness, and a loaded test host must not fake a dead owner.
fn start_all(c: &mut Cluster, args: &[&str]) {
    let mut all = vec!["--heartbeat-misses", "10"];
    all.extend_from_slice(args);
    for n in NODES {
        c.start_agent(n, &all);
    }
}

/// A Warning Event on Service `svc` with this reason.
fn warning(svc: &'static str, reason: &'static str) -> impl Fn(&Event) -> bool {
    move |e| {
        e.type_.as_deref() == Some("Warning")
            && e.reason.as_deref() == Some(reason)
            && e.regarding.as_ref().and_then(|r| r.name.as_deref()) == Some(svc)
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn etp_local_follows_ready_endpoints() {
    const VIP: &str = "10.0.1.5";
    let mut c = three_nodes("etp-local").await;
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

    // No ready endpoint anywhere: nobody announces, and a Warning says why.
    c.set_endpoints("default", "web", &[(second, false)]).await;
    c.wait_for("nobody announces", T, |c| c.owners(VIP).is_empty())
        .await;
    let e = c
        .wait_for_event(
            "default",
            "NoReadyEndpoints on web",
            T,
            warning("web", "NoReadyEndpoints"),
        )
        .await;
    assert!(
        e.note.as_deref().is_some_and(|n| n.contains(VIP)),
        "the Event names the VIP: {e:?}"
    );
    c.hold("nobody announces", HOLD, |c| c.owners(VIP).is_empty())
        .await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn exclusion_label_moves_the_vip_and_back() {
    const VIP: &str = "10.0.2.5";
    let mut c = three_nodes("exclude").await;
    c.add_service("default", "web", &[VIP], false).await;
    c.set_endpoints("default", "web", &[("node-a", true)]).await;
    start_all(&mut c, &[]);
    let top = rendezvous_owner(VIP, &NODES);
    c.wait_for("the rendezvous owner owns", T, |c| {
        c.owners(VIP) == [top.as_str()]
    })
    .await;

    c.label_node(&top, &[(EXCLUDE, Some(""))]).await;
    let rest: Vec<&str> = NODES.iter().copied().filter(|n| *n != top).collect();
    let next = rendezvous_owner(VIP, &rest);
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

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn node_selector_and_readiness() {
    let mut c = Cluster::start("selector").await;
    c.add_node("node-a", &[("zone", "a")], true).await;
    c.add_node("node-b", &[("zone", "a")], true).await;
    c.add_node("node-c", &[("zone", "b")], true).await;
    // VIPs some of which node-c would own without the selector (so the test means something).
    let candidates: Vec<String> = (1..=40).map(|i| format!("10.0.3.{i}")).collect();
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
    assert!(
        c.ownership()["node-c"].is_empty(),
        "node-c (zone b) announces nothing"
    );

    // node-a is not Ready: node-b announces everything.
    c.set_node_ready("node-a", false).await;
    c.wait_for("node-b owns every VIP", T, |c| {
        c.owners_of(&vips).values().all(|o| *o == ["node-b"])
    })
    .await;
    c.hold("node-a (not Ready) announces nothing", HOLD, |c| {
        c.ownership().get("node-a").is_some_and(Vec::is_empty)
    })
    .await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn cluster_policy_without_ready_endpoints_is_not_announced() {
    const OK: &str = "10.0.4.1";
    const UNREADY: &str = "10.0.4.2";
    const NO_SLICE: &str = "10.0.4.3";
    let mut c = three_nodes("no-endpoints").await;
    c.add_service("default", "ok", &[OK], false).await;
    c.set_endpoints("default", "ok", &[("node-a", true)]).await;
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
    // The control Service is announced, so the agents are working.
    c.wait_for("the control VIP has one owner", T, |c| {
        c.owners(OK).len() == 1
    })
    .await;
    for svc in ["unready", "noslice"] {
        c.wait_for_event(
            "default",
            &format!("NoReadyEndpoints on {svc}"),
            T,
            warning(svc, "NoReadyEndpoints"),
        )
        .await;
    }
    c.hold(
        "VIPs without ready endpoints are not announced",
        HOLD,
        |c| {
            c.owners_of(&[UNREADY, NO_SLICE])
                .values()
                .all(Vec::is_empty)
        },
    )
    .await;

    // An endpoint becomes ready: announced from the rendezvous owner.
    c.set_endpoints("default", "unready", &[("node-a", false), ("node-b", true)])
        .await;
    let top = rendezvous_owner(UNREADY, &NODES);
    c.wait_for("the VIP is announced once ready", T, |c| {
        c.owners(UNREADY) == [top.as_str()]
    })
    .await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn deleted_foreign_class_and_bad_ip() {
    const WEB: &str = "10.0.5.1";
    const FOREIGN: &str = "10.0.5.2";
    const BAD: &str = "224.0.0.1";
    const GOOD: &str = "10.0.5.3";
    let mut c = three_nodes("services").await;
    c.add_service("default", "web", &[WEB], false).await;
    c.create_service(
        "default",
        "foreign",
        &[FOREIGN],
        serde_json::json!({"loadBalancerClass": "other.example/lb"}),
    )
    .await;
    c.add_service("default", "mixed", &[BAD, GOOD], false).await;
    for svc in ["web", "foreign", "mixed"] {
        c.set_endpoints("default", svc, &[("node-a", true)]).await;
    }
    start_all(&mut c, &[]);
    c.wait_for("web and mixed's good VIP have one owner each", T, |c| {
        c.owners_of(&[WEB, GOOD]).values().all(|o| o.len() == 1)
    })
    .await;
    let e = c
        .wait_for_event(
            "default",
            "BadAddress on mixed",
            T,
            warning("mixed", "BadAddress"),
        )
        .await;
    assert!(
        e.note.as_deref().is_some_and(|n| n.contains(BAD)),
        "the Event names the bad address: {e:?}"
    );
    c.hold(
        "the foreign-class VIP and the bad IP are not announced",
        HOLD,
        |c| c.owners_of(&[FOREIGN, BAD]).values().all(Vec::is_empty) && c.owners(GOOD).len() == 1,
    )
    .await;
    let events = c.event_objects("default").await;
    assert!(
        !events
            .iter()
            .any(|e| e.regarding.as_ref().and_then(|r| r.name.as_deref()) == Some("foreign")),
        "a Service of another class gets no Events from us: {events:?}"
    );

    c.delete_service("default", "web").await;
    c.wait_for("nobody announces the deleted Service's VIP", T, |c| {
        c.owners(WEB).is_empty()
    })
    .await;
    c.hold("the deleted Service stays unannounced", HOLD, |c| {
        c.owners(WEB).is_empty() && c.owners(GOOD).len() == 1
    })
    .await;
}

/// A Service without ready endpoints must be explained by one Warning that says so, not also
/// by a `NoEligibleNode` Warning blaming the nodes ("none Ready, matching the node selector…")
/// while every node is Ready and selected: `kubectl describe service` would contradict itself.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn no_ready_endpoints_is_not_blamed_on_nodes() {
    const OK: &str = "10.0.6.1";
    const UNREADY: &str = "10.0.6.2";
    let mut c = three_nodes("no-ep-blame").await;
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
    c.wait_for_event(
        "default",
        "NoReadyEndpoints on unready",
        T,
        warning("unready", "NoReadyEndpoints"),
    )
    .await;
    tokio::time::sleep(HOLD).await;
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
