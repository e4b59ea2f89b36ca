//! The control-plane benchmark's output: a table for people, the verdicts on the node-lease
//! targets, and one JSON document for tools (rates with their units in the field names).

use std::{collections::BTreeMap, fmt::Write as _};

use serde_json::{Value, json};

pub use crate::bench::verdict::Verdict;

use super::{
    Case, MAX_NODE_LEASE_WRITES_PER_NODE, Measurement, Mode, NODE_LEASE_RENEW, SERVICE_LEASE_RETRY,
};
use crate::env::ApiKind;

/// How far (writes/s per node) node-lease rows with the same agent count may differ across
/// Service counts and still count as independent of them: one renewal more or less in a short
/// window, not a per-Service cost.
pub const INDEPENDENCE_SLACK: f64 = 0.1;

fn rows(ms: &[Measurement], mode: Mode) -> impl Iterator<Item = &Measurement> {
    ms.iter().filter(move |m| m.case.mode == mode)
}

/// Why `m` did not converge, from its last poll: which of the conditions were missing.
fn why_unconverged(m: &Measurement) -> String {
    let o = &m.converge_state;
    let mut why = Vec::new();
    if o.ready < m.case.agents {
        why.push(format!("{} of {} agents ready", o.ready, m.case.agents));
    }
    if o.none > 0 {
        why.push(format!("{} VIPs without an owner", o.none));
    }
    if o.multiple > 0 {
        why.push(format!("{} VIPs with several owners", o.multiple));
    }
    if why.is_empty() {
        why.push(format!("{o}"));
    }
    why.join(", ")
}

