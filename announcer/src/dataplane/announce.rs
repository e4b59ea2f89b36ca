//! Unsolicited announcements sent when this node takes over a VIP.
//!
//! The XDP responder only *answers* ARP requests and Neighbor Solicitations. At failover the
//! routers and peers on the segment still map the VIP to the old node's MAC, and would keep
//! doing so until their cache entry goes stale and they ask again (tens of seconds to minutes).
//! To move traffic at once, the agent writes the BPF map (so later questions get the new answer)
//! and then broadcasts the new binding itself:
//!
//! * IPv4: gratuitous ARP in both forms: the ARP Announcement of RFC 5227 §2.3 (a request
//!   with sender and target IP both set to the VIP) and the gratuitous reply of
//!   RFC 5944 §4.6, built so that Linux's `arp_is_garp()` accepts it (see [`garp_frames`]).
//!   Receivers differ in which form they act on, so every round sends both.
//! * IPv6: an unsolicited Neighbor Advertisement to all-nodes with the Override flag
//!   (RFC 4861 §7.2.6), see [`unsolicited_na`].
//!
//! An XDP program cannot originate packets (it can only rewrite or redirect one it received),
//! and the kernel's own stack will not announce an address that is not configured on the
//! interface, so the frames are built here with the shared [`announcer_ebpf::wire`] builders
//! and sent from userspace on an `AF_PACKET` socket ([`PacketSocket`]).
//!
//! Frame construction and scheduling are pure and unit-tested; only [`PacketSocket`] needs
//! `CAP_NET_RAW`. The repeat schedule is [`BurstConfig`]; [`burst`] runs it on tokio and
//! [`burst_blocking`] on the calling thread (for the CLI), sharing everything but the sleep.

use std::{
    fmt, io,
    net::{IpAddr, Ipv4Addr, Ipv6Addr},
    os::fd::{AsRawFd, OwnedFd},
    time::Duration,
};

use announcer_ebpf::wire::{
    ALL_NODES, ArpOperation, ArpRepr, EthernetRepr, MacAddr, NaFlags, NdiscRepr,
    ethernet::ethertype,
    frame::{self, MAX_FRAME},
};
use nix::sys::socket::{self, AddressFamily, MsgFlags, SockFlag, SockType};

/// `MAX_NEIGHBOR_ADVERTISEMENT` (RFC 4861 §10): the most unsolicited Neighbor Advertisements a
/// node may send for one change of link-layer address (§7.2.6).
pub const MAX_NEIGHBOR_ADVERTISEMENT: u32 = 3;

/// The default `RetransTimer` (`RETRANS_TIMER`, RFC 4861 §10): the least spacing between
/// unsolicited Neighbor Advertisements (§7.2.6). A router may advertise a different value
/// (§6.3.4); the default is used here, since the announcer does not track Router Advertisements.
pub const RETRANS_TIMER: Duration = Duration::from_secs(1);

/// The least spacing between ARP announcement rounds, and the most rounds: a configuration
/// like `count = 1000, interval = 0` would otherwise flood the segment with broadcasts.
pub const MIN_ARP_INTERVAL: Duration = Duration::from_millis(10);
/// See [`MIN_ARP_INTERVAL`].
pub const MAX_ARP_ROUNDS: u32 = 100;

/// The highest usable 802.1Q VLAN id (4095 is reserved, IEEE 802.1Q §9.6).
pub const MAX_VLAN_ID: u16 = 4094;

/// How many announcement rounds to send, and how far apart.
///
/// Round 0 goes out immediately: that first frame is what moves the neighbours' caches at
/// failover, and nothing is gained by delaying it. The later rounds only cover the loss of
/// earlier frames (a busy switch, a peer whose receive queue was full), so a few, spaced out,
/// are enough.
///
/// The default, 3 rounds 1 s apart, is the most RFC 4861 §7.2.6 allows for unsolicited
/// Neighbor Advertisements (at most [`MAX_NEIGHBOR_ADVERTISEMENT`] = 3, separated by at least
/// `RetransTimer`, [`RETRANS_TIMER`] = 1 s by default). ARP uses the same schedule so that both
/// families fail over alike; for comparison, RFC 5227 §2.3 announces a newly claimed address
/// with `ANNOUNCE_NUM` = 2 ARP Announcements `ANNOUNCE_INTERVAL` = 2 s apart.
///
/// IPv4 uses the configuration with at least one round, at most [`MAX_ARP_ROUNDS`], at least
/// [`MIN_ARP_INTERVAL`] apart; IPv6 uses [`paced_for_ipv6`](Self::paced_for_ipv6).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct BurstConfig {
    /// Number of rounds, the immediate one included. 0 is treated as 1.
    pub count: u32,
    /// Pause between the start of one round and the next.
    pub interval: Duration,
}

