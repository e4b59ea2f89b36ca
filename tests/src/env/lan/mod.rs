//! A multi-node L2 testbed: N node namespaces and a client on one bridge, an API server (the
//! in-process one, or a real kube-apiserver with its controllers: [`TestbedConfig::api`]), and
//! the real `announcer agent` with its real XDP data plane on every node.
//!
//! Why: failover is a property of the whole LAN — who answers ARP/NDP for a VIP, whether the
//! client's packets reach a node that accepts them, how long that breaks when a node dies. Only
//! real processes on real (virtual) links answer that; the end-to-end tests, the failover bench
//! and the demo all build on this one topology:
//!
//! ```text
//!   node-a eth0 02:78:00:00:00:01 10.78.0.1/16 fd78::1/64 ─┐
//!   node-b eth0 02:78:00:00:00:02 10.78.0.2/16 fd78::2/64 ─┤ br0 10.78.0.254 fd78::fe
//!   ...                                                     │ (bridge namespace; the
//!   client eth0 02:78:00:00:00:fa 10.78.0.250/16 fd78::fa ─┘  API server listens here)
//! ```
//!
//! Options added after [`Testbed::start`], before the agents start:
//!
//! * [`Testbed::add_second_nic`]: every node and the client get `eth1` on a second bridge
//!   `br1`, subnet 10.79.0.0/16 and fd79::/64 (MACs `02:79:00:00:00:..`); VIPs from
//!   [`nic2_vip4`]/[`nic2_vip6`] are announced there, heartbeats stay on `eth0`.
//! * [`Testbed::set_clock_offset`]: one node's agent runs with its wall clock offset
//!   (libfaketime; see `clock.rs`).
//! * [`Testbed::add_hostile_host`]: a namespace on `br0` (`02:78:00:00:00:fb`, 10.78.0.251,
//!   fd78::fb) that forges ARP/NDP answers and floods the segment (see `hostile.rs`).
//!
//! **How VIP traffic is accepted on a node.** The VIPs are not configured on any interface.
//! Each node has local routes `local 10.78.128.0/17 dev lo table local` and
//! `local fd78::8000:0/113 dev lo table local`, so the kernel accepts packets to any VIP as its
//! own — exactly what kube-proxy achieves with the addresses on its `kube-ipvs0` dummy
//! interface (or its iptables DNAT rules) on every node of a real cluster. Who *gets* the
//! packets is then decided solely by layer 2: the node whose MAC the client learnt for the VIP,
//! i.e. the node whose agent answers ARP/NDP. The echo services bind the wildcard address, so
//! whichever node receives a probe answers it with its name.
//!
//! **Why `arp_ignore=1` and `arp_announce=2`.** With a local route, Linux would otherwise treat
//! the VIP as one of its addresses for ARP: `arp_ignore=0` answers ARP requests for any local
//! address on any interface, so *every* node would answer for every VIP and the election would
//! be invisible. `arp_ignore=1` answers only for addresses configured on the receiving
//! interface (the VIPs never are), so only the agent's XDP program answers. `arp_announce=2`
//! makes the kernel always use its interface address (never a VIP it may be sending from) as
//! the sender IP of its own ARP requests, so a node does not poison neighbours' caches for a
//! VIP it does not own. IPv6 needs no equivalent: the kernel answers Neighbor Solicitations only
//! for configured addresses (RFC 4861 §7.2.3), never for a local route.
//!
//! **Agents from Pods.** [`Testbed::start_from_pods`] starts the real control plane without
//! `deploy/` and without harness agents: the test installs the manifests (helm, `kubectl apply
//! -k`) and the stand-in kubelets run the DaemonSet's and Deployment's Pods from the image
//! archives the test names (`crate::env::kube::pods`), each node's Pods in its namespace, with
//! its `/sys/fs/bpf` a directory of its own on bpffs ([`Testbed::pod_bpffs_dir`]). The
//! accessors that read the agents (`state`, `ownership`, `wait_owner`, `metrics`) read every
//! node's then.
//!
//! Cleanup: dropping a [`Testbed`] (also while a test panics) kills the agents and every
//! process spawned in a node, stops the echo threads and the API server, removes the pin
//! directories and deletes the namespaces. Agent processes also get `PR_SET_PDEATHSIG(SIGKILL)`,
//! and [`crate::netns::sweep_stale`] removes what a killed test process left behind (its
//! namespaces and its `/sys/fs/bpf/anntest-<pid>-*` pin roots). Binaries call
//! [`install_ctrlc_cleanup`] so Ctrl-C cleans up too.
//!
//! All calls are synchronous except the few that talk to the API server (`start` and the
//! Service helpers). The API server runs on a runtime of its own, so blocking calls such as
//! [`Testbed::wait_for`] never starve it, whatever runtime the caller uses. Agents are spawned
//! with a parent-death signal, which Linux ties to the spawning *thread*: call the agent methods
//! from a thread that lives as long as the testbed (the test's own thread).

