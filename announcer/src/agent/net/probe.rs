//! Probing the old owner's data plane before taking a VIP over.
//!
//! Why: when a peer's heartbeats stop, either its node died, or only its agent did (crash,
//! OOM kill, rolling upgrade) while its XDP responder keeps answering for the VIP from the
//! pinned map until the entries expire. Taking the VIP over in the second case would make
//! two nodes answer at once. So the successor asks the old owner's data plane directly: a
//! unicast ARP request (IPv4) or Neighbor Solicitation (IPv6) for the VIP, sent to the old
//! owner's MAC. An answer means the node is alive and the successor waits; silence means it
//! takes over now. The election core decides ([`crate::election::Output::Probe`] and
//! [`crate::election::Input::ProbeAnswered`]); this module sends and listens ([`Probes`]).
//!
//! * IPv4: an ARP request (RFC 826) for the VIP with Ethernet destination the target MAC.
//!   The sender IP is our IPv4 address on the interface, or 0.0.0.0 if we have none: then it
//!   is an ARP Probe (RFC 5227 §2.1.1), which cannot pollute the target's ARP cache.
//! * IPv6: a unicast Neighbor Solicitation as in Neighbor Unreachability Detection
//!   (RFC 4861 §7.2.2, §7.3.1): IPv6 destination the VIP itself, Ethernet destination the
//!   target MAC, source our address on the link (link-local), with a ProbeSource Link-Layer Address
//!   option, hop limit 255.
//!
//! # Only an answer to the probe just sent counts
//!
//! Silence is what lets a successor take over, so anything that can fake an answer can keep a
//! VIP dark after its owner died: one host spraying forged unicast "VIP is-at <dead owner's
//! MAC>" ARP replies at the other nodes did exactly that. A frame therefore counts only if it
//! answers the probe we sent, on every point we can check:
//!
//! * it is unicast to us (Ethernet destination our MAC; for ARP also `ar$tha`): RFC 826
//!   answers a request to its sender, RFC 4861 §7.2.4 answers a unicast-sourced NS to its
//!   source with S=1. Broadcast replies, gratuitous ARP and unsolicited NAs say nothing about
//!   our probe;
//! * its Ethernet source is the MAC it claims (ARP `ar$sha`, the NA's Target Link-Layer
//!   Address option), and that is the MAC we probed, for the VIP we probed, on the interface
//!   we probed on, before the probe's window closed;
//! * it echoes the probe's **nonce**: 8 random bytes per probe ([`Nonce`]). ARP: right after
//!   the 28-byte packet, in the padding of the 60-byte frame (bytes 42..50 untagged), which
//!   receivers ignore; the answer is rewritten in place, padding and all. NS: in a Nonce option
//!   (RFC 3971 §5.3.2, type 14, 16 bytes), which RFC 4861 §4.6 receivers ignore; our responder
//!   echoes it in its NA. Without it, a blind spoofer sending every 20 ms would still land
//!   inside a 50 ms probe window.
//!
//!   The NS nonce once travelled in the Ethernet trailer after the IPv6 payload. A Linux
//!   bridge with `br_netfilter` (`bridge-nf-call-ip6tables=1`, common on Kubernetes nodes and
//!   hypervisors) trims IPv6 frames to their payload length, so the owner never saw the nonce
//!   and every IPv6 probe read as silence, found by `flood_from_client_namespace_moves_no_vip`
//!   and guarded by `an_ns_probe_across_a_bridge_that_trims_ipv6_frames_is_answered`.
//!
//! What the nonce does not stop: a host that *sees* the probe can copy it. A switch floods
//! unicast frames for a MAC it has no forwarding entry for, and a spoofer using the dead
//! owner's MAC as its source moves that entry to its own port. Only the switch (port
//! security, dynamic ARP inspection) can stop a host that impersonates another MAC.
//!
//! An older responder (before the Nonce option) still echoes the ARP padding, but answers an
//! NS with NA + TLLAO only, so its IPv6 answers do not count (and the responder still echoes
//! an older agent's trailer nonce behind a 32-byte NS). That is fine: a rolling upgrade hands
//! VIPs over on SIGTERM and does not wait for probes; probing is for agents that died.
//!
//! # Kernel probes: asking the node itself
//!
//! The unreachable report ([`crate::agent::unreachable`]) also asks a peer's *kernel*: an ARP
//! request (RFC 826) or a Neighbor Solicitation (RFC 4861 §7.2.2) for the node's own
//! InternalIP ([`kernel_probe_frame`]), which neither our agent nor our XDP program answers.
//! The kernel does not echo our nonce, so such a probe carries none, and an answer counts if
//! it names the probed address, comes in on the interface probed, within the window, and from
//! the probed MAC, or from any MAC when the probe was broadcast (ARP) or sent to the
//! solicited-node group (NS, RFC 4291 §2.7.1) ([`InFlight::insert_kernel`]).
//!
//! Threat model: with no nonce, any host on the segment can forge a kernel answer. That only
//! keeps a node off the report, so it can only *prevent* a withdrawal (the fail-safe
//! direction: the node lifecycle controller still acts, later). Nobody can forge silence: a
//! live kernel's answer still arrives, and one answer is enough to keep the node unlisted.
//!
//! # Costs
//!
//! Answers are read per interface on an `AF_PACKET` socket ([`Answers`]) with a classic BPF
//! filter ([`filter`]) that lets through only ARP replies whose Ethernet source is their
//! sender hardware address and Neighbor Advertisements, unicast to our MAC; everything else
//! (any flood of broadcast or misaddressed replies) is dropped in the kernel. What passes is
//! matched in userspace against the probes in flight ([`InFlight`]: VIP, MAC, nonce,
//! deadline): a frame that matches none is dropped before it reaches the election, each probe
//! forwards at most one answer and is then forgotten, expired probes are pruned, and the table
//! is bounded ([`MAX_IN_FLIGHT`], the oldest dropped first). What was dropped is counted by
//! reason ([`ProbeStats`]).
//!
//! Frame building and answer parsing are pure functions ([`probe_frame`], [`parse_answer`]),
//! built on the shared [`announcer_ebpf::wire`] layouts; only the sockets need `CAP_NET_RAW`.

