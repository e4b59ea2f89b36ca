//! Every responder rule, bytes in to bytes out, through BPF_PROG_TEST_RUN on the real kernel.

use std::{
    net::{IpAddr, Ipv4Addr, Ipv6Addr},
    time::Duration,
};

use announcer::dataplane::{Lifetime, Vip};
use announcer_ebpf::{
    maps::Outcome,
    wire::{
        ArpOperation, ArpPacket, ArpRepr, EthernetFrame, Ipv6Packet, Ipv6Repr, MacAddr, NaFlags,
        NdiscPacket, NdiscRepr,
    },
};
use announcer_tests::{
    frames::{self, CLIENT_MAC, VIP_MAC},
    testrun::{Harness, XDP_PASS, XDP_TX},
};

const VIP4: Ipv4Addr = Ipv4Addr::new(10, 0, 0, 5);
const CLIENT4: Ipv4Addr = Ipv4Addr::new(10, 0, 0, 1);
const VIP6: Ipv6Addr = Ipv6Addr::new(0x2001, 0xdb8, 0, 0, 0, 0, 0, 5);
const CLIENT6: Ipv6Addr = Ipv6Addr::new(0x2001, 0xdb8, 0, 0, 0, 0, 0, 1);

fn harness_with(vips: &[(IpAddr, Option<u16>)]) -> Harness {
    let mut h = Harness::new();
    for (a, vlan) in vips {
        h.dp.upsert(Vip::new(*a, *vlan).unwrap(), VIP_MAC, Lifetime::Permanent)
            .unwrap();
    }
    h
}

fn counter(h: &Harness, o: Outcome) -> u64 {
    h.dp.counters()
        .unwrap()
        .iter()
        .find(|(k, _)| *k == o)
        .unwrap()
        .1
}

#[test]
fn arp_request_for_a_vip_is_answered_in_place() {
    let h = harness_with(&[(VIP4.into(), None)]);
    let req = frames::arp_request(CLIENT4, VIP4, None);
    let (action, out) = h.run(&req);
    assert_eq!(action, XDP_TX);
    assert_eq!(out.len(), req.len(), "an ARP reply keeps the frame length");
    let eth = EthernetFrame::new_checked(&out[..]).unwrap();
    assert_eq!(eth.dst(), CLIENT_MAC);
    assert_eq!(eth.src(), VIP_MAC);
    assert_eq!(eth.vlan(), None);
    let arp = ArpRepr::parse(&ArpPacket::new_checked(eth.payload()).unwrap()).unwrap();
    assert_eq!(
        arp,
        ArpRepr {
            operation: ArpOperation::Reply,
            sender_mac: VIP_MAC,
            sender_ip: VIP4,
            target_mac: CLIENT_MAC,
            target_ip: CLIENT4,
        }
    );
    assert_eq!(counter(&h, Outcome::ArpAnswered), 1);
    let row = &h.dp.list().unwrap()[0];
    assert_eq!(row.stats.answered, 1);
}

#[test]
fn rfc5227_probe_is_answered_to_the_prober() {
    let h = harness_with(&[(VIP4.into(), None)]);
    let (action, out) = h.run(&frames::arp_request(Ipv4Addr::UNSPECIFIED, VIP4, None));
    assert_eq!(action, XDP_TX);
    let eth = EthernetFrame::new_checked(&out[..]).unwrap();
    assert_eq!(eth.dst(), CLIENT_MAC);
    let arp = ArpRepr::parse(&ArpPacket::new_checked(eth.payload()).unwrap()).unwrap();
    assert_eq!(arp.sender_ip, VIP4);
    assert_eq!(arp.target_ip, Ipv4Addr::UNSPECIFIED);
    assert_eq!(arp.target_mac, CLIENT_MAC);
}

