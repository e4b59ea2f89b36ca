//! `cargo xtask image`: the announcer image, an OCI image layout in a tar archive
//! (`target/image/announcer-<version>.tar`), written here from scratch: no Docker daemon, no
//! registry, no base image (none can be pulled where the project is built and tested).
//!
//! Why a writer of our own rather than buildah: an image is three JSON documents and two
//! gzipped tars, and writing them here takes no storage driver, no user namespace set-up and
//! no tool the machine lacks, and makes the output deterministic by construction: entries
//! sorted, owned by root, with fixed times (the base layer's at the epoch, the binary's at the
//! commit's time), gzip without a timestamp, JSON with sorted keys. The same binary and the
//! same Debian files give the same digest.
//!
//! What goes in, in two layers (the first changes only when Debian's packages do, so a
//! registry stores it once across releases):
//! * base: the shared libraries the binary links (`ldd`; kube's rustls needs no OpenSSL, so
//!   that is glibc and libgcc_s) with the symbolic links on their paths, as the host's Debian
//!   packages installed them; the CA certificates of Debian's `ca-certificates` package as the
//!   one bundle rustls-native-certs reads (`/etc/ssl/certs/ca-certificates.crt`: kube's
//!   platform verifier loads it when a kubeconfig names no CA); `/etc/passwd` and
//!   `/etc/group` with root and the allocator's non-root user; `/etc/nsswitch.conf`;
//!   `/etc/os-release` and a dpkg status entry per package, so that scanners know what is
//!   inside;
//! * the release binary at `/announcer` (the entrypoint: deploy/ gives only `args`), without
//!   its debug sections, and `/usr/local/bin/announcer` pointing to it (for `kubectl exec`).
//!
//! `amd64` (the host's architecture): an `arm64` image needs Debian's arm64 Rust standard
//! library, cross compiler and libraries installed beside the host's (multiarch), which
//! `cargo xtask setup` does not do.

use std::{
    collections::BTreeMap,
    fs,
    io::Write,
    os::unix::fs::PermissionsExt,
    path::{Component, Path, PathBuf},
    process::{Command, Stdio},
    time::Instant,
};

use anyhow::{Context, Result, bail, ensure};
use serde_json::{Value, json};
use sha2::{Digest, Sha256};

/// The most the archive may weigh (issue 27): 30 MB.
pub const MAX_BYTES: u64 = 30_000_000;
/// The non-root user the image runs as unless the Pod says otherwise (the allocator's
/// `runAsUser`; the DaemonSet asks for root).
pub const NONROOT: u32 = 65532;
/// Where the binary is, and the image's entrypoint.
pub const ENTRYPOINT: &str = "/announcer";
/// The CA bundle, where rustls-native-certs (through openssl-probe) looks on Debian.
const CA_BUNDLE: &str = "/etc/ssl/certs/ca-certificates.crt";
/// The Debian package whose certificates make the bundle.
const CA_PACKAGE: &str = "ca-certificates";

/// The archive `build` wrote.
pub struct Image {
    pub archive: PathBuf,
    /// The manifest's digest (`sha256:...`): what a registry shows once pushed.
    pub digest: String,
    pub bytes: u64,
}

