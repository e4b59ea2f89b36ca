//! The agent of the release before the allocator moved to its own Deployment, for the upgrade
//! test (`tests/tests/deploy/upgrade.rs`, which reads its path from `ANNOUNCER_OLD_BIN`).
//!
//! Why built here: the test must run in CI and never skip, and that binary is not a thing any
//! registry serves. It is built once per machine from the commit's own tree (`git archive`,
//! so the clone needs its history) into `target/upgrade-from/<commit>/`, with its own target
//! directory: the workspace's `target/debug` would have its `announcer` overwritten. The first
//! build is seeded with hard links to the workspace's already-built dependencies, so only the
//! project's own crates compile (cargo keys those by path, so the two trees never share them).

use std::{
    path::{Path, PathBuf},
    process::{Command, Stdio},
};

use anyhow::{Context, Result, bail};

/// The last commit whose agents allocated addresses (the upgrade test's `BEFORE`).
pub const BEFORE: &str = "b94869a";

/// The old `announcer` binary, built on first use.
pub fn ensure(root: &Path) -> Result<PathBuf> {
    let dir = root.join("target/upgrade-from").join(BEFORE);
    let bin = dir.join("target/debug/announcer");
    if bin.is_file() {
        return Ok(bin);
    }
    println!("xtask: building the agent of {BEFORE} for the upgrade test (once per machine)");
    let src = dir.join("src");
    if src.exists() {
        std::fs::remove_dir_all(&src).with_context(|| format!("remove {}", src.display()))?;
    }
    std::fs::create_dir_all(&src)?;
    let archive = Command::new("git")
        .current_dir(root)
        .args(["archive", "--format=tar", BEFORE])
        .stdout(Stdio::piped())
        .spawn()
        .context("git archive (the upgrade test needs the clone's history)")?;
    let tar = Command::new("tar")
        .args(["-x", "-C"])
        .arg(&src)
        .stdin(archive.stdout.context("git archive's output")?)
        .status()
        .context("tar")?;
    if !tar.success() {
        bail!("could not unpack commit {BEFORE}: is the clone shallow? (`git fetch --unshallow`)");
    }
    let target = dir.join("target");
    let seed = root.join("target/debug");
    if !target.exists() && seed.is_dir() {
        std::fs::create_dir_all(&target)?;
        // Hard links: instant, and cargo replaces rather than rewrites what it rebuilds.
        crate::run(
            Command::new("cp")
                .arg("-al")
                .arg(&seed)
                .arg(target.join("debug")),
        )?;
    }
    crate::run(
        Command::new(std::env::var("CARGO").unwrap_or_else(|_| "cargo".into()))
            .current_dir(&src)
            .env("CARGO_TARGET_DIR", &target)
            .args(["build", "--quiet", "-p", "announcer", "--bin", "announcer"]),
    )?;
    if !bin.is_file() {
        bail!("building {BEFORE} left no {}", bin.display());
    }
    Ok(bin)
}
