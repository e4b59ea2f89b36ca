//! Stand-ins for the kubelets: each registered Node is created with the status a kubelet would
//! report (Ready, InternalIP, capacity, so the scheduler binds the DaemonSet's Pods to it), and
//! its `kube-node-lease` Lease is renewed every [`RENEW`] as the kubelet's node-lease
//! controller does. A node whose kubelet is [`Kubelets::stop_node`]ped looks crashed to the
//! node lifecycle controller: after its grace period the Node goes `Ready=Unknown`, is tainted,
//! and its Pods are marked not ready (so their endpoints are too).
//!
//! With [`Kubelets::run_pods`], they also run the Pods bound to their nodes from the images'
//! root file systems ([`super::pods`]); without it, the Pods are bound and nobody runs them.
//!
//! The renewals run on a runtime thread of their own with a client of its own (a `kube::Client`
//! is bound to the runtime it was built on), so they continue while a test blocks its own.

use std::{
    collections::BTreeMap,
    net::IpAddr,
    sync::{
        Arc, Mutex,
        atomic::{AtomicBool, Ordering},
    },
    thread::JoinHandle,
    time::{Duration, Instant, SystemTime},
};

use k8s_openapi::api::{coordination::v1::Lease, core::v1::Node};
use kube::{
    Api, Client,
    api::{Patch, PatchParams, PostParams},
};
use serde_json::json;

use super::{
    KubeError, api_err,
    pods::{PodError, PodNode, PodRunner, PodRunnerConfig},
};

/// How often a kubelet renews its node Lease (the kubelet's default: a quarter of its 40 s
/// duration).
pub const RENEW: Duration = Duration::from_secs(10);
/// The node Lease's duration, as the kubelet writes it.
pub const LEASE_DURATION_S: i32 = 40;
/// The namespace of the kubelets' node Leases.
pub const NODE_LEASE_NAMESPACE: &str = "kube-node-lease";

#[derive(Debug)]
struct KubeletState {
    /// Renewing (the node is up).
    alive: bool,
    /// When the Lease was last renewed.
    renewed: Option<Instant>,
}

type Nodes = Arc<Mutex<BTreeMap<String, KubeletState>>>;

/// The stand-in kubelets of one control plane.
pub struct Kubelets {
    admin: Client,
    nodes: Nodes,
    stop: Arc<AtomicBool>,
    thread: Option<JoinHandle<()>>,
    /// The container runtime ([`Self::run_pods`]).
    pods: Mutex<Option<PodRunner>>,
}

fn now_rfc3339() -> String {
    humantime::format_rfc3339_micros(SystemTime::now()).to_string()
}

impl Kubelets {
    pub(super) fn new(admin: Client) -> Kubelets {
        Kubelets {
            admin,
            nodes: Nodes::default(),
            stop: Arc::new(AtomicBool::new(false)),
            thread: None,
            pods: Mutex::new(None),
        }
    }

    /// Runs the Pods bound to `nodes` (registered first) from the images of `cfg`, until the
    /// control plane stops ([`super::pods`]).
    pub fn run_pods(&self, cfg: PodRunnerConfig, nodes: Vec<PodNode>) -> Result<(), PodError> {
        let runner = PodRunner::start(cfg, nodes)?;
        *self.pods.lock().expect("kubelets") = Some(runner);
        Ok(())
    }

    /// `f` of the Pod runner, if [`Self::run_pods`] started one.
    pub fn with_pods<R>(&self, f: impl FnOnce(&PodRunner) -> R) -> Option<R> {
        self.pods.lock().expect("kubelets").as_ref().map(f)
    }

    /// Starts the renewal thread, with its own client from `kubeconfig`.
    pub(super) fn run(&mut self, kubeconfig: std::path::PathBuf) {
        let (nodes, stop) = (self.nodes.clone(), self.stop.clone());
        self.thread = Some(
            std::thread::Builder::new()
                .name("kubelets".into())
                .spawn(move || {
                    let rt = tokio::runtime::Builder::new_current_thread()
                        .enable_all()
                        .build()
                        .expect("kubelet runtime");
                    rt.block_on(renew_loop(kubeconfig, nodes, stop));
                })
                .expect("spawn the kubelet thread"),
        );
    }

    pub(super) fn stop(&mut self) {
        // The containers first, while the API server still answers.
        if let Some(mut runner) = self.pods.lock().expect("kubelets").take() {
            runner.stop();
        }
        self.stop.store(true, Ordering::Relaxed);
        if let Some(t) = self.thread.take() {
            let _ = t.join();
        }
    }

