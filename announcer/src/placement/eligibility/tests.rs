//! Tests of the eligibility rules, one rule per test plus a table.

use std::collections::BTreeMap;

use k8s_openapi::{
    api::{
        core::v1::{
            LoadBalancerIngress, LoadBalancerStatus, NodeCondition, NodeStatus, ServiceSpec,
            ServiceStatus,
        },
        discovery::v1::{Endpoint, EndpointConditions},
    },
    apimachinery::pkg::apis::meta::v1::{LabelSelectorRequirement, ObjectMeta},
};

use super::*;

fn labels(kv: &[(&str, &str)]) -> Option<BTreeMap<String, String>> {
    Some(
        kv.iter()
            .map(|(k, v)| (k.to_string(), v.to_string()))
            .collect(),
    )
}

fn svc(ns: &str, name: &str, ips: &[&str]) -> Service {
    Service {
        metadata: ObjectMeta {
            namespace: Some(ns.into()),
            name: Some(name.into()),
            ..Default::default()
        },
        spec: Some(ServiceSpec {
            type_: Some("LoadBalancer".into()),
            ..Default::default()
        }),
        status: Some(ServiceStatus {
            load_balancer: Some(LoadBalancerStatus {
                ingress: Some(
                    ips.iter()
                        .map(|ip| LoadBalancerIngress {
                            ip: Some(ip.to_string()),
                            ..Default::default()
                        })
                        .collect(),
                ),
            }),
            ..Default::default()
        }),
    }
}

fn local(mut s: Service) -> Service {
    s.spec.as_mut().unwrap().external_traffic_policy = Some("Local".into());
    s
}

/// A slice of `svc` in `ns` with endpoints `(node, ready)`; `ready: None` leaves the
/// condition unset.
fn slice(ns: &str, svc: &str, eps: &[(&str, Option<bool>)]) -> EndpointSlice {
    EndpointSlice {
        metadata: ObjectMeta {
            namespace: Some(ns.into()),
            name: Some(format!("{svc}-abcde")),
            labels: labels(&[(SERVICE_NAME_LABEL, svc)]),
            ..Default::default()
        },
        address_type: "IPv4".into(),
        endpoints: Some(
            eps.iter()
                .map(|(node, ready)| Endpoint {
                    addresses: vec!["10.244.0.7".into()],
                    node_name: Some(node.to_string()),
                    conditions: Some(EndpointConditions {
                        ready: *ready,
                        ..Default::default()
                    }),
                    ..Default::default()
                })
                .collect(),
        ),
        ports: None,
    }
}

fn node(name: &str, ready: &str, kv: &[(&str, &str)]) -> Node {
    Node {
        metadata: ObjectMeta {
            name: Some(name.into()),
            labels: labels(kv),
            ..Default::default()
        },
        status: Some(NodeStatus {
            conditions: Some(vec![
                NodeCondition {
                    type_: "MemoryPressure".into(),
                    status: "False".into(),
                    ..Default::default()
                },
                NodeCondition {
                    type_: "Ready".into(),
                    status: ready.into(),
                    ..Default::default()
                },
            ]),
            ..Default::default()
        }),
        ..Default::default()
    }
}

fn nodes(names: &[&str]) -> Vec<Node> {
    names.iter().map(|n| node(n, "True", &[])).collect()
}

fn set(names: &[&str]) -> NodeSet {
    std::sync::Arc::new(names.iter().map(|n| NodeName::from(*n)).collect())
}

fn ip(s: &str) -> IpAddr {
    s.parse().unwrap()
}

fn reasons(p: &Placement) -> Vec<(&str, &str)> {
    p.problems
        .iter()
        .map(|p| (p.vip.as_deref().unwrap_or(""), p.reason.event_reason()))
        .collect()
}

#[test]
fn cluster_policy_vips_share_one_eligible_set() {
    // 10,000 VIPs on 1,000 nodes would otherwise hold 10 million names (issue 29).
    let p = plan(
        &[
            svc("default", "web", &["10.0.0.5"]),
            svc("default", "api", &["10.0.0.6", "fd00::6"]),
        ],
        &[
            slice("default", "web", &[("a", Some(true))]),
            slice("default", "api", &[("b", Some(true))]),
        ],
        &nodes(&["a", "b", "c"]),
        &Selection::default(),
    );
    assert_eq!(p.vips.len(), 3);
    for v in &p.vips[1..] {
        assert!(
            std::sync::Arc::ptr_eq(&v.eligible, &p.vips[0].eligible),
            "{} has a set of its own",
            v.vip
        );
    }
}

