//! Errors of the data plane, each with the exit code the CLI uses and the fix to print.
//!
//! Operators meet these at the command line, so every variant says what went wrong *and* what to
//! do about it ([`Error::hint`]); the exit codes follow `sysexits.h` so scripts can tell a typo
//! from a kernel that cannot run XDP.

use std::{io, net::IpAddr, path::PathBuf};

/// A data-plane error.
#[derive(Debug, thiserror::Error)]
pub enum Error {
    /// The named interface does not exist in this network namespace.
    #[error("no such interface: {0:?}")]
    NoSuchInterface(String),
    /// The operation needs privileges the process lacks.
    #[error("permission denied while trying to {action}")]
    Privileges {
        /// What was being attempted.
        action: &'static str,
        /// The underlying error (EPERM/EACCES).
        #[source]
        source: io::Error,
    },
    /// The kernel or driver cannot attach XDP in the requested mode.
    #[error("cannot attach XDP to {iface} in {mode} mode: {reason}")]
    XdpUnsupported {
        /// Interface name.
        iface: String,
        /// Requested mode.
        mode: &'static str,
        /// What the kernel said.
        reason: String,
    },
    /// Another XDP program is attached to the interface (the kernel runs one per interface, in
    /// one mode); the announcer never replaces it.
    #[error("another XDP program is attached to {iface}: id {id}, name {name:?}, {mode} mode")]
    ForeignXdp {
        /// Interface name.
        iface: String,
        /// Its kernel id.
        id: u32,
        /// Its name ("" if unknown).
        name: String,
        /// How it is attached.
        mode: &'static str,
    },
    /// bpffs is not mounted where the pins go.
    #[error("{0} is not on a BPF filesystem (bpffs)")]
    NoBpffs(PathBuf),
    /// bpffs is not mounted where the pins go, and one mounted now would live only as long
    /// as this process's private mount namespace (`ip netns exec` makes one and remounts
    /// `/sys`): the pins would vanish when the command exits.
    #[error(
        "{0} is not on a BPF filesystem (bpffs), and this process runs in a private mount namespace (as under `ip netns exec`, which remounts /sys): a bpffs mounted here would vanish, with the pins, when it exits"
    )]
    EphemeralBpffs(PathBuf),
    /// The address is of the wrong family or kind for this operation.
    #[error("address family mismatch: {0}")]
    FamilyMismatch(String),
    /// The address can never be a VIP (multicast, unspecified, loopback, link-local IPv4...).
    #[error("{addr} cannot be a VIP: {why}")]
    BadAddress {
        /// The address given.
        addr: IpAddr,
        /// Why it is refused.
        why: &'static str,
    },
    /// The MAC cannot be used as a source address.
    #[error("{0} cannot be used as the answering MAC: it must be unicast and non-zero")]
    BadMac(String),
    /// VLAN id outside 1..=4094.
    #[error("VLAN id {0} is out of range: use 1 to 4094, or omit --vlan for untagged frames")]
    VlanMismatch(u16),
    /// The VIP map has no room.
    #[error("the {family} VIP map on {iface} is full ({max} entries)")]
    MapFull {
        /// Interface name.
        iface: String,
        /// "IPv4" or "IPv6".
        family: &'static str,
        /// Capacity.
        max: u32,
    },
    /// Nothing is loaded on the interface.
    #[error("announcer is not loaded on {0}")]
    NotLoaded(String),
    /// The VIP is not in the map.
    #[error("no VIP {addr} on {iface} (vlan {vlan})")]
    NoSuchVip {
        /// The address.
        addr: IpAddr,
        /// Interface name.
        iface: String,
        /// VLAN id (0 = untagged).
        vlan: u16,
    },
    /// Any other BPF failure, with context.
    #[error("{context}: {source}")]
    Bpf {
        /// What was being done.
        context: String,
        /// The aya error.
        #[source]
        source: Box<dyn std::error::Error + Send + Sync + 'static>,
    },
    /// Any other I/O failure, with context.
    #[error("{context}: {source}")]
    Io {
        /// What was being done.
        context: String,
        /// The error.
        #[source]
        source: io::Error,
    },
}

/// Result of the data-plane library.
pub type Result<T, E = Error> = std::result::Result<T, E>;

