//! The benchmark's output: the targets judged, a table for people, one JSON document for tools.

use std::fmt::Write as _;

use serde_json::{Value, json};

use super::{
    cost::{CostReport, Kind},
    flood::{ATTEMPTS, FloodReport, Row, Who},
};

/// Most an answer may cost per frame, in floor medians.
pub const MAX_VS_FLOOR: f64 = 1.2;
/// Least the XDP responder must answer per CPU second, in userspace-responder multiples.
pub const MIN_VS_USERSPACE: f64 = 10.0;

/// One judged target.
#[derive(Clone, Debug)]
pub struct Target {
    /// Key in the JSON `targets` object.
    pub name: &'static str,
    /// What it says.
    pub text: &'static str,
    /// Measured value (`None`: could not be measured).
    pub value: Option<f64>,
    /// The bound.
    pub limit: f64,
    /// Whether `value` must be at most (true) or at least (false) `limit`.
    pub at_most: bool,
}

impl Target {
    /// Met?
    pub fn pass(&self) -> bool {
        self.value.is_some_and(|v| {
            if self.at_most {
                v <= self.limit
            } else {
                v >= self.limit
            }
        })
    }
}

fn per_cpu_ratio(flood: &FloodReport, who: Who) -> Option<f64> {
    let x = flood.get(who)?.answers_per_cpu_s()?;
    let u = flood.get(Who::Userspace)?.answers_per_cpu_s()?;
    (u > 0.0).then(|| x / u)
}

/// The targets, judged.
pub fn targets(cost: &CostReport, flood: &FloodReport) -> Vec<Target> {
    vec![
        Target {
            name: "arp_median_vs_floor",
            text: "ARP answer median <= 1.2x reflect floor",
            value: Some(cost.ratio_to_floor(Kind::Arp)),
            limit: MAX_VS_FLOOR,
            at_most: true,
        },
        Target {
            name: "na_median_vs_floor",
            text: "NA answer median <= 1.2x reflect floor",
            value: Some(cost.ratio_to_floor(Kind::Na)),
            limit: MAX_VS_FLOOR,
            at_most: true,
        },
        Target {
            name: "xdp_generic_vs_userspace_answers_per_cpu_s",
            text: "XDP (generic) answers/CPU-s >= 10x userspace AF_PACKET",
            value: per_cpu_ratio(flood, Who::XdpGeneric),
            limit: MIN_VS_USERSPACE,
            at_most: false,
        },
        Target {
            name: "xdp_native_vs_userspace_answers_per_cpu_s",
            text: "XDP (native) answers/CPU-s >= 10x userspace AF_PACKET",
            value: per_cpu_ratio(flood, Who::XdpNative),
            limit: MIN_VS_USERSPACE,
            at_most: false,
        },
    ]
}

fn opt(v: Option<f64>, digits: usize) -> String {
    v.map_or("-".to_owned(), |v| format!("{v:.digits$}"))
}

/// The human-readable report.
pub fn table(cost: &CostReport, flood: &FloodReport, targets: &[Target], plot: &str) -> String {
    let mut s = String::new();
    let _ = writeln!(
        s,
        "Part 1: cost per frame (BPF_PROG_TEST_RUN, repeat=1, a fresh request per run, kinds interleaved)"
    );
    let _ = writeln!(
        s,
        "{:<15} {:>8} {:>9} {:>7} {:>7} {:>7} {:>7} {:>9}",
        "kind", "runs", "answered", "min_ns", "med_ns", "p90_ns", "p99_ns", "med/floor"
    );
    for k in &cost.kinds {
        let m = &k.summary;
        let _ = writeln!(
            s,
            "{:<15} {:>8} {:>9} {:>7} {:>7} {:>7} {:>7} {:>9.2}",
            k.kind.name(),
            k.runs,
            k.answered,
            m.min,
            m.median,
            m.p90,
            m.p99,
            cost.ratio_to_floor(k.kind)
        );
    }
    let _ = writeln!(
        s,
        "ns include the kernel's fixed per-run test_run overhead (timer reads, run loop), the same"
    );
    let _ = writeln!(
        s,
        "for every kind; hence the comparison with the reflect floor measured the same way."
    );
    let _ = writeln!(s, "plot: {plot}");
    let _ = writeln!(s);
    let _ = writeln!(
        s,
        "Part 2: ARP flood, client -> node veth, one responder at a time"
    );
    let _ = writeln!(
        s,
        "{:<26} {:>9} {:>9} {:>9} {:>10} {:>7} {:>7} {:>8} {:>13} {:>9}",
        "responder",
        "sent",
        "answered",
        "sent/s",
        "answered/s",
        "busy_s",
        "cpu_s",
        "ns/req",
        "answers/cpu_s",
        "ns/answer"
    );
    for row in &flood.rows {
        flood_line(&mut s, row);
    }
    let _ = writeln!(
        s,
        "cpu_s = machine busy_s - sent x {:.0} ns (busy CPU per request of the NOARP-discard baseline; runs: {:.0} / {:.0} ns)",
        flood.base_cpu_per_request_s * 1e9,
        flood.base_runs[0] * 1e9,
        flood.base_runs[1] * 1e9
    );
    if let Some(t) = flood
        .get(Who::Userspace)
        .and_then(|r| r.run.as_ref().ok()?.thread_cpu_s)
    {
        let _ = writeln!(
            s,
            "userspace responder thread's own CPU: {t:.3} s (included in its cpu_s)"
        );
    }
    let disturbed = flood
        .rows
        .iter()
        .filter_map(|r| r.run.as_ref().ok())
        .any(|r| r.disturbed());
    if disturbed {
        let _ = writeln!(
            s,
            "(!) = other load ran during the run even after {ATTEMPTS} attempts: its cpu_s is not trustworthy"
        );
    }
    let _ = writeln!(
        s,
        "flood_kernel_ignores: the kernel processing requests for an address nobody has (reference,"
    );
    let _ = writeln!(
        s,
        "  not subtracted). flood_xdp_native: the client veth runs the program without VIPs, since veth"
    );
    let _ = writeln!(
        s,
        "  delivers native XDP_TX only to a peer running XDP; on veth, native mode also converts each"
    );
    let _ = writeln!(
        s,
        "  skb to an xdp_buff and back, so it costs more than generic mode here (unlike on a real NIC)."
    );
    let _ = writeln!(s);
    let _ = writeln!(s, "Targets");
    for t in targets {
        let verdict = if t.value.is_none() {
            "N/A "
        } else if t.pass() {
            "PASS"
        } else {
            "FAIL"
        };
        let _ = writeln!(
            s,
            "  {verdict}  {:<56} measured {}",
            t.text,
            opt(t.value, 2)
        );
    }
    s
}

