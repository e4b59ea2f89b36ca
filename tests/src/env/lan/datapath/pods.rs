//! Pods that are real network endpoints: each its own network namespace with its own address
//! from its node's pod CIDR, a veth to the node (the node routes the Pod's /32 to it, the Pod
//! routes everything via the node), and an HTTP server answering `GET /` with the Pod's name.
//! The same Pod exists in the API: bound to its node (`spec.nodeName`), not host-networked,
//! and reported Running and Ready at its address through the status subresource, as the
//! kubelet does once its containers run; the endpointslice controller then lists it.
//!
//! Why a server thread and no container: what the measurement needs from a Pod is an address
//! that answers behind kube-proxy's DNAT and stops answering when its node drops off the LAN.
//! A thread of the test process with a listening socket inside the Pod's namespace is that.

use std::{
    io::{Read, Write},
    net::{IpAddr, Ipv4Addr, SocketAddr, TcpListener},
    os::fd::AsRawFd,
    sync::{
        Arc,
        atomic::{AtomicBool, Ordering},
    },
    thread::JoinHandle,
    time::Duration,
};

use k8s_openapi::api::core::v1::{Pod, ServiceAccount};
use kube::{
    Api, Client,
    api::{ListParams, Patch, PatchParams, PostParams},
};
use serde_json::json;

use super::{DataPathError, POD_LABEL, POD_PORT};
use crate::{
    env::kube::{
        poll,
        workloads::{now_rfc3339, ready_conditions, set_pod_ready},
    },
    netns::Netns,
};

/// One Pod's namespace and server.
pub struct PodNet {
    /// The Pod's name (also the API object's).
    pub name: String,
    /// Its node.
    pub node: String,
    /// Its address.
    pub ip: Ipv4Addr,
    server: Option<Server>,
    // Dropped last: deleting the namespace also removes the veth.
    _ns: Netns,
}

impl Drop for PodNet {
    fn drop(&mut self) {
        if let Some(s) = self.server.take() {
            s.stop();
        }
    }
}

/// Creates the Pod's namespace, its veth `node_if` (node side) <-> `eth0` (Pod side), the
/// routes, and starts the server.
pub fn create_pod_net(
    name: &str,
    node: &str,
    node_ns: &Netns,
    gateway: Ipv4Addr,
    ip: Ipv4Addr,
    node_if: &str,
) -> PodNet {
    let ns = Netns::new(&format!("pod-{name}"));
    ns.disable_dad();
    crate::netns::veth(node_ns, node_if, &ns, "eth0");
    let (gw, addr) = (gateway.to_string(), ip.to_string());
    // The node side: the gateway address (the same /32 on every Pod veth of the node) and a
    // route to the Pod.
    node_ns.ip(&["addr", "add", &format!("{gw}/32"), "dev", node_if]);
    node_ns.ip(&["route", "add", &format!("{addr}/32"), "dev", node_if]);
    // The Pod side: its /32, the gateway on the link, and the default route through it.
    ns.ip(&["addr", "add", &format!("{addr}/32"), "dev", "eth0"]);
    ns.ip(&["route", "add", &format!("{gw}/32"), "dev", "eth0"]);
    ns.ip(&["route", "add", "default", "via", &gw, "dev", "eth0"]);
    let server = Server::start(&ns, name);
    PodNet {
        name: name.to_owned(),
        node: node.to_owned(),
        ip,
        server: Some(server),
        _ns: ns,
    }
}

/// The HTTP server of one Pod.
struct Server {
    stop: Arc<AtomicBool>,
    fd: i32,
    thread: JoinHandle<()>,
    // Keeps the fd valid until the thread is joined.
    _listener: Arc<TcpListener>,
}

impl Server {
    fn start(ns: &Netns, pod: &str) -> Server {
        let listener = Arc::new(ns.enter(|| {
            TcpListener::bind(SocketAddr::from(([0, 0, 0, 0], POD_PORT)))
                .unwrap_or_else(|e| panic!("bind :{POD_PORT} in the namespace of Pod {pod}: {e}"))
        }));
        let stop = Arc::new(AtomicBool::new(false));
        let (l, flag, body) = (listener.clone(), stop.clone(), pod.to_owned());
        let thread = std::thread::Builder::new()
            .name(format!("pod-{pod}"))
            .spawn(move || serve(&l, &flag, &body))
            .expect("spawn a Pod's server");
        Server {
            stop,
            fd: listener.as_raw_fd(),
            thread,
            _listener: listener,
        }
    }