/// The verdicts on what was measured. A case that never converged fails (an election that
/// does not settle is a broken election until shown otherwise, not a slow machine) and is not
/// judged on the rates; a converged case the machine could not keep up with (see
/// `Measurement::saturated`) measures the machine, so it is listed but not judged.
pub fn verdicts(ms: &[Measurement]) -> Vec<Verdict> {
    let mut v = Vec::new();
    for m in ms.iter().filter(|m| !m.converged()) {
        v.push(Verdict {
            name: format!(
                "converged_{}_{}x{}",
                m.case.mode.name(),
                m.case.agents,
                m.case.services
            ),
            text: format!(
                "{}: did not converge within {:.0} s: {} at the timeout (every agent ready and every VIP with exactly one owner needed; at the end of the window: {})",
                m.case.label(),
                m.converge_timeout_s,
                why_unconverged(m),
                m.end
            ),
            value: None,
            limit: Some(m.converge_timeout_s),
            pass: Some(false),
        });
    }
    let (nl, nl_sat): (Vec<&Measurement>, Vec<&Measurement>) = rows(ms, Mode::NodeLease)
        .filter(|m| m.converged())
        .partition(|m| !m.saturated());
    if !nl_sat.is_empty() {
        let list: Vec<String> = nl_sat
            .iter()
            .map(|m| {
                format!(
                    "{}×{} ({:.2} writes/s per node, {:.1} Event writes/s, {}, machine {:.2} busy cores of which agents {:.2})",
                    m.case.agents,
                    m.case.services,
                    m.writes_per_s_per_node(),
                    m.event_writes_per_s(),
                    m.end,
                    m.busy_cores,
                    m.agents_cores
                )
            })
            .collect();
        v.push(Verdict {
            name: "node_lease_saturated_rows".into(),
            text: format!(
                "node-lease rows not judged, the machine could not keep up: {}",
                list.join("; ")
            ),
            value: Some(nl_sat.len() as f64),
            limit: None,
            pass: None,
        });
    }
    if nl.is_empty() && !nl_sat.is_empty() {
        v.push(Verdict {
            name: "node_lease_writes_per_node".into(),
            text: format!(
                "node-lease: no case could be judged (every converged case saturated), target ≤ {MAX_NODE_LEASE_WRITES_PER_NODE} writes/s per node"
            ),
            value: None,
            limit: Some(MAX_NODE_LEASE_WRITES_PER_NODE),
            pass: Some(false),
        });
    }
    if !nl.is_empty() {
        let worst = nl
            .iter()
            .max_by(|a, b| {
                a.writes_per_s_per_node()
                    .total_cmp(&b.writes_per_s_per_node())
            })
            .expect("not empty");
        let max = worst.writes_per_s_per_node();
        v.push(Verdict {
            name: "node_lease_writes_per_node".into(),
            text: format!(
                "node-lease: max {max:.2} writes/s per node ({}×{}; renewal every {:?}), target ≤ {MAX_NODE_LEASE_WRITES_PER_NODE}",
                worst.case.agents, worst.case.services, NODE_LEASE_RENEW
            ),
            value: Some(max),
            limit: Some(MAX_NODE_LEASE_WRITES_PER_NODE),
            pass: Some(max <= MAX_NODE_LEASE_WRITES_PER_NODE),
        });

        let mut by_agents: BTreeMap<usize, Vec<f64>> = BTreeMap::new();
        for m in &nl {
            by_agents
                .entry(m.case.agents)
                .or_default()
                .push(m.writes_per_s_per_node());
        }
        let spreads: Vec<(usize, f64)> = by_agents
            .iter()
            .filter(|(_, r)| r.len() > 1)
            .map(|(a, r)| {
                let hi = r.iter().copied().fold(f64::MIN, f64::max);
                let lo = r.iter().copied().fold(f64::MAX, f64::min);
                (*a, hi - lo)
            })
            .collect();
        if let Some(&(agents, spread)) = spreads.iter().max_by(|a, b| a.1.total_cmp(&b.1)) {
            v.push(Verdict {
                name: "node_lease_independent_of_services".into(),
                text: format!(
                    "node-lease: writes/s per node vary by at most {spread:.2} across Service counts (worst at {agents} agents), target ≤ {INDEPENDENCE_SLACK}"
                ),
                value: Some(spread),
                limit: Some(INDEPENDENCE_SLACK),
                pass: Some(spread <= INDEPENDENCE_SLACK),
            });
        }

        let reads = nl.iter().map(|m| m.requests.reads()).sum::<u64>();
        let worst = nl
            .iter()
            .max_by(|a, b| a.reads_per_s().total_cmp(&b.reads_per_s()))
            .expect("not empty");
        v.push(Verdict {
            name: "node_lease_reads_only_watches".into(),
            text: format!(
                "node-lease: {reads} GET/LIST requests in all steady-state windows (max {:.2}/s at {}×{}); reads only through watches, target 0",
                worst.reads_per_s(),
                worst.case.agents,
                worst.case.services
            ),
            value: Some(worst.reads_per_s()),
            limit: Some(0.0),
            pass: Some(reads == 0),
        });
    }

    let lps: Vec<&Measurement> = rows(ms, Mode::LeasePerService).collect();
    let size = |m: &&&Measurement| m.case.agents * m.case.services;
    let kept: Vec<&Measurement> = lps
        .iter()
        .copied()
        .filter(|m| m.converged() && !m.saturated())
        .collect();
    if let (Some(lo), Some(hi)) = (kept.iter().min_by_key(size), kept.iter().max_by_key(size)) {
        v.push(Verdict {
            name: "lease_per_service_growth".into(),
            text: format!(
                "lease-per-service: {:.0} reads/s at {}×{} → {:.0} reads/s at {}×{} (demanded {:.0}: every node GETs every Lease every {:?})",
                lo.reads_per_s(),
                lo.case.agents,
                lo.case.services,
                hi.reads_per_s(),
                hi.case.agents,
                hi.case.services,
                hi.case.demanded_reads_per_s(),
                SERVICE_LEASE_RETRY,
            ),
            value: Some(hi.reads_per_s()),
            limit: None,
            pass: None,
        });
    }
    let sat: Vec<String> = lps
        .iter()
        .filter(|m| m.saturated())
        .map(|m| {
            format!(
                "{}×{} (achieved {:.0} of {:.0} demanded reads/s, {})",
                m.case.agents,
                m.case.services,
                m.reads_per_s(),
                m.case.demanded_reads_per_s(),
                m.end
            )
        })
        .collect();
    if !sat.is_empty() {
        v.push(Verdict {
            name: "lease_per_service_saturated_rows".into(),
            text: format!(
                "lease-per-service rows the machine could not serve: {}",
                sat.join("; ")
            ),
            value: Some(sat.len() as f64),
            limit: None,
            pass: None,
        });
    }

    // Same agents and Services in both modes, both measured in full: how many times the
    // requests.
    let pairs: Vec<(Case, f64)> = kept
        .iter()
        .filter_map(|l| {
            let n = nl
                .iter()
                .find(|n| n.case.agents == l.case.agents && n.case.services == l.case.services)?;
            (n.requests_per_s() > 0.0).then(|| (l.case, l.requests_per_s() / n.requests_per_s()))
        })
        .collect();
    if let Some((case, ratio)) = pairs.iter().max_by(|a, b| a.1.total_cmp(&b.1)) {
        v.push(Verdict {
            name: "lease_per_service_vs_node_lease".into(),
            text: format!(
                "lease-per-service makes up to {ratio:.0}× the API requests of node-lease ({}×{})",
                case.agents, case.services
            ),
            value: Some(*ratio),
            limit: None,
            pass: None,
        });
    }

    if !ms.is_empty() {
        let bad: Vec<String> = ms
            .iter()
            .filter(|m| !m.end.single_owner())
            .map(|m| {
                format!(
                    "{} {}×{}",
                    m.case.mode.name(),
                    m.case.agents,
                    m.case.services
                )
            })
            .collect();
        v.push(Verdict {
            name: "single_owner_at_end".into(),
            text: if bad.is_empty() {
                "every VIP had exactly one owner at the end of every window".into()
            } else {
                format!(
                    "VIPs without exactly one owner at the end: {}",
                    bad.join(", ")
                )
            },
            value: Some(bad.len() as f64),
            limit: None,
            pass: None,
        });
    }
    v
}

