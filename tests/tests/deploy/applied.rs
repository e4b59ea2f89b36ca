//! `deploy/` applied for real: `kubectl apply -k deploy/` to a real kube-apiserver (with its
//! controllers and scheduler), what it creates, and what its admission policy allows.

use std::{net::IpAddr, time::Duration};

use announcer_tests::env::{NAMESPACE, kube::KubeControlPlane};
use k8s_openapi::api::coordination::v1::Lease;
use kube::{Api, api::PostParams};
use serde_json::json;

const LOCALHOST: IpAddr = IpAddr::V4(std::net::Ipv4Addr::LOCALHOST);

async fn applied(tag: &str, nodes: &[&str]) -> KubeControlPlane {
    let cp = KubeControlPlane::start_applied(tag).await;
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
        assert_agent_pod_bound(&cp, n).await;
    }
}

/// The agent's Pod is bound to `node`, under the `announcer` account, on the host network.
pub(crate) async fn assert_agent_pod_bound(cp: &KubeControlPlane, n: &str) {
    let pod = cp
        .agent_pod(n, Duration::from_secs(60))
        .await
        .unwrap_or_else(|e| panic!("{e}\n{}", cp.log_tails()));
    let spec = pod.spec.expect("spec");
    assert_eq!(spec.node_name.as_deref(), Some(n));
    assert_eq!(spec.service_account_name.as_deref(), Some("announcer"));
    assert_eq!(spec.host_network, Some(true));
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
    // (A file name holds 255 bytes; node names up to 253.)
    let short: String = node.chars().take(60).collect();
    let path = cp.dir().join(format!("agent-{short}.kubeconfig"));
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

/// `apps/<name>`, type LoadBalancer, its `status.loadBalancer.ingress` set to `ip` by the admin
/// (as the allocator would).
async fn service_with_address(cp: &KubeControlPlane, name: &str, ip: &str) {
    use k8s_openapi::api::core::v1::{Namespace, Service};
    use kube::api::{Patch, PatchParams};
    let admin = cp.client();
    let _ = Api::<Namespace>::all(admin.clone())
        .create(
            &PostParams::default(),
            &serde_json::from_value(json!({"metadata": {"name": "apps"}})).expect("ns"),
        )
        .await;
    let services: Api<Service> = Api::namespaced(admin, "apps");
    let svc: Service = serde_json::from_value(json!({
        "metadata": {"name": name},
        "spec": {"type": "LoadBalancer", "loadBalancerClass": "announcer.dev/l2",
                 "ports": [{"port": 80}]},
    }))
    .expect("service");
    services
        .create(&PostParams::default(), &svc)
        .await
        .expect("create");
    services
        .patch_status(
            name,
            &PatchParams::default(),
            &Patch::Merge(
                json!({"status": {"loadBalancer": {"ingress": [{"ip": ip, "ipMode": "VIP"}]}}}),
            ),
        )
        .await
        .expect("the admin writes the address");
}

fn ingress_of(svc: &k8s_openapi::api::core::v1::Service) -> Vec<String> {
    svc.status
        .as_ref()
        .and_then(|s| s.load_balancer.as_ref())
        .and_then(|l| l.ingress.as_ref())
        .map(|i| i.iter().filter_map(|x| x.ip.clone()).collect())
        .unwrap_or_default()
}

/// Finding 1 of issue 25: the agents' account may patch a Service's status only to change the
/// `announcer.dev/Announced` condition. node-a's own token, trying to point another Service at
/// the gateway's address (the hijack the red-team read reproduced), is refused.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_agent_of_node_a_cannot_change_a_service_s_addresses() {
    use k8s_openapi::api::core::v1::Service;
    let cp = applied("status-ingress", &["node-a"]).await;
    service_with_address(&cp, "victim", "10.0.77.1").await;
    let a = agent_client(&cp, "node-a").await;
    let services: Api<Service> = Api::namespaced(a, "apps");
    service_status_policy_in_force(&services).await;
    for (what, patch) in [
        (
            "replace the ingress",
            json!({"status": {"loadBalancer": {"ingress": [{"ip": "10.78.0.254", "ipMode": "VIP"}]}}}),
        ),
        (
            "add an address",
            json!({"status": {"loadBalancer": {"ingress": [
                {"ip": "10.0.77.1", "ipMode": "VIP"}, {"ip": "10.78.0.254", "ipMode": "VIP"}]}}}),
        ),
        (
            "clear the ingress",
            json!({"status": {"loadBalancer": {"ingress": null}}}),
        ),
        (
            "add another condition",
            json!({"status": {"conditions": [{"type": "Ready", "status": "True", "reason": "Forged",
                "message": "", "lastTransitionTime": "2026-01-01T00:00:00Z"}]}}),
        ),
    ] {
        status_patch_refused(&services, what, &patch, "announcer.dev/Announced").await;
    }
    let now = Api::<Service>::namespaced(cp.client(), "apps")
        .get("victim")
        .await
        .expect("get");
    assert_eq!(ingress_of(&now), ["10.0.77.1"], "the address is unchanged");
}

