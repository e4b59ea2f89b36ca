//! Loads the XDP program onto an interface and pins it ([`super::pins`]), so it keeps
//! answering when the process that loaded it exits, and so a later run (or the agent after a
//! restart) finds it again.
//!
//! A second `load` finds the pinned link and leaves it alone: no detach, no gap. A `load` after a
//! crash between pinning the maps and the link reuses the pinned maps, so no VIP is lost.
//! `unload` removes exactly these pins (dropping the last reference to the link detaches the
//! program) and the directory if it is then empty.

use std::{
    fmt,
    path::{Path, PathBuf},
};

use announcer_ebpf::maps::PROGRAM;
use aya::{
    EbpfLoader,
    programs::{Xdp, XdpMode, links::FdLink, links::PinnedLink},
};

use super::{
    error::{Error, Result},
    pins::{PINNED_MAPS, PinLayout},
    sys::{linkinfo, netif},
    table::Dataplane,
};

/// The compiled XDP object, built by `build.rs`.
pub static OBJECT: &[u8] = aya::include_bytes_aligned!(concat!(env!("OUT_DIR"), "/announcer-xdp"));

/// How to attach.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Default)]
pub enum Mode {
    /// Native (driver) mode, falling back to generic mode with a logged reason.
    #[default]
    Auto,
    /// Native mode only.
    Native,
    /// Generic (skb) mode only: works on every interface, slower.
    Generic,
}

impl fmt::Display for Mode {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            Mode::Auto => "auto",
            Mode::Native => "native",
            Mode::Generic => "generic",
        })
    }
}

/// What `load` did.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct LoadReport {
    /// Interface name.
    pub iface: String,
    /// Interface index.
    pub ifindex: u32,
    /// `Some(mode)` when this call attached the program; `None` when it found it attached.
    pub attached: Option<Mode>,
    /// Why native mode was not used, when `Auto` fell back.
    pub fallback_reason: Option<String>,
    /// When a stale pin was replaced: the index its link was attached to (0 if detached). The
    /// VIP entries were re-keyed to the new index.
    pub stale_ifindex: Option<u32>,
    /// Kernel id of the running program.
    pub program_id: u32,
}

/// Attaches the program to `iface` (or finds it attached) and pins link and maps.
pub fn load(root: &Path, iface: &str, mode: Mode) -> Result<LoadReport> {
    let ifindex = netif::ifindex(iface)?;
    let pins = PinLayout::new(root, iface);
    ensure_bpffs(root)?;
    std::fs::create_dir_all(pins.dir()).map_err(|e| match e.kind() {
        std::io::ErrorKind::PermissionDenied => Error::Privileges {
            action: "create pins on bpffs",
            source: e,
        },
        _ => Error::io(format!("creating {}", pins.dir().display()), e),
    })?;

    let mut stale = None;
    if pins.is_loaded() {
        let attached_to = linkinfo::xdp_link_ifindex(&pins.link())
            .map_err(|e| Error::bpf(format!("reading {}", pins.link().display()), e))?;
        if attached_to == ifindex {
            let program_id = pins.program_id()?;
            return Ok(LoadReport {
                iface: iface.to_owned(),
                ifindex,
                attached: None,
                fallback_reason: None,
                stale_ifindex: None,
                program_id,
            });
        }
        // The interface was deleted (link detached, ifindex 0) or recreated (new index): the pin
        // is stale. Replace the attachment, keep the maps and move their entries over.
        tracing::warn!(%iface, attached_to, ifindex, "pinned link is stale (interface recreated?); re-attaching");
        std::fs::remove_file(pins.link())
            .map_err(|e| Error::io(format!("removing {}", pins.link().display()), e))?;
        stale = Some(attached_to);
    }

    let (mut ebpf, program_id) = load_object(&pins)?;
    let program = xdp(&mut ebpf);

    let (link_id, used, fallback_reason) = match mode {
        Mode::Native => (attach(program, iface, Mode::Native)?, Mode::Native, None),
        Mode::Generic => (attach(program, iface, Mode::Generic)?, Mode::Generic, None),
        Mode::Auto => match attach(program, iface, Mode::Native) {
            Ok(id) => (id, Mode::Native, None),
            Err(e) => {
                let reason = e.to_string();
                tracing::warn!(%iface, %reason, "native XDP unavailable, falling back to generic mode");
                (
                    attach(program, iface, Mode::Generic)?,
                    Mode::Generic,
                    Some(reason),
                )
            }
        },
    };
    let link = program
        .take_link(link_id)
        .map_err(|e| Error::bpf("taking the XDP link", e))?;
    let link = FdLink::try_from(link).map_err(|e| Error::bpf("converting the XDP link", e))?;
    link.pin(pins.link())
        .map_err(|e| Error::bpf(format!("pinning {}", pins.link().display()), e))?;
    tracing::info!(%iface, mode = %used, program_id, "XDP responder attached");
    if stale.is_some() {
        let moved = Dataplane::open(root, iface)?.rekey()?;
        tracing::info!(%iface, moved, "VIP entries moved to the new interface index");
    }
    Ok(LoadReport {
        iface: iface.to_owned(),
        ifindex,
        attached: Some(used),
        fallback_reason,
        stale_ifindex: stale,
        program_id,
    })
}

