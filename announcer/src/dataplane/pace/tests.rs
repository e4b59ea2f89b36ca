use std::net::{IpAddr, Ipv4Addr};

use super::*;

const MS: Duration = Duration::from_millis(1);
const SEC: Duration = Duration::from_secs(1);

fn vip(i: u32) -> IpAddr {
    IpAddr::V4(Ipv4Addr::from(0x0a00_0000 + i))
}

/// Every round sent, in order, with when: polling whenever the pacer says.
fn run(p: &mut Pacer<IpAddr, ()>, start: Instant) -> Vec<(Instant, IpAddr, u32)> {
    let mut sent = Vec::new();
    let mut now = start;
    while let Some(at) = p.next_wakeup(now) {
        now = now.max(at);
        while let Some(d) = p.poll(now) {
            sent.push((now, d.key, d.round));
        }
        // The wakeup may be a hair early (float refill): step on.
        if p.next_wakeup(now).is_some_and(|at| at <= now) {
            now += Duration::from_micros(10);
        }
    }
    sent
}

fn pacer(t: Instant, n: u32, rounds: u32) -> Pacer<IpAddr, ()> {
    let mut p = Pacer::new(PaceConfig::DEFAULT, t);
    for i in 0..n {
        p.announce(t, vip(i), (), rounds, SEC, 2);
    }
    p
}

#[test]
fn a_few_vips_are_announced_at_once() {
    let t = Instant::now();
    let mut p = pacer(t, 100, 3);
    let firsts = std::iter::from_fn(|| p.poll(t)).count();
    assert_eq!(firsts, 100);
}

#[test]
fn a_mass_takeover_never_exceeds_the_rate_beyond_one_burst() {
    let t = Instant::now();
    let sent = run(&mut pacer(t, 5000, 3), t);
    assert_eq!(sent.len(), 15_000);
    let cfg = PaceConfig::DEFAULT;
    // Frames in every window of one second starting at a send.
    let mut j = 0;
    for i in 0..sent.len() {
        while j < sent.len() && sent[j].0 < sent[i].0 + SEC {
            j += 1;
        }
        let frames = 2 * (j - i) as u32;
        assert!(
            frames <= cfg.rate + cfg.burst,
            "{frames} frames within one second from {:?}",
            sent[i].0 - t
        );
    }
}

#[test]
fn every_first_round_goes_before_any_repeat() {
    let t = Instant::now();
    let sent = run(&mut pacer(t, 2000, 3), t);
    let last_first = sent.iter().rposition(|s| s.2 == 0).unwrap();
    let first_repeat = sent.iter().position(|s| s.2 > 0).unwrap();
    assert!(last_first < first_repeat);
    // And the first rounds in the order the VIPs were taken.
    let order: Vec<IpAddr> = sent.iter().filter(|s| s.2 == 0).map(|s| s.1).collect();
    assert_eq!(order, (0..2000).map(vip).collect::<Vec<_>>());
}

#[test]
fn a_repeat_is_never_closer_than_the_interval_to_the_round_before() {
    let t = Instant::now();
    let sent = run(&mut pacer(t, 3000, 3), t);
    let mut last: HashMap<IpAddr, (Instant, u32)> = HashMap::new();
    for (at, key, round) in sent {
        if let Some((before, r)) = last.insert(key, (at, round)) {
            assert_eq!(round, r + 1);
            assert!(
                at - before >= SEC,
                "{key} round {round} after {:?}",
                at - before
            );
        } else {
            assert_eq!(round, 0);
        }
    }
    assert!(last.values().all(|(_, r)| *r == 2));
}

#[test]
fn a_cancelled_vip_sends_nothing_more() {
    let t = Instant::now();
    let mut p = pacer(t, 500, 3);
    p.cancel(&vip(7));
    p.cancel(&vip(400));
    let sent = run(&mut p, t);
    assert!(sent.iter().all(|s| s.1 != vip(7) && s.1 != vip(400)));
    assert_eq!(sent.len(), 498 * 3);
    assert_eq!(p.in_progress(), 0);
}

#[test]
fn a_vip_announced_again_restarts_its_burst_once() {
    let t = Instant::now();
    let mut p = pacer(t, 1, 3);
    assert_eq!(p.poll(t).map(|d| d.round), Some(0));
    p.announce(t + 10 * MS, vip(0), (), 3, SEC, 2);
    let rounds: Vec<u32> = run(&mut p, t + 10 * MS).into_iter().map(|s| s.2).collect();
    assert_eq!(rounds, vec![0, 1, 2]);
}

#[test]
fn the_delay_pacing_added_is_reported() {
    let t = Instant::now();
    let sent_late = {
        let mut p = pacer(t, 1000, 1);
        let mut last = None;
        let mut now = t;
        while let Some(at) = p.next_wakeup(now) {
            now = now.max(at) + Duration::from_micros(10);
            while let Some(d) = p.poll(now) {
                last = Some(d.waited);
            }
        }
        last.unwrap()
    };
    // 2,000 frames, 200 at once, then 1,000/s.
    assert!(
        sent_late >= Duration::from_millis(1790) && sent_late <= Duration::from_millis(1810),
        "{sent_late:?}"
    );
}
