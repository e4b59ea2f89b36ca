//! The XDP responder: answers ARP requests (RFC 826, RFC 5227 probes) and Neighbor
//! Solicitations (RFC 4861) for live VIPs straight from the VIP maps, and passes everything else
//! to the kernel untouched.
//!
//! Rules, in the order they are applied:
//! * Ethernet II with at most one 802.1Q tag; a tagged request is answered with the same tag and
//!   looked up under its VLAN id. QinQ and anything else pass.
//! * The map lookup comes before any expensive validation, so frames for other addresses cost a
//!   parse and a hash lookup. Entries whose `expires_ns` has passed (kernel coarse monotonic clock) are
//!   counted as `expired` and passed.
//! * A frame for a live VIP that fails validation is counted `malformed`, logged (rate-limited,
//!   never on the answer path) and passed: a bad request is never answered.
//! * The answer is built in place and sent back out of the receiving interface (`XDP_TX`). An
//!   ARP answer keeps the request's length, so its Ethernet padding comes back unchanged; an NA
//!   is cut to L2 + IPv6 + NA + TLLAO, except that a 32-byte NS keeps up to
//!   [`PROBE_NONCE_LEN`] trailer bytes: either way a liveness probe's nonce is echoed (see the
//!   agent's `probe` module).
//!
//! Nothing here allocates or loops unboundedly; every packet access is bounds-checked against
//! `data_end` right before it, which is what the verifier needs.

use core::mem::size_of;

use announcer_ebpf::{
    maps::{MAX_VIPS, Outcome, VipEntry, VipKeyV4, VipKeyV6, VipStats},
    version::PROGRAM_STAMP,
    wire::{
        ALL_NODES, ArpHdr, EthHdr, Ipv6Hdr, LinkLayerOpt, MacAddr, NaFlags, NdiscHdr,
        PROBE_NONCE_LEN, VlanHdr,
        arp::{OP_REPLY, OP_REQUEST},
        checksum,
        ethernet::ethertype,
        ipv6::NEXT_HEADER_ICMPV6,
        ndisc::{
            HOP_LIMIT, NonceOpt, OPT_NONCE, OPT_SOURCE_LLADDR, OPT_TARGET_LLADDR, TYPE_NA, TYPE_NS,
        },
    },
};
use aya_ebpf::{
    bindings::xdp_action,
    btf_maps::{Array, HashMap, PerCpuArray, PerCpuHashMap},
    helpers::{bpf_ktime_get_coarse_ns, bpf_xdp_adjust_tail, bpf_xdp_get_buff_len},
    macros::{btf_map, xdp},
    programs::XdpContext,
};
use aya_log_ebpf::warn;

const MAX: usize = MAX_VIPS as usize;

/// IPv4 VIPs: (ifindex, vlan, address) → (MAC, expiry).
#[btf_map]
static VIPS_V4: HashMap<VipKeyV4, VipEntry, MAX> = HashMap::new();
/// IPv6 VIPs.
#[btf_map]
static VIPS_V6: HashMap<VipKeyV6, VipEntry, MAX> = HashMap::new();
/// Per-CPU counters per IPv4 VIP; entries are created by the agent.
#[btf_map]
static STATS_V4: PerCpuHashMap<VipKeyV4, VipStats, MAX> = PerCpuHashMap::new();
/// Per-CPU counters per IPv6 VIP.
#[btf_map]
static STATS_V6: PerCpuHashMap<VipKeyV6, VipStats, MAX> = PerCpuHashMap::new();
/// Per-CPU counters per [`Outcome`].
#[btf_map]
static COUNTERS: PerCpuArray<u64, { Outcome::COUNT as usize }> = PerCpuArray::new();
/// Per-CPU: slot 0 is the time of the last log record, for rate limiting; slot 1 the
/// [`PROGRAM_STAMP`] of the program that wrote it (so `bpftool map dump` tells which build
/// logged, and so the version is an instruction immediate that changes the program's tag).
#[btf_map]
static LOG_CLOCK: PerCpuArray<u64, 2> = PerCpuArray::new();
/// The pinned maps' layout version, written by the loader (`announcer_ebpf::version`).
#[btf_map]
static LAYOUT: Array<u32, 1> = Array::new();

