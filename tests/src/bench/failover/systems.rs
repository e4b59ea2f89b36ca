//! The six systems compared, and how each is started, failed and restored on one testbed.
//!
//! * keepalived (Debian's package) in VRRP, one process tree per node namespace, every node
//!   `state BACKUP` with the same priority and `nopreempt` (so a returning node does not take
//!   the VIPs back: the next trial starts from whoever holds them, like the agents). Default
//!   timings (VRRPv2, `advert_int 1`: backups take over after 3 × 1 s + skew, RFC 3768
//!   section 6.1) and tuned ones (VRRPv3, `advert_int 0.1`: RFC 5798 section 6.1). GARP
//!   settings are keepalived's defaults. Its VIPs live on `eth0` (keepalived adds and removes
//!   them), so those nodes have no local VIP routes.
//! * MetalLB (L2 mode, memberlist on, its controller) and kube-vip (ARP mode, one Lease per
//!   Service) themselves, the upstream binaries, run and configured by
//!   [`crate::env::lan::Peer`] (versions in [`System::settings`]); kube-vip at its defaults
//!   (5 s / 3 s / 1 s) and at the fastest whole-second timings client-go accepts
//!   (3 s / 2 s / 1 s; kube-vip documents nothing faster than its defaults);
//! * this agent with its defaults, and with [`FAST_ARGS`];
//! * this agent with its defaults and fast endpoint withdrawal on (`announcer-withdraw`):
//!   [`WITHDRAWER_REPLICAS`] `announcer withdrawer` processes in node namespaces (a crash may
//!   take one down, as it would a replica's node) and the Services' namespace opted in.
//!
//! Every system runs on the real control plane (kube-apiserver, its controllers); the
//! Lease-per-Service imitation of the agent stays in the API-cost bench
//! (`bench::control_plane`), where the question is what a Lease per Service costs the API.
//!
//! keepalived forks a VRRP child that shuts down gracefully (priority-0 advert) when its
//! parent dies, so a SIGKILL of the parent alone would be a clean handover, not a crash. Each
//! keepalived therefore runs in its own process group and a crash kills the group at once.

use std::{
    collections::BTreeMap,
    fmt::Write as _,
    net::IpAddr,
    path::{Path, PathBuf},
    process::Command,
    time::Duration,
};

use crate::env::lan::{KubeVipTimings, PeerKind, Testbed};

/// The agent's fastest documented settings (docs/configure.md), those that stayed reliable on
/// this testbed (every trial recovered, nothing moved under the stress scenario) and in the
/// simulator: 10 ms heartbeats, dead after 3 misses, a 20 ms probe of the old owner's data
/// plane. A crash is taken over 15 + 20 = 35 ms after the old owner's last heartbeat, later
/// than the heartbeat after a lost one (20 ms), so one lost heartbeat and every probe answer
/// lost still move nothing.
pub const FAST_ARGS: &[&str] = &[
    "--heartbeat-interval=10ms",
    "--heartbeat-misses=3",
    "--probe-timeout=20ms",
];

/// How many `announcer withdrawer` replicas `announcer-withdraw` runs (on the last nodes,
/// as the Deployment's two replicas would land on two nodes).
pub const WITHDRAWER_REPLICAS: usize = 2;

/// One system under test.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord)]
pub enum System {
    KeepalivedDefault,
    KeepalivedTuned,
    MetalLb,
    KubeVip,
    KubeVipFast,
    AnnouncerDefault,
    AnnouncerFast,
    AnnouncerWithdraw,
}

impl System {
    /// Every system, in report order.
    pub const ALL: [System; 8] = [
        System::KeepalivedDefault,
        System::KeepalivedTuned,
        System::MetalLb,
        System::KubeVip,
        System::KubeVipFast,
        System::AnnouncerDefault,
        System::AnnouncerFast,
        System::AnnouncerWithdraw,
    ];

