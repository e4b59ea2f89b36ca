//! What one trial measured, computed from the prober's timeline and from owner polls only, so
//! that every system is judged by the same client-side rules (see the definitions in
//! [`super`]): the figures are what a client 10 ms apart would have seen, not what a system's
//! logs claim.

use std::{net::IpAddr, time::Duration};

use serde::Serialize;

use crate::env::lan::{ProbeKind, Sample};

/// One VIP in one trial, as the client saw it.
#[derive(Clone, Debug, PartialEq, Eq, Serialize)]
pub struct VipOutcome {
    /// UDP probes sent in `[at, until]` that were never answered.
    pub lost: u32,
    /// Failover time (see the module docs of [`super`]); `None`: the VIP did not answer again
    /// (or, if it had been answered by nobody before `at`, the trial is void).
    pub failover: Option<Duration>,
    /// Node that answered the last probe sent before `at`.
    pub before: Option<String>,
    /// Node that answered the last answered probe in the window.
    pub after: Option<String>,
    /// Whether another node than `before` answered in the window.
    pub switched: bool,
}

fn is_udp(s: &Sample) -> bool {
    matches!(s.kind, ProbeKind::Udp)
}

/// The client's view of `target` for a failure injected at `at`, counting probes sent up to
/// `until` (probes sent later may not have had their second to be answered yet).
///
/// Failover time: the send time of the first probe after `at` answered by a node other than
/// the one that answered before, minus `at`; if no other node answered but probes were lost,
/// the send time of the first answered probe after the last lost one, minus `at`; zero if
/// nothing was lost and nobody else answered.
pub fn vip_outcome(
    samples: &[Sample],
    target: IpAddr,
    at: Duration,
    until: Duration,
) -> VipOutcome {
    let mut mine: Vec<&Sample> = samples
        .iter()
        .filter(|s| is_udp(s) && s.target == target && s.sent <= until)
        .collect();
    mine.sort_by_key(|s| s.sent);
    let before = mine
        .iter()
        .rev()
        .find(|s| s.sent < at && s.rtt.is_some())
        .and_then(|s| s.node.clone());
    let window: Vec<&Sample> = mine.iter().copied().filter(|s| s.sent >= at).collect();
    let lost = window.iter().filter(|s| s.rtt.is_none()).count() as u32;
    let mut answered = window.iter().copied().filter(|s| s.rtt.is_some());
    let after = answered.clone().next_back().and_then(|s| s.node.clone());
    let first_new = answered
        .clone()
        .find(|s| before.is_some() && s.node != before);
    let failover = if before.is_none() {
        None
    } else if let Some(s) = first_new {
        Some(s.sent - at)
    } else if let Some(last_lost) = window.iter().rev().find(|s| s.rtt.is_none()) {
        answered
            .find(|s| s.sent > last_lost.sent)
            .map(|s| s.sent - at)
    } else {
        Some(Duration::ZERO)
    };
    VipOutcome {
        lost,
        failover,
        before,
        after,
        switched: first_new.is_some(),
    }
}

/// The longest time `target` went unanswered in `[at, until]`: from the first lost probe of a
/// run of lost ones to the send time of the next answered probe (or `until`, if none was
/// answered after it); zero if no probe was lost.
pub fn max_gap(samples: &[Sample], target: IpAddr, at: Duration, until: Duration) -> Duration {
    let mut mine: Vec<&Sample> = samples
        .iter()
        .filter(|s| is_udp(s) && s.target == target && s.sent >= at && s.sent <= until)
        .collect();
    mine.sort_by_key(|s| s.sent);
    let mut gap = Duration::ZERO;
    let mut since: Option<Duration> = None;
    for s in mine {
        match (s.rtt.is_some(), since) {
            (false, None) => since = Some(s.sent),
            (true, Some(from)) => {
                gap = gap.max(s.sent - from);
                since = None;
            }
            _ => {}
        }
    }
    if let Some(from) = since {
        gap = gap.max(until.saturating_sub(from));
    }
    gap
}

/// Rejoin figures (the rejoin window runs from the returning node's link coming up to the end
/// of the trial; the trial's failover and lost probes are those of that window).
#[derive(Clone, Debug, PartialEq, Eq, Serialize)]
pub struct RejoinOutcome {
    /// Whether the crash before it was taken over (another node announced and answered every
    /// probed VIP within the bound); if not, the rejoin window measures a VIP that never moved.
    pub taken_over: bool,
    /// Whether the returning node answered every probed VIP at the end.
    pub moved_back: bool,
    /// The longest time one probed VIP went unanswered in the window.
    #[serde(rename = "max_gap_ms", serialize_with = "ser_ms")]
    pub max_gap: Duration,
}

