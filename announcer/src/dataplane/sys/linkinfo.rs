//! Which interface a pinned XDP link is attached to.
//!
//! aya exposes a link's id and program id but not the `xdp.ifindex` of `struct bpf_link_info`,
//! which is what tells a live attachment from a stale pin: when an interface is deleted its XDP
//! link is detached (ifindex 0), and a recreated interface of the same name gets a new index.
//! Two `bpf(2)` calls read it: `BPF_OBJ_GET` on the pin, then `BPF_OBJ_GET_INFO_BY_FD`.

use std::{
    ffi::CString,
    io,
    os::{
        fd::{AsRawFd, FromRawFd, OwnedFd},
        unix::ffi::OsStrExt,
    },
    path::Path,
};

const BPF_OBJ_GET: libc::c_long = 7;
const BPF_OBJ_GET_INFO_BY_FD: libc::c_long = 15;
const BPF_LINK_TYPE_XDP: u32 = 6;

use super::bpfobj::bpf;

/// `struct bpf_link_info` up to and including the XDP member of its union (offset 16), padded.
#[repr(C, align(8))]
struct LinkInfo {
    ty: u32,
    id: u32,
    prog_id: u32,
    pad: u32,
    xdp_ifindex: u32,
    rest: [u32; 11],
}

/// The interface index the pinned XDP link at `pin` is attached to (0 once detached).
pub fn xdp_link_ifindex(pin: &Path) -> io::Result<u32> {
    let path = CString::new(pin.as_os_str().as_bytes()).map_err(io::Error::other)?;
    let mut attr = [0u64; 16];
    attr[0] = path.as_ptr() as u64; // pathname
    let fd = bpf(BPF_OBJ_GET, &mut attr)?;
    // SAFETY: BPF_OBJ_GET returned a new file descriptor that we now own.
    let fd = unsafe { OwnedFd::from_raw_fd(fd as i32) };

    let mut info = LinkInfo {
        ty: 0,
        id: 0,
        prog_id: 0,
        pad: 0,
        xdp_ifindex: 0,
        rest: [0; 11],
    };
    let mut attr = [0u64; 16];
    attr[0] = fd.as_raw_fd() as u32 as u64 | ((size_of::<LinkInfo>() as u64) << 32); // bpf_fd, info_len
    attr[1] = &mut info as *mut LinkInfo as u64; // info
    bpf(BPF_OBJ_GET_INFO_BY_FD, &mut attr)?;
    if info.ty != BPF_LINK_TYPE_XDP {
        return Err(io::Error::new(
            io::ErrorKind::InvalidData,
            format!("{} is not an XDP link", pin.display()),
        ));
    }
    Ok(info.xdp_ifindex)
}