    /// Name in tables, JSON and `--systems`.
    pub fn name(self) -> &'static str {
        match self {
            System::KeepalivedDefault => "keepalived-default",
            System::KeepalivedTuned => "keepalived-tuned",
            System::MetalLb => "metallb",
            System::KubeVip => "kube-vip",
            System::KubeVipFast => "kube-vip-fast",
            System::AnnouncerDefault => "announcer-default",
            System::AnnouncerFast => "announcer-fast",
            System::AnnouncerWithdraw => "announcer-withdraw",
        }
    }

    /// Parses a name of [`System::name`].
    pub fn parse(s: &str) -> Option<System> {
        System::ALL.into_iter().find(|x| x.name() == s)
    }

    /// What the settings are, in words (table footer).
    pub fn settings(self) -> String {
        match self {
            System::KeepalivedDefault => "keepalived VRRPv2, advert_int 1 s".into(),
            System::KeepalivedTuned => "keepalived VRRPv3, advert_int 0.1 s".into(),
            System::AnnouncerFast => format!("announcer {}", FAST_ARGS.join(" ")),
            System::AnnouncerDefault => "announcer (defaults)".into(),
            System::AnnouncerWithdraw => format!(
                "announcer (defaults), fast endpoint withdrawal ({WITHDRAWER_REPLICAS} withdrawer replicas)"
            ),
            System::MetalLb | System::KubeVip | System::KubeVipFast => {
                self.peer().expect("a peer").settings()
            }
        }
    }

    /// The real peer this system is ([`crate::env::lan::Peer`]), if it is one.
    pub fn peer(self) -> Option<PeerKind> {
        match self {
            System::MetalLb => Some(PeerKind::MetalLb),
            System::KubeVip => Some(PeerKind::KubeVip(KubeVipTimings::DEFAULTS)),
            System::KubeVipFast => Some(PeerKind::KubeVip(KubeVipTimings::FASTEST)),
            _ => None,
        }
    }

    /// This agent rather than keepalived or a peer.
    pub fn is_agent(self) -> bool {
        matches!(
            self,
            System::AnnouncerDefault | System::AnnouncerFast | System::AnnouncerWithdraw
        )
    }

    /// Whether this system withdraws a crashed node's endpoints (the withdrawer runs).
    pub fn withdraws(self) -> bool {
        self == System::AnnouncerWithdraw
    }

    /// keepalived rather than the agent.
    pub fn is_keepalived(self) -> bool {
        matches!(self, System::KeepalivedDefault | System::KeepalivedTuned)
    }

    /// Extra agent flags (empty for keepalived and the peers).
    pub fn agent_args(self) -> Vec<&'static str> {
        match self {
            System::AnnouncerFast => FAST_ARGS.to_vec(),
            _ => vec![],
        }
    }

    /// How long the restart-within-grace scenario watches after the restart: long enough for
    /// a peer's takeover to show if the restart did not prevent it.
    pub fn restart_settle(self) -> Duration {
        Duration::from_secs(match self {
            System::KeepalivedDefault => 5,
            System::KeepalivedTuned => 2,
            // A lease (5 s, 3 s) plus a retry period.
            System::KubeVip => 7,
            System::KubeVipFast => 5,
            // memberlist's suspicion timeout for a few nodes (LAN profile), and a re-join.
            System::MetalLb => 10,
            System::AnnouncerDefault | System::AnnouncerFast | System::AnnouncerWithdraw => 4,
        })
    }

    /// An upper bound on any takeover of this system (detection plus lease or grace expiry),
    /// with margin: how long a trial waits before it calls a VIP unrecovered.
    pub fn takeover_bound(self) -> Duration {
        Duration::from_secs(match self {
            System::KeepalivedDefault => 8,
            System::KeepalivedTuned => 4,
            // memberlist's failure detection (LAN profile: 1 s probes, suspicion 4 × log(n)
            // probe intervals and more on a loaded host), then gratuitous ARP.
            System::MetalLb => 30,
            // The lease must expire (5 s; 3 s), then a retry period, with margin.
            System::KubeVip => 15,
            System::KubeVipFast => 12,
            // SIGKILL without restart waits for the 5 s grace.
            System::AnnouncerDefault | System::AnnouncerFast | System::AnnouncerWithdraw => 9,
        })
    }
}

