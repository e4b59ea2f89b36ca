//! `announcer status` and `/metrics` on a node with the real data plane: the API server and
//! one agent run inside a node namespace (as in `dataplane.rs`), the agent attaches XDP
//! (generic mode) to the node's veth, a client on the other end asks for the VIP, and the
//! operator's views — the status table, its JSON, and the per-VIP answered counter Prometheus
//! scrapes — must agree with what happened. Needs root; never skips.

use std::{
    net::{IpAddr, Ipv4Addr, Ipv6Addr},
    time::Duration,
};

use announcer_tests::{
    cli::Cli,
    env::ApiKind,
    env::agent_cmd::AgentCommand,
    env::cluster::{owned_vips, state_at},
    env::node::{Proc, wait},
    netns::{CLIENT_IF, NODE_IF, NODE_MAC, NODE_V4, Pair, fmt_mac, require_root},
    on_both_api_servers,
    tools::{arping, neigh_flush},
};
use serde_json::Value;

use crate::dataplane::HTTP;

const VIP4: Ipv4Addr = Ipv4Addr::new(10, 78, 0, 100);
const VIP6: Ipv6Addr = Ipv6Addr::new(0xfd78, 0, 0, 0, 0, 0, 0, 0x100);
const AGENT: &str = "http://127.0.0.1:9746";
/// Generous bound for the agent to start, attach and take the VIPs.
const T: Duration = Duration::from_secs(20);

/// `status --json --agent AGENT`: (exit code, document).
fn status_json(cli: &Cli) -> (Option<i32>, Value) {
    let o = cli.output(&["status", "--json", "--agent", AGENT]);
    let doc = serde_json::from_slice(&o.stdout).unwrap_or_else(|e| {
        panic!(
            "status --json is not JSON ({e}):\n{}\n{}",
            String::from_utf8_lossy(&o.stdout),
            String::from_utf8_lossy(&o.stderr)
        )
    });
    (o.status.code(), doc)
}

/// The row of `vip` in a status document.
fn row(doc: &Value, vip: impl ToString) -> Value {
    let vip = vip.to_string();
    doc["vips"]
        .as_array()
        .and_then(|v| v.iter().find(|r| r["vip"] == vip.as_str()))
        .cloned()
        .unwrap_or_else(|| panic!("{vip} not in {doc:#}"))
}

/// The value of one sample in `/metrics` text.
fn sample(text: &str, series: &str) -> Option<f64> {
    text.lines()
        .find_map(|l| l.strip_prefix(series)?.strip_prefix(' '))
        .map(|v| v.trim().parse().expect("number"))
}