/// Loads and verifies the object with its maps opened from (or created at) the pins.
fn load_object(pins: &PinLayout) -> Result<(aya::Ebpf, u32)> {
    let mut loader = EbpfLoader::new();
    let map_paths: Vec<(&str, PathBuf)> = PINNED_MAPS.iter().map(|m| (*m, pins.map(m))).collect();
    for (name, path) in &map_paths {
        loader.map_pin_path(name, path.as_path());
    }
    let mut ebpf = loader
        .load(OBJECT)
        .map_err(|e| Error::bpf("loading the XDP object", e))?;
    let program = xdp(&mut ebpf);
    program
        .load()
        .map_err(|e| Error::bpf("verifying the XDP program", e))?;
    let program_id = program
        .info()
        .map_err(|e| Error::bpf("reading program info", e))?
        .id();
    Ok((ebpf, program_id))
}

fn xdp(ebpf: &mut aya::Ebpf) -> &mut Xdp {
    ebpf.program_mut(PROGRAM)
        .expect("the object defines the program")
        .try_into()
        .expect("the program is XDP")
}

/// Swaps the running program for this build's, atomically (`bpf_link_update`): the link, its
/// pin and the maps stay, so no request goes unanswered during an upgrade. Returns the new
/// program id.
pub fn replace(root: &Path, iface: &str) -> Result<u32> {
    let ifindex = netif::ifindex(iface)?;
    let pins = PinLayout::new(root, iface);
    if !pins.is_loaded()
        || linkinfo::xdp_link_ifindex(&pins.link())
            .map_err(|e| Error::bpf(format!("reading {}", pins.link().display()), e))?
            != ifindex
    {
        return Err(Error::NotLoaded(iface.to_owned()));
    }
    let (mut ebpf, program_id) = load_object(&pins)?;
    let link = PinnedLink::from_pin(pins.link())
        .map_err(|e| Error::bpf(format!("opening {}", pins.link().display()), e))?;
    let link = aya::programs::xdp::XdpLink::try_from(FdLink::from(link))
        .map_err(|e| Error::bpf("opening the XDP link", e))?;
    xdp(&mut ebpf)
        .attach_to_link(link)
        .map_err(|e| Error::bpf("replacing the program (bpf_link_update)", e))?;
    // Dropping `ebpf` closes our fds only: the pinned link now holds the new program.
    tracing::info!(%iface, program_id, "XDP responder replaced in place");
    Ok(program_id)
}

fn attach(program: &mut Xdp, iface: &str, mode: Mode) -> Result<aya::programs::xdp::XdpLinkId> {
    let (flags, name) = match mode {
        Mode::Native => (XdpMode::Driver, "native"),
        Mode::Generic | Mode::Auto => (XdpMode::Skb, "generic"),
    };
    program
        .attach(iface, flags)
        .map_err(|e| match Error::bpf("attaching", e) {
            p @ Error::Privileges { .. } => p,
            Error::Bpf { source, .. } => {
                let mut reason = source.to_string();
                let mut cur = source.source();
                while let Some(s) = cur {
                    reason = format!("{reason}: {s}");
                    cur = s.source();
                }
                Error::XdpUnsupported {
                    iface: iface.to_owned(),
                    mode: name,
                    reason,
                }
            }
            other => other,
        })
}

