//! Network-namespace testbed: namespaces, veth pairs, addresses.
//!
//! Safety rules:
//! * every namespace this module creates is named `anntest-<tag>-<pid>-<starttime>-<n>`
//!   ([`NS_PREFIX`]); nothing else is ever created or deleted, except
//!   temporary veth names `anv<pid>-<n>a|b` that live in the root namespace
//!   only for the instant between `ip link add` and `ip link set netns`;
//! * [`Netns`] deletes its namespace on `Drop`, which also runs while a failing
//!   test unwinds; deleting a namespace destroys the veth ends inside it;
//! * [`sweep_stale`] removes namespaces (and temporary veths) left behind by a
//!   test process that no longer exists (SIGKILL, abort); [`Netns::new`] runs it
//!   once per process.

use std::fs::File;
use std::net::{Ipv4Addr, Ipv6Addr};
use std::os::unix::process::ExitStatusExt;
use std::path::PathBuf;
use std::process::{Command, Output, Stdio};
use std::sync::Once;
use std::sync::atomic::{AtomicU32, Ordering};
use std::time::{Duration, Instant};

use nix::sched::{CloneFlags, setns};

/// Prefix of every namespace the harness creates.
pub const NS_PREFIX: &str = "anntest-";
/// Prefix of the temporary (root-namespace) veth names.
const TMP_IF_PREFIX: &str = "anv";

/// Interface name of the node end of the [`Pair`] veth.
pub const NODE_IF: &str = "eth0";
/// Interface name of the client end of the [`Pair`] veth.
pub const CLIENT_IF: &str = "eth0";
/// MAC of the node interface.
pub const NODE_MAC: [u8; 6] = [0x02, 0, 0, 0, 0, 0x01];
/// MAC of the client interface.
pub const CLIENT_MAC: [u8; 6] = [0x02, 0, 0, 0, 0, 0x02];
/// IPv4 address of the node interface (prefix [`PREFIX_V4`]).
pub const NODE_V4: Ipv4Addr = Ipv4Addr::new(10, 77, 0, 1);
/// IPv4 address of the client interface (prefix [`PREFIX_V4`]).
pub const CLIENT_V4: Ipv4Addr = Ipv4Addr::new(10, 77, 0, 2);
/// IPv6 address of the node interface (prefix [`PREFIX_V6`]).
pub const NODE_V6: Ipv6Addr = Ipv6Addr::new(0xfd77, 0, 0, 0, 0, 0, 0, 1);
/// IPv6 address of the client interface (prefix [`PREFIX_V6`]).
pub const CLIENT_V6: Ipv6Addr = Ipv6Addr::new(0xfd77, 0, 0, 0, 0, 0, 0, 2);
/// Prefix length of the IPv4 test subnet 10.77.0.0/24.
pub const PREFIX_V4: u8 = 24;
/// Prefix length of the IPv6 test subnet fd77::/64.
pub const PREFIX_V6: u8 = 64;

static NS_COUNTER: AtomicU32 = AtomicU32::new(0);
static IF_COUNTER: AtomicU32 = AtomicU32::new(0);
static SWEEP: Once = Once::new();

/// Panics unless the process runs as root (tests must never silently skip).
pub fn require_root() {
    // SAFETY: geteuid has no preconditions and cannot fail.
    if unsafe { libc::geteuid() } != 0 {
        panic!(
            "these tests need root (CAP_NET_ADMIN, CAP_SYS_ADMIN, CAP_BPF) to create network \
             namespaces and attach XDP programs; run them as root, e.g. \
             `sudo -E cargo test -p announcer-tests`"
        );
    }
}

/// Formats a MAC as `02:00:00:00:00:01`.
pub fn fmt_mac(mac: [u8; 6]) -> String {
    mac.iter()
        .map(|b| format!("{b:02x}"))
        .collect::<Vec<_>>()
        .join(":")
}