mod agents;
mod clock;
pub mod datapath;
mod echo;
mod hostile;
mod net;
mod observe;
mod peers;
mod prober;
mod resolve;
mod services;
mod timeline;
mod withdrawers;

use std::{
    collections::{BTreeMap, BTreeSet},
    net::{IpAddr, Ipv4Addr, Ipv6Addr},
    path::PathBuf,
    sync::Mutex,
    sync::atomic::{AtomicBool, AtomicU32, Ordering},
    time::{Duration, Instant},
};

use serde_json::Value;

use crate::{
    apiserver::{ApiServerHandle, Fault, OutageMode},
    env::process::Guarded,
    env::{ApiKind, kube::KubeControlPlane},
    netns::Netns,
};

pub use agents::AGENT_HTTP_PORT;
pub use clock::faketime_library;
pub use echo::{TCP_PORT, UDP_PORT};
pub use hostile::{
    FloodKind, FloodStats, HEARTBEAT_PORT, HOSTILE_MAC, HOSTILE_V4, HOSTILE_V6, MAX_FLOOD,
    MAX_FLOOD_FRAMES, MAX_SPOOF, Spoofer,
};
pub use net::{IFACE2, NIC2_PREFIX_V4, NIC2_PREFIX_V6, NIC2_VIP_NET4, NIC2_VIP_NET6};
pub use observe::metric_sum;
pub use peers::{
    KUBE_VIP_LB_CLASS, KUBE_VIP_VERSION, KubeVipTimings, METALLB_LB_CLASS, METALLB_VERSION,
    PEER_RANGE, Peer, PeerKind,
};
pub use prober::{DEFAULT_INTERVAL, PROBE_TIMEOUT, Prober};
pub use resolve::{Answers, FirstAnswers, claim, on_second_nic};
pub use timeline::{Mark, Outage, ProbeKind, Sample, Timeline};
pub use withdrawers::{OPT_IN_LABEL, WITHDRAWN_REASON, opt_in, withdrawn_pods};

/// The namespace of the testbed's Services.
pub const SERVICE_NAMESPACE: &str = "default";
/// The `loadBalancerClass` of the testbed's Services (the agent's default).
pub const LB_CLASS: &str = "announcer.dev/l2";
/// Bridge address (IPv4); the agents' API server listens here.
pub const BRIDGE_V4: Ipv4Addr = Ipv4Addr::new(10, 78, 0, 254);
/// Bridge address (IPv6).
pub const BRIDGE_V6: Ipv6Addr = Ipv6Addr::new(0xfd78, 0, 0, 0, 0, 0, 0, 0xfe);
/// The API server's port on [`BRIDGE_V4`].
pub const API_PORT: u16 = 6443;
/// Client address (IPv4).
pub const CLIENT_V4: Ipv4Addr = Ipv4Addr::new(10, 78, 0, 250);
/// Client address (IPv6).
pub const CLIENT_V6: Ipv6Addr = Ipv6Addr::new(0xfd78, 0, 0, 0, 0, 0, 0, 0xfa);
/// Client MAC.
pub const CLIENT_MAC: [u8; 6] = [0x02, 0x78, 0, 0, 0, 0xfa];
/// Interface name of the node and client ends.
pub const IFACE: &str = "eth0";
/// Prefix length of the IPv4 LAN 10.78.0.0/16.
pub const PREFIX_V4: u8 = 16;
/// Prefix length of the IPv6 LAN fd78::/64.
pub const PREFIX_V6: u8 = 64;
/// The VIP range accepted by every node (IPv4): 10.78.128.0/17.
pub const VIP_NET4: &str = "10.78.128.0/17";
/// The VIP range accepted by every node (IPv6): fd78::8000:0/113.
pub const VIP_NET6: &str = "fd78::8000:0/113";
/// How long [`Testbed::wait_owner`] wants the same single owner before it believes it.
pub const SETTLE: Duration = Duration::from_secs(1);
/// The most nodes a testbed can have (names `node-a` ..= `node-z`).
pub const MAX_NODES: usize = 26;

