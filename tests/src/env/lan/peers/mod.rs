//! Real peers beside the agent: MetalLB (L2 mode) and kube-vip (ARP mode, one Lease per
//! Service), installed on the testbed's real control plane as their docs tell a user and run
//! as processes in the node namespaces, one per node, as their DaemonSets would run them.
//!
//! Why: the failover bench and the e2e tests compare the agent with what users run instead.
//! Imitations (the agent in a lease-per-service mode) answer "what would a Lease per Service
//! cost", not "what does kube-vip do": that needs kube-vip's own code, its ARP handling, its
//! client-go settings. Everything here is the upstream binaries built by `cargo xtask setup`
//! ([`METALLB_VERSION`], [`KUBE_VIP_VERSION`]).
//!
//! Each peer has its own `loadBalancerClass` and its own VIP range inside the testbed's
//! [`super::VIP_NET4`] (so the nodes accept its VIPs through their local routes, as kube-proxy
//! would, and the echo services answer the prober), and can share a testbed with the agent:
//! the agent ignores Services of other classes and its XDP program passes ARP for VIPs it
//! does not own.
//!
//! Processes are spawned like [`Testbed::spawn_in_node`] (parent-death SIGKILL, killed by
//! [`Testbed::crash`] of their node and when the testbed drops); logs go to the testbed's
//! directory (`<peer>-<node>.log`). Who announces a VIP is what the client sees: the MACs
//! that answer ARP for it ([`Peer::owners`]).
//!
//! Requires [`crate::env::ApiKind::Kube`]: both peers are Kubernetes controllers.

mod kube_vip;
mod metallb;

use std::{
    collections::BTreeMap,
    net::{IpAddr, Ipv4Addr},
    os::{fd::AsRawFd, unix::process::CommandExt},
    path::{Path, PathBuf},
    process::{Command, Stdio},
    time::{Duration, Instant},
};

use k8s_openapi::api::core::v1::Service;
use kube::{Api, api::PostParams};
use serde_json::json;

use super::{SERVICE_NAMESPACE, TCP_PORT, Testbed, UDP_PORT};
use crate::{
    env::kube::{Credentials, KubeControlPlane, kubeconfig_yaml, workloads},
    env::process::Guarded,
    netns::Netns,
};

pub use kube_vip::{KUBE_VIP_LB_CLASS, KUBE_VIP_VERSION, KubeVipTimings};
pub use metallb::{METALLB_LB_CLASS, METALLB_VERSION};

/// VIPs per peer range: indices `0..PEER_RANGE` of [`PeerKind::vip4`].
pub const PEER_RANGE: u32 = 4096;
/// How long a peer may take to announce a new Service.
const ANNOUNCE_TIMEOUT: Duration = Duration::from_secs(60);
/// The label that selects a peer Service's Pods (as the testbed's own Services do).
const INSTANCE_LABEL: &str = "app.kubernetes.io/instance";
/// How long the endpointslice controller may take to list a Service's Pods.
const ENDPOINTS_TIMEOUT: Duration = Duration::from_secs(60);

/// Which real system, with which settings.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum PeerKind {
    /// MetalLB [`METALLB_VERSION`], L2 mode, memberlist on, with its controller.
    MetalLb,
    /// kube-vip [`KUBE_VIP_VERSION`], ARP mode, per-Service election, with these timings.
    KubeVip(KubeVipTimings),
}

