//! The cluster objects: the API server with its seed (Nodes, heartbeat Secret) and the
//! LoadBalancer Services with their endpoints (in-repo: EndpointSlices written here; real
//! control plane: Pods, whose slices the endpointslice controller writes).
//!
//! Why seeded Nodes: the kubelet would create them with their status; seeding does the same in
//! one step, before any agent starts, so no agent ever sees a node without its InternalIP.
//! Services are created like a user would (spec), then given their ingress IPs through the
//! status subresource like a load-balancer IPAM controller (kube-apiserver drops the status of
//! a created Service, and so does the in-repo server).

use std::{net::IpAddr, net::SocketAddr, time::Duration};

use k8s_openapi::api::{
    core::v1::{Pod, Service},
    discovery::v1::EndpointSlice,
};
use kube::{
    Api,
    api::{DeleteParams, ListParams, Patch, PatchParams, PostParams},
};
use serde_json::{Value, json};

use super::{API_PORT, BRIDGE_V4, LB_CLASS, Node, SERVICE_NAMESPACE, TCP_PORT, Testbed, UDP_PORT};
use crate::{
    apiserver::{ApiServer, ApiServerHandle},
    env::kube::{KubeControlPlane, KubeError, KubeOptions, workloads},
    netns::Netns,
};

fn seed(nodes: &[Node]) -> Vec<Value> {
    let mut objs = Vec::new();
    for n in nodes {
        objs.push(json!({
            "apiVersion": "v1", "kind": "Node",
            "metadata": {"name": n.name, "labels": {"kubernetes.io/hostname": n.name}},
            "status": {
                "conditions": [{"type": "Ready", "status": "True"}],
                "addresses": [
                    {"type": "InternalIP", "address": n.v4.to_string()},
                    {"type": "Hostname", "address": n.name},
                ],
            },
        }));
    }
    objs
}

/// Starts the API server on `rt` with the seed, listening on 127.0.0.1 (this process) and on
/// [`BRIDGE_V4`]:[`API_PORT`] inside the bridge namespace (the agents).
pub(super) async fn start_api(
    rt: &tokio::runtime::Runtime,
    bridge: &Netns,
    nodes: &[Node],
) -> ApiServerHandle {
    let lan = bridge.enter(|| {
        std::net::TcpListener::bind(SocketAddr::from((BRIDGE_V4, API_PORT)))
            .expect("bind the API server in the bridge namespace")
    });
    let builder = ApiServer::builder()
        .bookmark_interval(Duration::from_secs(1))
        .seed_objects(seed(nodes))
        .extra_listener(lan);
    rt.spawn(builder.start())
        .await
        .expect("API server start task")
        .expect("API server starts")
}

/// Starts a real control plane on `rt` (its certificate also naming [`BRIDGE_V4`]), applies
/// `deploy/` if `apply_deploy`, registers the nodes with their InternalIPs (stand-in kubelets), and relays
/// [`BRIDGE_V4`]:[`API_PORT`] in the bridge namespace to it. Returns it and the agents' URL.
pub(super) async fn start_kube(
    rt: &tokio::runtime::Runtime,
    bridge: &Netns,
    nodes: &[Node],
    tag: &str,
    apply_deploy: bool,
) -> (KubeControlPlane, String) {
    let names: Vec<(String, IpAddr)> = nodes
        .iter()
        .map(|n| (n.name.clone(), n.v4.into()))
        .collect();
    let tag = tag.to_string();
    let mut cp = rt
        .spawn(async move {
            let cp = KubeControlPlane::start(KubeOptions {
                tag,
                extra_server_ips: vec![BRIDGE_V4.into()],
                apply_deploy,
            })
            .await?;
            for (name, ip) in &names {
                cp.kubelets().register(name, *ip, &[]).await?;
            }
            Ok::<_, KubeError>(cp)
        })
        .await
        .expect("control plane start task")
        .unwrap_or_else(|e| panic!("the real control plane starts: {e}"));
    let url = cp
        .serve_in(bridge, SocketAddr::from((BRIDGE_V4, API_PORT)))
        .expect("relay the API server into the bridge namespace");
    (cp, url)
}

/// The URL agents use.
pub(super) fn agent_url() -> String {
    format!("http://{BRIDGE_V4}:{API_PORT}")
}

fn slice_name(svc: &str) -> String {
    format!("{svc}-slice")
}

fn endpoints(tb: &Testbed, on: &[&str]) -> Value {
    on.iter()
        .map(|n| {
            json!({
                "addresses": [tb.node_ip4(n).to_string()],
                "nodeName": n,
                "conditions": {"ready": true},
            })
        })
        .collect()
}

/// The label that selects a Service's Pods on the real control plane.
const INSTANCE_LABEL: &str = "app.kubernetes.io/instance";
/// How long the endpointslice controller may take to catch up with the Pods (or the garbage
/// collector with a deleted Service).
const ENDPOINTS_TIMEOUT: Duration = Duration::from_secs(60);

