//! The comparison responder: ARP answered from userspace over an `AF_PACKET` socket, the way
//! MetalLB's layer-2 speaker does (one raw socket bound to `ETH_P_ARP` on the interface; read a
//! request, check its target is the VIP, write the reply). Replies are built with the same
//! shared wire code the agent uses, so both responders send identical frames.

use std::{
    net::Ipv4Addr,
    sync::atomic::{AtomicBool, Ordering},
    time::Duration,
};

use announcer_ebpf::wire::{ArpOperation, ArpPacket, ArpRepr, EthernetFrame, EthernetRepr, MacAddr, ethernet::ethertype, frame};
use anyhow::Result;

use super::{
    cpu,
    packet::{ETH_P_ARP, PacketSocket},
};

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
        let mut reply = [0u8; frame::MAX_FRAME];
        while !stop.load(Ordering::Relaxed) {
            let Some(n) = self.sock.recv(&mut buf)? else { continue };
            s.received += 1;
            let Some(len) = self.answer(&buf[..n], &mut reply) else { continue };
            match self.sock.send(&reply[..len], ETH_P_ARP) {
                Ok(()) => s.answered += 1,
                Err(_) => s.send_errors += 1,
            }
        }
        s.thread_cpu_s = cpu::thread_s() - start_cpu;
        Ok(s)
    }

    /// Builds the reply to `req` into `out` if it is a request for the VIP.
    fn answer(&self, req: &[u8], out: &mut [u8]) -> Option<usize> {
        let eth = EthernetFrame::new_checked(req).ok()?;
        if eth.ethertype() != ethertype::ARP || eth.vlan().is_some() {
            return None;
        }
        let arp = ArpRepr::parse(&ArpPacket::new_checked(eth.payload()).ok()?).ok()?;
        if arp.operation != ArpOperation::Request || arp.target_ip != self.vip || arp.sender_ip == arp.target_ip {
            return None;
        }
        let len = frame::arp(
            out,
            &EthernetRepr { src: self.mac, dst: arp.sender_mac, vlan: None, ethertype: 0 },
            &ArpRepr {
                operation: ArpOperation::Reply,
                sender_mac: self.mac,
                sender_ip: self.vip,
                target_mac: arp.sender_mac,
                target_ip: arp.sender_ip,
            },
        );
        Some(len)
    }
}
