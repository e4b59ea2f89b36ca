//! The unreachable report's rules, in virtual time.

use std::net::Ipv4Addr;

use super::*;

const MS: Duration = Duration::from_millis(1);
const PEER_MAC: MacAddr = MacAddr([2, 0, 0, 0, 0, 0xb]);

fn b() -> NodeName {
    NodeName::from("node-b")
}

fn ip_b() -> IpAddr {
    Ipv4Addr::new(10, 0, 0, 12).into()
}

fn vip() -> IpAddr {
    Ipv4Addr::new(10, 0, 0, 100).into()
}

fn kernel_b() -> KernelTarget {
    KernelTarget {
        iface: IfaceName::from("eth0"),
        ip: ip_b(),
    }
}

fn dp_b() -> DataPlaneTarget {
    DataPlaneTarget {
        iface: IfaceName::from("eth0"),
        vip: vip(),
        mac: PEER_MAC,
    }
}

/// node-b, silent, holding no VIP, its InternalIP known.
fn silent_b() -> PeerView {
    PeerView {
        node: b(),
        heartbeats_quiet: true,
        heartbeats_silent: true,
        released: false,
        data_plane: DataPlane::HoldsNone,
        kernel: vec![kernel_b()],
    }
}

fn beating_b() -> PeerView {
    PeerView {
        heartbeats_quiet: false,
        heartbeats_silent: false,
        ..silent_b()
    }
}

/// node-b's heartbeats overdue (a suspect), not yet silent.
fn late_b() -> PeerView {
    PeerView {
        heartbeats_silent: false,
        ..silent_b()
    }
}

fn seeing() -> Observer {
    Observer {
        connected: 1,
        ready: true,
        ..Observer::default()
    }
}

/// A seeing observer at `t0` that knows `views`.
fn rules(t0: Instant, views: Vec<PeerView>) -> Unreachable {
    let mut u = Unreachable::new(Config::default());
    u.handle_observer(t0, seeing());
    u.handle_peers(t0, views);
    u
}

fn drain(u: &mut Unreachable) -> Vec<Probe> {
    std::iter::from_fn(|| u.poll_probe()).collect()
}

/// Runs timers up to `until`, dropping the probes sent; returns how many were sent.
fn run(u: &mut Unreachable, until: Instant) -> usize {
    let mut sent = drain(u).len();
    while let Some(t) = u.poll_timeout().filter(|t| *t <= until) {
        u.handle_timeout(t);
        sent += drain(u).len();
    }
    sent
}

fn listed(u: &Unreachable) -> Vec<NodeName> {
    u.report().unreachable.into_iter().collect()
}

#[test]
fn a_silent_peer_whose_kernel_stays_silent_is_listed_after_three_unanswered_rounds() {
    let t0 = Instant::now();
    let mut u = rules(t0, vec![silent_b()]);
    run(&mut u, t0 + 149 * MS);
    assert!(
        listed(&u).is_empty(),
        "not before the third round's window closed"
    );
    run(&mut u, t0 + 150 * MS);
    assert_eq!(listed(&u), vec![b()]);
}

#[test]
fn each_round_asks_the_peers_kernel_for_its_internal_ip_fifty_ms_apart() {
    let t0 = Instant::now();
    let mut u = rules(t0, vec![silent_b()]);
    let probe = Probe::Kernel {
        node: b(),
        target: kernel_b(),
    };
    assert_eq!(
        drain(&mut u),
        vec![probe.clone()],
        "the first round at once"
    );
    assert_eq!(u.poll_timeout(), Some(t0 + 50 * MS));
    u.handle_timeout(t0 + 50 * MS);
    assert_eq!(drain(&mut u), vec![probe.clone()]);
    u.handle_timeout(t0 + 100 * MS);
    assert_eq!(drain(&mut u), vec![probe]);
    u.handle_timeout(t0 + 150 * MS);
    assert!(drain(&mut u).is_empty(), "three rounds, then the verdict");
}

#[test]
fn a_kernel_answer_during_the_rounds_keeps_the_peer_unlisted() {
    let t0 = Instant::now();
    let mut u = rules(t0, vec![silent_b()]);
    run(&mut u, t0 + 100 * MS);
    u.handle_kernel_answer(t0 + 120 * MS, ip_b());
    run(&mut u, t0 + 999 * MS);
    assert!(listed(&u).is_empty());
}

#[test]
fn a_peer_that_answered_is_asked_again_after_a_second_and_listed_if_silent_then() {
    let t0 = Instant::now();
    let mut u = rules(t0, vec![silent_b()]);
    drain(&mut u);
    u.handle_kernel_answer(t0 + 10 * MS, ip_b());
    assert_eq!(u.poll_timeout(), Some(t0 + 1010 * MS));
    run(&mut u, t0 + 1010 * MS + 149 * MS);
    assert!(listed(&u).is_empty());
    run(&mut u, t0 + 1010 * MS + 150 * MS);
    assert_eq!(listed(&u), vec![b()], "the node died after its agent");
}

