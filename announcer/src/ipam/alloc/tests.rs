use std::collections::BTreeMap;

use k8s_openapi::{api::core::v1::Service, apimachinery::pkg::apis::meta::v1::Time};
use proptest::prelude::*;
use serde_json::{Value, json};

use super::*;

fn t(secs: i64) -> Time {
    Time(Timestamp::from_second(1_700_000_000 + secs).expect("time"))
}

fn pool(name: &str, addrs: &[&str], created: i64) -> AddressPool {
    pool_with(name, addrs, created, json!({}))
}

fn pool_with(name: &str, addrs: &[&str], created: i64, extra: Value) -> AddressPool {
    let mut spec = json!({ "addresses": addrs });
    if let (Some(s), Some(e)) = (spec.as_object_mut(), extra.as_object()) {
        s.extend(e.clone());
    }
    let mut p: AddressPool = serde_json::from_value(json!({
        "apiVersion": "announcer.dev/v1alpha1", "kind": "AddressPool",
        "metadata": { "name": name },
        "spec": spec,
    }))
    .expect("pool");
    p.metadata.creation_timestamp = Some(t(created));
    p
}

/// A Service of our class, created at `created`, with `ips` in its status and `extra` merged
/// into its spec.
fn svc(name: &str, created: i64, ips: &[&str], extra: Value) -> Service {
    svc_in("apps", name, created, ips, extra, json!({}))
}

fn svc_in(
    ns: &str,
    name: &str,
    created: i64,
    ips: &[&str],
    extra: Value,
    annotations: Value,
) -> Service {
    let mut spec = json!({
        "type": "LoadBalancer", "loadBalancerClass": CLASS,
        "ports": [{ "port": 80, "protocol": "TCP" }],
    });
    if let (Some(s), Some(e)) = (spec.as_object_mut(), extra.as_object()) {
        s.extend(e.clone());
    }
    let ingress: Vec<Value> = ips.iter().map(|ip| json!({ "ip": ip })).collect();
    let mut s: Service = serde_json::from_value(json!({
        "metadata": { "name": name, "namespace": ns, "annotations": annotations },
        "spec": spec,
        "status": { "loadBalancer": { "ingress": ingress } },
    }))
    .expect("service");
    s.metadata.creation_timestamp = Some(t(created));
    s
}

fn annotated(name: &str, created: i64, annotations: Value) -> Service {
    svc_in("apps", name, created, &[], json!({}), annotations)
}

const CLASS: &str = "announcer.dev/l2";

fn cfg() -> AllocationScope {
    AllocationScope {
        class: CLASS.into(),
        classless: false,
    }
}

fn run(pools: &[AddressPool], services: &[Service]) -> Allocation {
    plan(pools, services, &BTreeMap::new(), &cfg())
}

fn key(name: &str) -> ServiceKey {
    ServiceKey {
        namespace: "apps".into(),
        name: name.into(),
    }
}

fn ips(p: &Allocation, name: &str) -> Vec<String> {
    p.services[&key(name)]
        .ips
        .iter()
        .map(|i| i.to_string())
        .collect()
}

fn reasons(p: &Allocation, name: &str) -> Vec<Reason> {
    p.services[&key(name)]
        .problems
        .iter()
        .map(|p| p.reason)
        .collect()
}

#[test]
fn a_service_without_an_address_gets_the_first_free_one() {
    let p = run(
        &[pool("a", &["10.0.0.1-10.0.0.3"], 0)],
        &[
            svc("x", 0, &["10.0.0.1"], json!({})),
            svc("y", 1, &[], json!({})),
        ],
    );
    assert_eq!(ips(&p, "x"), ["10.0.0.1"]);
    assert_eq!(ips(&p, "y"), ["10.0.0.2"]);
    assert!(reasons(&p, "y").is_empty());
}

#[test]
fn first_fit_walks_pools_in_name_order() {
    let p = run(
        &[
            pool("b", &["10.0.1.0/30"], 0),
            pool("a", &["10.0.2.0/30"], 5),
        ],
        &[svc("x", 0, &[], json!({}))],
    );
    assert_eq!(ips(&p, "x"), ["10.0.2.0"]);
}

#[test]
fn avoid_buggy_ips_skips_dot_zero_and_dot_255() {
    let p = run(
        &[pool_with(
            "a",
            &["10.0.0.255-10.0.1.1"],
            0,
            json!({"avoidBuggyIPs": true}),
        )],
        &[svc("x", 0, &[], json!({}))],
    );
    assert_eq!(ips(&p, "x"), ["10.0.1.1"]);
    assert_eq!(p.pools["a"].available[&Family::V4], 0);
}

#[test]
fn an_exhausted_pool_is_a_warning_and_reported() {
    let p = run(
        &[pool("a", &["10.0.0.1/32"], 0)],
        &[svc("x", 0, &[], json!({})), svc("y", 1, &[], json!({}))],
    );
    assert_eq!(ips(&p, "x"), ["10.0.0.1"]);
    assert!(ips(&p, "y").is_empty());
    assert_eq!(reasons(&p, "y"), [Reason::PoolExhausted]);
    assert_eq!(p.pools["a"].exhausted(), [Family::V4]);
    let st = pool_status(&p.pools["a"], None, Some(1), &t(9));
    assert_eq!((st.assigned_ipv4, st.available_ipv4), (1, 0));
    let ex = st
        .conditions
        .iter()
        .find(|c| c.type_ == "Exhausted")
        .unwrap();
    assert_eq!(ex.status, "True");
}

