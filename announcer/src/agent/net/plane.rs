//! The agent's hands on the data plane: the election core's `Install`, `Remove` and `Announce`
//! become map writes and bursts here, on whichever interfaces VIPs land on.
//!
//! Why a separate type: the core names interfaces only; this keeps, per interface, the loaded
//! program's maps ([`Dataplane`]), a send socket for bursts and the MAC to answer with, loading
//! the XDP program the first time a VIP lands on an interface. With `--no-dataplane` (control-
//! plane benchmarks, many agents in one namespace) it only records what it would have done, so
//! `/state` and the tests still see ownership.
//!
//! # When the program cannot be attached
//! Another XDP program on the interface (a CNI's acceleration), an old kernel, missing
//! privileges: the interface is then *down* for the data plane ([`Plane::down`]). The failure
//! is explained ([`xdp_query::explain_attach_failure`] names a foreign program and the ways
//! out), nothing is replaced, and the attach is retried with [`Backoff`] (while a foreign
//! program is still there a retry costs one netlink query, not a program load). The shell
//! hears of every failure and recovery ([`Plane::take_changes`]): it reports the interface down
//! to the election core (as a link that is down: the VIPs there are withdrawn and not taken)
//! and marks its link down in the Lease ([`mark_links_down`]), so no peer ranks this node for
//! a VIP that belongs there either (nor moves it to another of its links), and raises it (a Warning Event on the Node, the
//! `announcer_dataplane_up` and `announcer_dataplane_attach_failures_total` metrics). The
//! Pod stays ready: one such node must not stall a DaemonSet roll.

use std::{
    collections::{BTreeMap, BTreeSet},
    net::IpAddr,
    path::PathBuf,
    sync::Arc,
    time::{Duration, Instant},
};

use announcer_ebpf::wire::MacAddr;

use crate::{
    dataplane::{
        Dataplane, Error, Lifetime, Vip,
        announce::{BurstConfig, PacketSocket, PreparedBurst},
        loader::{self, Mode},
        mcast::Memberships,
        pace::PaceConfig,
        pins::PinLayout,
        sys::{netif, xdp_query},
    },
    election::IfaceName,
};

use super::announcements::{Announcements, Job};
use crate::election::Link;

/// When to try attaching again after a failure: [`Backoff::FIRST`] after the first, doubling
/// up to a cap. With a foreign program on the interface the cap is [`Backoff::MAX`], short
/// enough that a node is back within seconds of the other program's removal (a retry that
/// finds it still attached costs one netlink query); for any other failure (an old kernel,
/// missing privileges) it is [`Backoff::MAX_LOAD`], as each retry loads and verifies the
/// program on the election thread.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Backoff {
    /// Failed attempts in a row.
    pub failures: u32,
    /// When the next attempt is due.
    pub next: Instant,
}

impl Backoff {
    /// The wait after the first failure.
    pub const FIRST: Duration = Duration::from_secs(1);
    /// The longest wait while a foreign program is attached.
    pub const MAX: Duration = Duration::from_secs(8);
    /// The longest wait after other failures.
    pub const MAX_LOAD: Duration = Duration::from_secs(60);

    /// After the first failure, at `now`.
    pub fn first(now: Instant) -> Self {
        Backoff {
            failures: 1,
            next: now + Self::FIRST,
        }
    }

    /// After another failure, at `now`, waiting at most `max`.
    pub fn failed_again(self, now: Instant, max: Duration) -> Self {
        let failures = self.failures.saturating_add(1);
        let wait = Self::FIRST
            .saturating_mul(1u32 << (failures - 1).min(16))
            .min(max);
        Backoff {
            failures,
            next: now + wait,
        }
    }
}

/// Why the data plane is down on an interface.
#[derive(Debug)]
pub struct Down {
    /// The last failure.
    pub error: Error,
    /// When it is tried again.
    pub backoff: Backoff,
}

/// The `reason` label of an attach failure.
pub fn failure_reason(e: &Error) -> &'static str {
    match e {
        Error::ForeignXdp { .. } => "foreign_program",
        Error::XdpUnsupported { .. } => "unsupported",
        Error::Privileges { .. } => "privileges",
        Error::NoSuchInterface(_) => "no_interface",
        Error::NoBpffs(_) | Error::EphemeralBpffs(_) => "bpffs",
        _ => "other",
    }
}

