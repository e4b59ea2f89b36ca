//! Issue 27, item 2: a node whose XDP program cannot be attached on an interface (another
//! program is there) is ranked for the VIPs there by no node, itself included, and becomes a
//! candidate again once the attach succeeds.
//!
//! The shell's translation is exercised as the agent runs it: the interfaces are marked down
//! where the data plane is ([`plane::mark_down`]), then interface choice gives the core's
//! [`VipSpec::local`] and [`iface::links`] the links published in the Lease, which is all the
//! peers rank by.

use std::net::Ipv4Addr;

use super::*;
use crate::agent::net::{
    iface::{self, IfAddr, IfaceConfig, LocalIface},
    plane,
};

const SEC: Duration = Duration::from_secs(1);

/// Node `i`'s address on eth0.
fn addr(i: usize) -> IpAddr {
    IpAddr::V4(Ipv4Addr::new(10, 0, 0, i as u8 + 1))
}

/// What node `i`'s shell gives its core and its Lease, its data plane down on `down`: the
/// interface for the VIP (if any) and the links.
fn shell_view(w: &World, i: usize, down: &[&str]) -> (Option<IfaceName>, Vec<Link>) {
    let mut ifaces = vec![LocalIface {
        name: "eth0".into(),
        index: 2,
        mac: Some(w.nodes[i].core.config().mac),
        up: true,
        loopback: false,
        addrs: vec![IfAddr {
            ip: addr(i),
            prefix: 24,
        }],
    }];
    plane::mark_down(&mut ifaces, down.iter().copied());
    let cfg = IfaceConfig {
        allow: Vec::new(),
        internal_ips: vec![addr(i)],
    };
    let local = iface::choose(w.vip, &ifaces, &cfg).ok().map(|c| c.iface);
    (local, iface::links(&ifaces, &cfg))
}

/// Gives node `i` the view of its shell with the data plane down on `down`.
fn apply(w: &mut World, i: usize, down: &[&str]) {
    let (local, links) = shell_view(w, i, down);
    w.nodes[i].links = Some(links);
    let spec = VipSpec {
        vip: w.vip,
        service: ServiceRef {
            namespace: "default".into(),
            name: "web".into(),
        },
        eligible: (0..w.nodes.len()).map(World::name).collect(),
        local,
        interfaces: Vec::new(),
    };
    w.input(i, Input::Vips(vec![spec]));
}

/// Two nodes; the rendezvous owner's data plane is down on eth0 from the start (the attach
/// failed before its first Lease write). Returns the world and that node.
fn owner_down_from_the_start() -> (World, usize) {
    let mut w = World::new(2);
    let x = w.owner();
    for i in 0..2 {
        apply(&mut w, i, if i == x { &["eth0"] } else { &[] });
    }
    w.run_for(5 * SEC);
    (w, x)
}

#[test]
fn a_node_whose_data_plane_is_down_is_ranked_for_the_vip_by_no_node() {
    let (w, x) = owner_down_from_the_start();
    let other = 1 - x;
    assert_eq!(
        w.answering(),
        vec![other],
        "the VIP is answered by the node whose data plane works"
    );
    assert_eq!(w.nodes[other].core.owned(), vec![(w.vip, "eth0".into())]);
    let installs_at_x = w.nodes[x]
        .outputs
        .iter()
        .filter(|o| matches!(o, Output::Install { .. }))
        .count();
    assert_eq!(
        installs_at_x, 0,
        "the node whose data plane is down was asked to install the VIP"
    );
}

#[test]
fn a_node_whose_data_plane_comes_back_is_a_candidate_again() {
    let (mut w, x) = owner_down_from_the_start();
    assert_eq!(
        w.answering(),
        vec![1 - x],
        "the peer answers while x is down"
    );
    // The foreign program was removed and the retry attached ours: the interface is up again.
    apply(&mut w, x, &[]);
    w.run_for(5 * SEC);
    assert_eq!(
        w.answering(),
        vec![x],
        "the rendezvous owner took its VIP back once its data plane was up"
    );
}
