//! The comparison responder: ARP answered from userspace over an `AF_PACKET` socket, the way
//! MetalLB's layer-2 speaker does (one raw socket bound to `ETH_P_ARP` on the interface; read a
//! request, check its target is the VIP, write the reply). Replies are built with the same
//! shared wire code the agent uses, so both responders send identical frames.

use std::{
    net::Ipv4Addr,
    sync::atomic::{AtomicBool, Ordering},
    time::Duration,
};

use announcer_ebpf::wire::{
    ArpOperation, ArpPacket, ArpRepr, EthernetFrame, EthernetRepr, MacAddr, ethernet::ethertype,
    frame,
};
use anyhow::Result;

use crate::bench::cpu;
use crate::env::packet::{ETH_P_ARP, PacketSocket};

/// What the responder did.
#[derive(Clone, Copy, Debug, Default)]
pub struct Served {
    /// ARP frames read.
    pub received: u64,
    /// Replies written.
    pub answered: u64,
    /// Replies the kernel refused (e.g. `ENOBUFS`).
    pub send_errors: u64,
    /// CPU seconds (user + system) of the responder thread itself.
    pub thread_cpu_s: f64,
}

/// A bound responder, ready to serve.
pub struct Responder {
    sock: PacketSocket,
    vip: Ipv4Addr,
    mac: MacAddr,
}

impl Responder {
    /// Binds to `ifname` (in the calling thread's network namespace).
    pub fn bind(ifname: &str, vip: Ipv4Addr, mac: MacAddr) -> Result<Self> {
        let sock = PacketSocket::open(ifname, ETH_P_ARP)?;
        sock.set_recv_timeout(Duration::from_millis(20))?;
        Ok(Self { sock, vip, mac })
    }

    /// Answers requests for the VIP until `stop` is set.
    pub fn serve(&self, stop: &AtomicBool) -> Result<Served> {
        let start_cpu = cpu::thread_s();
        let mut s = Served::default();
        let mut buf = [0u8; 2048];
        let mut out = [0u8; frame::MAX_FRAME];
        while !stop.load(Ordering::Relaxed) {
            let Some(n) = self.sock.recv(&mut buf)? else {
                continue;
            };
            s.received += 1;
            let Some(len) = reply(&buf[..n], self.vip, self.mac, &mut out) else {
                continue;
            };
            match self.sock.send(&out[..len], ETH_P_ARP) {
                Ok(()) => s.answered += 1,
                Err(_) => s.send_errors += 1,
            }
        }
        s.thread_cpu_s = cpu::thread_s() - start_cpu;
        Ok(s)
    }
}

/// Builds the reply to `req` into `out` if it is an ARP request for `vip` (not an announcement
/// of it); returns the reply's length.
pub fn reply(req: &[u8], vip: Ipv4Addr, mac: MacAddr, out: &mut [u8]) -> Option<usize> {
    let eth = EthernetFrame::new_checked(req).ok()?;
    if eth.ethertype() != ethertype::ARP || eth.vlan().is_some() {
        return None;
    }
    let arp = ArpRepr::parse(&ArpPacket::new_checked(eth.payload()).ok()?).ok()?;
    if arp.operation != ArpOperation::Request
        || arp.target_ip != vip
        || arp.sender_ip == arp.target_ip
    {
        return None;
    }
    let len = frame::arp(
        out,
        &EthernetRepr {
            src: mac,
            dst: arp.sender_mac,
            vlan: None,
            ethertype: 0,
        },
        &ArpRepr {
            operation: ArpOperation::Reply,
            sender_mac: mac,
            sender_ip: vip,
            target_mac: arp.sender_mac,
            target_ip: arp.sender_ip,
        },
    );
    Some(len)
}

#[cfg(test)]
mod unit {
    use super::*;

    #[test]
    fn answers_requests_for_the_vip_only() {
        let vip = Ipv4Addr::new(10, 77, 0, 100);
        let mac = MacAddr([2, 0, 0, 0, 0, 1]);
        let mut out = [0u8; frame::MAX_FRAME];
        let req = crate::frames::arp_request(Ipv4Addr::new(10, 77, 0, 2), vip, None);
        let n = reply(&req, vip, mac, &mut out).expect("answered");
        let eth = EthernetFrame::new_checked(&out[..n]).unwrap();
        assert_eq!(eth.dst(), crate::frames::CLIENT_MAC);
        let arp = ArpRepr::parse(&ArpPacket::new_checked(eth.payload()).unwrap()).unwrap();
        assert_eq!(arp.operation, ArpOperation::Reply);
        assert_eq!((arp.sender_mac, arp.sender_ip), (mac, vip));
        assert_eq!(arp.target_ip, Ipv4Addr::new(10, 77, 0, 2));
        let other = crate::frames::arp_request(
            Ipv4Addr::new(10, 77, 0, 2),
            Ipv4Addr::new(10, 77, 0, 9),
            None,
        );
        assert!(reply(&other, vip, mac, &mut out).is_none());
        let announcement = crate::frames::arp_request(vip, vip, None);
        assert!(reply(&announcement, vip, mac, &mut out).is_none());
    }
}
