//! `announcer status --cluster` against a real kube-apiserver with `deploy/` applied: Services
//! whose status carries the `announcer.dev/Announced` condition as an agent writes it (set here
//! with `kubectl patch --subresource=status`), an AddressPool, and the rows the command prints —
//! and the one `kubectl get svc` command docs/operate.md gives for the same view, run for real
//! so the documented jsonpath filter stays right. Then the CRD is deleted: the command still
//! answers, without pools. Needs no root (no namespaces, no data plane).

use std::process::{Command, Output};

use announcer_tests::{cli::announcer_bin, env::kube::KubeControlPlane};
use k8s_openapi::jiff::Timestamp;
use serde_json::{Value, json};

/// The documented `kubectl get svc` command's columns (docs/operate.md, "Who announces each
/// VIP"), verbatim.
const KUBECTL_COLUMNS: &str = "custom-columns=NAMESPACE:.metadata.namespace,\
NAME:.metadata.name,EXTERNAL-IP:.status.loadBalancer.ingress[*].ip,\
ANNOUNCED:.status.conditions[?(@.type==\"announcer.dev/Announced\")].message";

/// `announcer status --cluster --kubeconfig <admin> EXTRA...`, its exit checked.
fn status(cp: &KubeControlPlane, extra: &[&str]) -> Output {
    let o = Command::new(announcer_bin())
        .args(["status", "--cluster", "--kubeconfig"])
        .arg(cp.kubeconfig())
        .args(extra)
        .output()
        .expect("run announcer");
    assert!(
        o.status.success(),
        "status --cluster {extra:?}: {}\n{}{}",
        o.status,
        String::from_utf8_lossy(&o.stdout),
        String::from_utf8_lossy(&o.stderr)
    );
    o
}

/// The whitespace-split row of the table that starts with `vip`.
fn row(table: &str, vip: &str) -> Vec<String> {
    table
        .lines()
        .find(|l| l.split_whitespace().next() == Some(vip))
        .unwrap_or_else(|| panic!("no {vip} row:\n{table}"))
        .split_whitespace()
        .map(str::to_owned)
        .collect()
}

/// Writes `value` (YAML or JSON) to a file in the fixture's directory and `kubectl apply`s it,
/// retrying while the just-created CRD is not yet served.
async fn apply(cp: &KubeControlPlane, name: &str, value: &Value) {
    let path = cp.dir().join(name);
    std::fs::write(&path, value.to_string()).expect("write manifest");
    let path = path.to_str().expect("utf-8 path");
    let mut last = String::new();
    for _ in 0..100 {
        match cp.kubectl(&["apply", "-f", path]) {
            Ok(_) => return,
            Err(e) => last = e.to_string(),
        }
        tokio::time::sleep(std::time::Duration::from_millis(300)).await;
    }
    panic!("kubectl apply {name}: {last}");
}

/// Sets `status` of Service `default/NAME` as the agents and the allocator would.
fn patch_status(cp: &KubeControlPlane, name: &str, status: &Value) {
    let patch = json!({ "status": status }).to_string();
    cp.kubectl(&[
        "patch",
        "svc",
        name,
        "-n",
        "default",
        "--subresource=status",
        "--type=merge",
        "-p",
        &patch,
    ])
    .unwrap_or_else(|e| panic!("patch {name}: {e}"));
}

