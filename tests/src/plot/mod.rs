//! What the tests' pictures share: the demo's failover timeline ([`timeline`]) and the
//! benchmarks' plots (in `bench`) are SVG pages with a legend box, and most of their series
//! are labelled lines.
//!
//! Why one place: the plots were written one after another and each repeated the page set-up,
//! the legend's look and the line style; a change of look now happens once.

pub mod timeline;

use std::path::Path;

use anyhow::{Context, Result, anyhow};
use plotters::{
    coord::{CoordTranslate, Shift},
    prelude::*,
};

/// Creates the directory `path` is to be written in, if it has one.
pub fn create_parent_dir(path: &Path) -> Result<()> {
    if let Some(dir) = path.parent().filter(|d| !d.as_os_str().is_empty()) {
        std::fs::create_dir_all(dir).with_context(|| format!("creating {}", dir.display()))?;
    }
    Ok(())
}

/// A white SVG page of `size` pixels to be written to `path` (its directory created).
pub fn svg_page(path: &Path, size: (u32, u32)) -> Result<DrawingArea<SVGBackend<'_>, Shift>> {
    create_parent_dir(path)?;
    let root = SVGBackend::new(path, size).into_drawing_area();
    root.fill(&WHITE)
        .map_err(|e| anyhow!("drawing {}: {e}", path.display()))?;
    Ok(root)
}

/// Draws the series labels of `chart` in a framed, nearly opaque white box at `position`.
pub fn draw_legend<'a, DB: DrawingBackend + 'a, CT: CoordTranslate>(
    chart: &mut ChartContext<'a, DB, CT>,
    position: SeriesLabelPosition,
) -> Result<(), DrawingAreaErrorKind<DB::ErrorType>> {
    chart
        .configure_series_labels()
        .position(position)
        .background_style(WHITE.mix(0.9))
        .border_style(BLACK)
        .draw()
}

/// Draws `points` as a 2 px line of `color`, named `label` in the legend.
pub fn draw_labelled_line<'a, DB, X, Y>(
    chart: &mut ChartContext<'a, DB, Cartesian2d<X, Y>>,
    points: Vec<(f64, f64)>,
    color: RGBColor,
    label: String,
) -> Result<(), DrawingAreaErrorKind<DB::ErrorType>>
where
    DB: DrawingBackend + 'a,
    X: Ranged<ValueType = f64>,
    Y: Ranged<ValueType = f64>,
{
    chart
        .draw_series(LineSeries::new(points, color.stroke_width(2)))?
        .label(label)
        .legend(move |(x, y)| PathElement::new(vec![(x, y), (x + 20, y)], color.stroke_width(2)));
    Ok(())
}