/// Builds the release binary and writes the image's archive.
///
/// `xdp_version` builds instead a binary whose XDP program carries that version constant
/// (`ANNOUNCER_XDP_VERSION`, see announcer-ebpf's `version.rs`), tagged `<version>-xdp<n>`:
/// "a newer build whose program differs", for upgrade drills and the end-to-end upgrade test.
/// Both builds share target/release, so switching between them recompiles the agent crate
/// (not its dependencies).
pub fn build(root: &Path, xdp_version: Option<u32>) -> Result<Image> {
    let started = Instant::now();
    println!(
        "xtask image: building the release binary{}",
        xdp_version.map_or(String::new(), |v| format!(" (XDP program version {v})"))
    );
    crate::release_agent(root, xdp_version)?;
    let out = root.join("target/image");
    fs::create_dir_all(&out).with_context(|| format!("create {}", out.display()))?;
    let binary = out.join("announcer.stripped");
    crate::run(
        Command::new("objcopy")
            .arg("--strip-debug")
            .arg(root.join("target/release/announcer"))
            .arg(&binary),
    )?;
    let version = match xdp_version {
        Some(v) => format!("{}-xdp{v}", binary_version(&binary)?),
        None => binary_version(&binary)?,
    };
    let source = Source::of(root)?;
    println!(
        "xtask image: announcer {version}, commit {}, {}",
        source.revision, source.created
    );

    println!("xtask image: base layer: shared libraries, CA certificates, users");
    let mut debian = Debian::default();
    let mut base = Tree::default();
    let libraries = shared_libraries(&binary)?;
    for lib in &libraries {
        base.add_host_path(lib)?;
        debian.owner_of(lib)?;
    }
    base.file(CA_BUNDLE, ca_bundle()?, 0o644)?;
    debian.add(CA_PACKAGE)?;
    base.add_host_path(Path::new("/etc/os-release"))?;
    base.file(
        "/etc/passwd",
        format!(
            "root:x:0:0:root:/root:/sbin/nologin\n\
             nonroot:x:{NONROOT}:{NONROOT}:nonroot:/home/nonroot:/sbin/nologin\n"
        )
        .into_bytes(),
        0o644,
    )?;
    base.file(
        "/etc/group",
        format!("root:x:0:\nnonroot:x:{NONROOT}:\n").into_bytes(),
        0o644,
    )?;
    base.file(
        "/etc/nsswitch.conf",
        b"passwd: files\ngroup: files\nhosts: files dns\n".to_vec(),
        0o644,
    )?;
    for (package, status) in &debian.status {
        base.file(
            &format!("/var/lib/dpkg/status.d/{package}"),
            status.clone().into_bytes(),
            0o644,
        )?;
    }
    for dir in [
        "/proc",
        "/sys",
        "/dev",
        "/root",
        "/home/nonroot",
        "/usr/local/bin",
    ] {
        base.dir(dir, 0o755)?;
    }
    base.dir("/tmp", 0o1777)?;

    let mut app = Tree::default();
    let bytes = fs::read(&binary).with_context(|| format!("read {}", binary.display()))?;
    println!(
        "xtask image: app layer: {ENTRYPOINT} ({:.1} MB)",
        bytes.len() as f64 / 1e6
    );
    app.file(ENTRYPOINT, bytes, 0o755)?;
    app.symlink("/usr/local/bin/announcer", Path::new(ENTRYPOINT))?;

    println!("xtask image: compressing");
    let meta = Meta {
        version: version.clone(),
        source,
        architecture: architecture()?,
        packages: debian.versions(),
    };
    let layers = [
        (
            base.tar(0)?,
            "Debian files: shared libraries, CA certificates, users",
        ),
        (app.tar(meta.source.epoch)?, "the announcer binary"),
    ];
    let layout = layout(&meta, &layers)?;
    let archive = out.join(format!("announcer-{version}.tar"));
    let partial = out.join(format!(".announcer-{version}.tar.partial"));
    fs::write(&partial, &layout.archive).with_context(|| format!("write {}", partial.display()))?;
    fs::rename(&partial, &archive)?;
    fs::remove_file(&binary)?;
    let image = Image {
        archive,
        digest: layout.digest,
        bytes: layout.archive.len() as u64,
    };
    println!(
        "xtask image: {} ({:.1} MB, unpacked {:.1} MB), {}, {}, in {:.1} s",
        image.archive.display(),
        image.bytes as f64 / 1e6,
        layout.unpacked as f64 / 1e6,
        meta.architecture,
        image.digest,
        started.elapsed().as_secs_f64()
    );
    ensure!(
        image.bytes <= MAX_BYTES,
        "the image weighs {} bytes, more than {MAX_BYTES}",
        image.bytes
    );
    Ok(image)
}

/// `announcer --version` says `announcer <version>`.
fn binary_version(binary: &Path) -> Result<String> {
    let out = Command::new(binary)
        .arg("--version")
        .output()
        .with_context(|| format!("run {} --version", binary.display()))?;
    ensure!(
        out.status.success(),
        "{} --version: {}",
        binary.display(),
        out.status
    );
    let text = String::from_utf8(out.stdout)?;
    match text.split_whitespace().collect::<Vec<_>>()[..] {
        ["announcer", v] => Ok(v.to_owned()),
        _ => bail!("unexpected `announcer --version`: {text:?}"),
    }
}

