//! `/metrics` of real agents (control plane only, `--no-dataplane`) as Prometheus would scrape
//! it, and the agent's log formats: what an operator's dashboards and log pipeline rely on.

use std::time::Duration;

use announcer_tests::{
    env::{ApiKind, cluster::Cluster},
    on_both_api_servers,
};

const VIPS: [&str; 3] = ["10.0.0.5", "10.0.0.6", "fd00::7"];
const NODES: [&str; 3] = ["node-a", "node-b", "node-c"];
const T: Duration = Duration::from_secs(15);

/// `GET /metrics` of the agent on `127.0.0.1:http`: (content type, body).
fn scrape(http: u16) -> Option<(String, String)> {
    let r = ureq::get(&format!("http://127.0.0.1:{http}/metrics"))
        .timeout(Duration::from_secs(5))
        .call()
        .ok()?;
    let ct = r.content_type().to_owned();
    Some((ct, r.into_string().ok()?))
}

/// The value of the sample `series` (name and labels, exactly as exposed).
fn sample(text: &str, series: &str) -> Option<f64> {
    text.lines()
        .find_map(|l| l.strip_prefix(series)?.strip_prefix(' '))
        .map(|v| v.trim().parse().expect("number"))
}

/// The sum of every sample of `name` (any labels); `None` if there is none.
fn total(text: &str, name: &str) -> Option<f64> {
    let mut found = None;
    for l in text.lines().filter(|l| !l.starts_with('#')) {
        let (series, value) = l.rsplit_once(' ').expect("sample line");
        let metric = series.split('{').next().expect("name");
        if metric == name {
            *found.get_or_insert(0.0) += value.parse::<f64>().expect("value");
        }
    }
    found
}

fn metrics_of(c: &Cluster, node: &str) -> String {
    let http = c.agent(node).expect("agent").http;
    scrape(http).expect("/metrics answers").1
}

async fn cluster(api: ApiKind, name: &str, extra: &[&str]) -> Cluster {
    // The server in the name: both variants run at once, and the scratch directory is named by it.
    let mut c = Cluster::start_on(api, &format!("{name}-{api}")).await;
    for n in NODES {
        c.add_node(n, &[], true).await;
    }
    c.add_service("default", "web", &VIPS[..2], false).await;
    c.add_service("default", "api", &VIPS[2..], false).await;
    let everywhere: Vec<(&str, bool)> = NODES.iter().map(|n| (*n, true)).collect();
    c.set_endpoints("default", "web", &everywhere).await;
    c.set_endpoints("default", "api", &everywhere).await;
    for n in NODES {
        c.start_agent(n, extra);
    }
    c.wait_ready(T).await;
    c.wait_for("one owner per VIP", T, |c| {
        c.owners_of(&VIPS).values().all(|o| o.len() == 1)
    })
    .await;
    c
}

