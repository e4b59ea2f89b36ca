//! The withdrawal controller's behaviour, end to end through the API: each test builds a
//! three-node world (node-a, node-b, node-c; node-c holds the Pods), starts one withdrawer,
//! and writes the agents' reports as the agents would, then reads the Pods.
//!
//! Every negative test ends with a positive control in the same world (the same controller
//! then withdraws on evidence that suffices), so a controller that does nothing cannot pass it.

use std::time::{Duration, Instant};

use announcer::{
    state::announced::CONDITION_TYPE,
    withdraw::UNREACHABLE_ANNOTATION,
    withdrawer::{
        act::REASON_CAPPED,
        pod::{REASON, ready},
        select::OPT_IN_LABEL,
        slots::{LEASE_NAME, WITHDRAWN_ANNOTATION},
    },
};
use announcer_tests::{
    apiserver::{ApiServer, ApiServerHandle, Fault, FaultAction, Scope, Verb},
    env::{NAMESPACE, process::Guarded, withdrawer_cmd::WithdrawerCommand},
};
use k8s_openapi::{
    api::{
        coordination::v1::Lease,
        core::v1::{Namespace, Node, Pod, Service},
        discovery::v1::EndpointSlice,
    },
    jiff::Timestamp,
};
use kube::{
    Api, Client,
    api::{Patch, PatchParams, PostParams},
};
use serde_json::{Value, json};

const NODES: [&str; 3] = ["node-a", "node-b", "node-c"];
/// The node that goes away.
const GONE: &str = "node-c";
/// How long a withdrawal may take (watch delivery and a few writes; generous for CI).
const WITHDRAWN_WITHIN: Duration = Duration::from_secs(5);
/// How long a test watches for a write that must not come.
const QUIET_FOR: Duration = Duration::from_secs(3);

struct World {
    server: ApiServerHandle,
    admin: Client,
    _withdrawer: Guarded,
    _dir: tempdir::Dir,
}

mod tempdir {
    //! A scratch directory, removed on drop.
    use std::path::PathBuf;

    pub struct Dir(pub PathBuf);

    impl Dir {
        pub fn new(tag: &str) -> Dir {
            let p = std::env::temp_dir().join(format!(
                "annwithdraw-{}-{tag}-{}",
                std::process::id(),
                super::next_id()
            ));
            let _ = std::fs::remove_dir_all(&p);
            std::fs::create_dir_all(&p).expect("scratch dir");
            Dir(p)
        }
    }

    impl Drop for Dir {
        fn drop(&mut self) {
            if !std::thread::panicking() {
                let _ = std::fs::remove_dir_all(&self.0);
            }
        }
    }
}

fn next_id() -> u32 {
    static N: std::sync::atomic::AtomicU32 = std::sync::atomic::AtomicU32::new(0);
    N.fetch_add(1, std::sync::atomic::Ordering::Relaxed)
}

fn obj<T: serde::de::DeserializeOwned>(v: Value) -> T {
    serde_json::from_value(v).expect("a valid object")
}

fn now() -> String {
    Timestamp::now().to_string()
}

async fn create<T>(api: &Api<T>, v: Value)
where
    T: kube::Resource + Clone + std::fmt::Debug + serde::Serialize + serde::de::DeserializeOwned,
{
    api.create(&PostParams::default(), &obj::<T>(v))
        .await
        .expect("create");
}

impl World {
    /// The three nodes (Ready, kubelet and agent Leases renewed now, no reports), namespaces
    /// `shop` (opted in) and `bank` (not), in each an announced LoadBalancer Service `web` with
    /// Pod `web-1` on node-c behind it; then a withdrawer, given a moment to list it all.
    async fn start(tag: &str) -> World {
        World::start_with(tag, &[], None).await
    }