#[test]
fn requested_ip_is_honoured() {
    let p = run(
        &[pool("a", &["10.0.0.0/24"], 0)],
        &[
            annotated("x", 0, json!({ LOAD_BALANCER_IPS_ANNOTATION: "10.0.0.77" })),
            svc("y", 1, &[], json!({ "loadBalancerIP": "10.0.0.78" })),
        ],
    );
    assert_eq!(ips(&p, "x"), ["10.0.0.77"]);
    assert_eq!(ips(&p, "y"), ["10.0.0.78"]);
}

#[test]
fn requested_ip_outside_every_pool_is_a_warning() {
    let p = run(
        &[pool("a", &["10.0.0.0/24"], 0)],
        &[annotated(
            "x",
            0,
            json!({ LOAD_BALANCER_IPS_ANNOTATION: "192.168.1.1" }),
        )],
    );
    assert!(ips(&p, "x").is_empty(), "no fallback to another address");
    assert_eq!(reasons(&p, "x"), [Reason::RequestedIpOutsidePools]);
}

#[test]
fn requested_ip_taken_by_an_unshared_service_is_a_warning() {
    let p = run(
        &[pool("a", &["10.0.0.0/24"], 0)],
        &[
            svc("x", 0, &["10.0.0.5"], json!({})),
            annotated("y", 1, json!({ LOAD_BALANCER_IPS_ANNOTATION: "10.0.0.5" })),
        ],
    );
    assert_eq!(ips(&p, "x"), ["10.0.0.5"]);
    assert!(ips(&p, "y").is_empty());
    assert_eq!(reasons(&p, "y"), [Reason::RequestedIpTaken]);
}

#[test]
fn unparsable_requested_ip_is_a_warning() {
    let p = run(
        &[pool("a", &["10.0.0.0/24"], 0)],
        &[annotated(
            "x",
            0,
            json!({ LOAD_BALANCER_IPS_ANNOTATION: "ten" }),
        )],
    );
    assert_eq!(reasons(&p, "x"), [Reason::BadRequestedIp]);
    assert!(ips(&p, "x").is_empty());
}

#[test]
fn services_with_one_sharing_key_and_distinct_ports_share_an_address() {
    let share = json!({ ALLOW_SHARED_IP_ANNOTATION: "k" });
    let p = run(
        &[pool("a", &["10.0.0.0/24"], 0)],
        &[
            svc_in("apps", "x", 0, &[], json!({}), share.clone()),
            svc_in(
                "apps",
                "y",
                1,
                &[],
                json!({"ports": [{"port": 443}]}),
                share.clone(),
            ),
            svc_in("apps", "z", 2, &[], json!({}), share),
        ],
    );
    assert_eq!(ips(&p, "x"), ["10.0.0.0"]);
    assert_eq!(ips(&p, "y"), ["10.0.0.0"], "443 does not clash with 80");
    assert_eq!(ips(&p, "z"), ["10.0.0.1"], "80/TCP clashes with x");
    assert_eq!(p.pools["a"].assigned[&Family::V4], 2);
}

#[test]
fn a_requested_shared_ip_with_clashing_ports_is_taken() {
    let share =
        json!({ ALLOW_SHARED_IP_ANNOTATION: "k", LOAD_BALANCER_IPS_ANNOTATION: "10.0.0.9" });
    let p = run(
        &[pool("a", &["10.0.0.0/24"], 0)],
        &[
            svc_in("apps", "x", 0, &[], json!({}), share.clone()),
            svc_in("apps", "y", 1, &[], json!({}), share),
        ],
    );
    assert_eq!(ips(&p, "x"), ["10.0.0.9"]);
    assert_eq!(reasons(&p, "y"), [Reason::RequestedIpTaken]);
}

#[test]
fn different_sharing_keys_do_not_share() {
    let p = run(
        &[pool("a", &["10.0.0.0/24"], 0)],
        &[
            svc_in(
                "apps",
                "x",
                0,
                &[],
                json!({}),
                json!({ ALLOW_SHARED_IP_ANNOTATION: "k" }),
            ),
            svc_in(
                "apps",
                "y",
                1,
                &[],
                json!({"ports": [{"port": 443}]}),
                json!({ ALLOW_SHARED_IP_ANNOTATION: "other" }),
            ),
        ],
    );
    assert_ne!(ips(&p, "x"), ips(&p, "y"));
}

#[test]
fn single_stack_takes_the_first_listed_family() {
    let pools = [pool("a", &["10.0.0.0/24", "fd00::/120"], 0)];
    let p = run(&pools, &[svc("x", 0, &[], json!({"ipFamilies": ["IPv6"]}))]);
    assert_eq!(ips(&p, "x"), ["fd00::"]);
    let p = run(&pools, &[svc("x", 0, &[], json!({}))]);
    assert_eq!(ips(&p, "x"), ["10.0.0.0"], "IPv4 by default");
}