/// At most one log record per CPU per this many nanoseconds.
const LOG_INTERVAL_NS: u64 = 1_000_000_000;

/// Longest NS we validate: the fixed 24 bytes and up to five 8-byte options. Real ones are 24
/// (DAD) to 40 bytes (SLLAO + nonce); longer ones pass to the kernel (counted `malformed`). The
/// bound keeps both loops short enough that the verifier's state count stays small.
const MAX_ND_LEN: usize = 64;

#[xdp]
pub fn announcer(ctx: XdpContext) -> u32 {
    let mut note = Note {
        outcome: Outcome::Passed as u32,
        event: NO_EVENT,
        addr: [0; 16],
        mac: [0; 6],
        v6: 0,
        reserved: 0,
    };
    let action = classify(&ctx, &mut note);
    if let Some(c) = COUNTERS.get_ptr_mut(note.outcome) {
        // SAFETY: per-CPU slot, only this program on this CPU touches it.
        unsafe { *c += 1 };
    }
    // Logging happens here, after the parsing frame is gone: the verifier limits the *combined*
    // stack of nested calls to 512 bytes, and aya-log's record building needs its own frame.
    if note.event != NO_EVENT && may_log() {
        log_note(&ctx, &note);
    }
    action
}

/// The benchmark floor: swaps the Ethernet addresses and bounces the frame (`XDP_TX`), nothing
/// else. `cargo xtask bench xdp` times the responder against it in the same run. Never attached
/// by the loader.
#[xdp]
pub fn reflect(ctx: XdpContext) -> u32 {
    let Some(eth) = ptr_at::<EthHdr>(&ctx, 0) else {
        return PASS;
    };
    // SAFETY: bounds-checked above.
    let eth = unsafe { &mut *eth };
    let dst = eth.dst;
    eth.dst = eth.src;
    eth.src = dst;
    TX
}

/// What `classify` reports back to the entry point: the outcome to count and, rarely, an event
/// to log (with the VIP and the peer MAC it concerns).
#[repr(C)]
struct Note {
    outcome: u32,
    event: u32,
    addr: [u8; 16],
    mac: [u8; 6],
    v6: u8,
    reserved: u8,
}

const NO_EVENT: u32 = u32::MAX;

impl Note {
    #[inline(always)]
    fn v4(&mut self, ev: Event, vip: &[u8; 4], mac: &[u8; 6]) {
        self.event = ev as u32;
        self.addr = [
            vip[0], vip[1], vip[2], vip[3], 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0,
        ];
        self.mac = *mac;
        self.v6 = 0;
    }

    #[inline(always)]
    fn v6(&mut self, ev: Event, vip: &[u8; 16]) {
        self.event = ev as u32;
        self.addr = *vip;
        self.v6 = 1;
    }
}

/// Parses the frame and answers it or not; out of line so its large frame is not nested under
/// the logging call.
#[inline(never)]
fn classify(ctx: &XdpContext, note: &mut Note) -> u32 {
    let (action, outcome) = handle(ctx, note);
    note.outcome = outcome as u32;
    action
}

const PASS: u32 = xdp_action::XDP_PASS;
const TX: u32 = xdp_action::XDP_TX;

#[inline(always)]
fn ptr_at<T>(ctx: &XdpContext, off: usize) -> Option<*mut T> {
    let start = ctx.data();
    let end = ctx.data_end();
    if start + off + size_of::<T>() > end {
        return None;
    }
    Some((start + off) as *mut T)
}

/// `CLOCK_MONOTONIC_COARSE`. Expiry needs tick resolution, not nanoseconds, and the coarse
/// clock is a plain read: on the machines measured, `bpf_ktime_get_ns` (which reads the clock
/// source) cost ~30 ns of a ~90 ns ARP answer.
#[inline(always)]
fn now_ns() -> u64 {
    // SAFETY: helper without arguments.
    unsafe { bpf_ktime_get_coarse_ns() }
}

/// Whether a log record may be written now (one per CPU per [`LOG_INTERVAL_NS`]).
#[inline(always)]
fn may_log() -> bool {
    let Some(last) = LOG_CLOCK.get_ptr_mut(0) else {
        return false;
    };
    let now = now_ns();
    // SAFETY: per-CPU slot.
    unsafe {
        if *last != 0 && now.wrapping_sub(*last) < LOG_INTERVAL_NS {
            return false;
        }
        *last = now;
    }
    if let Some(by) = LOG_CLOCK.get_ptr_mut(1) {
        // SAFETY: per-CPU slot.
        unsafe { *by = PROGRAM_STAMP };
    }
    true
}

