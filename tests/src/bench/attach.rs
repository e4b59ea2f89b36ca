//! The XDP responder attached for the flood, exactly as the CLI attaches it (`loader::load` with
//! pins, one VIP written through `Dataplane`), under a pin root of its own that is removed again
//! on drop, also when the benchmark fails half-way.

use std::{
    net::Ipv4Addr,
    path::{Path, PathBuf},
};

use announcer::{
    dataplane::{Dataplane, Lifetime, Vip},
    loader::{self, Mode},
};
use announcer_ebpf::{maps::Outcome, wire::MacAddr};
use anyhow::{Context, Result};

use crate::netns::Netns;

/// Interface the responder is attached to, inside the node namespace.
const IFACE: &str = "eth0";

/// The responder attached to `eth0` in a namespace; detached and unpinned on drop.
pub struct Attached {
    root: PathBuf,
    dp: Option<Dataplane>,
}

impl Attached {
    /// `/sys/fs/bpf/announcer-bench-<pid>`: unique to this process, never the agent's root.
    pub fn pin_root() -> PathBuf {
        PathBuf::from(format!("/sys/fs/bpf/announcer-bench-{}", std::process::id()))
    }

    /// Attaches in `mode` to `eth0` in `ns` and answers `vip` with `mac`.
    pub fn new(ns: &Netns, mode: Mode, vip: Ipv4Addr, mac: MacAddr) -> Result<Self> {
        // The guard exists before anything is pinned, so a failed attach cleans up too.
        let mut me = Self { root: Self::pin_root(), dp: None };
        let root = me.root.clone();
        let dp = ns.enter(|| -> Result<Dataplane> {
            loader::load(&root, IFACE, mode).with_context(|| format!("attaching in {mode} mode"))?;
            let mut dp = Dataplane::open(&root, IFACE)?;
            dp.upsert(Vip::new(vip.into(), None)?, mac, Lifetime::Permanent)?;
            Ok(dp)
        })?;
        me.dp = Some(dp);
        Ok(me)
    }

    /// ARP requests answered so far (the program's own counter).
    pub fn arp_answered(&self) -> Result<u64> {
        let dp = self.dp.as_ref().context("not attached")?;
        let c = dp.counters()?;
        Ok(c.iter().find(|(o, _)| *o == Outcome::ArpAnswered).map_or(0, |c| c.1))
    }
}

impl Drop for Attached {
    fn drop(&mut self) {
        self.dp = None;
        cleanup(&self.root);
    }
}

/// Removes the pins (which detaches the program) and the root directory.
pub fn cleanup(root: &Path) {
    if root.join(IFACE).exists() {
        if let Err(e) = loader::unload(root, IFACE) {
            eprintln!("warning: unloading the bench responder under {}: {e}", root.display());
        }
    }
    if root.exists() {
        if let Err(e) = std::fs::remove_dir(root) {
            eprintln!("warning: removing {}: {e}", root.display());
        }
    }
}