/// [`verdicts`] of the rows measured on `api`; on kube-apiserver the names start with `kube_`
/// and the texts with `kube-apiserver: `, so both servers' verdicts fit in one document.
pub fn verdicts_on(api: ApiKind, ms: &[Measurement]) -> Vec<Verdict> {
    let mine: Vec<Measurement> = ms.iter().filter(|m| m.api == api).cloned().collect();
    if mine.is_empty() {
        return Vec::new();
    }
    let mut v = verdicts(&mine);
    if api == ApiKind::Kube {
        for x in &mut v {
            x.name = format!("kube_{}", x.name);
            x.text = format!("kube-apiserver: {}", x.text);
        }
    }
    v
}

fn note(m: &Measurement) -> &'static str {
    if !m.converged() {
        "NOT CONVERGED"
    } else if m.saturated() {
        "SATURATED"
    } else {
        ""
    }
}

fn owners_cell(m: &Measurement) -> String {
    if m.end.single_owner() {
        "ok".into()
    } else {
        format!("{}n/{}m", m.end.none, m.end.multiple)
    }
}

/// The table, the skipped cases, the verdicts and the plot path.
pub fn table(
    ms: &[Measurement],
    skipped: &[(Case, String)],
    verdicts: &[Verdict],
    plot: &str,
    window_s: f64,
) -> String {
    let mut s = String::new();
    let _ = writeln!(
        s,
        "Agent API requests per second in steady state (window {window_s:.0} s, from when every VIP had one owner or the wait timed out)"
    );
    let _ = writeln!(
        s,
        "{:<17} {:>6} {:>5} {:>9} {:>7} {:>9} {:>8} {:>9} {:>9} {:>10} {:>9} {:>7} {:>5} {:>5} {:>5}  note",
        "mode",
        "agents",
        "svcs",
        "reads/s",
        "watch/s",
        "writes/s",
        "w/s/node",
        "lease_w/s",
        "event_w/s",
        "demand_r/s",
        "converge",
        "owners",
        "srv",
        "agt",
        "cpu"
    );
    for m in ms {
        let converge = m
            .converge_s
            .map_or("timeout".to_string(), |t| format!("{t:.1}s"));
        let _ = writeln!(
            s,
            "{:<17} {:>6} {:>5} {:>9.1} {:>7.2} {:>9.2} {:>8.3} {:>9.2} {:>9.2} {:>10.0} {:>9} {:>7} {:>5.2} {:>5.2} {:>5.2}  {}",
            m.case.mode.name(),
            m.case.agents,
            m.case.services,
            m.reads_per_s(),
            m.watch_opens_per_s(),
            m.writes_per_s(),
            m.writes_per_s_per_node(),
            m.lease_writes_per_s(),
            m.event_writes_per_s(),
            m.case.demanded_reads_per_s(),
            converge,
            owners_cell(m),
            m.apiserver_cores,
            m.agents_cores,
            m.busy_cores,
            note(m)
        );
    }
    let _ = writeln!(
        s,
        "reads = GET+LIST, watch = new watch requests, writes = create+update+patch+delete; demand_r/s = nodes × services / {:?} retry",
        SERVICE_LEASE_RETRY
    );
    let _ = writeln!(
        s,
        "(lease-per-service); srv / agt / cpu = cores used by the API server process / all agents / the whole machine (other"
    );
    let _ = writeln!(
        s,
        "load included); owners: ok = every VIP exactly one owner at the end (else VIPs with none / several);"
    );
    let _ = writeln!(
        s,
        "SATURATED = converged, but under {:.0}% of the demanded rate (listed, not judged); NOT CONVERGED = not every",
        super::SATURATION * 100.0
    );
    let _ = writeln!(
        s,
        "agent ready with every VIP exactly one owner within the timeout (a FAIL)."
    );
    for (c, why) in skipped {
        let _ = writeln!(
            s,
            "skipped: {} {}×{}: {why}",
            c.mode.name(),
            c.agents,
            c.services
        );
    }
    let _ = writeln!(s, "plot: {plot}");
    let _ = writeln!(s);
    for v in verdicts {
        let _ = writeln!(s, "{}: {}", v.mark(), v.text);
    }
    s
}