/// Parses `02:00:00:00:00:01` (case-insensitive, `:` or `-` separated).
pub fn parse_mac(s: &str) -> Option<[u8; 6]> {
    let mut out = [0u8; 6];
    let mut parts = s.trim().split([':', '-']);
    for byte in &mut out {
        let p = parts.next()?;
        if p.is_empty() || p.len() > 2 {
            return None;
        }
        *byte = u8::from_str_radix(p, 16).ok()?;
    }
    parts.next().is_none().then_some(out)
}

fn describe(cmd: &Command) -> String {
    let mut s = cmd.get_program().to_string_lossy().into_owned();
    for a in cmd.get_args() {
        s.push(' ');
        s.push_str(&a.to_string_lossy());
    }
    s
}

fn status_text(out: &Output) -> String {
    match (out.status.code(), out.status.signal()) {
        (Some(c), _) => format!("exit code {c}"),
        (None, Some(s)) => format!("signal {s}"),
        _ => format!("{}", out.status),
    }
}

/// Runs `cmd` (stdin closed) and returns its output; panics only if it cannot be started.
pub fn output_of(cmd: &mut Command) -> Output {
    cmd.stdin(Stdio::null());
    cmd.output()
        .unwrap_or_else(|e| panic!("cannot run `{}`: {e}", describe(cmd)))
}

/// Runs `cmd` and returns its stdout; panics with stdout/stderr on a non-zero exit.
pub fn run_checked(cmd: &mut Command) -> String {
    let out = output_of(cmd);
    if !out.status.success() {
        panic!(
            "`{}` failed ({})\n--- stdout ---\n{}\n--- stderr ---\n{}",
            describe(cmd),
            status_text(&out),
            String::from_utf8_lossy(&out.stdout),
            String::from_utf8_lossy(&out.stderr)
        );
    }
    String::from_utf8_lossy(&out.stdout).into_owned()
}

fn ip(args: &[&str]) -> String {
    run_checked(Command::new("ip").args(args))
}

/// Start time of a process (field 22 of /proc/PID/stat, clock ticks since boot).
fn proc_start_time(pid: u32) -> Option<u64> {
    let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).ok()?;
    // The command name (field 2) may contain spaces and parentheses: skip past the last ')'.
    let rest = &stat[stat.rfind(')')? + 1..];
    // rest starts with field 3 (state); starttime is field 22.
    rest.split_whitespace().nth(22 - 3)?.parse().ok()
}

fn self_start_time() -> u64 {
    static START: std::sync::OnceLock<u64> = std::sync::OnceLock::new();
    *START.get_or_init(|| proc_start_time(std::process::id()).unwrap_or(0))
}

/// Owner (pid, start time) embedded in a harness namespace name, `None` if the
/// name is not one of ours.
pub fn ns_owner(name: &str) -> Option<(u32, u64)> {
    let rest = name.strip_prefix(NS_PREFIX)?;
    let parts: Vec<&str> = rest.rsplitn(4, '-').collect();
    if parts.len() < 3 {
        return None;
    }
    let _counter: u32 = parts[0].parse().ok()?;
    let start: u64 = parts[1].parse().ok()?;
    let pid: u32 = parts[2].parse().ok()?;
    Some((pid, start))
}

/// True if the process that created a resource (`pid`, optionally with its start
/// time) is gone: the pid does not exist, or it was reused by another process.
fn owner_gone(pid: u32, start: Option<u64>) -> bool {
    match proc_start_time(pid) {
        None => !std::path::Path::new(&format!("/proc/{pid}")).exists(),
        Some(now) => start.is_some_and(|s| s != now),
    }
}

/// Names of all network namespaces whose name starts with `prefix`.
pub fn list_namespaces(prefix: &str) -> Vec<String> {
    let out = output_of(Command::new("ip").args(["-j", "netns", "list"]));
    if !out.status.success() {
        return Vec::new();
    }
    let text = String::from_utf8_lossy(&out.stdout);
    let text = text.trim();
    if text.is_empty() {
        return Vec::new();
    }
    let json: serde_json::Value = serde_json::from_str(text)
        .unwrap_or_else(|e| panic!("cannot parse `ip -j netns list` output {text:?}: {e}"));
    json.as_array()
        .into_iter()
        .flatten()
        .filter_map(|v| v.get("name")?.as_str().map(str::to_owned))
        .filter(|n| n.starts_with(prefix))
        .collect()
}