on_both_api_servers! {
async fn status_shows_what_the_node_answers_and_who_owns_it(api) {
    require_root();
    let pair = Pair::new("status");
    let dir = std::env::temp_dir().join(format!("annstatus-{}-{api}", std::process::id()));
    std::fs::create_dir_all(&dir).expect("dir");
    let cli = Cli::new(&pair.node);
    let _api = crate::dataplane::start_node_api(
        api,
        "status",
        &pair.node,
        &dir,
        &[VIP4.into(), VIP6.into()],
    )
    .await;
    let mut agent = crate::dataplane::start_node_agent(&pair.node, &cli, &dir);
    let log = agent.log.clone();
    wait("the agent to own both VIPs", T, &log, || {
        pair.node.enter(|| state_at(HTTP)).is_some_and(|s| {
            let owned = owned_vips(&s);
            owned.contains(&IpAddr::V4(VIP4)) && owned.contains(&IpAddr::V6(VIP6))
        })
    });

    // A neighbour asks for the VIP: the data plane answers and counts it.
    neigh_flush(&pair.client, CLIENT_IF);
    let r = arping(&pair.client, CLIENT_IF, VIP4, 2, Duration::from_millis(800));
    assert!(r.replies >= 1, "ARP for the VIP answered: {r:?}");

    // JSON: the node, its interface, the VIPs with MAC, owner, Service, expiry and counters.
    let (code, doc) = status_json(&cli);
    assert_eq!(code, Some(0), "{doc:#}");
    assert_eq!(doc["node"], "node-a", "{doc:#}");
    assert_eq!(doc["agent"]["reachable"], true, "{doc:#}");
    assert_eq!(doc["interfaces"][0]["iface"], NODE_IF, "{doc:#}");
    assert!(doc["interfaces"][0]["counters"]["arp_answered"].as_u64() >= Some(1));
    let mac = fmt_mac(NODE_MAC);
    for vip in [IpAddr::V4(VIP4), IpAddr::V6(VIP6)] {
        let r = row(&doc, vip);
        assert_eq!(r["iface"], NODE_IF, "{r}");
        assert_eq!(r["mac"], mac.as_str(), "{r}");
        assert_eq!(r["owner"], "node-a", "{r}");
        assert_eq!(r["service"], "default/web", "{r}");
        assert_eq!(r["live"], true, "{r}");
        assert_eq!(r["in_dataplane"], true, "{r}");
        assert!(r["expires_in_s"].as_f64().is_some_and(|s| s > 0.0), "{r}");
    }
    let v4 = row(&doc, VIP4);
    assert!(v4["answered"].as_u64() >= Some(1), "{v4}");

    // The table, with the default agent address (the agent listens on it).
    let table = cli.ok(&["status"]);
    let line = table
        .lines()
        .find(|l| l.starts_with(&VIP4.to_string()))
        .unwrap_or_else(|| panic!("no row for {VIP4}:\n{table}"));
    for cell in [NODE_IF, mac.as_str(), "node-a", "default/web"] {
        assert!(line.contains(cell), "{cell} missing in {line:?}\n{table}");
    }
    assert!(table.contains("agent: node node-a"), "{table}");

    // Prometheus sees the same answers, per VIP and interface.
    let metrics = pair
        .node
        .enter(|| {
            ureq::get(&format!("{AGENT}/metrics"))
                .call()
                .map_err(|e| e.to_string())?
                .into_string()
                .map_err(|e| e.to_string())
        })
        .expect("/metrics answers");
    let answered = format!(
        "announcer_dataplane_answered_total{{iface=\"{NODE_IF}\",vip=\"{VIP4}\",vlan=\"0\"}}"
    );
    assert!(sample(&metrics, &answered) >= Some(1.0), "{metrics}");
    let owned = format!("announcer_vips_owned{{iface=\"{NODE_IF}\"}}");
    assert_eq!(sample(&metrics, &owned), Some(2.0), "{metrics}");
    let frames =
        format!("announcer_dataplane_frames_total{{iface=\"{NODE_IF}\",outcome=\"arp_answered\"}}");
    assert!(sample(&metrics, &frames) >= Some(1.0), "{metrics}");

    // The agent dies; its entries keep answering until they expire. `status` still shows them,
    // says the agent is unreachable, and fails when the agent was asked for.
    let _ = agent.child.kill();
    let _ = agent.child.wait();
    let (code, doc) = status_json(&cli);
    assert_eq!(code, Some(69), "{doc:#}");
    assert_eq!(doc["agent"]["reachable"], false, "{doc:#}");
    let r = row(&doc, VIP4);
    assert_eq!(
        (r["mac"].as_str(), &r["owner"]),
        (Some(mac.as_str()), &Value::Null),
        "{r}"
    );
    let o = cli.output(&["status", "--agent", AGENT]);
    let table = String::from_utf8_lossy(&o.stdout);
    assert_eq!(o.status.code(), Some(69), "{table}");
    assert!(table.contains("agent: UNREACHABLE"), "{table}");
    assert!(table.contains(&VIP4.to_string()), "{table}");
    // Without --agent, an absent agent is reported but not an error (static use).
    let table = cli.ok(&["status"]);
    assert!(table.contains("agent: UNREACHABLE"), "{table}");
    drop(agent);
    let _ = std::fs::remove_dir_all(&dir);
}
}

/// `GET http://{addr}{path}` from inside `ns`: the status code, or `None` if nothing answers.
fn status_code(ns: &announcer_tests::netns::Netns, addr: &str, path: &str) -> Option<u16> {
    ns.enter(|| {
        match ureq::get(&format!("http://{addr}{path}"))
            .timeout(Duration::from_secs(2))
            .call()
        {
            Ok(r) => Some(r.status()),
            Err(ureq::Error::Status(code, _)) => Some(code),
            Err(_) => None,
        }
    })
}

