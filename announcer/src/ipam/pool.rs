//! The `AddressPool` custom resource (`announcer.dev/v1alpha1`, cluster-scoped), as stored.
//!
//! The CRD itself (structural schema, validation, printer columns) is `deploy/crds/addresspool.yaml`;
//! these types are its Rust view and must stay field for field in step with it (a test compares
//! them). The schema rejects what it can express; what it cannot (ranges whose ends are in the
//! wrong order, overlapping pools) is reported in the pool's status conditions.

use k8s_openapi::apimachinery::pkg::apis::meta::v1::{Condition, LabelSelector};
use kube::CustomResource;
use serde::{Deserialize, Serialize};

/// Service annotation: the pool to allocate from (by name). Overrides `autoAssign: false`, not
/// the pool's selectors: a pool the Service may not use is refused with a Warning.
pub const ADDRESS_POOL_ANNOTATION: &str = "announcer.dev/address-pool";
/// Service annotation: the addresses requested, comma-separated, at most one per family
/// (`spec.loadBalancerIP`, deprecated upstream, is read too).
pub const LOAD_BALANCER_IPS_ANNOTATION: &str = "announcer.dev/load-balancer-ips";
/// Service annotation: Services with the same value may share an address when their ports do
/// not clash, they are in one namespace (or both allow each other's with
/// [`ALLOW_SHARED_IP_NAMESPACES_ANNOTATION`]) and their traffic policies agree.
pub const ALLOW_SHARED_IP_ANNOTATION: &str = "announcer.dev/allow-shared-ip";
/// Service annotation: the other namespaces (comma-separated, or `*` for all) whose Services
/// this one may share its address with. Both Services must allow the other's namespace.
pub const ALLOW_SHARED_IP_NAMESPACES_ANNOTATION: &str = "announcer.dev/allow-shared-ip-namespaces";

/// A set of addresses the allocator may assign to LoadBalancer Services, and where they may be
/// announced.
#[derive(CustomResource, Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
#[kube(
    group = "announcer.dev",
    version = "v1alpha1",
    kind = "AddressPool",
    plural = "addresspools",
    status = "AddressPoolStatus",
    schema = "disabled"
)]
#[serde(rename_all = "camelCase")]
pub struct AddressPoolSpec {
    /// CIDRs (`10.0.0.0/24`, `fd00::/120`) and inclusive ranges (`10.0.0.10-10.0.0.20`), IPv4
    /// and IPv6 mixed.
    pub addresses: Vec<String>,
    /// Whether Services that do not name a pool get addresses from this one (default `true`).
    #[serde(default = "yes")]
    pub auto_assign: bool,
    /// Skip IPv4 addresses ending in `.0` or `.255`, which some old clients and routers drop.
    /// (`avoidBuggyIPs` in the CRD: camelCase would spell it `avoidBuggyIps`.)
    #[serde(
        default,
        rename = "avoidBuggyIPs",
        skip_serializing_if = "std::ops::Not::not"
    )]
    pub avoid_buggy_ips: bool,
    /// Only Services whose labels match may get addresses from it (unset: all).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub service_selector: Option<LabelSelector>,
    /// Only Services in namespaces whose labels match (unset: all).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub namespace_selector: Option<LabelSelector>,
    /// Only nodes whose labels match announce its addresses (unset: the agent's
    /// `nodeSelector`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub node_selector: Option<LabelSelector>,
    /// Only these interfaces (names or `*` globs) announce its addresses; a node with none of
    /// them is no candidate (empty: the agent's rule, the link on the address's subnet, else
    /// the InternalIP's link).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub interfaces: Vec<String>,
    /// Nodes (by name) that rank first for its addresses while they are eligible; the others
    /// keep their rendezvous order behind them. A preferred node that returns takes an address
    /// back only make-before-break (the interim owner lets go once it answers). Empty: plain
    /// rendezvous ranking.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub preferred_nodes: Vec<String>,
}

fn yes() -> bool {
    true
}