/// Harness namespaces created by this process that currently exist.
pub fn namespaces_of_this_process() -> Vec<String> {
    let me = (std::process::id(), self_start_time());
    list_namespaces(NS_PREFIX)
        .into_iter()
        .filter(|n| ns_owner(n) == Some(me))
        .collect()
}

/// SIGKILLs every process whose network namespace is `name` (except this one).
/// Only called for harness namespaces: anything in them was started by a test.
fn kill_processes_in(name: &str) {
    let out = output_of(Command::new("ip").args(["netns", "pids", name]));
    let me = std::process::id();
    for pid in String::from_utf8_lossy(&out.stdout)
        .split_whitespace()
        .filter_map(|p| p.parse::<u32>().ok())
        .filter(|&p| p != me)
    {
        let _ = nix::sys::signal::kill(
            nix::unistd::Pid::from_raw(pid as i32),
            nix::sys::signal::Signal::SIGKILL,
        );
    }
}

/// Kills every process in the harness namespace `name` and deletes it (for cleanups that cannot
/// reach the [`Netns`] value, such as a Ctrl-C handler).
pub fn delete_namespace(name: &str) {
    kill_processes_in(name);
    let _ = output_of(Command::new("ip").args(["netns", "del", name]));
}

/// Deletes leftovers of harness runs whose process no longer exists: namespaces
/// named `prefix*` (which must start with [`NS_PREFIX`]) whose embedded pid is dead
/// (or reused by a different process), after killing processes still inside them,
/// and temporary veths `anv<pid>-<n>a|b` of dead pids in the root namespace.
/// Returns the names of the deleted namespaces.
pub fn sweep_stale(prefix: &str) -> Vec<String> {
    assert!(
        prefix.starts_with(NS_PREFIX),
        "sweep_stale only deletes harness namespaces; prefix {prefix:?} must start with {NS_PREFIX:?}"
    );
    let mut removed = Vec::new();
    for name in list_namespaces(prefix) {
        let Some((pid, start)) = ns_owner(&name) else {
            continue;
        };
        if owner_gone(pid, Some(start)) {
            delete_namespace(&name);
            removed.push(name);
        }
    }
    // Temporary veth ends in the root namespace (only exist if a process died
    // between `ip link add` and `ip link set netns`).
    let out = output_of(Command::new("ip").args(["-j", "link", "show", "type", "veth"]));
    if out.status.success() {
        let json: serde_json::Value =
            serde_json::from_slice(&out.stdout).unwrap_or(serde_json::Value::Null);
        for name in json
            .as_array()
            .into_iter()
            .flatten()
            .filter_map(|v| v.get("ifname")?.as_str())
        {
            if let Some(pid) = tmp_if_owner(name)
                && owner_gone(pid, None)
            {
                let _ = output_of(Command::new("ip").args(["link", "del", "dev", name]));
            }
        }
    }
    // Pin roots of the CLI driver (`/sys/fs/bpf/anntest-<pid>-<n>`, see `crate::cli`) of dead
    // processes: their links died with the namespaces, but pinned maps would stay.
    for entry in std::fs::read_dir("/sys/fs/bpf")
        .into_iter()
        .flatten()
        .flatten()
    {
        let name = entry.file_name().to_string_lossy().into_owned();
        let pid = name
            .strip_prefix(NS_PREFIX)
            .and_then(|r| r.split('-').next())
            .and_then(|p| p.parse::<u32>().ok());
        if let Some(pid) = pid
            && owner_gone(pid, None)
        {
            let _ = std::fs::remove_dir_all(entry.path());
        }
    }
    removed
}

/// Pid embedded in a temporary veth name `anv<pid>-<n>a|b`.
fn tmp_if_owner(name: &str) -> Option<u32> {
    let rest = name.strip_prefix(TMP_IF_PREFIX)?;
    let rest = rest.strip_suffix('a').or_else(|| rest.strip_suffix('b'))?;
    let (pid, n) = rest.split_once('-')?;
    if pid.is_empty() || n.is_empty() || !n.bytes().all(|b| b.is_ascii_digit()) {
        return None;
    }
    pid.parse().ok()
}

