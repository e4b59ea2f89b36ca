//! What a real client of a LoadBalancer Service sees: HTTP `GET /` over a new TCP connection
//! every [`INTERVAL`], each with a [`TIMEOUT`] for the whole exchange, at most [`MAX_IN_FLIGHT`]
//! at a time, from the testbed's client namespace to `VIP:80`. Every request is recorded with
//! its send time; [`http_outcome`] turns the record into the four figures of a failover.
//!
//! Why HTTP over new connections and not the UDP echo: the echo answers on whichever node gets
//! the packet (the VIP is a local route there), so it measures the layer-2 failover only. A
//! user's request also needs kube-proxy's DNAT on that node and a live endpoint behind it; a new
//! connection per request makes every request go through both again (an established one would
//! stay pinned to its endpoint by conntrack).
//!
//! The client runs a single-threaded tokio runtime on a thread inside the client namespace
//! (sockets belong to the namespace of the thread that creates them), so it costs one thread
//! whatever the request rate.

use std::{
    net::SocketAddr,
    sync::{
        Arc, Mutex,
        atomic::{AtomicBool, AtomicUsize, Ordering},
    },
    thread::JoinHandle,
    time::{Duration, Instant},
};

use serde::Serialize;
use tokio::io::{AsyncReadExt, AsyncWriteExt};

use crate::netns::Netns;

/// One request every 10 ms.
pub const INTERVAL: Duration = Duration::from_millis(10);
/// Connect, send, and the whole response within 200 ms, or the request failed.
pub const TIMEOUT: Duration = Duration::from_millis(200);
/// At most this many requests at a time; a tick that finds them all busy sends nothing.
pub const MAX_IN_FLIGHT: usize = 20;
/// The window over which [`HttpOutcome::failed_share_pct`] counts failures: the minute after
/// the failure.
pub const FAILED_SHARE_WINDOW: Duration = Duration::from_secs(60);
/// The sliding window of [`HttpOutcome::ok_99pct`].
pub const SUCCESS_WINDOW: Duration = Duration::from_secs(1);
/// The share of successes (percent) every [`SUCCESS_WINDOW`] must reach for
/// [`HttpOutcome::ok_99pct`].
pub const SUCCESS_PCT: usize = 99;

/// One request.
#[derive(Clone, Debug, PartialEq, Serialize)]
pub struct HttpSample {
    /// Send time (when the connect started), since the client started.
    pub sent: Duration,
    /// `200 OK` with a body, within [`TIMEOUT`].
    pub ok: bool,
    /// The body: the name of the Pod that answered.
    pub pod: Option<String>,
    /// Why it failed.
    pub error: Option<HttpError>,
}

/// Why a request failed.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Serialize)]
#[serde(rename_all = "kebab-case")]
pub enum HttpError {
    /// No connection within [`TIMEOUT`] (no SYN-ACK: the packets went nowhere).
    ConnectTimeout,
    /// The connection was refused (RST to the SYN: no endpoint, or kube-proxy's reject).
    Refused,
    /// Connecting failed otherwise (ICMP unreachable, ...).
    Connect,
    /// Connected, but no complete response within [`TIMEOUT`].
    ResponseTimeout,
    /// Connected, but the connection broke (reset) before the response.
    Broken,
    /// A response, but not `200` with a body.
    BadResponse,
}

/// What one run of the client recorded.
#[derive(Clone, Debug, Default, Serialize)]
pub struct HttpTimeline {
    /// Every request sent, in send order.
    pub samples: Vec<HttpSample>,
    /// Ticks that sent nothing because [`MAX_IN_FLIGHT`] requests were pending.
    pub skipped: u64,
    /// Caller's marks (e.g. `"crash node-a"`), since the client started.
    pub marks: Vec<(String, Duration)>,
}

impl HttpTimeline {
    /// When mark `label` was set.
    pub fn mark(&self, label: &str) -> Option<Duration> {
        self.marks.iter().find(|(l, _)| l == label).map(|(_, t)| *t)
    }
}

/// The running client; [`HttpClient::stop`] returns what it saw.
pub struct HttpClient {
    start: Instant,
    stop: Arc<AtomicBool>,
    /// Completed requests so far (in completion order).
    samples: Samples,
    marks: Mutex<Vec<(String, Duration)>>,
    thread: Option<JoinHandle<(Vec<HttpSample>, u64)>>,
}