    fn stop(self) {
        self.stop.store(true, Ordering::Relaxed);
        // Wakes the blocked accept (it returns EINVAL on a shut-down listener).
        let _ = nix::sys::socket::shutdown(self.fd, nix::sys::socket::Shutdown::Both);
        let _ = self.thread.join();
    }
}

fn serve(listener: &TcpListener, stop: &AtomicBool, body: &str) {
    let response = format!(
        "HTTP/1.0 200 OK\r\nContent-Type: text/plain\r\nContent-Length: {}\r\nConnection: \
         close\r\n\r\n{body}",
        body.len()
    );
    while !stop.load(Ordering::Relaxed) {
        let Ok((mut conn, _)) = listener.accept() else {
            continue;
        };
        let _ = conn.set_read_timeout(Some(Duration::from_millis(500)));
        let mut buf = [0u8; 1024];
        let mut got = Vec::new();
        while !got.windows(4).any(|w| w == b"\r\n\r\n") {
            match conn.read(&mut buf) {
                Ok(0) | Err(_) => break,
                Ok(n) => got.extend_from_slice(&buf[..n]),
            }
        }
        if got.starts_with(b"GET ") {
            let _ = conn.write_all(response.as_bytes());
        }
    }
}

/// Creates Pod `ns/name` labelled `app` ([`POD_LABEL`]) bound to `node`, with its own network
/// (not `hostNetwork`), then reports it Running and Ready at `ip` on `node_ip` through the
/// status subresource, as its kubelet would once the container started.
pub async fn create_pod(
    client: Client,
    ns: &str,
    name: &str,
    app: &str,
    node: &str,
    node_ip: IpAddr,
    ip: IpAddr,
) -> Result<Pod, DataPathError> {
    // The ServiceAccount admission plugin rejects Pods until the namespace's `default`
    // ServiceAccount exists.
    let sa: Api<ServiceAccount> = Api::namespaced(client.clone(), ns);
    poll(
        Duration::from_secs(30),
        &format!("ServiceAccount {ns}/default"),
        || {
            let sa = sa.clone();
            async move { sa.get_opt("default").await.ok().flatten() }
        },
    )
    .await?;
    let pod: Pod = serde_json::from_value(json!({
        "apiVersion": "v1", "kind": "Pod",
        "metadata": {"name": name, "namespace": ns, "labels": {POD_LABEL: app}},
        "spec": {
            "nodeName": node,
            "automountServiceAccountToken": false,
            "containers": [{
                "name": "http",
                "image": crate::env::kube::workloads::POD_IMAGE,
                "ports": [{"name": "http", "containerPort": POD_PORT, "protocol": "TCP"}],
            }],
        },
    }))
    .expect("a valid Pod");
    let pods: Api<Pod> = Api::namespaced(client, ns);
    pods.create(&PostParams::default(), &pod)
        .await
        .map_err(|source| DataPathError::Api {
            what: format!("creating Pod {ns}/{name}"),
            source,
        })?;
    let (host, ip) = (node_ip.to_string(), ip.to_string());
    let status = json!({"status": {
        "phase": "Running",
        "hostIP": host,
        "hostIPs": [{"ip": host}],
        "podIP": ip,
        "podIPs": [{"ip": ip}],
        "startTime": now_rfc3339(),
        "conditions": ready_conditions(true),
    }});
    pods.patch_status(name, &PatchParams::default(), &Patch::Strategic(&status))
        .await
        .map_err(|source| DataPathError::Api {
            what: format!("reporting Pod {ns}/{name} running"),
            source,
        })
}

/// Whether the Pod's Ready condition is True.
fn is_ready(p: &Pod) -> bool {
    p.status
        .as_ref()
        .and_then(|s| s.conditions.as_ref())
        .is_some_and(|cs| cs.iter().any(|c| c.type_ == "Ready" && c.status == "True"))
}