/// A write to services/status also carries the Service's metadata, which the API server keeps
/// (kubernetes/kubernetes#92022): the agents' account must not relabel a Service (moving it in
/// or out of a selector, another announcer's class annotations) or add or drop a finalizer
/// through it.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_agent_of_node_a_cannot_change_a_service_s_metadata_through_its_status() {
    use k8s_openapi::api::core::v1::Service;
    let cp = applied("status-metadata", &["node-a"]).await;
    service_with_address(&cp, "victim", "10.0.77.3").await;
    let a = agent_client(&cp, "node-a").await;
    let services: Api<Service> = Api::namespaced(a, "apps");
    service_status_policy_in_force(&services).await;
    for (what, patch) in [
        (
            "add a label",
            json!({"metadata": {"labels": {"l2": "off"}}}),
        ),
        (
            "add an annotation",
            json!({"metadata": {"annotations": {"metallb.io/address-pool": "x"}}}),
        ),
        (
            "add a finalizer",
            json!({"metadata": {"finalizers": ["example.com/hold"]}}),
        ),
    ] {
        status_patch_refused(&services, what, &patch, "metadata").await;
    }
}

/// Waits until `announcer-agent-service-status` is in force for `services` (the agent's
/// client): kube-apiserver loads each new policy a moment after it is created, one by one, and
/// `applied` waits only for the Lease policy. Probes with a server-side dry run of a status
/// patch the policy denies (another condition).
async fn service_status_policy_in_force(services: &Api<k8s_openapi::api::core::v1::Service>) {
    use kube::api::{Patch, PatchParams};
    let probe = json!({"status": {"conditions": [{"type": "PolicyProbe", "status": "True",
        "reason": "Probe", "message": "", "lastTransitionTime": "2026-01-01T00:00:00Z"}]}});
    let end = std::time::Instant::now() + Duration::from_secs(60);
    loop {
        let r = services
            .patch_status(
                "victim",
                &PatchParams::default().dry_run(),
                &Patch::Merge(&probe),
            )
            .await;
        if matches!(&r, Err(kube::Error::Api(e)) if e.code == 403) {
            return;
        }
        assert!(
            std::time::Instant::now() < end,
            "the Service status policy is not in force after 60 s: {r:?}"
        );
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
}

/// Patching apps/victim's status with `patch` (`what` it tries) is refused with 403 by the
/// admission policy, whose message says `says`.
async fn status_patch_refused(
    services: &Api<k8s_openapi::api::core::v1::Service>,
    what: &str,
    patch: &serde_json::Value,
    says: &str,
) {
    use kube::api::{Patch, PatchParams};
    let r = services
        .patch_status("victim", &PatchParams::default(), &Patch::Merge(patch))
        .await;
    match r {
        Err(kube::Error::Api(e)) => {
            assert_eq!(e.code, 403, "{what}: refused as Forbidden: {e:?}");
            assert!(
                e.message.contains(says),
                "{what}: denied by the policy, not something else: {}",
                e.message
            );
        }
        Ok(s) => panic!(
            "the agent of node-a could {what} of apps/victim (ingress now {:?}, metadata {:?})",
            ingress_of(&s),
            s.metadata
        ),
        Err(e) => panic!("{what}: {e}"),
    }
}

/// The residual of finding 1 (docs/safety.md): CEL cannot tie an entry of the Announced
/// condition to the node that writes it, so a compromised node can forge that condition's
/// text. That is all it can do: the addresses stay as they were.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_forged_announced_condition_goes_through_but_changes_no_address() {
    use k8s_openapi::api::core::v1::Service;
    use kube::api::{Patch, PatchParams};
    let cp = applied("status-forged", &["node-a"]).await;
    service_with_address(&cp, "victim", "10.0.77.2").await;
    let a = agent_client(&cp, "node-a").await;
    let services: Api<Service> = Api::namespaced(a, "apps");
    service_status_policy_in_force(&services).await;
    let forged = json!({"status": {"conditions": [{
        "type": "announcer.dev/Announced", "status": "True", "reason": "Announced",
        "message": "10.0.77.2 by node-z on eth0",
        "lastTransitionTime": "2026-01-01T00:00:00Z"}]}});
    let s = services
        .patch_status("victim", &PatchParams::default(), &Patch::Merge(&forged))
        .await
        .expect("the Announced condition is the agents' to write");
    let cond = s
        .status
        .as_ref()
        .and_then(|st| st.conditions.as_ref())
        .and_then(|c| c.iter().find(|c| c.type_ == "announcer.dev/Announced"))
        .expect("the forged condition is there");
    assert_eq!(cond.message, "10.0.77.2 by node-z on eth0");
    assert_eq!(ingress_of(&s), ["10.0.77.2"], "the address is unchanged");
}