/// `keepalived.conf` for one node: one VRRP instance on `eth0` holding every VIP (the first 20
/// in `virtual_ipaddress`, which the adverts carry, the rest in
/// `virtual_ipaddress_excluded`, as keepalived advises for large sets).
pub fn keepalived_conf(node: &str, tuned: bool, vips: &[IpAddr]) -> String {
    let mut s = String::new();
    let _ = writeln!(s, "global_defs {{\n  router_id {node}");
    if tuned {
        s.push_str("  vrrp_version 3\n");
    }
    s.push_str("}\n");
    let advert = if tuned { "0.1" } else { "1" };
    let _ = writeln!(
        s,
        "vrrp_instance VI_78 {{\n  state BACKUP\n  interface eth0\n  virtual_router_id 78\n  priority 100\n  advert_int {advert}\n  nopreempt"
    );
    let (carried, excluded) = vips.split_at(vips.len().min(20));
    for (block, list) in [
        ("virtual_ipaddress", carried),
        ("virtual_ipaddress_excluded", excluded),
    ] {
        if list.is_empty() {
            continue;
        }
        let _ = writeln!(s, "  {block} {{");
        for v in list {
            let plen = if v.is_ipv4() { 32 } else { 128 };
            let _ = writeln!(s, "    {v}/{plen} dev eth0");
        }
        s.push_str("  }\n");
    }
    s.push_str("}\n");
    s
}

/// The keepalived processes of one testbed: config and pid files in a private directory
/// (removed on drop), one process group per node.
pub struct Keepalived {
    dir: PathBuf,
    tuned: bool,
    vips: Vec<IpAddr>,
}

impl Keepalived {
    /// A fresh directory for this run's files.
    pub fn new(tag: &str, tuned: bool, vips: &[IpAddr]) -> Keepalived {
        let dir = std::env::temp_dir().join(format!(
            "announcer-bench-keepalived-{}-{tag}",
            std::process::id()
        ));
        std::fs::create_dir_all(&dir).expect("keepalived temp dir");
        Keepalived {
            dir,
            tuned,
            vips: vips.to_vec(),
        }
    }

    /// Replaces the VIP set (takes effect at the next [`Keepalived::start`]).
    pub fn set_vips(&mut self, vips: &[IpAddr]) {
        self.vips = vips.to_vec();
    }

    fn file(&self, node: &str, what: &str) -> PathBuf {
        self.dir.join(format!("{node}.{what}"))
    }

    /// Starts keepalived in `node` (`-n -l -D`, VRRP only, own pid files and process group).
    pub fn start(&self, tb: &mut Testbed, node: &str) {
        let conf = self.file(node, "conf");
        std::fs::write(&conf, keepalived_conf(node, self.tuned, &self.vips))
            .expect("write keepalived.conf");
        let (pid, vrrp_pid) = (self.file(node, "pid"), self.file(node, "vrrp.pid"));
        // A pid file naming a zombie would make keepalived think it is already running.
        for p in [&pid, &vrrp_pid] {
            let _ = std::fs::remove_file(p);
        }
        let log = std::fs::OpenOptions::new()
            .create(true)
            .append(true)
            .open(self.file(node, "log"))
            .expect("keepalived log");
        // `setsid`: its own session and process group, whatever the testbed's spawner keeps
        // of this Command (`nsenter` execs, so keepalived's pid is the group's id).
        let mut cmd = Command::new("setsid");
        cmd.args(["keepalived", "-n", "-l", "-D", "-P", "-f"])
            .arg(&conf)
            .arg("-p")
            .arg(&pid)
            .arg("-r")
            .arg(&vrrp_pid)
            .stdout(log.try_clone().expect("dup keepalived log"))
            .stderr(log);
        tb.spawn_in_node(node, cmd);
    }

