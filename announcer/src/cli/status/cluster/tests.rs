//! The cluster view from hand-built Services and AddressPools: which row each ingress IP gets,
//! which pool it is attributed to, and the table and JSON an operator reads.

use k8s_openapi::{api::core::v1::Service, jiff::Timestamp};
use serde_json::{Value, json};

use super::*;
use crate::state::announced::{CONDITION_TYPE, REASON_ANNOUNCED, REASON_PARTIAL};

const NOW: &str = "2025-01-02T03:04:05Z";

fn now() -> Timestamp {
    NOW.parse().unwrap()
}

/// A LoadBalancer Service `ns/name` with `ips` in its ingress and, if `message` is given, an
/// `announcer.dev/Announced` condition with it, last changed `age_s` before [`NOW`].
fn service(ns: &str, name: &str, ips: &[&str], condition: Option<(&str, &str, i64)>) -> Service {
    let mut status = json!({
        "loadBalancer": {"ingress": ips.iter().map(|ip| json!({"ip": ip})).collect::<Vec<_>>()},
    });
    if let Some((reason, message, age_s)) = condition {
        let at = Timestamp::from_second(now().as_second() - age_s).unwrap();
        status["conditions"] = json!([
            {"type": "other.example/Thing", "status": "True", "reason": "X", "message": "",
             "lastTransitionTime": "2020-01-01T00:00:00Z"},
            {"type": CONDITION_TYPE,
             "status": if reason == REASON_ANNOUNCED { "True" } else { "False" },
             "reason": reason, "message": message, "lastTransitionTime": at.to_string()},
        ]);
    }
    serde_json::from_value(json!({
        "metadata": {"namespace": ns, "name": name},
        "spec": {"type": "LoadBalancer", "ports": [{"port": 80}]},
        "status": status,
    }))
    .unwrap()
}

fn pool(name: &str, addresses: &[&str], created: &str, valid: bool) -> AddressPool {
    serde_json::from_value(json!({
        "apiVersion": "announcer.dev/v1alpha1", "kind": "AddressPool",
        "metadata": {"name": name, "creationTimestamp": created},
        "spec": {"addresses": addresses},
        "status": {"conditions": [{
            "type": "Valid", "status": if valid { "True" } else { "False" }, "reason": "R",
            "message": "", "lastTransitionTime": created,
        }]},
    }))
    .unwrap()
}

fn pools() -> Vec<AddressPool> {
    vec![
        pool("v6", &["fd00::/120"], "2024-01-01T00:00:00Z", true),
        pool("lan", &["10.0.0.0/24"], "2024-01-01T00:00:00Z", true),
    ]
}

fn row<'a>(rows: &'a [ClusterRow], vip: &str, service: &str) -> &'a ClusterRow {
    rows.iter()
        .find(|r| r.vip.to_string() == vip && r.service == service)
        .unwrap_or_else(|| panic!("no row {vip} {service} in {rows:#?}"))
}

#[test]
fn an_announced_vip_has_its_service_pool_node_interface_and_the_conditions_age() {
    let svc = service(
        "shop",
        "web",
        &["10.0.0.5"],
        Some((REASON_ANNOUNCED, "10.0.0.5 by node-a on eth0", 300)),
    );
    let rows = rows(&[svc], &pools(), now());
    assert_eq!(
        rows,
        vec![ClusterRow {
            vip: "10.0.0.5".parse().unwrap(),
            service: "shop/web".into(),
            pool: Some("lan".into()),
            node: Some("node-a".into()),
            iface: Some("eth0".into()),
            since: Some("2025-01-02T02:59:05Z".into()),
            age_s: Some(300),
            state: VipState::Announced,
        }]
    );
}

#[test]
fn a_partially_announced_service_has_an_announced_and_a_not_announced_row() {
    let svc = service(
        "shop",
        "dual",
        &["10.0.0.6", "fd00::6"],
        Some((REASON_PARTIAL, "fd00::6 by node-b on eth1", 60)),
    );
    let rows = rows(&[svc], &pools(), now());
    assert_eq!(rows.len(), 2);
    let v4 = row(&rows, "10.0.0.6", "shop/dual");
    assert_eq!(v4.state, VipState::NotAnnounced);
    assert_eq!((v4.node.as_deref(), v4.iface.as_deref()), (None, None));
    // The condition's time is when some owner changed, not when this IP lost one.
    assert_eq!((v4.since.as_deref(), v4.age_s), (None, None));
    assert_eq!(v4.pool.as_deref(), Some("lan"));
    let v6 = row(&rows, "fd00::6", "shop/dual");
    assert_eq!(v6.state, VipState::Announced);
    assert_eq!(v6.node.as_deref(), Some("node-b"));
    assert_eq!(v6.iface.as_deref(), Some("eth1"));
    assert_eq!(v6.age_s, Some(60));
    assert_eq!(v6.pool.as_deref(), Some("v6"));
}

