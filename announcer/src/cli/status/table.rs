//! The table form of [`Report`]: a header line per source, then VIPs, then peers.
//!
//! Why plain columns, no borders: it is read on a node over SSH or `kubectl exec`, often piped
//! into `grep`; one row per VIP and per peer keeps that useful. Why comfy-table: a value wider
//! than its column (an IPv6 VIP) widens the column for every row instead of pushing the rest of
//! its row out of line; at the usual widths the columns are as they always were.

use std::fmt::Write;

use comfy_table::{CellAlignment, ColumnConstraint, ContentLineStyle, Table, TableStyle, Width};

use super::{Report, VipRow};

/// No borders or rules; one space between columns.
const PLAIN: TableStyle = TableStyle::new()
    .header_lines(ContentLineStyle::none().junction(' '))
    .content_lines(ContentLineStyle::none().junction(' '));

/// A column: its header, its width unless a value is wider, and its alignment.
pub(super) struct Column(pub &'static str, pub u16, pub CellAlignment);

/// `rows` under a header line, in `columns` `gap` spaces apart, without borders: print it with
/// `{}` (every cell padded to its column's width) or `trim_fmt` (no trailing spaces).
pub(super) fn table(columns: &[Column], rows: Vec<Vec<String>>, gap: u16) -> Table {
    let mut t = Table::new();
    t.load_style(PLAIN)
        .set_header(columns.iter().map(|c| c.0))
        .add_rows(rows);
    let last = columns.len().saturating_sub(1);
    for (i, (c, col)) in columns.iter().zip(t.column_iter_mut()).enumerate() {
        // The junction is one space; the rest of the gap pads each column but the last.
        let pad = if i < last { gap.saturating_sub(1) } else { 0 };
        col.set_padding((0, pad));
        col.set_constraint(ColumnConstraint::LowerBoundary(Width::Fixed(c.1 + pad)));
        col.set_cell_alignment(c.2);
    }
    t
}

/// `rows` under a header line, in `columns` one space apart, each line ending with a newline.
fn columns(out: &mut String, columns: &[Column], rows: Vec<Vec<String>>) {
    let _ = writeln!(out, "{}", table(columns, rows, 1));
}

/// The report as text, ending with a newline.
pub fn render(r: &Report) -> String {
    let mut out = String::new();
    header(&mut out, r);
    if !r.vips.is_empty() {
        out.push('\n');
        vips(&mut out, &r.vips);
    }
    if !r.peers.is_empty() {
        out.push('\n');
        peers(&mut out, r);
    }
    out
}

fn header(out: &mut String, r: &Report) {
    match &r.agent {
        None => {}
        Some(a) if !a.reachable => {
            let _ = writeln!(
                out,
                "agent: UNREACHABLE at {} ({}); showing the data plane only",
                a.url,
                a.error.as_deref().unwrap_or("no answer")
            );
        }
        Some(a) => {
            if let Some(s) = &a.state {
                let _ = writeln!(
                    out,
                    "agent: node {} ({}, {}, {}, API {}), {} VIPs owned, {} takeovers, {} handovers, {} overlaps [{}]",
                    s.node,
                    s.election,
                    if s.ready { "ready" } else { "warming up" },
                    if s.dataplane {
                        "data plane"
                    } else {
                        "no data plane"
                    },
                    if s.api_ok { "ok" } else { "unreachable" },
                    s.owned.len(),
                    s.stats.takeovers,
                    s.stats.releases,
                    s.stats.overlaps,
                    a.url
                );
            }
        }
    }
    if r.interfaces.is_empty() {
        let _ = writeln!(
            out,
            "data plane: not loaded on any interface (pin root {})",
            r.pin_root.display()
        );
    }
    for i in &r.interfaces {
        let c: Vec<String> = i.counters.iter().map(|(o, n)| format!("{o}={n}")).collect();
        let _ = writeln!(
            out,
            "{} (ifindex {}): {} VIPs; {}",
            i.iface,
            i.ifindex,
            i.vips.len(),
            c.join(" ")
        );
    }
}

fn expiry(v: &VipRow) -> String {
    if !v.in_dataplane {
        return "-".into();
    }
    match v.expires_in_s {
        None => "permanent".into(),
        Some(s) if s <= 0.0 => "EXPIRED".into(),
        Some(s) => format!("{s:.1}s"),
    }
}

fn vips(out: &mut String, rows: &[VipRow]) {
    use CellAlignment::{Left, Right};
    let rows = rows
        .iter()
        .map(|v| {
            let (answered, expired, malformed) = if v.in_dataplane {
                (
                    v.answered.to_string(),
                    v.expired.to_string(),
                    v.malformed.to_string(),
                )
            } else {
                ("-".into(), "-".into(), "-".into())
            };
            vec![
                v.vip.to_string(),
                v.iface.clone(),
                v.vlan.to_string(),
                v.mac.clone().unwrap_or_else(|| "-".into()),
                v.owner.clone().unwrap_or_else(|| "-".into()),
                v.service.clone().unwrap_or_else(|| "-".into()),
                expiry(v),
                answered,
                expired,
                malformed,
            ]
        })
        .collect();
    columns(
        out,
        &[
            Column("VIP", 28, Left),
            Column("IFACE", 10, Left),
            Column("VLAN", 4, Right),
            Column("MAC", 17, Left),
            Column("OWNER", 16, Left),
            Column("SERVICE", 24, Left),
            Column("EXPIRES", 10, Right),
            Column("ANSWERED", 9, Right),
            Column("EXPIRED", 8, Right),
            Column("MALFORMED", 9, Right),
        ],
        rows,
    );
}

fn peers(out: &mut String, r: &Report) {
    use CellAlignment::{Left, Right};
    let yes_no = |b: bool, yes: &str, no: &str| if b { yes } else { no }.to_owned();
    let rows = r
        .peers
        .iter()
        .map(|p| {
            vec![
                p.node.to_string(),
                yes_no(p.alive, "alive", "out"),
                p.heartbeat_age_ms
                    .map_or("never".to_string(), |ms| format!("{ms}ms")),
                yes_no(p.lease_valid, "valid", "expired"),
                yes_no(p.leaving, "yes", "no"),
            ]
        })
        .collect();
    columns(
        out,
        &[
            Column("PEER", 32, Left),
            Column("STATE", 8, Left),
            Column("HEARTBEAT", 10, Right),
            Column("LEASE", 7, Left),
            Column("LEAVING", 7, Left),
        ],
        rows,
    );
}