/// The `k`-th IPv4 VIP, `10.78.128.0 + k` (`k < 32768`).
pub fn vip4(k: u32) -> Ipv4Addr {
    assert!(k < 1 << 15, "vip4({k}) is outside {VIP_NET4}");
    Ipv4Addr::from(u32::from(Ipv4Addr::new(10, 78, 128, 0)) + k)
}

/// The `k`-th IPv6 VIP, `fd78::8000:0 + k` (`k < 32768`).
pub fn vip6(k: u32) -> Ipv6Addr {
    assert!(k < 1 << 15, "vip6({k}) is outside {VIP_NET6}");
    Ipv6Addr::from(u128::from(Ipv6Addr::new(0xfd78, 0, 0, 0, 0, 0, 0x8000, 0)) + u128::from(k))
}

/// Name of node `i`: `node-a`, `node-b`, ...
pub fn node_name(i: usize) -> String {
    assert!(i < MAX_NODES, "at most {MAX_NODES} nodes");
    format!("node-{}", char::from(b'a' + i as u8))
}

/// IPv4 address of node `i`: `10.78.0.(i+1)`.
pub fn node_v4(i: usize) -> Ipv4Addr {
    Ipv4Addr::new(10, 78, 0, i as u8 + 1)
}

/// IPv6 address of node `i`: `fd78::(i+1)`.
pub fn node_v6(i: usize) -> Ipv6Addr {
    Ipv6Addr::new(0xfd78, 0, 0, 0, 0, 0, 0, i as u16 + 1)
}

/// MAC of node `i`: `02:78:00:00:00:(i+1)`.
pub fn node_mac_of(i: usize) -> [u8; 6] {
    [0x02, 0x78, 0, 0, 0, i as u8 + 1]
}

/// The `k`-th IPv4 VIP of the second NIC's subnet, `10.79.128.0 + k` (`k < 32768`); see
/// [`Testbed::add_second_nic`].
pub fn nic2_vip4(k: u32) -> Ipv4Addr {
    assert!(k < 1 << 15, "nic2_vip4({k}) is outside {NIC2_VIP_NET4}");
    Ipv4Addr::from(u32::from(Ipv4Addr::new(10, 79, 128, 0)) + k)
}

/// The `k`-th IPv6 VIP of the second NIC's subnet, `fd79::8000:0 + k` (`k < 32768`).
pub fn nic2_vip6(k: u32) -> Ipv6Addr {
    assert!(k < 1 << 15, "nic2_vip6({k}) is outside {NIC2_VIP_NET6}");
    Ipv6Addr::from(u128::from(Ipv6Addr::new(0xfd79, 0, 0, 0, 0, 0, 0x8000, 0)) + u128::from(k))
}

/// IPv4 address of node `i` on the second NIC: `10.79.0.(i+1)`.
pub fn node2_v4(i: usize) -> Ipv4Addr {
    Ipv4Addr::new(10, 79, 0, i as u8 + 1)
}

/// IPv6 address of node `i` on the second NIC: `fd79::(i+1)`.
pub fn node2_v6(i: usize) -> Ipv6Addr {
    Ipv6Addr::new(0xfd79, 0, 0, 0, 0, 0, 0, i as u16 + 1)
}

/// MAC of node `i`'s second NIC: `02:79:00:00:00:(i+1)`.
pub fn node2_mac_of(i: usize) -> [u8; 6] {
    [0x02, 0x79, 0, 0, 0, i as u8 + 1]
}

/// Client address on the second NIC's bridge (IPv4).
pub const CLIENT2_V4: Ipv4Addr = Ipv4Addr::new(10, 79, 0, 250);
/// Client address on the second NIC's bridge (IPv6).
pub const CLIENT2_V6: Ipv6Addr = Ipv6Addr::new(0xfd79, 0, 0, 0, 0, 0, 0, 0xfa);
/// Client MAC on the second NIC's bridge.
pub const CLIENT2_MAC: [u8; 6] = [0x02, 0x79, 0, 0, 0, 0xfa];

/// What to build.
#[derive(Clone, Debug)]
pub struct TestbedConfig {
    /// Number of nodes (1..=26; default 3).
    pub nodes: usize,
    /// Native-mode XDP on the nodes' `eth0` (an XDP_PASS-only program then goes on the bridge
    /// side of each node veth, without which native XDP_TX on a veth is dropped). Default:
    /// generic mode.
    pub native_xdp: bool,
    /// Makes namespace names and the log directory readable (uniqueness comes from the pid and
    /// a counter): use the test's name.
    pub tag: String,
    /// The API server: the in-repo one (default; fault hooks) or a real control plane
    /// (`deploy/` applied; each agent with a token bound to its node's DaemonSet Pod).
    pub api: ApiKind,
}

