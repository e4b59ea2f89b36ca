//! One fast endpoint withdrawal on the real kube-apiserver after `kubectl apply -k deploy/`,
//! staged step by step for the tests that check it from different sides (the withdrawal
//! itself, and the audit of what its account sent): three registered nodes with agent Leases,
//! an opted-in Service `shop/web` that is ours, its Pod `web-1` ready on [`SUSPECT`], one
//! `announcer withdrawer` under the `announcer-withdrawal` account, then [`SUSPECT`] crashes and
//! the other two agents report it.

use std::{
    net::{IpAddr, Ipv4Addr},
    path::PathBuf,
    time::Duration,
};

use announcer::{
    state::announced::CONDITION_TYPE, withdraw::UNREACHABLE_ANNOTATION,
    withdrawer::select::OPT_IN_LABEL,
};
use k8s_openapi::{
    api::{
        coordination::v1::Lease,
        core::v1::{Namespace, Pod, Service},
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

use super::{KubeControlPlane, WITHDRAWAL_SERVICE_ACCOUNT, poll};
use crate::env::{NAMESPACE, process::Guarded, withdrawer_cmd::WithdrawerCommand};

/// The node that crashes.
pub const SUSPECT: &str = "node-c";
/// The nodes whose agents report it.
pub const REPORTERS: [&str; 2] = ["node-a", "node-b"];
/// The opted-in namespace of the Service and its Pod.
pub const SHOP: &str = "shop";
/// The Pod on [`SUSPECT`].
pub const POD: &str = "web-1";

/// Now, as the API server writes times: a MicroTime (six decimals, which a Lease's renewTime
/// requires).
pub fn now() -> serde_json::Value {
    serde_json::to_value(MicroTime(Timestamp::now())).expect("a time")
}

/// The staged cluster, with its withdrawer running (killed on drop).
pub struct Scene<'a> {
    pub cp: &'a KubeControlPlane,
    /// The withdrawer's log.
    pub log: PathBuf,
    _withdrawer: Guarded,
}

impl<'a> Scene<'a> {
    /// Everything up to the crash: the nodes and their agent Leases, the Service and its ready
    /// Pod (its endpoint ready in the real EndpointSlice controller's slices), and the
    /// withdrawer with its lists done.
    pub async fn stage(cp: &'a KubeControlPlane) -> Scene<'a> {
        let admin = cp.client();
        for n in REPORTERS.iter().chain([&SUSPECT]) {
            cp.kubelets()
                .register(n, IpAddr::V4(Ipv4Addr::LOCALHOST), &[])
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
        announced_service_with_a_ready_pod(&admin).await;
        poll(Duration::from_secs(30), "web-1's endpoint ready", || {
            let admin = admin.clone();
            async move { (endpoint_ready(&admin).await == Some(true)).then_some(()) }
        })
        .await
        .unwrap_or_else(|e| panic!("{e}\n{}", cp.log_tails()));

        let kubeconfig = cp
            .write_account_kubeconfig(WITHDRAWAL_SERVICE_ACCOUNT)
            .await
            .unwrap_or_else(|e| panic!("{e}"));
        let log = cp.dir().join("withdrawer.log");
        let withdrawer = WithdrawerCommand::new("withdrawer-0", &kubeconfig).spawn(None, &log);
        // Its lists done (no request counter on the real server: a generous moment).
        tokio::time::sleep(Duration::from_secs(3)).await;
        Scene {
            cp,
            log,
            _withdrawer: withdrawer,
        }
    }

    /// [`SUSPECT`] crashes (its kubelet stops renewing) and the [`REPORTERS`] report it in
    /// their Leases.
    pub async fn crash_and_report(&self) {
        self.cp.kubelets().stop_node(SUSPECT);
        let agents: Api<Lease> = Api::namespaced(self.cp.client(), NAMESPACE);
        for r in REPORTERS {
            agents
                .patch(
                    &format!("announcer-node-{r}"),
                    &PatchParams::default(),
                    &Patch::Merge(json!({
                        "metadata": {"annotations": {UNREACHABLE_ANNOTATION: SUSPECT}},
                        "spec": {"renewTime": now()},
                    })),
                )
                .await
                .expect("report");
        }
    }

    /// `web-1`, as it is now.
    pub async fn pod(&self) -> Pod {
        Api::<Pod>::namespaced(self.cp.client(), SHOP)
            .get(POD)
            .await
            .expect("web-1")
    }

    /// Waits until `web-1`'s endpoint is `ready` (or panics with the withdrawer's log).
    pub async fn wait_endpoint(&self, ready: bool, timeout: Duration) {
        let admin = self.cp.client();
        poll(timeout, &format!("web-1's endpoint ready={ready}"), || {
            let admin = admin.clone();
            async move { (endpoint_ready(&admin).await == Some(ready)).then_some(()) }
        })
        .await
        .unwrap_or_else(|e| panic!("{e}\nwithdrawer log:\n{}", self.log_text()));
    }

    /// The withdrawer's log so far.
    pub fn log_text(&self) -> String {
        std::fs::read_to_string(&self.log).unwrap_or_default()
    }
}

/// `shop/web` (LoadBalancer, selecting `app=web`, Announced) in the opted-in namespace, and its
/// Pod `web-1` on [`SUSPECT`], running and ready as its kubelet would have written it.
async fn announced_service_with_a_ready_pod(admin: &Client) {
    Api::<Namespace>::all(admin.clone())
        .create(
            &PostParams::default(),
            &serde_json::from_value(
                json!({"metadata": {"name": SHOP, "labels": {OPT_IN_LABEL: "true"}}}),
            )
            .expect("ns"),
        )
        .await
        .expect("namespace");
    let services: Api<Service> = Api::namespaced(admin.clone(), SHOP);
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
    let pods: Api<Pod> = Api::namespaced(admin.clone(), SHOP);
    pods.create(
        &PostParams::default(),
        &serde_json::from_value(json!({"metadata": {"name": POD, "labels": {"app": "web"}},
            "spec": {"nodeName": SUSPECT, "containers": [{"name": "web", "image": "web"}]}}))
        .expect("pod"),
    )
    .await
    .expect("pod");
    let t = now();
    pods.patch_status(
        POD,
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

/// Whether the EndpointSlices of `shop/web` hold web-1 on [`SUSPECT`] as `ready`.
async fn endpoint_ready(admin: &Client) -> Option<bool> {
    let slices: Api<EndpointSlice> = Api::namespaced(admin.clone(), SHOP);
    let list = slices
        .list(&ListParams::default().labels("kubernetes.io/service-name=web"))
        .await
        .ok()?;
    list.items
        .iter()
        .flat_map(|s| s.endpoints.iter().flatten())
        .find(|e| e.node_name.as_deref() == Some(SUSPECT))
        .and_then(|e| e.conditions.as_ref()?.ready)
}