    /// The main keepalived pid of `node` (its process group), once it wrote its pid file.
    pub fn pid(&self, node: &str) -> Option<i32> {
        read_pid(&self.file(node, "pid"))
    }

    /// Whether the VRRP child of `node` is up (it writes its pid file once running).
    pub fn running(&self, node: &str) -> bool {
        read_pid(&self.file(node, "vrrp.pid")).is_some_and(alive)
            && self.pid(node).is_some_and(alive)
    }

    /// Sends `sig` to the whole process group of `node`'s keepalived (to its two processes
    /// one by one, VRRP child first, should it not lead its own group).
    pub fn signal(&self, node: &str, sig: nix::sys::signal::Signal) {
        use nix::{sys::signal, unistd::Pid};
        let Some(pid) = self.pid(node).map(Pid::from_raw) else {
            return;
        };
        if nix::unistd::getpgid(Some(pid)) == Ok(pid) {
            let _ = signal::killpg(pid, sig);
        } else {
            if let Some(child) = read_pid(&self.file(node, "vrrp.pid")) {
                let _ = signal::kill(Pid::from_raw(child), sig);
            }
            let _ = signal::kill(pid, sig);
        }
    }

    /// The last lines of `node`'s keepalived log (all its runs).
    pub fn log_tail(&self, node: &str, lines: usize) -> String {
        let text = std::fs::read_to_string(self.file(node, "log")).unwrap_or_default();
        let all: Vec<&str> = text.lines().collect();
        all[all.len().saturating_sub(lines)..].join("\n")
    }

    /// Waits until `node`'s keepalived is gone (after [`Keepalived::signal`]).
    pub fn wait_gone(&self, node: &str, timeout: Duration) -> bool {
        let end = std::time::Instant::now() + timeout;
        while std::time::Instant::now() < end {
            if !self.running(node) {
                return true;
            }
            std::thread::sleep(Duration::from_millis(10));
        }
        false
    }
}

impl Drop for Keepalived {
    fn drop(&mut self) {
        if let Ok(rd) = std::fs::read_dir(&self.dir) {
            for e in rd.flatten() {
                let name = e.file_name().to_string_lossy().into_owned();
                if let Some(node) = name.strip_suffix(".pid").filter(|n| !n.ends_with(".vrrp")) {
                    self.signal(node, nix::sys::signal::Signal::SIGKILL);
                }
            }
        }
        let _ = std::fs::remove_dir_all(&self.dir);
    }
}

fn read_pid(p: &Path) -> Option<i32> {
    std::fs::read_to_string(p).ok()?.trim().parse().ok()
}

/// Alive and not a zombie.
fn alive(pid: i32) -> bool {
    std::fs::read_to_string(format!("/proc/{pid}/stat"))
        .ok()
        .and_then(|s| s.rsplit_once(") ").map(|(_, r)| !r.starts_with('Z')))
        .unwrap_or(false)
}

/// Which nodes carry each of `vips` on `eth0` (keepalived's view of "announces").
pub fn keepalived_owners(tb: &Testbed, vips: &[IpAddr]) -> BTreeMap<IpAddr, Vec<String>> {
    let mut out: BTreeMap<IpAddr, Vec<String>> = vips.iter().map(|v| (*v, vec![])).collect();
    for node in tb.nodes() {
        let text = tb.node_ns(&node).ip(&["-o", "addr", "show", "dev", "eth0"]);
        for addr in parse_ip_addr_o(&text) {
            if let Some(v) = out.get_mut(&addr) {
                v.push(node.clone());
            }
        }
    }
    out
}

/// The addresses in `ip -o addr show` output.
pub fn parse_ip_addr_o(text: &str) -> Vec<IpAddr> {
    text.lines()
        .filter_map(|l| {
            let mut w = l.split_whitespace();
            w.find(|t| *t == "inet" || *t == "inet6")?;
            w.next()?.split('/').next()?.parse().ok()
        })
        .collect()
}

