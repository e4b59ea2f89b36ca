//! Lease timing shared by both election modes: when is someone else's Lease expired?
//!
//! Why not compare `renewTime` with our clock: nodes' clocks differ, and a skewed clock would
//! make a live holder look expired (or a dead one live). As in client-go's leader election and
//! kubert's lease module, a Lease is judged on the *local monotonic* clock: it is expired when
//! `leaseDurationSeconds` have passed since we last saw it change (a new `resourceVersion` or
//! `renewTime`).

use std::time::Duration;

use super::Instant;

/// What we remember of one observed Lease.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Observed {
    /// The last `resourceVersion` seen.
    pub resource_version: String,
    /// The last `renewTime` seen, verbatim.
    pub renew_time: Option<String>,
    /// `leaseDurationSeconds` as last seen.
    pub duration: Duration,
    /// Local time at which the Lease was last seen to change.
    pub changed_at: Instant,
}

impl Observed {
    /// First sighting at `now`.
    pub fn new(
        resource_version: String,
        renew_time: Option<String>,
        duration: Duration,
        now: Instant,
    ) -> Self {
        Observed {
            resource_version,
            renew_time,
            duration,
            changed_at: now,
        }
    }

    /// Record a sighting at `now`; returns whether it changed (and so restarted the clock).
    ///
    /// A new `resourceVersion` with the same `renewTime` still counts as a change: the holder
    /// wrote it.
    pub fn update(
        &mut self,
        resource_version: String,
        renew_time: Option<String>,
        duration: Duration,
        now: Instant,
    ) -> bool {
        let changed = resource_version != self.resource_version || renew_time != self.renew_time;
        self.duration = duration;
        if changed {
            self.resource_version = resource_version;
            self.renew_time = renew_time;
            self.changed_at = now;
        }
        changed
    }

    /// When it expires, by the local clock.
    pub fn expires_at(&self) -> Instant {
        self.changed_at + self.duration
    }

    /// Whether it has expired at `now`.
    pub fn expired(&self, now: Instant) -> bool {
        now >= self.expires_at()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn expiry_counts_from_the_last_change_not_the_last_sighting() {
        let t0 = Instant::now();
        let d = Duration::from_secs(10);
        let mut o = Observed::new("1".into(), Some("a".into()), d, t0);
        // Re-listing the same object (no change) must not extend it.
        assert!(!o.update("1".into(), Some("a".into()), d, t0 + Duration::from_secs(9)));
        assert!(o.expired(t0 + Duration::from_secs(10)));
        // A renewal restarts the clock.
        assert!(o.update("2".into(), Some("b".into()), d, t0 + Duration::from_secs(9)));
        assert!(!o.expired(t0 + Duration::from_secs(18)));
        assert!(o.expired(t0 + Duration::from_secs(19)));
    }
}
