//! The VIP table of one interface: writes entries the XDP program answers from, and reads the
//! counters it keeps.
//!
//! A takeover is [`Dataplane::upsert`] (one map write) followed by the announcement burst; a
//! refresh is the same write with a later deadline. Entries carry their own deadline on the
//! monotonic clock, so if whoever refreshes them dies, the program stops answering by itself.

use std::{
    net::{IpAddr, Ipv4Addr, Ipv6Addr},
    path::Path,
    time::Duration,
};

use announcer_ebpf::{
    maps::{
        COUNTERS, MAX_VIPS, NEVER_EXPIRES, Outcome, STATS_V4, STATS_V6, VIPS_V4, VIPS_V6,
        VLAN_NONE, VipEntry, VipKeyV4, VipKeyV6, VipStats,
    },
    wire::MacAddr,
};
use aya::{
    Ebpf,
    maps::{HashMap, Map, MapData, MapError, PerCpuArray, PerCpuHashMap, PerCpuValues},
    util::nr_cpus,
};

use super::{
    error::{Error, Result},
    pins::PinLayout,
    sys::{clock, netif},
};

/// A VIP as the data plane keys it: an address on a VLAN (0 = untagged).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct Vip {
    /// The address.
    pub addr: IpAddr,
    /// 802.1Q VLAN id, or 0 for untagged.
    pub vlan: u16,
}

impl Vip {
    /// Checks that `addr` can be a VIP and `vlan` is a usable VLAN id.
    pub fn new(addr: IpAddr, vlan: Option<u16>) -> Result<Self> {
        let vlan = match vlan {
            None => VLAN_NONE,
            Some(v @ 1..=4094) => v,
            Some(v) => return Err(Error::VlanMismatch(v)),
        };
        let bad = |why| Err(Error::BadAddress { addr, why });
        match addr {
            IpAddr::V4(a) => {
                if a.is_unspecified() || a.is_broadcast() {
                    return bad("unspecified or broadcast");
                }
                if a.is_multicast() {
                    return bad("multicast");
                }
                if a.is_loopback() {
                    return bad("loopback");
                }
                if a.is_link_local() {
                    return bad("link-local");
                }
            }
            IpAddr::V6(a) => {
                if let Some(v4) = a.to_ipv4_mapped() {
                    return Err(Error::FamilyMismatch(format!(
                        "{a} is an IPv4-mapped IPv6 address; add the IPv4 VIP {v4} instead"
                    )));
                }
                if a.is_unspecified() || a.is_loopback() {
                    return bad("unspecified or loopback");
                }
                if a.is_multicast() {
                    return bad("multicast (Neighbor Discovery never resolves those)");
                }
                if a.is_unicast_link_local() {
                    return bad("link-local");
                }
            }
        }
        Ok(Self { addr, vlan })
    }
}

/// How long an entry lives.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Lifetime {
    /// Until the deadline `now + ttl`; the agent refreshes it.
    Ttl(Duration),
    /// Never expires (`vip add --permanent`, static use).
    Permanent,
}

/// One row of [`Dataplane::list`].
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct VipStatus {
    /// The VIP.
    pub vip: Vip,
    /// MAC answered with.
    pub mac: MacAddr,
    /// Time left before the program stops answering; `None` if permanent. Zero if expired.
    pub expires_in: Option<Duration>,
    /// Counters summed over CPUs.
    pub stats: VipStats,
}

impl VipStatus {
    /// Whether the program currently answers for this VIP.
    pub fn is_live(&self) -> bool {
        self.expires_in.is_none_or(|d| !d.is_zero())
    }
}

/// Handles on one interface's maps.
pub struct Dataplane {
    iface: String,
    ifindex: u32,
    v4: HashMap<MapData, VipKeyV4, VipEntry>,
    v6: HashMap<MapData, VipKeyV6, VipEntry>,
    stats_v4: PerCpuHashMap<MapData, VipKeyV4, VipStats>,
    stats_v6: PerCpuHashMap<MapData, VipKeyV6, VipStats>,
    counters: PerCpuArray<MapData, u64>,
}