impl Default for TestbedConfig {
    fn default() -> Self {
        Self {
            nodes: 3,
            native_xdp: false,
            tag: "tb".into(),
            api: ApiKind::InRepo,
        }
    }
}

/// One node: its namespace and addresses.
struct Node {
    name: String,
    ns: Netns,
    v4: Ipv4Addr,
    v6: Ipv6Addr,
    mac: [u8; 6],
    /// MAC of `eth1` ([`Testbed::add_second_nic`]).
    mac2: [u8; 6],
}

/// The running testbed; see the module docs.
pub struct Testbed {
    cfg: TestbedConfig,
    /// Logs and kubeconfigs.
    dir: PathBuf,
    /// `/sys/fs/bpf/anntest-<pid>-tb<n>`: one pin root per node below it.
    pin_root: PathBuf,
    agents: BTreeMap<String, agents::Agent>,
    spawned: BTreeMap<String, Vec<Guarded>>,
    partitions: Mutex<BTreeSet<(String, String)>>,
    /// Per-node wall-clock offsets for the agents (libfaketime `FAKETIME` values).
    clock_offsets: BTreeMap<String, String>,
    /// Whether [`Self::add_second_nic`] ran.
    second_nic: bool,
    echo: echo::EchoServers,
    admin: kube::Client,
    api: Option<ApiServerHandle>,
    /// The real control plane ([`TestbedConfig::api`]), started on `rt`.
    kube: Option<KubeControlPlane>,
    /// The API server's URL as the agents reach it.
    agent_url: String,
    rt: Option<tokio::runtime::Runtime>,
    /// The hostile host ([`Self::add_hostile_host`]).
    hostile: Option<Netns>,
    /// The agents are the Pods of the installed manifests ([`Self::start_from_pods`]).
    from_pods: bool,
    nodes: Vec<Node>,
    client: Netns,
    bridge: Netns,
}

static TESTBEDS: AtomicU32 = AtomicU32::new(0);

impl Testbed {
    /// Builds the topology, starts the echo services and the API server (with the Nodes —
    /// Ready, InternalIP — and the heartbeat Secret). No agents yet: see
    /// [`Self::start_agents`].
    pub async fn start(cfg: TestbedConfig) -> Testbed {
        Self::start_with(cfg, true).await
    }

    /// Like [`Self::start`] on the real control plane (`cfg.api` must be [`ApiKind::Kube`]),
    /// but `deploy/` is not applied and the harness starts no agent: the stand-in kubelets run
    /// the Pods of whatever the test installs (helm, `kubectl apply -k`) from `images` (see the
    /// module docs). The nodes' native-mode XDP needs [`TestbedConfig::native_xdp`] (the
    /// agents' `xdpMode: auto` picks native on a veth).
    pub async fn start_from_pods(
        cfg: TestbedConfig,
        images: crate::env::kube::pods::ImageRegistry,
    ) -> Testbed {
        assert_eq!(
            cfg.api,
            ApiKind::Kube,
            "Pods run on the real control plane only"
        );
        let mut tb = Self::start_with(cfg, false).await;
        tb.from_pods = true;
        let cp = tb.kube.as_ref().expect("a real control plane");
        let nodes = tb
            .nodes
            .iter()
            .map(|n| crate::env::kube::pods::PodNode {
                name: n.name.clone(),
                netns: n.ns.path(),
                ip: n.v4.into(),
            })
            .collect();
        let runner = crate::env::kube::pods::PodRunnerConfig {
            images,
            dir: tb.dir.join("kubelet"),
            bpffs: tb.pin_root.join("pods"),
            api: std::net::SocketAddr::from((BRIDGE_V4, API_PORT)),
            ca_cert: cp.ca_cert().to_owned(),
            kubeconfig: cp.kubeconfig().to_owned(),
        };
        cp.kubelets()
            .run_pods(runner, nodes)
            .unwrap_or_else(|e| panic!("the stand-in kubelets run Pods: {e}"));
        tb
    }

