//! Wrappers around `arping`, `ndisc6` and `ip neigh`, run inside a [`Netns`].
//!
//! Tools run through [`Netns::nsenter_cmd`] with a hard timeout (the process is
//! killed if it overruns). A missing tool panics with the install command.

use std::io::Read;
use std::net::{Ipv4Addr, Ipv6Addr};
use std::path::PathBuf;
use std::process::{Command, Output, Stdio};
use std::sync::OnceLock;
use std::time::{Duration, Instant};

use crate::netns::{Netns, parse_mac};
use crate::programs::{find_program, require_program};

const INSTALL_HINT: &str = "run `apt-get install arping ndisc6`";

fn arping_path() -> &'static PathBuf {
    static P: OnceLock<PathBuf> = OnceLock::new();
    P.get_or_init(|| {
        find_program("arping").unwrap_or_else(|| panic!("`arping` not found; {INSTALL_HINT}"))
    })
}

fn ndisc6_path() -> &'static PathBuf {
    static P: OnceLock<PathBuf> = OnceLock::new();
    P.get_or_init(|| {
        find_program("ndisc6").unwrap_or_else(|| panic!("`ndisc6` not found; {INSTALL_HINT}"))
    })
}

/// Which `arping` implementation is installed.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ArpingFlavor {
    /// Thomas Habets' arping (Debian package `arping`).
    Habets,
    /// iputils arping (Debian package `iputils-arping`).
    Iputils,
}

/// Detects (once) the installed `arping` flavour; panics if unknown.
pub fn arping_flavor() -> ArpingFlavor {
    static F: OnceLock<ArpingFlavor> = OnceLock::new();
    *F.get_or_init(|| {
        let path = arping_path();
        let text = |args: &[&str]| {
            let out = Command::new(path)
                .args(args)
                .stdin(Stdio::null())
                .output()
                .unwrap_or_else(|e| panic!("cannot run {}: {e}", path.display()));
            format!(
                "{}{}",
                String::from_utf8_lossy(&out.stdout),
                String::from_utf8_lossy(&out.stderr)
            )
        };
        let help = text(&["--help"]);
        if help.contains("Habets") {
            return ArpingFlavor::Habets;
        }
        let version = text(&["-V"]);
        if version.contains("iputils") || help.contains("iputils") {
            return ArpingFlavor::Iputils;
        }
        panic!(
            "unknown arping implementation at {}:\n{help}\n{version}\n{INSTALL_HINT}",
            path.display()
        )
    })
}

/// Runs `cmd` (stdin closed, stdout/stderr captured); kills it if it has not
/// exited after `timeout`. Returns the output and whether it was killed.
pub fn output_with_timeout(cmd: &mut Command, timeout: Duration) -> (Output, bool) {
    cmd.stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped());
    let mut child = cmd
        .spawn()
        .unwrap_or_else(|e| panic!("cannot run {cmd:?}: {e}"));
    let reader = |pipe: Option<Box<dyn Read + Send>>| {
        std::thread::spawn(move || {
            let mut buf = Vec::new();
            if let Some(mut p) = pipe {
                let _ = p.read_to_end(&mut buf);
            }
            buf
        })
    };
    let out_t = reader(child.stdout.take().map(|p| Box::new(p) as _));
    let err_t = reader(child.stderr.take().map(|p| Box::new(p) as _));
    let deadline = Instant::now() + timeout;
    let mut killed = false;
    let status = loop {
        match child.try_wait().expect("wait for child") {
            Some(s) => break s,
            None if Instant::now() >= deadline => {
                let _ = child.kill();
                killed = true;
                break child.wait().expect("wait for killed child");
            }
            None => std::thread::sleep(Duration::from_millis(5)),
        }
    };
    let stdout = out_t.join().unwrap_or_default();
    let stderr = err_t.join().unwrap_or_default();
    (
        Output {
            status,
            stdout,
            stderr,
        },
        killed,
    )
}

/// Result of an [`arping`] run.
#[derive(Debug, Clone, Default)]
pub struct ArpingResult {
    /// Number of ARP replies received (duplicates included).
    pub replies: u32,
    /// Sender MAC of each reply, in arrival order (one entry per reply).
    pub macs: Vec<[u8; 6]>,
    /// Raw output, for assertion messages.
    pub stdout: String,
    pub stderr: String,
}

impl ArpingResult {
    /// Distinct MACs that replied, in first-seen order.
    pub fn unique_macs(&self) -> Vec<[u8; 6]> {
        let mut v: Vec<[u8; 6]> = Vec::new();
        for m in &self.macs {
            if !v.contains(m) {
                v.push(*m);
            }
        }
        v
    }
}