impl PeerKind {
    /// Its name in logs and file names.
    pub fn name(self) -> &'static str {
        match self {
            PeerKind::MetalLb => "metallb",
            PeerKind::KubeVip(_) => "kube-vip",
        }
    }

    /// The annotation through which a Service asks this peer for its address (MetalLB's own;
    /// kube-vip's, which its cloud provider sets).
    pub fn ip_annotation(self) -> &'static str {
        match self {
            PeerKind::MetalLb => "metallb.io/loadBalancerIPs",
            PeerKind::KubeVip(_) => "kube-vip.io/loadbalancerIPs",
        }
    }

    /// Its `loadBalancerClass`.
    pub fn lb_class(self) -> &'static str {
        match self {
            PeerKind::MetalLb => METALLB_LB_CLASS,
            PeerKind::KubeVip(_) => KUBE_VIP_LB_CLASS,
        }
    }

    /// First index of its range in [`super::vip4`]'s numbering: MetalLB 10.78.224.0/20,
    /// kube-vip 10.78.240.0/20 (the top of [`super::VIP_NET4`], above the bench's sets).
    fn base(self) -> u32 {
        match self {
            PeerKind::MetalLb => 0x6000,
            PeerKind::KubeVip(_) => 0x7000,
        }
    }

    /// The `k`-th VIP of its range (`k < PEER_RANGE`).
    pub fn vip4(self, k: u32) -> Ipv4Addr {
        assert!(
            k < PEER_RANGE,
            "{} has {PEER_RANGE} VIPs, not {k}",
            self.name()
        );
        super::vip4(self.base() + k)
    }

    /// Its VIP range as a CIDR (MetalLB's IPAddressPool).
    pub fn range(self) -> String {
        format!("{}/20", self.vip4(0))
    }

    /// Whether `ip` is in its range.
    pub fn owns(self, ip: IpAddr) -> bool {
        let IpAddr::V4(v4) = ip else { return false };
        let first = u32::from(self.vip4(0));
        (first..first + PEER_RANGE).contains(&u32::from(v4))
    }

    /// Settings in words, with the version (bench tables).
    pub fn settings(self) -> String {
        match self {
            PeerKind::MetalLb => format!(
                "MetalLB {METALLB_VERSION} L2, memberlist on, controller, defaults \
                 (memberlist: LAN profile)"
            ),
            PeerKind::KubeVip(t) => format!(
                "kube-vip {KUBE_VIP_VERSION} ARP, svc_election, lease {} s / renew {} s / \
                 retry {} s",
                t.lease_duration_s, t.renew_deadline_s, t.retry_period_s
            ),
        }
    }
}

/// One running process of a peer.
struct Proc {
    pid: u32,
}

/// A real peer installed on a testbed, with one process per node; see the module docs.
pub struct Peer {
    kind: PeerKind,
    /// Its files: kubeconfigs, HOMEs, secrets.
    dir: PathBuf,
    /// The testbed's log directory.
    log_dir: PathBuf,
    /// node → its process (held in the testbed's spawned list, so a crash kills it).
    procs: BTreeMap<String, Proc>,
    /// Per-kind state (MetalLB's controller).
    controller: Option<Guarded>,
}

impl Testbed {
    fn require_kube(&self, what: &str) -> &KubeControlPlane {
        self.kube.as_ref().unwrap_or_else(|| {
            panic!(
                "{what} needs the real control plane: start the testbed with \
                 TestbedConfig {{ api: ApiKind::Kube, .. }}"
            )
        })
    }

    /// Installs MetalLB ([`METALLB_VERSION`]) and starts its controller and a speaker on every
    /// node; see `metallb.rs` for what is installed and how it differs from the docs.
    pub fn start_metallb(&mut self) -> Peer {
        self.start_peer(PeerKind::MetalLb)
    }

    /// Installs kube-vip ([`KUBE_VIP_VERSION`]) and starts it on every node with `timings`.
    pub fn start_kube_vip(&mut self, timings: KubeVipTimings) -> Peer {
        self.start_peer(PeerKind::KubeVip(timings))
    }

    /// Installs `kind` and starts it on every node.
    pub fn start_peer(&mut self, kind: PeerKind) -> Peer {
        self.require_kube(kind.name());
        let dir = self.dir.join(format!("peer-{}", kind.name()));
        std::fs::create_dir_all(&dir).expect("peer directory");
        let mut peer = Peer {
            kind,
            dir,
            log_dir: self.dir.clone(),
            procs: BTreeMap::new(),
            controller: None,
        };
        match kind {
            PeerKind::MetalLb => metallb::install(self, &mut peer),
            PeerKind::KubeVip(_) => kube_vip::install(self, &peer),
        }
        for n in self.nodes() {
            peer.start(self, &n);
        }
        peer
    }
}

