//! docs/install.md step by step on the testbed's real control plane, with the image really
//! run (issue 27, "Done when"): the manifests are installed as the guide says (`helm install`,
//! `kubectl apply -k deploy/`), and the stand-in kubelets run every DaemonSet and Deployment
//! Pod from the image archive's root file system (`Testbed::start_from_pods`). Then a Service
//! is answered, the agents are upgraded (a differing XDP program is swapped on every node
//! without a lost probe; an identical one is not), and the documented uninstall leaves
//! nothing attached, pinned or stored on any node.
//!
//! The image is `ANNOUNCER_IMAGE` (else `target/image/announcer-<version>.tar`: `cargo xtask
//! image`); the upgrade to a differing program needs `ANNOUNCER_IMAGE_NEXT`, a build whose XDP
//! program differs by its version constant. Missing, the tests fail naming how to get them:
//! they never skip. Needs root.
//!
//! Not followed as written: `kubectl logs` (the stand-in kubelets serve no log endpoint; the
//! containers' logs are files, printed on failure) and `skopeo copy` to a registry (the
//! archive is the registry: the kubelets "pull" `announcer:0.1.0` from it).

use std::{
    collections::BTreeMap,
    net::IpAddr,
    os::unix::fs::MetadataExt,
    path::{Path, PathBuf},
    process::Command,
    time::{Duration, Instant},
};

use announcer_tests::{
    env::{
        ApiKind, NAMESPACE,
        kube::pods::ImageRegistry,
        lan::{ProbeKind, Testbed, TestbedConfig, metric_sum},
    },
    programs::kube_program,
};
use serde_json::Value;

/// Generous bound for anything the agents have to do.
const T: Duration = Duration::from_secs(90);
/// How long a roll of three nodes may take (each: SIGTERM handover, a new Pod, its warm-up,
/// `minReadySeconds: 5`).
const ROLL: &str = "--timeout=300s";
/// Longer than the agents' `grace` (the chart's 5 s) and a refresh: what the old agents'
/// entries could still answer for after they exited.
const GRACE_AND_MORE: Duration = Duration::from_secs(7);
/// How long one ARP/NDP question may take.
const Q: Duration = Duration::from_millis(800);
/// The image the chart and the kustomization name by default (repository `announcer`, tag
/// the chart's appVersion / the kustomization's `newTag`).
const IMAGE_REF: &str = "announcer:0.1.0";
/// The tag of the next build (`cargo xtask image --xdp-version 2` names it so).
const NEXT_TAG: &str = "0.1.0-xdp2";
/// The VIP pool: inside the testbed's VIP ranges.
const POOL: &str = "apiVersion: announcer.dev/v1alpha1
kind: AddressPool
metadata:
  name: lan
spec:
  addresses: [\"10.78.200.1-10.78.200.20\", \"fd78::8000:200/124\"]
";

fn workspace() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("..")
}

/// The next build's archive (`ANNOUNCER_IMAGE_NEXT`).
fn next_archive() -> PathBuf {
    let path = std::env::var_os("ANNOUNCER_IMAGE_NEXT").map(PathBuf::from);
    match path {
        Some(p) if p.is_file() => p,
        Some(p) => panic!("ANNOUNCER_IMAGE_NEXT={} is not a file", p.display()),
        None => panic!(
            "ANNOUNCER_IMAGE_NEXT is not set: it names an image archive of the same binary whose \
             XDP program differs by its version constant (`cargo xtask image --xdp-version 2` \
             writes target/image/announcer-0.1.0-xdp2.tar; `cargo xtask test` builds it and sets \
             the variable)"
        ),
    }
}

/// A 3-node testbed whose agents come from the Pods of what the test installs.
async fn testbed(tag: &str, next: Option<PathBuf>) -> Testbed {
    let mut images = ImageRegistry::new().with(
        IMAGE_REF,
        &announcer_tests::env::image::archive_under_test(),
    );
    if let Some(next) = next {
        images = images.with(&format!("announcer:{NEXT_TAG}"), &next);
    }
    Testbed::start_from_pods(
        TestbedConfig {
            nodes: 3,
            // The agents' `xdpMode: auto` attaches native XDP on the veths.
            native_xdp: true,
            tag: tag.into(),
            api: ApiKind::Kube,
        },
        images,
    )
    .await
}

