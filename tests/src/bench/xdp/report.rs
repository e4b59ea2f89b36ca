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

/// How a target was measured (its heading in the table, its `interpretation` in the JSON).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Reading {
    /// Target 1, `BPF_PROG_TEST_RUN` medians: the isolated cost of one run.
    TestRun,
    /// Target 1, machine CPU per frame under the ARP flood, net of the baseline.
    FloodCpu,
    /// Target 1, the program's own run time under the flood (kernel `bpf_stats`).
    FloodProgram,
    /// Target 2, machine busy CPU net of the baseline.
    MachineCpu,
    /// Target 2, the XDP program's own CPU against the userspace responder thread's own CPU.
    ProgramVsThread,
}

impl Reading {
    /// Which target of the issue this reads.
    pub fn target(self) -> u8 {
        match self {
            Reading::TestRun | Reading::FloodCpu | Reading::FloodProgram => 1,
            Reading::MachineCpu | Reading::ProgramVsThread => 2,
        }
    }

    /// Short key (JSON).
    pub fn key(self) -> &'static str {
        match self {
            Reading::TestRun => "test_run",
            Reading::FloodCpu => "flood_machine_cpu",
            Reading::FloodProgram => "flood_program_bpf_stats",
            Reading::MachineCpu => "flood_machine_cpu",
            Reading::ProgramVsThread => "program_cpu_vs_responder_thread_cpu",
        }
    }

    /// Heading.
    pub fn label(self) -> &'static str {
        match self {
            Reading::TestRun => {
                "[test_run] isolated cost of one run: BPF_PROG_TEST_RUN medians, repeat=1, fresh frames"
            }
            Reading::FloodCpu => {
                "[flood] machine CPU per frame under the ARP flood, net of the baseline (median trials)"
            }
            Reading::FloodProgram => {
                "[flood, bpf_stats] the program's own run time per frame under the flood (median bpf_stats trials)"
            }
            Reading::MachineCpu => {
                "[machine CPU] answers per busy CPU second net of the baseline (median trials)"
            }
            Reading::ProgramVsThread => {
                "[program CPU vs responder CPU] 1e9/prog_ns_per_run vs answered/responder_thread_cpu_s"
            }
        }
    }
}