use std::{
    collections::{BTreeMap, HashMap, VecDeque},
    future::Future,
    io,
    net::{IpAddr, Ipv4Addr, Ipv6Addr},
    os::fd::{AsRawFd, OwnedFd},
    sync::{
        Arc, Mutex,
        atomic::{AtomicU64, Ordering},
    },
    time::{Duration, Instant},
};

use announcer_ebpf::wire::{
    ArpHdr, ArpOperation, ArpPacket, ArpRepr, EthernetFrame, EthernetRepr, Header as _, Ipv6Packet,
    MacAddr, NdiscPacket, NdiscRepr, PROBE_NONCE_LEN,
    ethernet::ethertype,
    frame::{self, MAX_FRAME},
    ipv6::NEXT_HEADER_ICMPV6,
    ndisc::HOP_LIMIT,
};
use nix::sys::socket::{self, AddressFamily, MsgFlags, SockFlag, SockType};
use tokio::{
    io::{Interest, unix::AsyncFd},
    sync::mpsc,
    task::JoinHandle,
};

use crate::{
    dataplane::{
        announce::{AnnounceError, MAX_VLAN_ID, PacketSocket},
        sys::packet::{bind, setsockopt},
    },
    election::{IfaceName, Input},
};

/// What a probe asks.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Hash)]
pub enum ProbeKind {
    /// A VIP, of a node's data plane: nonce'd, only our XDP responder answers.
    #[default]
    DataPlane,
    /// A node's own address, of its kernel: no nonce (see the [module docs](self)).
    Kernel,
}

/// An answer to a probe: `mac` says it has `vip`.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub struct Answer {
    /// The address answered for (ARP sender IP, NA target): the VIP of a data-plane probe,
    /// the node's address of a kernel probe.
    pub vip: IpAddr,
    /// The MAC it is at (ARP sender hardware address; the NA's Target Link-Layer Address
    /// option, else its Ethernet source).
    pub mac: MacAddr,
    /// Which kind of probe it answers.
    pub kind: ProbeKind,
}

impl From<Answer> for Input {
    fn from(a: Answer) -> Input {
        Input::ProbeAnswered {
            vip: a.vip,
            mac: a.mac,
        }
    }
}

/// The per-probe random token carried in the probe's Ethernet trailer and echoed by our
/// responder (see the [module docs](self)).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub struct Nonce(pub [u8; PROBE_NONCE_LEN]);

impl Nonce {
    /// A fresh nonce from the thread-local CSPRNG.
    pub fn random() -> Nonce {
        Nonce(rand::random())
    }
}

/// Why a probe could not be sent or answers not read.
#[derive(Debug, thiserror::Error)]
pub enum ProbeError {
    /// The sending socket could not be opened, or a send failed.
    #[error(transparent)]
    Send(#[from] AnnounceError),
    /// The listening socket could not be opened or set up.
    #[error("cannot listen for probe answers on interface index {ifindex}")]
    Listen {
        /// The interface.
        ifindex: u32,
        /// The failing call's error.
        #[source]
        source: io::Error,
    },
    /// Reading the listening socket failed.
    #[error("cannot read probe answers on interface index {ifindex}")]
    Receive {
        /// The interface.
        ifindex: u32,
        /// The error from `recv(2)`.
        #[source]
        source: io::Error,
    },
    /// An IPv6 probe needs a source address of ours on the link, and none was given.
    #[error("cannot probe {vip}: no IPv6 address of ours on the interface to send from")]
    NoIpv6Source {
        /// The VIP.
        vip: Ipv6Addr,
    },
    /// Probing a group or all-zero MAC would ask every node, not the old owner; and answers
    /// can only be told apart if our own MAC is unicast.
    #[error("cannot probe with {mac}: not a unicast MAC")]
    NotUnicast {
        /// The MAC.
        mac: MacAddr,
    },
    /// A VLAN id above [`MAX_VLAN_ID`].
    #[error("VLAN id {vlan} is above {MAX_VLAN_ID}")]
    BadVlan {
        /// The id.
        vlan: u16,
    },
}

/// What a probe is sent from: our side of the link.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct ProbeSource {
    /// Our MAC on the interface.
    pub mac: MacAddr,
    /// Our IPv4 address on it, if any (else ARP probes are sent from 0.0.0.0).
    pub ipv4: Option<Ipv4Addr>,
    /// Our IPv6 address on it, link-local preferred (needed for IPv6 probes).
    pub ipv6: Option<Ipv6Addr>,
    /// The 802.1Q VLAN to tag probes with.
    pub vlan: Option<u16>,
}

/// The probe frame asking `target` whether it has `vip`, carrying `nonce` in its Ethernet
/// trailer (see the [module docs](self)).
pub fn probe_frame(
    src: &ProbeSource,
    vip: IpAddr,
    target: MacAddr,
    nonce: Nonce,
) -> Result<Vec<u8>, ProbeError> {
    if !target.is_unicast() {
        return Err(ProbeError::NotUnicast { mac: target });
    }
    if let Some(vlan) = src.vlan.filter(|&v| v > MAX_VLAN_ID) {
        return Err(ProbeError::BadVlan { vlan });
    }
    let mut buf = [0u8; MAX_FRAME];
    let eth = EthernetRepr {
        src: src.mac,
        dst: target,
        vlan: src.vlan,
        ethertype: 0, // set by the builders
    };
    let len = match vip {
        IpAddr::V4(vip) => {
            let len = frame::arp(
                &mut buf,
                &eth,
                &ArpRepr {
                    operation: ArpOperation::Request,
                    sender_mac: src.mac,
                    sender_ip: src.ipv4.unwrap_or(Ipv4Addr::UNSPECIFIED),
                    target_mac: MacAddr::ZERO,
                    target_ip: vip,
                },
            );
            // In the zero padding of the minimum-size frame: the length does not change.
            let at = eth.header_len() + ArpHdr::LEN;
            buf[at..at + PROBE_NONCE_LEN].copy_from_slice(&nonce.0);
            debug_assert!(at + PROBE_NONCE_LEN <= len);
            len
        }
        IpAddr::V6(vip) => {
            let from = src.ipv6.ok_or(ProbeError::NoIpv6Source { vip })?;
            // In a Nonce option inside the IPv6 payload, where no bridge trims it.
            frame::ndisc(
                &mut buf,
                &eth,
                from,
                vip,
                &NdiscRepr::NeighborSolicit {
                    target: vip,
                    lladdr: Some(src.mac),
                    nonce: Some(nonce.0),
                },
            )
        }
    };
    Ok(buf[..len].to_vec())
}

