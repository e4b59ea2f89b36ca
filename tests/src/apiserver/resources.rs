//! The resource types the server knows: their REST names, scope, subresources, and how a body is
//! validated.
//!
//! The set is exactly what the announcer agent (and `kube::runtime::events::Recorder`) touches,
//! its `AddressPool` CRD included.
//! Bodies are checked by decoding them into the `k8s-openapi` type — the same schema the real
//! server decodes into — and re-encoding: a wrongly typed field is a 400 like kube-apiserver's
//! decoder error, and unknown fields are dropped, as kube-apiserver does under the default
//! `fieldValidation=Warn` (without the warning header).

use announcer::ipam::AddressPool;
use k8s_openapi::api::coordination::v1::Lease;
use k8s_openapi::api::core::v1::{
    ConfigMap, Event as CoreEvent, Namespace, Node, Pod, Secret, Service,
};
use k8s_openapi::api::discovery::v1::EndpointSlice;
use k8s_openapi::api::events::v1::Event;
use serde::Serialize;
use serde::de::DeserializeOwned;
use serde_json::Value;

use super::validate::{self, Cause, NameRule};

/// One REST resource.
#[derive(Debug)]
pub(crate) struct ResourceType {
    pub group: &'static str,
    pub version: &'static str,
    pub plural: &'static str,
    pub kind: &'static str,
    pub namespaced: bool,
    /// Has a `/status` subresource: the main resource cannot change `status` and vice versa.
    pub status_subresource: bool,
    /// The create strategy wipes `status` (services); nodes keep theirs.
    pub clear_status_on_create: bool,
    pub name_rule: NameRule,
    /// Decode-and-re-encode through the typed schema.
    pub decode: fn(Value) -> Result<Value, String>,
    /// Kind-specific semantic validation (422 `Invalid`).
    pub check: fn(&Value) -> Vec<Cause>,
}

impl ResourceType {
    pub fn api_version(&self) -> String {
        if self.group.is_empty() {
            self.version.to_string()
        } else {
            format!("{}/{}", self.group, self.version)
        }
    }

    /// `leases.coordination.k8s.io` / `services`: how errors name the resource.
    pub fn qualified(&self) -> String {
        if self.group.is_empty() {
            self.plural.to_string()
        } else {
            format!("{}.{}", self.plural, self.group)
        }
    }

    /// `Lease.coordination.k8s.io` / `Service`: how `Invalid` errors name the kind.
    pub fn kind_qualified(&self) -> String {
        if self.group.is_empty() {
            self.kind.to_string()
        } else {
            format!("{}.{}", self.kind, self.group)
        }
    }
}

fn roundtrip<K: DeserializeOwned + Serialize>(value: Value) -> Result<Value, String> {
    let typed: K = serde_json::from_value(value).map_err(|e| e.to_string())?;
    serde_json::to_value(typed).map_err(|e| e.to_string())
}

/// A Namespace, with the `kubernetes.io/metadata.name` label kube-apiserver sets on every
/// namespace (so that selectors can pick namespaces by name, as MetalLB's `namespaces` do).
fn namespace(value: Value) -> Result<Value, String> {
    let mut v = roundtrip::<Namespace>(value)?;
    if let Some(name) = v["metadata"]["name"].as_str().map(String::from) {
        if !v["metadata"]["labels"].is_object() {
            v["metadata"]["labels"] = serde_json::json!({});
        }
        v["metadata"]["labels"]["kubernetes.io/metadata.name"] = Value::String(name);
    }
    Ok(v)
}

fn undecodable(_: Value) -> Result<Value, String> {
    Err("no schema".into())
}

fn no_checks(_: &Value) -> Vec<Cause> {
    Vec::new()
}

const fn core(plural: &'static str, kind: &'static str) -> ResourceType {
    ResourceType {
        group: "",
        version: "v1",
        plural,
        kind,
        namespaced: true,
        status_subresource: false,
        clear_status_on_create: false,
        name_rule: NameRule::Subdomain,
        decode: undecodable,
        check: no_checks,
    }
}

/// Every served resource. Indices into this table identify a resource in the store.
pub(crate) static RESOURCES: &[ResourceType] = &[
    ResourceType {
        status_subresource: true,
        clear_status_on_create: true,
        name_rule: NameRule::Rfc1035Label,
        decode: roundtrip::<Service>,
        ..core("services", "Service")
    },
    ResourceType {
        namespaced: false,
        status_subresource: true,
        decode: roundtrip::<Node>,
        ..core("nodes", "Node")
    },
    ResourceType {
        namespaced: false,
        status_subresource: true,
        name_rule: NameRule::Label,
        decode: namespace,
        ..core("namespaces", "Namespace")
    },
    ResourceType {
        decode: roundtrip::<Secret>,
        ..core("secrets", "Secret")
    },
    ResourceType {
        decode: roundtrip::<ConfigMap>,
        ..core("configmaps", "ConfigMap")
    },
    ResourceType {
        decode: roundtrip::<CoreEvent>,
        ..core("events", "Event")
    },
    ResourceType {
        group: "discovery.k8s.io",
        decode: roundtrip::<EndpointSlice>,
        ..core("endpointslices", "EndpointSlice")
    },
    ResourceType {
        group: "coordination.k8s.io",
        decode: roundtrip::<Lease>,
        check: validate::lease,
        ..core("leases", "Lease")
    },
    ResourceType {
        group: "events.k8s.io",
        decode: roundtrip::<Event>,
        check: validate::events_v1,
        ..core("events", "Event")
    },
    // The withdrawal controller reads Pods and patches their status (strategic merge).
    ResourceType {
        status_subresource: true,
        decode: roundtrip::<Pod>,
        ..core("pods", "Pod")
    },
    // The agent's own CRD. Only its structure is checked (the typed decode); the CRD's CEL
    // rules (address syntax, range order) are kube-apiserver's, tested there.
    ResourceType {
        group: "announcer.dev",
        version: "v1alpha1",
        namespaced: false,
        status_subresource: true,
        decode: roundtrip::<AddressPool>,
        ..core("addresspools", "AddressPool")
    },
];

/// The index of `group/version/plural`, if served.
pub(crate) fn lookup(group: &str, version: &str, plural: &str) -> Option<usize> {
    RESOURCES
        .iter()
        .position(|r| r.group == group && r.version == version && r.plural == plural)
}

/// The index of the resource whose objects carry `apiVersion`/`kind` (for seed manifests).
pub(crate) fn lookup_kind(api_version: &str, kind: &str) -> Option<usize> {
    RESOURCES
        .iter()
        .position(|r| r.api_version() == api_version && r.kind == kind)
}

/// The group versions served, for discovery: `(group, version)`.
pub(crate) fn group_versions() -> Vec<(&'static str, &'static str)> {
    let mut out: Vec<(&str, &str)> = Vec::new();
    for r in RESOURCES {
        if !out.contains(&(r.group, r.version)) {
            out.push((r.group, r.version));
        }
    }
    out
}
