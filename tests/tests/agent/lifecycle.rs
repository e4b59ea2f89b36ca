//! Agents against the in-repo API server and a real kube-apiserver (`on_both_api_servers!`):
//! what happens to ownership when an agent dies, is restarted or is told to stop, checked as an
//! operator would (`/state`, Events).
//!
//! The agents run with `--no-dataplane`, so there is no data plane to answer the probe peers
//! send to a silent owner: peers take over from a dead agent after its heartbeats stop (~0.4 s),
//! also when it is restarted at once. What a restart must still guarantee without a data plane:
//! it converges back to the rendezvous owner, it never claims VIPs it does not own, and the
//! restart of an agent that owns nothing changes nothing.

use std::{collections::BTreeSet, net::IpAddr, time::Duration};

use announcer_tests::{
    env::cluster::{Cluster, owned_vips, rendezvous_owner, state_at},
    on_both_api_servers,
};
use k8s_openapi::api::{
    core::v1::{Node, Service},
    events::v1::Event,
};
use kube::{
    Api,
    api::{Patch, PatchParams},
};
use serde_json::{Value, json};

use crate::world::{NODES, successor, three_nodes, web};

/// Generous: convergence takes about a second (warm-up, heartbeats), the host may be loaded.
const T: Duration = Duration::from_secs(15);
const HOLD: Duration = Duration::from_millis(1500);

/// Waits until every VIP is announced by exactly its rendezvous owner among `nodes`.
async fn wait_rendezvous(c: &Cluster, vips: &[&str], nodes: &[&str]) {
    c.wait_for("every VIP on its rendezvous owner", T, |c| {
        c.settled(vips, nodes)
    })
    .await;
}

/// Announcing Events as (name, series count): a new takeover adds one or bumps a count.
fn announcing(events: &[Event]) -> BTreeSet<(String, i32)> {
    events
        .iter()
        .filter(|e| e.reason.as_deref() == Some("Announcing"))
        .map(|e| {
            (
                e.metadata.name.clone().unwrap_or_default(),
                e.series.as_ref().map_or(1, |s| s.count),
            )
        })
        .collect()
}

fn incarnation(c: &Cluster, node: &str) -> Option<u64> {
    c.state(node)?["incarnation"].as_u64()
}

/// Waits until `node`'s agent answers again, with a new incarnation, and is ready.
async fn wait_restarted(c: &Cluster, node: &str, old: u64) {
    c.wait_for(&format!("{node} back and ready"), T, |c| {
        c.state(node)
            .is_some_and(|s| s["ready"] == true && s["incarnation"].as_u64() != Some(old))
    })
    .await;
}

on_both_api_servers! {
async fn sigkill_survivor_takes_over_and_its_event_names_it(api) {
    const VIP: &str = "10.0.10.5";
    let mut c = web(api, "sigkill", &[VIP, "fd00::10:5"], &[]).await;
    let top = rendezvous_owner(VIP, &NODES);
    c.wait_for("the rendezvous owner owns", T, |c| {
        c.owners(VIP) == [top.as_str()]
    })
    .await;

    c.kill(&top);
    let next = successor(VIP, &top);
    // Expected within ~0.4 s (three missed heartbeats); the bound is only a safety net.
    c.wait_for(
        &format!("survivor {next} owns"),
        Duration::from_secs(5),
        |c| c.owners(VIP) == [next.as_str()],
    )
    .await;

    let note = format!("announcing {VIP} from {next} (no data plane: --no-dataplane)");
    let e = c
        .wait_for_event("default", &note, T, |e| {
            e.reason.as_deref() == Some("Announcing") && e.note.as_deref() == Some(note.as_str())
        })
        .await;
    let svc = Api::<Service>::namespaced(c.client.clone(), "default")
        .get("web")
        .await
        .expect("get web");
    let r = e.regarding.clone().expect("regarding");
    assert_eq!(r.kind.as_deref(), Some("Service"), "{e:?}");
    assert_eq!(r.namespace.as_deref(), Some("default"), "{e:?}");
    assert_eq!(r.name.as_deref(), Some("web"), "{e:?}");
    assert_eq!(
        r.uid, svc.metadata.uid,
        "kubectl describe finds Events by UID"
    );
    assert_eq!(e.type_.as_deref(), Some("Normal"), "{e:?}");
    assert_eq!(e.reporting_instance.as_deref(), Some(next.as_str()));
    assert_eq!(
        e.reporting_controller.as_deref(),
        Some("announcer.dev/agent")
    );
}
}