/// kubectl with the admin kubeconfig; panics with the output and every log tail unless it
/// succeeds.
fn kubectl(tb: &Testbed, args: &[&str]) -> String {
    tb.kube_control_plane()
        .expect("a real control plane")
        .kubectl(args)
        .unwrap_or_else(|e| panic!("{e}\n{}", tb.log_tails()))
}

/// helm, with its cache, configuration and data in a directory of its own (never the user's).
struct Helm {
    home: PathBuf,
    kubeconfig: String,
}

impl Helm {
    fn new(tb: &Testbed) -> Helm {
        let home = tb.dir().join("helm");
        std::fs::create_dir_all(&home).expect("helm home");
        let kubeconfig = tb
            .kube_control_plane()
            .expect("a real control plane")
            .kubeconfig()
            .to_str()
            .expect("utf-8")
            .to_owned();
        Helm { home, kubeconfig }
    }

    fn run(&self, tb: &Testbed, args: &[&str]) -> String {
        let mut c = Command::new(kube_program("helm"));
        for (var, sub) in [
            ("HELM_CACHE_HOME", "cache"),
            ("HELM_CONFIG_HOME", "config"),
            ("HELM_DATA_HOME", "data"),
        ] {
            c.env(var, self.home.join(sub));
        }
        let out = c
            .args(args)
            .args(["--kubeconfig", &self.kubeconfig])
            .output()
            .unwrap_or_else(|e| panic!("cannot run helm: {e}"));
        assert!(
            out.status.success(),
            "helm {} failed ({}):\n{}{}\n{}",
            args.join(" "),
            out.status,
            String::from_utf8_lossy(&out.stderr),
            String::from_utf8_lossy(&out.stdout),
            tb.log_tails()
        );
        String::from_utf8_lossy(&out.stdout).into_owned()
    }
}

fn chart() -> String {
    workspace()
        .join("deploy/chart")
        .to_str()
        .expect("utf-8")
        .to_owned()
}

fn deploy(sub: &str) -> String {
    workspace()
        .join("deploy")
        .join(sub)
        .to_str()
        .expect("utf-8")
        .to_owned()
}

/// docs/install.md, "Install with Helm": `helm install`, then `rollout status`.
fn helm_install(tb: &Testbed) -> Helm {
    let helm = Helm::new(tb);
    let out = helm.run(
        tb,
        &[
            "install",
            "announcer",
            &chart(),
            "-n",
            NAMESPACE,
            "--create-namespace",
            "--set",
            "image.repository=announcer",
            "--set",
            "image.tag=0.1.0",
        ],
    );
    assert!(out.contains("STATUS: deployed"), "{out}");
    rollout_status(tb);
    helm
}

/// `kubectl -n announcer-system rollout status daemonset/announcer`.
fn rollout_status(tb: &Testbed) {
    kubectl(
        tb,
        &[
            "-n",
            NAMESPACE,
            "rollout",
            "status",
            "daemonset/announcer",
            ROLL,
        ],
    );
}

/// The guide's pool and a LoadBalancer Service of class `announcer.dev/l2` with an endpoint on
/// every node; its addresses (IPv4 and IPv6) once the allocator assigned them, each answered
/// (ARP/NDP from the client) by its owner alone.
async fn service_answered(tb: &Testbed) -> Vec<IpAddr> {
    let pool = tb.dir().join("pool.yaml");
    std::fs::write(&pool, POOL).expect("pool.yaml");
    kubectl(tb, &["apply", "-f", pool.to_str().expect("utf-8")]);
    let nodes = tb.nodes();
    let on: Vec<&str> = nodes.iter().map(String::as_str).collect();
    let vips = tb
        .add_allocated_service("web", &["IPv4", "IPv6"], &on, T)
        .await;
    for vip in &vips {
        let owner = tb.wait_owner(*vip, T);
        assert_eq!(
            tb.arp_nodes(*vip, Q),
            vec![owner.clone()],
            "{vip} answered by its owner alone\n{}",
            tb.log_tails()
        );
    }
    vips
}

