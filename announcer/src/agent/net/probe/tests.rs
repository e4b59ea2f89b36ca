//! Probe frames, answer parsing, the in-flight table and the kernel filter, without packet
//! sockets (the filter runs in the kernel on a Unix socket pair).

use announcer_ebpf::wire::{NaFlags, ndisc};

use super::*;

const OURS: MacAddr = MacAddr([2, 0, 0, 0, 0, 2]);
const THEIRS: MacAddr = MacAddr([2, 0, 0, 0, 0, 1]);
const SPOOFER: MacAddr = MacAddr([2, 0, 0, 0, 0, 3]);
const VIP4: Ipv4Addr = Ipv4Addr::new(10, 77, 0, 100);
const OUR4: Ipv4Addr = Ipv4Addr::new(10, 77, 0, 2);
const NONCE: Nonce = Nonce([0xa1, 0xb2, 0xc3, 0xd4, 0xe5, 0xf6, 0x07, 0x18]);
const IF: u32 = 7;

fn vip6() -> Ipv6Addr {
    "fd77::100".parse().unwrap()
}

fn ll() -> Ipv6Addr {
    "fe80::2".parse().unwrap()
}

fn src(ipv4: Option<Ipv4Addr>, vlan: Option<u16>) -> ProbeSource {
    ProbeSource {
        mac: OURS,
        ipv4,
        ipv6: Some(ll()),
        vlan,
    }
}

fn probe4() -> Vec<u8> {
    probe_frame(&src(Some(OUR4), None), VIP4.into(), THEIRS, NONCE).unwrap()
}

fn probe6() -> Vec<u8> {
    probe_frame(&src(None, None), vip6().into(), THEIRS, NONCE).unwrap()
}

#[test]
fn arp_probe_is_a_unicast_request_for_the_vip() {
    for (ipv4, spa) in [(Some(OUR4), OUR4), (None, Ipv4Addr::UNSPECIFIED)] {
        for vlan in [None, Some(7)] {
            let f = probe_frame(&src(ipv4, vlan), VIP4.into(), THEIRS, NONCE).unwrap();
            let eth = EthernetFrame::new_checked(&f[..]).unwrap();
            assert_eq!(
                EthernetRepr::parse(&eth),
                EthernetRepr {
                    src: OURS,
                    dst: THEIRS,
                    vlan,
                    ethertype: ethertype::ARP
                }
            );
            let arp = ArpRepr::parse(&ArpPacket::new_checked(eth.payload()).unwrap());
            assert_eq!(
                arp.unwrap(),
                ArpRepr {
                    operation: ArpOperation::Request,
                    sender_mac: OURS,
                    sender_ip: spa,
                    target_mac: MacAddr::ZERO,
                    target_ip: VIP4,
                }
            );
        }
    }
}

#[test]
fn arp_probe_carries_the_nonce_in_its_padding() {
    let f = probe4();
    assert_eq!(f.len(), 60, "still the minimum frame");
    assert_eq!(&f[42..50], &NONCE.0);
    assert!(f[50..].iter().all(|&b| b == 0));
    let tagged = probe_frame(&src(None, Some(7)), VIP4.into(), THEIRS, NONCE).unwrap();
    assert_eq!(tagged.len(), 60);
    assert_eq!(
        &tagged[46..54],
        &NONCE.0,
        "after the ARP packet, behind the tag"
    );
}

#[test]
fn ns_probe_is_a_unicast_nud_solicitation() {
    let f = probe6();
    let eth = EthernetFrame::new_checked(&f[..]).unwrap();
    assert_eq!((eth.dst(), eth.src()), (THEIRS, OURS));
    assert_eq!(eth.ethertype(), ethertype::IPV6);
    let ip = Ipv6Packet::new_checked(eth.payload()).unwrap();
    let h = ip.header();
    assert_eq!(Ipv6Addr::from(h.src), ll());
    assert_eq!(
        Ipv6Addr::from(h.dst),
        vip6(),
        "unicast to the VIP (RFC 4861 7.2.2)"
    );
    assert_eq!(h.hop_limit, 255);
    let nd = NdiscPacket::new_checked(ip.payload()).unwrap();
    assert!(nd.verify_checksum(&ll(), &vip6()));
    assert_eq!(
        NdiscRepr::parse(&nd).unwrap(),
        NdiscRepr::NeighborSolicit {
            target: vip6(),
            lladdr: Some(OURS),
            nonce: Some(NONCE.0),
        }
    );
}

