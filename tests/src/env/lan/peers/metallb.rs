//! MetalLB on the testbed: installed from its own release manifest and CRDs, run as its
//! DaemonSet and Deployment would run it.
//!
//! What is installed, from the Go module of [`METALLB_VERSION`] (the same source `cargo xtask
//! setup` builds the binaries from):
//! * every CRD of `config/crd/bases/`;
//! * from `config/manifests/metallb-native.yaml` (the documented install): the namespace, the
//!   ServiceAccounts, Roles, ClusterRoles and bindings, the excludel2 ConfigMap, the webhook
//!   Secret and Service; **not** its Deployment and DaemonSet (the processes run here
//!   instead), its ValidatingWebhookConfiguration and the bgppeers conversion webhook of its
//!   CRDs (kube-apiserver, in the test process's namespace, cannot reach a webhook server in
//!   a node namespace; the controller runs with `--webhook-mode=disabled`);
//! * the memberlist Secret (`memberlist`, key `secretkey`), which the controller would create
//!   from its Deployment (`METALLB_ML_SECRET_NAME`); here it is written beside it and given
//!   to the speakers as the file their Secret volume would hold;
//! * an `IPAddressPool` with this peer's range and an `L2Advertisement` of it (all
//!   interfaces), as the L2 configuration docs show.
//!
//! The speakers: one stand-in Pod per node (`speaker-<node>`, labels `app=metallb,
//! component=speaker`, host network, bound to the node, Running and ready at the node's
//! address, as the kubelet would report its DaemonSet Pod; a pause container and the
//! namespace's default ServiceAccount instead of the DaemonSet's template) — memberlist finds
//! its peers by listing these Pods — and one `metallb-speaker` process per node namespace with
//! the DaemonSet's arguments and environment, the `speaker` ServiceAccount's token (a
//! `kubectl create token`, not bound to the Pod) and `--lb-class`. The controller runs in the
//! bridge namespace (a control-plane host that no trial crashes) with the `controller`
//! ServiceAccount's token and a stand-in Pod `controller-0` (it reads its own Pod at start).

use std::{path::PathBuf, process::Command};

use super::{
    Peer, PeerKind, Testbed, apply, clean_command, spawn_in_ns_logged, write_sa_kubeconfig,
};
use crate::{
    env::kube::{metallb::METALLB_NAMESPACE, workloads},
    programs::kube_program,
};

/// The MetalLB release run (its binaries from `cargo xtask setup`, its manifests from its Go
/// module).
pub const METALLB_VERSION: &str = "v0.16.1";
/// The `loadBalancerClass` MetalLB is started with (`--lb-class`).
pub const METALLB_LB_CLASS: &str = "metallb.io/metallb";
/// The memberlist labels of the DaemonSet (`METALLB_ML_LABELS`).
const ML_LABELS: &str = "app=metallb,component=speaker";

/// MetalLB's Go module in the local module cache (`go env GOMODCACHE`), where `cargo xtask
/// setup` downloaded it; panics naming setup if it is not there.
fn module_dir() -> PathBuf {
    let cache = Command::new("go")
        .args(["env", "GOMODCACHE"])
        .output()
        .ok()
        .map(|o| String::from_utf8_lossy(&o.stdout).trim().to_owned())
        .filter(|s| !s.is_empty())
        .unwrap_or_else(|| "/root/go/pkg/mod".into());
    let dir = PathBuf::from(cache).join(format!("go.universe.tf/metallb@{METALLB_VERSION}"));
    assert!(
        dir.join("config/manifests/metallb-native.yaml").is_file(),
        "MetalLB {METALLB_VERSION}'s module is not in the Go module cache ({}): run `cargo \
         xtask setup`",
        dir.display()
    );
    dir
}

/// The kinds of `metallb-native.yaml` not applied (see the module docs).
const SKIPPED_KINDS: [&str; 4] = [
    "CustomResourceDefinition",
    "Deployment",
    "DaemonSet",
    "ValidatingWebhookConfiguration",
];