/// A change of the data plane's state on an interface, for the shell to act on and report.
#[derive(Debug)]
pub enum PlaneChange {
    /// An attach attempt failed (`first`: the interface just went down).
    Failed {
        /// The interface.
        iface: IfaceName,
        /// [`failure_reason`].
        reason: &'static str,
        /// The error and its fix, for the log and the Event.
        message: String,
        /// The first failure of this episode.
        first: bool,
    },
    /// Attached (or found attached).
    Up {
        /// The interface.
        iface: IfaceName,
        /// The program now attached.
        program_id: u32,
        /// It had failed before.
        recovered: bool,
    },
}

/// Marks the links (as published in the Lease) whose data plane is down ([`Link::down`]):
/// peers then rank this node for no VIP that belongs on them.
pub fn mark_links_down<'a>(links: &mut [Link], down: impl IntoIterator<Item = &'a str>) {
    for name in down {
        for l in links.iter_mut().filter(|l| l.name.as_deref() == Some(name)) {
            l.down = true;
        }
    }
}

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
    /// The VIPs' bursts, paced: cancelled when the VIP is removed (a node that let a VIP go
    /// must not keep pointing clients at itself), replaced when it is announced again.
    announcements: Announcements,
    /// The solicited-node groups of the installed IPv6 VIPs (without them a NIC filter or a
    /// snooping switch drops the NS before XDP).
    mcast: Memberships,
    /// Interfaces the program could not be attached to.
    down: BTreeMap<IfaceName, Down>,
    /// What the shell has not collected yet ([`Plane::take_changes`]).
    changes: Vec<PlaneChange>,
}

impl Plane {
    /// A data plane pinned under `root`, attaching in `mode`, announcing with `burst` at the
    /// pace of `pace`; `enabled: false` records only.
    pub fn new(
        root: PathBuf,
        mode: Mode,
        burst: BurstConfig,
        pace: PaceConfig,
        enabled: bool,
    ) -> Self {
        Plane {
            root,
            mode,
            burst,
            enabled,
            ifaces: BTreeMap::new(),
            installed: BTreeSet::new(),
            announcements: Announcements::new(pace),
            mcast: Memberships::new(),
            down: BTreeMap::new(),
            changes: Vec::new(),
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
            // A failure is recorded in `down` and reported through `take_changes`.
            let _ = self.iface(&name);
        }
    }

    /// Whether map writes and bursts really happen.
    pub fn enabled(&self) -> bool {
        self.enabled
    }

    /// Interfaces whose data plane is down, and why.
    pub fn down(&self) -> impl Iterator<Item = (&IfaceName, &Down)> {
        self.down.iter()
    }

    /// Whether the data plane is down on `name`.
    pub fn is_down(&self, name: &str) -> bool {
        self.down.contains_key(name)
    }

    /// Names of the interfaces whose data plane is down.
    pub fn down_names(&self) -> impl Iterator<Item = &str> {
        self.down.keys().map(|k| &**k)
    }

    /// When the next attach retry is due, if any interface is down.
    pub fn next_retry(&self) -> Option<Instant> {
        self.down.values().map(|d| d.backoff.next).min()
    }

    /// Retries the attach on every down interface whose backoff has passed.
    pub fn retry_due(&mut self, now: Instant) {
        let due: Vec<IfaceName> = self
            .down
            .iter()
            .filter(|(_, d)| d.backoff.next <= now)
            .map(|(n, _)| n.clone())
            .collect();
        for name in due {
            // A foreign program still there: no need to load ours to hear "busy" again.
            let still = match &self.down[&name].error {
                Error::ForeignXdp { .. } => netif::ifindex(&name).ok().and_then(|ix| {
                    let e = xdp_query::explain_attach_failure(
                        &name,
                        ix,
                        self.ours(&name),
                        Error::NotLoaded(name.to_string()),
                    );
                    matches!(e, Error::ForeignXdp { .. }).then_some(e)
                }),
                _ => None,
            };
            match still {
                Some(e) => self.failed(&name, e, now),
                None => {
                    let _ = self.attach(&name, now);
                }
            }
        }
    }

    /// Failures and recoveries since the last call.
    pub fn take_changes(&mut self) -> Vec<PlaneChange> {
        std::mem::take(&mut self.changes)
    }