#[test]
fn arp_that_is_not_a_request_for_a_live_vip_passes_untouched() {
    let h = harness_with(&[(VIP4.into(), None)]);
    let req = frames::arp_request(CLIENT4, VIP4, None);
    let mut cases: Vec<(&str, Vec<u8>)> = vec![
        (
            "other target",
            frames::arp_request(CLIENT4, Ipv4Addr::new(10, 0, 0, 6), None),
        ),
        (
            "gratuitous announcement (spa = tpa)",
            frames::arp_request(VIP4, VIP4, None),
        ),
        ("truncated to 41 bytes", req[..41].to_vec()),
        (
            "tagged, but VIP is untagged",
            frames::arp_request(CLIENT4, VIP4, Some(7)),
        ),
    ];
    let mut reply = req.clone();
    reply[21] = 2;
    cases.push(("a reply", reply));
    let mut odd_hlen = req.clone();
    odd_hlen[18] = 8;
    cases.push(("hlen 8", odd_hlen));
    let mut ptype = req.clone();
    ptype[16] = 0x86;
    cases.push(("ptype not IPv4", ptype));
    let mut mcast_sha = req.clone();
    mcast_sha[22] = 0x01;
    cases.push(("group sender MAC", mcast_sha));
    let mut unicast_elsewhere = req.clone();
    unicast_elsewhere[0..6].copy_from_slice(&[2, 9, 9, 9, 9, 9]);
    cases.push(("unicast to another MAC", unicast_elsewhere));
    for (what, frame) in cases {
        assert_eq!(h.run(&frame), (XDP_PASS, frame.clone()), "{what}");
    }
    assert_eq!(counter(&h, Outcome::ArpAnswered), 0);
    assert_eq!(
        counter(&h, Outcome::Malformed),
        1,
        "only the group-sender request was for a VIP"
    );
}

#[test]
fn unicast_arp_to_our_mac_is_answered() {
    // A successor's liveness check asks the old owner's data plane directly.
    let h = harness_with(&[(VIP4.into(), None)]);
    let mut req = frames::arp_request(CLIENT4, VIP4, None);
    req[0..6].copy_from_slice(&VIP_MAC.0);
    assert_eq!(h.run(&req).0, XDP_TX);
}

#[test]
fn tagged_requests_are_answered_with_the_same_tag_only_on_their_vlan() {
    let h = harness_with(&[(VIP4.into(), Some(100)), (VIP6.into(), Some(100))]);
    let req = frames::arp_request(CLIENT4, VIP4, Some(100));
    let (action, out) = h.run(&req);
    assert_eq!(action, XDP_TX);
    assert_eq!(&out[12..16], &req[12..16], "same 802.1Q tag");
    assert_eq!(
        EthernetFrame::new_checked(&out[..]).unwrap().vlan(),
        Some(100)
    );

    let ns = frames::ns_multicast(CLIENT6, VIP6, Some(100));
    let (action, out) = h.run(&ns);
    assert_eq!(action, XDP_TX);
    assert_eq!(
        EthernetFrame::new_checked(&out[..]).unwrap().vlan(),
        Some(100)
    );

    for other in [None, Some(101)] {
        let f = frames::arp_request(CLIENT4, VIP4, other);
        assert_eq!(h.run(&f).0, XDP_PASS, "vlan {other:?}");
        let f = frames::ns_multicast(CLIENT6, VIP6, other);
        assert_eq!(h.run(&f).0, XDP_PASS, "vlan {other:?}");
    }
    // QinQ is not ours.
    let mut qinq = req.clone();
    qinq[12..14].copy_from_slice(&0x88a8u16.to_be_bytes());
    assert_eq!(h.run(&qinq).0, XDP_PASS);
}

fn parse_na(out: &[u8]) -> (EthernetFrame<&[u8]>, Ipv6Repr, NdiscRepr) {
    let eth = EthernetFrame::new_checked(out).unwrap();
    let ip = Ipv6Packet::new_checked(eth.payload()).unwrap();
    assert_eq!(
        ip.payload().len() + 40 + eth.header_len(),
        out.len(),
        "no trailing bytes"
    );
    let repr = Ipv6Repr::parse(&ip);
    let nd = NdiscPacket::new_checked(ip.payload()).unwrap();
    assert!(nd.verify_checksum(&repr.src, &repr.dst), "NA checksum");
    (eth.clone(), repr, NdiscRepr::parse(&nd).unwrap())
}

#[test]
fn neighbor_solicitation_gets_a_solicited_advertisement() {
    let h = harness_with(&[(VIP6.into(), None)]);
    let (action, out) = h.run(&frames::ns_multicast(CLIENT6, VIP6, None));
    assert_eq!(action, XDP_TX);
    let (eth, ip, na) = parse_na(&out);
    assert_eq!(eth.dst(), CLIENT_MAC, "to the SLLAO");
    assert_eq!(eth.src(), VIP_MAC);
    assert_eq!((ip.src, ip.dst, ip.hop_limit), (VIP6, CLIENT6, 255));
    assert_eq!(
        na,
        NdiscRepr::NeighborAdvert {
            flags: NaFlags {
                router: false,
                solicited: true,
                override_: true
            },
            target: VIP6,
            lladdr: Some(VIP_MAC),
            nonce: None,
        }
    );
    assert_eq!(counter(&h, Outcome::NsAnswered), 1);
}