impl Default for BurstConfig {
    /// 3 rounds, 1 s apart (see the type's documentation).
    fn default() -> Self {
        Self {
            count: MAX_NEIGHBOR_ADVERTISEMENT,
            interval: RETRANS_TIMER,
        }
    }
}

impl BurstConfig {
    /// This schedule within the limits of RFC 4861 §7.2.6 for unsolicited Neighbor
    /// Advertisements: at most [`MAX_NEIGHBOR_ADVERTISEMENT`] (3) of them, at least
    /// [`RETRANS_TIMER`] (1 s) apart.
    pub fn paced_for_ipv6(&self) -> BurstConfig {
        BurstConfig {
            count: self.count.min(MAX_NEIGHBOR_ADVERTISEMENT),
            interval: self.interval.max(RETRANS_TIMER),
        }
    }
}

/// One Ethernet frame, built in place (no allocation), ready to send.
#[derive(Clone)]
pub struct Frame {
    buf: [u8; MAX_FRAME],
    len: usize,
}

impl Frame {
    /// Runs a `wire::frame` builder on a fresh buffer and keeps the length it returns.
    fn build(emit: impl FnOnce(&mut [u8]) -> usize) -> Self {
        let mut buf = [0u8; MAX_FRAME];
        let len = emit(&mut buf);
        Self { buf, len }
    }

    /// The frame, from the destination MAC to the end of the (padded) payload; no FCS.
    pub fn as_bytes(&self) -> &[u8] {
        &self.buf[..self.len]
    }
}

impl AsRef<[u8]> for Frame {
    fn as_ref(&self) -> &[u8] {
        self.as_bytes()
    }
}

impl PartialEq for Frame {
    fn eq(&self, other: &Self) -> bool {
        self.as_bytes() == other.as_bytes()
    }
}

impl Eq for Frame {}

impl fmt::Debug for Frame {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "Frame({:02x?})", self.as_bytes())
    }
}

/// The two gratuitous ARP frames announcing that `vip` is at `mac`, both broadcast from `mac`
/// (802.1Q-tagged with `vlan` if set), in the order they are sent:
///
/// 1. The **request** form, the ARP Announcement of RFC 5227 §2.3: `op` = 1 (request),
///    `sha` = `mac`, `spa` = `tpa` = `vip`, `tha` = 00:00:00:00:00:00 (ignored in requests;
///    zeroed as in the Probe of RFC 5227 §2.1.1). RFC 5227 §3 explains why announcements are
///    sent as requests rather than replies.
/// 2. The **reply** form of RFC 5944 §4.6: `op` = 2 (reply), `sha` = `tha` = `mac`,
///    `spa` = `tpa` = `vip`. Linux (`arp_is_garp()` in net/ipv4/arp.c) treats an ARP packet as
///    gratuitous only if `sip == tip` and, for replies, `tha == sha`. Only a gratuitous packet
///    overrides an entry updated less than `locktime` (1 s by default) ago, and only a
///    gratuitous one creates an entry when `arp_accept` is set; a reply with a zero `tha` would
///    be neither.
///
/// # Panics
/// If `vlan` is above [`MAX_VLAN_ID`].
pub fn garp_frames(mac: MacAddr, vip: Ipv4Addr, vlan: Option<u16>) -> [Frame; 2] {
    let eth = EthernetRepr {
        src: mac,
        dst: MacAddr::BROADCAST,
        vlan,
        ethertype: ethertype::ARP,
    };
    let announcement = ArpRepr {
        operation: ArpOperation::Request,
        sender_mac: mac,
        sender_ip: vip,
        target_mac: MacAddr::ZERO,
        target_ip: vip,
    };
    let reply = ArpRepr {
        operation: ArpOperation::Reply,
        target_mac: mac,
        ..announcement
    };
    [announcement, reply].map(|arp| Frame::build(|buf| frame::arp(buf, &eth, &arp)))
}