/// The name of Service `svc`'s Pod on `node`.
fn pod_name(svc: &str, node: &str) -> String {
    format!("{svc}-{node}")
}

impl Testbed {
    /// Creates LoadBalancer Service `default/<name>` (class `announcer.dev/l2`, UDP
    /// [`UDP_PORT`] and TCP [`TCP_PORT`], `externalTrafficPolicy: Local` if `etp_local`), sets
    /// its `status.loadBalancer.ingress` to `vips`, and gives it one ready endpoint per node in
    /// `endpoints_on`.
    ///
    /// The endpoints: on the in-repo server, one EndpointSlice written here. On the real
    /// control plane, as a user's workload: the Service selects
    /// `app.kubernetes.io/instance: <name>`, one running, ready Pod per node carries that label
    /// ([`workloads::create_running_pod`]), and the endpointslice controller writes the
    /// slices; this returns once they list exactly `endpoints_on`, so tests start from the
    /// same state on both servers.
    pub async fn add_service(
        &self,
        name: &str,
        vips: &[IpAddr],
        etp_local: bool,
        endpoints_on: &[&str],
    ) {
        self.create_service(name, etp_local, json!({}), endpoints_on, Some(vips))
            .await;
    }

    /// Like [`Self::add_service`], without addresses: the Service asks for `families`
    /// (`IPv4`, `IPv6`; `ipFamilyPolicy: PreferDualStack` with both) and the allocator
    /// ([`super::Testbed::start_allocators`]) assigns them from an `AddressPool`. Returns the addresses once assigned (within
    /// `timeout`), sorted.
    pub async fn add_allocated_service(
        &self,
        name: &str,
        families: &[&str],
        endpoints_on: &[&str],
        timeout: std::time::Duration,
    ) -> Vec<IpAddr> {
        let policy = if families.len() > 1 {
            "PreferDualStack"
        } else {
            "SingleStack"
        };
        let extra = json!({"ipFamilies": families, "ipFamilyPolicy": policy});
        self.create_service(name, false, extra, endpoints_on, None)
            .await;
        let services = Api::<Service>::namespaced(self.kube(), SERVICE_NAMESPACE);
        let deadline = std::time::Instant::now() + timeout;
        loop {
            let svc = services
                .get(name)
                .await
                .unwrap_or_else(|e| panic!("get Service {name}: {e}"));
            let mut ips: Vec<IpAddr> = svc
                .status
                .and_then(|s| s.load_balancer)
                .and_then(|lb| lb.ingress)
                .into_iter()
                .flatten()
                .filter_map(|i| i.ip?.parse().ok())
                .collect();
            if ips.len() == families.len() {
                ips.sort();
                return ips;
            }
            assert!(
                std::time::Instant::now() < deadline,
                "Service {name} got {ips:?} for {families:?} within {timeout:?}"
            );
            tokio::time::sleep(std::time::Duration::from_millis(100)).await;
        }
    }

    /// Creates the Service (with `extra` merged into its spec), its ingress if `vips` says,
    /// and its endpoints.
    async fn create_service(
        &self,
        name: &str,
        etp_local: bool,
        extra: Value,
        endpoints_on: &[&str],
        vips: Option<&[IpAddr]>,
    ) {
        let mut spec = json!({
            "type": "LoadBalancer",
            "loadBalancerClass": LB_CLASS,
            "externalTrafficPolicy": if etp_local { "Local" } else { "Cluster" },
            "ports": [
                {"name": "echo", "port": UDP_PORT, "protocol": "UDP"},
                {"name": "accept", "port": TCP_PORT, "protocol": "TCP"},
            ],
        });
        if self.kube.is_some() {
            spec["selector"] = json!({INSTANCE_LABEL: name});
        }
        if let (Some(spec), Some(extra)) = (spec.as_object_mut(), extra.as_object()) {
            spec.extend(extra.clone());
        }
        let svc: Service = serde_json::from_value(json!({
            "metadata": {"name": name, "namespace": SERVICE_NAMESPACE},
            "spec": spec,
        }))
        .expect("service");
        let services = Api::<Service>::namespaced(self.kube(), SERVICE_NAMESPACE);
        services
            .create(&PostParams::default(), &svc)
            .await
            .unwrap_or_else(|e| panic!("create Service {name}: {e}"));
        if let Some(vips) = vips {
            let ingress: Vec<Value> = vips
                .iter()
                .map(|ip| json!({"ip": ip.to_string()}))
                .collect();
            services
                .patch_status(
                    name,
                    &PatchParams::default(),
                    &Patch::Merge(json!({"status": {"loadBalancer": {"ingress": ingress}}})),
                )
                .await
                .unwrap_or_else(|e| panic!("set the ingress of Service {name}: {e}"));
        }
        if self.kube.is_some() {
            self.set_endpoints(name, endpoints_on).await;
            return;
        }
        let slice: EndpointSlice = serde_json::from_value(json!({
            "metadata": {
                "name": slice_name(name),
                "namespace": SERVICE_NAMESPACE,
                "labels": {"kubernetes.io/service-name": name},
            },
            "addressType": "IPv4",
            "endpoints": endpoints(self, endpoints_on),
        }))
        .expect("endpointslice");
        Api::<EndpointSlice>::namespaced(self.kube(), SERVICE_NAMESPACE)
            .create(&PostParams::default(), &slice)
            .await
            .unwrap_or_else(|e| panic!("create the EndpointSlice of {name}: {e}"));
    }

