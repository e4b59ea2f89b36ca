//! The tests' raw packet socket (`AF_PACKET`/`SOCK_RAW`): whole Ethernet frames in and out of one
//! interface, for the LAN world's client and hostile host ([`crate::env::lan`]) and the XDP
//! benchmark's flood. Interface names resolve in the network namespace of the calling thread, so
//! create it on a thread inside the namespace ([`crate::netns::Netns::enter`]).
//!
//! Why not the product's `announcer::dataplane::announce::PacketSocket`: that one only sends,
//! without blocking, and receives nothing (an announcement must never stall the agent); the
//! tests receive answers (with a timeout to check a stop flag) and flood at line rate past the
//! qdisc, so a full send buffer must make them wait, not drop.

use std::{
    ffi::CString,
    io,
    os::fd::{AsRawFd, FromRawFd, OwnedFd},
    time::Duration,
};

use anyhow::{Context, Result, bail};

/// `ETH_P_ARP`.
pub const ETH_P_ARP: u16 = 0x0806;

/// An `AF_PACKET` socket bound to one interface.
pub struct PacketSocket {
    fd: OwnedFd,
    ifindex: i32,
}

/// Index of `ifname` in the calling thread's network namespace.
pub fn ifindex(ifname: &str) -> Result<i32> {
    let c = CString::new(ifname)?;
    // SAFETY: valid NUL-terminated string.
    let i = unsafe { libc::if_nametoindex(c.as_ptr()) };
    if i == 0 {
        bail!("no interface {ifname}: {}", io::Error::last_os_error());
    }
    Ok(i as i32)
}

fn sockaddr(ifindex: i32, protocol: u16) -> libc::sockaddr_ll {
    // SAFETY: all-zero is a valid sockaddr_ll.
    let mut sa: libc::sockaddr_ll = unsafe { std::mem::zeroed() };
    sa.sll_family = libc::AF_PACKET as u16;
    sa.sll_protocol = protocol.to_be();
    sa.sll_ifindex = ifindex;
    sa.sll_halen = 6;
    sa.sll_addr[..6].fill(0xff);
    sa
}

impl PacketSocket {
    /// Opens a socket on `ifname` receiving frames of EtherType `protocol` (0: receive nothing,
    /// send only).
    pub fn open(ifname: &str, protocol: u16) -> Result<Self> {
        let ifindex = ifindex(ifname)?;
        // SAFETY: plain socket(2); the fd is owned below.
        let raw = unsafe {
            libc::socket(
                libc::AF_PACKET,
                libc::SOCK_RAW | libc::SOCK_CLOEXEC,
                i32::from(protocol.to_be()),
            )
        };
        if raw < 0 {
            return Err(io::Error::last_os_error()).context("socket(AF_PACKET, SOCK_RAW)");
        }
        // SAFETY: a fresh fd nobody else owns.
        let fd = unsafe { OwnedFd::from_raw_fd(raw) };
        let sa = sockaddr(ifindex, protocol);
        // SAFETY: sa is a valid sockaddr_ll of the given size.
        let rc = unsafe {
            libc::bind(
                fd.as_raw_fd(),
                (&raw const sa).cast(),
                std::mem::size_of::<libc::sockaddr_ll>() as libc::socklen_t,
            )
        };
        if rc != 0 {
            return Err(io::Error::last_os_error()).with_context(|| format!("binding to {ifname}"));
        }
        Ok(Self { fd, ifindex })
    }

    /// Makes `recv` give up after `timeout` (so a loop can check a stop flag).
    pub fn set_recv_timeout(&self, timeout: Duration) -> Result<()> {
        let tv = libc::timeval {
            tv_sec: timeout.as_secs() as _,
            tv_usec: timeout.subsec_micros() as _,
        };
        self.setsockopt(libc::SOL_SOCKET, libc::SO_RCVTIMEO, &tv)
            .context("SO_RCVTIMEO")
    }

    /// Sends without the qdisc layer (`PACKET_QDISC_BYPASS`), as a flood tool does.
    pub fn bypass_qdisc(&self) -> Result<()> {
        self.setsockopt(libc::SOL_PACKET, libc::PACKET_QDISC_BYPASS, &1i32)
            .context("PACKET_QDISC_BYPASS")
    }

    fn setsockopt<T>(&self, level: i32, name: i32, value: &T) -> io::Result<()> {
        announcer::dataplane::sys::packet::setsockopt(&self.fd, level, name, value)
    }

    /// Sends one whole frame out of the bound interface (as EtherType `protocol`).
    pub fn send(&self, frame: &[u8], protocol: u16) -> io::Result<()> {
        let sa = sockaddr(self.ifindex, protocol);
        // SAFETY: frame and sa are valid for the given lengths.
        let n = unsafe {
            libc::sendto(
                self.fd.as_raw_fd(),
                frame.as_ptr().cast(),
                frame.len(),
                0,
                (&raw const sa).cast(),
                std::mem::size_of::<libc::sockaddr_ll>() as libc::socklen_t,
            )
        };
        if n < 0 {
            Err(io::Error::last_os_error())
        } else {
            Ok(())
        }
    }

    /// Receives one frame into `buf`; `Ok(None)` on timeout.
    pub fn recv(&self, buf: &mut [u8]) -> io::Result<Option<usize>> {
        // SAFETY: buf is valid for writes of its length.
        let n = unsafe { libc::recv(self.fd.as_raw_fd(), buf.as_mut_ptr().cast(), buf.len(), 0) };
        if n >= 0 {
            return Ok(Some(n as usize));
        }
        let e = io::Error::last_os_error();
        match e.kind() {
            io::ErrorKind::WouldBlock | io::ErrorKind::TimedOut | io::ErrorKind::Interrupted => {
                Ok(None)
            }
            _ => Err(e),
        }
    }
}