impl Error {
    /// The process exit code for this error (`sysexits.h`).
    pub fn exit_code(&self) -> u8 {
        match self {
            Error::FamilyMismatch(_)
            | Error::BadAddress { .. }
            | Error::BadMac(_)
            | Error::VlanMismatch(_) => 64, // EX_USAGE
            Error::NoSuchInterface(_) | Error::NoSuchVip { .. } => 66, // EX_NOINPUT
            Error::XdpUnsupported { .. } | Error::NotLoaded(_) | Error::ForeignXdp { .. } => 69, // EX_UNAVAILABLE
            Error::NoBpffs(_) | Error::EphemeralBpffs(_) => 72, // EX_OSFILE
            Error::MapFull { .. } => 73,                        // EX_CANTCREAT
            Error::Privileges { .. } => 77,                     // EX_NOPERM
            Error::Bpf { .. } | Error::Io { .. } => 1,
        }
    }

    /// What the operator should do about it.
    pub fn hint(&self) -> Option<String> {
        Some(match self {
            Error::NoSuchInterface(_) => {
                "check the name with `ip link`; in a container, run with hostNetwork".into()
            }
            Error::Privileges { .. } => {
                "run as root, or grant CAP_BPF, CAP_NET_ADMIN, CAP_NET_RAW and CAP_PERFMON".into()
            }
            Error::XdpUnsupported { mode, .. } if *mode == "native" => {
                "the driver lacks native XDP: use --mode generic (or --mode auto to fall back)".into()
            }
            Error::XdpUnsupported { .. } => {
                "XDP needs Linux 4.8+ (5.9+ for bpf_link) with CONFIG_BPF_SYSCALL, and BTF-defined maps need 5.2+".into()
            }
            Error::ForeignXdp { iface, id, .. } => format!(
                "the announcer does not replace it. Remove it if nothing needs it (`ip link set dev {iface} xdp off`, `xdpgeneric off` for generic mode; `bpftool link` lists the owner of a link-attached one, `bpftool prog show id {id}` shows it), or turn off the XDP acceleration of the CNI that put it there (Calico: `xdpEnabled: false`; Cilium: `loadBalancer.acceleration: disabled`), or announce on another interface (`--interface`, or the AddressPool's `interfaces`). Switching between native and generic mode does not help: the kernel runs one XDP program per interface, in one mode"
            ),
            Error::NoBpffs(p) => format!(
                "mount it: `mount -t bpf bpf {}` (or pick another place with --pin-root)",
                p.parent().unwrap_or(p).display()
            ),
            Error::EphemeralBpffs(_) => "mount bpffs on the host (`mount -t bpf bpf /sys/fs/bpf`), or enter only the network namespace (`nsenter --net=/run/netns/NAME announcer ...`) instead of `ip netns exec`".into(),
            Error::FamilyMismatch(_) => "give IPv4 VIPs in dotted form and IPv6 VIPs in RFC 5952 form".into(),
            Error::BadAddress { .. } => "a VIP must be a unicast address clients can reach".into(),
            Error::BadMac(_) => "omit --mac to answer with the interface's own address".into(),
            Error::VlanMismatch(_) => return None,
            Error::MapFull { .. } => "delete unused VIPs (`announcer vip list`, `vip del`)".into(),
            Error::NotLoaded(i) => format!("run `announcer load --iface {i}` first"),
            Error::NoSuchVip { .. } => "see `announcer vip list`".into(),
            Error::Bpf { .. } | Error::Io { .. } => return None,
        })
    }

    pub(crate) fn bpf(
        context: impl Into<String>,
        source: impl std::error::Error + Send + Sync + 'static,
    ) -> Self {
        let context = context.into();
        // Surface EPERM as a privilege problem wherever aya wraps it.
        let mut cur: Option<&(dyn std::error::Error + 'static)> = Some(&source);
        while let Some(e) = cur {
            if let Some(io) = e.downcast_ref::<io::Error>()
                && matches!(io.raw_os_error(), Some(libc::EPERM) | Some(libc::EACCES))
            {
                return Error::Privileges {
                    action: "use BPF",
                    source: io::Error::from_raw_os_error(io.raw_os_error().unwrap_or(libc::EPERM)),
                };
            }
            cur = e.source();
        }
        Error::Bpf {
            context,
            source: Box::new(source),
        }
    }

    pub(crate) fn io(context: impl Into<String>, source: io::Error) -> Self {
        Error::Io {
            context: context.into(),
            source,
        }
    }
}
