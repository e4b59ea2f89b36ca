//! PATCH bodies, by `Content-Type`.
//!
//! - `application/merge-patch+json`: RFC 7386 JSON merge patch (objects merge recursively,
//!   `null` deletes, everything else — arrays included — replaces).
//! - `application/strategic-merge-patch+json`: applied as a merge patch. Real strategic merge
//!   merges some lists by a key (`ports` by `port`, `conditions` by `type`, …) and honours
//!   `$patch`/`$retainKeys` directives; here such lists are replaced wholesale and directives
//!   are not interpreted. The agent does not send strategic patches.
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
                Ok(Self::Merge(v))
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
}
