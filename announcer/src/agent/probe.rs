//! Probing the old owner's data plane before taking a VIP over.
//!
//! Why: when a peer's heartbeats stop, either its node died, or only its agent did (crash,
//! OOM kill, rolling upgrade) while its XDP responder keeps answering for the VIP from the
//! pinned map until the entries expire. Taking the VIP over in the second case would make
//! two nodes answer at once. So the successor asks the old owner's data plane directly: a
//! unicast ARP request (IPv4) or Neighbor Solicitation (IPv6) for the VIP, sent to the old
//! owner's MAC. An answer means the node is alive and the successor waits; silence means it
//! takes over now. The election core decides ([`crate::election::Output::Probe`] and
//! [`crate::election::Input::ProbeAnswered`]); this module sends and listens.
//!
//! * IPv4: an ARP request (RFC 826) for the VIP with Ethernet destination the target MAC.
//!   The sender IP is our IPv4 address on the interface, or 0.0.0.0 if we have none: then it
//!   is an ARP Probe (RFC 5227 §2.1.1), which cannot pollute the target's ARP cache.
//! * IPv6: a unicast Neighbor Solicitation as in Neighbor Unreachability Detection
//!   (RFC 4861 §7.2.2, §7.3.1): IPv6 destination the VIP itself, Ethernet destination the
//!   target MAC, source our address on the link (link-local), with a Source Link-Layer Address
//!   option, hop limit 255.
//!
//! Answers are read on an `AF_PACKET` socket ([`Answers`]) with a classic BPF filter that
//! lets only ARP replies and Neighbor Advertisements reach userspace, so the socket costs
//! nothing on a busy interface. A frame counts as an answer if it is an ARP reply, or an NA
//! valid per RFC 4861 §7.1.2; the election core matches its VIP and MAC against the probe it
//! asked for ([`Answer`]). Answers to other nodes' probes, the reply form of a gratuitous
//! ARP and unsolicited NAs count too: any reply in which that MAC claims that VIP proves its
//! data plane is alive, whoever it was addressed to.
//!
//! Frame building and answer parsing are pure functions ([`probe_frame`], [`parse_answer`]),
//! built on the shared [`announcer_ebpf::wire`] layouts; only the sockets need `CAP_NET_RAW`.

use std::{
    future::Future,
    io,
    net::{IpAddr, Ipv4Addr, Ipv6Addr},
    os::fd::{AsRawFd, OwnedFd},
    time::Duration,
};

use announcer_ebpf::wire::{
    ArpOperation, ArpPacket, ArpRepr, EthernetFrame, EthernetRepr, Ipv6Packet, MacAddr,
    NdiscPacket, NdiscRepr,
    ethernet::ethertype,
    frame::{self, MAX_FRAME},
    ipv6::NEXT_HEADER_ICMPV6,
    ndisc::HOP_LIMIT,
};
use nix::sys::socket::{self, AddressFamily, MsgFlags, SockFlag, SockType};
use tokio::{
    io::{Interest, unix::AsyncFd},
    sync::mpsc,
};

use crate::{
    announce::{AnnounceError, MAX_VLAN_ID, PacketSocket},
    election::Input,
    packet::{bind, setsockopt},
};

/// A data plane's answer: `mac` says it has `vip`.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub struct Answer {
    /// The VIP answered for (ARP sender IP, NA target).
    pub vip: IpAddr,
    /// The MAC it is at (ARP sender hardware address; the NA's Target Link-Layer Address
    /// option, else its Ethernet source).
    pub mac: MacAddr,
}