#[inline(always)]
fn is_multicast(mac: &[u8; 6]) -> bool {
    mac[0] & 1 != 0
}

/// Byte-array equality through integer loads: `==` on arrays compiles to a call to `bcmp`,
/// a BPF-to-BPF call whose frame counts against the verifier's combined 512-byte stack limit.
#[inline(always)]
fn eq6(a: &[u8; 6], b: &[u8; 6]) -> bool {
    u32::from_ne_bytes([a[0], a[1], a[2], a[3]]) == u32::from_ne_bytes([b[0], b[1], b[2], b[3]])
        && u16::from_ne_bytes([a[4], a[5]]) == u16::from_ne_bytes([b[4], b[5]])
}

#[inline(always)]
fn eq4(a: &[u8; 4], b: &[u8; 4]) -> bool {
    u32::from_ne_bytes(*a) == u32::from_ne_bytes(*b)
}

#[inline(always)]
fn handle(ctx: &XdpContext, note: &mut Note) -> (u32, Outcome) {
    let Some(eth) = ptr_at::<EthHdr>(ctx, 0) else {
        return (PASS, Outcome::Passed);
    };
    // SAFETY: bounds-checked above.
    let mut et = u16::from_be_bytes(unsafe { (*eth).ethertype });
    let mut l3 = EthHdr::LEN;
    let mut vlan = 0u16;
    if et == ethertype::VLAN {
        let Some(tag) = ptr_at::<VlanHdr>(ctx, EthHdr::LEN) else {
            return (PASS, Outcome::Passed);
        };
        // SAFETY: bounds-checked above.
        let tag = unsafe { &*tag };
        vlan = tag.vid();
        et = u16::from_be_bytes(tag.ethertype);
        l3 += VlanHdr::LEN;
    }
    match et {
        ethertype::ARP => arp(ctx, note, eth, l3, vlan),
        ethertype::IPV6 => ndisc(ctx, note, l3, vlan),
        _ => (PASS, Outcome::Passed),
    }
}

use announcer_ebpf::wire::Header as _;

#[inline(always)]
fn bump_v4(key: &VipKeyV4, f: impl FnOnce(&mut VipStats)) {
    if let Some(s) = STATS_V4.get_ptr_mut(key) {
        // SAFETY: per-CPU value of an existing entry.
        f(unsafe { &mut *s });
    }
}

#[inline(always)]
fn bump_v6(key: &VipKeyV6, f: impl FnOnce(&mut VipStats)) {
    if let Some(s) = STATS_V6.get_ptr_mut(key) {
        // SAFETY: per-CPU value of an existing entry.
        f(unsafe { &mut *s });
    }
}