/// The kube-apiserver table: requests from the audit log, bytes from the agents' relays, the
/// skipped cases and the verdicts.
pub fn kube_table(
    ms: &[Measurement],
    skipped: &[(Case, String)],
    verdicts: &[Verdict],
    plot: &str,
    window_s: f64,
) -> String {
    let mut s = String::new();
    let _ = writeln!(
        s,
        "kube-apiserver: agent API requests and traffic per second in steady state (window {window_s:.0} s, from when every VIP had one owner or the wait timed out)"
    );
    let _ = writeln!(
        s,
        "{:<17} {:>6} {:>5} {:>8} {:>7} {:>8} {:>8} {:>9} {:>9} {:>11} {:>10} {:>9} {:>7} {:>5} {:>5} {:>5}  note",
        "mode",
        "agents",
        "svcs",
        "reads/s",
        "watch/s",
        "writes/s",
        "w/s/node",
        "lease_w/s",
        "event_w/s",
        "down_B/s/nd",
        "up_B/s/nd",
        "converge",
        "owners",
        "srv",
        "agt",
        "cpu"
    );
    for m in ms {
        let converge = m
            .converge_s
            .map_or("timeout".to_string(), |t| format!("{t:.1}s"));
        let bytes = |b: Option<f64>| b.map_or("-".to_string(), |b| format!("{b:.0}"));
        let _ = writeln!(
            s,
            "{:<17} {:>6} {:>5} {:>8.2} {:>7.2} {:>8.2} {:>8.3} {:>9.2} {:>9.2} {:>11} {:>10} {:>9} {:>7} {:>5.2} {:>5.2} {:>5.2}  {}",
            m.case.mode.name(),
            m.case.agents,
            m.case.services,
            m.reads_per_s(),
            m.watch_opens_per_s(),
            m.writes_per_s(),
            m.writes_per_s_per_node(),
            m.lease_writes_per_s(),
            m.event_writes_per_s(),
            bytes(m.from_api_bytes_per_s_per_node()),
            bytes(m.to_api_bytes_per_s_per_node()),
            converge,
            owners_cell(m),
            m.apiserver_cores,
            m.agents_cores,
            m.busy_cores,
            note(m)
        );
    }
    let _ = writeln!(
        s,
        "requests = kube-apiserver audit records of the agents' ServiceAccount (by node claim) in the window: reads = get+list,"
    );
    let _ = writeln!(
        s,
        "watch = watch requests started, writes = create+update+patch+delete; down_B/s/nd / up_B/s/nd = bytes per second per agent"
    );
    let _ = writeln!(
        s,
        "from / to kube-apiserver at each agent's own TCP relay (TLS bytes: records, HTTP/2 framing and keepalives included),"
    );
    let _ = writeln!(
        s,
        "averaged over the agents; srv / agt / cpu = cores used by kube-apiserver + etcd / all agents / the whole machine;"
    );
    let _ = writeln!(
        s,
        "owners and notes as in the in-repo table (NOT CONVERGED is a FAIL)."
    );
    for (c, why) in skipped {
        let _ = writeln!(
            s,
            "skipped: {} {}×{}: {why}",
            c.mode.name(),
            c.agents,
            c.services
        );
    }
    let _ = writeln!(s, "plot: {plot}");
    let _ = writeln!(s);
    for v in verdicts {
        let _ = writeln!(s, "{}: {}", v.mark(), v.text);
    }
    s
}

