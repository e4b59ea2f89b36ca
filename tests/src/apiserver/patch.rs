//! PATCH bodies, by `Content-Type`.
//!
//! - `application/merge-patch+json`: RFC 7386 JSON merge patch (objects merge recursively,
//!   `null` deletes, everything else — arrays included — replaces).
//! - `application/strategic-merge-patch+json`: a merge patch in which the lists kube-apiserver
//!   merges by key are merged by that key, whatever the kind: [`MERGE_KEYS`] (`conditions` by
//!   `type`, `podIPs`/`hostIPs` by `ip`, `containers` by `name`, …); a `{"$patch": "replace"}`
//!   element replaces the whole list and `{"$patch": "delete"}` in an element removes the
//!   matching one; `$setElementOrder/…` and `$retainKeys` are dropped, not interpreted. Other
//!   lists are replaced, as by a merge patch. (The withdrawal controller's `pods/status` patch
//!   relies on `conditions` merging by `type`: a plain merge patch would drop every other
//!   condition.)
//! - `application/json-patch+json`: RFC 6902 JSON patch, by the `json-patch` crate.
//! - `application/apply-patch+yaml`: server-side apply, approximated as "create if absent, else
//!   merge-patch the applied configuration into the live object". `managedFields`, field
//!   ownership, and apply conflicts (409 with `force=false`) are not modelled.

use serde_json::Value;

use super::status::ApiError;

/// The four patch types kube-apiserver accepts.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum PatchType {
    Merge,
    Strategic,
    Json,
    Apply,
}

impl PatchType {
    /// From the request's `Content-Type` (parameters such as `charset` ignored).
    pub fn from_content_type(content_type: &str) -> Result<Self, ApiError> {
        match content_type.split(';').next().unwrap_or("").trim() {
            "application/merge-patch+json" => Ok(Self::Merge),
            "application/strategic-merge-patch+json" => Ok(Self::Strategic),
            "application/json-patch+json" => Ok(Self::Json),
            "application/apply-patch+yaml" | "application/apply-patch+cbor" => Ok(Self::Apply),
            other => Err(ApiError::new(
                415,
                "UnsupportedMediaType",
                format!(
                    "the body of the request was in an unknown format - accepted media types include: application/json-patch+json, application/merge-patch+json, application/apply-patch+yaml; got {other:?}"
                ),
            )),
        }
    }
}

/// A decoded patch body.
#[derive(Debug, Clone)]
pub(crate) enum PatchBody {
    Merge(Value),
    Strategic(Value),
    Json(json_patch::Patch),
    Apply(Value),
}

impl PatchBody {
    pub fn parse(kind: PatchType, body: &[u8]) -> Result<Self, ApiError> {
        let bad =
            |e: &dyn std::fmt::Display| ApiError::bad_request(format!("error decoding patch: {e}"));
        match kind {
            PatchType::Merge | PatchType::Strategic => {
                let v: Value = serde_json::from_slice(body).map_err(|e| bad(&e))?;
                if !v.is_object() {
                    return Err(ApiError::bad_request("a merge patch must be a JSON object"));
                }
                Ok(if kind == PatchType::Strategic {
                    Self::Strategic(v)
                } else {
                    Self::Merge(v)
                })
            }
            PatchType::Json => serde_json::from_slice(body)
                .map(Self::Json)
                .map_err(|e| bad(&e)),
            PatchType::Apply => {
                let v: Value = serde_saphyr::from_slice(body).map_err(|e| bad(&e))?;
                if !v.is_object() {
                    return Err(ApiError::bad_request(
                        "an apply configuration must be an object",
                    ));
                }
                for field in ["apiVersion", "kind"] {
                    if v[field].as_str().is_none_or(str::is_empty) {
                        return Err(ApiError::bad_request(format!(
                            "{field} must be set in an apply configuration"
                        )));
                    }
                }
                Ok(Self::Apply(v))
            }
        }
    }

    /// The patched object (merge and JSON patches; apply goes through [`merge_applied`]).
    pub fn apply_to(&self, old: &Value) -> Result<Value, ApiError> {
        let mut doc = old.clone();
        match self {
            Self::Merge(patch) | Self::Apply(patch) => json_patch::merge(&mut doc, patch),
            Self::Strategic(patch) => strategic_merge(&mut doc, patch),
            Self::Json(patch) => json_patch::patch(&mut doc, patch).map_err(|e| {
                ApiError::new(
                    422,
                    "Invalid",
                    format!("the server rejected our request due to an error in our request: {e}"),
                )
            })?,
        }
        Ok(doc)
    }
}

/// The lists a strategic merge patch merges by key (their `patchMergeKey` in the Kubernetes
/// types), by field name. Field names that mean different lists in different kinds (`ports`)
/// are left out: those lists are replaced.
pub(crate) const MERGE_KEYS: &[(&str, &str)] = &[
    ("conditions", "type"),
    ("podIPs", "ip"),
    ("hostIPs", "ip"),
    ("containers", "name"),
    ("initContainers", "name"),
    ("ephemeralContainers", "name"),
    ("volumes", "name"),
    ("env", "name"),
    ("volumeMounts", "mountPath"),
    ("imagePullSecrets", "name"),
];

