//! Loads the XDP program onto an interface and pins it ([`super::pins`]), so it keeps
//! answering when the process that loaded it exits, and so a later run (or the agent after a
//! restart) finds it again.
//!
//! **The running program follows the binary.** [`load`] on an interface that already runs a
//! pinned program verifies this build's program against the pinned maps and compares the
//! kernel's *program tag* (a hash of the instructions, map references zeroed) with the running
//! one's:
//! * same tag: nothing is swapped and the verified copy is dropped (the report says so);
//! * different tag: the program is swapped on the pinned link with `bpf_link_update`, which is
//!   atomic: every frame is handled by the old or the new program, the maps stay, no gap.
//!
//! Why the tag rather than a version number read from the running program: the tag needs no
//! cooperation from the old program (builds from before this check carry no version to read),
//! and it cannot lie: any change to the instructions changes it, including one somebody forgot
//! to bump a version for, while a rebuild of the same source swaps nothing. The price is a
//! verification on every start (tens of milliseconds, done before the election starts). The
//! version constant ([`announcer_ebpf::version::PROGRAM_VERSION`]) is an instruction immediate,
//! so bumping it is one way to change the tag on purpose; [`Object::with_version`] stamps
//! another into this build's object, which is how tests get a differing program.
//!
//! **Map layouts.** Each pinned map is checked before loading: type, key and value size,
//! capacity ([`super::pins::expected_shape`]) and the layout version pinned alongside in the
//! `LAYOUT` map (absent means version 1, the layout before it was pinned). A map that does not
//! match is rebuilt without a gap in answering: the new map is created and pinned under a
//! temporary name, the entries are copied over (when type, key and value size are unchanged
//! and the version is one this build reads), the program is swapped onto the new maps, then
//! the temporary pin is renamed over the old one.
//!
//! **Mode.** A program attached in another mode than the one asked for (`native` vs `generic`;
//! `auto` accepts either) is re-attached: the kernel refuses native and generic XDP on one
//! interface at once, so this is a detach and an attach with everything else prepared first;
//! the gap is measured and reported ([`ModeChange::gap`]).
//!
//! A `load` after a crash between pinning the maps and the link reuses the pinned maps, so no
//! VIP is lost. `unload` removes exactly these pins (dropping the last reference to the link
//! detaches the program) and the directory if it is then empty; [`cleanup`] removes every pin
//! under a pin root, detaching first.

use std::{
    borrow::Cow,
    fmt, io,
    os::fd::AsFd,
    path::{Path, PathBuf},
    time::{Duration, Instant},
};

use announcer_ebpf::{
    maps::{LAYOUT, PROGRAM},
    version::{MAP_LAYOUT_VERSION, PROGRAM_VERSION, stamp_bytes},
};
use aya::{
    EbpfLoader,
    programs::{Xdp, XdpMode, links::FdLink, links::PinnedLink},
};

use super::{
    error::{Error, Result},
    pins::{DATA_MAPS, PINNED_MAPS, PROGRAM_PIN, PinLayout, expected_shape},
    sys::{
        bpfobj, linkinfo, netif,
        xdp_query::{self, AttachMode},
    },
    table::Dataplane,
};

pub use super::sys::bpfobj::ProgramTag;

/// The compiled XDP object, built by `build.rs`.
pub static OBJECT: &[u8] = aya::include_bytes_aligned!(concat!(env!("OUT_DIR"), "/announcer-xdp"));

/// Layout versions whose data maps this build reads as its own (1: the same maps, before the
/// version was pinned).
const COMPATIBLE_LAYOUTS: [u32; 2] = [1, MAP_LAYOUT_VERSION];

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

/// An XDP object to load: this build's, or this build's with another version stamped in.
#[derive(Clone)]
pub struct Object {
    bytes: Cow<'static, [u8]>,
    version: u32,
}

impl fmt::Debug for Object {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Object")
            .field("version", &self.version)
            .finish_non_exhaustive()
    }
}

impl Object {
    /// This build's program.
    pub fn embedded() -> Self {
        Object {
            bytes: Cow::Borrowed(OBJECT),
            version: PROGRAM_VERSION,
        }
    }