#[test]
fn cluster_policy_service_is_eligible_on_every_ready_node() {
    let p = plan(
        &[svc("default", "web", &["10.0.0.5", "fd00::5"])],
        &[slice("default", "web", &[("a", Some(true))])],
        &nodes(&["a", "b", "c"]),
        &Selection::default(),
    );
    assert_eq!(p.problems, vec![]);
    assert_eq!(p.vips.len(), 2);
    assert_eq!(p.vips[0].vip, ip("10.0.0.5"));
    assert_eq!(p.vips[1].vip, ip("fd00::5"));
    for v in &p.vips {
        assert_eq!(v.eligible, set(&["a", "b", "c"]));
        assert_eq!(v.service.to_string(), "default/web");
        assert!(!v.local_policy);
    }
}

#[test]
fn only_load_balancer_services_are_considered() {
    let mut s = svc("default", "web", &["10.0.0.5"]);
    s.spec.as_mut().unwrap().type_ = Some("NodePort".into());
    let p = plan(
        &[s],
        &[slice("default", "web", &[("a", None)])],
        &nodes(&["a"]),
        &Selection::default(),
    );
    assert_eq!(p, Placement::default());
}

#[test]
fn classless_and_our_class_are_ours_other_classes_are_not() {
    let with_class = |name: &str, ip: &str, class: Option<&str>| {
        let mut s = svc("default", name, &[ip]);
        s.spec.as_mut().unwrap().load_balancer_class = class.map(String::from);
        s
    };
    let services = [
        with_class("none", "10.0.0.1", None),
        with_class("ours", "10.0.0.2", Some(DEFAULT_CLASS)),
        with_class("theirs", "10.0.0.3", Some("metallb.io/metallb")),
    ];
    let slices: Vec<_> = ["none", "ours", "theirs"]
        .iter()
        .map(|n| slice("default", n, &[("a", None)]))
        .collect();
    let p = plan(&services, &slices, &nodes(&["a"]), &Selection::default());
    let vips: Vec<_> = p.vips.iter().map(|v| v.vip).collect();
    assert_eq!(vips, vec![ip("10.0.0.1"), ip("10.0.0.2")]);

    // With no class configured, only classless Services are ours.
    let sel = Selection {
        load_balancer_class: None,
        ..Selection::default()
    };
    let p = plan(&services, &slices, &nodes(&["a"]), &sel);
    let vips: Vec<_> = p.vips.iter().map(|v| v.vip).collect();
    assert_eq!(vips, vec![ip("10.0.0.1")]);
}

#[test]
fn service_selector_filters_services() {
    let mut a = svc("default", "a", &["10.0.0.1"]);
    a.metadata.labels = labels(&[("announce", "yes")]);
    let b = svc("default", "b", &["10.0.0.2"]);
    let sel = Selection::with_selectors(
        Some(LabelSelector {
            match_labels: labels(&[("announce", "yes")]),
            ..Default::default()
        }),
        None,
    )
    .unwrap();
    let slices = [
        slice("default", "a", &[("n", None)]),
        slice("default", "b", &[("n", None)]),
    ];
    let p = plan(&[a, b], &slices, &nodes(&["n"]), &sel);
    let vips: Vec<_> = p.vips.iter().map(|v| v.vip).collect();
    assert_eq!(vips, vec![ip("10.0.0.1")]);
}

#[test]
fn hostname_only_ingress_is_reported_not_announced() {
    let mut s = svc("default", "web", &["10.0.0.5"]);
    let ingress = &mut s
        .status
        .as_mut()
        .unwrap()
        .load_balancer
        .as_mut()
        .unwrap()
        .ingress;
    ingress.as_mut().unwrap().push(LoadBalancerIngress {
        hostname: Some("lb.example.com".into()),
        ..Default::default()
    });
    let p = plan(
        &[s],
        &[slice("default", "web", &[("a", None)])],
        &nodes(&["a"]),
        &Selection::default(),
    );
    assert_eq!(p.vips.len(), 1);
    assert_eq!(reasons(&p), vec![("lb.example.com", "NoIp")]);
    assert!(
        p.problems[0].message.contains("lb.example.com"),
        "{}",
        p.problems[0]
    );
}

#[test]
fn a_bad_address_is_reported_and_the_other_vips_still_planned() {
    let p = plan(
        &[svc(
            "default",
            "web",
            &["10.0.0.300", "224.0.0.1", "::ffff:10.0.0.9", "10.0.0.5"],
        )],
        &[slice("default", "web", &[("a", None)])],
        &nodes(&["a"]),
        &Selection::default(),
    );
    let vips: Vec<_> = p.vips.iter().map(|v| v.vip).collect();
    assert_eq!(vips, vec![ip("10.0.0.5")]);
    assert_eq!(
        reasons(&p),
        vec![
            ("10.0.0.300", "BadAddress"),
            ("224.0.0.1", "BadAddress"),
            ("::ffff:10.0.0.9", "BadAddress"),
        ]
    );
    assert!(
        p.problems[0].message.contains("not an IP address"),
        "{}",
        p.problems[0]
    );
    assert!(
        p.problems[1].message.contains("multicast"),
        "{}",
        p.problems[1]
    );
}