/// The kernel probe frame asking for `ip` (a node's own address), without a nonce (see the
/// [module docs](self)): to `target` if given, else to everyone who can hold it.
///
/// * IPv4: an ARP request (RFC 826), Ethernet destination `target` or broadcast, sender our
///   IPv4 address on the interface (or 0.0.0.0, an ARP Probe, RFC 5227 §2.1.1, which a Linux
///   kernel also answers, unicast to the sender hardware address).
/// * IPv6: a Neighbor Solicitation with a Source Link-Layer Address option, from our
///   link-local address: to `ip` itself at `target` (unicast, as Neighbor Unreachability
///   Detection does, RFC 4861 §7.2.2, §7.3.1), else to its solicited-node group (RFC 4291
///   §2.7.1) at the group's MAC (RFC 2464 §7). Either way the answer is a solicited NA unicast
///   to us (§7.2.4).
pub fn kernel_probe_frame(
    src: &ProbeSource,
    ip: IpAddr,
    target: Option<MacAddr>,
) -> Result<Vec<u8>, ProbeError> {
    if let Some(mac) = target.filter(|m| !m.is_unicast()) {
        return Err(ProbeError::NotUnicast { mac });
    }
    if let Some(vlan) = src.vlan.filter(|&v| v > MAX_VLAN_ID) {
        return Err(ProbeError::BadVlan { vlan });
    }
    let mut buf = [0u8; MAX_FRAME];
    let len = match ip {
        IpAddr::V4(ip) => {
            let eth = EthernetRepr {
                src: src.mac,
                dst: target.unwrap_or(MacAddr::BROADCAST),
                vlan: src.vlan,
                ethertype: 0,
            };
            frame::arp(
                &mut buf,
                &eth,
                &ArpRepr {
                    operation: ArpOperation::Request,
                    sender_mac: src.mac,
                    sender_ip: src.ipv4.unwrap_or(Ipv4Addr::UNSPECIFIED),
                    target_mac: MacAddr::ZERO,
                    target_ip: ip,
                },
            )
        }
        IpAddr::V6(ip) => {
            let from = src.ipv6.ok_or(ProbeError::NoIpv6Source { vip: ip })?;
            let (dst_ip, dst_mac) = match target {
                Some(mac) => (ip, mac),
                None => {
                    let group = solicited_node(ip);
                    (group, MacAddr::from_ipv6_multicast(&group.octets()))
                }
            };
            let eth = EthernetRepr {
                src: src.mac,
                dst: dst_mac,
                vlan: src.vlan,
                ethertype: 0,
            };
            frame::ndisc(
                &mut buf,
                &eth,
                from,
                dst_ip,
                &NdiscRepr::NeighborSolicit {
                    target: ip,
                    lladdr: Some(src.mac),
                    nonce: None,
                },
            )
        }
    };
    Ok(buf[..len].to_vec())
}

/// The solicited-node multicast address of `ip`: `ff02::1:ff00:0/104` and its low 24 bits
/// (RFC 4291 §2.7.1).
pub fn solicited_node(ip: Ipv6Addr) -> Ipv6Addr {
    let o = ip.octets();
    Ipv6Addr::from([
        0xff, 0x02, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0x01, 0xff, o[13], o[14], o[15],
    ])
}

/// A received frame that answers a probe sent from our MAC, with the nonce it echoes (its
/// first [`PROBE_NONCE_LEN`] bytes of ARP padding, or an NA's Nonce option; `None` without).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Reply {
    /// Who claims what.
    pub answer: Answer,
    /// The echoed nonce, if the frame carries one.
    pub nonce: Option<Nonce>,
}

fn nonce_at(bytes: &[u8], at: usize) -> Option<Nonce> {
    let b = bytes.get(at..at + PROBE_NONCE_LEN)?;
    Some(Nonce(b.try_into().expect("PROBE_NONCE_LEN bytes")))
}

/// The reply a received frame is, if it can be an answer to a probe sent from `our_mac`:
///
/// * an ARP reply for IPv4 over Ethernet (RFC 826) sent unicast to us (Ethernet destination
///   and `ar$tha` `our_mac`), whose Ethernet source is its unicast `ar$sha`, for a unicast
///   `ar$spa`;
/// * or a Neighbor Advertisement that passes RFC 4861 §7.1.2's checks (hop limit 255, valid
///   checksum, code 0, at least 24 bytes, well-formed options, target not multicast), is
///   solicited (S=1) and sent unicast to us (§7.2.4: the answer to a unicast-sourced NS),
///   and whose Target Link-Layer Address, if present, is its Ethernet source.
///
/// Whether it answers *the* probe (VIP, MAC, nonce, time) is [`InFlight::accept`]'s call.
pub fn parse_answer(frame: &[u8], our_mac: MacAddr) -> Option<Reply> {
    let eth = EthernetFrame::new_checked(frame).ok()?;
    if eth.dst() != our_mac || !our_mac.is_unicast() {
        return None;
    }
    match eth.ethertype() {
        ethertype::ARP => {
            let arp = ArpRepr::parse(&ArpPacket::new_checked(eth.payload()).ok()?).ok()?;
            let ok = arp.operation == ArpOperation::Reply
                && arp.sender_mac.is_unicast()
                && arp.sender_mac == eth.src()
                && arp.target_mac == our_mac
                && !arp.sender_ip.is_unspecified()
                && !arp.sender_ip.is_broadcast()
                && !arp.sender_ip.is_multicast();
            ok.then(|| Reply {
                answer: Answer {
                    vip: arp.sender_ip.into(),
                    mac: arp.sender_mac,
                    kind: ProbeKind::DataPlane,
                },
                nonce: nonce_at(eth.payload(), ArpHdr::LEN),
            })
        }
        ethertype::IPV6 => {
            let ip = Ipv6Packet::new_checked(eth.payload()).ok()?;
            let h = ip.header();
            if h.next_header != NEXT_HEADER_ICMPV6 || h.hop_limit != HOP_LIMIT {
                return None;
            }
            let (src, dst) = (Ipv6Addr::from(h.src), Ipv6Addr::from(h.dst));
            if dst.is_multicast() {
                return None; // Not unicast to us (and §7.1.2 forbids S=1 to a group).
            }
            let nd = NdiscPacket::new_checked(ip.payload()).ok()?;
            if !nd.verify_checksum(&src, &dst) {
                return None;
            }
            let NdiscRepr::NeighborAdvert {
                flags,
                target,
                lladdr,
                nonce,
            } = NdiscRepr::parse(&nd).ok()?
            else {
                return None;
            };
            if target.is_multicast() || !flags.solicited {
                return None;
            }
            let mac = lladdr.unwrap_or(eth.src());
            (mac.is_unicast() && mac == eth.src()).then(|| Reply {
                answer: Answer {
                    vip: target.into(),
                    mac,
                    kind: ProbeKind::DataPlane,
                },
                nonce: nonce.map(Nonce),
            })
        }
        _ => None,
    }
}

