//! The agent with its data plane, for real: the API server and one agent run inside a node
//! namespace (sharing its loopback), the agent attaches XDP (generic mode) to the node's veth,
//! and a client namespace on the other end checks what a neighbour on the LAN would see:
//! ARP/NDP answers with the node's MAC, the gratuitous announcements in its neighbour table, and
//! silence once the agent has been told to stop. Needs root; never skips.

use std::{
    io::{BufRead, BufReader},
    net::{IpAddr, Ipv4Addr, Ipv6Addr},
    path::{Path, PathBuf},
    process::{Child, Stdio},
    time::{Duration, Instant},
};

use announcer_tests::{
    cli::{Cli, announcer_bin},
    cluster::{owned_vips, state_at},
    netns::{CLIENT_IF, NODE_IF, NODE_MAC, NODE_V4, Netns, Pair, fmt_mac, require_root},
    tools::{arping, ndisc6, neigh_flush},
};
use serde_json::{Value, json};

const VIP4: Ipv4Addr = Ipv4Addr::new(10, 77, 0, 100);
const VIP6: Ipv6Addr = Ipv6Addr::new(0xfd77, 0, 0, 0, 0, 0, 0, 0x100);
/// The agent's `/state` port inside the node namespace (nothing else listens there).
const HTTP: u16 = 9746;
/// Generous bound for the agent to start, attach and take the VIPs.
const T: Duration = Duration::from_secs(20);
/// How long a single ARP/NDP exchange may take.
const PROBE: Duration = Duration::from_millis(800);

/// A process killed (and reaped) on drop, also when the test panics.
struct Proc {
    child: Child,
    log: PathBuf,
}

impl Proc {
    fn log_tail(&self) -> String {
        log_tail(&self.log)
    }
}

fn log_tail(log: &Path) -> String {
    let text = std::fs::read_to_string(log).unwrap_or_default();
    let lines: Vec<&str> = text.lines().collect();
    lines[lines.len().saturating_sub(25)..].join("\n")
}

