//! `AF_PACKET` plumbing shared by the announcement sender ([`crate::dataplane::announce`]), the
//! agent's prober and the benchmarks: binding a packet socket to one interface, and
//! the raw `setsockopt` the typed wrappers of `nix` do not cover (socket filters,
//! `PACKET_IGNORE_OUTGOING`, `PACKET_QDISC_BYPASS`).

use std::{io, os::fd::AsRawFd};

use nix::sys::socket::{self, LinkAddr, SockaddrLike};

/// Binds the packet socket `fd` to interface `ifindex`, receiving EtherType `protocol` (host
/// order; 0 receives nothing, `ETH_P_ALL` everything).
pub fn bind(fd: &impl AsRawFd, ifindex: u32, protocol: u16) -> io::Result<()> {
    // 0 would bind to "any interface", on which send(2) fails; reject it up front.
    let sll_ifindex = i32::try_from(ifindex)
        .ok()
        .filter(|&i| i > 0)
        .ok_or_else(|| io::Error::new(io::ErrorKind::InvalidInput, "bad ifindex"))?;
    let sll = libc::sockaddr_ll {
        sll_family: libc::AF_PACKET as libc::sa_family_t,
        sll_protocol: protocol.to_be(),
        sll_ifindex,
        // Only used when receiving, or when sending without a bound interface.
        sll_hatype: 0,
        sll_pkttype: 0,
        sll_halen: 0,
        sll_addr: [0; 8],
    };
    let len = std::mem::size_of::<libc::sockaddr_ll>() as libc::socklen_t;
    // SAFETY: the pointer is to a live, initialized sockaddr_ll of exactly `len` bytes whose
    // family is AF_PACKET, which is what LinkAddr requires.
    let addr = unsafe { LinkAddr::from_raw((&raw const sll).cast(), Some(len)) }
        .expect("a sockaddr_ll with family AF_PACKET is a LinkAddr");
    socket::bind(fd.as_raw_fd(), &addr).map_err(io::Error::from)
}

/// `setsockopt(2)` with a plain value.
pub fn setsockopt<T>(fd: &impl AsRawFd, level: i32, name: i32, value: &T) -> io::Result<()> {
    // SAFETY: `value` points to a live T of the given size for the duration of the call; the
    // kernel copies it.
    let rc = unsafe {
        libc::setsockopt(
            fd.as_raw_fd(),
            level,
            name,
            (value as *const T).cast(),
            std::mem::size_of::<T>() as libc::socklen_t,
        )
    };
    if rc == 0 {
        Ok(())
    } else {
        Err(io::Error::last_os_error())
    }
}
