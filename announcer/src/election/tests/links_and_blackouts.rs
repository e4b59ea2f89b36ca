//! Issue 25, findings 5 and 6: an interface that goes down or away affects only the VIPs on
//! it, a stepped-back node keeps a VIP nobody else can answer, and a heartbeat blackout (every
//! node's heartbeats lost, the API fine) moves nothing and makes nobody step back.

use super::*;

const SEC: Duration = Duration::from_secs(1);

fn other_vip() -> IpAddr {
    "10.0.1.5".parse().unwrap()
}

fn spec_on(vip: IpAddr, eligible: &[usize], local: Option<&str>) -> VipSpec {
    VipSpec {
        vip,
        service: ServiceRef {
            namespace: "default".into(),
            name: format!("web-{vip}"),
        },
        eligible: std::sync::Arc::new(eligible.iter().map(|i| World::name(*i)).collect()),
        local: local.map(Into::into),
        interfaces: Vec::new(),
        preferred: Default::default(),
    }
}

/// What node `i` has installed, by VIP.
fn owned(w: &World, i: usize) -> Vec<(IpAddr, IfaceName)> {
    w.nodes[i].core.owned()
}

fn wrote_standby(w: &World, i: usize) -> bool {
    w.nodes[i]
        .outputs
        .iter()
        .any(|o| matches!(o, Output::WriteLease { standby: true, .. }))
}

fn isolated_events(w: &World, i: usize) -> usize {
    w.nodes[i]
        .outputs
        .iter()
        .filter(|o| {
            matches!(
                o,
                Output::NodeEvent {
                    kind: NodeEventKind::Isolated,
                    ..
                }
            )
        })
        .count()
}

/// Cuts every node's heartbeats to every other node (a firewall change on the heartbeat
/// port); Leases and probes still flow.
fn blackout(w: &mut World) {
    let n = w.nodes.len();
    for i in 0..n {
        for j in 0..n {
            if i != j {
                w.cut.insert((i, j));
            }
        }
    }
}

/// Node 0 alone may announce both VIPs (eTP Local with every endpoint on it): `w.vip` on
/// eth0, [`other_vip`] on eth1.
fn two_interfaces() -> World {
    let mut w = World::new(2);
    let (a, b) = (w.vip, other_vip());
    for i in 0..2 {
        let local = |name| (i == 0).then_some(name);
        let specs = vec![
            spec_on(a, &[0], local("eth0")),
            spec_on(b, &[0], local("eth1")),
        ];
        w.input(i, Input::Vips(specs));
    }
    w.run_for(5 * SEC);
    assert_eq!(owned(&w, 0).len(), 2, "node-0 announces both VIPs");
    w
}

#[test]
fn one_interface_going_down_withdraws_only_the_vips_on_it() {
    let mut w = two_interfaces();
    w.input(
        0,
        Input::Link {
            iface: "eth1".into(),
            up: false,
        },
    );
    let before = w.nodes[0].outputs.len();
    w.run_for(10 * SEC);
    // The VIP on eth0 is still announced and its entry refreshed; the node did not step back.
    assert_eq!(owned(&w, 0), vec![(w.vip, IfaceName::from("eth0"))]);
    let vip = w.vip;
    let refreshed = w.nodes[0].outputs[before..]
        .iter()
        .filter(|o| matches!(o, Output::Install { vip: v, .. } if *v == vip))
        .count();
    assert!(
        refreshed >= 9,
        "the VIP on the working interface was refreshed {refreshed} times in 10 s"
    );
    assert!(
        !wrote_standby(&w, 0),
        "one interface down made the node stand by"
    );
}

#[test]
fn a_deleted_interface_is_forgotten_once_no_vip_is_on_it() {
    let mut w = two_interfaces();
    let (a, b) = (w.vip, other_vip());
    w.input(
        0,
        Input::Link {
            iface: "eth1".into(),
            up: false,
        },
    );
    // eth1 is deleted: the shell finds no interface for the second VIP any more...
    w.input(
        0,
        Input::Vips(vec![spec_on(a, &[0], Some("eth0")), spec_on(b, &[0], None)]),
    );
    w.run_for(SEC);
    // ...then a new interface carries its subnet, and eth1 is never reported up again.
    w.input(
        0,
        Input::Vips(vec![
            spec_on(a, &[0], Some("eth0")),
            spec_on(b, &[0], Some("eth2")),
        ]),
    );
    w.run_for(2 * SEC);
    assert_eq!(
        owned(&w, 0),
        vec![(a, IfaceName::from("eth0")), (b, IfaceName::from("eth2"))],
        "a deleted interface kept the node from announcing until a restart"
    );
}