#[test]
fn ns_probe_carries_the_nonce_in_a_nonce_option_inside_the_ipv6_payload() {
    let f = probe6();
    let plen = usize::from(u16::from_be_bytes([f[18], f[19]]));
    assert_eq!(plen, 24 + 8 + 16, "NS + SLLAO + Nonce option");
    assert_eq!(f.len(), 14 + 40 + plen, "no trailer for a bridge to trim");
    let opt = &f[14 + 40 + 32..];
    assert_eq!(opt[..2], [14, 2], "RFC 3971 5.3.2: type 14, 16 bytes");
    assert_eq!(&opt[2..10], &NONCE.0);
}

#[test]
fn every_probe_gets_its_own_nonce() {
    assert_ne!(Nonce::random(), Nonce::random());
}

#[test]
fn bad_probes_are_refused() {
    let no_v6 = ProbeSource {
        ipv6: None,
        ..src(None, None)
    };
    assert!(matches!(
        probe_frame(&no_v6, vip6().into(), THEIRS, NONCE),
        Err(ProbeError::NoIpv6Source { .. })
    ));
    for mac in [
        MacAddr::BROADCAST,
        MacAddr::ZERO,
        MacAddr([0x33, 0x33, 0, 0, 0, 1]),
    ] {
        assert!(matches!(
            probe_frame(&src(None, None), VIP4.into(), mac, NONCE),
            Err(ProbeError::NotUnicast { .. })
        ));
    }
    assert!(matches!(
        probe_frame(&src(None, Some(4095)), VIP4.into(), THEIRS, NONCE),
        Err(ProbeError::BadVlan { vlan: 4095 })
    ));
}

/// An ARP reply as our responder writes it for [`probe4`]: rewritten in place, so the
/// nonce is still in the padding.
fn arp_reply_to(probe: &[u8]) -> Vec<u8> {
    let mut f = probe.to_vec();
    let (eth, arp) = f.split_at_mut(14);
    eth[0..6].copy_from_slice(&OURS.0);
    eth[6..12].copy_from_slice(&THEIRS.0);
    arp[7] = 2; // ar$op
    let (sha, spa) = (
        [arp[8], arp[9], arp[10], arp[11], arp[12], arp[13]],
        [arp[14], arp[15], arp[16], arp[17]],
    );
    arp[18..24].copy_from_slice(&sha); // tha = requester
    arp[24..28].copy_from_slice(&spa); // tpa = requester
    arp[8..14].copy_from_slice(&THEIRS.0);
    arp[14..18].copy_from_slice(&VIP4.octets());
    f
}

fn answer4() -> Option<Reply> {
    Some(Reply {
        answer: Answer {
            vip: VIP4.into(),
            mac: THEIRS,
            kind: ProbeKind::DataPlane,
        },
        nonce: Some(NONCE),
    })
}

#[test]
fn the_responders_arp_reply_is_an_answer_with_the_nonce() {
    assert_eq!(parse_answer(&arp_reply_to(&probe4()), OURS), answer4());
    let tagged = probe_frame(&src(None, Some(7)), VIP4.into(), THEIRS, NONCE).unwrap();
    let mut reply = tagged.clone();
    reply[0..6].copy_from_slice(&OURS.0);
    reply[6..12].copy_from_slice(&THEIRS.0);
    reply[18 + 7] = 2;
    reply[18 + 18..18 + 24].copy_from_slice(&OURS.0);
    reply[18 + 8..18 + 14].copy_from_slice(&THEIRS.0);
    reply[18 + 14..18 + 18].copy_from_slice(&VIP4.octets());
    assert_eq!(parse_answer(&reply, OURS), answer4(), "802.1Q-tagged");
}

#[test]
fn broadcast_arp_reply_is_not_an_answer() {
    let mut f = arp_reply_to(&probe4());
    f[0..6].copy_from_slice(&MacAddr::BROADCAST.0);
    assert_eq!(parse_answer(&f, OURS), None);
}

