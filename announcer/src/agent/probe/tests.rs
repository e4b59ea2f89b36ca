//! Probe frames, answer parsing and the kernel filter, without sockets.

use announcer_ebpf::wire::{NaFlags, ndisc};

use super::*;

const OURS: MacAddr = MacAddr([2, 0, 0, 0, 0, 2]);
const THEIRS: MacAddr = MacAddr([2, 0, 0, 0, 0, 1]);
const VIP4: Ipv4Addr = Ipv4Addr::new(10, 77, 0, 100);

fn vip6() -> Ipv6Addr {
    "fd77::100".parse().unwrap()
}

fn ll() -> Ipv6Addr {
    "fe80::2".parse().unwrap()
}

fn src(ipv4: Option<Ipv4Addr>, vlan: Option<u16>) -> Source {
    Source {
        mac: OURS,
        ipv4,
        ipv6: Some(ll()),
        vlan,
    }
}

#[test]
fn arp_probe_is_a_unicast_request_for_the_vip() {
    for (ipv4, spa) in [
        (
            Some(Ipv4Addr::new(10, 77, 0, 2)),
            Ipv4Addr::new(10, 77, 0, 2),
        ),
        (None, Ipv4Addr::UNSPECIFIED),
    ] {
        for vlan in [None, Some(7)] {
            let f = probe_frame(&src(ipv4, vlan), VIP4.into(), THEIRS).unwrap();
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
fn ns_probe_is_a_unicast_nud_solicitation() {
    let f = probe_frame(&src(None, None), vip6().into(), THEIRS).unwrap();
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
            lladdr: Some(OURS)
        }
    );
}

#[test]
fn bad_probes_are_refused() {
    let no_v6 = Source {
        ipv6: None,
        ..src(None, None)
    };
    assert!(matches!(
        probe_frame(&no_v6, vip6().into(), THEIRS),
        Err(ProbeError::NoIpv6Source { .. })
    ));
    for mac in [
        MacAddr::BROADCAST,
        MacAddr::ZERO,
        MacAddr([0x33, 0x33, 0, 0, 0, 1]),
    ] {
        assert!(matches!(
            probe_frame(&src(None, None), VIP4.into(), mac),
            Err(ProbeError::NotUnicast { .. })
        ));
    }
    assert!(matches!(
        probe_frame(&src(None, Some(4095)), VIP4.into(), THEIRS),
        Err(ProbeError::BadVlan { vlan: 4095 })
    ));
}

/// The reply the responder sends to an ARP probe.
fn arp_reply(op: ArpOperation, vlan: Option<u16>) -> Vec<u8> {
    let mut buf = [0u8; MAX_FRAME];
    let eth = EthernetRepr {
        src: THEIRS,
        dst: OURS,
        vlan,
        ethertype: 0,
    };
    let arp = ArpRepr {
        operation: op,
        sender_mac: THEIRS,
        sender_ip: VIP4,
        target_mac: OURS,
        target_ip: Ipv4Addr::UNSPECIFIED,
    };
    let n = frame::arp(&mut buf, &eth, &arp);
    buf[..n].to_vec()
}

fn na(dst: Ipv6Addr, flags: NaFlags, target: Ipv6Addr, lladdr: Option<MacAddr>) -> Vec<u8> {
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
    };
    let n = frame::ndisc(&mut buf, &eth, target, dst, &repr);
    buf[..n].to_vec()
}

const SOLICITED: NaFlags = NaFlags {
    router: false,
    solicited: true,
    override_: true,
};

#[test]
fn arp_replies_are_answers_and_requests_are_not() {
    let want = Some(Answer {
        vip: VIP4.into(),
        mac: THEIRS,
    });
    assert_eq!(parse_answer(&arp_reply(ArpOperation::Reply, None)), want);
    assert_eq!(parse_answer(&arp_reply(ArpOperation::Reply, Some(7))), want);
    assert_eq!(parse_answer(&arp_reply(ArpOperation::Request, None)), None);
    let probe = probe_frame(&src(None, None), VIP4.into(), THEIRS).unwrap();
    assert_eq!(parse_answer(&probe), None);
    assert_eq!(parse_answer(&[0u8; 10]), None);
}