#[test]
fn a_peer_whose_heartbeats_arrive_is_never_probed() {
    let t0 = Instant::now();
    let mut u = rules(t0, vec![beating_b()]);
    assert_eq!(run(&mut u, t0 + 10 * Duration::from_secs(1)), 0);
    assert_eq!(u.poll_timeout(), None);
    assert!(listed(&u).is_empty());
}

#[test]
fn a_peer_whose_internal_ip_is_unknown_is_never_listed() {
    let t0 = Instant::now();
    let view = PeerView {
        kernel: Vec::new(),
        ..silent_b()
    };
    let mut u = rules(t0, vec![view]);
    assert_eq!(run(&mut u, t0 + Duration::from_secs(5)), 0);
    assert!(listed(&u).is_empty());
}

#[test]
fn a_peer_holding_a_vip_has_its_data_plane_asked_in_every_round() {
    let t0 = Instant::now();
    let view = PeerView {
        data_plane: DataPlane::Holds(dp_b()),
        ..silent_b()
    };
    let mut u = rules(t0, vec![view]);
    assert_eq!(
        drain(&mut u),
        vec![
            Probe::Kernel {
                node: b(),
                target: kernel_b()
            },
            Probe::DataPlane {
                node: b(),
                target: dp_b()
            },
        ]
    );
}

#[test]
fn a_peer_the_election_probed_silent_gets_no_data_plane_probe_of_ours() {
    let t0 = Instant::now();
    let view = PeerView {
        data_plane: DataPlane::ProbedSilent,
        ..silent_b()
    };
    let mut u = rules(t0, vec![view]);
    assert!(
        drain(&mut u)
            .iter()
            .all(|p| matches!(p, Probe::Kernel { .. }))
    );
    run(&mut u, t0 + 150 * MS);
    assert_eq!(listed(&u), vec![b()]);
}

#[test]
fn a_data_plane_answer_keeps_the_peer_unlisted() {
    let t0 = Instant::now();
    let view = PeerView {
        data_plane: DataPlane::Holds(dp_b()),
        ..silent_b()
    };
    let mut u = rules(t0, vec![view]);
    drain(&mut u);
    u.handle_data_plane_answer(t0 + 5 * MS, vip(), PEER_MAC);
    run(&mut u, t0 + 999 * MS);
    assert!(listed(&u).is_empty());
}

#[test]
fn a_data_plane_answer_from_another_mac_is_no_sign_of_life() {
    let t0 = Instant::now();
    let view = PeerView {
        data_plane: DataPlane::Holds(dp_b()),
        ..silent_b()
    };
    let mut u = rules(t0, vec![view]);
    drain(&mut u);
    u.handle_data_plane_answer(t0 + 5 * MS, vip(), MacAddr([2, 0, 0, 0, 0, 0xc]));
    run(&mut u, t0 + 150 * MS);
    assert_eq!(listed(&u), vec![b()]);
}

#[test]
fn a_listed_peer_is_asked_again_every_second() {
    let t0 = Instant::now();
    let mut u = rules(t0, vec![silent_b()]);
    run(&mut u, t0 + 150 * MS);
    assert_eq!(u.poll_timeout(), Some(t0 + 1150 * MS));
    assert_eq!(run(&mut u, t0 + 3150 * MS), 3, "one round a second");
    assert_eq!(listed(&u), vec![b()]);
}

#[test]
fn a_kernel_answer_to_a_reprobe_unlists_at_once() {
    let t0 = Instant::now();
    let mut u = rules(t0, vec![silent_b()]);
    run(&mut u, t0 + 1150 * MS);
    u.handle_kernel_answer(t0 + 1151 * MS, ip_b());
    assert!(listed(&u).is_empty());
}

#[test]
fn a_heartbeat_unlists_at_once() {
    let t0 = Instant::now();
    let mut u = rules(t0, vec![silent_b()]);
    run(&mut u, t0 + 150 * MS);
    u.handle_peers(t0 + 200 * MS, vec![beating_b()]);
    assert!(listed(&u).is_empty());
    assert_eq!(u.poll_timeout(), None, "and it is no longer probed");
}

#[test]
fn a_released_peer_is_unlisted_at_once() {
    let t0 = Instant::now();
    let mut u = rules(t0, vec![silent_b()]);
    run(&mut u, t0 + 150 * MS);
    let released = PeerView {
        released: true,
        ..silent_b()
    };
    u.handle_peers(t0 + 200 * MS, vec![released]);
    assert!(listed(&u).is_empty());
}

#[test]
fn a_peer_whose_lease_was_deleted_is_unlisted_at_once() {
    let t0 = Instant::now();
    let mut u = rules(t0, vec![silent_b()]);
    run(&mut u, t0 + 150 * MS);
    u.handle_peers(t0 + 200 * MS, Vec::new());
    assert!(listed(&u).is_empty());
}

/// Lists node-b, then turns the observer into `observer`: it must list nobody.
fn listed_after_turning(observer: Observer) -> Vec<NodeName> {
    let t0 = Instant::now();
    let mut u = rules(t0, vec![silent_b()]);
    run(&mut u, t0 + 150 * MS);
    assert_eq!(listed(&u), vec![b()]);
    u.handle_observer(t0 + 200 * MS, observer);
    run(&mut u, t0 + Duration::from_secs(5));
    listed(&u)
}