    /// [`World::start`], the withdrawer run with `extra` arguments, and the shared cap's Lease
    /// holding `slots` (its annotation's value) before it starts.
    async fn start_with(tag: &str, extra: &[&str], slots: Option<&str>) -> World {
        let server = ApiServer::builder().start().await.expect("API server");
        let admin = server.client("admin").await.expect("admin client");
        let nodes: Api<Node> = Api::all(admin.clone());
        let kubelet: Api<Lease> = Api::namespaced(admin.clone(), "kube-node-lease");
        let agents: Api<Lease> = Api::namespaced(admin.clone(), NAMESPACE);
        for n in NODES {
            create(&nodes, json!({"metadata": {"name": n}})).await;
            nodes
                .patch_status(
                    n,
                    &PatchParams::default(),
                    &Patch::Merge(json!({"status": {"conditions": [
                        {"type": "Ready", "status": "True", "reason": "KubeletReady"}]}})),
                )
                .await
                .expect("node ready");
            create(
                &kubelet,
                json!({"metadata": {"name": n},
                       "spec": {"holderIdentity": n, "leaseDurationSeconds": 40, "renewTime": now()}}),
            )
            .await;
            create(
                &agents,
                json!({"metadata": {"name": format!("announcer-node-{n}"),
                         "labels": {"app.kubernetes.io/name": "announcer", "announcer.dev/lease": "node"}},
                       "spec": {"holderIdentity": n, "leaseDurationSeconds": 10, "renewTime": now()}}),
            )
            .await;
        }
        for (ns, opted_in) in [("shop", true), ("bank", false)] {
            let labels = if opted_in {
                json!({OPT_IN_LABEL: "true"})
            } else {
                json!({})
            };
            create(
                &Api::<Namespace>::all(admin.clone()),
                json!({"metadata": {"name": ns, "labels": labels}}),
            )
            .await;
            announced_service(&admin, ns).await;
            ready_pod(&admin, ns).await;
        }
        if let Some(value) = slots {
            create(
                &agents,
                json!({"metadata": {"name": LEASE_NAME,
                         "annotations": {WITHDRAWN_ANNOTATION: value}}, "spec": {}}),
            )
            .await;
        }
        let dir = tempdir::Dir::new(tag);
        let kubeconfig = dir.0.join("kubeconfig");
        server
            .write_kubeconfig(&kubeconfig, "withdrawer-0")
            .expect("kubeconfig");
        let log = dir.0.join("withdrawer.log");
        let withdrawer = WithdrawerCommand::new("withdrawer-0", &kubeconfig)
            .extra(extra)
            .spawn(None, &log);
        let w = World {
            server,
            admin,
            _withdrawer: withdrawer,
            _dir: dir,
        };
        w.wait_listed(&log).await;
        w
    }

    /// Waits until the withdrawer has listed and watches everything it watches.
    async fn wait_listed(&self, log: &std::path::Path) {
        let end = Instant::now() + Duration::from_secs(10);
        loop {
            let text = std::fs::read_to_string(log).unwrap_or_default();
            // Six watches (agent and kubelet Leases, Nodes, EndpointSlices, Services,
            // Namespaces), each after its list.
            let watching =
                self.server
                    .counts()
                    .count(Some("withdrawer-0"), Some(Verb::Watch), None);
            if text.contains("withdrawal controller starting") && watching >= 6 {
                // One more moment for the first lists to be reflected.
                tokio::time::sleep(Duration::from_millis(500)).await;
                return;
            }
            assert!(
                Instant::now() < end,
                "the withdrawer did not start within 10 s:\n{text}"
            );
            tokio::time::sleep(Duration::from_millis(100)).await;
        }
    }

    /// `reporter`'s agent renews its Lease, listing `unreachable`.
    async fn report(&self, reporter: &str, unreachable: &[&str]) {
        let agents: Api<Lease> = Api::namespaced(self.admin.clone(), NAMESPACE);
        agents
            .patch(
                &format!("announcer-node-{reporter}"),
                &PatchParams::default(),
                &Patch::Merge(json!({
                    "metadata": {"annotations": {UNREACHABLE_ANNOTATION: unreachable.join(" ")}},
                    "spec": {"renewTime": now()},
                })),
            )
            .await
            .expect("the agent's report");
    }

    /// `node`'s kubelet renews its Lease.
    async fn kubelet_renews(&self, node: &str) {
        Api::<Lease>::namespaced(self.admin.clone(), "kube-node-lease")
            .patch(
                node,
                &PatchParams::default(),
                &Patch::Merge(json!({"spec": {"renewTime": now()}})),
            )
            .await
            .expect("the kubelet's renewal");
    }

    async fn pod(&self, ns: &str) -> Pod {
        Api::<Pod>::namespaced(self.admin.clone(), ns)
            .get("web-1")
            .await
            .expect("the Pod")
    }

