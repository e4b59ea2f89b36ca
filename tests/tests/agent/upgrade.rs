//! The agent brings the pinned XDP program up to its own build on start: an agent started
//! over a program of another version (`announcer load --program-version N`, another tag)
//! swaps it in place, answers its VIP with the new program, and reports the new tag and the
//! mode in `announcer_dataplane_info`. Needs root; never skips.

use std::{net::Ipv4Addr, time::Duration};

use announcer_tests::{
    cli::Cli,
    env::ApiKind,
    env::cluster::{owned_vips, state_at},
    env::node::wait,
    netns::{CLIENT_IF, NODE_IF, NODE_MAC, Netns, Pair, require_root},
    tools::{arping, neigh_flush},
};

use crate::dataplane::{HTTP, start_node_agent, start_node_api};

const VIP4: Ipv4Addr = Ipv4Addr::new(10, 77, 0, 100);
/// Generous bound for the agent to start, attach and take the VIP.
const T: Duration = Duration::from_secs(20);

/// Program id and tag of the XDP program on the node's interface (`ip -d link`).
fn running(ns: &Netns) -> (u32, String) {
    let (_, id, tag) = ns.xdp_on(NODE_IF);
    (id, tag)
}

fn metrics(ns: &Netns) -> Option<String> {
    ns.enter(|| {
        ureq::get(&format!("http://127.0.0.1:{HTTP}/metrics"))
            .call()
            .ok()?
            .into_string()
            .ok()
    })
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_agent_started_over_another_programs_pin_swaps_it_and_reports_the_new_tag() {
    require_root();
    let pair = Pair::new("agent-upg");
    let dir = std::env::temp_dir().join(format!("annupg-{}", std::process::id()));
    std::fs::create_dir_all(&dir).expect("dir");
    let cli = Cli::new(&pair.node);
    // What an older build left running: another version, so another tag.
    cli.load_version(NODE_IF, "generic", 9);
    let (old_id, old_tag) = running(&pair.node);
    assert_ne!(old_id, 0);

    let _api = start_node_api(
        ApiKind::InRepo,
        "agent-upg",
        &pair.node,
        &dir,
        &[VIP4.into()],
    )
    .await;
    let agent = start_node_agent(&pair.node, &cli, &dir);
    let log = agent.log.clone();
    wait("the agent to own the VIP", T, &log, || {
        pair.node
            .enter(|| state_at(HTTP))
            .is_some_and(|s| owned_vips(&s).contains(&VIP4.into()))
    });
    let (id, tag) = running(&pair.node);
    assert_ne!(
        id,
        old_id,
        "the agent swapped the program\n{}",
        agent.log_tail()
    );
    assert_ne!(tag, old_tag, "for its own build's");
    neigh_flush(&pair.client, CLIENT_IF);
    let r = arping(&pair.client, CLIENT_IF, VIP4, 2, Duration::from_millis(800));
    assert_eq!(r.unique_macs(), vec![NODE_MAC], "{r:?}");

    let text = metrics(&pair.node).expect("/metrics answers");
    let line = text
        .lines()
        .find(|l| l.starts_with("announcer_dataplane_info{"))
        .unwrap_or_else(|| panic!("no announcer_dataplane_info in\n{text}"));
    for label in [
        format!("iface=\"{NODE_IF}\""),
        "mode=\"generic\"".to_owned(),
        format!("tag=\"{tag}\""),
    ] {
        assert!(line.contains(&label), "{label} in {line}");
    }
    assert!(line.ends_with(" 1"), "{line}");
    drop(agent);
    let _ = std::fs::remove_dir_all(&dir);
}