/// `metallb-native.yaml` without [`SKIPPED_KINDS`].
fn native_manifest_without_workloads(text: &str) -> String {
    text.split("\n---")
        .filter(|doc| {
            !doc.lines().any(|l| {
                l.strip_prefix("kind: ")
                    .is_some_and(|k| SKIPPED_KINDS.contains(&k.trim()))
            })
        })
        .collect::<Vec<_>>()
        .join("\n---")
}

/// See the module docs.
pub(super) fn install(tb: &Testbed, peer: &mut Peer) {
    let module = module_dir();
    let cp = tb.require_kube("MetalLB");
    let crds = module.join("config/crd/bases");
    cp.kubectl(&["apply", "-f", crds.to_str().expect("utf-8 path")])
        .unwrap_or_else(|e| panic!("apply MetalLB's CRDs: {e}"));
    cp.kubectl(&[
        "wait",
        "--for=condition=Established",
        "--timeout=120s",
        "crd/ipaddresspools.metallb.io",
        "crd/l2advertisements.metallb.io",
        "crd/bgppeers.metallb.io",
        "crd/servicel2statuses.metallb.io",
        "crd/configurationstates.metallb.io",
    ])
    .unwrap_or_else(|e| panic!("MetalLB's CRDs established: {e}"));
    let native = std::fs::read_to_string(module.join("config/manifests/metallb-native.yaml"))
        .expect("read metallb-native.yaml");
    apply(
        tb,
        peer,
        "metallb-native-without-workloads.yaml",
        &native_manifest_without_workloads(&native),
    );
    // The memberlist key: 16 random bytes, base64, as the controller makes it.
    let key = {
        use base64::Engine;
        let bytes: [u8; 16] = rand::random();
        base64::engine::general_purpose::STANDARD.encode(bytes)
    };
    let ml_dir = peer.dir.join("memberlist");
    std::fs::create_dir_all(&ml_dir).expect("memberlist dir");
    std::fs::write(ml_dir.join("secretkey"), &key).expect("write the memberlist key");
    let _ = cp.kubectl(&["delete", "secret", "memberlist", "-n", METALLB_NAMESPACE]);
    cp.kubectl(&[
        "create",
        "secret",
        "generic",
        "memberlist",
        "-n",
        METALLB_NAMESPACE,
        &format!("--from-literal=secretkey={key}"),
    ])
    .unwrap_or_else(|e| panic!("create the memberlist Secret: {e}"));
    // The configuration, in kubectl's retries: the CRDs' kinds may be served a moment after
    // they are established.
    let range = PeerKind::MetalLb.range();
    let config = format!(
        "apiVersion: metallb.io/v1beta1\nkind: IPAddressPool\nmetadata:\n  name: testbed\n  \
         namespace: {METALLB_NAMESPACE}\nspec:\n  addresses:\n  - {range}\n---\n\
         apiVersion: metallb.io/v1beta1\nkind: L2Advertisement\nmetadata:\n  name: testbed\n  \
         namespace: {METALLB_NAMESPACE}\nspec:\n  ipAddressPools:\n  - testbed\n"
    );
    let path = peer.dir.join("metallb-config.yaml");
    std::fs::write(&path, config).expect("write MetalLB's configuration");
    let mut last = String::new();
    for _ in 0..60 {
        match cp.kubectl(&["apply", "-f", path.to_str().expect("utf-8 path")]) {
            Ok(_) => {
                last.clear();
                break;
            }
            Err(e) => last = e.to_string(),
        }
        std::thread::sleep(std::time::Duration::from_millis(500));
    }
    assert!(
        last.is_empty(),
        "apply MetalLB's pool and L2Advertisement: {last}"
    );

    for (account, file) in [
        ("speaker", "kubeconfig.speaker"),
        ("controller", "kubeconfig.controller"),
    ] {
        write_sa_kubeconfig(tb, METALLB_NAMESPACE, account, &peer.dir.join(file));
    }
    // Stand-in Pods: one speaker per node, and the controller's.
    let mut pods: Vec<(String, String, std::net::IpAddr, &str)> = tb
        .nodes()
        .into_iter()
        .map(|n| {
            let ip = tb.node_ip4(&n).into();
            (format!("speaker-{n}"), n, ip, "speaker")
        })
        .collect();
    let first = tb.nodes()[0].clone();
    pods.push((
        "controller-0".into(),
        first.clone(),
        tb.node_ip4(&first).into(),
        "controller",
    ));
    let client = tb.kube();
    tb.block_on(async move {
        for (name, node, ip, component) in pods {
            workloads::create_running_pod(
                client.clone(),
                METALLB_NAMESPACE,
                &name,
                &[("app", "metallb"), ("component", component)],
                &node,
                ip,
            )
            .await
            .unwrap_or_else(|e| panic!("MetalLB's stand-in Pod {name}: {e}"));
        }
    });
    // The controller, as its Deployment runs it (plus --lb-class, --webhook-mode=disabled).
    let log = peer.controller_log();
    let mut cmd = clean_command(
        &kube_program("metallb-controller"),
        &[
            ("METALLB_NAMESPACE", METALLB_NAMESPACE.into()),
            ("METALLB_POD_NAME", "controller-0".into()),
            (
                "KUBECONFIG",
                peer.dir.join("kubeconfig.controller").display().to_string(),
            ),
            ("HOME", peer.dir.display().to_string()),
        ],
    );
    cmd.args([
        "--port=9120",
        "--log-level=info",
        &format!("--lb-class={METALLB_LB_CLASS}"),
        "--webhook-mode=disabled",
    ]);
    peer.controller = Some(spawn_in_ns_logged(tb.bridge_ns(), cmd, &log));
}