#[test]
fn arp_reply_to_another_mac_is_not_an_answer() {
    let mut f = arp_reply_to(&probe4());
    f[0..6].copy_from_slice(&SPOOFER.0);
    assert_eq!(parse_answer(&f, OURS), None, "Ethernet destination");
    let mut f = arp_reply_to(&probe4());
    f[14 + 18..14 + 24].copy_from_slice(&SPOOFER.0);
    assert_eq!(parse_answer(&f, OURS), None, "ar$tha");
}

#[test]
fn arp_reply_whose_ethernet_source_is_not_its_sender_is_not_an_answer() {
    let mut f = arp_reply_to(&probe4());
    f[6..12].copy_from_slice(&SPOOFER.0);
    assert_eq!(parse_answer(&f, OURS), None);
}

#[test]
fn arp_requests_and_garbage_are_not_answers() {
    assert_eq!(parse_answer(&probe4(), OURS), None);
    let mut group = arp_reply_to(&probe4());
    group[6] |= 1;
    group[14 + 8] |= 1;
    assert_eq!(parse_answer(&group, OURS), None, "group sender");
    let mut unspec = arp_reply_to(&probe4());
    unspec[14 + 14..14 + 18].fill(0);
    assert_eq!(parse_answer(&unspec, OURS), None, "sender IP 0.0.0.0");
    assert_eq!(parse_answer(&[0u8; 10], OURS), None);
    let f = arp_reply_to(&probe4());
    assert_eq!(parse_answer(&f[..41], OURS), None, "truncated");
}

#[test]
fn arp_reply_without_padding_has_no_nonce() {
    let f = arp_reply_to(&probe4());
    let got = parse_answer(&f[..42], OURS).unwrap();
    assert_eq!(got.nonce, None);
    assert_eq!(
        parse_answer(&f[..49], OURS).unwrap().nonce,
        None,
        "7 bytes are not a nonce"
    );
}

/// An NA to us from THEIRS, echoing `nonce` in a Nonce option.
fn na(
    dst: Ipv6Addr,
    flags: NaFlags,
    target: Ipv6Addr,
    lladdr: Option<MacAddr>,
    nonce: Option<Nonce>,
) -> Vec<u8> {
    let mut buf = [0u8; MAX_FRAME];
    let eth = EthernetRepr {
        src: THEIRS,
        dst: OURS,
        vlan: None,
        ethertype: 0,
    };
    let repr = NdiscRepr::NeighborAdvert {
        flags,
        target,
        lladdr,
        nonce: nonce.map(|n| n.0),
    };
    let n = frame::ndisc(&mut buf, &eth, target, dst, &repr);
    buf[..n].to_vec()
}

const SOLICITED: NaFlags = NaFlags {
    router: false,
    solicited: true,
    override_: true,
};

fn answer6(nonce: Option<Nonce>) -> Option<Reply> {
    Some(Reply {
        answer: Answer {
            vip: vip6().into(),
            mac: THEIRS,
            kind: ProbeKind::DataPlane,
        },
        nonce,
    })
}

#[test]
fn the_responders_na_is_an_answer_with_the_nonce() {
    let good = na(ll(), SOLICITED, vip6(), Some(THEIRS), Some(NONCE));
    assert_eq!(parse_answer(&good, OURS), answer6(Some(NONCE)));
    // No TLLAO: the Ethernet source; no Nonce option: no nonce.
    assert_eq!(
        parse_answer(&na(ll(), SOLICITED, vip6(), None, None), OURS),
        answer6(None)
    );
}

#[test]
fn a_nonce_in_the_trailer_of_an_na_is_no_nonce() {
    // How answers carried it before the Nonce option; only the option counts now.
    let mut f = na(ll(), SOLICITED, vip6(), Some(THEIRS), None);
    f.extend_from_slice(&NONCE.0);
    assert_eq!(parse_answer(&f, OURS), answer6(None));
}