#[test]
fn disabled_families_are_reported() {
    let sel = Selection {
        ipv6: false,
        ..Selection::default()
    };
    let p = plan(
        &[svc("default", "web", &["10.0.0.5", "fd00::5"])],
        &[slice("default", "web", &[("a", None)])],
        &nodes(&["a"]),
        &sel,
    );
    let vips: Vec<_> = p.vips.iter().map(|v| v.vip).collect();
    assert_eq!(vips, vec![ip("10.0.0.5")]);
    assert_eq!(reasons(&p), vec![("fd00::5", "FamilyDisabled")]);
    assert!(p.problems[0].message.contains("IPv6 is disabled"));
}

#[test]
fn a_duplicate_address_goes_to_the_first_service_by_namespace_and_name() {
    // Same address spelled differently: still one address.
    let services = [
        svc("b", "x", &["fd00::5"]),
        svc("a", "z", &["fd00:0:0::5"]),
        svc("a", "y", &["10.0.0.1", "10.0.0.1"]),
    ];
    let slices = [
        slice("b", "x", &[("n", None)]),
        slice("a", "z", &[("n", None)]),
        slice("a", "y", &[("n", None)]),
    ];
    for order in [[0, 1, 2], [2, 1, 0], [1, 0, 2]] {
        let svcs: Vec<_> = order.iter().map(|&i| services[i].clone()).collect();
        let p = plan(&svcs, &slices, &nodes(&["n"]), &Selection::default());
        let owners: Vec<_> = p
            .vips
            .iter()
            .map(|v| (v.vip, v.service.to_string()))
            .collect();
        assert_eq!(
            owners,
            vec![
                (ip("10.0.0.1"), "a/y".to_owned()),
                (ip("fd00::5"), "a/z".to_owned())
            ]
        );
        assert_eq!(p.problems.len(), 1);
        assert_eq!(p.problems[0].service.to_string(), "b/x");
        assert_eq!(
            p.problems[0].reason,
            ProblemReason::Duplicate(ServiceRef {
                namespace: "a".into(),
                name: "z".into()
            })
        );
    }
}

#[test]
fn unset_ready_condition_means_ready() {
    let p = plan(
        &[local(svc("default", "web", &["10.0.0.5"]))],
        &[slice("default", "web", &[("a", None), ("b", Some(false))])],
        &nodes(&["a", "b"]),
        &Selection::default(),
    );
    assert_eq!(p.vips[0].eligible, set(&["a"]));
    assert!(p.vips[0].local_policy);
}

#[test]
fn endpoint_without_conditions_is_ready() {
    let mut s = slice("default", "web", &[("a", None)]);
    s.endpoints.as_mut().unwrap()[0].conditions = None;
    let p = plan(
        &[local(svc("default", "web", &["10.0.0.5"]))],
        &[s],
        &nodes(&["a", "b"]),
        &Selection::default(),
    );
    assert_eq!(p.vips[0].eligible, set(&["a"]));
}

#[test]
fn local_policy_with_endpoints_only_on_ineligible_nodes_has_no_eligible_node() {
    let p = plan(
        &[local(svc("default", "web", &["10.0.0.5"]))],
        &[slice("default", "web", &[("gone", Some(true))])],
        &nodes(&["a", "b"]),
        &Selection::default(),
    );
    assert_eq!(p.vips[0].eligible, set(&[]));
    assert_eq!(reasons(&p), vec![("10.0.0.5", "NoEligibleNode")]);
    assert!(
        p.problems[0]
            .message
            .contains("externalTrafficPolicy: Local")
    );
}

#[test]
fn no_ready_endpoint_anywhere_announces_nowhere() {
    let p = plan(
        &[svc("default", "web", &["10.0.0.5"])],
        &[slice("default", "web", &[("a", Some(false))])],
        &nodes(&["a", "b"]),
        &Selection::default(),
    );
    assert_eq!(p.vips.len(), 1, "kept so the core withdraws it");
    assert_eq!(p.vips[0].eligible, set(&[]));
    assert_eq!(reasons(&p), vec![("10.0.0.5", "NoReadyEndpoints")]);
}

#[test]
fn slices_of_other_services_or_namespaces_do_not_count() {
    let mut unlabelled = slice("default", "web", &[("a", None)]);
    unlabelled.metadata.labels = None;
    let p = plan(
        &[svc("default", "web", &["10.0.0.5"])],
        &[
            slice("other", "web", &[("a", None)]),
            slice("default", "web2", &[("a", None)]),
            unlabelled,
        ],
        &nodes(&["a"]),
        &Selection::default(),
    );
    assert_eq!(reasons(&p), vec![("10.0.0.5", "NoReadyEndpoints")]);
}

#[test]
fn node_must_be_ready_and_not_excluded() {
    let mut no_status = node("nostatus", "True", &[]);
    no_status.status = None;
    let ns = [
        node("ready", "True", &[]),
        node("notready", "False", &[]),
        node("unknown", "Unknown", &[]),
        node("excluded", "True", &[(EXCLUDE_LABEL, "")]),
        no_status,
    ];
    assert_eq!(eligible_nodes(&ns, &Selection::default()), *set(&["ready"]));
}