fn sanitize_tag(tag: &str) -> String {
    tag.chars()
        .map(|c| {
            if c.is_ascii_alphanumeric() || c == '-' || c == '_' {
                c
            } else {
                '_'
            }
        })
        .collect()
}

fn check_ifname(ifname: &str) {
    assert!(
        !ifname.is_empty()
            && ifname.len() <= 15
            && !ifname.contains(['/', ':'])
            && !ifname.chars().any(char::is_whitespace),
        "invalid interface name {ifname:?} (1..=15 chars, no '/', ':' or whitespace)"
    );
}

/// A network namespace created by the harness (`ip netns add`), deleted on drop.
#[derive(Debug)]
pub struct Netns {
    name: String,
}

impl Netns {
    /// Creates `anntest-<prefix>-<pid>-<starttime>-<n>`. Panics if not root or on failure.
    /// The first call in a process also runs [`sweep_stale`].
    pub fn new(prefix: &str) -> Netns {
        require_root();
        crate::programs::require_program("ip", "iproute2");
        SWEEP.call_once(|| {
            sweep_stale(NS_PREFIX);
        });
        let tag = sanitize_tag(prefix);
        let pid = std::process::id();
        let start = self_start_time();
        for _ in 0..100 {
            let n = NS_COUNTER.fetch_add(1, Ordering::Relaxed);
            let name = if tag.is_empty() {
                format!("{NS_PREFIX}{pid}-{start}-{n}")
            } else {
                format!("{NS_PREFIX}{tag}-{pid}-{start}-{n}")
            };
            let out = output_of(Command::new("ip").args(["netns", "add", &name]));
            if out.status.success() {
                return Netns { name };
            }
            let err = String::from_utf8_lossy(&out.stderr);
            if !err.contains("exists") {
                panic!(
                    "`ip netns add {name}` failed ({}): {err}",
                    status_text(&out)
                );
            }
        }
        panic!("could not find a free namespace name for prefix {prefix:?}");
    }

    /// The namespace name (as used by `ip netns`).
    pub fn name(&self) -> &str {
        &self.name
    }

    /// `/run/netns/NAME`.
    pub fn path(&self) -> PathBuf {
        PathBuf::from(format!("/run/netns/{}", self.name))
    }

    /// Opens `/run/netns/NAME` (a namespace fd, e.g. for `setns`).
    pub fn open(&self) -> File {
        File::open(self.path())
            .unwrap_or_else(|e| panic!("cannot open {}: {e}", self.path().display()))
    }

    /// Runs `ip netns exec NAME args...` (stdin closed) and returns its output.
    /// Note: `ip netns exec` also remounts /sys in a private mount namespace, so
    /// bpffs pins are not visible; use [`Netns::nsenter_cmd`] for that.
    pub fn exec(&self, args: &[&str]) -> Output {
        output_of(
            Command::new("ip")
                .args(["netns", "exec", &self.name])
                .args(args),
        )
    }

    /// Like [`Netns::exec`], returns stdout; panics with stdout/stderr on a non-zero exit.
    pub fn run(&self, args: &[&str]) -> String {
        run_checked(
            Command::new("ip")
                .args(["netns", "exec", &self.name])
                .args(args),
        )
    }

    /// Runs `ip -n NAME args...`, returns stdout; panics on failure.
    pub fn ip(&self, args: &[&str]) -> String {
        run_checked(Command::new("ip").args(["-n", &self.name]).args(args))
    }

    /// The first line of `ip -d link show` that shows an XDP program on any interface here.
    pub fn xdp_anywhere(&self) -> Option<String> {
        let out = self.ip(&["-d", "link", "show"]);
        out.lines()
            .find(|l| l.contains("xdpgeneric") || l.contains(" xdp ") || l.contains("prog/xdp"))
            .map(str::to_owned)
    }

