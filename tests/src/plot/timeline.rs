//! The failover timeline as a picture: one row per VIP, labelled with the VIP and its Service,
//! one dot per probe coloured by the node that answered it, a cross for every probe that was lost, a triangle where the client saw the
//! successor's announcement, and the crash as a vertical line. A table says how long the gap
//! was; the picture shows whether the gap was one hole or a stutter, and that the new owner's
//! announcement arrived just before traffic resumed.

use std::{net::IpAddr, path::Path, time::Duration};

use anyhow::{Context, Result, anyhow};
use plotters::prelude::*;
use plotters::style::text_anchor::{HPos, Pos, VPos};

use super::{create_parent_dir, draw_legend};

use crate::env::lan::{ProbeKind, Timeline};

/// An announcement the client saw: `at` is an offset on the timeline's clock.
#[derive(Clone, Debug)]
pub struct Announcement {
    /// When the client received it (offset from the timeline's start).
    pub at: Duration,
    /// The VIP announced.
    pub vip: IpAddr,
    /// The source MAC of the frame.
    pub mac: [u8; 6],
}

/// Parses `tcpdump -tt -n -e -l` lines for gratuitous ARP (RFC 5944 §4.6: sender IP = target
/// IP, request or reply) and unsolicited Neighbor Advertisements (RFC 4861 §7.2.6), returning
/// (epoch seconds, VIP, source MAC). Anything else is ignored.
pub fn parse_announcements(tcpdump: &str) -> Vec<(f64, IpAddr, [u8; 6])> {
    let mut out = Vec::new();
    for line in tcpdump.lines() {
        let mut words = line.split_whitespace();
        let (Some(ts), Some(mac)) = (words.next(), words.next()) else {
            continue;
        };
        let (Ok(ts), Some(mac)) = (ts.parse::<f64>(), crate::netns::parse_mac(mac)) else {
            continue;
        };
        // Announcements go to everyone (broadcast, or all-nodes multicast for NA); an answer
        // to the client's own request is unicast and is not an announcement.
        let _arrow = words.next();
        let dst = words.next().unwrap_or_default().trim_end_matches(',');
        if dst != "ff:ff:ff:ff:ff:ff" && dst != "33:33:00:00:00:01" {
            continue;
        }
        let rest: Vec<&str> = words.collect();
        let vip = if let Some(i) = rest.iter().position(|w| *w == "who-has") {
            // "Request who-has 10.0.0.5 tell 10.0.0.5, length 28"
            let target = rest.get(i + 1).copied();
            let sender = rest.get(i + 3).map(|s| s.trim_end_matches(','));
            match (target, sender) {
                (Some(t), Some(s)) if t == s => t.parse().ok(),
                _ => None,
            }
        } else if let Some(i) = rest.iter().position(|w| *w == "is-at") {
            // "Reply 10.0.0.5 is-at 02:..., length 28" (a GARP reply also has spa = tpa)
            rest.get(i.wrapping_sub(1)).and_then(|s| s.parse().ok())
        } else if line.contains("neighbor advertisement") {
            // "ICMP6, neighbor advertisement, tgt is fd78::8000:0, length 32"
            rest.iter()
                .position(|w| *w == "is")
                .and_then(|i| rest.get(i + 1))
                .and_then(|s| s.trim_end_matches(',').parse().ok())
        } else {
            None
        };
        if let Some(vip) = vip {
            out.push((ts, vip, mac));
        }
    }
    out
}

/// Colours of nodes, in the order of `nodes`.
const PALETTE: [RGBColor; 6] = [
    RGBColor(31, 119, 180),
    RGBColor(44, 160, 44),
    RGBColor(148, 103, 189),
    RGBColor(255, 127, 14),
    RGBColor(23, 190, 207),
    RGBColor(140, 86, 75),
];

/// What [`write_timeline`] draws.
pub struct TimelinePlot<'a> {
    /// The caption.
    pub title: &'a str,
    /// The prober's record.
    pub timeline: &'a Timeline,
    /// One row each, bottom to top: the VIP and the Service it belongs to (the row's label).
    pub rows: &'a [(IpAddr, String)],
    /// Every node (fixes the colours).
    pub nodes: &'a [String],
    /// When the failure was injected (offset on the timeline's clock).
    pub crash: Duration,
    /// Announcements the client saw.
    pub announcements: &'a [Announcement],
    /// How much to show before and after the crash.
    pub window: (Duration, Duration),
}