impl Dataplane {
    /// Opens the pinned maps of `iface` under `root`.
    pub fn open(root: &Path, iface: &str) -> Result<Self> {
        let ifindex = netif::ifindex(iface)?;
        let pins = PinLayout::new(root, iface);
        if !pins.is_loaded() {
            return Err(Error::NotLoaded(iface.to_owned()));
        }
        let open = |name: &str| -> Result<Map> {
            let path = pins.map(name);
            let data = MapData::from_pin(&path)
                .map_err(|e| Error::bpf(format!("opening {}", path.display()), e))?;
            Map::from_map_data(data).map_err(|e| Error::bpf(format!("opening {name}"), e))
        };
        Self::from_maps(
            iface,
            ifindex,
            [
                open(VIPS_V4)?,
                open(VIPS_V6)?,
                open(STATS_V4)?,
                open(STATS_V6)?,
                open(COUNTERS)?,
            ],
        )
    }

    /// Takes the maps out of a freshly loaded (unpinned) object: for tests and benchmarks that
    /// run the program with `BPF_PROG_TEST_RUN`.
    pub fn from_ebpf(ebpf: &mut Ebpf, iface: &str, ifindex: u32) -> Result<Self> {
        let mut take = |name: &str| {
            ebpf.take_map(name)
                .ok_or_else(|| Error::NotLoaded(format!("{iface} (no map {name})")))
        };
        let maps = [
            take(VIPS_V4)?,
            take(VIPS_V6)?,
            take(STATS_V4)?,
            take(STATS_V6)?,
            take(COUNTERS)?,
        ];
        Self::from_maps(iface, ifindex, maps)
    }

    fn from_maps(iface: &str, ifindex: u32, maps: [Map; 5]) -> Result<Self> {
        let [v4, v6, s4, s6, c] = maps;
        let conv = |e: MapError| Error::bpf("unexpected map type", e);
        Ok(Self {
            iface: iface.to_owned(),
            ifindex,
            v4: v4.try_into().map_err(conv)?,
            v6: v6.try_into().map_err(conv)?,
            stats_v4: s4.try_into().map_err(conv)?,
            stats_v6: s6.try_into().map_err(conv)?,
            counters: c.try_into().map_err(conv)?,
        })
    }

    /// Interface name.
    pub fn iface(&self) -> &str {
        &self.iface
    }

    /// Interface index (the `ifindex` in every key).
    pub fn ifindex(&self) -> u32 {
        self.ifindex
    }

    fn key4(&self, a: Ipv4Addr, vlan: u16) -> VipKeyV4 {
        VipKeyV4::new(self.ifindex, vlan, a.octets())
    }

    fn key6(&self, a: Ipv6Addr, vlan: u16) -> VipKeyV6 {
        VipKeyV6::new(self.ifindex, vlan, a.octets())
    }

    /// Writes (or refreshes) `vip` → `mac` with `lifetime`. This single write is what makes
    /// the program start answering; the counters entry is created alongside if missing.
    pub fn upsert(&mut self, vip: Vip, mac: MacAddr, lifetime: Lifetime) -> Result<()> {
        let expires_ns = match lifetime {
            Lifetime::Permanent => NEVER_EXPIRES,
            Lifetime::Ttl(ttl) => clock::deadline_ns(ttl),
        };
        let entry = entry_for(mac, expires_ns)?;
        let iface = self.iface.as_str();
        let full = |family| move |e: MapError| map_full_or(e, iface, family);
        // Counters first, so the first answer is already counted.
        match vip.addr {
            IpAddr::V4(a) => {
                let key = self.key4(a, vip.vlan);
                if self.stats_v4.get(&key, 0).is_err() {
                    self.stats_v4
                        .insert(key, zeros()?, 0)
                        .map_err(full("IPv4"))?;
                }
            }
            IpAddr::V6(a) => {
                let key = self.key6(a, vip.vlan);
                if self.stats_v6.get(&key, 0).is_err() {
                    self.stats_v6
                        .insert(key, zeros()?, 0)
                        .map_err(full("IPv6"))?;
                }
            }
        }
        self.write(vip, entry)
    }

