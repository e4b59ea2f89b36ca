//! `bench-failover --merge A.json B.json ...`: one table, one JSON document and one CDF plot per
//! scenario from several runs.
//!
//! Why: each system runs on a testbed of its own, so the slow ones (Lease-per-Service with
//! 15 s leases) can run in separate processes at the same time as the fast ones instead of
//! after them, and with their own trial counts. The plots must still put every system side by
//! side, which is what this does with the runs' JSON documents (the last line of `--json`).

use std::{path::Path, time::Duration};

use anyhow::{Context, Result, anyhow};
use serde_json::{Value, json};

use super::{
    measure::OwnerCheck,
    plot::{path_for, write_cdf, write_stress},
    report::Row,
    scenarios::Scenario,
    stress::{self, StressRun},
    systems::System,
    trial::Trial,
};

/// The JSON document of one run: the last line of `path` that is a JSON object.
pub fn read_run(path: &Path) -> Result<Value> {
    let text =
        std::fs::read_to_string(path).with_context(|| format!("reading {}", path.display()))?;
    let line = text
        .lines()
        .rev()
        .find(|l| l.trim_start().starts_with('{'))
        .ok_or_else(|| anyhow!("{}: no JSON document (run with --json)", path.display()))?;
    serde_json::from_str(line).with_context(|| format!("parsing the JSON of {}", path.display()))
}

/// Rebuilds the rows of `run` as far as the plots need them: one trial per failover time, and
/// an unrecovered trial per `unrecovered`. (Lost probes per trial are not in the summary.)
fn rows_for_plot(run: &Value) -> Vec<Row> {
    let mut rows = Vec::new();
    for r in run["rows"].as_array().into_iter().flatten() {
        let (Some(system), Some(scenario)) = (
            r["system"].as_str().and_then(System::parse),
            r["scenario"].as_str().and_then(Scenario::parse),
        ) else {
            continue;
        };
        let trial = |failover: Option<Duration>| Trial {
            victim: String::new(),
            vips: 1,
            failover,
            lost: 0,
            switched: failover.is_some(),
            after: None,
            owner: OwnerCheck::NotJudged,
            split: None,
            rejoin: None,
            e2e: None,
        };
        let mut trials: Vec<Trial> = r["failover_ms"]
            .as_array()
            .into_iter()
            .flatten()
            .filter_map(Value::as_f64)
            .map(|ms| trial(Some(Duration::from_secs_f64(ms / 1e3))))
            .collect();
        let unrecovered = r["unrecovered"].as_u64().unwrap_or(0);
        trials.extend((0..unrecovered).map(|_| trial(None)));
        rows.push(Row {
            system,
            settings: r["settings"].as_str().unwrap_or_default().to_owned(),
            scenario,
            trials,
        });
    }
    rows
}

/// The names (or texts) of the targets that failed in a merged document (`pass: false`).
pub fn failed_targets(doc: &Value) -> Vec<String> {
    doc["targets"]
        .as_array()
        .into_iter()
        .flatten()
        .filter(|t| t["pass"].as_bool() == Some(false))
        .map(|t| {
            t["name"]
                .as_str()
                .or(t["text"].as_str())
                .unwrap_or("?")
                .to_owned()
        })
        .collect()
}

fn cell(v: &Value) -> String {
    match v.as_f64() {
        None => "-".into(),
        Some(ms) => format!("{ms:.0}"),
    }
}

/// Merges `runs` (paths of `--json` outputs): prints a table, writes the CDFs next to `plot`,
/// and returns the merged JSON document.
pub fn merge(runs: &[impl AsRef<Path>], plot: &Path) -> Result<Value> {
    let docs: Vec<Value> = runs
        .iter()
        .map(|p| read_run(p.as_ref()))
        .collect::<Result<_>>()?;
    let mut rows: Vec<Value> = docs
        .iter()
        .flat_map(|d| d["rows"].as_array().cloned().unwrap_or_default())
        .collect();
    let order = |v: &Value| {
        (
            Scenario::parse(v["scenario"].as_str().unwrap_or_default()),
            System::ALL
                .iter()
                .position(|s| Some(*s) == System::parse(v["system"].as_str().unwrap_or_default())),
        )
    };
    rows.sort_by_key(order);
    println!(
        "{:<27} {:<17} {:>6} {:>5} {:>8} {:>8} {:>8} {:>8} {:>8} {:>8} {:>8}",
        "system",
        "scenario",
        "trials",
        "unrec",
        "min",
        "p50",
        "p90",
        "p99",
        "max",
        "lost_p50",
        "lost_max"
    );
    for r in &rows {
        println!(
            "{:<27} {:<17} {:>6} {:>5} {:>8} {:>8} {:>8} {:>8} {:>8} {:>8} {:>8}",
            r["system"].as_str().unwrap_or_default(),
            r["scenario"].as_str().unwrap_or_default(),
            r["trials"],
            r["unrecovered"],
            cell(&r["failover_min_ms"]),
            cell(&r["failover_p50_ms"]),
            cell(&r["failover_p90_ms"]),
            cell(&r["failover_p99_ms"]),
            cell(&r["failover_max_ms"]),
            r["lost_probes_p50"],
            r["lost_probes_max"],
        );
    }
    println!("(failover in ms; see a single run's footer for the definitions)");
    let plot_rows: Vec<Row> = docs.iter().flat_map(rows_for_plot).collect();
    let mut plots = Vec::new();
    let stress_runs: Vec<StressRun> = docs
        .iter()
        .flat_map(|d| d["stress"].as_array().cloned().unwrap_or_default())
        .filter_map(|v| serde_json::from_value(v).ok())
        .collect();
    print!("{}", stress::table(&stress_runs));
    for sc in Scenario::known() {
        let path = path_for(plot, sc);
        let written = if sc == Scenario::Stress {
            write_stress(&stress_runs, &path)?
        } else {
            write_cdf(&plot_rows, sc, &path)?
        };
        if written {
            println!("plot: {}", path.display());
            plots.push(path.display().to_string());
        }
    }
    let targets: Vec<Value> = docs
        .iter()
        .flat_map(|d| d["targets"].as_array().cloned().unwrap_or_default())
        .collect();
    for t in &targets {
        if let Some(text) = t["text"].as_str() {
            let pass = match t["pass"].as_bool() {
                Some(true) => "PASS",
                Some(false) => "FAIL",
                None => "info",
            };
            println!("{pass} {text}");
        }
    }
    let idle: Vec<&Value> = docs
        .iter()
        .map(|d| &d["idle"])
        .filter(|v| !v.is_null())
        .collect();
    let aborted: Vec<Value> = docs
        .iter()
        .flat_map(|d| d["aborted"].as_array().cloned().unwrap_or_default())
        .collect();
    Ok(json!({
        "bench": "failover",
        "merged_from": runs.iter().map(|p| p.as_ref().display().to_string()).collect::<Vec<_>>(),
        "rows": rows,
        "targets": targets,
        "idle": idle.first().cloned().cloned().unwrap_or(Value::Null),
        "aborted": aborted,
        "stress": stress_runs,
        "plot": plots.first().cloned().unwrap_or_default(),
        "plots": plots,
    }))
}

#[cfg(test)]
mod unit {
    use super::*;

    #[test]
    fn a_failed_target_in_a_merged_run_is_reported() {
        let doc = json!({"targets": [
            {"name": "a", "pass": true},
            {"name": "b", "pass": false},
            {"name": "c", "pass": null},
        ]});
        assert_eq!(failed_targets(&doc), ["b"]);
    }
}