/// Parses the reply lines of either arping flavour:
/// Habets `42 bytes from 02:00:00:00:00:01 (10.77.0.1): index=0 time=9.5 usec`,
/// iputils `Unicast reply from 10.77.0.1 [02:00:00:00:00:01]  0.678ms`.
pub fn parse_arping_output(stdout: &str) -> Vec<[u8; 6]> {
    stdout
        .lines()
        .filter(|l| l.contains(" bytes from ") || l.contains("reply from "))
        .filter_map(|l| {
            l.split_whitespace()
                .map(|t| t.trim_matches(['[', ']', '(', ')', ',']))
                .find_map(parse_mac)
        })
        .collect()
}

fn arping_impl(
    ns: &Netns,
    iface: &str,
    target: Ipv4Addr,
    count: u32,
    timeout: Duration,
    dad: bool,
) -> ArpingResult {
    assert!(count >= 1, "arping count must be >= 1");
    let flavor = arping_flavor();
    let mut cmd = ns.nsenter_cmd(&arping_path().to_string_lossy());
    let target_s = target.to_string();
    let count_s = count.to_string();
    match flavor {
        ArpingFlavor::Habets => {
            // Send `count` requests spread over `timeout` (-W interval), and
            // keep listening until then so duplicate replies are counted.
            let interval = (timeout.as_secs_f64() / count as f64).max(0.01);
            cmd.args(["-i", iface, "-c", &count_s])
                .args(["-W", &format!("{interval:.3}")])
                // The deadline leaves slack beyond the spread, so that on a loaded machine
                // the last requests are still sent and their answers still awaited.
                .args([
                    "-w",
                    &format!("{:.3}", timeout.as_secs_f64().max(0.01) * 1.5 + 1.0),
                ]);
            if dad {
                cmd.arg("-0");
            }
        }
        ArpingFlavor::Iputils => {
            let secs = timeout.as_secs_f64().ceil().max(1.0) as u64;
            cmd.args(["-I", iface, "-c", &count_s, "-w", &secs.to_string()]);
            if dad {
                cmd.arg("-D");
            }
        }
    }
    cmd.arg(&target_s);
    let described = format!("{cmd:?}");
    let (out, killed) = output_with_timeout(&mut cmd, timeout * 2 + Duration::from_secs(3));
    let stdout = String::from_utf8_lossy(&out.stdout).into_owned();
    let stderr = String::from_utf8_lossy(&out.stderr).into_owned();
    let finished = stdout.contains("transmitted") || stdout.contains("Sent ");
    let code_ok = matches!(out.status.code(), Some(0 | 1));
    if killed || !finished || !code_ok {
        panic!(
            "arping failed ({}{}): {described}\n--- stdout ---\n{stdout}\n--- stderr ---\n{stderr}",
            out.status,
            if killed { ", killed after timeout" } else { "" }
        );
    }
    let macs = parse_arping_output(&stdout);
    ArpingResult {
        replies: macs.len() as u32,
        macs,
        stdout,
        stderr,
    }
}

/// Sends `count` ARP requests for `target` out of `iface` in `ns`, spread over
/// `timeout`, and collects every reply received until then.
pub fn arping(
    ns: &Netns,
    iface: &str,
    target: Ipv4Addr,
    count: u32,
    timeout: Duration,
) -> ArpingResult {
    arping_impl(ns, iface, target, count, timeout, false)
}

/// Like [`arping`] but sends duplicate-address probes (sender IP 0.0.0.0;
/// Habets `-0`, iputils `-D`).
pub fn arping_probe(
    ns: &Netns,
    iface: &str,
    target: Ipv4Addr,
    count: u32,
    timeout: Duration,
) -> ArpingResult {
    arping_impl(ns, iface, target, count, timeout, true)
}