/// Issue 25, finding 8: with host networking the agent's port is the node's, so a Pod, a host
/// on the segment (here the client namespace) or a connection to a VIP reached `/state`, the
/// VIP-to-Service map with who is on standby and every peer's heartbeat age. The agent listens
/// on every address, as the DaemonSet has it: `/state` must answer only on loopback, while
/// `/metrics` (Prometheus) and the probes (the kubelet, at the node's address) still answer
/// everyone.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn state_is_served_on_loopback_only_while_metrics_and_probes_answer_everyone() {
    require_root();
    let pair = Pair::new("httpscope");
    let dir = std::env::temp_dir().join(format!("annhttpscope-{}", std::process::id()));
    std::fs::create_dir_all(&dir).expect("dir");
    let _api = crate::dataplane::start_node_api(
        ApiKind::InRepo,
        "httpscope",
        &pair.node,
        &dir,
        &[VIP4.into()],
    )
    .await;
    let log = dir.join("agent.log");
    let cmd = AgentCommand::new(
        "node-a",
        &dir.join("kubeconfig.node-a"),
        &dir.join("state-node-a"),
    )
    .no_dataplane()
    .http_address(format!("0.0.0.0:{HTTP}"));
    let agent = Proc {
        child: cmd.spawn(Some(&pair.node), &log),
        log: log.clone(),
    };
    let local = format!("127.0.0.1:{HTTP}");
    wait("the agent to be ready", T, &log, || {
        status_code(&pair.node, &local, "/readyz") == Some(200)
    });
    // On the node, over loopback: what `announcer status` reads.
    assert_eq!(status_code(&pair.node, &local, "/state"), Some(200));
    let remote = format!("{NODE_V4}:{HTTP}");
    // From another host on the segment, and from the node itself at its own address (what a
    // Pod with host networking, or a connection forwarded from a VIP, looks like).
    for (who, ns) in [("the client", &pair.client), ("the node", &pair.node)] {
        assert_eq!(
            status_code(ns, &remote, "/state"),
            Some(403),
            "/state from {who} at {remote}"
        );
        for path in ["/metrics", "/healthz", "/readyz"] {
            assert_eq!(
                status_code(ns, &remote, path),
                Some(200),
                "{path} from {who} at {remote}"
            );
        }
    }
    drop(agent);
    let _ = std::fs::remove_dir_all(&dir);
}

/// Issue 25, finding 12: an `identity` file a `chmod -R` made world-readable and a corrupt
/// `incarnation` each stopped the agent at start, and the kubelet restarted it into the same
/// error. Now it starts, replaces the key (stored 0600: the old one counts as leaked) and
/// says what it worked around on `/metrics` (and in a `StateDirectory` Event on its Node).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_agent_with_a_leaked_key_and_a_corrupt_incarnation_starts_with_a_new_key() {
    use std::os::unix::fs::PermissionsExt;
    require_root();
    let pair = Pair::new("statedir");
    let dir = std::env::temp_dir().join(format!("annstatedir-{}", std::process::id()));
    std::fs::create_dir_all(&dir).expect("dir");
    let _api = crate::dataplane::start_node_api(
        ApiKind::InRepo,
        "statedir",
        &pair.node,
        &dir,
        &[VIP4.into()],
    )
    .await;
    let state_dir = dir.join("state-node-a");
    std::fs::create_dir_all(&state_dir).expect("state dir");
    let identity = state_dir.join("identity");
    let leaked = [7u8; 32];
    std::fs::write(&identity, leaked).expect("identity");
    std::fs::set_permissions(&identity, std::fs::Permissions::from_mode(0o644)).expect("chmod");
    std::fs::write(state_dir.join("incarnation"), "garbage\n").expect("incarnation");
    let log = dir.join("agent.log");
    let cmd = AgentCommand::new("node-a", &dir.join("kubeconfig.node-a"), &state_dir)
        .no_dataplane()
        .http_address(format!("127.0.0.1:{HTTP}"));
    let agent = Proc {
        child: cmd.spawn(Some(&pair.node), &log),
        log: log.clone(),
    };
    let local = format!("127.0.0.1:{HTTP}");
    wait("the agent to be ready", T, &log, || {
        status_code(&pair.node, &local, "/readyz") == Some(200)
    });
    let meta = std::fs::metadata(&identity).expect("identity kept");
    assert_eq!(meta.permissions().mode() & 0o777, 0o600);
    assert_ne!(
        std::fs::read(&identity).expect("identity"),
        leaked,
        "a new key"
    );
    let metrics = pair
        .node
        .enter(|| {
            ureq::get(&format!("http://{local}/metrics"))
                .call()
                .ok()?
                .into_string()
                .ok()
        })
        .expect("/metrics answers");
    for problem in ["identity_leaked", "incarnation_corrupt"] {
        let series = format!("announcer_state_dir_problems_total{{problem=\"{problem}\"}}");
        assert_eq!(
            sample(&metrics, &series),
            Some(1.0),
            "{series} in\n{metrics}"
        );
    }
    drop(agent);
    let _ = std::fs::remove_dir_all(&dir);
}