#[test]
fn prefer_dual_stack_takes_each_available_family() {
    let spec = json!({"ipFamilyPolicy": "PreferDualStack", "ipFamilies": ["IPv6", "IPv4"]});
    let p = run(
        &[pool("a", &["10.0.0.0/24", "fd00::/120"], 0)],
        &[svc("x", 0, &[], spec.clone())],
    );
    assert_eq!(ips(&p, "x"), ["fd00::", "10.0.0.0"]);
    let p = run(&[pool("a", &["fd00::/120"], 0)], &[svc("x", 0, &[], spec)]);
    assert_eq!(ips(&p, "x"), ["fd00::"]);
    assert!(reasons(&p, "x").is_empty());
}

#[test]
fn require_dual_stack_without_both_families_is_a_warning_and_no_address() {
    let spec = json!({"ipFamilyPolicy": "RequireDualStack", "ipFamilies": ["IPv4", "IPv6"]});
    let p = run(
        &[pool("a", &["10.0.0.0/24"], 0)],
        &[svc("x", 0, &[], spec.clone())],
    );
    assert!(ips(&p, "x").is_empty());
    assert!(reasons(&p, "x").contains(&Reason::FamilyNotAvailable));
    assert_eq!(
        p.pools["a"].assigned[&Family::V4],
        0,
        "the IPv4 address was given back"
    );
    let p = run(
        &[pool("a", &["10.0.0.0/24"], 0), pool("b", &["fd00::/64"], 0)],
        &[svc("x", 0, &[], spec)],
    );
    assert_eq!(ips(&p, "x"), ["10.0.0.0", "fd00::"]);
}

#[test]
fn single_stack_of_a_family_no_pool_has_is_a_warning() {
    let p = run(
        &[pool("a", &["10.0.0.0/24"], 0)],
        &[svc("x", 0, &[], json!({"ipFamilies": ["IPv6"]}))],
    );
    assert_eq!(reasons(&p, "x"), [Reason::FamilyNotAvailable]);
}

#[test]
fn two_unshared_services_on_one_address_keep_the_older() {
    let p = run(
        &[pool("a", &["10.0.0.0/24"], 0)],
        &[
            svc("young", 5, &["10.0.0.1"], json!({})),
            svc("old", 1, &["10.0.0.1"], json!({})),
        ],
    );
    assert_eq!(ips(&p, "old"), ["10.0.0.1"]);
    assert_eq!(ips(&p, "young"), ["10.0.0.0"]);
    assert_eq!(reasons(&p, "young"), [Reason::AddressConflict]);
}

#[test]
fn equal_creation_times_break_ties_by_namespace_and_name() {
    let p = run(
        &[pool("a", &["10.0.0.0/24"], 0)],
        &[
            svc_in("b", "x", 1, &["10.0.0.1"], json!({}), json!({})),
            svc_in("a", "x", 1, &["10.0.0.1"], json!({}), json!({})),
        ],
    );
    let a = ServiceKey {
        namespace: "a".into(),
        name: "x".into(),
    };
    assert_eq!(p.services[&a].ips, ["10.0.0.1".parse::<IpAddr>().unwrap()]);
}

#[test]
fn adding_a_pool_or_a_service_moves_no_existing_address() {
    let pools = vec![pool("b", &["10.0.1.0/24"], 0)];
    let first = run(
        &pools,
        &[svc("x", 0, &[], json!({})), svc("y", 1, &[], json!({}))],
    );
    let x = ips(&first, "x");
    let y = ips(&first, "y");
    let mut pools2 = pools.clone();
    pools2.push(pool("a", &["10.0.2.0/24"], 9));
    let services = [
        svc("x", 0, &[&x[0]], json!({})),
        svc("y", 1, &[&y[0]], json!({})),
        svc("aaa", -5, &[], json!({})),
    ];
    let second = run(&pools2, &services);
    assert_eq!(ips(&second, "x"), x);
    assert_eq!(ips(&second, "y"), y);
    assert_eq!(
        ips(&second, "aaa"),
        ["10.0.2.0"],
        "the new one fits around them"
    );
}

#[test]
fn services_of_another_class_are_never_touched_and_their_addresses_never_handed_out() {
    let p = run(
        &[pool("a", &["10.0.0.0/31"], 0)],
        &[
            svc(
                "other",
                0,
                &["10.0.0.0"],
                json!({"loadBalancerClass": "other.dev/lb"}),
            ),
            svc("x", 1, &[], json!({})),
        ],
    );
    assert!(!p.services.contains_key(&key("other")));
    assert_eq!(ips(&p, "x"), ["10.0.0.1"]);
}

#[test]
fn classless_services_are_allocated_only_when_configured() {
    let s = svc("x", 0, &[], json!({"loadBalancerClass": null}));
    let pools = [pool("a", &["10.0.0.0/24"], 0)];
    assert!(run(&pools, std::slice::from_ref(&s)).services.is_empty());
    let with = plan(
        &pools,
        &[s],
        &BTreeMap::new(),
        &AllocationScope {
            classless: true,
            ..cfg()
        },
    );
    assert_eq!(ips(&with, "x"), ["10.0.0.0"]);
}