/// ARP (RFC 826). Answers a request whose `ar$tpa` is a live VIP on this interface and VLAN,
/// including RFC 5227 probes (`ar$spa` = 0.0.0.0, answered with `ar$tpa` = 0.0.0.0 to the
/// prober's MAC, as Linux does). An ARP announcement (`ar$spa` = `ar$tpa`: another host claiming
/// the address, RFC 5227 §2.3) is not a question and is passed, with a log record.
#[inline(always)]
fn arp(
    ctx: &XdpContext,
    note: &mut Note,
    eth: *mut EthHdr,
    l3: usize,
    vlan: u16,
) -> (u32, Outcome) {
    let Some(a) = ptr_at::<ArpHdr>(ctx, l3) else {
        return (PASS, Outcome::Passed);
    };
    // SAFETY: bounds-checked above; `eth` lies before it.
    let (a, eth) = unsafe { (&mut *a, &mut *eth) };
    if !a.is_ethernet_ipv4() {
        return (PASS, Outcome::Passed);
    }
    let op = u16::from_be_bytes(a.oper);
    if op == OP_REPLY {
        // Another host replying for one of our live VIPs (e.g. an RFC 5944 §4.6 gratuitous
        // reply): passed like every reply, but worth a log record (RFC 5227 §2.4 conflict).
        let key = VipKeyV4::new(ctx.ingress_ifindex() as u32, vlan, a.spa);
        if let Some(e) = VIPS_V4.get_ptr(&key)
            // SAFETY: a value pointer from a successful lookup.
            && unsafe { (*e).is_live(now_ns()) }
        {
            note.v4(Event::Conflict, &a.spa, &a.sha);
        }
        return (PASS, Outcome::Passed);
    }
    if op != OP_REQUEST {
        return (PASS, Outcome::Passed);
    }
    let key = VipKeyV4::new(ctx.ingress_ifindex() as u32, vlan, a.tpa);
    let Some(entry) = VIPS_V4.get_ptr(&key) else {
        return (PASS, Outcome::Passed);
    };
    // SAFETY: a value pointer from a successful lookup; copied out at once.
    let entry: VipEntry = unsafe { *entry };
    if !entry.is_live(now_ns()) {
        bump_v4(&key, |s| s.expired += 1);
        return (PASS, Outcome::Expired);
    }
    if is_multicast(&a.sha) || is_multicast(&eth.src) || eq6(&a.sha, &[0; 6]) {
        bump_v4(&key, |s| s.malformed += 1);
        note.v4(Event::GroupSender, &a.tpa, &a.sha);
        return (PASS, Outcome::Malformed);
    }
    if eq4(&a.spa, &a.tpa) {
        note.v4(Event::Conflict, &a.tpa, &a.sha);
        return (PASS, Outcome::Passed);
    }
    if !(eq6(&eth.dst, &[0xff; 6]) || eq6(&eth.dst, &entry.mac)) {
        return (PASS, Outcome::Passed);
    }

    let sha = a.sha;
    let spa = a.spa;
    a.oper = 2u16.to_be_bytes();
    a.tha = sha;
    a.tpa = spa;
    a.sha = entry.mac;
    a.spa = key.addr;
    eth.dst = sha;
    eth.src = entry.mac;
    bump_v4(&key, |s| s.answered += 1);
    (TX, Outcome::ArpAnswered)
}

/// The Neighbor Advertisement as written after the IPv6 header: fixed part plus TLLAO.
#[repr(C)]
struct NaWithTllao {
    hdr: NdiscHdr,
    opt: LinkLayerOpt,
}

/// Neighbor Solicitation (RFC 4861). Validated per §7.1.1, answered per §7.2.4.
#[inline(always)]
fn ndisc(ctx: &XdpContext, note: &mut Note, l3: usize, vlan: u16) -> (u32, Outcome) {
    let Some(ip) = ptr_at::<Ipv6Hdr>(ctx, l3) else {
        return (PASS, Outcome::Passed);
    };
    // SAFETY: bounds-checked above.
    let ip = unsafe { &*ip };
    if ip.version() != 6 || ip.next_header != NEXT_HEADER_ICMPV6 {
        return (PASS, Outcome::Passed);
    }
    let icmp = l3 + Ipv6Hdr::LEN;
    let Some(nd) = ptr_at::<NdiscHdr>(ctx, icmp) else {
        return (PASS, Outcome::Passed);
    };
    // SAFETY: bounds-checked above.
    let nd = unsafe { &*nd };
    if nd.ty != TYPE_NS {
        return (PASS, Outcome::Passed);
    }
    let key = VipKeyV6::new(ctx.ingress_ifindex() as u32, vlan, nd.target);
    let Some(entry) = VIPS_V6.get_ptr(&key) else {
        return (PASS, Outcome::Passed);
    };
    // SAFETY: a value pointer from a successful lookup; copied out at once.
    let entry: VipEntry = unsafe { *entry };
    if !entry.is_live(now_ns()) {
        bump_v6(&key, |s| s.expired += 1);
        return (PASS, Outcome::Expired);
    }
    let target = nd.target;
    match answer_ns(ctx, l3, &entry) {
        Ok(()) => {
            bump_v6(&key, |s| s.answered += 1);
            (TX, Outcome::NsAnswered)
        }
        Err(Reject::Pass) => (PASS, Outcome::Passed),
        Err(Reject::Conflict) => {
            note.v6(Event::Conflict, &target);
            (PASS, Outcome::Passed)
        }
        Err(Reject::Malformed(ev)) => {
            // One exit for every failed check keeps one copy of the map-lookup code (and its
            // stack slots) instead of one per check.
            bump_v6(&key, |s| s.malformed += 1);
            note.v6(ev, &target);
            (PASS, Outcome::Malformed)
        }
    }
}

