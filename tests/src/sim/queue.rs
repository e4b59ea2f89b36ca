//! The simulator's event queue: a min-heap on `(time, sequence number)`.
//!
//! Why the sequence number: many events fall on the same virtual instant (every node's first
//! heartbeat timer, a sample and a fault…). A heap alone would pop such ties in an order that
//! depends on its internal layout; numbering pushes makes ties pop first-in first-out, so one
//! seed always replays the same run.

use std::{cmp::Ordering, collections::BinaryHeap, time::Duration};

/// Virtual time: the duration since the simulated world started.
pub type VTime = Duration;

struct Entry<E> {
    at: VTime,
    seq: u64,
    event: E,
}

impl<E> PartialEq for Entry<E> {
    fn eq(&self, other: &Self) -> bool {
        self.at == other.at && self.seq == other.seq
    }
}

impl<E> Eq for Entry<E> {}

impl<E> PartialOrd for Entry<E> {
    fn partial_cmp(&self, other: &Self) -> Option<Ordering> {
        Some(self.cmp(other))
    }
}

impl<E> Ord for Entry<E> {
    // Reversed: `BinaryHeap` is a max-heap and we want the earliest (then first pushed) on top.
    fn cmp(&self, other: &Self) -> Ordering {
        other
            .at
            .cmp(&self.at)
            .then_with(|| other.seq.cmp(&self.seq))
    }
}

/// Events ordered by time, ties first-in first-out.
pub struct Queue<E> {
    heap: BinaryHeap<Entry<E>>,
    seq: u64,
}

impl<E> Default for Queue<E> {
    fn default() -> Self {
        Queue {
            heap: BinaryHeap::new(),
            seq: 0,
        }
    }
}

impl<E> Queue<E> {
    /// An empty queue.
    pub fn new() -> Self {
        Self::default()
    }

    /// Schedule `event` at `at`.
    pub fn push(&mut self, at: VTime, event: E) {
        self.seq += 1;
        self.heap.push(Entry {
            at,
            seq: self.seq,
            event,
        });
    }

    /// The earliest event (of equal times, the first pushed).
    pub fn pop(&mut self) -> Option<(VTime, E)> {
        self.heap.pop().map(|e| (e.at, e.event))
    }

    /// When the earliest event is due.
    pub fn peek_time(&self) -> Option<VTime> {
        self.heap.peek().map(|e| e.at)
    }

    /// Number of pending events.
    pub fn len(&self) -> usize {
        self.heap.len()
    }

    /// Whether nothing is pending.
    pub fn is_empty(&self) -> bool {
        self.heap.is_empty()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn earliest_first_and_ties_in_push_order() {
        let mut q = Queue::new();
        let ms = Duration::from_millis;
        q.push(ms(5), "c");
        q.push(ms(1), "a");
        q.push(ms(5), "d");
        q.push(ms(1), "b");
        q.push(ms(3), "x");
        let order: Vec<_> = std::iter::from_fn(|| q.pop()).map(|(_, e)| e).collect();
        assert_eq!(order, ["a", "b", "x", "c", "d"]);
    }
}