/// Bound on the probes in flight (all interfaces): the oldest is dropped to make room.
pub const MAX_IN_FLIGHT: usize = 4096;

/// Why a received frame was not forwarded as an answer.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Dropped {
    /// Not an answer to a probe from us at all ([`parse_answer`] says no).
    Mismatch,
    /// An answer, but no probe of that MAC for that VIP is in flight on the interface
    /// (never sent, already answered, or its window closed).
    NoProbe,
    /// A probe is in flight, but the frame does not carry its nonce.
    BadNonce,
}

type Key = (u32, IpAddr, MacAddr);

#[derive(Clone, Copy, Debug)]
struct Pending {
    seq: u64,
    nonce: Nonce,
    deadline: Instant,
}

/// A kernel probe in flight: no nonce; `mac` `None` when sent to everyone.
#[derive(Clone, Copy, Debug)]
struct KernelPending {
    ifindex: u32,
    ip: IpAddr,
    mac: Option<MacAddr>,
    deadline: Instant,
}

/// The probes in flight: (interface, VIP, probed MAC) → nonce and deadline. Pure; the clock
/// is passed in.
#[derive(Debug)]
pub struct InFlight {
    cap: usize,
    pending: HashMap<Key, Vec<Pending>>,
    /// Insertion order, for dropping the oldest; may name entries already gone.
    order: VecDeque<(u64, Key)>,
    len: usize,
    seq: u64,
    /// Kernel probes, oldest first (a few per silent peer: a short list).
    kernel: VecDeque<KernelPending>,
    /// When [`prune`](Self::prune) last ran.
    pruned_at: Option<Instant>,
}

/// How often an insert prunes the whole table (see [`InFlight::prune_due`]).
const PRUNE_EVERY: Duration = Duration::from_millis(10);

impl Default for InFlight {
    fn default() -> Self {
        Self::new(MAX_IN_FLIGHT)
    }
}

impl InFlight {
    /// An empty table holding at most `cap` probes (at least one).
    pub fn new(cap: usize) -> Self {
        Self {
            cap: cap.max(1),
            pending: HashMap::new(),
            order: VecDeque::new(),
            len: 0,
            seq: 0,
            kernel: VecDeque::new(),
            pruned_at: None,
        }
    }

    /// Prunes if the last prune is [`PRUNE_EVERY`] old (a full table drops its oldest
    /// probes, expired or not, on insert). Why not on
    /// every insert: a prune scans every probe in flight, and an agent that finds hundreds
    /// of peers silent at once (its own stall, a partition) sends a probe per silent MAC per
    /// interval, so pruning per insert made the storm quadratic on the election thread. An
    /// expired probe kept a few milliseconds longer answers nothing: its key's expired probes
    /// go before an answer is matched.
    fn prune_due(&mut self, now: Instant) {
        if self.pruned_at.is_none_or(|t| now >= t + PRUNE_EVERY) {
            self.prune(now);
        }
    }

    /// Probes in flight, kernel probes included (expired ones included until they are
    /// pruned).
    pub fn len(&self) -> usize {
        self.len + self.kernel.len()
    }

    /// Whether no probe is in flight.
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// Records a kernel probe for `ip` on `ifindex`, sent to `mac` (`None`: broadcast or
    /// multicast, any MAC may answer), answerable until `deadline`. Prunes expired probes
    /// first; if the kernel probes are still at the cap, drops the oldest.
    pub fn insert_kernel(
        &mut self,
        ifindex: u32,
        ip: IpAddr,
        mac: Option<MacAddr>,
        deadline: Instant,
        now: Instant,
    ) {
        self.prune_due(now);
        while self.kernel.len() >= self.cap {
            self.kernel.pop_front();
        }
        self.kernel.push_back(KernelPending {
            ifindex,
            ip,
            mac,
            deadline,
        });
    }

    /// The kernel probe `answer`, received on `ifindex` at `now`, answers, if any: removed
    /// (each forwards one answer).
    fn accept_kernel(&mut self, ifindex: u32, answer: &Answer, now: Instant) -> Option<Answer> {
        let at = self.kernel.iter().position(|k| {
            k.ifindex == ifindex
                && k.ip == answer.vip
                && k.deadline > now
                && k.mac.is_none_or(|m| m == answer.mac)
        })?;
        self.kernel.remove(at);
        Some(Answer {
            kind: ProbeKind::Kernel,
            ..*answer
        })
    }