    /// Replaces the endpoints of Service `name` so that there is never a moment without the
    /// ones that stay. In-repo: one update of its EndpointSlice. Real control plane: Pods are
    /// created on the new nodes first, then deleted from the nodes left out (a surge first, as
    /// a rolling update does), and this returns once the controller's slices list exactly
    /// `endpoints_on`.
    pub async fn set_endpoints(&self, name: &str, endpoints_on: &[&str]) {
        if self.kube.is_some() {
            self.set_pods(name, endpoints_on).await;
            return;
        }
        Api::<EndpointSlice>::namespaced(self.kube(), SERVICE_NAMESPACE)
            .patch(
                &slice_name(name),
                &PatchParams::default(),
                &Patch::Merge(json!({"endpoints": endpoints(self, endpoints_on)})),
            )
            .await
            .unwrap_or_else(|e| panic!("update the EndpointSlice of {name}: {e}"));
    }

    /// Deletes Service `name` and its endpoints: in-repo its EndpointSlice; on the real control
    /// plane its Pods, then waits until the garbage collector has removed the controller's
    /// slices (as the in-repo path leaves none).
    pub async fn delete_service(&self, name: &str) {
        Api::<Service>::namespaced(self.kube(), SERVICE_NAMESPACE)
            .delete(name, &DeleteParams::default())
            .await
            .unwrap_or_else(|e| panic!("delete Service {name}: {e}"));
        if self.kube.is_some() {
            for pod in self.service_pods(name).await {
                workloads::delete_pod(self.kube(), SERVICE_NAMESPACE, &pod)
                    .await
                    .unwrap_or_else(|e| panic!("{e}"));
            }
            workloads::wait_no_endpoint_slices(
                self.kube(),
                SERVICE_NAMESPACE,
                name,
                ENDPOINTS_TIMEOUT,
            )
            .await
            .unwrap_or_else(|e| panic!("{e}\n{}", self.kube_log_tails()));
            return;
        }
        Api::<EndpointSlice>::namespaced(self.kube(), SERVICE_NAMESPACE)
            .delete(&slice_name(name), &DeleteParams::default())
            .await
            .unwrap_or_else(|e| panic!("delete the EndpointSlice of {name}: {e}"));
    }

    /// The names of Service `name`'s Pods (real control plane).
    async fn service_pods(&self, name: &str) -> Vec<String> {
        Api::<Pod>::namespaced(self.kube(), SERVICE_NAMESPACE)
            .list(&ListParams::default().labels(&format!("{INSTANCE_LABEL}={name}")))
            .await
            .unwrap_or_else(|e| panic!("list the Pods of Service {name}: {e}"))
            .items
            .into_iter()
            .filter_map(|p| p.metadata.name)
            .collect()
    }

    /// Makes Service `name`'s Pods exactly one per node of `nodes` (creating the missing ones
    /// first, then deleting the others), then waits for the endpointslice controller.
    async fn set_pods(&self, name: &str, nodes: &[&str]) {
        let have = self.service_pods(name).await;
        for node in nodes {
            let pod = pod_name(name, node);
            if have.contains(&pod) {
                continue;
            }
            workloads::create_running_pod(
                self.kube(),
                SERVICE_NAMESPACE,
                &pod,
                &[(INSTANCE_LABEL, name)],
                node,
                self.node_ip4(node).into(),
            )
            .await
            .unwrap_or_else(|e| panic!("{e}"));
        }
        let keep: Vec<String> = nodes.iter().map(|n| pod_name(name, n)).collect();
        for pod in have.iter().filter(|p| !keep.contains(p)) {
            workloads::delete_pod(self.kube(), SERVICE_NAMESPACE, pod)
                .await
                .unwrap_or_else(|e| panic!("{e}"));
        }
        workloads::wait_ready_endpoints(
            self.kube(),
            SERVICE_NAMESPACE,
            name,
            nodes,
            ENDPOINTS_TIMEOUT,
        )
        .await
        .unwrap_or_else(|e| panic!("{e}\n{}", self.kube_log_tails()));
    }

    /// The control plane's log tails, if the testbed runs on one.
    fn kube_log_tails(&self) -> String {
        self.kube
            .as_ref()
            .map(KubeControlPlane::log_tails)
            .unwrap_or_default()
    }
}
