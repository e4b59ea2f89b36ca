//! Agents against the in-repo API server: ownership, eligibility and handover, as an operator
//! would check them (`/state`, Events).

use std::time::Duration;

use announcer_tests::cluster::Cluster;

const VIP: &str = "10.0.0.5";

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn one_owner_then_sigterm_hands_over() {
    let mut c = Cluster::start("sigterm").await;
    for n in ["node-a", "node-b", "node-c"] {
        c.add_node(n, &[], true).await;
    }
    c.add_service("default", "web", &[VIP, "fd00::5"], false)
        .await;
    c.set_endpoints("default", "web", &[("node-a", true)]).await;
    for n in ["node-a", "node-b", "node-c"] {
        c.start_agent(n, &[]);
    }
    c.wait_for("one owner", Duration::from_secs(10), |c| {
        c.owners(VIP).len() == 1
    })
    .await;
    let owner = c.owners(VIP)[0].clone();
    c.signal(&owner, libc::SIGTERM);
    assert_eq!(
        c.wait_exit(&owner, Duration::from_secs(5)),
        Some(0),
        "{}",
        c.log_tails()
    );
    c.wait_for("a new owner", Duration::from_secs(5), |c| {
        let o = c.owners(VIP);
        o.len() == 1 && o[0] != owner
    })
    .await;
    let events = c.events("default").await;
    assert!(
        events
            .iter()
            .any(|(r, n, _)| r == "Announcing" && n.contains(&owner)),
        "{events:?}"
    );
}