/// One judged target.
#[derive(Clone, Debug)]
pub struct Target {
    /// Key in the JSON `targets` object.
    pub name: &'static str,
    /// How it was measured.
    pub reading: Reading,
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

/// The targets not met, in words: measured and missed (`FAIL`), or not measured at all
/// (`N/A`: a run failed or a figure is missing; not measuring a target does not pass it).
pub fn unmet(targets: &[Target]) -> Vec<String> {
    targets
        .iter()
        .filter(|t| !t.pass())
        .map(|t| match t.value {
            Some(_) => t.name.to_string(),
            None => format!("{} (not measured)", t.name),
        })
        .collect()
}

fn per_cpu_ratio(flood: &FloodReport, who: Who) -> Option<f64> {
    let x = flood.get(who)?.answers_per_cpu_s()?;
    let u = flood.get(Who::Userspace)?.answers_per_cpu_s()?;
    (u > 0.0).then(|| x / u)
}

/// The responder's CPU per answer over the reflector's per frame, same accounting.
fn flood_vs_reflector(flood: &FloodReport, who: Who, reflector: Who) -> Option<f64> {
    let x = flood.get(who)?.cpu_ns_per_answer()?;
    let f = flood.get(reflector)?.cpu_ns_per_answer()?;
    (f > 0.0).then(|| x / f)
}

/// The responder program's own ns per run over the reflector program's (kernel statistics).
fn program_vs_reflector(flood: &FloodReport, who: Who, reflector: Who) -> Option<f64> {
    let x = flood.get(who)?.prog_ns_per_run()?;
    let f = flood.get(reflector)?.prog_ns_per_run()?;
    (f > 0.0).then(|| x / f)
}

/// The XDP program's answers per CPU second of itself over the userspace thread's per CPU
/// second of itself.
fn program_vs_thread(flood: &FloodReport, who: Who) -> Option<f64> {
    let x = flood.get(who)?.prog_answers_per_cpu_s()?;
    let u = flood.get(Who::Userspace)?.thread_answers_per_cpu_s()?;
    (u > 0.0).then(|| x / u)
}

/// The targets, judged, grouped by [`Reading`] in report order.
pub fn targets(cost: &CostReport, flood: &FloodReport) -> Vec<Target> {
    let at_most = |name, reading, text, value| Target {
        name,
        reading,
        text,
        value,
        limit: MAX_VS_FLOOR,
        at_most: true,
    };
    let at_least = |name, reading, text, value| Target {
        name,
        reading,
        text,
        value,
        limit: MIN_VS_USERSPACE,
        at_most: false,
    };
    vec![
        at_most(
            "arp_median_vs_floor",
            Reading::TestRun,
            "ARP answer median <= 1.2x reflect floor",
            Some(cost.ratio_to_floor(Kind::Arp)),
        ),
        at_most(
            "na_median_vs_floor",
            Reading::TestRun,
            "NA answer median <= 1.2x reflect floor",
            Some(cost.ratio_to_floor(Kind::Na)),
        ),
        at_most(
            "arp_flood_generic_vs_reflector",
            Reading::FloodCpu,
            "ARP answer <= 1.2x reflector, per frame under flood (generic)",
            flood_vs_reflector(flood, Who::XdpGeneric, Who::ReflectGeneric),
        ),
        at_most(
            "arp_flood_native_vs_reflector",
            Reading::FloodCpu,
            "ARP answer <= 1.2x reflector, per frame under flood (native)",
            flood_vs_reflector(flood, Who::XdpNative, Who::ReflectNative),
        ),
        at_most(
            "arp_prog_generic_vs_reflector",
            Reading::FloodProgram,
            "ARP answer program ns/run <= 1.2x reflect's, under flood (generic)",
            program_vs_reflector(flood, Who::XdpGeneric, Who::ReflectGeneric),
        ),
        at_most(
            "arp_prog_native_vs_reflector",
            Reading::FloodProgram,
            "ARP answer program ns/run <= 1.2x reflect's, under flood (native)",
            program_vs_reflector(flood, Who::XdpNative, Who::ReflectNative),
        ),
        at_least(
            "xdp_generic_vs_userspace_answers_per_cpu_s",
            Reading::MachineCpu,
            "XDP (generic) answers/CPU-s >= 10x userspace AF_PACKET",
            per_cpu_ratio(flood, Who::XdpGeneric),
        ),
        at_least(
            "xdp_native_vs_userspace_answers_per_cpu_s",
            Reading::MachineCpu,
            "XDP (native) answers/CPU-s >= 10x userspace AF_PACKET",
            per_cpu_ratio(flood, Who::XdpNative),
        ),
        at_least(
            "xdp_generic_prog_vs_userspace_thread_answers_per_cpu_s",
            Reading::ProgramVsThread,
            "XDP program (generic) answers/CPU-s >= 10x userspace thread",
            program_vs_thread(flood, Who::XdpGeneric),
        ),
        at_least(
            "xdp_native_prog_vs_userspace_thread_answers_per_cpu_s",
            Reading::ProgramVsThread,
            "XDP program (native) answers/CPU-s >= 10x userspace thread",
            program_vs_thread(flood, Who::XdpNative),
        ),
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
        "Part 2: ARP flood, client -> node veth, one responder at a time; each row is the median of {} trials",
        flood.trials
    );
    let _ = writeln!(s, "(by ns/answer; ns/request for the references)");
    let _ = writeln!(
        s,
        "{:<26} {:>9} {:>9} {:>9} {:>10} {:>7} {:>7} {:>8} {:>13} {:>9} {:>11} {:>14}",
        "responder",
        "sent",
        "answered",
        "sent/s",
        "answered/s",
        "busy_s",
        "cpu_s",
        "ns/req",
        "answers/cpu_s",
        "ns/answer",
        "prog_ns/run",
        "prog_ans/cpu_s"
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
    if let Some(u) = flood.get(Who::Userspace)
        && let Ok(r) = &u.run
        && let Some(t) = r.thread_cpu_s
    {
        let _ = writeln!(
            s,
            "userspace responder thread's own CPU: {t:.3} s for {} replies = {} ns/answer, {} answers/thread-cpu_s",
            r.responder_count.unwrap_or(0),
            opt(u.thread_cpu_ns_per_answer(), 0),
            opt(u.thread_answers_per_cpu_s(), 0)
        );
        let _ = writeln!(s, "  (included in its cpu_s)");
    }
    let _ = writeln!(
        s,
        "flood_xdp_reflect_*: the reflect floor (swap MACs, XDP_TX) answering every request; its"
    );
    let _ = writeln!(
        s,
        "  ns/answer is ns per reflected frame, the same accounting as the other rows."
    );
    let _ = writeln!(
        s,
        "Two kinds of trials, interleaved in every round: machine-CPU trials of every row with"
    );
    let _ = writeln!(
        s,
        "  kernel.bpf_stats_enabled=0, which give all of busy_s, cpu_s, ns/req, answers/cpu_s and ns/answer;"
    );
    let _ = writeln!(
        s,
        "  and separate bpf_stats trials of the XDP rows (bpf_stats_enabled=1, same length, right after the"
    );
    let _ = writeln!(
        s,
        "  machine-CPU trials of the same mode), which give only prog_ns/run and prog_ans/cpu_s (their median"
    );
    let _ = writeln!(
        s,
        "  by prog_ns/run); their machine CPU is listed below for comparison and used for nothing else."
    );
    let _ = writeln!(
        s,
        "prog_ns/run: the node program's run_time_ns / run_cnt from the kernel; prog_ans/cpu_s = 1e9 /"
    );
    let _ = writeln!(
        s,
        "  prog_ns/run. Counts the program alone (plus about one clock read), not the driver, skb or veth"
    );
    let _ = writeln!(s, "  work around it.");
    match flood.bpf_stats_overhead_ns {
        Some(ns) => {
            let _ = writeln!(
                s,
                "  bpf_stats itself costs ~{ns:.0} ns per program run (test_run of reflect, stats on - off); no"
            );
            let _ = writeln!(s, "  machine-CPU figure above includes it.");
        }
        None => {
            let _ = writeln!(
                s,
                "  bpf_stats' own cost per program run was not measured (it was already on); it was turned off for"
            );
            let _ = writeln!(s, "  the machine-CPU trials and restored afterwards.");
        }
    }
    let _ = writeln!(
        s,
        "per-trial ns/answer (ns/request for the references; * = reported median); XDP rows' bpf_stats trials:"
    );
    let _ = writeln!(
        s,
        "  prog_ns/run, and in brackets the ns/answer those trials would give (stats on; not used):"
    );
    for row in &flood.rows {
        if row.trials.is_empty() && row.stats_trials.is_empty() {
            continue;
        }
        let vals: Vec<String> = row
            .trials
            .iter()
            .enumerate()
            .map(|(i, t)| {
                let star = if i == row.chosen { "*" } else { "" };
                format!("{:.0}{star}", t.key_ns(row.who))
            })
            .collect();
        let failed = if row.failed_trials.is_empty() {
            String::new()
        } else {
            format!("  ({} failed)", row.failed_trials.len())
        };
        let _ = writeln!(s, "  {:<26} {}{failed}", row.who.name(), vals.join(", "));
        if row.stats_trials.is_empty() && row.stats_failed.is_empty() {
            continue;
        }
        let vals: Vec<String> = row
            .stats_trials
            .iter()
            .enumerate()
            .map(|(i, t)| {
                let star = if Some(i) == row.stats_chosen { "*" } else { "" };
                let mark = if t.run.disturbed() { "!" } else { "" };
                format!(
                    "{}{star}{mark} ({:.0})",
                    opt(t.run.prog.and_then(|p| p.ns_per_run()), 1),
                    t.key_ns(row.who)
                )
            })
            .collect();
        let failed = if row.stats_failed.is_empty() {
            String::new()
        } else {
            format!("  ({} failed)", row.stats_failed.len())
        };
        let _ = writeln!(
            s,
            "  {:<26} {}{failed}",
            "  bpf_stats trials:",
            vals.join(", ")
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
    let mut last: Option<Reading> = None;
    for t in targets {
        if last.map(Reading::target) != Some(t.reading.target()) {
            let _ = writeln!(
                s,
                "  Target {}: {}",
                t.reading.target(),
                if t.reading.target() == 1 {
                    "each answer costs at most 1.2x the bare XDP_TX reflector (floor)"
                } else {
                    "XDP answers >= 10x the userspace AF_PACKET responder per CPU second"
                }
            );
        }
        if last != Some(t.reading) {
            let _ = writeln!(s, "   {}", t.reading.label());
            last = Some(t.reading);
        }
        let verdict = if t.value.is_none() {
            "N/A "
        } else if t.pass() {
            "PASS"
        } else {
            "FAIL"
        };
        let _ = writeln!(
            s,
            "    {verdict}  {:<62} measured {}",
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
                "{:<26} {:>9} {:>9} {:>9.0} {:>10.0} {:>7.2} {:>7} {:>8} {:>13} {:>9} {:>11} {:>14}{disturbed}",
                row.who.name(),
                r.sent,
                r.answers,
                r.sent as f64 / r.send_s,
                row.answers_per_s().unwrap_or(0.0),
                r.cpu.machine_s,
                opt(row.net_cpu_s, 3),
                opt(row.cpu_ns_per_request(), 0),
                opt(row.answers_per_cpu_s(), 0),
                opt(row.cpu_ns_per_answer(), 0),
                opt(row.prog_ns_per_run(), 1),
                opt(row.prog_answers_per_cpu_s(), 0)
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
            "responder_thread_cpu_ns_per_answer": row.thread_cpu_ns_per_answer(),
            "responder_thread_answers_per_cpu_s": row.thread_answers_per_cpu_s(),
            "prog_run_count": row.prog().map(|p| p.runs),
            "prog_run_time_ns": row.prog().map(|p| p.run_time_ns),
            "prog_ns_per_run": row.prog_ns_per_run(),
            "prog_answers_per_cpu_s": row.prog_answers_per_cpu_s(),
            "peer_prog_run_count": row.peer_prog().map(|p| p.runs),
            "peer_prog_ns_per_run": row.peer_prog().and_then(|p| p.ns_per_run()),
            "trials": row.trials.len(),
            "trial_chosen": row.chosen,
            "trial_cpu_ns_per_answer": row.trials.iter().map(|t| t.key_ns(row.who)).collect::<Vec<_>>(),
            "trial_prog_ns_per_run": row.stats_trials.iter().map(|t| t.run.prog.and_then(|p| p.ns_per_run())).collect::<Vec<_>>(),
            "failed_trials": row.failed_trials,
            "prog_trials": row.stats_trials.len(),
            "prog_trial_chosen": row.stats_chosen,
            "prog_trial_cpu_ns_per_answer_stats_on": row.stats_trials.iter().map(|t| t.key_ns(row.who)).collect::<Vec<_>>(),
            "prog_trial_machine_busy_cpu_s_stats_on": row.stats_trials.iter().map(|t| t.run.cpu.machine_s).collect::<Vec<_>>(),
            "prog_trial_disturbed": row.stats_trials.iter().map(|t| t.run.disturbed()).collect::<Vec<_>>(),
            "failed_prog_trials": row.stats_failed,
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
                json!({
                    "value": t.value,
                    bound: t.limit,
                    "pass": t.pass(),
                    "target": t.reading.target(),
                    "interpretation": t.reading.key(),
                    "text": t.text,
                }),
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
        "flood_trials": flood.trials,
        "bpf_stats_overhead_ns_per_run": flood.bpf_stats_overhead_ns,
        "notes": [
            "cost ns are BPF_PROG_TEST_RUN durations with repeat=1: they include a fixed per-run overhead, equal for all kinds; compare against reflect_floor",
            "flood cpu_s = machine busy CPU (user+nice+system+irq+softirq) minus requests_sent x the busy CPU per request of the baseline (same flood, node eth0 NOARP so requests are discarded on arrival)",
            "flood answers are addressed to a MAC behind the client, which the client discards on arrival: its cost of receiving them is not counted",
            "flood rows report the median of flood_trials trials (by cpu ns per answer; per request for the references); trial_* list every trial, trial_chosen indexes the median",
            "flood_xdp_reflect_*: the reflect program (swap MACs, XDP_TX) as responder; its flood frames' Ethernet source is the same discarded MAC, so reflected frames are discarded by the client like answers; cpu_ns_per_answer is ns per reflected frame",
            "prog_* are the kernel's run_time_ns/run_cnt of the node program (peer_prog_*: the native rows' client-side pass-through program); prog_answers_per_cpu_s = 1e9/prog_ns_per_run",
            "two kinds of flood trials, interleaved in every round: machine-CPU trials of every row with kernel.bpf_stats_enabled=0, the only source of machine_busy_cpu_s, process_cpu_s, cpu_s, answers_per_cpu_s, cpu_ns_per_request, cpu_ns_per_answer and trial_cpu_ns_per_answer; and separate bpf_stats trials of the XDP rows (kernel.bpf_stats_enabled=1, same duration, one per round right after the machine-CPU trials of the same mode, restored to its previous value afterwards), the only source of prog_* and peer_prog_*: trial_prog_ns_per_run lists those trials (prog_trials of them, prog_trial_chosen indexes their median by prog_ns_per_run); their machine CPU (prog_trial_*_stats_on) includes bpf_stats' own cost (bpf_stats_overhead_ns_per_run per program run, twice per answer in native mode) and is not used for any machine-CPU figure",
            "responder_count of flood_xdp_reflect_* is the node eth0's tx_packets (the reflect program has no counter, and its run count needs bpf_stats)",
        ],
        "bpf_stats_note": "machine-CPU figures of all flood rows come from trials with kernel.bpf_stats_enabled=0; prog_* figures come from separate bpf_stats-on trials of the XDP rows whose machine CPU is not used",
    })
}

#[cfg(test)]
mod unit {
    use super::*;

    fn target(name: &'static str, value: Option<f64>) -> Target {
        Target {
            name,
            reading: Reading::TestRun,
            text: "",
            value,
            limit: MAX_VS_FLOOR,
            at_most: true,
        }
    }

    #[test]
    fn a_missed_target_is_unmet() {
        let t = [target("ok", Some(1.0)), target("slow", Some(1.5))];
        assert_eq!(unmet(&t), ["slow"]);
    }

    #[test]
    fn an_unmeasured_target_is_unmet() {
        let t = [target("ok", Some(1.0)), target("gone", None)];
        assert_eq!(unmet(&t), ["gone (not measured)"]);
    }

    #[test]
    fn met_targets_leave_nothing_unmet() {
        assert!(unmet(&[target("ok", Some(1.2))]).is_empty());
    }
}