/// The cases measured on both servers, side by side: writes per node, reads and watch starts
/// per second. Empty when no case ran on both.
pub fn compare_table(ms: &[Measurement]) -> String {
    let pairs: Vec<(&Measurement, &Measurement)> = ms
        .iter()
        .filter(|m| m.api == ApiKind::InRepo)
        .filter_map(|a| {
            let b = ms
                .iter()
                .find(|b| b.api == ApiKind::Kube && b.case == a.case)?;
            Some((a, b))
        })
        .collect();
    let mut s = String::new();
    if pairs.is_empty() {
        return s;
    }
    let _ = writeln!(
        s,
        "in-repo server vs kube-apiserver, same cases (per second; writes per node)"
    );
    let _ = writeln!(
        s,
        "{:<17} {:>6} {:>5} {:>10} {:>10} {:>9} {:>9} {:>9} {:>9}",
        "mode",
        "agents",
        "svcs",
        "w/s/nd in",
        "w/s/nd kube",
        "reads in",
        "reads kube",
        "watch in",
        "watch kube"
    );
    for (a, b) in pairs {
        let _ = writeln!(
            s,
            "{:<17} {:>6} {:>5} {:>10.3} {:>10.3} {:>9.2} {:>9.2} {:>9.2} {:>9.2}",
            a.case.mode.name(),
            a.case.agents,
            a.case.services,
            a.writes_per_s_per_node(),
            b.writes_per_s_per_node(),
            a.reads_per_s(),
            b.reads_per_s(),
            a.watch_opens_per_s(),
            b.watch_opens_per_s()
        );
    }
    s
}

fn row_json(m: &Measurement) -> Value {
    let mut row = row_fields(m);
    if let (Some(o), Some(down), Some(up)) = (
        row.as_object_mut(),
        m.from_api_bytes_per_s_per_node(),
        m.to_api_bytes_per_s_per_node(),
    ) {
        o.insert("from_api_bytes_per_s_per_node".into(), json!(down));
        o.insert("to_api_bytes_per_s_per_node".into(), json!(up));
    }
    row
}

fn row_fields(m: &Measurement) -> Value {
    json!({
        "apiserver": m.api.to_string(),
        "mode": m.case.mode.name(),
        "agents": m.case.agents,
        "services": m.case.services,
        "window_s": m.window_s,
        "setup_s": m.setup_s,
        "converge_s": m.converge_s,
        "converged": m.converge_s.is_some(),
        "reads_per_s": m.reads_per_s(),
        "gets": m.requests.gets,
        "lists": m.requests.lists,
        "watch_opens_per_s": m.watch_opens_per_s(),
        "writes_per_s": m.writes_per_s(),
        "writes_per_s_per_node": m.writes_per_s_per_node(),
        "max_node_writes_per_s": m.max_node_writes_per_s(),
        "lease_writes_per_s": m.lease_writes_per_s(),
        "event_writes_per_s": m.event_writes_per_s(),
        "requests_per_s": m.requests_per_s(),
        "demanded_reads_per_s": m.case.demanded_reads_per_s(),
        "demanded_writes_per_s": m.case.demanded_writes_per_s(),
        "saturated": m.saturated(),
        "machine_busy_cores": m.busy_cores,
        "apiserver_cores": m.apiserver_cores,
        "agents_cores": m.agents_cores,
        "single_owner_at_end": m.end.single_owner(),
        "vips_single_owner": m.end.single,
        "vips_no_owner": m.end.none,
        "vips_several_owners": m.end.multiple,
        "agents_ready_at_end": m.end.ready,
    })
}

