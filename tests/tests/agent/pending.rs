//! A class-less LoadBalancer Service that nothing will allocate (the allocator without
//! `--classless`, no other load balancer installed) is told why it stays `<pending>` and how
//! to fix it: one `ClasslessNotAllocated` Warning Event from the real allocator, on a real
//! kube-apiserver with `deploy/` applied, once however long it waits.

use std::time::Duration;

use announcer_tests::env::{ApiKind, cluster::Cluster};
use k8s_openapi::api::{core::v1::Service, events::v1::Event};
use kube::{Api, api::PostParams};
use serde_json::json;

const T: Duration = Duration::from_secs(60);
const NS: &str = "apps";
const REASON: &str = "ClasslessNotAllocated";

fn told(e: &Event) -> bool {
    e.type_.as_deref() == Some("Warning")
        && e.reason.as_deref() == Some(REASON)
        && e.regarding.as_ref().and_then(|r| r.name.as_deref()) == Some("classless")
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_pending_classless_service_is_told_once_why_and_how_to_fix_it() {
    let mut c = Cluster::start_on(ApiKind::Kube, "pending-classless").await;
    c.add_node("node-a", &[], true).await;
    c.start_agent("node-a", &[]);
    c.start_allocators(2, &[]);
    c.wait_ready(T).await;
    c.ensure_namespace(NS).await;
    let cp = c.kube().expect("real control plane");
    let pool = cp.dir().join("pending-pool.yaml");
    std::fs::write(
        &pool,
        "apiVersion: announcer.dev/v1alpha1\nkind: AddressPool\nmetadata:\n  name: web\nspec:\n  addresses: [\"10.0.87.0/24\"]\n",
    )
    .expect("write");
    cp.kubectl(&["apply", "-f", pool.to_str().expect("utf-8")])
        .expect("apply the pool");
    let svc: Service = serde_json::from_value(json!({
        "metadata": {"name": "classless", "namespace": NS},
        "spec": {"type": "LoadBalancer", "ports": [{"port": 80}]},
    }))
    .expect("a Service");
    Api::<Service>::namespaced(c.client(), NS)
        .create(&PostParams::default(), &svc)
        .await
        .expect("create the Service");

    let e = c
        .wait_for_event(NS, "ClasslessNotAllocated on classless", T, told)
        .await;
    let note = e.note.unwrap_or_default();
    assert!(
        note.contains("<pending>")
            && note.contains("loadBalancerClass: announcer.dev/l2")
            && note.contains("--classless"),
        "{note}"
    );
    // Recomputes (a second Service, the Lease renewals) do not repeat it.
    let other: Service = serde_json::from_value(json!({
        "metadata": {"name": "ours", "namespace": NS},
        "spec": {"type": "LoadBalancer", "loadBalancerClass": "announcer.dev/l2", "ports": [{"port": 80}]},
    }))
    .expect("a Service");
    Api::<Service>::namespaced(c.client(), NS)
        .create(&PostParams::default(), &other)
        .await
        .expect("create ours");
    tokio::time::sleep(Duration::from_secs(8)).await;
    let events = announcer_tests::env::cluster::list_events(&c.client(), NS).await;
    let n: i32 = events
        .iter()
        .filter(|e| told(e))
        .map(|e| e.deprecated_count.unwrap_or(1).max(1))
        .sum();
    assert_eq!(n, 1, "told {n} times");
}
