//! [`Peer::beat`]: which heartbeats are news. A steady one (the peer was beating and says
//! nothing new) only moves its silence deadline, and the core skips the tick for it; every
//! other one is news and is acted on at once.

use super::*;
use crate::election::peer::{Beaten, Peer};

const SILENT: (Duration, Duration) = (Duration::from_micros(112_500), Duration::from_millis(225));

fn us() -> NodeName {
    World::name(0)
}

fn beat_from_1() -> Beat {
    Beat {
        node: World::name(1),
        incarnation: 7,
        mac: MacAddr([2, 0, 0, 0, 0, 2]),
        leaving: false,
        api_ok: true,
        ready: true,
        acks: vec![],
        hears: vec![us()],
        config: 0,
        view: 42,
    }
}

/// A peer that has beaten once at `t0`.
fn beating(t0: Instant) -> Peer {
    let mut p = Peer::new();
    assert_eq!(p.beat(t0, &beat_from_1(), &us(), SILENT), Beaten::Changed);
    p
}

#[test]
fn the_first_beat_is_news() {
    let mut p = Peer::new();
    let t0 = Instant::now();
    assert_eq!(p.beat(t0, &beat_from_1(), &us(), SILENT), Beaten::Changed);
    assert_eq!(p.beating_since, Some(t0));
}

#[test]
fn a_beat_on_time_that_says_nothing_new_is_steady_and_moves_the_last_beat() {
    let t0 = Instant::now();
    let mut p = beating(t0);
    let t1 = t0 + 75 * MS;
    assert_eq!(p.beat(t1, &beat_from_1(), &us(), SILENT), Beaten::Steady);
    assert_eq!(p.last_beat, Some(t1));
    assert_eq!(p.beating_since, Some(t0));
}

#[test]
fn a_suspect_that_beats_again_is_news() {
    let t0 = Instant::now();
    let mut p = beating(t0);
    let late = t0 + 150 * MS;
    assert_eq!(p.beat(late, &beat_from_1(), &us(), SILENT), Beaten::Changed);
}

#[test]
fn a_peer_that_beats_again_after_its_dead_time_is_news_and_beating_anew() {
    let t0 = Instant::now();
    let mut p = beating(t0);
    let back = t0 + 300 * MS;
    assert_eq!(p.beat(back, &beat_from_1(), &us(), SILENT), Beaten::Changed);
    assert_eq!(p.beating_since, Some(back));
}

#[test]
fn every_field_a_step_reads_makes_a_beat_news() {
    type Change = (&'static str, fn(&mut Beat));
    let changes: [Change; 9] = [
        ("incarnation", |b| b.incarnation += 1),
        ("mac", |b| b.mac = MacAddr([2, 0, 0, 0, 0, 9])),
        ("leaving", |b| b.leaving = true),
        ("api_ok", |b| b.api_ok = false),
        ("ready", |b| b.ready = false),
        ("acks", |b| b.acks = vec![us()]),
        ("hears", |b| b.hears = vec![]),
        ("view", |b| b.view += 1),
        ("config", |b| b.config += 1),
    ];
    for (what, change) in changes {
        let t0 = Instant::now();
        let mut p = beating(t0);
        let mut b = beat_from_1();
        change(&mut b);
        assert_eq!(
            p.beat(t0 + 75 * MS, &b, &us(), SILENT),
            Beaten::Changed,
            "a changed {what}"
        );
    }
}

#[test]
fn a_beat_from_an_older_incarnation_is_stale_and_changes_nothing() {
    let t0 = Instant::now();
    let mut p = beating(t0);
    let mut old = beat_from_1();
    old.incarnation = 6;
    assert_eq!(p.beat(t0 + 75 * MS, &old, &us(), SILENT), Beaten::Stale);
    assert_eq!(p.last_beat, Some(t0));
}