    /// This build's program with `version` in place of [`PROGRAM_VERSION`]: the same code
    /// under another tag, as a newer build that bumped the version would run. For tests and
    /// upgrade drills (`announcer load --program-version N`).
    pub fn with_version(version: u32) -> Result<Self> {
        const LD_IMM64: u8 = 0x18;
        let from = stamp_bytes(PROGRAM_VERSION);
        let at: Vec<usize> = (0..OBJECT.len().saturating_sub(16))
            .filter(|&i| OBJECT[i] == LD_IMM64 && OBJECT[i + 2..i + 16] == from)
            .collect();
        let [at] = at[..] else {
            return Err(Error::io(
                "stamping a version into the XDP object",
                io::Error::new(
                    io::ErrorKind::InvalidData,
                    format!(
                        "expected one ld_imm64 of the program stamp, found {}",
                        at.len()
                    ),
                ),
            ));
        };
        let mut bytes = OBJECT.to_vec();
        bytes[at + 4..at + 8].copy_from_slice(&version.to_le_bytes());
        Ok(Object {
            bytes: Cow::Owned(bytes),
            version,
        })
    }

    /// The program version stamped in.
    pub fn version(&self) -> u32 {
        self.version
    }
}

/// What `load` did.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct LoadReport {
    /// Interface name.
    pub iface: String,
    /// Interface index.
    pub ifindex: u32,
    /// `Some(mode)` when this call attached the program (first load, stale pin, mode change);
    /// `None` when it found it attached.
    pub attached: Option<Mode>,
    /// Why native mode was not used, when `Auto` fell back.
    pub fallback_reason: Option<String>,
    /// When a stale pin was replaced: the index its link was attached to (0 if detached). The
    /// VIP entries were re-keyed to the new index.
    pub stale_ifindex: Option<u32>,
    /// Kernel id of the running program.
    pub program_id: u32,
    /// Its tag.
    pub tag: ProgramTag,
    /// When a running program with another tag was swapped for this one: what ran before.
    pub swapped: Option<Swap>,
    /// When the program was re-attached in another mode.
    pub mode_change: Option<ModeChange>,
    /// Pinned maps rebuilt because their layout differed.
    pub migrated: Vec<Migration>,
}

impl LoadReport {
    /// Whether the running program was left exactly as found.
    pub fn unchanged(&self) -> bool {
        self.attached.is_none() && self.swapped.is_none() && self.migrated.is_empty()
    }
}

/// The program a swap replaced.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Swap {
    /// Its kernel id.
    pub from_id: u32,
    /// Its tag (`None`: unreadable, see [`running_program`]).
    pub from_tag: Option<ProgramTag>,
}

/// A re-attachment in another mode.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct ModeChange {
    /// The mode it ran in.
    pub from: AttachMode,
    /// From the detach to the end of the attach: no XDP program ran meanwhile.
    pub gap: Duration,
}

/// One pinned map rebuilt.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Migration {
    /// The map.
    pub map: &'static str,
    /// What differed.
    pub why: String,
    /// Entries carried over.
    pub copied: usize,
    /// Entries left behind (layout not convertible, or no room).
    pub dropped: usize,
}

/// Options of [`load_with`].
#[derive(Clone, Debug)]
pub struct LoadOptions {
    /// The object to run.
    pub object: Object,
    /// Swap the program even when the running one has the same tag (`load --replace`).
    pub force_swap: bool,
}

impl Default for LoadOptions {
    fn default() -> Self {
        LoadOptions {
            object: Object::embedded(),
            force_swap: false,
        }
    }
}

/// Makes `iface` run this build's program in `mode`, pinned under `root`: attaches it, swaps a
/// running program whose tag differs, re-attaches one running in another mode, migrates maps
/// of another layout (see the module docs).
pub fn load(root: &Path, iface: &str, mode: Mode) -> Result<LoadReport> {
    load_with(root, iface, mode, &LoadOptions::default())
}

/// Swaps the running program for this build's even if identical (`bpf_link_update`): the
/// link, its pin and the maps stay. Returns the new program id. [`Error::NotLoaded`] if
/// nothing (or only a stale pin) is attached.
pub fn replace(root: &Path, iface: &str) -> Result<u32> {
    let ifindex = netif::ifindex(iface)?;
    let pins = PinLayout::new(root, iface);
    if !pins.is_loaded() || link_ifindex(&pins)? != ifindex {
        return Err(Error::NotLoaded(iface.to_owned()));
    }
    let opts = LoadOptions {
        force_swap: true,
        ..LoadOptions::default()
    };
    Ok(load_with(root, iface, Mode::Auto, &opts)?.program_id)
}