/// What the allocator last wrote about a pool. Written only when it changes.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct AddressPoolStatus {
    /// IPv4 addresses assigned to Services.
    #[serde(default, rename = "assignedIPv4")]
    pub assigned_ipv4: i64,
    /// IPv4 addresses still free (saturates at 2^63 - 1).
    #[serde(default, rename = "availableIPv4")]
    pub available_ipv4: i64,
    /// IPv6 addresses assigned to Services.
    #[serde(default, rename = "assignedIPv6")]
    pub assigned_ipv6: i64,
    /// IPv6 addresses still free (saturates at 2^63 - 1).
    #[serde(default, rename = "availableIPv6")]
    pub available_ipv6: i64,
    /// `Valid` (`False` when an address is unusable or overlaps an older pool: the pool is then
    /// not used) and `Exhausted` (`True` when a family has no free address left).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub conditions: Vec<Condition>,
    /// The `metadata.generation` these conditions describe.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub observed_generation: Option<i64>,
}

impl AddressPoolSpec {
    /// Whether `ip` is one of the pool's addresses (an entry that does not parse matches
    /// nothing; the allocator reports it in the pool's `Valid` condition).
    pub fn contains(&self, ip: std::net::IpAddr) -> bool {
        self.addresses
            .iter()
            .any(|a| super::Range::parse(a).is_ok_and(|r| r.contains(ip)))
    }
}

#[cfg(test)]
mod tests {
    use std::collections::BTreeSet;

    use k8s_openapi::apimachinery::pkg::apis::meta::v1::Time;

    use super::*;

    /// The property names the CRD's schema declares at `path` (e.g. `["spec"]`).
    fn crd_properties(path: &[&str]) -> BTreeSet<String> {
        let text = include_str!("../../../deploy/crds/addresspool.yaml");
        let crd: serde_json::Value = serde_saphyr::from_str(text).expect("the CRD parses");
        let mut node = &crd["spec"]["versions"][0]["schema"]["openAPIV3Schema"];
        for p in path {
            node = &node["properties"][*p];
        }
        node["properties"]
            .as_object()
            .expect("properties")
            .keys()
            .cloned()
            .collect()
    }

    fn keys(v: serde_json::Value) -> BTreeSet<String> {
        v.as_object().expect("object").keys().cloned().collect()
    }

    #[test]
    fn the_spec_has_the_crds_fields_spelled_as_the_crd_spells_them() {
        let spec = AddressPoolSpec {
            addresses: vec!["10.0.0.0/24".into()],
            auto_assign: false,
            avoid_buggy_ips: true,
            service_selector: Some(LabelSelector::default()),
            namespace_selector: Some(LabelSelector::default()),
            node_selector: Some(LabelSelector::default()),
            interfaces: vec!["eth0".into()],
            preferred_nodes: vec!["node-a".into()],
        };
        let json = serde_json::to_value(&spec).expect("serialises");
        assert_eq!(keys(json.clone()), crd_properties(&["spec"]));
        let back: AddressPoolSpec = serde_json::from_value(json).expect("round trip");
        assert_eq!(back, spec);
    }

    #[test]
    fn the_status_has_the_crds_fields_spelled_as_the_crd_spells_them() {
        let status = AddressPoolStatus {
            conditions: vec![Condition {
                type_: "Valid".into(),
                status: "True".into(),
                reason: "Valid".into(),
                message: String::new(),
                last_transition_time: Time(k8s_openapi::jiff::Timestamp::UNIX_EPOCH),
                observed_generation: None,
            }],
            observed_generation: Some(1),
            ..AddressPoolStatus::default()
        };
        let json = serde_json::to_value(&status).expect("serialises");
        assert_eq!(keys(json), crd_properties(&["status"]));
    }

    #[test]
    fn auto_assign_defaults_to_true() {
        let spec: AddressPoolSpec =
            serde_json::from_value(serde_json::json!({"addresses": ["10.0.0.0/24"]}))
                .expect("spec");
        assert!(spec.auto_assign);
        assert!(!spec.avoid_buggy_ips);
    }

    #[test]
    fn contains_matches_cidrs_and_inclusive_ranges_of_the_same_family() {
        let p = AddressPoolSpec {
            addresses: [
                "10.0.0.0/24",
                "10.1.0.10-10.1.0.20",
                "fd00::/120",
                "0.0.0.0/0x",
            ]
            .map(String::from)
            .to_vec(),
            ..Default::default()
        };
        let has = |ip: &str| p.contains(ip.parse().unwrap());
        assert!(has("10.0.0.255") && !has("10.0.1.0"));
        assert!(has("10.1.0.10") && has("10.1.0.20") && !has("10.1.0.21"));
        assert!(has("fd00::ff") && !has("fd00::100"));
        assert!(!has("::ffff:10.0.0.1"));
    }
}