impl HttpClient {
    /// Starts requesting `GET http://target/` from namespace `ns`.
    pub fn start(ns: &Netns, target: SocketAddr) -> HttpClient {
        let start = Instant::now();
        let stop = Arc::new(AtomicBool::new(false));
        let flag = stop.clone();
        let samples = Samples::default();
        let record = samples.clone();
        let thread = ns.spawn("http-client", move || {
            let rt = tokio::runtime::Builder::new_current_thread()
                .enable_all()
                .build()
                .expect("HTTP client runtime");
            rt.block_on(run(target, start, flag, record))
        });
        HttpClient {
            start,
            stop,
            samples,
            marks: Mutex::default(),
            thread: Some(thread),
        }
    }

    /// Records `label` now; returns the time since the client started.
    pub fn mark(&self, label: &str) -> Duration {
        let t = self.start.elapsed();
        self.marks
            .lock()
            .expect("marks")
            .push((label.to_owned(), t));
        t
    }

    /// Time since the client started (the timeline's clock).
    pub fn now(&self) -> Duration {
        self.start.elapsed()
    }

    /// The time of `t` on the timeline's clock.
    pub fn since(&self, t: Instant) -> Duration {
        t.saturating_duration_since(self.start)
    }

    /// The requests sent at or after `t` (timeline clock) that completed so far, in send
    /// order.
    pub fn samples_since(&self, t: Duration) -> Vec<HttpSample> {
        let mut v: Vec<HttpSample> = self
            .samples
            .lock()
            .expect("samples")
            .iter()
            .filter(|s| s.sent >= t)
            .cloned()
            .collect();
        v.sort_by_key(|s| s.sent);
        v
    }

    /// Stops sending, waits for the pending requests (at most [`TIMEOUT`]) and returns the
    /// record.
    pub fn stop(mut self) -> HttpTimeline {
        self.stop.store(true, Ordering::Relaxed);
        let (samples, skipped) = self
            .thread
            .take()
            .expect("running")
            .join()
            .expect("HTTP client thread");
        HttpTimeline {
            samples,
            skipped,
            marks: std::mem::take(&mut *self.marks.lock().expect("marks")),
        }
    }
}

impl Drop for HttpClient {
    fn drop(&mut self) {
        self.stop.store(true, Ordering::Relaxed);
        if let Some(t) = self.thread.take() {
            let _ = t.join();
        }
    }
}

type Samples = Arc<Mutex<Vec<HttpSample>>>;

async fn run(
    target: SocketAddr,
    start: Instant,
    stop: Arc<AtomicBool>,
    samples: Samples,
) -> (Vec<HttpSample>, u64) {
    let in_flight = Arc::new(AtomicUsize::new(0));
    let mut skipped = 0;
    let mut tick = tokio::time::interval(INTERVAL);
    tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Skip);
    while !stop.load(Ordering::Relaxed) {
        tick.tick().await;
        if in_flight.load(Ordering::Relaxed) >= MAX_IN_FLIGHT {
            skipped += 1;
            continue;
        }
        in_flight.fetch_add(1, Ordering::Relaxed);
        let (samples, in_flight) = (samples.clone(), in_flight.clone());
        tokio::spawn(async move {
            let sent = start.elapsed();
            let r = timed_get(target).await;
            samples.lock().expect("samples").push(HttpSample {
                sent,
                ok: r.is_ok(),
                error: r.as_ref().err().copied(),
                pod: r.ok(),
            });
            in_flight.fetch_sub(1, Ordering::Relaxed);
        });
    }
    while in_flight.load(Ordering::Relaxed) > 0 {
        tokio::time::sleep(Duration::from_millis(5)).await;
    }
    let mut samples = samples.lock().expect("samples").clone();
    samples.sort_by_key(|s| s.sent);
    (samples, skipped)
}

/// One `GET /` to `target` from namespace `ns` on a new connection, within [`TIMEOUT`] (a
/// blocking one-off, for checks): the body of a `200` response.
pub fn fetch(ns: &Netns, target: SocketAddr) -> Option<String> {
    ns.enter(|| {
        let rt = tokio::runtime::Builder::new_current_thread()
            .enable_all()
            .build()
            .expect("HTTP fetch runtime");
        rt.block_on(timed_get(target)).ok()
    })
}

