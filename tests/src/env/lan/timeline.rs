//! What the client saw: probe samples, marks, and the outage a fault caused.
//!
//! Why measured at the client: an election that is fast in the agents' logs still fails users
//! if the client keeps sending to the dead node's MAC. Outages are computed from probe *send*
//! times, so the result does not depend on how long a reply took to come back.

use std::{
    net::IpAddr,
    time::{Duration, Instant},
};

use serde::Serialize;

/// The probe protocol.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, Serialize)]
pub enum ProbeKind {
    /// One datagram to the UDP echo; the reply names the node.
    Udp,
    /// One TCP connect (handshake only).
    Tcp,
}

/// One probe.
#[derive(Clone, Debug, Serialize)]
pub struct Sample {
    pub target: IpAddr,
    pub kind: ProbeKind,
    /// Per target and kind, from 0.
    pub seq: u64,
    /// Send time, since [`Timeline::start`].
    pub sent: Duration,
    /// Round trip, `None` if unanswered within 1 s (lost).
    pub rtt: Option<Duration>,
    /// UDP: the node that answered.
    pub node: Option<String>,
}

/// An event the caller recorded (e.g. `"crash node-a"`).
#[derive(Clone, Debug, Serialize)]
pub struct Mark {
    /// Since [`Timeline::start`].
    pub at: Duration,
    pub label: String,
}

/// Everything a [`super::Prober`] recorded, samples sorted by send time.
#[derive(Clone, Debug)]
pub struct Timeline {
    pub start: Instant,
    pub samples: Vec<Sample>,
    pub marks: Vec<Mark>,
}

/// The outage after an event, as the client felt it.
#[derive(Clone, Debug, Serialize)]
pub struct Outage {
    /// Probes sent at/after `at` that were never answered, until the recovery (or the end).
    pub lost: u32,
    /// Send time of the last answered probe sent before `at`.
    pub last_ok_before: Option<Duration>,
    /// Send time of the first answered probe at/after `at` that followed a loss or came from
    /// another node than before; `None` if that never happened.
    pub recovered_at: Option<Duration>,
    /// `recovered_at - at`; 0 if nothing was lost and the node did not change; if it never
    /// recovered, up to the last probe sent.
    pub gap: Duration,
    /// The node that answered before `at` (UDP).
    pub before: Option<String>,
    /// The node that answered after the recovery (UDP), or the last one that answered.
    pub after: Option<String>,
}

impl Timeline {
    /// `t` as an offset of this timeline (0 if before its start).
    pub fn since(&self, t: Instant) -> Duration {
        t.saturating_duration_since(self.start)
    }

    /// The samples of one target and kind, in send order.
    pub fn of(&self, target: IpAddr, kind: ProbeKind) -> impl Iterator<Item = &Sample> {
        self.samples
            .iter()
            .filter(move |s| s.target == target && s.kind == kind)
    }

    /// The longest wait between two consecutive answers for `target` (by arrival time), and
    /// the number of answers: a roll's gap as a client sending every probe interval feels it.
    pub fn longest_silence(&self, target: IpAddr, kind: ProbeKind) -> (Duration, usize) {
        let mut arrivals: Vec<Duration> = self
            .of(target, kind)
            .filter_map(|s| s.rtt.map(|rtt| s.sent + rtt))
            .collect();
        arrivals.sort();
        let longest = arrivals
            .windows(2)
            .map(|w| w[1] - w[0])
            .max()
            .unwrap_or_default();
        (longest, arrivals.len())
    }

    /// The mark with this label, if recorded.
    pub fn mark(&self, label: &str) -> Option<Duration> {
        self.marks.iter().find(|m| m.label == label).map(|m| m.at)
    }

    /// For `target`, the outage after offset `at`: the last answer before it; then, walking
    /// the probes sent from `at` on, the losses until the first answer that follows a loss or
    /// comes from another node. Answers from the same node with nothing lost yet (probes that
    /// were in flight when the fault hit) are skipped.
    pub fn outage(&self, target: IpAddr, kind: ProbeKind, at: Duration) -> Outage {
        let samples: Vec<&Sample> = self.of(target, kind).collect();
        let before_ok = samples
            .iter()
            .rev()
            .find(|s| s.sent < at && s.rtt.is_some());
        let before = before_ok.and_then(|s| s.node.clone());
        let mut lost = 0u32;
        let mut recovered_at = None;
        let mut after = before.clone();
        let mut last_sent = at;
        for s in samples.iter().filter(|s| s.sent >= at) {
            last_sent = s.sent;
            if s.rtt.is_none() {
                lost += 1;
                continue;
            }
            let other_node = before_ok.is_none() || s.node != before;
            after = s.node.clone();
            if lost > 0 || other_node {
                recovered_at = Some(s.sent);
                break;
            }
        }
        let gap = match recovered_at {
            Some(r) => r.saturating_sub(at),
            None if lost > 0 => last_sent.saturating_sub(at),
            None => Duration::ZERO,
        };
        Outage {
            lost,
            last_ok_before: before_ok.map(|s| s.sent),
            recovered_at,
            gap,
            before,
            after,
        }
    }