#[test]
fn a_service_without_the_condition_has_not_announced_rows() {
    let rows = rows(&[service("a", "b", &["10.0.0.7"], None)], &pools(), now());
    assert_eq!(rows.len(), 1);
    assert_eq!(rows[0].state, VipState::NotAnnounced);
    assert_eq!(rows[0].node, None);
    assert_eq!(rows[0].age_s, None);
}

#[test]
fn an_ip_in_no_pool_has_no_pool_and_still_its_owner() {
    let svc = service(
        "a",
        "b",
        &["192.0.2.1"],
        Some((REASON_ANNOUNCED, "192.0.2.1 by node-c on eth0", 5)),
    );
    let rows = rows(std::slice::from_ref(&svc), &pools(), now());
    assert_eq!(rows[0].pool, None);
    assert_eq!(rows[0].node.as_deref(), Some("node-c"));
    // Without the CRD (no pools at all) likewise.
    let rows = super::rows(&[svc], &[], now());
    assert_eq!(rows[0].pool, None);
    assert_eq!(rows[0].state, VipState::Announced);
}

#[test]
fn rows_are_sorted_by_address_then_service_across_services() {
    let svcs = [
        service("z", "six", &["fd00::1"], None),
        service("b", "ten", &["10.0.0.10"], None),
        service("a", "nine", &["10.0.0.9"], None),
        // Shared address (allow-shared-ip): a row per Service.
        service("a", "shared", &["10.0.0.10"], None),
    ];
    let order: Vec<(String, String)> = rows(&svcs, &pools(), now())
        .into_iter()
        .map(|r| (r.vip.to_string(), r.service))
        .collect();
    let want = [
        ("10.0.0.9", "a/nine"),
        ("10.0.0.10", "a/shared"),
        ("10.0.0.10", "b/ten"),
        ("fd00::1", "z/six"),
    ];
    assert_eq!(
        order,
        want.map(|(a, b)| (a.to_string(), b.to_string())).to_vec()
    );
}

#[test]
fn services_of_other_types_and_hostname_only_ingress_give_no_rows() {
    let mut cluster_ip = service("a", "internal", &["10.0.0.8"], None);
    cluster_ip.spec.as_mut().unwrap().type_ = Some("ClusterIP".into());
    let hostname: Service = serde_json::from_value(json!({
        "metadata": {"namespace": "a", "name": "elb"},
        "spec": {"type": "LoadBalancer"},
        "status": {"loadBalancer": {"ingress": [{"hostname": "lb.example"}]}},
    }))
    .unwrap();
    let pending: Service = serde_json::from_value(json!({
        "metadata": {"namespace": "a", "name": "pending"},
        "spec": {"type": "LoadBalancer"},
    }))
    .unwrap();
    assert_eq!(
        rows(&[cluster_ip, hostname, pending], &pools(), now()),
        vec![]
    );
}

#[test]
fn an_agent_without_a_data_plane_gives_no_interface() {
    let svc = service(
        "a",
        "b",
        &["10.0.0.5"],
        Some((REASON_ANNOUNCED, "10.0.0.5 by node-a on ", 5)),
    );
    let rows = rows(&[svc], &pools(), now());
    assert_eq!(rows[0].node.as_deref(), Some("node-a"));
    assert_eq!(rows[0].iface, None);
}