/// One `GET /` on a new connection within [`TIMEOUT`]: the body of a `200` response.
async fn timed_get(target: SocketAddr) -> Result<String, HttpError> {
    let deadline = tokio::time::Instant::now() + TIMEOUT;
    let connect = tokio::net::TcpStream::connect(target);
    let mut s = match tokio::time::timeout_at(deadline, connect).await {
        Err(_) => return Err(HttpError::ConnectTimeout),
        Ok(Err(e)) if e.kind() == std::io::ErrorKind::ConnectionRefused => {
            return Err(HttpError::Refused);
        }
        Ok(Err(_)) => return Err(HttpError::Connect),
        Ok(Ok(s)) => s,
    };
    let exchange = async {
        let req = format!("GET / HTTP/1.0\r\nHost: {target}\r\nConnection: close\r\n\r\n");
        s.write_all(req.as_bytes()).await?;
        let mut buf = Vec::new();
        s.read_to_end(&mut buf).await?;
        Ok::<_, std::io::Error>(buf)
    };
    let buf = match tokio::time::timeout_at(deadline, exchange).await {
        Err(_) => return Err(HttpError::ResponseTimeout),
        Ok(Err(_)) => return Err(HttpError::Broken),
        Ok(Ok(b)) => b,
    };
    let text = String::from_utf8(buf).map_err(|_| HttpError::BadResponse)?;
    let (head, body) = text.split_once("\r\n\r\n").ok_or(HttpError::BadResponse)?;
    let status = head.lines().next().unwrap_or_default();
    if status.split_whitespace().nth(1) == Some("200") && !body.is_empty() {
        Ok(body.trim().to_owned())
    } else {
        Err(HttpError::BadResponse)
    }
}

/// The four figures of a failure at `at`, over the requests sent in `[at, until)` (`until`:
/// the end of the trial). Every time is a send time minus `at`.
#[derive(Clone, Debug, Default, PartialEq, Serialize)]
pub struct HttpOutcome {
    /// *First success*: the send time of the first successful request sent after the first
    /// failed one (both sent at or after `at`), minus `at`. Zero if no request failed (the
    /// client noticed nothing); `None` if none succeeded after the first failure.
    pub first_ok: Option<Duration>,
    /// *99 % success*: the earliest time after which every [`SUCCESS_WINDOW`] (a sliding
    /// window starting at a request's send time, wholly before `until`) has at least
    /// [`SUCCESS_PCT`] % successes; the send time of the first request after the last window
    /// that had fewer. Zero if no window had fewer; `None` if the last whole window still had
    /// fewer (not recovered within the trial).
    pub ok_99pct: Option<Duration>,
    /// *All success*: the send time of the first request after the last failed one, minus
    /// `at`; from then on to `until` nothing failed. Zero if nothing failed; `None` if the last
    /// request failed.
    pub all_ok: Option<Duration>,
    /// Failed requests among those sent in `[at, at + FAILED_SHARE_WINDOW)` (and before
    /// `until`), in percent.
    pub failed_share_pct: f64,
    /// Requests sent in `[at, until)`.
    pub sent: usize,
    /// Of them, failed.
    pub failed: usize,
}

/// [`HttpOutcome`] of `samples` (sorted by send time) for a failure at `at`, the trial ending
/// at `until`.
pub fn http_outcome(samples: &[HttpSample], at: Duration, until: Duration) -> HttpOutcome {
    let after: Vec<&HttpSample> = samples
        .iter()
        .filter(|s| s.sent >= at && s.sent < until)
        .collect();
    let first_ok = match after.iter().position(|s| !s.ok) {
        None => Some(Duration::ZERO),
        Some(f) => after[f..].iter().find(|s| s.ok).map(|s| s.sent - at),
    };
    let all_ok = match after.iter().rposition(|s| !s.ok) {
        None => Some(Duration::ZERO),
        Some(l) => after.get(l + 1).map(|s| s.sent - at),
    };
    let ok_99pct = ok_99pct(&after, at, until);
    let window: Vec<&&HttpSample> = after
        .iter()
        .filter(|s| s.sent < at + FAILED_SHARE_WINDOW)
        .collect();
    let failed_in_window = window.iter().filter(|s| !s.ok).count();
    HttpOutcome {
        first_ok,
        ok_99pct,
        all_ok,
        failed_share_pct: if window.is_empty() {
            0.0
        } else {
            100.0 * failed_in_window as f64 / window.len() as f64
        },
        sent: after.len(),
        failed: after.iter().filter(|s| !s.ok).count(),
    }
}

/// See [`HttpOutcome::ok_99pct`]: a two-pointer sweep over the windows starting at each send
/// time.
fn ok_99pct(after: &[&HttpSample], at: Duration, until: Duration) -> Option<Duration> {
    let mut end = 0;
    let mut ok_in = 0usize;
    let mut last_bad: Option<usize> = None;
    let mut last_whole: Option<usize> = None;
    for (i, s) in after.iter().enumerate() {
        if s.sent + SUCCESS_WINDOW > until {
            break;
        }
        last_whole = Some(i);
        while end < after.len() && after[end].sent < s.sent + SUCCESS_WINDOW {
            ok_in += usize::from(after[end].ok);
            end += 1;
        }
        let n = end - i;
        if ok_in * 100 < SUCCESS_PCT * n {
            last_bad = Some(i);
        }
        ok_in -= usize::from(s.ok);
    }
    match last_bad {
        None => Some(Duration::ZERO),
        Some(b) if Some(b) == last_whole => None,
        Some(b) => after.get(b + 1).map(|s| s.sent - at),
    }
}