/// Why an NS for a live VIP is not answered.
enum Reject {
    /// Not addressed to us in a way we answer; not an error.
    Pass,
    /// Fails RFC 4861 §7.1.1 validation (or could not be answered).
    Malformed(Event),
    /// Another host uses the VIP: passed, and logged.
    Conflict,
}

/// Validates an NS for a live VIP (RFC 4861 §7.1.1) and rewrites it into the Neighbor
/// Advertisement (§7.2.4). Out of line, with a frame of its own: the verifier allows 512 bytes
/// of stack per frame and for the whole call chain.
#[inline(never)]
fn answer_ns(ctx: &XdpContext, l3: usize, entry: &VipEntry) -> Result<(), Reject> {
    let icmp = l3 + Ipv6Hdr::LEN;
    let Some(ip) = ptr_at::<Ipv6Hdr>(ctx, l3) else {
        return Err(Reject::Pass);
    };
    let Some(nd) = ptr_at::<NdiscHdr>(ctx, icmp) else {
        return Err(Reject::Pass);
    };
    // SAFETY: bounds-checked above.
    let (ip, nd) = unsafe { (&*ip, &*nd) };
    // Addresses are held as u128 (two registers each): as byte arrays LLVM scalarizes them into
    // 48 separate stack slots, which overflows the 512-byte BPF stack.
    let src = u128::from_be_bytes(ip.src);
    let dst = u128::from_be_bytes(ip.dst);
    let target = u128::from_be_bytes(nd.target);
    let plen = usize::from(u16::from_be_bytes(ip.payload_len));
    // §7.1.1: hop limit 255, code 0, length >= 24, target not multicast.
    if ip.hop_limit != HOP_LIMIT {
        return Err(Reject::Malformed(Event::HopLimit));
    }
    if nd.code != 0 {
        return Err(Reject::Malformed(Event::Code));
    }
    if plen < NdiscHdr::LEN || plen > MAX_ND_LEN || plen % 8 != 0 {
        return Err(Reject::Malformed(Event::Length));
    }
    if target >> 120 == 0xff {
        return Err(Reject::Malformed(Event::MulticastTarget));
    }
    if src >> 120 == 0xff {
        return Err(Reject::Malformed(Event::MulticastSource));
    }
    if src == target {
        // Another host uses the VIP as its own source address: a conflict, not a question.
        return Err(Reject::Conflict);
    }
    let src_unspecified = src == 0;

    // §7.1.1: valid checksum. The loop is bounded by MAX_ND_LEN; each word is bounds-checked.
    let mut sum = add_words(add_words(0, src), dst) + plen as u64 + u64::from(NEXT_HEADER_ICMPV6);
    // plen is a multiple of 8, so the message is read in 8-byte chunks.
    let mut i = 0usize;
    while i < MAX_ND_LEN / 8 {
        if i * 8 >= plen {
            break;
        }
        let Some(w) = ptr_at::<[u8; 8]>(ctx, icmp + i * 8) else {
            return Err(Reject::Malformed(Event::Truncated));
        };
        // SAFETY: bounds-checked above. One 8-byte load, folded as four big-endian words.
        let v = u64::from_be_bytes(unsafe { core::ptr::read_unaligned(w) });
        sum += (v >> 48) + ((v >> 32) & 0xffff) + ((v >> 16) & 0xffff) + (v & 0xffff);
        i += 1;
    }
    if checksum::finish(sum) != 0 {
        return Err(Reject::Malformed(Event::Checksum));
    }

    // §7.1.1: all options have length > 0 and fit; remember the Source Link-Layer Address.
    // Offset of the first SLLAO within the message (0 if none), read again when answering; it
    // must be 8 bytes (Ethernet). `saw_sllao` notes that one was seen. Likewise the first Nonce
    // option (RFC 3971 §5.3.2), echoed in the answer if it has a probe's shape (`NonceOpt`).
    let mut sllao_off = 0usize;
    let mut saw_sllao = false;
    let mut nonce_off = 0usize;
    let mut saw_nonce = false;
    let mut off = NdiscHdr::LEN;
    let mut n = 0;
    while n < (MAX_ND_LEN - NdiscHdr::LEN) / 8 {
        if off >= plen {
            break;
        }
        let Some(o) = ptr_at::<[u8; 2]>(ctx, icmp + off) else {
            return Err(Reject::Malformed(Event::Truncated));
        };
        // SAFETY: bounds-checked above.
        let [ty, len] = unsafe { *o };
        if len == 0 {
            return Err(Reject::Malformed(Event::ZeroLengthOption));
        }
        let olen = usize::from(len) * 8;
        if off + olen > plen {
            return Err(Reject::Malformed(Event::OptionOverrun));
        }
        if ty == OPT_SOURCE_LLADDR && !saw_sllao {
            // The first SLLAO is the one that counts (as in Linux); on Ethernet it is 8 bytes.
            saw_sllao = true;
            if len != 1 {
                return Err(Reject::Malformed(Event::BadSllao));
            }
            sllao_off = off;
        }
        if ty == OPT_NONCE && !saw_nonce {
            saw_nonce = true;
            if len == NonceOpt::UNITS {
                nonce_off = off;
            }
        }
        off += olen;
        n += 1;
    }
    if off < plen {
        return Err(Reject::Malformed(Event::TooManyOptions));
    }

    // ff02::1:ffXX:XXXX (RFC 4291 §2.7.1).
    let sn = 0xff02_0000_0000_0000_0000_0001_ff00_0000u128 | (target & 0xff_ffff);
    if src_unspecified {
        // §7.1.1: a DAD probe goes to the solicited-node address and carries no SLLAO.
        if dst != sn {
            return Err(Reject::Malformed(Event::DadNotSolicitedNode));
        }
        if saw_sllao {
            return Err(Reject::Malformed(Event::DadWithSllao));
        }
    } else if !(dst == target || dst == sn) {
        return Err(Reject::Pass);
    }

    let Some(eth) = ptr_at::<EthHdr>(ctx, 0) else {
        return Err(Reject::Pass);
    };
    // SAFETY: bounds-checked above.
    let eth = unsafe { &*eth };
    if !(eth.dst[0] == 0x33 && eth.dst[1] == 0x33 || eq6(&eth.dst, &entry.mac)) {
        return Err(Reject::Pass);
    }
    if is_multicast(&eth.src) || eq6(&eth.src, &[0; 6]) {
        return Err(Reject::Malformed(Event::GroupSourceMac));
    }

    // §7.2.4: reply to the solicitation's source (to its SLLAO, else the frame's source MAC)
    // with S=1; a DAD probe is answered to all-nodes with S=0 (§7.2.4, last paragraph). O=1
    // because the VIP is not anycast; R=0, we are not a router.
    let (ip_dst, mac_dst, flags) = if src_unspecified {
        (
            u128::from_be_bytes(ALL_NODES),
            MacAddr::from_ipv6_multicast(&ALL_NODES).0,
            NaFlags::OVERRIDE,
        )
    } else {
        let to = if sllao_off == 0 {
            eth.src
        } else {
            let Some(ll) = ptr_at::<LinkLayerOpt>(ctx, icmp + sllao_off) else {
                return Err(Reject::Malformed(Event::Truncated));
            };
            // SAFETY: bounds-checked above.
            unsafe { (*ll).addr }
        };
        if is_multicast(&to) || eq6(&to, &[0; 6]) {
            return Err(Reject::Malformed(Event::GroupSourceMac));
        }
        (src, to, NaFlags::SOLICITED | NaFlags::OVERRIDE)
    };

    // The probe nonce to echo, read before anything is written over the NS: the answer is
    // NA + TLLAO + this Nonce option, wherever the option sat in the NS.
    let nonce = if nonce_off == 0 {
        None
    } else {
        let Some(o) = ptr_at::<[u8; NonceOpt::LEN]>(ctx, icmp + nonce_off) else {
            return Err(Reject::Malformed(Event::Truncated));
        };
        // SAFETY: bounds-checked above. Held as a u128 (two registers), like the addresses.
        Some(u128::from_be_bytes(unsafe { core::ptr::read_unaligned(o) }))
    };
    let na_len = size_of::<NaWithTllao>() + if nonce.is_some() { NonceOpt::LEN } else { 0 };

    // Resize the frame to exactly L2 + IPv6 + the NA (also dropping Ethernet padding), with
    // one exception: behind an NS of exactly NS + one 8-byte option (32 bytes, the shape of
    // liveness probes before the Nonce option and the size of the NA + TLLAO written over it),
    // up to PROBE_NONCE_LEN trailer bytes stay where they are, so an older agent's probe nonce
    // comes back to it. The trailer is outside the IPv6 payload: no checksum covers it and IPv6
    // receivers ignore it (RFC 8200 §3, Payload Length).
    let na_end = icmp + na_len;
    // SAFETY: helper on our own context. (Subtracting the packet pointers instead would need
    // CAP_PERFMON's pointer arithmetic allowance.)
    let old_len = unsafe { bpf_xdp_get_buff_len(ctx.ctx) } as usize;
    let mut new_len = na_end;
    if plen == size_of::<NaWithTllao>() && old_len > na_end {
        let trailer = old_len - na_end;
        new_len += if trailer < PROBE_NONCE_LEN {
            trailer
        } else {
            PROBE_NONCE_LEN
        };
    }
    let delta = new_len as i32 - old_len as i32;
    if delta != 0 {
        // SAFETY: helper on our own context; all pointers are re-derived below.
        if unsafe { bpf_xdp_adjust_tail(ctx.ctx, delta) } != 0 {
            return Err(Reject::Malformed(Event::AdjustTail));
        }
    }
    // Nothing was written before the resize, so every failure up to here passes the frame
    // untouched; from here on the pointers are re-derived and cannot fail for a frame we grew.
    let Some(eth) = ptr_at::<EthHdr>(ctx, 0) else {
        return Err(Reject::Pass);
    };
    let Some(ip) = ptr_at::<Ipv6Hdr>(ctx, l3) else {
        return Err(Reject::Pass);
    };
    let Some(na) = ptr_at::<NaWithTllao>(ctx, icmp) else {
        return Err(Reject::Pass);
    };
    let echo = match nonce {
        Some(n) => {
            let Some(o) = ptr_at::<[u8; NonceOpt::LEN]>(ctx, icmp + size_of::<NaWithTllao>())
            else {
                return Err(Reject::Pass);
            };
            Some((o, n))
        }
        None => None,
    };
    // SAFETY: bounds-checked above, after the resize.
    let eth = unsafe { &mut *eth };
    eth.dst = mac_dst;
    eth.src = entry.mac;
    // SAFETY: bounds-checked above, after the resize.
    let (ip, na) = unsafe { (&mut *ip, &mut *na) };
    ip.vtcfl = [0x60, 0, 0, 0];
    ip.payload_len = (na_len as u16).to_be_bytes();
    ip.next_header = NEXT_HEADER_ICMPV6;
    ip.hop_limit = HOP_LIMIT;
    ip.src = target.to_be_bytes();
    ip.dst = ip_dst.to_be_bytes();
    let mut sum =
        add_words(add_words(0, target), ip_dst) + na_len as u64 + u64::from(NEXT_HEADER_ICMPV6);
    sum += u64::from(u16::from_be_bytes([TYPE_NA, 0]));
    sum += u64::from(u16::from_be_bytes([flags, 0]));
    sum = add_words(sum, target);
    sum += u64::from(u16::from_be_bytes([OPT_TARGET_LLADDR, 1]));
    let m = entry.mac;
    sum += u64::from(u16::from_be_bytes([m[0], m[1]]));
    sum += u64::from(u16::from_be_bytes([m[2], m[3]]));
    sum += u64::from(u16::from_be_bytes([m[4], m[5]]));
    if let Some((_, n)) = echo {
        sum = add_words(sum, n);
    }
    // Field by field: a struct literal would be built on the stack and copied with memcpy.
    na.hdr.ty = TYPE_NA;
    na.hdr.code = 0;
    na.hdr.checksum = checksum::finish(sum).to_be_bytes();
    na.hdr.flags = [flags, 0, 0, 0];
    na.hdr.target = target.to_be_bytes();
    na.opt.ty = OPT_TARGET_LLADDR;
    na.opt.len = 1;
    na.opt.addr = entry.mac;
    if let Some((o, n)) = echo {
        // SAFETY: bounds-checked above, after the resize.
        unsafe { core::ptr::write_unaligned(o, n.to_be_bytes()) };
    }
    Ok(())
}