#[test]
fn neighbor_advertisements_are_validated() {
    let good = na(ll(), SOLICITED, vip6(), Some(THEIRS), Some(NONCE));
    let mut hop = good.clone();
    hop[14 + 7] = 254;
    assert_eq!(parse_answer(&hop, OURS), None, "hop limit must be 255");
    let mut sum = good.clone();
    sum[14 + 40 + 2] ^= 1;
    assert_eq!(parse_answer(&sum, OURS), None, "bad checksum");
    let mut code = good.clone();
    code[14 + 40 + 1] = 1;
    ndisc::fill_checksum(&mut code[14 + 40..], &vip6(), &ll());
    assert_eq!(parse_answer(&code, OURS), None, "code must be 0");
    let group: Ipv6Addr = "ff02::2".parse().unwrap();
    assert_eq!(
        parse_answer(&na(ll(), SOLICITED, group, Some(THEIRS), Some(NONCE)), OURS),
        None,
        "multicast target"
    );
    let ns = probe6();
    assert_eq!(parse_answer(&ns, OURS), None, "an NS");
}

#[test]
fn unsolicited_or_multicast_na_is_not_an_answer() {
    let all_nodes: Ipv6Addr = "ff02::1".parse().unwrap();
    let unsolicited = NaFlags {
        solicited: false,
        ..SOLICITED
    };
    assert_eq!(
        parse_answer(
            &na(all_nodes, unsolicited, vip6(), Some(THEIRS), Some(NONCE)),
            OURS
        ),
        None
    );
    assert_eq!(
        parse_answer(
            &na(ll(), unsolicited, vip6(), Some(THEIRS), Some(NONCE)),
            OURS
        ),
        None
    );
    assert_eq!(
        parse_answer(
            &na(all_nodes, SOLICITED, vip6(), Some(THEIRS), Some(NONCE)),
            OURS
        ),
        None
    );
}

#[test]
fn na_to_another_mac_is_not_an_answer() {
    let mut f = na(ll(), SOLICITED, vip6(), Some(THEIRS), Some(NONCE));
    f[0..6].copy_from_slice(&MacAddr::BROADCAST.0);
    assert_eq!(parse_answer(&f, OURS), None);
    f[0..6].copy_from_slice(&SPOOFER.0);
    assert_eq!(parse_answer(&f, OURS), None);
}

#[test]
fn na_whose_ethernet_source_is_not_its_target_lladdr_is_not_an_answer() {
    let mut f = na(ll(), SOLICITED, vip6(), Some(THEIRS), Some(NONCE));
    f[6..12].copy_from_slice(&SPOOFER.0);
    assert_eq!(parse_answer(&f, OURS), None);
}

fn reply(mac: MacAddr, nonce: Option<Nonce>) -> Reply {
    Reply {
        answer: Answer {
            vip: VIP4.into(),
            mac,
            kind: ProbeKind::DataPlane,
        },
        nonce,
    }
}

fn table_with_probe(now: Instant) -> InFlight {
    let mut t = InFlight::new(16);
    t.insert(
        IF,
        VIP4.into(),
        THEIRS,
        NONCE,
        now + Duration::from_millis(100),
        now,
    );
    t
}

#[test]
fn an_answer_with_the_probes_nonce_is_accepted_once() {
    let now = Instant::now();
    let mut t = table_with_probe(now);
    let want = Answer {
        vip: VIP4.into(),
        mac: THEIRS,
        kind: ProbeKind::DataPlane,
    };
    assert_eq!(t.accept(IF, &reply(THEIRS, Some(NONCE)), now), Ok(want));
    assert!(t.is_empty());
    assert_eq!(
        t.accept(IF, &reply(THEIRS, Some(NONCE)), now),
        Err(Dropped::NoProbe),
        "a probe forwards at most one answer"
    );
}

#[test]
fn answer_without_or_with_a_wrong_nonce_does_not_count() {
    let now = Instant::now();
    let mut t = table_with_probe(now);
    assert_eq!(
        t.accept(IF, &reply(THEIRS, None), now),
        Err(Dropped::BadNonce)
    );
    let mut wrong = NONCE;
    wrong.0[7] ^= 1;
    assert_eq!(
        t.accept(IF, &reply(THEIRS, Some(wrong)), now),
        Err(Dropped::BadNonce)
    );
    assert_eq!(t.len(), 1, "the probe still waits for its real answer");
    assert!(t.accept(IF, &reply(THEIRS, Some(NONCE)), now).is_ok());
}

