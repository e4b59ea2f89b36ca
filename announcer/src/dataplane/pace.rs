//! Pacing of announcement rounds: every node's gratuitous ARPs and unsolicited NAs go out at
//! no more than a set rate of frames per second, first rounds before repeats.
//!
//! Why: a node that takes over 10,000 VIPs at once (the successor of a dead node that held
//! them) would otherwise broadcast 20,000 frames in one go, and 60,000 within two seconds. The
//! gateway punts every ARP it receives to its control plane, whose policer drops what exceeds
//! its rate (a Catalyst 9400 shares 4,000 packets/s between ARP, ICMP, SSH and SNMP in its
//! `system-cpp-police-forus` class; ArubaOS-CX documents 1,000 for broadcast ARP), and a
//! dropped announcement leaves the gateway pointing the VIP at a dead MAC until its cache entry
//! ages out, minutes to hours. So the frames are spread out: a token bucket of
//! [`PaceConfig::burst`] frames refilled at [`PaceConfig::rate`] per second, which lets a
//! failover of a few VIPs go out at once, unchanged, and stretches a mass failover instead of
//! losing it.
//!
//! Order: round 0 of every VIP first (the frame that moves clients), in the order the VIPs
//! were taken, then the repeats (which only cover a lost frame) when they are due. A repeat is
//! never sent earlier than its interval after the round before it, so RFC 4861 §7.2.6's
//! spacing still holds for IPv6; pacing can only delay.
//!
//! Sans-IO: [`Pacer::poll`] says what to send now, [`Pacer::next_wakeup`] when to ask
//! again; the agent's plane sends the frames (`agent::net::plane`). Pitfall: a key announced
//! again replaces its earlier schedule (a new burst), and a cancelled key's queued rounds are
//! skipped, never sent: a node that let a VIP go must not keep pointing clients at itself.

use std::{
    cmp::Reverse,
    collections::{BinaryHeap, HashMap, VecDeque},
    hash::Hash,
    time::{Duration, Instant},
};

/// How fast one node's announcements may go out.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct PaceConfig {
    /// Frames per second, sustained (an IPv4 round is 2 frames, an IPv6 round 1).
    pub rate: u32,
    /// Frames that may go out at once after a quiet spell.
    pub burst: u32,
}

impl PaceConfig {
    /// 1,000 frames/s, 200 at once: a quarter of a Catalyst 9400's shared ARP policer, so two
    /// successors taking a dead node's VIPs together leave it half free; 100 IPv4 VIPs fail
    /// over without waiting, 10,000 have every first round out within 20 s.
    pub const DEFAULT: PaceConfig = PaceConfig {
        rate: 1000,
        burst: 200,
    };
}

impl Default for PaceConfig {
    fn default() -> Self {
        Self::DEFAULT
    }
}

/// One round to send now.
#[derive(Debug, PartialEq, Eq)]
pub struct Due<K, T> {
    pub key: K,
    /// 0 for the first round.
    pub round: u32,
    /// What [`Pacer::announce`] was given to send with.
    pub payload: T,
    /// How long after its VIP was announced this round goes out, beyond its schedule: the
    /// delay pacing added.
    pub waited: Duration,
}

/// A key's burst in progress.
#[derive(Debug)]
struct Burst<T> {
    generation: u64,
    payload: T,
    rounds: u32,
    interval: Duration,
    /// Frames per round.
    cost: u32,
    announced: Instant,
}

/// The announcement queue of one node (see the module docs).
#[derive(Debug)]
pub struct Pacer<K, T> {
    config: PaceConfig,
    tokens: f64,
    refilled: Instant,
    /// First rounds waiting, oldest first: (key, generation).
    fresh: VecDeque<(K, u64)>,
    /// Later rounds by due time: (due, generation, round, key).
    repeats: BinaryHeap<Reverse<(Instant, u64, u32, K)>>,
    live: HashMap<K, Burst<T>>,
    next_generation: u64,
}

impl<K: Clone + Eq + Hash + Ord, T: Clone> Pacer<K, T> {
    /// An idle pacer with a full bucket. A rate or burst of 0 is taken as 1.
    pub fn new(config: PaceConfig, now: Instant) -> Self {
        let config = PaceConfig {
            rate: config.rate.max(1),
            burst: config.burst.max(1),
        };
        Self {
            config,
            tokens: f64::from(config.burst),
            refilled: now,
            fresh: VecDeque::new(),
            repeats: BinaryHeap::new(),
            live: HashMap::new(),
            next_generation: 0,
        }
    }