/// The OCI name of the host's architecture (the binary's).
fn architecture() -> Result<&'static str> {
    Ok(match std::env::consts::ARCH {
        "x86_64" => "amd64",
        "aarch64" => "arm64",
        other => bail!("no OCI name for architecture {other}"),
    })
}

/// The commit the image is built from.
struct Source {
    /// Its hash, with `-dirty` when tracked files differ from it.
    revision: String,
    /// Its commit time (or `SOURCE_DATE_EPOCH`), in seconds and RFC 3339.
    epoch: u64,
    created: String,
}

impl Source {
    fn of(root: &Path) -> Result<Source> {
        let git = |args: &[&str]| -> Result<String> {
            let out = Command::new("git")
                .current_dir(root)
                .args(args)
                .output()
                .context("git (the image is labelled with its commit)")?;
            ensure!(out.status.success(), "git {args:?}: {}", out.status);
            Ok(String::from_utf8(out.stdout)?.trim().to_owned())
        };
        let mut revision = git(&["rev-parse", "HEAD"])?;
        if !git(&["status", "--porcelain", "--untracked-files=no"])?.is_empty() {
            println!("xtask image: warning: uncommitted changes; the revision says -dirty");
            revision.push_str("-dirty");
        }
        let epoch: u64 = match std::env::var("SOURCE_DATE_EPOCH") {
            Ok(s) => s.parse().context("SOURCE_DATE_EPOCH")?,
            Err(_) => git(&["log", "-1", "--format=%ct"])?.parse()?,
        };
        Ok(Source {
            revision,
            epoch,
            created: rfc3339(epoch),
        })
    }
}

/// `epoch` as `YYYY-MM-DDThh:mm:ssZ` (days to a civil date: Howard Hinnant's algorithm).
fn rfc3339(epoch: u64) -> String {
    let (days, secs) = ((epoch / 86_400) as i64, epoch % 86_400);
    let z = days + 719_468;
    let era = z.div_euclid(146_097);
    let doe = z.rem_euclid(146_097);
    let yoe = (doe - doe / 1460 + doe / 36_524 - doe / 146_096) / 365;
    let doy = doe - (365 * yoe + yoe / 4 - yoe / 100);
    let mp = (5 * doy + 2) / 153;
    let d = doy - (153 * mp + 2) / 5 + 1;
    let m = if mp < 10 { mp + 3 } else { mp - 9 };
    let y = yoe + era * 400 + i64::from(m <= 2);
    format!(
        "{y:04}-{m:02}-{d:02}T{:02}:{:02}:{:02}Z",
        secs / 3600,
        secs / 60 % 60,
        secs % 60
    )
}

/// The absolute paths `ldd` names for `binary` (libraries and the dynamic loader; none when
/// it is static).
fn shared_libraries(binary: &Path) -> Result<Vec<PathBuf>> {
    let out = Command::new("ldd")
        .arg(binary)
        .output()
        .context("ldd (from Debian's libc-bin)")?;
    let text = String::from_utf8(out.stdout)? + &String::from_utf8_lossy(&out.stderr);
    if text.contains("not a dynamic executable") || text.contains("statically linked") {
        return Ok(Vec::new());
    }
    ensure!(out.status.success(), "ldd {}: {text}", binary.display());
    parse_ldd(&text)
}

fn parse_ldd(text: &str) -> Result<Vec<PathBuf>> {
    let mut paths = Vec::new();
    for line in text.lines().map(str::trim).filter(|l| !l.is_empty()) {
        // `libc.so.6 => /lib/x86_64-linux-gnu/libc.so.6 (0x...)`, `/lib64/ld-linux-x86-64.so.2
        // (0x...)`, or `linux-vdso.so.1 (0x...)` (in the kernel: nothing to copy).
        let path = match line.split_once(" => ") {
            Some((name, rest)) => {
                let path = rest.split(" (").next().unwrap_or_default().trim();
                ensure!(path.starts_with('/'), "{name} not found: {line:?}");
                path
            }
            None => line.split(" (").next().unwrap_or_default().trim(),
        };
        if path.starts_with('/') {
            paths.push(PathBuf::from(path));
        }
    }
    Ok(paths)
}

