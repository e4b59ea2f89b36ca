//! MetalLB's real `IPAddressPool` and `L2Advertisement` CRDs on the test control plane, for the
//! migration tests (`tests/tests/deploy/metallb.rs`).
//!
//! Why the real CRDs and not hand-written objects only: `announcer migrate metallb` reads what
//! MetalLB's API holds, so its input in the tests must be what that API accepts and returns
//! (defaults applied, unknown fields pruned, `kubectl get -o yaml`'s `List`). `cargo xtask setup`
//! copies them from MetalLB's Go module into `target/metallb/crds/`; nothing of MetalLB runs
//! (the tests set a Service's status as MetalLB's controller would).

use std::{path::PathBuf, time::Duration};

use super::{KubeControlPlane, KubeError, poll};

/// The namespace MetalLB's objects live in (its manifests' and Helm chart's default).
pub const METALLB_NAMESPACE: &str = "metallb-system";

/// `target/metallb/crds/`, checked to hold the CRDs; panics (never skips) naming `cargo xtask
/// setup` if it does not.
pub fn crds_dir() -> PathBuf {
    let dir = std::path::Path::new(env!("CARGO_MANIFEST_DIR"))
        .parent()
        .expect("tests/ is in the workspace")
        .join("target/metallb/crds");
    for f in [
        "metallb.io_ipaddresspools.yaml",
        "metallb.io_l2advertisements.yaml",
    ] {
        assert!(
            dir.join(f).is_file(),
            "{} is missing: run `cargo xtask setup` (it copies MetalLB's CRDs from its Go module)",
            dir.join(f).display()
        );
    }
    dir
}

/// Installs MetalLB's CRDs and its namespace, and waits until its kinds are served.
pub async fn install(cp: &KubeControlPlane) -> Result<(), KubeError> {
    let dir = crds_dir();
    cp.kubectl(&["apply", "-f", dir.to_str().expect("utf-8 path")])?;
    cp.kubectl(&[
        "wait",
        "--for=condition=Established",
        "--timeout=120s",
        "crd/ipaddresspools.metallb.io",
        "crd/l2advertisements.metallb.io",
    ])?;
    apply_yaml(
        cp,
        "metallb-namespace.yaml",
        &format!("apiVersion: v1\nkind: Namespace\nmetadata:\n  name: {METALLB_NAMESPACE}\n"),
    )?;
    // kubectl's discovery may lag the CRDs being established: a `get` works once it does not.
    poll(Duration::from_secs(60), "MetalLB's kinds served", || {
        let ok = cp
            .kubectl(&[
                "get",
                "ipaddresspools.metallb.io,l2advertisements.metallb.io",
                "-n",
                METALLB_NAMESPACE,
            ])
            .is_ok();
        async move { ok.then_some(()) }
    })
    .await
}

/// Writes `yaml` to `name` in the control plane's directory and `kubectl apply -f`s it; its
/// output.
pub fn apply_yaml(cp: &KubeControlPlane, name: &str, yaml: &str) -> Result<String, KubeError> {
    let path = cp.dir().join(name);
    std::fs::write(&path, yaml)?;
    cp.kubectl(&["apply", "-f", path.to_str().expect("utf-8 path")])
}