#[test]
fn ignore_exclude_label_lets_labelled_control_plane_nodes_announce() {
    // kubeadm / Talos control-plane-only cluster: every node carries the label.
    let ns = [
        node("cp1", "True", &[(EXCLUDE_LABEL, "")]),
        node("cp2", "True", &[(EXCLUDE_LABEL, "true")]),
        node("cp3", "False", &[(EXCLUDE_LABEL, "")]),
    ];
    assert!(eligible_nodes(&ns, &Selection::default()).is_empty());
    let sel = Selection {
        ignore_exclude_label: true,
        ..Selection::default()
    };
    // Readiness still counts.
    assert_eq!(eligible_nodes(&ns, &sel), *set(&["cp1", "cp2"]));
    // And so does the node selector.
    let sel = Selection {
        ignore_exclude_label: true,
        ..Selection::with_selectors(
            None,
            Some(crate::placement::selector::parse("!cp-excluded").unwrap()),
        )
        .unwrap()
    };
    assert_eq!(eligible_nodes(&ns, &sel), *set(&["cp1", "cp2"]));
}

#[test]
fn node_selector_supports_labels_and_expressions() {
    let req = |key: &str, op: &str, values: &[&str]| LabelSelectorRequirement {
        key: key.into(),
        operator: op.into(),
        values: (!values.is_empty()).then(|| values.iter().map(|v| v.to_string()).collect()),
    };
    let sel = Selection::with_selectors(
        None,
        Some(LabelSelector {
            match_labels: labels(&[("l2", "on")]),
            match_expressions: Some(vec![
                req("zone", "In", &["z1", "z2"]),
                req("tier", "NotIn", &["edge"]),
                req("nic", "Exists", &[]),
                req("spot", "DoesNotExist", &[]),
            ]),
        }),
    )
    .unwrap();
    let ok = [("l2", "on"), ("zone", "z1"), ("nic", "x")];
    let with = |extra: &[(&'static str, &'static str)]| {
        let mut kv = ok.to_vec();
        kv.retain(|(k, _)| !extra.iter().any(|(e, _)| e == k));
        kv.extend_from_slice(extra);
        kv
    };
    let ns = [
        node("all", "True", &ok),
        node("tier-core", "True", &with(&[("tier", "core")])),
        node("no-l2", "True", &with(&[("l2", "off")])),
        node("zone3", "True", &with(&[("zone", "z3")])),
        node("edge", "True", &with(&[("tier", "edge")])),
        node("spot", "True", &with(&[("spot", "1")])),
        node("no-nic", "True", &[("l2", "on"), ("zone", "z2")]),
    ];
    assert_eq!(eligible_nodes(&ns, &sel), *set(&["all", "tier-core"]));
}

#[test]
fn an_unknown_selector_operator_is_refused() {
    let err = Selection::with_selectors(
        None,
        Some(LabelSelector {
            match_expressions: Some(vec![LabelSelectorRequirement {
                key: "a".into(),
                operator: "Gt".into(),
                values: None,
            }]),
            ..Default::default()
        }),
    )
    .unwrap_err();
    assert!(
        err.to_string().starts_with("invalid node selector"),
        "{err}"
    );
}

#[test]
fn plan_does_not_depend_on_input_order() {
    let services = vec![
        svc("a", "one", &["10.0.0.2", "10.0.0.1"]),
        local(svc("b", "two", &["fd00::2", "bogus"])),
    ];
    let slices = vec![
        slice("a", "one", &[("n1", None)]),
        slice("b", "two", &[("n2", Some(true)), ("n3", Some(true))]),
    ];
    let ns = nodes(&["n1", "n2", "n3"]);
    let p1 = plan(&services, &slices, &ns, &Selection::default());
    fn rev<T: Clone>(v: &[T]) -> Vec<T> {
        v.iter().rev().cloned().collect()
    }
    let p2 = plan(
        &rev(&services),
        &rev(&slices),
        &rev(&ns),
        &Selection::default(),
    );
    assert_eq!(p1, p2);
    let me = NodeName::from("n2");
    let for_n2 = p1.services_for(&me);
    assert_eq!(for_n2.len(), 2);
    assert_eq!(for_n2.values().map(Vec::len).sum::<usize>(), 3);
}