    /// Unanswered probes of `target` and `kind` over the whole timeline.
    pub fn lost(&self, target: IpAddr, kind: ProbeKind) -> u32 {
        self.of(target, kind).filter(|s| s.rtt.is_none()).count() as u32
    }

    /// Answered probes of `target` and `kind` over the whole timeline.
    pub fn answered(&self, target: IpAddr, kind: ProbeKind) -> u32 {
        self.of(target, kind).filter(|s| s.rtt.is_some()).count() as u32
    }

    /// The UDP probes of `target` that another node than `node` answered: (seq, that node).
    pub fn udp_answered_by_others(&self, target: IpAddr, node: &str) -> Vec<(u64, &str)> {
        self.of(target, ProbeKind::Udp)
            .filter_map(|s| Some((s.seq, s.node.as_deref()?)))
            .filter(|(_, n)| *n != node)
            .collect()
    }
}

#[cfg(test)]
mod unit {
    use super::*;

    const MS: Duration = Duration::from_millis(1);

    fn timeline(answers: &[Option<&str>]) -> Timeline {
        let target: IpAddr = "10.78.128.0".parse().unwrap();
        Timeline {
            start: Instant::now(),
            samples: answers
                .iter()
                .enumerate()
                .map(|(i, a)| Sample {
                    target,
                    kind: ProbeKind::Udp,
                    seq: i as u64,
                    sent: MS * 10 * i as u32,
                    rtt: a.map(|_| MS),
                    node: a.map(str::to_owned),
                })
                .collect(),
            marks: Vec::new(),
        }
    }

    fn outage(answers: &[Option<&str>], at: Duration) -> Outage {
        timeline(answers).outage("10.78.128.0".parse().unwrap(), ProbeKind::Udp, at)
    }

    #[test]
    fn crash_then_takeover() {
        let a = Some("node-a");
        let b = Some("node-b");
        // at = 25 ms: probe 3 (30 ms) was in flight and still answered by a.
        let o = outage(&[a, a, a, a, None, None, b, b], MS * 25);
        assert_eq!(o.lost, 2);
        assert_eq!(o.last_ok_before, Some(MS * 20));
        assert_eq!(o.recovered_at, Some(MS * 60));
        assert_eq!(o.gap, MS * 35);
        assert_eq!(o.before.as_deref(), Some("node-a"));
        assert_eq!(o.after.as_deref(), Some("node-b"));
    }

    #[test]
    fn lossless_handover_still_has_a_recovery() {
        let a = Some("node-a");
        let b = Some("node-b");
        let o = outage(&[a, a, a, b, b], MS * 15);
        assert_eq!(o.lost, 0);
        assert_eq!(o.recovered_at, Some(MS * 30));
        assert_eq!(o.gap, MS * 15);
        assert_eq!(o.after.as_deref(), Some("node-b"));
    }

    #[test]
    fn nothing_happened() {
        let a = Some("node-a");
        let o = outage(&[a, a, a, a], MS * 15);
        assert_eq!((o.lost, o.recovered_at, o.gap), (0, None, Duration::ZERO));
        assert_eq!(o.after.as_deref(), Some("node-a"));
    }

    #[test]
    fn never_recovered() {
        let a = Some("node-a");
        let o = outage(&[a, a, None, None, None], MS * 15);
        assert_eq!((o.lost, o.recovered_at, o.gap), (3, None, MS * 25));
    }

    #[test]
    fn same_node_after_a_loss_is_a_recovery() {
        let a = Some("node-a");
        let o = outage(&[a, None, a], MS * 5);
        assert_eq!((o.lost, o.recovered_at), (1, Some(MS * 20)));
        assert_eq!(o.after.as_deref(), Some("node-a"));
    }
}
