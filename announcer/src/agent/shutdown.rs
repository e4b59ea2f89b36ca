//! One shutdown signal, many listeners (the shape of mini-redis's `Shutdown`).
//!
//! The agent has two: *stop* (the agent is done: the watches, the heartbeat receiver and the
//! HTTP server end) and *SIGTERM* (hand the VIPs over, then stop). Each is a [`Trigger`] held
//! by whoever decides, and a [`Shutdown`] cloned into every task that must notice.
//!
//! Why a type rather than a bare `watch::Receiver<bool>`: the signal fires once and stays
//! fired, a dropped trigger counts as fired (a task must never outlive the part of the agent
//! that could have stopped it), and [`Shutdown::recv`] holds no `watch::Ref` across an await,
//! so the futures that wait on it stay `Send`.

use tokio::sync::watch;

/// Fires the signal its [`Shutdown`]s wait for.
#[derive(Debug)]
pub struct Trigger {
    tx: watch::Sender<bool>,
}

/// Listens for the signal; cheap to clone, each clone hears it.
#[derive(Clone, Debug)]
pub struct Shutdown {
    rx: watch::Receiver<bool>,
}

/// A new signal, not fired yet.
pub fn channel() -> (Trigger, Shutdown) {
    let (tx, rx) = watch::channel(false);
    (Trigger { tx }, Shutdown { rx })
}

impl Trigger {
    /// Fires the signal (again is harmless). Dropping the trigger fires it too.
    pub fn fire(&self) {
        let _ = self.tx.send(true);
    }
}

impl Shutdown {
    /// Resolves once the signal has fired (or its trigger is gone); at once if it already has.
    pub async fn recv(&mut self) {
        let _ = self.rx.wait_for(|fired| *fired).await;
    }

    /// Whether the signal has fired (or its trigger is gone), without waiting.
    pub fn is_shutdown(&self) -> bool {
        *self.rx.borrow() || self.rx.has_changed().is_err()
    }
}

#[cfg(test)]
mod tests {
    use std::time::Duration;

    use super::*;

    #[tokio::test]
    async fn every_listener_hears_it_once_fired_and_keeps_hearing_it() {
        let (trigger, mut a) = channel();
        let mut b = a.clone();
        assert!(!a.is_shutdown());
        let waiting = tokio::spawn(async move { b.recv().await });
        tokio::time::sleep(Duration::from_millis(10)).await;
        assert!(!waiting.is_finished());
        trigger.fire();
        waiting.await.unwrap();
        a.recv().await;
        a.recv().await;
        assert!(a.is_shutdown());
    }

    #[tokio::test]
    async fn a_dropped_trigger_counts_as_fired() {
        let (trigger, mut s) = channel();
        drop(trigger);
        assert!(s.is_shutdown());
        s.recv().await;
    }
}