fn flood_line(s: &mut String, row: &Row) {
    match &row.run {
        Ok(r) => {
            let disturbed = if r.disturbed() { " (!)" } else { "" };
            let _ = writeln!(
                s,
                "{:<26} {:>9} {:>9} {:>9.0} {:>10.0} {:>7.2} {:>7} {:>8} {:>13} {:>9}{disturbed}",
                row.who.name(),
                r.sent,
                r.answers,
                r.sent as f64 / r.send_s,
                row.answers_per_s().unwrap_or(0.0),
                r.cpu.machine_s,
                opt(row.net_cpu_s, 3),
                opt(row.cpu_ns_per_request(), 0),
                opt(row.answers_per_cpu_s(), 0),
                opt(row.cpu_ns_per_answer(), 0)
            );
        }
        Err(e) => {
            let _ = writeln!(s, "{:<26} not measured: {e}", row.who.name());
        }
    }
}

fn flood_json(row: &Row) -> Value {
    match &row.run {
        Ok(r) => json!({
            "part": "flood",
            "name": row.who.name(),
            "seconds": r.send_s,
            "requests_sent": r.sent,
            "send_errors": r.send_errors,
            "requests_per_s": r.sent as f64 / r.send_s,
            "answered": r.answers,
            "answered_per_s": row.answers_per_s(),
            "responder_count": r.responder_count,
            "machine_busy_cpu_s": r.cpu.machine_s,
            "process_cpu_s": r.cpu.process_s,
            "cpu_s": row.net_cpu_s,
            "answers_per_cpu_s": row.answers_per_cpu_s(),
            "cpu_ns_per_request": row.cpu_ns_per_request(),
            "cpu_ns_per_answer": row.cpu_ns_per_answer(),
            "background_busy_cores": r.background_busy_cores,
            "outside_process_cores": r.outside_process_cores(),
            "other_processes_cores": r.others_cores(),
            "disturbed": r.disturbed(),
            "responder_thread_cpu_s": r.thread_cpu_s,
        }),
        Err(e) => json!({ "part": "flood", "name": row.who.name(), "error": e }),
    }
}

/// The JSON document (printed as the last line with `--json`).
pub fn json(cost: &CostReport, flood: &FloodReport, targets: &[Target], plot: &str) -> Value {
    let mut rows: Vec<Value> = cost
        .kinds
        .iter()
        .map(|k| {
            let m = &k.summary;
            json!({
                "part": "cost",
                "name": k.kind.name(),
                "runs": k.runs,
                "answered": k.answered,
                "min_ns": m.min,
                "median_ns": m.median,
                "p90_ns": m.p90,
                "p99_ns": m.p99,
                "max_ns": m.max,
                "mean_ns": m.mean,
                "median_vs_floor": cost.ratio_to_floor(k.kind),
            })
        })
        .collect();
    rows.extend(flood.rows.iter().map(flood_json));
    let targets: serde_json::Map<String, Value> = targets
        .iter()
        .map(|t| {
            let bound = if t.at_most { "max" } else { "min" };
            (
                t.name.to_owned(),
                json!({ "value": t.value, bound: t.limit, "pass": t.pass() }),
            )
        })
        .collect();
    json!({
        "bench": "xdp",
        "rows": rows,
        "targets": targets,
        "plot": plot,
        "program_counters": cost.counters.iter().map(|(n, v)| (n.to_string(), json!(v))).collect::<serde_json::Map<_, _>>(),
        "flood_base_cpu_ns_per_request": flood.base_cpu_per_request_s * 1e9,
        "notes": [
            "cost ns are BPF_PROG_TEST_RUN durations with repeat=1: they include a fixed per-run overhead, equal for all kinds; compare against reflect_floor",
            "flood cpu_s = machine busy CPU (user+nice+system+irq+softirq) minus requests_sent x the busy CPU per request of the baseline (same flood, node eth0 NOARP so requests are discarded on arrival)",
            "flood answers are addressed to a MAC behind the client, which the client discards on arrival: its cost of receiving them is not counted",
        ],
    })
}