    /// Waits until `ns/web-1` is withdrawn: Ready False with our reason, the node named in
    /// the message, every other condition as it was.
    async fn assert_withdrawn(&self, ns: &str) {
        let end = Instant::now() + WITHDRAWN_WITHIN;
        loop {
            let pod = self.pod(ns).await;
            if ready(&pod) == Some(false) {
                let conditions = pod.status.expect("status").conditions.expect("conditions");
                let r = conditions
                    .iter()
                    .find(|c| c.type_ == "Ready")
                    .expect("Ready");
                assert_eq!(r.reason.as_deref(), Some(REASON));
                let message = r.message.as_deref().unwrap_or("");
                assert!(
                    message.contains(GONE)
                        && message.contains("node-a")
                        && message.contains("node-b"),
                    "the message names the node and the reporters: {message}"
                );
                let others: Vec<(&str, &str)> = conditions
                    .iter()
                    .filter(|c| c.type_ != "Ready")
                    .map(|c| (c.type_.as_str(), c.status.as_str()))
                    .collect();
                assert_eq!(
                    others,
                    [("PodScheduled", "True"), ("ContainersReady", "True")],
                    "only Ready changed"
                );
                return;
            }
            assert!(
                Instant::now() < end,
                "{ns}/web-1 was not withdrawn within {WITHDRAWN_WITHIN:?}"
            );
            tokio::time::sleep(Duration::from_millis(100)).await;
        }
    }

    /// `ns/web-1` stays ready for [`QUIET_FOR`].
    async fn assert_stays_ready(&self, ns: &str, why: &str) {
        let end = Instant::now() + QUIET_FOR;
        while Instant::now() < end {
            assert_eq!(ready(&self.pod(ns).await), Some(true), "{ns}/web-1: {why}");
            tokio::time::sleep(Duration::from_millis(200)).await;
        }
    }
}

/// `ns/web`: type LoadBalancer, with the agents' Announced condition.
async fn announced_service(admin: &Client, ns: &str) {
    let services: Api<Service> = Api::namespaced(admin.clone(), ns);
    create(
        &services,
        json!({"metadata": {"name": "web"},
               "spec": {"type": "LoadBalancer", "ports": [{"port": 80}]}}),
    )
    .await;
    services
        .patch_status(
            "web",
            &PatchParams::default(),
            &Patch::Merge(json!({"status": {
                "loadBalancer": {"ingress": [{"ip": "10.0.0.50"}]},
                "conditions": [{"type": CONDITION_TYPE, "status": "True", "reason": "Announced",
                    "message": "10.0.0.50 by node-a on eth0", "lastTransitionTime": now()}],
            }})),
        )
        .await
        .expect("announced");
}

