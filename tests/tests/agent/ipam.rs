//! The address allocator on a real kube-apiserver: `deploy/` applied (the `AddressPool` CRD
//! with its schema, the RBAC and the admission policy are the real ones), real agents, pools
//! written with `kubectl`, and the Services' `status.loadBalancer.ingress` read back.
//!
//! Timeouts are generous (the host has 2 cores and may be loaded); nothing here is a speed
//! target. A failover waits for the allocator Lease (15 s) to expire, hence [`FAILOVER`].

use std::{
    collections::BTreeMap,
    future::Future,
    time::{Duration, Instant},
};

use announcer_tests::env::{
    ApiKind, NAMESPACE,
    cluster::Cluster,
    kube::{agent_user, allocator_user},
};
use k8s_openapi::api::{coordination::v1::Lease, core::v1::Service, events::v1::Event};
use kube::{
    Api,
    api::{DeleteParams, ListParams, PostParams},
};
use serde_json::{Value, json};

const CLASS: &str = "announcer.dev/l2";
/// Convergence without failover.
const T: Duration = Duration::from_secs(60);
/// With a failover: the Lease (15 s) must expire first.
const FAILOVER: Duration = Duration::from_secs(120);
const NS: &str = "apps";

/// A real control plane with `nodes`, an agent on each (with `args`), ready, and the
/// allocator Deployment's two replicas (deploy/allocator.yaml) running as its Pods.
/// `--allocate-classless` among `args` is the allocator's `--classless` (the agents' flag of
/// old, when each agent allocated).
async fn world(name: &str, nodes: &[&str], args: &[&str]) -> Cluster {
    let mut c = Cluster::start_on(ApiKind::Kube, name).await;
    for n in nodes {
        c.add_node(n, &[], true).await;
    }
    let agent_args: Vec<&str> = args
        .iter()
        .copied()
        .filter(|a| *a != "--allocate-classless")
        .collect();
    let allocator_args: &[&str] = if args.contains(&"--allocate-classless") {
        &["--classless"]
    } else {
        &[]
    };
    for n in nodes {
        c.start_agent(n, &agent_args);
    }
    c.start_allocators(2, allocator_args);
    c.wait_ready(T).await;
    c.ensure_namespace(NS).await;
    c
}

/// `kubectl apply -f` of `yaml`.
fn apply(c: &Cluster, yaml: &str) -> Result<String, String> {
    let cp = c.kube().expect("real control plane");
    let file = cp.dir().join(format!("apply-{}.yaml", rand_suffix()));
    std::fs::write(&file, yaml).expect("write");
    cp.kubectl(&["apply", "-f", file.to_str().expect("utf-8")])
        .map_err(|e| e.to_string())
}

fn rand_suffix() -> u64 {
    use std::sync::atomic::{AtomicU64, Ordering};
    static N: AtomicU64 = AtomicU64::new(0);
    N.fetch_add(1, Ordering::Relaxed)
}

fn pool_yaml(name: &str, addresses: &[&str], extra: &str) -> String {
    let list: Vec<String> = addresses.iter().map(|a| format!("\"{a}\"")).collect();
    format!(
        "apiVersion: announcer.dev/v1alpha1\nkind: AddressPool\nmetadata:\n  name: {name}\nspec:\n  addresses: [{}]\n{extra}",
        list.join(", ")
    )
}

fn add_pool(c: &Cluster, name: &str, addresses: &[&str]) {
    apply(c, &pool_yaml(name, addresses, "")).unwrap_or_else(|e| panic!("apply pool: {e}"));
}

/// Creates a LoadBalancer Service (port 80 unless `spec` says otherwise) of our class unless
/// `spec` overrides `loadBalancerClass`, with `annotations`; its status is left alone.
async fn create(c: &Cluster, name: &str, spec: Value, annotations: Value) {
    create_in(c, NS, name, spec, annotations).await;
}

/// [`create`] in namespace `ns`.
async fn create_in(c: &Cluster, ns: &str, name: &str, spec: Value, annotations: Value) {
    let mut full =
        json!({"type": "LoadBalancer", "loadBalancerClass": CLASS, "ports": [{"port": 80}]});
    if let (Some(f), Some(e)) = (full.as_object_mut(), spec.as_object()) {
        f.extend(e.clone());
        f.retain(|_, v| !v.is_null());
    }
    let svc: Service = serde_json::from_value(json!({
        "metadata": {"name": name, "namespace": ns, "annotations": annotations},
        "spec": full,
    }))
    .expect("service");
    Api::<Service>::namespaced(c.client.clone(), ns)
        .create(&PostParams::default(), &svc)
        .await
        .expect("create service");
}

