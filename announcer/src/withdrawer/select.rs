//! Which Pods a withdrawal of a node touches: those behind the node's endpoints in the
//! EndpointSlices of our LoadBalancer Services, in namespaces that opted in. Pure: the shell
//! passes what its stores hold.
//!
//! Why from EndpointSlices and not from every Pod on the node: the point is the traffic of our
//! Services (kube-proxy reads the slices), and the account then needs no list or watch of Pods
//! cluster-wide, only a `get` of the few it acts on. The Pod itself, fetched fresh, decides
//! (its `Ready` must still be True and it must still be bound to the node: [`super::pod`]).

use std::collections::{BTreeMap, BTreeSet};

use k8s_openapi::api::{core::v1::Service, discovery::v1::EndpointSlice};

/// The namespace label that opts a namespace in (`"true"`; anything else is out).
pub const OPT_IN_LABEL: &str = "announcer.dev/fast-endpoint-withdrawal";
/// The label selector of opted-in namespaces (for the Namespace watch).
pub const OPT_IN_SELECTOR: &str = "announcer.dev/fast-endpoint-withdrawal=true";
/// The label the EndpointSlice controller puts on a slice: the Service's name.
pub const SERVICE_NAME_LABEL: &str = "kubernetes.io/service-name";

/// A namespaced object's name.
#[derive(Clone, Debug, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct Key {
    /// Namespace.
    pub namespace: String,
    /// Name.
    pub name: String,
}

impl Key {
    /// `namespace/name`.
    pub fn new(namespace: impl Into<String>, name: impl Into<String>) -> Self {
        Key {
            namespace: namespace.into(),
            name: name.into(),
        }
    }
}

impl std::fmt::Display for Key {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "{}/{}", self.namespace, self.name)
    }
}

/// Whether `svc` is ours to act for: `type: LoadBalancer` and carrying the agents'
/// `announcer.dev/Announced` condition (whatever its status: an address we announced a moment
/// ago may be mid-move).
pub fn is_announced_load_balancer(svc: &Service) -> bool {
    svc.spec.as_ref().and_then(|s| s.type_.as_deref()) == Some("LoadBalancer")
        && crate::state::announced::condition(svc).is_some()
}

