//! The image `cargo xtask image` writes (issue 27): an OCI image layout in a tar, taken apart
//! as a registry client or a container runtime takes it (index → manifest → config and
//! layers, every blob checked against its digest and size, every layer against its diff_id),
//! weighed, its labels read, and its root file system run: the binary inside, with chroot, as
//! the image's user, with the image's environment, the way deploy/'s Pods start it.
//!
//! The archive is `ANNOUNCER_IMAGE` (`cargo xtask test` builds it and sets it), else
//! `target/image/announcer-<version>.tar`. Missing, or built from another commit, the tests
//! fail naming `cargo xtask image`: they never skip. Running the binary needs root (chroot),
//! as the rest of this suite does.

use std::{
    path::{Path, PathBuf},
    process::{Command, Output},
};

use announcer_tests::env::image::UnpackedImage;
use serde_json::Value;

use crate::{Scratch, object, s};

/// The most the archive may weigh (issue 27): 30 MB.
const MAX_BYTES: u64 = 30_000_000;

fn workspace() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("..")
}

/// The image, taken apart into `scratch` (by [`UnpackedImage::unpack`], which checks every
/// digest, size and diff_id).
struct Unpacked {
    scratch: Scratch,
    /// The layers, applied in order.
    rootfs: PathBuf,
    index: Value,
    manifest: Value,
    config: Value,
    /// The blobs the manifest names (config and layers) and the manifest itself.
    named_blobs: Vec<String>,
}

impl Unpacked {
    fn new(name: &str) -> Unpacked {
        let scratch = Scratch::new(&format!("image-{name}"));
        let image = UnpackedImage::unpack(
            &announcer_tests::env::image::archive_under_test(),
            &scratch.0,
        )
        .unwrap_or_else(|e| {
            panic!(
                "unpacking {}: {e}",
                announcer_tests::env::image::archive_under_test().display()
            )
        });
        Unpacked {
            scratch,
            rootfs: image.rootfs,
            index: image.index,
            manifest: image.manifest,
            config: image.config,
            named_blobs: image.named_blobs,
        }
    }

    fn layout(&self) -> PathBuf {
        self.scratch.0.join("layout")
    }

    fn labels(&self) -> &Value {
        &self.config["config"]["Labels"]
    }

    /// Runs the image's entrypoint with `args` in its root file system (chroot), as the
    /// image's user and with its environment and nothing else, as a container runtime does.
    fn run(&self, args: &[&str]) -> Output {
        let c = &self.config["config"];
        let user = s(&c["User"]);
        // By its path: the command's PATH is the image's.
        let mut cmd = Command::new("/usr/sbin/chroot");
        cmd.arg(format!("--userspec={user}"))
            .arg(&self.rootfs)
            .env_clear()
            .current_dir("/");
        for e in c["Entrypoint"].as_array().expect("Entrypoint") {
            cmd.arg(s(e));
        }
        cmd.args(args);
        for e in c["Env"].as_array().into_iter().flatten() {
            let (k, v) = s(e).split_once('=').expect("NAME=value");
            cmd.env(k, v);
        }
        let out = cmd.output().unwrap_or_else(|e| panic!("{cmd:?}: {e}"));
        eprintln!(
            "{:?} -> {}\n{}{}",
            args,
            out.status,
            String::from_utf8_lossy(&out.stdout),
            String::from_utf8_lossy(&out.stderr)
        );
        out
    }
}

#[test]
fn the_archive_is_an_oci_layout_whose_blobs_match_their_digests() {
    // Unpacking checks every digest, size and diff_id.
    let image = Unpacked::new("layout");
    // Nothing in the archive that no descriptor names.
    let mut on_disk: Vec<String> = std::fs::read_dir(image.layout().join("blobs/sha256"))
        .expect("blobs")
        .map(|e| e.expect("entry").file_name().to_string_lossy().into_owned())
        .collect();
    on_disk.sort();
    let mut named = image.named_blobs.clone();
    named.sort();
    assert_eq!(on_disk, named, "blobs that no descriptor names");
    assert_eq!(image.config["os"], "linux");
    assert_eq!(image.config["architecture"], "amd64");
    assert_eq!(
        image.index["manifests"][0]["platform"]["architecture"],
        "amd64"
    );
    // The binary is where the entrypoint says, executable.
    let entrypoint = s(&image.config["config"]["Entrypoint"][0]);
    let bin = image.rootfs.join(entrypoint.trim_start_matches('/'));
    let mode = std::os::unix::fs::PermissionsExt::mode(
        &std::fs::metadata(&bin)
            .unwrap_or_else(|e| panic!("{bin:?}: {e}"))
            .permissions(),
    );
    assert_eq!(mode & 0o111, 0o111, "{entrypoint} is not executable");
}

#[test]
fn the_image_weighs_at_most_30_mb() {
    let bytes = std::fs::metadata(announcer_tests::env::image::archive_under_test())
        .expect("archive")
        .len();
    let image = Unpacked::new("size");
    let layers: Vec<u64> = image.manifest["layers"]
        .as_array()
        .expect("layers")
        .iter()
        .map(|l| l["size"].as_u64().expect("size"))
        .collect();
    eprintln!("archive {bytes} bytes, compressed layers {layers:?}");
    assert!(
        bytes <= MAX_BYTES,
        "the image archive weighs {bytes} bytes, more than {MAX_BYTES}"
    );
}