    /// Records a probe of `mac` for `vip` on `ifindex` with `nonce`, answerable until
    /// `deadline`. Prunes expired probes first; if the table is still full, drops the oldest.
    pub fn insert(
        &mut self,
        ifindex: u32,
        vip: IpAddr,
        mac: MacAddr,
        nonce: Nonce,
        deadline: Instant,
        now: Instant,
    ) {
        self.prune_due(now);
        while self.len >= self.cap {
            let Some((seq, key)) = self.order.pop_front() else {
                break;
            };
            self.remove(&key, |p| p.seq == seq);
        }
        self.seq += 1;
        let key = (ifindex, vip, mac);
        self.pending.entry(key).or_default().push(Pending {
            seq: self.seq,
            nonce,
            deadline,
        });
        self.order.push_back((self.seq, key));
        self.len += 1;
        if self.order.len() > 2 * self.cap {
            // Forget order records of probes answered or pruned since.
            let pending = &self.pending;
            self.order.retain(|(seq, key)| {
                pending
                    .get(key)
                    .is_some_and(|v| v.iter().any(|p| p.seq == *seq))
            });
        }
    }

    /// Drops every probe whose window has closed.
    pub fn prune(&mut self, now: Instant) {
        self.pruned_at = Some(now);
        self.kernel.retain(|k| k.deadline > now);
        let mut removed = 0;
        self.pending.retain(|_, v| {
            let before = v.len();
            v.retain(|p| p.deadline > now);
            removed += before - v.len();
            !v.is_empty()
        });
        self.len -= removed;
        if self.pending.is_empty() {
            self.order.clear();
        }
    }

    fn remove(&mut self, key: &Key, which: impl Fn(&Pending) -> bool) -> bool {
        let Some(v) = self.pending.get_mut(key) else {
            return false;
        };
        let before = v.len();
        v.retain(|p| !which(p));
        let removed = before - v.len();
        if v.is_empty() {
            self.pending.remove(key);
        }
        self.len -= removed;
        removed > 0
    }

    /// Whether `reply`, received on `ifindex` at `now`, answers a probe in flight: then that
    /// probe is removed (it forwards nothing more) and the answer returned. A data-plane probe
    /// needs its nonce echoed; failing that, a kernel probe of that address may take it.
    pub fn accept(&mut self, ifindex: u32, reply: &Reply, now: Instant) -> Result<Answer, Dropped> {
        match self.accept_data_plane(ifindex, reply, now) {
            Err(e) => self.accept_kernel(ifindex, &reply.answer, now).ok_or(e),
            ok => ok,
        }
    }

    fn accept_data_plane(
        &mut self,
        ifindex: u32,
        reply: &Reply,
        now: Instant,
    ) -> Result<Answer, Dropped> {
        let key = (ifindex, reply.answer.vip, reply.answer.mac);
        // Expired probes of this key go now; the rest wait for the next insert's prune.
        self.remove(&key, |p| p.deadline <= now);
        let Some(v) = self.pending.get(&key) else {
            return Err(Dropped::NoProbe);
        };
        let Some(seq) = reply
            .nonce
            .and_then(|n| v.iter().find(|p| p.nonce == n))
            .map(|p| p.seq)
        else {
            return Err(Dropped::BadNonce);
        };
        self.remove(&key, |p| p.seq == seq);
        Ok(Answer {
            kind: ProbeKind::DataPlane,
            ..reply.answer
        })
    }

    /// [`parse_answer`] then [`accept`](Self::accept): the verdict on a frame received on
    /// `ifindex`, whose MAC is `our_mac`.
    pub fn judge(
        &mut self,
        ifindex: u32,
        our_mac: MacAddr,
        frame: &[u8],
        now: Instant,
    ) -> Result<Answer, Dropped> {
        let reply = parse_answer(frame, our_mac).ok_or(Dropped::Mismatch)?;
        self.accept(ifindex, &reply, now)
    }
}

/// Counters of the answer path, exported as metrics.
#[derive(Debug, Default)]
pub struct ProbeStats {
    accepted: AtomicU64,
    no_probe: AtomicU64,
    bad_nonce: AtomicU64,
    mismatch: AtomicU64,
}

/// The [`ProbeStats`] counters at one moment.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct ProbeStatsSnapshot {
    /// Answers forwarded to the election (`answers_accepted`).
    pub answers_accepted: u64,
    /// Frames that answered no probe in flight (`dropped_no_probe`).
    pub dropped_no_probe: u64,
    /// Frames for a probe in flight without its nonce (`dropped_bad_nonce`).
    pub dropped_bad_nonce: u64,
    /// Frames past the kernel filter that are no answer to us (`dropped_mismatch`).
    pub dropped_mismatch: u64,
}

impl ProbeStats {
    /// A copy of every counter (each read atomically on its own).
    pub fn snapshot(&self) -> ProbeStatsSnapshot {
        let get = |c: &AtomicU64| c.load(Ordering::Relaxed);
        ProbeStatsSnapshot {
            answers_accepted: get(&self.accepted),
            dropped_no_probe: get(&self.no_probe),
            dropped_bad_nonce: get(&self.bad_nonce),
            dropped_mismatch: get(&self.mismatch),
        }
    }

    /// Counts one verdict.
    pub fn count(&self, verdict: &Result<Answer, Dropped>) {
        let c = match verdict {
            Ok(_) => &self.accepted,
            Err(Dropped::NoProbe) => &self.no_probe,
            Err(Dropped::BadNonce) => &self.bad_nonce,
            Err(Dropped::Mismatch) => &self.mismatch,
        };
        c.fetch_add(1, Ordering::Relaxed);
    }
}

/// The in-flight table and counters shared by the senders and listeners of a [`Probes`]
/// set (or of one stand-alone [`Prober`]).
#[derive(Clone, Debug, Default)]
struct Ledger {
    in_flight: Arc<Mutex<InFlight>>,
    stats: Arc<ProbeStats>,
}

impl Ledger {
    fn table(&self) -> std::sync::MutexGuard<'_, InFlight> {
        self.in_flight.lock().unwrap_or_else(|e| e.into_inner())
    }
}

/// Sends probes on one interface and records them as in flight; answers are read with
/// [`Answers`] ([`listen`](Self::listen)) or the [`probe`](Self::probe) convenience.
#[derive(Debug)]
pub struct Prober {
    sock: PacketSocket,
    src: ProbeSource,
    shared: Ledger,
}