fn link_ifindex(pins: &PinLayout) -> Result<u32> {
    linkinfo::xdp_link_ifindex(&pins.link())
        .map_err(|e| Error::bpf(format!("reading {}", pins.link().display()), e))
}

/// What to do with one pinned map.
enum Plan {
    /// Open the pin (or create and pin the map if absent).
    Pin,
    /// Create a new map pinned at the temporary path, copy (if `copy`), rename over the pin.
    Rebuild { why: String, copy: bool },
}

/// The layout version the pins under `pins` carry: `None` if there are none at all.
fn pinned_layout(pins: &PinLayout) -> Result<Option<u32>> {
    let path = pins.map(LAYOUT);
    if !path.exists() {
        let any = DATA_MAPS.iter().any(|m| pins.map(m).exists());
        return Ok(any.then_some(1));
    }
    let read = || -> io::Result<Option<u32>> {
        let fd = bpfobj::obj_get(&path)?;
        let shape = bpfobj::map_shape(fd.as_fd())?;
        if shape != expected_shape(LAYOUT) {
            return Ok(Some(0));
        }
        let v = bpfobj::map_lookup(fd.as_fd(), &shape, &0u32.to_ne_bytes())?;
        Ok(Some(v.map_or(0, |b| {
            u32::from_ne_bytes([b[0], b[1], b[2], b[3]])
        })))
    };
    read().map_err(|e| Error::io(format!("reading {}", path.display()), e))
}

fn plan(pins: &PinLayout) -> Result<Vec<(&'static str, Plan)>> {
    let version = pinned_layout(pins)?;
    let compatible = version.is_none_or(|v| COMPATIBLE_LAYOUTS.contains(&v));
    let mut plans = Vec::new();
    for name in DATA_MAPS.into_iter().chain([LAYOUT]) {
        let path = pins.map(name);
        let want = expected_shape(name);
        let plan = if !path.exists() {
            Plan::Pin
        } else {
            let have = bpfobj::obj_get(&path)
                .and_then(|fd| bpfobj::map_shape(fd.as_fd()))
                .map_err(|e| Error::io(format!("reading {}", path.display()), e))?;
            if name == LAYOUT {
                if have == want {
                    Plan::Pin
                } else {
                    Plan::Rebuild {
                        why: format!("{have}, expected {want}"),
                        copy: false,
                    }
                }
            } else if !compatible {
                Plan::Rebuild {
                    why: format!(
                        "layout version {} is not one this build reads ({COMPATIBLE_LAYOUTS:?})",
                        version.unwrap_or(0)
                    ),
                    copy: false,
                }
            } else if have != want {
                let same_entries = have.map_type == want.map_type
                    && have.key_size == want.key_size
                    && have.value_size == want.value_size;
                Plan::Rebuild {
                    why: format!("{have}, expected {want}"),
                    copy: same_entries,
                }
            } else {
                Plan::Pin
            }
        };
        plans.push((name, plan));
    }
    Ok(plans)
}

/// Where a rebuilt map is pinned until the swap (bpffs refuses dots in names).
fn temporary_pin(pins: &PinLayout, name: &str) -> PathBuf {
    pins.dir().join(format!("{name}-new"))
}

/// Copies every entry of the map pinned at `from` into the one pinned at `to`.
fn copy_entries(from: &Path, to: &Path) -> io::Result<(usize, usize)> {
    let (src, dst) = (bpfobj::obj_get(from)?, bpfobj::obj_get(to)?);
    let shape = bpfobj::map_shape(src.as_fd())?;
    let (mut copied, mut dropped) = (0, 0);
    for key in bpfobj::map_keys(src.as_fd(), &shape)? {
        let Some(value) = bpfobj::map_lookup(src.as_fd(), &shape, &key)? else {
            continue;
        };
        match bpfobj::map_update(dst.as_fd(), &key, &value) {
            Ok(()) => copied += 1,
            Err(e) if e.raw_os_error() == Some(libc::E2BIG) => dropped += 1,
            Err(e) => return Err(e),
        }
    }
    Ok((copied, dropped))
}