    async fn start_with(cfg: TestbedConfig, apply_deploy: bool) -> Testbed {
        crate::netns::require_root();
        assert!(
            (1..=MAX_NODES).contains(&cfg.nodes),
            "1..={MAX_NODES} nodes, not {}",
            cfg.nodes
        );
        let n = TESTBEDS.fetch_add(1, Ordering::Relaxed);
        let pid = std::process::id();
        let topo = net::build(&cfg);
        let dir = std::env::temp_dir().join(format!("anntb-{pid}-{n}-{}", cfg.tag));
        let _ = std::fs::remove_dir_all(&dir);
        std::fs::create_dir_all(&dir).expect("testbed log directory");
        let pin_root = PathBuf::from(format!("/sys/fs/bpf/anntest-{pid}-tb{n}"));
        let echo = echo::EchoServers::start(topo.nodes.iter().map(|n| (n.name.as_str(), &n.ns)));
        let rt = tokio::runtime::Builder::new_multi_thread()
            .worker_threads(1)
            .thread_name("testbed-apiserver")
            .enable_all()
            .build()
            .expect("API server runtime");
        let (api, kube, admin, agent_url) = match cfg.api {
            ApiKind::InRepo => {
                let api = services::start_api(&rt, &topo.bridge, &topo.nodes).await;
                let admin = api.client("admin").await.expect("admin client");
                (Some(api), None, admin, services::agent_url())
            }
            ApiKind::Kube => {
                let (cp, url) =
                    services::start_kube(&rt, &topo.bridge, &topo.nodes, &cfg.tag, apply_deploy)
                        .await;
                let admin = cp.client();
                (None, Some(cp), admin, url)
            }
        };
        let tb = Testbed {
            cfg,
            dir,
            pin_root,
            agents: BTreeMap::new(),
            spawned: BTreeMap::new(),
            partitions: Mutex::default(),
            clock_offsets: BTreeMap::new(),
            second_nic: false,
            echo,
            admin,
            api,
            kube,
            agent_url,
            rt: Some(rt),
            hostile: None,
            from_pods: false,
            nodes: topo.nodes,
            client: topo.client,
            bridge: topo.bridge,
        };
        if tb.cfg.native_xdp {
            net::attach_bridge_pass(&tb);
        }
        tb
    }

    /// Same as the free function [`install_ctrlc_cleanup`].
    pub fn install_ctrlc_cleanup() {
        install_ctrlc_cleanup();
    }

    /// The configuration it was built with.
    pub fn config(&self) -> &TestbedConfig {
        &self.cfg
    }

    /// Node names: `["node-a", "node-b", ...]`.
    pub fn nodes(&self) -> Vec<String> {
        self.nodes.iter().map(|n| n.name.clone()).collect()
    }

    fn node(&self, node: &str) -> &Node {
        self.nodes
            .iter()
            .find(|n| n.name == node)
            .unwrap_or_else(|| panic!("no node {node:?} in this testbed"))
    }

    /// Index of `node` (0 for `node-a`).
    pub fn node_index(&self, node: &str) -> usize {
        self.nodes
            .iter()
            .position(|n| n.name == node)
            .unwrap_or_else(|| panic!("no node {node:?} in this testbed"))
    }

    /// The node's IPv4 address (its InternalIP).
    pub fn node_ip4(&self, node: &str) -> Ipv4Addr {
        self.node(node).v4
    }

    /// The node's IPv6 address.
    pub fn node_ip6(&self, node: &str) -> Ipv6Addr {
        self.node(node).v6
    }

    /// The MAC of the node's `eth0`.
    pub fn node_mac(&self, node: &str) -> [u8; 6] {
        self.node(node).mac
    }

    /// The MAC of the node's `eth1` ([`Self::add_second_nic`]).
    pub fn node_mac2(&self, node: &str) -> [u8; 6] {
        assert!(self.second_nic, "no second NIC: call add_second_nic first");
        self.node(node).mac2
    }

    /// The node whose `eth0` (or, with [`Self::add_second_nic`], `eth1`) has this MAC.
    pub fn node_by_mac(&self, mac: [u8; 6]) -> Option<String> {
        self.nodes
            .iter()
            .find(|n| n.mac == mac || (self.second_nic && n.mac2 == mac))
            .map(|n| n.name.clone())
    }

    /// The client namespace.
    pub fn client(&self) -> &Netns {
        &self.client
    }

    /// The node's namespace.
    pub fn node_ns(&self, node: &str) -> &Netns {
        &self.node(node).ns
    }

    /// The bridge namespace.
    pub fn bridge_ns(&self) -> &Netns {
        &self.bridge
    }

    /// The in-repo API server (fault hooks, request counts). Panics on a real control
    /// plane: a test that needs these runs on the in-repo server only.
    pub fn api(&self) -> &ApiServerHandle {
        self.api
            .as_ref()
            .expect("fault hooks and request counts are the in-repo API server's")
    }