/// What `unload` removed.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct UnloadReport {
    /// Pins removed.
    pub removed: Vec<PathBuf>,
}

/// Detaches the program from `iface` and removes exactly the pins `load` made.
pub fn unload(root: &Path, iface: &str) -> Result<UnloadReport> {
    let pins = PinLayout::new(root, iface);
    if !pins.dir().exists() {
        return Err(Error::NotLoaded(iface.to_owned()));
    }
    let mut report = UnloadReport::default();
    let names = std::iter::once("link").chain(PINNED_MAPS);
    for name in names {
        let path = pins.dir().join(name);
        match std::fs::remove_file(&path) {
            Ok(()) => report.removed.push(path),
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => {}
            Err(e) => return Err(Error::io(format!("removing {}", path.display()), e)),
        }
    }
    // Only succeeds if nothing else lives there; anything foreign is left alone.
    let _ = std::fs::remove_dir(pins.dir());
    tracing::info!(%iface, removed = report.removed.len(), "XDP responder unloaded");
    Ok(report)
}

const BPF_FS_MAGIC: i64 = 0xcafe4a11;

/// Where bpffs is conventionally mounted.
const BPFFS: &str = "/sys/fs/bpf";

/// Makes sure the pin root is on bpffs. If it lies under `/sys/fs/bpf` and nothing is mounted
/// there (minimal hosts and some container setups), mounts bpffs there first, as bpftool does.
fn ensure_bpffs(root: &Path) -> Result<()> {
    if on_bpffs(root)? {
        return Ok(());
    }
    if root.starts_with(BPFFS) && !on_bpffs(Path::new(BPFFS))? {
        use nix::mount::{MsFlags, mount};
        if private_mount_namespace() {
            return Err(Error::EphemeralBpffs(root.to_owned()));
        }
        std::fs::create_dir_all(BPFFS).map_err(|e| Error::io(format!("creating {BPFFS}"), e))?;
        mount(
            Some("bpf"),
            BPFFS,
            Some("bpf"),
            MsFlags::empty(),
            Some("mode=0700"),
        )
        .map_err(|e| {
            let source = std::io::Error::from(e);
            if e == nix::errno::Errno::EPERM {
                Error::Privileges {
                    action: "mount bpffs at /sys/fs/bpf",
                    source,
                }
            } else {
                Error::io(format!("mounting bpffs at {BPFFS}"), source)
            }
        })?;
        tracing::info!("mounted bpffs at {BPFFS}");
        if on_bpffs(root)? {
            return Ok(());
        }
    }
    Err(Error::NoBpffs(root.to_owned()))
}

/// Whether this process lives in another mount namespace than PID 1 (of its PID namespace):
/// then a filesystem it mounts disappears with the namespace. In a container PID 1 shares the
/// container's mount namespace, so this is false there; under `ip netns exec` it is true.
/// If PID 1's namespace cannot be read (a sandbox that hides it), the parent's is compared:
/// `ip netns exec` unshares and then runs the command in its own process, so the parent is
/// the shell that started it.
fn private_mount_namespace() -> bool {
    let ns = |pid: &str| std::fs::read_link(format!("/proc/{pid}/ns/mnt")).ok();
    let Some(own) = ns("self") else {
        return false; // No /proc: cannot tell, behave as before.
    };
    let parent = nix::unistd::getppid().as_raw().to_string();
    match ns("1").or_else(|| ns(&parent)) {
        Some(other) => own != other,
        None => false,
    }
}

/// Whether the nearest existing ancestor of `path` is on bpffs.
fn on_bpffs(path: &Path) -> Result<bool> {
    let mut probe = path;
    while !probe.exists() {
        probe = probe.parent().unwrap_or(Path::new("/"));
    }
    let st = nix::sys::statfs::statfs(probe)
        .map_err(|e| Error::io(format!("statfs {}", probe.display()), e.into()))?;
    Ok(st.filesystem_type().0 as i64 == BPF_FS_MAGIC)
}