/// `(device, inode)` of what `path` names (following links, as `/proc/PID/root` is one).
fn id_of(path: &Path) -> (u64, u64) {
    let m = std::fs::metadata(path).unwrap_or_else(|e| panic!("{}: {e}", path.display()));
    (m.dev(), m.ino())
}

/// Every node's agent is a process of the image: its root is its Pod's root, its executable
/// the image's `/announcer`, its network namespace the node's; and the host's binary is not
/// it.
fn agents_run_the_image(tb: &Testbed) {
    let containers = tb.pod_containers();
    let host_bin = id_of(&announcer_tests::cli::announcer_bin());
    for node in tb.nodes() {
        let c = containers
            .iter()
            .find(|c| c.node == node && c.container == "agent")
            .unwrap_or_else(|| panic!("no agent container on {node}: {containers:?}"));
        let proc_ = PathBuf::from(format!("/proc/{}", c.pid));
        assert_eq!(
            id_of(&proc_.join("root")),
            id_of(&c.root),
            "{node}: the agent's root is its Pod's root {}",
            c.root.display()
        );
        assert_ne!(
            id_of(&c.root),
            id_of(Path::new("/")),
            "{node}: a root of its own"
        );
        let exe = id_of(&proc_.join("exe"));
        assert_eq!(
            exe,
            id_of(&c.image_rootfs.join("announcer")),
            "{node}: the agent runs the image's /announcer"
        );
        assert_ne!(exe, host_bin, "{node}: not the host's binary");
        assert_eq!(
            id_of(&proc_.join("ns/net")),
            id_of(&tb.node_ns(&node).path()),
            "{node}: the agent runs in the node's network namespace"
        );
        assert!(tb.state(&node).is_some(), "{node}'s agent answers /state");
    }
}

/// The XDP program id attached to each node's `eth0`, if any.
fn program_ids(tb: &Testbed) -> BTreeMap<String, Option<u32>> {
    tb.nodes()
        .into_iter()
        .map(|n| {
            let id = tb.node_ns(&n).xdp_on("eth0").1;
            (n, (id != 0).then_some(id))
        })
        .collect()
}

/// [`program_ids`], asserting that every node runs an XDP program.
fn xdp_on_every_node(tb: &Testbed) -> BTreeMap<String, Option<u32>> {
    let ids = program_ids(tb);
    assert!(
        ids.values().all(Option::is_some),
        "XDP on every node: {ids:?}"
    );
    ids
}

/// docs/install.md, "Install with Helm" → "Upgrade": `helm upgrade --reuse-values` with `set`.
fn helm_upgrade(helm: &Helm, tb: &Testbed, set: &[&str]) {
    let chart = chart();
    let mut args = vec![
        "upgrade",
        "announcer",
        chart.as_str(),
        "-n",
        NAMESPACE,
        "--reuse-values",
    ];
    args.extend_from_slice(set);
    helm.run(tb, &args);
}

/// Every node's agent has its data plane up (`announcer_dataplane_up` is 1): the program it
/// embeds is attached, or the one running was verified to be it.
fn dataplanes_up(tb: &Testbed) {
    let end = Instant::now() + T;
    for node in tb.nodes() {
        loop {
            let up = tb
                .metrics(&node)
                .and_then(|m| metric_sum(&m, "announcer_dataplane_up"));
            if up == Some(1.0) {
                break;
            }
            assert!(
                Instant::now() < end,
                "{node}: announcer_dataplane_up is {up:?}\n{}",
                tb.log_tails()
            );
            std::thread::sleep(Duration::from_millis(500));
        }
    }
}

