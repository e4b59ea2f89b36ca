//! The upgrade that moves the allocator out of the DaemonSet (issue 25): from the manifests and
//! the agent of the release before it (commit [`BEFORE`], whose agents each ran the allocator)
//! to today's, on a real kube-apiserver, while Services are being created. No address is ever
//! on two Services (sampled all along), and none is left without one after the roll.
//!
//! The old agent binary is built from [`BEFORE`] (`ANNOUNCER_OLD_BIN` names it; the test
//! fails, naming the command, when it is missing: it never skips).

use std::{
    collections::BTreeMap,
    path::{Path, PathBuf},
    process::Command,
    sync::{Arc, Mutex},
    time::{Duration, Instant},
};

use announcer_tests::env::cluster::Cluster;
use k8s_openapi::api::core::v1::Service;
use kube::{
    Api,
    api::{ListParams, PostParams},
};
use serde_json::json;

/// The last commit whose agents allocated addresses.
const BEFORE: &str = "b94869a";
const NODES: [&str; 3] = ["node-a", "node-b", "node-c"];
const NS: &str = "apps";
/// Services created during the roll.
const MANY: usize = 40;
const T: Duration = Duration::from_secs(120);

fn old_binary() -> PathBuf {
    let p = std::env::var_os("ANNOUNCER_OLD_BIN").map(PathBuf::from);
    match p {
        Some(p) if p.exists() => p,
        _ => panic!(
            "set ANNOUNCER_OLD_BIN to an `announcer` built from {BEFORE} (`cargo xtask test` builds \
             it into target/upgrade-from/ and sets it), or by hand: \
             git worktree add /tmp/old {BEFORE} && (cd /tmp/old && cargo build -p announcer \
             --bin announcer)"
        ),
    }
}

/// deploy/ as it was at [`BEFORE`], in `dir`.
fn old_deploy(dir: &Path) -> PathBuf {
    let root = Path::new(env!("CARGO_MANIFEST_DIR")).join("..");
    std::fs::create_dir_all(dir).expect("dir");
    let archive = Command::new("git")
        .current_dir(&root)
        .args(["archive", BEFORE, "deploy"])
        .output()
        .expect("git archive");
    assert!(archive.status.success(), "git archive {BEFORE} deploy");
    let mut tar = Command::new("tar")
        .args(["-x", "-C", dir.to_str().expect("utf-8")])
        .stdin(std::process::Stdio::piped())
        .spawn()
        .expect("tar");
    use std::io::Write;
    tar.stdin
        .take()
        .expect("stdin")
        .write_all(&archive.stdout)
        .expect("untar");
    assert!(tar.wait().expect("tar").success());
    dir.join("deploy")
}

/// Every Service's addresses in [`NS`].
async fn addresses(api: &Api<Service>) -> BTreeMap<String, Vec<String>> {
    api.list(&ListParams::default())
        .await
        .map(|l| {
            l.items
                .into_iter()
                .map(|s| {
                    let name = s.metadata.name.clone().unwrap_or_default();
                    let ips = s
                        .status
                        .and_then(|st| st.load_balancer)
                        .and_then(|lb| lb.ingress)
                        .unwrap_or_default()
                        .into_iter()
                        .filter_map(|i| i.ip)
                        .collect();
                    (name, ips)
                })
                .collect()
        })
        .unwrap_or_default()
}