fn ser_ms<S: serde::Serializer>(d: &Duration, s: S) -> Result<S::Ok, S::Error> {
    s.serialize_f64(d.as_secs_f64() * 1e3)
}

/// Whether every probed VIP was last answered by `node` (and there was one to judge).
pub fn moved_back(per_vip: &[VipOutcome], node: &str) -> bool {
    !per_vip.is_empty() && per_vip.iter().all(|o| o.after.as_deref() == Some(node))
}

/// A trial over several VIPs: the slowest VIP's failover (the time until the *last* of them
/// answered again; `None` if any did not), and the most probes one VIP lost.
pub fn combine(per_vip: &[VipOutcome]) -> (Option<Duration>, u32) {
    let failover = per_vip
        .iter()
        .map(|v| v.failover)
        .try_fold(Duration::ZERO, |acc, f| f.map(|f| acc.max(f)));
    let lost = per_vip.iter().map(|v| v.lost).max().unwrap_or(0);
    (failover, lost)
}

/// What a scenario should do to the owner of the victim's VIPs ([`super::scenarios::Scenario::expected_owner`]).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize)]
#[serde(rename_all = "kebab-case")]
pub enum Expect {
    /// Another node takes every one of them over.
    Moves,
    /// The victim keeps every one of them.
    Stays,
}

impl Expect {
    /// Name in the table and the JSON.
    pub fn name(self) -> &'static str {
        match self {
            Expect::Moves => "moves",
            Expect::Stays => "stays",
        }
    }
}

/// Whether a trial saw the owner change (or no change) its scenario expects.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize)]
#[serde(rename_all = "kebab-case")]
pub enum OwnerCheck {
    /// Nothing is expected (partition; keepalived's restart, where whichever backup's timer
    /// fires first holds the VIP).
    NotJudged,
    /// A move was expected and seen: the takeover was observed and, for every probed VIP, a
    /// node other than the victim answered, the last answer included.
    Moved,
    /// A move was expected and not seen: some probed VIP was still (or again, or only)
    /// answered by the victim, or nobody else announced it in time.
    NotMoved,
    /// The victim was expected to keep every VIP and did: it answered before and at the end,
    /// and no other node answered any probe.
    Kept,
    /// The victim was expected to keep every VIP and did not: another node answered a probe,
    /// or the victim did not answer at the end.
    NotKept,
}

impl OwnerCheck {
    /// Name in the progress lines and the JSON.
    pub fn name(self) -> &'static str {
        match self {
            OwnerCheck::NotJudged => "not-judged",
            OwnerCheck::Moved => "moved",
            OwnerCheck::NotMoved => "not-moved",
            OwnerCheck::Kept => "kept",
            OwnerCheck::NotKept => "not-kept",
        }
    }

    /// Whether the expected owner was observed; `None`: nothing was expected.
    pub fn ok(self) -> Option<bool> {
        match self {
            OwnerCheck::NotJudged => None,
            OwnerCheck::Moved | OwnerCheck::Kept => Some(true),
            OwnerCheck::NotMoved | OwnerCheck::NotKept => Some(false),
        }
    }
}

/// Judges the owner a trial observed against what its scenario expects, from the client's
/// view of each probed VIP and, for a move, whether the trial saw the takeover (another node
/// announcing every VIP and answering it, [`super::trial`]'s wait).
pub fn owner_check(
    expect: Option<Expect>,
    per_vip: &[VipOutcome],
    victim: &str,
    takeover_seen: bool,
) -> OwnerCheck {
    let victim = Some(victim);
    match expect {
        None => OwnerCheck::NotJudged,
        Some(Expect::Moves) => {
            let moved =
                |o: &VipOutcome| o.switched && o.after.is_some() && o.after.as_deref() != victim;
            if takeover_seen && !per_vip.is_empty() && per_vip.iter().all(moved) {
                OwnerCheck::Moved
            } else {
                OwnerCheck::NotMoved
            }
        }
        Some(Expect::Stays) => {
            let kept = |o: &VipOutcome| {
                !o.switched && o.before.as_deref() == victim && o.after.as_deref() == victim
            };
            if !per_vip.is_empty() && per_vip.iter().all(kept) {
                OwnerCheck::Kept
            } else {
                OwnerCheck::NotKept
            }
        }
    }
}

/// One poll of who announces a VIP: time on the prober's timeline and the number of nodes
/// announcing it.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct OwnerPoll {
    pub at: Duration,
    pub owners: usize,
}