#[test]
fn a_service_no_longer_a_load_balancer_gives_its_pool_addresses_back() {
    let p = run(
        &[pool("a", &["10.0.0.0/24"], 0)],
        &[svc(
            "x",
            0,
            &["10.0.0.3", "192.168.0.1"],
            json!({"type": "ClusterIP", "loadBalancerClass": null}),
        )],
    );
    assert_eq!(
        ips(&p, "x"),
        ["192.168.0.1"],
        "only our pools' addresses are cleared"
    );
    let p = run(
        &[pool("a", &["10.0.0.0/24"], 0)],
        &[svc(
            "y",
            0,
            &[],
            json!({"type": "ClusterIP", "loadBalancerClass": null}),
        )],
    );
    assert!(p.services.is_empty(), "nothing to clear: not ours");
}

#[test]
fn the_newer_of_two_overlapping_pools_is_invalid_and_unused() {
    let p = run(
        &[
            pool("a-new", &["10.0.0.0/24"], 5),
            pool("z-old", &["10.0.0.128/25"], 1),
        ],
        &[svc("x", 0, &[], json!({}))],
    );
    assert!(
        p.pools["a-new"]
            .invalid
            .as_deref()
            .unwrap()
            .contains("z-old")
    );
    assert!(p.pools["z-old"].invalid.is_none());
    assert_eq!(ips(&p, "x"), ["10.0.0.128"]);
    let st = pool_status(&p.pools["a-new"], None, None, &t(0));
    let valid = st.conditions.iter().find(|c| c.type_ == "Valid").unwrap();
    assert_eq!(valid.status, "False");
}

#[test]
fn a_pool_with_a_reversed_range_is_invalid() {
    let p = run(
        &[pool("a", &["10.0.0.9-10.0.0.1"], 0)],
        &[svc("x", 0, &[], json!({}))],
    );
    assert!(p.pools["a"].invalid.is_some());
    assert!(ips(&p, "x").is_empty());
}

#[test]
fn a_named_pool_is_used_even_without_auto_assign() {
    let pools = [
        pool_with("manual", &["10.0.9.0/24"], 0, json!({"autoAssign": false})),
        pool("auto", &["10.0.1.0/24"], 0),
    ];
    let p = run(
        &pools,
        &[
            annotated("x", 0, json!({ ADDRESS_POOL_ANNOTATION: "manual" })),
            svc("y", 1, &[], json!({})),
            annotated("z", 2, json!({ ADDRESS_POOL_ANNOTATION: "nope" })),
        ],
    );
    assert_eq!(ips(&p, "x"), ["10.0.9.0"]);
    assert_eq!(
        ips(&p, "y"),
        ["10.0.1.0"],
        "autoAssign: false pools are skipped"
    );
    assert_eq!(reasons(&p, "z"), [Reason::UnknownPool]);
}

#[test]
fn selectors_limit_a_pool_to_matching_services_and_namespaces() {
    let pools = [
        pool_with(
            "a",
            &["10.0.1.0/24"],
            0,
            json!({"namespaceSelector": {"matchLabels": {"team": "red"}}}),
        ),
        pool_with(
            "b",
            &["10.0.2.0/24"],
            0,
            json!({"serviceSelector": {"matchLabels": {"tier": "web"}}}),
        ),
    ];
    let mut web = svc_in("blue", "web", 0, &[], json!({}), json!({}));
    web.metadata.labels = Some([("tier".to_string(), "web".to_string())].into());
    let red = svc_in("red", "x", 1, &[], json!({}), json!({}));
    let none = svc_in("blue", "y", 2, &[], json!({}), json!({}));
    let ns: BTreeMap<String, BTreeMap<String, String>> = [
        (
            "red".to_string(),
            [("team".to_string(), "red".to_string())].into(),
        ),
        ("blue".to_string(), BTreeMap::new()),
    ]
    .into();
    let p = plan(&pools, &[web, red, none], &ns, &cfg());
    let get = |ns: &str, n: &str| {
        p.services[&ServiceKey {
            namespace: ns.into(),
            name: n.into(),
        }]
            .clone()
    };
    assert_eq!(get("blue", "web").ips[0].to_string(), "10.0.2.0");
    assert_eq!(get("red", "x").ips[0].to_string(), "10.0.1.0");
    assert!(get("blue", "y").ips.is_empty());
    assert_eq!(
        get("blue", "y").problems[0].reason,
        Reason::FamilyNotAvailable
    );
}

#[test]
fn an_unchanged_pool_status_keeps_its_transition_times() {
    let p = run(
        &[pool("a", &["10.0.0.0/24"], 0)],
        &[svc("x", 0, &[], json!({}))],
    );
    let first = pool_status(&p.pools["a"], None, Some(1), &t(1));
    let again = pool_status(&p.pools["a"], Some(&first), Some(1), &t(100));
    assert_eq!(first, again);
}

