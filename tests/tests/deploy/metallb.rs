//! The migration from MetalLB (`docs/migrate-from-metallb.md`), step by step, on a real
//! kube-apiserver with MetalLB's real CRDs (`cargo xtask setup` copies them from MetalLB's Go
//! module; nothing of MetalLB runs: where MetalLB's controller would write a Service's status,
//! the test does).
//!
//! * `announcer migrate metallb` reads real `IPAddressPool`s and `L2Advertisement`s from the
//!   API, from a file and from stdin (`kubectl get -o yaml`), prints the same pools each way,
//!   and what it prints is accepted by our CRD (`kubectl apply`, strict field validation).
//! * Side by side: agents with `--class-only` leave a class-less Service that MetalLB gave an
//!   address alone (neither announce it nor touch its status).
//! * Moving a Service: the class cannot be added to a LoadBalancer Service (the API refuses);
//!   through `type: ClusterIP` and back with the class and `announcer.dev/load-balancer-ips`,
//!   it keeps its address and is announced. This needs the allocator (it writes the status):
//!   the allocator Deployment's replicas run beside the agents.
//! * Rolling back: the same switch without the class hands the Service back to MetalLB (no
//!   agent announces it any more), and the migrated pools delete by their label.
//!
//! The side-by-side and roll-back cases need `--class-only` wired into the agent's Service
//! selection.

use std::{
    io::Write as _,
    process::{Command, Output, Stdio},
    time::Duration,
};

use announcer_tests::{
    cli::announcer_bin,
    env::{
        ApiKind,
        cluster::Cluster,
        kube::{
            KubeControlPlane,
            metallb::{self, METALLB_NAMESPACE, apply_yaml},
        },
    },
};
use k8s_openapi::api::core::v1::Service;
use kube::Api;
use serde_json::Value;

/// MetalLB's layer-2 configuration as a user writes it: a pool announced by an advertisement
/// (with a namespace restriction, which converts exactly), and a pool no advertisement selects
/// (converted with `autoAssign: false`, and warned about).
const METALLB_OBJECTS: &str = "
apiVersion: metallb.io/v1beta1
kind: IPAddressPool
metadata:
  name: l2-pool
  namespace: metallb-system
  labels: {announce: l2}
spec:
  addresses: [10.0.80.0/28, 10.0.81.10 - 10.0.81.20]
  avoidBuggyIPs: true
  serviceAllocation:
    namespaces: [apps]
---
apiVersion: metallb.io/v1beta1
kind: IPAddressPool
metadata:
  name: reserved
  namespace: metallb-system
spec:
  addresses: [10.0.82.0/29]
---
apiVersion: metallb.io/v1beta1
kind: L2Advertisement
metadata:
  name: l2
  namespace: metallb-system
spec:
  ipAddressPoolSelectors:
    - matchLabels: {announce: l2}
";

/// The address MetalLB gave `web` (in `l2-pool`).
const WEB_IP: &str = "10.0.80.5";
/// The address of a Service already of our class, a positive control for the agents.
const OURS_IP: &str = "10.0.80.9";
const NS: &str = "apps";
const NODES: [&str; 2] = ["node-a", "node-b"];
/// Generous: two shared cores, a control plane and agents starting.
const SETTLE: Duration = Duration::from_secs(90);
/// How long "nothing announces it" must hold.
const HOLD: Duration = Duration::from_secs(10);

/// `announcer migrate metallb ARGS`, with `stdin` fed if given.
fn migrate(args: &[&str], stdin: Option<&str>) -> Output {
    let mut child = Command::new(announcer_bin())
        .args(["migrate", "metallb"])
        .args(args)
        .stdin(if stdin.is_some() {
            Stdio::piped()
        } else {
            Stdio::null()
        })
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .expect("run announcer migrate metallb");
    if let Some(text) = stdin {
        child
            .stdin
            .take()
            .expect("stdin")
            .write_all(text.as_bytes())
            .expect("write stdin");
    }
    child.wait_with_output().expect("announcer migrate metallb")
}

fn text(b: &[u8]) -> String {
    String::from_utf8_lossy(b).into_owned()
}

/// `migrate --from-cluster` against `cp`, asserted to succeed; (stdout, stderr).
fn migrate_from(cp: &KubeControlPlane, extra: &[&str]) -> (String, String) {
    let kubeconfig = cp.kubeconfig().to_str().expect("utf-8").to_owned();
    let mut args = vec!["--from-cluster", "--kubeconfig", &kubeconfig];
    args.extend(extra);
    let out = migrate(&args, None);
    assert!(
        out.status.success(),
        "migrate {args:?}: {}\n{}",
        out.status,
        text(&out.stderr)
    );
    (text(&out.stdout), text(&out.stderr))
}