fn lb_service(name: &str) -> Value {
    json!({
        "apiVersion": "v1", "kind": "Service",
        "metadata": {"name": name, "namespace": "default"},
        "spec": {"type": "LoadBalancer", "ports": [{"port": 80}]},
    })
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn status_cluster_prints_each_vip_with_service_pool_owner_and_interface_from_the_api() {
    let cp = KubeControlPlane::start_applied("status-cluster").await;

    apply(
        &cp,
        "pool.json",
        &json!({
            "apiVersion": "announcer.dev/v1alpha1", "kind": "AddressPool",
            "metadata": {"name": "lan"},
            "spec": {"addresses": ["10.77.0.0/24"]},
        }),
    )
    .await;
    apply(&cp, "web.json", &lb_service("web")).await;
    apply(&cp, "legacy.json", &lb_service("legacy")).await;
    apply(
        &cp,
        "internal.json",
        &json!({
            "apiVersion": "v1", "kind": "Service",
            "metadata": {"name": "internal", "namespace": "default"},
            "spec": {"ports": [{"port": 80}]},
        }),
    )
    .await;

    // web: two VIPs, one announced by node-a (two hours ago), one by nobody yet.
    let two_hours_ago =
        Timestamp::from_second(Timestamp::now().as_second() - 2 * 3600 - 30).expect("a time");
    patch_status(
        &cp,
        "web",
        &json!({
            "loadBalancer": {"ingress": [{"ip": "10.77.0.5"}, {"ip": "10.77.0.6"}]},
            "conditions": [{
                "type": "announcer.dev/Announced",
                "status": "False",
                "reason": "PartiallyAnnounced",
                "message": "10.77.0.5 by node-a on eth0",
                "lastTransitionTime": two_hours_ago.to_string(),
            }],
        }),
    );
    // legacy: an address from outside every pool, no condition at all.
    patch_status(
        &cp,
        "legacy",
        &json!({"loadBalancer": {"ingress": [{"ip": "192.0.2.9"}]}}),
    );

    let o = status(&cp, &[]);
    let table = String::from_utf8_lossy(&o.stdout);
    assert_eq!(
        table
            .lines()
            .next()
            .map(|l| l.split_whitespace().collect::<Vec<_>>()),
        Some(vec![
            "VIP",
            "SERVICE",
            "POOL",
            "NODE",
            "INTERFACE",
            "AGE",
            "STATE"
        ]),
        "{table}"
    );
    assert_eq!(
        row(&table, "10.77.0.5"),
        [
            "10.77.0.5",
            "default/web",
            "lan",
            "node-a",
            "eth0",
            "2h",
            "announced"
        ],
        "{table}"
    );
    assert_eq!(
        row(&table, "10.77.0.6"),
        [
            "10.77.0.6",
            "default/web",
            "lan",
            "-",
            "-",
            "-",
            "not-announced"
        ],
        "{table}"
    );
    assert_eq!(
        row(&table, "192.0.2.9"),
        [
            "192.0.2.9",
            "default/legacy",
            "-",
            "-",
            "-",
            "-",
            "not-announced"
        ],
        "{table}"
    );
    // Sorted by address; the ClusterIP Service (and `kubernetes`) have no row.
    let vips: Vec<&str> = table
        .lines()
        .skip(1)
        .filter_map(|l| l.split_whitespace().next())
        .collect();
    assert_eq!(vips, ["10.77.0.5", "10.77.0.6", "192.0.2.9"], "{table}");

    // The JSON document says the same.
    let o = status(&cp, &["--json"]);
    let doc: Value = serde_json::from_slice(&o.stdout).expect("status --cluster --json is JSON");
    assert_eq!(doc["pools_listed"], true, "{doc:#}");
    let web = &doc["vips"][0];
    assert_eq!(
        (
            &web["vip"],
            &web["service"],
            &web["pool"],
            &web["node"],
            &web["iface"],
            &web["state"]
        ),
        (
            &json!("10.77.0.5"),
            &json!("default/web"),
            &json!("lan"),
            &json!("node-a"),
            &json!("eth0"),
            &json!("announced")
        ),
        "{doc:#}"
    );
    assert!(
        web["age_s"]
            .as_i64()
            .is_some_and(|a| (7230..7330).contains(&a)),
        "{doc:#}"
    );

    // One namespace only.
    let o = status(&cp, &["-n", "kube-system"]);
    assert_eq!(
        String::from_utf8_lossy(&o.stdout),
        "no LoadBalancer Service has an ingress IP\n"
    );

    // The documented kubectl command shows the owner next to the addresses.
    let out = cp
        .kubectl(&["get", "svc", "-A", "-o", KUBECTL_COLUMNS])
        .unwrap_or_else(|e| panic!("the documented kubectl command: {e}"));
    let line = |name: &str| {
        out.lines()
            .find(|l| l.split_whitespace().nth(1) == Some(name))
            .unwrap_or_else(|| panic!("no {name} line:\n{out}"))
            .split_whitespace()
            .collect::<Vec<_>>()
            .join(" ")
    };
    assert!(
        out.starts_with("NAMESPACE") && out.lines().next().unwrap().contains("ANNOUNCED"),
        "{out}"
    );
    assert_eq!(
        line("web"),
        "default web 10.77.0.5,10.77.0.6 10.77.0.5 by node-a on eth0",
        "{out}"
    );
    assert_eq!(line("legacy"), "default legacy 192.0.2.9 <none>", "{out}");
    eprintln!("kubectl get svc -A -o {KUBECTL_COLUMNS}\n{out}");

    // Without the CRD the command still answers; only the pools are missing.
    cp.kubectl(&["delete", "crd", "addresspools.announcer.dev", "--wait=true"])
        .unwrap_or_else(|e| panic!("delete the CRD: {e}"));
    let mut table = String::new();
    for _ in 0..50 {
        let o = status(&cp, &[]);
        table = String::from_utf8_lossy(&o.stdout).into_owned();
        if row(&table, "10.77.0.5")[2] == "-" {
            break;
        }
        tokio::time::sleep(std::time::Duration::from_millis(200)).await;
    }
    assert_eq!(
        row(&table, "10.77.0.5"),
        [
            "10.77.0.5",
            "default/web",
            "-",
            "node-a",
            "eth0",
            "2h",
            "announced"
        ],
        "{table}"
    );
    let o = status(&cp, &["--json"]);
    assert!(
        String::from_utf8_lossy(&o.stderr).is_empty(),
        "no CRD is no warning: {}",
        String::from_utf8_lossy(&o.stderr)
    );
    let doc: Value = serde_json::from_slice(&o.stdout).expect("JSON");
    assert_eq!(doc["pools_listed"], false, "{doc:#}");
}
