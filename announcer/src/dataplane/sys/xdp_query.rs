//! Which XDP program, if any, is attached to an interface, in which mode, and what it is
//! called: one `RTM_GETLINK` on rtnetlink, as `ip link` shows it. Like every call here it
//! honours the caller's network namespace.
//!
//! Two users: the loader, which compares the mode with the configured `xdpMode` (a bpf_link's
//! info carries the interface but not the mode) and reports it in `announcer_dataplane_info`;
//! and the attach-failure path below.
//!
//! Why: the kernel runs one XDP program per interface, in one mode (native and generic cannot
//! be active at the same time), and the announcer never replaces a program it did not attach
//! (aya attaches through a `bpf_link`, or through netlink with `XDP_FLAGS_UPDATE_IF_NOEXIST`).
//! When the attach fails because another program is there (a CNI's XDP acceleration, such as
//! Calico's or Cilium's), "device or resource busy" says nothing useful: the operator needs the
//! program's id and name, to find its owner. The id comes from the interface's `IFLA_XDP`
//! attribute (an `RTM_GETLINK` request on rtnetlink(7), as `ip link` shows it), the name from
//! the program's info ([`aya::programs::loaded_programs`], `BPF_OBJ_GET_INFO_BY_FD`).

use std::{io, os::fd::AsRawFd};

use nix::sys::socket::{
    AddressFamily, MsgFlags, NetlinkAddr, SockFlag, SockProtocol, SockType, recv, sendto, socket,
};

use crate::dataplane::error::Error;

const RTM_NEWLINK: u16 = 16;
const RTM_GETLINK: u16 = 18;
const NLMSG_ERROR: u16 = 2;
const NLMSG_DONE: u16 = 3;
const NLM_F_REQUEST: u16 = 1;
const IFLA_XDP: u16 = 43;
const IFLA_XDP_ATTACHED: u16 = 2;
const IFLA_XDP_PROG_ID: u16 = 4;
const NLA_TYPE_MASK: u16 = 0x3fff;

/// How a program is attached (`XDP_ATTACHED_*` of `if_link.h`).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum AttachMode {
    /// In the driver (`xdpdrv`, the announcer's `native`).
    Native,
    /// In the generic (skb) path (`xdpgeneric`).
    Generic,
    /// Offloaded to the NIC.
    Offload,
    /// Several at once (offload plus one of the others).
    Multi,
}

impl AttachMode {
    /// As `ip link` and the announcer's flags name it.
    pub fn as_str(self) -> &'static str {
        match self {
            AttachMode::Native => "native",
            AttachMode::Generic => "generic",
            AttachMode::Offload => "offload",
            AttachMode::Multi => "multi",
        }
    }
}

/// The XDP program attached to an interface.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct AttachedProgram {
    /// Its kernel id (`bpftool prog show id N`).
    pub id: u32,
    /// Its name as loaded (up to 15 characters); empty if unknown.
    pub name: String,
    /// How it is attached.
    pub mode: AttachMode,
}

/// The XDP program attached to interface `ifindex` of this network namespace, if any.
pub fn attached(ifindex: u32) -> io::Result<Option<AttachedProgram>> {
    let Some((mode, id)) = query_link(ifindex)? else {
        return Ok(None);
    };
    Ok(Some(AttachedProgram {
        id,
        name: program_name(id).unwrap_or_default(),
        mode,
    }))
}

/// How the program attached to interface `ifindex` runs; `None` when there is none.
pub fn mode(ifindex: u32) -> io::Result<Option<AttachMode>> {
    Ok(query_link(ifindex)?.map(|(mode, _)| mode))
}

/// An attach failure on `iface` explained: when another program is attached there, the
/// [`Error::ForeignXdp`] naming it (its fix says the ways out); otherwise `err` unchanged.
/// `ours`: the id of the announcer's own pinned program, never called foreign.
pub fn explain_attach_failure(iface: &str, ifindex: u32, ours: Option<u32>, err: Error) -> Error {
    match attached(ifindex) {
        Ok(Some(p)) if Some(p.id) != ours => Error::ForeignXdp {
            iface: iface.to_owned(),
            id: p.id,
            name: p.name,
            mode: p.mode.as_str(),
        },
        _ => err,
    }
}

fn program_name(id: u32) -> Option<String> {
    aya::programs::loaded_programs()
        .filter_map(Result::ok)
        .find(|p| p.id() == id)
        .and_then(|p| p.name_as_str().map(str::to_owned))
}