#[test]
fn answer_for_another_vip_mac_or_interface_is_no_probe() {
    let now = Instant::now();
    let mut t = table_with_probe(now);
    assert_eq!(
        t.accept(IF, &reply(SPOOFER, Some(NONCE)), now),
        Err(Dropped::NoProbe)
    );
    assert_eq!(
        t.accept(IF + 1, &reply(THEIRS, Some(NONCE)), now),
        Err(Dropped::NoProbe)
    );
    let other_vip = Reply {
        answer: Answer {
            vip: Ipv4Addr::new(10, 77, 0, 101).into(),
            mac: THEIRS,
            kind: ProbeKind::DataPlane,
        },
        nonce: Some(NONCE),
    };
    assert_eq!(t.accept(IF, &other_vip, now), Err(Dropped::NoProbe));
}

#[test]
fn answer_after_the_window_does_not_count_and_the_probe_expires() {
    let now = Instant::now();
    let mut t = table_with_probe(now);
    let late = now + Duration::from_millis(100);
    assert_eq!(
        t.accept(IF, &reply(THEIRS, Some(NONCE)), late),
        Err(Dropped::NoProbe)
    );
    assert!(t.is_empty());

    let mut t = table_with_probe(now);
    t.insert(
        IF,
        vip6().into(),
        THEIRS,
        NONCE,
        late + Duration::from_secs(1),
        late,
    );
    assert_eq!(t.len(), 1, "the expired probe was pruned on insert");
}

#[test]
fn each_of_two_probes_forwards_its_own_answer() {
    let now = Instant::now();
    let mut t = table_with_probe(now);
    let second = Nonce([9; 8]);
    t.insert(
        IF,
        VIP4.into(),
        THEIRS,
        second,
        now + Duration::from_millis(100),
        now,
    );
    assert!(t.accept(IF, &reply(THEIRS, Some(second)), now).is_ok());
    assert!(t.accept(IF, &reply(THEIRS, Some(second)), now).is_err());
    assert!(t.accept(IF, &reply(THEIRS, Some(NONCE)), now).is_ok());
    assert!(t.is_empty());
}

#[test]
fn the_in_flight_table_is_bounded_and_drops_the_oldest() {
    let now = Instant::now();
    let mut t = InFlight::new(4);
    let later = now + Duration::from_secs(10);
    for i in 0..10u8 {
        t.insert(IF, VIP4.into(), THEIRS, Nonce([i; 8]), later, now);
        assert!(t.len() <= 4);
    }
    assert_eq!(t.len(), 4);
    for i in 0..6u8 {
        assert_eq!(
            t.accept(IF, &reply(THEIRS, Some(Nonce([i; 8]))), now),
            Err(Dropped::BadNonce),
            "{i}"
        );
    }
    for i in 6..10u8 {
        assert!(
            t.accept(IF, &reply(THEIRS, Some(Nonce([i; 8]))), now)
                .is_ok(),
            "{i}"
        );
    }
    // Many answered probes leave no order records behind without bound.
    for i in 0..100u8 {
        t.insert(IF, VIP4.into(), THEIRS, Nonce([i; 8]), later, now);
        assert!(
            t.accept(IF, &reply(THEIRS, Some(Nonce([i; 8]))), now)
                .is_ok()
        );
    }
    assert!(t.order.len() <= 8);
}

#[test]
fn judge_and_stats_count_every_reason() {
    let now = Instant::now();
    let mut t = InFlight::new(16);
    let stats = ProbeStats::default();
    let probe = probe4();
    t.insert(
        IF,
        VIP4.into(),
        THEIRS,
        NONCE,
        now + Duration::from_millis(100),
        now,
    );
    let mut wrong = arp_reply_to(&probe);
    wrong[42] ^= 0xff;
    let mut broadcast = arp_reply_to(&probe);
    broadcast[0..6].fill(0xff);
    for f in [
        &wrong,
        &broadcast,
        &arp_reply_to(&probe),
        &arp_reply_to(&probe),
    ] {
        stats.count(&t.judge(IF, OURS, f, now));
    }
    assert_eq!(
        stats.snapshot(),
        ProbeStatsSnapshot {
            answers_accepted: 1,
            dropped_no_probe: 1,
            dropped_bad_nonce: 1,
            dropped_mismatch: 1,
        }
    );
}