/// Adds the eight big-endian 16-bit words of an IPv6 address held as a u128.
#[inline(always)]
fn add_words(sum: u64, a: u128) -> u64 {
    let hi = (a >> 64) as u64;
    let lo = a as u64;
    let w = |v: u64| (v >> 48) + ((v >> 32) & 0xffff) + ((v >> 16) & 0xffff) + (v & 0xffff);
    sum + w(hi) + w(lo)
}

/// Rare events worth a log record. Logged from two out-of-line functions with one call site
/// each, which keeps aya-log's record building off the answer path and off its stack.
#[derive(Clone, Copy)]
#[repr(u8)]
enum Event {
    GroupSender,
    Conflict,
    HopLimit,
    Code,
    Length,
    MulticastTarget,
    Truncated,
    Checksum,
    ZeroLengthOption,
    OptionOverrun,
    TooManyOptions,
    DadNotSolicitedNode,
    DadWithSllao,
    GroupSourceMac,
    AdjustTail,
    MulticastSource,
    BadSllao,
}

impl Event {
    const ALL: [Event; 17] = [
        Event::GroupSender,
        Event::Conflict,
        Event::HopLimit,
        Event::Code,
        Event::Length,
        Event::MulticastTarget,
        Event::Truncated,
        Event::Checksum,
        Event::ZeroLengthOption,
        Event::OptionOverrun,
        Event::TooManyOptions,
        Event::DadNotSolicitedNode,
        Event::DadWithSllao,
        Event::GroupSourceMac,
        Event::AdjustTail,
        Event::MulticastSource,
        Event::BadSllao,
    ];