/// A client as allocator replica `pod` of the Deployment: a token of the `announcer-allocator`
/// ServiceAccount bound to that Pod. Returns the client and the Pod's name.
async fn allocator_client(cp: &KubeControlPlane) -> (kube::Client, String) {
    let ids = announcer_tests::env::kube::write_allocator_kubeconfigs(
        cp.client(),
        cp.ca_cert(),
        &cp.url(),
        cp.dir(),
        1,
    )
    .await
    .unwrap_or_else(|e| panic!("{e}\n{}", cp.log_tails()));
    let path = cp.dir().join(format!("kubeconfig.{}", ids[0]));
    let client = announcer_tests::env::kube::client_for(&path)
        .await
        .unwrap_or_else(|e| panic!("{e}"));
    (client, ids[0].clone())
}

/// The allocator's account holds only the `announcer-allocator` Lease, in its own Pod's name:
/// never a node Lease, never that Lease for another holder.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_allocator_writes_only_its_own_lease_in_its_own_name() {
    let cp = applied("allocator-lease", &["node-a"]).await;
    let (alloc, pod) = allocator_client(&cp).await;
    let leases: Api<Lease> = Api::namespaced(alloc, NAMESPACE);
    let allocator_lease = |holder: &str| -> Lease {
        serde_json::from_value(json!({
            "apiVersion": "coordination.k8s.io/v1", "kind": "Lease",
            "metadata": {"name": "announcer-allocator"},
            "spec": {"holderIdentity": holder, "leaseDurationSeconds": 15},
        }))
        .expect("a valid Lease")
    };
    let err = leases
        .create(&PostParams::default(), &node_lease("node-a"))
        .await
        .expect_err("the allocator must not create a node Lease");
    assert!(
        err.to_string()
            .contains("writes only the announcer-allocator Lease"),
        "denied by the policy: {err}"
    );
    let err = leases
        .create(&PostParams::default(), &allocator_lease("someone-else"))
        .await
        .expect_err("the allocator must not hold its Lease in another name");
    assert!(
        err.to_string().contains("only for itself"),
        "denied by the policy: {err}"
    );
    leases
        .create(&PostParams::default(), &allocator_lease(&pod))
        .await
        .expect("the allocator takes its Lease in its own Pod's name");
    update(&leases, "announcer-allocator", |l| {
        l.spec.get_or_insert_default().holder_identity = None;
    })
    .await
    .expect("and releases it");
    // A node Lease the agent made: the allocator can neither read nor write it (RBAC names
    // only its own Lease).
    let a = agent_client(&cp, "node-a").await;
    Api::<Lease>::namespaced(a, NAMESPACE)
        .create(&PostParams::default(), &node_lease("node-a"))
        .await
        .expect("the agent of node-a creates its own Lease");
    let err = update(&leases, "announcer-node-node-a", |l| {
        l.spec.get_or_insert_default().holder_identity = Some(pod.clone());
    })
    .await
    .expect_err("the allocator must not touch a node Lease");
    assert!(
        matches!(&err, kube::Error::Api(e) if e.code == 403),
        "forbidden: {err}"
    );
}

