//! The withdrawal controller on the real kube-apiserver after `kubectl apply -k deploy/`: under
//! its own account (a token of `announcer-withdrawal`, so its RBAC and the admission policy
//! apply), with the real EndpointSlice controller deriving the Service's endpoints from the Pod.

use std::time::{Duration, Instant};

use announcer::{
    state::announced::CONDITION_TYPE,
    withdraw::UNREACHABLE_ANNOTATION,
    withdrawer::{
        pod::{REASON, ready},
        select::OPT_IN_LABEL,
        slots::{LEASE_NAME, WITHDRAWN_ANNOTATION},
    },
};
use announcer_tests::env::{
    NAMESPACE,
    kube::{Credentials, KubeControlPlane, KubeOptions, kubeconfig_yaml, poll},
    withdrawer_cmd::WithdrawerCommand,
};
use k8s_openapi::{
    api::{
        authentication::v1::{TokenRequest, TokenRequestSpec},
        coordination::v1::Lease,
        core::v1::{Namespace, Pod, Service, ServiceAccount},
        discovery::v1::EndpointSlice,
    },
    apimachinery::pkg::apis::meta::v1::MicroTime,
    jiff::Timestamp,
};
use kube::{
    Api, Client,
    api::{ListParams, Patch, PatchParams, PostParams},
};
use serde_json::json;

const LOCALHOST: std::net::IpAddr = std::net::IpAddr::V4(std::net::Ipv4Addr::LOCALHOST);

/// Now, as the API server writes times: a MicroTime (six decimals, which a Lease's renewTime
/// requires).
fn now() -> serde_json::Value {
    serde_json::to_value(MicroTime(Timestamp::now())).expect("a time")
}

/// A kubeconfig with a token of the withdrawal account.
async fn withdrawal_kubeconfig(cp: &KubeControlPlane) -> std::path::PathBuf {
    let sa: Api<ServiceAccount> = Api::namespaced(cp.client(), NAMESPACE);
    let req = TokenRequest {
        spec: Some(TokenRequestSpec {
            expiration_seconds: Some(3600),
            ..Default::default()
        }),
        ..Default::default()
    };
    let token = sa
        .create_token_request("announcer-withdrawal", &PostParams::default(), &req)
        .await
        .expect("a token")
        .status
        .and_then(|s| s.token)
        .expect("a token");
    let path = cp.dir().join("withdrawal.kubeconfig");
    std::fs::write(
        &path,
        kubeconfig_yaml(
            &cp.url(),
            cp.ca_cert(),
            "announcer-withdrawal",
            &Credentials::Token(token),
        ),
    )
    .expect("kubeconfig");
    path
}

/// `shop/web` (LoadBalancer, selecting `app=web`, Announced) and its Pod `web-1` on `node`,
/// running and ready as its kubelet would have written it.
async fn announced_service_with_a_ready_pod(admin: &Client, node: &str) {
    Api::<Namespace>::all(admin.clone())
        .create(
            &PostParams::default(),
            &serde_json::from_value(
                json!({"metadata": {"name": "shop", "labels": {OPT_IN_LABEL: "true"}}}),
            )
            .expect("ns"),
        )
        .await
        .expect("namespace");
    let services: Api<Service> = Api::namespaced(admin.clone(), "shop");
    services
        .create(
            &PostParams::default(),
            &serde_json::from_value(json!({"metadata": {"name": "web"},
                "spec": {"type": "LoadBalancer", "selector": {"app": "web"},
                         "ports": [{"port": 80}]}}))
            .expect("svc"),
        )
        .await
        .expect("service");
    services
        .patch_status(
            "web",
            &PatchParams::default(),
            &Patch::Merge(json!({"status": {"conditions": [{"type": CONDITION_TYPE,
                "status": "True", "reason": "Announced", "message": "10.0.0.50 by node-a on eth0",
                "lastTransitionTime": now()}]}})),
        )
        .await
        .expect("announced");
    let pods: Api<Pod> = Api::namespaced(admin.clone(), "shop");
    pods.create(
        &PostParams::default(),
        &serde_json::from_value(
            json!({"metadata": {"name": "web-1", "labels": {"app": "web"}},
            "spec": {"nodeName": node, "containers": [{"name": "web", "image": "web"}]}}),
        )
        .expect("pod"),
    )
    .await
    .expect("pod");
    let t = now();
    pods.patch_status(
        "web-1",
        &PatchParams::default(),
        &Patch::Strategic(json!({"status": {"phase": "Running",
        "podIP": "10.244.2.5", "podIPs": [{"ip": "10.244.2.5"}],
        "conditions": [
            {"type": "PodScheduled", "status": "True", "lastTransitionTime": t},
            {"type": "ContainersReady", "status": "True", "lastTransitionTime": t},
            {"type": "Ready", "status": "True", "lastTransitionTime": t},
        ]}})),
    )
    .await
    .expect("pod ready");
}

