//! Interface facts the data plane needs: index and hardware address.
//!
//! Both come from calls that honour the caller's network namespace (`if_nametoindex`,
//! `getifaddrs`), never from `/sys/class/net`, which shows the namespace `/sys` was mounted in.

use announcer_ebpf::wire::MacAddr;

use crate::dataplane::error::{Error, Result};

/// The index of interface `name` in the current network namespace.
pub fn ifindex(name: &str) -> Result<u32> {
    nix::net::if_::if_nametoindex(name).map_err(|_| Error::NoSuchInterface(name.to_owned()))
}

/// The hardware address of interface `name`.
pub fn mac(name: &str) -> Result<MacAddr> {
    let addrs = nix::ifaddrs::getifaddrs()
        .map_err(|e| Error::io("listing interfaces", std::io::Error::from(e)))?;
    for a in addrs {
        if a.interface_name != name {
            continue;
        }
        if let Some(ll) = a.address.as_ref().and_then(|s| s.as_link_addr())
            && let Some(m) = ll.addr()
        {
            return Ok(MacAddr(m));
        }
    }
    Err(Error::NoSuchInterface(name.to_owned()))
}

/// Whether the NIC strips 802.1Q tags on receive (`rx-vlan-offload`, `ETH_FLAG_RXVLAN`), read
/// with the `ETHTOOL_GFLAGS` ioctl; `None` if the driver does not say. Hardware that strips tags
/// hides them from XDP, so requests on tagged VIPs would go unanswered (veth does not).
pub fn rx_vlan_offload(name: &str) -> Option<bool> {
    const SIOCETHTOOL: libc::c_ulong = 0x8946;
    const ETHTOOL_GFLAGS: u32 = 0x25;
    const ETH_FLAG_RXVLAN: u32 = 1 << 8;
    #[repr(C)]
    struct EthtoolValue {
        cmd: u32,
        data: u32,
    }
    let mut value = EthtoolValue {
        cmd: ETHTOOL_GFLAGS,
        data: 0,
    };
    // SAFETY: a zeroed ifreq is valid; we fill the name (NUL-terminated, ≤ 15 bytes) and point
    // ifru_data at `value`, which outlives the ioctl.
    unsafe {
        let mut req: libc::ifreq = std::mem::zeroed();
        if name.len() >= req.ifr_name.len() {
            return None;
        }
        for (d, s) in req.ifr_name.iter_mut().zip(name.bytes()) {
            *d = s as libc::c_char;
        }
        req.ifr_ifru.ifru_data = (&mut value as *mut EthtoolValue).cast();
        let fd = libc::socket(libc::AF_INET, libc::SOCK_DGRAM | libc::SOCK_CLOEXEC, 0);
        if fd < 0 {
            return None;
        }
        let r = libc::ioctl(fd, SIOCETHTOOL as _, &mut req);
        libc::close(fd);
        (r == 0).then_some(value.data & ETH_FLAG_RXVLAN != 0)
    }
}