impl Prober {
    /// Opens a sending socket on the interface `ifindex` whose MAC is `our_mac` and whose
    /// addresses are `our_ipv4` and `our_ipv6_link_local`. Needs `CAP_NET_RAW`.
    pub fn open(
        ifindex: u32,
        our_mac: MacAddr,
        our_ipv4: Option<Ipv4Addr>,
        our_ipv6_link_local: Option<Ipv6Addr>,
    ) -> Result<Self, ProbeError> {
        let src = ProbeSource {
            mac: our_mac,
            ipv4: our_ipv4,
            ipv6: our_ipv6_link_local,
            vlan: None,
        };
        Self::open_shared(ifindex, src, Ledger::default())
    }

    fn open_shared(ifindex: u32, src: ProbeSource, shared: Ledger) -> Result<Self, ProbeError> {
        if !src.mac.is_unicast() {
            return Err(ProbeError::NotUnicast { mac: src.mac });
        }
        if let Some(v) = src.vlan.filter(|&v| v > MAX_VLAN_ID) {
            return Err(ProbeError::BadVlan { vlan: v });
        }
        Ok(Self {
            sock: PacketSocket::open(ifindex)?,
            src,
            shared,
        })
    }

    /// Tags probes with 802.1Q VLAN `vlan` (answers are matched whatever their tag: the
    /// kernel usually strips it before packet sockets see the frame).
    pub fn with_vlan(mut self, vlan: Option<u16>) -> Result<Self, ProbeError> {
        if let Some(v) = vlan.filter(|&v| v > MAX_VLAN_ID) {
            return Err(ProbeError::BadVlan { vlan: v });
        }
        self.src.vlan = vlan;
        Ok(self)
    }

    /// The interface probes go out on.
    pub fn ifindex(&self) -> u32 {
        self.sock.ifindex()
    }

    /// What probes are sent from.
    pub fn source(&self) -> &ProbeSource {
        &self.src
    }

    /// The answer path's counters (shared with the other probers of a [`Probes`] set).
    pub fn stats(&self) -> ProbeStatsSnapshot {
        self.shared.stats.snapshot()
    }

    /// Sends one probe asking `target` for `vip` with a fresh nonce, answerable for `window`;
    /// the answer, if any, arrives on this prober's [`Answers`]. Returns the nonce sent.
    pub fn send(
        &self,
        vip: IpAddr,
        target: MacAddr,
        window: Duration,
    ) -> Result<Nonce, ProbeError> {
        let nonce = Nonce::random();
        let frame = probe_frame(&self.src, vip, target, nonce)?;
        // In flight before it is on the wire, so an immediate answer is not dropped.
        let now = Instant::now();
        self.shared
            .table()
            .insert(self.ifindex(), vip, target, nonce, now + window, now);
        self.sock.send(&frame)?;
        Ok(nonce)
    }

    /// Sends one kernel probe for `ip` (a node's own address), to `target` or to everyone
    /// ([`kernel_probe_frame`]), answerable for `window`.
    pub fn send_kernel(
        &self,
        ip: IpAddr,
        target: Option<MacAddr>,
        window: Duration,
    ) -> Result<(), ProbeError> {
        let frame = kernel_probe_frame(&self.src, ip, target)?;
        let now = Instant::now();
        self.shared
            .table()
            .insert_kernel(self.ifindex(), ip, target, now + window, now);
        self.sock.send(&frame)?;
        Ok(())
    }

    /// Listens for answers on this prober's interface. Must be called within a tokio runtime.
    pub fn listen(&self) -> Result<Answers, ProbeError> {
        Answers::open(self.ifindex(), self.src.mac, self.shared.clone())
    }

    /// Probes once and waits up to `timeout` for `target` to answer for `vip`: `true` if it
    /// did. Listens before sending, so an immediate answer is not missed. One frame is sent;
    /// a lost probe or answer reads as silence (the election core re-probes as it sees fit).
    pub async fn probe(
        &self,
        vip: IpAddr,
        target: MacAddr,
        timeout: Duration,
    ) -> Result<bool, ProbeError> {
        let mut answers = self.listen()?;
        self.send(vip, target, timeout)?;
        let wanted = Answer {
            vip,
            mac: target,
            kind: ProbeKind::DataPlane,
        };
        let wait = async {
            loop {
                if answers.next().await? == wanted {
                    return Ok(true);
                }
            }
        };
        match tokio::time::timeout(timeout, wait).await {
            Ok(result) => result,
            Err(_elapsed) => Ok(false),
        }
    }
}

/// Builds a classic BPF jump: `jt`/`jf` are absolute instruction indices, converted to the
/// offsets from the next instruction that the kernel expects.
const fn jeq(at: usize, k: u32, jt: usize, jf: usize) -> libc::sock_filter {
    libc::sock_filter {
        code: (libc::BPF_JMP | libc::BPF_JEQ | libc::BPF_K) as u16,
        jt: (jt - at - 1) as u8,
        jf: (jf - at - 1) as u8,
        k,
    }
}

/// `A == X`, with absolute targets as in [`jeq`].
const fn jeq_x(at: usize, jt: usize, jf: usize) -> libc::sock_filter {
    libc::sock_filter {
        code: (libc::BPF_JMP | libc::BPF_JEQ | libc::BPF_X) as u16,
        jt: (jt - at - 1) as u8,
        jf: (jf - at - 1) as u8,
        k: 0,
    }
}

const fn ld(size: u32, offset: u32) -> libc::sock_filter {
    libc::sock_filter {
        code: (libc::BPF_LD | size | libc::BPF_ABS) as u16,
        jt: 0,
        jf: 0,
        k: offset,
    }
}

/// `X = A`.
const TAX: libc::sock_filter = libc::sock_filter {
    code: (libc::BPF_MISC | libc::BPF_TAX) as u16,
    jt: 0,
    jf: 0,
    k: 0,
};

const fn ret(k: u32) -> libc::sock_filter {
    libc::sock_filter {
        code: (libc::BPF_RET | libc::BPF_K) as u16,
        jt: 0,
        jf: 0,
        k,
    }
}