/// The speaker of `node`, with its DaemonSet's arguments and environment.
pub(super) fn speaker_command(tb: &Testbed, peer: &Peer, node: &str) -> Command {
    let ip = tb.node_ip4(node).to_string();
    let home = peer.dir.join(format!("home-{node}"));
    std::fs::create_dir_all(&home).expect("speaker HOME");
    let mut cmd = clean_command(
        &kube_program("metallb-speaker"),
        &[
            ("METALLB_NAMESPACE", METALLB_NAMESPACE.into()),
            ("METALLB_NODE_NAME", node.into()),
            ("METALLB_POD_NAME", format!("speaker-{node}")),
            ("METALLB_HOST", ip.clone()),
            ("METALLB_ML_BIND_ADDR", ip),
            ("METALLB_ML_LABELS", ML_LABELS.into()),
            (
                "METALLB_ML_SECRET_KEY_PATH",
                peer.dir.join("memberlist").display().to_string(),
            ),
            (
                "KUBECONFIG",
                peer.dir.join("kubeconfig.speaker").display().to_string(),
            ),
            ("HOME", home.display().to_string()),
        ],
    );
    cmd.args([
        "--port=9120",
        "--log-level=info",
        &format!("--lb-class={METALLB_LB_CLASS}"),
    ]);
    cmd
}

#[cfg(test)]
mod unit {
    use super::*;

    #[test]
    fn the_native_manifest_loses_its_workloads_and_webhooks_only() {
        let text = "apiVersion: v1\nkind: Namespace\nmetadata:\n  name: x\n---\n\
                    apiVersion: apps/v1\nkind: DaemonSet\nmetadata:\n  name: speaker\n---\n\
                    apiVersion: v1\nkind: ServiceAccount\nmetadata:\n  name: speaker\n---\n\
                    apiVersion: admissionregistration.k8s.io/v1\n\
                    kind: ValidatingWebhookConfiguration\nmetadata:\n  name: w\n";
        let out = native_manifest_without_workloads(text);
        assert!(out.contains("kind: Namespace"));
        assert!(out.contains("kind: ServiceAccount"));
        assert!(!out.contains("DaemonSet"));
        assert!(!out.contains("ValidatingWebhookConfiguration"));
    }
}
