//! A pool's preferred node (`spec.preferredNodes`, given to the core as
//! [`VipSpec::preferred`]): it owns the VIP while it is up, a peer takes over when it crashes,
//! and it takes the VIP back when it returns, make-before-break: at no millisecond does
//! nobody answer.

use super::*;

/// The node the rendezvous ranks last for the world's VIP: preferring it is visible.
fn last_ranked(w: &World) -> usize {
    let names: Vec<NodeName> = (0..w.nodes.len()).map(World::name).collect();
    let r = rendezvous::ranking(w.vip, &names);
    names.iter().position(|n| n == *r.last().unwrap()).unwrap()
}

fn specs(w: &World, preferred: usize) -> Vec<VipSpec> {
    vec![VipSpec {
        vip: w.vip,
        service: ServiceRef {
            namespace: "default".into(),
            name: "web".into(),
        },
        eligible: std::sync::Arc::new((0..w.nodes.len()).map(World::name).collect()),
        local: Some("eth0".into()),
        interfaces: Vec::new(),
        preferred: std::sync::Arc::new([World::name(preferred)].into_iter().collect()),
    }]
}

#[test]
fn a_preferred_node_owns_the_vip_and_takes_it_back_make_before_break() {
    let mut w = World::new(3);
    let pref = last_ranked(&w);
    assert_ne!(pref, w.owner(), "the rendezvous owner is another node");
    for i in 0..3 {
        let s = specs(&w, pref);
        w.input(i, Input::Vips(s));
    }
    w.run_for(Duration::from_secs(3));
    assert_eq!(w.answering(), vec![pref], "the preferred node owns it");

    // It crashes: a peer takes over.
    w.nodes[pref].up = false;
    w.nodes[pref].agent = false;
    w.run_for(Duration::from_secs(10));
    let interim = w.answering();
    assert_eq!(interim.len(), 1, "one interim owner: {interim:?}");
    assert_ne!(interim[0], pref);

    // It returns (its entry long expired): it takes the VIP back, and at every millisecond
    // somebody answers.
    w.nodes[pref].up = true;
    w.nodes[pref].entry = None;
    let config = w.nodes[pref].core.config().clone();
    w.nodes[pref].core = Core::new(config, w.t, 2);
    w.nodes[pref].agent = true;
    w.input(pref, Input::WatchHealth(true));
    let s = specs(&w, pref);
    w.input(pref, Input::Vips(s));
    for _ in 0..5000 {
        w.run_for(MS);
        assert!(
            !w.answering().is_empty(),
            "nobody answers at {:?}",
            w.t - w.origin
        );
    }
    assert_eq!(w.answering(), vec![pref], "the preferred node has it back");
}
