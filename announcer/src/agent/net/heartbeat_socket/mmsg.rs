//! `sendmmsg(2)` and `recvmmsg(2)`: up to [`BATCH`] heartbeats per system call, each way.
//!
//! Why: the agent seals one datagram per peer and period, so a round to 1,000 peers every
//! 75 ms was 13,000 `sendto(2)` calls a second on this node and as many `recvfrom(2)` calls on
//! each of the others. In batches a round costs 16 calls.
//!
//! Why by hand rather than nix's wrappers (0.30): the results of its `sendmmsg` can only be
//! read through an iterator that also reads the address slots, which a send never writes, as
//! initialised; and its `recvmmsg` leaves each header's address length as the previous call
//! set it. The two functions here set every header field on every call, and keep the unsafe
//! part to the one system call each.

use std::{
    io, mem,
    net::{Ipv4Addr, Ipv6Addr, SocketAddr, SocketAddrV4, SocketAddrV6},
    os::fd::{AsRawFd, BorrowedFd},
    ptr,
};

use crate::heartbeat::MAX_DATAGRAM;

/// Datagrams per system call. 64 makes a round to 1,000 peers 16 calls, and keeps the
/// headers and addresses built for one call on the stack small (about 14 KB).
pub const BATCH: usize = 64;

/// How much room each received datagram gets: one byte more than a heartbeat may have, so
/// that a longer datagram arrives truncated to a length the verifier rejects.
const RECV_LEN: usize = MAX_DATAGRAM + 1;

/// What one [`send`] did: the kernel took the first [`count`](Self::count) datagrams.
#[derive(Debug)]
pub struct Sent {
    /// Bytes sent, per datagram taken.
    lens: [usize; BATCH],
    count: usize,
}

impl Sent {
    /// How many datagrams, from the first, the kernel took.
    pub fn count(&self) -> usize {
        self.count
    }

    /// The bytes sent of each datagram taken, in order.
    pub fn lens(&self) -> &[usize] {
        &self.lens[..self.count]
    }

    /// What a `sendmmsg(2)` that took datagrams of `lens` bytes returns (for tests).
    #[cfg(test)]
    pub fn of(lens: &[usize]) -> Self {
        let mut sent = Self {
            lens: [0; BATCH],
            count: lens.len(),
        };
        sent.lens[..lens.len()].copy_from_slice(lens);
        sent
    }
}

/// Sends the first [`BATCH`] of `datagrams` (or all, if fewer) with one `sendmmsg(2)`,
/// without waiting.
///
/// `Ok` when the kernel took at least the first one, of a non-empty batch (it stops at the first it cannot send, and
/// that one's error is lost: send the rest again to learn it); `Err` is the first datagram's
/// error, and none was sent.
pub fn send<B: AsRef<[u8]>>(fd: BorrowedFd<'_>, datagrams: &[(B, SocketAddr)]) -> io::Result<Sent> {
    let batch = &datagrams[..datagrams.len().min(BATCH)];
    let mut sent = Sent {
        lens: [0; BATCH],
        count: 0,
    };
    if batch.is_empty() {
        return Ok(sent);
    }
    let mut names = [zeroed_sockaddr(); BATCH];
    let mut name_lens = [0; BATCH];
    let mut iovs = [empty_iovec(); BATCH];
    for (i, (bytes, addr)) in batch.iter().enumerate() {
        name_lens[i] = write_sockaddr(*addr, &mut names[i]);
        let bytes = bytes.as_ref();
        // The kernel only reads through a send's iovec: the pointer is `*mut` by C's type.
        iovs[i] = libc::iovec {
            iov_base: bytes.as_ptr().cast_mut().cast(),
            iov_len: bytes.len(),
        };
    }
    let mut hdrs = [zeroed_mmsghdr(); BATCH];
    for (i, h) in hdrs.iter_mut().enumerate().take(batch.len()) {
        h.msg_hdr.msg_name = ptr::from_mut(&mut names[i]).cast();
        h.msg_hdr.msg_namelen = name_lens[i];
        h.msg_hdr.msg_iov = ptr::from_mut(&mut iovs[i]);
        h.msg_hdr.msg_iovlen = 1;
    }
    // SAFETY: the first `batch.len()` headers point at addresses and iovecs of this frame,
    // with their true lengths, and each iovec at a datagram borrowed for this call; the
    // kernel writes only the headers' `msg_len`.
    let n = unsafe {
        libc::sendmmsg(
            fd.as_raw_fd(),
            hdrs.as_mut_ptr(),
            batch.len() as _,
            libc::MSG_DONTWAIT as _,
        )
    };
    if n < 0 {
        return Err(io::Error::last_os_error());
    }
    if n == 0 {
        // Not done by Linux for a non-empty batch; an error keeps the caller's loop going.
        return Err(io::ErrorKind::WriteZero.into());
    }
    sent.count = (n as usize).min(batch.len());
    for (len, h) in sent.lens.iter_mut().zip(&hdrs).take(sent.count) {
        *len = h.msg_len as usize;
    }
    Ok(sent)
}

