//! Semantic validation kube-apiserver applies after decoding: object names, labels, and the
//! per-kind rules of the kinds the agent writes (leases, `events.k8s.io` events).
//!
//! Each rule mirrors `k8s.io/apimachinery/pkg/util/validation` or the kind's
//! `pkg/apis/<group>/validation`; a violation is a 422 `Invalid` with one cause per field, so a
//! client bug that a real cluster would reject is rejected here too. The causes ([`Cause`]) and
//! the name rules ([`NameRule`]) are defined here, below the resource table and the `Status`
//! errors that use them.

use serde_json::Value;

pub(crate) use announcer::placement::selector::{
    is_dns1035_label, is_dns1123_label, is_dns1123_subdomain, is_label_value, is_qualified_name,
};

/// Which rule a kind's `metadata.name` follows (`apimachinery/pkg/api/validation/path`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum NameRule {
    /// RFC 1123 subdomain: most kinds.
    Subdomain,
    /// RFC 1123 label: namespaces.
    Label,
    /// RFC 1035 label (starts with a letter): services.
    Rfc1035Label,
}

/// One `StatusCause` of an `Invalid` error.
#[derive(Debug, Clone)]
pub(crate) struct Cause {
    pub reason: &'static str,
    pub field: String,
    pub message: String,
}

impl Cause {
    pub fn required(field: &str) -> Self {
        Self {
            reason: "FieldValueRequired",
            field: field.into(),
            message: "Required value".into(),
        }
    }

    pub fn invalid(field: &str, value: &Value, why: &str) -> Self {
        Self {
            reason: "FieldValueInvalid",
            field: field.into(),
            message: format!("Invalid value: {value}: {why}"),
        }
    }
}

/// `ValidateObjectMeta`: the name rule of the kind and well-formed labels and annotation keys.
pub(crate) fn object_meta(obj: &Value, rule: NameRule) -> Vec<Cause> {
    let mut causes = Vec::new();
    let meta = &obj["metadata"];
    match meta["name"].as_str() {
        None | Some("") => causes.push(Cause::required("metadata.name")),
        Some(name) => {
            let (ok, why) = match rule {
                NameRule::Subdomain => (
                    is_dns1123_subdomain(name),
                    "a lowercase RFC 1123 subdomain must consist of lower case alphanumeric characters, '-' or '.', and must start and end with an alphanumeric character",
                ),
                NameRule::Label => (
                    is_dns1123_label(name),
                    "a lowercase RFC 1123 label must consist of lower case alphanumeric characters or '-', and must start and end with an alphanumeric character",
                ),
                NameRule::Rfc1035Label => (
                    is_dns1035_label(name),
                    "a DNS-1035 label must consist of lower case alphanumeric characters or '-', start with an alphabetic character, and end with an alphanumeric character",
                ),
            };
            if !ok {
                causes.push(Cause::invalid("metadata.name", &meta["name"], why));
            }
        }
    }
    if let Some(labels) = meta["labels"].as_object() {
        for (key, value) in labels {
            if !is_qualified_name(key) {
                causes.push(Cause::invalid("metadata.labels", &Value::String(key.clone()), "name part must consist of alphanumeric characters, '-', '_' or '.', and must start and end with an alphanumeric character"));
            }
            if !value.as_str().is_some_and(is_label_value) {
                causes.push(Cause::invalid(&format!("metadata.labels.{key}"), value, "a valid label must be an empty string or consist of alphanumeric characters, '-', '_' or '.', and must start and end with an alphanumeric character"));
            }
        }
    }
    if let Some(annotations) = meta["annotations"].as_object() {
        for key in annotations.keys() {
            if !is_qualified_name(key) {
                causes.push(Cause::invalid("metadata.annotations", &Value::String(key.clone()), "name part must consist of alphanumeric characters, '-', '_' or '.', and must start and end with an alphanumeric character"));
            }
        }
    }
    causes
}

/// `coordination/validation.ValidateLeaseSpec`.
pub(crate) fn lease(obj: &Value) -> Vec<Cause> {
    let mut causes = Vec::new();
    let spec = &obj["spec"];
    if let Some(d) = spec["leaseDurationSeconds"].as_i64()
        && d <= 0
    {
        causes.push(Cause::invalid(
            "spec.leaseDurationSeconds",
            &spec["leaseDurationSeconds"],
            "must be greater than 0",
        ));
    }
    if let Some(t) = spec["leaseTransitions"].as_i64()
        && t < 0
    {
        causes.push(Cause::invalid(
            "spec.leaseTransitions",
            &spec["leaseTransitions"],
            "must be greater than or equal to 0",
        ));
    }
    causes
}

/// `core/validation.ValidateEventCreate` for `events.k8s.io/v1` (what `Recorder` writes).
pub(crate) fn events_v1(obj: &Value) -> Vec<Cause> {
    let mut causes = Vec::new();
    if obj["eventTime"].is_null() {
        causes.push(Cause::required("eventTime"));
    }
    for field in [
        "reportingController",
        "reportingInstance",
        "action",
        "reason",
    ] {
        match obj[field].as_str() {
            None | Some("") => causes.push(Cause::required(field)),
            Some(s) if s.len() > 128 => causes.push(Cause::invalid(
                field,
                &obj[field],
                "can have at most 128 characters",
            )),
            Some(_) => {}
        }
    }
    if obj["note"].as_str().is_some_and(|n| n.len() > 1024) {
        causes.push(Cause::invalid(
            "note",
            &Value::String("…".into()),
            "can have at most 1024 characters",
        ));
    }
    match obj["type"].as_str() {
        Some("Normal" | "Warning") => {}
        _ => causes.push(Cause::invalid(
            "type",
            &obj["type"],
            "has invalid value, valid values are Normal, Warning",
        )),
    }
    causes
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn names() {
        assert!(is_dns1123_subdomain("node-a.example"));
        assert!(!is_dns1123_subdomain("Node"));
        assert!(!is_dns1123_subdomain("a..b"));
        assert!(is_dns1035_label("web"));
        assert!(!is_dns1035_label("1web"));
        assert!(is_qualified_name("announcer.dev/vip"));
        assert!(!is_qualified_name("/vip"));
        assert!(is_label_value(""));
        assert!(!is_label_value("-x"));
    }
}
