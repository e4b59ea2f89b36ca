//! The XDP responder attached for the flood, exactly as the CLI attaches it (`loader::load` with
//! pins, one VIP written through `Dataplane`), under a pin root of its own that is removed again
//! on drop, also when the benchmark fails half-way.
//!
//! Native mode on a veth needs a second instance: the kernel delivers native `XDP_TX` frames to
//! the peer veth only if the *peer* runs an XDP program too (`veth_xdp_flush` kicks the peer's
//! NAPI only then; GRO alone enables the ring but nothing drains it). The peer gets the same
//! program with no VIPs, which passes every frame.
//!
//! [`Reflector`] attaches the `reflect` floor (swap MACs, `XDP_TX`) the same way, without pins:
//! its only reference is the link this process holds, so dropping it (or the namespace going
//! away) detaches it.

use std::{
    net::Ipv4Addr,
    path::{Path, PathBuf},
};

use announcer::dataplane::{
    Dataplane, Lifetime, Vip,
    loader::{self, Mode, OBJECT},
};
use announcer_ebpf::{
    maps::{Outcome, REFLECTOR},
    wire::MacAddr,
};
use anyhow::{Context, Result, anyhow};
use aya::{
    Ebpf, EbpfLoader,
    programs::{Xdp, XdpMode},
};

use crate::netns::Netns;

/// Interface the responder is attached to, inside the node namespace.
const IFACE: &str = "eth0";

/// The responder attached to `eth0` in a namespace; detached and unpinned on drop.
pub struct Attached {
    root: PathBuf,
    dp: Option<Dataplane>,
    program_id: u32,
}

impl Attached {
    /// `/sys/fs/bpf/announcer-bench-<pid>-<tag>`: unique to this process, never the agent's.
    pub fn pin_root(tag: &str) -> PathBuf {
        PathBuf::from(format!(
            "/sys/fs/bpf/announcer-bench-{}-{tag}",
            std::process::id()
        ))
    }

    /// Every pin root this module uses.
    pub fn pin_roots() -> [PathBuf; 2] {
        [Self::pin_root("node"), Self::pin_root("peer")]
    }

    /// Attaches in `mode` to `eth0` in `ns` and answers `vip` with `mac`.
    pub fn responder(ns: &Netns, mode: Mode, vip: Ipv4Addr, mac: MacAddr) -> Result<Self> {
        Self::new(ns, mode, "node", Some((vip, mac)))
    }

    /// Attaches in native mode to `eth0` in `ns` without VIPs: passes every frame.
    pub fn pass(ns: &Netns) -> Result<Self> {
        Self::new(ns, Mode::Native, "peer", None)
    }

    fn new(ns: &Netns, mode: Mode, tag: &str, vip: Option<(Ipv4Addr, MacAddr)>) -> Result<Self> {
        // The guard exists before anything is pinned, so a failed attach cleans up too.
        let mut me = Self {
            root: Self::pin_root(tag),
            dp: None,
            program_id: 0,
        };
        let root = me.root.clone();
        let (dp, id) = ns.enter(|| -> Result<(Dataplane, u32)> {
            let report = loader::load(&root, IFACE, mode)
                .with_context(|| format!("attaching in {mode} mode"))?;
            let mut dp = Dataplane::open(&root, IFACE)?;
            if let Some((vip, mac)) = vip {
                dp.upsert(Vip::new(vip.into(), None)?, mac, Lifetime::Permanent)?;
            }
            Ok((dp, report.program_id))
        })?;
        me.dp = Some(dp);
        me.program_id = id;
        Ok(me)
    }

    /// Kernel id of the attached program (for its run-time statistics).
    pub fn program_id(&self) -> u32 {
        self.program_id
    }

    /// ARP requests answered so far (the program's own counter).
    pub fn arp_answered(&self) -> Result<u64> {
        let dp = self.dp.as_ref().context("not attached")?;
        let c = dp.counters()?;
        Ok(c.iter()
            .find(|(o, _)| *o == Outcome::ArpAnswered)
            .map_or(0, |c| c.1))
    }
}

impl Drop for Attached {
    fn drop(&mut self) {
        self.dp = None;
        cleanup(&self.root);
    }
}

/// The `reflect` program attached to `eth0` in a namespace, no pins: detached on drop (closing
/// the `bpf_link`).
pub struct Reflector {
    // Holds the program and its link.
    _ebpf: Ebpf,
    program_id: u32,
}

/// The object, unpinned, with the `reflect` program loaded (verified) but not attached.
pub fn load_reflect() -> Result<aya::Ebpf> {
    let mut ebpf = EbpfLoader::new()
        .load(OBJECT)
        .context("loading the XDP object")?;
    let prog: &mut Xdp = ebpf
        .program_mut(REFLECTOR)
        .ok_or_else(|| anyhow!("no program {REFLECTOR} in the object"))?
        .try_into()
        .context("reflect is not XDP")?;
    prog.load().context("verifying reflect")?;
    Ok(ebpf)
}

impl Reflector {
    /// Loads `reflect` from the same object the loader uses and attaches it in `mode`
    /// (`Native` = driver mode, anything else = generic/skb mode) to `eth0` in `ns`.
    pub fn attach(ns: &Netns, mode: Mode) -> Result<Self> {
        ns.enter(|| -> Result<Self> {
            let mut ebpf = load_reflect()?;
            let prog: &mut Xdp = ebpf
                .program_mut(REFLECTOR)
                .expect("loaded by load_reflect")
                .try_into()
                .expect("XDP");
            let flags = if mode == Mode::Native {
                XdpMode::Driver
            } else {
                XdpMode::Skb
            };
            prog.attach(IFACE, flags)
                .with_context(|| format!("attaching reflect in {mode} mode"))?;
            let program_id = prog.info().context("reading reflect's program info")?.id();
            Ok(Self {
                _ebpf: ebpf,
                program_id,
            })
        })
    }

    /// Kernel id of the attached program (for its run-time statistics).
    pub fn program_id(&self) -> u32 {
        self.program_id
    }
}

/// Removes the pin roots of bench processes that no longer exist (killed before their guards
/// ran): `/sys/fs/bpf/announcer-bench-<pid>-*` with a dead `<pid>`. Namespaces of such runs are
/// swept by the netns harness; their programs go with them, only the pins stay behind.
pub fn sweep_stale() {
    let Ok(entries) = std::fs::read_dir("/sys/fs/bpf") else {
        return;
    };
    for e in entries.flatten() {
        let name = e.file_name().to_string_lossy().into_owned();
        let Some(rest) = name.strip_prefix("announcer-bench-") else {
            continue;
        };
        let Some(pid) = rest.split('-').next().and_then(|p| p.parse::<u32>().ok()) else {
            continue;
        };
        if !Path::new(&format!("/proc/{pid}")).exists() {
            cleanup(&e.path());
        }
    }
}

/// Removes the pins (which detaches the program) and the root directory.
pub fn cleanup(root: &Path) {
    if root.join(IFACE).exists()
        && let Err(e) = loader::unload(root, IFACE)
    {
        eprintln!(
            "warning: unloading the bench responder under {}: {e}",
            root.display()
        );
    }
    if root.exists()
        && let Err(e) = std::fs::remove_dir(root)
    {
        eprintln!("warning: removing {}: {e}", root.display());
    }
}