/// The JSON document (one line when printed with `to_string`).
pub fn json(
    ms: &[Measurement],
    skipped: &[(Case, String)],
    verdicts: &[Verdict],
    plot: &str,
    total_s: f64,
) -> Value {
    let verdicts: serde_json::Map<String, Value> = verdicts
        .iter()
        .map(|v| {
            (
                v.name.to_owned(),
                json!({"value": v.value, "limit": v.limit, "pass": v.pass, "text": v.text}),
            )
        })
        .collect();
    json!({
        "bench": "control-plane",
        "rows": ms.iter().map(row_json).collect::<Vec<_>>(),
        "skipped": skipped.iter().map(|(c, why)| json!({
            "mode": c.mode.name(), "agents": c.agents, "services": c.services, "reason": why,
        })).collect::<Vec<_>>(),
        "verdicts": verdicts,
        "plot": plot,
        "total_s": total_s,
        "settings": {
            "service_lease_retry_s": SERVICE_LEASE_RETRY.as_secs_f64(),
            "node_lease_renew_s": NODE_LEASE_RENEW.as_secs_f64(),
            "max_node_lease_writes_per_node_per_s": MAX_NODE_LEASE_WRITES_PER_NODE,
        },
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::bench::control_plane::{Requests, fixture::Ownership};

    fn m(mode: Mode, agents: usize, services: usize, lease_writes: u64, gets: u64) -> Measurement {
        Measurement {
            case: Case {
                mode,
                agents,
                services,
            },
            setup_s: 1.0,
            converge_s: Some(2.0),
            converge_timeout_s: 60.0,
            converge_state: Ownership::default(),
            window_s: 20.0,
            requests: Requests {
                gets,
                writes: lease_writes,
                lease_writes,
                max_node_writes: lease_writes / agents as u64,
                ..Requests::default()
            },
            busy_cores: 1.0,
            apiserver_cores: 0.5,
            agents_cores: 0.2,
            end: Ownership {
                answering: agents,
                ready: agents,
                single: services,
                ..Ownership::default()
            },
            api: ApiKind::InRepo,
            relay: None,
        }
    }

    #[test]
    fn kube_rows_are_judged_apart_and_show_their_bytes() {
        let mut k = m(Mode::NodeLease, 3, 10, 20, 0);
        k.api = ApiKind::Kube;
        k.relay = Some(crate::env::cluster::RelayBytes {
            to_api: 6_000,
            from_api: 12_000,
        });
        let ms = vec![m(Mode::NodeLease, 3, 10, 20, 0), k];
        let v = verdicts_on(ApiKind::Kube, &ms);
        let get = |n: &str| v.iter().find(|x| x.name == n).expect(n).clone();
        assert_eq!(get("kube_node_lease_writes_per_node").pass, Some(true));
        assert!(v.iter().all(|x| x.text.starts_with("kube-apiserver: ")));
        assert_eq!(ms[1].from_api_bytes_per_s_per_node(), Some(200.0));
        let doc = json(&ms, &[], &v, "x.svg", 1.0);
        assert_eq!(doc["rows"][1]["apiserver"], json!("kube"));
        assert_eq!(
            doc["rows"][1]["from_api_bytes_per_s_per_node"],
            json!(200.0)
        );
        assert!(
            doc["rows"][0]
                .get("from_api_bytes_per_s_per_node")
                .is_none()
        );
        let text = kube_table(&ms[1..], &[], &v, "x.svg", 20.0);
        assert!(text.contains("TLS bytes"), "{text}");
        assert!(compare_table(&ms).contains("in-repo server vs kube-apiserver"));
    }

    #[test]
    fn node_lease_verdicts_pass_on_renewals_only() {
        let ms = vec![
            m(Mode::NodeLease, 3, 10, 20, 0),
            m(Mode::NodeLease, 3, 1000, 21, 0),
            m(Mode::LeasePerService, 3, 10, 100, 300),
        ];
        let v = verdicts(&ms);
        let get = |n: &str| v.iter().find(|x| x.name == n).expect(n).clone();
        assert_eq!(get("node_lease_writes_per_node").pass, Some(true));
        assert_eq!(get("node_lease_independent_of_services").pass, Some(true));
        assert_eq!(get("node_lease_reads_only_watches").pass, Some(true));
        assert_eq!(get("lease_per_service_vs_node_lease").value, Some(20.0));
        let doc = json(&ms, &[], &v, "x.svg", 1.0);
        assert_eq!(doc["rows"][0]["writes_per_s"], json!(1.0));
        assert_eq!(doc["rows"][2]["reads_per_s"], json!(15.0));
        let text = table(&ms, &[], &v, "x.svg", 20.0);
        assert!(
            text.contains("PASS: node-lease: max 0.35 writes/s per node"),
            "{text}"
        );
    }

    #[test]
    fn polling_or_per_service_writes_fail_node_lease() {
        let ms = vec![
            m(Mode::NodeLease, 3, 10, 20, 5),
            m(Mode::NodeLease, 3, 1000, 200, 0),
        ];
        let v = verdicts(&ms);
        assert!(
            v.iter()
                .filter(|x| x.pass.is_some())
                .all(|x| x.pass == Some(false))
        );
    }

    /// A converged case that achieved under 80 % of its renewals (too few lease writes).
    fn saturated(agents: usize, services: usize) -> Measurement {
        let mut m = m(Mode::NodeLease, agents, services, 1, 0);
        m.requests.event_writes = 5000;
        m
    }

    #[test]
    fn saturated_rows_are_listed_not_judged() {
        let ms = vec![m(Mode::NodeLease, 3, 10, 20, 0), saturated(50, 1000)];
        assert!(ms[1].saturated());
        let v = verdicts(&ms);
        let get = |n: &str| v.iter().find(|x| x.name == n).expect(n).clone();
        assert_eq!(get("node_lease_writes_per_node").pass, Some(true));
        let listed = get("node_lease_saturated_rows");
        assert_eq!(listed.pass, None);
        assert!(listed.text.contains("50×1000"), "{}", listed.text);
        assert!(
            listed.text.contains("250.0 Event writes/s"),
            "{}",
            listed.text
        );
    }

    #[test]
    fn a_case_that_never_converged_fails_and_says_which_and_why() {
        let mut stuck = m(Mode::NodeLease, 10, 100, 60, 0);
        stuck.converge_s = None;
        stuck.converge_state = Ownership {
            answering: 10,
            ready: 10,
            single: 97,
            multiple: 3,
            ..Ownership::default()
        };
        let ms = vec![m(Mode::NodeLease, 3, 10, 20, 0), stuck];
        let v = verdicts(&ms);
        let failed: Vec<&Verdict> = v.iter().filter(|x| x.pass == Some(false)).collect();
        assert_eq!(failed.len(), 1, "{v:#?}");
        assert_eq!(failed[0].name, "converged_node-lease_10x100");
        assert!(
            failed[0]
                .text
                .starts_with("node-lease 10 agents × 100 services: did not converge within 60 s: 3 VIPs with several owners"),
            "{}",
            failed[0].text
        );
        assert!(crate::bench::verdict::any_failed(&v));
    }

    #[test]
    fn an_unconverged_case_is_not_hidden_as_saturated() {
        let mut stuck = m(Mode::LeasePerService, 3, 10, 0, 0);
        stuck.converge_s = None;
        let v = verdicts(&[stuck.clone()]);
        assert!(
            v.iter()
                .all(|x| !x.name.contains("saturated") || !x.text.contains("3×10")),
            "{v:#?}"
        );
        assert_eq!(
            v.iter()
                .find(|x| x.name == "converged_lease-per-service_3x10")
                .map(|x| x.pass),
            Some(Some(false))
        );
        let text = table(&[stuck], &[], &v, "x.svg", 20.0);
        assert!(text.contains("NOT CONVERGED"), "{text}");
        assert!(
            text.contains("FAIL: lease-per-service 3 agents × 10 services: did not converge"),
            "{text}"
        );
    }

    #[test]
    fn node_lease_with_no_judgeable_case_fails() {
        let v = verdicts(&[saturated(3, 10)]);
        let get = |n: &str| v.iter().find(|x| x.name == n).expect(n).clone();
        assert_eq!(get("node_lease_writes_per_node").pass, Some(false));
    }
}