/// Partition figures from owner polls.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize)]
pub struct SplitOutcome {
    /// Total time two or more nodes announced the VIP (each poll counts until the next one).
    pub overlap: Duration,
    /// From the heal until the first poll that saw exactly one owner; `None`: never in the
    /// window.
    pub single_owner_after_heal: Option<Duration>,
}

/// Overlap and time to a single owner, from polls sorted by time and the heal instant.
pub fn split_outcome(polls: &[OwnerPoll], heal: Duration) -> SplitOutcome {
    let overlap = polls
        .windows(2)
        .filter(|w| w[0].owners >= 2)
        .map(|w| w[1].at.saturating_sub(w[0].at))
        .sum();
    let single_owner_after_heal = polls
        .iter()
        .find(|p| p.at >= heal && p.owners == 1)
        .map(|p| p.at - heal);
    SplitOutcome {
        overlap,
        single_owner_after_heal,
    }
}

#[cfg(test)]
mod unit {
    use super::*;

    const VIP: &str = "10.78.128.0";

    fn ms(v: u64) -> Duration {
        Duration::from_millis(v)
    }

    /// Probes every 10 ms from 0 to `end` ms; `who(t)` says who answered (None: lost).
    fn timeline(end: u64, who: impl Fn(u64) -> Option<&'static str>) -> Vec<Sample> {
        (0..=end / 10)
            .map(|i| {
                let t = i * 10;
                let node = who(t);
                Sample {
                    target: VIP.parse().unwrap(),
                    kind: ProbeKind::Udp,
                    seq: i,
                    sent: ms(t),
                    rtt: node.map(|_| ms(1)),
                    node: node.map(str::to_owned),
                }
            })
            .collect()
    }

    fn outcome(samples: &[Sample], at: u64, until: u64) -> VipOutcome {
        vip_outcome(samples, VIP.parse().unwrap(), ms(at), ms(until))
    }

    #[test]
    fn crash_is_the_first_answer_from_the_new_owner() {
        let s = timeline(3000, |t| match t {
            ..1000 => Some("node-a"),
            1000..1350 => None,
            _ => Some("node-b"),
        });
        let o = outcome(&s, 1000, 2500);
        assert_eq!(o.failover, Some(ms(350)));
        assert_eq!(o.lost, 35);
        assert_eq!(
            (o.before.as_deref(), o.after.as_deref()),
            (Some("node-a"), Some("node-b"))
        );
        assert!(o.switched);
    }

    #[test]
    fn a_handover_without_loss_counts_the_switch() {
        let s = timeline(3000, |t| Some(if t < 1200 { "node-a" } else { "node-b" }));
        let o = outcome(&s, 1000, 3000);
        assert_eq!((o.failover, o.lost, o.switched), (Some(ms(200)), 0, true));
    }

    #[test]
    fn same_node_back_after_a_loss_counts_until_the_last_loss() {
        let s = timeline(3000, |t| match t {
            1100..1150 | 1500..1520 => None,
            _ => Some("node-a"),
        });
        let o = outcome(&s, 1000, 3000);
        assert_eq!((o.failover, o.lost, o.switched), (Some(ms(520)), 7, false));
    }

    #[test]
    fn nothing_felt_is_zero_and_no_recovery_is_none() {
        let s = timeline(2000, |_| Some("node-a"));
        assert_eq!(outcome(&s, 1000, 2000).failover, Some(Duration::ZERO));
        let s = timeline(2000, |t| (t < 1000).then_some("node-a"));
        let o = outcome(&s, 1000, 2000);
        assert_eq!((o.failover, o.lost), (None, 101));
        // Probes after `until` are not counted.
        assert_eq!(outcome(&s, 1000, 1500).lost, 51);
        // Never answered before the failure: void.
        let s = timeline(2000, |t| (t > 1500).then_some("node-b"));
        assert_eq!(outcome(&s, 1000, 2000).failover, None);
    }

    #[test]
    fn combine_takes_the_last_vip_and_none_wins() {
        let v = |f: Option<u64>, lost| VipOutcome {
            lost,
            failover: f.map(ms),
            before: None,
            after: None,
            switched: false,
        };
        assert_eq!(
            combine(&[v(Some(100), 3), v(Some(300), 1)]),
            (Some(ms(300)), 3)
        );
        assert_eq!(combine(&[v(Some(100), 3), v(None, 9)]), (None, 9));
        assert_eq!(combine(&[]), (Some(Duration::ZERO), 0));
    }

    fn seen(before: &str, after: &str) -> VipOutcome {
        VipOutcome {
            lost: 0,
            failover: Some(Duration::ZERO),
            before: Some(before.into()),
            after: Some(after.into()),
            switched: before != after,
        }
    }

