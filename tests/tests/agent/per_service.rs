//! The lease-per-service election (the comparison baseline, elected the way Cilium and
//! kube-vip do): one Lease per Service, so all of a Service's VIPs sit on one node; a SIGTERM
//! releases the Leases and another node takes over.

use std::{collections::BTreeSet, time::Duration};

use announcer_tests::{
    env::{NAMESPACE, agent_cmd::PER_SERVICE_ELECTION, cluster::Cluster},
    on_both_api_servers,
};
use k8s_openapi::api::coordination::v1::Lease;
use kube::{Api, api::ListParams};

const NODES: [&str; 3] = ["node-a", "node-b", "node-c"];
/// Generous: a Lease is acquired within a retry period or two (1 s here).
const T: Duration = Duration::from_secs(20);

/// The single node announcing every VIP of the Service, if exactly one does.
fn sole_owner(c: &Cluster, vips: &[&str]) -> Option<String> {
    let owners: BTreeSet<String> = c.owners_of(vips).into_values().flatten().collect();
    let all_owned = c.owners_of(vips).values().all(|o| o.len() == 1);
    (all_owned && owners.len() == 1).then(|| owners.into_iter().next().expect("one"))
}

on_both_api_servers! {
async fn one_owner_per_service_and_sigterm_hands_over(api) {
    // The server in the name: both variants run at once, and the scratch directory is named by it.
    let mut c = Cluster::start_on(api, &format!("per-service-{api}")).await;
    for n in NODES {
        c.add_node(n, &[], true).await;
    }
    let services = [
        ("web", ["10.0.40.1", "fd00::40:1"]),
        ("api", ["10.0.40.2", "fd00::40:2"]),
    ];
    for (svc, ips) in &services {
        c.add_service("default", svc, ips, false).await;
        c.set_endpoints("default", svc, &[("node-a", true)]).await;
    }
    for n in NODES {
        c.start_agent(n, &PER_SERVICE_ELECTION);
    }
    for (svc, ips) in &services {
        c.wait_for(&format!("one node announces all of {svc}"), T, |c| {
            sole_owner(c, ips).is_some()
        })
        .await;
    }
    let leases: BTreeSet<String> = Api::<Lease>::namespaced(c.client.clone(), NAMESPACE)
        .list(&ListParams::default())
        .await
        .expect("list leases")
        .items
        .into_iter()
        .filter_map(|l| l.metadata.name)
        .collect();
    for name in ["announcer-svc-default.web", "announcer-svc-default.api"] {
        assert!(leases.contains(name), "Lease {name} in {leases:?}");
    }

    let (_, web) = &services[0];
    let owner = sole_owner(&c, web).expect("owner");
    let lease = Api::<Lease>::namespaced(c.client.clone(), NAMESPACE)
        .get("announcer-svc-default.web")
        .await
        .expect("web's Lease");
    assert_eq!(
        lease.spec.and_then(|s| s.holder_identity).as_deref(),
        Some(owner.as_str()),
        "the announcing node holds web's Lease"
    );
    c.signal(&owner, libc::SIGTERM);
    assert_eq!(
        c.wait_exit(&owner, T),
        Some(0),
        "SIGTERM: exit 0 after releasing the Leases\n{}",
        c.log_tails()
    );
    c.wait_for("another node announces all of web", T, |c| {
        sole_owner(c, web).is_some_and(|o| o != owner)
    })
    .await;
    let (_, api) = &services[1];
    c.wait_for("api still has one owner", T, |c| {
        sole_owner(c, api).is_some_and(|o| o != owner)
    })
    .await;
}
}
