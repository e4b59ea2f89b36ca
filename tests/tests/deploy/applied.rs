//! `deploy/` applied for real: `kubectl apply -k deploy/` to a real kube-apiserver (with its
//! controllers and scheduler), what it creates, and what its admission policy allows.

use std::{net::IpAddr, time::Duration};

use announcer_tests::env::{
    NAMESPACE,
    kube::{KubeControlPlane, KubeOptions},
};
use k8s_openapi::api::coordination::v1::Lease;
use kube::{Api, api::PostParams};
use serde_json::json;

const LOCALHOST: IpAddr = IpAddr::V4(std::net::Ipv4Addr::LOCALHOST);

async fn applied(tag: &str, nodes: &[&str]) -> KubeControlPlane {
    let cp = KubeControlPlane::start(KubeOptions {
        tag: tag.into(),
        apply_deploy: true,
        ..Default::default()
    })
    .await
    .unwrap_or_else(|e| panic!("control plane: {e}"));
    for n in nodes {
        cp.kubelets()
            .register(n, LOCALHOST, &[])
            .await
            .unwrap_or_else(|e| panic!("{e}"));
    }
    cp
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn kubectl_apply_k_deploy_gets_an_agent_pod_bound_to_every_node() {
    let cp = applied("apply", &["node-a", "node-b", "node-c"]).await;
    for n in ["node-a", "node-b", "node-c"] {
        let pod = cp
            .agent_pod(n, Duration::from_secs(60))
            .await
            .unwrap_or_else(|e| panic!("{e}\n{}", cp.log_tails()));
        let spec = pod.spec.expect("spec");
        assert_eq!(spec.node_name.as_deref(), Some(n));
        assert_eq!(spec.service_account_name.as_deref(), Some("announcer"));
        assert_eq!(spec.host_network, Some(true));
    }
}

/// A Lease as the agent of `node` writes it.
fn node_lease(of: &str) -> Lease {
    serde_json::from_value(json!({
        "apiVersion": "coordination.k8s.io/v1", "kind": "Lease",
        "metadata": {
            "name": format!("announcer-node-{of}"),
            "labels": {"app.kubernetes.io/name": "announcer", "announcer.dev/lease": "node"},
        },
        "spec": {"holderIdentity": of, "leaseDurationSeconds": 10},
    }))
    .expect("a valid Lease")
}

/// Reads `name` and writes it back changed by `f` (an update with its resourceVersion, as the
/// agent writes its Lease).
async fn update(
    leases: &Api<Lease>,
    name: &str,
    f: impl FnOnce(&mut Lease),
) -> Result<Lease, kube::Error> {
    let mut lease = leases.get(name).await?;
    f(&mut lease);
    leases.replace(name, &PostParams::default(), &lease).await
}

async fn agent_client(cp: &KubeControlPlane, node: &str) -> kube::Client {
    let path = cp.dir().join(format!("agent-{node}.kubeconfig"));
    cp.write_agent_kubeconfig(node, &cp.url(), &path)
        .await
        .unwrap_or_else(|e| panic!("{e}"));
    announcer_tests::env::kube::client_for(&path)
        .await
        .unwrap_or_else(|e| panic!("{e}"))
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_agent_of_node_a_cannot_write_node_b_s_lease() {
    let cp = applied("admission", &["node-a", "node-b"]).await;
    let a = agent_client(&cp, "node-a").await;
    let leases: Api<Lease> = Api::namespaced(a, NAMESPACE);

    // Its own Lease: created and updated.
    leases
        .create(&PostParams::default(), &node_lease("node-a"))
        .await
        .expect("the agent of node-a creates its own Lease");
    update(&leases, "announcer-node-node-a", |l| {
        l.metadata
            .annotations
            .get_or_insert_default()
            .insert("announcer.dev/standby".into(), "true".into());
    })
    .await
    .expect("the agent of node-a updates its own Lease");

    // node-b's: neither created nor, once node-b made it, updated.
    let err = leases
        .create(&PostParams::default(), &node_lease("node-b"))
        .await
        .expect_err("the agent of node-a must not create node-b's Lease");
    assert!(
        err.to_string()
            .contains("may write only its own node Lease"),
        "denied by the policy, not something else: {err}"
    );
    let b = agent_client(&cp, "node-b").await;
    Api::<Lease>::namespaced(b, NAMESPACE)
        .create(&PostParams::default(), &node_lease("node-b"))
        .await
        .expect("the agent of node-b creates its own Lease");
    let err = update(&leases, "announcer-node-node-b", |l| {
        l.spec.get_or_insert_default().holder_identity = Some("node-a".into());
    })
    .await
    .expect_err("the agent of node-a must not update node-b's Lease");
    assert!(
        err.to_string()
            .contains("may write only its own node Lease"),
        "denied by the policy: {err}"
    );
}
