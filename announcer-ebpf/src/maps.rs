//! BPF map layouts shared by the XDP program and the agent.
//!
//! All maps are BTF-defined and pinned per interface by the loader, so
//! `bpftool map dump pinned /sys/fs/bpf/announcer/<iface>/VIPS_V4` prints these structs with
//! their field names. Keys carry explicit `reserved` fields instead of compiler padding: a hash
//! key with uninitialised padding bytes would make lookups miss at random.
//!
//! Addresses are stored as octets in network byte order (`[u8; 4]`, `[u8; 16]`), never as a bare
//! integer, so a key reads the same in `bpftool` as on the wire.

/// Name of the IPv4 VIP map (`HashMap<VipKeyV4, VipEntry>`).
pub const VIPS_V4: &str = "VIPS_V4";
/// Name of the IPv6 VIP map (`HashMap<VipKeyV6, VipEntry>`).
pub const VIPS_V6: &str = "VIPS_V6";
/// Name of the per-CPU per-VIP counters for IPv4 (`PerCpuHashMap<VipKeyV4, VipStats>`).
pub const STATS_V4: &str = "STATS_V4";
/// Name of the per-CPU per-VIP counters for IPv6 (`PerCpuHashMap<VipKeyV6, VipStats>`).
pub const STATS_V6: &str = "STATS_V6";
/// Name of the per-CPU outcome counters (`PerCpuArray<u64>`, indexed by [`Outcome`]).
pub const COUNTERS: &str = "COUNTERS";
/// Name of the map holding the pinned maps' layout version (`Array<u32>` of one entry,
/// [`crate::version::MAP_LAYOUT_VERSION`], written by the loader; the program never reads it).
pub const LAYOUT: &str = "LAYOUT";
/// Name of the program in the object file.
pub const PROGRAM: &str = "announcer";
/// Name of the benchmark-floor program (swap MACs, `XDP_TX`) in the same object.
pub const REFLECTOR: &str = "reflect";

/// Capacity of each VIP map (and of its stats map). `vip add` past this fails with "map full".
pub const MAX_VIPS: u32 = 16_384;

/// VLAN id meaning "untagged frames".
pub const VLAN_NONE: u16 = 0;

/// Key of [`VIPS_V4`] and [`STATS_V4`]: which address, on which interface and VLAN.
#[repr(C)]
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct VipKeyV4 {
    /// Interface index of the receiving interface (`ctx.ingress_ifindex()`).
    pub ifindex: u32,
    /// 802.1Q VLAN id, or [`VLAN_NONE`] for untagged frames.
    pub vlan: u16,
    /// Always zero; makes the layout free of padding.
    pub reserved: u16,
    /// The VIP, network byte order.
    pub addr: [u8; 4],
}

/// Key of [`VIPS_V6`] and [`STATS_V6`].
#[repr(C)]
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct VipKeyV6 {
    /// Interface index of the receiving interface.
    pub ifindex: u32,
    /// 802.1Q VLAN id, or [`VLAN_NONE`] for untagged frames.
    pub vlan: u16,
    /// Always zero; makes the layout free of padding.
    pub reserved: u16,
    /// The VIP, network byte order.
    pub addr: [u8; 16],
}

impl VipKeyV4 {
    /// A key with the reserved field zeroed.
    pub const fn new(ifindex: u32, vlan: u16, addr: [u8; 4]) -> Self {
        Self {
            ifindex,
            vlan,
            reserved: 0,
            addr,
        }
    }
}

impl VipKeyV6 {
    /// A key with the reserved field zeroed.
    pub const fn new(ifindex: u32, vlan: u16, addr: [u8; 16]) -> Self {
        Self {
            ifindex,
            vlan,
            reserved: 0,
            addr,
        }
    }
}

/// `expires_ns` value of an entry that never expires (`vip add --permanent`).
pub const NEVER_EXPIRES: u64 = u64::MAX;

/// Value of the VIP maps: what to answer with, and until when.
#[repr(C)]
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct VipEntry {
    /// The hardware address put in answers (normally the interface's own MAC).
    pub mac: [u8; 6],
    /// Reserved for flags; always zero today.
    pub flags: u16,
    /// Deadline on the kernel's coarse monotonic clock (`bpf_ktime_get_coarse_ns`, i.e.
    /// `CLOCK_MONOTONIC_COARSE`: one timer tick of resolution, read without touching the clock
    /// source), after which the entry is not answered. [`NEVER_EXPIRES`] for static entries.
    ///
    /// The agent refreshes this well before it passes. An agent that dies therefore stops being
    /// answered for within one grace period, while a restart inside it goes unnoticed by clients.
    pub expires_ns: u64,
}