const W: u32 = libc::BPF_W;
const H: u32 = libc::BPF_H;
const B: u32 = libc::BPF_B;
const TAGGED: usize = 22;
const IPV6: usize = 17;
const IPV6_TAGGED: usize = 34;
const ACCEPT: usize = 39;
const DROP: usize = 40;

/// Length of the [`filter`] program.
pub const FILTER_LEN: usize = 41;

/// The kernel filter of the answer socket of the interface whose MAC is `our_mac`: keeps
/// frames unicast to `our_mac` that are ARP replies whose Ethernet source is their sender
/// hardware address (`ar$sha`), or ICMPv6 Neighbor Advertisements (without IPv6 extension
/// headers, which ND messages do not carry), untagged or with one 802.1Q tag left in the
/// frame; drops everything else. Offsets are from the Ethernet header: destination at 0,
/// source at 6, EtherType at 12, ARP `ar$op` at 14 + 6 and `ar$sha` at 14 + 8, IPv6 next
/// header at 14 + 6, ICMPv6 type at 14 + 40; 4 more behind a tag. Loads past the end of a
/// frame drop it.
pub fn filter(our_mac: MacAddr) -> [libc::sock_filter; FILTER_LEN] {
    let m = our_mac.0;
    let hi = u32::from_be_bytes([m[0], m[1], m[2], m[3]]);
    let lo = u32::from(u16::from_be_bytes([m[4], m[5]]));
    let arp = ethertype::ARP as u32;
    let ipv6 = ethertype::IPV6 as u32;
    let icmp6 = NEXT_HEADER_ICMPV6 as u32;
    [
        ld(W, 0),                                  // 0: destination, first 4 bytes
        jeq(1, hi, 2, DROP),                       // 1
        ld(H, 4),                                  // 2: destination, last 2
        jeq(3, lo, 4, DROP),                       // 3
        ld(H, 12),                                 // 4: EtherType
        jeq(5, ethertype::VLAN as u32, TAGGED, 6), // 5
        jeq(6, arp, 7, IPV6),                      // 6
        ld(H, 20),                                 // 7: ar$op
        jeq(8, 2, 9, DROP),                        // 8: reply
        ld(W, 6),                                  // 9: source, first 4 bytes
        TAX,                                       // 10
        ld(W, 22),                                 // 11: ar$sha, first 4
        jeq_x(12, 13, DROP),                       // 12
        ld(H, 10),                                 // 13: source, last 2
        TAX,                                       // 14
        ld(H, 26),                                 // 15: ar$sha, last 2
        jeq_x(16, ACCEPT, DROP),                   // 16
        jeq(IPV6, ipv6, 18, DROP),                 // 17
        ld(B, 20),                                 // 18: next header
        jeq(19, icmp6, 20, DROP),                  // 19
        ld(B, 54),                                 // 20: ICMPv6 type
        jeq(21, 136, ACCEPT, DROP),                // 21: NA
        ld(H, 16),                                 // 22: inner EtherType
        jeq(23, arp, 24, IPV6_TAGGED),             // 23
        ld(H, 24),                                 // 24: ar$op
        jeq(25, 2, 26, DROP),                      // 25
        ld(W, 6),                                  // 26
        TAX,                                       // 27
        ld(W, 26),                                 // 28: ar$sha
        jeq_x(29, 30, DROP),                       // 29
        ld(H, 10),                                 // 30
        TAX,                                       // 31
        ld(H, 30),                                 // 32
        jeq_x(33, ACCEPT, DROP),                   // 33
        jeq(IPV6_TAGGED, ipv6, 35, DROP),          // 34
        ld(B, 24),                                 // 35: next header
        jeq(36, icmp6, 37, DROP),                  // 36
        ld(B, 58),                                 // 37: ICMPv6 type
        jeq(38, 136, ACCEPT, DROP),                // 38
        ret(u32::MAX),                             // 39: ACCEPT, whole frame
        ret(0),                                    // 40: DROP
    ]
}

/// Attaches [`filter`]`(our_mac)` to a socket (`SO_ATTACH_FILTER`).
fn attach_filter(fd: &OwnedFd, our_mac: MacAddr) -> io::Result<()> {
    let prog = filter(our_mac);
    let fprog = libc::sock_fprog {
        len: prog.len() as u16,
        filter: prog.as_ptr().cast_mut(),
    };
    setsockopt(fd, libc::SOL_SOCKET, libc::SO_ATTACH_FILTER, &fprog)
}

/// A packet socket on one interface that receives only candidate answers (see [`filter`])
/// and yields those that answer a probe in flight, each at most once.
#[derive(Debug)]
pub struct Answers {
    fd: AsyncFd<OwnedFd>,
    ifindex: u32,
    our_mac: MacAddr,
    shared: Ledger,
    buf: Vec<u8>,
}

impl Answers {
    /// Opens the listening socket on `ifindex`. Needs `CAP_NET_RAW` and a tokio runtime.
    ///
    /// The socket is created receiving nothing, gets its filter and then is bound to the
    /// interface, so no unfiltered frame is ever queued. Frames this host sends are ignored
    /// (`PACKET_IGNORE_OUTGOING`).
    fn open(ifindex: u32, our_mac: MacAddr, shared: Ledger) -> Result<Self, ProbeError> {
        let err = |source| ProbeError::Listen { ifindex, source };
        let fd = socket::socket(
            AddressFamily::Packet,
            SockType::Raw,
            SockFlag::SOCK_CLOEXEC | SockFlag::SOCK_NONBLOCK,
            None,
        )
        .map_err(|e| err(e.into()))?;
        attach_filter(&fd, our_mac).map_err(err)?;
        setsockopt(&fd, libc::SOL_PACKET, libc::PACKET_IGNORE_OUTGOING, &1i32).map_err(err)?;
        bind(&fd, ifindex, libc::ETH_P_ALL as u16).map_err(err)?;
        // SAFETY: the OwnedFd is open, owned by the AsyncFd from here on, and always returns
        // the same descriptor.
        let fd = unsafe { AsyncFd::register_with_interest(fd, Interest::READABLE) }
            .map_err(|e| err(e.into_parts().1))?;
        Ok(Self {
            fd,
            ifindex,
            our_mac,
            shared,
            buf: vec![0; 2048],
        })
    }