/// The bundle Debian's `update-ca-certificates` would make from the `ca-certificates`
/// package alone: its certificates, concatenated in path order. (The host's own bundle may hold
/// local CAs, which have no place in an image.)
fn ca_bundle() -> Result<Vec<u8>> {
    let out = Command::new("dpkg-query")
        .args(["-L", CA_PACKAGE])
        .output()
        .context("dpkg-query")?;
    ensure!(
        out.status.success(),
        "the {CA_PACKAGE} package is not installed (apt-get install {CA_PACKAGE})"
    );
    let mut files: Vec<&str> = std::str::from_utf8(&out.stdout)?
        .lines()
        .filter(|l| l.starts_with("/usr/share/ca-certificates/") && l.ends_with(".crt"))
        .collect();
    files.sort_unstable();
    ensure!(!files.is_empty(), "{CA_PACKAGE} lists no certificate");
    let mut bundle = Vec::new();
    for f in files {
        let pem = fs::read(f).with_context(|| format!("read {f}"))?;
        bundle.extend_from_slice(&pem);
        if !pem.ends_with(b"\n") {
            bundle.push(b'\n');
        }
    }
    Ok(bundle)
}

/// The Debian packages the base layer takes files from: their versions (for the label) and
/// dpkg status entries (for scanners).
#[derive(Default)]
struct Debian {
    status: BTreeMap<String, String>,
}

impl Debian {
    /// Records the package that installed `path` (as `ldd` names it, else its real path: with
    /// merged /usr, dpkg knows one of the two).
    fn owner_of(&mut self, path: &Path) -> Result<()> {
        let real = fs::canonicalize(path)?;
        for p in [path, real.as_path()] {
            let out = Command::new("dpkg-query")
                .arg("-S")
                .arg(p)
                .output()
                .context("dpkg-query")?;
            if out.status.success() {
                let text = String::from_utf8(out.stdout)?;
                let package = text
                    .split_once(": ")
                    .map(|(p, _)| p.to_owned())
                    .context("dpkg-query -S output")?;
                return self.add(&package);
            }
        }
        bail!(
            "{} is from no Debian package: the image takes only Debian's files",
            path.display()
        )
    }

    fn add(&mut self, package: &str) -> Result<()> {
        let out = Command::new("dpkg-query")
            .args(["-s", package])
            .output()
            .context("dpkg-query")?;
        ensure!(
            out.status.success(),
            "dpkg-query -s {package}: {}",
            out.status
        );
        // `libc6:amd64` has the entry `libc6`.
        let name = package.split(':').next().unwrap_or(package).to_owned();
        self.status.insert(name, String::from_utf8(out.stdout)?);
        Ok(())
    }

    /// `name=version, ...`.
    fn versions(&self) -> String {
        self.status
            .iter()
            .map(|(name, status)| {
                let version = status
                    .lines()
                    .find_map(|l| l.strip_prefix("Version: "))
                    .unwrap_or("?");
                format!("{name}={version}")
            })
            .collect::<Vec<_>>()
            .join(", ")
    }
}

/// One entry of a file tree.
#[derive(Debug, Clone, PartialEq)]
enum Entry {
    Dir { mode: u32 },
    File { data: Vec<u8>, mode: u32 },
    Symlink { target: PathBuf },
}

/// A file tree (a layer, or the layout itself), by path relative to its root; ordered, so that
/// its tar is the same whatever order it was filled in.
#[derive(Default)]
struct Tree {
    entries: BTreeMap<String, Entry>,
}

impl Tree {
    /// `path` (absolute or relative: the same) without its leading `/`.
    fn key(path: &str) -> Result<String> {
        let p = Path::new(path);
        let mut parts = Vec::new();
        for c in p.components() {
            match c {
                Component::RootDir | Component::CurDir => {}
                Component::Normal(s) => parts.push(s.to_str().context("UTF-8 path")?),
                _ => bail!("{path}: not a plain path"),
            }
        }
        ensure!(!parts.is_empty(), "empty path {path:?}");
        Ok(parts.join("/"))
    }

