//! `cargo xtask kube up` runs this in the background: a real control plane (etcd,
//! kube-apiserver, kube-controller-manager, kube-scheduler; `deploy/` applied) plus the
//! three-node namespace testbed with an agent (XDP data plane) on every node, the allocator
//! Deployment's two replicas, and two example
//! Services, left running for someone to poke at with kubectl. It writes `STATE` (JSON: its
//! pid and the paths) once everything is up, and on SIGTERM or SIGINT (`cargo xtask kube down`)
//! removes all of it: processes, namespaces, pins, data directories, and `STATE`.
//!
//! Usage: `kube-env STATE`.

use std::{net::IpAddr, path::PathBuf, time::Duration};

use anyhow::{Context, Result, bail};
use serde_json::json;
use tokio::signal::unix::{SignalKind, signal};

use announcer_tests::{
    env::ApiKind,
    env::lan::{Testbed, TestbedConfig, vip4, vip6},
    netns::require_root,
    programs::kube_program,
};

#[tokio::main(flavor = "multi_thread", worker_threads = 2)]
async fn main() -> Result<()> {
    let state: PathBuf = std::env::args_os()
        .nth(1)
        .context("usage: kube-env STATE")?
        .into();
    require_root();
    // Before anything starts, so a signal during the start still cleans up (after it).
    let mut term = signal(SignalKind::terminate())?;
    let mut int = signal(SignalKind::interrupt())?;

    eprintln!("kube-env: starting the control plane and the testbed");
    let mut tb = Testbed::start(TestbedConfig {
        nodes: 3,
        tag: "kube-env".into(),
        api: ApiKind::Kube,
        ..Default::default()
    })
    .await;
    let nodes = tb.nodes();
    let all: Vec<&str> = nodes.iter().map(String::as_str).collect();
    let services: [(&str, Vec<IpAddr>); 2] = [
        ("web", vec![vip4(0).into(), vip6(0).into()]),
        ("api", vec![vip4(1).into()]),
    ];
    for (name, vips) in &services {
        tb.add_service(name, vips, false, &all).await;
    }
    tb.start_agents(&[]);
    // The allocator Deployment's two replicas, run for their Pods as a kubelet would.
    tb.start_allocators(2);
    let started = std::time::Instant::now();
    while !services
        .iter()
        .flat_map(|(_, v)| v)
        .all(|v| tb.owners(*v).len() == 1)
    {
        if started.elapsed() > Duration::from_secs(60) {
            bail!("the agents did not converge in 60 s:\n{}", tb.log_tails());
        }
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
    let cp = tb
        .kube_control_plane()
        .context("the testbed runs on a real control plane")?;
    let doc = json!({
        "pid": std::process::id(),
        "kubeconfig": cp.kubeconfig(),
        "kubectl": kube_program("kubectl"),
        "control_plane_dir": cp.dir(),
        "testbed_dir": tb.dir(),
        "nodes": nodes,
        "client_namespace": tb.client().name(),
        "services": services.iter().map(|(n, v)| json!({"name": n, "vips": v})).collect::<Vec<_>>(),
    });
    std::fs::write(&state, serde_json::to_string_pretty(&doc)?)
        .with_context(|| format!("writing {}", state.display()))?;
    eprintln!("kube-env: up ({})", state.display());

    tokio::select! {
        _ = term.recv() => {}
        _ = int.recv() => {}
    }
    eprintln!("kube-env: removing everything");
    drop(tb);
    let _ = std::fs::remove_file(&state);
    Ok(())
}
