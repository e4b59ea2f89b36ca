//! Kubeconfig files pointing at the server, one user per bearer token.
//!
//! Tokens are the client identities of the request counters and fault scopes, so every agent
//! under test gets its own user. The file is the standard `kind: Config` that
//! `kube::Config::from_custom_kubeconfig` (and kubectl) read; the server speaks plain HTTP, so
//! there is no certificate authority.

use serde_json::{Value, json};

/// The cluster name inside generated kubeconfigs.
pub const CLUSTER: &str = "announcer-apiserver";

/// A kubeconfig with one user and one context per token (named after the token; the first is
/// current). Namespaced requests default to `default`.
pub fn kubeconfig_yaml(url: &str, tokens: &[&str]) -> String {
    let users: Vec<Value> = tokens
        .iter()
        .map(|t| json!({"name": t, "user": {"token": t}}))
        .collect();
    let contexts: Vec<Value> = tokens
        .iter()
        .map(|t| json!({"name": t, "context": {"cluster": CLUSTER, "user": t, "namespace": "default"}}))
        .collect();
    let config = json!({
        "apiVersion": "v1",
        "kind": "Config",
        "clusters": [{"name": CLUSTER, "cluster": {"server": url}}],
        "users": users,
        "contexts": contexts,
        "current-context": tokens.first().copied().unwrap_or(""),
        "preferences": {},
    });
    serde_saphyr::to_string(&config).unwrap_or_default()
}