/// The unsolicited Neighbor Advertisement announcing that `vip` is at `mac` (RFC 4861 §7.2.6),
/// 802.1Q-tagged with `vlan` if set.
///
/// * IPv6 source `vip`, destination the all-nodes group ff02::1 (as §7.2.6 specifies),
///   Ethernet destination 33:33:00:00:00:01 (RFC 2464 §7), hop limit 255 (receivers drop any
///   other, §7.1.2; set by [`frame::ndisc`]).
/// * Flags R = 0 (not a router), S = 0 (§7.2.6: it must be clear in unsolicited
///   advertisements, or Neighbor Unreachability Detection would take it as reachability
///   confirmation), O = 1 so that receivers replace the cached address instead of merely
///   marking the entry STALE (§7.2.5).
/// * A Target Link-Layer Address option (§4.6.1) carrying `mac`.
///
/// # Panics
/// If `vlan` is above [`MAX_VLAN_ID`].
pub fn unsolicited_na(mac: MacAddr, vip: Ipv6Addr, vlan: Option<u16>) -> Frame {
    let eth = EthernetRepr {
        src: mac,
        dst: MacAddr::from_ipv6_multicast(&ALL_NODES),
        vlan,
        ethertype: ethertype::IPV6,
    };
    let na = NdiscRepr::NeighborAdvert {
        flags: NaFlags {
            router: false,
            solicited: false,
            override_: true,
        },
        target: vip,
        lladdr: Some(mac),
        nonce: None,
    };
    Frame::build(|buf| frame::ndisc(buf, &eth, vip, Ipv6Addr::from(ALL_NODES), &na))
}

/// Why a [`PacketSocket`] could not be opened or could not send.
#[derive(Debug, thiserror::Error)]
pub enum AnnounceError {
    /// `socket(AF_PACKET, SOCK_RAW, 0)` or binding it to the interface failed.
    #[error("cannot open an AF_PACKET socket on interface index {ifindex}{}", cap_hint(.source))]
    Open {
        /// The interface index asked for.
        ifindex: u32,
        /// The error from `socket(2)` or `bind(2)`.
        #[source]
        source: io::Error,
    },
    /// `send(2)` of one frame failed or was short.
    #[error("cannot send a {len}-byte frame on interface index {ifindex}")]
    Send {
        /// The interface the socket is bound to.
        ifindex: u32,
        /// The frame's length.
        len: usize,
        /// The error from `send(2)`.
        #[source]
        source: io::Error,
    },
}

/// Appended to the `Open` message when the kernel refused for lack of privilege: creating an
/// `AF_PACKET` socket needs `CAP_NET_RAW` in the network namespace's user namespace.
fn cap_hint(e: &io::Error) -> &'static str {
    if e.raw_os_error() == Some(libc::EPERM) {
        " (raw packet sockets need CAP_NET_RAW)"
    } else {
        ""
    }
}

/// A send-only raw packet socket bound to one interface.
///
/// It is opened with protocol 0 and bound with protocol 0, so the kernel registers no receive
/// hook for it: it never queues incoming frames and costs nothing on the receive path. Frames
/// are sent as given, with their own Ethernet header (so with the VIP's MAC as source, which
/// need not be the interface's own address).
#[derive(Debug)]
pub struct PacketSocket {
    fd: OwnedFd,
    ifindex: u32,
}

impl PacketSocket {
    /// Opens a socket sending on the interface with index `ifindex`. Needs `CAP_NET_RAW`.
    pub fn open(ifindex: u32) -> Result<Self, AnnounceError> {
        let open_err = |source| AnnounceError::Open { ifindex, source };
        let fd = socket::socket(
            AddressFamily::Packet,
            SockType::Raw,
            SockFlag::SOCK_CLOEXEC,
            None,
        )
        .map_err(|e| open_err(e.into()))?;
        // Protocol 0: receive nothing.
        super::sys::packet::bind(&fd, ifindex, 0).map_err(open_err)?;
        Ok(Self { fd, ifindex })
    }

    /// The interface index the socket is bound to.
    pub fn ifindex(&self) -> u32 {
        self.ifindex
    }

