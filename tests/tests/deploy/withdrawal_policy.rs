//! The `announcer-withdrawal-pod-status` admission policy (deploy/admission-policy.yaml) on the
//! real kube-apiserver, after `kubectl apply -k deploy/`: the withdrawal controller's account
//! (`announcer-withdrawal`, with a token of its own) may turn a Pod's `Ready` from True to
//! False with reason `AnnouncerNodeUnreachable`, in a namespace labelled
//! `announcer.dev/fast-endpoint-withdrawal=true`, and nothing else
//! (docs/design/endpoint-withdrawal.md §5).
//!
//! Each write is the controller's own: a strategic merge patch of `pods/status` carrying the
//! Pod's uid and resourceVersion ([`announcer::withdrawer::pod::withdraw_patch`]), with the
//! forbidden change added to it where a test needs one.

use std::time::Duration;

use announcer::withdrawer::pod::{REASON, withdraw_patch};
use announcer_tests::env::kube::{KubeControlPlane, WITHDRAWAL_SERVICE_ACCOUNT, client_for};
use k8s_openapi::{
    api::core::v1::{Namespace, Pod},
    jiff::Timestamp,
};
use kube::{
    Api,
    api::{Patch, PatchParams, PostParams},
};
use serde_json::{Value, json};

/// A node no kubelet runs: nothing else writes the Pods' status.
const NODE: &str = "node-gone";

/// A client with a token of the withdrawal account.
async fn withdrawal_client(cp: &KubeControlPlane) -> kube::Client {
    let path = cp
        .write_account_kubeconfig(WITHDRAWAL_SERVICE_ACCOUNT)
        .await
        .unwrap_or_else(|e| panic!("a token of the withdrawal account: {e}"));
    client_for(&path).await.unwrap_or_else(|e| panic!("{e}"))
}

/// Namespace `ns`, opted in or not, with Pod `web-1` bound to [`NODE`], running and ready
/// (written by the admin, as its kubelet would).
async fn ready_pod(cp: &KubeControlPlane, ns: &str, opted_in: bool) {
    let labels = if opted_in {
        json!({"announcer.dev/fast-endpoint-withdrawal": "true"})
    } else {
        json!({})
    };
    Api::<Namespace>::all(cp.client())
        .create(
            &PostParams::default(),
            &serde_json::from_value(json!({"metadata": {"name": ns, "labels": labels}}))
                .expect("namespace"),
        )
        .await
        .expect("create the namespace");
    let pods: Api<Pod> = Api::namespaced(cp.client(), ns);
    pods.create(
        &PostParams::default(),
        &serde_json::from_value(json!({
            "metadata": {"name": "web-1", "labels": {"app": "web"}},
            "spec": {"nodeName": NODE, "containers": [{"name": "web", "image": "web"}]},
        }))
        .expect("pod"),
    )
    .await
    .expect("create the Pod");
    let t = "2026-01-01T00:00:00Z";
    let status = json!({"status": {
        "phase": "Running",
        "hostIP": "10.0.0.9", "hostIPs": [{"ip": "10.0.0.9"}],
        "podIP": "10.244.9.5", "podIPs": [{"ip": "10.244.9.5"}],
        "conditions": [
            {"type": "PodScheduled", "status": "True", "lastTransitionTime": t},
            {"type": "Initialized", "status": "True", "lastTransitionTime": t},
            {"type": "ContainersReady", "status": "True", "lastTransitionTime": t},
            {"type": "Ready", "status": "True", "lastTransitionTime": t},
        ],
    }});
    pods.patch_status("web-1", &PatchParams::default(), &Patch::Strategic(&status))
        .await
        .expect("the admin sets the Pod running and ready");
}

/// The controller's patch for `pod`, with `extra` merged into it: its conditions by type (as
/// the strategic merge does: one of type Ready replaces ours, another is added), the rest as a
/// merge patch.
fn patch_for(pod: &Pod, mut extra: Value) -> Value {
    let mut p = withdraw_patch(
        pod.metadata.uid.as_deref().expect("uid"),
        pod.metadata.resource_version.as_deref().expect("rv"),
        "node node-gone is unreachable (test)",
        Timestamp::now(),
    );
    let extra_conditions = extra
        .get_mut("status")
        .and_then(Value::as_object_mut)
        .and_then(|s| s.remove("conditions"));
    json_patch::merge(&mut p, &extra);
    let conditions = p["status"]["conditions"].as_array_mut().expect("ours");
    for c in extra_conditions
        .into_iter()
        .flat_map(|c| c.as_array().cloned().unwrap_or_default())
    {
        match conditions.iter_mut().find(|o| o["type"] == c["type"]) {
            Some(o) => json_patch::merge(o, &c),
            None => conditions.push(c),
        }
    }
    p
}