    /// The real control plane, if the testbed runs on one.
    pub fn kube_control_plane(&self) -> Option<&KubeControlPlane> {
        self.kube.as_ref()
    }

    /// The real control plane, mutably (to restart kube-apiserver), if the testbed runs on
    /// one.
    pub fn kube_control_plane_mut(&mut self) -> Option<&mut KubeControlPlane> {
        self.kube.as_mut()
    }

    /// Runs `f` on the testbed's runtime (where the real control plane's clients live) and
    /// waits for it; callable from sync code and from inside another runtime.
    pub fn block_on<T: Send + 'static>(
        &self,
        f: impl std::future::Future<Output = T> + Send + 'static,
    ) -> T {
        let handle = self.rt.as_ref().expect("runtime until drop").spawn(f);
        futures::executor::block_on(handle).expect("testbed task")
    }

    /// Starts `f` on the testbed's runtime and returns at once; `block_on` the handle to wait.
    pub fn spawn<T: Send + 'static>(
        &self,
        f: impl std::future::Future<Output = T> + Send + 'static,
    ) -> tokio::task::JoinHandle<T> {
        self.rt.as_ref().expect("runtime until drop").spawn(f)
    }

    /// An admin `kube::Client` (token `admin`, on 127.0.0.1 of the test process).
    pub fn kube(&self) -> kube::Client {
        self.admin.clone()
    }

    /// Directory of the agents' logs and kubeconfigs (kept after a panic).
    pub fn dir(&self) -> &std::path::Path {
        &self.dir
    }

    /// `GET /state` of the node's agent (inside its namespace), if it answers.
    pub fn state(&self, node: &str) -> Option<Value> {
        self.node_ns(node)
            .enter(|| crate::env::cluster::state_at(AGENT_HTTP_PORT))
    }

    /// The nodes whose agent's `/state` lists `vip` as owned.
    pub fn owners(&self, vip: IpAddr) -> Vec<String> {
        self.ownership()
            .into_iter()
            .filter(|(_, owned)| owned.contains(&vip))
            .map(|(n, _)| n)
            .collect()
    }

    /// For every node whose agent answers `/state`: the VIPs it owns.
    pub fn ownership(&self) -> BTreeMap<String, Vec<IpAddr>> {
        self.agent_nodes()
            .iter()
            .filter_map(|n| Some((n.clone(), crate::env::cluster::owned_vips(&self.state(n)?))))
            .collect()
    }

    /// The nodes with an agent: those the harness started one on, or (agents from Pods)
    /// every node.
    fn agent_nodes(&self) -> Vec<String> {
        if self.from_pods {
            self.nodes()
        } else {
            self.agents.keys().cloned().collect()
        }
    }

    /// Every container the stand-in kubelets run now ([`Self::start_from_pods`]; empty
    /// otherwise).
    pub fn pod_containers(&self) -> Vec<crate::env::kube::pods::ContainerInfo> {
        self.kube
            .as_ref()
            .and_then(|cp| cp.kubelets().with_pods(|p| p.containers()))
            .unwrap_or_default()
    }

    /// `node`'s `/sys/fs/bpf` as its Pods see it: a directory on the real bpffs
    /// ([`Self::start_from_pods`]).
    pub fn pod_bpffs_dir(&self, node: &str) -> PathBuf {
        self.kube
            .as_ref()
            .and_then(|cp| cp.kubelets().with_pods(|p| p.bpffs_dir(node)))
            .expect("agents from Pods (Testbed::start_from_pods)")
    }

    /// `node`'s host root for its Pods' `hostPath` volumes ([`Self::start_from_pods`]).
    pub fn pod_host_dir(&self, node: &str) -> PathBuf {
        self.kube
            .as_ref()
            .and_then(|cp| cp.kubelets().with_pods(|p| p.host_dir(node)))
            .expect("agents from Pods (Testbed::start_from_pods)")
    }

    /// Whether every running agent answers `/state` with `ready: true` (warm-up over).
    pub fn all_ready(&self) -> bool {
        if self.from_pods {
            return self
                .nodes()
                .iter()
                .all(|n| self.state(n).is_some_and(|s| s["ready"] == true));
        }
        self.agents
            .iter()
            .filter(|(_, a)| a.running())
            .all(|(n, _)| self.state(n).is_some_and(|s| s["ready"] == true))
    }

    /// Waits (up to `timeout`) until every running agent is ready and exactly one of them
    /// owns `vip`, the same one for [`SETTLE`] in a row; returns it. (A single `/state` read is
    /// not enough: an agent busy attaching XDP publishes its state late.)
    pub fn wait_owner(&self, vip: IpAddr, timeout: Duration) -> String {
        let mut stable: Option<(String, Instant)> = None;
        let mut owner = None;
        self.wait_for(&format!("one settled owner of {vip}"), timeout, |tb| {
            let owners = if tb.all_ready() {
                tb.owners(vip)
            } else {
                Vec::new()
            };
            match (owners.as_slice(), &stable) {
                ([o], Some((s, since))) if o == s => {
                    if since.elapsed() >= SETTLE {
                        owner = Some(o.clone());
                    }
                }
                ([o], _) => stable = Some((o.clone(), Instant::now())),
                _ => stable = None,
            }
            owner.is_some()
        });
        owner.expect("owner")
    }

    /// Polls `cond` every 50 ms for up to `timeout`; panics with `what` and the agents' log
    /// tails if it never holds.
    pub fn wait_for(&self, what: &str, timeout: Duration, mut cond: impl FnMut(&Testbed) -> bool) {
        let end = Instant::now() + timeout;
        loop {
            if cond(self) {
                return;
            }
            if Instant::now() >= end {
                panic!(
                    "timed out after {timeout:?} waiting for {what}\n{}",
                    self.log_tails()
                );
            }
            std::thread::sleep(Duration::from_millis(50));
        }
    }

    /// The last lines of every agent's log.
    pub fn log_tails(&self) -> String {
        let pods = self
            .kube
            .as_ref()
            .and_then(|cp| cp.kubelets().with_pods(|p| p.log_tails()))
            .unwrap_or_default();
        let agents: String = self
            .agents
            .keys()
            .map(|n| format!("--- {n}\n{}\n", self.agent_log_tail(n)))
            .collect();
        agents + &pods
    }

    /// Makes the API server refuse (connection reset) every request of the agents, or ends
    /// that. In-repo server: its fault hooks refuse the agents' tokens (node names). Real
    /// control plane: the relay into the bridge namespace resets every new connection and
    /// closes the open ones, so every process in a node namespace (agents, MetalLB, kube-vip)
    /// loses the API. The admin client (127.0.0.1 of the test process) is not affected.
    pub fn api_outage(&self, on: bool) {
        if let Some(cp) = &self.kube {
            cp.set_relay_fault(on.then_some(crate::env::kube::relay::RelayFault::Outage));
            return;
        }
        let api = self.api();
        if on {
            api.set_faults(
                self.nodes
                    .iter()
                    .map(|n| Fault::outage(OutageMode::Refuse).for_client(n.name.clone()))
                    .collect(),
            );
        } else {
            api.clear_faults();
        }
    }

    /// Delays every API request of the agents by `delay` (a slow or overloaded apiserver), or
    /// ends that (`None`); replaces any other fault. In-repo server: its fault hooks delay the
    /// agents' tokens (node names). Real control plane: the relay into the bridge namespace
    /// holds back everything the node namespaces send by `delay`. The admin client is not
    /// affected.
    pub fn api_latency(&self, delay: Option<Duration>) {
        if let Some(cp) = &self.kube {
            cp.set_relay_fault(delay.map(crate::env::kube::relay::RelayFault::Latency));
            return;
        }
        let api = self.api();
        match delay {
            Some(d) => api.set_faults(
                self.nodes
                    .iter()
                    .map(|n| Fault::latency(d).for_client(n.name.clone()))
                    .collect(),
            ),
            None => api.clear_faults(),
        }
    }

    /// Crash `node`: its link goes down and its agent (and anything spawned with
    /// [`Self::spawn_in_node`], e.g. keepalived) is SIGKILLed. Pins and XDP stay, as after a
    /// power loss the node would simply be gone from the LAN.
    pub fn crash(&mut self, node: &str) {
        // On a real control plane the kubelet dies too: its node Lease stops, and the node
        // lifecycle controller marks the node NotReady after its grace period.
        if let Some(cp) = &self.kube {
            cp.kubelets().stop_node(node);
        }
        self.link_down(node);
        if self.agents.contains_key(node) {
            self.kill_agent(node);
        }
        // Dropping a guarded child SIGKILLs and reaps it.
        drop(self.spawned.remove(node));
    }

    /// The crashed node boots again: its link comes up and (on a real control plane) its
    /// kubelet renews its node Lease and reports Ready. Its agent is not started: that is
    /// [`Self::start_agent`], as the DaemonSet's Pod would start after the kubelet.
    pub fn revive(&self, node: &str) {
        self.link_up(node);
        if let Some(cp) = &self.kube {
            let (client, name) = (cp.client(), node.to_string());
            self.block_on(
                async move { crate::env::kube::kubelet::report_back(client, &name).await },
            )
            .unwrap_or_else(|e| panic!("the kubelet of {node} comes back: {e}"));
            cp.kubelets().resume(node);
        }
    }
}

