//! The families as Prometheus sees them: encode the registry and read the text back.

use std::{sync::Arc, time::Duration};

use super::*;
use crate::{
    agent::{
        kube::watch::WatchCounters, net::heartbeat_socket::HeartbeatStats,
        published::PublishedState,
    },
    election::ElectionStats,
    state::{AgentState, OwnedVip, PeerState},
};

/// The value of the sample `name{labels}` (labels as printed, e.g. `iface="eth0"`).
fn sample(text: &str, name: &str, labels: &str) -> Option<f64> {
    let prefix = if labels.is_empty() {
        format!("{name} ")
    } else {
        format!("{name}{{{labels}}} ")
    };
    text.lines()
        .find_map(|l| l.strip_prefix(&prefix))
        .map(|v| v.trim().parse().expect("a number"))
}

/// The `# TYPE` of family `name`.
fn type_of(text: &str, name: &str) -> Option<String> {
    let prefix = format!("# TYPE {name} ");
    text.lines()
        .find_map(|l| l.strip_prefix(&prefix))
        .map(str::to_owned)
}

fn agent_state() -> AgentState {
    let vip = |v: &str, iface: &str| OwnedVip {
        vip: v.parse().unwrap(),
        iface: iface.into(),
        service: Some("default/web".into()),
    };
    AgentState {
        node: "node-a".into(),
        election: "node-lease".into(),
        incarnation: 7,
        ready: true,
        dataplane: true,
        owned: vec![
            vip("192.0.2.1", "eth0"),
            vip("192.0.2.2", "eth0"),
            vip("2001:db8::1", "eth1"),
        ]
        .into(),
        peers: vec![
            PeerState {
                node: "node-b".into(),
                alive: true,
                heartbeat_age_ms: Some(150),
                lease_valid: true,
                leaving: false,
            },
            PeerState {
                node: "node-c".into(),
                alive: false,
                heartbeat_age_ms: None,
                lease_valid: true,
                leaving: false,
            },
        ],
        stats: ElectionStats {
            takeovers: 3,
            releases: 1,
            probes: 2,
            probes_answered: 1,
            overlaps: 1,
            lease_writes: 10,
            lease_conflicts: 2,
            lease_failures: 4,
            ..ElectionStats::default()
        },
        api_ok: true,
        standby: false,
    }
}