/// The kubelet's status manager after a return, as a loop: every `period` (the kubelet's
/// `syncBatch` runs every 10 s), every Pod of `node` in `ns` whose Ready condition is not
/// True gets it back ([`restore_pod_readiness`]'s patch); returns once they
/// were all Ready at three checks in a row, or fails after `timeout`.
///
/// Why a loop: the node lifecycle controller also marks a Pod not ready when it sees the Pod
/// change while the Node is not ready in its cache (`processPod` in
/// `pkg/controller/nodelifecycle/node_lifecycle_controller.go`); a patch right after the Node
/// reported Ready can race with that, and the kubelet's periodic reconcile is what repairs it.
pub async fn reconcile_pod_readiness(
    client: Client,
    ns: &str,
    node: &str,
    period: Duration,
    timeout: Duration,
) -> Result<(), DataPathError> {
    let pods: Api<Pod> = Api::namespaced(client, ns);
    let lp = ListParams::default().fields(&format!("spec.nodeName={node}"));
    let deadline = std::time::Instant::now() + timeout;
    let mut ready_in_a_row = 0;
    while ready_in_a_row < 3 {
        if std::time::Instant::now() > deadline {
            return Err(DataPathError::Timeout(
                timeout,
                format!("the Pods of {node} ready again"),
            ));
        }
        let list = pods.list(&lp).await.map_err(|source| DataPathError::Api {
            what: format!("listing the Pods of {node}"),
            source,
        })?;
        let stale: Vec<String> = list
            .items
            .iter()
            .filter(|p| !is_ready(p))
            .filter_map(|p| p.metadata.name.clone())
            .collect();
        if stale.is_empty() {
            ready_in_a_row += 1;
        } else {
            ready_in_a_row = 0;
            for name in stale {
                set_pod_ready(pods.clone().into_client(), ns, &name, true).await?;
            }
        }
        tokio::time::sleep(period).await;
    }
    Ok(())
}

/// What the node's kubelet does for its Pods when it is back after a crash: the node
/// lifecycle controller marked them not ready while the node was unreachable
/// (`MarkPodsNotReady`, `pkg/controller/util/node/controller_utils.go`), and the kubelet puts
/// back what it knows.
///
/// Modelled on the kubelet's status manager, `pkg/kubelet/status/status_manager.go`: its
/// `syncBatch` runs every 10 s and, through `needsReconcile`, finds every Pod whose status in
/// the API server differs from the kubelet's cached one; `syncPod` then patches the cached
/// status back (`statusutil.PatchPodStatus`). The cached Ready condition comes from the
/// prober (`pkg/kubelet/prober/prober_manager.go`, `UpdatePodStatus`): a container without a
/// readiness probe is ready as soon as it runs, which is what these Pods are (their servers
/// never stopped: a crash here takes the node off the LAN, it does not kill its processes).
///
/// What is modelled: one status patch per Pod of `node` in `ns` (every one, whatever its
/// labels: the status manager reconciles all the node's Pods, and the testbed's host-network
/// Service Pods are withdrawn with the rest), setting Ready and ContainersReady back to True, right after the node reported Ready again (then
/// [`reconcile_pod_readiness`] repeats it until it holds, as `syncBatch` would). Not modelled:
/// the up to 10 s until the next `syncBatch` (here 1 s), container restarts after a reboot,
/// and readiness probes (none of these Pods has one). Returns the Pods patched.
pub async fn restore_pod_readiness(
    client: Client,
    ns: &str,
    node: &str,
) -> Result<Vec<String>, DataPathError> {
    let pods: Api<Pod> = Api::namespaced(client, ns);
    let list = pods
        .list(&ListParams::default().fields(&format!("spec.nodeName={node}")))
        .await
        .map_err(|source| DataPathError::Api {
            what: format!("listing the Pods of {node}"),
            source,
        })?;
    let mut done = Vec::new();
    for p in list.items {
        let Some(name) = p.metadata.name else {
            continue;
        };
        set_pod_ready(pods.clone().into_client(), ns, &name, true).await?;
        done.push(name);
    }
    Ok(done)
}