    /// Sends one whole Ethernet frame (without FCS).
    ///
    /// Does not block: if the socket's send buffer is full the frame is reported as failed
    /// (`EAGAIN`) rather than stalling the caller. In a burst the next round repeats it.
    pub fn send(&self, frame: &[u8]) -> Result<(), AnnounceError> {
        let send_err = |source| AnnounceError::Send {
            ifindex: self.ifindex,
            len: frame.len(),
            source,
        };
        let n = socket::send(self.fd.as_raw_fd(), frame, MsgFlags::MSG_DONTWAIT)
            .map_err(|e| send_err(e.into()))?;
        if n != frame.len() {
            return Err(send_err(io::Error::new(
                io::ErrorKind::WriteZero,
                format!("short send: {n} of {} bytes", frame.len()),
            )));
        }
        Ok(())
    }
}

/// What a burst did, counted in frames.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct BurstReport {
    /// Frames the kernel accepted.
    pub sent: u32,
    /// Frames that were not sent (each one is logged).
    pub failed: u32,
}

/// A burst ready to run: the frames of one round, how many rounds, and the pause between them.
/// Shared by [`burst`] and [`burst_blocking`], which differ only in how they sleep, and by
/// the agent, which sends its rounds through a [`super::pace::Pacer`].
#[derive(Debug)]
pub struct PreparedBurst {
    vip: IpAddr,
    frames: Vec<Frame>,
    rounds: u32,
    interval: Duration,
}

impl PreparedBurst {
    /// The schedule actually used for `vip`: IPv6 paced per RFC 4861 §7.2.6, at least one round.
    fn schedule(vip: IpAddr, cfg: &BurstConfig) -> BurstConfig {
        let cfg = match vip {
            IpAddr::V4(_) => BurstConfig {
                count: cfg.count.min(MAX_ARP_ROUNDS),
                interval: cfg.interval.max(MIN_ARP_INTERVAL),
            },
            IpAddr::V6(_) => cfg.paced_for_ipv6(),
        };
        BurstConfig {
            count: cfg.count.max(1),
            ..cfg
        }
    }

    /// Prepares the burst, or, if `vlan` is not a valid VLAN id, logs and returns the report of a
    /// burst in which every frame failed (a frame tagged for the wrong VLAN would announce the
    /// VIP on the wrong network, so nothing is sent).
    pub fn new(
        mac: MacAddr,
        vip: IpAddr,
        vlan: Option<u16>,
        cfg: &BurstConfig,
    ) -> Result<Self, BurstReport> {
        let BurstConfig {
            count: rounds,
            interval,
        } = Self::schedule(vip, cfg);
        if let Some(id) = vlan.filter(|&id| id > MAX_VLAN_ID) {
            let per_round = if vip.is_ipv4() { 2 } else { 1 };
            tracing::error!(%vip, vlan = id, "not announcing: VLAN id above {MAX_VLAN_ID}");
            return Err(BurstReport {
                sent: 0,
                failed: rounds.saturating_mul(per_round),
            });
        }
        let frames = match vip {
            IpAddr::V4(v4) => garp_frames(mac, v4, vlan).to_vec(),
            IpAddr::V6(v6) => vec![unsolicited_na(mac, v6, vlan)],
        };
        Ok(Self {
            vip,
            frames,
            rounds,
            interval,
        })
    }

    /// Rounds to send, the first included.
    pub fn rounds(&self) -> u32 {
        self.rounds
    }

    /// The least pause between two rounds.
    pub fn interval(&self) -> Duration {
        self.interval
    }

    /// Frames per round: 2 for IPv4 (both forms), 1 for IPv6.
    pub fn frames_per_round(&self) -> u32 {
        self.frames.len() as u32
    }

    /// Sends round `round` on `sock`; failures are logged and counted.
    pub fn send_round_on(&self, round: u32, sock: &PacketSocket) -> BurstReport {
        let mut report = BurstReport::default();
        self.send_round(round, |f| sock.send(f), &mut report);
        report
    }

    /// Sends every frame of round `round` through `send`, counting and logging failures
    /// without stopping.
    fn send_round(
        &self,
        round: u32,
        mut send: impl FnMut(&[u8]) -> Result<(), AnnounceError>,
        report: &mut BurstReport,
    ) {
        for frame in &self.frames {
            match send(frame.as_bytes()) {
                Ok(()) => report.sent = report.sent.saturating_add(1),
                Err(err) => {
                    report.failed = report.failed.saturating_add(1);
                    tracing::warn!(
                        vip = %self.vip,
                        round,
                        error = &err as &dyn std::error::Error,
                        "announcement frame not sent"
                    );
                }
            }
        }
    }