impl Peer {
    /// Which system.
    pub fn kind(&self) -> PeerKind {
        self.kind
    }

    fn log(&self, node: &str) -> PathBuf {
        self.log_dir
            .join(format!("{}-{node}.log", self.kind.name()))
    }

    /// Starts the peer's process on `node` (after a kill, a crash, a SIGTERM).
    pub fn start(&mut self, tb: &mut Testbed, node: &str) {
        assert!(
            !self.running(tb, node),
            "{} is still running on {node}",
            self.kind.name()
        );
        let cmd = match self.kind {
            PeerKind::MetalLb => metallb::speaker_command(tb, self, node),
            PeerKind::KubeVip(t) => kube_vip::command(self, node, t),
        };
        let pid = spawn_node_logged(tb, node, cmd, &self.log(node));
        self.procs.insert(node.to_owned(), Proc { pid });
    }

    /// SIGKILLs and restarts the process on `node`.
    pub fn restart(&mut self, tb: &mut Testbed, node: &str) {
        self.kill(tb, node);
        self.start(tb, node);
    }

    fn child<'a>(&self, tb: &'a Testbed, node: &str) -> Option<&'a Guarded> {
        let pid = self.procs.get(node)?.pid;
        tb.spawned.get(node)?.iter().find(|g| g.id() == pid)
    }

    /// Whether its process on `node` runs (not exited, not a zombie; a stopped one counts
    /// as running).
    pub fn running(&self, tb: &Testbed, node: &str) -> bool {
        self.child(tb, node).is_some_and(|g| {
            std::fs::read_to_string(format!("/proc/{}/stat", g.id()))
                .ok()
                .and_then(|s| s.rsplit_once(") ").map(|(_, r)| !r.starts_with('Z')))
                .unwrap_or(false)
        })
    }

    /// The pid of its process on `node`, if one was started and not reaped.
    pub fn pid(&self, tb: &Testbed, node: &str) -> Option<u32> {
        self.child(tb, node).map(|g| g.id())
    }

    /// Sends `signal` to its process on `node` (if any).
    pub fn signal(&self, tb: &Testbed, node: &str, signal: i32) {
        if let Some(g) = self.child(tb, node) {
            g.signal(signal);
        }
    }

    /// SIGKILLs its process on `node` and reaps it.
    pub fn kill(&mut self, tb: &mut Testbed, node: &str) {
        let Some(p) = self.procs.remove(node) else {
            return;
        };
        if let Some(list) = tb.spawned.get_mut(node) {
            // Dropping a Guarded SIGKILLs and reaps it.
            list.retain(|g| g.id() != p.pid);
        }
    }

    /// SIGTERM (a Pod deleted, a rolling update); returns at once.
    pub fn term(&self, tb: &Testbed, node: &str) {
        self.signal(tb, node, libc::SIGTERM);
    }

    /// SIGSTOP (a frozen process).
    pub fn freeze(&self, tb: &Testbed, node: &str) {
        self.signal(tb, node, libc::SIGSTOP);
    }

    /// SIGCONT after [`Self::freeze`].
    pub fn thaw(&self, tb: &Testbed, node: &str) {
        self.signal(tb, node, libc::SIGCONT);
    }

    /// Waits up to `timeout` for its process on `node` to exit (after [`Self::term`]);
    /// whether it did. The process is reaped then.
    pub fn wait_exit(&mut self, tb: &mut Testbed, node: &str, timeout: Duration) -> bool {
        let end = Instant::now() + timeout;
        while Instant::now() < end {
            if !self.running(tb, node) {
                self.kill(tb, node);
                return true;
            }
            std::thread::sleep(Duration::from_millis(20));
        }
        false
    }

    /// The last `lines` lines of its log on `node` (every run).
    pub fn log_tail(&self, node: &str, lines: usize) -> String {
        let text = std::fs::read_to_string(self.log(node)).unwrap_or_default();
        let all: Vec<&str> = text.lines().collect();
        all[all.len().saturating_sub(lines)..].join("\n")
    }

    /// The log tails of every node (and of MetalLB's controller).
    pub fn log_tails(&self, tb: &Testbed) -> String {
        let mut out: Vec<String> = tb
            .nodes()
            .iter()
            .map(|n| format!("--- {} {n}:\n{}", self.kind.name(), self.log_tail(n, 20)))
            .collect();
        if self.controller.is_some() {
            let text = std::fs::read_to_string(self.controller_log()).unwrap_or_default();
            let all: Vec<&str> = text.lines().collect();
            out.push(format!(
                "--- metallb controller:\n{}",
                all[all.len().saturating_sub(20)..].join("\n")
            ));
        }
        out.join("\n")
    }

    fn controller_log(&self) -> PathBuf {
        self.log_dir.join("metallb-controller.log")
    }

    /// Who announces each of `vips`: the nodes whose MACs answer ARP for it from the client
    /// (asked a few times in 300 ms, all VIPs at once).
    pub fn owners(&self, tb: &Testbed, vips: &[IpAddr]) -> BTreeMap<IpAddr, Vec<String>> {
        let answers = tb.resolve_all(vips, Duration::from_millis(300));
        vips.iter()
            .map(|v| {
                let macs = answers.get(v).cloned().unwrap_or_default();
                (*v, tb.names_of_macs(&macs))
            })
            .collect()
    }

    /// The nodes that have `vip` on `eth0` (kube-vip's leader adds it there; MetalLB never
    /// does).
    pub fn holders(&self, tb: &Testbed, vip: IpAddr) -> Vec<String> {
        tb.nodes()
            .into_iter()
            .filter(|n| {
                let text = tb.node_ns(n).ip(&["-o", "addr", "show", "dev", "eth0"]);
                text.split_whitespace()
                    .filter_map(|w| w.split('/').next()?.parse::<IpAddr>().ok())
                    .any(|a| a == vip)
            })
            .collect()
    }

    /// Waits up to `timeout` until exactly one node answers ARP for `vip` and the client's
    /// UDP probe to `vip` is answered by that node; returns it.
    pub fn wait_announced(&self, tb: &Testbed, vip: IpAddr, timeout: Duration) -> String {
        let end = Instant::now() + timeout;
        loop {
            let owners = self.owners(tb, &[vip]).remove(&vip).unwrap_or_default();
            if let [one] = owners.as_slice()
                && tb.ask(vip, Duration::from_millis(500)).as_ref() == Some(one)
            {
                return one.clone();
            }
            assert!(
                Instant::now() < end,
                "{} did not announce {vip} from one node within {timeout:?} (ARP answers: \
                 {owners:?})\n{}",
                self.kind.name(),
                self.log_tails(tb)
            );
            std::thread::sleep(Duration::from_millis(200));
        }
    }

    /// Creates LoadBalancer Service `default/<name>` of this peer's class asking for `vip`
    /// (MetalLB: annotation `metallb.io/loadBalancerIPs`, and its controller assigns it;
    /// kube-vip: annotation `kube-vip.io/loadbalancerIPs`, as kube-vip's cloud provider
    /// sets it), UDP [`UDP_PORT`] and TCP [`TCP_PORT`], with one running, ready Pod per node of
    /// `endpoints_on`; returns once the endpointslice controller lists them (and, for MetalLB,
    /// once the controller assigned `vip`). [`Testbed::delete_service`] deletes it.
    pub fn add_service(
        &self,
        tb: &Testbed,
        name: &str,
        vip: IpAddr,
        etp_local: bool,
        endpoints_on: &[&str],
    ) {
        assert!(
            self.kind.owns(vip),
            "{vip} is outside {}'s range {}",
            self.kind.name(),
            self.kind.range()
        );
        let annotation = self.kind.ip_annotation();
        let svc: Service = serde_json::from_value(json!({
            "metadata": {
                "name": name,
                "namespace": SERVICE_NAMESPACE,
                "annotations": {annotation: vip.to_string()},
            },
            "spec": {
                "type": "LoadBalancer",
                "loadBalancerClass": self.kind.lb_class(),
                "externalTrafficPolicy": if etp_local { "Local" } else { "Cluster" },
                "selector": {INSTANCE_LABEL: name},
                "ports": [
                    {"name": "echo", "port": UDP_PORT, "protocol": "UDP"},
                    {"name": "accept", "port": TCP_PORT, "protocol": "TCP"},
                ],
            },
        }))
        .expect("a valid Service");
        let pods: Vec<(String, String, IpAddr)> = endpoints_on
            .iter()
            .map(|n| (format!("{name}-{n}"), n.to_string(), tb.node_ip4(n).into()))
            .collect();
        let want: Vec<String> = endpoints_on.iter().map(|n| n.to_string()).collect();
        let wait_ip = (self.kind == PeerKind::MetalLb).then_some(vip);
        let result = tb.block_on(create_service(
            tb.kube(),
            svc,
            name.to_owned(),
            pods,
            want,
            wait_ip,
        ));
        if let Err(e) = result {
            panic!("{e}\n{}", self.log_tails(tb));
        }
    }

    /// Removes this peer's addresses from `node`'s `eth0` (kube-vip's leftovers after a
    /// SIGKILL: it puts the VIP there itself and a killed process cannot take it away).
    pub fn remove_leftover_vips(&self, tb: &Testbed, node: &str) {
        let ns = tb.node_ns(node);
        let text = ns.ip(&["-o", "addr", "show", "dev", "eth0"]);
        for a in text
            .split_whitespace()
            .filter_map(|w| w.split('/').next()?.parse::<IpAddr>().ok())
            .filter(|a| self.kind.owns(*a))
        {
            ns.ip(&["addr", "del", &format!("{a}/32"), "dev", "eth0"]);
        }
    }
}