/// The label of a row: `10.78.128.0 (web)`.
pub fn row_label(vip: IpAddr, service: &str) -> String {
    format!("{vip} ({service})")
}

/// Writes `plot` to `path` (SVG), creating its directory.
pub fn write_timeline(path: &Path, plot: &TimelinePlot<'_>) -> Result<()> {
    create_parent_dir(path)?;
    let svg = render_timeline(plot)?;
    std::fs::write(path, svg).with_context(|| format!("writing {}", path.display()))
}

/// Draws `plot` as an SVG document.
pub fn render_timeline(plot: &TimelinePlot<'_>) -> Result<String> {
    let mut svg = String::new();
    draw(
        plot,
        SVGBackend::with_string(&mut svg, size(plot.rows.len())),
    )?;
    Ok(svg)
}

/// The picture's size in pixels for `rows` rows.
fn size(rows: usize) -> (u32, u32) {
    (1000, 140 + 46 * rows as u32)
}

fn draw(plot: &TimelinePlot<'_>, backend: SVGBackend<'_>) -> Result<()> {
    let TimelinePlot {
        title,
        timeline,
        rows: vips,
        nodes,
        crash,
        announcements,
        window,
    } = *plot;
    let ms = |d: Duration| d.as_secs_f64() * 1e3 - crash.as_secs_f64() * 1e3;
    let (lo, hi) = (
        -(window.0.as_secs_f64() * 1e3),
        window.1.as_secs_f64() * 1e3,
    );
    let rows = vips.len().max(1) as f64;
    let root = backend.into_drawing_area();
    let err = |e: &dyn std::fmt::Display| anyhow!("drawing the timeline: {e}");
    root.fill(&WHITE).map_err(|e| err(&e))?;
    let mut chart = ChartBuilder::on(&root)
        .caption(title, ("sans-serif", 18))
        .margin(14)
        .x_label_area_size(40)
        .y_label_area_size(190)
        .build_cartesian_2d(lo..hi, -0.5f64..rows + 0.9)
        .map_err(|e| err(&e))?;
    chart
        .configure_mesh()
        .disable_y_mesh()
        // No ticks: the axis would label only "nice" values, every other row. Each row is
        // labelled below.
        .y_labels(0)
        .x_desc("ms since the crash (UDP probes every 10 ms; × = lost, ▲ = announcement seen)")
        .draw()
        .map_err(|e| err(&e))?;
    let label_style =
        TextStyle::from(("sans-serif", 13).into_font()).pos(Pos::new(HPos::Right, VPos::Center));
    for (row, (vip, service)) in vips.iter().enumerate() {
        let (x, y) = chart.backend_coord(&(lo, row as f64));
        root.draw(&Text::new(
            row_label(*vip, service),
            (x - 8, y),
            label_style.clone(),
        ))
        .map_err(|e| err(&e))?;
    }

    let color_of = |node: &str| {
        nodes
            .iter()
            .position(|n| n == node)
            .map(|i| PALETTE[i % PALETTE.len()])
            .unwrap_or(BLACK)
    };
    for (row, (vip, _)) in vips.iter().enumerate() {
        let y = row as f64;
        let samples = timeline
            .samples
            .iter()
            .filter(|s| s.target == *vip && matches!(s.kind, ProbeKind::Udp))
            .filter(|s| (lo..=hi).contains(&ms(s.sent)));
        let mut dots = Vec::new();
        let mut lost = Vec::new();
        for s in samples {
            match (&s.rtt, &s.node) {
                (Some(_), Some(node)) => dots.push((ms(s.sent), color_of(node))),
                _ => lost.push(ms(s.sent)),
            }
        }
        chart
            .draw_series(
                dots.into_iter()
                    .map(|(x, c)| Circle::new((x, y), 3, c.filled())),
            )
            .map_err(|e| err(&e))?;
        chart
            .draw_series(
                lost.into_iter()
                    .map(|x| Cross::new((x, y), 4, RED.stroke_width(2))),
            )
            .map_err(|e| err(&e))?;
        chart
            .draw_series(
                announcements
                    .iter()
                    .filter(|a| a.vip == *vip && (lo..=hi).contains(&ms(a.at)))
                    .map(|a| TriangleMarker::new((ms(a.at), y + 0.28), 6, BLACK.filled())),
            )
            .map_err(|e| err(&e))?;
    }
    chart
        .draw_series(LineSeries::new(
            [(0.0, -0.5), (0.0, rows - 0.5)],
            RED.stroke_width(1),
        ))
        .map_err(|e| err(&e))?
        .label("crash")
        .legend(|(x, y)| PathElement::new(vec![(x, y), (x + 16, y)], RED));
    for node in nodes {
        let c = color_of(node);
        chart
            .draw_series(std::iter::empty::<Circle<(f64, f64), i32>>())
            .map_err(|e| err(&e))?
            .label(format!("answered by {node}"))
            .legend(move |(x, y)| Circle::new((x + 8, y), 4, c.filled()));
    }
    draw_legend(&mut chart, SeriesLabelPosition::UpperRight).map_err(|e| err(&e))?;
    root.present().map_err(|e| err(&e))?;
    Ok(())
}

