//! [`Core::peer_silences`]: what the election tells the unreachable report about each peer
//! (read-only; it changes no decision).

use super::*;

/// The silence `observer` sees of `peer`.
fn silence(w: &World, observer: usize, peer: usize) -> PeerSilence {
    w.nodes[observer]
        .core
        .peer_silences(w.t, 4, |_| true)
        .into_iter()
        .find(|s| s.node == World::name(peer))
        .expect("a known peer")
}

/// Three nodes settled, then `victim` crashed (node and link down) 400 ms ago.
fn crashed(victim: impl Fn(&World) -> usize) -> (World, usize) {
    let mut w = World::new(3);
    w.run_for(Duration::from_secs(3));
    let v = victim(&w);
    w.nodes[v].up = false;
    w.run_for(Duration::from_millis(400));
    (w, v)
}

#[test]
fn a_crashed_owner_is_silent_and_would_hold_its_vip_at_its_mac() {
    let (w, owner) = crashed(World::owner);
    for o in (0..3).filter(|o| *o != owner) {
        let s = silence(&w, o, owner);
        assert!(s.heartbeats_silent);
        assert_eq!(
            s.holds,
            vec![(
                w.vip,
                IfaceName::from("eth0"),
                MacAddr([2, 0, 0, 0, 0, owner as u8 + 1])
            )],
            "as seen by node-{o}"
        );
    }
}

#[test]
fn the_successor_saw_the_crashed_owners_data_plane_probe_go_unanswered() {
    let (w, owner) = crashed(World::owner);
    let names: Vec<NodeName> = (0..3).filter(|i| *i != owner).map(World::name).collect();
    let successor = rendezvous::owner(w.vip, &names).unwrap();
    let s_idx = (0..3).find(|i| World::name(*i) == *successor).unwrap();
    assert!(silence(&w, s_idx, owner).data_plane_silent);
}

#[test]
fn a_crashed_node_that_owned_no_vip_holds_nothing() {
    let (w, victim) = crashed(|w| (w.owner() + 1) % 3);
    let observer = (0..3).find(|i| *i != victim).unwrap();
    let s = silence(&w, observer, victim);
    assert!(s.heartbeats_silent);
    assert!(s.holds.is_empty());
}

#[test]
fn a_beating_peer_is_not_silent_and_its_holds_are_not_computed() {
    let (w, owner) = crashed(World::owner);
    let alive: Vec<usize> = (0..3).filter(|i| *i != owner).collect();
    let s = silence(&w, alive[0], alive[1]);
    assert!(!s.heartbeats_silent);
    assert!(!s.data_plane_silent);
    assert!(s.holds.is_empty());
}

#[test]
fn holds_are_computed_only_where_the_caller_asks() {
    let (w, owner) = crashed(World::owner);
    let o = (0..3).find(|i| *i != owner).unwrap();
    let s = w.nodes[o]
        .core
        .peer_silences(w.t, 4, |_| false)
        .into_iter()
        .find(|s| s.node == World::name(owner))
        .unwrap();
    assert!(s.heartbeats_silent && s.holds.is_empty());
}