/// Set (to anything) to keep a testbed's directory (agent logs, state) after a run that did
/// not fail too, e.g. to read a benchmark's agent logs.
pub const KEEP_LOGS_ENV: &str = "ANNOUNCER_TESTBED_KEEP";

impl Drop for Testbed {
    fn drop(&mut self) {
        for a in self.agents.values_mut() {
            a.kill();
        }
        self.spawned.clear();
        self.echo.stop();
        drop(self.api.take());
        if let Some(mut kube) = self.kube.take()
            && std::thread::panicking()
        {
            kube.keep_dir();
            eprintln!("control plane logs kept in {}", kube.dir().display());
        }
        if let Some(rt) = self.rt.take() {
            rt.shutdown_background();
        }
        let _ = std::fs::remove_dir_all(&self.pin_root);
        if std::thread::panicking() || std::env::var_os(KEEP_LOGS_ENV).is_some() {
            eprintln!("testbed logs kept in {}", self.dir.display());
        } else {
            let _ = std::fs::remove_dir_all(&self.dir);
        }
        // The namespaces (fields) are deleted after this, which also detaches XDP.
    }
}

/// For binaries (demo, bench): on SIGINT or SIGTERM, kill every process inside this process's
/// harness namespaces, delete those namespaces and this process's pin roots, and exit with
/// 130. (Destructors do not run on a signal; this does their work from a watcher thread.)
/// Call once, early; it needs no runtime from the caller.
pub fn install_ctrlc_cleanup() {
    // Cleaning up kills the tools the main thread may be waiting for, which then panics; after
    // a Ctrl-C that panic is noise, not news.
    static INTERRUPTED: AtomicBool = AtomicBool::new(false);
    let report = std::panic::take_hook();
    std::panic::set_hook(Box::new(move |info| {
        if !INTERRUPTED.load(Ordering::SeqCst) {
            report(info);
        }
    }));
    std::thread::Builder::new()
        .name("testbed-ctrlc".into())
        .spawn(|| {
            let rt = tokio::runtime::Builder::new_current_thread()
                .enable_all()
                .build()
                .expect("signal runtime");
            rt.block_on(async {
                use tokio::signal::unix::{SignalKind, signal};
                let mut int = signal(SignalKind::interrupt()).expect("SIGINT handler");
                let mut term = signal(SignalKind::terminate()).expect("SIGTERM handler");
                tokio::select! {
                    _ = int.recv() => {}
                    _ = term.recv() => {}
                }
            });
            INTERRUPTED.store(true, Ordering::SeqCst);
            eprintln!("interrupted: cleaning up the testbed");
            cleanup_this_process();
            std::process::exit(130);
        })
        .expect("spawn the Ctrl-C thread");
}