#[test]
fn neighbor_advertisements_are_validated() {
    let want = Some(Answer {
        vip: vip6().into(),
        mac: THEIRS,
    });
    let good = na(ll(), SOLICITED, vip6(), Some(THEIRS));
    assert_eq!(parse_answer(&good), want);
    // No TLLAO: the Ethernet source.
    assert_eq!(parse_answer(&na(ll(), SOLICITED, vip6(), None)), want);

    let mut hop = good.clone();
    hop[14 + 7] = 254;
    assert_eq!(parse_answer(&hop), None, "hop limit must be 255");
    let mut sum = good.clone();
    sum[14 + 40 + 2] ^= 1;
    assert_eq!(parse_answer(&sum), None, "bad checksum");
    let mut code = good.clone();
    code[14 + 40 + 1] = 1;
    ndisc::fill_checksum(&mut code[14 + 40..14 + 40 + 32], &vip6(), &ll());
    assert_eq!(parse_answer(&code), None, "code must be 0");

    let all_nodes: Ipv6Addr = "ff02::1".parse().unwrap();
    assert_eq!(
        parse_answer(&na(all_nodes, SOLICITED, vip6(), Some(THEIRS))),
        None,
        "S set on a multicast NA"
    );
    let unsolicited = NaFlags {
        solicited: false,
        ..SOLICITED
    };
    assert_eq!(
        parse_answer(&na(all_nodes, unsolicited, vip6(), Some(THEIRS))),
        want,
        "an unsolicited NA from the owner proves it is alive too"
    );
    let group: Ipv6Addr = "ff02::2".parse().unwrap();
    assert_eq!(
        parse_answer(&na(ll(), SOLICITED, group, Some(THEIRS))),
        None
    );
    let ns = probe_frame(&src(None, None), vip6().into(), THEIRS).unwrap();
    assert_eq!(parse_answer(&ns), None);
}

/// Runs [`FILTER`] on `frame` as the kernel would (only the instructions it uses):
/// whether the frame is kept.
fn filter_keeps(frame: &[u8]) -> bool {
    let mut a = 0u32;
    let mut pc = 0;
    loop {
        let ins = FILTER[pc];
        let k = ins.k as usize;
        match u32::from(ins.code) {
            c if c == libc::BPF_LD | H | libc::BPF_ABS => match frame.get(k..k + 2) {
                Some(b) => a = u32::from(u16::from_be_bytes([b[0], b[1]])),
                None => return false, // out of bounds: the kernel drops
            },
            c if c == libc::BPF_LD | B | libc::BPF_ABS => match frame.get(k) {
                Some(&b) => a = u32::from(b),
                None => return false,
            },
            c if c == libc::BPF_JMP | libc::BPF_JEQ | libc::BPF_K => {
                let skip = if a == ins.k { ins.jt } else { ins.jf };
                pc += usize::from(skip);
            }
            c if c == libc::BPF_RET | libc::BPF_K => return ins.k != 0,
            c => panic!("unexpected instruction {c:#x}"),
        }
        pc += 1;
    }
}

#[test]
fn the_kernel_filter_keeps_exactly_the_candidate_answers() {
    let ns = probe_frame(&src(None, None), vip6().into(), THEIRS).unwrap();
    let arp_request = probe_frame(&src(None, None), VIP4.into(), THEIRS).unwrap();
    let mut tagged_na = [0u8; MAX_FRAME];
    let n = frame::ndisc(
        &mut tagged_na,
        &EthernetRepr {
            src: THEIRS,
            dst: OURS,
            vlan: Some(7),
            ethertype: 0,
        },
        vip6(),
        ll(),
        &NdiscRepr::NeighborAdvert {
            flags: SOLICITED,
            target: vip6(),
            lladdr: Some(THEIRS),
        },
    );
    let mut tagged_ns = ns.clone();
    tagged_ns.splice(12..12, [0x81, 0x00, 0x00, 0x07]);
    let mut icmp_echo = na(ll(), SOLICITED, vip6(), None);
    icmp_echo[14 + 40] = 128;
    let mut ipv4 = arp_reply(ArpOperation::Reply, None);
    ipv4[12..14].copy_from_slice(&ethertype::IPV4.to_be_bytes());

    assert!(filter_keeps(&arp_reply(ArpOperation::Reply, None)));
    assert!(filter_keeps(&arp_reply(ArpOperation::Reply, Some(7))));
    assert!(filter_keeps(&na(ll(), SOLICITED, vip6(), Some(THEIRS))));
    assert!(filter_keeps(&tagged_na[..n]));
    assert!(!filter_keeps(&arp_request));
    assert!(!filter_keeps(&arp_reply(ArpOperation::Request, Some(7))));
    assert!(!filter_keeps(&ns));
    assert!(!filter_keeps(&tagged_ns));
    assert!(!filter_keeps(&icmp_echo));
    assert!(!filter_keeps(&ipv4));
    assert!(!filter_keeps(&[0u8; 13]));
}

#[test]
fn answers_become_election_inputs() {
    let a = Answer {
        vip: VIP4.into(),
        mac: THEIRS,
    };
    assert_eq!(
        Input::from(a),
        Input::ProbeAnswered {
            vip: VIP4.into(),
            mac: THEIRS
        }
    );
}