    /// The next answer to a probe in flight. Other frames are dropped (and counted).
    pub async fn next(&mut self) -> Result<Answer, ProbeError> {
        loop {
            let mut guard = self
                .fd
                .readable()
                .await
                .map_err(|source| ProbeError::Receive {
                    ifindex: self.ifindex,
                    source,
                })?;
            let buf = &mut self.buf;
            match guard.try_io(|fd| {
                socket::recv(fd.as_raw_fd(), buf, MsgFlags::MSG_DONTWAIT).map_err(io::Error::from)
            }) {
                Ok(Ok(n)) => {
                    let verdict = self.shared.table().judge(
                        self.ifindex,
                        self.our_mac,
                        &self.buf[..n],
                        Instant::now(),
                    );
                    self.shared.stats.count(&verdict);
                    if let Ok(answer) = verdict {
                        return Ok(answer);
                    }
                }
                Ok(Err(e)) if e.kind() == io::ErrorKind::Interrupted => {}
                Ok(Err(source)) => {
                    return Err(ProbeError::Receive {
                        ifindex: self.ifindex,
                        source,
                    });
                }
                Err(_would_block) => {}
            }
        }
    }

    /// Forwards answers to `out` until `shutdown` completes or `out` is closed (the form the
    /// agent uses: the election core times probes out itself).
    pub async fn forward(
        mut self,
        out: mpsc::Sender<Answer>,
        shutdown: impl Future<Output = ()>,
    ) -> Result<(), ProbeError> {
        tokio::pin!(shutdown);
        loop {
            tokio::select! {
                () = &mut shutdown => return Ok(()),
                () = out.closed() => return Ok(()),
                answer = self.next() => {
                    if out.send(answer?).await.is_err() {
                        return Ok(());
                    }
                }
            }
        }
    }
}

/// One interface's prober and its listener task.
#[derive(Debug)]
struct Iface {
    prober: Prober,
    listener: JoinHandle<()>,
}

/// Every interface's [`Prober`] and [`Answers`] listener, the probes in flight and the one
/// channel their answers arrive on: what the agent holds. Probers are opened on first use
/// (and reopened if the interface changed or its listener failed); listeners are tokio tasks,
/// stopped when the set is dropped.
#[derive(Debug)]
pub struct Probes {
    ifaces: BTreeMap<IfaceName, Iface>,
    shared: Ledger,
    tx: mpsc::Sender<Answer>,
}

impl Probes {
    /// An empty set and the receiver of its answers (`buffer` answers deep; each probe
    /// forwards at most one).
    pub fn new(buffer: usize) -> (Probes, mpsc::Receiver<Answer>) {
        let (tx, rx) = mpsc::channel(buffer.max(1));
        (
            Probes {
                ifaces: BTreeMap::new(),
                shared: Ledger::default(),
                tx,
            },
            rx,
        )
    }

    /// Sends a probe asking `target` whether it has `vip` on interface `iface` (index
    /// `ifindex`, our side `src`), answerable for `window`. The answer, if any, arrives on
    /// the receiver. Must be called within a tokio runtime.
    pub fn send(
        &mut self,
        iface: &IfaceName,
        ifindex: u32,
        src: ProbeSource,
        vip: IpAddr,
        target: MacAddr,
        window: Duration,
    ) -> Result<(), ProbeError> {
        self.prober(iface, ifindex, src)?
            .send(vip, target, window)
            .map(drop)
    }

    /// Sends a kernel probe for `ip` (a node's own address) on `iface`, to `target` or to
    /// everyone ([`kernel_probe_frame`]), answerable for `window`. The answer, if any, arrives
    /// on the receiver with [`ProbeKind::Kernel`].
    pub fn send_kernel(
        &mut self,
        iface: &IfaceName,
        ifindex: u32,
        src: ProbeSource,
        ip: IpAddr,
        target: Option<MacAddr>,
        window: Duration,
    ) -> Result<(), ProbeError> {
        self.prober(iface, ifindex, src)?
            .send_kernel(ip, target, window)
    }

    /// The prober of `iface`, opened (with its listener) if needed, sending from `src`.
    fn prober(
        &mut self,
        iface: &IfaceName,
        ifindex: u32,
        src: ProbeSource,
    ) -> Result<&mut Prober, ProbeError> {
        if let Some(v) = src.vlan.filter(|&v| v > MAX_VLAN_ID) {
            return Err(ProbeError::BadVlan { vlan: v });
        }
        let current = self.ifaces.get(iface).is_some_and(|i| {
            i.prober.ifindex() == ifindex
                && i.prober.src.mac == src.mac
                && !i.listener.is_finished()
        });
        if !current {
            if let Some(old) = self.ifaces.remove(iface) {
                old.listener.abort();
            }
            let prober = Prober::open_shared(ifindex, src, self.shared.clone())?;
            let answers = prober.listen()?;
            let tx = self.tx.clone();
            let listener = tokio::spawn(async move {
                if let Err(e) = answers.forward(tx, std::future::pending()).await {
                    tracing::warn!(ifindex, error = %e, "probe listener failed");
                }
            });
            self.ifaces
                .insert(iface.clone(), Iface { prober, listener });
        }
        // Addresses may have changed since the prober was opened; the MAC and index did not.
        let i = self.ifaces.get_mut(iface).expect("inserted above");
        i.prober.src = src;
        Ok(&mut i.prober)
    }

    /// The answer path's counters.
    pub fn stats(&self) -> Arc<ProbeStats> {
        self.shared.stats.clone()
    }

    /// Probes in flight, all interfaces.
    pub fn in_flight(&self) -> usize {
        self.shared.table().len()
    }
}

impl Drop for Probes {
    fn drop(&mut self) {
        for i in self.ifaces.values() {
            i.listener.abort();
        }
    }
}

#[cfg(test)]
mod tests;