/// Removes what this process created: its harness namespaces (killing what runs inside) and
/// its `/sys/fs/bpf/anntest-<pid>-*` pin roots.
pub fn cleanup_this_process() {
    for ns in crate::netns::namespaces_of_this_process() {
        crate::netns::delete_namespace(&ns);
    }
    let prefix = format!("anntest-{}-", std::process::id());
    for entry in std::fs::read_dir("/sys/fs/bpf")
        .into_iter()
        .flatten()
        .flatten()
    {
        if entry.file_name().to_string_lossy().starts_with(&prefix) {
            let _ = std::fs::remove_dir_all(entry.path());
        }
    }
}

#[cfg(test)]
mod unit {
    use super::*;

    #[test]
    fn numbering() {
        assert_eq!(vip4(0), Ipv4Addr::new(10, 78, 128, 0));
        assert_eq!(vip4(300), Ipv4Addr::new(10, 78, 129, 44));
        assert_eq!(vip4(32767), Ipv4Addr::new(10, 78, 255, 255));
        assert_eq!(vip6(1), "fd78::8000:1".parse::<Ipv6Addr>().unwrap());
        assert_eq!(vip6(32767), "fd78::8000:7fff".parse::<Ipv6Addr>().unwrap());
        assert_eq!(node_name(0), "node-a");
        assert_eq!(node_name(2), "node-c");
        assert_eq!(node_v4(1), Ipv4Addr::new(10, 78, 0, 2));
        assert_eq!(node_mac_of(0), [2, 0x78, 0, 0, 0, 1]);
    }
}