#[test]
fn the_annotated_pool_wins_then_valid_pools_then_the_older() {
    let pools = vec![
        pool("newer", &["10.1.0.0/24"], "2024-06-01T00:00:00Z", true),
        pool("older", &["10.1.0.0/25"], "2024-01-01T00:00:00Z", true),
        pool("broken", &["10.1.0.0/16"], "2023-01-01T00:00:00Z", false),
    ];
    let plain = service("a", "plain", &["10.1.0.1", "10.1.0.200", "10.1.9.9"], None);
    let mut annotated = service("a", "annotated", &["10.1.0.2"], None);
    annotated.metadata.annotations =
        Some([(ADDRESS_POOL_ANNOTATION.to_string(), "newer".to_string())].into());
    let rows = rows(&[plain, annotated], &pools, now());
    let pool = |vip, svc| row(&rows, vip, svc).pool.as_deref();
    assert_eq!(pool("10.1.0.1", "a/plain"), Some("older"));
    assert_eq!(pool("10.1.0.200", "a/plain"), Some("newer"));
    // Only an invalid pool has it: still named, it is where the address came from.
    assert_eq!(pool("10.1.9.9", "a/plain"), Some("broken"));
    assert_eq!(pool("10.1.0.2", "a/annotated"), Some("newer"));
}

#[test]
fn ages_are_printed_in_their_largest_whole_unit() {
    assert_eq!(short_age(0), "0s");
    assert_eq!(short_age(59), "59s");
    assert_eq!(short_age(300), "5m");
    assert_eq!(short_age(3599), "59m");
    assert_eq!(short_age(2 * 3600 + 59), "2h");
    assert_eq!(short_age(3 * 86400 + 5), "3d");
    // A clock behind the API server's.
    assert_eq!(short_age(-4), "0s");
}

fn report() -> ClusterReport {
    let svcs = [
        service(
            "shop",
            "web",
            &["10.0.0.5", "fd00::5"],
            Some((REASON_PARTIAL, "10.0.0.5 by node-a on eth0", 7200)),
        ),
        service("default", "legacy", &["192.0.2.1"], None),
    ];
    ClusterReport {
        vips: rows(&svcs, &pools(), now()),
        pools_listed: true,
        warnings: vec![],
    }
}

#[test]
fn the_table_has_a_header_and_a_row_per_vip_with_dashes_for_unknowns() {
    let t = render(&report());
    let lines: Vec<Vec<&str>> = t.lines().map(|l| l.split_whitespace().collect()).collect();
    assert_eq!(
        lines,
        vec![
            vec![
                "VIP",
                "SERVICE",
                "POOL",
                "NODE",
                "INTERFACE",
                "AGE",
                "STATE"
            ],
            vec![
                "10.0.0.5",
                "shop/web",
                "lan",
                "node-a",
                "eth0",
                "2h",
                "announced"
            ],
            vec![
                "192.0.2.1",
                "default/legacy",
                "-",
                "-",
                "-",
                "-",
                "not-announced"
            ],
            vec!["fd00::5", "shop/web", "v6", "-", "-", "-", "not-announced"],
        ],
        "{t}"
    );
    // Columns line up: every row's SERVICE starts where the header's does.
    let col = t.lines().next().unwrap().find("SERVICE").unwrap();
    assert!(
        t.lines()
            .skip(1)
            .all(|l| l[col..].starts_with(|c: char| c.is_alphabetic())),
        "{t}"
    );
    assert_eq!(
        render(&ClusterReport {
            vips: vec![],
            pools_listed: false,
            warnings: vec![],
        }),
        "no LoadBalancer Service has an ingress IP\n"
    );
}

#[test]
fn the_json_document_has_every_row_with_nulls_for_unknowns() {
    let doc: Value = serde_json::to_value(report()).unwrap();
    assert_eq!(doc["pools_listed"], true);
    assert_eq!(doc["vips"].as_array().unwrap().len(), 3);
    assert_eq!(
        doc["vips"][0],
        json!({
            "vip": "10.0.0.5", "service": "shop/web", "pool": "lan", "node": "node-a",
            "iface": "eth0", "since": "2025-01-02T01:04:05Z", "age_s": 7200,
            "state": "announced",
        })
    );
    assert_eq!(doc["vips"][2]["state"], "not-announced");
    assert_eq!(doc["vips"][2]["node"], Value::Null);
}

#[test]
fn the_table_prints_byte_for_byte_as_before() {
    // As `announcer status --cluster` printed it when it padded columns by hand.
    let want = concat!(
        "VIP         SERVICE          POOL   NODE     INTERFACE   AGE   STATE\n",
        "10.0.0.5    shop/web         lan    node-a   eth0        2h    announced\n",
        "192.0.2.1   default/legacy   -      -        -           -     not-announced\n",
        "fd00::5     shop/web         v6     -        -           -     not-announced\n",
    );
    assert_eq!(render(&report()), want);
}