    /// Pushes the deadline of an entry this handle wrote with [`Self::upsert`] (the agent's
    /// periodic refresh): the same single write, without upsert's look at the counters entry,
    /// which exists already. With 1,000 VIPs refreshed every second that lookup (a per-CPU
    /// copy) was half the cost of the refresh. An entry deleted meanwhile by someone else is
    /// written again, with no counters entry until the next [`Self::upsert`].
    pub fn refresh(&mut self, vip: Vip, mac: MacAddr, ttl: Duration) -> Result<()> {
        let entry = entry_for(mac, clock::deadline_ns(ttl))?;
        self.write(vip, entry)
    }

    /// The one write that makes the program answer `vip` (or stop at `expires_ns`).
    fn write(&mut self, vip: Vip, entry: VipEntry) -> Result<()> {
        let iface = self.iface.as_str();
        let full = |family| move |e: MapError| map_full_or(e, iface, family);
        match vip.addr {
            IpAddr::V4(a) => {
                let key = self.key4(a, vip.vlan);
                self.v4.insert(key, entry, 0).map_err(full("IPv4"))
            }
            IpAddr::V6(a) => {
                let key = self.key6(a, vip.vlan);
                self.v6.insert(key, entry, 0).map_err(full("IPv6"))
            }
        }
    }

    /// Stops answering for `vip` at once and drops its counters.
    pub fn remove(&mut self, vip: Vip) -> Result<()> {
        let missing = || Error::NoSuchVip {
            addr: vip.addr,
            iface: self.iface.clone(),
            vlan: vip.vlan,
        };
        match vip.addr {
            IpAddr::V4(a) => {
                let key = self.key4(a, vip.vlan);
                self.v4.remove(&key).map_err(|_| missing())?;
                let _ = self.stats_v4.remove(&key);
            }
            IpAddr::V6(a) => {
                let key = self.key6(a, vip.vlan);
                self.v6.remove(&key).map_err(|_| missing())?;
                let _ = self.stats_v6.remove(&key);
            }
        }
        Ok(())
    }

    /// Moves entries keyed with another interface index (left from before the interface was
    /// recreated; the maps are per interface, so every entry belongs here) to this one. Returns
    /// how many moved.
    pub fn rekey(&mut self) -> Result<usize> {
        let (ifindex, iface) = (self.ifindex, self.iface.as_str());
        Ok(
            rekey_map(&mut self.v4, &mut self.stats_v4, ifindex, iface, "IPv4")?
                + rekey_map(&mut self.v6, &mut self.stats_v6, ifindex, iface, "IPv6")?,
        )
    }

    /// Every VIP of this interface with its MAC, time to expiry and counters, sorted.
    pub fn list(&self) -> Result<Vec<VipStatus>> {
        let now = clock::monotonic_ns();
        let left = |e: &VipEntry| {
            (e.expires_ns != NEVER_EXPIRES)
                .then(|| Duration::from_nanos(e.expires_ns.saturating_sub(now)))
        };
        let mut out = Vec::new();
        for item in self.v4.iter() {
            let (k, e) = item.map_err(|e| Error::bpf("reading VIPS_V4", e))?;
            let stats = self.stats_v4.get(&k, 0).map(sum).unwrap_or_default();
            let vip = Vip {
                addr: IpAddr::V4(Ipv4Addr::from(k.addr)),
                vlan: k.vlan,
            };
            out.push(VipStatus {
                vip,
                mac: MacAddr(e.mac),
                expires_in: left(&e),
                stats,
            });
        }
        for item in self.v6.iter() {
            let (k, e) = item.map_err(|e| Error::bpf("reading VIPS_V6", e))?;
            let stats = self.stats_v6.get(&k, 0).map(sum).unwrap_or_default();
            let vip = Vip {
                addr: IpAddr::V6(Ipv6Addr::from(k.addr)),
                vlan: k.vlan,
            };
            out.push(VipStatus {
                vip,
                mac: MacAddr(e.mac),
                expires_in: left(&e),
                stats,
            });
        }
        out.sort_by_key(|s| s.vip);
        Ok(out)
    }