#[cfg(test)]
mod unit {
    use super::*;

    #[test]
    fn every_row_is_labelled_with_its_vip_and_service() {
        let timeline = Timeline {
            start: std::time::Instant::now(),
            samples: Vec::new(),
            marks: Vec::new(),
        };
        let services = ["web", "api", "shop", "dns", "mail", "chat"];
        let rows: Vec<(IpAddr, String)> = services
            .iter()
            .enumerate()
            .map(|(i, s)| {
                let vip: IpAddr = if i % 2 == 0 {
                    format!("10.78.128.{i}").parse().unwrap()
                } else {
                    format!("fd78::8000:{i}").parse().unwrap()
                };
                (vip, s.to_string())
            })
            .collect();
        let nodes = ["node-a".to_string(), "node-b".to_string()];
        let svg = render_timeline(&TimelinePlot {
            title: "six rows",
            timeline: &timeline,
            rows: &rows,
            nodes: &nodes,
            crash: Duration::from_secs(1),
            announcements: &[],
            window: (Duration::from_millis(300), Duration::from_millis(500)),
        })
        .expect("renders");
        // The text of every `<text …>…</text>` element.
        let texts: Vec<&str> = svg
            .split("<text")
            .skip(1)
            .filter_map(|t| Some(t.split_once('>')?.1.split_once("</text>")?.0.trim()))
            .collect();
        for (vip, service) in &rows {
            let label = row_label(*vip, service);
            assert_eq!(
                texts.iter().filter(|t| **t == label).count(),
                1,
                "row {label:?} is labelled once; the texts: {texts:?}"
            );
        }
    }

    #[test]
    fn parses_garp_and_unsolicited_na_only() {
        let dump = "\
1764445000.100000 02:78:00:00:00:02 > ff:ff:ff:ff:ff:ff, ethertype ARP (0x0806), length 42: Request who-has 10.78.128.0 tell 10.78.128.0, length 28
1764445000.100100 02:78:00:00:00:02 > ff:ff:ff:ff:ff:ff, ethertype ARP (0x0806), length 42: Reply 10.78.128.0 is-at 02:78:00:00:00:02, length 28
1764445000.100200 02:78:00:00:00:02 > 33:33:00:00:00:01, ethertype IPv6 (0x86dd), length 86: fd78::8000:0 > ff02::1: ICMP6, neighbor advertisement, tgt is fd78::8000:0, length 32
1764445000.200000 02:78:00:00:00:fa > ff:ff:ff:ff:ff:ff, ethertype ARP (0x0806), length 42: Request who-has 10.78.128.1 tell 10.78.0.250, length 28
1764445000.300000 02:78:00:00:00:02 > 02:78:00:00:00:fa, ethertype ARP (0x0806), length 42: Reply 10.78.128.0 is-at 02:78:00:00:00:02, length 28
garbage line
";
        let got = parse_announcements(dump);
        let mac = [2, 0x78, 0, 0, 0, 2];
        assert_eq!(got.len(), 3, "{got:?}");
        assert_eq!(got[0].1, "10.78.128.0".parse::<IpAddr>().unwrap());
        assert_eq!(got[0].2, mac);
        assert_eq!(got[1].1, "10.78.128.0".parse::<IpAddr>().unwrap());
        assert_eq!(got[2].1, "fd78::8000:0".parse::<IpAddr>().unwrap());
        assert!((got[0].0 - 1764445000.1).abs() < 1e-6);
    }
}