    /// Queues `rounds` rounds of `cost` frames each, `interval` apart, for `key` (replacing a
    /// burst of the same key still in progress).
    pub fn announce(
        &mut self,
        now: Instant,
        key: K,
        payload: T,
        rounds: u32,
        interval: Duration,
        cost: u32,
    ) {
        let generation = self.next_generation;
        self.next_generation += 1;
        self.live.insert(
            key.clone(),
            Burst {
                generation,
                payload,
                rounds: rounds.max(1),
                interval,
                cost: cost.max(1),
                announced: now,
            },
        );
        self.fresh.push_back((key, generation));
    }

    /// Drops what is left of `key`'s burst.
    pub fn cancel(&mut self, key: &K) {
        self.live.remove(key);
    }

    /// First rounds not sent yet (cancelled ones included until they are skipped).
    pub fn waiting_first_rounds(&self) -> usize {
        self.fresh.len()
    }

    /// Bursts not finished.
    pub fn in_progress(&self) -> usize {
        self.live.len()
    }

    /// The next round to send now, if one is due and the bucket holds its frames.
    pub fn poll(&mut self, now: Instant) -> Option<Due<K, T>> {
        self.refill(now);
        self.skip_stale();
        let (key, round, scheduled) = if let Some((key, _)) = self.fresh.front() {
            let b = &self.live[key];
            (key.clone(), 0, b.announced)
        } else {
            let Reverse((due, _, round, key)) = self.repeats.peek()?;
            if *due > now {
                return None;
            }
            (key.clone(), *round, *due)
        };
        let b = self.live.get(&key).expect("stale entries were skipped");
        let cost = f64::from(b.cost.min(self.config.burst));
        if self.tokens < cost {
            return None;
        }
        self.tokens -= cost;
        if round == 0 {
            self.fresh.pop_front();
        } else {
            self.repeats.pop();
        }
        let due = Due {
            key: key.clone(),
            round,
            payload: b.payload.clone(),
            waited: now.saturating_duration_since(scheduled),
        };
        if round + 1 < b.rounds {
            // Spaced from when this round went out, not when it was scheduled: pacing delays a
            // repeat, never brings it closer to the round before.
            let next = (now + b.interval, b.generation, round + 1, key);
            self.repeats.push(Reverse(next));
        } else {
            self.live.remove(&key);
        }
        Some(due)
    }

    /// When [`Self::poll`] may have something again (`None`: nothing is queued).
    pub fn next_wakeup(&mut self, now: Instant) -> Option<Instant> {
        self.skip_stale();
        let (at, cost) = if let Some((key, _)) = self.fresh.front() {
            (now, self.live[key].cost)
        } else {
            let Reverse((due, _, _, key)) = self.repeats.peek()?;
            (*due, self.live[key].cost)
        };
        let short = f64::from(cost.min(self.config.burst)) - self.tokens;
        let refill = if short > 0.0 {
            Duration::from_secs_f64(short / f64::from(self.config.rate))
        } else {
            Duration::ZERO
        };
        Some(at.max(self.refilled + refill))
    }

    fn refill(&mut self, now: Instant) {
        let elapsed = now.saturating_duration_since(self.refilled);
        let cap = f64::from(self.config.burst);
        self.tokens = (self.tokens + elapsed.as_secs_f64() * f64::from(self.config.rate)).min(cap);
        self.refilled = self.refilled.max(now);
    }

    /// Drops queued rounds of cancelled or replaced bursts from the fronts of both queues.
    fn skip_stale(&mut self) {
        let current = |live: &HashMap<K, Burst<T>>, key: &K, generation: u64| {
            live.get(key).is_some_and(|b| b.generation == generation)
        };
        while let Some((key, generation)) = self.fresh.front() {
            if current(&self.live, key, *generation) {
                break;
            }
            self.fresh.pop_front();
        }
        while let Some(Reverse((_, generation, _, key))) = self.repeats.peek() {
            if current(&self.live, key, *generation) {
                break;
            }
            self.repeats.pop();
        }
    }
}

#[cfg(test)]
mod tests;