/// Kubernetes without the admission policy is unsupported: an agent that finds it absent (its
/// probe, a dry run the policy must deny, is accepted) refuses to start, saying why, with
/// EX_CONFIG; it never runs with credentials nothing confines.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_agent_refuses_to_start_without_the_admission_policy() {
    use announcer_tests::env::{ApiKind, cluster::Cluster};
    let mut c = Cluster::start_on(ApiKind::Kube, "no-policy").await;
    c.add_node("node-a", &[], true).await;
    {
        let cp = c.kube().expect("real");
        cp.kubectl(&[
            "delete",
            "validatingadmissionpolicybinding",
            "announcer-agent-leases",
        ])
        .unwrap_or_else(|e| panic!("{e}"));
        // Until kube-apiserver has unloaded it.
        let probe = cp.dir().join("probe.yaml");
        std::fs::write(
            &probe,
            format!(
                "apiVersion: coordination.k8s.io/v1\nkind: Lease\nmetadata:\n  name: x-probe\n  \
                 namespace: {NAMESPACE}\n"
            ),
        )
        .expect("write");
        let as_agent = format!("--as={}", announcer_tests::env::kube::agent_user());
        let end = std::time::Instant::now() + Duration::from_secs(60);
        while cp
            .kubectl(&[
                "create",
                "--dry-run=server",
                &as_agent,
                "--as-group=system:serviceaccounts",
                "-f",
                probe.to_str().expect("utf-8"),
            ])
            .is_err()
        {
            assert!(std::time::Instant::now() < end, "the policy stays in force");
            tokio::time::sleep(Duration::from_millis(500)).await;
        }
    }
    c.start_agent("node-a", &[]);
    let code = c.wait_exit("node-a", Duration::from_secs(60));
    let log = std::fs::read_to_string(&c.agent("node-a").expect("started").log).unwrap_or_default();
    assert_eq!(
        code,
        Some(78),
        "the agent refuses to start (EX_CONFIG) without the policy\n{log}"
    );
    assert!(
        log.contains("the admission policy announcer-agent-leases is not in force"),
        "and says why: {log}"
    );
}

/// Finding 9 of issue 25: the allocator's Lease is not the agents' any more (before, any agent
/// could take it for itself and, holding it, write every Service's addresses).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn no_agent_can_take_the_allocator_lease() {
    let cp = applied("agent-allocator-lease", &["node-a"]).await;
    let a = agent_client(&cp, "node-a").await;
    let lease: Lease = serde_json::from_value(json!({
        "apiVersion": "coordination.k8s.io/v1", "kind": "Lease",
        "metadata": {"name": "announcer-allocator"},
        "spec": {"holderIdentity": "node-a", "leaseDurationSeconds": 15},
    }))
    .expect("a valid Lease");
    let err = Api::<Lease>::namespaced(a, NAMESPACE)
        .create(&PostParams::default(), &lease)
        .await
        .expect_err("the agent of node-a must not take the allocator's Lease");
    assert!(
        err.to_string()
            .contains("writes only announcer-node-* and announcer-svc-*"),
        "denied by the policy: {err}"
    );
}

/// Finding 9: a node name over 238 characters gets a hashed Lease name, which CEL cannot
/// recompute, so the policy could only check the holder and such a node could squat another
/// node's Lease name. Such nodes are refused outright.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_agent_of_a_node_named_over_238_characters_writes_no_lease() {
    let long = format!("node-{}", "x".repeat(240));
    let cp = applied("long-node-name", &[long.as_str()]).await;
    let a = agent_client(&cp, &long).await;
    // The hashed name such an agent would use (any name the policy cannot tie to the node).
    let lease: Lease = serde_json::from_value(json!({
        "apiVersion": "coordination.k8s.io/v1", "kind": "Lease",
        "metadata": {"name": "announcer-node-node-squatted-0123456789"},
        "spec": {"holderIdentity": long, "leaseDurationSeconds": 10},
    }))
    .expect("a valid Lease");
    let err = Api::<Lease>::namespaced(a, NAMESPACE)
        .create(&PostParams::default(), &lease)
        .await
        .expect_err("an agent on a node named over 238 characters must not write a Lease");
    assert!(
        err.to_string().contains("longer than 238 characters"),
        "denied by the policy: {err}"
    );
}
