//! Which XDP program runs on an interface, and in which mode, as `ip link` shows it: one
//! `RTM_GETLINK` on rtnetlink, read from its `IFLA_XDP` attribute.
//!
//! A bpf_link's info carries the interface but not the mode (driver or generic), and the mode
//! is what the loader must compare with the configured `xdpMode` and what
//! `announcer_dataplane_info` reports. Like every call here it honours the caller's network
//! namespace.

use std::{
    io,
    os::fd::{AsRawFd, FromRawFd, OwnedFd},
};

/// How an XDP program is attached to an interface (`XDP_ATTACHED_*`).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Attached {
    /// No XDP program.
    None,
    /// In the driver (native mode).
    Driver,
    /// In the generic (skb) path.
    Generic,
    /// Offloaded to the NIC.
    Hardware,
    /// Several at once (e.g. generic and offloaded).
    Multi,
}

impl Attached {
    /// The name `announcer_dataplane_info` and the CLI use: `native`, `generic`, ...
    pub fn name(self) -> &'static str {
        match self {
            Attached::None => "none",
            Attached::Driver => "native",
            Attached::Generic => "generic",
            Attached::Hardware => "offload",
            Attached::Multi => "multi",
        }
    }
}

/// The XDP state of one interface.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct XdpState {
    /// How it is attached.
    pub attached: Attached,
    /// The program's id (0 when none; with [`Attached::Multi`], 0 as well).
    pub program_id: u32,
}

const RTM_GETLINK: u16 = 18;
const RTM_NEWLINK: u16 = 16;
const NLMSG_ERROR: u16 = 2;
const NLM_F_REQUEST: u16 = 1;
const IFLA_XDP: u16 = 43;
const IFLA_XDP_ATTACHED: u16 = 2;
const IFLA_XDP_PROG_ID: u16 = 4;

/// The XDP state of the interface with index `ifindex` in this network namespace.
pub fn state(ifindex: u32) -> io::Result<XdpState> {
    // SAFETY: plain socket(2); the fd is owned right after.
    let raw = unsafe {
        libc::socket(
            libc::AF_NETLINK,
            libc::SOCK_RAW | libc::SOCK_CLOEXEC,
            libc::NETLINK_ROUTE,
        )
    };
    if raw < 0 {
        return Err(io::Error::last_os_error());
    }
    // SAFETY: a fresh fd nobody else owns.
    let fd = unsafe { OwnedFd::from_raw_fd(raw) };
    // nlmsghdr (16) + ifinfomsg (16).
    let mut req = [0u8; 32];
    req[0..4].copy_from_slice(&32u32.to_ne_bytes());
    req[4..6].copy_from_slice(&RTM_GETLINK.to_ne_bytes());
    req[6..8].copy_from_slice(&NLM_F_REQUEST.to_ne_bytes());
    req[8..12].copy_from_slice(&1u32.to_ne_bytes()); // seq
    req[16] = libc::AF_UNSPEC as u8;
    req[20..24].copy_from_slice(&(ifindex as i32).to_ne_bytes());
    // SAFETY: `req` is valid for reads of its length.
    let n = unsafe { libc::send(fd.as_raw_fd(), req.as_ptr().cast(), req.len(), 0) };
    if n < 0 {
        return Err(io::Error::last_os_error());
    }
    let mut buf = vec![0u8; 64 * 1024];
    // SAFETY: `buf` is valid for writes of its length.
    let n = unsafe { libc::recv(fd.as_raw_fd(), buf.as_mut_ptr().cast(), buf.len(), 0) };
    if n < 0 {
        return Err(io::Error::last_os_error());
    }
    parse(&buf[..n as usize])
}

fn u16_at(b: &[u8], at: usize) -> Option<u16> {
    Some(u16::from_ne_bytes(b.get(at..at + 2)?.try_into().ok()?))
}

fn u32_at(b: &[u8], at: usize) -> Option<u32> {
    Some(u32::from_ne_bytes(b.get(at..at + 4)?.try_into().ok()?))
}

/// Attributes `(type, payload)` packed in `b` (rtattr: u16 len, u16 type, 4-byte aligned).
fn attrs(mut b: &[u8]) -> impl Iterator<Item = (u16, &[u8])> {
    std::iter::from_fn(move || {
        let len = u16_at(b, 0)? as usize;
        let ty = u16_at(b, 2)? & 0x3fff; // without NLA_F_NESTED / NLA_F_NET_BYTEORDER
        if len < 4 || len > b.len() {
            return None;
        }
        let payload = &b[4..len];
        b = &b[len.next_multiple_of(4).min(b.len())..];
        Some((ty, payload))
    })
}

fn bad(what: &str) -> io::Error {
    io::Error::new(io::ErrorKind::InvalidData, format!("rtnetlink: {what}"))
}

fn parse(msg: &[u8]) -> io::Result<XdpState> {
    let len = u32_at(msg, 0).ok_or_else(|| bad("short reply"))? as usize;
    let ty = u16_at(msg, 4).ok_or_else(|| bad("short reply"))?;
    let msg = msg.get(..len).ok_or_else(|| bad("truncated reply"))?;
    if ty == NLMSG_ERROR {
        let errno = u32_at(msg, 16).map_or(libc::EIO, |e| -(e as i32));
        return Err(io::Error::from_raw_os_error(errno));
    }
    if ty != RTM_NEWLINK {
        return Err(bad("unexpected reply type"));
    }
    let mut state = XdpState {
        attached: Attached::None,
        program_id: 0,
    };
    for (t, payload) in attrs(msg.get(32..).unwrap_or(&[])) {
        if t != IFLA_XDP {
            continue;
        }
        for (x, v) in attrs(payload) {
            match x {
                IFLA_XDP_ATTACHED => {
                    state.attached = match v.first() {
                        Some(1) => Attached::Driver,
                        Some(2) => Attached::Generic,
                        Some(3) => Attached::Hardware,
                        Some(4) => Attached::Multi,
                        _ => Attached::None,
                    }
                }
                IFLA_XDP_PROG_ID => state.program_id = u32_at(v, 0).unwrap_or(0),
                _ => {}
            }
        }
    }
    Ok(state)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn reads_the_mode_and_program_from_the_xdp_attribute() {
        // nlmsghdr + ifinfomsg + IFLA_MTU + IFLA_XDP{ATTACHED=2, PROG_ID=77}
        let mut m = vec![0u8; 32];
        m[4..6].copy_from_slice(&RTM_NEWLINK.to_ne_bytes());
        m.extend_from_slice(&8u16.to_ne_bytes());
        m.extend_from_slice(&4u16.to_ne_bytes()); // IFLA_MTU
        m.extend_from_slice(&1500u32.to_ne_bytes());
        m.extend_from_slice(&20u16.to_ne_bytes());
        m.extend_from_slice(&(IFLA_XDP | 0x8000).to_ne_bytes());
        m.extend_from_slice(&5u16.to_ne_bytes());
        m.extend_from_slice(&IFLA_XDP_ATTACHED.to_ne_bytes());
        m.extend_from_slice(&[2, 0, 0, 0]);
        m.extend_from_slice(&8u16.to_ne_bytes());
        m.extend_from_slice(&IFLA_XDP_PROG_ID.to_ne_bytes());
        m.extend_from_slice(&77u32.to_ne_bytes());
        let len = m.len() as u32;
        m[0..4].copy_from_slice(&len.to_ne_bytes());
        assert_eq!(
            parse(&m).unwrap(),
            XdpState {
                attached: Attached::Generic,
                program_id: 77
            }
        );
    }
}