proptest! {
    /// Whatever the order and history, no two unshared Services end up on one address, and
    /// re-running on the result changes nothing (a fixed point: no writes in steady state).
    #[test]
    fn no_address_is_on_two_services_and_the_plan_is_a_fixed_point(
        held in proptest::collection::vec(proptest::option::of(0u8..8), 1..12),
    ) {
        let pools = [pool("a", &["10.0.0.0/29"], 0), pool("b", &["10.0.1.0/30"], 1)];
        let services: Vec<Service> = held
            .iter()
            .enumerate()
            .map(|(i, h)| {
                let ip = h.map(|h| format!("10.0.0.{h}"));
                let ips: Vec<&str> = ip.iter().map(String::as_str).collect();
                svc(&format!("s{i}"), (i % 3) as i64, &ips, json!({}))
            })
            .collect();
        let p = run(&pools, &services);
        let mut seen = BTreeSet::new();
        for a in p.services.values() {
            for ip in &a.ips {
                prop_assert!(seen.insert(*ip), "{ip} twice");
            }
        }
        let next: Vec<Service> = services
            .iter()
            .map(|s| {
                let k = key_of(s);
                let now: Vec<String> = p.services[&k].ips.iter().map(|i| i.to_string()).collect();
                let now: Vec<&str> = now.iter().map(String::as_str).collect();
                let created = s.metadata.creation_timestamp.as_ref().unwrap().0.as_second()
                    - 1_700_000_000;
                svc(&k.name, created, &now, json!({}))
            })
            .collect();
        let q = run(&pools, &next);
        for (k, a) in &p.services {
            prop_assert_eq!(&q.services[k].ips, &a.ips);
        }
    }
}

#[test]
fn an_address_in_no_pool_is_left_to_whoever_assigned_it() {
    // Another IPAM gave `ext` 192.168.5.5; a pool created later for other Services must not
    // take it back or replace it.
    let p = run(
        &[pool("a", &["10.0.0.1/32"], 0)],
        &[
            svc("ext", 0, &["192.168.5.5"], json!({})),
            svc("new", 1, &[], json!({})),
        ],
    );
    assert_eq!(ips(&p, "ext"), ["192.168.5.5"]);
    assert!(reasons(&p, "ext").is_empty(), "{:?}", reasons(&p, "ext"));
    assert_eq!(ips(&p, "new"), ["10.0.0.1"]);
}

/// The Event reasons of the Service's problems, as written.
fn reason_names(p: &Allocation, ns: &str, name: &str) -> Vec<&'static str> {
    p.services[&ServiceKey {
        namespace: ns.into(),
        name: name.into(),
    }]
        .problems
        .iter()
        .map(|p| p.reason.as_str())
        .collect()
}

fn ips_in(p: &Allocation, ns: &str, name: &str) -> Vec<String> {
    p.services[&ServiceKey {
        namespace: ns.into(),
        name: name.into(),
    }]
        .ips
        .iter()
        .map(|i| i.to_string())
        .collect()
}

/// Namespaces with their labels, `kubernetes.io/metadata.name` included as the API server
/// sets it.
fn namespaces(list: &[(&str, &[(&str, &str)])]) -> BTreeMap<String, BTreeMap<String, String>> {
    list.iter()
        .map(|(ns, labels)| {
            let mut l: BTreeMap<String, String> = labels
                .iter()
                .map(|(k, v)| (k.to_string(), v.to_string()))
                .collect();
            l.insert("kubernetes.io/metadata.name".into(), ns.to_string());
            (ns.to_string(), l)
        })
        .collect()
}

#[test]
fn an_older_services_request_never_takes_an_address_a_younger_one_holds() {
    let p = run(
        &[pool("a", &["10.0.0.0/24"], 0)],
        &[
            annotated(
                "old",
                0,
                json!({ LOAD_BALANCER_IPS_ANNOTATION: "10.0.0.5" }),
            ),
            svc("young", 5, &["10.0.0.5"], json!({})),
        ],
    );
    assert_eq!(ips(&p, "young"), ["10.0.0.5"], "the holder keeps it");
    assert!(ips(&p, "old").is_empty(), "no fallback to another address");
    assert_eq!(reason_names(&p, "apps", "old"), ["RequestedIPTaken"]);
    assert!(reasons(&p, "young").is_empty());
}

#[test]
fn a_refused_request_leaves_the_service_the_address_it_holds() {
    let p = run(
        &[pool("a", &["10.0.0.0/24"], 0)],
        &[
            svc_in(
                "apps",
                "x",
                0,
                &["10.0.0.1"],
                json!({}),
                json!({ LOAD_BALANCER_IPS_ANNOTATION: "10.0.0.5" }),
            ),
            svc("y", 5, &["10.0.0.5"], json!({})),
        ],
    );
    assert_eq!(ips(&p, "x"), ["10.0.0.1"]);
    assert_eq!(ips(&p, "y"), ["10.0.0.5"]);
    assert_eq!(reason_names(&p, "apps", "x"), ["RequestedIPTaken"]);
}

#[test]
fn a_served_request_moves_the_service_and_frees_its_old_address() {
    let p = run(
        &[pool("a", &["10.0.0.0/24"], 0)],
        &[
            svc_in(
                "apps",
                "x",
                0,
                &["10.0.0.1"],
                json!({}),
                json!({ LOAD_BALANCER_IPS_ANNOTATION: "10.0.0.5" }),
            ),
            svc("y", 5, &[], json!({})),
        ],
    );
    assert_eq!(ips(&p, "x"), ["10.0.0.5"]);
    assert_eq!(ips(&p, "y"), ["10.0.0.0"]);
    assert_eq!(
        p.pools["a"].assigned[&Family::V4],
        2,
        "10.0.0.1 is free again"
    );
}