    fn finish(&self, report: BurstReport) -> BurstReport {
        tracing::debug!(vip = %self.vip, sent = report.sent, failed = report.failed, "announced");
        report
    }
}

/// Announces that `vip` is at `mac` on `sock`'s interface: round 0 at once, then one round every
/// `cfg.interval` until `cfg.count` rounds are sent (see [`BurstConfig`]; IPv6 is paced per
/// RFC 4861 §7.2.6). An IPv4 round is both [`garp_frames`], an IPv6 round one
/// [`unsolicited_na`].
///
/// A failed send is logged and counted and the burst goes on. A `vlan` above [`MAX_VLAN_ID`]
/// sends nothing (logged; every frame counted as failed).
pub async fn burst(
    sock: &PacketSocket,
    mac: MacAddr,
    vip: IpAddr,
    vlan: Option<u16>,
    cfg: &BurstConfig,
) -> BurstReport {
    let prepared = match PreparedBurst::new(mac, vip, vlan, cfg) {
        Ok(prepared) => prepared,
        Err(report) => return report,
    };
    let mut report = BurstReport::default();
    for round in 0..prepared.rounds {
        if round > 0 {
            tokio::time::sleep(prepared.interval).await;
        }
        prepared.send_round(round, |f| sock.send(f), &mut report);
    }
    prepared.finish(report)
}

/// [`burst`] on the calling thread, sleeping with [`std::thread::sleep`] (for the CLI).
pub fn burst_blocking(
    sock: &PacketSocket,
    mac: MacAddr,
    vip: IpAddr,
    vlan: Option<u16>,
    cfg: &BurstConfig,
) -> BurstReport {
    let prepared = match PreparedBurst::new(mac, vip, vlan, cfg) {
        Ok(prepared) => prepared,
        Err(report) => return report,
    };
    let mut report = BurstReport::default();
    for round in 0..prepared.rounds {
        if round > 0 {
            std::thread::sleep(prepared.interval);
        }
        prepared.send_round(round, |f| sock.send(f), &mut report);
    }
    prepared.finish(report)
}

#[cfg(test)]
mod tests {
    use announcer_ebpf::wire::{ArpPacket, EthernetFrame, Ipv6Packet, NdiscPacket};

    use super::*;

    const MAC: MacAddr = MacAddr([0x02, 0x00, 0x5e, 0x10, 0x00, 0x01]);
    const VIP4: Ipv4Addr = Ipv4Addr::new(192, 0, 2, 10);

    fn vip6() -> Ipv6Addr {
        "2001:db8::10".parse().unwrap()
    }

    /// The sender-side conditions of Linux's `arp_is_garp()` (net/ipv4/arp.c): `sip == tip`,
    /// and for a reply also `tha == sha`. (The receiver also requires `sip` to be a unicast
    /// address in its own routing table, which depends on the receiver.)
    fn linux_arp_is_garp(a: &ArpRepr) -> bool {
        a.sender_ip == a.target_ip
            && (a.operation != ArpOperation::Reply || a.target_mac == a.sender_mac)
    }

    /// Parses an ARP frame, checking the Ethernet header, and returns the ARP fields.
    fn parse_arp(frame: &Frame, vlan: Option<u16>) -> ArpRepr {
        let eth = EthernetFrame::new_checked(frame.as_bytes()).expect("ethernet");
        assert_eq!(eth.dst(), MacAddr::BROADCAST);
        assert_eq!(eth.src(), MAC);
        assert_eq!(eth.vlan(), vlan);
        assert_eq!(eth.ethertype(), ethertype::ARP);
        assert_eq!(
            frame.as_bytes().len(),
            frame::MIN_FRAME,
            "padded to the Ethernet minimum"
        );
        let arp = ArpPacket::new_checked(eth.payload()).expect("arp");
        ArpRepr::parse(&arp).expect("ethernet/ipv4 arp")
    }

