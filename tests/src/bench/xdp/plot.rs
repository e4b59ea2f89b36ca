//! The per-kind latency distributions of the cost part as CDF lines in one SVG: a median ratio
//! hides whether a kind is uniformly slower or has a tail, the curves show which.

use std::path::Path;

use anyhow::{Result, anyhow};
use plotters::prelude::*;

use super::cost::CostReport;
use crate::bench::stats::percentile;
use crate::plot::{draw_labelled_line, draw_legend, svg_page};

/// The x axis stops here (percent): the last fraction of a percent is a few scheduler hiccups
/// that would squeeze everything else into a corner.
const CLIP_PERCENTILE: f64 = 99.5;

/// Writes the CDFs of every kind in `report` to `path` (SVG), creating its directory.
pub fn write_cdf(report: &CostReport, path: &Path) -> Result<()> {
    let lo = report
        .kinds
        .iter()
        .map(|k| k.summary.min)
        .min()
        .unwrap_or(0);
    let hi = report
        .kinds
        .iter()
        .map(|k| percentile(&k.samples, CLIP_PERCENTILE))
        .max()
        .unwrap_or(1)
        .max(lo + 1);
    let x_range = (lo.saturating_sub(5)) as f64..hi as f64 * 1.05;

    let root = svg_page(path, (900, 560))?;
    let err = |e: &dyn std::fmt::Display| anyhow!("drawing {}: {e}", path.display());
    let mut chart = ChartBuilder::on(&root)
        .caption(
            "XDP responder: ns per frame (BPF_PROG_TEST_RUN, repeat=1, fresh frames)",
            ("sans-serif", 20),
        )
        .margin(16)
        .x_label_area_size(44)
        .y_label_area_size(56)
        .build_cartesian_2d(x_range, 0f64..1f64)
        .map_err(|e| err(&e))?;
    chart
        .configure_mesh()
        .x_desc(format!(
            "ns per run (incl. fixed test_run overhead; clipped at p{CLIP_PERCENTILE})"
        ))
        .y_desc("fraction of runs ≤ x")
        .draw()
        .map_err(|e| err(&e))?;

    let colors = [RED, BLUE, RGBColor(0, 150, 0), BLACK];
    for (k, color) in report.kinds.iter().zip(colors) {
        let points: Vec<(f64, f64)> = (0..=1000)
            .map(|q| {
                let p = q as f64 / 10.0;
                (percentile(&k.samples, p.max(0.001)) as f64, p / 100.0)
            })
            .collect();
        let label = format!("{} (median {} ns)", k.kind.name(), k.summary.median);
        draw_labelled_line(&mut chart, points, color, label).map_err(|e| err(&e))?;
    }
    draw_legend(&mut chart, SeriesLabelPosition::LowerRight).map_err(|e| err(&e))?;
    root.present().map_err(|e| err(&e))?;
    Ok(())
}