/// The work of [`Peer::add_service`] on the testbed's runtime: the Service, its Pods, its
/// endpoints, and (`wait_ip`) the address MetalLB's controller assigns.
async fn create_service(
    client: kube::Client,
    svc: Service,
    name: String,
    pods: Vec<(String, String, IpAddr)>,
    want: Vec<String>,
    wait_ip: Option<IpAddr>,
) -> Result<(), String> {
    let services = Api::<Service>::namespaced(client.clone(), SERVICE_NAMESPACE);
    services
        .create(&PostParams::default(), &svc)
        .await
        .map_err(|e| format!("create Service {name}: {e}"))?;
    for (pod, node, ip) in &pods {
        workloads::create_running_pod(
            client.clone(),
            SERVICE_NAMESPACE,
            pod,
            &[(INSTANCE_LABEL, name.as_str())],
            node,
            *ip,
        )
        .await
        .map_err(|e| e.to_string())?;
    }
    let want: Vec<&str> = want.iter().map(String::as_str).collect();
    workloads::wait_ready_endpoints(
        client.clone(),
        SERVICE_NAMESPACE,
        &name,
        &want,
        ENDPOINTS_TIMEOUT,
    )
    .await
    .map_err(|e| e.to_string())?;
    let Some(vip) = wait_ip else { return Ok(()) };
    let end = Instant::now() + ANNOUNCE_TIMEOUT;
    loop {
        let s = services.get(&name).await.map_err(|e| e.to_string())?;
        let ips: Vec<String> = s
            .status
            .and_then(|s| s.load_balancer?.ingress)
            .into_iter()
            .flatten()
            .filter_map(|i| i.ip)
            .collect();
        if ips == [vip.to_string()] {
            return Ok(());
        }
        if Instant::now() > end {
            return Err(format!(
                "MetalLB's controller did not assign {vip} to {name} within \
                 {ANNOUNCE_TIMEOUT:?} (ingress {ips:?})"
            ));
        }
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
}

impl Drop for Peer {
    fn drop(&mut self) {
        if let Some(mut c) = self.controller.take() {
            c.signal(libc::SIGCONT);
            c.kill();
        }
    }
}

/// Opens (appending) a log file and writes a header line.
fn open_log(path: &Path, header: &str) -> std::fs::File {
    use std::io::Write;
    let mut f = std::fs::OpenOptions::new()
        .create(true)
        .append(true)
        .open(path)
        .unwrap_or_else(|e| panic!("open {}: {e}", path.display()));
    let _ = writeln!(f, "===== testbed: {header}");
    f
}

/// Spawns `cmd` in `node` through [`Testbed::spawn_in_node`] with stdout and stderr to `log`;
/// its pid.
fn spawn_node_logged(tb: &mut Testbed, node: &str, mut cmd: Command, log: &Path) -> u32 {
    let out = open_log(log, &format!("starting {cmd:?}"));
    cmd.stdin(Stdio::null())
        .stdout(out.try_clone().expect("dup log"))
        .stderr(out);
    tb.spawn_in_node(node, cmd);
    tb.spawned
        .get(node)
        .and_then(|v| v.last())
        .map(|g| g.id())
        .expect("the child just spawned")
}

/// Spawns `cmd` inside `ns` (entered between fork and exec) with a parent-death SIGKILL and
/// stdout and stderr to `log`.
fn spawn_in_ns_logged(ns: &Netns, mut cmd: Command, log: &Path) -> Guarded {
    let out = open_log(log, &format!("starting {cmd:?}"));
    cmd.stdin(Stdio::null())
        .stdout(out.try_clone().expect("dup log"))
        .stderr(out);
    let file = ns.open();
    let fd = file.as_raw_fd();
    // SAFETY: setns is an async-signal-safe syscall; `file` (moved into the closure) keeps
    // `fd` open until the command is dropped.
    unsafe {
        cmd.pre_exec(move || {
            let _keep_open = &file;
            if libc::setns(fd, libc::CLONE_NEWNET) != 0 {
                return Err(std::io::Error::last_os_error());
            }
            Ok(())
        });
    }
    Guarded::spawn(&mut cmd).unwrap_or_else(|e| panic!("spawn {:?}: {e}", cmd.get_program()))
}

/// A command with a clean environment (PATH only, plus `envs`), so no kubeconfig of the
/// test process leaks in.
fn clean_command(program: &Path, envs: &[(&str, String)]) -> Command {
    let mut cmd = Command::new(program);
    cmd.env_clear()
        .env("PATH", std::env::var_os("PATH").unwrap_or_default());
    for (k, v) in envs {
        cmd.env(k, v);
    }
    cmd
}

/// A token of ServiceAccount `ns/account` (`kubectl create token`, 24 h), written as a
/// kubeconfig for the relay URL (what the node namespaces reach) to `path`.
pub(super) fn write_sa_kubeconfig(tb: &Testbed, ns: &str, account: &str, path: &Path) {
    let cp = tb.require_kube("a ServiceAccount kubeconfig");
    let token = cp
        .kubectl(&["create", "token", account, "-n", ns, "--duration=24h"])
        .unwrap_or_else(|e| panic!("a token for {ns}/{account}: {e}"));
    std::fs::write(
        path,
        kubeconfig_yaml(
            &tb.agent_url,
            cp.ca_cert(),
            &format!("system:serviceaccount:{ns}:{account}"),
            &Credentials::Token(token.trim().to_owned()),
        ),
    )
    .expect("write kubeconfig");
}

/// `kubectl apply -f` of `yaml` (written to `name` in the peer's directory).
fn apply(tb: &Testbed, peer: &Peer, name: &str, yaml: &str) {
    let path = peer.dir.join(name);
    std::fs::write(&path, yaml).expect("write manifest");
    tb.require_kube("kubectl apply")
        .kubectl(&["apply", "-f", path.to_str().expect("utf-8 path")])
        .unwrap_or_else(|e| panic!("apply {name}: {e}"));
}