    /// Adds `entry` at `path` and the directories above it. A directory already there stays;
    /// anything else there must be the same.
    fn insert(&mut self, path: &str, entry: Entry) -> Result<()> {
        let key = Self::key(path)?;
        let parts: Vec<&str> = key.split('/').collect();
        for n in 1..parts.len() {
            let parent = parts[..n].join("/");
            match self.entries.get(&parent) {
                None => {
                    self.entries.insert(parent, Entry::Dir { mode: 0o755 });
                }
                Some(Entry::Dir { .. }) => {}
                Some(other) => bail!("{parent} is {other:?}, not a directory, under {key}"),
            }
        }
        match self.entries.get(&key) {
            Some(Entry::Dir { .. }) if matches!(entry, Entry::Dir { .. }) => {}
            Some(old) if *old != entry => bail!("{key} added twice, differently"),
            _ => {
                self.entries.insert(key, entry);
            }
        }
        Ok(())
    }

    fn dir(&mut self, path: &str, mode: u32) -> Result<()> {
        let key = Self::key(path)?;
        self.insert(path, Entry::Dir { mode })?;
        // An explicit mode wins over the default one of a parent made on the way.
        self.entries.insert(key, Entry::Dir { mode });
        Ok(())
    }

    fn file(&mut self, path: &str, data: Vec<u8>, mode: u32) -> Result<()> {
        self.insert(path, Entry::File { data, mode })
    }

    fn symlink(&mut self, path: &str, target: &Path) -> Result<()> {
        self.insert(
            path,
            Entry::Symlink {
                target: target.to_owned(),
            },
        )
    }

    /// Copies the host's `path` (absolute) into the tree at the same place, with every
    /// symbolic link on the way (so `/lib64/ld-linux-x86-64.so.2` keeps working where `/lib64`
    /// or the file is a link).
    fn add_host_path(&mut self, path: &Path) -> Result<()> {
        self.add_host_path_from(Path::new("/"), path, 0)
    }

    fn add_host_path_from(&mut self, host_root: &Path, path: &Path, depth: u32) -> Result<()> {
        ensure!(depth < 40, "{}: too many symbolic links", path.display());
        ensure!(path.is_absolute(), "{}: not absolute", path.display());
        let parts: Vec<&std::ffi::OsStr> = path
            .components()
            .filter_map(|c| match c {
                Component::Normal(s) => Some(s),
                _ => None,
            })
            .collect();
        let mut real = PathBuf::from("/");
        for (i, part) in parts.iter().enumerate() {
            real.push(part);
            let on_host = host_root.join(real.strip_prefix("/")?);
            let meta =
                fs::symlink_metadata(&on_host).with_context(|| format!("{}", on_host.display()))?;
            let name = real.to_str().context("UTF-8 path")?;
            if meta.file_type().is_symlink() {
                let target = fs::read_link(&on_host)?;
                self.symlink(name, &target)?;
                let mut next = if target.is_absolute() {
                    target
                } else {
                    real.parent().unwrap_or(Path::new("/")).join(target)
                };
                next.extend(&parts[i + 1..]);
                return self.add_host_path_from(host_root, &normalize(&next), depth + 1);
            } else if meta.is_dir() {
                self.insert(name, Entry::Dir { mode: 0o755 })?;
            } else if meta.is_file() && i + 1 == parts.len() {
                let data = fs::read(&on_host).with_context(|| format!("{}", on_host.display()))?;
                let mode = meta.permissions().mode() & 0o7777;
                self.file(name, data, mode)?;
            } else {
                bail!("{}: not a file, directory or link", on_host.display());
            }
        }
        Ok(())
    }

    /// The tree as a tar: entries in path order, owned by root, modified at `mtime`.
    fn tar(&self, mtime: u64) -> Result<Vec<u8>> {
        let mut tar = tar::Builder::new(Vec::new());
        for (path, entry) in &self.entries {
            let mut h = tar::Header::new_ustar();
            h.set_mtime(mtime);
            h.set_uid(0);
            h.set_gid(0);
            match entry {
                Entry::Dir { mode } => {
                    h.set_entry_type(tar::EntryType::Directory);
                    h.set_mode(*mode);
                    h.set_size(0);
                    tar.append_data(&mut h, format!("{path}/"), std::io::empty())?;
                }
                Entry::File { data, mode } => {
                    h.set_entry_type(tar::EntryType::Regular);
                    h.set_mode(*mode);
                    h.set_size(data.len() as u64);
                    tar.append_data(&mut h, path, data.as_slice())?;
                }
                Entry::Symlink { target } => {
                    h.set_entry_type(tar::EntryType::Symlink);
                    h.set_mode(0o777);
                    h.set_size(0);
                    tar.append_link(&mut h, path, target)?;
                }
            }
        }
        Ok(tar.into_inner()?)
    }
}

