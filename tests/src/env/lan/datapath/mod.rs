//! The Service data path of a real cluster on the testbed: the real kube-proxy (nftables mode)
//! in every node namespace, Pods that are real network endpoints (their own namespaces and
//! addresses, routed between nodes), and an HTTP client ([`http_client`]) that measures what a
//! user of a LoadBalancer Service sees end to end when the VIP's owner crashes.
//!
//! Why: the agent only decides which node receives a VIP's packets. What a user sees also
//! depends on what that node does with them: kube-proxy DNATs the LoadBalancer IP (in
//! prerouting, before any routing) to an endpoint: with `externalTrafficPolicy: Local` only to
//! the node's own Pods, with `Cluster` to any ready Pod (masqueraded when remote), including
//! the crashed node's until the node lifecycle controller marks them not ready (its grace
//! period, then the endpointslice controller). Only the real pieces show that.
//!
//! Needs a testbed on the real control plane ([`crate::env::ApiKind::Kube`]).
//!
//! ```text
//!   client ── br0 ── node-a eth0 10.78.0.1 ── kube-proxy (nftables) ── pod0 ── Pod 10.244.1.2
//!                 └─ node-b eth0 10.78.0.2 ── kube-proxy (nftables) ── pod0 ── Pod 10.244.2.2
//!   node i: pod CIDR 10.244.(i+1).0/24, routes to every other node's pod CIDR via its IP
//! ```
//!
//! **How this sits with the testbed's VIP routes.** The nodes accept every VIP through
//! `local 10.78.128.0/17` routes and ignore ARP for them (`arp_ignore=1`), for the UDP echo
//! probe (see [`super`]). They do not fight kube-proxy: its DNAT runs in the `nat` prerouting
//! hook, before the routing decision, so a packet to `VIP:80` is routed to its Pod, never to
//! the local route; packets to ports no Service has (the echo) still meet the local route, so
//! the layer-2 failover stays measurable with the same VIP. ARP for Pod addresses happens on
//! the Pod veths, where the gateway address is configured, so `arp_ignore=1` answers it. The
//! nodes forward (`ip_forward=1`, as the kubelet's CNI setup requires).
//!
//! A crash ([`Testbed::crash`]) kills the node's kube-proxy with everything spawned there; its
//! Pods' servers keep running but are unreachable with the link down. [`DataPath::revive`]
//! brings the node back: link, kubelet, kube-proxy, and the Pods' readiness
//! ([`pods::restore_pod_readiness`], what the kubelet's status manager does).

pub mod http_client;
pub mod pods;
pub mod proxy;

use std::{
    net::{IpAddr, Ipv4Addr},
    path::PathBuf,
    time::{Duration, Instant},
};

use k8s_openapi::api::core::v1::Service;
use kube::{
    Api,
    api::{Patch, PatchParams, PostParams},
};
use serde_json::json;

use super::{API_PORT, BRIDGE_V4, LB_CLASS, SERVICE_NAMESPACE, Testbed};
use crate::env::kube::{KubeError, workloads};

pub use http_client::{
    HttpClient, HttpError, HttpOutcome, HttpSample, HttpTimeline, fetch, http_outcome,
};
pub use pods::{reconcile_pod_readiness, restore_pod_readiness};

/// The cluster's Pod network (kube-proxy's `--cluster-cidr`).
pub const CLUSTER_CIDR: &str = "10.244.0.0/16";
/// The port the Pods' servers listen on (the Services' `targetPort`).
pub const POD_PORT: u16 = 8080;
/// The Services' port.
pub const SERVICE_PORT: u16 = 80;
/// How often the stand-in kubelet's status manager re-checks its Pods after a return (the
/// kubelet's `syncBatch` runs every 10 s).
pub const STATUS_SYNC_PERIOD: Duration = Duration::from_secs(1);
/// How long a returned node's Pods may take to be ready again.
pub const READY_AGAIN_TIMEOUT: Duration = Duration::from_secs(60);
/// The label that selects a data-path Service's Pods (value: the app).
pub const POD_LABEL: &str = "announcer.dev/e2e-app";

/// Node `i`'s pod CIDR: `10.244.(i+1).0/24`.
pub fn pod_cidr(i: usize) -> String {
    format!("10.244.{}.0/24", i + 1)
}

/// Node `i`'s gateway address on its Pod veths: `10.244.(i+1).1`.
pub fn pod_gateway(i: usize) -> Ipv4Addr {
    Ipv4Addr::new(10, 244, i as u8 + 1, 1)
}