/// Polls `f` every 200 ms until it holds; panics with `what` (and the log tails) after
/// `timeout`.
async fn until<F, Fut>(c: &Cluster, what: &str, timeout: Duration, mut f: F)
where
    F: FnMut() -> Fut,
    Fut: Future<Output = bool>,
{
    let end = Instant::now() + timeout;
    while Instant::now() < end {
        if f().await {
            return;
        }
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
    panic!(
        "timed out after {timeout:?} waiting for {what}\n{}",
        c.log_tails()
    );
}

/// Asserts no IP is on two Services.
fn assert_distinct(a: &BTreeMap<String, Vec<String>>) {
    let mut seen: BTreeMap<&str, &str> = BTreeMap::new();
    for (svc, ips) in a {
        for ip in ips {
            if let Some(other) = seen.insert(ip, svc) {
                panic!("{ip} is on both {other} and {svc}");
            }
        }
    }
}

fn pool_json(c: &Cluster, name: &str) -> Value {
    let out = c
        .kube()
        .expect("real")
        .kubectl(&["get", "addresspool", name, "-o", "json"])
        .unwrap_or_else(|e| panic!("{e}"));
    serde_json::from_str(&out).expect("json")
}

fn condition(pool: &Value, type_: &str) -> Option<String> {
    pool["status"]["conditions"]
        .as_array()?
        .iter()
        .find(|c| c["type"] == type_)
        .and_then(|c| c["status"].as_str())
        .map(String::from)
}

async fn warning(c: &Cluster, svc: &str, reason: &str) -> Event {
    c.wait_for_event(NS, &format!("{reason} on {svc}"), T, |e: &Event| {
        e.type_.as_deref() == Some("Warning")
            && e.reason.as_deref() == Some(reason)
            && e.regarding.as_ref().and_then(|r| r.name.as_deref()) == Some(svc)
    })
    .await
}

async fn allocator_holder(c: &Cluster) -> Option<String> {
    Api::<Lease>::namespaced(c.client.clone(), NAMESPACE)
        .get_opt("announcer-allocator")
        .await
        .ok()
        .flatten()
        .and_then(|l| l.spec)
        .and_then(|s| s.holder_identity)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_pool_applied_with_kubectl_shows_in_kubectl_get_with_its_columns() {
    let c = world("ipam-get", &["node-a"], &[]).await;
    add_pool(&c, "web", &["10.0.80.0/24", "fd00::80:0/120"]);
    create(&c, "one", json!({}), json!({})).await;
    until(&c, "the pool's status counts the Service", T, || async {
        pool_json(&c, "web")["status"]["assignedIPv4"] == 1
    })
    .await;
    let table = c
        .kube()
        .expect("real")
        .kubectl(&["get", "addresspools", "-o", "wide"])
        .unwrap_or_else(|e| panic!("{e}"));
    let mut lines = table.lines();
    let header = lines.next().expect("header");
    for col in [
        "NAME",
        "ADDRESSES",
        "AUTO",
        "IPV4 USED",
        "IPV4 FREE",
        "IPV6 USED",
        "IPV6 FREE",
        "VALID",
        "AGE",
    ] {
        assert!(header.contains(col), "no {col} column in {header:?}");
    }
    let row = lines.next().expect("one row");
    assert!(row.starts_with("web "), "{row}");
    for cell in ["10.0.80.0/24", "true", " 1 ", " 255 ", "256", "True"] {
        assert!(row.contains(cell), "{cell:?} not in {row:?}");
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn invalid_pools_are_rejected_by_the_crd_schema_with_the_reason() {
    let c = Cluster::start_on(ApiKind::Kube, "ipam-invalid").await;
    let cases = [
        (
            "bad-cidr",
            pool_yaml("bad-cidr", &["10.0.0.0/33"], ""),
            "must be a CIDR",
        ),
        (
            "reversed",
            pool_yaml("reversed", &["10.0.0.9-10.0.0.1"], ""),
            "the first address of a range must not be after the last",
        ),
        (
            "mixed",
            pool_yaml("mixed", &["10.0.0.1-fd00::1"], ""),
            "a range of one family",
        ),
        (
            "bad-interface",
            pool_yaml(
                "bad-interface",
                &["10.0.0.0/24"],
                "  interfaces: [\"eth 0\"]\n",
            ),
            "interfaces[0]",
        ),
    ];
    for (name, yaml, message) in cases {
        let err = apply(&c, &yaml).expect_err(name);
        assert!(err.contains(message), "{name}: {message:?} not in {err}");
    }
    let listed = c
        .kube()
        .expect("real")
        .kubectl(&["get", "addresspools", "-o", "name"])
        .unwrap_or_else(|e| panic!("{e}"));
    assert!(listed.trim().is_empty(), "none was stored: {listed}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_service_of_our_class_without_an_address_gets_one_from_the_pool() {
    let c = world("ipam-one", &["node-a", "node-b"], &[]).await;
    add_pool(&c, "web", &["10.0.81.10-10.0.81.20"]);
    create(&c, "web", json!({}), json!({})).await;
    until(&c, "web has an address", T, || async {
        c.ingress_ips(NS).await["web"] == ["10.0.81.10"]
    })
    .await;
    let svc = Api::<Service>::namespaced(c.client.clone(), NS)
        .get("web")
        .await
        .expect("get");
    let ingress = svc
        .status
        .and_then(|s| s.load_balancer)
        .and_then(|l| l.ingress);
    assert_eq!(
        ingress
            .and_then(|i| i.first().and_then(|i| i.ip_mode.clone()))
            .as_deref(),
        Some("VIP")
    );
}

const MANY: usize = 200;

async fn create_many(c: &Cluster) {
    for i in 0..MANY {
        create(c, &format!("s{i:03}"), json!({}), json!({})).await;
    }
}

async fn all_have_one(c: &Cluster) -> bool {
    let a = c.ingress_ips(NS).await;
    a.len() == MANY && a.values().all(|ips| ips.len() == 1)
}

/// Lists the Services every 20 ms until `stop` is set, and returns every list in which one
/// address was on two Services at once (a list is one snapshot of the API server, so such a
/// pair really held the address together), with the count of lists taken.
fn sample_duplicates(
    c: &Cluster,
    stop: std::sync::Arc<std::sync::atomic::AtomicBool>,
) -> tokio::task::JoinHandle<(Vec<String>, usize)> {
    let api = Api::<Service>::namespaced(c.client.clone(), NS);
    tokio::spawn(async move {
        let mut dups = Vec::new();
        let mut lists = 0;
        while !stop.load(std::sync::atomic::Ordering::Relaxed) {
            if let Ok(l) = api.list(&ListParams::default()).await {
                lists += 1;
                let mut seen: BTreeMap<String, String> = BTreeMap::new();
                for s in l.items {
                    let name = s.metadata.name.clone().unwrap_or_default();
                    let ips = s
                        .status
                        .and_then(|st| st.load_balancer)
                        .and_then(|lb| lb.ingress)
                        .unwrap_or_default();
                    for ip in ips.into_iter().filter_map(|i| i.ip) {
                        if let Some(other) = seen.insert(ip.clone(), name.clone()) {
                            dups.push(format!("{ip} on {other} and {name}"));
                        }
                    }
                }
            }
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
        (dups, lists)
    })
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn two_hundred_services_deleted_and_recreated_never_share_an_address() {
    let c = world("ipam-many", &["node-a", "node-b"], &[]).await;
    add_pool(&c, "big", &["10.0.82.0/24"]);
    // Sampled all along, not only at the end: an allocator that wrote first and resolved
    // conflicts afterwards would end in the same distinct state.
    let stop = std::sync::Arc::new(std::sync::atomic::AtomicBool::new(false));
    let sampler = sample_duplicates(&c, stop.clone());
    create_many(&c).await;
    until(&c, "every Service has an address", T, || all_have_one(&c)).await;
    assert_distinct(&c.ingress_ips(NS).await);

    let api = Api::<Service>::namespaced(c.client.clone(), NS);
    for i in 0..MANY {
        api.delete(&format!("s{i:03}"), &DeleteParams::default())
            .await
            .expect("delete");
    }
    until(&c, "every Service is gone", T, || async {
        c.ingress_ips(NS).await.is_empty()
    })
    .await;
    create_many(&c).await;
    until(&c, "every re-created Service has an address", T, || {
        all_have_one(&c)
    })
    .await;
    assert_distinct(&c.ingress_ips(NS).await);
    until(&c, "the pool counts 200", T, || async {
        pool_json(&c, "big")["status"]["assignedIPv4"] == MANY as u64
    })
    .await;
    stop.store(true, std::sync::atomic::Ordering::Relaxed);
    let (dups, lists) = sampler.await.expect("sampler");
    eprintln!("{lists} lists sampled during the churn");
    assert!(lists > 50, "the churn was sampled ({lists} lists)");
    assert!(
        dups.is_empty(),
        "an address was on two Services at once, {} times; first: {:?}",
        dups.len(),
        &dups[..dups.len().min(5)]
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_allocator_killed_mid_allocation_duplicates_and_moves_no_address() {
    let nodes = ["node-a", "node-b", "node-c"];
    let mut c = world("ipam-failover", &nodes, &[]).await;
    // Every Service first, the pool last: its arrival starts one burst of MANY writes, which
    // the kill below interrupts (the allocator is idle without pools, so none is written yet).
    create_many(&c).await;
    add_pool(&c, "big", &["10.0.83.0/24"]);
    // Every address seen, per Service: none may ever change.
    let mut seen: BTreeMap<String, Vec<String>> = BTreeMap::new();
    let mut check = |a: &BTreeMap<String, Vec<String>>| {
        assert_distinct(a);
        for (svc, ips) in a {
            if ips.is_empty() {
                continue;
            }
            if let Some(before) = seen.get(svc) {
                assert_eq!(before, ips, "{svc}'s address changed");
            }
            seen.insert(svc.clone(), ips.clone());
        }
    };
    let end = Instant::now() + T;
    let first = loop {
        let a = c.ingress_ips(NS).await;
        check(&a);
        if a.values().any(|i| !i.is_empty())
            && let Some(h) = allocator_holder(&c).await
        {
            break h;
        }
        assert!(
            Instant::now() < end,
            "no allocation started\n{}",
            c.log_tails()
        );
        tokio::time::sleep(Duration::from_millis(5)).await;
    };
    c.kill_allocator(&first);
    let at_kill = c.ingress_ips(NS).await;
    check(&at_kill);
    let with = at_kill.values().filter(|i| !i.is_empty()).count();
    eprintln!(
        "killed {first} with {with} of {} Services addressed",
        at_kill.len()
    );
    assert!(
        with > 0 && with < MANY,
        "the kill came mid-allocation: {with} of {MANY} Services had an address at the kill"
    );
    let end = Instant::now() + FAILOVER;
    loop {
        let a = c.ingress_ips(NS).await;
        check(&a);
        if a.len() == MANY && a.values().all(|i| i.len() == 1) {
            break;
        }
        assert!(
            Instant::now() < end,
            "not every Service got an address after the failover\n{}",
            c.log_tails()
        );
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
    let now = allocator_holder(&c).await.expect("holder");
    assert_ne!(now, first, "another replica took over");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_requested_address_is_honoured() {
    let c = world("ipam-requested", &["node-a"], &[]).await;
    add_pool(&c, "web", &["10.0.84.0/24"]);
    create(
        &c,
        "web",
        json!({}),
        json!({"announcer.dev/load-balancer-ips": "10.0.84.77"}),
    )
    .await;
    until(&c, "web has the address it asked for", T, || async {
        c.ingress_ips(NS).await["web"] == ["10.0.84.77"]
    })
    .await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_requested_address_outside_every_pool_is_a_warning_event() {
    let c = world("ipam-outside", &["node-a"], &[]).await;
    add_pool(&c, "web", &["10.0.85.0/24"]);
    create(
        &c,
        "web",
        json!({}),
        json!({"announcer.dev/load-balancer-ips": "192.168.85.1"}),
    )
    .await;
    let e = warning(&c, "web", "RequestedIPOutsidePools").await;
    assert!(e.note.unwrap_or_default().contains("192.168.85.1"));
    assert!(c.ingress_ips(NS).await["web"].is_empty());
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn services_with_one_sharing_key_and_distinct_ports_share_an_address() {
    let c = world("ipam-shared", &["node-a"], &[]).await;
    add_pool(&c, "web", &["10.0.86.0/24"]);
    let key = json!({"announcer.dev/allow-shared-ip": "front"});
    create(&c, "http", json!({"ports": [{"port": 80}]}), key.clone()).await;
    create(&c, "https", json!({"ports": [{"port": 443}]}), key.clone()).await;
    create(&c, "clash", json!({"ports": [{"port": 80}]}), key).await;
    until(&c, "all three have addresses", T, || async {
        c.ingress_ips(NS).await.values().all(|i| i.len() == 1)
    })
    .await;
    let a = c.ingress_ips(NS).await;
    // Creation times have a one-second granularity, so which of http and clash counts as the
    // older (and gets the first address) may be decided by name: https, on 443, shares with
    // whichever holds the address it finds first.
    assert_ne!(a["http"], a["clash"], "port 80 clashes");
    assert!(
        a["https"] == a["http"] || a["https"] == a["clash"],
        "443 shares with a port-80 Service: {a:?}"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_exhausted_pool_is_a_warning_event_and_its_exhausted_condition() {
    let c = world("ipam-exhausted", &["node-a"], &[]).await;
    add_pool(&c, "tiny", &["10.0.87.1-10.0.87.2"]);
    for n in ["a", "b"] {
        create(&c, n, json!({}), json!({})).await;
    }
    until(&c, "a and b have addresses", T, || async {
        c.ingress_ips(NS).await.values().all(|i| i.len() == 1)
    })
    .await;
    create(&c, "c", json!({}), json!({})).await;
    warning(&c, "c", "PoolExhausted").await;
    until(&c, "the pool says Exhausted", T, || async {
        condition(&pool_json(&c, "tiny"), "Exhausted").as_deref() == Some("True")
    })
    .await;
    assert!(c.ingress_ips(NS).await["c"].is_empty());
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_classless_service_gets_no_address_by_default() {
    let c = world("ipam-classless-off", &["node-a"], &[]).await;
    add_pool(&c, "web", &["10.0.88.0/24"]);
    create(
        &c,
        "classless",
        json!({"loadBalancerClass": null}),
        json!({}),
    )
    .await;
    create(&c, "ours", json!({}), json!({})).await;
    until(&c, "ours has an address", T, || async {
        c.ingress_ips(NS).await["ours"].len() == 1
    })
    .await;
    // The allocator is active and has seen both; give it a while longer anyway.
    tokio::time::sleep(Duration::from_secs(5)).await;
    assert!(c.ingress_ips(NS).await["classless"].is_empty());
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_classless_service_gets_an_address_with_allocate_classless() {
    let c = world("ipam-classless-on", &["node-a"], &["--allocate-classless"]).await;
    add_pool(&c, "web", &["10.0.89.0/24"]);
    create(
        &c,
        "classless",
        json!({"loadBalancerClass": null}),
        json!({}),
    )
    .await;
    until(&c, "classless has an address", T, || async {
        c.ingress_ips(NS).await["classless"].len() == 1
    })
    .await;
}

/// Agent and allocator requests that change something, other than Lease renewals.
fn agent_writes(c: &Cluster) -> Vec<String> {
    let (agent, allocator) = (agent_user(), allocator_user());
    c.kube()
        .expect("real")
        .audit()
        .expect("audit log")
        .into_iter()
        .filter(|r| r.user == agent || r.user == allocator)
        .filter(|r| matches!(r.verb.as_str(), "create" | "update" | "patch" | "delete"))
        .filter(|r| r.resource != "leases")
        .map(|r| format!("{} {}/{} {:?}", r.verb, r.group, r.resource, r.name))
        .collect()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn steady_state_makes_no_writes_but_lease_renewals() {
    let c = world("ipam-steady", &["node-a", "node-b"], &[]).await;
    add_pool(&c, "web", &["10.0.90.0/24"]);
    for i in 0..5 {
        create(&c, &format!("s{i}"), json!({}), json!({})).await;
    }
    until(&c, "every Service has an address", T, || async {
        let a = c.ingress_ips(NS).await;
        a.len() == 5 && a.values().all(|i| i.len() == 1)
    })
    .await;
    until(&c, "the pool counts them", T, || async {
        pool_json(&c, "web")["status"]["assignedIPv4"] == 5
    })
    .await;
    // Let in-flight writes (Events) land, then watch a window.
    tokio::time::sleep(Duration::from_secs(3)).await;
    let before = agent_writes(&c);
    tokio::time::sleep(Duration::from_secs(20)).await;
    let after = agent_writes(&c);
    let new: Vec<_> = after.iter().skip(before.len()).collect();
    assert!(new.is_empty(), "writes in steady state: {new:#?}");
    let lease_updates = c
        .kube()
        .expect("real")
        .audit()
        .expect("audit")
        .into_iter()
        .filter(|r| r.name.as_deref() == Some("announcer-allocator") && r.verb == "update")
        .count();
    assert!(lease_updates > 0, "the allocator renews its Lease");
}

/// Allocator replica `pod`'s patches of services/status, as the audit log has them.
/// The allocator Pod's Service-status patches the API server accepted (2xx).
///
/// A patch refused with 409 changed nothing: every write carries the resourceVersion its plan
/// was made from, so a write made from a stale view cannot land. A replica paused between its
/// "am I active?" check and the send can still have such a request in flight when it resumes;
/// that is the fencing working, not a write.
fn accepted_status_patches_by(c: &Cluster, pod: &str) -> usize {
    let allocator = allocator_user();
    c.kube()
        .expect("real")
        .audit()
        .expect("audit log")
        .into_iter()
        .filter(|r| r.user == allocator && r.pod.as_deref() == Some(pod))
        .filter(|r| r.verb == "patch" && r.resource == "services/status")
        .filter(|r| (200..300).contains(&r.code))
        .count()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_paused_allocator_writes_nothing_once_it_resumes_after_a_takeover() {
    let nodes = ["node-a", "node-b"];
    let c = world("ipam-paused", &nodes, &[]).await;
    // Every Service first, the pool last: one burst of MANY writes, paused as soon as the
    // first lands, so the paused allocator still has writes pending when it resumes.
    create_many(&c).await;
    add_pool(&c, "web", &["10.0.91.0/24"]);
    let end = Instant::now() + T;
    let first = loop {
        if c.ingress_ips(NS).await.values().any(|i| !i.is_empty())
            && let Some(h) = allocator_holder(&c).await
        {
            break h;
        }
        assert!(
            Instant::now() < end,
            "no allocation started\n{}",
            c.log_tails()
        );
        tokio::time::sleep(Duration::from_millis(5)).await;
    };
    c.signal_allocator(&first, libc::SIGSTOP);
    let at_pause = c.ingress_ips(NS).await;
    let pending = at_pause.values().filter(|i| i.is_empty()).count();
    eprintln!("paused {first} with {pending} of {MANY} Services still without an address");
    assert!(
        pending > 0,
        "paused mid-burst: the paused allocator still had writes to make"
    );
    until(
        &c,
        "another replica takes the allocator Lease",
        FAILOVER,
        || async { allocator_holder(&c).await.is_some_and(|h| h != first) },
    )
    .await;
    until(
        &c,
        "every Service has an address from the new allocator",
        T,
        || all_have_one(&c),
    )
    .await;
    let before = accepted_status_patches_by(&c, &first);
    let addresses_before = c.ingress_ips(NS).await;
    c.signal_allocator(&first, libc::SIGCONT);
    // Long enough for the resumed allocator to run every timer it missed, and to try again.
    tokio::time::sleep(Duration::from_secs(10)).await;
    assert_eq!(
        accepted_status_patches_by(&c, &first),
        before,
        "the resumed old allocator wrote Services"
    );
    let after = c.ingress_ips(NS).await;
    assert_eq!(
        after, addresses_before,
        "the resumed old allocator changed no Service's addresses"
    );
    assert_distinct(&after);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn sigterm_on_the_active_allocator_gives_its_lease_up_before_it_exits() {
    let nodes = ["node-a", "node-b"];
    let mut c = world("ipam-sigterm", &nodes, &[]).await;
    add_pool(&c, "web", &["10.0.92.0/24"]);
    until(&c, "an allocator holds the Lease", T, || async {
        allocator_holder(&c).await.is_some()
    })
    .await;
    let first = allocator_holder(&c).await.expect("holder");
    c.signal_allocator(&first, libc::SIGTERM);
    assert_eq!(
        c.wait_allocator_exit(&first, T),
        Some(0),
        "SIGTERM exits cleanly"
    );
    assert_ne!(
        allocator_holder(&c).await.as_deref(),
        Some(first.as_str()),
        "the Lease was given up (or already taken over) by the time the allocator exited"
    );
    create(&c, "after", json!({}), json!({})).await;
    until(&c, "the other replica allocates", T, || async {
        c.ingress_ips(NS).await["after"].len() == 1
    })
    .await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_prefer_dual_stack_service_gets_an_address_of_each_family() {
    let c = world("ipam-dual", &["node-a"], &[]).await;
    add_pool(&c, "web", &["10.0.93.0/24", "fd00::93:0/120"]);
    create(
        &c,
        "dual",
        json!({"ipFamilyPolicy": "PreferDualStack"}),
        json!({}),
    )
    .await;
    until(&c, "dual has two addresses", T, || async {
        c.ingress_ips(NS).await["dual"].len() == 2
    })
    .await;
    let ips = &c.ingress_ips(NS).await["dual"];
    assert!(ips.contains(&"10.0.93.0".to_string()), "{ips:?}");
    assert!(ips.contains(&"fd00::93:0".to_string()), "{ips:?}");
}

/// The Service's `metadata.creationTimestamp`.
async fn created(c: &Cluster, name: &str) -> k8s_openapi::jiff::Timestamp {
    Api::<Service>::namespaced(c.client.clone(), NS)
        .get(name)
        .await
        .expect("get")
        .metadata
        .creation_timestamp
        .expect("creationTimestamp")
        .0
}

/// Waits until the API server's clock (second granularity) has passed `name`'s
/// creationTimestamp, so that the next Service created is strictly younger.
async fn next_second(c: &Cluster, name: &str) {
    let t = created(c, name).await;
    while k8s_openapi::jiff::Timestamp::now().as_second() <= t.as_second() {
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    tokio::time::sleep(Duration::from_millis(200)).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn two_services_on_one_address_keep_the_older_and_move_the_younger_with_a_warning() {
    let c = world("ipam-conflict", &["node-a"], &[]).await;
    add_pool(&c, "web", &["10.0.94.0/24"]);
    // Names in the opposite order to ages: a rule that broke the tie by name (or compared
    // names first) would keep the younger.
    let (older, younger) = ("z-older", "a-younger");
    create(&c, older, json!({}), json!({})).await;
    until(&c, "the older has an address", T, || async {
        c.ingress_ips(NS).await[older].len() == 1
    })
    .await;
    next_second(&c, older).await;
    create(&c, younger, json!({}), json!({})).await;
    assert!(
        created(&c, older).await < created(&c, younger).await,
        "the two creationTimestamps differ"
    );
    until(&c, "the younger has an address", T, || async {
        c.ingress_ips(NS).await[younger].len() == 1
    })
    .await;
    let old = c.ingress_ips(NS).await[older].clone();
    // What a split brain would leave: the younger Service written onto the older's address.
    c.set_ingress(NS, younger, &[old[0].as_str()]).await;
    warning(&c, younger, "AddressConflict").await;
    until(
        &c,
        "the younger moved off the older's address",
        T,
        || async {
            let a = c.ingress_ips(NS).await;
            a[younger].len() == 1 && a[younger] != old
        },
    )
    .await;
    assert_eq!(
        c.ingress_ips(NS).await[older],
        old,
        "the older keeps its address"
    );
}

/// The Warning Events on `svc` so far: (reason, note).
async fn warnings_on(c: &Cluster, svc: &str) -> Vec<(String, String)> {
    Api::<Event>::namespaced(c.client.clone(), NS)
        .list(&ListParams::default())
        .await
        .expect("list events")
        .items
        .into_iter()
        .filter(|e| e.type_.as_deref() == Some("Warning"))
        .filter(|e| e.regarding.as_ref().and_then(|r| r.name.as_deref()) == Some(svc))
        .map(|e| (e.reason.unwrap_or_default(), e.note.unwrap_or_default()))
        .collect()
}

/// Watches for `timeout`: `svc` must never get an address, and must be warned with `reason`;
/// returns the Warning's note.
async fn refused(c: &Cluster, svc: &str, reason: &str, timeout: Duration) -> String {
    let end = Instant::now() + timeout;
    loop {
        let got = c.ingress_ips(NS).await[svc].clone();
        assert!(got.is_empty(), "{svc} was given {got:?}");
        if let Some((_, note)) = warnings_on(c, svc)
            .await
            .into_iter()
            .find(|w| w.0 == reason)
        {
            return note;
        }
        assert!(
            Instant::now() < end,
            "no {reason} Warning on {svc} after {timeout:?}: {:?}\n{}",
            warnings_on(c, svc).await,
            c.log_tails()
        );
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_older_service_requesting_a_younger_services_live_address_does_not_get_it() {
    let c = world("ipam-hold", &["node-a"], &[]).await;
    add_pool(&c, "web", &["10.0.95.0/24"]);
    // An old ClusterIP Service, later switched to LoadBalancer naming the victim's address.
    create(
        &c,
        "attacker",
        json!({"type": "ClusterIP", "loadBalancerClass": null}),
        json!({}),
    )
    .await;
    next_second(&c, "attacker").await;
    create(&c, "victim", json!({}), json!({})).await;
    assert!(created(&c, "attacker").await < created(&c, "victim").await);
    until(&c, "the victim has an address", T, || async {
        c.ingress_ips(NS).await["victim"].len() == 1
    })
    .await;
    let live = c.ingress_ips(NS).await["victim"].clone();
    Api::<Service>::namespaced(c.client.clone(), NS)
        .patch(
            "attacker",
            &kube::api::PatchParams::default(),
            &kube::api::Patch::Merge(json!({
                "metadata": {"annotations": {"announcer.dev/load-balancer-ips": live[0]}},
                "spec": {"type": "LoadBalancer", "loadBalancerClass": CLASS},
            })),
        )
        .await
        .expect("switch to LoadBalancer");
    let note = refused(&c, "attacker", "RequestedIPTaken", T).await;
    assert!(note.contains(&live[0]), "{note}");
    // And it stays so: a few more allocator passes change nothing.
    let end = Instant::now() + Duration::from_secs(5);
    while Instant::now() < end {
        let a = c.ingress_ips(NS).await;
        assert_eq!(a["victim"], live, "the victim keeps its address");
        assert!(a["attacker"].is_empty(), "attacker got {:?}", a["attacker"]);
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_service_naming_a_pool_its_namespace_may_not_use_gets_no_address_and_a_warning() {
    let c = world("ipam-selector", &["node-a"], &[]).await;
    apply(
        &c,
        &pool_yaml(
            "red",
            &["10.0.96.0/24"],
            "  namespaceSelector:\n    matchLabels: {team: red}\n",
        ),
    )
    .unwrap_or_else(|e| panic!("apply pool: {e}"));
    // NS has no `team` label.
    create(
        &c,
        "intruder",
        json!({}),
        json!({"announcer.dev/address-pool": "red"}),
    )
    .await;
    let note = refused(&c, "intruder", "AddressPoolNotAllowed", T).await;
    assert!(note.contains("red"), "{note}");
    let end = Instant::now() + Duration::from_secs(5);
    while Instant::now() < end {
        assert!(c.ingress_ips(NS).await["intruder"].is_empty());
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
}

/// The ingress IPs of `ns/name`.
async fn addresses_of(c: &Cluster, ns: &str, name: &str) -> Vec<String> {
    Api::<Service>::namespaced(c.client.clone(), ns)
        .get(name)
        .await
        .expect("get service")
        .status
        .and_then(|st| st.load_balancer)
        .and_then(|lb| lb.ingress)
        .unwrap_or_default()
        .into_iter()
        .filter_map(|i| i.ip)
        .collect()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn one_sharing_key_in_another_namespace_does_not_share_without_both_opting_in() {
    let c = world("ipam-share-ns", &["node-a"], &[]).await;
    add_pool(&c, "web", &["10.0.97.0/24"]);
    c.ensure_namespace("tenant").await;
    let key = json!({"announcer.dev/allow-shared-ip": "front"});
    create(&c, "victim", json!({"ports": [{"port": 80}]}), key.clone()).await;
    until(&c, "the victim has an address", T, || async {
        c.ingress_ips(NS).await["victim"].len() == 1
    })
    .await;
    let live = c.ingress_ips(NS).await["victim"].clone();
    // Another tenant, same key, another port, asking for the victim's address.
    let mut ask = key.clone();
    ask["announcer.dev/load-balancer-ips"] = json!(live[0]);
    create_in(
        &c,
        "tenant",
        "rider",
        json!({"ports": [{"port": 443}]}),
        ask,
    )
    .await;
    let end = Instant::now() + Duration::from_secs(10);
    while Instant::now() < end {
        let rider = addresses_of(&c, "tenant", "rider").await;
        assert!(rider.is_empty(), "rider shares {rider:?} across namespaces");
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
    let e = c
        .wait_for_event("tenant", "RequestedIPTaken on rider", T, |e: &Event| {
            e.type_.as_deref() == Some("Warning")
                && e.reason.as_deref() == Some("RequestedIPTaken")
                && e.regarding.as_ref().and_then(|r| r.name.as_deref()) == Some("rider")
        })
        .await;
    assert!(
        e.note
            .unwrap_or_default()
            .contains("allow-shared-ip-namespaces"),
        "the Warning names the opt-in"
    );
    assert_eq!(c.ingress_ips(NS).await["victim"], live);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn narrowing_a_pool_keeps_the_address_a_service_holds_with_a_warning() {
    let c = world("ipam-narrow", &["node-a"], &[]).await;
    add_pool(&c, "web", &["10.0.98.0/24"]);
    create(&c, "held", json!({}), json!({})).await;
    until(&c, "held has an address", T, || async {
        c.ingress_ips(NS).await["held"].len() == 1
    })
    .await;
    let before = c.ingress_ips(NS).await["held"].clone();
    // The pool now serves only `tier: web` Services; `held` has no such label.
    apply(
        &c,
        &pool_yaml(
            "web",
            &["10.0.98.0/24"],
            "  serviceSelector:\n    matchLabels: {tier: web}\n",
        ),
    )
    .unwrap_or_else(|e| panic!("apply pool: {e}"));
    let end = Instant::now() + T;
    loop {
        assert_eq!(
            c.ingress_ips(NS).await["held"],
            before,
            "the pool edit renumbered held"
        );
        if warnings_on(&c, "held")
            .await
            .iter()
            .any(|w| w.0 == "AddressOutsidePoolRules")
        {
            break;
        }
        assert!(
            Instant::now() < end,
            "no AddressOutsidePoolRules Warning on held: {:?}\n{}",
            warnings_on(&c, "held").await,
            c.log_tails()
        );
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
    // New rules for new Services: an unlabelled one gets nothing from the pool.
    create(&c, "new", json!({}), json!({})).await;
    warning(&c, "new", "IPFamilyNotAvailable").await;
    assert!(c.ingress_ips(NS).await["new"].is_empty());
    assert_eq!(c.ingress_ips(NS).await["held"], before);
}