    fn check_garp(vlan: Option<u16>) {
        let [request, reply] = garp_frames(MAC, VIP4, vlan);

        let req = parse_arp(&request, vlan);
        assert_eq!(
            req,
            ArpRepr {
                operation: ArpOperation::Request,
                sender_mac: MAC,
                sender_ip: VIP4,
                target_mac: MacAddr::ZERO,
                target_ip: VIP4,
            }
        );
        assert!(linux_arp_is_garp(&req));

        let rep = parse_arp(&reply, vlan);
        assert_eq!(
            rep,
            ArpRepr {
                operation: ArpOperation::Reply,
                sender_mac: MAC,
                sender_ip: VIP4,
                target_mac: MAC,
                target_ip: VIP4,
            }
        );
        assert!(linux_arp_is_garp(&rep));
    }

    #[test]
    fn garp_untagged() {
        check_garp(None);
        let [request, reply] = garp_frames(MAC, VIP4, None);
        // ar$op on the wire, after the 14-byte Ethernet header.
        assert_eq!(&request.as_bytes()[12..14], &[0x08, 0x06]);
        assert_eq!(&request.as_bytes()[20..22], &[0, 1]);
        assert_eq!(&reply.as_bytes()[20..22], &[0, 2]);
    }

    #[test]
    fn garp_tagged() {
        check_garp(Some(7));
        for f in garp_frames(MAC, VIP4, Some(7)) {
            // TPID 0x8100, TCI = priority 0, VID 7, then the ARP EtherType.
            assert_eq!(&f.as_bytes()[12..18], &[0x81, 0x00, 0x00, 0x07, 0x08, 0x06]);
        }
    }

    #[test]
    fn garp_check_rejects_a_reply_with_zero_tha() {
        // The model of arp_is_garp() used above does discriminate.
        let not_garp = ArpRepr {
            operation: ArpOperation::Reply,
            sender_mac: MAC,
            sender_ip: VIP4,
            target_mac: MacAddr::ZERO,
            target_ip: VIP4,
        };
        assert!(!linux_arp_is_garp(&not_garp));
        let other_tip = ArpRepr {
            target_ip: Ipv4Addr::new(192, 0, 2, 1),
            ..not_garp
        };
        assert!(!linux_arp_is_garp(&ArpRepr {
            operation: ArpOperation::Request,
            ..other_tip
        }));
    }

    fn check_na(vlan: Option<u16>) {
        let f = unsolicited_na(MAC, vip6(), vlan);
        let eth = EthernetFrame::new_checked(f.as_bytes()).expect("ethernet");
        assert_eq!(eth.dst(), MacAddr([0x33, 0x33, 0, 0, 0, 1]));
        assert_eq!(eth.src(), MAC);
        assert_eq!(eth.vlan(), vlan);
        assert_eq!(eth.ethertype(), ethertype::IPV6);

        let ip = Ipv6Packet::new_checked(eth.payload()).expect("ipv6");
        let h = ip.header();
        let all_nodes: Ipv6Addr = "ff02::1".parse().unwrap();
        assert_eq!(Ipv6Addr::from(h.src), vip6());
        assert_eq!(Ipv6Addr::from(h.dst), all_nodes);
        assert_eq!(h.hop_limit, 255);
        assert_eq!(h.next_header, 58);

        let nd = NdiscPacket::new_checked(ip.payload()).expect("ndisc");
        assert!(nd.verify_checksum(&vip6(), &all_nodes));
        assert_eq!(nd.header().ty, 136);
        assert_eq!(nd.header().flags, [0x20, 0, 0, 0], "R=0 S=0 O=1");
        assert_eq!(
            NdiscRepr::parse(&nd).expect("na"),
            NdiscRepr::NeighborAdvert {
                flags: NaFlags {
                    router: false,
                    solicited: false,
                    override_: true
                },
                target: vip6(),
                lladdr: Some(MAC),
                nonce: None,
            }
        );
    }

    #[test]
    fn na_untagged() {
        check_na(None);
    }

    #[test]
    fn na_tagged() {
        check_na(Some(7));
        let f = unsolicited_na(MAC, vip6(), Some(7));
        assert_eq!(&f.as_bytes()[12..18], &[0x81, 0x00, 0x00, 0x07, 0x86, 0xdd]);
    }

    #[test]
    fn default_config() {
        assert_eq!(
            BurstConfig::default(),
            BurstConfig {
                count: 3,
                interval: Duration::from_secs(1)
            }
        );
        assert_eq!(
            BurstConfig::default().paced_for_ipv6(),
            BurstConfig::default()
        );
    }