    /// Records a failed attach on `name` at `now`.
    fn failed(&mut self, name: &IfaceName, error: Error, now: Instant) {
        let first = !self.down.contains_key(name);
        let max = match error {
            Error::ForeignXdp { .. } => Backoff::MAX,
            _ => Backoff::MAX_LOAD,
        };
        let backoff = match self.down.get(name) {
            Some(d) => d.backoff.failed_again(now, max),
            None => Backoff::first(now),
        };
        let mut message = error.to_string();
        if let Some(hint) = error.hint() {
            message = format!("{message}; {hint}");
        }
        self.changes.push(PlaneChange::Failed {
            iface: name.clone(),
            reason: failure_reason(&error),
            message,
            first,
        });
        self.down.insert(name.clone(), Down { error, backoff });
    }

    /// Attaches on `name` (or finds it attached) and opens what answering needs; a failure is
    /// explained and recorded ([`Plane::down`]).
    fn attach(&mut self, name: &IfaceName, now: Instant) -> Result<(), Error> {
        match self.open(name) {
            Ok((iface, program_id)) => {
                self.ifaces.insert(name.clone(), iface);
                let recovered = self.down.remove(name).is_some();
                self.changes.push(PlaneChange::Up {
                    iface: name.clone(),
                    program_id,
                    recovered,
                });
                Ok(())
            }
            Err(e) => {
                let e = match e {
                    Error::XdpUnsupported { .. } | Error::Bpf { .. } => {
                        match netif::ifindex(name) {
                            Ok(ix) => {
                                xdp_query::explain_attach_failure(name, ix, self.ours(name), e)
                            }
                            Err(_) => e,
                        }
                    }
                    e => e,
                };
                let shown = Error::NotLoaded(name.to_string());
                self.failed(name, e, now);
                Err(shown)
            }
        }
    }

    /// The id of our own pinned program on `name`, if pinned: never called foreign.
    fn ours(&self, name: &str) -> Option<u32> {
        let pins = PinLayout::new(&self.root, name);
        pins.is_loaded().then(|| pins.program_id().ok()).flatten()
    }

    fn iface(&mut self, name: &IfaceName) -> Result<&mut Iface, Error> {
        if !self.ifaces.contains_key(name) {
            if self.down.contains_key(name) {
                // Down: retried on its backoff ([`Plane::retry_due`]), not on every map write.
                return Err(Error::NotLoaded(name.to_string()));
            }
            self.attach(name, Instant::now())?;
        }
        Ok(self.ifaces.get_mut(name).expect("inserted"))
    }

    /// Loads and attaches the program on `name` (or finds it attached), opens its maps, a
    /// packet socket and reads the MAC; with the program's id.
    fn open(&self, name: &IfaceName) -> Result<(Iface, u32), Error> {
        {
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
            Ok((
                Iface {
                    dp,
                    sock: Arc::new(sock),
                    mac,
                },
                report.program_id,
            ))
        }
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
        let written = self.iface(iface).and_then(|i| {
            let mac = i.mac;
            if refresh {
                // Written here before: only the deadline moves.
                i.dp.refresh(Vip::new(vip, None)?, mac, ttl)
            } else {
                i.dp.upsert(Vip::new(vip, None)?, mac, Lifetime::Ttl(ttl))
            }
        });
        if written.is_err() && !refresh {
            // Never written: not installed (the Announced condition waits for it).
            self.installed.remove(&(vip, iface.clone()));
        }
        if written.is_ok() {
            // A map lookup once joined; so a join that failed is retried on the next refresh.
            self.join(vip, iface);
        }
        written
    }

    /// Joins `vip`'s solicited-node group on `iface` (IPv6 only); a failure is logged and
    /// counted, never fatal: the entry answers whatever reaches it.
    fn join(&mut self, vip: IpAddr, iface: &IfaceName) {
        if let Err(e) = self.mcast.join(iface, vip) {
            tracing::warn!(%vip, %iface, error = %e, "cannot join the solicited-node group: solicitations for this VIP may be dropped by the NIC or a snooping switch");
        }
    }

    /// Whether the entry for `vip` on `iface` was written.
    pub fn is_installed(&self, vip: IpAddr, iface: &IfaceName) -> bool {
        self.installed.contains(&(vip, iface.clone()))
    }

