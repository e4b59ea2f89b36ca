//! The agent with its data plane behind a switch doing MLD snooping (a Linux bridge with its own
//! querier, no flooding of unregistered multicast to the node ports): an IPv6 VIP is answered
//! only because the agent joined its solicited-node group, and after the agent crashes the
//! membership dies with its socket until the restarted agent joins again for the entries it
//! finds in the pinned maps. The test prints what the restart cost new clients (run it with
//! `--nocapture`); how long is documented in `docs/design.md`, not asserted here.

use std::{
    net::{IpAddr, Ipv6Addr},
    sync::{
        Arc,
        atomic::{AtomicBool, Ordering},
    },
    time::{Duration, Instant},
};

use announcer::dataplane::mcast::solicited_node;
use announcer_tests::{
    cli::Cli,
    env::{
        ApiKind,
        cluster::owned_vips,
        node::wait,
        snooping::{SnoopingLan, maddr_groups},
    },
    netns::{CLIENT_IF, NODE_IF, NODE_MAC, require_root},
    tools::ndisc6,
};

use crate::dataplane::{start_node_agent, start_node_api};

const VIP6: Ipv6Addr = Ipv6Addr::new(0xfd77, 0, 0, 0, 0, 0, 0, 0x100);
/// Generous bound for the agent to start, attach and take the VIP.
const T: Duration = Duration::from_secs(20);

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn new_clients_resolve_an_ipv6_vip_behind_a_snooping_switch_again_after_its_owner_agent_crashes_and_restarts()
 {
    require_root();
    let lan = SnoopingLan::new("agent-mld");
    let dir = std::env::temp_dir().join(format!("annmld-{}", std::process::id()));
    std::fs::create_dir_all(&dir).expect("dir");
    let cli = Cli::new(&lan.owner);
    let _api = start_node_api(
        ApiKind::InRepo,
        "agent-mld",
        &lan.owner,
        &dir,
        &[VIP6.into()],
    )
    .await;
    let mut agent = start_node_agent(&lan.owner, &cli, &dir);
    let log = agent.log.clone();
    wait("the agent to own the VIP", T, &log, || {
        lan.owner
            .enter(|| announcer_tests::env::cluster::state_at(crate::dataplane::HTTP))
            .is_some_and(|s| owned_vips(&s).contains(&IpAddr::V6(VIP6)))
    });
    let group = solicited_node(VIP6);
    assert!(maddr_groups(&lan.owner, NODE_IF).contains(&group));
    assert_eq!(
        lan.solicit(VIP6),
        Some(NODE_MAC),
        "answered behind the snooping bridge"
    );

    // Crash, and the kubelet restarts the container at once: the pinned entry answers on
    // (its TTL outlives the restart), but the membership went with the process.
    let crashed = Instant::now();
    agent.child.kill();
    let watching = Arc::new(AtomicBool::new(true));
    let owner = lan.owner.name().to_owned();
    let rejoined = {
        let watching = watching.clone();
        std::thread::spawn(move || {
            // When the group is back in the owner's multicast list (the new agent's join).
            let mut gone = false;
            while watching.load(Ordering::Relaxed) {
                let out = std::process::Command::new("ip")
                    .args(["-n", &owner, "-6", "maddr", "show", "dev", NODE_IF])
                    .output()
                    .expect("ip maddr");
                let listed = String::from_utf8_lossy(&out.stdout).contains(&group.to_string());
                gone |= !listed;
                if gone && listed {
                    return Some(crashed.elapsed());
                }
                std::thread::sleep(Duration::from_millis(10));
            }
            None
        })
    };
    let restarted = start_node_agent(&lan.owner, &cli, &dir);
    let mut unanswered: Option<Duration> = None;
    let mut answered_again: Option<Duration> = None;
    while crashed.elapsed() < T {
        // A new client: one solicitation to the group, no cache.
        let a = ndisc6(&lan.client, VIP6, CLIENT_IF, Duration::from_millis(100));
        if a.is_none() && unanswered.is_none() {
            unanswered = Some(crashed.elapsed());
        }
        if a == Some(NODE_MAC)
            && (unanswered.is_some() || crashed.elapsed() > Duration::from_secs(5))
        {
            answered_again = Some(crashed.elapsed());
            break;
        }
    }
    watching.store(false, Ordering::Relaxed);
    let rejoined = rejoined.join().expect("watcher");
    eprintln!(
        "agent SIGKILLed and restarted at once: the group rejoined after {rejoined:?}; new clients unanswered from {unanswered:?} to {answered_again:?} after the crash"
    );
    assert!(
        answered_again.is_some(),
        "new clients never resolved {VIP6} again\n--- restarted agent ---\n{}",
        restarted.log_tail()
    );
    assert!(maddr_groups(&lan.owner, NODE_IF).contains(&group));
    let _ = std::fs::remove_dir_all(&dir);
}
