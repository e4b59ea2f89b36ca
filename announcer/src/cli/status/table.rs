//! The table form of [`Report`]: a header line per source, then VIPs, then peers.
//!
//! Why plain padded columns: it is read on a node over SSH or `kubectl exec`, often piped into
//! `grep`; one row per VIP and per peer keeps that useful.

use std::fmt::Write;

use super::{Report, VipRow};

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
    let line = |out: &mut String, c: [&str; 10]| {
        let _ = writeln!(
            out,
            "{:<28} {:<10} {:>4} {:<17} {:<16} {:<24} {:>10} {:>9} {:>8} {:>9}",
            c[0], c[1], c[2], c[3], c[4], c[5], c[6], c[7], c[8], c[9]
        );
    };
    line(
        out,
        [
            "VIP",
            "IFACE",
            "VLAN",
            "MAC",
            "OWNER",
            "SERVICE",
            "EXPIRES",
            "ANSWERED",
            "EXPIRED",
            "MALFORMED",
        ],
    );
    for v in rows {
        let (answered, expired, malformed) = if v.in_dataplane {
            (
                v.answered.to_string(),
                v.expired.to_string(),
                v.malformed.to_string(),
            )
        } else {
            ("-".into(), "-".into(), "-".into())
        };
        line(
            out,
            [
                &v.vip.to_string(),
                &v.iface,
                &v.vlan.to_string(),
                v.mac.as_deref().unwrap_or("-"),
                v.owner.as_deref().unwrap_or("-"),
                v.service.as_deref().unwrap_or("-"),
                &expiry(v),
                &answered,
                &expired,
                &malformed,
            ],
        );
    }
}

fn peers(out: &mut String, r: &Report) {
    let _ = writeln!(
        out,
        "{:<32} {:<8} {:>10} {:<7} {:<7}",
        "PEER", "STATE", "HEARTBEAT", "LEASE", "LEAVING"
    );
    for p in &r.peers {
        let age = p
            .heartbeat_age_ms
            .map_or("never".to_string(), |ms| format!("{ms}ms"));
        let _ = writeln!(
            out,
            "{:<32} {:<8} {:>10} {:<7} {:<7}",
            p.node,
            if p.alive { "alive" } else { "out" },
            age,
            if p.lease_valid { "valid" } else { "expired" },
            if p.leaving { "yes" } else { "no" }
        );
    }
}
