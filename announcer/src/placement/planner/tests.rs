//! The planner against planning from scratch, and what one change re-places.

use std::collections::BTreeMap;

use k8s_openapi::{
    api::{
        core::v1::{
            LoadBalancerIngress, LoadBalancerStatus, NodeAddress, NodeCondition, NodeStatus,
            ServiceSpec, ServiceStatus,
        },
        discovery::v1::{Endpoint, EndpointConditions},
    },
    apimachinery::pkg::apis::meta::v1::{ObjectMeta, Time},
    jiff::Timestamp,
};

use super::*;
use crate::ipam::{ALLOW_SHARED_IP_ANNOTATION, AddressPoolSpec};

/// A small deterministic generator (xorshift64).
struct Rng(u64);

impl Rng {
    fn next(&mut self) -> u64 {
        self.0 ^= self.0 << 13;
        self.0 ^= self.0 >> 7;
        self.0 ^= self.0 << 17;
        self.0
    }

    fn below(&mut self, n: usize) -> usize {
        (self.next() % n as u64) as usize
    }

    fn chance(&mut self, percent: u64) -> bool {
        self.next() % 100 < percent
    }
}

const NODES: usize = 6;
/// Addresses Services claim: pool A's, pool B's, outside both, a node's own, never unicast, v6.
const ADDRESSES: [&str; 8] = [
    "10.0.0.1", "10.0.0.2", "10.0.1.1", "10.0.1.2", "10.0.2.1", "10.1.0.3", "0.0.0.0", "fd00::1",
];

fn node_name(i: usize) -> String {
    format!("n{i}")
}

fn node(i: usize, rng: &mut Rng) -> Node {
    Node {
        metadata: ObjectMeta {
            name: Some(node_name(i)),
            labels: Some([("zone".to_owned(), ["a", "b"][rng.below(2)].to_owned())].into()),
            ..Default::default()
        },
        status: Some(NodeStatus {
            conditions: Some(vec![NodeCondition {
                type_: "Ready".into(),
                status: if rng.chance(80) { "True" } else { "False" }.into(),
                ..Default::default()
            }]),
            addresses: Some(vec![NodeAddress {
                type_: "InternalIP".into(),
                address: format!("10.1.0.{}", i + 1),
            }]),
            ..Default::default()
        }),
        ..Default::default()
    }
}

fn service(ns: &str, name: &str, rng: &mut Rng) -> Service {
    let mut annotations = BTreeMap::new();
    if rng.chance(40) {
        annotations.insert(
            ALLOW_SHARED_IP_ANNOTATION.to_owned(),
            ["k1", "k2"][rng.below(2)].to_owned(),
        );
    }
    let mut ingress: Vec<LoadBalancerIngress> = (0..1 + rng.below(2))
        .map(|_| LoadBalancerIngress {
            ip: Some(ADDRESSES[rng.below(ADDRESSES.len())].to_owned()),
            ..Default::default()
        })
        .collect();
    if rng.chance(5) {
        ingress.push(LoadBalancerIngress {
            hostname: Some("lb.example".into()),
            ..Default::default()
        });
    }
    if rng.chance(5) {
        ingress.push(LoadBalancerIngress {
            ip: Some("not-an-ip".into()),
            ..Default::default()
        });
    }
    Service {
        metadata: ObjectMeta {
            namespace: Some(ns.into()),
            name: Some(name.into()),
            annotations: Some(annotations),
            creation_timestamp: Some(Time(
                Timestamp::from_second(1_700_000_000 + rng.below(4) as i64).unwrap(),
            )),
            ..Default::default()
        },
        spec: Some(ServiceSpec {
            type_: Some(
                if rng.chance(90) {
                    "LoadBalancer"
                } else {
                    "ClusterIP"
                }
                .into(),
            ),
            external_traffic_policy: Some(if rng.chance(30) { "Local" } else { "Cluster" }.into()),
            ..Default::default()
        }),
        status: Some(ServiceStatus {
            load_balancer: Some(LoadBalancerStatus {
                ingress: Some(ingress),
            }),
            ..Default::default()
        }),
    }
}