#[test]
fn two_holders_of_one_address_keep_the_older_even_when_its_name_sorts_last() {
    let p = run(
        &[pool("a", &["10.0.0.0/24"], 0)],
        &[
            svc("a-young", 5, &["10.0.0.1"], json!({})),
            svc("z-old", 1, &["10.0.0.1"], json!({})),
        ],
    );
    assert_eq!(ips(&p, "z-old"), ["10.0.0.1"]);
    assert_eq!(ips(&p, "a-young"), ["10.0.0.0"]);
    assert_eq!(reasons(&p, "a-young"), [Reason::AddressConflict]);
}

fn red_pool(extra: Value) -> AddressPool {
    pool_with("red", &["10.0.1.0/24"], 0, extra)
}

#[test]
fn a_named_pool_whose_namespace_selector_refuses_the_service_gives_it_nothing() {
    let pools = [red_pool(
        json!({"namespaceSelector": {"matchLabels": {"team": "red"}}}),
    )];
    let named = json!({ ADDRESS_POOL_ANNOTATION: "red" });
    let services = [
        svc_in("blue", "x", 0, &[], json!({}), named.clone()),
        svc_in("red", "y", 1, &[], json!({}), named),
    ];
    let ns = namespaces(&[("blue", &[]), ("red", &[("team", "red")])]);
    let p = plan(&pools, &services, &ns, &cfg());
    assert!(ips_in(&p, "blue", "x").is_empty());
    assert_eq!(reason_names(&p, "blue", "x"), ["AddressPoolNotAllowed"]);
    assert_eq!(ips_in(&p, "red", "y"), ["10.0.1.0"]);
}

#[test]
fn a_named_pool_whose_service_selector_refuses_the_service_gives_it_nothing() {
    let pools = [red_pool(
        json!({"serviceSelector": {"matchLabels": {"tier": "web"}}, "autoAssign": false}),
    )];
    let p = run(
        &pools,
        &[annotated("x", 0, json!({ ADDRESS_POOL_ANNOTATION: "red" }))],
    );
    assert!(ips(&p, "x").is_empty());
    assert_eq!(reason_names(&p, "apps", "x"), ["AddressPoolNotAllowed"]);
}

#[test]
fn a_requested_address_in_a_pool_the_service_may_not_use_is_refused_named_or_not() {
    let pools = [
        red_pool(json!({"namespaceSelector": {"matchLabels": {"team": "red"}}})),
        pool("open", &["10.0.2.0/24"], 0),
    ];
    let ns = namespaces(&[("apps", &[])]);
    for annotations in [
        json!({ LOAD_BALANCER_IPS_ANNOTATION: "10.0.1.7" }),
        json!({ LOAD_BALANCER_IPS_ANNOTATION: "10.0.1.7", ADDRESS_POOL_ANNOTATION: "red" }),
    ] {
        let p = plan(&pools, &[annotated("x", 0, annotations)], &ns, &cfg());
        assert!(ips(&p, "x").is_empty(), "{:?}", ips(&p, "x"));
        assert!(
            reason_names(&p, "apps", "x").contains(&"RequestedIPOutsidePools"),
            "{:?}",
            reasons(&p, "x")
        );
    }
}

fn shared(key: &str, other_namespaces: Option<&str>) -> Value {
    match other_namespaces {
        None => json!({ ALLOW_SHARED_IP_ANNOTATION: key }),
        Some(n) => json!({
            ALLOW_SHARED_IP_ANNOTATION: key,
            ALLOW_SHARED_IP_NAMESPACES_ANNOTATION: n,
        }),
    }
}

/// `x` in namespace `a` on port 80 and `y` in namespace `b` on port 443, one sharing key.
fn across_namespaces(x_allows: Option<&str>, y_allows: Option<&str>) -> Allocation {
    let https = json!({"ports": [{"port": 443}]});
    run(
        &[pool("a", &["10.0.0.0/24"], 0)],
        &[
            svc_in("a", "x", 0, &[], json!({}), shared("k", x_allows)),
            svc_in("b", "y", 1, &[], https, shared("k", y_allows)),
        ],
    )
}

#[test]
fn one_sharing_key_in_two_namespaces_shares_only_when_both_allow_it() {
    let p = across_namespaces(None, None);
    assert_ne!(ips_in(&p, "a", "x"), ips_in(&p, "b", "y"));
    let p = across_namespaces(None, Some("a"));
    assert_ne!(
        ips_in(&p, "a", "x"),
        ips_in(&p, "b", "y"),
        "x did not allow b"
    );
    let p = across_namespaces(Some("b"), None);
    assert_ne!(
        ips_in(&p, "a", "x"),
        ips_in(&p, "b", "y"),
        "y did not allow a"
    );
    let p = across_namespaces(Some("c, b"), Some("*"));
    assert_eq!(ips_in(&p, "a", "x"), ips_in(&p, "b", "y"), "both allowed");
}