/// `(mode, program id)` from the interface's `IFLA_XDP`, `None` when nothing is attached.
fn query_link(ifindex: u32) -> io::Result<Option<(AttachMode, u32)>> {
    let sock = socket(
        AddressFamily::Netlink,
        SockType::Raw,
        SockFlag::SOCK_CLOEXEC,
        SockProtocol::NetlinkRoute,
    )?;
    // nlmsghdr (16 bytes) + ifinfomsg (16 bytes).
    let mut req = [0u8; 32];
    req[0..4].copy_from_slice(&32u32.to_ne_bytes());
    req[4..6].copy_from_slice(&RTM_GETLINK.to_ne_bytes());
    req[6..8].copy_from_slice(&NLM_F_REQUEST.to_ne_bytes());
    req[8..12].copy_from_slice(&1u32.to_ne_bytes()); // seq
    req[16] = libc::AF_UNSPEC as u8;
    req[20..24].copy_from_slice(&(ifindex as i32).to_ne_bytes());
    sendto(
        sock.as_raw_fd(),
        &req,
        &NetlinkAddr::new(0, 0),
        MsgFlags::empty(),
    )?;
    let mut buf = vec![0u8; 64 * 1024];
    loop {
        let n = recv(sock.as_raw_fd(), &mut buf, MsgFlags::empty())?;
        if n == 0 {
            return Ok(None);
        }
        let mut msgs = &buf[..n];
        while msgs.len() >= 16 {
            let len = u32::from_ne_bytes(msgs[0..4].try_into().expect("4 bytes")) as usize;
            let ty = u16::from_ne_bytes(msgs[4..6].try_into().expect("2 bytes"));
            if len < 16 || len > msgs.len() {
                return Err(io::Error::new(
                    io::ErrorKind::InvalidData,
                    "truncated netlink message",
                ));
            }
            let body = &msgs[16..len];
            match ty {
                NLMSG_ERROR => {
                    let code = body
                        .get(0..4)
                        .map(|b| i32::from_ne_bytes(b.try_into().expect("4 bytes")))
                        .unwrap_or(0);
                    return if code == 0 {
                        Ok(None)
                    } else {
                        Err(io::Error::from_raw_os_error(-code))
                    };
                }
                NLMSG_DONE => return Ok(None),
                RTM_NEWLINK if body.len() >= 16 => return Ok(parse_xdp(&body[16..])),
                _ => {}
            }
            msgs = &msgs[align4(len).min(msgs.len())..];
        }
    }
}

fn align4(n: usize) -> usize {
    (n + 3) & !3
}

/// Walks route attributes, yielding `(type, payload)`.
fn attrs(mut b: &[u8]) -> impl Iterator<Item = (u16, &[u8])> {
    std::iter::from_fn(move || {
        if b.len() < 4 {
            return None;
        }
        let len = u16::from_ne_bytes([b[0], b[1]]) as usize;
        let ty = u16::from_ne_bytes([b[2], b[3]]) & NLA_TYPE_MASK;
        if len < 4 || len > b.len() {
            return None;
        }
        let payload = &b[4..len];
        b = &b[align4(len).min(b.len())..];
        Some((ty, payload))
    })
}

/// The mode and program id in an `RTM_NEWLINK`'s attributes.
fn parse_xdp(link_attrs: &[u8]) -> Option<(AttachMode, u32)> {
    let (_, xdp) = attrs(link_attrs).find(|(t, _)| *t == IFLA_XDP)?;
    let mut mode = None;
    let mut id = None;
    for (t, p) in attrs(xdp) {
        match t {
            IFLA_XDP_ATTACHED => {
                mode = match p.first()? {
                    1 => Some(AttachMode::Native),
                    2 => Some(AttachMode::Generic),
                    3 => Some(AttachMode::Offload),
                    4 => Some(AttachMode::Multi),
                    _ => None,
                }
            }
            IFLA_XDP_PROG_ID => {
                id = p
                    .get(0..4)
                    .map(|b| u32::from_ne_bytes([b[0], b[1], b[2], b[3]]))
            }
            _ => {}
        }
    }
    Some((mode?, id.unwrap_or(0)))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn attr(ty: u16, payload: &[u8]) -> Vec<u8> {
        let len = 4 + payload.len();
        let mut v = Vec::new();
        v.extend_from_slice(&(len as u16).to_ne_bytes());
        v.extend_from_slice(&ty.to_ne_bytes());
        v.extend_from_slice(payload);
        v.resize(align4(v.len()), 0);
        v
    }

    #[test]
    fn reads_mode_and_program_id_from_the_nested_xdp_attribute() {
        let mut inner = attr(IFLA_XDP_ATTACHED, &[2]);
        inner.extend(attr(IFLA_XDP_PROG_ID, &77u32.to_ne_bytes()));
        let mut link = attr(3, b"eth0\0"); // IFLA_IFNAME first
        link.extend(attr(IFLA_XDP | 0x8000, &inner)); // NLA_F_NESTED set
        assert_eq!(parse_xdp(&link), Some((AttachMode::Generic, 77)));
    }

    #[test]
    fn nothing_attached_reads_as_none() {
        let inner = attr(IFLA_XDP_ATTACHED, &[0]);
        let link = attr(IFLA_XDP, &inner);
        assert_eq!(parse_xdp(&link), None);
        assert_eq!(parse_xdp(&attr(3, b"eth0\0")), None);
    }
}
