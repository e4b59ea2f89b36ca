//! The failover-time CDF per system as an SVG, one plot per scenario: with 20 trials a
//! percentile table hides whether a system is uniformly slow or has a tail; the steps show
//! every trial. The x axis is logarithmic because the systems span 10 ms to 20 s.

use std::path::{Path, PathBuf};

use anyhow::{Result, anyhow};
use plotters::prelude::*;

use super::{report::Row, scenarios::Scenario, stress::StressRun};
use crate::plot::{draw_labelled_line, draw_legend, svg_page};

/// The points of an empirical CDF (x ascending, y = fraction ≤ x) as a step line.
pub fn cdf_steps(sorted_ms: &[f64]) -> Vec<(f64, f64)> {
    let n = sorted_ms.len() as f64;
    let mut pts = Vec::with_capacity(sorted_ms.len() * 2);
    for (i, &x) in sorted_ms.iter().enumerate() {
        pts.push((x, i as f64 / n));
        pts.push((x, (i + 1) as f64 / n));
    }
    pts
}

/// The path of the plot of `scenario` next to `main` (the crash plot is `main` itself).
pub fn path_for(main: &Path, scenario: Scenario) -> PathBuf {
    if scenario == Scenario::Crash {
        return main.to_path_buf();
    }
    let stem = main
        .file_stem()
        .map_or("failover".into(), |s| s.to_string_lossy().into_owned());
    main.with_file_name(format!("{stem}-{}.svg", scenario.name()))
}

/// Writes the CDF of `scenario`'s failover times, one line per system, to `path`. Returns
/// `false` (and writes nothing) if no trial of that scenario recovered.
pub fn write_cdf(rows: &[Row], scenario: Scenario, path: &Path) -> Result<bool> {
    let series: Vec<(&Row, Vec<f64>)> = rows
        .iter()
        .filter(|r| r.scenario == scenario)
        .map(|r| {
            let mut v: Vec<f64> = r.failover_us().iter().map(|&x| x as f64 / 1e3).collect();
            v.sort_by(f64::total_cmp);
            (r, v)
        })
        .filter(|(_, v)| !v.is_empty())
        .collect();
    if series.is_empty() {
        return Ok(false);
    }
    // Zero (nothing felt) cannot sit on a log axis: clamp to 1 ms.
    let all = series.iter().flat_map(|(_, v)| v.iter().copied());
    let hi = all.clone().fold(10.0f64, f64::max) * 1.3;
    let lo = all.fold(f64::MAX, f64::min).clamp(1.0, hi / 2.0) * 0.8;
    let root = svg_page(path, (960, 580))?;
    let err = |e: &dyn std::fmt::Display| anyhow!("drawing {}: {e}", path.display());
    let mut chart = ChartBuilder::on(&root)
        .caption(
            format!(
                "Failover time, scenario {} (CDF over trials)",
                scenario.name()
            ),
            ("sans-serif", 20),
        )
        .margin(16)
        .x_label_area_size(44)
        .y_label_area_size(56)
        .build_cartesian_2d((lo..hi).log_scale(), 0f64..1.02f64)
        .map_err(|e| err(&e))?;
    let x_desc = if scenario == Scenario::Rejoin {
        "ms from the node's return until the client was answered again (log scale; 0 shown at 1 ms)"
    } else {
        "ms from the failure until the new owner answered (log scale; 0 shown at 1 ms)"
    };
    chart
        .configure_mesh()
        .x_labels(16)
        .x_label_formatter(&|x| format!("{x:.0}"))
        .x_desc(x_desc)
        .y_desc("fraction of trials ≤ x")
        .draw()
        .map_err(|e| err(&e))?;
    for (r, v) in &series {
        let color = color_of(Some(r.system));
        let clamped: Vec<f64> = v.iter().map(|x| x.max(lo)).collect();
        let f = r.failover();
        let label = format!(
            "{} (p50 {:.0} ms, {} of {} recovered)",
            r.system.name(),
            f.median as f64 / 1e3,
            v.len(),
            r.trials.len()
        );
        draw_labelled_line(&mut chart, cdf_steps(&clamped), color, label).map_err(|e| err(&e))?;
    }
    draw_legend(&mut chart, SeriesLabelPosition::LowerRight).map_err(|e| err(&e))?;
    root.present().map_err(|e| err(&e))?;
    Ok(true)
}

/// One colour per system in every plot.
fn color_of(system: Option<super::systems::System>) -> RGBColor {
    let colors = [
        RGBColor(200, 0, 0),
        RGBColor(255, 140, 0),
        RGBColor(120, 0, 160),
        RGBColor(0, 150, 150),
        RGBColor(0, 0, 220),
        RGBColor(0, 150, 0),
    ];
    let i = super::systems::System::ALL
        .iter()
        .position(|s| Some(*s) == system)
        .unwrap_or(0);
    colors[i % colors.len()]
}