/// `ns/web-1` on node-c, running and ready, and the EndpointSlice of `ns/web` naming it.
async fn ready_pod(admin: &Client, ns: &str) {
    let pods: Api<Pod> = Api::namespaced(admin.clone(), ns);
    create(
        &pods,
        json!({"metadata": {"name": "web-1", "labels": {"app": "web"}},
               "spec": {"nodeName": GONE, "containers": [{"name": "web", "image": "web"}]}}),
    )
    .await;
    pods.patch_status(
        "web-1",
        &PatchParams::default(),
        &Patch::Merge(json!({"status": {"phase": "Running", "podIP": "10.244.2.5",
        "conditions": [
            {"type": "PodScheduled", "status": "True"},
            {"type": "ContainersReady", "status": "True"},
            {"type": "Ready", "status": "True"},
        ]}})),
    )
    .await
    .expect("pod ready");
    create(
        &Api::<EndpointSlice>::namespaced(admin.clone(), ns),
        json!({"metadata": {"name": "web-abcde", "labels": {"kubernetes.io/service-name": "web"}},
               "addressType": "IPv4",
               "endpoints": [{"addresses": ["10.244.2.5"], "nodeName": GONE,
                   "conditions": {"ready": true},
                   "targetRef": {"kind": "Pod", "name": "web-1", "namespace": ns}}],
               "ports": [{"port": 80}]}),
    )
    .await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn two_reporters_listing_a_silent_node_withdraw_its_pod_in_an_opted_in_namespace() {
    let w = World::start("quorum").await;
    w.report("node-a", &[GONE]).await;
    w.report("node-b", &[GONE]).await;
    w.assert_withdrawn("shop").await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn one_reporter_withdraws_nothing() {
    let w = World::start("one").await;
    w.report("node-a", &[GONE]).await;
    w.assert_stays_ready("shop", "one report is no quorum")
        .await;
    // The control: a second reporter makes the quorum.
    w.report("node-b", &[GONE]).await;
    w.assert_withdrawn("shop").await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_pod_in_a_namespace_without_the_label_is_left_ready() {
    let w = World::start("unlabelled").await;
    w.report("node-a", &[GONE]).await;
    w.report("node-b", &[GONE]).await;
    // The control first: the same withdrawal reaches the opted-in namespace.
    w.assert_withdrawn("shop").await;
    w.assert_stays_ready("bank", "bank has not opted in").await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_kubelet_renewal_after_the_first_report_voids_it() {
    let w = World::start("kubelet-life").await;
    w.report("node-a", &[GONE]).await;
    // Give the watches time to deliver each step in order.
    tokio::time::sleep(Duration::from_millis(500)).await;
    w.kubelet_renews(GONE).await;
    tokio::time::sleep(Duration::from_millis(500)).await;
    w.report("node-b", &[GONE]).await;
    w.assert_stays_ready(
        "shop",
        "node-a's report began before node-c's kubelet renewed",
    )
    .await;
    // The control: node-a clears its report and lists node-c anew, after the renewal.
    w.report("node-a", &[]).await;
    tokio::time::sleep(Duration::from_millis(500)).await;
    w.report("node-a", &[GONE]).await;
    w.assert_withdrawn("shop").await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_node_beyond_the_shared_cap_is_left_to_kubernetes_with_a_warning_on_the_node() {
    // Another replica holds the only slot (for node-x, a moment ago).
    let held = format!("node-x={}", Timestamp::now());
    let w = World::start_with("capped", &["--max-withdrawn", "1"], Some(&held)).await;
    w.report("node-a", &[GONE]).await;
    w.report("node-b", &[GONE]).await;
    // The control: the controller decided, and said so on the Node.
    let events: Api<k8s_openapi::api::events::v1::Event> = Api::all(w.admin.clone());
    let end = Instant::now() + WITHDRAWN_WITHIN;
    loop {
        let list = events.list(&Default::default()).await.expect("events");
        let capped = list.items.iter().find(|e| {
            e.reason.as_deref() == Some(REASON_CAPPED)
                && e.regarding.as_ref().and_then(|r| r.name.as_deref()) == Some(GONE)
        });
        if let Some(e) = capped {
            assert_eq!(e.type_.as_deref(), Some("Warning"));
            assert!(
                e.note.as_deref().unwrap_or("").contains("node-x"),
                "the note names the node holding the slot: {:?}",
                e.note
            );
            break;
        }
        assert!(
            Instant::now() < end,
            "no {REASON_CAPPED} Event on {GONE} within {WITHDRAWN_WITHIN:?}"
        );
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    w.assert_stays_ready("shop", "the only slot is node-x's")
        .await;
    let slots = Api::<Lease>::namespaced(w.admin.clone(), NAMESPACE)
        .get(LEASE_NAME)
        .await
        .expect("the cap Lease");
    assert_eq!(
        slots.metadata.annotations.expect("annotations")[WITHDRAWN_ANNOTATION],
        held,
        "the cap is unchanged"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_slot_claim_the_api_server_fails_is_tried_again_and_the_pod_withdrawn() {
    let w = World::start("withdrawer-claim-retry").await;
    // The cap Lease cannot be read: every claim fails with a server error until it is lifted.
    w.server.add_fault(Fault {
        scope: Scope {
            client: Some("withdrawer-0".into()),
            verb: Some(Verb::Get),
            resource: Some("leases".into()),
        },
        action: FaultAction::Error {
            code: 500,
            probability: 1.0,
        },
    });
    w.report("node-a", &[GONE]).await;
    w.report("node-b", &[GONE]).await;
    let log = w._dir.0.join("withdrawer.log");
    let end = Instant::now() + WITHDRAWN_WITHIN;
    while !std::fs::read_to_string(&log)
        .unwrap_or_default()
        .contains("claiming a slot failed; trying again")
    {
        assert!(
            Instant::now() < end,
            "no retry logged:\n{}",
            std::fs::read_to_string(&log).unwrap_or_default()
        );
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    w.server.clear_faults();
    w.assert_withdrawn("shop").await;
}