/// Table: (policy Local?, endpoints (node, ready), ready nodes) → eligible, problem.
#[test]
fn eligibility_table() {
    type Row = (
        bool,
        &'static [(&'static str, Option<bool>)],
        &'static [&'static str],
        &'static [&'static str],
        Option<&'static str>,
    );
    let rows: &[Row] = &[
        (false, &[("a", None)], &["a", "b"], &["a", "b"], None),
        (false, &[("x", Some(true))], &["a", "b"], &["a", "b"], None),
        (false, &[], &["a", "b"], &[], Some("NoReadyEndpoints")),
        (
            false,
            &[("a", Some(false))],
            &["a"],
            &[],
            Some("NoReadyEndpoints"),
        ),
        (false, &[("a", None)], &[], &[], Some("NoEligibleNode")),
        (
            true,
            &[("a", None), ("b", Some(true))],
            &["a", "b", "c"],
            &["a", "b"],
            None,
        ),
        (
            true,
            &[("a", Some(false)), ("b", None)],
            &["a", "b"],
            &["b"],
            None,
        ),
        (
            true,
            &[("c", None)],
            &["a", "b"],
            &[],
            Some("NoEligibleNode"),
        ),
        (
            true,
            &[("a", Some(false))],
            &["a"],
            &[],
            Some("NoReadyEndpoints"),
        ),
    ];
    for (i, (is_local, eps, ready, want, problem)) in rows.iter().enumerate() {
        let s = svc("default", "web", &["10.0.0.5"]);
        let s = if *is_local { local(s) } else { s };
        let mut ns = nodes(ready);
        ns.push(node("down", "False", &[]));
        let p = plan(
            &[s],
            &[slice("default", "web", eps)],
            &ns,
            &Selection::default(),
        );
        assert_eq!(p.vips[0].eligible, set(want), "row {i}");
        let got = p.problems.first().map(|p| p.reason.event_reason());
        assert_eq!(got, *problem, "row {i}");
    }
}

fn with_class(mut s: Service, class: Option<&str>) -> Service {
    s.spec.as_mut().unwrap().load_balancer_class = class.map(String::from);
    s
}

fn shared(mut s: Service, key: &str) -> Service {
    s.metadata.annotations = labels(&[(ALLOW_SHARED_IP_ANNOTATION, key)]);
    s
}

fn pool(name: &str, addresses: &[&str], f: impl FnOnce(&mut AddressPool)) -> AddressPool {
    let mut p = AddressPool::new(
        name,
        crate::ipam::AddressPoolSpec {
            addresses: addresses.iter().map(|a| a.to_string()).collect(),
            auto_assign: true,
            ..Default::default()
        },
    );
    f(&mut p);
    p
}

fn vips_of(p: &Placement) -> Vec<IpAddr> {
    p.vips.iter().map(|v| v.vip).collect()
}

#[test]
fn class_only_leaves_classless_services_to_another_load_balancer() {
    let services = [
        with_class(svc("default", "none", &["10.0.0.1"]), None),
        with_class(svc("default", "ours", &["10.0.0.2"]), Some(DEFAULT_CLASS)),
    ];
    let slices = [
        slice("default", "none", &[("a", None)]),
        slice("default", "ours", &[("a", None)]),
    ];
    let sel = Selection {
        class_only: true,
        ..Selection::default()
    };
    let p = plan(&services, &slices, &nodes(&["a"]), &sel);
    assert_eq!(vips_of(&p), vec![ip("10.0.0.2")]);
}

#[test]
fn a_pools_node_selector_narrows_where_its_addresses_are_announced() {
    let ns = [
        node("a", "True", &[("zone", "x")]),
        node("b", "True", &[("zone", "y")]),
        node("c", "True", &[("zone", "x")]),
    ];
    let pools = [pool("zone-x", &["10.0.0.0/24"], |p| {
        p.spec.node_selector = Some(LabelSelector {
            match_labels: labels(&[("zone", "x")]),
            ..Default::default()
        })
    })];
    let services = [svc("default", "web", &["10.0.0.5", "10.9.0.5"])];
    let slices = [slice("default", "web", &[("a", None)])];
    // An address in no pool is placed as before pools only with `announceOutsidePools`.
    let sel = Selection {
        announce_outside_pools: true,
        ..Selection::default()
    };
    let p = plan_placed(&services, &slices, &ns, &pools, &sel);
    assert_eq!(p.vips[0].eligible, set(&["a", "c"]), "in the pool");
    assert_eq!(p.vips[0].pool.as_deref(), Some("zone-x"));
    assert_eq!(p.vips[1].eligible, set(&["a", "b", "c"]), "in no pool");
    assert_eq!(p.vips[1].pool, None);
}

#[test]
fn a_pool_that_no_node_matches_reports_no_eligible_node() {
    let pools = [pool("nowhere", &["10.0.0.0/24"], |p| {
        p.spec.node_selector = Some(LabelSelector {
            match_labels: labels(&[("zone", "z")]),
            ..Default::default()
        })
    })];
    let p = plan_placed(
        &[svc("default", "web", &["10.0.0.5"])],
        &[slice("default", "web", &[("a", None)])],
        &nodes(&["a", "b"]),
        &pools,
        &Selection::default(),
    );
    assert!(p.vips[0].eligible.is_empty());
    assert_eq!(reasons(&p), vec![("10.0.0.5", "NoEligibleNode")]);
    assert!(
        p.problems[0].message.contains("AddressPool"),
        "{}",
        p.problems[0].message
    );
}