fn slice(ns: &str, svc: &str, name: &str, rng: &mut Rng) -> EndpointSlice {
    EndpointSlice {
        metadata: ObjectMeta {
            namespace: Some(ns.into()),
            name: Some(name.into()),
            labels: Some([(SERVICE_NAME_LABEL.to_owned(), svc.to_owned())].into()),
            ..Default::default()
        },
        address_type: "IPv4".into(),
        endpoints: Some(
            (0..rng.below(3))
                .map(|_| Endpoint {
                    addresses: vec!["10.244.0.7".into()],
                    node_name: Some(node_name(rng.below(NODES))),
                    conditions: Some(EndpointConditions {
                        ready: Some(rng.chance(80)),
                        ..Default::default()
                    }),
                    ..Default::default()
                })
                .collect(),
        ),
        ports: None,
    }
}

fn pool(name: &str, cidr: &str, rng: &mut Rng) -> AddressPool {
    let mut p = AddressPool::new(
        name,
        AddressPoolSpec {
            addresses: vec![cidr.to_owned()],
            auto_assign: true,
            ..Default::default()
        },
    );
    if rng.chance(50) {
        p.spec.node_selector = Some(
            k8s_openapi::apimachinery::pkg::apis::meta::v1::LabelSelector {
                match_labels: Some([("zone".to_owned(), "a".to_owned())].into()),
                ..Default::default()
            },
        );
    }
    if rng.chance(50) {
        p.spec.preferred_nodes = vec![node_name(rng.below(NODES))];
    }
    p
}

/// The objects the watches hold, by kind and namespace/name.
#[derive(Default)]
struct Stores {
    services: BTreeMap<(String, String), Service>,
    slices: BTreeMap<(String, String), EndpointSlice>,
    nodes: BTreeMap<String, Node>,
    pools: BTreeMap<String, AddressPool>,
}

impl Stores {
    fn plan(&self, sel: &Selection) -> Placement {
        let services: Vec<&Service> = self.services.values().collect();
        let slices: Vec<&EndpointSlice> = self.slices.values().collect();
        let nodes: Vec<&Node> = self.nodes.values().collect();
        let pools: Vec<&AddressPool> = self.pools.values().collect();
        eligibility::plan_placed(&services, &slices, &nodes, &pools, sel)
    }
}

/// One random watch event, applied to both the stores and the planner.
fn step(rng: &mut Rng, stores: &mut Stores, planner: &mut Planner) {
    let ns = ["a", "b"][rng.below(2)];
    let svc = format!("s{}", rng.below(6));
    let delete = rng.chance(20);
    match rng.below(10) {
        0..=3 => {
            let key = (ns.to_owned(), svc.clone());
            if delete {
                if let Some(s) = stores.services.remove(&key) {
                    planner.delete_service(&s);
                }
            } else {
                let s = service(ns, &svc, rng);
                stores.services.insert(key, s.clone());
                planner.apply_service(Arc::new(s));
            }
        }
        4..=6 => {
            let name = format!("{svc}-{}", rng.below(2));
            let key = (ns.to_owned(), name.clone());
            if delete {
                if let Some(s) = stores.slices.remove(&key) {
                    planner.delete_slice(&s);
                }
            } else {
                let s = slice(ns, &svc, &name, rng);
                stores.slices.insert(key, s.clone());
                planner.apply_slice(&s);
            }
        }
        7..=8 => {
            let i = rng.below(NODES);
            if delete {
                if let Some(n) = stores.nodes.remove(&node_name(i)) {
                    planner.delete_node(&n);
                }
            } else {
                let n = node(i, rng);
                stores.nodes.insert(node_name(i), n.clone());
                planner.apply_node(Arc::new(n));
            }
        }
        _ => {
            let (name, cidr) = [("pa", "10.0.0.0/28"), ("pb", "10.0.1.0/28")][rng.below(2)];
            if delete {
                if let Some(p) = stores.pools.remove(name) {
                    planner.delete_pool(&p);
                }
            } else {
                let p = pool(name, cidr, rng);
                stores.pools.insert(name.to_owned(), p.clone());
                planner.apply_pool(Arc::new(p));
            }
        }
    }
}