/// `path` without `.` and `..` (lexically: the caller resolved the links above it).
fn normalize(path: &Path) -> PathBuf {
    let mut out = PathBuf::from("/");
    for c in path.components() {
        match c {
            Component::ParentDir => {
                out.pop();
            }
            Component::Normal(s) => out.push(s),
            _ => {}
        }
    }
    out
}

/// What the labels and the configuration say.
struct Meta {
    version: String,
    source: Source,
    architecture: &'static str,
    /// `name=version, ...` of the Debian packages in the base layer.
    packages: String,
}

/// The written layout.
struct Layout {
    archive: Vec<u8>,
    digest: String,
    unpacked: u64,
}

const MANIFEST: &str = "application/vnd.oci.image.manifest.v1+json";
const CONFIG: &str = "application/vnd.oci.image.config.v1+json";
const LAYER: &str = "application/vnd.oci.image.layer.v1.tar+gzip";
const INDEX: &str = "application/vnd.oci.image.index.v1+json";

fn sha256(data: &[u8]) -> String {
    format!("sha256:{:x}", Sha256::digest(data))
}

/// Debian's `gzip -9n` (no name, no time): xtask is built unoptimized, where a deflate in Rust
/// takes minutes over the binary's 20 MB; gzip takes seconds, and its output is as fixed as
/// its version.
fn gzip(data: &[u8]) -> Result<Vec<u8>> {
    let mut child = Command::new("gzip")
        .args(["-9", "-n", "-c"])
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .spawn()
        .context("gzip")?;
    let mut stdin = child.stdin.take().context("gzip's stdin")?;
    let out = std::thread::scope(|s| {
        s.spawn(move || stdin.write_all(data));
        child.wait_with_output()
    })?;
    ensure!(out.status.success(), "gzip: {}", out.status);
    Ok(out.stdout)
}

/// JSON with object keys sorted, compact: the same document is the same bytes whatever
/// serde_json's features.
fn canonical(v: &Value) -> Vec<u8> {
    fn write(v: &Value, out: &mut String) {
        match v {
            Value::Object(m) => {
                out.push('{');
                let sorted: BTreeMap<&String, &Value> = m.iter().collect();
                for (i, (k, v)) in sorted.into_iter().enumerate() {
                    if i > 0 {
                        out.push(',');
                    }
                    out.push_str(&Value::String(k.clone()).to_string());
                    out.push(':');
                    write(v, out);
                }
                out.push('}');
            }
            Value::Array(a) => {
                out.push('[');
                for (i, v) in a.iter().enumerate() {
                    if i > 0 {
                        out.push(',');
                    }
                    write(v, out);
                }
                out.push(']');
            }
            other => out.push_str(&other.to_string()),
        }
    }
    let mut out = String::new();
    write(v, &mut out);
    out.into_bytes()
}