#[test]
fn the_image_is_labelled_with_its_version_and_commit() {
    let image = Unpacked::new("labels");
    let head = Command::new("git")
        .current_dir(workspace())
        .args(["rev-parse", "HEAD"])
        .output()
        .expect("git rev-parse");
    assert!(head.status.success(), "git rev-parse HEAD: {head:?}");
    let head = String::from_utf8(head.stdout)
        .expect("UTF-8")
        .trim()
        .to_owned();
    let cargo_toml = std::fs::read_to_string(workspace().join("Cargo.toml")).expect("Cargo.toml");
    let repository = cargo_toml
        .lines()
        .find_map(|l| l.trim().strip_prefix("repository = "))
        .expect("the workspace's repository")
        .trim_matches('"');
    // The config's labels (what `docker inspect` and `skopeo inspect` show) and the
    // manifest's annotations both say it.
    for (what, m) in [
        ("config label", image.labels()),
        ("manifest annotation", &image.manifest["annotations"]),
    ] {
        let get = |k: &str| {
            m[format!("org.opencontainers.image.{k}")]
                .as_str()
                .unwrap_or_else(|| panic!("no {what} org.opencontainers.image.{k}"))
                .to_owned()
        };
        assert_eq!(get("version"), env!("CARGO_PKG_VERSION"), "{what} version");
        let revision = get("revision");
        assert_eq!(
            revision.trim_end_matches("-dirty"),
            head,
            "the image's {what} names commit {revision}, HEAD is {head}: rebuild it with \
             `cargo xtask image`"
        );
        assert_eq!(get("source"), repository, "{what} source");
    }
    // The Debian packages its files come from, with their versions.
    let packages = s(&image.labels()["dev.announcer.image.debian-packages"]);
    for p in ["ca-certificates=", "libc6="] {
        assert!(packages.contains(p), "no {p} in {packages}");
    }
    // The tag a `ctr images import` or `skopeo copy oci-archive:` gives it.
    assert_eq!(
        image.index["manifests"][0]["annotations"]["org.opencontainers.image.ref.name"],
        env!("CARGO_PKG_VERSION")
    );
}

#[test]
fn the_binary_runs_inside_the_image() {
    let image = Unpacked::new("run");
    let out = image.run(&["--version"]);
    assert!(
        out.status.success(),
        "announcer --version in the image failed"
    );
    assert_eq!(
        String::from_utf8_lossy(&out.stdout).trim(),
        format!("announcer {}", env!("CARGO_PKG_VERSION"))
    );
    let out = image.run(&["agent", "--help"]);
    assert!(
        out.status.success(),
        "announcer agent --help in the image failed"
    );
    assert!(String::from_utf8_lossy(&out.stdout).contains("--config"));
}

/// deploy/'s Pods give only `args`: the image's entrypoint must take them.
#[test]
fn the_manifests_arguments_start_the_images_entrypoint() {
    let image = Unpacked::new("args");
    for (kind, name) in [
        ("DaemonSet", "announcer"),
        ("Deployment", "announcer-allocator"),
    ] {
        let o = object(kind, name);
        let c = &o["spec"]["template"]["spec"]["containers"][0];
        assert!(
            c["command"].is_null(),
            "{kind} {name} sets a command: the image's entrypoint is what runs"
        );
        let mut args: Vec<&str> = c["args"].as_array().expect("args").iter().map(s).collect();
        // Parsed, not run: the subcommand with the Pod's flags, asked for its help.
        args.push("--help");
        let out = image.run(&args);
        assert!(
            out.status.success(),
            "{kind} {name}: the entrypoint refuses its args {args:?}"
        );
    }
}

/// kube's TLS (rustls, the platform verifier) loads the system's CA bundle when a kubeconfig
/// names no CA; without one, no API client can be built at all.
#[test]
fn the_image_trusts_debians_ca_certificates() {
    let image = Unpacked::new("ca");
    // A kubeconfig without a CA, for a server that is not there: with the bundle the client
    // is built and the connection fails (69); without it, the client cannot be built (78).
    let kubeconfig = "apiVersion: v1\nkind: Config\n\
        clusters: [{name: c, cluster: {server: \"https://127.0.0.1:1\"}}]\n\
        users: [{name: u, user: {token: t}}]\n\
        contexts: [{name: x, context: {cluster: c, user: u}}]\n\
        current-context: x\n";
    std::fs::write(image.rootfs.join("tmp/kubeconfig"), kubeconfig).expect("kubeconfig");
    let status = ["status", "--cluster", "--kubeconfig", "/tmp/kubeconfig"];
    let out = image.run(&status);
    let stderr = String::from_utf8_lossy(&out.stderr).into_owned();
    assert_eq!(
        out.status.code(),
        Some(69),
        "with the image's CA bundle, the client is built and only the connection fails: \
         {stderr}"
    );
    assert!(stderr.contains("Connection refused"), "{stderr}");

    // The check has teeth: the same without the bundle cannot build a client.
    let bundle = image.rootfs.join("etc/ssl/certs/ca-certificates.crt");
    let pem = std::fs::read_to_string(&bundle).expect("the image has the CA bundle");
    assert!(
        pem.matches("BEGIN CERTIFICATE").count() > 100,
        "the bundle holds Debian's certificates"
    );
    std::fs::remove_file(&bundle).expect("remove the bundle");
    let out = image.run(&status);
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(78), "without a CA bundle: {stderr}");
    assert!(stderr.contains("CA certificates"), "{stderr}");
}
