//! Per-item retry timing for the allocator's writes (issue 25, finding 11).
//!
//! Why per item: before, any failed write made the whole recompute run again one second later,
//! re-sending every pending write, so an API server answering 429 or 5xx under load got the
//! same burst every second from the one client that could have eased off. Now each Service (or
//! pool) that failed waits on its own: 250 ms doubling to 30 s, each wait drawn at random from
//! the upper half of its step (nodes and items do not retry in lockstep); a success forgets it.
//! Writes that are due go out at most [`MAX_CONCURRENT_WRITES`] at a time.

use std::{collections::HashMap, hash::Hash, time::Duration};

use rand::Rng;
use tokio::time::Instant;

/// The most allocator writes in flight at once.
pub const MAX_CONCURRENT_WRITES: usize = 4;
/// The first retry's step.
pub const FIRST: Duration = Duration::from_millis(250);
/// The longest step.
pub const CAP: Duration = Duration::from_secs(30);

/// When each failed item may be written again.
#[derive(Debug)]
pub struct Backoff<K> {
    /// Item → (failures in a row, not before).
    items: HashMap<K, (u32, Instant)>,
}

impl<K> Default for Backoff<K> {
    fn default() -> Self {
        Backoff {
            items: HashMap::new(),
        }
    }
}

/// The wait after `failures` failures in a row: step = FIRST × 2^(failures−1), capped at CAP,
/// drawn from [step/2, step).
pub fn wait(failures: u32, rng: &mut impl Rng) -> Duration {
    let step = FIRST
        .saturating_mul(1u32 << failures.saturating_sub(1).min(16))
        .min(CAP);
    step.mul_f64(0.5 + rng.random::<f64>() * 0.5)
}

impl<K: Eq + Hash + Clone> Backoff<K> {
    /// Whether `item` may be written at `now`.
    pub fn due(&self, item: &K, now: Instant) -> bool {
        self.items.get(item).is_none_or(|(_, at)| *at <= now)
    }

    /// `item`'s write failed at `now`: it waits longer than last time.
    pub fn failed(&mut self, item: &K, now: Instant) {
        let n = self.items.get(item).map_or(0, |(n, _)| *n) + 1;
        let at = now + wait(n, &mut rand::rng());
        self.items.insert(item.clone(), (n, at));
    }

    /// `item` was written (or needs no write any more): forget its failures.
    pub fn succeeded(&mut self, item: &K) {
        self.items.remove(item);
    }

    /// Forgets every item `keep` rejects (deleted Services).
    pub fn retain(&mut self, mut keep: impl FnMut(&K) -> bool) {
        self.items.retain(|k, _| keep(k));
    }

    /// The earliest time an item waits for, if any.
    pub fn next_due(&self) -> Option<Instant> {
        self.items.values().map(|(_, at)| *at).min()
    }
}

#[cfg(test)]
mod tests {
    use rand::{SeedableRng, rngs::StdRng};

    use super::*;

    #[test]
    fn waits_double_to_the_cap_each_drawn_from_the_upper_half_of_its_step() {
        let mut rng = StdRng::seed_from_u64(7);
        let mut step = FIRST;
        for n in 1..=12 {
            for _ in 0..50 {
                let w = wait(n, &mut rng);
                assert!(
                    w >= step / 2 && w < step,
                    "failure {n}: {w:?} for step {step:?}"
                );
            }
            step = (step * 2).min(CAP);
        }
        assert!(wait(40, &mut rng) < CAP, "never longer than the cap");
    }

    #[test]
    fn two_items_failing_together_do_not_retry_in_lockstep() {
        let mut rng = StdRng::seed_from_u64(1);
        let a: Vec<_> = (1..=6).map(|n| wait(n, &mut rng)).collect();
        let b: Vec<_> = (1..=6).map(|n| wait(n, &mut rng)).collect();
        assert_ne!(a, b);
    }

    #[test]
    fn a_failed_item_waits_alone_and_a_success_forgets_it() {
        let mut b = Backoff::default();
        let now = Instant::now();
        b.failed(&"a", now);
        assert!(!b.due(&"a", now), "a waits");
        assert!(b.due(&"b", now), "b, which did not fail, does not");
        let first = b.next_due().expect("a is waiting");
        assert!(first >= now + FIRST / 2 && first < now + FIRST);
        b.failed(&"a", first);
        let second = b.next_due().expect("still waiting");
        assert!(
            second - first >= FIRST,
            "the second wait is longer: {:?}",
            second - first
        );
        b.succeeded(&"a");
        assert!(b.due(&"a", second) && b.next_due().is_none());
    }
}