impl Drop for Proc {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// The objects the API server starts with: the heartbeat key, Node `node-a` (InternalIP
/// 10.77.0.1, Ready), Service `default/web` with a ready endpoint on node-a. (Its VIPs go in
/// with [`set_ingress`]: like kube-apiserver, the server drops a Service's status on create.)
fn seed() -> String {
    let docs = [
        json!({"apiVersion": "v1", "kind": "Secret",
               "metadata": {"name": "announcer-heartbeat-key", "namespace": "announcer-system"},
               "data": {"key": "MDEyMzQ1Njc4OWFiY2RlZjAxMjM0NTY3ODlhYmNkZWY="}}),
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

/// Starts the `apiserver` binary in `ns`; returns it and its address once it printed it.
fn start_apiserver(ns: &Netns, dir: &Path) -> (Proc, String) {
    let seed_path = dir.join("seed.yaml");
    std::fs::write(&seed_path, seed()).expect("seed");
    let log = dir.join("apiserver.log");
    let mut child = ns
        .nsenter_cmd(env!("CARGO_BIN_EXE_apiserver"))
        .args(["--listen", "127.0.0.1:0", "--tokens", "node-a"])
        .arg("--kubeconfig-out")
        .arg(dir.join("kubeconfig"))
        .arg("--seed")
        .arg(&seed_path)
        .stdout(Stdio::piped())
        .stderr(std::fs::File::create(&log).expect("log"))
        .spawn()
        .expect("spawn apiserver");
    let stdout = child.stdout.take().expect("stdout");
    let proc = Proc { child, log };
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
fn set_ingress(ns: &Netns, api: &str) {
    let body = json!({"status": {"loadBalancer": {"ingress": [
        {"ip": VIP4.to_string()}, {"ip": VIP6.to_string()}]}}});
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

/// The agent's `/state`, read from inside the node namespace.
fn state(ns: &Netns) -> Option<Value> {
    ns.enter(|| state_at(HTTP))
}

/// Whether the client's neighbour table maps `ip` to the node's MAC.
fn neighbour_is_node(client: &Netns, ip: IpAddr) -> bool {
    let out = client.ip(&["-j", "neigh", "show", "dev", CLIENT_IF]);
    let entries: Value = serde_json::from_str(&out).unwrap_or(Value::Null);
    entries.as_array().into_iter().flatten().any(|e| {
        e["dst"].as_str().and_then(|d| d.parse::<IpAddr>().ok()) == Some(ip)
            && e["lladdr"].as_str() == Some(fmt_mac(NODE_MAC).as_str())
    })
}

/// Polls `cond` for up to `timeout`; panics with `log`'s tail if it never holds.
fn wait(what: &str, timeout: Duration, log: &Path, mut cond: impl FnMut() -> bool) {
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

/// `vip list --json` rows for our VIPs.
fn listed(cli: &Cli) -> Vec<Value> {
    let list: Value = serde_json::from_str(&cli.ok(&["vip", "list", "--json"])).expect("json");
    list.as_array()
        .cloned()
        .unwrap_or_default()
        .into_iter()
        .filter(|v| v["vip"] == VIP4.to_string() || v["vip"] == VIP6.to_string())
        .collect()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn agent_answers_announces_and_withdraws_on_sigterm() {
    require_root();
    let pair = Pair::new("agent-dp");
    // A LAN neighbour that learns from gratuitous ARP and unsolicited NA. Linux only creates
    // entries from them when asked to: `arp_accept`, and for IPv6 `accept_untracked_na`, which
    // only applies to a router (RFC 9131), hence `forwarding`.
    for conf in ["all", CLIENT_IF] {
        let sysctl = |key: &str| pair.client.sysctl(key, "1");
        sysctl(&format!("net.ipv4.conf.{conf}.arp_accept"));
        sysctl(&format!("net.ipv6.conf.{conf}.forwarding"));
        sysctl(&format!("net.ipv6.conf.{conf}.accept_untracked_na"));
    }
    let dir = std::env::temp_dir().join(format!("anndp-{}", std::process::id()));
    std::fs::create_dir_all(&dir).expect("dir");
    let cli = Cli::new(&pair.node);
    let (_api, api_addr) = start_apiserver(&pair.node, &dir);
    set_ingress(&pair.node, &api_addr);

    let log = dir.join("agent.log");
    let child = pair
        .node
        .nsenter_cmd(announcer_bin().to_str().expect("utf-8"))
        .arg("--pin-root")
        .arg(cli.root())
        .args([
            "agent",
            "--node-name",
            "node-a",
            "--namespace",
            "announcer-system",
        ])
        .arg("--kubeconfig")
        .arg(dir.join("kubeconfig.node-a"))
        .args(["--xdp-mode", "generic", "--http-address"])
        .arg(format!("127.0.0.1:{HTTP}"))
        .env("RUST_LOG", "info,announcer=debug")
        .env("NO_COLOR", "1")
        .stdout(Stdio::null())
        .stderr(std::fs::File::create(&log).expect("log"))
        .spawn()
        .expect("spawn agent");
    let mut agent = Proc {
        child,
        log: log.clone(),
    };

    let vips = [IpAddr::V4(VIP4), IpAddr::V6(VIP6)];
    wait("the agent to own both VIPs", T, &log, || {
        state(&pair.node).is_some_and(|s| {
            let owned = owned_vips(&s);
            s["dataplane"] == true && vips.iter().all(|v| owned.contains(v))
        })
    });

    // The takeover burst reached the client: its neighbour table has both VIPs at the node's
    // MAC without it having asked.
    wait(
        "the announcements in the client's neighbour table",
        T,
        &log,
        || vips.iter().all(|v| neighbour_is_node(&pair.client, *v)),
    );

    // Asked, the node answers with its MAC.
    neigh_flush(&pair.client, CLIENT_IF);
    let r = arping(&pair.client, CLIENT_IF, VIP4, 2, PROBE);
    assert!(r.replies >= 1, "ARP for the VIP answered: {r:?}");
    assert_eq!(r.unique_macs(), vec![NODE_MAC], "{r:?}");
    assert_eq!(ndisc6(&pair.client, VIP6, CLIENT_IF, PROBE), Some(NODE_MAC));

    // The operator's view of the map: both VIPs, live, with the node's MAC, on the veth.
    let rows = listed(&cli);
    assert_eq!(rows.len(), 2, "{rows:?}");
    for r in &rows {
        assert_eq!(r["live"], true, "{r}");
        assert_eq!(r["iface"], NODE_IF, "{r}");
        assert_eq!(r["mac"].as_str(), Some(fmt_mac(NODE_MAC).as_str()), "{r}");
    }

    // SIGTERM: no peer to hand over to; the agent withdraws its entries and exits 0.
    // SAFETY: kill(2) on a child we spawned and have not reaped.
    unsafe { libc::kill(agent.child.id() as i32, libc::SIGTERM) };
    let mut code = None;
    wait("the agent to exit", T, &log, || {
        code = agent.child.try_wait().expect("try_wait").map(|s| s.code());
        code.is_some()
    });
    assert_eq!(code, Some(Some(0)), "exit status\n{}", agent.log_tail());
    assert!(
        listed(&cli).is_empty(),
        "VIPs left in the map: {:?}",
        listed(&cli)
    );
    neigh_flush(&pair.client, CLIENT_IF);
    let r = arping(&pair.client, CLIENT_IF, VIP4, 2, PROBE);
    assert_eq!(r.replies, 0, "withdrawn VIP still answered: {r:?}");
    assert_eq!(ndisc6(&pair.client, VIP6, CLIENT_IF, PROBE), None);
    let _ = std::fs::remove_dir_all(&dir);
}
