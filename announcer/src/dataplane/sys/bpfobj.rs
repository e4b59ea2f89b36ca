//! Raw `bpf(2)` on pinned objects: what the loader needs to compare, migrate and detach, and
//! that aya does not expose by path or by id (a program's tag by id, a pinned map's shape and
//! its entries as bytes, forcing a link's detach, pinning an fd).
//!
//! Byte-level on purpose: migrating a map whose layout is older than this build cannot go
//! through the typed maps of this build.

use std::{
    ffi::CString,
    fmt, io,
    os::{
        fd::{AsRawFd, BorrowedFd, FromRawFd, OwnedFd},
        unix::ffi::OsStrExt,
    },
    path::Path,
};

const BPF_MAP_CREATE: libc::c_long = 0;
const BPF_MAP_LOOKUP_ELEM: libc::c_long = 1;
const BPF_MAP_UPDATE_ELEM: libc::c_long = 2;
const BPF_MAP_GET_NEXT_KEY: libc::c_long = 4;
const BPF_OBJ_PIN: libc::c_long = 6;
const BPF_OBJ_GET: libc::c_long = 7;
const BPF_PROG_GET_FD_BY_ID: libc::c_long = 13;
const BPF_OBJ_GET_INFO_BY_FD: libc::c_long = 15;
const BPF_LINK_DETACH: libc::c_long = 34;

/// `BPF_MAP_TYPE_PERCPU_HASH`, `..._PERCPU_ARRAY`, `..._LRU_PERCPU_HASH`: values are per CPU.
const PER_CPU_TYPES: [u32; 3] = [5, 6, 10];

/// `bpf(cmd, attr)`; `attr` is a zeroed `union bpf_attr` whose used fields the caller set.
pub(crate) fn bpf(cmd: libc::c_long, attr: &mut [u64; 16]) -> io::Result<i64> {
    // SAFETY: `attr` is a zero-initialised, 128-byte, 8-aligned `union bpf_attr`; every
    // pointer the callers put in it points to a live buffer of the size the kernel expects for
    // that command, and the kernel reads and writes only within them.
    let r = unsafe { libc::syscall(libc::SYS_bpf, cmd, attr.as_mut_ptr(), size_of_val(attr)) };
    if r < 0 {
        Err(io::Error::last_os_error())
    } else {
        Ok(r)
    }
}

fn owned(fd: i64) -> OwnedFd {
    // SAFETY: the kernel just returned this new file descriptor; nothing else owns it.
    unsafe { OwnedFd::from_raw_fd(fd as i32) }
}

fn c_path(path: &Path) -> io::Result<CString> {
    CString::new(path.as_os_str().as_bytes()).map_err(io::Error::other)
}

/// Opens the object pinned at `path` (`BPF_OBJ_GET`).
pub fn obj_get(path: &Path) -> io::Result<OwnedFd> {
    let p = c_path(path)?;
    let mut attr = [0u64; 16];
    attr[0] = p.as_ptr() as u64;
    bpf(BPF_OBJ_GET, &mut attr).map(owned)
}

/// Pins `fd` at `path` (`BPF_OBJ_PIN`).
pub fn obj_pin(fd: BorrowedFd<'_>, path: &Path) -> io::Result<()> {
    let p = c_path(path)?;
    let mut attr = [0u64; 16];
    attr[0] = p.as_ptr() as u64;
    attr[1] = fd.as_raw_fd() as u32 as u64;
    bpf(BPF_OBJ_PIN, &mut attr).map(drop)
}

fn info_by_fd<T>(fd: BorrowedFd<'_>, info: &mut T) -> io::Result<()> {
    let mut attr = [0u64; 16];
    attr[0] = fd.as_raw_fd() as u32 as u64 | ((size_of::<T>() as u64) << 32); // bpf_fd, info_len
    attr[1] = (info as *mut T) as u64;
    bpf(BPF_OBJ_GET_INFO_BY_FD, &mut attr).map(drop)
}

/// A program's tag: the kernel's SHA-1 prefix of its instructions (map references zeroed),
/// printed as `bpftool prog` and `ip link` do (16 hex digits). Equal tags mean the same
/// instructions, whatever the program id.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct ProgramTag(pub [u8; 8]);

impl fmt::Display for ProgramTag {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        self.0.iter().try_for_each(|b| write!(f, "{b:02x}"))
    }
}

/// What the kernel says about a loaded program.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ProgramInfo {
    /// Kernel id.
    pub id: u32,
    /// Tag.
    pub tag: ProgramTag,
    /// Name (at most 15 bytes).
    pub name: String,
}

/// `struct bpf_prog_info` up to and including `name`.
#[repr(C, align(8))]
struct ProgInfoRaw {
    ty: u32,
    id: u32,
    tag: [u8; 8],
    lens: [u32; 2],
    insns: [u64; 3],
    uid: u32,
    nr_map_ids: u32,
    map_ids: u64,
    name: [u8; 16],
}

/// The program with kernel id `id`.
pub fn program_info(id: u32) -> io::Result<ProgramInfo> {
    let mut attr = [0u64; 16];
    attr[0] = u64::from(id);
    let fd = bpf(BPF_PROG_GET_FD_BY_ID, &mut attr).map(owned)?;
    program_info_by_fd(fd_of(&fd))
}

/// The program behind `fd`.
pub fn program_info_by_fd(fd: BorrowedFd<'_>) -> io::Result<ProgramInfo> {
    // SAFETY: all-zero is a valid value of this plain-integer struct.
    let mut raw: ProgInfoRaw = unsafe { std::mem::zeroed() };
    info_by_fd(fd, &mut raw)?;
    let len = raw.name.iter().position(|&b| b == 0).unwrap_or(16);
    Ok(ProgramInfo {
        id: raw.id,
        tag: ProgramTag(raw.tag),
        name: String::from_utf8_lossy(&raw.name[..len]).into_owned(),
    })
}