    /// What `ip -d link show IFACE` says about XDP on `iface`: mode (`generic`, `native` or
    /// `none`), program id (0 when none) and tag.
    pub fn xdp_on(&self, iface: &str) -> (String, u32, String) {
        let out = self.ip(&["-d", "link", "show", iface]);
        let first = out.lines().next().unwrap_or_default();
        let mode = if first.contains("xdpgeneric") {
            "generic"
        } else if first.contains(" xdp ") {
            "native"
        } else {
            "none"
        };
        let words: Vec<&str> = out.split_whitespace().collect();
        let after = |w: &str| {
            words
                .windows(2)
                .find(|p| p[0] == w)
                .map(|p| p[1].to_owned())
        };
        let id = if mode == "none" {
            0
        } else {
            after("id").and_then(|i| i.parse().ok()).unwrap_or(0)
        };
        (mode.into(), id, after("tag").unwrap_or_default())
    }

    /// A `Command` running `nsenter --net=/run/netns/NAME -- program`: only the
    /// network namespace changes, the host mount namespace (and /sys/fs/bpf
    /// pins) stays. Add arguments with `.arg()/.args()`.
    pub fn nsenter_cmd(&self, program: &str) -> Command {
        let mut cmd = Command::new("nsenter");
        cmd.arg(format!("--net={}", self.path().display()))
            .arg("--")
            .arg(program);
        cmd
    }

    /// Sets a sysctl inside the namespace (`ip netns exec NAME sysctl -w key=value`).
    pub fn sysctl(&self, key: &str, value: &str) {
        self.run(&["sysctl", "-q", "-w", &format!("{key}={value}")]);
    }

    /// Turns IPv6 duplicate address detection off for every interface to come: call it before
    /// any veth arrives, so no address (link-local ones included) is ever tentative.
    pub fn disable_dad(&self) {
        self.sysctl("net.ipv6.conf.all.accept_dad", "0");
        self.sysctl("net.ipv6.conf.default.accept_dad", "0");
    }

    /// Runs `f` on a fresh thread that first `setns(CLONE_NEWNET)`s into this
    /// namespace (mount namespace unchanged) and returns its result; a panic in
    /// `f` is propagated.
    pub fn enter<R: Send>(&self, f: impl FnOnce() -> R + Send) -> R {
        let file = self.open();
        let name = self.name.clone();
        std::thread::scope(|s| {
            let handle = std::thread::Builder::new()
                .name(format!("netns {name}"))
                .spawn_scoped(s, move || {
                    setns(&file, CloneFlags::CLONE_NEWNET)
                        .unwrap_or_else(|e| panic!("setns(CLONE_NEWNET) into {name}: {e}"));
                    drop(file);
                    f()
                })
                .expect("spawn netns thread");
            match handle.join() {
                Ok(r) => r,
                Err(payload) => std::panic::resume_unwind(payload),
            }
        })
    }

    /// Spawns a thread named `name` that first `setns(CLONE_NEWNET)`s into this namespace
    /// (mount namespace unchanged), then runs `f`: [`Netns::enter`] for work that outlives the
    /// call (senders, receivers).
    pub fn spawn<T: Send + 'static>(
        &self,
        name: &str,
        f: impl FnOnce() -> T + Send + 'static,
    ) -> std::thread::JoinHandle<T> {
        let file = self.open();
        let ns_name = self.name.clone();
        std::thread::Builder::new()
            .name(name.into())
            .spawn(move || {
                setns(&file, CloneFlags::CLONE_NEWNET)
                    .unwrap_or_else(|e| panic!("setns(CLONE_NEWNET) into {ns_name}: {e}"));
                drop(file);
                f()
            })
            .unwrap_or_else(|e| panic!("spawn thread {name}: {e}"))
    }

    /// Same as the free function [`veth`].
    pub fn veth_pair(a: &Netns, a_if: &str, b: &Netns, b_if: &str) -> VethPair {
        veth(a, a_if, b, b_if)
    }
}

impl Drop for Netns {
    fn drop(&mut self) {
        delete_namespace(&self.name);
    }
}