/// Whether the EndpointSlices of `shop/web` hold web-1 on `node` as `ready`.
async fn endpoint_ready(admin: &Client, node: &str) -> Option<bool> {
    let slices: Api<EndpointSlice> = Api::namespaced(admin.clone(), "shop");
    let list = slices
        .list(&ListParams::default().labels("kubernetes.io/service-name=web"))
        .await
        .ok()?;
    list.items
        .iter()
        .flat_map(|s| s.endpoints.iter().flatten())
        .find(|e| e.node_name.as_deref() == Some(node))
        .and_then(|e| e.conditions.as_ref()?.ready)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn on_kube_apiserver_a_quorum_withdraws_the_pod_and_its_endpoint_goes_unready() {
    let cp = KubeControlPlane::start(KubeOptions {
        tag: "withdrawer-real".into(),
        apply_deploy: true,
        ..Default::default()
    })
    .await
    .unwrap_or_else(|e| panic!("control plane: {e}"));
    let admin = cp.client();
    for n in ["node-a", "node-b", "node-c"] {
        cp.kubelets()
            .register(n, LOCALHOST, &[])
            .await
            .unwrap_or_else(|e| panic!("{e}"));
        Api::<Lease>::namespaced(admin.clone(), NAMESPACE)
            .create(
                &PostParams::default(),
                &serde_json::from_value(json!({"metadata": {
                        "name": format!("announcer-node-{n}"),
                        "labels": {"app.kubernetes.io/name": "announcer", "announcer.dev/lease": "node"}},
                    "spec": {"holderIdentity": n, "leaseDurationSeconds": 10, "renewTime": now()}}))
                .expect("lease"),
            )
            .await
            .expect("agent lease");
    }
    announced_service_with_a_ready_pod(&admin, "node-c").await;
    poll(Duration::from_secs(30), "web-1's endpoint ready", || {
        let admin = admin.clone();
        async move { (endpoint_ready(&admin, "node-c").await == Some(true)).then_some(()) }
    })
    .await
    .unwrap_or_else(|e| panic!("{e}\n{}", cp.log_tails()));

    let kubeconfig = withdrawal_kubeconfig(&cp).await;
    let log = cp.dir().join("withdrawer.log");
    let _withdrawer = WithdrawerCommand::new("withdrawer-0", &kubeconfig).spawn(None, &log);
    // Its lists done (no request counter on the real server: a generous moment).
    tokio::time::sleep(Duration::from_secs(3)).await;

    // node-c crashes: its kubelet stops renewing; node-a and node-b report it.
    cp.kubelets().stop_node("node-c");
    let agents: Api<Lease> = Api::namespaced(admin.clone(), NAMESPACE);
    for r in ["node-a", "node-b"] {
        agents
            .patch(
                &format!("announcer-node-{r}"),
                &PatchParams::default(),
                &Patch::Merge(json!({
                    "metadata": {"annotations": {UNREACHABLE_ANNOTATION: "node-c"}},
                    "spec": {"renewTime": now()},
                })),
            )
            .await
            .expect("report");
    }
    let started = Instant::now();
    let pods: Api<Pod> = Api::namespaced(admin.clone(), "shop");
    poll(Duration::from_secs(10), "web-1 withdrawn", || {
        let pods = pods.clone();
        async move { (ready(&pods.get("web-1").await.ok()?) == Some(false)).then_some(()) }
    })
    .await
    .unwrap_or_else(|e| {
        panic!(
            "{e}\nwithdrawer log:\n{}",
            std::fs::read_to_string(&log).unwrap_or_default()
        )
    });
    let pod = pods.get("web-1").await.expect("pod");
    let r = pod
        .status
        .and_then(|s| s.conditions)
        .and_then(|c| c.into_iter().find(|c| c.type_ == "Ready"))
        .expect("Ready");
    assert_eq!(r.reason.as_deref(), Some(REASON));
    // The real EndpointSlice controller follows: the endpoint is no longer ready, long before
    // the node lifecycle controller's 40 s grace.
    poll(Duration::from_secs(10), "web-1's endpoint unready", || {
        let admin = admin.clone();
        async move { (endpoint_ready(&admin, "node-c").await == Some(false)).then_some(()) }
    })
    .await
    .unwrap_or_else(|e| panic!("{e}"));
    assert!(
        started.elapsed() < Duration::from_secs(20),
        "withdrawn after {:?}",
        started.elapsed()
    );
    // The shared cap lists the node.
    let slots = agents.get(LEASE_NAME).await.expect("the cap Lease");
    let listed = slots
        .metadata
        .annotations
        .and_then(|a| a.get(WITHDRAWN_ANNOTATION).cloned())
        .unwrap_or_default();
    assert!(listed.starts_with("node-c="), "{listed}");
    // Every request it made was allowed (the watches, the Pod read and write, the Lease, the
    // Events, recorded in the background): the account's grant suffices.
    tokio::time::sleep(Duration::from_secs(1)).await;
    let text = std::fs::read_to_string(&log).unwrap_or_default();
    assert!(
        !text.to_lowercase().contains("forbidden"),
        "the withdrawer was refused something:\n{text}"
    );
    assert!(
        text.contains("Ready set False"),
        "the withdrawer wrote the Pod itself:\n{text}"
    );
}