    /// The per-outcome counters summed over CPUs, in [`Outcome::ALL`] order.
    pub fn counters(&self) -> Result<[(Outcome, u64); Outcome::COUNT as usize]> {
        let mut out = Outcome::ALL.map(|o| (o, 0));
        for (o, slot) in Outcome::ALL.iter().zip(out.iter_mut()) {
            let v = self
                .counters
                .get(&(*o as u32), 0)
                .map_err(|e| Error::bpf("reading COUNTERS", e))?;
            slot.1 = v.iter().sum();
        }
        Ok(out)
    }
}

/// A VIP key whose interface index can be rewritten.
trait IfindexKey: aya::Pod {
    fn ifindex(&self) -> u32;
    fn with_ifindex(self, ifindex: u32) -> Self;
}

impl IfindexKey for VipKeyV4 {
    fn ifindex(&self) -> u32 {
        self.ifindex
    }
    fn with_ifindex(self, ifindex: u32) -> Self {
        Self { ifindex, ..self }
    }
}

impl IfindexKey for VipKeyV6 {
    fn ifindex(&self) -> u32 {
        self.ifindex
    }
    fn with_ifindex(self, ifindex: u32) -> Self {
        Self { ifindex, ..self }
    }
}

/// Moves every entry (and its counters) not keyed with `ifindex` to `ifindex`.
fn rekey_map<K: IfindexKey>(
    vips: &mut HashMap<MapData, K, VipEntry>,
    stats: &mut PerCpuHashMap<MapData, K, VipStats>,
    ifindex: u32,
    iface: &str,
    family: &'static str,
) -> Result<usize> {
    let old: Vec<(K, VipEntry)> = vips
        .iter()
        .filter_map(|r| r.ok())
        .filter(|(k, _)| k.ifindex() != ifindex)
        .collect();
    for (k, e) in &old {
        let new = k.with_ifindex(ifindex);
        if let Ok(st) = stats.get(k, 0) {
            let _ = stats.insert(new, st, 0);
            let _ = stats.remove(k);
        }
        vips.insert(new, *e, 0)
            .map_err(|e| map_full_or(e, iface, family))?;
        let _ = vips.remove(k);
    }
    Ok(old.len())
}

fn sum(v: PerCpuValues<VipStats>) -> VipStats {
    let mut total = VipStats::default();
    for s in v.iter() {
        total += *s;
    }
    total
}

/// The map value answering with `mac` until `expires_ns`; only a unicast MAC may answer.
fn entry_for(mac: MacAddr, expires_ns: u64) -> Result<VipEntry> {
    if !mac.is_unicast() {
        return Err(Error::BadMac(mac.to_string()));
    }
    Ok(VipEntry {
        mac: mac.0,
        flags: 0,
        expires_ns,
    })
}

fn zeros() -> Result<PerCpuValues<VipStats>> {
    let n = nr_cpus().map_err(|(_, e)| Error::io("counting CPUs", e))?;
    PerCpuValues::try_from(vec![VipStats::default(); n]).map_err(|e| Error::io("per-CPU values", e))
}

fn map_full_or(e: MapError, iface: &str, family: &'static str) -> Error {
    if let MapError::SyscallError(s) = &e
        && s.io_error.raw_os_error() == Some(libc::E2BIG)
    {
        return Error::MapFull {
            iface: iface.to_owned(),
            family,
            max: MAX_VIPS,
        };
    }
    Error::bpf(format!("writing the {family} VIP map"), e)
}