/// The cumulative ownership changes of each stress run over time, one line per system, to
/// `path`. Returns `false` (and writes nothing) without runs.
pub fn write_stress(runs: &[StressRun], path: &Path) -> Result<bool> {
    if runs.is_empty() {
        return Ok(false);
    }
    let x_hi = runs.iter().map(|r| r.duration_s).fold(1.0, f64::max);
    let y_hi = runs
        .iter()
        .map(|r| r.ownership_changes as f64)
        .fold(1.0, f64::max)
        * 1.1;
    let root = svg_page(path, (960, 580))?;
    let err = |e: &dyn std::fmt::Display| anyhow!("drawing {}: {e}", path.display());
    let mut chart = ChartBuilder::on(&root)
        .caption(
            "Ownership changes under stress (every CPU busy, API slowed down)",
            ("sans-serif", 20),
        )
        .margin(16)
        .x_label_area_size(44)
        .y_label_area_size(56)
        .build_cartesian_2d(0f64..x_hi, 0f64..y_hi)
        .map_err(|e| err(&e))?;
    chart
        .configure_mesh()
        .x_desc("s since the stress started")
        .y_desc("ownership changes so far (VIP x poll)")
        .draw()
        .map_err(|e| err(&e))?;
    for r in runs {
        let color = color_of(r.system());
        let mut pts = vec![(0.0, 0.0)];
        for (i, &t) in r.change_times_s.iter().enumerate() {
            pts.push((t, i as f64));
            pts.push((t, (i + 1) as f64));
        }
        pts.push((r.duration_s, r.change_times_s.len() as f64));
        let label = format!(
            "{} ({} changes, {} overlap samples, load {:.1})",
            r.system, r.ownership_changes, r.overlap_samples, r.load1_mean
        );
        draw_labelled_line(&mut chart, pts, color, label).map_err(|e| err(&e))?;
    }
    draw_legend(&mut chart, SeriesLabelPosition::UpperLeft).map_err(|e| err(&e))?;
    root.present().map_err(|e| err(&e))?;
    Ok(true)
}

#[cfg(test)]
mod unit {
    use super::*;
    use crate::bench::failover::{measure::OwnerCheck, systems::System, trial::Trial};
    use std::time::Duration;

    #[test]
    fn steps_reach_one() {
        let p = cdf_steps(&[10.0, 20.0]);
        assert_eq!(p, vec![(10.0, 0.0), (10.0, 0.5), (20.0, 0.5), (20.0, 1.0)]);
    }

    #[test]
    fn all_zero_still_plots() {
        let rows = vec![Row {
            system: System::AnnouncerFast,
            settings: String::new(),
            scenario: Scenario::Restart,
            trials: vec![Trial {
                victim: "node-a".into(),
                vips: 1,
                failover: Some(Duration::ZERO),
                lost: 0,
                switched: false,
                after: None,
                owner: OwnerCheck::NotJudged,
                split: None,
                rejoin: None,
                e2e: None,
            }],
        }];
        let path = std::env::temp_dir().join(format!("failover-zero-{}.svg", std::process::id()));
        assert!(write_cdf(&rows, Scenario::Restart, &path).unwrap());
        std::fs::remove_file(&path).unwrap();
    }

    #[test]
    fn the_stress_plot_has_a_line_per_system_and_none_without_runs() {
        let run = |system: System, times: Vec<f64>| StressRun {
            system: system.name().into(),
            settings: String::new(),
            duration_s: 60.0,
            vips: 300,
            polls: 240,
            incomplete_polls: 0,
            ownership_changes: times.len() as u64,
            vips_changed: times.len(),
            overlap_samples: 0,
            unowned_samples: 0,
            overlap_events: None,
            overlap_counter: None,
            takeovers: None,
            probes: None,
            probes_answered: None,
            api_latency_ms: None,
            cpu_hog: String::new(),
            load1_mean: 2.0,
            load1_max: 2.5,
            cpu_busy_pct: None,
            cpus: 2,
            change_times_s: times,
        };
        let dir = std::env::temp_dir().join(format!("failover-stress-{}", std::process::id()));
        let path = dir.join("s.svg");
        let runs = [
            run(System::AnnouncerDefault, vec![]),
            run(System::KeepalivedTuned, vec![3.0, 3.0, 10.5]),
        ];
        assert!(write_stress(&runs, &path).unwrap());
        let svg = std::fs::read_to_string(&path).unwrap();
        assert!(svg.contains("keepalived-tuned (3 changes"), "{svg}");
        assert!(svg.contains("announcer-default (0 changes"));
        assert!(!write_stress(&[], &dir.join("none.svg")).unwrap());
        std::fs::remove_dir_all(&dir).unwrap();
    }

    #[test]
    fn paths_and_svg() {
        let main = Path::new("/x/failover.svg");
        assert_eq!(path_for(main, Scenario::Crash), main);
        assert_eq!(
            path_for(main, Scenario::Sigterm),
            Path::new("/x/failover-sigterm.svg")
        );
        let t = |ms: u64| Trial {
            victim: "node-a".into(),
            vips: 1,
            failover: Some(Duration::from_millis(ms)),
            lost: 0,
            switched: true,
            after: None,
            owner: OwnerCheck::NotJudged,
            split: None,
            rejoin: None,
            e2e: None,
        };
        let rows = vec![
            Row {
                system: System::AnnouncerDefault,
                settings: String::new(),
                scenario: Scenario::Crash,
                trials: vec![t(0), t(300), t(420)],
            },
            Row {
                system: System::KeepalivedDefault,
                settings: String::new(),
                scenario: Scenario::Crash,
                trials: vec![t(3600), t(3700)],
            },
        ];
        let dir = std::env::temp_dir().join(format!("failover-plot-{}", std::process::id()));
        let path = dir.join("f.svg");
        assert!(write_cdf(&rows, Scenario::Crash, &path).unwrap());
        let svg = std::fs::read_to_string(&path).unwrap();
        assert!(svg.contains("keepalived-default") && svg.contains("announcer-default"));
        assert!(!write_cdf(&rows, Scenario::Partition, &dir.join("p.svg")).unwrap());
        std::fs::remove_dir_all(&dir).unwrap();
    }
}
