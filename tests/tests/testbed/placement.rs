//! Placement by `AddressPool` (issue 14, item 3), on the testbed with the real data plane and
//! a real kube-apiserver (the CRD exists there only): a pool's `nodeSelector` keeps its VIPs
//! on matching nodes, also through a crash, and its `interfaces` decide the link a VIP is
//! answered on, even against the subnet rule. As the client sees it: who answers ARP/NDP.

use std::{net::IpAddr, time::Duration};

use announcer::ipam::{AddressPool, AddressPoolSpec};
use announcer_tests::env::{
    ApiKind,
    cluster::rendezvous_owner,
    lan::{BRIDGE_V4, Testbed, TestbedConfig, nic2_vip4, vip4},
};
use k8s_openapi::api::core::v1::Node;
use kube::{
    Api,
    api::{Patch, PatchParams, PostParams},
};
use serde_json::json;

const T: Duration = Duration::from_secs(30);
const Q: Duration = Duration::from_millis(800);

async fn testbed(tag: &str) -> Testbed {
    Testbed::start(TestbedConfig {
        nodes: 3,
        native_xdp: false,
        tag: tag.into(),
        api: ApiKind::Kube,
    })
    .await
}

async fn create_pool(tb: &Testbed, name: &str, spec: AddressPoolSpec) {
    Api::<AddressPool>::all(tb.kube())
        .create(&PostParams::default(), &AddressPool::new(name, spec))
        .await
        .unwrap_or_else(|e| panic!("create AddressPool {name}: {e}"));
}

async fn label(tb: &Testbed, node: &str, key: &str, value: &str) {
    Api::<Node>::all(tb.kube())
        .patch(
            node,
            &PatchParams::default(),
            &Patch::Merge(json!({"metadata": {"labels": {key: value}}})),
        )
        .await
        .unwrap_or_else(|e| panic!("label {node}: {e}"));
}

