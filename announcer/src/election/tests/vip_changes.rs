//! [`Input::VipsChanged`]: a watch event's change to some VIPs, given without the others
//! (issue 29: a re-plan costs the core O(changes), not O(V)). A VIP changed this way moves as
//! it would with the whole set; the VIPs left out stay where they are.

use super::*;

fn spec(vip: IpAddr, eligible: impl IntoIterator<Item = usize>) -> VipSpec {
    VipSpec {
        vip,
        service: ServiceRef {
            namespace: "default".into(),
            name: format!("svc-{vip}"),
        },
        eligible: std::sync::Arc::new(eligible.into_iter().map(World::name).collect()),
        local: Some("eth0".into()),
        interfaces: Vec::new(),
        preferred: Default::default(),
    }
}

fn second_vip() -> IpAddr {
    "10.0.0.6".parse().unwrap()
}

/// The nodes that hold `vip` installed.
fn holders(w: &World, vip: IpAddr) -> Vec<usize> {
    (0..w.nodes.len())
        .filter(|i| w.nodes[*i].core.owned().iter().any(|(ip, _)| *ip == vip))
        .collect()
}

/// Three nodes with two VIPs, settled; the first VIP's owner.
fn settled() -> (World, usize) {
    let mut w = World::new(3);
    for i in 0..3 {
        let set = vec![spec(w.vip, 0..3), spec(second_vip(), 0..3)];
        w.input(i, Input::Vips(set));
    }
    w.run_for(Duration::from_secs(3));
    let owner = holders(&w, w.vip);
    assert_eq!(owner.len(), 1, "one holder of the first VIP: {owner:?}");
    assert_eq!(holders(&w, second_vip()).len(), 1);
    (w, owner[0])
}

/// Runs `ms` milliseconds, asserting at each that `owner` alone holds the first VIP.
fn first_stays_with(w: &mut World, owner: usize, ms: u32) {
    for _ in 0..ms {
        w.run_for(MS);
        assert_eq!(holders(w, w.vip), vec![owner], "at {:?}", w.t - w.origin);
    }
}

#[test]
fn a_vip_changed_alone_moves_and_the_others_stay() {
    let (mut w, owner) = settled();
    let was = holders(&w, second_vip())[0];
    for i in 0..3 {
        let placed = vec![spec(second_vip(), (0..3).filter(|n| *n != was))];
        w.input(
            i,
            Input::VipsChanged {
                placed,
                gone: vec![],
            },
        );
    }
    first_stays_with(&mut w, owner, 3000);
    let now = holders(&w, second_vip());
    assert_eq!(now.len(), 1, "one holder: {now:?}");
    assert_ne!(now[0], was, "it left the node no longer eligible");
}

#[test]
fn a_vip_gone_in_a_change_is_released_and_the_others_stay() {
    let (mut w, owner) = settled();
    for i in 0..3 {
        w.input(
            i,
            Input::VipsChanged {
                placed: vec![],
                gone: vec![second_vip()],
            },
        );
    }
    first_stays_with(&mut w, owner, 1000);
    assert_eq!(holders(&w, second_vip()), Vec::<usize>::new());
}

#[test]
fn a_change_before_the_first_vip_set_is_ignored() {
    let mut c = ElectionConfig::new("node-0");
    c.mac = MacAddr([2, 0, 0, 0, 0, 1]);
    let t = Instant::now();
    let mut core = Core::new(c, t, 1);
    core.handle(t, Input::WatchHealth(true));
    let placed = vec![spec(second_vip(), [0])];
    core.handle(
        t,
        Input::VipsChanged {
            placed,
            gone: vec![],
        },
    );
    core.handle(t + Duration::from_secs(20), Input::Tick);
    assert!(core.owned().is_empty());
    assert!(!core.is_ready(), "not ready before the VIP set is known");
}

/// The view a core's next heartbeat carries.
fn view_of(core: &mut Core, t: Instant) -> u64 {
    core.handle(t, Input::Tick);
    let mut view = None;
    while let Some(o) = core.poll_output() {
        if let Output::SendHeartbeat(b) = o {
            view = Some(b.view);
        }
    }
    view.expect("a heartbeat")
}

#[test]
fn cores_that_learnt_the_same_vips_by_changes_or_whole_have_the_same_view() {
    let t = Instant::now();
    let core = || {
        let mut c = Core::new(ElectionConfig::new("node-0"), t, 1);
        c.handle(t, Input::WatchHealth(true));
        c
    };
    let (a, b, c) = (
        spec(second_vip(), 0..3),
        spec("10.0.0.7".parse().unwrap(), 0..2),
        spec("10.0.0.8".parse().unwrap(), [1]),
    );
    let mut whole = core();
    whole.handle(t, Input::Vips(vec![a.clone(), b.clone()]));
    let mut grown = core();
    grown.handle(t, Input::Vips(vec![b.clone()]));
    grown.handle(
        t,
        Input::VipsChanged {
            placed: vec![a.clone()],
            gone: vec![],
        },
    );
    let mut shrunk = core();
    shrunk.handle(t, Input::Vips(vec![a.clone(), b.clone(), c.clone()]));
    shrunk.handle(
        t,
        Input::VipsChanged {
            placed: vec![],
            gone: vec![c.vip],
        },
    );
    let later = t + Duration::from_secs(1);
    let view = view_of(&mut whole, later);
    assert_eq!(view_of(&mut grown, later), view);
    assert_eq!(view_of(&mut shrunk, later), view);
    let mut other = core();
    other.handle(t, Input::Vips(vec![a, c]));
    assert_ne!(
        view_of(&mut other, later),
        view,
        "another set, another view"
    );
}
