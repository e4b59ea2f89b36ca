//! The withdrawal controller on the real kube-apiserver after `kubectl apply -k deploy/`: under
//! its own account (a token of `announcer-withdrawal`, so its RBAC and the admission policy
//! apply), with the real EndpointSlice controller deriving the Service's endpoints from the Pod
//! ([`announcer_tests::env::kube::withdrawal`] stages it; the audit of what the account sent is
//! in the deploy tests' RBAC audit).

use std::time::{Duration, Instant};

use announcer::withdrawer::{
    pod::{REASON, ready},
    slots::{LEASE_NAME, WITHDRAWN_ANNOTATION},
};
use announcer_tests::env::{
    NAMESPACE,
    kube::{
        KubeControlPlane,
        withdrawal::{SUSPECT, Scene},
    },
};
use k8s_openapi::api::coordination::v1::Lease;
use kube::Api;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn on_kube_apiserver_a_quorum_withdraws_the_pod_and_its_endpoint_goes_unready() {
    let cp = KubeControlPlane::start_applied("withdrawer-real").await;
    let scene = Scene::stage(&cp).await;
    scene.crash_and_report().await;
    let started = Instant::now();
    let end = started + Duration::from_secs(10);
    while ready(&scene.pod().await) != Some(false) {
        assert!(
            Instant::now() < end,
            "web-1 not withdrawn; withdrawer log:\n{}",
            scene.log_text()
        );
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    let pod = scene.pod().await;
    let r = pod
        .status
        .and_then(|s| s.conditions)
        .and_then(|c| c.into_iter().find(|c| c.type_ == "Ready"))
        .expect("Ready");
    assert_eq!(r.reason.as_deref(), Some(REASON));
    // The real EndpointSlice controller follows: the endpoint is no longer ready, long before
    // the node lifecycle controller's 40 s grace.
    scene.wait_endpoint(false, Duration::from_secs(10)).await;
    assert!(
        started.elapsed() < Duration::from_secs(20),
        "withdrawn after {:?}",
        started.elapsed()
    );
    // The shared cap lists the node.
    let agents: Api<Lease> = Api::namespaced(cp.client(), NAMESPACE);
    let slots = agents.get(LEASE_NAME).await.expect("the cap Lease");
    let listed = slots
        .metadata
        .annotations
        .and_then(|a| a.get(WITHDRAWN_ANNOTATION).cloned())
        .unwrap_or_default();
    assert!(listed.starts_with(&format!("{SUSPECT}=")), "{listed}");
    // Every request it made was allowed (the watches, the Pod read and write, the Lease, the
    // Events, recorded in the background): the account's grant suffices.
    tokio::time::sleep(Duration::from_secs(1)).await;
    let text = scene.log_text();
    assert!(
        !text.to_lowercase().contains("forbidden"),
        "the withdrawer was refused something:\n{text}"
    );
    assert!(
        text.contains("Ready set False"),
        "the withdrawer wrote the Pod itself:\n{text}"
    );
}