#[test]
fn a_request_for_another_namespaces_shared_address_without_the_opt_in_is_refused() {
    let mut annotations = shared("k", None);
    annotations[LOAD_BALANCER_IPS_ANNOTATION] = json!("10.0.0.9");
    let p = run(
        &[pool("a", &["10.0.0.0/24"], 0)],
        &[
            svc_in(
                "victim",
                "x",
                5,
                &["10.0.0.9"],
                json!({}),
                shared("k", None),
            ),
            svc_in(
                "tenant",
                "y",
                0,
                &[],
                json!({"ports": [{"port": 443}]}),
                annotations,
            ),
        ],
    );
    assert_eq!(ips_in(&p, "victim", "x"), ["10.0.0.9"]);
    assert!(ips_in(&p, "tenant", "y").is_empty());
    assert_eq!(reason_names(&p, "tenant", "y"), ["RequestedIPTaken"]);
}

#[test]
fn a_local_and_a_cluster_service_never_share() {
    let key = shared("k", None);
    let mut requested = key.clone();
    requested[LOAD_BALANCER_IPS_ANNOTATION] = json!("10.0.0.0");
    let local = json!({"ports": [{"port": 443}], "externalTrafficPolicy": "Local",
        "selector": {"app": "x"}});
    let pools = [pool("a", &["10.0.0.0/24"], 0)];
    let p = run(
        &pools,
        &[
            svc_in(
                "apps",
                "x",
                0,
                &[],
                json!({"selector": {"app": "x"}}),
                key.clone(),
            ),
            svc_in("apps", "y", 1, &[], local.clone(), key.clone()),
        ],
    );
    assert_ne!(ips(&p, "x"), ips(&p, "y"));
    let p = run(
        &pools,
        &[
            svc_in(
                "apps",
                "x",
                0,
                &["10.0.0.0"],
                json!({"selector": {"app": "x"}}),
                key,
            ),
            svc_in("apps", "y", 1, &[], local, requested),
        ],
    );
    assert!(ips(&p, "y").is_empty());
    assert_eq!(reason_names(&p, "apps", "y"), ["RequestedIPTaken"]);
}

#[test]
fn two_local_services_share_only_when_they_select_the_same_pods() {
    let key = shared("k", None);
    let local = |app: &str, port: i32| {
        json!({"ports": [{"port": port}], "externalTrafficPolicy": "Local",
            "selector": {"app": app}})
    };
    let pools = [pool("a", &["10.0.0.0/24"], 0)];
    let p = run(
        &pools,
        &[
            svc_in("apps", "x", 0, &[], local("web", 80), key.clone()),
            svc_in("apps", "y", 1, &[], local("web", 443), key.clone()),
        ],
    );
    assert_eq!(ips(&p, "x"), ips(&p, "y"), "same Pods");
    let p = run(
        &pools,
        &[
            svc_in("apps", "x", 0, &[], local("web", 80), key.clone()),
            svc_in("apps", "y", 1, &[], local("db", 443), key),
        ],
    );
    assert_ne!(ips(&p, "x"), ips(&p, "y"), "different Pods");
}

#[test]
fn shared_holders_that_break_the_sharing_rules_keep_the_older_one() {
    // Written before the namespace rule existed: the younger is moved, as any conflict.
    let p = run(
        &[pool("a", &["10.0.0.0/24"], 0)],
        &[
            svc_in("a", "x", 0, &["10.0.0.7"], json!({}), shared("k", None)),
            svc_in(
                "b",
                "y",
                1,
                &["10.0.0.7"],
                json!({"ports": [{"port": 443}]}),
                shared("k", None),
            ),
        ],
    );
    assert_eq!(ips_in(&p, "a", "x"), ["10.0.0.7"]);
    assert_eq!(ips_in(&p, "b", "y"), ["10.0.0.0"]);
    assert_eq!(reason_names(&p, "b", "y"), ["AddressConflict"]);
}

#[test]
fn narrowing_a_pools_selectors_keeps_the_addresses_services_hold_with_a_warning() {
    let narrowed = [red_pool(
        json!({"serviceSelector": {"matchLabels": {"tier": "web"}}}),
    )];
    let p = run(
        &narrowed,
        &[
            svc("held", 0, &["10.0.1.9"], json!({})),
            svc("new", 1, &[], json!({})),
        ],
    );
    assert_eq!(ips(&p, "held"), ["10.0.1.9"], "never renumbered");
    assert_eq!(
        reason_names(&p, "apps", "held"),
        ["AddressOutsidePoolRules"]
    );
    let note = &p.services[&key("held")].problems[0].message;
    assert!(note.contains(LOAD_BALANCER_IPS_ANNOTATION), "{note}");
    assert!(
        ips(&p, "new").is_empty(),
        "the new rules apply to new Services"
    );
    assert_eq!(p.pools["red"].assigned[&Family::V4], 1, "still counted");
}

#[test]
fn a_service_whose_namespace_a_pool_no_longer_selects_keeps_its_address() {
    let pools = [red_pool(
        json!({"namespaceSelector": {"matchLabels": {"team": "red"}}}),
    )];
    let ns = namespaces(&[("apps", &[])]);
    let p = plan(
        &pools,
        &[svc("held", 0, &["10.0.1.9"], json!({}))],
        &ns,
        &cfg(),
    );
    assert_eq!(ips(&p, "held"), ["10.0.1.9"]);
    assert_eq!(
        reason_names(&p, "apps", "held"),
        ["AddressOutsidePoolRules"]
    );
}

