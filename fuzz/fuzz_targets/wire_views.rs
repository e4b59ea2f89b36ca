//! Any byte string through every checked view and `Repr` parser: nothing may panic, and what
//! parses must emit back to the same fields.
#![no_main]

use announcer_ebpf::wire::{
    ArpPacket, ArpRepr, EthernetFrame, EthernetRepr, Ipv6Packet, Ipv6Repr, NdiscPacket, NdiscRepr,
};
use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    let Ok(frame) = EthernetFrame::new_checked(data) else { return };
    let eth = EthernetRepr::parse(&frame);
    let mut buf = [0u8; 18];
    let n = eth.emit(&mut buf);
    assert_eq!(&buf[..12], &data[..12]);
    assert_eq!(n, frame.header_len());

    if let Ok(p) = ArpPacket::new_checked(frame.payload())
        && let Ok(r) = ArpRepr::parse(&p)
    {
        let mut out = [0u8; 28];
        r.emit(&mut out);
        assert_eq!(ArpRepr::parse(&ArpPacket::new_checked(&out[..]).unwrap()).unwrap(), r);
    }
    if let Ok(ip) = Ipv6Packet::new_checked(frame.payload()) {
        let repr = Ipv6Repr::parse(&ip);
        if let Ok(nd) = NdiscPacket::new_checked(ip.payload()) {
            let _ = nd.verify_checksum(&repr.src, &repr.dst);
            let _ = nd.options().count();
            if let Ok(r) = NdiscRepr::parse(&nd) {
                let mut out = vec![0u8; r.buffer_len()];
                r.emit(&mut out);
                let back = NdiscRepr::parse(&NdiscPacket::new_checked(&out[..]).unwrap()).unwrap();
                assert_eq!(back, r);
            }
        }
    }
});