/// Description of a veth pair created by [`veth`]. It owns nothing: the pair
/// disappears with either namespace.
#[derive(Debug, Clone)]
pub struct VethPair {
    pub a_ns: String,
    pub a_if: String,
    pub b_ns: String,
    pub b_if: String,
}

/// Deletes temporary root-namespace veth names if setup does not complete.
struct TmpVethGuard<'a> {
    names: [&'a str; 2],
    armed: bool,
}

impl Drop for TmpVethGuard<'_> {
    fn drop(&mut self) {
        if self.armed {
            for n in self.names {
                let _ = Command::new("ip")
                    .args(["link", "del", "dev", n])
                    .stdin(Stdio::null())
                    .stdout(Stdio::null())
                    .stderr(Stdio::null())
                    .status();
            }
        }
    }
}

/// Creates a veth pair `a_if` (in `a`) <-> `b_if` (in `b`): created in the root
/// namespace under unique temporary names, moved, renamed, set up; `lo` is set
/// up in both namespaces. Panics on failure (after removing what it created).
pub fn veth(a: &Netns, a_if: &str, b: &Netns, b_if: &str) -> VethPair {
    check_ifname(a_if);
    check_ifname(b_if);
    let pid = std::process::id();
    let mut names = None;
    for _ in 0..100 {
        let n = IF_COUNTER.fetch_add(1, Ordering::Relaxed) % 1000;
        let (ta, tb) = (
            format!("{TMP_IF_PREFIX}{pid}-{n}a"),
            format!("{TMP_IF_PREFIX}{pid}-{n}b"),
        );
        debug_assert!(ta.len() <= 15);
        let out = output_of(Command::new("ip").args([
            "link", "add", "dev", &ta, "type", "veth", "peer", "name", &tb,
        ]));
        if out.status.success() {
            names = Some((ta, tb));
            break;
        }
        let err = String::from_utf8_lossy(&out.stderr);
        if !err.contains("exists") {
            panic!("`ip link add {ta} type veth peer name {tb}` failed: {err}");
        }
    }
    let (ta, tb) = names.expect("no free temporary veth name");
    let mut guard = TmpVethGuard {
        names: [&ta, &tb],
        armed: true,
    };
    ip(&["link", "set", "dev", &ta, "netns", a.name()]);
    ip(&["link", "set", "dev", &tb, "netns", b.name()]);
    guard.armed = false;
    drop(guard);
    a.ip(&["link", "set", "dev", &ta, "name", a_if]);
    b.ip(&["link", "set", "dev", &tb, "name", b_if]);
    a.ip(&["link", "set", "dev", a_if, "up"]);
    b.ip(&["link", "set", "dev", b_if, "up"]);
    a.ip(&["link", "set", "dev", "lo", "up"]);
    b.ip(&["link", "set", "dev", "lo", "up"]);
    VethPair {
        a_ns: a.name().to_owned(),
        a_if: a_if.to_owned(),
        b_ns: b.name().to_owned(),
        b_if: b_if.to_owned(),
    }
}

/// Sets the MAC address of `ifname` in `ns`.
pub fn set_mac(ns: &Netns, ifname: &str, mac: [u8; 6]) {
    ns.ip(&["link", "set", "dev", ifname, "address", &fmt_mac(mac)]);
}

/// Adds `cidr` (e.g. `10.77.0.1/24` or `fd77::1/64`) to `ifname`; IPv6 addresses
/// are added with `nodad` so they are usable immediately.
pub fn add_addr(ns: &Netns, ifname: &str, cidr: &str) {
    if cidr.contains(':') {
        ns.ip(&["-6", "addr", "add", cidr, "dev", ifname, "nodad"]);
    } else {
        ns.ip(&["-4", "addr", "add", cidr, "dev", ifname]);
    }
}

/// `ip -j link show dev IFNAME` in `ns`, parsed.
pub fn link_json(ns: &Netns, ifname: &str) -> serde_json::Value {
    let text = ns.ip(&["-j", "link", "show", "dev", ifname]);
    let json: serde_json::Value = serde_json::from_str(&text)
        .unwrap_or_else(|e| panic!("cannot parse `ip -j link show` output {text:?}: {e}"));
    json.as_array()
        .and_then(|a| a.first())
        .cloned()
        .unwrap_or_else(|| panic!("no link {ifname} in {}: {text}", ns.name()))
}