#[test]
fn a_pools_interfaces_are_carried_to_the_election() {
    let pools = [pool("lan", &["10.0.0.10-10.0.0.20"], |p| {
        p.spec.interfaces = vec!["eth1".into(), "bond*".into()]
    })];
    let p = plan_placed(
        &[svc("default", "web", &["10.0.0.15"])],
        &[slice("default", "web", &[("a", None)])],
        &nodes(&["a"]),
        &pools,
        &Selection::default(),
    );
    assert_eq!(p.vips[0].interfaces, vec!["eth1", "bond*"]);
    assert_eq!(p.vips[0].spec(None).interfaces, vec!["eth1", "bond*"]);
}

#[test]
fn of_overlapping_pools_the_oldest_places_the_address() {
    use k8s_openapi::{apimachinery::pkg::apis::meta::v1::Time, jiff::Timestamp};
    let at = |secs: i64| Some(Time(Timestamp::from_second(secs).unwrap()));
    let pools = [
        pool("newer", &["10.0.0.0/24"], |p| {
            p.metadata.creation_timestamp = at(2_000);
            p.spec.interfaces = vec!["new0".into()];
        }),
        pool("older", &["10.0.0.0/16"], |p| {
            p.metadata.creation_timestamp = at(1_000);
            p.spec.interfaces = vec!["old0".into()];
        }),
    ];
    let p = plan_placed(
        &[svc("default", "web", &["10.0.0.5"])],
        &[slice("default", "web", &[("a", None)])],
        &nodes(&["a"]),
        &pools,
        &Selection::default(),
    );
    assert_eq!(p.vips[0].pool.as_deref(), Some("older"));
    assert_eq!(p.vips[0].interfaces, vec!["old0"]);
}

#[test]
fn services_with_the_same_sharing_key_share_one_vip_eligible_where_any_has_endpoints() {
    let services = [
        shared(local(svc("default", "dns-tcp", &["10.0.0.53"])), "dns"),
        shared(local(svc("default", "dns-udp", &["10.0.0.53"])), "dns"),
    ];
    let slices = [
        slice("default", "dns-tcp", &[("a", None)]),
        slice("default", "dns-udp", &[("b", None)]),
    ];
    let p = plan(
        &services,
        &slices,
        &nodes(&["a", "b", "c"]),
        &Selection::default(),
    );
    assert_eq!(p.problems, vec![]);
    assert_eq!(p.vips.len(), 1);
    assert_eq!(p.vips[0].eligible, set(&["a", "b"]));
    assert_eq!(p.vips[0].service.to_string(), "default/dns-tcp");
    assert_eq!(p.vips[0].shared_with.len(), 1);
    assert_eq!(p.vips[0].shared_with[0].to_string(), "default/dns-udp");
}

#[test]
fn services_with_different_sharing_keys_do_not_share() {
    let services = [
        shared(svc("default", "a", &["10.0.0.53"]), "one"),
        shared(svc("default", "b", &["10.0.0.53"]), "two"),
    ];
    let slices = [
        slice("default", "a", &[("a", None)]),
        slice("default", "b", &[("a", None)]),
    ];
    let p = plan(&services, &slices, &nodes(&["a"]), &Selection::default());
    assert_eq!(p.vips[0].shared_with, Vec::<ServiceRef>::new());
    assert_eq!(reasons(&p), vec![("10.0.0.53", "DuplicateAddress")]);
}

// What an agent will announce (issue 25, finding 1): never a node's address, a link-local one,
// nor, once a pool exists, one outside every pool unless `announceOutsidePools` says so.

fn with_addresses(mut n: Node, addrs: &[(&str, &str)]) -> Node {
    n.status.as_mut().unwrap().addresses = Some(
        addrs
            .iter()
            .map(|(t, a)| k8s_openapi::api::core::v1::NodeAddress {
                type_: t.to_string(),
                address: a.to_string(),
            })
            .collect(),
    );
    n
}

fn created(mut s: Service, secs: i64) -> Service {
    use k8s_openapi::{apimachinery::pkg::apis::meta::v1::Time, jiff::Timestamp};
    s.metadata.creation_timestamp = Some(Time(Timestamp::from_second(secs).unwrap()));
    s
}

fn annotated(mut s: Service, kv: &[(&str, &str)]) -> Service {
    let a = s.metadata.annotations.get_or_insert_with(BTreeMap::new);
    for (k, v) in kv {
        a.insert(k.to_string(), v.to_string());
    }
    s
}