    #[test]
    fn a_vip_answered_by_its_old_owner_throughout_is_not_moved() {
        // An agent that ignores SIGTERM: nothing lost, nobody else answered.
        let o = outcome(&timeline(2000, |_| Some("node-a")), 1000, 2000);
        assert_eq!(
            owner_check(Some(Expect::Moves), &[o], "node-a", false),
            OwnerCheck::NotMoved
        );
    }

    #[test]
    fn a_move_counts_only_when_every_vip_moved_and_the_takeover_was_seen() {
        let (moved, stuck) = (seen("node-a", "node-b"), seen("node-a", "node-a"));
        let check = |v: &[VipOutcome], seen| owner_check(Some(Expect::Moves), v, "node-a", seen);
        assert_eq!(check(std::slice::from_ref(&moved), true), OwnerCheck::Moved);
        assert_eq!(check(&[moved.clone(), stuck], true), OwnerCheck::NotMoved);
        assert_eq!(check(&[moved], false), OwnerCheck::NotMoved);
        assert_eq!(check(&[], true), OwnerCheck::NotMoved);
    }

    #[test]
    fn a_vip_that_went_back_to_the_victim_is_not_moved() {
        let s = timeline(3000, |t| match t {
            ..1000 => Some("node-a"),
            1000..1500 => Some("node-b"),
            _ => Some("node-a"),
        });
        let o = outcome(&s, 1000, 3000);
        assert!(o.switched);
        assert_eq!(
            owner_check(Some(Expect::Moves), &[o], "node-a", true),
            OwnerCheck::NotMoved
        );
    }

    #[test]
    fn a_restart_in_grace_must_keep_the_owner() {
        let check = |v: VipOutcome| owner_check(Some(Expect::Stays), &[v], "node-a", false);
        assert_eq!(check(seen("node-a", "node-a")), OwnerCheck::Kept);
        assert_eq!(check(seen("node-a", "node-b")), OwnerCheck::NotKept);
        let silent = VipOutcome {
            after: None,
            failover: None,
            ..seen("node-a", "node-a")
        };
        assert_eq!(check(silent), OwnerCheck::NotKept);
    }

    #[test]
    fn nothing_expected_is_not_judged() {
        assert_eq!(
            owner_check(None, &[seen("node-a", "node-b")], "node-a", true),
            OwnerCheck::NotJudged
        );
        assert_eq!(OwnerCheck::NotJudged.ok(), None);
    }

    #[test]
    fn max_gap_is_the_longest_unanswered_run_until_the_next_answer() {
        let s = timeline(3000, |t| match t {
            1100..1150 => None,
            1500..1620 => None,
            _ => Some("node-a"),
        });
        assert_eq!(
            max_gap(&s, VIP.parse().unwrap(), ms(1000), ms(3000)),
            ms(120)
        );
        // Only the window counts.
        assert_eq!(
            max_gap(&s, VIP.parse().unwrap(), ms(1000), ms(1400)),
            ms(50)
        );
    }

    #[test]
    fn max_gap_is_zero_without_a_loss_and_runs_to_the_end_without_an_answer() {
        let all = timeline(2000, |_| Some("node-a"));
        assert_eq!(max_gap(&all, VIP.parse().unwrap(), ms(0), ms(2000)), ms(0));
        let dark = timeline(2000, |t| (t < 1000).then_some("node-a"));
        assert_eq!(
            max_gap(&dark, VIP.parse().unwrap(), ms(500), ms(2000)),
            ms(1000)
        );
    }

    #[test]
    fn moved_back_needs_every_vip_last_answered_by_the_returning_node() {
        let (back, stayed) = (seen("node-b", "node-a"), seen("node-b", "node-b"));
        assert!(moved_back(std::slice::from_ref(&back), "node-a"));
        assert!(!moved_back(&[back, stayed.clone()], "node-a"));
        assert!(!moved_back(&[stayed], "node-a"));
        assert!(!moved_back(&[], "node-a"));
    }

    #[test]
    fn split_overlap_and_single_owner() {
        let polls: Vec<OwnerPoll> = [(0, 1), (100, 2), (200, 2), (300, 2), (400, 1), (500, 1)]
            .into_iter()
            .map(|(t, n)| OwnerPoll {
                at: ms(t),
                owners: n,
            })
            .collect();
        let o = split_outcome(&polls, ms(250));
        assert_eq!(o.overlap, ms(300));
        assert_eq!(o.single_owner_after_heal, Some(ms(150)));
        assert_eq!(
            split_outcome(&polls[..4], ms(250)).single_owner_after_heal,
            None
        );
    }
}