fn ndisc6_impl(
    ns: &Netns,
    target: Ipv6Addr,
    iface: &str,
    timeout: Duration,
    multiple: bool,
) -> Vec<[u8; 6]> {
    let ms = timeout.as_millis().max(1).to_string();
    let mut cmd = ns.nsenter_cmd(&ndisc6_path().to_string_lossy());
    cmd.args([
        "-n",
        if multiple { "-m" } else { "-1" },
        "-r",
        "1",
        "-w",
        &ms,
    ])
    .arg(target.to_string())
    .arg(iface);
    let described = format!("{cmd:?}");
    let (out, killed) = output_with_timeout(&mut cmd, timeout * 2 + Duration::from_secs(3));
    let stdout = String::from_utf8_lossy(&out.stdout).into_owned();
    let stderr = String::from_utf8_lossy(&out.stderr).into_owned();
    let macs: Vec<[u8; 6]> = stdout
        .lines()
        .filter_map(|l| l.trim().strip_prefix("Target link-layer address:"))
        .map(|m| {
            parse_mac(m).unwrap_or_else(|| panic!("bad MAC {m:?} in ndisc6 output:\n{stdout}"))
        })
        .collect();
    let no_response = out.status.code() == Some(2)
        && (stdout.contains("No response") || stderr.contains("No response"));
    let ok = !killed && (out.status.success() || no_response || (multiple && !macs.is_empty()));
    if !ok {
        panic!(
            "ndisc6 failed ({}{}): {described}\n--- stdout ---\n{stdout}\n--- stderr ---\n{stderr}",
            out.status,
            if killed { ", killed after timeout" } else { "" }
        );
    }
    macs
}

/// Neighbor solicitation for `target` on `iface` from `ns`
/// (`ndisc6 -1 -r 1 -w MS TARGET IFACE`): the first answer's link-layer address,
/// `None` if nothing answered within `timeout`.
pub fn ndisc6(ns: &Netns, target: Ipv6Addr, iface: &str, timeout: Duration) -> Option<[u8; 6]> {
    ndisc6_impl(ns, target, iface, timeout, false)
        .into_iter()
        .next()
}

/// Like [`ndisc6`] but waits the whole `timeout` and returns every answer
/// (`ndisc6 -m`), to detect duplicate responders.
pub fn ndisc6_all(ns: &Netns, target: Ipv6Addr, iface: &str, timeout: Duration) -> Vec<[u8; 6]> {
    ndisc6_impl(ns, target, iface, timeout, true)
}

/// Flushes the neighbour (ARP + NDP) cache of `iface` in `ns`.
pub fn neigh_flush(ns: &Netns, iface: &str) {
    ns.ip(&["neigh", "flush", "dev", iface]);
}

/// A `tcpdump` running in a namespace, started by [`capture`].
pub struct Capture {
    child: std::process::Child,
}

/// Starts `tcpdump -n -e -l -c COUNT -i IFACE FILTER` in `ns` and waits until it listens.
pub fn capture(ns: &Netns, iface: &str, count: u32, filter: &str) -> Capture {
    require_program("tcpdump", "tcpdump");
    let child = ns
        .nsenter_cmd("tcpdump")
        .args([
            "-n",
            "-e",
            "-l",
            "-c",
            &count.to_string(),
            "-i",
            iface,
            filter,
        ])
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::null())
        .spawn()
        .expect("spawn tcpdump");
    std::thread::sleep(Duration::from_millis(400));
    Capture { child }
}

impl Capture {
    /// Stops the capture (after a moment for late frames) and returns what it printed.
    pub fn finish(mut self) -> String {
        std::thread::sleep(Duration::from_millis(300));
        let _ = self.child.kill();
        self.child
            .wait_with_output()
            .map(|o| String::from_utf8_lossy(&o.stdout).into_owned())
            .unwrap_or_default()
    }
}

#[cfg(test)]
mod unit {
    use super::*;

    #[test]
    fn parses_both_arping_flavours() {
        let habets = "ARPING 10.77.0.1\n\
            42 bytes from 02:00:00:00:00:01 (10.77.0.1): index=0 time=9.518 usec\n\
            42 bytes from 02:00:00:00:00:03 (10.77.0.1): index=1 time=4.993 usec\n\n\
            --- 10.77.0.1 statistics ---\n\
            2 packets transmitted, 2 packets received,   0% unanswered (0 extra)\n";
        assert_eq!(
            parse_arping_output(habets),
            vec![[2, 0, 0, 0, 0, 1], [2, 0, 0, 0, 0, 3]]
        );
        let iputils = "ARPING 10.77.0.1 from 10.77.0.2 eth0\n\
            Unicast reply from 10.77.0.1 [02:00:00:00:00:01]  0.678ms\n\
            Sent 1 probes (1 broadcast(s))\nReceived 1 response(s)\n";
        assert_eq!(parse_arping_output(iputils), vec![[2, 0, 0, 0, 0, 1]]);
        let none = "ARPING 10.77.0.9\nTimeout\n\n--- 10.77.0.9 statistics ---\n\
            1 packets transmitted, 0 packets received, 100% unanswered (0 extra)\n";
        assert!(parse_arping_output(none).is_empty());
    }
}
