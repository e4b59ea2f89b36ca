//! Request counters by client × verb × resource, the numbers the benchmarks report ("how many
//! API calls per node per minute does the agent make?") and tests assert on.
//!
//! The client is the bearer token of the request: every agent gets its own kubeconfig user, so
//! per-node numbers fall out directly. Verbs are kube-apiserver's request verbs
//! (`RequestInfo.Verb`), resources carry the `/status` subresource when addressed.

use std::collections::BTreeMap;
use std::fmt;
use std::sync::Mutex;

use serde::{Deserialize, Serialize};

/// A request verb, as kube-apiserver's request-info resolver names it.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum Verb {
    Get,
    List,
    Watch,
    Create,
    Update,
    Patch,
    Delete,
    #[serde(rename = "deletecollection")]
    DeleteCollection,
}

impl fmt::Display for Verb {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let s = match self {
            Verb::Get => "get",
            Verb::List => "list",
            Verb::Watch => "watch",
            Verb::Create => "create",
            Verb::Update => "update",
            Verb::Patch => "patch",
            Verb::Delete => "delete",
            Verb::DeleteCollection => "deletecollection",
        };
        f.write_str(s)
    }
}

/// The client name used for requests without a bearer token.
pub const ANONYMOUS: &str = "system:anonymous";

/// One counter.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct CountEntry {
    /// The bearer token (or [`ANONYMOUS`]).
    pub client: String,
    pub verb: Verb,
    /// API group, empty for core.
    pub group: String,
    /// Plural resource, with `/status` for the subresource (`services/status`).
    pub resource: String,
    pub count: u64,
}

/// A snapshot of all counters (`GET /_admin/counts`).
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct Counts {
    pub entries: Vec<CountEntry>,
}

impl Counts {
    /// The sum over the entries matching every given filter (`None` = any). `resource` is
    /// matched exactly, so `"leases"` excludes `"leases/status"`.
    pub fn count(&self, client: Option<&str>, verb: Option<Verb>, resource: Option<&str>) -> u64 {
        self.entries
            .iter()
            .filter(|e| client.is_none_or(|c| e.client == c))
            .filter(|e| verb.is_none_or(|v| e.verb == v))
            .filter(|e| resource.is_none_or(|r| e.resource == r))
            .map(|e| e.count)
            .sum()
    }

    /// All requests.
    pub fn total(&self) -> u64 {
        self.count(None, None, None)
    }
}

type Key = (String, Verb, String, String);

/// The live counters.
#[derive(Debug, Default)]
pub(crate) struct Counters(Mutex<BTreeMap<Key, u64>>);

impl Counters {
    pub fn inc(&self, client: &str, verb: Verb, group: &str, resource: &str) {
        let mut map = self.0.lock().unwrap_or_else(|e| e.into_inner());
        *map.entry((
            client.to_string(),
            verb,
            group.to_string(),
            resource.to_string(),
        ))
        .or_default() += 1;
    }

    pub fn snapshot(&self) -> Counts {
        let map = self.0.lock().unwrap_or_else(|e| e.into_inner());
        let entries = map
            .iter()
            .map(|((client, verb, group, resource), count)| CountEntry {
                client: client.clone(),
                verb: *verb,
                group: group.clone(),
                resource: resource.clone(),
                count: *count,
            })
            .collect();
        Counts { entries }
    }

    pub fn reset(&self) {
        self.0.lock().unwrap_or_else(|e| e.into_inner()).clear();
    }
}