/// Room for [`BATCH`] datagrams and their senders, reused by every [`recv`](Self::recv).
pub struct RecvBatch {
    bufs: Box<[[u8; RECV_LEN]; BATCH]>,
    names: Box<[libc::sockaddr_storage; BATCH]>,
    lens: [usize; BATCH],
    from: [SocketAddr; BATCH],
    count: usize,
}

impl RecvBatch {
    /// Empty buffers (about 90 KB, on the heap).
    pub fn new() -> Self {
        Self {
            bufs: Box::new([[0; RECV_LEN]; BATCH]),
            names: Box::new([zeroed_sockaddr(); BATCH]),
            lens: [0; BATCH],
            from: [UNKNOWN_SENDER; BATCH],
            count: 0,
        }
    }

    /// Reads the datagrams queued on `fd`, up to [`BATCH`], with one `recvmmsg(2)`, without
    /// waiting: their number (at least one), or the error (`WouldBlock` when none is queued).
    /// A datagram longer than a heartbeat may be is cut to one byte more.
    pub fn recv(&mut self, fd: BorrowedFd<'_>) -> io::Result<usize> {
        self.count = 0;
        let mut iovs = [empty_iovec(); BATCH];
        for (iov, buf) in iovs.iter_mut().zip(self.bufs.iter_mut()) {
            iov.iov_base = buf.as_mut_ptr().cast();
            iov.iov_len = buf.len();
        }
        let mut hdrs = [zeroed_mmsghdr(); BATCH];
        for ((h, iov), name) in hdrs.iter_mut().zip(&mut iovs).zip(self.names.iter_mut()) {
            h.msg_hdr.msg_name = ptr::from_mut(name).cast();
            h.msg_hdr.msg_namelen = mem::size_of::<libc::sockaddr_storage>() as _;
            h.msg_hdr.msg_iov = ptr::from_mut(iov);
            h.msg_hdr.msg_iovlen = 1;
        }
        // SAFETY: every header points at an address slot and, through its iovec, a buffer of
        // `self`, with their true sizes; the kernel writes no more than those, and the headers
        // and iovecs outlive the call. No timeout: `MSG_DONTWAIT` returns what is queued.
        let n = unsafe {
            libc::recvmmsg(
                fd.as_raw_fd(),
                hdrs.as_mut_ptr(),
                BATCH as _,
                libc::MSG_DONTWAIT as _,
                ptr::null_mut(),
            )
        };
        if n < 0 {
            return Err(io::Error::last_os_error());
        }
        self.count = (n as usize).min(BATCH);
        for (i, h) in hdrs.iter().enumerate().take(self.count) {
            self.lens[i] = (h.msg_len as usize).min(RECV_LEN);
            self.from[i] = read_sockaddr(&self.names[i], h.msg_hdr.msg_namelen);
        }
        Ok(self.count)
    }

    /// The datagrams the last [`recv`](Self::recv) read, in arrival order, with their senders.
    pub fn datagrams(&self) -> impl Iterator<Item = (&[u8], SocketAddr)> + '_ {
        (0..self.count).map(|i| (&self.bufs[i][..self.lens[i]], self.from[i]))
    }
}

/// The sender of a datagram whose address is not IPv4 or IPv6 (not seen on a UDP socket).
const UNKNOWN_SENDER: SocketAddr = SocketAddr::V4(SocketAddrV4::new(Ipv4Addr::UNSPECIFIED, 0));