/// Waits until the policy is in force: kube-apiserver loads each new policy a moment after it
/// is created. Probes with a server-side dry run the policy denies (Ready True).
async fn policy_in_force(pods: &Api<Pod>) {
    let end = std::time::Instant::now() + Duration::from_secs(60);
    loop {
        let pod = pods.get("web-1").await.expect("the Pod");
        let probe = patch_for(
            &pod,
            json!({"status": {"conditions": [{"type": "Ready", "status": "True", "reason": REASON}]}}),
        );
        let r = pods
            .patch_status(
                "web-1",
                &PatchParams::default().dry_run(),
                &Patch::Strategic(&probe),
            )
            .await;
        if matches!(&r, Err(kube::Error::Api(e)) if e.code == 403) {
            return;
        }
        assert!(
            std::time::Instant::now() < end,
            "the withdrawal policy is not in force after 60 s: {r:?}"
        );
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
}

/// The withdrawal account's patch of `ns/web-1`, with `extra` merged in, is refused with 403
/// by the policy, whose message says `says`; the Pod stays ready.
async fn refused(cp: &KubeControlPlane, ns: &str, extra: Value, says: &str) {
    let pods: Api<Pod> = Api::namespaced(withdrawal_client(cp).await, ns);
    policy_in_force(&pods).await;
    let pod = pods.get("web-1").await.expect("the Pod");
    let r = pods
        .patch_status(
            "web-1",
            &PatchParams::default(),
            &Patch::Strategic(&patch_for(&pod, extra.clone())),
        )
        .await;
    match r {
        Err(kube::Error::Api(e)) => {
            assert_eq!(e.code, 403, "refused as Forbidden: {e:?}");
            assert!(
                e.message.contains(says),
                "denied by the policy's rule ({says:?}), not another: {}",
                e.message
            );
        }
        Ok(p) => panic!("the withdrawal account could write {extra} to {ns}/web-1: {p:?}"),
        Err(e) => panic!("{e}"),
    }
    let after = Api::<Pod>::namespaced(cp.client(), ns)
        .get("web-1")
        .await
        .expect("the Pod");
    assert_eq!(
        announcer::withdrawer::pod::ready(&after),
        Some(true),
        "the Pod is still ready"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_withdrawal_account_sets_ready_false_with_its_reason_in_an_opted_in_namespace() {
    let cp = KubeControlPlane::start_applied("withdrawal-allowed").await;
    ready_pod(&cp, "shop", true).await;
    let pods: Api<Pod> = Api::namespaced(withdrawal_client(&cp).await, "shop");
    policy_in_force(&pods).await;
    let pod = pods
        .get("web-1")
        .await
        .expect("the withdrawal account reads the Pod");
    let after = pods
        .patch_status(
            "web-1",
            &PatchParams::default(),
            &Patch::Strategic(&patch_for(&pod, json!({}))),
        )
        .await
        .expect("Ready True → False with our reason is the one write allowed");
    let conditions = after
        .status
        .expect("status")
        .conditions
        .expect("conditions");
    let ready = conditions
        .iter()
        .find(|c| c.type_ == "Ready")
        .expect("Ready");
    assert_eq!(ready.status, "False");
    assert_eq!(ready.reason.as_deref(), Some(REASON));
    // The strategic merge kept every other condition as it was.
    let others: Vec<(&str, &str)> = conditions
        .iter()
        .filter(|c| c.type_ != "Ready")
        .map(|c| (c.type_.as_str(), c.status.as_str()))
        .collect();
    assert_eq!(
        others,
        [
            ("PodScheduled", "True"),
            ("Initialized", "True"),
            ("ContainersReady", "True")
        ]
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_withdrawal_account_is_refused_in_a_namespace_without_the_label() {
    let cp = KubeControlPlane::start_applied("withdrawal-unlabelled").await;
    ready_pod(&cp, "bank", false).await;
    refused(&cp, "bank", json!({}), "has not opted in").await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_withdrawal_account_may_never_write_ready_true() {
    let cp = KubeControlPlane::start_applied("withdrawal-true").await;
    ready_pod(&cp, "shop", true).await;
    // Ready True with our reason (a "no-op" that would restamp the condition).
    refused(
        &cp,
        "shop",
        json!({"status": {"conditions": [{"type": "Ready", "status": "True"}]}}),
        "only turn Ready from True to False",
    )
    .await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_withdrawal_account_may_change_no_other_condition_address_or_label() {
    let cp = KubeControlPlane::start_applied("withdrawal-others").await;
    ready_pod(&cp, "shop", true).await;
    refused(
        &cp,
        "shop",
        json!({"status": {"conditions": [
            {"type": "ContainersReady", "status": "False", "reason": REASON}]}}),
        "any condition but Ready",
    )
    .await;
    refused(
        &cp,
        "shop",
        json!({"status": {"podIP": "10.244.9.66",
            "podIPs": [{"$patch": "replace"}, {"ip": "10.244.9.66"}]}}),
        "phase, addresses or container statuses",
    )
    .await;
    refused(
        &cp,
        "shop",
        json!({"metadata": {"labels": {"app": "stolen"}}}),
        "labels, annotations or finalizers",
    )
    .await;
    refused(
        &cp,
        "shop",
        json!({"status": {"conditions": [{"type": "Ready", "status": "False", "reason": "Other"}]}}),
        "with its own reason",
    )
    .await;
}