/// Number of entries of the map pinned at `path` (0 if unreadable).
fn count_entries(path: &Path) -> usize {
    bpfobj::obj_get(path)
        .and_then(|fd| {
            let shape = bpfobj::map_shape(fd.as_fd())?;
            bpfobj::map_keys(fd.as_fd(), &shape)
        })
        .map_or(0, |k| k.len())
}

/// [`load`] with options.
pub fn load_with(root: &Path, iface: &str, mode: Mode, opts: &LoadOptions) -> Result<LoadReport> {
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
    let mut running = None;
    if pins.is_loaded() {
        let attached_to = link_ifindex(&pins)?;
        if attached_to == ifindex {
            running = Some(pins.program_id()?);
        } else {
            // The interface was deleted (link detached, ifindex 0) or recreated (new index):
            // the pin is stale. Replace the attachment, keep the maps and move their entries.
            tracing::warn!(%iface, attached_to, ifindex, "pinned link is stale (interface recreated?); re-attaching");
            std::fs::remove_file(pins.link())
                .map_err(|e| Error::io(format!("removing {}", pins.link().display()), e))?;
            stale = Some(attached_to);
        }
    }

    let plans = plan(&pins)?;
    let (mut ebpf, program_id, tag) = verify(&pins, &plans, &opts.object)?;
    let mut migrated = Vec::new();
    for (name, plan) in &plans {
        let Plan::Rebuild { why, copy } = plan else {
            continue;
        };
        let (from, to) = (pins.map(name), temporary_pin(&pins, name));
        let (copied, dropped) = if *copy {
            copy_entries(&from, &to).map_err(|e| {
                Error::io(format!("copying {} into its new layout", from.display()), e)
            })?
        } else {
            (0, count_entries(&from))
        };
        tracing::warn!(%iface, map = name, %why, copied, dropped, "pinned map has another layout; rebuilt");
        migrated.push(Migration {
            map: name,
            why: why.clone(),
            copied,
            dropped,
        });
    }

    let mut report = LoadReport {
        iface: iface.to_owned(),
        ifindex,
        attached: None,
        fallback_reason: None,
        stale_ifindex: stale,
        program_id,
        tag,
        swapped: None,
        mode_change: None,
        migrated,
    };
    let program = xdp(&mut ebpf);
    match running {
        None => {
            let (link_id, used, fallback) = attach_in(program, iface, mode)?;
            pin_link(program, link_id, &pins)?;
            pin_program(program, &pins)?;
            report.attached = Some(used);
            report.fallback_reason = fallback;
            tracing::info!(%iface, mode = %used, program_id, %tag, "XDP responder attached");
        }
        Some(old_id) => {
            let old_tag = match running_program(&pins, old_id) {
                Ok(old) => Some(old.tag),
                // Neither pinned by an older build nor readable by id without CAP_SYS_ADMIN:
                // swap (atomic, and harmless if the programs were the same), which pins it.
                Err(e) if e.raw_os_error() == Some(libc::EPERM) => {
                    tracing::warn!(%iface, program_id = old_id, "cannot read the running program's tag (no program pin, and reading it by id needs CAP_SYS_ADMIN): swapping");
                    None
                }
                Err(e) => return Err(Error::io(format!("reading program {old_id}"), e)),
            };
            let now = xdp_query::mode(ifindex)
                .map_err(|e| Error::io(format!("reading the XDP state of {iface}"), e))?;
            let wrong_mode = match (mode, now) {
                (Mode::Native, Some(from @ AttachMode::Generic))
                | (Mode::Generic, Some(from @ AttachMode::Native)) => Some(from),
                _ => None,
            };
            if let Some(from) = wrong_mode {
                report.mode_change = Some(reattach(program, iface, mode, from, &pins)?);
                pin_program(program, &pins)?;
                report.attached = Some(mode);
                tracing::info!(%iface, from = from.as_str(), to = %mode, gap = ?report.mode_change.map(|m| m.gap), program_id, "XDP responder re-attached in the requested mode");
            } else if old_tag == Some(tag) && report.migrated.is_empty() && !opts.force_swap {
                // Same instructions, same maps: keep what runs; the verified copy is dropped.
                report.program_id = old_id;
                tracing::info!(%iface, program_id = old_id, %tag, "XDP responder already running this build's program");
            } else {
                swap(program, &pins)?;
                pin_program(program, &pins)?;
                report.swapped = Some(Swap {
                    from_id: old_id,
                    from_tag: old_tag,
                });
                tracing::info!(%iface, from_id = old_id, from_tag = ?old_tag.map(|t| t.to_string()), program_id, %tag, "XDP responder swapped in place (bpf_link_update)");
            }
        }
    }
    for m in &report.migrated {
        let (tmp, pin) = (temporary_pin(&pins, m.map), pins.map(m.map));
        std::fs::rename(&tmp, &pin).map_err(|e| {
            Error::io(
                format!("renaming {} to {}", tmp.display(), pin.display()),
                e,
            )
        })?;
    }
    write_layout_version(&pins)?;
    if stale.is_some() {
        let moved = Dataplane::open(root, iface)?.rekey()?;
        tracing::info!(%iface, moved, "VIP entries moved to the new interface index");
    }
    Ok(report)
}

