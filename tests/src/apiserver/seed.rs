//! Seed manifests: the objects a server starts with, from a YAML or JSON multi-document file
//! (the `kubectl apply -f` format; `kind: List` documents are flattened).
//!
//! Objects are created through the normal create path, so they are validated and stamped
//! (`uid`, `resourceVersion`, …) exactly like API-created ones; server-set metadata in the file
//! (`resourceVersion`, `uid`, `creationTimestamp`, as `kubectl get -o yaml` prints them) is
//! discarded.

use serde_json::Value;

use super::ApiServerError;
use super::resources::{self, RESOURCES};
use super::store::Store;

/// Parse a multi-document YAML (or JSON) text into objects.
pub fn parse_manifests(text: &str) -> Result<Vec<Value>, ApiServerError> {
    let mut out = Vec::new();
    let docs: Vec<Value> =
        serde_saphyr::from_multiple(text).map_err(|e| ApiServerError::Manifest(e.to_string()))?;
    for value in docs {
        match value {
            Value::Null => {}
            Value::Object(_) if value["kind"].as_str().is_some_and(|k| k.ends_with("List")) => {
                let items = value["items"].as_array().cloned().unwrap_or_default();
                out.extend(items);
            }
            Value::Object(_) => out.push(value),
            other => {
                return Err(ApiServerError::Manifest(format!(
                    "a document is not an object: {other}"
                )));
            }
        }
    }
    Ok(out)
}

/// Create the objects in order; namespaced objects without a namespace go to `default`.
pub(crate) fn load(store: &Store, objects: Vec<Value>) -> Result<(), ApiServerError> {
    for mut obj in objects {
        let api_version = obj["apiVersion"].as_str().unwrap_or("").to_string();
        let kind = obj["kind"].as_str().unwrap_or("").to_string();
        let res = resources::lookup_kind(&api_version, &kind).ok_or_else(|| {
            ApiServerError::Seed(format!("unsupported kind {api_version}/{kind}"))
        })?;
        if let Some(meta) = obj["metadata"].as_object_mut() {
            for field in [
                "resourceVersion",
                "uid",
                "creationTimestamp",
                "managedFields",
                "generation",
            ] {
                meta.remove(field);
            }
        }
        let ns = match obj["metadata"]["namespace"].as_str() {
            Some(ns) if !ns.is_empty() => ns.to_string(),
            _ if RESOURCES[res].namespaced => "default".to_string(),
            _ => String::new(),
        };
        let name = obj["metadata"]["name"].as_str().unwrap_or("").to_string();
        store
            .create(res, &ns, obj, false)
            .map_err(|e| ApiServerError::Seed(format!("{kind} {ns}/{name}: {}", e.message)))?;
    }
    Ok(())
}