/// The agent Pods' (name, image) as the API has them, once every one runs `image` and the
/// DaemonSet's roll is over (`rollout status`).
fn wait_agents_on(tb: &Testbed, image: &str) -> Vec<String> {
    rollout_status(tb);
    let end = Instant::now() + T;
    loop {
        let out = kubectl(
            tb,
            &[
                "-n",
                NAMESPACE,
                "get",
                "pods",
                "-l",
                "app.kubernetes.io/component=agent",
                "-o",
                "json",
            ],
        );
        let v: Value = serde_json::from_str(&out).expect("JSON");
        let pods: Vec<(String, String, bool)> = v["items"]
            .as_array()
            .into_iter()
            .flatten()
            .map(|p| {
                let ready = p["status"]["conditions"]
                    .as_array()
                    .into_iter()
                    .flatten()
                    .any(|c| c["type"] == "Ready" && c["status"] == "True");
                (
                    p["metadata"]["name"].as_str().unwrap_or("").to_owned(),
                    p["spec"]["containers"][0]["image"]
                        .as_str()
                        .unwrap_or("")
                        .to_owned(),
                    ready && p["metadata"]["deletionTimestamp"].is_null(),
                )
            })
            .collect();
        if pods.len() == tb.nodes().len() && pods.iter().all(|(_, i, r)| i == image && *r) {
            return pods.into_iter().map(|(n, _, _)| n).collect();
        }
        assert!(
            Instant::now() < end,
            "agent Pods on {image}, all ready: {pods:?}\n{}",
            tb.log_tails()
        );
        std::thread::sleep(Duration::from_millis(500));
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn helm_install_runs_the_image_on_every_node_and_a_service_is_answered() {
    let tb = testbed("install-helm", None).await;
    helm_install(&tb);
    service_answered(&tb).await;
    agents_run_the_image(&tb);
    dataplanes_up(&tb);
    // The allocator's replicas too, as the image's non-root user.
    let allocators: Vec<_> = tb
        .pod_containers()
        .into_iter()
        .filter(|c| c.container == "allocator")
        .collect();
    assert_eq!(allocators.len(), 2, "{allocators:?}");
    for a in &allocators {
        let status = std::fs::read_to_string(format!("/proc/{}/status", a.pid)).expect("status");
        let uid = status
            .lines()
            .find_map(|l| l.strip_prefix("Uid:"))
            .expect("Uid line");
        assert!(
            uid.split_whitespace().all(|u| u == "65532"),
            "the allocator runs as 65532: {uid}"
        );
        let caps = status
            .lines()
            .find_map(|l| l.strip_prefix("CapEff:"))
            .expect("CapEff line");
        assert_eq!(
            caps.trim(),
            "0000000000000000",
            "the allocator has no capability"
        );
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn kubectl_apply_k_runs_the_image_on_every_node() {
    let tb = testbed("install-kustomize", None).await;
    // docs/install.md, "3. Apply".
    kubectl(&tb, &["apply", "-k", &deploy("")]);
    rollout_status(&tb);
    kubectl(&tb, &["-n", NAMESPACE, "get", "pods", "-o", "wide"]);
    agents_run_the_image(&tb);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_documented_uninstall_leaves_no_xdp_and_no_pin_on_any_node() {
    let tb = testbed("install-uninstall", None).await;
    helm_install(&tb);
    let vips = service_answered(&tb).await;
    // What the uninstall must remove is there: the program, its pins, the state.
    for node in tb.nodes() {
        assert!(
            tb.node_ns(&node).xdp_anywhere().is_some(),
            "{node} runs XDP"
        );
        assert!(
            tb.pod_bpffs_dir(&node).join("announcer").is_dir(),
            "{node}'s pins"
        );
        assert!(
            tb.pod_host_dir(&node).join("var/lib/announcer").is_dir(),
            "{node}'s state directory"
        );
    }

    // docs/install.md, "Install with Helm" → "Uninstall", then "Uninstalling" step 2 and 3.
    let helm = Helm::new(&tb);
    helm.run(&tb, &["uninstall", "announcer", "-n", NAMESPACE, "--wait"]);
    kubectl(&tb, &["delete", "namespace", NAMESPACE]);
    kubectl(&tb, &["apply", "-k", &deploy("uninstall")]);
    kubectl(
        &tb,
        &[
            "-n",
            "announcer-uninstall",
            "rollout",
            "status",
            "daemonset/announcer-cleanup",
            "--timeout=5m",
        ],
    );
    let cleanups: Vec<_> = tb
        .pod_containers()
        .into_iter()
        .filter(|c| c.namespace == "announcer-uninstall")
        .collect();
    assert_eq!(cleanups.len(), tb.nodes().len(), "a cleanup Pod per node");
    for c in &cleanups {
        eprintln!(
            "--- {} ({}):\n{}",
            c.pod,
            c.node,
            std::fs::read_to_string(
                c.log
                    .with_file_name(format!("announcer-uninstall_{}_cleanup.log", c.pod))
            )
            .unwrap_or_default()
        );
    }
    kubectl(&tb, &["delete", "-k", &deploy("uninstall")]);

    for node in tb.nodes() {
        assert_eq!(
            tb.node_ns(&node).xdp_anywhere(),
            None,
            "XDP still attached on {node}"
        );
        let left: Vec<_> = std::fs::read_dir(tb.pod_bpffs_dir(&node))
            .expect("the node's bpffs directory")
            .flatten()
            .map(|e| e.path())
            .collect();
        assert!(left.is_empty(), "pins left on {node}: {left:?}");
        let state = tb.pod_host_dir(&node).join("var/lib/announcer");
        assert!(!state.exists(), "state left on {node}: {}", state.display());
    }
    for vip in &vips {
        assert!(tb.arp_macs(*vip, Q).is_empty(), "{vip} still answered");
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_upgrade_to_a_differing_xdp_program_swaps_it_on_every_node_without_a_lost_probe() {
    let next = next_archive();
    let tb = testbed("upgrade-differs", Some(next)).await;
    let helm = helm_install(&tb);
    let vips = service_answered(&tb).await;
    let before = xdp_on_every_node(&tb);

    let prober = tb.start_prober(&vips, Duration::from_millis(20));
    helm_upgrade(&helm, &tb, &["--set", &format!("image.tag={NEXT_TAG}")]);
    wait_agents_on(&tb, &format!("announcer:{NEXT_TAG}"));
    dataplanes_up(&tb);
    // Past the grace (5 s): entries the old agents wrote have expired unless the new ones
    // refresh them, so the VIPs are answered by the new agents' data planes.
    std::thread::sleep(GRACE_AND_MORE);
    let timeline = prober.stop();
    for vip in &vips {
        for kind in [ProbeKind::Udp, ProbeKind::Tcp] {
            assert!(
                timeline.answered(*vip, kind) > 0,
                "no {kind:?} answer for {vip}"
            );
            assert_eq!(
                timeline.lost(*vip, kind),
                0,
                "{kind:?} probes of {vip} lost during the roll"
            );
            let (longest, answers) = timeline.longest_silence(*vip, kind);
            eprintln!(
                "upgrade roll: {vip} {kind:?}: {answers} answers, longest wait between two {:.0} ms (a probe every 20 ms)",
                longest.as_secs_f64() * 1e3
            );
        }
    }
    let after = program_ids(&tb);
    for (node, id) in &after {
        assert!(id.is_some(), "{node} runs XDP after the roll");
        assert_ne!(
            *id,
            before[node],
            "{node} still runs the old program {id:?}\n{}",
            tb.log_tails()
        );
    }
    agents_run_the_image(&tb);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_upgrade_with_an_identical_program_swaps_nothing() {
    let tb = testbed("upgrade-identical", None).await;
    let helm = helm_install(&tb);
    service_answered(&tb).await;
    let pods_before = wait_agents_on(&tb, IMAGE_REF);
    let before = xdp_on_every_node(&tb);

    // Only the Pod template changes: the DaemonSet rolls every agent.
    helm_upgrade(
        &helm,
        &tb,
        &["--set-string", "agent.podAnnotations.rolled=yes"],
    );
    let end = Instant::now() + T;
    let pods_after = loop {
        let pods = wait_agents_on(&tb, IMAGE_REF);
        if pods.iter().all(|p| !pods_before.contains(p)) {
            break pods;
        }
        assert!(Instant::now() < end, "the agents were not rolled: {pods:?}");
        std::thread::sleep(Duration::from_millis(500));
    };
    eprintln!("rolled {pods_before:?} -> {pods_after:?}");
    dataplanes_up(&tb);
    assert_eq!(
        program_ids(&tb),
        before,
        "the program ids changed though the program is the same\n{}",
        tb.log_tails()
    );
    agents_run_the_image(&tb);
}
