//! Interface facts the data plane needs: index and hardware address.
//!
//! Both come from calls that honour the caller's network namespace (`if_nametoindex`,
//! `getifaddrs`), never from `/sys/class/net`, which shows the namespace `/sys` was mounted in.

use announcer_ebpf::wire::MacAddr;

use crate::error::{Error, Result};

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
