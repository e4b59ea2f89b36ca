//! `cargo xtask kube up|down|status`: a real control plane plus the testbed, left running in
//! the background (the `kube-env` binary of `announcer-tests`), for poking at with kubectl.
//!
//! Why a background process: the testbed and the control plane are children that die with the
//! process that started them (a parent-death signal), so something must stay alive between
//! `up` and `down`. `up` starts `kube-env` in a session of its own, waits for its state file
//! (`target/kube/env/state.json`), and prints the paths; `down` sends it SIGTERM, after which
//! it removes everything it made, and waits until it is gone.

use std::{
    path::{Path, PathBuf},
    process::{Command, Stdio},
    time::{Duration, Instant},
};

use anyhow::{Context, Result, bail};

/// What to do.
#[derive(Clone, Copy, Debug, PartialEq, Eq, clap::ValueEnum)]
pub enum Action {
    /// Start it (if not running) and print the paths.
    Up,
    /// Remove all of it.
    Down,
    /// Print the paths if it runs.
    Status,
}

fn env_dir(root: &Path) -> PathBuf {
    root.join("target/kube/env")
}

fn state_file(root: &Path) -> PathBuf {
    env_dir(root).join("state.json")
}

fn pid_file(root: &Path) -> PathBuf {
    env_dir(root).join("pid")
}

fn alive(pid: u32) -> bool {
    Path::new(&format!("/proc/{pid}")).exists()
        && !std::fs::read_to_string(format!("/proc/{pid}/stat"))
            .is_ok_and(|s| s.split_whitespace().nth(2) == Some("Z"))
}

fn running_pid(root: &Path) -> Option<u32> {
    let pid: u32 = std::fs::read_to_string(pid_file(root))
        .ok()?
        .trim()
        .parse()
        .ok()?;
    alive(pid).then_some(pid)
}

fn print_state(root: &Path) -> Result<()> {
    let text = std::fs::read_to_string(state_file(root)).context("no state file")?;
    let v: serde_json::Value = serde_json::from_str(&text)?;
    let s = |k: &str| v[k].as_str().unwrap_or("?").to_string();
    println!("control plane and testbed running (pid {}):", v["pid"]);
    println!("  kubeconfig: {}", s("kubeconfig"));
    println!("  kubectl:    {}", s("kubectl"));
    println!(
        "  try:        {} --kubeconfig {} get nodes,pods,svc,leases -A",
        s("kubectl"),
        s("kubeconfig")
    );
    println!(
        "  logs:       {} and {}",
        s("control_plane_dir"),
        s("testbed_dir")
    );
    println!("  remove:     cargo xtask kube down");
    Ok(())
}

/// Runs `action` (the binaries are built by the caller).
pub fn run(root: &Path, action: Action) -> Result<()> {
    match action {
        Action::Status => match running_pid(root) {
            Some(_) if state_file(root).exists() => print_state(root),
            Some(pid) => {
                println!("starting (pid {pid})");
                Ok(())
            }
            None => {
                println!("not running");
                Ok(())
            }
        },
        Action::Up => {
            if running_pid(root).is_some() {
                return print_state(root);
            }
            let dir = env_dir(root);
            std::fs::create_dir_all(&dir)?;
            let _ = std::fs::remove_file(state_file(root));
            let log_path = dir.join("kube-env.log");
            let log = std::fs::File::create(&log_path)?;
            let child = {
                use std::os::unix::process::CommandExt;
                Command::new(root.join("target/release/kube-env"))
                    .arg(state_file(root))
                    .current_dir(root)
                    .stdin(Stdio::null())
                    .stdout(log.try_clone()?)
                    .stderr(log)
                    // Its own session: the terminal's Ctrl-C and hangup do not reach it.
                    .process_group(0)
                    .spawn()
                    .context("starting kube-env")?
            };
            std::fs::write(pid_file(root), child.id().to_string())?;
            eprintln!("xtask: starting (log: {})", log_path.display());
            let started = Instant::now();
            while !state_file(root).exists() {
                if !alive(child.id()) {
                    let tail = std::fs::read_to_string(&log_path).unwrap_or_default();
                    bail!("kube-env exited before it was up:\n{tail}");
                }
                if started.elapsed() > Duration::from_secs(180) {
                    bail!("not up after 180 s; see {}", log_path.display());
                }
                std::thread::sleep(Duration::from_millis(200));
            }
            eprintln!("xtask: up in {:.1} s", started.elapsed().as_secs_f64());
            print_state(root)
        }
        Action::Down => {
            let Some(pid) = running_pid(root) else {
                println!("not running");
                return Ok(());
            };
            // SAFETY: kill(2) with a pid we started and checked is alive.
            unsafe { libc_kill(pid as i32, 15) };
            let started = Instant::now();
            while alive(pid) {
                if started.elapsed() > Duration::from_secs(60) {
                    bail!("kube-env (pid {pid}) did not exit within 60 s of SIGTERM");
                }
                std::thread::sleep(Duration::from_millis(100));
            }
            let _ = std::fs::remove_file(pid_file(root));
            let _ = std::fs::remove_file(state_file(root));
            println!("removed");
            Ok(())
        }
    }
}

unsafe extern "C" {
    #[link_name = "kill"]
    fn libc_kill(pid: i32, sig: i32) -> i32;
}