    /// Registers Node `name` (InternalIP `ip`, `labels` besides `kubernetes.io/hostname` and
    /// `kubernetes.io/os`) with a Ready status, and starts renewing its Lease.
    pub async fn register(
        &self,
        name: &str,
        ip: IpAddr,
        labels: &[(&str, &str)],
    ) -> Result<(), KubeError> {
        let mut all = serde_json::Map::new();
        // The host's name, which a label value caps at 63 characters (a node name can be
        // longer, up to 253: a kubelet with --hostname-override, a cloud's name).
        let host: String = name.chars().take(63).collect();
        all.insert(
            "kubernetes.io/hostname".into(),
            host.trim_end_matches(|c: char| !c.is_ascii_alphanumeric())
                .into(),
        );
        all.insert("kubernetes.io/os".into(), "linux".into());
        for (k, v) in labels {
            all.insert((*k).into(), (*v).into());
        }
        let node: Node = serde_json::from_value(json!({
            "apiVersion": "v1", "kind": "Node",
            "metadata": {"name": name, "labels": all},
        }))
        .expect("a valid Node");
        let api = Api::<Node>::all(self.admin.clone());
        api.create(&PostParams::default(), &node)
            .await
            .map_err(api_err(format!("creating Node {name}")))?;
        let status = json!({"status": {
            "capacity": {"cpu": "2", "memory": "4Gi", "pods": "110"},
            "allocatable": {"cpu": "2", "memory": "4Gi", "pods": "110"},
            "addresses": [
                {"type": "InternalIP", "address": ip.to_string()},
                {"type": "Hostname", "address": name},
            ],
            "conditions": [ready_condition(true)],
            "nodeInfo": {
                "machineID": "", "systemUUID": "", "bootID": "", "kernelVersion": "",
                "osImage": "", "containerRuntimeVersion": "", "kubeletVersion": "v1.37.2",
                "kubeProxyVersion": "", "operatingSystem": "linux", "architecture": "amd64",
            },
        }});
        api.patch_status(name, &PatchParams::default(), &Patch::Merge(&status))
            .await
            .map_err(api_err(format!("Node {name} status")))?;
        renew(&self.admin, name).await?;
        self.nodes.lock().expect("kubelets").insert(
            name.into(),
            KubeletState {
                alive: true,
                renewed: Some(Instant::now()),
            },
        );
        Ok(())
    }

    /// Stops renewing `name`'s Lease, as when the node crashes: the node lifecycle controller
    /// marks it NotReady after its grace period.
    pub fn stop_node(&self, name: &str) {
        if let Some(s) = self.nodes.lock().expect("kubelets").get_mut(name) {
            s.alive = false;
        }
    }

    /// The node is back: renews its Lease at once and reports Ready again.
    pub async fn start_node(&self, name: &str) -> Result<(), KubeError> {
        report_back(self.admin.clone(), name).await?;
        self.resume(name);
        Ok(())
    }

    /// Renews `name`'s Lease from now on again (after [`report_back`]).
    pub fn resume(&self, name: &str) {
        if let Some(s) = self.nodes.lock().expect("kubelets").get_mut(name) {
            s.alive = true;
            s.renewed = Some(Instant::now());
        }
    }

    /// Reports `name`'s Ready condition as `ready` (the kubelet's status update).
    pub async fn set_ready(&self, name: &str, ready: bool) -> Result<(), KubeError> {
        set_ready(self.admin.clone(), name, ready).await
    }
}

/// What a restarted kubelet does first: renews its node Lease and reports Ready (owned client,
/// for any runtime).
pub async fn report_back(client: Client, name: &str) -> Result<(), KubeError> {
    renew(&client, name).await?;
    set_ready(client, name, true).await
}

async fn set_ready(client: Client, name: &str, ready: bool) -> Result<(), KubeError> {
    let patch = json!({"status": {"conditions": [ready_condition(ready)]}});
    Api::<Node>::all(client)
        .patch_status(name, &PatchParams::default(), &Patch::Strategic(&patch))
        .await
        .map_err(api_err(format!("Node {name} Ready={ready}")))?;
    Ok(())
}

fn ready_condition(ready: bool) -> serde_json::Value {
    let now = now_rfc3339();
    json!({
        "type": "Ready",
        "status": if ready { "True" } else { "False" },
        "reason": if ready { "KubeletReady" } else { "KubeletNotReady" },
        "message": if ready { "kubelet is posting ready status" } else { "stopped by the test" },
        "lastHeartbeatTime": now,
        "lastTransitionTime": now,
    })
}

/// Creates or renews `node`'s Lease in `kube-node-lease`.
async fn renew(client: &Client, node: &str) -> Result<(), KubeError> {
    let api: Api<Lease> = Api::namespaced(client.clone(), NODE_LEASE_NAMESPACE);
    let lease = json!({
        "apiVersion": "coordination.k8s.io/v1", "kind": "Lease",
        "metadata": {"name": node},
        "spec": {
            "holderIdentity": node,
            "leaseDurationSeconds": LEASE_DURATION_S,
            "renewTime": now_rfc3339(),
        },
    });
    api.patch(
        node,
        &PatchParams::apply("kubelet").force(),
        &Patch::Apply(&lease),
    )
    .await
    .map_err(api_err(format!("renewing the node Lease of {node}")))?;
    Ok(())
}

async fn renew_loop(kubeconfig: std::path::PathBuf, nodes: Nodes, stop: Arc<AtomicBool>) {
    let client = match super::client_from(&kubeconfig).await {
        Ok(c) => c,
        Err(e) => {
            tracing::error!("kubelets: no client: {e}");
            return;
        }
    };
    while !stop.load(Ordering::Relaxed) {
        let due: Vec<String> = nodes
            .lock()
            .expect("kubelets")
            .iter()
            .filter(|(_, s)| s.alive && s.renewed.is_none_or(|t| t.elapsed() >= RENEW))
            .map(|(n, _)| n.clone())
            .collect();
        for node in due {
            match renew(&client, &node).await {
                Ok(()) => {
                    if let Some(s) = nodes.lock().expect("kubelets").get_mut(&node) {
                        s.renewed = Some(Instant::now());
                    }
                }
                // The API server paused or restarting: the next round retries, as the kubelet.
                Err(e) => tracing::debug!("kubelet {node}: {e}"),
            }
        }
        tokio::time::sleep(Duration::from_millis(500)).await;
    }
}
