//! Issue 27, item 2: a node whose XDP program cannot be attached on an interface (another
//! program is there) is ranked for the VIPs there by no node, itself included, while it keeps
//! the VIPs of its other interfaces, and becomes a candidate again once the attach succeeds.
//!
//! The shell's translation is given as the agent gives it: [`VipSpec::local`] stays the
//! interface whose subnet holds the VIP (the one whose data plane is down is still the VIP's:
//! the VIP must not move to another link of the node, where its clients do not ask), the core
//! hears that interface is down ([`Input::Link`]), and the links published in the Lease, which
//! are all the peers rank by, mark it [`Link::down`].

use std::net::Ipv4Addr;

use super::*;

const SEC: Duration = Duration::from_secs(1);

/// The VIP on eth1 (`w.vip`, 10.0.0.5, is on eth0).
fn eth1_vip() -> IpAddr {
    "10.0.1.5".parse().unwrap()
}

/// Node `i`'s two links as its Lease publishes them: eth0 in 10.0.0.0/24 (its InternalIP's,
/// the fallback), eth1 in 10.0.1.0/24; `down` marks those whose data plane is down (what the
/// agent's `plane::mark_links_down` does to them).
fn links(w: &World, i: usize, down: &[&str]) -> Vec<Link> {
    let mac = w.nodes[i].core.config().mac;
    let link = |name: &str, net: u8| Link {
        name: Some(name.into()),
        mac: MacAddr([mac.0[0], mac.0[1], mac.0[2], mac.0[3], net, mac.0[5]]),
        subnets: vec![Subnet {
            addr: IpAddr::V4(Ipv4Addr::new(10, 0, net, 0)),
            prefix: 24,
        }],
        fallback: net == 0,
        down: down.contains(&name),
    };
    vec![link("eth0", 0), link("eth1", 1)]
}

/// Gives node `i` what its shell gives its core and its Lease, its data plane down on `down`:
/// each VIP stays on the interface whose subnet holds it (the one whose data plane is down is
/// still the VIP's), and the core hears that interface as a down link.
fn apply(w: &mut World, i: usize, down: &[&str]) {
    w.nodes[i].links = Some(links(w, i, down));
    let eligible: NodeSet = std::sync::Arc::new((0..w.nodes.len()).map(World::name).collect());
    let specs = [(w.vip, "eth0"), (eth1_vip(), "eth1")]
        .into_iter()
        .map(|(vip, iface)| VipSpec {
            vip,
            service: ServiceRef {
                namespace: "default".into(),
                name: format!("web-{vip}"),
            },
            eligible: eligible.clone(),
            local: Some(iface.into()),
            interfaces: Vec::new(),
            preferred: Default::default(),
        })
        .collect();
    w.input(i, Input::Vips(specs));
    for name in ["eth0", "eth1"] {
        w.input(
            i,
            Input::Link {
                iface: name.into(),
                up: !down.contains(&name),
            },
        );
    }
}

/// Two nodes; the rendezvous owner of `w.vip` has its data plane down on eth0 (where that VIP
/// belongs) from the start: the attach failed before its first Lease write. Its eth1 works.
fn owner_down_on_eth0() -> (World, usize) {
    let mut w = World::new(2);
    let x = w.owner();
    for i in 0..2 {
        apply(&mut w, i, if i == x { &["eth0"] } else { &[] });
    }
    w.run_for(5 * SEC);
    (w, x)
}

fn owns(w: &World, i: usize, vip: IpAddr) -> bool {
    w.nodes[i].core.owned().iter().any(|(v, _)| *v == vip)
}

#[test]
fn a_node_whose_data_plane_is_down_is_ranked_for_the_vips_there_by_no_node() {
    let (w, x) = owner_down_on_eth0();
    let other = 1 - x;
    assert!(
        !owns(&w, x, w.vip),
        "node-{x} owns a VIP on its dark interface"
    );
    assert!(
        owns(&w, other, w.vip),
        "the VIP on eth0 went dark: its peer does not take it"
    );
    assert!(
        !w.nodes[x]
            .outputs
            .iter()
            .any(|o| matches!(o, Output::Install { vip, .. } if *vip == w.vip)),
        "the node whose data plane is down was asked to install the VIP"
    );
    let eth1_owner = [x, other]
        .into_iter()
        .find(|i| owns(&w, *i, eth1_vip()))
        .expect("the VIP on eth1 is owned");
    let names = [World::name(0), World::name(1)];
    let top = rendezvous::owner(eth1_vip(), &names).unwrap();
    assert_eq!(
        World::name(eth1_owner),
        *top,
        "the VIP on the working interface stays with its rendezvous owner"
    );
}

#[test]
fn a_node_whose_data_plane_comes_back_is_a_candidate_again() {
    let (mut w, x) = owner_down_on_eth0();
    assert!(owns(&w, 1 - x, w.vip), "the peer answers while x is down");
    // The foreign program was removed and the retry attached ours: the interface is up again.
    apply(&mut w, x, &[]);
    w.run_for(5 * SEC);
    assert!(
        owns(&w, x, w.vip) && !owns(&w, 1 - x, w.vip),
        "the rendezvous owner took its VIP back once its data plane was up"
    );
}
