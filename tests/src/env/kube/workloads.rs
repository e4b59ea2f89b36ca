//! A user's workload on the real control plane: Pods bound to a node, made running and ready
//! the way a kubelet reports them, so that kube-controller-manager's endpointslice controller
//! writes the EndpointSlices of the Services that select them.
//!
//! Why Pods and not hand-written EndpointSlices: on a real cluster nobody writes the slices of
//! a Service with a selector but that controller, and what the agent reads is what it writes
//! (generated names, several slices, `serving`/`terminating`, the order of updates). A test of
//! the agent against kube-apiserver should see exactly that.
//!
//! Why no scheduler and no kubelet: each Pod is created with `spec.nodeName` (bound at
//! creation, as a DaemonSet's Pod or a static Pod is), `hostNetwork` (its IP is the node's)
//! and without a ServiceAccount token; nothing runs it, so its status is set here through the
//! status subresource, as the kubelet would after starting its containers.
//!
//! Every function takes a [`Client`] by value, so it runs on whichever runtime the client was
//! built on (the testbed's).

use std::{net::IpAddr, time::Duration};

use k8s_openapi::api::{
    core::v1::{Pod, ServiceAccount},
    discovery::v1::EndpointSlice,
};
use kube::{
    Api, Client,
    api::{DeleteParams, ListParams, Patch, PatchParams, PostParams},
};
use serde_json::{Value, json};

use super::{KubeError, api_err, poll};

/// The label that ties an EndpointSlice to its Service (set by the endpointslice controller).
pub const SERVICE_NAME_LABEL: &str = "kubernetes.io/service-name";
/// The image of the Pods' one container. Nothing pulls it: no kubelet runs these Pods.
pub const POD_IMAGE: &str = "registry.k8s.io/pause:3.10";
/// How long the namespace's `default` ServiceAccount may take to appear (the serviceaccount
/// controller creates it shortly after the namespace).
const SERVICE_ACCOUNT_TIMEOUT: Duration = Duration::from_secs(30);

pub(crate) fn now_rfc3339() -> String {
    humantime::format_rfc3339_seconds(std::time::SystemTime::now()).to_string()
}

/// The Ready and ContainersReady conditions as the kubelet reports them.
pub(crate) fn ready_conditions(ready: bool) -> Value {
    let now = now_rfc3339();
    let status = if ready { "True" } else { "False" };
    let reason = (!ready).then_some("ContainersNotReady");
    json!([
        {"type": "ContainersReady", "status": status, "reason": reason, "lastTransitionTime": now},
        {"type": "Ready", "status": status, "reason": reason, "lastTransitionTime": now},
    ])
}

/// Creates Pod `ns/name` with `labels`, bound to `node` (`spec.nodeName`, so no scheduler is
/// involved), host-networked, without a ServiceAccount token and with one trivial container;
/// then reports it Running and ready at `ip` (the node's address) through the status
/// subresource, as the node's kubelet would. Returns the Pod as last written.
///
/// Why wait for the `default` ServiceAccount first: the ServiceAccount admission plugin rejects
/// a Pod whose ServiceAccount does not exist yet, even with no token mounted, and the
/// serviceaccount controller creates it a moment after the namespace.
pub async fn create_running_pod(
    client: Client,
    ns: &str,
    name: &str,
    labels: &[(&str, &str)],
    node: &str,
    ip: IpAddr,
) -> Result<Pod, KubeError> {
    let accounts: Api<ServiceAccount> = Api::namespaced(client.clone(), ns);
    poll(
        SERVICE_ACCOUNT_TIMEOUT,
        &format!("the default ServiceAccount of {ns}"),
        || {
            let accounts = accounts.clone();
            async move { accounts.get_opt("default").await.ok().flatten() }
        },
    )
    .await?;
    let labels: serde_json::Map<String, Value> = labels
        .iter()
        .map(|(k, v)| ((*k).to_string(), Value::from(*v)))
        .collect();
    let pod: Pod = serde_json::from_value(json!({
        "apiVersion": "v1", "kind": "Pod",
        "metadata": {"name": name, "namespace": ns, "labels": labels},
        "spec": {
            "nodeName": node,
            "hostNetwork": true,
            "automountServiceAccountToken": false,
            "containers": [{"name": "app", "image": POD_IMAGE}],
        },
    }))
    .expect("a valid Pod");
    let pods: Api<Pod> = Api::namespaced(client, ns);
    pods.create(&PostParams::default(), &pod)
        .await
        .map_err(api_err(format!("creating Pod {ns}/{name}")))?;
    let ip = ip.to_string();
    let status = json!({"status": {
        "phase": "Running",
        "hostIP": ip,
        "hostIPs": [{"ip": ip}],
        "podIP": ip,
        "podIPs": [{"ip": ip}],
        "startTime": now_rfc3339(),
        "conditions": ready_conditions(true),
    }});
    pods.patch_status(name, &PatchParams::default(), &Patch::Strategic(&status))
        .await
        .map_err(api_err(format!("reporting Pod {ns}/{name} running")))
}

/// Reports Pod `ns/name` ready or not (its Ready and ContainersReady conditions), as the
/// kubelet does when a readiness probe starts or stops passing; the endpointslice controller
/// then flips its endpoint's `ready`.
pub async fn set_pod_ready(
    client: Client,
    ns: &str,
    name: &str,
    ready: bool,
) -> Result<Pod, KubeError> {
    // Strategic merge: conditions merge by `type`, so the others stay.
    let status = json!({"status": {"conditions": ready_conditions(ready)}});
    Api::<Pod>::namespaced(client, ns)
        .patch_status(name, &PatchParams::default(), &Patch::Strategic(&status))
        .await
        .map_err(api_err(format!("reporting Pod {ns}/{name} ready={ready}")))
}