    /// Delete the entry.
    pub fn remove(&mut self, vip: IpAddr, iface: &IfaceName) -> Result<(), Error> {
        self.installed.remove(&(vip, iface.clone()));
        self.announcements.cancel(vip, iface);
        if !self.enabled {
            return Ok(());
        }
        if let Err(e) = self.mcast.leave(iface, vip) {
            tracing::warn!(%vip, %iface, error = %e, "cannot leave the solicited-node group");
        }
        self.iface(iface)?.dp.remove(Vip::new(vip, None)?)
    }

    /// Start the announcement burst for `vip`: its rounds go out through the pacer (round 0
    /// on this thread, before this returns, unless a mass takeover has used up the bucket;
    /// the rest from a background task).
    pub fn announce(&mut self, vip: IpAddr, iface: &IfaceName) -> Result<(), Error> {
        if !self.enabled {
            return Ok(());
        }
        let burst = self.burst;
        let i = self.iface(iface)?;
        let (sock, mac) = (i.sock.clone(), i.mac);
        match PreparedBurst::new(mac, vip, None, &burst) {
            Ok(burst) => self.announcements.announce(vip, iface, Job { burst, sock }),
            // Logged where it was found; nothing to send.
            Err(_) => self.announcements.cancel(vip, iface),
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

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn attach_retries_back_off_doubling_up_to_the_cap() {
        let t = Instant::now();
        let waits = |max| {
            let mut b = Backoff::first(t);
            let mut waits = vec![b.next - t];
            for _ in 0..7 {
                b = b.failed_again(t, max);
                waits.push(b.next - t);
            }
            waits
        };
        let s = Duration::from_secs;
        assert_eq!(
            waits(Backoff::MAX),
            [s(1), s(2), s(4), s(8), s(8), s(8), s(8), s(8)]
        );
        assert_eq!(
            waits(Backoff::MAX_LOAD),
            [s(1), s(2), s(4), s(8), s(16), s(32), s(60), s(60)]
        );
    }

    /// A plane on an interface that does not exist: every attach fails.
    fn failing() -> (Plane, IfaceName, IpAddr) {
        let plane = Plane::new(
            std::env::temp_dir().join("announcer-plane-test"),
            Mode::Generic,
            BurstConfig::default(),
            PaceConfig::default(),
            true,
        );
        (
            plane,
            IfaceName::from("nosuch-if0"),
            "10.0.0.5".parse().unwrap(),
        )
    }

    #[test]
    fn a_failed_install_leaves_the_vip_not_installed() {
        let (mut plane, iface, vip) = failing();
        let ttl = Duration::from_secs(5);
        assert!(plane.install(vip, &iface, ttl).is_err());
        assert_eq!(
            plane.installed().count(),
            0,
            "a VIP whose map write failed counts as installed (and would be Announced)"
        );
    }

    #[test]
    fn a_failed_attach_takes_the_interface_down_once_and_is_retried_on_its_backoff() {
        let (mut plane, iface, vip) = failing();
        let ttl = Duration::from_secs(5);
        let _ = plane.install(vip, &iface, ttl);
        let _ = plane.install(vip, &iface, ttl);
        let changes = plane.take_changes();
        assert!(
            matches!(
                changes.as_slice(),
                [PlaneChange::Failed {
                    first: true,
                    reason: "no_interface",
                    ..
                }]
            ),
            "one failure reported, not one per map write: {changes:?}"
        );
        assert_eq!(plane.down_names().collect::<Vec<_>>(), ["nosuch-if0"]);
        let due = plane.next_retry().expect("a retry is scheduled");
        plane.retry_due(due);
        assert!(matches!(
            plane.take_changes().as_slice(),
            [PlaneChange::Failed { first: false, .. }]
        ));
        assert!(plane.next_retry().expect("still scheduled") >= due + Backoff::FIRST * 2);
    }

    #[test]
    fn the_link_of_an_interface_whose_data_plane_is_down_is_published_down() {
        let link = |name: &str| Link {
            name: Some(name.into()),
            mac: MacAddr([2, 0, 0, 0, 0, 1]),
            subnets: Vec::new(),
            fallback: false,
            down: false,
        };
        let mut links = vec![link("eth0"), link("eth1")];
        mark_links_down(&mut links, ["eth1"]);
        assert!(!links[0].down);
        assert!(links[1].down);
    }
}
