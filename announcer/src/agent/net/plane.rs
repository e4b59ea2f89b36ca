//! The agent's hands on the data plane: the election core's `Install`, `Remove` and `Announce`
//! become map writes and bursts here, on whichever interfaces VIPs land on.
//!
//! Why a separate type: the core names interfaces only; this keeps, per interface, the loaded
//! program's maps ([`Dataplane`]), a send socket for bursts and the MAC to answer with, loading
//! the XDP program the first time a VIP lands on an interface. With `--no-dataplane` (control-
//! plane benchmarks, many agents in one namespace) it only records what it would have done, so
//! `/state` and the tests still see ownership.

use std::{
    collections::{BTreeMap, BTreeSet},
    net::IpAddr,
    path::PathBuf,
    sync::Arc,
    time::Duration,
};

use announcer_ebpf::wire::MacAddr;

use crate::{
    dataplane::{
        Dataplane, Error, Lifetime, Vip,
        announce::{self, BurstConfig, PacketSocket},
        loader::{self, Mode},
        mcast::Memberships,
        pins::PinLayout,
        sys::netif,
    },
    election::IfaceName,
};

/// One interface the agent announces on.
struct Iface {
    dp: Dataplane,
    sock: Arc<PacketSocket>,
    mac: MacAddr,
}

/// The data plane of this node, as the agent drives it.
pub struct Plane {
    root: PathBuf,
    mode: Mode,
    burst: BurstConfig,
    enabled: bool,
    ifaces: BTreeMap<IfaceName, Iface>,
    /// What is installed (also kept when disabled).
    installed: BTreeSet<(IpAddr, IfaceName)>,
    /// The rest of each VIP's burst, running in the background: aborted when the VIP is
    /// removed (a node that let a VIP go must not keep pointing clients at itself) or
    /// announced again.
    bursts: BTreeMap<(IpAddr, IfaceName), tokio::task::JoinHandle<()>>,
    /// The solicited-node groups of the installed IPv6 VIPs (without them a NIC filter or a
    /// snooping switch drops the NS before XDP).
    mcast: Memberships,
}

impl Plane {
    /// A data plane pinned under `root`, attaching in `mode`; `enabled: false` records only.
    pub fn new(root: PathBuf, mode: Mode, burst: BurstConfig, enabled: bool) -> Self {
        Plane {
            root,
            mode,
            burst,
            enabled,
            ifaces: BTreeMap::new(),
            installed: BTreeSet::new(),
            bursts: BTreeMap::new(),
            mcast: Memberships::new(),
        }
    }

    /// Loads and attaches the program on `names` now, before the election starts: attaching
    /// takes from tens of milliseconds to over a second, and done lazily inside the event loop
    /// it would hold back heartbeats long enough for peers to declare this node dead.
    pub fn prepare(&mut self, names: &[String]) {
        if !self.enabled {
            return;
        }
        for name in names {
            let name: IfaceName = Arc::from(name.as_str());
            if let Err(e) = self.iface(&name) {
                tracing::warn!(iface = %name, error = %e, "cannot attach the data plane yet");
            }
        }
    }

    /// Whether map writes and bursts really happen.
    pub fn enabled(&self) -> bool {
        self.enabled
    }

    fn iface(&mut self, name: &IfaceName) -> Result<&mut Iface, Error> {
        if !self.ifaces.contains_key(name) {
            let report = loader::load(&self.root, name, self.mode)?;
            if report.attached.is_some() {
                tracing::info!(iface = %name, program_id = report.program_id, "XDP responder attached");
            }
            let dp = Dataplane::open(&self.root, name)?;
            let sock = PacketSocket::open(dp.ifindex()).map_err(|e| {
                Error::io(
                    format!("opening a packet socket on {name}"),
                    std::io::Error::other(e),
                )
            })?;
            let mac = netif::mac(name)?;
            self.ifaces.insert(
                name.clone(),
                Iface {
                    dp,
                    sock: Arc::new(sock),
                    mac,
                },
            );
        }
        Ok(self.ifaces.get_mut(name).expect("inserted"))
    }