#[test]
fn a_planner_fed_one_event_at_a_time_places_like_a_plan_from_scratch() {
    let sel = Selection::default();
    // What the events reached, so that a generator gone blind fails the test.
    let (mut most_vips, mut reasons) = (0, BTreeSet::new());
    for seed in 1..=100u64 {
        let mut rng = Rng(0x9e37_79b9_7f4a_7c15 ^ seed.wrapping_mul(0x2545_f491_4f6c_dd1d));
        let (mut stores, mut planner) = (Stores::default(), Planner::new(sel.clone()));
        for i in 0..300 {
            step(&mut rng, &mut stores, &mut planner);
            // Several events between two replans, as a coalescing caller feeds them.
            if rng.chance(50) {
                planner.replan();
                let placement = planner.placement();
                assert_eq!(placement, stores.plan(&sel), "seed {seed}, event {i}");
                most_vips = most_vips.max(placement.vips.len());
                reasons.extend(placement.problems.iter().map(|p| p.reason.event_reason()));
            }
        }
    }
    assert!(most_vips >= 4, "at most {most_vips} VIPs placed");
    assert!(reasons.len() >= 7, "only {reasons:?}");
}

#[test]
fn the_delta_of_a_replan_is_what_changed_in_the_placement() {
    let sel = Selection::default();
    let mut rng = Rng(0x1234_5678_9abc_def1);
    let (mut stores, mut planner) = (Stores::default(), Planner::new(sel.clone()));
    let mut before = Placement::default();
    for i in 0..2000 {
        step(&mut rng, &mut stores, &mut planner);
        let delta = planner.replan();
        let after = planner.placement();
        let old: BTreeMap<IpAddr, &VipPlacement> = before.vips.iter().map(|v| (v.vip, v)).collect();
        let new: BTreeMap<IpAddr, &VipPlacement> = after.vips.iter().map(|v| (v.vip, v)).collect();
        let placed: Vec<&VipPlacement> = new
            .iter()
            .filter(|(ip, v)| old.get(ip) != Some(v))
            .map(|(_, v)| *v)
            .collect();
        let gone: Vec<IpAddr> = old
            .keys()
            .filter(|ip| !new.contains_key(ip))
            .copied()
            .collect();
        assert_eq!(
            delta.placed.values().collect::<Vec<_>>(),
            placed,
            "event {i}"
        );
        assert_eq!(
            delta.gone.iter().copied().collect::<Vec<_>>(),
            gone,
            "event {i}"
        );
        assert_eq!(
            delta.problems_changed,
            before.problems != after.problems,
            "event {i}"
        );
        before = after;
    }
}

/// A planner with three Ready nodes and two Cluster-policy Services with one VIP each.
fn two_services() -> (Planner, Service, EndpointSlice) {
    let mut rng = Rng(7);
    let mut planner = Planner::new(Selection::default());
    for i in 0..3 {
        let mut n = node(i, &mut rng);
        n.status.as_mut().unwrap().conditions.as_mut().unwrap()[0].status = "True".into();
        planner.apply_node(Arc::new(n));
    }
    let mut web = service("a", "web", &mut rng);
    let ingress = |ip: &str| {
        Some(LoadBalancerStatus {
            ingress: Some(vec![LoadBalancerIngress {
                ip: Some(ip.into()),
                ..Default::default()
            }]),
        })
    };
    web.spec.as_mut().unwrap().type_ = Some("LoadBalancer".into());
    web.spec.as_mut().unwrap().external_traffic_policy = Some("Cluster".into());
    web.metadata.annotations = None;
    web.status.as_mut().unwrap().load_balancer = ingress("10.0.2.1");
    let mut api = web.clone();
    api.metadata.name = Some("api".into());
    api.status.as_mut().unwrap().load_balancer = ingress("10.0.2.2");
    let mut eps = slice("a", "web", "web-0", &mut rng);
    eps.endpoints = Some(vec![Endpoint {
        addresses: vec!["10.244.0.7".into()],
        node_name: Some(node_name(0)),
        ..Default::default()
    }]);
    let mut api_eps = eps.clone();
    api_eps.metadata.name = Some("api-0".into());
    api_eps.metadata.labels = Some([(SERVICE_NAME_LABEL.to_owned(), "api".to_owned())].into());
    planner.apply_service(Arc::new(web.clone()));
    planner.apply_service(Arc::new(api));
    planner.apply_slice(&eps);
    planner.apply_slice(&api_eps);
    assert_eq!(planner.replan().placed.len(), 2);
    (planner, web, eps)
}