#[test]
fn a_nodes_internal_or_external_ip_is_refused_and_the_services_other_vips_still_planned() {
    let ns = [
        with_addresses(node("a", "True", &[]), &[("InternalIP", "10.0.0.1")]),
        with_addresses(
            node("b", "True", &[]),
            &[("InternalIP", "fd00::2"), ("ExternalIP", "203.0.113.2")],
        ),
        // A node that is not Ready still owns its address.
        with_addresses(node("c", "False", &[]), &[("InternalIP", "10.0.0.3")]),
    ];
    let services = [svc(
        "default",
        "web",
        &["10.0.0.1", "fd00::2", "203.0.113.2", "10.0.0.3", "10.0.0.5"],
    )];
    let slices = [slice("default", "web", &[("a", None)])];
    let p = plan(&services, &slices, &ns, &Selection::default());
    assert_eq!(vips_of(&p), vec![ip("10.0.0.5")]);
    assert_eq!(
        reasons(&p),
        vec![
            ("10.0.0.1", "AddressRefused"),
            ("10.0.0.3", "AddressRefused"),
            ("203.0.113.2", "AddressRefused"),
            ("fd00::2", "AddressRefused"),
        ]
    );
    assert!(
        p.problems[2].message.contains("Node b"),
        "the Event says whose address: {}",
        p.problems[2].message
    );
}

#[test]
fn link_local_addresses_are_refused_in_both_families() {
    let services = [svc(
        "default",
        "web",
        &["169.254.10.1", "fe80::10", "10.0.0.5"],
    )];
    let slices = [slice("default", "web", &[("a", None)])];
    let p = plan(&services, &slices, &nodes(&["a"]), &Selection::default());
    assert_eq!(vips_of(&p), vec![ip("10.0.0.5")]);
    assert_eq!(
        reasons(&p),
        vec![
            ("169.254.10.1", "AddressRefused"),
            ("fe80::10", "AddressRefused"),
        ]
    );
    assert!(p.problems[0].message.contains("link-local"));
}

#[test]
fn once_a_pool_exists_an_address_outside_every_pool_is_refused() {
    let pools = [pool("lan", &["10.0.0.0/24"], |_| {})];
    let p = plan_placed(
        &[svc("default", "web", &["10.0.0.5", "10.78.0.254"])],
        &[slice("default", "web", &[("a", None)])],
        &nodes(&["a"]),
        &pools,
        &Selection::default(),
    );
    assert_eq!(vips_of(&p), vec![ip("10.0.0.5")]);
    assert_eq!(reasons(&p), vec![("10.78.0.254", "AddressRefused")]);
    assert!(
        p.problems[0].message.contains("announceOutsidePools"),
        "the Event says how to allow it: {}",
        p.problems[0].message
    );
}

#[test]
fn announce_outside_pools_places_an_address_in_no_pool_as_before_pools() {
    let pools = [pool("lan", &["10.0.0.0/24"], |_| {})];
    let sel = Selection {
        announce_outside_pools: true,
        ..Selection::default()
    };
    let p = plan_placed(
        &[svc("default", "web", &["10.0.0.5", "10.78.0.5"])],
        &[slice("default", "web", &[("a", None)])],
        &nodes(&["a", "b"]),
        &pools,
        &sel,
    );
    assert_eq!(p.problems, vec![]);
    assert_eq!(vips_of(&p), vec![ip("10.0.0.5"), ip("10.78.0.5")]);
    assert_eq!(p.vips[1].eligible, set(&["a", "b"]));
    assert_eq!(p.vips[1].pool, None);
}

#[test]
fn without_any_pool_another_ipams_address_is_announced() {
    let p = plan(
        &[svc("default", "web", &["10.78.0.5"])],
        &[slice("default", "web", &[("a", None)])],
        &nodes(&["a"]),
        &Selection::default(),
    );
    assert_eq!(p.problems, vec![]);
    assert_eq!(vips_of(&p), vec![ip("10.78.0.5")]);
}

// Sharing (issue 25, finding 4): a Local and a Cluster Service never share one address's
// placement, nor do two namespaces without both opting in.

#[test]
fn a_local_and_a_cluster_service_sharing_an_address_refuse_the_younger() {
    // The younger (Local) is first by name, so age, not name, must decide.
    let services = [
        created(
            shared(local(svc("default", "a-young", &["10.0.0.53"])), "dns"),
            2_000,
        ),
        created(
            shared(svc("default", "b-old", &["10.0.0.53"]), "dns"),
            1_000,
        ),
    ];
    let slices = [
        slice("default", "a-young", &[("a", None)]),
        slice("default", "b-old", &[("b", None)]),
    ];
    let p = plan(
        &services,
        &slices,
        &nodes(&["a", "b", "c"]),
        &Selection::default(),
    );
    assert_eq!(p.vips.len(), 1);
    assert_eq!(p.vips[0].service.to_string(), "default/b-old");
    assert_eq!(p.vips[0].shared_with, Vec::<ServiceRef>::new());
    assert!(!p.vips[0].local_policy);
    assert_eq!(p.vips[0].eligible, set(&["a", "b", "c"]));
    assert_eq!(reasons(&p), vec![("10.0.0.53", "SharingConflict")]);
    assert_eq!(p.problems[0].service.to_string(), "default/a-young");
    let m = &p.problems[0].message;
    assert!(
        m.contains("default/a-young") && m.contains("default/b-old") && m.contains("Local"),
        "the Event names both Services and the policies: {m}"
    );
}