impl VipEntry {
    /// Whether the entry may be answered at monotonic time `now_ns`.
    #[inline(always)]
    pub const fn is_live(&self, now_ns: u64) -> bool {
        now_ns < self.expires_ns
    }
}

/// Per-CPU, per-VIP counters (value of [`STATS_V4`] / [`STATS_V6`]). The agent creates the entry
/// with the VIP; the program only increments existing entries.
#[repr(C)]
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct VipStats {
    /// Requests answered (ARP replies or Neighbor Advertisements sent).
    pub answered: u64,
    /// Requests for this VIP seen while its entry had expired (passed to the kernel).
    pub expired: u64,
    /// Requests for this VIP that failed validation (passed to the kernel).
    pub malformed: u64,
}

impl core::ops::AddAssign for VipStats {
    fn add_assign(&mut self, rhs: Self) {
        self.answered += rhs.answered;
        self.expired += rhs.expired;
        self.malformed += rhs.malformed;
    }
}

/// What the program did with a frame; the index into [`COUNTERS`].
#[repr(u32)]
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub enum Outcome {
    /// An ARP request for a live VIP was answered (XDP_TX).
    ArpAnswered = 0,
    /// A Neighbor Solicitation for a live VIP was answered (XDP_TX).
    NsAnswered = 1,
    /// Anything else, handed to the kernel untouched.
    Passed = 2,
    /// An ARP or NS frame that failed validation; passed to the kernel untouched.
    Malformed = 3,
    /// A request for a VIP whose entry had expired; passed to the kernel untouched.
    Expired = 4,
}

impl Outcome {
    /// Number of outcomes (size of the [`COUNTERS`] array).
    pub const COUNT: u32 = 5;
    /// All outcomes, in index order.
    pub const ALL: [Outcome; 5] = [
        Outcome::ArpAnswered,
        Outcome::NsAnswered,
        Outcome::Passed,
        Outcome::Malformed,
        Outcome::Expired,
    ];

    /// Short name used in CLI output and metrics.
    pub const fn name(self) -> &'static str {
        match self {
            Outcome::ArpAnswered => "arp_answered",
            Outcome::NsAnswered => "ns_answered",
            Outcome::Passed => "passed",
            Outcome::Malformed => "malformed",
            Outcome::Expired => "expired",
        }
    }
}

const _: () = assert!(core::mem::size_of::<VipKeyV4>() == 12);
const _: () = assert!(core::mem::size_of::<VipKeyV6>() == 24);
const _: () = assert!(core::mem::size_of::<VipEntry>() == 16);
const _: () = assert!(core::mem::size_of::<VipStats>() == 24);

#[cfg(all(feature = "user", not(target_arch = "bpf")))]
mod pod {
    // SAFETY: all four are `#[repr(C)]`, made only of integers and byte arrays, and the size
    // assertions above prove there is no padding, so every byte pattern is a valid value.
    unsafe impl aya::Pod for super::VipKeyV4 {}
    unsafe impl aya::Pod for super::VipKeyV6 {}
    unsafe impl aya::Pod for super::VipEntry {}
    unsafe impl aya::Pod for super::VipStats {}
}

#[cfg(test)]
mod tests {
    use super::*;
    use core::mem::offset_of;

    #[test]
    fn key_layouts_match_btf_expectations() {
        assert_eq!(offset_of!(VipKeyV4, ifindex), 0);
        assert_eq!(offset_of!(VipKeyV4, vlan), 4);
        assert_eq!(offset_of!(VipKeyV4, reserved), 6);
        assert_eq!(offset_of!(VipKeyV4, addr), 8);
        assert_eq!(offset_of!(VipKeyV6, addr), 8);
        assert_eq!(offset_of!(VipEntry, mac), 0);
        assert_eq!(offset_of!(VipEntry, flags), 6);
        assert_eq!(offset_of!(VipEntry, expires_ns), 8);
    }

    #[test]
    fn expiry_is_exclusive_and_permanent_never_expires() {
        let e = VipEntry {
            mac: [2, 0, 0, 0, 0, 1],
            flags: 0,
            expires_ns: 100,
        };
        assert!(e.is_live(99));
        assert!(!e.is_live(100));
        let p = VipEntry {
            expires_ns: NEVER_EXPIRES,
            ..e
        };
        assert!(p.is_live(u64::MAX - 1));
    }

    #[test]
    fn outcome_indices_are_dense() {
        for (i, o) in Outcome::ALL.iter().enumerate() {
            assert_eq!(*o as u32, i as u32);
        }
        assert_eq!(Outcome::ALL.len() as u32, Outcome::COUNT);
    }
}
