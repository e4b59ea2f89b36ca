//! The agent's announcement rounds, paced ([`crate::dataplane::pace`]): what is due now is
//! sent on the caller's thread (round 0 of a takeover goes out before the election thread
//! moves on, as long as the bucket holds it), the rest by one background task per plane.
//!
//! Why one task, not one per VIP: a node taking 10,000 VIPs spawned 10,000 tasks, each
//! broadcasting at once, and swept the finished ones; the pacer keeps one queue whose cost is
//! O(log n) per round, and the gateway sees a steady rate instead of a flood.

use std::{
    net::IpAddr,
    sync::{Arc, Mutex, MutexGuard},
    time::{Duration, Instant},
};

use tokio::{sync::Notify, task::JoinHandle};

use crate::{
    dataplane::{
        announce::{PacketSocket, PreparedBurst},
        pace::{PaceConfig, Pacer},
    },
    election::IfaceName,
};

/// One VIP's burst, with the socket of its interface.
#[derive(Debug)]
pub struct Job {
    pub burst: PreparedBurst,
    pub sock: Arc<PacketSocket>,
}

type Key = (IpAddr, IfaceName);

/// What the election thread and the sending task share.
struct Shared {
    pacer: Mutex<Queue>,
    wake: Notify,
}

/// The pacer, and how the latest backlog is going (for the log line that says when a mass
/// takeover's first rounds were all out).
struct Queue {
    pacer: Pacer<Key, Arc<Job>>,
    backlog: Option<Backlog>,
}

/// First rounds that had to wait, since the queue was last empty.
struct Backlog {
    first_rounds: u64,
    most_waited: Duration,
    since: Instant,
    /// Every first round is out (logged once).
    firsts_out: bool,
}

/// The paced announcements of one plane.
pub struct Announcements {
    shared: Arc<Shared>,
    task: Option<JoinHandle<()>>,
}

impl Announcements {
    pub fn new(config: PaceConfig) -> Self {
        Self {
            shared: Arc::new(Shared {
                pacer: Mutex::new(Queue {
                    pacer: Pacer::new(config, Instant::now()),
                    backlog: None,
                }),
                wake: Notify::new(),
            }),
            task: None,
        }
    }

    /// Queues `job`'s rounds for `vip` on `iface` (replacing a burst in progress) and sends
    /// what is due now on this thread.
    pub fn announce(&mut self, vip: IpAddr, iface: &IfaceName, job: Job) {
        let now = Instant::now();
        let (rounds, interval, cost) = (
            job.burst.rounds(),
            job.burst.interval(),
            job.burst.frames_per_round(),
        );
        {
            let mut q = self.shared.lock();
            q.pacer.announce(
                now,
                (vip, iface.clone()),
                Arc::new(job),
                rounds,
                interval,
                cost,
            );
            q.send_due(now);
        }
        self.ensure_task();
        self.shared.wake.notify_one();
    }

    /// Drops what is left of `vip`'s burst on `iface`.
    pub fn cancel(&mut self, vip: IpAddr, iface: &IfaceName) {
        self.shared.lock().pacer.cancel(&(vip, iface.clone()));
    }

    fn ensure_task(&mut self) {
        if self.task.is_some() {
            return;
        }
        let shared = self.shared.clone();
        self.task = Some(tokio::spawn(async move {
            loop {
                let next = {
                    let now = Instant::now();
                    let mut q = shared.lock();
                    q.send_due(now);
                    q.pacer.next_wakeup(now)
                };
                match next {
                    Some(at) => {
                        let at = tokio::time::Instant::from_std(at);
                        tokio::select! {
                            () = tokio::time::sleep_until(at) => {}
                            () = shared.wake.notified() => {}
                        }
                    }
                    None => shared.wake.notified().await,
                }
            }
        }));
    }
}

impl Drop for Announcements {
    fn drop(&mut self) {
        if let Some(task) = self.task.take() {
            task.abort();
        }
    }
}

impl Shared {
    fn lock(&self) -> MutexGuard<'_, Queue> {
        self.pacer.lock().unwrap_or_else(|e| e.into_inner())
    }
}

impl Queue {
    /// Sends every round the pacer allows now. A backlog (first rounds that had to wait) is
    /// logged twice: when its last first round is out, and when its last repeat is.
    fn send_due(&mut self, now: Instant) {
        while let Some(due) = self.pacer.poll(now) {
            due.payload
                .burst
                .send_round_on(due.round, &due.payload.sock);
            if due.round == 0 && !due.waited.is_zero() {
                let b = self.backlog.get_or_insert(Backlog {
                    first_rounds: 0,
                    most_waited: Duration::ZERO,
                    since: now - due.waited,
                    firsts_out: false,
                });
                b.first_rounds += 1;
                b.most_waited = b.most_waited.max(due.waited);
            }
        }
        let Some(b) = &mut self.backlog else {
            return;
        };
        let took_ms = now.saturating_duration_since(b.since).as_millis() as u64;
        if !b.firsts_out && self.pacer.waiting_first_rounds() == 0 {
            b.firsts_out = true;
            tracing::info!(
                first_rounds_delayed = b.first_rounds,
                most_waited_ms = b.most_waited.as_millis() as u64,
                took_ms,
                "first announcement rounds caught up (paced)"
            );
        }
        if b.firsts_out && self.pacer.in_progress() == 0 {
            tracing::info!(
                first_rounds_delayed = b.first_rounds,
                took_ms,
                "announcement backlog done (paced)"
            );
            self.backlog = None;
        }
    }
}