#[test]
fn unicast_ns_without_sllao_goes_to_the_frame_source() {
    let h = harness_with(&[(VIP6.into(), None)]);
    let (action, out) = h.run(&frames::ns(CLIENT6, VIP6, VIP6, None, None));
    assert_eq!(action, XDP_TX);
    let (eth, ip, _) = parse_na(&out);
    assert_eq!(eth.dst(), CLIENT_MAC);
    assert_eq!(ip.dst, CLIENT6);
}

#[test]
fn dad_probe_is_answered_to_all_nodes_without_s() {
    let h = harness_with(&[(VIP6.into(), None)]);
    let (action, out) = h.run(&frames::ns_dad(VIP6, None));
    assert_eq!(
        action, XDP_TX,
        "the NS grows by 8 bytes (TLLAO) with bpf_xdp_adjust_tail"
    );
    let (eth, ip, na) = parse_na(&out);
    assert_eq!(eth.dst(), MacAddr([0x33, 0x33, 0, 0, 0, 1]));
    assert_eq!(ip.dst, "ff02::1".parse::<Ipv6Addr>().unwrap());
    assert_eq!(
        na,
        NdiscRepr::NeighborAdvert {
            flags: NaFlags {
                router: false,
                solicited: false,
                override_: true
            },
            target: VIP6,
            lladdr: Some(VIP_MAC),
            nonce: None,
        }
    );
}

#[test]
fn invalid_solicitations_pass_untouched() {
    let h = harness_with(&[(VIP6.into(), None)]);
    let good = frames::ns_multicast(CLIENT6, VIP6, None);
    let icmp = 14 + 40;
    let mut cases: Vec<(&str, Vec<u8>)> = Vec::new();
    let mut f = good.clone();
    f[14 + 7] = 64;
    cases.push(("hop limit 64", f));
    let mut f = good.clone();
    f[icmp + 1] = 1;
    cases.push(("code 1", f));
    let mut f = good.clone();
    f[icmp + 2] ^= 0xff;
    cases.push(("bad checksum", f));
    let mut f = good.clone();
    f[icmp + 25] = 0; // SLLAO length 0; checksum also breaks, so fix it up below
    cases.push(("zero-length option", refill(f)));
    cases.push(("truncated payload", good[..good.len() - 4].to_vec()));
    cases.push((
        "DAD probe with SLLAO",
        frames::ns(
            Ipv6Addr::UNSPECIFIED,
            "ff02::1:ff00:5".parse().unwrap(),
            VIP6,
            Some(CLIENT_MAC),
            None,
        ),
    ));
    cases.push((
        "DAD probe not to solicited-node",
        frames::ns(Ipv6Addr::UNSPECIFIED, VIP6, VIP6, None, None),
    ));
    cases.push(("other target", frames::ns_multicast(CLIENT6, CLIENT6, None)));
    cases.push((
        "to all-nodes",
        frames::ns(CLIENT6, "ff02::1".parse().unwrap(), VIP6, None, None),
    ));
    for (what, frame) in cases {
        assert_eq!(h.run(&frame), (XDP_PASS, frame.clone()), "{what}");
    }
    assert_eq!(counter(&h, Outcome::NsAnswered), 0);
    assert!(counter(&h, Outcome::Malformed) >= 6);
}

/// Recomputes the ICMPv6 checksum of an untagged ND frame after a deliberate edit.
fn refill(mut f: Vec<u8>) -> Vec<u8> {
    let src = Ipv6Addr::from(<[u8; 16]>::try_from(&f[22..38]).unwrap());
    let dst = Ipv6Addr::from(<[u8; 16]>::try_from(&f[38..54]).unwrap());
    let plen = usize::from(u16::from_be_bytes([f[18], f[19]]));
    announcer_ebpf::wire::ndisc::fill_checksum(&mut f[54..54 + plen], &src, &dst);
    f
}