/// Runs [`filter`]`(OURS)` in the kernel: attached to one end of a Unix datagram socket pair,
/// each frame sent into the other end; whether it comes out.
fn filter_keeps(frame: &[u8]) -> bool {
    use nix::sys::socket::{recv, send, socketpair};
    let (a, b) = socketpair(
        AddressFamily::Unix,
        SockType::Datagram,
        None,
        SockFlag::SOCK_CLOEXEC,
    )
    .unwrap();
    attach_filter(&b, OURS).unwrap();
    send(a.as_raw_fd(), frame, MsgFlags::empty()).unwrap();
    let mut buf = [0u8; 256];
    match recv(b.as_raw_fd(), &mut buf, MsgFlags::MSG_DONTWAIT) {
        Ok(n) => {
            assert_eq!(&buf[..n], frame, "kept whole");
            true
        }
        Err(nix::errno::Errno::EAGAIN) => false,
        Err(e) => panic!("recv: {e}"),
    }
}

#[test]
fn the_kernel_filter_keeps_only_candidate_answers_to_our_mac() {
    let probe = probe4();
    let arp = arp_reply_to(&probe);
    let mut tagged_arp = arp.clone();
    tagged_arp.splice(12..12, [0x81, 0x00, 0x00, 0x07]);
    let na6 = na(ll(), SOLICITED, vip6(), Some(THEIRS), Some(NONCE));
    let mut tagged_na = na6.clone();
    tagged_na.splice(12..12, [0x81, 0x00, 0x00, 0x07]);
    assert!(filter_keeps(&arp));
    assert!(filter_keeps(&tagged_arp));
    assert!(filter_keeps(&na6));
    assert!(filter_keeps(&tagged_na));

    let mut arp_request = probe.clone();
    arp_request[0..6].copy_from_slice(&OURS.0);
    assert!(!filter_keeps(&arp_request), "a request");
    let mut tagged_request = arp_request.clone();
    tagged_request.splice(12..12, [0x81, 0x00, 0x00, 0x07]);
    assert!(!filter_keeps(&tagged_request));
    for (what, at) in [("dst", 0), ("dst last byte", 5)] {
        let mut f = arp.clone();
        f[at] ^= 0x10;
        assert!(!filter_keeps(&f), "{what}");
        let mut f = tagged_na.clone();
        f[at] ^= 0x10;
        assert!(!filter_keeps(&f), "tagged NA {what}");
    }
    let mut broadcast = arp.clone();
    broadcast[0..6].fill(0xff);
    assert!(!filter_keeps(&broadcast), "broadcast reply");
    for (what, at) in [
        ("source", 6),
        ("source last byte", 11),
        ("sha", 22),
        ("sha last byte", 27),
    ] {
        let mut f = arp.clone();
        f[at] ^= 0x10;
        assert!(!filter_keeps(&f), "source != sha: {what}");
        let mut f = tagged_arp.clone();
        f[at + if at >= 14 { 4 } else { 0 }] ^= 0x10;
        assert!(!filter_keeps(&f), "tagged, source != sha: {what}");
    }
    let mut ns = probe6();
    ns[0..6].copy_from_slice(&OURS.0);
    assert!(!filter_keeps(&ns), "an NS");
    let mut echo = na6.clone();
    echo[14 + 40] = 128;
    assert!(!filter_keeps(&echo), "ICMPv6 echo");
    let mut ipv4 = arp.clone();
    ipv4[12..14].copy_from_slice(&ethertype::IPV4.to_be_bytes());
    assert!(!filter_keeps(&ipv4));
    assert!(!filter_keeps(&arp[..13]), "truncated");
    assert!(!filter_keeps(&arp[..27]), "truncated in ar$sha");
}