#[test]
fn a_service_moved_to_another_address_replaces_only_its_own() {
    let (mut planner, mut web, _) = two_services();
    web.status
        .as_mut()
        .unwrap()
        .load_balancer
        .as_mut()
        .unwrap()
        .ingress
        .as_mut()
        .unwrap()[0]
        .ip = Some("10.0.2.3".into());
    planner.apply_service(Arc::new(web));
    let delta = planner.replan();
    let placed: Vec<IpAddr> = delta.placed.keys().copied().collect();
    assert_eq!(placed, ["10.0.2.3".parse::<IpAddr>().unwrap()]);
    assert_eq!(delta.gone, ["10.0.2.1".parse::<IpAddr>().unwrap()].into());
}

#[test]
fn an_endpoint_moving_between_pods_on_the_same_node_replaces_nothing() {
    let (mut planner, _, mut eps) = two_services();
    eps.endpoints.as_mut().unwrap()[0].addresses = vec!["10.244.0.99".into()];
    planner.apply_slice(&eps);
    assert!(planner.replan().is_empty());
}

#[test]
fn a_node_that_stops_being_ready_replaces_every_cluster_policy_vip() {
    let (mut planner, _, _) = two_services();
    let mut rng = Rng(7);
    let mut n = node(2, &mut rng);
    n.status.as_mut().unwrap().conditions.as_mut().unwrap()[0].status = "False".into();
    planner.apply_node(Arc::new(n));
    let delta = planner.replan();
    assert_eq!(delta.placed.len(), 2);
    assert!(delta.placed.values().all(|v| !v.eligible.contains("n2")));
}

#[test]
fn a_node_change_that_keeps_the_rules_replaces_nothing() {
    let (mut planner, _, _) = two_services();
    let mut rng = Rng(7);
    let mut n = node(1, &mut rng);
    n.status.as_mut().unwrap().conditions.as_mut().unwrap()[0].status = "True".into();
    n.metadata.annotations = Some([("note".to_owned(), "changed".to_owned())].into());
    planner.apply_node(Arc::new(n));
    assert!(planner.replan().is_empty());
}

#[test]
fn a_relist_without_a_service_drops_its_vip() {
    let (mut planner, _, _) = two_services();
    // The relist lists only `api`: `web` was deleted while the watch was down.
    let api = planner
        .services
        .values()
        .find(|s| s.metadata.name.as_deref() == Some("api"));
    let api = api.cloned().unwrap();
    Service::resync(&mut planner, vec![api]);
    let delta = planner.replan();
    assert_eq!(delta.gone, ["10.0.2.1".parse::<IpAddr>().unwrap()].into());
    assert!(delta.placed.is_empty());
}

#[test]
fn merged_deltas_applied_in_order_rebuild_the_placement() {
    // What the agent does: the watch tasks merge each replan's delta until the election
    // thread takes them, and it applies what it takes to the VIPs it has.
    let sel = Selection::default();
    let mut rng = Rng(0xfeed_beef_1234_5678);
    let (mut stores, mut planner) = (Stores::default(), Planner::new(sel.clone()));
    let (mut pending, mut applied) = (PlanDelta::default(), BTreeMap::new());
    for i in 0..3000 {
        step(&mut rng, &mut stores, &mut planner);
        pending.merge(planner.replan());
        if rng.chance(20) {
            let taken = std::mem::take(&mut pending);
            for ip in &taken.gone {
                applied.remove(ip);
            }
            applied.extend(taken.placed);
            let vips: Vec<&VipPlacement> = applied.values().collect();
            assert_eq!(vips, planner.vips().collect::<Vec<_>>(), "event {i}");
        }
    }
}