#[test]
fn two_local_services_selecting_different_pods_do_not_share_an_address() {
    let with_selector = |mut s: Service, app: &str| {
        s.spec.get_or_insert_default().selector =
            Some([("app".to_owned(), app.to_owned())].into_iter().collect());
        s
    };
    let services = [
        created(
            with_selector(
                shared(local(svc("default", "old", &["10.0.0.53"])), "k"),
                "x",
            ),
            1_000,
        ),
        created(
            with_selector(
                shared(local(svc("default", "young", &["10.0.0.53"])), "k"),
                "y",
            ),
            2_000,
        ),
    ];
    let slices = [
        slice("default", "old", &[("a", None)]),
        slice("default", "young", &[("b", None)]),
    ];
    let p = plan(
        &services,
        &slices,
        &nodes(&["a", "b", "c"]),
        &Selection::default(),
    );
    assert_eq!(p.vips.len(), 1);
    assert_eq!(p.vips[0].service.to_string(), "default/old");
    assert_eq!(
        p.vips[0].eligible,
        set(&["a"]),
        "only where the older one's endpoints run"
    );
    assert_eq!(reasons(&p), vec![("10.0.0.53", "SharingConflict")]);
}

#[test]
fn services_in_two_namespaces_do_not_share_an_address_without_both_opting_in() {
    let services = [
        created(shared(svc("one", "web", &["10.0.0.53"]), "k"), 1_000),
        created(shared(svc("two", "web", &["10.0.0.53"]), "k"), 2_000),
    ];
    let slices = [
        slice("one", "web", &[("a", None)]),
        slice("two", "web", &[("b", None)]),
    ];
    let p = plan(
        &services,
        &slices,
        &nodes(&["a", "b"]),
        &Selection::default(),
    );
    assert_eq!(p.vips.len(), 1);
    assert_eq!(p.vips[0].service.to_string(), "one/web");
    assert_eq!(p.vips[0].shared_with, Vec::<ServiceRef>::new());
    assert_eq!(reasons(&p), vec![("10.0.0.53", "SharingConflict")]);
    assert_eq!(p.problems[0].service.to_string(), "two/web");
}

#[test]
fn services_in_two_namespaces_share_an_address_when_both_opt_in() {
    let across =
        |s: Service, other: &str| annotated(s, &[(ALLOW_SHARED_IP_NAMESPACES_ANNOTATION, other)]);
    let services = [
        across(
            created(shared(svc("one", "web", &["10.0.0.53"]), "k"), 1_000),
            "two",
        ),
        across(
            created(shared(svc("two", "web", &["10.0.0.53"]), "k"), 2_000),
            "*",
        ),
    ];
    let slices = [
        slice("one", "web", &[("a", None)]),
        slice("two", "web", &[("b", None)]),
    ];
    let p = plan(
        &services,
        &slices,
        &nodes(&["a", "b"]),
        &Selection::default(),
    );
    assert_eq!(p.problems, vec![]);
    assert_eq!(p.vips.len(), 1);
    assert_eq!(p.vips[0].shared_with.len(), 1);
    assert_eq!(p.vips[0].shared_with[0].to_string(), "two/web");
}

#[test]
fn a_pools_preferred_nodes_rank_first_while_eligible() {
    let ns = [
        node("a", "True", &[]),
        node("b", "True", &[]),
        node("c", "False", &[]),
    ];
    // c is preferred but not Ready, d is no node at all: only b counts.
    let pools = [pool("rack", &["10.0.0.0/24"], |p| {
        p.spec.preferred_nodes = vec!["b".into(), "c".into(), "d".into()];
    })];
    let p = plan_placed(
        &[svc("default", "web", &["10.0.0.5"])],
        &[slice("default", "web", &[("a", None)])],
        &ns,
        &pools,
        &Selection::default(),
    );
    assert_eq!(p.vips[0].eligible, set(&["a", "b"]));
    assert_eq!(p.vips[0].preferred, set(&["b"]));
    // The election ranks the preferred node first, whatever the rendezvous order says.
    let spec = p.vips[0].spec(None);
    for vip in ["10.0.0.5", "10.0.0.6", "10.0.0.7", "10.0.0.8"] {
        let ranking = crate::election::rendezvous::ranking_preferring(
            ip(vip),
            spec.eligible.iter(),
            &spec.preferred,
        );
        assert_eq!(ranking[0].as_str(), "b", "{vip}");
    }
    // Without preferences, rendezvous order (a first for some of these addresses).
    let plain: Vec<_> = ["10.0.0.5", "10.0.0.6", "10.0.0.7", "10.0.0.8"]
        .iter()
        .map(|v| crate::election::rendezvous::ranking(ip(v), spec.eligible.iter())[0].to_string())
        .collect();
    assert!(plain.iter().any(|n| n == "a"), "{plain:?}");
}