#[test]
fn a_peer_takes_only_the_vips_on_an_interface_that_went_down() {
    let mut w = World::new(2);
    w.run_for(5 * SEC);
    let x = w.owner();
    let other = 1 - x;
    let (a, b) = (w.vip, other_vip());
    // Both nodes may announce both VIPs; x owns the first (on eth0). The second's owner is
    // made x too by eligibility, then both become eligible once x's eth1 is down.
    let both = [0, 1];
    for i in 0..2 {
        let iface = if i == x { "eth1" } else { "eth0" };
        w.input(
            i,
            Input::Vips(vec![
                spec_on(a, &both, Some("eth0")),
                spec_on(b, &[x], Some(iface)),
            ]),
        );
    }
    w.run_for(2 * SEC);
    assert_eq!(owned(&w, x).len(), 2);
    // eth1 goes down on x: the shell leaves it out of x's published links, so the peer sees x
    // cannot announce the second VIP any more; the second VIP becomes eligible on both.
    w.nodes[x].links = Some(vec![Link {
        name: Some("eth0".into()),
        mac: w.nodes[x].core.config().mac,
        subnets: vec!["10.0.0.0/24".parse().unwrap()],
        fallback: false,
        down: false,
    }]);
    w.input(
        x,
        Input::Link {
            iface: "eth1".into(),
            up: false,
        },
    );
    for i in 0..2 {
        let iface = if i == x { "eth1" } else { "eth0" };
        w.input(
            i,
            Input::Vips(vec![
                spec_on(a, &both, Some("eth0")),
                spec_on(b, &both, Some(iface)),
            ]),
        );
    }
    w.run_for(2 * SEC);
    assert_eq!(owned(&w, x), vec![(a, IfaceName::from("eth0"))]);
    assert_eq!(owned(&w, other), vec![(b, IfaceName::from("eth0"))]);
}

#[test]
fn a_stepped_back_node_keeps_a_vip_whose_only_other_node_crashed() {
    let mut w = World::new(4);
    w.run_for(3 * SEC);
    // The VIP may be announced by two nodes only; x owns it.
    let pair = [0usize, 1];
    for i in 0..4 {
        w.input(i, Input::Vips(vec![spec_on(w.vip, &pair, Some("eth0"))]));
    }
    w.run_for(2 * SEC);
    let x = w.answering()[0];
    let y = 1 - x;
    // y crashes (its Lease stays valid for 10 s), then x is cut off from every heartbeat
    // while nodes 2 and 3 still hear each other: x steps back. Nobody else can answer the
    // VIP: x must keep it.
    w.nodes[y].up = false;
    let crash = w.t;
    w.run_for(SEC);
    for j in 0..4 {
        if j != x {
            w.cut.insert((x, j));
            w.cut.insert((j, x));
        }
    }
    // y's renewals stop with the crash: a renewal period and a second of slack after its last
    // one, it no longer counts as able to take the VIP, and x keeps (or takes back) the VIP
    // until y's Lease expires and beyond (it used to count until its Lease expired, 10 s).
    let cfg = w.nodes[x].core.config().clone();
    let from = crash + cfg.lease_renew + super::super::core::RENEWAL_SLACK + 200 * MS;
    w.run_for(from - w.t);
    for _ in 0..15_000 {
        w.run_for(MS);
        assert_eq!(w.answering(), vec![x], "dark at {:?}", w.t - w.origin);
    }
    assert_eq!(isolated_events(&w, x), 1, "x stepped back");
}

#[test]
fn in_a_heartbeat_blackout_nobody_steps_back_and_the_vip_stays_put() {
    let mut w = World::new(4);
    w.run_for(5 * SEC);
    let owner = w.owner();
    blackout(&mut w);
    w.hold_owner(owner, 20_000);
    for i in 0..4 {
        assert!(!wrote_standby(&w, i), "node-{i} stepped back in a blackout");
        assert_eq!(isolated_events(&w, i), 0);
    }
}

#[test]
fn a_vip_pinned_to_two_nodes_has_one_answerer_through_a_heartbeat_blackout() {
    let mut w = World::new(4);
    w.run_for(3 * SEC);
    // A pool pins the VIP to nodes 2 and 3 (neither the lowest name).
    let pinned = [2usize, 3];
    for i in 0..4 {
        let local = pinned.contains(&i).then_some("eth0");
        w.input(i, Input::Vips(vec![spec_on(w.vip, &pinned, local)]));
    }
    w.run_for(2 * SEC);
    let owner = w.answering()[0];
    blackout(&mut w);
    w.hold_owner(owner, 20_000);
}

#[test]
fn an_owner_crashing_in_a_heartbeat_blackout_is_taken_over() {
    let mut w = World::new(3);
    w.run_for(5 * SEC);
    let owner = w.owner();
    blackout(&mut w);
    w.run_for(5 * SEC);
    assert_eq!(w.answering(), vec![owner]);
    w.nodes[owner].up = false;
    // Its data plane stops answering the next node's probes: three in a row after answers.
    let bound = w.nodes[0].core.config().probe_timeout
        * (super::super::core::PROBE_LOSSES_AFTER_ANSWER + 1)
        + w.nodes[0].core.config().reprobe_interval();
    w.run_for(bound);
    let now = w.answering();
    assert_eq!(now.len(), 1, "answering {now:?} {bound:?} after the crash");
    assert_ne!(now, vec![owner]);
}
