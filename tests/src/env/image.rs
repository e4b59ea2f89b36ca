//! An OCI image archive (what `cargo xtask image` writes) taken apart as a registry client or a
//! container runtime takes it: index → manifest → config and layers, every blob checked against
//! its digest and size, every layer against its `diff_id`, the layers applied in order into a
//! root file system.
//!
//! Why here: `tests/tests/deploy/image.rs` checks the archive itself, and the stand-in
//! kubelets ([`super::kube::pods`]) run Pods from it; both must read it the same way.
//!
//! Limits: one image per archive (what xtask writes), gzip layers, no whiteout files (a
//! from-scratch image has none; a layer with `.wh.` entries is refused rather than applied
//! wrongly).

use std::{
    io::Write,
    path::{Path, PathBuf},
    process::{Command, Output, Stdio},
};

use serde_json::Value;
use sha2::{Digest, Sha256};

/// Why an archive could not be unpacked.
#[derive(Debug, thiserror::Error)]
pub enum ImageError {
    /// A file could not be read or written, or a tool not run.
    #[error("{what}: {source}")]
    Io {
        /// What was done.
        what: String,
        /// What happened.
        source: std::io::Error,
    },
    /// `tar` or `gzip` failed.
    #[error("{what} failed: {output}")]
    Tool {
        /// The command.
        what: String,
        /// Its stderr.
        output: String,
    },
    /// The layout breaks the OCI image spec (or what xtask writes).
    #[error("{0}")]
    Invalid(String),
}

fn io(what: impl Into<String>) -> impl FnOnce(std::io::Error) -> ImageError {
    let what = what.into();
    move |source| ImageError::Io { what, source }
}

/// The image archive under test: `ANNOUNCER_IMAGE` (`cargo xtask test` builds it and sets it),
/// else `target/image/announcer-<version>.tar` (`cargo xtask image`). Panics naming the
/// command when it is missing: the tests that need it never skip.
pub fn archive_under_test() -> std::path::PathBuf {
    let path = std::env::var_os("ANNOUNCER_IMAGE").map_or_else(
        || {
            std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join(format!(
                "../target/image/announcer-{}.tar",
                env!("CARGO_PKG_VERSION")
            ))
        },
        std::path::PathBuf::from,
    );
    assert!(
        path.is_file(),
        "no image at {}: run `cargo xtask image` (`cargo xtask test` builds it and sets \
         ANNOUNCER_IMAGE)",
        path.display()
    );
    path
}

/// `sha256:<hex>` of `data`.
pub fn sha256(data: &[u8]) -> String {
    format!("sha256:{:x}", Sha256::digest(data))
}

/// Runs `cmd` with `input` on its stdin; its output, whatever the status.
pub fn piped(cmd: &mut Command, input: Vec<u8>) -> Result<Output, ImageError> {
    let what = format!("{cmd:?}");
    let mut child = cmd
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .map_err(io(what.clone()))?;
    let mut stdin = child.stdin.take().expect("stdin is piped");
    let writer = std::thread::spawn(move || {
        let _ = stdin.write_all(&input);
    });
    let out = child.wait_with_output().map_err(io(what))?;
    let _ = writer.join();
    Ok(out)
}

fn str_of(v: &Value) -> Result<&str, ImageError> {
    v.as_str()
        .ok_or_else(|| ImageError::Invalid(format!("expected a string, found {v}")))
}

/// An image archive unpacked into a directory: the layout (`<dir>/layout`) and the root file
/// system (`<dir>/rootfs`).
#[derive(Clone, Debug)]
pub struct UnpackedImage {
    /// The OCI layout as extracted from the archive.
    pub layout: PathBuf,
    /// The layers, applied in order.
    pub rootfs: PathBuf,
    /// `index.json`.
    pub index: Value,
    /// The one manifest.
    pub manifest: Value,
    /// The image configuration (`config.Entrypoint`, `Cmd`, `Env`, `User`, `WorkingDir`, ...).
    pub config: Value,
    /// The manifest's digest (`sha256:...`): the image's identity.
    pub digest: String,
    /// The blobs (hex digests) the index and manifest name: the manifest, config and layers.
    pub named_blobs: Vec<String>,
}

