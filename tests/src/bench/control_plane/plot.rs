//! API requests per second against the number of Services, one line per election mode and
//! agent count, as an SVG: the table gives the numbers, the plot shows which mode's cost grows
//! with Services (log–log, so a per-Service cost is a rising straight line and a per-node cost
//! is flat).

use std::{collections::BTreeMap, path::Path};

use anyhow::{Result, anyhow};
use plotters::prelude::*;

use super::{Measurement, Mode};
use crate::plot::{draw_legend, svg_page};

/// Rates below this are drawn at it (a log axis has no zero).
const FLOOR: f64 = 0.1;

type Series = BTreeMap<(Mode, usize), Vec<(f64, f64, bool)>>;

/// `(mode, agents)` → `(services, value, saturated)`, by services.
fn series(ms: &[Measurement], value: impl Fn(&Measurement) -> f64) -> Series {
    let mut out: Series = BTreeMap::new();
    for m in ms {
        out.entry((m.case.mode, m.case.agents)).or_default().push((
            m.case.services as f64,
            value(m).max(FLOOR),
            m.saturated() || !m.converged(),
        ));
    }
    for pts in out.values_mut() {
        pts.sort_by(|a, b| a.0.total_cmp(&b.0));
    }
    out
}

fn span(values: impl Iterator<Item = f64>) -> (f64, f64) {
    let (lo, hi) = values.fold((f64::MAX, f64::MIN), |(lo, hi), v| (lo.min(v), hi.max(v)));
    if lo > hi {
        return (1.0, 10.0);
    }
    (lo / 2.0, hi * 2.0)
}

/// 1, 2, 5 × 10ⁿ between `lo` and `hi`: round labels on a log axis.
fn one_two_five(lo: f64, hi: f64) -> Vec<f64> {
    let mut out = Vec::new();
    let mut decade = 10f64.powf(lo.max(1e-3).log10().floor());
    while decade <= hi {
        for m in [1.0, 2.0, 5.0] {
            let v = decade * m;
            if v >= lo && v <= hi {
                out.push(v);
            }
        }
        decade *= 10.0;
    }
    out
}

const COLORS: [RGBColor; 6] = [
    RGBColor(31, 119, 180),
    RGBColor(214, 39, 40),
    RGBColor(44, 160, 44),
    RGBColor(148, 103, 189),
    RGBColor(255, 127, 14),
    BLACK,
];

fn panel<DB: DrawingBackend>(
    area: &DrawingArea<DB, plotters::coord::Shift>,
    title: &str,
    y_desc: &str,
    data: &Series,
    agent_counts: &[usize],
) -> Result<()>
where
    DB::ErrorType: 'static,
{
    let err = |e: &dyn std::fmt::Display| anyhow!("drawing {title}: {e}");
    let (x_lo, x_hi) = span(data.values().flatten().map(|p| p.0));
    let (y_lo, y_hi) = span(data.values().flatten().map(|p| p.1));
    let mut x_keys: Vec<f64> = data.values().flatten().map(|p| p.0).collect();
    x_keys.sort_by(f64::total_cmp);
    x_keys.dedup();
    let mut chart = ChartBuilder::on(area)
        .caption(title, ("sans-serif", 18))
        .margin(12)
        .x_label_area_size(40)
        .y_label_area_size(60)
        .build_cartesian_2d(
            (x_lo..x_hi).log_scale().with_key_points(x_keys),
            (y_lo..y_hi)
                .log_scale()
                .with_key_points(one_two_five(y_lo, y_hi)),
        )
        .map_err(|e| err(&e))?;
    chart
        .configure_mesh()
        .x_desc("Services")
        .y_desc(y_desc)
        .x_label_formatter(&|v| format!("{v:.0}"))
        .y_label_formatter(&|v| {
            if *v >= 1.0 {
                format!("{v:.0}")
            } else {
                format!("{v:.1}")
            }
        })
        .draw()
        .map_err(|e| err(&e))?;
    for ((mode, agents), pts) in data {
        let i = agent_counts.iter().position(|a| a == agents).unwrap_or(0);
        let color = COLORS[i % COLORS.len()];
        let style = color.stroke_width(2);
        let line: Vec<(f64, f64)> = pts.iter().map(|p| (p.0, p.1)).collect();
        let label = format!("{} {agents} agents", mode.name());
        let series = match mode {
            Mode::NodeLease => chart
                .draw_series(LineSeries::new(line, style))
                .map_err(|e| err(&e))?,
            Mode::LeasePerService => chart
                .draw_series(DashedLineSeries::new(line, 8, 5, style))
                .map_err(|e| err(&e))?,
        };
        let dashed = *mode == Mode::LeasePerService;
        series.label(label).legend(move |(x, y)| {
            let end = if dashed { x + 10 } else { x + 20 };
            PathElement::new(vec![(x, y), (end, y)], style)
        });
        // Filled: achieved the demanded rate; hollow: saturated or not converged.
        chart
            .draw_series(
                pts.iter().map(|&(x, y, sat)| {
                    Circle::new((x, y), 4, color.stroke_width(2).filled_if(!sat))
                }),
            )
            .map_err(|e| err(&e))?;
    }
    draw_legend(&mut chart, SeriesLabelPosition::UpperLeft).map_err(|e| err(&e))?;
    Ok(())
}

trait FilledIf {
    fn filled_if(self, fill: bool) -> ShapeStyle;
}

impl FilledIf for ShapeStyle {
    fn filled_if(self, fill: bool) -> ShapeStyle {
        if fill { self.filled() } else { self }
    }
}

/// Writes the plot of `ms` to `path` (SVG), creating its directory.
pub fn write(ms: &[Measurement], path: &Path) -> Result<()> {
    let mut agent_counts: Vec<usize> = ms.iter().map(|m| m.case.agents).collect();
    agent_counts.sort_unstable();
    agent_counts.dedup();
    let root = svg_page(path, (1300, 560))?;
    let err = |e: &dyn std::fmt::Display| anyhow!("drawing {}: {e}", path.display());
    let panels = root.split_evenly((1, 2));
    panel(
        &panels[0],
        "All agent API requests/s (hollow marker: saturated or unconverged case)",
        "requests per second (log)",
        &series(ms, Measurement::requests_per_s),
        &agent_counts,
    )?;
    panel(
        &panels[1],
        "Agent API writes/s (solid: node-lease, dashed: lease-per-service)",
        "writes per second (log)",
        &series(ms, Measurement::writes_per_s),
        &agent_counts,
    )?;
    root.present().map_err(|e| err(&e))?;
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn log_axis_labels_are_round() {
        assert_eq!(
            one_two_five(0.5, 30.0),
            vec![0.5, 1.0, 2.0, 5.0, 10.0, 20.0]
        );
    }
}
