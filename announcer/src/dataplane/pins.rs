//! Where one interface's program, link and maps are pinned on bpffs, so that they outlive the
//! process that loaded them and every later process (the CLI, the agent after a restart, the
//! metrics scrape) finds them by name.
//!
//! Pin layout, one directory per interface under the pin root (default
//! [`DEFAULT_PIN_ROOT`], `--pin-root` to change):
//!
//! ```text
//! /sys/fs/bpf/announcer/<iface>/link       the bpf_link attaching the program to <iface>
//! /sys/fs/bpf/announcer/<iface>/VIPS_V4    HashMap<VipKeyV4, VipEntry>
//! /sys/fs/bpf/announcer/<iface>/VIPS_V6    HashMap<VipKeyV6, VipEntry>
//! /sys/fs/bpf/announcer/<iface>/STATS_V4   PerCpuHashMap<VipKeyV4, VipStats>
//! /sys/fs/bpf/announcer/<iface>/STATS_V6   PerCpuHashMap<VipKeyV6, VipStats>
//! /sys/fs/bpf/announcer/<iface>/COUNTERS   PerCpuArray<u64> indexed by Outcome
//! /sys/fs/bpf/announcer/<iface>/LAYOUT     Array<u32>[1]: the maps' layout version
//! ```
//!
//! While the loader migrates a map to a new layout, the new one is pinned as `<NAME>-new`
//! next to it for the instant before it is renamed over the old pin.
//!
//! Why a module of its own: the loader writes these paths and the VIP table, the log reader
//! and `status` read them; keeping the layout here lets each depend on it without depending
//! on the others.

use std::path::{Path, PathBuf};

use announcer_ebpf::maps::{
    COUNTERS, LAYOUT, MAX_VIPS, Outcome, STATS_V4, STATS_V6, VIPS_V4, VIPS_V6, VipEntry, VipKeyV4,
    VipKeyV6, VipStats,
};
use aya::programs::links::{FdLink, PinnedLink};

use super::{
    error::{Error, Result},
    sys::bpfobj::MapShape,
};

/// Where pins go unless told otherwise.
pub const DEFAULT_PIN_ROOT: &str = "/sys/fs/bpf/announcer";

/// The maps holding entries and counters, by name.
pub const DATA_MAPS: [&str; 5] = [VIPS_V4, VIPS_V6, STATS_V4, STATS_V6, COUNTERS];

/// The maps the loader pins, by name: the data maps and [`LAYOUT`].
/// The program's pin name in an interface's directory ([`PinLayout::program`]).
pub const PROGRAM_PIN: &str = "prog";

pub const PINNED_MAPS: [&str; 6] = [VIPS_V4, VIPS_V6, STATS_V4, STATS_V6, COUNTERS, LAYOUT];

/// The shape this build's program expects of pinned map `name` (one of [`PINNED_MAPS`]).
///
/// # Panics
/// On any other name.
pub fn expected_shape(name: &str) -> MapShape {
    const HASH: u32 = 1;
    const ARRAY: u32 = 2;
    const PERCPU_HASH: u32 = 5;
    const PERCPU_ARRAY: u32 = 6;
    let size = |n: usize| n as u32;
    let (map_type, key, value, max_entries) = match name {
        VIPS_V4 => (HASH, size_of::<VipKeyV4>(), size_of::<VipEntry>(), MAX_VIPS),
        VIPS_V6 => (HASH, size_of::<VipKeyV6>(), size_of::<VipEntry>(), MAX_VIPS),
        STATS_V4 => (
            PERCPU_HASH,
            size_of::<VipKeyV4>(),
            size_of::<VipStats>(),
            MAX_VIPS,
        ),
        STATS_V6 => (
            PERCPU_HASH,
            size_of::<VipKeyV6>(),
            size_of::<VipStats>(),
            MAX_VIPS,
        ),
        COUNTERS => (PERCPU_ARRAY, 4, size_of::<u64>(), Outcome::COUNT),
        LAYOUT => (ARRAY, 4, size_of::<u32>(), 1),
        other => panic!("{other} is not a pinned map"),
    };
    MapShape {
        map_type,
        key_size: size(key),
        value_size: size(value),
        max_entries,
    }
}

/// Paths of one interface's pins.
#[derive(Clone, Debug)]
pub struct PinLayout {
    dir: PathBuf,
}

impl PinLayout {
    /// The pins of `iface` under `root`.
    pub fn new(root: impl AsRef<Path>, iface: &str) -> Self {
        Self {
            dir: root.as_ref().join(iface),
        }
    }

    /// The interface's pin directory.
    pub fn dir(&self) -> &Path {
        &self.dir
    }

    /// The pinned link.
    pub fn link(&self) -> PathBuf {
        self.dir.join("link")
    }

    /// The pinned program: the one the link runs, pinned so that its tag can be read through
    /// the pin. Reading it by id (`BPF_PROG_GET_FD_BY_ID`) needs `CAP_SYS_ADMIN`, which the
    /// DaemonSet does not grant (CAP_BPF, CAP_NET_ADMIN, CAP_NET_RAW, CAP_PERFMON).
    pub fn program(&self) -> PathBuf {
        self.dir.join(PROGRAM_PIN)
    }

    /// A pinned map.
    pub fn map(&self, name: &str) -> PathBuf {
        self.dir.join(name)
    }

    /// Whether a program is attached through these pins.
    pub fn is_loaded(&self) -> bool {
        self.link().exists()
    }

    /// Kernel id of the program the pinned link runs.
    pub fn program_id(&self) -> Result<u32> {
        let link = PinnedLink::from_pin(self.link())
            .map_err(|e| Error::bpf(format!("opening {}", self.link().display()), e))?;
        // Dropping the FdLink closes our fd only; the pin keeps the link.
        Ok(FdLink::from(link)
            .info()
            .map_err(|e| Error::bpf("reading link info", e))?
            .program_id())
    }
}

/// Interfaces with pins under `root` (a directory per interface holding the `link` pin),
/// sorted.
pub fn pinned_interfaces(root: &Path) -> Vec<String> {
    let mut v: Vec<String> = std::fs::read_dir(root)
        .into_iter()
        .flatten()
        .flatten()
        .filter(|e| e.path().join("link").exists())
        .filter_map(|e| e.file_name().into_string().ok())
        .collect();
    v.sort();
    v
}