/// The address of the `k`-th Pod on node `i`: `10.244.(i+1).(k+2)`.
pub fn pod_ip(i: usize, k: usize) -> Ipv4Addr {
    assert!(k < 250, "at most 250 Pods per node");
    Ipv4Addr::new(10, 244, i as u8 + 1, k as u8 + 2)
}

/// Why the data path could not be set up or changed.
#[derive(Debug, thiserror::Error)]
pub enum DataPathError {
    /// The testbed runs the in-repo API server: kube-proxy needs the real one.
    #[error("the data path needs a testbed on the real control plane (ApiKind::Kube)")]
    NoControlPlane,
    /// A request to the API server failed.
    #[error("{what}: {source}")]
    Api {
        /// What was asked.
        what: String,
        /// The client's error.
        source: kube::Error,
    },
    /// The control plane fixture failed (a wait, a ServiceAccount).
    #[error("{0}")]
    Kube(#[from] KubeError),
    /// A file could not be written.
    #[error("{0}")]
    Io(#[from] std::io::Error),
    /// Something did not happen in time.
    #[error("timed out after {0:?} waiting for {1}")]
    Timeout(Duration, String),
}

/// The data path of one testbed; see the module docs. Dropping it stops the Pods' servers and
/// deletes their namespaces (kube-proxy is a process of the testbed's nodes and goes with it).
pub struct DataPath {
    kubeconfig: PathBuf,
    pods: Vec<pods::PodNet>,
}

impl DataPath {
    /// Sets the nodes up for Pods (forwarding, routes to every other node's pod CIDR via its
    /// address), gives kube-proxy its ServiceAccount, binding and token, and starts it on every
    /// node. Call from the thread that owns the testbed (kube-proxy gets a parent-death signal,
    /// like the agents).
    pub fn install(tb: &mut Testbed) -> Result<DataPath, DataPathError> {
        let ca = tb
            .kube_control_plane()
            .ok_or(DataPathError::NoControlPlane)?
            .ca_cert()
            .to_owned();
        let nodes = tb.nodes();
        for n in &nodes {
            tb.node_ns(n).sysctl("net.ipv4.ip_forward", "1");
            pod_routes(tb, n);
        }
        let client = tb.kube();
        tb.block_on(async move { unproxy_echo_services(client).await })?;
        let token = tb.block_on(proxy::proxy_token(tb.kube()))?;
        let kubeconfig = tb.dir().join("kube-proxy.kubeconfig");
        proxy::write_kubeconfig(&kubeconfig, &api_server_url(), &ca, token)?;
        let dp = DataPath {
            kubeconfig,
            pods: Vec::new(),
        };
        for n in &nodes {
            dp.start_proxy(tb, n)?;
        }
        Ok(dp)
    }

    /// Starts kube-proxy in `node`'s namespace (log: `kube-proxy.NODE.log` in the testbed's
    /// directory).
    pub fn start_proxy(&self, tb: &mut Testbed, node: &str) -> Result<(), DataPathError> {
        let cmd = proxy::command(
            node,
            tb.node_ip4(node).into(),
            &self.kubeconfig,
            &proxy_log(tb, node),
        )?;
        tb.spawn_in_node(node, cmd);
        Ok(())
    }

    /// Creates one Pod of `app` on each of `nodes` (named `APP-NODE`, [`POD_LABEL`]`: APP`):
    /// its namespace, veth and server, then the API object, Running and Ready at its address.
    /// Returns the Pods' names.
    pub fn add_pods(
        &mut self,
        tb: &Testbed,
        app: &str,
        nodes: &[&str],
    ) -> Result<Vec<String>, DataPathError> {
        let mut names = Vec::new();
        for node in nodes {
            let i = tb.node_index(node);
            let k = self.pods.iter().filter(|p| p.node == *node).count();
            let name = format!("{app}-{node}");
            let ip = pod_ip(i, k);
            let net = pods::create_pod_net(
                &name,
                node,
                tb.node_ns(node),
                pod_gateway(i),
                ip,
                &format!("pod{k}"),
            );
            self.pods.push(net);
            let (client, app, node_name, n) =
                (tb.kube(), app.to_owned(), node.to_string(), name.clone());
            let node_ip: IpAddr = tb.node_ip4(node).into();
            tb.block_on(async move {
                pods::create_pod(
                    client,
                    SERVICE_NAMESPACE,
                    &n,
                    &app,
                    &node_name,
                    node_ip,
                    ip.into(),
                )
                .await
            })?;
            names.push(name);
        }
        Ok(names)
    }

    /// The Pods created so far: (name, node, address).
    pub fn pods(&self) -> Vec<(String, String, Ipv4Addr)> {
        self.pods
            .iter()
            .map(|p| (p.name.clone(), p.node.clone(), p.ip))
            .collect()
    }

    /// The crashed `node` comes back: [`Testbed::revive`] (link up, kubelet renewing and
    /// Ready), kube-proxy started again (it died with the node), and its Pods reported ready
    /// again ([`restore_pod_readiness`], then [`reconcile_pod_readiness`] until they stay
    /// Ready). The agent is not started (the caller does, as the DaemonSet would). Returns the
    /// Pods made ready by the first pass.
    pub fn revive(&self, tb: &mut Testbed, node: &str) -> Result<Vec<String>, DataPathError> {
        tb.revive(node);
        // The kernel dropped the routes through eth0 when the link went down.
        pod_routes(tb, node);
        self.start_proxy(tb, node)?;
        let (client, node) = (tb.kube(), node.to_owned());
        tb.block_on(async move {
            let done = restore_pod_readiness(client.clone(), SERVICE_NAMESPACE, &node).await?;
            pods::reconcile_pod_readiness(
                client,
                SERVICE_NAMESPACE,
                &node,
                STATUS_SYNC_PERIOD,
                READY_AGAIN_TIMEOUT,
            )
            .await?;
            Ok::<_, DataPathError>(done)
        })
    }
}

/// The label that makes kube-proxy ignore a Service (it is meant for Services another proxy
/// implements).
pub const SERVICE_PROXY_NAME_LABEL: &str = "service.kubernetes.io/service-proxy-name";

/// Labels every Service of the testbed's namespace that does not select data-path Pods
/// ([`POD_LABEL`]) with [`SERVICE_PROXY_NAME_LABEL`], so that kube-proxy leaves them alone.
/// Why: those are the echo Services ([`Testbed::add_service`]), whose Pods are the nodes
/// themselves (`hostNetwork`); kube-proxy would DNAT a probe to any node's echo, hiding which
/// node received it, which is what the echo is for. The agent ignores the label. Returns the
/// Services labelled.
pub async fn unproxy_echo_services(client: kube::Client) -> Result<Vec<String>, DataPathError> {
    let api = Api::<Service>::namespaced(client, SERVICE_NAMESPACE);
    let list = api
        .list(&Default::default())
        .await
        .map_err(|source| DataPathError::Api {
            what: "listing the Services".into(),
            source,
        })?;
    let mut done = Vec::new();
    for svc in list.items {
        let name = svc.metadata.name.unwrap_or_default();
        let ours = svc
            .spec
            .and_then(|s| s.selector)
            .is_some_and(|sel| sel.contains_key(POD_LABEL));
        if ours || name == "kubernetes" {
            continue;
        }
        let patch = json!({"metadata": {"labels": {SERVICE_PROXY_NAME_LABEL: "testbed-echo"}}});
        api.patch(&name, &PatchParams::default(), &Patch::Merge(&patch))
            .await
            .map_err(|source| DataPathError::Api {
                what: format!("labelling Service {name}"),
                source,
            })?;
        done.push(name);
    }
    Ok(done)
}

/// Routes `node` to every other node's pod CIDR via that node's address (`ip route replace`:
/// also after a link down, which removes them).
fn pod_routes(tb: &Testbed, node: &str) {
    let me = tb.node_index(node);
    for (j, m) in tb.nodes().iter().enumerate() {
        if j != me {
            let via = tb.node_ip4(m).to_string();
            tb.node_ns(node).ip(&[
                "route",
                "replace",
                &pod_cidr(j),
                "via",
                &via,
                "dev",
                super::IFACE,
            ]);
        }
    }
}

/// The API server as the nodes reach it (the relay in the bridge namespace).
pub fn api_server_url() -> String {
    format!("https://{BRIDGE_V4}:{API_PORT}")
}

/// kube-proxy's log on `node`.
pub fn proxy_log(tb: &Testbed, node: &str) -> PathBuf {
    tb.dir().join(format!("kube-proxy.{node}.log"))
}

/// The last lines of kube-proxy's log on `node`.
pub fn proxy_log_tail(tb: &Testbed, node: &str) -> String {
    crate::env::node::log_tail(&proxy_log(tb, node))
}

/// Which announcer a Service is for: its `loadBalancerClass`, and the annotation (if any)
/// through which that system is told the address to use.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Announcer {
    /// `spec.loadBalancerClass`.
    pub class: &'static str,
    /// The address annotation (MetalLB's `metallb.io/loadBalancerIPs`, kube-vip's
    /// `kube-vip.io/loadbalancerIPs`), or none (this agent reads the status).
    pub ip_annotation: Option<&'static str>,
}

impl Announcer {
    /// This agent, with the testbed's class [`LB_CLASS`].
    pub const OURS: Announcer = Announcer {
        class: LB_CLASS,
        ip_annotation: None,
    };
}

/// Creates LoadBalancer Service `default/<name>` (class and address annotation of `by`, TCP
/// [`SERVICE_PORT`] to the Pods' [`POD_PORT`], selecting [`POD_LABEL`]` = app`,
/// `externalTrafficPolicy: Local` if `etp_local`) and sets its ingress to `vip`, as an IPAM
/// controller would.
pub async fn add_http_service(
    client: kube::Client,
    name: &str,
    vip: IpAddr,
    etp_local: bool,
    app: &str,
    by: Announcer,
) -> Result<(), DataPathError> {
    let annotations: serde_json::Map<String, serde_json::Value> = by
        .ip_annotation
        .map(|a| (a.to_string(), json!(vip.to_string())))
        .into_iter()
        .collect();
    let svc: Service = serde_json::from_value(json!({
        "metadata": {"name": name, "namespace": SERVICE_NAMESPACE, "annotations": annotations},
        "spec": {
            "type": "LoadBalancer",
            "loadBalancerClass": by.class,
            "externalTrafficPolicy": if etp_local { "Local" } else { "Cluster" },
            "selector": {POD_LABEL: app},
            "ports": [{
                "name": "http", "port": SERVICE_PORT, "targetPort": POD_PORT, "protocol": "TCP",
            }],
        },
    }))
    .expect("a valid Service");
    let api = Api::<Service>::namespaced(client, SERVICE_NAMESPACE);
    let err = |what: String| move |source: kube::Error| DataPathError::Api { what, source };
    api.create(&PostParams::default(), &svc)
        .await
        .map_err(err(format!("creating Service {name}")))?;
    let status = json!({"status": {"loadBalancer": {"ingress": [{"ip": vip.to_string()}]}}});
    api.patch_status(name, &PatchParams::default(), &Patch::Merge(&status))
        .await
        .map_err(err(format!("setting the ingress of Service {name}")))?;
    Ok(())
}

/// Whether kube-proxy on `node` has programmed `vip:SERVICE_PORT` (its nftables
/// `service-ips` map lists it).
pub fn proxy_programmed(tb: &Testbed, node: &str, vip: IpAddr) -> bool {
    let table = if vip.is_ipv4() { "ip" } else { "ip6" };
    let out = tb
        .node_ns(node)
        .exec(&["nft", "list", "map", table, "kube-proxy", "service-ips"]);
    out.status.success()
        && String::from_utf8_lossy(&out.stdout).contains(&format!("{vip} . tcp . {SERVICE_PORT}"))
}

/// Waits up to `timeout` until kube-proxy on every node programmed `vip` and the
/// EndpointSlices of `service` list a ready endpoint on exactly `endpoints_on`.
pub fn wait_service_ready(
    tb: &Testbed,
    service: &str,
    vip: IpAddr,
    endpoints_on: &[&str],
    timeout: Duration,
) -> Result<(), DataPathError> {
    let end = Instant::now() + timeout;
    let (client, svc) = (tb.kube(), service.to_owned());
    let want: Vec<String> = endpoints_on.iter().map(|s| s.to_string()).collect();
    tb.block_on(async move {
        let want: Vec<&str> = want.iter().map(String::as_str).collect();
        workloads::wait_ready_endpoints(client, SERVICE_NAMESPACE, &svc, &want, timeout).await
    })?;
    for n in tb.nodes() {
        while !proxy_programmed(tb, &n, vip) {
            if Instant::now() > end {
                return Err(DataPathError::Timeout(
                    timeout,
                    format!(
                        "kube-proxy on {n} programming {vip}; its log:\n{}",
                        proxy_log_tail(tb, &n)
                    ),
                ));
            }
            std::thread::sleep(Duration::from_millis(100));
        }
    }
    Ok(())
}