#[cfg(test)]
mod unit {
    use super::*;

    const MS: Duration = Duration::from_millis(1);

    /// A request every 10 ms from 0 to `end_ms`, failed where `fails(ms)`.
    fn timeline(end_ms: u64, fails: impl Fn(u64) -> bool) -> Vec<HttpSample> {
        (0..end_ms)
            .step_by(10)
            .map(|t| HttpSample {
                sent: MS * t as u32,
                ok: !fails(t),
                pod: (!fails(t)).then(|| "web-node-b".to_owned()),
                error: fails(t).then_some(HttpError::ConnectTimeout),
            })
            .collect()
    }

    #[test]
    fn nothing_failed_is_zero_everywhere() {
        let s = timeline(10_000, |_| false);
        let o = http_outcome(&s, MS * 1000, MS * 10_000);
        assert_eq!(o.first_ok, Some(Duration::ZERO));
        assert_eq!(o.ok_99pct, Some(Duration::ZERO));
        assert_eq!(o.all_ok, Some(Duration::ZERO));
        assert_eq!(o.failed_share_pct, 0.0);
        assert_eq!(o.sent, 900);
    }

    #[test]
    fn a_clean_outage_gives_its_end_for_all_three_times() {
        // Crash at 1 s; requests sent in [1000, 1300) fail.
        let s = timeline(10_000, |t| (1000..1300).contains(&t));
        let o = http_outcome(&s, MS * 1000, MS * 10_000);
        assert_eq!(o.first_ok, Some(MS * 300));
        assert_eq!(o.all_ok, Some(MS * 300));
        // The last window with fewer than 99 % starts at 1280 ms (two failures in 100); the
        // one from 1290 ms has one failure in 100, which passes.
        assert_eq!(o.ok_99pct, Some(MS * 290));
        assert_eq!(o.failed, 30);
        assert!((o.failed_share_pct - 100.0 * 30.0 / 900.0).abs() < 1e-9);
    }

    #[test]
    fn a_third_failing_until_endpoints_are_removed_recovers_late_for_99_and_all() {
        // Address moves after 200 ms; then one request in three fails (a dead endpoint) until
        // 45 s after the crash.
        let at = 1000;
        let s = timeline(70_000, |t| {
            (at..at + 200).contains(&t) || (t < at + 45_000 && t >= at && (t / 10) % 3 == 0)
        });
        let o = http_outcome(&s, MS * at as u32, MS * 70_000);
        // The request at 1200 ms is one of the third that fail; the next one succeeds.
        assert_eq!(o.first_ok, Some(MS * 210));
        assert_eq!(o.all_ok.map(|d| d.as_millis() / 100), Some(450));
        let p99 = o.ok_99pct.expect("recovered");
        assert!(p99 > MS * 44_000 && p99 <= MS * 45_000, "{p99:?}");
        assert!(
            o.failed_share_pct > 24.0 && o.failed_share_pct < 26.0,
            "{o:?}"
        );
    }

    #[test]
    fn a_single_stray_failure_later_moves_all_ok_but_not_99pct() {
        let s = timeline(20_000, |t| (1000..1100).contains(&t) || t == 15_000);
        let o = http_outcome(&s, MS * 1000, MS * 20_000);
        assert_eq!(o.first_ok, Some(MS * 100));
        assert_eq!(o.ok_99pct, Some(MS * 90));
        assert_eq!(o.all_ok, Some(MS * 14_010));
    }

    #[test]
    fn never_recovering_is_none() {
        let s = timeline(10_000, |t| t >= 1000);
        let o = http_outcome(&s, MS * 1000, MS * 10_000);
        assert_eq!((o.first_ok, o.ok_99pct, o.all_ok), (None, None, None));
        assert_eq!(o.failed_share_pct, 100.0);
    }

    #[test]
    fn failures_before_the_crash_do_not_count() {
        let s = timeline(5_000, |t| t < 500);
        let o = http_outcome(&s, MS * 1000, MS * 5_000);
        assert_eq!(o.first_ok, Some(Duration::ZERO));
        assert_eq!(o.failed, 0);
    }

    #[test]
    fn the_failed_share_counts_only_the_minute_after_the_crash() {
        let s = timeline(100_000, |t| t >= 70_000);
        let o = http_outcome(&s, Duration::ZERO, MS * 100_000);
        assert_eq!(o.failed_share_pct, 0.0);
        assert_eq!(o.all_ok, None);
    }
}