fn write_layout_version(pins: &PinLayout) -> Result<()> {
    let path = pins.map(LAYOUT);
    bpfobj::obj_get(&path)
        .and_then(|fd| {
            bpfobj::map_update(
                fd.as_fd(),
                &0u32.to_ne_bytes(),
                &MAP_LAYOUT_VERSION.to_ne_bytes(),
            )
        })
        .map_err(|e| {
            Error::io(
                format!("writing the layout version to {}", path.display()),
                e,
            )
        })
}

/// Loads and verifies `object` with its maps opened from (or created at) the pins, rebuilt
/// maps at their temporary pins. Returns the program's id and tag.
fn verify(
    pins: &PinLayout,
    plans: &[(&'static str, Plan)],
    object: &Object,
) -> Result<(aya::Ebpf, u32, ProgramTag)> {
    let mut loader = EbpfLoader::new();
    let mut map_paths: Vec<(&str, PathBuf)> = Vec::new();
    for (name, plan) in plans {
        let path = match plan {
            Plan::Pin => pins.map(name),
            Plan::Rebuild { .. } => {
                let tmp = temporary_pin(pins, name);
                // Left over by an interrupted migration: start again.
                let _ = std::fs::remove_file(&tmp);
                tmp
            }
        };
        map_paths.push((name, path));
    }
    for (name, path) in &map_paths {
        loader.map_pin_path(name, path.as_path());
    }
    let mut ebpf = loader
        .load(&object.bytes)
        .map_err(|e| Error::bpf("loading the XDP object", e))?;
    let program = xdp(&mut ebpf);
    program
        .load()
        .map_err(|e| Error::bpf("verifying the XDP program", e))?;
    let info = program
        .info()
        .map_err(|e| Error::bpf("reading program info", e))?;
    Ok((ebpf, info.id(), ProgramTag(info.tag().to_be_bytes())))
}

fn xdp(ebpf: &mut aya::Ebpf) -> &mut Xdp {
    ebpf.program_mut(PROGRAM)
        .expect("the object defines the program")
        .try_into()
        .expect("the program is XDP")
}

/// Attaches in `mode` (`Auto`: native, else generic with the reason).
fn attach_in(
    program: &mut Xdp,
    iface: &str,
    mode: Mode,
) -> Result<(aya::programs::xdp::XdpLinkId, Mode, Option<String>)> {
    Ok(match mode {
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
    })
}

fn pin_link(
    program: &mut Xdp,
    link_id: aya::programs::xdp::XdpLinkId,
    pins: &PinLayout,
) -> Result<()> {
    let link = program
        .take_link(link_id)
        .map_err(|e| Error::bpf("taking the XDP link", e))?;
    let link = FdLink::try_from(link).map_err(|e| Error::bpf("converting the XDP link", e))?;
    link.pin(pins.link())
        .map_err(|e| Error::bpf(format!("pinning {}", pins.link().display()), e))?;
    Ok(())
}

/// Pins `program` (the one the link now runs) at [`PinLayout::program`], replacing what was
/// pinned there: pinned under a temporary name first, then renamed over, so the pin always
/// names a program.
fn pin_program(program: &mut Xdp, pins: &PinLayout) -> Result<()> {
    let (tmp, pin) = (temporary_pin(pins, PROGRAM_PIN), pins.program());
    let _ = std::fs::remove_file(&tmp);
    program
        .pin(&tmp)
        .map_err(|e| Error::bpf(format!("pinning {}", tmp.display()), e))?;
    std::fs::rename(&tmp, &pin).map_err(|e| {
        Error::io(
            format!("renaming {} to {}", tmp.display(), pin.display()),
            e,
        )
    })
}

/// The program the pinned link runs (kernel id `id`): through the program pin when it is that
/// program, else by id. Only the second needs `CAP_SYS_ADMIN` (EPERM without it): pins made
/// by a build before the program pin, or a pin left stale by a crash between a swap and its
/// pin.
pub fn running_program(pins: &PinLayout, id: u32) -> io::Result<bpfobj::ProgramInfo> {
    match bpfobj::obj_get(&pins.program())
        .and_then(|fd| bpfobj::program_info_by_fd(bpfobj::fd_of(&fd)))
    {
        Ok(info) if info.id == id => Ok(info),
        _ => bpfobj::program_info(id),
    }
}

/// Swaps the program on the pinned link (`bpf_link_update`).
fn swap(program: &mut Xdp, pins: &PinLayout) -> Result<()> {
    let link = PinnedLink::from_pin(pins.link())
        .map_err(|e| Error::bpf(format!("opening {}", pins.link().display()), e))?;
    let link = aya::programs::xdp::XdpLink::try_from(FdLink::from(link))
        .map_err(|e| Error::bpf("opening the XDP link", e))?;
    program
        .attach_to_link(link)
        .map_err(|e| Error::bpf("replacing the program (bpf_link_update)", e))?;
    // Dropping the Ebpf later closes our fds only: the pinned link now holds the new program.
    Ok(())
}

/// Detaches the pinned link and attaches `program` in `mode`; if that fails, attaches it back
/// in the mode it ran in (so the interface keeps answering) and returns the error.
fn reattach(
    program: &mut Xdp,
    iface: &str,
    mode: Mode,
    from: AttachMode,
    pins: &PinLayout,
) -> Result<ModeChange> {
    let old = bpfobj::obj_get(&pins.link())
        .map_err(|e| Error::io(format!("opening {}", pins.link().display()), e))?;
    let start = Instant::now();
    bpfobj::link_detach(old.as_fd())
        .map_err(|e| Error::io(format!("detaching {}", pins.link().display()), e))?;
    let attached = attach(program, iface, mode);
    let gap = start.elapsed();
    std::fs::remove_file(pins.link())
        .map_err(|e| Error::io(format!("removing {}", pins.link().display()), e))?;
    drop(old);
    let link_id = match attached {
        Ok(id) => id,
        Err(e) => {
            let back = if from == AttachMode::Native {
                Mode::Native
            } else {
                Mode::Generic
            };
            tracing::error!(%iface, error = %e, "re-attaching in the requested mode failed; attaching back in {back} mode");
            let id = attach(program, iface, back)?;
            pin_link(program, id, pins)?;
            return Err(e);
        }
    };
    pin_link(program, link_id, pins)?;
    Ok(ModeChange { from, gap })
}

/// Attaches `program` to `iface` in `mode`. A failure because another program is attached
/// there comes back as [`Error::ForeignXdp`] naming it ([`xdp_query::explain_attach_failure`]):
/// this is only reached when no program of ours is attached there (a pinned one is swapped or
/// detached first), so whatever is attached is foreign.
fn attach(program: &mut Xdp, iface: &str, mode: Mode) -> Result<aya::programs::xdp::XdpLinkId> {
    let (flags, name) = match mode {
        Mode::Native => (XdpMode::Driver, "native"),
        Mode::Generic | Mode::Auto => (XdpMode::Skb, "generic"),
    };
    let explain = |e: Error| match netif::ifindex(iface) {
        Ok(ix) => xdp_query::explain_attach_failure(iface, ix, None, e),
        Err(_) => e,
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
                explain(Error::XdpUnsupported {
                    iface: iface.to_owned(),
                    mode: name,
                    reason,
                })
            }
            other => explain(other),
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
    let names = ["link", PROGRAM_PIN].into_iter().chain(PINNED_MAPS);
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

/// The program running on an interface through its pins, as `announcer_dataplane_info` shows
/// it.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Running {
    /// Kernel id.
    pub program_id: u32,
    /// Tag.
    pub tag: ProgramTag,
    /// How it is attached (read from the interface; `None` if the link is stale).
    pub mode: Option<AttachMode>,
}

/// What runs on `iface` through the pins under `root`.
pub fn running(root: &Path, iface: &str) -> Result<Running> {
    let pins = PinLayout::new(root, iface);
    if !pins.is_loaded() {
        return Err(Error::NotLoaded(iface.to_owned()));
    }
    let program_id = pins.program_id()?;
    let tag = running_program(&pins, program_id)
        .map_err(|e| Error::io(format!("reading program {program_id}"), e))?
        .tag;
    let ifindex = link_ifindex(&pins)?;
    let mode = match ifindex {
        0 => None,
        i => xdp_query::mode(i)
            .map_err(|e| Error::io(format!("reading the XDP state of {iface}"), e))?,
    };
    Ok(Running {
        program_id,
        tag,
        mode,
    })
}

/// What [`cleanup`] did.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct CleanupReport {
    /// Links detached: interface (pin directory) and the program id that ran.
    pub detached: Vec<(String, u32)>,
    /// Pins and directories removed.
    pub removed: Vec<PathBuf>,
}

/// Detaches every pinned link under `root` (all interfaces, stale ones included) and removes
/// every pin there, then the directories and `root` itself. Idempotent: a missing `root` is
/// an empty report.
///
/// Links are detached with `BPF_LINK_DETACH` before their pin goes, so the program stops even
/// if some process still holds the link open (an agent that has not exited yet).
pub fn cleanup(root: &Path) -> Result<CleanupReport> {
    let mut report = CleanupReport::default();
    let entries = match std::fs::read_dir(root) {
        Ok(e) => e,
        Err(e) if e.kind() == io::ErrorKind::NotFound => return Ok(report),
        Err(e) => return Err(Error::io(format!("listing {}", root.display()), e)),
    };
    let mut dirs: Vec<PathBuf> = entries.flatten().map(|e| e.path()).collect();
    dirs.sort();
    for dir in dirs {
        if !dir.is_dir() {
            remove(&dir, &mut report)?;
            continue;
        }
        let iface = dir
            .file_name()
            .map(|n| n.to_string_lossy().into_owned())
            .unwrap_or_default();
        let link = dir.join("link");
        if link.exists() {
            let fd = bpfobj::obj_get(&link)
                .map_err(|e| Error::io(format!("opening {}", link.display()), e))?;
            let id = PinLayout::new(root, &iface).program_id().unwrap_or(0);
            match bpfobj::link_detach(fd.as_fd()) {
                // EINVAL: not a link (a foreign pin); ENOLINK: already detached.
                Ok(()) => report.detached.push((iface.clone(), id)),
                Err(e) if matches!(e.raw_os_error(), Some(libc::EINVAL) | Some(libc::ENOLINK)) => {}
                Err(e) => return Err(Error::io(format!("detaching {}", link.display()), e)),
            }
        }
        let mut pins: Vec<PathBuf> = std::fs::read_dir(&dir)
            .map_err(|e| Error::io(format!("listing {}", dir.display()), e))?
            .flatten()
            .map(|e| e.path())
            .collect();
        pins.sort();
        for pin in pins {
            remove(&pin, &mut report)?;
        }
        remove_dir(&dir, &mut report)?;
    }
    remove_dir(root, &mut report)?;
    tracing::info!(root = %root.display(), detached = report.detached.len(), removed = report.removed.len(), "pins removed");
    Ok(report)
}

fn remove(path: &Path, report: &mut CleanupReport) -> Result<()> {
    match std::fs::remove_file(path) {
        Ok(()) => report.removed.push(path.to_owned()),
        Err(e) if e.kind() == io::ErrorKind::NotFound => {}
        Err(e) => return Err(Error::io(format!("removing {}", path.display()), e)),
    }
    Ok(())
}

fn remove_dir(path: &Path, report: &mut CleanupReport) -> Result<()> {
    match std::fs::remove_dir(path) {
        Ok(()) => report.removed.push(path.to_owned()),
        Err(e) if e.kind() == io::ErrorKind::NotFound => {}
        Err(e) => return Err(Error::io(format!("removing {}", path.display()), e)),
    }
    Ok(())
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