/// Deletes Pod `ns/name` as a user (or its ReplicaSet) does and its kubelet then finishes:
/// a graceful delete (the Pod is terminating: its endpoint goes not ready, terminating), then
/// the kubelet's final delete with grace period 0 once its containers stopped, which removes
/// it. Without the second step the Pod would stay terminating forever (no kubelet runs it).
/// A Pod already gone is not an error.
pub async fn delete_pod(client: Client, ns: &str, name: &str) -> Result<(), KubeError> {
    let pods: Api<Pod> = Api::namespaced(client, ns);
    for params in [
        DeleteParams::default(),
        DeleteParams {
            grace_period_seconds: Some(0),
            ..Default::default()
        },
    ] {
        match pods.delete(name, &params).await {
            Ok(_) => {}
            Err(kube::Error::Api(e)) if e.code == 404 => return Ok(()),
            Err(e) => return Err(api_err(format!("deleting Pod {ns}/{name}"))(e)),
        }
    }
    Ok(())
}

/// Watches the EndpointSlices of Service `ns/service` and returns the moment `node` first has
/// no ready endpoint there, or `None` if that did not happen within `timeout`. Call it before
/// the change you time: the initial list counts too, so a node already without a ready
/// endpoint returns at once.
///
/// Why a watch and not a poll: the moment is when the endpointslice controller's write
/// reaches a watcher, which is what kube-proxy reacts to; a poll would add up to its period.
pub async fn endpoint_not_ready_at(
    client: Client,
    ns: &str,
    service: &str,
    node: &str,
    timeout: Duration,
) -> Option<std::time::Instant> {
    use futures::StreamExt;
    use kube::runtime::{WatchStreamExt, watcher};

    let api = Api::<EndpointSlice>::namespaced(client, ns);
    let cfg = watcher::Config::default().labels(&format!("{SERVICE_NAME_LABEL}={service}"));
    let mut slices: std::collections::BTreeMap<String, EndpointSlice> = Default::default();
    let watch = async {
        let mut events = std::pin::pin!(watcher(api, cfg).default_backoff());
        while let Some(ev) = events.next().await {
            match ev {
                Ok(watcher::Event::Apply(s) | watcher::Event::InitApply(s)) => {
                    slices.insert(s.metadata.name.clone().unwrap_or_default(), s);
                }
                Ok(watcher::Event::Delete(s)) => {
                    slices.remove(&s.metadata.name.clone().unwrap_or_default());
                }
                Ok(watcher::Event::Init) => slices.clear(),
                Ok(watcher::Event::InitDone) | Err(_) => {}
            }
            let ready_on_node = slices
                .values()
                .flat_map(|s| s.endpoints.iter().flatten())
                .any(|e| {
                    e.node_name.as_deref() == Some(node)
                        && e.conditions.as_ref().and_then(|c| c.ready) == Some(true)
                });
            if !slices.is_empty() && !ready_on_node {
                return std::time::Instant::now();
            }
        }
        std::future::pending().await
    };
    tokio::time::timeout(timeout, watch).await.ok()
}

/// The nodes of the ready endpoints in the EndpointSlices of Service `ns/service`, sorted, with
/// each node as often as it has a ready endpoint.
pub async fn ready_endpoint_nodes(
    client: Client,
    ns: &str,
    service: &str,
) -> Result<Vec<String>, KubeError> {
    let slices = Api::<EndpointSlice>::namespaced(client, ns)
        .list(&ListParams::default().labels(&format!("{SERVICE_NAME_LABEL}={service}")))
        .await
        .map_err(api_err(format!(
            "listing the EndpointSlices of {ns}/{service}"
        )))?;
    let mut nodes: Vec<String> = slices
        .items
        .iter()
        .flat_map(|s| s.endpoints.iter().flatten())
        .filter(|e| e.conditions.as_ref().and_then(|c| c.ready) == Some(true))
        .filter_map(|e| e.node_name.clone())
        .collect();
    nodes.sort();
    Ok(nodes)
}

/// Waits up to `timeout` until the EndpointSlices of Service `ns/service` list a ready endpoint
/// on exactly the nodes `want` (one each, in any order): the endpointslice controller has
/// caught up with the Pods. With `want` empty, Services without any slice count too.
pub async fn wait_ready_endpoints(
    client: Client,
    ns: &str,
    service: &str,
    want: &[&str],
    timeout: Duration,
) -> Result<(), KubeError> {
    let mut want: Vec<String> = want.iter().map(|n| n.to_string()).collect();
    want.sort();
    poll(
        timeout,
        &format!("the EndpointSlices of {ns}/{service} listing ready endpoints on {want:?}"),
        || {
            let (client, want) = (client.clone(), want.clone());
            async move {
                let got = ready_endpoint_nodes(client, ns, service).await.ok()?;
                (got == want).then_some(())
            }
        },
    )
    .await
}

/// Waits up to `timeout` until Service `ns/service` has no EndpointSlice left (the garbage
/// collector removes the controller's slices after their owner, the Service, is deleted).
pub async fn wait_no_endpoint_slices(
    client: Client,
    ns: &str,
    service: &str,
    timeout: Duration,
) -> Result<(), KubeError> {
    let slices: Api<EndpointSlice> = Api::namespaced(client, ns);
    let lp = ListParams::default().labels(&format!("{SERVICE_NAME_LABEL}={service}"));
    poll(
        timeout,
        &format!("the EndpointSlices of {ns}/{service} gone"),
        || {
            let (slices, lp) = (slices.clone(), lp.clone());
            async move {
                let list = slices.list(&lp).await.ok()?;
                list.items.is_empty().then_some(())
            }
        },
    )
    .await
}
