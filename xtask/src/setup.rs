//! Installs what the build and the tests need, once; each step checks before it acts.
//!
//! * Debian's `rustc-web`, `rust-web-src` and `cargo-web`: rustc 1.96 with LLVM 22 and the
//!   `core` sources at `/usr`. rustup's toolchains ship no `rust-src`, which `-Z build-std=core`
//!   needs for the `bpfel-unknown-none` target.
//! * `rustup toolchain link debian-bpf /usr`, the name `announcer/build.rs` builds the eBPF
//!   crate with.
//! * `bpf-linker` 0.10.0 (LLVM 22, loaded from that toolchain at run time).
//! * Test and bench tools: iproute2, bpftool, arping, ndisc6, tcpdump, ethtool, and
//!   libfaketime (the testbed runs an agent with its wall clock offset, `LD_PRELOAD`ing
//!   `libfaketime.so.1`; `faketime` is its command-line wrapper, for trying it by hand).
//! * `kubernetes-validate` from PyPI, which checks `deploy/` against the Kubernetes OpenAPI
//!   schemas it bundles, offline (`tests/tests/deploy.rs`).

use std::{path::Path, process::Command};

use anyhow::{Context, Result, bail};

use crate::run;

const APT_PACKAGES: &[&str] = &[
    "rustc-web",
    "rust-web-src",
    "cargo-web",
    "iproute2",
    "bpftool",
    "arping",
    "keepalived",
    "ndisc6",
    "tcpdump",
    "ethtool",
    "util-linux",
    "libfaketime",
    "faketime",
];
const TOOLCHAIN: &str = "debian-bpf";
const BPF_LINKER_VERSION: &str = "0.10.0";
/// Bundles the schemas of Kubernetes 1.25 to 1.37.
const KUBERNETES_VALIDATE_VERSION: &str = "1.37.0";

/// Runs every step that is not already done.
pub fn ensure() -> Result<()> {
    apt()?;
    link_toolchain()?;
    bpf_linker()?;
    kubernetes_validate()?;
    Ok(())
}

fn installed(pkg: &str) -> bool {
    Command::new("dpkg-query")
        .args(["-W", "-f=${Status}", pkg])
        .output()
        .is_ok_and(|o| String::from_utf8_lossy(&o.stdout).contains("install ok installed"))
}

fn apt() -> Result<()> {
    let missing: Vec<&str> = APT_PACKAGES
        .iter()
        .copied()
        .filter(|p| !installed(p))
        .collect();
    if missing.is_empty() {
        return Ok(());
    }
    eprintln!("xtask: installing {} with apt-get", missing.join(" "));
    run(Command::new("apt-get").args(["update", "-q"]))?;
    run(Command::new("apt-get")
        .args(["install", "-y", "-q", "--no-install-recommends"])
        .args(&missing)
        .env("DEBIAN_FRONTEND", "noninteractive"))
    .context("apt-get install (are you root, with the Debian mirrors reachable?)")
}

fn link_toolchain() -> Result<()> {
    let out = Command::new("rustup")
        .args(["toolchain", "list"])
        .output()
        .context("running rustup")?;
    if String::from_utf8_lossy(&out.stdout)
        .lines()
        .any(|l| l.starts_with(TOOLCHAIN))
    {
        return Ok(());
    }
    if !Path::new("/usr/lib/rustlib/src/rust/library/core").exists() {
        bail!("/usr/lib/rustlib/src/rust/library/core is missing: is rust-web-src installed?");
    }
    eprintln!("xtask: linking Debian's rustc-web as the rustup toolchain {TOOLCHAIN}");
    run(Command::new("rustup").args(["toolchain", "link", TOOLCHAIN, "/usr"]))
}

fn bpf_linker() -> Result<()> {
    let ok = Command::new("bpf-linker")
        .arg("--version")
        .output()
        .is_ok_and(|o| String::from_utf8_lossy(&o.stdout).contains(BPF_LINKER_VERSION));
    if ok {
        return Ok(());
    }
    eprintln!("xtask: installing bpf-linker {BPF_LINKER_VERSION} (a minute or two)");
    run(Command::new("cargo").args(["install", "bpf-linker", "--version", BPF_LINKER_VERSION]))
}

/// `kubernetes-validate`, for the `python3` on PATH (the one the deploy test runs). Installed
/// with pip past PEP 668's guard, because Debian's python3 refuses plain `pip install` and the
/// package has no Debian build; it adds one small pure-Python package and its two dependencies.
fn kubernetes_validate() -> Result<()> {
    let ok = Command::new("python3")
        .args(["-m", "kubernetes_validate", "--version"])
        .output()
        .is_ok_and(|o| {
            o.status.success()
                && String::from_utf8_lossy(&o.stdout).trim() == KUBERNETES_VALIDATE_VERSION
        });
    if ok {
        return Ok(());
    }
    let has_pip = Command::new("python3")
        .args(["-m", "pip", "--version"])
        .output()
        .is_ok_and(|o| o.status.success());
    if !has_pip {
        eprintln!("xtask: installing python3-pip with apt-get");
        run(Command::new("apt-get").args(["update", "-q"]))?;
        run(Command::new("apt-get")
            .args([
                "install",
                "-y",
                "-q",
                "--no-install-recommends",
                "python3-pip",
            ])
            .env("DEBIAN_FRONTEND", "noninteractive"))?;
    }
    eprintln!("xtask: installing kubernetes-validate {KUBERNETES_VALIDATE_VERSION} with pip");
    run(Command::new("python3").args([
        "-m",
        "pip",
        "install",
        "--quiet",
        "--break-system-packages",
        "--root-user-action=ignore",
        &format!("kubernetes-validate=={KUBERNETES_VALIDATE_VERSION}"),
    ]))
    .context("pip install kubernetes-validate (is PyPI reachable?)")
}