#[test]
fn answers_become_election_inputs() {
    let a = Answer {
        vip: VIP4.into(),
        mac: THEIRS,
        kind: ProbeKind::DataPlane,
    };
    assert_eq!(
        Input::from(a),
        Input::ProbeAnswered {
            vip: VIP4.into(),
            mac: THEIRS
        }
    );
}

// ---- kernel probes (no nonce: the node's own address, answered by its kernel) ----

const NODE4: Ipv4Addr = Ipv4Addr::new(10, 77, 0, 11);

fn node6() -> Ipv6Addr {
    "fd77::11".parse().unwrap()
}

fn kernel_reply(ip: IpAddr, mac: MacAddr) -> Reply {
    Reply {
        answer: Answer {
            vip: ip,
            mac,
            kind: ProbeKind::DataPlane,
        },
        nonce: None,
    }
}

fn kernel_answer(ip: IpAddr, mac: MacAddr) -> Answer {
    Answer {
        vip: ip,
        mac,
        kind: ProbeKind::Kernel,
    }
}

#[test]
fn a_kernel_arp_probe_is_a_broadcast_request_for_the_nodes_address_without_a_nonce() {
    let f = kernel_probe_frame(&src(Some(OUR4), None), NODE4.into(), None).unwrap();
    let eth = EthernetFrame::new_checked(&f[..]).unwrap();
    assert_eq!((eth.dst(), eth.src()), (MacAddr::BROADCAST, OURS));
    let arp = ArpRepr::parse(&ArpPacket::new_checked(eth.payload()).unwrap()).unwrap();
    assert_eq!(
        arp,
        ArpRepr {
            operation: ArpOperation::Request,
            sender_mac: OURS,
            sender_ip: OUR4,
            target_mac: MacAddr::ZERO,
            target_ip: NODE4,
        }
    );
    assert!(f[42..].iter().all(|&b| b == 0), "no nonce in the padding");
}

#[test]
fn a_kernel_arp_probe_with_a_target_is_unicast_to_it() {
    let f = kernel_probe_frame(&src(Some(OUR4), None), NODE4.into(), Some(THEIRS)).unwrap();
    let eth = EthernetFrame::new_checked(&f[..]).unwrap();
    assert_eq!(eth.dst(), THEIRS);
}

#[test]
fn a_kernel_ns_probe_without_a_target_goes_to_the_solicited_node_group() {
    let f = kernel_probe_frame(&src(None, None), node6().into(), None).unwrap();
    let eth = EthernetFrame::new_checked(&f[..]).unwrap();
    let group: Ipv6Addr = "ff02::1:ff00:11".parse().unwrap();
    assert_eq!(eth.dst(), MacAddr([0x33, 0x33, 0xff, 0, 0, 0x11]));
    let ip = Ipv6Packet::new_checked(eth.payload()).unwrap();
    assert_eq!(Ipv6Addr::from(ip.header().dst), group, "RFC 4291 2.7.1");
    assert_eq!(ip.header().hop_limit, 255);
    let nd = NdiscPacket::new_checked(ip.payload()).unwrap();
    assert!(nd.verify_checksum(&ll(), &group));
    assert_eq!(
        NdiscRepr::parse(&nd).unwrap(),
        NdiscRepr::NeighborSolicit {
            target: node6(),
            lladdr: Some(OURS),
            nonce: None,
        }
    );
}

#[test]
fn a_kernel_ns_probe_with_a_target_is_a_unicast_nud_solicitation() {
    let f = kernel_probe_frame(&src(None, None), node6().into(), Some(THEIRS)).unwrap();
    let eth = EthernetFrame::new_checked(&f[..]).unwrap();
    assert_eq!(eth.dst(), THEIRS);
    let ip = Ipv6Packet::new_checked(eth.payload()).unwrap();
    assert_eq!(Ipv6Addr::from(ip.header().dst), node6(), "RFC 4861 7.2.2");
}