    /// Entries already in the pinned maps of `candidates` (interfaces that have pins), live
    /// ones only: what a restarted agent finds still answering.
    pub fn existing(&mut self, candidates: &[String]) -> Vec<(IpAddr, IfaceName)> {
        let mut out = Vec::new();
        if !self.enabled {
            return out;
        }
        for name in candidates {
            if !PinLayout::new(&self.root, name).is_loaded() {
                continue;
            }
            let name: IfaceName = Arc::from(name.as_str());
            let rows = match self.iface(&name).and_then(|i| i.dp.list()) {
                Ok(rows) => rows,
                Err(e) => {
                    tracing::warn!(iface = %name, error = %e, "cannot read existing entries");
                    continue;
                }
            };
            for r in rows.into_iter().filter(|r| r.is_live()) {
                self.installed.insert((r.vip.addr, name.clone()));
                self.join(r.vip.addr, &name);
                out.push((r.vip.addr, name.clone()));
            }
        }
        out
    }

    /// Write (or refresh) the entry for `vip` on `iface`, answering with the interface's MAC.
    pub fn install(&mut self, vip: IpAddr, iface: &IfaceName, ttl: Duration) -> Result<(), Error> {
        let refresh = !self.installed.insert((vip, iface.clone()));
        if !self.enabled {
            return Ok(());
        }
        let i = self.iface(iface)?;
        let mac = i.mac;
        if refresh {
            // Written here before: only the deadline moves.
            i.dp.refresh(Vip::new(vip, None)?, mac, ttl)?;
        } else {
            i.dp.upsert(Vip::new(vip, None)?, mac, Lifetime::Ttl(ttl))?;
        }
        // A map lookup once joined; so a join that failed is retried on the next refresh.
        self.join(vip, iface);
        Ok(())
    }

    /// Joins `vip`'s solicited-node group on `iface` (IPv6 only); a failure is logged and
    /// counted, never fatal: the entry answers whatever reaches it.
    fn join(&mut self, vip: IpAddr, iface: &IfaceName) {
        if let Err(e) = self.mcast.join(iface, vip) {
            tracing::warn!(%vip, %iface, error = %e, "cannot join the solicited-node group: solicitations for this VIP may be dropped by the NIC or a snooping switch");
        }
    }

    /// Delete the entry.
    pub fn remove(&mut self, vip: IpAddr, iface: &IfaceName) -> Result<(), Error> {
        self.installed.remove(&(vip, iface.clone()));
        if let Some(rest) = self.bursts.remove(&(vip, iface.clone())) {
            rest.abort();
        }
        if !self.enabled {
            return Ok(());
        }
        if let Err(e) = self.mcast.leave(iface, vip) {
            tracing::warn!(%vip, %iface, error = %e, "cannot leave the solicited-node group");
        }
        self.iface(iface)?.dp.remove(Vip::new(vip, None)?)
    }

    /// Start the announcement burst for `vip` (runs in the background; its first round goes
    /// out before this returns to the runtime).
    pub fn announce(&mut self, vip: IpAddr, iface: &IfaceName) -> Result<(), Error> {
        if !self.enabled {
            return Ok(());
        }
        let burst = self.burst;
        if let Some(rest) = self.bursts.remove(&(vip, iface.clone())) {
            rest.abort();
        }
        let i = self.iface(iface)?;
        let (sock, mac) = (i.sock.clone(), i.mac);
        // Round 0 now, on this thread: the first frame is what moves clients at failover.
        let first = BurstConfig {
            count: 1,
            interval: burst.interval,
        };
        announce::burst_blocking(&sock, mac, vip, None, &first);
        if burst.count > 1 {
            let rest = BurstConfig {
                count: burst.count - 1,
                interval: burst.interval,
            };
            let task = tokio::spawn(async move {
                tokio::time::sleep(rest.interval).await;
                announce::burst(&sock, mac, vip, None, &rest).await;
            });
            self.bursts.retain(|_, t| !t.is_finished());
            self.bursts.insert((vip, iface.clone()), task);
        }
        Ok(())
    }

    /// The MAC this node answers with on `iface`, if the interface is known.
    pub fn mac(&self, iface: &str) -> Option<MacAddr> {
        self.ifaces.get(iface).map(|i| i.mac)
    }

    /// The solicited-node memberships' counters, for the metrics.
    pub fn mcast_stats(&self) -> Arc<crate::dataplane::mcast::MembershipStats> {
        self.mcast.stats()
    }

    /// What is installed, sorted.
    pub fn installed(&self) -> impl Iterator<Item = &(IpAddr, IfaceName)> {
        self.installed.iter()
    }
}