#[test]
fn agent_families_have_names_units_types_and_labels() {
    let m = Metrics::new();
    let shared = PublishedState::default();
    shared.set(agent_state());
    m.sources().set_state(shared);
    m.sources()
        .set_heartbeat(Arc::new(HeartbeatStats::default()));
    m.sources().set_watches(Arc::new(WatchCounters::default()));
    // Per-peer families have series once a peer was heard.
    m.recorder().heartbeat(&NodeName::from("node-b"), 0, 0.001);
    let text = m.encode();

    for (name, ty) in [
        ("announcer_vips_owned", "gauge"),
        ("announcer_takeovers", "counter"),
        ("announcer_handovers", "counter"),
        ("announcer_partition_overlaps", "counter"),
        ("announcer_lease_renew_errors", "counter"),
        ("announcer_lease_renew_duration_seconds", "histogram"),
        ("announcer_takeover_duration_seconds", "histogram"),
        ("announcer_probe_rtt_seconds", "histogram"),
        ("announcer_heartbeat_missed", "counter"),
        ("announcer_heartbeat_delay_seconds", "gauge"),
        ("announcer_heartbeats_rejected", "counter"),
        ("announcer_watch_restarts", "counter"),
        ("announcer_watch_changes_ignored", "counter"),
        ("announcer_api_errors", "counter"),
        ("announcer_peer_heartbeat_age_seconds", "gauge"),
    ] {
        assert_eq!(type_of(&text, name).as_deref(), Some(ty), "{name}\n{text}");
    }
    assert_eq!(
        sample(&text, "announcer_vips_owned", r#"iface="eth0""#),
        Some(2.0)
    );
    assert_eq!(
        sample(&text, "announcer_vips_owned", r#"iface="eth1""#),
        Some(1.0)
    );
    assert_eq!(sample(&text, "announcer_takeovers_total", ""), Some(3.0));
    assert_eq!(sample(&text, "announcer_handovers_total", ""), Some(1.0));
    assert_eq!(
        sample(&text, "announcer_partition_overlaps_total", ""),
        Some(1.0)
    );
    assert_eq!(
        sample(
            &text,
            "announcer_lease_renew_errors_total",
            r#"reason="conflict""#
        ),
        Some(2.0)
    );
    assert_eq!(
        sample(
            &text,
            "announcer_api_errors_total",
            r#"request="write",resource="leases""#
        ),
        Some(4.0)
    );
    assert_eq!(
        sample(
            &text,
            "announcer_api_errors_total",
            r#"request="watch",resource="services""#
        ),
        Some(0.0)
    );
    assert_eq!(
        sample(
            &text,
            "announcer_watch_restarts_total",
            r#"resource="leases""#
        ),
        Some(0.0)
    );
    assert_eq!(sample(&text, "announcer_peers", ""), Some(2.0));
    assert_eq!(sample(&text, "announcer_peers_alive", ""), Some(1.0));
    assert_eq!(
        sample(
            &text,
            "announcer_peer_heartbeat_age_seconds",
            r#"peer="node-b""#
        ),
        Some(0.15)
    );
    assert_eq!(
        sample(
            &text,
            "announcer_heartbeats_rejected_total",
            r#"reason="bad_tag""#
        ),
        Some(0.0)
    );
    assert_eq!(
        sample(
            &text,
            "announcer_agent_info",
            r#"node="node-a",election="node-lease""#
        ),
        Some(1.0)
    );
    assert_eq!(sample(&text, "announcer_ready", ""), Some(1.0));
    // No data plane configured: its families are absent, not zero.
    assert!(!text.contains("announcer_dataplane_"), "{text}");
    // Every name is namespaced.
    for l in text.lines().filter(|l| !l.starts_with('#')) {
        assert!(l.starts_with("announcer_"), "{l}");
    }
    assert!(text.ends_with("# EOF\n"));
}

#[test]
fn recorded_durations_and_loss_are_exported() {
    let m = Metrics::new();
    let r = m.recorder();
    r.takeover(Duration::from_millis(300));
    r.takeover(Duration::from_millis(40));
    r.lease_write(Duration::from_millis(3));
    r.probe_rtt(Duration::from_micros(200));
    let peer = NodeName::from("node-b");
    r.heartbeat(&peer, 2, 0.004);
    r.heartbeat(&peer, 1, -0.002);
    let text = m.encode();
    assert_eq!(
        sample(&text, "announcer_takeover_duration_seconds_count", ""),
        Some(2.0)
    );
    assert_eq!(
        sample(
            &text,
            "announcer_takeover_duration_seconds_bucket",
            r#"le="0.05""#
        ),
        Some(1.0)
    );
    assert_eq!(
        sample(
            &text,
            "announcer_takeover_duration_seconds_bucket",
            r#"le="0.5""#
        ),
        Some(2.0)
    );
    assert_eq!(
        sample(&text, "announcer_lease_renew_duration_seconds_count", ""),
        Some(1.0)
    );
    assert_eq!(
        sample(&text, "announcer_probe_rtt_seconds_count", ""),
        Some(1.0)
    );
    assert_eq!(
        sample(
            &text,
            "announcer_heartbeat_missed_total",
            r#"peer="node-b""#
        ),
        Some(3.0)
    );
    assert_eq!(
        sample(
            &text,
            "announcer_heartbeat_delay_seconds",
            r#"peer="node-b""#
        ),
        Some(-0.002)
    );
    r.forget_peer(&peer);
    let text = m.encode();
    assert!(!text.contains(r#"peer="node-b""#), "{text}");
}

#[test]
fn loss_is_estimated_from_send_time_gaps_within_an_incarnation() {
    let mut t = LossTracker::new(Duration::from_millis(75));
    let b = NodeName::from("node-b");
    assert_eq!(
        t.observe(&b, 1, 10_000),
        0,
        "first heartbeat: nothing to compare"
    );
    assert_eq!(t.observe(&b, 1, 10_075), 0);
    assert_eq!(
        t.observe(&b, 1, 10_180),
        0,
        "late by 30 ms: jitter, not loss"
    );
    assert_eq!(t.observe(&b, 1, 10_480), 3, "300 ms: three lost");
    assert_eq!(t.observe(&b, 2, 1_000), 0, "a restart is not loss");
    assert_eq!(t.observe(&b, 2, 1_150), 1);
    t.forget(&b);
    assert_eq!(t.observe(&b, 2, 9_000), 0);
}

#[test]
fn the_missed_heartbeat_help_says_loss_is_estimated_from_send_time_gaps() {
    let m = Metrics::new();
    m.recorder().heartbeat(&NodeName::from("node-b"), 1, 0.001);
    let text = m.encode();
    let help = text
        .lines()
        .find_map(|l| l.strip_prefix("# HELP announcer_heartbeat_missed "))
        .expect("the family has a HELP line");
    assert!(help.contains("send times"), "{help}");
    assert!(!help.contains("sequence"), "{help}");
}

#[test]
fn beats_a_peer_sends_to_others_are_not_counted_as_lost() {
    // Each peer's datagrams take their own sequence numbers from the sender's one counter, so
    // in a three-node cluster node-a sees node-b's sequence grow by two per beat.
    let mut t = LossTracker::new(Duration::from_millis(75));
    let b = NodeName::from("node-b");
    let lost: u64 = (0..100u64).map(|k| t.observe(&b, 1, 10_000 + 75 * k)).sum();
    assert_eq!(lost, 0);
}

#[test]
fn a_data_plane_without_interfaces_has_families_but_no_samples() {
    let m = Metrics::new();
    let root = std::env::temp_dir().join(format!("ann-metrics-{}", std::process::id()));
    std::fs::create_dir_all(&root).unwrap();
    m.sources().set_dataplane(root.clone());
    let text = m.encode();
    assert_eq!(
        type_of(&text, "announcer_dataplane_answered").as_deref(),
        Some("counter")
    );
    assert!(
        !text.contains("announcer_dataplane_answered_total{"),
        "{text}"
    );
    assert_eq!(
        type_of(&text, "announcer_dataplane_info").as_deref(),
        Some("gauge")
    );
    assert!(!text.contains("announcer_dataplane_info{"), "{text}");
    std::fs::remove_dir_all(&root).unwrap();
}

#[test]
fn refused_addresses_are_counted_by_rule_and_drop_to_zero_when_the_refusal_ends() {
    use crate::{
        election::ServiceRef,
        placement::{
            eligibility::{Problem, ProblemReason},
            refusal::Refusal,
        },
    };
    let problem = |vip: &str, reason| Problem {
        service: ServiceRef {
            namespace: "default".into(),
            name: "web".into(),
        },
        vip: Some(vip.into()),
        reason,
        message: String::new(),
    };
    let m = Metrics::new();
    let r = m.recorder();
    r.refusals(&[
        problem(
            "10.0.0.2",
            ProblemReason::Refused(Refusal::NodeAddress("b".into())),
        ),
        problem(
            "10.0.0.3",
            ProblemReason::Refused(Refusal::NodeAddress("c".into())),
        ),
        problem("169.254.0.1", ProblemReason::Refused(Refusal::LinkLocal)),
        problem("10.0.0.9", ProblemReason::NoReadyEndpoints),
    ]);
    let text = m.encode();
    let family = "announcer_addresses_refused";
    assert_eq!(type_of(&text, family).as_deref(), Some("gauge"));
    assert_eq!(sample(&text, family, "reason=\"node_address\""), Some(2.0));
    assert_eq!(sample(&text, family, "reason=\"link_local\""), Some(1.0));
    assert_eq!(sample(&text, family, "reason=\"outside_pools\""), Some(0.0));
    assert_eq!(
        sample(&text, family, "reason=\"sharing_conflict\""),
        Some(0.0)
    );
    r.refusals(&[]);
    let text = m.encode();
    assert_eq!(sample(&text, family, "reason=\"node_address\""), Some(0.0));
    r.refused_on_link();
    assert_eq!(
        sample(&m.encode(), "announcer_addresses_refused_on_link_total", ""),
        Some(1.0)
    );
}