/// The Pods behind `node`'s endpoints, each with the Services (of its namespace) it backs
/// there: endpoints whose `nodeName` is `node` and whose `targetRef` is a Pod, in slices of a
/// Service for which `ours(namespace, service)` holds, in namespaces for which
/// `opted_in(namespace)` holds.
pub fn pods_on_node<'a>(
    node: &str,
    slices: impl IntoIterator<Item = &'a EndpointSlice>,
    opted_in: impl Fn(&str) -> bool,
    ours: impl Fn(&str, &str) -> bool,
) -> BTreeMap<Key, BTreeSet<String>> {
    let mut out: BTreeMap<Key, BTreeSet<String>> = BTreeMap::new();
    for slice in slices {
        let Some(ns) = slice.metadata.namespace.as_deref() else {
            continue;
        };
        if !opted_in(ns) {
            continue;
        }
        let Some(service) = slice
            .metadata
            .labels
            .as_ref()
            .and_then(|l| l.get(SERVICE_NAME_LABEL))
        else {
            continue;
        };
        if !ours(ns, service) {
            continue;
        }
        for ep in slice.endpoints.iter().flatten() {
            if ep.node_name.as_deref() != Some(node) {
                continue;
            }
            let Some(target) = &ep.target_ref else {
                continue;
            };
            if target.kind.as_deref() != Some("Pod") {
                continue;
            }
            let Some(name) = target.name.as_deref() else {
                continue;
            };
            // A Pod backs Services of its own namespace only.
            if target.namespace.as_deref().is_some_and(|n| n != ns) {
                continue;
            }
            out.entry(Key::new(ns, name))
                .or_default()
                .insert(service.clone());
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use k8s_openapi::{
        api::{
            core::v1::{ObjectReference, ServiceSpec, ServiceStatus},
            discovery::v1::Endpoint,
        },
        apimachinery::pkg::apis::meta::v1::{Condition, ObjectMeta},
    };

    use super::*;

    fn slice(ns: &str, service: &str, eps: &[(&str, Option<&str>, &str)]) -> EndpointSlice {
        EndpointSlice {
            metadata: ObjectMeta {
                namespace: Some(ns.into()),
                name: Some(format!("{service}-abcde")),
                labels: Some([(SERVICE_NAME_LABEL.to_string(), service.to_string())].into()),
                ..ObjectMeta::default()
            },
            address_type: "IPv4".into(),
            endpoints: Some(
                eps.iter()
                    .map(|(node, kind, pod)| Endpoint {
                        addresses: vec!["10.244.0.5".into()],
                        node_name: Some((*node).into()),
                        target_ref: kind.map(|k| ObjectReference {
                            kind: Some(k.into()),
                            name: Some((*pod).into()),
                            namespace: Some(ns.into()),
                            ..ObjectReference::default()
                        }),
                        ..Endpoint::default()
                    })
                    .collect(),
            ),
            ports: None,
        }
    }

    fn all_ns(_: &str) -> bool {
        true
    }

    fn all_svc(_: &str, _: &str) -> bool {
        true
    }

    fn names(m: &BTreeMap<Key, BTreeSet<String>>) -> Vec<String> {
        m.keys().map(Key::to_string).collect()
    }

    #[test]
    fn only_endpoints_on_the_node_with_a_pod_target_are_selected() {
        let s = slice(
            "shop",
            "web",
            &[
                ("node-c", Some("Pod"), "web-1"),
                ("node-a", Some("Pod"), "web-2"),
                ("node-c", None, "external"),
                ("node-c", Some("Node"), "node-c"),
            ],
        );
        assert_eq!(
            names(&pods_on_node("node-c", [&s], all_ns, all_svc)),
            ["shop/web-1"]
        );
    }

    #[test]
    fn a_namespace_that_has_not_opted_in_contributes_no_pod() {
        let a = slice("shop", "web", &[("node-c", Some("Pod"), "web-1")]);
        let b = slice("bank", "api", &[("node-c", Some("Pod"), "api-1")]);
        let got = pods_on_node("node-c", [&a, &b], |ns| ns == "shop", all_svc);
        assert_eq!(names(&got), ["shop/web-1"]);
    }

    #[test]
    fn slices_of_services_that_are_not_ours_contribute_no_pod() {
        let a = slice("shop", "web", &[("node-c", Some("Pod"), "web-1")]);
        let b = slice("shop", "internal", &[("node-c", Some("Pod"), "db-1")]);
        let got = pods_on_node("node-c", [&a, &b], all_ns, |_, s| s == "web");
        assert_eq!(names(&got), ["shop/web-1"]);
    }

    #[test]
    fn a_pod_behind_two_services_is_selected_once_naming_both() {
        let a = slice("shop", "web", &[("node-c", Some("Pod"), "web-1")]);
        let b = slice("shop", "web-v6", &[("node-c", Some("Pod"), "web-1")]);
        let got = pods_on_node("node-c", [&a, &b], all_ns, all_svc);
        assert_eq!(
            got[&Key::new("shop", "web-1")],
            BTreeSet::from(["web".to_string(), "web-v6".to_string()])
        );
        assert_eq!(got.len(), 1);
    }

    fn service(type_: &str, announced: bool) -> Service {
        Service {
            spec: Some(ServiceSpec {
                type_: Some(type_.into()),
                ..ServiceSpec::default()
            }),
            status: Some(ServiceStatus {
                conditions: announced.then(|| {
                    vec![Condition {
                        type_: crate::state::announced::CONDITION_TYPE.into(),
                        status: "True".into(),
                        reason: "Announced".into(),
                        message: String::new(),
                        last_transition_time: k8s_openapi::apimachinery::pkg::apis::meta::v1::Time(
                            k8s_openapi::jiff::Timestamp::UNIX_EPOCH,
                        ),
                        observed_generation: None,
                    }]
                }),
                ..ServiceStatus::default()
            }),
            ..Service::default()
        }
    }

    #[test]
    fn a_service_is_ours_only_as_an_announced_load_balancer() {
        assert!(is_announced_load_balancer(&service("LoadBalancer", true)));
        assert!(!is_announced_load_balancer(&service("LoadBalancer", false)));
        assert!(!is_announced_load_balancer(&service("ClusterIP", true)));
    }
}