impl UnpackedImage {
    /// Extracts `archive` into `dir` (created; must not hold an earlier unpacking) and applies
    /// its layers, checking every digest, size and `diff_id`.
    pub fn unpack(archive: &Path, dir: &Path) -> Result<UnpackedImage, ImageError> {
        let layout = dir.join("layout");
        let rootfs = dir.join("rootfs");
        for d in [&layout, &rootfs] {
            std::fs::create_dir_all(d).map_err(io(format!("creating {}", d.display())))?;
        }
        let out = Command::new("tar")
            .arg("-xf")
            .arg(archive)
            .arg("-C")
            .arg(&layout)
            .output()
            .map_err(io("running tar"))?;
        if !out.status.success() {
            return Err(ImageError::Tool {
                what: format!("tar -xf {}", archive.display()),
                output: String::from_utf8_lossy(&out.stderr).into_owned(),
            });
        }
        let read = |path: &Path| std::fs::read(path).map_err(io(format!("{}", path.display())));
        let json = |bytes: &[u8], what: &str| -> Result<Value, ImageError> {
            serde_json::from_slice(bytes)
                .map_err(|e| ImageError::Invalid(format!("{what} is not JSON: {e}")))
        };
        let oci_layout = json(&read(&layout.join("oci-layout"))?, "oci-layout")?;
        if oci_layout["imageLayoutVersion"] != "1.0.0" {
            return Err(ImageError::Invalid(format!("oci-layout: {oci_layout}")));
        }
        let mut named_blobs = Vec::new();
        // A descriptor's blob, checked against its digest and size.
        let mut blob = |d: &Value| -> Result<Vec<u8>, ImageError> {
            let digest = str_of(&d["digest"])?;
            let hex = digest
                .strip_prefix("sha256:")
                .ok_or_else(|| ImageError::Invalid(format!("{digest}: not sha256")))?;
            let bytes = read(&layout.join("blobs/sha256").join(hex))?;
            if sha256(&bytes) != digest {
                return Err(ImageError::Invalid(format!(
                    "blob {digest} does not match its digest"
                )));
            }
            if Some(bytes.len() as u64) != d["size"].as_u64() {
                return Err(ImageError::Invalid(format!(
                    "blob {digest} has {} bytes, its descriptor says {}",
                    bytes.len(),
                    d["size"]
                )));
            }
            named_blobs.push(hex.to_owned());
            Ok(bytes)
        };
        let index = json(&read(&layout.join("index.json"))?, "index.json")?;
        if index["schemaVersion"] != 2 {
            return Err(ImageError::Invalid(format!("index schemaVersion {index}")));
        }
        let manifests = index["manifests"]
            .as_array()
            .ok_or_else(|| ImageError::Invalid("index.json: no manifests".into()))?;
        let [descriptor] = manifests.as_slice() else {
            return Err(ImageError::Invalid(format!(
                "{} images in the archive, not one",
                manifests.len()
            )));
        };
        if descriptor["mediaType"] != "application/vnd.oci.image.manifest.v1+json" {
            return Err(ImageError::Invalid(format!(
                "manifest media type {}",
                descriptor["mediaType"]
            )));
        }
        let digest = str_of(&descriptor["digest"])?.to_owned();
        let manifest = json(&blob(descriptor)?, "the manifest")?;
        if manifest["schemaVersion"] != 2
            || manifest["config"]["mediaType"] != "application/vnd.oci.image.config.v1+json"
        {
            return Err(ImageError::Invalid(format!("manifest {manifest}")));
        }
        let config = json(&blob(&manifest["config"])?, "the config")?;
        let layers = manifest["layers"]
            .as_array()
            .ok_or_else(|| ImageError::Invalid("manifest: no layers".into()))?;
        let diff_ids = config["rootfs"]["diff_ids"]
            .as_array()
            .ok_or_else(|| ImageError::Invalid("config: no diff_ids".into()))?;
        if layers.len() != diff_ids.len() || layers.is_empty() {
            return Err(ImageError::Invalid(format!(
                "{} layers, {} diff_ids",
                layers.len(),
                diff_ids.len()
            )));
        }
        for (layer, diff_id) in layers.iter().zip(diff_ids) {
            if layer["mediaType"] != "application/vnd.oci.image.layer.v1.tar+gzip" {
                return Err(ImageError::Invalid(format!(
                    "layer media type {}",
                    layer["mediaType"]
                )));
            }
            let gz = blob(layer)?;
            let tar = piped(Command::new("gzip").arg("-dc"), gz)?;
            if !tar.status.success() {
                return Err(ImageError::Tool {
                    what: format!("gzip -dc {}", layer["digest"]),
                    output: String::from_utf8_lossy(&tar.stderr).into_owned(),
                });
            }
            if sha256(&tar.stdout) != str_of(diff_id)? {
                return Err(ImageError::Invalid(format!(
                    "layer {} unpacks to another tar than its diff_id {diff_id}",
                    layer["digest"]
                )));
            }
            let list = piped(Command::new("tar").arg("-t"), tar.stdout.clone())?;
            let listing = String::from_utf8_lossy(&list.stdout);
            if let Some(w) = listing
                .lines()
                .find(|l| l.rsplit('/').next().is_some_and(|f| f.starts_with(".wh.")))
            {
                return Err(ImageError::Invalid(format!(
                    "layer {} has a whiteout ({w}), which this unpacker does not apply",
                    layer["digest"]
                )));
            }
            let x = piped(
                Command::new("tar")
                    .args(["-x", "--numeric-owner", "-C"])
                    .arg(&rootfs),
                tar.stdout,
            )?;
            if !x.status.success() {
                return Err(ImageError::Tool {
                    what: format!("tar -x {}", layer["digest"]),
                    output: String::from_utf8_lossy(&x.stderr).into_owned(),
                });
            }
        }
        Ok(UnpackedImage {
            layout,
            rootfs,
            index,
            manifest,
            config,
            digest,
            named_blobs,
        })
    }

    /// The image's `config` section (Entrypoint, Cmd, Env, User, WorkingDir, Labels).
    pub fn runtime_config(&self) -> &Value {
        &self.config["config"]
    }

    /// The name a `ctr images import` gives it (`io.containerd.image.name`), if the index says.
    pub fn containerd_name(&self) -> Option<&str> {
        self.index["manifests"][0]["annotations"]["io.containerd.image.name"].as_str()
    }
}
