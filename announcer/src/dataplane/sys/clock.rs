//! The clock the XDP program judges expiry on.
//!
//! The program reads `bpf_ktime_get_coarse_ns()`, which is `CLOCK_MONOTONIC_COARSE`, so deadlines
//! are written on that same clock: wall-clock jumps (NTP, an operator's `date -s`) can neither
//! expire nor revive a VIP, and both sides agree to the tick.

use std::time::Duration;

/// Now on `CLOCK_MONOTONIC_COARSE`, in nanoseconds.
pub fn monotonic_ns() -> u64 {
    let ts = nix::time::clock_gettime(nix::time::ClockId::CLOCK_MONOTONIC_COARSE)
        .expect("CLOCK_MONOTONIC_COARSE is always available on Linux");
    ts.tv_sec() as u64 * 1_000_000_000 + ts.tv_nsec() as u64
}

/// The `expires_ns` for an entry that should live `ttl` from now.
pub fn deadline_ns(ttl: Duration) -> u64 {
    monotonic_ns().saturating_add(u64::try_from(ttl.as_nanos()).unwrap_or(u64::MAX - 1))
}
