//! The documented uninstall (docs/install.md, "Uninstalling") on the multi-node testbed: agents
//! owning VIPs are stopped as `kubectl delete -k deploy/` stops them (SIGTERM), then each node
//! runs what `deploy/uninstall/`'s cleanup Pod runs there, `announcer cleanup --state-dir DIR`
//! (with the node's own pin root). Afterwards no node has an XDP program on its interface, no
//! pin is left, no state directory, and the VIPs are answered by nobody. Needs root; never
//! skips.

use std::{net::IpAddr, path::PathBuf, time::Duration};

use announcer_tests::{
    cli::announcer_bin,
    env::ApiKind,
    env::lan::{Testbed, TestbedConfig, vip4, vip6},
};

/// Generous bound for anything the agents have to do.
const T: Duration = Duration::from_secs(30);
/// How long one ARP/NDP question may take.
const Q: Duration = Duration::from_millis(800);

/// The value of `flag` on the command line of process `pid`.
fn flag_of(pid: u32, flag: &str) -> PathBuf {
    let cmdline = std::fs::read(format!("/proc/{pid}/cmdline")).expect("cmdline");
    let args: Vec<String> = cmdline
        .split(|&b| b == 0)
        .map(|a| String::from_utf8_lossy(a).into_owned())
        .collect();
    args.windows(2)
        .find_map(|w| (w[0] == flag).then(|| PathBuf::from(&w[1])))
        .or_else(|| {
            args.iter()
                .find_map(|a| a.strip_prefix(&format!("{flag}=")).map(PathBuf::from))
        })
        .unwrap_or_else(|| panic!("no {flag} in {args:?}"))
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn after_the_documented_uninstall_no_node_has_xdp_attached_or_pins() {
    let mut tb = Testbed::start(TestbedConfig {
        nodes: 3,
        native_xdp: false,
        tag: "uninstall".into(),
        api: ApiKind::InRepo,
    })
    .await;
    let vips: Vec<IpAddr> = (1..=3)
        .flat_map(|k| [vip4(k).into(), vip6(k).into()])
        .collect();
    tb.add_service("web", &vips, false, &["node-a"]).await;
    tb.start_agents(&[]);
    for vip in &vips {
        tb.wait_owner(*vip, T);
    }
    let nodes = tb.nodes();
    let mut places = Vec::new();
    for node in &nodes {
        let pid = tb.agent_pid(node).expect("agent running");
        let (root, state) = (flag_of(pid, "--pin-root"), flag_of(pid, "--state-dir"));
        assert!(
            tb.node_ns(node).xdp_anywhere().is_some(),
            "{node} runs XDP before"
        );
        assert!(
            root.exists() && state.exists(),
            "{node}: {root:?} {state:?}"
        );
        places.push((node.clone(), root, state));
    }

    // 1. `kubectl delete -k deploy/`: every agent gets SIGTERM and exits.
    for node in &nodes {
        tb.term_agent(node);
    }
    for node in &nodes {
        assert!(
            tb.wait_agent_exit(node, T).is_some(),
            "{node}'s agent exited"
        );
    }
    // 2. The cleanup Pod on each node.
    for (node, root, state) in &places {
        let out = tb
            .node_ns(node)
            .nsenter_cmd(announcer_bin().to_str().unwrap())
            .arg("--pin-root")
            .arg(root)
            .args(["cleanup", "--state-dir"])
            .arg(state)
            .output()
            .expect("spawn announcer cleanup");
        assert!(out.status.success(), "cleanup on {node}: {out:?}");
    }

    for (node, root, state) in &places {
        let ns = tb.node_ns(node);
        assert_eq!(ns.xdp_anywhere(), None, "XDP still attached on {node}");
        assert!(
            !root.exists(),
            "pins left on {node} under {}",
            root.display()
        );
        assert!(!state.exists(), "state left on {node}: {}", state.display());
    }
    for vip in &vips {
        assert!(tb.arp_macs(*vip, Q).is_empty(), "{vip} still answered");
    }
}