/// MAC address of `ifname` in `ns`.
pub fn mac_of(ns: &Netns, ifname: &str) -> [u8; 6] {
    let link = link_json(ns, ifname);
    let addr = link["address"]
        .as_str()
        .unwrap_or_else(|| panic!("{ifname} in {} has no address: {link}", ns.name()));
    parse_mac(addr).unwrap_or_else(|| panic!("bad MAC {addr:?} of {ifname}"))
}

/// Interface index of `ifname` in `ns`.
pub fn ifindex_of(ns: &Netns, ifname: &str) -> u32 {
    let link = link_json(ns, ifname);
    link["ifindex"]
        .as_u64()
        .unwrap_or_else(|| panic!("{ifname} in {} has no ifindex: {link}", ns.name())) as u32
}

/// Waits until `ifname` in `ns` has operstate UP (carrier on both veth ends).
pub fn wait_oper_up(ns: &Netns, ifname: &str, timeout: Duration) {
    let deadline = Instant::now() + timeout;
    loop {
        let link = link_json(ns, ifname);
        if link["operstate"].as_str() == Some("UP") {
            return;
        }
        if Instant::now() >= deadline {
            panic!("{ifname} in {} not UP after {timeout:?}: {link}", ns.name());
        }
        std::thread::sleep(Duration::from_millis(20));
    }
}

/// Creates bridge `name` in `ns` and sets it up: no STP, no forwarding delay and no multicast
/// snooping, so a port forwards as soon as it is up and Neighbor Solicitations reach every port.
pub fn add_bridge(ns: &Netns, name: &str) {
    ns.ip(&[
        "link",
        "add",
        name,
        "type",
        "bridge",
        "stp_state",
        "0",
        "forward_delay",
        "0",
        "mcast_snooping",
        "0",
    ]);
    ns.ip(&["link", "set", "dev", name, "up"]);
}

/// Plugs `ns` into bridge `br` (in namespace `bridge`): a veth from `ns`'s `ifname` to port
/// `port`, enslaved to `br` ([`veth`] sets both ends up).
pub fn add_bridge_port(bridge: &Netns, br: &str, port: &str, ns: &Netns, ifname: &str) {
    veth(ns, ifname, bridge, port);
    bridge.ip(&["link", "set", "dev", port, "master", br]);
}

/// Two namespaces joined by a veth:
/// node `eth0` ([`NODE_MAC`], [`NODE_V4`]/24, [`NODE_V6`]/64) <->
/// client `eth0` ([`CLIENT_MAC`], [`CLIENT_V4`]/24, [`CLIENT_V6`]/64).
/// Node has `arp_ignore=1`, `arp_announce=2`; both have IPv6 DAD disabled.
/// Dropping it deletes both namespaces (and so the veth).
#[derive(Debug)]
pub struct Pair {
    pub node: Netns,
    pub client: Netns,
}

impl Pair {
    /// Builds the pair; `tag` only makes namespace names readable (uniqueness
    /// comes from pid + counter).
    pub fn new(tag: &str) -> Pair {
        let node = Netns::new(&format!("{tag}-node"));
        let client = Netns::new(&format!("{tag}-client"));
        for ns in [&node, &client] {
            ns.disable_dad();
        }
        node.sysctl("net.ipv4.conf.all.arp_ignore", "1");
        node.sysctl("net.ipv4.conf.all.arp_announce", "2");
        veth(&node, NODE_IF, &client, CLIENT_IF);
        node.sysctl(&format!("net.ipv6.conf.{NODE_IF}.accept_dad"), "0");
        client.sysctl(&format!("net.ipv6.conf.{CLIENT_IF}.accept_dad"), "0");
        set_mac(&node, NODE_IF, NODE_MAC);
        set_mac(&client, CLIENT_IF, CLIENT_MAC);
        add_addr(&node, NODE_IF, &format!("{NODE_V4}/{PREFIX_V4}"));
        add_addr(&node, NODE_IF, &format!("{NODE_V6}/{PREFIX_V6}"));
        add_addr(&client, CLIENT_IF, &format!("{CLIENT_V4}/{PREFIX_V4}"));
        add_addr(&client, CLIENT_IF, &format!("{CLIENT_V6}/{PREFIX_V6}"));
        wait_oper_up(&node, NODE_IF, Duration::from_secs(5));
        wait_oper_up(&client, CLIENT_IF, Duration::from_secs(5));
        Pair { node, client }
    }