/// Which nodes list each of `vips` as owned in their agent's `/state` (one GET per node).
pub fn agent_owners(tb: &Testbed, vips: &[IpAddr]) -> BTreeMap<IpAddr, Vec<String>> {
    let mut out: BTreeMap<IpAddr, Vec<String>> = vips.iter().map(|v| (*v, vec![])).collect();
    for node in tb.nodes() {
        let Some(state) = tb.state(&node) else {
            continue;
        };
        for o in state["owned"].as_array().into_iter().flatten() {
            let vip = o["vip"].as_str().and_then(|s| s.parse::<IpAddr>().ok());
            if let Some(v) = vip.and_then(|v| out.get_mut(&v)) {
                v.push(node.clone());
            }
        }
    }
    out
}

#[cfg(test)]
mod unit {
    use super::*;

    #[test]
    fn names_round_trip() {
        for s in System::ALL {
            assert_eq!(System::parse(s.name()), Some(s));
        }
        assert_eq!(System::parse("vrrp"), None);
    }

    #[test]
    fn keepalived_conf_default_and_tuned() {
        let vips: Vec<IpAddr> = (0..22u8).map(|k| IpAddr::from([10, 78, 128, k])).collect();
        let d = keepalived_conf("node-a", false, &vips[..1]);
        assert!(d.contains("router_id node-a"));
        assert!(d.contains("advert_int 1\n"));
        assert!(!d.contains("vrrp_version"));
        assert!(d.contains("10.78.128.0/32 dev eth0"));
        assert!(!d.contains("excluded"));
        let t = keepalived_conf("node-b", true, &vips);
        assert!(t.contains("vrrp_version 3"));
        assert!(t.contains("advert_int 0.1\n"));
        assert!(t.contains("nopreempt"));
        let (carried, excluded) = t.split_once("virtual_ipaddress_excluded").unwrap();
        assert_eq!(carried.matches(" dev eth0").count(), 20);
        assert_eq!(excluded.matches(" dev eth0").count(), 2);
        assert_eq!(t.matches('{').count(), t.matches('}').count());
    }

    #[test]
    fn parses_ip_addr_output() {
        let text = "2: eth0    inet 10.78.0.1/16 scope global eth0\\       valid_lft forever\n\
                    2: eth0    inet 10.78.128.0/32 scope global eth0\\       valid_lft forever\n\
                    2: eth0    inet6 fd78::1/64 scope global \\       valid_lft forever\n";
        let got = parse_ip_addr_o(text);
        assert_eq!(
            got,
            vec![
                "10.78.0.1".parse::<IpAddr>().unwrap(),
                "10.78.128.0".parse().unwrap(),
                "fd78::1".parse().unwrap()
            ]
        );
    }

    #[test]
    fn only_the_agents_take_agent_flags() {
        assert!(System::KeepalivedTuned.agent_args().is_empty());
        assert!(System::MetalLb.agent_args().is_empty());
        assert_eq!(System::AnnouncerFast.agent_args(), FAST_ARGS);
    }

    #[test]
    fn the_real_peers_are_named_and_say_their_versions() {
        assert_eq!(System::parse("metallb"), Some(System::MetalLb));
        assert_eq!(System::parse("kube-vip"), Some(System::KubeVip));
        assert_eq!(System::parse("kube-vip-fast"), Some(System::KubeVipFast));
        assert_eq!(System::parse("lease-per-service-cilium"), None);
        assert!(System::MetalLb.settings().contains("v0.16.1"));
        assert!(System::KubeVip.settings().contains("v1.0.0"));
        assert!(
            System::KubeVip
                .settings()
                .contains("lease 5 s / renew 3 s / retry 1 s")
        );
        assert!(
            System::KubeVipFast
                .settings()
                .contains("lease 3 s / renew 2 s / retry 1 s")
        );
        assert!(System::AnnouncerDefault.peer().is_none());
    }
}