/// An address held by two Services in `a`, if any.
fn shared(a: &BTreeMap<String, Vec<String>>) -> Option<String> {
    let mut by_ip: BTreeMap<&str, &str> = BTreeMap::new();
    for (svc, ips) in a {
        for ip in ips {
            if let Some(other) = by_ip.insert(ip, svc) {
                return Some(format!("{ip} on {other} and {svc}"));
            }
        }
    }
    None
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn rolling_to_the_allocator_deployment_while_services_are_created_shares_and_leaves_out_no_address()
 {
    let old_bin = old_binary();
    let scratch = std::env::temp_dir().join(format!("annupgrade-{}", std::process::id()));
    let old = old_deploy(&scratch);
    let mut c = Cluster::start_with_kustomization("upgrade", &old).await;
    for n in NODES {
        c.add_node(n, &[], true).await;
    }
    c.ensure_namespace(NS).await;
    for n in NODES {
        c.start_agent_from(n, &old_bin, &[]);
    }
    c.wait_ready(T).await;
    let cp = c.kube().expect("real");
    let pool = "apiVersion: announcer.dev/v1alpha1\nkind: AddressPool\nmetadata:\n  name: roll\n\
                spec:\n  addresses: [10.0.74.0/24]\n";
    let file = cp.dir().join("pool.yaml");
    std::fs::write(&file, pool).expect("write");
    cp.kubectl(&["apply", "-f", file.to_str().expect("utf-8")])
        .unwrap_or_else(|e| panic!("{e}"));
    let api: Api<Service> = Api::namespaced(c.client.clone(), NS);

    // Sampled all along: no address on two Services, ever.
    let violations = Arc::new(Mutex::new(Vec::<String>::new()));
    let sampling = Arc::new(std::sync::atomic::AtomicBool::new(true));
    let sampler = {
        let (api, v, on) = (api.clone(), violations.clone(), sampling.clone());
        tokio::spawn(async move {
            let mut samples = 0u64;
            while on.load(std::sync::atomic::Ordering::Relaxed) {
                if let Some(s) = shared(&addresses(&api).await) {
                    v.lock().expect("lock").push(s);
                }
                samples += 1;
                tokio::time::sleep(Duration::from_millis(50)).await;
            }
            samples
        })
    };
    // Services created all through the roll.
    let creating = {
        let api = api.clone();
        tokio::spawn(async move {
            for i in 0..MANY {
                let svc: Service = serde_json::from_value(json!({
                    "metadata": {"name": format!("s{i:02}")},
                    "spec": {"type": "LoadBalancer", "loadBalancerClass": "announcer.dev/l2",
                             "ports": [{"port": 80}]},
                }))
                .expect("service");
                api.create(&PostParams::default(), &svc)
                    .await
                    .expect("create");
                tokio::time::sleep(Duration::from_millis(500)).await;
            }
        })
    };
    // The old agents allocate the first ones.
    let end = Instant::now() + T;
    while addresses(&api).await.values().all(Vec::is_empty) {
        assert!(
            Instant::now() < end,
            "the old agents allocate nothing\n{}",
            c.log_tails()
        );
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
    // The roll: today's manifests, the allocator Deployment's replicas, then each node's
    // agent replaced by today's (SIGTERM handover, as the DaemonSet's rolling update does).
    c.kube()
        .expect("real")
        .apply_deploy()
        .await
        .unwrap_or_else(|e| panic!("apply deploy/: {e}"));
    c.start_allocators(2, &[]);
    for n in NODES {
        c.signal(n, libc::SIGTERM);
        assert_eq!(
            c.wait_exit(n, T),
            Some(0),
            "the old agent of {n} exits cleanly"
        );
        c.restart_as(n, None);
        c.wait_ready(T).await;
    }
    creating.await.expect("created");
    let end = Instant::now() + T;
    loop {
        let a = addresses(&api).await;
        if a.len() == MANY && a.values().all(|i| i.len() == 1) {
            break;
        }
        assert!(
            Instant::now() < end,
            "Services left without an address after the roll: {:?}\n{}",
            a.iter().filter(|(_, i)| i.len() != 1).collect::<Vec<_>>(),
            c.log_tails()
        );
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
    sampling.store(false, std::sync::atomic::Ordering::Relaxed);
    let samples = sampler.await.expect("sampler");
    let v = violations.lock().expect("lock").clone();
    eprintln!("{samples} samples over the roll");
    assert!(
        v.is_empty(),
        "an address on two Services during the roll: {v:?}"
    );
    let _ = std::fs::remove_dir_all(&scratch);
}