fn zeroed_sockaddr() -> libc::sockaddr_storage {
    // SAFETY: a plain C struct of integers, for which all zero bytes are a valid value.
    unsafe { mem::zeroed() }
}

fn zeroed_mmsghdr() -> libc::mmsghdr {
    // SAFETY: a plain C struct of integers and raw pointers; all zero is a valid value (null
    // pointers, zero lengths).
    unsafe { mem::zeroed() }
}

fn empty_iovec() -> libc::iovec {
    libc::iovec {
        iov_base: ptr::null_mut(),
        iov_len: 0,
    }
}

/// Writes `addr` into `out` as the kernel takes it, and returns its length.
fn write_sockaddr(addr: SocketAddr, out: &mut libc::sockaddr_storage) -> libc::socklen_t {
    match addr {
        SocketAddr::V4(a) => {
            let sin = libc::sockaddr_in {
                sin_family: libc::AF_INET as _,
                sin_port: a.port().to_be(),
                sin_addr: libc::in_addr {
                    s_addr: u32::from(*a.ip()).to_be(),
                },
                sin_zero: [0; 8],
            };
            // SAFETY: `sockaddr_storage` is larger than, and aligned for, any sockaddr.
            unsafe { ptr::from_mut(out).cast::<libc::sockaddr_in>().write(sin) };
            mem::size_of::<libc::sockaddr_in>() as _
        }
        SocketAddr::V6(a) => {
            let sin6 = libc::sockaddr_in6 {
                sin6_family: libc::AF_INET6 as _,
                sin6_port: a.port().to_be(),
                sin6_flowinfo: a.flowinfo(),
                sin6_addr: libc::in6_addr {
                    s6_addr: a.ip().octets(),
                },
                sin6_scope_id: a.scope_id(),
            };
            // SAFETY: as above.
            unsafe { ptr::from_mut(out).cast::<libc::sockaddr_in6>().write(sin6) };
            mem::size_of::<libc::sockaddr_in6>() as _
        }
    }
}

/// The address the kernel wrote into `name` (`len` bytes of it).
fn read_sockaddr(name: &libc::sockaddr_storage, len: libc::socklen_t) -> SocketAddr {
    let len = len as usize;
    match i32::from(name.ss_family) {
        libc::AF_INET if len >= mem::size_of::<libc::sockaddr_in>() => {
            // SAFETY: the kernel wrote a `sockaddr_in` (family and length say so), and
            // `sockaddr_storage` is aligned for it.
            let sin = unsafe { &*ptr::from_ref(name).cast::<libc::sockaddr_in>() };
            SocketAddr::V4(SocketAddrV4::new(
                Ipv4Addr::from(u32::from_be(sin.sin_addr.s_addr)),
                u16::from_be(sin.sin_port),
            ))
        }
        libc::AF_INET6 if len >= mem::size_of::<libc::sockaddr_in6>() => {
            // SAFETY: as above, a `sockaddr_in6`.
            let sin6 = unsafe { &*ptr::from_ref(name).cast::<libc::sockaddr_in6>() };
            SocketAddr::V6(SocketAddrV6::new(
                Ipv6Addr::from(sin6.sin6_addr.s6_addr),
                u16::from_be(sin6.sin6_port),
                sin6.sin6_flowinfo,
                sin6.sin6_scope_id,
            ))
        }
        _ => UNKNOWN_SENDER,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn socket_addresses_round_trip_through_the_kernel_layout() {
        for addr in [
            "10.78.1.2:9747",
            "0.0.0.0:0",
            "[fd00::1]:9747",
            "[fe80::1%3]:1",
        ] {
            let addr: SocketAddr = addr.parse().unwrap();
            let mut name = zeroed_sockaddr();
            let len = write_sockaddr(addr, &mut name);
            assert_eq!(read_sockaddr(&name, len), addr);
        }
    }

    #[test]
    fn an_address_shorter_than_its_family_reads_as_unknown() {
        let mut name = zeroed_sockaddr();
        write_sockaddr("10.78.1.2:9747".parse().unwrap(), &mut name);
        assert_eq!(read_sockaddr(&name, 4), UNKNOWN_SENDER);
    }
}