on_both_api_servers! {
async fn restart_of_a_non_owner_changes_nothing(api) {
    const VIP: &str = "10.0.11.5";
    // Lenient death detection (1 s): a loaded test host must not fake a dead owner here.
    let mut c = web(
        api,
        "restart-nonowner",
        &[VIP],
        &["--grace", "5s", "--heartbeat-misses", "10"],
    )
    .await;
    c.wait_ready(T).await;
    let top = rendezvous_owner(VIP, &NODES);
    c.wait_for("the rendezvous owner owns", T, |c| {
        c.owners(VIP) == [top.as_str()]
    })
    .await;
    let other = NODES
        .iter()
        .copied()
        .find(|n| *n != top)
        .expect("a non-owner");
    let old = incarnation(&c, other).expect("incarnation");
    // The owner records its takeover asynchronously (Events queue behind the data plane):
    // take the baseline only once that Event exists, or it would count as "new" below.
    let end = std::time::Instant::now() + T;
    let before = loop {
        let seen = announcing(&c.event_objects("default").await);
        if !seen.is_empty() {
            break seen;
        }
        assert!(
            std::time::Instant::now() < end,
            "the owner recorded no Announcing Event\n{}",
            c.log_tails()
        );
        tokio::time::sleep(Duration::from_millis(50)).await;
    };

    c.kill(other);
    c.restart(other);
    let end = std::time::Instant::now() + T;
    loop {
        assert_eq!(
            c.owners(VIP),
            [top.as_str()],
            "ownership changed while {other} restarted\n{}",
            c.log_tails()
        );
        let s = c.state(other);
        if s.is_some_and(|s| s["ready"] == true && s["incarnation"].as_u64() != Some(old)) {
            break;
        }
        assert!(
            std::time::Instant::now() < end,
            "{other} did not come back\n{}",
            c.log_tails()
        );
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    c.hold("the owner keeps the VIP", HOLD, |c| {
        c.owners(VIP) == [top.as_str()]
    })
    .await;
    let after = announcing(&c.event_objects("default").await);
    assert_eq!(before, after, "no new Announcing Event");
}
}

on_both_api_servers! {
async fn restarted_owner_converges_and_claims_only_its_vips(api) {
    let all: Vec<String> = (1..=6).map(|i| format!("10.0.12.{i}")).collect();
    let vips: Vec<&str> = all.iter().map(String::as_str).collect();
    let victim = rendezvous_owner(vips[0], &NODES);
    let mine: BTreeSet<IpAddr> = vips
        .iter()
        .filter(|v| rendezvous_owner(v, &NODES) == victim)
        .map(|v| v.parse().expect("vip"))
        .collect();
    assert!(mine.len() < vips.len(), "some VIPs belong to others");
    let mut c = web(
        api,
        "restart-owner",
        &vips,
        &["--grace", "5s", "--heartbeat-misses", "10"],
    )
    .await;
    wait_rendezvous(&c, &vips, &NODES).await;
    let old = incarnation(&c, &victim).expect("incarnation");
    let before: BTreeSet<String> = c
        .event_objects("default")
        .await
        .into_iter()
        .filter_map(|e| e.metadata.name)
        .collect();

    c.kill(&victim);
    c.restart(&victim);
    wait_restarted(&c, &victim, old).await;
    wait_rendezvous(&c, &vips, &NODES).await;
    c.hold("ownership stays on the rendezvous owners", HOLD, |c| {
        c.settled(&vips, &NODES)
    })
    .await;
    let owned: BTreeSet<IpAddr> = owned_vips(&c.state(&victim).expect("state"))
        .into_iter()
        .collect();
    assert_eq!(owned, mine, "{victim} owns exactly its rendezvous VIPs");

    // Whatever the restarted agent announced, it announced only its own VIPs.
    let prefix = "announcing ";
    for e in c.event_objects("default").await {
        let new = e
            .metadata
            .name
            .as_ref()
            .is_some_and(|n| !before.contains(n));
        if !new
            || e.reason.as_deref() != Some("Announcing")
            || e.reporting_instance.as_deref() != Some(victim.as_str())
        {
            continue;
        }
        let note = e.note.clone().unwrap_or_default();
        let vip: IpAddr = note
            .strip_prefix(prefix)
            .and_then(|r| r.split_whitespace().next())
            .and_then(|v| v.parse().ok())
            .unwrap_or_else(|| panic!("unexpected Announcing note {note:?}"));
        assert!(
            mine.contains(&vip),
            "restarted {victim} announced {vip}, which is not its: {note}"
        );
    }
}
}

on_both_api_servers! {
async fn sigterm_hands_over_every_vip_without_a_gap(api) {
    let mut c = three_nodes(api, "handover").await;
    let services = [
        ("web", ["10.0.13.1", "fd00::13:1"]),
        ("api", ["10.0.13.2", "fd00::13:2"]),
        ("db", ["10.0.13.3", "fd00::13:3"]),
    ];
    let mut vips: Vec<&str> = Vec::new();
    for (svc, ips) in &services {
        c.add_service("default", svc, ips, false).await;
        c.set_endpoints("default", svc, &[("node-a", true)]).await;
        vips.extend(ips);
    }
    // A handover timeout far longer than the test waits: an exit proves the successors acked.
    // Slower heartbeats (300 ms) make the handover span several samples.
    for n in NODES {
        c.start_agent(
            n,
            &["--handover-timeout", "30s", "--heartbeat-interval", "300ms"],
        );
    }
    wait_rendezvous(&c, &vips, &NODES).await;
    let leaver = rendezvous_owner(vips[0], &NODES);
    let rest: Vec<&str> = NODES.iter().copied().filter(|n| *n != leaver).collect();
    let old_port = c.agent(&leaver).expect("agent").http;
    let rest_ports: Vec<u16> = rest
        .iter()
        .map(|n| c.agent(n).expect("agent").http)
        .collect();
    let ips: Vec<IpAddr> = vips.iter().map(|v| v.parse().expect("vip")).collect();

    c.signal(&leaver, libc::SIGTERM);
    // Sample every 20 ms until the leaver is gone. The leaver is read first: a successor keeps
    // a VIP once it took it, so "leaver does not own at t1, successor does not own at t2 > t1"
    // is a real gap at t1.
    let samples = tokio::task::spawn_blocking(move || {
        let mut gaps = Vec::new();
        let (mut n, mut gone, mut before) = (0u32, 0u32, 0u32);
        while gone < 10 && n < 3000 {
            n += 1;
            let old = state_at(old_port);
            if old.is_none() {
                gone += 1;
            }
            let old = old.map(|s| owned_vips(&s)).unwrap_or_default();
            if !old.is_empty() {
                before += 1;
            }
            let others: Vec<IpAddr> = rest_ports
                .iter()
                .filter_map(|p| state_at(*p))
                .flat_map(|s| owned_vips(&s))
                .collect();
            for ip in &ips {
                if !old.contains(ip) && !others.contains(ip) {
                    gaps.push((n, *ip));
                }
            }
            std::thread::sleep(Duration::from_millis(20));
        }
        (n, gaps, before)
    })
    .await
    .expect("sampler");
    let (n, gaps, before) = samples;
    assert!(
        before > 0,
        "the samples saw the handover (the leaver still announcing at first)"
    );
    assert!(
        gaps.is_empty(),
        "VIPs unannounced during the handover (sample, VIP) of {n} samples: {gaps:?}\n{}",
        c.log_tails()
    );
    assert_eq!(
        c.wait_exit(&leaver, Duration::from_secs(20)),
        Some(0),
        "the leaver exits 0 once its successors took over\n{}",
        c.log_tails()
    );
    wait_rendezvous(&c, &vips, &rest).await;
}
}

/// What the stand-in kubelets report: enough for the scheduler to bind a DaemonSet Pod.
fn capacity() -> Value {
    json!({"cpu": "2", "memory": "4Gi", "pods": "110"})
}

/// Merges `status` into the Node's status (the status subresource, as a kubelet writes it).
async fn node_status(c: &Cluster, node: &str, status: Value) {
    Api::<Node>::all(c.client.clone())
        .patch_status(
            node,
            &PatchParams::default(),
            &Patch::Merge(json!({ "status": status })),
        )
        .await
        .expect("node status");
}

on_both_api_servers! {
/// The kubelet registers the Node and fills in its addresses a moment later: an agent started
/// in between waits for the InternalIP to send heartbeats from, as its log says, instead of
/// exiting.
async fn an_agent_started_before_its_node_has_an_internal_ip_waits_for_it(api) {
    const VIP: &str = "10.0.31.1";
    // The server in the name: both variants run at once, and the scratch directory is named by it.
    let mut c = Cluster::start_on(api, &format!("no-internal-ip-{api}")).await;
    c.add_node_without_status("node-a").await;
    // Capacity but no addresses yet (as with an external cloud provider, which fills them in):
    // on a real control plane the scheduler binds the agent's DaemonSet Pod only to a Node
    // with capacity, and the agent's token is bound to that Pod.
    node_status(&c, "node-a", json!({"capacity": capacity(), "allocatable": capacity()})).await;
    c.add_service("default", "web", &[VIP], false).await;
    c.set_endpoints("default", "web", &[("node-a", true)]).await;
    c.start_agent("node-a", &["--no-heartbeat-address"]);
    // Longer than the agent needs to start and list everything.
    tokio::time::sleep(Duration::from_secs(3)).await;
    node_status(
        &c,
        "node-a",
        json!({
            "addresses": [{"type": "InternalIP", "address": "127.0.0.1"}],
            "conditions": [{"type": "Ready", "status": "True"}],
        }),
    )
    .await;
    c.wait_for("node-a owns it once its Node has an InternalIP", T, |c| {
        c.owners(VIP) == ["node-a"]
    })
    .await;
}
}