#[test]
fn a_broadcast_kernel_probe_takes_one_answer_from_any_mac_without_a_nonce() {
    let now = Instant::now();
    let mut t = InFlight::default();
    let ip = IpAddr::from(NODE4);
    t.insert_kernel(IF, ip, None, now + Duration::from_millis(100), now);
    assert_eq!(t.len(), 1);
    assert_eq!(
        t.accept(IF, &kernel_reply(ip, SPOOFER), now),
        Ok(kernel_answer(ip, SPOOFER))
    );
    assert_eq!(
        t.accept(IF, &kernel_reply(ip, THEIRS), now),
        Err(Dropped::NoProbe),
        "a probe forwards at most one answer"
    );
}

#[test]
fn a_unicast_kernel_probe_takes_an_answer_only_from_the_probed_mac() {
    let now = Instant::now();
    let mut t = InFlight::default();
    let ip = IpAddr::from(NODE4);
    t.insert_kernel(IF, ip, Some(THEIRS), now + Duration::from_millis(100), now);
    assert_eq!(
        t.accept(IF, &kernel_reply(ip, SPOOFER), now),
        Err(Dropped::NoProbe)
    );
    assert_eq!(
        t.accept(IF, &kernel_reply(ip, THEIRS), now),
        Ok(kernel_answer(ip, THEIRS))
    );
}

#[test]
fn a_kernel_answer_for_another_address_interface_or_after_the_window_does_not_count() {
    let now = Instant::now();
    let mut t = InFlight::default();
    let ip = IpAddr::from(NODE4);
    t.insert_kernel(IF, ip, None, now + Duration::from_millis(100), now);
    let other = IpAddr::from(Ipv4Addr::new(10, 77, 0, 12));
    assert_eq!(
        t.accept(IF, &kernel_reply(other, THEIRS), now),
        Err(Dropped::NoProbe)
    );
    assert_eq!(
        t.accept(IF + 1, &kernel_reply(ip, THEIRS), now),
        Err(Dropped::NoProbe)
    );
    let late = now + Duration::from_millis(100);
    assert_eq!(
        t.accept(IF, &kernel_reply(ip, THEIRS), late),
        Err(Dropped::NoProbe)
    );
    t.prune(late);
    assert!(t.is_empty(), "expired kernel probes are pruned");
}

#[test]
fn a_nonceless_answer_still_does_not_count_for_a_data_plane_probe() {
    let now = Instant::now();
    let mut t = table_with_probe(now);
    t.insert_kernel(
        IF,
        NODE4.into(),
        None,
        now + Duration::from_millis(100),
        now,
    );
    assert_eq!(
        t.accept(IF, &kernel_reply(VIP4.into(), THEIRS), now),
        Err(Dropped::BadNonce),
        "a kernel probe of another address does not lend its answer to the VIP's probe"
    );
}

#[test]
fn kernel_probes_are_bounded_oldest_first() {
    let now = Instant::now();
    let mut t = InFlight::new(2);
    let later = now + Duration::from_secs(1);
    for n in 1..=3 {
        t.insert_kernel(IF, Ipv4Addr::new(10, 0, 0, n).into(), None, later, now);
    }
    assert_eq!(t.len(), 2);
    assert_eq!(
        t.accept(
            IF,
            &kernel_reply(Ipv4Addr::new(10, 0, 0, 1).into(), THEIRS),
            now
        ),
        Err(Dropped::NoProbe),
        "the oldest was dropped"
    );
}

#[test]
fn expired_probes_are_pruned_by_an_insert_a_prune_interval_later() {
    let now = Instant::now();
    // THEIRS's probe closes at now + 100 ms.
    let mut t = table_with_probe(now);
    let other = MacAddr([2, 0, 0, 0, 0, 0x77]);
    let at = |ms| now + Duration::from_millis(ms);
    let probe_other =
        |t: &mut InFlight, ms| t.insert(IF, VIP4.into(), other, NONCE, at(ms + 500), at(ms));
    probe_other(&mut t, 95); // prunes (the last prune is 95 ms old): nothing expired yet
    probe_other(&mut t, 101); // within 10 ms of that prune: THEIRS's closed probe is kept
    assert_eq!(t.len(), 3);
    probe_other(&mut t, 106); // 11 ms after the last prune: pruned
    assert_eq!(
        t.len(),
        3,
        "THEIRS's closed probe is gone, the three live ones stay"
    );
}