/// MetalLB's CRDs and [`METALLB_OBJECTS`] on `cp` (accepted by MetalLB's own schema).
async fn with_metallb(cp: &KubeControlPlane) {
    metallb::install(cp)
        .await
        .unwrap_or_else(|e| panic!("MetalLB's CRDs: {e}"));
    apply_yaml(cp, "metallb-objects.yaml", METALLB_OBJECTS)
        .unwrap_or_else(|e| panic!("MetalLB's schema refuses the fixture: {e}"));
}

/// The AddressPools on the cluster, by name.
fn address_pools(cp: &KubeControlPlane) -> serde_json::Map<String, Value> {
    let out = cp
        .kubectl(&["get", "addresspools", "-o", "json"])
        .unwrap_or_else(|e| panic!("{e}"));
    let list: Value = serde_json::from_str(&out).expect("JSON");
    list["items"]
        .as_array()
        .expect("items")
        .iter()
        .map(|p| {
            (
                p["metadata"]["name"].as_str().expect("name").to_owned(),
                p.clone(),
            )
        })
        .collect()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn migrate_from_cluster_prints_pools_that_our_crd_accepts() {
    let cp = KubeControlPlane::start_applied("metallb-migrate").await;
    let kubeconfig = cp.kubeconfig().to_str().expect("utf-8").to_owned();

    // Without MetalLB there is nothing to read: an error, not an empty success.
    let out = migrate(&["--from-cluster", "--kubeconfig", &kubeconfig], None);
    assert!(!out.status.success(), "no MetalLB CRDs, yet exit 0");
    assert!(out.stdout.is_empty());

    with_metallb(&cp).await;
    let (yaml, warnings) = migrate_from(&cp, &[]);
    // Warnings do not fail the command; the unadvertised pool is one.
    assert!(
        warnings.contains("IPAddressPool metallb-system/reserved: no L2Advertisement selects it"),
        "{warnings}"
    );
    let applied = apply_yaml(&cp, "migrated.yaml", &yaml)
        .unwrap_or_else(|e| panic!("our CRD refuses the output: {e}\n{yaml}"));
    assert!(
        applied.contains("addresspool.announcer.dev/l2-pool created"),
        "{applied}"
    );

    let pools = address_pools(&cp);
    assert_eq!(pools.len(), 2, "{pools:?}");
    let l2 = &pools["l2-pool"]["spec"];
    assert_eq!(
        l2["addresses"],
        serde_json::json!(["10.0.80.0/28", "10.0.81.10-10.0.81.20"])
    );
    assert_eq!(l2["autoAssign"], true);
    // Stored: the CRD's spelling (a misspelt field would have been refused or pruned).
    assert_eq!(l2["avoidBuggyIPs"], true);
    assert_eq!(
        l2["namespaceSelector"]["matchExpressions"][0]["values"],
        serde_json::json!(["apps"])
    );
    let reserved = &pools["reserved"];
    assert_eq!(reserved["spec"]["autoAssign"], false);
    assert_eq!(
        reserved["metadata"]["labels"]["announcer.dev/migrated-from"],
        "metallb"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn migrate_prints_the_same_pools_from_the_api_a_file_and_stdin() {
    let cp = KubeControlPlane::start_applied("metallb-sources").await;
    with_metallb(&cp).await;
    let (from_api, _) = migrate_from(&cp, &["--auto-assign=false"]);

    let file = cp.dir().join("metallb-objects.yaml");
    let out = migrate(
        &["-f", file.to_str().expect("utf-8"), "--auto-assign=false"],
        None,
    );
    assert!(out.status.success(), "{}", text(&out.stderr));
    assert_eq!(
        text(&out.stdout),
        from_api,
        "-f FILE and --from-cluster differ"
    );

    let listed = cp
        .kubectl(&[
            "get",
            "ipaddresspools.metallb.io,l2advertisements.metallb.io",
            "-n",
            METALLB_NAMESPACE,
            "-o",
            "yaml",
        ])
        .unwrap_or_else(|e| panic!("{e}"));
    let out = migrate(&["-f", "-", "--auto-assign=false"], Some(&listed));
    assert!(out.status.success(), "{}", text(&out.stderr));
    assert_eq!(
        text(&out.stdout),
        from_api,
        "kubectl get -o yaml | migrate -f - and --from-cluster differ"
    );
    assert!(!from_api.contains("autoAssign: true"), "{from_api}");
}

/// A cluster of [`NODES`] with MetalLB's CRDs and objects, the pools migrated as the docs say
/// (`--auto-assign=false`) and applied, and an agent with `--class-only` on every node.
async fn side_by_side(tag: &str) -> Cluster {
    let mut c = Cluster::start_on(ApiKind::Kube, tag).await;
    {
        let cp = c.kube().expect("a real control plane");
        with_metallb(cp).await;
        let (yaml, _) = migrate_from(cp, &["--auto-assign=false"]);
        apply_yaml(cp, "migrated.yaml", &yaml).unwrap_or_else(|e| panic!("{e}"));
    }
    for n in NODES {
        c.add_node(n, &[], true).await;
    }
    for n in NODES {
        c.start_agent(n, &["--class-only"]);
    }
    // The allocator Deployment, class-only like the agents (MetalLB serves class-less ones).
    c.start_allocators(2, &["--class-only"]);
    c
}

fn kubectl(c: &Cluster, args: &[&str]) -> Result<String, String> {
    c.kube()
        .expect("a real control plane")
        .kubectl(args)
        .map_err(|e| e.to_string())
}

/// `kubectl patch service NAME -n apps --type merge -p PATCH`.
fn patch(c: &Cluster, name: &str, patch: &str) -> Result<String, String> {
    kubectl(
        c,
        &[
            "patch", "service", name, "-n", NS, "--type", "merge", "-p", patch,
        ],
    )
}

async fn service(c: &Cluster, name: &str) -> Service {
    let api: Api<Service> = Api::namespaced(c.kube().expect("real").client(), NS);
    api.get(name).await.expect("get service")
}

fn ingress(s: &Service) -> Vec<String> {
    s.status
        .as_ref()
        .and_then(|s| s.load_balancer.as_ref())
        .and_then(|lb| lb.ingress.as_ref())
        .map(|i| i.iter().filter_map(|i| i.ip.clone()).collect())
        .unwrap_or_default()
}

/// A class-less Service as MetalLB serves it: its IP requested with MetalLB's annotation and
/// written into its status, a ready endpoint on node-a.
async fn metallb_service(c: &Cluster, name: &str, ip: &str) {
    c.create_service(
        NS,
        name,
        &[ip],
        serde_json::json!({"externalTrafficPolicy": "Cluster"}),
    )
    .await;
    patch(
        c,
        name,
        &format!(r#"{{"metadata":{{"annotations":{{"metallb.io/loadBalancerIPs":"{ip}"}}}}}}"#),
    )
    .unwrap_or_else(|e| panic!("{e}"));
    c.set_endpoints(NS, name, &[("node-a", true)]).await;
}

/// A Service of our class with its IP requested from `l2-pool`, its status written as the
/// allocator writes it, a ready endpoint on node-a.
async fn our_service(c: &Cluster, name: &str, ip: &str) {
    c.create_service(
        NS,
        name,
        &[ip],
        serde_json::json!({"loadBalancerClass": "announcer.dev/l2"}),
    )
    .await;
    patch(
        c,
        name,
        &format!(
            r#"{{"metadata":{{"annotations":{{"announcer.dev/load-balancer-ips":"{ip}","announcer.dev/address-pool":"l2-pool"}}}}}}"#
        ),
    )
    .unwrap_or_else(|e| panic!("{e}"));
    c.set_endpoints(NS, name, &[("node-a", true)]).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn side_by_side_class_only_agents_leave_metallb_s_services_alone() {
    let c = side_by_side("metallb-side-by-side").await;
    metallb_service(&c, "web", WEB_IP).await;
    our_service(&c, "ours", OURS_IP).await;
    // The agents run and announce what is theirs...
    c.wait_for("the Service of our class announced", SETTLE, |c| {
        c.owners(OURS_IP).len() == 1
    })
    .await;
    // ...and not MetalLB's.
    c.hold("no agent announces MetalLB's Service", HOLD, |c| {
        c.owners(WEB_IP).is_empty()
    })
    .await;
    assert_eq!(
        ingress(&service(&c, "web").await),
        [WEB_IP],
        "MetalLB's status was touched"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_service_moved_with_the_class_keeps_its_ip() {
    let c = side_by_side("metallb-move").await;
    metallb_service(&c, "web", WEB_IP).await;
    c.wait_ready(SETTLE).await;

    // The class cannot be added to a LoadBalancer Service: the API refuses.
    let refused = patch(
        &c,
        "web",
        r#"{"spec":{"loadBalancerClass":"announcer.dev/l2"}}"#,
    )
    .expect_err("loadBalancerClass added to a LoadBalancer Service");
    assert!(refused.contains("may not change once set"), "{refused}");

    let cluster_ip = |s: &Service| s.spec.as_ref().and_then(|s| s.cluster_ip.clone());
    let before = cluster_ip(&service(&c, "web").await);

    // The move the docs give: to ClusterIP (MetalLB lets the address go: the test clears the
    // status as its controller would), then back with our class, asking for the same address.
    patch(&c, "web", r#"{"spec":{"type":"ClusterIP"}}"#).unwrap_or_else(|e| panic!("{e}"));
    c.set_ingress(NS, "web", &[]).await;
    patch(
        &c,
        "web",
        &format!(
            r#"{{"metadata":{{"annotations":{{"announcer.dev/load-balancer-ips":"{WEB_IP}","announcer.dev/address-pool":"l2-pool","metallb.io/loadBalancerIPs":null}}}},"spec":{{"type":"LoadBalancer","loadBalancerClass":"announcer.dev/l2"}}}}"#
        ),
    )
    .unwrap_or_else(|e| panic!("{e}"));
    assert_eq!(
        cluster_ip(&service(&c, "web").await),
        before,
        "the switch changed the ClusterIP"
    );

    // The allocator gives it the address it asked for, and an agent announces it.
    let api: Api<Service> = Api::namespaced(c.kube().expect("real").client(), NS);
    let mut got = Vec::new();
    let end = std::time::Instant::now() + SETTLE;
    while std::time::Instant::now() < end {
        got = ingress(&api.get("web").await.expect("get"));
        if got == [WEB_IP] {
            break;
        }
        tokio::time::sleep(Duration::from_millis(500)).await;
    }
    assert_eq!(
        got,
        [WEB_IP],
        "the moved Service did not get its address back (the allocator assigns it)\n{}",
        c.log_tails()
    );
    c.wait_for("the moved Service announced", SETTLE, |c| {
        c.owners(WEB_IP).len() == 1
    })
    .await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn rolling_back_hands_the_service_to_metallb_and_deletes_the_pools() {
    let c = side_by_side("metallb-rollback").await;
    our_service(&c, "web", WEB_IP).await;
    c.wait_for("the moved Service announced", SETTLE, |c| {
        c.owners(WEB_IP).len() == 1
    })
    .await;

    // Back: to ClusterIP (the class is wiped with the type), then LoadBalancer without a
    // class, asking MetalLB for the same address; MetalLB's controller writes the status.
    patch(&c, "web", r#"{"spec":{"type":"ClusterIP"}}"#).unwrap_or_else(|e| panic!("{e}"));
    let s = service(&c, "web").await;
    assert_eq!(
        s.spec.as_ref().and_then(|s| s.load_balancer_class.clone()),
        None,
        "the class survived the switch to ClusterIP"
    );
    patch(
        &c,
        "web",
        &format!(
            r#"{{"metadata":{{"annotations":{{"metallb.io/loadBalancerIPs":"{WEB_IP}","announcer.dev/load-balancer-ips":null,"announcer.dev/address-pool":null}}}},"spec":{{"type":"LoadBalancer"}}}}"#
        ),
    )
    .unwrap_or_else(|e| panic!("{e}"));
    c.set_ingress(NS, "web", &[WEB_IP]).await;
    c.wait_for("the agents to let the Service go", SETTLE, |c| {
        c.owners(WEB_IP).is_empty()
    })
    .await;
    c.hold("no agent announces the rolled-back Service", HOLD, |c| {
        c.owners(WEB_IP).is_empty()
    })
    .await;
    assert_eq!(ingress(&service(&c, "web").await), [WEB_IP]);

    // The migrated pools go by their label, and only they.
    let deleted = kubectl(
        &c,
        &[
            "delete",
            "addresspools",
            "-l",
            "announcer.dev/migrated-from=metallb",
        ],
    )
    .unwrap_or_else(|e| panic!("{e}"));
    assert!(deleted.contains("l2-pool"), "{deleted}");
    let left =
        kubectl(&c, &["get", "addresspools", "-o", "name"]).unwrap_or_else(|e| panic!("{e}"));
    assert!(left.trim().is_empty(), "left: {left}");
}