    #[inline(always)]
    fn from_u32(v: u32) -> Option<Event> {
        Event::ALL.get(v as usize).copied()
    }

    #[inline(always)]
    fn text(self) -> &'static str {
        match self {
            Event::GroupSender => "ARP request with a group or zero sender MAC (passed)",
            Event::Conflict => {
                "another host claims this VIP (ARP announcement or reply, or NS from it): address conflict?"
            }
            Event::HopLimit => "NS hop limit is not 255 (RFC 4861 7.1.1; passed)",
            Event::Code => "NS ICMP code is not 0 (RFC 4861 7.1.1; passed)",
            Event::Length => "NS length not a multiple of 8 in 24..=64 (passed)",
            Event::MulticastTarget => "NS target is multicast (RFC 4861 7.1.1; passed)",
            Event::Truncated => "NS truncated (passed)",
            Event::Checksum => "NS checksum is wrong (RFC 4861 7.1.1; passed)",
            Event::ZeroLengthOption => "NS has a zero-length option (RFC 4861 7.1.1; passed)",
            Event::OptionOverrun => "NS option runs past the message (passed)",
            Event::TooManyOptions => "NS has more options than validated (passed)",
            Event::DadNotSolicitedNode => {
                "DAD NS not sent to the solicited-node address (RFC 4861 7.1.1; passed)"
            }
            Event::DadWithSllao => {
                "DAD NS carries a source link-layer option (RFC 4861 7.1.1; passed)"
            }
            Event::GroupSourceMac => {
                "NS from, or asking an answer to, a group or zero MAC (passed)"
            }
            Event::AdjustTail => "bpf_xdp_adjust_tail failed; NS passed to the kernel",
            Event::MulticastSource => "NS from a multicast source address (passed)",
            Event::BadSllao => "NS source link-layer option is not 8 bytes (passed)",
        }
    }
}

#[inline(never)]
fn log_note(ctx: &XdpContext, note: &Note) {
    let Some(ev) = Event::from_u32(note.event) else {
        return;
    };
    if note.v6 == 0 {
        let vip = [note.addr[0], note.addr[1], note.addr[2], note.addr[3]];
        warn!(ctx, "VIP {:i} (from {:mac}): {}", vip, note.mac, ev.text());
    } else {
        warn!(ctx, "VIP {:i}: {}", note.addr, ev.text());
    }
}

#[cfg(not(test))]
#[panic_handler]
fn panic(_info: &core::panic::PanicInfo) -> ! {
    loop {}
}

#[unsafe(link_section = "license")]
#[unsafe(no_mangle)]
static LICENSE: [u8; 13] = *b"Dual MIT/GPL\0";
