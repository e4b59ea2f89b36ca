//! Drives the real `announcer` binary inside a node namespace, as an operator would.
//!
//! The binary runs under `nsenter --net` (network namespace only), so the host's bpffs stays
//! visible; each [`Cli`] has its own pin root under `/sys/fs/bpf`, removed on drop together with
//! whatever XDP it attached (deleting the namespace detaches XDP from its veths anyway).

use std::{
    path::{Path, PathBuf},
    process::Output,
    sync::atomic::{AtomicU32, Ordering},
};

use crate::netns::Netns;

static N: AtomicU32 = AtomicU32::new(0);

/// Path of the `announcer` binary built next to the running test binary.
/// (`ANNOUNCER_BIN` overrides.)
pub fn announcer_bin() -> PathBuf {
    if let Some(p) = std::env::var_os("ANNOUNCER_BIN") {
        return p.into();
    }
    let exe = std::env::current_exe().expect("current_exe");
    // target/<profile>/deps/<test> or target/<profile>/<bin> → target/<profile>/announcer
    let mut dir = exe.parent().expect("exe dir");
    if dir.ends_with("deps") {
        dir = dir.parent().expect("target/<profile>");
    }
    let bin = dir.join("announcer");
    assert!(
        bin.exists(),
        "{} is missing: run the tests with `cargo xtask test` (cargo test --workspace), which builds it",
        bin.display()
    );
    bin
}

/// The CLI bound to one namespace and one pin root.
pub struct Cli<'a> {
    ns: &'a Netns,
    root: PathBuf,
}

impl<'a> Cli<'a> {
    /// A CLI for `ns` with a fresh pin root.
    pub fn new(ns: &'a Netns) -> Self {
        let root = PathBuf::from(format!(
            "/sys/fs/bpf/anntest-{}-{}",
            std::process::id(),
            N.fetch_add(1, Ordering::Relaxed)
        ));
        Self { ns, root }
    }

    /// The pin root.
    pub fn root(&self) -> &Path {
        &self.root
    }

    /// Runs `announcer --pin-root ROOT args...` in the namespace.
    pub fn output(&self, args: &[&str]) -> Output {
        let mut cmd = self.ns.nsenter_cmd(announcer_bin().to_str().unwrap());
        cmd.arg("--pin-root").arg(&self.root).args(args);
        cmd.output().expect("spawn announcer")
    }

    /// Runs `announcer --pin-root ROOT args...` in the namespace with only the capabilities
    /// `deploy/daemonset.yaml` grants the agent (CAP_BPF, CAP_NET_ADMIN, CAP_NET_RAW,
    /// CAP_PERFMON; no CAP_SYS_ADMIN), through `setpriv --bounding-set`.
    pub fn output_as_daemonset(&self, args: &[&str]) -> Output {
        let mut cmd = self.ns.nsenter_cmd("setpriv");
        cmd.args([
            "--bounding-set",
            "-all,+bpf,+net_admin,+net_raw,+perfmon",
            "--",
        ])
        .arg(announcer_bin())
        .arg("--pin-root")
        .arg(&self.root)
        .args(args);
        cmd.output().expect("spawn setpriv announcer")
    }

    /// Runs and panics, with the output, unless it succeeds; returns stdout.
    pub fn ok(&self, args: &[&str]) -> String {
        let o = self.output(args);
        assert!(
            o.status.success(),
            "announcer {args:?} failed with {}:\n{}\n{}",
            o.status,
            String::from_utf8_lossy(&o.stdout),
            String::from_utf8_lossy(&o.stderr)
        );
        String::from_utf8_lossy(&o.stdout).into_owned()
    }

    /// `load --iface IFACE --mode MODE`.
    pub fn load(&self, iface: &str, mode: &str) -> String {
        self.ok(&["load", "--iface", iface, "--mode", mode])
    }

    /// `load` of this build's object stamped with another program version (hidden
    /// `--program-version`): what an older or newer build would have left running.
    pub fn load_version(&self, iface: &str, mode: &str, version: u32) -> String {
        let version = version.to_string();
        self.ok(&[
            "load",
            "--iface",
            iface,
            "--mode",
            mode,
            "--program-version",
            &version,
        ])
    }

    /// `vip add VIP --iface IFACE EXTRA...`.
    pub fn add_vip(&self, vip: impl std::fmt::Display, iface: &str, extra: &[&str]) -> String {
        let vip = vip.to_string();
        let mut args = vec!["vip", "add", &vip, "--iface", iface];
        args.extend_from_slice(extra);
        self.ok(&args)
    }

    /// `status --json` parsed.
    pub fn status(&self) -> serde_json::Value {
        serde_json::from_str(&self.ok(&["status", "--json"])).expect("status --json is JSON")
    }

    /// A counter from `status --json` for `iface`.
    pub fn counter(&self, iface: &str, name: &str) -> u64 {
        let s = self.status();
        s["interfaces"]
            .as_array()
            .unwrap()
            .iter()
            .find(|i| i["iface"] == iface)
            .unwrap_or_else(|| panic!("{iface} not in status: {s}"))["counters"][name]
            .as_u64()
            .unwrap()
    }
}

impl Drop for Cli<'_> {
    fn drop(&mut self) {
        // Pins hold the links; removing them (and the namespace going away) detaches the program.
        let _ = std::fs::remove_dir_all(&self.root);
    }
}

/// Another tool's XDP program attached to an interface (a CNI's acceleration, say), until
/// dropped, which detaches it: this build's object loaded un-pinned, with maps of its own.
pub struct ForeignXdp {
    _ebpf: aya::Ebpf,
    /// Its kernel id.
    pub id: u32,
}

impl ForeignXdp {
    /// Attaches one to `iface` of `ns` in generic mode.
    pub fn attach(ns: &crate::netns::Netns, iface: &str) -> ForeignXdp {
        use aya::programs::{Xdp, XdpMode};
        ns.enter(|| {
            let mut ebpf = aya::EbpfLoader::new()
                .load(announcer::dataplane::loader::OBJECT)
                .expect("load the object");
            let prog: &mut Xdp = ebpf
                .program_mut(announcer_ebpf::maps::PROGRAM)
                .expect("the program")
                .try_into()
                .expect("XDP");
            prog.load().expect("verify");
            let id = prog.info().expect("program info").id();
            prog.attach(iface, XdpMode::Skb)
                .expect("attach the foreign program");
            ForeignXdp { _ebpf: ebpf, id }
        })
    }
}