/// The shape of a map: what must match for a program built for one to use the other.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct MapShape {
    /// `BPF_MAP_TYPE_*`.
    pub map_type: u32,
    /// Key size, bytes.
    pub key_size: u32,
    /// Value size (per CPU for per-CPU maps), bytes.
    pub value_size: u32,
    /// Capacity.
    pub max_entries: u32,
}

impl fmt::Display for MapShape {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(
            f,
            "type {} key {} B value {} B max {}",
            self.map_type, self.key_size, self.value_size, self.max_entries
        )
    }
}

/// `struct bpf_map_info` up to `map_flags`, padded.
#[repr(C, align(8))]
struct MapInfoRaw {
    ty: u32,
    id: u32,
    key_size: u32,
    value_size: u32,
    max_entries: u32,
    map_flags: u32,
    rest: [u32; 18],
}

/// The shape of the map behind `fd`.
pub fn map_shape(fd: BorrowedFd<'_>) -> io::Result<MapShape> {
    // SAFETY: all-zero is a valid value of this plain-integer struct.
    let mut raw: MapInfoRaw = unsafe { std::mem::zeroed() };
    info_by_fd(fd, &mut raw)?;
    Ok(MapShape {
        map_type: raw.ty,
        key_size: raw.key_size,
        value_size: raw.value_size,
        max_entries: raw.max_entries,
    })
}

/// Creates a map of `shape` (no BTF, no name): what an older build's pins look like to the
/// tests, and nothing the loader itself needs.
pub fn map_create(shape: MapShape) -> io::Result<OwnedFd> {
    let mut attr = [0u64; 16];
    attr[0] = u64::from(shape.map_type) | (u64::from(shape.key_size) << 32);
    attr[1] = u64::from(shape.value_size) | (u64::from(shape.max_entries) << 32);
    bpf(BPF_MAP_CREATE, &mut attr).map(owned)
}

/// Bytes of one value as `lookup`/`update` pass it: per-CPU values come as one 8-byte-aligned
/// slot per possible CPU.
pub fn value_len(shape: &MapShape) -> usize {
    let v = shape.value_size as usize;
    if PER_CPU_TYPES.contains(&shape.map_type) {
        let cpus = aya::util::nr_cpus().unwrap_or(1);
        v.next_multiple_of(8) * cpus
    } else {
        v
    }
}

/// Every key of the map behind `fd` (as bytes).
pub fn map_keys(fd: BorrowedFd<'_>, shape: &MapShape) -> io::Result<Vec<Vec<u8>>> {
    let mut keys = Vec::new();
    let mut next = vec![0u8; shape.key_size as usize];
    let mut prev: Option<Vec<u8>> = None;
    loop {
        let mut attr = [0u64; 16];
        attr[0] = fd.as_raw_fd() as u32 as u64;
        attr[1] = prev.as_ref().map_or(0, |k| k.as_ptr() as u64);
        attr[2] = next.as_mut_ptr() as u64;
        match bpf(BPF_MAP_GET_NEXT_KEY, &mut attr) {
            Ok(_) => {
                keys.push(next.clone());
                prev = Some(next.clone());
            }
            Err(e) if e.raw_os_error() == Some(libc::ENOENT) => return Ok(keys),
            Err(e) => return Err(e),
        }
        if keys.len() > shape.max_entries as usize {
            return Ok(keys); // entries deleted and re-added under us: stop rather than spin
        }
    }
}

/// The value of `key` (`value_len` bytes), `None` if absent.
pub fn map_lookup(fd: BorrowedFd<'_>, shape: &MapShape, key: &[u8]) -> io::Result<Option<Vec<u8>>> {
    let mut value = vec![0u8; value_len(shape)];
    let mut attr = [0u64; 16];
    attr[0] = fd.as_raw_fd() as u32 as u64;
    attr[1] = key.as_ptr() as u64;
    attr[2] = value.as_mut_ptr() as u64;
    match bpf(BPF_MAP_LOOKUP_ELEM, &mut attr) {
        Ok(_) => Ok(Some(value)),
        Err(e) if e.raw_os_error() == Some(libc::ENOENT) => Ok(None),
        Err(e) => Err(e),
    }
}

/// Writes `key` → `value` (`BPF_ANY`); `value` must be `value_len` bytes.
pub fn map_update(fd: BorrowedFd<'_>, key: &[u8], value: &[u8]) -> io::Result<()> {
    let mut attr = [0u64; 16];
    attr[0] = fd.as_raw_fd() as u32 as u64;
    attr[1] = key.as_ptr() as u64;
    attr[2] = value.as_ptr() as u64;
    bpf(BPF_MAP_UPDATE_ELEM, &mut attr).map(drop)
}

/// Detaches the link behind `fd` now (`BPF_LINK_DETACH`, Linux 5.9+), even while other
/// processes hold it open: the program stops running on its hook at once.
pub fn link_detach(fd: BorrowedFd<'_>) -> io::Result<()> {
    let mut attr = [0u64; 16];
    attr[0] = fd.as_raw_fd() as u32 as u64;
    bpf(BPF_LINK_DETACH, &mut attr).map(drop)
}

/// Borrows an owned fd (shorthand).
pub fn fd_of(fd: &OwnedFd) -> BorrowedFd<'_> {
    use std::os::fd::AsFd;
    fd.as_fd()
}