impl From<Answer> for Input {
    fn from(a: Answer) -> Input {
        Input::ProbeAnswered {
            vip: a.vip,
            mac: a.mac,
        }
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
    /// Probing a group or all-zero MAC would ask every node, not the old owner.
    #[error("cannot probe {mac}: not a unicast MAC")]
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
pub struct Source {
    /// Our MAC on the interface.
    pub mac: MacAddr,
    /// Our IPv4 address on it, if any (else ARP probes are sent from 0.0.0.0).
    pub ipv4: Option<Ipv4Addr>,
    /// Our IPv6 address on it, link-local preferred (needed for IPv6 probes).
    pub ipv6: Option<Ipv6Addr>,
    /// The 802.1Q VLAN to tag probes with.
    pub vlan: Option<u16>,
}

/// The probe frame asking `target` whether it has `vip` (see the [module docs](self)).
pub fn probe_frame(src: &Source, vip: IpAddr, target: MacAddr) -> Result<Vec<u8>, ProbeError> {
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
        IpAddr::V4(vip) => frame::arp(
            &mut buf,
            &eth,
            &ArpRepr {
                operation: ArpOperation::Request,
                sender_mac: src.mac,
                sender_ip: src.ipv4.unwrap_or(Ipv4Addr::UNSPECIFIED),
                target_mac: MacAddr::ZERO,
                target_ip: vip,
            },
        ),
        IpAddr::V6(vip) => {
            let from = src.ipv6.ok_or(ProbeError::NoIpv6Source { vip })?;
            frame::ndisc(
                &mut buf,
                &eth,
                from,
                vip,
                &NdiscRepr::NeighborSolicit {
                    target: vip,
                    lladdr: Some(src.mac),
                },
            )
        }
    };
    Ok(buf[..len].to_vec())
}

/// The answer a received frame carries, if it is one: an ARP reply for IPv4 over Ethernet,
/// or a Neighbor Advertisement that passes RFC 4861 §7.1.2's checks (hop limit 255, valid
/// checksum, code 0, at least 24 bytes, well-formed options, target not multicast, S clear
/// if sent to a multicast group).
pub fn parse_answer(frame: &[u8]) -> Option<Answer> {
    let eth = EthernetFrame::new_checked(frame).ok()?;
    match eth.ethertype() {
        ethertype::ARP => {
            let arp = ArpRepr::parse(&ArpPacket::new_checked(eth.payload()).ok()?).ok()?;
            (arp.operation == ArpOperation::Reply && arp.sender_mac.is_unicast()).then_some(
                Answer {
                    vip: arp.sender_ip.into(),
                    mac: arp.sender_mac,
                },
            )
        }
        ethertype::IPV6 => {
            let ip = Ipv6Packet::new_checked(eth.payload()).ok()?;
            let h = ip.header();
            if h.next_header != NEXT_HEADER_ICMPV6 || h.hop_limit != HOP_LIMIT {
                return None;
            }
            let (src, dst) = (Ipv6Addr::from(h.src), Ipv6Addr::from(h.dst));
            let nd = NdiscPacket::new_checked(ip.payload()).ok()?;
            if !nd.verify_checksum(&src, &dst) {
                return None;
            }
            let NdiscRepr::NeighborAdvert {
                flags,
                target,
                lladdr,
            } = NdiscRepr::parse(&nd).ok()?
            else {
                return None;
            };
            if target.is_multicast() || (dst.is_multicast() && flags.solicited) {
                return None;
            }
            let mac = lladdr.unwrap_or(eth.src());
            mac.is_unicast().then_some(Answer {
                vip: target.into(),
                mac,
            })
        }
        _ => None,
    }
}

/// Sends probes on one interface. Cheap to share; answers are read with [`Answers`] (or the
/// [`probe`](Self::probe) convenience).
#[derive(Debug)]
pub struct Prober {
    sock: PacketSocket,
    src: Source,
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
        Ok(Self {
            sock: PacketSocket::open(ifindex)?,
            src: Source {
                mac: our_mac,
                ipv4: our_ipv4,
                ipv6: our_ipv6_link_local,
                vlan: None,
            },
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

    /// Sends one probe asking `target` for `vip`; the answer, if any, arrives on [`Answers`].
    pub fn send(&self, vip: IpAddr, target: MacAddr) -> Result<(), ProbeError> {
        let frame = probe_frame(&self.src, vip, target)?;
        self.sock.send(&frame)?;
        Ok(())
    }

    /// Listens for answers on this prober's interface. Must be called within a tokio runtime.
    pub fn listen(&self) -> Result<Answers, ProbeError> {
        Answers::open(self.ifindex())
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
        self.send(vip, target)?;
        let wanted = Answer { vip, mac: target };
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

const fn ld(size: u32, offset: u32) -> libc::sock_filter {
    libc::sock_filter {
        code: (libc::BPF_LD | size | libc::BPF_ABS) as u16,
        jt: 0,
        jf: 0,
        k: offset,
    }
}

const fn ret(k: u32) -> libc::sock_filter {
    libc::sock_filter {
        code: (libc::BPF_RET | libc::BPF_K) as u16,
        jt: 0,
        jf: 0,
        k,
    }
}

const H: u32 = libc::BPF_H;
const B: u32 = libc::BPF_B;
const ACCEPT: usize = 19;
const DROP: usize = 20;

/// Keeps ARP replies and ICMPv6 Neighbor Advertisements (without IPv6 extension headers,
/// which ND messages do not carry), untagged or with one 802.1Q tag left in the frame;
/// drops everything else in the kernel. Offsets are from the Ethernet header: EtherType at
/// 12, ARP `ar$op` at 14 + 6, IPv6 next header at 14 + 6, ICMPv6 type at 14 + 40; 4 more
/// behind a tag.
const FILTER: [libc::sock_filter; 21] = [
    ld(H, 12),                                    // 0: EtherType
    jeq(1, ethertype::VLAN as u32, 10, 2),        // 1
    jeq(2, ethertype::ARP as u32, 3, 5),          // 2
    ld(H, 20),                                    // 3: ar$op
    jeq(4, 2, ACCEPT, DROP),                      // 4: reply
    jeq(5, ethertype::IPV6 as u32, 6, DROP),      // 5
    ld(B, 20),                                    // 6: next header
    jeq(7, NEXT_HEADER_ICMPV6 as u32, 8, DROP),   // 7
    ld(B, 54),                                    // 8: ICMPv6 type
    jeq(9, 136, ACCEPT, DROP),                    // 9: NA
    ld(H, 16),                                    // 10: inner EtherType
    jeq(11, ethertype::ARP as u32, 12, 14),       // 11
    ld(H, 24),                                    // 12: ar$op
    jeq(13, 2, ACCEPT, DROP),                     // 13
    jeq(14, ethertype::IPV6 as u32, 15, DROP),    // 14
    ld(B, 24),                                    // 15: next header
    jeq(16, NEXT_HEADER_ICMPV6 as u32, 17, DROP), // 16
    ld(B, 58),                                    // 17: ICMPv6 type
    jeq(18, 136, ACCEPT, DROP),                   // 18
    ret(u32::MAX),                                // 19: ACCEPT, whole frame
    ret(0),                                       // 20: DROP
];

/// A packet socket on one interface that receives only candidate answers (ARP replies and
/// Neighbor Advertisements) and yields the [`Answer`]s among them.
#[derive(Debug)]
pub struct Answers {
    fd: AsyncFd<OwnedFd>,
    ifindex: u32,
    buf: Vec<u8>,
}

impl Answers {
    /// Opens the listening socket on `ifindex`. Needs `CAP_NET_RAW` and a tokio runtime.
    ///
    /// The socket is created receiving nothing, gets its filter and then is bound to the
    /// interface, so no unfiltered frame is ever queued. Frames this host sends are ignored
    /// (`PACKET_IGNORE_OUTGOING`).
    pub fn open(ifindex: u32) -> Result<Self, ProbeError> {
        let err = |source| ProbeError::Listen { ifindex, source };
        let fd = socket::socket(
            AddressFamily::Packet,
            SockType::Raw,
            SockFlag::SOCK_CLOEXEC | SockFlag::SOCK_NONBLOCK,
            None,
        )
        .map_err(|e| err(e.into()))?;
        let prog = libc::sock_fprog {
            len: FILTER.len() as u16,
            filter: FILTER.as_ptr().cast_mut(),
        };
        setsockopt(&fd, libc::SOL_SOCKET, libc::SO_ATTACH_FILTER, &prog).map_err(err)?;
        setsockopt(&fd, libc::SOL_PACKET, libc::PACKET_IGNORE_OUTGOING, &1i32).map_err(err)?;
        bind(&fd, ifindex, libc::ETH_P_ALL as u16).map_err(err)?;
        // SAFETY: the OwnedFd is open, owned by the AsyncFd from here on, and always returns
        // the same descriptor.
        let fd = unsafe { AsyncFd::register_with_interest(fd, Interest::READABLE) }
            .map_err(|e| err(e.into_parts().1))?;
        Ok(Self {
            fd,
            ifindex,
            buf: vec![0; 2048],
        })
    }

    /// The next answer. Frames that are not answers are skipped.
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
                    if let Some(answer) = parse_answer(&self.buf[..n]) {
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

#[cfg(test)]
mod tests;