/// The OCI image layout of `layers` (uncompressed tars, each with its history line), as a
/// tar.
fn layout(meta: &Meta, layers: &[(Vec<u8>, &str)]) -> Result<Layout> {
    let mut blobs = Tree::default();
    let mut blob = |data: Vec<u8>| -> Result<(String, u64)> {
        let digest = sha256(&data);
        let size = data.len() as u64;
        let hex = digest.trim_start_matches("sha256:");
        blobs.file(&format!("blobs/sha256/{hex}"), data, 0o644)?;
        Ok((digest, size))
    };
    let mut diff_ids = Vec::new();
    let mut descriptors = Vec::new();
    let mut history = Vec::new();
    let mut unpacked = 0;
    for (tar, what) in layers {
        unpacked += tar.len() as u64;
        diff_ids.push(sha256(tar));
        let (digest, size) = blob(gzip(tar)?)?;
        descriptors.push(json!({"mediaType": LAYER, "digest": digest, "size": size}));
        history.push(json!({
            "created": meta.source.created,
            "created_by": format!("cargo xtask image: {what}"),
        }));
    }
    let annotations = json!({
        "org.opencontainers.image.title": "announcer",
        "org.opencontainers.image.description":
            "Layer-2 announcer for Kubernetes LoadBalancer IPs (XDP ARP/NDP responder)",
        "org.opencontainers.image.version": meta.version,
        "org.opencontainers.image.revision": meta.source.revision,
        "org.opencontainers.image.source": env!("CARGO_PKG_REPOSITORY"),
        "org.opencontainers.image.licenses": env!("CARGO_PKG_LICENSE"),
        "org.opencontainers.image.created": meta.source.created,
    });
    let mut labels = annotations.clone();
    labels["dev.announcer.image.debian-packages"] = json!(meta.packages);
    let config = canonical(&json!({
        "created": meta.source.created,
        "architecture": meta.architecture,
        "os": "linux",
        "config": {
            "User": format!("{NONROOT}:{NONROOT}"),
            "Env": ["PATH=/usr/local/bin:/usr/bin:/bin"],
            "Entrypoint": [ENTRYPOINT],
            "WorkingDir": "/",
            "Labels": labels,
        },
        "rootfs": {"type": "layers", "diff_ids": diff_ids},
        "history": history,
    }));
    let (config_digest, config_size) = blob(config)?;
    let manifest = canonical(&json!({
        "schemaVersion": 2,
        "mediaType": MANIFEST,
        "config": {"mediaType": CONFIG, "digest": config_digest, "size": config_size},
        "layers": descriptors,
        "annotations": annotations,
    }));
    let (digest, size) = blob(manifest)?;
    let index = canonical(&json!({
        "schemaVersion": 2,
        "mediaType": INDEX,
        "manifests": [{
            "mediaType": MANIFEST,
            "digest": digest,
            "size": size,
            "platform": {"architecture": meta.architecture, "os": "linux"},
            "annotations": {
                // The tag (`skopeo copy oci-archive:<file>:<tag>`), and the full name
                // containerd's `ctr images import` (and kind's `load image-archive`) gives the
                // image: what deploy/'s `image: announcer` with its tag resolves to.
                "org.opencontainers.image.ref.name": meta.version,
                "io.containerd.image.name": format!("docker.io/library/announcer:{}", meta.version),
            },
        }],
    }));
    blobs.file("index.json", index, 0o644)?;
    blobs.file(
        "oci-layout",
        br#"{"imageLayoutVersion":"1.0.0"}"#.to_vec(),
        0o644,
    )?;
    Ok(Layout {
        archive: blobs.tar(meta.source.epoch)?,
        digest,
        unpacked,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn meta() -> Meta {
        Meta {
            version: "9.9.9".into(),
            source: Source {
                revision: "abc".into(),
                epoch: 1_700_000_000,
                created: rfc3339(1_700_000_000),
            },
            architecture: "amd64",
            packages: "libc6=1".into(),
        }
    }

    #[test]
    fn the_same_files_added_in_any_order_give_the_same_digest() {
        let mut a = Tree::default();
        a.file("/etc/passwd", b"root".to_vec(), 0o644).unwrap();
        a.file("/announcer", b"\x7fELF".to_vec(), 0o755).unwrap();
        a.symlink("/usr/local/bin/announcer", Path::new("/announcer"))
            .unwrap();
        let mut b = Tree::default();
        b.symlink("/usr/local/bin/announcer", Path::new("/announcer"))
            .unwrap();
        b.file("announcer", b"\x7fELF".to_vec(), 0o755).unwrap();
        b.file("etc/passwd", b"root".to_vec(), 0o644).unwrap();
        let one = layout(&meta(), &[(a.tar(0).unwrap(), "x")]).unwrap();
        let two = layout(&meta(), &[(b.tar(0).unwrap(), "x")]).unwrap();
        assert_eq!(one.digest, two.digest);
        assert_eq!(one.archive, two.archive);
        // And a change shows.
        b.file("/etc/group", b"root".to_vec(), 0o644).unwrap();
        let three = layout(&meta(), &[(b.tar(0).unwrap(), "x")]).unwrap();
        assert_ne!(one.digest, three.digest);
    }

    #[test]
    fn tar_entries_are_sorted_with_parents_first_owned_by_root_at_the_given_time() {
        let mut t = Tree::default();
        t.file("/usr/lib/b", b"b".to_vec(), 0o644).unwrap();
        t.file("/etc/a", b"a".to_vec(), 0o600).unwrap();
        t.dir("/tmp", 0o1777).unwrap();
        let bytes = t.tar(42).unwrap();
        let mut archive = tar::Archive::new(bytes.as_slice());
        let mut seen = Vec::new();
        for e in archive.entries().unwrap() {
            let e = e.unwrap();
            let h = e.header();
            assert_eq!((h.uid().unwrap(), h.gid().unwrap()), (0, 0));
            assert_eq!(h.mtime().unwrap(), 42);
            seen.push((
                e.path().unwrap().to_string_lossy().into_owned(),
                h.mode().unwrap(),
            ));
        }
        let want = [
            ("etc/", 0o755),
            ("etc/a", 0o600),
            ("tmp/", 0o1777),
            ("usr/", 0o755),
            ("usr/lib/", 0o755),
            ("usr/lib/b", 0o644),
        ];
        let want: Vec<(String, u32)> = want.iter().map(|(p, m)| (p.to_string(), *m)).collect();
        assert_eq!(seen, want);
    }

    #[test]
    fn a_host_file_comes_with_the_links_on_its_path() {
        // /lib -> usr/lib, /lib64/ld.so -> /lib/x/ld.so-real, as merged /usr has it.
        let host = std::env::temp_dir().join(format!("xtask-image-{}", std::process::id()));
        let _ = fs::remove_dir_all(&host);
        fs::create_dir_all(host.join("usr/lib/x")).unwrap();
        fs::create_dir_all(host.join("lib64")).unwrap();
        fs::write(host.join("usr/lib/x/ld.so-real"), b"ld").unwrap();
        std::os::unix::fs::symlink("usr/lib", host.join("lib")).unwrap();
        std::os::unix::fs::symlink("/lib/x/ld.so-real", host.join("lib64/ld.so")).unwrap();
        let mut t = Tree::default();
        let r = t.add_host_path_from(&host, Path::new("/lib64/ld.so"), 0);
        fs::remove_dir_all(&host).unwrap();
        r.unwrap();
        let got: Vec<(&str, &Entry)> = t.entries.iter().map(|(k, v)| (k.as_str(), v)).collect();
        let link = |t: &str| Entry::Symlink { target: t.into() };
        let dir = Entry::Dir { mode: 0o755 };
        let file = Entry::File {
            data: b"ld".to_vec(),
            mode: 0o644,
        };
        assert_eq!(
            got,
            vec![
                ("lib", &link("usr/lib")),
                ("lib64", &dir),
                ("lib64/ld.so", &link("/lib/x/ld.so-real")),
                ("usr", &dir),
                ("usr/lib", &dir),
                ("usr/lib/x", &dir),
                ("usr/lib/x/ld.so-real", &file),
            ]
        );
    }

    #[test]
    fn ldd_output_gives_the_libraries_and_the_loader() {
        let text = "\tlinux-vdso.so.1 (0x00007ffd)\n\
                    \tlibgcc_s.so.1 => /lib/x86_64-linux-gnu/libgcc_s.so.1 (0x00007f01)\n\
                    \tlibc.so.6 => /lib/x86_64-linux-gnu/libc.so.6 (0x00007f02)\n\
                    \t/lib64/ld-linux-x86-64.so.2 (0x00007f03)\n";
        assert_eq!(
            parse_ldd(text).unwrap(),
            [
                "/lib/x86_64-linux-gnu/libgcc_s.so.1",
                "/lib/x86_64-linux-gnu/libc.so.6",
                "/lib64/ld-linux-x86-64.so.2"
            ]
            .map(PathBuf::from)
        );
        assert!(parse_ldd("\tlibfoo.so.1 => not found\n").is_err());
    }

    #[test]
    fn times_are_written_as_rfc3339_utc() {
        assert_eq!(rfc3339(0), "1970-01-01T00:00:00Z");
        assert_eq!(rfc3339(951_782_400), "2000-02-29T00:00:00Z");
        assert_eq!(rfc3339(1_796_340_563), "2026-12-03T23:29:23Z");
    }

    #[test]
    fn json_keys_are_sorted() {
        let v = json!({"b": 1, "a": {"d": [1, "x"], "c": null}});
        assert_eq!(canonical(&v), br#"{"a":{"c":null,"d":[1,"x"]},"b":1}"#);
    }
}
