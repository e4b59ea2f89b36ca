//! The failover-time CDF per system as an SVG, one plot per scenario: with 20 trials a
//! percentile table hides whether a system is uniformly slow or has a tail; the steps show
//! every trial. The x axis is logarithmic because the systems span 10 ms to 20 s.

use std::path::{Path, PathBuf};

use anyhow::{Context, Result, anyhow};
use plotters::prelude::*;

use super::{report::Row, scenarios::Scenario};

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
    if let Some(dir) = path.parent().filter(|d| !d.as_os_str().is_empty()) {
        std::fs::create_dir_all(dir).with_context(|| format!("creating {}", dir.display()))?;
    }
    // Zero (nothing felt) cannot sit on a log axis: clamp to 1 ms.
    let all = series.iter().flat_map(|(_, v)| v.iter().copied());
    let hi = all.clone().fold(10.0f64, f64::max) * 1.3;
    let lo = all.fold(f64::MAX, f64::min).clamp(1.0, hi / 2.0) * 0.8;
    let root = SVGBackend::new(path, (960, 580)).into_drawing_area();
    let err = |e: &dyn std::fmt::Display| anyhow!("drawing {}: {e}", path.display());
    root.fill(&WHITE).map_err(|e| err(&e))?;
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
    chart
        .configure_mesh()
        .x_labels(16)
        .x_label_formatter(&|x| format!("{x:.0}"))
        .x_desc("ms from the failure until the new owner answered (log scale; 0 shown at 1 ms)")
        .y_desc("fraction of trials ≤ x")
        .draw()
        .map_err(|e| err(&e))?;
    let colors = [
        RGBColor(200, 0, 0),
        RGBColor(255, 140, 0),
        RGBColor(120, 0, 160),
        RGBColor(0, 150, 150),
        RGBColor(0, 0, 220),
        RGBColor(0, 150, 0),
    ];
    for (r, v) in &series {
        // One colour per system in every plot.
        let i = super::systems::System::ALL
            .iter()
            .position(|s| *s == r.system)
            .unwrap_or(0);
        let color = colors[i % colors.len()];
        let clamped: Vec<f64> = v.iter().map(|x| x.max(lo)).collect();
        let f = r.failover();
        let label = format!(
            "{} (p50 {:.0} ms, {} of {} recovered)",
            r.system.name(),
            f.median as f64 / 1e3,
            v.len(),
            r.trials.len()
        );
        chart
            .draw_series(LineSeries::new(cdf_steps(&clamped), color.stroke_width(2)))
            .map_err(|e| err(&e))?
            .label(label)
            .legend(move |(x, y)| {
                PathElement::new(vec![(x, y), (x + 20, y)], color.stroke_width(2))
            });
    }
    chart
        .configure_series_labels()
        .position(SeriesLabelPosition::LowerRight)
        .background_style(WHITE.mix(0.9))
        .border_style(BLACK)
        .draw()
        .map_err(|e| err(&e))?;
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
            }],
        }];
        let path = std::env::temp_dir().join(format!("failover-zero-{}.svg", std::process::id()));
        assert!(write_cdf(&rows, Scenario::Restart, &path).unwrap());
        std::fs::remove_file(&path).unwrap();
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