on_both_api_servers! {
async fn metrics_count_owned_vips_and_a_takeover_after_sigkill(api) {
    let mut c = cluster(api, "metrics", &[]).await;

    let (ct, text) = scrape(c.agent("node-a").unwrap().http).expect("/metrics answers");
    assert!(ct.starts_with("application/openmetrics-text"), "{ct}");
    for family in [
        "announcer_vips_owned",
        "announcer_takeovers",
        "announcer_handovers",
        "announcer_partition_overlaps",
        "announcer_takeover_duration_seconds",
        "announcer_lease_renew_duration_seconds",
        "announcer_lease_renew_errors",
        "announcer_heartbeat_missed",
        "announcer_heartbeat_delay_seconds",
        "announcer_heartbeats_received",
        "announcer_heartbeats_rejected",
        "announcer_watch_restarts",
        "announcer_api_errors",
        "announcer_events",
        "announcer_peer_heartbeat_age_seconds",
    ] {
        assert!(
            text.contains(&format!("# TYPE {family} ")),
            "{family} missing:\n{text}"
        );
    }
    // No data plane: its families are absent, not zero.
    assert!(!text.contains("announcer_dataplane_"), "{text}");
    // Lease renewals were timed; heartbeats from both peers arrived.
    assert!(total(&text, "announcer_lease_renew_duration_seconds_count") >= Some(1.0));
    assert!(total(&text, "announcer_heartbeats_received_total") >= Some(1.0));
    assert_eq!(total(&text, "announcer_peers_alive"), Some(2.0), "{text}");

    // Every VIP is owned exactly once across the cluster.
    let owned = |c: &Cluster, nodes: &[&str]| -> f64 {
        nodes
            .iter()
            .map(|n| total(&metrics_of(c, n), "announcer_vips_owned").unwrap_or(0.0))
            .sum()
    };
    assert_eq!(owned(&c, &NODES), VIPS.len() as f64);

    // SIGKILL the owner of the first VIP: a survivor takes it over and times the takeover.
    let victim = c.owners(VIPS[0])[0].clone();
    let survivors: Vec<&str> = NODES.iter().copied().filter(|n| *n != victim).collect();
    let before: f64 = survivors
        .iter()
        .map(|n| total(&metrics_of(&c, n), "announcer_takeovers_total").unwrap_or(0.0))
        .sum();
    c.kill(&victim);
    c.wait_for("a survivor owns every VIP", T, |c| {
        c.owners_of(&VIPS)
            .values()
            .all(|o| o.len() == 1 && o[0] != victim)
    })
    .await;
    let after: Vec<String> = survivors.iter().map(|n| metrics_of(&c, n)).collect();
    let took: f64 = after
        .iter()
        .map(|t| total(t, "announcer_takeovers_total").unwrap_or(0.0))
        .sum();
    assert!(took > before, "takeovers {before} -> {took}");
    let timed: f64 = after
        .iter()
        .map(|t| total(t, "announcer_takeover_duration_seconds_count").unwrap_or(0.0))
        .sum();
    assert!(timed >= 1.0, "no takeover timed:\n{}", after.join("\n"));
    assert_eq!(owned(&c, &survivors), VIPS.len() as f64);

    // A healthy API server: no request of the survivors failed and none of their Events was
    // lost (what a real kube-apiserver rejects, and the in-repo one accepts, shows here).
    for (n, t) in survivors.iter().zip(&after) {
        assert_eq!(total(t, "announcer_api_errors_total"), Some(0.0), "{n}:\n{t}");
        let failed = "announcer_events_total{outcome=\"failed\"}";
        assert_eq!(sample(t, failed), Some(0.0), "{n}:\n{t}");
    }
}
}

on_both_api_servers! {
async fn logs_are_text_by_default_and_json_with_the_flag(api) {
    // The server in the name: both variants run at once, and the scratch directory is named by it.
    let mut c = Cluster::start_on(api, &format!("logs-{api}")).await;
    c.add_node("node-a", &[], true).await;
    c.add_node("node-b", &[], true).await;
    c.add_service("default", "web", &VIPS[..1], false).await;
    c.start_agent("node-a", &[]);
    c.start_agent("node-b", &["--log-format", "json"]);
    c.wait_ready(T).await;

    let read = |n: &str| std::fs::read_to_string(&c.agent(n).unwrap().log).expect("log");
    let text = read("node-a");
    assert!(
        text.contains(" INFO ") && text.contains("agent started"),
        "{text}"
    );
    assert!(
        text.lines()
            .all(|l| serde_json::from_str::<serde_json::Value>(l).is_err()),
        "{text}"
    );

    let json = read("node-b");
    let lines: Vec<serde_json::Value> = json
        .lines()
        .filter(|l| !l.trim().is_empty())
        .map(|l| serde_json::from_str(l).unwrap_or_else(|e| panic!("not JSON ({e}): {l}")))
        .collect();
    assert!(
        lines
            .iter()
            .all(|l| l["level"].is_string() && l["timestamp"].is_string()),
        "{json}"
    );
    let started = lines
        .iter()
        .find(|l| l["fields"]["message"] == "agent started")
        .unwrap_or_else(|| panic!("no start line: {json}"));
    assert_eq!(started["fields"]["node"], "node-b", "{started}");
}
}