    #[test]
    fn ipv6_pacing_clamps() {
        let eager = BurstConfig {
            count: 10,
            interval: Duration::from_millis(100),
        };
        assert_eq!(
            eager.paced_for_ipv6(),
            BurstConfig {
                count: 3,
                interval: Duration::from_secs(1)
            }
        );
        let gentle = BurstConfig {
            count: 2,
            interval: Duration::from_secs(5),
        };
        assert_eq!(gentle.paced_for_ipv6(), gentle);
    }

    #[test]
    fn plans() {
        let eager = BurstConfig {
            count: 10,
            interval: Duration::from_millis(100),
        };

        let v4 = PreparedBurst::new(MAC, VIP4.into(), None, &eager).unwrap();
        assert_eq!(
            (v4.rounds, v4.interval),
            (10, Duration::from_millis(100)),
            "ARP as given"
        );
        assert_eq!(v4.frames, garp_frames(MAC, VIP4, None).to_vec());

        let v6 = PreparedBurst::new(MAC, vip6().into(), Some(7), &eager).unwrap();
        assert_eq!(
            (v6.rounds, v6.interval),
            (3, Duration::from_secs(1)),
            "§7.2.6 pacing"
        );
        assert_eq!(v6.frames, vec![unsolicited_na(MAC, vip6(), Some(7))]);

        let none = BurstConfig {
            count: 0,
            interval: Duration::ZERO,
        };
        assert_eq!(
            PreparedBurst::new(MAC, VIP4.into(), None, &none)
                .unwrap()
                .rounds,
            1
        );
        assert_eq!(
            PreparedBurst::new(MAC, vip6().into(), None, &none)
                .unwrap()
                .rounds,
            1
        );
    }

    #[test]
    fn bad_vlan_sends_nothing() {
        let cfg = BurstConfig::default();
        let report = PreparedBurst::new(MAC, VIP4.into(), Some(4095), &cfg).unwrap_err();
        assert_eq!(report, BurstReport { sent: 0, failed: 6 });
        let report = PreparedBurst::new(MAC, vip6().into(), Some(4095), &cfg).unwrap_err();
        assert_eq!(report, BurstReport { sent: 0, failed: 3 });
        assert!(PreparedBurst::new(MAC, VIP4.into(), Some(MAX_VLAN_ID), &cfg).is_ok());
    }

    #[test]
    fn a_failed_send_is_counted_and_the_round_goes_on() {
        let prepared = PreparedBurst::new(MAC, VIP4.into(), None, &BurstConfig::default()).unwrap();
        let mut seen = Vec::new();
        let mut report = BurstReport::default();
        prepared.send_round(
            0,
            |f| {
                seen.push(f.to_vec());
                if seen.len() == 1 {
                    Err(AnnounceError::Send {
                        ifindex: 2,
                        len: f.len(),
                        source: io::Error::from_raw_os_error(libc::ENOBUFS),
                    })
                } else {
                    Ok(())
                }
            },
            &mut report,
        );
        assert_eq!(report, BurstReport { sent: 1, failed: 1 });
        let [request, reply] = garp_frames(MAC, VIP4, None);
        assert_eq!(
            seen,
            vec![request.as_bytes().to_vec(), reply.as_bytes().to_vec()]
        );
    }

    #[test]
    fn open_error_mentions_cap_net_raw_only_for_eperm() {
        let eperm = AnnounceError::Open {
            ifindex: 3,
            source: io::Error::from_raw_os_error(libc::EPERM),
        };
        assert!(eperm.to_string().contains("CAP_NET_RAW"), "{eperm}");
        let enodev = AnnounceError::Open {
            ifindex: 3,
            source: io::Error::from_raw_os_error(libc::ENODEV),
        };
        assert!(!enodev.to_string().contains("CAP_NET_RAW"), "{enodev}");
        assert!(enodev.to_string().contains("interface index 3"), "{enodev}");
    }

    #[test]
    fn open_rejects_ifindex_zero_without_a_syscall() {
        match PacketSocket::open(0) {
            Err(AnnounceError::Open { ifindex: 0, source }) => {
                assert_eq!(source.kind(), io::ErrorKind::InvalidInput);
            }
            other => panic!("expected an Open error, got {other:?}"),
        }
    }
}