/// Applies a strategic merge `patch` to `doc` (see the module docs for what is modelled).
pub(crate) fn strategic_merge(doc: &mut Value, patch: &Value) {
    let Value::Object(p) = patch else {
        *doc = patch.clone();
        return;
    };
    if !doc.is_object() {
        *doc = Value::Object(Default::default());
    }
    let d = doc.as_object_mut().expect("an object");
    for (k, v) in p {
        if k.starts_with("$setElementOrder/") || k == "$retainKeys" || k == "$patch" {
            continue;
        }
        if v.is_null() {
            d.remove(k);
            continue;
        }
        let key = MERGE_KEYS.iter().find(|(f, _)| f == k).map(|(_, key)| *key);
        match (key, v, d.get_mut(k)) {
            (Some(key), Value::Array(items), Some(Value::Array(live))) => {
                merge_list(live, items, key)
            }
            (_, Value::Array(items), _) => {
                let kept: Vec<Value> = items
                    .iter()
                    .filter(|i| i.get("$patch").is_none())
                    .cloned()
                    .collect();
                d.insert(k.clone(), Value::Array(kept));
            }
            (_, Value::Object(_), Some(live)) if live.is_object() => strategic_merge(live, v),
            (_, Value::Object(_), _) => {
                let mut fresh = Value::Object(Default::default());
                strategic_merge(&mut fresh, v);
                d.insert(k.clone(), fresh);
            }
            _ => {
                d.insert(k.clone(), v.clone());
            }
        }
    }
}

/// Merges `items` into `live` by `key`: an element with the key of a live one is merged into
/// it, a new one is appended; `{"$patch": "replace"}` replaces the list; an element with
/// `"$patch": "delete"` removes its match.
fn merge_list(live: &mut Vec<Value>, items: &[Value], key: &str) {
    let directive = |i: &Value| i.get("$patch").and_then(Value::as_str).map(str::to_owned);
    if items
        .iter()
        .any(|i| directive(i).as_deref() == Some("replace") && i.get(key).is_none())
    {
        *live = items
            .iter()
            .filter(|i| i.get("$patch").is_none())
            .cloned()
            .collect();
        return;
    }
    for item in items {
        let at = live
            .iter()
            .position(|l| l.get(key).is_some() && l.get(key) == item.get(key));
        match (directive(item).as_deref(), at) {
            (Some("delete"), Some(i)) => {
                live.remove(i);
            }
            (Some(_), _) => {}
            (None, Some(i)) => strategic_merge(&mut live[i], item),
            (None, None) => live.push(item.clone()),
        }
    }
}

/// Server-side apply's merge, approximated by a merge patch.
pub(crate) fn merge_applied(live: &Value, applied: &Value) -> Value {
    let mut doc = live.clone();
    json_patch::merge(&mut doc, applied);
    doc
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn merge_and_json_patch() {
        let old = json!({"metadata": {"labels": {"a": "1", "b": "2"}}, "spec": {"ports": [1, 2]}});
        let p = PatchBody::parse(
            PatchType::Merge,
            br#"{"metadata":{"labels":{"a":null}},"spec":{"ports":[3]}}"#,
        )
        .unwrap();
        assert_eq!(
            p.apply_to(&old).unwrap(),
            json!({"metadata": {"labels": {"b": "2"}}, "spec": {"ports": [3]}})
        );
        let p = PatchBody::parse(
            PatchType::Json,
            br#"[{"op":"test","path":"/spec/ports/0","value":9}]"#,
        )
        .unwrap();
        assert_eq!(p.apply_to(&old).unwrap_err().code, 422);
        assert_eq!(
            PatchType::from_content_type("text/plain").unwrap_err().code,
            415
        );
    }

    fn strategic(old: &Value, patch: Value) -> Value {
        PatchBody::parse(PatchType::Strategic, patch.to_string().as_bytes())
            .unwrap()
            .apply_to(old)
            .unwrap()
    }

    #[test]
    fn a_strategic_patch_merges_conditions_by_type_and_keeps_the_others() {
        let old = json!({"status": {"conditions": [
            {"type": "PodScheduled", "status": "True"},
            {"type": "Ready", "status": "True", "lastProbeTime": null},
        ]}});
        let got = strategic(
            &old,
            json!({"status": {"conditions": [
                {"type": "Ready", "status": "False", "reason": "R"},
                {"type": "New", "status": "True"},
            ]}}),
        );
        assert_eq!(
            got,
            json!({"status": {"conditions": [
                {"type": "PodScheduled", "status": "True"},
                {"type": "Ready", "status": "False", "reason": "R", "lastProbeTime": null},
                {"type": "New", "status": "True"},
            ]}})
        );
    }

    #[test]
    fn a_strategic_replace_directive_replaces_the_list_and_other_lists_are_replaced() {
        let old = json!({"status": {"podIPs": [{"ip": "a"}], "other": [1, 2]}});
        let got = strategic(
            &old,
            json!({"status": {"podIPs": [{"$patch": "replace"}, {"ip": "b"}], "other": [3]}}),
        );
        assert_eq!(
            got,
            json!({"status": {"podIPs": [{"ip": "b"}], "other": [3]}})
        );
    }
}