#[test]
fn an_observer_connected_to_no_peer_lists_nobody() {
    let o = Observer {
        connected: 0,
        ..seeing()
    };
    assert_eq!(o.blind(), Some(Blind::NoPeerConnected));
    assert!(listed_after_turning(o).is_empty());
}

#[test]
fn an_observer_that_stepped_back_lists_nobody() {
    let o = Observer {
        standby: true,
        ..seeing()
    };
    assert!(listed_after_turning(o).is_empty());
}

#[test]
fn an_observer_whose_link_is_down_lists_nobody() {
    let o = Observer {
        link_down: true,
        ..seeing()
    };
    assert!(listed_after_turning(o).is_empty());
}

#[test]
fn an_observer_shutting_down_lists_nobody() {
    let o = Observer {
        shutting_down: true,
        ..seeing()
    };
    assert!(listed_after_turning(o).is_empty());
}

#[test]
fn an_observer_not_yet_ready_lists_nobody() {
    let o = Observer {
        ready: false,
        ..seeing()
    };
    assert!(listed_after_turning(o).is_empty());
}

#[test]
fn a_new_observer_lists_nobody_until_told_how_it_sees() {
    let t0 = Instant::now();
    let mut u = Unreachable::new(Config::default());
    u.handle_peers(t0, vec![silent_b()]);
    assert_eq!(
        run(&mut u, t0 + Duration::from_secs(5)),
        0,
        "no probe either"
    );
    assert!(listed(&u).is_empty());
}

#[test]
fn a_blind_observer_sends_no_probes() {
    let t0 = Instant::now();
    let mut u = rules(t0, vec![silent_b()]);
    drain(&mut u);
    u.handle_observer(t0, Observer::default());
    assert_eq!(run(&mut u, t0 + Duration::from_secs(5)), 0);
}

#[test]
fn an_observer_that_sees_again_proves_every_peer_afresh() {
    let t0 = Instant::now();
    let mut u = rules(t0, vec![silent_b()]);
    run(&mut u, t0 + 150 * MS);
    u.handle_observer(t0 + 200 * MS, Observer::default());
    u.handle_observer(t0 + 300 * MS, seeing());
    assert!(listed(&u).is_empty(), "not on the old proof");
    run(&mut u, t0 + 449 * MS);
    assert!(listed(&u).is_empty());
    run(&mut u, t0 + 450 * MS);
    assert_eq!(listed(&u), vec![b()], "three fresh rounds later");
}

#[test]
fn the_report_is_offered_once_per_change() {
    let t0 = Instant::now();
    let mut u = rules(t0, vec![silent_b()]);
    assert_eq!(u.poll_report(), None, "empty, as before");
    run(&mut u, t0 + 150 * MS);
    assert_eq!(u.poll_report(), Some(Report::of([b()])));
    assert_eq!(u.poll_report(), None);
    u.handle_peers(t0 + 200 * MS, vec![beating_b()]);
    assert_eq!(u.poll_report(), Some(Report::default()));
}

#[test]
fn a_late_peer_is_probed_at_once_but_not_listed_while_its_heartbeats_are_not_silent() {
    let t0 = Instant::now();
    let mut u = rules(t0, vec![late_b()]);
    assert_eq!(
        run(&mut u, t0 + 150 * MS),
        3,
        "three rounds, alongside the election's probe"
    );
    assert!(listed(&u).is_empty());
}

#[test]
fn a_late_peer_proven_silent_is_listed_the_moment_its_heartbeats_are_silent() {
    let t0 = Instant::now();
    let mut u = rules(t0, vec![late_b()]);
    run(&mut u, t0 + 150 * MS);
    u.handle_peers(t0 + 200 * MS, vec![silent_b()]);
    assert_eq!(listed(&u), vec![b()], "on the proof already made");
}

#[test]
fn a_late_peer_whose_heartbeats_resume_is_never_listed() {
    let t0 = Instant::now();
    let mut u = rules(t0, vec![late_b()]);
    run(&mut u, t0 + 150 * MS);
    u.handle_peers(t0 + 160 * MS, vec![beating_b()]);
    u.handle_peers(t0 + 300 * MS, vec![silent_b()]);
    assert!(
        listed(&u).is_empty(),
        "not on the proof from before it beat again"
    );
}

#[test]
fn a_proof_not_used_within_a_second_is_made_again() {
    let t0 = Instant::now();
    let mut u = rules(t0, vec![late_b()]);
    run(&mut u, t0 + 150 * MS);
    assert_eq!(u.poll_timeout(), Some(t0 + 1150 * MS));
    assert_eq!(run(&mut u, t0 + 1150 * MS), 1, "a new first round");
    u.handle_peers(t0 + 1160 * MS, vec![silent_b()]);
    assert!(listed(&u).is_empty(), "not on the stale proof");
    run(&mut u, t0 + 1299 * MS);
    assert!(
        listed(&u).is_empty(),
        "not before the new proof's third window closed"
    );
    run(&mut u, t0 + 1300 * MS);
    assert_eq!(listed(&u), vec![b()], "on the new one");
}