#[test]
fn expired_and_deleted_vips_are_not_answered() {
    let mut h = harness_with(&[(VIP4.into(), None), (VIP6.into(), None)]);
    let arp = frames::arp_request(CLIENT4, VIP4, None);
    let ns = frames::ns_multicast(CLIENT6, VIP6, None);
    assert_eq!(h.run(&arp).0, XDP_TX);
    assert_eq!(h.run(&ns).0, XDP_TX);

    for a in [IpAddr::from(VIP4), IpAddr::from(VIP6)] {
        h.dp.upsert(
            Vip::new(a, None).unwrap(),
            VIP_MAC,
            Lifetime::Ttl(Duration::ZERO),
        )
        .unwrap();
    }
    assert_eq!(h.run(&arp), (XDP_PASS, arp.clone()));
    assert_eq!(h.run(&ns), (XDP_PASS, ns.clone()));
    assert_eq!(counter(&h, Outcome::Expired), 2);
    assert!(
        h.dp.list()
            .unwrap()
            .iter()
            .all(|r| !r.is_live() && r.stats.expired == 1)
    );

    // A refresh revives it; a delete ends it.
    let v4 = Vip::new(VIP4.into(), None).unwrap();
    h.dp.upsert(v4, VIP_MAC, Lifetime::Ttl(Duration::from_secs(30)))
        .unwrap();
    assert_eq!(h.run(&arp).0, XDP_TX);
    h.dp.remove(v4).unwrap();
    assert_eq!(h.run(&arp).0, XDP_PASS);
}

#[test]
fn other_interfaces_vips_are_not_answered() {
    let mut h = Harness::new();
    // Keyed for ifindex 1 (where test_run frames arrive) vs. a VIP written for another index.
    h.dp.upsert(
        Vip::new(VIP4.into(), None).unwrap(),
        VIP_MAC,
        Lifetime::Permanent,
    )
    .unwrap();
    assert_eq!(h.run(&frames::arp_request(CLIENT4, VIP4, None)).0, XDP_TX);
    assert_eq!(
        h.run(&frames::arp_request(
            CLIENT4,
            Ipv4Addr::new(10, 0, 0, 9),
            None
        ))
        .0,
        XDP_PASS
    );
}

#[test]
fn a_full_map_is_reported_as_such_and_loses_nothing() {
    let mut h = Harness::with_capacity(Some(2));
    let a = |i: u8| Vip::new(IpAddr::V4(Ipv4Addr::new(10, 0, 0, 10 + i)), None).unwrap();
    h.dp.upsert(a(1), VIP_MAC, Lifetime::Permanent).unwrap();
    h.dp.upsert(a(2), VIP_MAC, Lifetime::Permanent).unwrap();
    let err = h.dp.upsert(a(3), VIP_MAC, Lifetime::Permanent).unwrap_err();
    assert!(
        matches!(
            err,
            announcer::dataplane::Error::MapFull { family: "IPv4", .. }
        ),
        "{err}"
    );
    assert_eq!(err.exit_code(), 73);
    // Refreshing an existing entry still works when full, and both VIPs are still answered.
    h.dp.upsert(a(2), VIP_MAC, Lifetime::Ttl(Duration::from_secs(5)))
        .unwrap();
    for i in [1u8, 2] {
        assert_eq!(
            h.run(&frames::arp_request(
                CLIENT4,
                Ipv4Addr::new(10, 0, 0, 10 + i),
                None
            ))
            .0,
            XDP_TX
        );
    }
}

#[test]
fn solicitations_that_would_be_answered_wrongly_pass() {
    let h = harness_with(&[(VIP6.into(), None)]);
    let sn: Ipv6Addr = "ff02::1:ff00:5".parse().unwrap();
    let cases = [
        (
            "multicast source",
            frames::ns("ff02::2".parse().unwrap(), sn, VIP6, Some(CLIENT_MAC), None),
        ),
        (
            "another host using the VIP",
            frames::ns(VIP6, sn, VIP6, Some(CLIENT_MAC), None),
        ),
        (
            "SLLAO is a group MAC",
            frames::ns(CLIENT6, sn, VIP6, Some(MacAddr::BROADCAST), None),
        ),
        (
            "SLLAO is all-zero",
            frames::ns(CLIENT6, sn, VIP6, Some(MacAddr::ZERO), None),
        ),
    ];
    for (what, frame) in cases {
        assert_eq!(h.run(&frame), (XDP_PASS, frame.clone()), "{what}");
    }
    // A first SLLAO of 16 bytes is malformed even if an 8-byte one follows.
    let mut f = frames::ns(CLIENT6, sn, VIP6, Some(CLIENT_MAC), None);
    let icmp = 14 + 40;
    f[icmp + 25] = 2; // SLLAO claims 16 bytes: append 8 more and fix the lengths
    f.extend_from_slice(&[0; 8]);
    let plen = u16::from_be_bytes([f[18], f[19]]) + 8;
    f[18..20].copy_from_slice(&plen.to_be_bytes());
    let f = refill(f);
    assert_eq!(h.run(&f), (XDP_PASS, f.clone()), "16-byte SLLAO");
}

