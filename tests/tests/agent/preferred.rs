//! An `AddressPool`'s `preferredNodes`, with real agents: the preferred node owns the pool's
//! VIP although the rendezvous ranks it last; when its agent dies a peer takes over; when it
//! comes back it takes the VIP back, and while it does some agent always announces it
//! (make-before-break, sampled through every agent's `/state`).

use std::time::{Duration, Instant};

use announcer::ipam::{AddressPool, AddressPoolSpec};
use announcer_tests::env::{ApiKind, cluster::rendezvous_owner};
use kube::api::{Api, PostParams};

use crate::world::{NODES, successor, three_nodes};

const T: Duration = Duration::from_secs(30);
const VIP: &str = "10.0.31.5";

/// The node the rendezvous ranks last for [`VIP`].
fn last_ranked() -> String {
    let top = rendezvous_owner(VIP, &NODES);
    let next = successor(VIP, &top);
    NODES
        .iter()
        .find(|n| **n != top && **n != next)
        .expect("three nodes")
        .to_string()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_pools_preferred_node_owns_its_vip_and_takes_it_back_when_it_returns() {
    let mut c = three_nodes(ApiKind::InRepo, "preferred").await;
    let pref = last_ranked();
    let pool = AddressPool::new(
        "rack",
        AddressPoolSpec {
            addresses: vec!["10.0.31.0/24".into()],
            auto_assign: true,
            preferred_nodes: vec![pref.clone()],
            ..Default::default()
        },
    );
    Api::<AddressPool>::all(c.client())
        .create(&PostParams::default(), &pool)
        .await
        .expect("create the pool");
    c.add_service("default", "web", &[VIP], false).await;
    c.set_endpoints("default", "web", &[("node-a", true)]).await;
    for n in NODES {
        c.start_agent(n, &["--heartbeat-misses", "10"]);
    }
    c.wait_for(&format!("{pref} (preferred, ranked last) owns"), T, |c| {
        c.owners(VIP) == [pref.as_str()]
    })
    .await;

    c.kill(&pref);
    let interim = rendezvous_owner(VIP, &NODES);
    c.wait_for(&format!("{interim} takes over"), T, |c| {
        c.owners(VIP) == [interim.as_str()]
    })
    .await;

    c.restart(&pref);
    let end = Instant::now() + T;
    loop {
        let owners = c.owners(VIP);
        assert!(
            !owners.is_empty(),
            "nobody announces {VIP} during the move back"
        );
        if owners == [pref.as_str()] {
            break;
        }
        assert!(
            Instant::now() < end,
            "{pref} never took {VIP} back: {owners:?}"
        );
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
}