#[test]
fn an_address_whose_pool_was_deleted_stays_and_counts_in_no_pool() {
    let p = run(
        &[pool("other", &["10.0.2.0/24"], 0)],
        &[svc("held", 0, &["10.0.1.9"], json!({}))],
    );
    assert_eq!(ips(&p, "held"), ["10.0.1.9"]);
    assert!(reasons(&p, "held").is_empty());
    assert_eq!(p.pools["other"].assigned[&Family::V4], 0);
}

#[test]
fn a_service_kept_outside_its_pools_rules_moves_when_it_requests_an_allowed_address() {
    let pools = [
        red_pool(json!({"serviceSelector": {"matchLabels": {"tier": "web"}}})),
        pool("open", &["10.0.2.0/24"], 0),
    ];
    let p = run(
        &pools,
        &[svc_in(
            "apps",
            "held",
            0,
            &["10.0.1.9"],
            json!({}),
            json!({ LOAD_BALANCER_IPS_ANNOTATION: "10.0.2.4" }),
        )],
    );
    assert_eq!(ips(&p, "held"), ["10.0.2.4"]);
    assert!(reasons(&p, "held").is_empty());
    assert_eq!(p.pools["red"].assigned[&Family::V4], 0);
}

proptest! {
    /// Whatever the ages and requests, a Service that holds an address keeps it, unless its
    /// own request moved it elsewhere: no request takes a held address.
    #[test]
    fn a_request_never_takes_a_held_address_whatever_the_ages(
        svcs in proptest::collection::vec(
            (proptest::option::of(0u8..8), proptest::option::of(0u8..8), 0i64..5),
            1..10,
        ),
    ) {
        let pools = [pool("a", &["10.0.0.0/28"], 0)];
        let mut held_once = BTreeSet::new();
        let services: Vec<Service> = svcs
            .iter()
            .enumerate()
            .map(|(i, (held, asked, created))| {
                let held = held
                    .filter(|h| held_once.insert(*h))
                    .map(|h| format!("10.0.0.{h}"));
                let ips: Vec<&str> = held.iter().map(String::as_str).collect();
                let annotations = match asked {
                    Some(r) => json!({ LOAD_BALANCER_IPS_ANNOTATION: format!("10.0.0.{r}") }),
                    None => json!({}),
                };
                svc_in("apps", &format!("s{i}"), *created, &ips, json!({}), annotations)
            })
            .collect();
        let p = run(&pools, &services);
        for s in &services {
            let k = key_of(s);
            let held = current_ips(s);
            let asked = requested(s).unwrap_or_default();
            let got = &p.services[&k].ips;
            prop_assert!(
                held.is_empty() || *got == held || *got == asked,
                "{k}: held {held:?}, asked {asked:?}, got {got:?}"
            );
        }
    }
}

#[test]
fn an_address_given_back_in_a_plan_goes_to_the_next_new_service_as_first_fit_would() {
    // x (oldest) needs both families, the pools have only IPv4: it takes 10.0.0.0 and gives it
    // back; the per-range cursor must move back so that y still gets the first free address.
    let dual = json!({"ipFamilyPolicy": "RequireDualStack", "ipFamilies": ["IPv4", "IPv6"]});
    let p = run(
        &[pool("a", &["10.0.0.0/30"], 0)],
        &[
            svc("w", 0, &[], json!({})),
            svc("x", 1, &[], dual),
            svc("y", 2, &[], json!({})),
        ],
    );
    assert_eq!(ips(&p, "w"), ["10.0.0.0"]);
    assert!(ips(&p, "x").is_empty());
    assert_eq!(ips(&p, "y"), ["10.0.0.1"]);
}

#[test]
fn ten_thousand_new_services_get_consecutive_addresses_in_age_order_and_share_by_key() {
    // The cursor and the sharing-key index at the bench's size: the outcome is first fit's.
    let n = 10_000;
    let mut services: Vec<Service> = (0..n)
        .map(|i| svc(&format!("s{i:05}"), i, &[], json!({})))
        .collect();
    // Two Services of one sharing key, created last, on distinct ports: one address.
    let share = json!({"announcer.dev/allow-shared-ip": "k"});
    let mut a = svc_in("apps", "shared-a", n, &[], json!({}), share.clone());
    let b_spec = json!({"ports": [{ "port": 81, "protocol": "TCP" }]});
    let b = svc_in("apps", "shared-b", n + 1, &[], b_spec, share);
    a.metadata.creation_timestamp = Some(t(n));
    services.push(a);
    services.push(b);
    let p = run(&[pool("a", &["10.1.0.0/18"], 0)], &services);
    for i in 0..n {
        let want =
            std::net::Ipv4Addr::from(u32::from(std::net::Ipv4Addr::new(10, 1, 0, 0)) + i as u32);
        assert_eq!(ips(&p, &format!("s{i:05}")), [want.to_string()]);
    }
    assert_eq!(ips(&p, "shared-a"), ["10.1.39.16"]);
    assert_eq!(ips(&p, "shared-b"), ["10.1.39.16"]);
    assert_eq!(p.pools["a"].assigned[&Family::V4], 10_001);
}