#[test]
fn arp_replies_claiming_a_vip_pass() {
    let h = harness_with(&[(VIP4.into(), None)]);
    let mut reply = frames::arp_request(VIP4, CLIENT4, None);
    reply[21] = 2; // op = reply, sender = the VIP: someone else claims it
    assert_eq!(h.run(&reply), (XDP_PASS, reply.clone()));
    assert_eq!(counter(&h, Outcome::Passed), 1);
}

const NONCE: [u8; 8] = [0xa1, 0xb2, 0xc3, 0xd4, 0xe5, 0xf6, 0x07, 0x18];

#[test]
fn arp_answer_keeps_the_padding_so_a_probe_nonce_comes_back() {
    for vlan in [None, Some(100)] {
        let h = harness_with(&[(VIP4.into(), vlan)]);
        let mut req = frames::arp_request(CLIENT4, VIP4, vlan);
        let at = if vlan.is_some() { 46 } else { 42 };
        req[at..at + 8].copy_from_slice(&NONCE);
        let (action, out) = h.run(&req);
        assert_eq!(action, XDP_TX, "vlan {vlan:?}");
        assert_eq!(out.len(), 60);
        assert_eq!(&out[at..], &req[at..], "padding echoed (vlan {vlan:?})");
    }
}

/// The NA answering `ns` + `trailer`: checked, and its length past the IPv6 payload.
fn na_trailer(h: &Harness, ns: &[u8], trailer: &[u8]) -> Vec<u8> {
    let mut f = ns.to_vec();
    f.extend_from_slice(trailer);
    let (action, out) = h.run(&f);
    assert_eq!(action, XDP_TX);
    let eth = EthernetFrame::new_checked(&out[..]).unwrap();
    let ip = Ipv6Packet::new_checked(eth.payload()).unwrap();
    let repr = Ipv6Repr::parse(&ip);
    assert_eq!(repr.payload_len, 32, "NA + TLLAO");
    let nd = NdiscPacket::new_checked(ip.payload()).unwrap();
    assert!(nd.verify_checksum(&repr.src, &repr.dst), "NA checksum");
    assert!(matches!(
        NdiscRepr::parse(&nd).unwrap(),
        NdiscRepr::NeighborAdvert {
            target: VIP6,
            lladdr: Some(VIP_MAC),
            ..
        }
    ));
    out[eth.header_len() + 40 + 32..].to_vec()
}

#[test]
fn na_answer_to_a_32_byte_ns_keeps_an_8_byte_trailer() {
    let h = harness_with(&[(VIP6.into(), None)]);
    // The probe's shape: unicast NS + SLLAO (32 bytes), nonce after the IPv6 payload.
    let probe = frames::ns(CLIENT6, VIP6, VIP6, Some(CLIENT_MAC), None);
    assert_eq!(probe.len(), 14 + 40 + 32);
    assert_eq!(na_trailer(&h, &probe, &NONCE), NONCE);
    let multicast = frames::ns_multicast(CLIENT6, VIP6, None);
    assert_eq!(na_trailer(&h, &multicast, &NONCE), NONCE);
    // At most 8 bytes are kept; fewer stay as they are.
    let mut long = NONCE.to_vec();
    long.extend_from_slice(&[0xee; 12]);
    assert_eq!(na_trailer(&h, &probe, &long), NONCE);
    assert_eq!(na_trailer(&h, &probe, &NONCE[..3]), &NONCE[..3]);
    assert_eq!(na_trailer(&h, &probe, &[]), Vec::<u8>::new());
    // Behind a tag too.
    let h = harness_with(&[(VIP6.into(), Some(100))]);
    let tagged = frames::ns(CLIENT6, VIP6, VIP6, Some(CLIENT_MAC), Some(100));
    assert_eq!(na_trailer(&h, &tagged, &NONCE), NONCE);
}