/// The first `vip4(k)` whose rendezvous owner among all nodes is `node`: without placement
/// it would land there.
fn vip_owned_by(node: &str, nodes: &[&str]) -> IpAddr {
    (0..200)
        .map(|k| IpAddr::V4(vip4(k)))
        .find(|v| rendezvous_owner(&v.to_string(), nodes) == node)
        .expect("some VIP ranks node first")
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_pools_node_selector_keeps_its_vip_on_matching_nodes_through_a_crash() {
    let mut tb = testbed("pool-nodes").await;
    let all = ["node-a", "node-b", "node-c"];
    // node-b would own it without the pool.
    let vip = vip_owned_by("node-b", &all);
    for n in ["node-a", "node-c"] {
        label(&tb, n, "zone", "x").await;
    }
    create_pool(
        &tb,
        "zone-x",
        AddressPoolSpec {
            addresses: vec![format!("{vip}/32")],
            auto_assign: true,
            node_selector: Some(
                serde_json::from_value(json!({"matchLabels": {"zone": "x"}})).unwrap(),
            ),
            ..Default::default()
        },
    )
    .await;
    tb.add_service("web", &[vip], false, &["node-a"]).await;
    tb.start_agents(&[]);

    let owner = tb.wait_owner(vip, T);
    assert_eq!(
        owner,
        rendezvous_owner(&vip.to_string(), &["node-a", "node-c"])
    );
    let mac = tb.node_mac(&owner);
    tb.wait_for(&format!("only {owner} answering for {vip}"), T, |tb| {
        tb.arp_macs(vip, Q) == vec![mac]
    });

    tb.crash(&owner);
    let other = if owner == "node-a" {
        "node-c"
    } else {
        "node-a"
    };
    let mac = tb.node_mac(other);
    tb.wait_for(
        &format!("{other}, the other matching node, answering for {vip}"),
        T,
        |tb| tb.arp_macs(vip, Q) == vec![mac],
    );
    assert_eq!(
        tb.owners(vip),
        vec![other.to_string()],
        "node-b must not take it"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_pools_interfaces_decide_the_link_even_against_the_subnet_rule() {
    let mut tb = testbed("pool-ifaces").await;
    tb.add_second_nic();
    // In eth1's subnet: by the subnet rule it goes on eth1; the pool says eth0.
    let on_eth0 = IpAddr::V4(nic2_vip4(1));
    let control = IpAddr::V4(nic2_vip4(2));
    create_pool(
        &tb,
        "eth0-only",
        AddressPoolSpec {
            addresses: vec![format!("{on_eth0}/32")],
            auto_assign: true,
            interfaces: vec!["eth0".into()],
            ..Default::default()
        },
    )
    .await;
    tb.add_service("pinned", &[on_eth0], false, &["node-a"])
        .await;
    tb.add_service("control", &[control], false, &["node-a"])
        .await;
    // The control VIP is in no pool: announced only with `--announce-outside-pools`.
    tb.start_agents(&["--announce-outside-pools"]);

    let owner = tb.wait_owner(on_eth0, T);
    let iface = |tb: &Testbed, vip: IpAddr| {
        tb.state(&owner).and_then(|s| {
            s["owned"]
                .as_array()?
                .iter()
                .find(|v| v["vip"].as_str() == Some(&vip.to_string()))
                .and_then(|v| v["iface"].as_str().map(String::from))
        })
    };
    assert_eq!(
        iface(&tb, on_eth0).as_deref(),
        Some("eth0"),
        "the pool's interface"
    );
    let control_owner = tb.wait_owner(control, T);
    let mac2 = tb.node_mac2(&control_owner);
    // The client asks on its eth1 leg: the control VIP is answered there, the pinned one not.
    tb.wait_for("the control VIP answered on eth1", T, |tb| {
        tb.arp_macs(control, Q) == vec![mac2]
    });
    assert_eq!(
        tb.arp_macs(on_eth0, Q),
        Vec::<[u8; 6]>::new(),
        "answered on eth1"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_pool_whose_interfaces_no_node_has_is_answered_by_nobody() {
    let mut tb = testbed("pool-noiface").await;
    let vip = IpAddr::V4(vip4(7));
    let control = IpAddr::V4(vip4(8));
    create_pool(
        &tb,
        "bond-only",
        AddressPoolSpec {
            addresses: vec![format!("{vip}/32")],
            auto_assign: true,
            interfaces: vec!["bond*".into()],
            ..Default::default()
        },
    )
    .await;
    tb.add_service("web", &[vip], false, &["node-a"]).await;
    tb.add_service("control", &[control], false, &["node-a"])
        .await;
    // The control VIP is in no pool: announced only with `--announce-outside-pools`.
    tb.start_agents(&["--announce-outside-pools"]);
    let control_owner = tb.wait_owner(control, T);
    let mac = tb.node_mac(&control_owner);
    tb.wait_for("the control VIP answered", T, |tb| {
        tb.arp_macs(control, Q) == vec![mac]
    });
    assert_eq!(
        tb.owners(vip),
        Vec::<String>::new(),
        "no node has a bond interface"
    );
    assert_eq!(tb.arp_macs(vip, Q), Vec::<[u8; 6]>::new());
}

/// Issue 25, finding 1 as it was reproduced: a Service whose status names the segment's
/// gateway (the testbed's bridge, which is also the API relay, 10.78.0.254) while a pool
/// exists. No node's data plane may answer ARP for it; the bridge alone does.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_gateway_address_in_a_services_status_is_answered_by_no_node() {
    let mut tb = testbed("gateway-refused").await;
    let gateway = IpAddr::V4(BRIDGE_V4);
    let control = IpAddr::V4(vip4(9));
    create_pool(
        &tb,
        "lan",
        AddressPoolSpec {
            addresses: vec![format!("{control}/32")],
            auto_assign: true,
            ..Default::default()
        },
    )
    .await;
    tb.add_service("hijack", &[gateway], false, &["node-a"])
        .await;
    tb.add_service("control", &[control], false, &["node-a"])
        .await;
    tb.start_agents(&[]);
    let owner = tb.wait_owner(control, T);
    let mac = tb.node_mac(&owner);
    tb.wait_for("the control VIP answered", T, |tb| {
        tb.arp_macs(control, Q) == vec![mac]
    });
    // The agents have acted on the plan that holds both Services.
    tokio::time::sleep(Duration::from_secs(1)).await;
    let node_macs: Vec<[u8; 6]> = tb.nodes().iter().map(|n| tb.node_mac(n)).collect();
    let answered = tb.arp_macs(gateway, Q);
    assert!(
        !answered.is_empty() && answered.iter().all(|m| !node_macs.contains(m)),
        "only the bridge answers for the gateway {gateway}, no node: {answered:02x?} (nodes {node_macs:02x?})"
    );
    assert_eq!(tb.owners(gateway), Vec::<String>::new(), "nobody owns it");
}

/// The broadcast address of the nodes' LAN (10.78.0.0/16), even inside a pool: every node
/// refuses it on the link it would announce it on, so no node answers ARP for it.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_broadcast_address_of_the_announcing_link_is_answered_by_no_node() {
    let mut tb = testbed("link-broadcast").await;
    let broadcast: IpAddr = "10.78.255.255".parse().expect("an address");
    let control = IpAddr::V4(vip4(10));
    create_pool(
        &tb,
        "lan",
        AddressPoolSpec {
            addresses: vec![format!("{control}/32"), format!("{broadcast}/32")],
            auto_assign: true,
            ..Default::default()
        },
    )
    .await;
    tb.add_service("edge", &[broadcast], false, &["node-a"])
        .await;
    tb.add_service("control", &[control], false, &["node-a"])
        .await;
    tb.start_agents(&[]);
    let owner = tb.wait_owner(control, T);
    let mac = tb.node_mac(&owner);
    tb.wait_for("the control VIP answered", T, |tb| {
        tb.arp_macs(control, Q) == vec![mac]
    });
    // The agents have acted on the plan that holds both Services.
    tokio::time::sleep(Duration::from_secs(1)).await;
    assert_eq!(
        tb.arp_macs(broadcast, Q),
        Vec::<[u8; 6]>::new(),
        "no node answers for the LAN's broadcast address"
    );
    assert_eq!(tb.owners(broadcast), Vec::<String>::new(), "nobody owns it");
    let e = announcer_tests::env::cluster::wait_for_event(
        &tb.kube(),
        "default",
        "AddressRefused on edge",
        T,
        |e| {
            e.type_.as_deref() == Some("Warning")
                && e.reason.as_deref() == Some("AddressRefused")
                && e.regarding.as_ref().and_then(|r| r.name.as_deref()) == Some("edge")
        },
        String::new,
    )
    .await;
    assert!(
        e.note.as_deref().is_some_and(|n| n.contains("broadcast")),
        "the Warning names the rule: {e:?}"
    );
}
