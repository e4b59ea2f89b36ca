//! Periodic gratuitous ARP / unsolicited Neighbor Advertisement while owning
//! (`announcement.refreshInterval`, off by default).
//!
//! Why: the takeover burst (3 rounds, 1 s apart) is enough for a segment that keeps what it
//! learnt, but some switches and routers age their ARP/ND and MAC tables faster than clients
//! re-resolve, or missed the burst altogether (a link that came up later, a router that
//! dropped it under load). Re-announcing now and then refreshes them, as kube-vip's
//! `vip_arpRate` and requests in MetalLB's tracker ask.
//!
//! Why off by default, and why slow: RFC 5227 §3 makes ARP Announcements (a Request with
//! sender and target both the address) the way to update other hosts' caches, and its §2.4
//! limits defending an address to one Announcement per `DEFEND_INTERVAL` (10 s); RFC 4861
//! §7.2.6 allows a node only `MAX_NEIGHBOR_ADVERTISEMENT` (3) unsolicited NAs per change of its
//! link-layer address, "to improve reliability", not as a refresh. A repetition is therefore
//! outside what the RFCs plan for, harmless to conforming hosts but extra multicast on every
//! port: an operator opts in, and the interval may not be shorter than 1 s (the burst's own
//! pacing, `RetransTimer`); 10 s or more is the sensible range.
//!
//! How: the pinned XDP maps are the truth of what this node answers for, so the refresher
//! reads them (every interface with pins under the agent's pin root), never the election
//! state: one frame round per live entry per interval, sent with the MAC the entry answers
//! with. Sends are spread evenly over the interval (entry k of n at `k × interval / n`), not all
//! in one tick, and each entry is looked up again right before its send, so a VIP released
//! meanwhile is never announced again by its old owner.

use std::{
    collections::BTreeMap,
    net::IpAddr,
    path::{Path, PathBuf},
    time::Duration,
};

use announcer_ebpf::wire::MacAddr;
use tokio::time::Instant;

use super::shutdown::Shutdown;
use crate::dataplane::{
    Dataplane,
    announce::{self, BurstConfig, PacketSocket},
    pins,
};

/// The shortest interval accepted: the burst's own pacing (RFC 4861 `RetransTimer`).
pub const MIN_INTERVAL: Duration = announce::RETRANS_TIMER;

/// When, from the start of a cycle of `interval`, the `k`-th of `n` entries is re-announced:
/// evenly spread, the first at once.
pub fn offset(k: usize, n: usize, interval: Duration) -> Duration {
    if n == 0 {
        return Duration::ZERO;
    }
    interval.mul_f64(k as f64 / n as f64)
}

/// One live entry: a VIP this node answers for on an interface, with the MAC it answers with.
#[derive(Clone, Debug, PartialEq, Eq, PartialOrd, Ord)]
struct Owned {
    iface: String,
    vip: IpAddr,
    mac: MacAddr,
}

/// The live entries of every pinned interface under `root`, sorted.
fn owned(root: &Path, maps: &mut BTreeMap<String, Dataplane>) -> Vec<Owned> {
    let mut out = Vec::new();
    for iface in pins::pinned_interfaces(root) {
        out.extend(owned_on(root, &iface, maps));
    }
    out
}

/// The live entries of `iface` (opening its maps once; reopened after an error).
fn owned_on(root: &Path, iface: &str, maps: &mut BTreeMap<String, Dataplane>) -> Vec<Owned> {
    if !maps.contains_key(iface) {
        match Dataplane::open(root, iface) {
            Ok(dp) => {
                maps.insert(iface.to_owned(), dp);
            }
            Err(e) => {
                tracing::debug!(iface, error = %e, "refresh: cannot open the maps");
                return Vec::new();
            }
        }
    }
    let rows = match maps.get(iface).map(Dataplane::list) {
        Some(Ok(rows)) => rows,
        Some(Err(e)) => {
            tracing::debug!(iface, error = %e, "refresh: cannot list the maps");
            maps.remove(iface);
            return Vec::new();
        }
        None => return Vec::new(),
    };
    rows.into_iter()
        .filter(|r| r.is_live())
        .map(|r| Owned {
            iface: iface.to_owned(),
            vip: r.vip.addr,
            mac: r.mac,
        })
        .collect()
}

/// Starts the refresher when `interval` is set: a task that ends with `stop`.
pub fn spawn(root: PathBuf, interval: Option<Duration>, stop: Shutdown) {
    let Some(interval) = interval else { return };
    tracing::info!(?interval, "periodic gratuitous ARP/NA while owning");
    tokio::spawn(async move {
        let mut stop = stop;
        tokio::select! {
            () = stop.recv() => {}
            () = run(root, interval) => {}
        }
    });
}

/// The loop: one cycle per `interval`, each entry once per cycle at its [`offset`].
async fn run(root: PathBuf, interval: Duration) {
    let mut maps = BTreeMap::new();
    let mut socks: BTreeMap<String, PacketSocket> = BTreeMap::new();
    let one = BurstConfig {
        count: 1,
        interval: MIN_INTERVAL,
    };
    loop {
        let start = Instant::now();
        let entries = owned(&root, &mut maps);
        let n = entries.len();
        for (k, e) in entries.into_iter().enumerate() {
            tokio::time::sleep_until(start + offset(k, n, interval)).await;
            // Still this node's, with the same MAC? (Released meanwhile: never announce it.)
            if !owned_on(&root, &e.iface, &mut maps).contains(&e) {
                continue;
            }
            let Some(dp) = maps.get(&e.iface) else {
                continue;
            };
            if !socks.contains_key(&e.iface) {
                match PacketSocket::open(dp.ifindex()) {
                    Ok(s) => {
                        socks.insert(e.iface.clone(), s);
                    }
                    Err(err) => {
                        tracing::warn!(iface = %e.iface, error = %err, "refresh: no packet socket");
                        continue;
                    }
                }
            }
            if let Some(sock) = socks.get(&e.iface) {
                let report = announce::burst_blocking(sock, e.mac, e.vip, None, &one);
                tracing::trace!(vip = %e.vip, iface = %e.iface, ?report, "refreshed");
            }
        }
        tokio::time::sleep_until(start + interval).await;
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn sends_are_spread_over_the_interval_not_sent_in_one_tick() {
        let i = Duration::from_secs(10);
        let offsets: Vec<_> = (0..4).map(|k| offset(k, 4, i)).collect();
        assert_eq!(
            offsets,
            [0, 2500, 5000, 7500].map(Duration::from_millis).to_vec()
        );
        // All within the interval, the first at once.
        assert_eq!(offset(0, 1, i), Duration::ZERO);
        assert!(offset(999, 1000, i) < i);
    }
}