    /// Namespace names `[node, client]`.
    pub fn names(&self) -> [String; 2] {
        [self.node.name().to_owned(), self.client.name().to_owned()]
    }
}

/// One host on a [`Lan`]: its `eth0` MAC and addresses.
#[derive(Clone, Copy, Debug)]
pub struct LanHost {
    /// MAC of `eth0`.
    pub mac: [u8; 6],
    /// IPv4 address (prefix [`PREFIX_V4`]).
    pub v4: Ipv4Addr,
    /// IPv6 address (prefix [`PREFIX_V6`]).
    pub v6: Ipv6Addr,
}

/// Hosts on one Ethernet segment: a namespace holding bridge `br0`, and one namespace per
/// host whose `eth0` is a port of it. Unlike a [`Pair`], a third host sees (and can forge)
/// traffic between the others. IPv6 DAD is off everywhere. Dropping it deletes every
/// namespace (and so every veth).
#[derive(Debug)]
pub struct Lan {
    pub bridge: Netns,
    /// The hosts, in the order given to [`Lan::new`].
    pub hosts: Vec<Netns>,
}

impl Lan {
    /// Builds the segment; `tag` only makes namespace names readable.
    pub fn new(tag: &str, hosts: &[LanHost]) -> Lan {
        let bridge = Netns::new(&format!("{tag}-br"));
        bridge.disable_dad();
        add_bridge(&bridge, "br0");
        bridge.ip(&["link", "set", "dev", "lo", "up"]);
        let mut out = Vec::with_capacity(hosts.len());
        for (i, h) in hosts.iter().enumerate() {
            let ns = Netns::new(&format!("{tag}-h{i}"));
            ns.disable_dad();
            add_bridge_port(&bridge, "br0", &format!("p{i}"), &ns, "eth0");
            set_mac(&ns, "eth0", h.mac);
            add_addr(&ns, "eth0", &format!("{}/{PREFIX_V4}", h.v4));
            add_addr(&ns, "eth0", &format!("{}/{PREFIX_V6}", h.v6));
            out.push(ns);
        }
        for ns in &out {
            wait_oper_up(ns, "eth0", Duration::from_secs(5));
        }
        Lan { bridge, hosts: out }
    }
}

#[cfg(test)]
mod unit {
    use super::*;

    #[test]
    fn mac_roundtrip() {
        assert_eq!(parse_mac("02:00:00:00:00:01"), Some(NODE_MAC));
        assert_eq!(parse_mac("02-00-00-00-00-0A"), Some([2, 0, 0, 0, 0, 10]));
        assert_eq!(parse_mac("02:00:00:00:00"), None);
        assert_eq!(parse_mac("02:00:00:00:00:01:02"), None);
        assert_eq!(fmt_mac(CLIENT_MAC), "02:00:00:00:00:02");
    }

    #[test]
    fn owner_parsing() {
        assert_eq!(ns_owner("anntest-h1-node-123-456-7"), Some((123, 456)));
        assert_eq!(ns_owner("anntest-123-456-7"), Some((123, 456)));
        assert_eq!(ns_owner("anntest-foo"), None);
        assert_eq!(ns_owner("other-123-456-7"), None);
        assert_eq!(tmp_if_owner("anv4194304-999a"), Some(4194304));
        assert_eq!(tmp_if_owner("anv12-3b"), Some(12));
        assert_eq!(tmp_if_owner("anv12-3c"), None);
        assert_eq!(tmp_if_owner("eth0"), None);
    }
}