/// The NA answering `ns`: checked (solicited, for the VIP, at its MAC); its payload length
/// and echoed probe nonce.
fn na_nonce(h: &Harness, ns: &[u8]) -> (u16, Option<[u8; 8]>) {
    let (action, out) = h.run(ns);
    assert_eq!(action, XDP_TX);
    let eth = EthernetFrame::new_checked(&out[..]).unwrap();
    let ip = Ipv6Packet::new_checked(eth.payload()).unwrap();
    let repr = Ipv6Repr::parse(&ip);
    assert_eq!(
        ip.payload().len(),
        usize::from(repr.payload_len),
        "no trailer"
    );
    let nd = NdiscPacket::new_checked(ip.payload()).unwrap();
    assert!(nd.verify_checksum(&repr.src, &repr.dst), "NA checksum");
    let NdiscRepr::NeighborAdvert {
        flags,
        target: VIP6,
        lladdr: Some(VIP_MAC),
        nonce,
    } = NdiscRepr::parse(&nd).unwrap()
    else {
        panic!("not the VIP's NA");
    };
    assert!(flags.solicited && flags.override_);
    (repr.payload_len, nonce)
}

#[test]
fn na_answer_echoes_the_probes_nonce_option() {
    for vlan in [None, Some(100)] {
        let h = harness_with(&[(VIP6.into(), vlan)]);
        let probe = frames::ns_probe(CLIENT6, VIP6, Some(CLIENT_MAC), vlan, NONCE);
        assert_eq!(
            na_nonce(&h, &probe),
            (48, Some(NONCE)),
            "NA + TLLAO + Nonce option, the NS's size (vlan {vlan:?})"
        );
        assert_eq!(counter(&h, Outcome::NsAnswered), 1);
    }
}

#[test]
fn na_answer_echoes_a_nonce_option_wherever_it_sat_and_grows_the_frame_if_needed() {
    let h = harness_with(&[(VIP6.into(), None)]);
    // Without an SLLAO: NS + Nonce (40 bytes) grows to NA + TLLAO + Nonce (48).
    let no_sllao = frames::ns_probe(CLIENT6, VIP6, None, None, NONCE);
    assert_eq!(na_nonce(&h, &no_sllao), (48, Some(NONCE)));
    // The Nonce option before the SLLAO.
    let mut swapped = frames::ns(CLIENT6, VIP6, VIP6, None, None);
    let mut opt = vec![14, 2];
    opt.extend_from_slice(&NONCE);
    opt.extend_from_slice(&[0; 6]);
    swapped.extend_from_slice(&opt);
    swapped.extend_from_slice(&[1, 1]);
    swapped.extend_from_slice(&CLIENT_MAC.0);
    swapped[18..20].copy_from_slice(&48u16.to_be_bytes());
    let swapped = refill(swapped);
    assert_eq!(na_nonce(&h, &swapped), (48, Some(NONCE)));
}

#[test]
fn na_answer_to_any_other_ns_drops_the_trailer() {
    let h = harness_with(&[(VIP6.into(), None)]);
    // 24 bytes: no SLLAO (the NA grows to 32); DAD (to all-nodes).
    let no_sllao = frames::ns(CLIENT6, VIP6, VIP6, None, None);
    assert_eq!(na_trailer(&h, &no_sllao, &NONCE), Vec::<u8>::new());
    let dad = frames::ns_dad(VIP6, None);
    assert_eq!(na_trailer(&h, &dad, &NONCE), Vec::<u8>::new());
    // 40 bytes: SLLAO + a nonce option (RFC 3971 §5.3.2, as Linux sends for enhanced DAD).
    let mut f = frames::ns_multicast(CLIENT6, VIP6, None);
    f.extend_from_slice(&[14, 1, 1, 2, 3, 4, 5, 6]);
    let plen = u16::from_be_bytes([f[18], f[19]]) + 8;
    f[18..20].copy_from_slice(&plen.to_be_bytes());
    let f = refill(f);
    assert_eq!(na_trailer(&h, &f, &NONCE), Vec::<u8>::new());
}
