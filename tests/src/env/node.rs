//! One node with the API server inside its own namespace: for the tests that run a single agent
//! with the real data plane (`tests/agent/dataplane.rs`, `tests/agent/status.rs`). The agent reaches the server
//! on the namespace's loopback, so nothing crosses into the root namespace.
//!
//! What is here: a process guard that kills on drop (also while a test panics), the API
//! server's seed (a Ready `node-a`, Service `default/web` with an endpoint on it), starting the `apiserver` binary, setting the Service's ingress IPs the way an IPAM
//! controller would, and a poll-until helper that shows the agent's log when it gives up.

use std::{
    io::{BufRead, BufReader},
    net::IpAddr,
    path::{Path, PathBuf},
    process::{Command, Stdio},
    time::{Duration, Instant},
};

use serde_json::json;

use crate::{
    cli::announcer_bin,
    env::process::Guarded,
    netns::{NODE_V4, Netns},
};

/// A process killed (and reaped) on drop, also when the test panics, with its log.
pub struct Proc {
    /// The process.
    pub child: Guarded,
    /// Where its stderr goes.
    pub log: PathBuf,
}

impl Proc {
    /// Spawns `cmd` under a [`Guarded`] child, its log at `log` (set `cmd`'s stderr to it).
    pub fn spawn(cmd: &mut Command, log: PathBuf) -> Self {
        let child =
            Guarded::spawn(cmd).unwrap_or_else(|e| panic!("spawn {:?}: {e}", cmd.get_program()));
        Self { child, log }
    }

    /// The last lines of its log.
    pub fn log_tail(&self) -> String {
        log_tail(&self.log)
    }
}

/// The last 25 lines of `log`.
pub fn log_tail(log: &Path) -> String {
    let text = std::fs::read_to_string(log).unwrap_or_default();
    let lines: Vec<&str> = text.lines().collect();
    lines[lines.len().saturating_sub(25)..].join("\n")
}

/// The objects the API server starts with: Node `node-a` (InternalIP
/// [`NODE_V4`], Ready), Service `default/web` with a ready endpoint on node-a. (Its VIPs go in
/// with [`set_ingress`]: like kube-apiserver, the server drops a Service's status on create.)
pub fn seed() -> String {
    let docs = [
        json!({"apiVersion": "v1", "kind": "Node", "metadata": {"name": "node-a"},
               "status": {"conditions": [{"type": "Ready", "status": "True"}],
                          "addresses": [{"type": "InternalIP", "address": NODE_V4.to_string()}]}}),
        json!({"apiVersion": "v1", "kind": "Service",
               "metadata": {"name": "web", "namespace": "default"},
               "spec": {"type": "LoadBalancer", "ports": [{"port": 80}],
                        "externalTrafficPolicy": "Cluster"}}),
        json!({"apiVersion": "discovery.k8s.io/v1", "kind": "EndpointSlice",
               "metadata": {"name": "web-slice", "namespace": "default",
                            "labels": {"kubernetes.io/service-name": "web"}},
               "addressType": "IPv4",
               "endpoints": [{"addresses": ["10.244.0.1"], "nodeName": "node-a",
                              "conditions": {"ready": true}}]}),
    ];
    docs.iter()
        .map(|d| serde_json::to_string(d).expect("json"))
        .collect::<Vec<_>>()
        .join("\n---\n")
}

/// Starts the `apiserver` binary (built next to `announcer`) in `ns` with [`seed`]; returns it
/// and its address once it printed it. Its kubeconfig (token `node-a`) is `dir/kubeconfig`.
pub fn start_apiserver(ns: &Netns, dir: &Path) -> (Proc, String) {
    let seed_path = dir.join("seed.yaml");
    std::fs::write(&seed_path, seed()).expect("seed");
    let log = dir.join("apiserver.log");
    let mut cmd = ns.nsenter_cmd(
        announcer_bin()
            .with_file_name("apiserver")
            .to_str()
            .expect("utf-8"),
    );
    cmd.args(["--listen", "127.0.0.1:0", "--tokens", "node-a"])
        .arg("--kubeconfig-out")
        .arg(dir.join("kubeconfig"))
        .arg("--seed")
        .arg(&seed_path)
        .stdout(Stdio::piped())
        .stderr(std::fs::File::create(&log).expect("log"));
    let mut proc = Proc::spawn(&mut cmd, log);
    let stdout = proc.child.stdout.take().expect("stdout");
    let mut line = String::new();
    BufReader::new(stdout)
        .read_line(&mut line)
        .expect("read address");
    assert!(
        line.trim().starts_with("127.0.0.1:"),
        "apiserver did not start: {line:?}\n{}",
        proc.log_tail()
    );
    (proc, line.trim().to_owned())
}

/// Sets `default/web`'s ingress IPs through the status subresource, as an IPAM controller
/// would, from inside the node namespace (where the API server listens).
pub fn set_ingress(ns: &Netns, api: &str, vips: &[IpAddr]) {
    let ingress: Vec<_> = vips.iter().map(|v| json!({"ip": v.to_string()})).collect();
    let body = json!({"status": {"loadBalancer": {"ingress": ingress}}});
    let url = format!("http://{api}/api/v1/namespaces/default/services/web/status");
    let status = ns.enter(|| {
        ureq::request("PATCH", &url)
            .set("Authorization", "Bearer node-a")
            .set("Content-Type", "application/merge-patch+json")
            .send_string(&body.to_string())
            .map(|r| r.status())
            .map_err(|e| e.to_string())
    });
    assert_eq!(status, Ok(200), "patch the Service status");
}

/// Polls `cond` for up to `timeout`; panics with `log`'s tail if it never holds.
pub fn wait(what: &str, timeout: Duration, log: &Path, mut cond: impl FnMut() -> bool) {
    let end = Instant::now() + timeout;
    while !cond() {
        assert!(
            Instant::now() < end,
            "timed out waiting for {what}\n--- agent log ---\n{}",
            log_tail(log)
        );
        std::thread::sleep(Duration::from_millis(50));
    }
}
