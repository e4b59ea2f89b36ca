//! The REST surface: URL resolution, verbs, query parameters, and the handlers that turn store
//! results into kube-apiserver's responses.
//!
//! URL shapes follow kube-apiserver's request-info resolver: `/api/v1/...` for the core group,
//! `/apis/{group}/{version}/...` otherwise; `namespaces/{ns}/{plural}[/{name}[/status]]` for
//! namespaced kinds, `{plural}` for an all-namespaces list/watch, `{plural}[/{name}[/status]]`
//! for cluster-scoped kinds. Every resource request is counted and passed through the fault
//! injector before it reaches the store. Minimal discovery (`/api`, `/apis`, the group-version
//! resource lists) and `/version` are served so tools that probe the server work.

use std::collections::HashMap;
use std::sync::Arc;
use std::time::Duration;

use axum::body::Bytes;
use axum::extract::{ConnectInfo, State};
use axum::http::{HeaderMap, Method, StatusCode, Uri, header};
use axum::response::{IntoResponse, Response};
use serde_json::{Value, json};

use super::conn::ConnHandle;
use super::counts::{ANONYMOUS, Counters, Verb};
use super::faults::{FaultState, Outcome};
use super::patch::{PatchBody, PatchType, merge_applied};
use super::resources::{self, RESOURCES, ResourceType};
use super::selectors::{FieldSelector, LabelSelector, Selectors};
use super::status::{ApiError, delete_success, json_response};
use super::store::{ObjRef, Preconditions, Store, Sub, WatchFrom};
use super::validate::Cause;
use super::watch::{self, WatchInfo, WatchParams, WatchRegistry};

/// Everything the handlers share.
pub(crate) struct Shared {
    pub store: Store,
    pub counts: Counters,
    pub faults: FaultState,
    pub watches: Arc<WatchRegistry>,
    pub bookmark_interval: Duration,
    pub default_watch_timeout: Duration,
}

/// A resolved resource URL.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct Route {
    pub res: usize,
    /// `None`: cluster-scoped kind, or all namespaces.
    pub namespace: Option<String>,
    pub name: Option<String>,
    pub sub: Sub,
}

/// Resolve a path to a served resource, or `None` (404).
pub(crate) fn parse_path(path: &str) -> Option<Route> {
    let segs: Vec<&str> = path.trim_matches('/').split('/').collect();
    let (group, version, rest) = match segs.as_slice() {
        ["api", version, rest @ ..] => ("", *version, rest),
        ["apis", group, version, rest @ ..] => (*group, *version, rest),
        _ => return None,
    };
    let namespaced = |plural: &str| {
        resources::lookup(group, version, plural).filter(|&i| RESOURCES[i].namespaced)
    };
    let (res, namespace, tail) = match rest {
        ["namespaces", ns, plural, tail @ ..] if namespaced(plural).is_some() => {
            (namespaced(plural)?, Some((*ns).to_string()), tail)
        }
        [plural, tail @ ..] => {
            let res = resources::lookup(group, version, plural)?;
            if RESOURCES[res].namespaced && !tail.is_empty() {
                return None;
            }
            (res, None, tail)
        }
        [] => return None,
    };
    let (name, sub) = match tail {
        [] => (None, Sub::Main),
        [name] if !name.is_empty() => (Some((*name).to_string()), Sub::Main),
        [name, "status"] if !name.is_empty() && RESOURCES[res].status_subresource => {
            (Some((*name).to_string()), Sub::Status)
        }
        _ => return None,
    };
    Some(Route {
        res,
        namespace,
        name,
        sub,
    })
}

/// The client identity: the bearer token.
pub(crate) fn client_of(headers: &HeaderMap) -> String {
    headers
        .get(header::AUTHORIZATION)
        .and_then(|v| v.to_str().ok())
        .and_then(|v| v.strip_prefix("Bearer "))
        .map(|t| t.trim().to_string())
        .filter(|t| !t.is_empty())
        .unwrap_or_else(|| ANONYMOUS.to_string())
}

/// Go's `strconv.ParseBool` truthy spellings, as the apiserver's query decoder accepts.
fn truthy(v: Option<&String>) -> bool {
    matches!(
        v.map(String::as_str),
        Some("1" | "t" | "T" | "true" | "TRUE" | "True")
    )
}

fn selectors(query: &HashMap<String, String>) -> Result<Selectors, ApiError> {
    let bad = |e: super::selectors::SelectorError| {
        ApiError::bad_request(format!("unable to parse requirement: {e}"))
    };
    Ok(Selectors {
        labels: LabelSelector::parse(query.get("labelSelector").map_or("", String::as_str))
            .map_err(bad)?,
        fields: FieldSelector::parse(query.get("fieldSelector").map_or("", String::as_str))
            .map_err(bad)?,
    })
}

fn parse_json(body: &Bytes) -> Result<Value, ApiError> {
    serde_json::from_slice(body)
        .map_err(|e| ApiError::bad_request(format!("error decoding request body: {e}")))
}

fn ok(code: StatusCode, value: &Value) -> Response {
    json_response(code, value)
}

fn list_body(rt: &ResourceType, rv: u64, items: impl Iterator<Item = Value>) -> Value {
    // Items of a list carry no apiVersion/kind, as kube-apiserver serves them.
    let items: Vec<Value> = items
        .map(|mut item| {
            if let Some(map) = item.as_object_mut() {
                map.remove("apiVersion");
                map.remove("kind");
            }
            item
        })
        .collect();
    json!({
        "kind": format!("{}List", rt.kind),
        "apiVersion": rt.api_version(),
        "metadata": {"resourceVersion": rv.to_string()},
        "items": items,
    })
}

/// Apply the faults matching this request: `Some(response)` ends it.
async fn faults(
    s: &Shared,
    conn: &ConnHandle,
    client: &str,
    verb: Option<Verb>,
    resource: Option<&str>,
) -> Option<Response> {
    let (delay, outcome) = s.faults.decide(client, verb, resource);
    if !delay.is_zero() {
        tokio::time::sleep(delay).await;
    }
    match outcome {
        Outcome::Proceed => None,
        Outcome::Refuse => {
            conn.refuse();
            Some(StatusCode::INTERNAL_SERVER_ERROR.into_response())
        }
        Outcome::Fail(code) => {
            let message = match code {
                503 => "the server is currently unable to handle the request (injected fault)"
                    .to_string(),
                _ => format!("injected fault: HTTP {code}"),
            };
            Some(ApiError::new(code, ApiError::reason_for_code(code), message).into_response())
        }
    }
}

/// The fallback handler: every non-admin request.
pub(crate) async fn api(
    State(s): State<Arc<Shared>>,
    ConnectInfo(conn): ConnectInfo<ConnHandle>,
    method: Method,
    uri: Uri,
    headers: HeaderMap,
    body: Bytes,
) -> Response {
    let client = client_of(&headers);
    let Some(route) = parse_path(uri.path()) else {
        if let Some(response) = faults(&s, &conn, &client, None, None).await {
            return response;
        }
        return match (method, discovery(uri.path())) {
            (Method::GET, Some(doc)) => ok(StatusCode::OK, &doc),
            _ => ApiError::no_route().into_response(),
        };
    };
    let query: HashMap<String, String> = axum::extract::Query::try_from_uri(&uri)
        .map(|q| q.0)
        .unwrap_or_default();
    let watch = truthy(query.get("watch"));
    let verb = match (&method, &route.name) {
        (&Method::GET, _) if watch => Verb::Watch,
        (&Method::GET, Some(_)) => Verb::Get,
        (&Method::GET, None) => Verb::List,
        (&Method::POST, None) => Verb::Create,
        (&Method::PUT, Some(_)) => Verb::Update,
        (&Method::PATCH, Some(_)) => Verb::Patch,
        (&Method::DELETE, Some(_)) => Verb::Delete,
        (&Method::DELETE, None) => Verb::DeleteCollection,
        _ => return ApiError::method_not_allowed(method.as_str()).into_response(),
    };
    let rt = &RESOURCES[route.res];
    let resource = match route.sub {
        Sub::Main => rt.plural.to_string(),
        Sub::Status => format!("{}/status", rt.plural),
    };
    s.counts.inc(&client, verb, rt.group, &resource);
    if let Some(response) = faults(&s, &conn, &client, Some(verb), Some(&resource)).await {
        return response;
    }
    let request = Request {
        s: &s,
        client: &client,
        route,
        query,
        headers: &headers,
        body,
    };
    request
        .handle(verb)
        .unwrap_or_else(IntoResponse::into_response)
}

struct Request<'a> {
    s: &'a Arc<Shared>,
    client: &'a str,
    route: Route,
    query: HashMap<String, String>,
    headers: &'a HeaderMap,
    body: Bytes,
}

impl Request<'_> {
    fn rt(&self) -> &'static ResourceType {
        &RESOURCES[self.route.res]
    }

    /// The namespace an object operation addresses ("" for cluster-scoped kinds).
    fn object_ns(&self) -> Result<String, ApiError> {
        match (&self.route.namespace, self.rt().namespaced) {
            (Some(ns), true) => Ok(ns.clone()),
            (None, false) => Ok(String::new()),
            _ => Err(ApiError::method_not_allowed(
                "a namespaced resource needs a namespace",
            )),
        }
    }

    fn name(&self) -> &str {
        self.route.name.as_deref().unwrap_or("")
    }

    fn dry_run(&self) -> bool {
        self.query.get("dryRun").is_some_and(|v| v == "All")
    }

    fn handle(self, verb: Verb) -> Result<Response, ApiError> {
        let store = &self.s.store;
        let res = self.route.res;
        match verb {
            Verb::Get => Ok(ok(
                StatusCode::OK,
                &*store.get(res, &self.object_ns()?, self.name())?,
            )),
            Verb::List => {
                let (rv, items) = store.list(
                    res,
                    self.route.namespace.as_deref(),
                    &selectors(&self.query)?,
                );
                Ok(ok(
                    StatusCode::OK,
                    &list_body(self.rt(), rv, items.iter().map(|i| (**i).clone())),
                ))
            }
            Verb::Watch => self.watch(),
            Verb::Create => {
                let ns = self.object_ns()?;
                let body = parse_json(&self.body)?;
                super::admission::check_create(self.client, self.rt(), &body)?;
                let created = store.create(res, &ns, body, self.dry_run())?;
                Ok(ok(StatusCode::CREATED, &created))
            }
            Verb::Update => {
                let body = parse_json(&self.body)?;
                let ns = self.object_ns()?;
                let at = ObjRef {
                    res,
                    ns: &ns,
                    name: self.name(),
                };
                let updated = store.modify(at, self.route.sub, self.dry_run(), |_| Ok(body))?;
                Ok(ok(StatusCode::OK, &updated))
            }
            Verb::Patch => self.patch(),
            Verb::Delete => self.delete(),
            Verb::DeleteCollection => {
                let deleted = store.delete_collection(
                    res,
                    self.route.namespace.as_deref(),
                    &selectors(&self.query)?,
                    self.dry_run(),
                );
                Ok(ok(
                    StatusCode::OK,
                    &list_body(
                        self.rt(),
                        store.stats().resource_version,
                        deleted.into_iter(),
                    ),
                ))
            }
        }
    }

    fn patch(self) -> Result<Response, ApiError> {
        let content_type = self
            .headers
            .get(header::CONTENT_TYPE)
            .and_then(|v| v.to_str().ok())
            .unwrap_or("");
        let kind = PatchType::from_content_type(content_type)?;
        let patch = PatchBody::parse(kind, &self.body)?;
        let ns = self.object_ns()?;
        let at = ObjRef {
            res: self.route.res,
            ns: &ns,
            name: self.name(),
        };
        let (store, sub, dry_run) = (&self.s.store, self.route.sub, self.dry_run());
        match patch {
            PatchBody::Apply(applied) => {
                if self.query.get("fieldManager").is_none_or(String::is_empty) {
                    return Err(ApiError::new(
                        422,
                        "Invalid",
                        "PatchOptions.meta.k8s.io \"\" is invalid: fieldManager: Required value: is required for apply patch",
                    ));
                }
                let (obj, created) = store.apply(at, sub, dry_run, applied, merge_applied)?;
                Ok(ok(
                    if created {
                        StatusCode::CREATED
                    } else {
                        StatusCode::OK
                    },
                    &obj,
                ))
            }
            patch => {
                let obj = store.modify(at, sub, dry_run, |old| patch.apply_to(old))?;
                Ok(ok(StatusCode::OK, &obj))
            }
        }
    }

    fn delete(self) -> Result<Response, ApiError> {
        let mut pre = Preconditions::default();
        let mut dry_run = self.dry_run();
        if !self.body.is_empty() {
            let options = parse_json(&self.body)?;
            let text = |v: &Value| v.as_str().filter(|s| !s.is_empty()).map(str::to_string);
            pre.uid = text(&options["preconditions"]["uid"]);
            pre.resource_version = text(&options["preconditions"]["resourceVersion"]);
            dry_run |= options["dryRun"]
                .as_array()
                .is_some_and(|a| a.iter().any(|v| v == "All"));
        }
        let deleted = self.s.store.delete(
            self.route.res,
            &self.object_ns()?,
            self.name(),
            &pre,
            dry_run,
        )?;
        Ok(ok(
            StatusCode::OK,
            &delete_success(self.rt(), self.name(), &deleted["metadata"]["uid"]),
        ))
    }

    fn watch(self) -> Result<Response, ApiError> {
        let q = &self.query;
        let mut selectors = selectors(q)?;
        if let Some(name) = &self.route.name {
            // The deprecated single-object watch: the same as a metadata.name field selector.
            selectors.fields = FieldSelector::parse(&format!("metadata.name={name}"))
                .map_err(|e| ApiError::bad_request(e.to_string()))?;
        }
        let send_initial_events = truthy(q.get("sendInitialEvents"));
        let bookmarks = truthy(q.get("allowWatchBookmarks"));
        let rv_match = q
            .get("resourceVersionMatch")
            .map(String::as_str)
            .unwrap_or("");
        let rv = q.get("resourceVersion").map(String::as_str).unwrap_or("");
        let invalid = |field: &str, why: &str| {
            let cause = Cause {
                reason: "FieldValueForbidden",
                field: field.into(),
                message: why.into(),
            };
            let mut e = ApiError::invalid(self.rt(), "", vec![cause]);
            e.message = format!("ListOptions.meta.k8s.io \"\" is invalid: {field}: {why}");
            e
        };
        if send_initial_events {
            if rv_match != "NotOlderThan" {
                return Err(invalid(
                    "resourceVersionMatch",
                    "sendInitialEvents requires setting resourceVersionMatch to NotOlderThan",
                ));
            }
            if !bookmarks {
                return Err(invalid(
                    "allowWatchBookmarks",
                    "sendInitialEvents requires setting allowWatchBookmarks to true",
                ));
            }
        } else if !rv_match.is_empty() {
            return Err(invalid(
                "resourceVersionMatch",
                "resourceVersionMatch is forbidden for watch unless sendInitialEvents is provided",
            ));
        }
        let from =
            match rv {
                _ if send_initial_events => WatchFrom::Now,
                "" | "0" => WatchFrom::Now,
                rv => WatchFrom::After(rv.parse().map_err(|_| {
                    ApiError::bad_request(format!("invalid resource version {rv:?}"))
                })?),
            };
        let timeout = match q.get("timeoutSeconds") {
            Some(t) => Duration::from_secs(
                t.parse()
                    .map_err(|_| ApiError::bad_request("invalid timeoutSeconds"))?,
            ),
            None => self.s.default_watch_timeout,
        };
        let start = match self
            .s
            .store
            .watch(self.route.res, self.route.namespace.as_deref(), from)
        {
            Ok(start) => start,
            Err(e) if e.code == 410 => return Ok(watch::respond_error(&e)),
            Err(e) => return Err(e),
        };
        let info = WatchInfo {
            id: 0,
            client: self.client.to_string(),
            group: self.rt().group.to_string(),
            resource: self.rt().plural.to_string(),
            namespace: self.route.namespace.clone(),
        };
        let (guard, kill) = self.s.watches.register(info);
        let params = WatchParams {
            res: self.route.res,
            namespace: self.route.namespace.clone(),
            selectors,
            bookmarks,
            send_initial_events,
            timeout,
            bookmark_interval: self.s.bookmark_interval,
        };
        Ok(watch::respond(params, start, guard, kill))
    }
}

/// `/version`, `/api`, `/apis` and the per-group-version resource lists.
fn discovery(path: &str) -> Option<Value> {
    let path = path.trim_end_matches('/');
    if path == "/version" {
        return Some(json!({
            "major": "1", "minor": "35", "gitVersion": "v1.35.0-announcer-apiserver",
            "gitCommit": "0000000000000000000000000000000000000000", "gitTreeState": "clean",
            "buildDate": "2025-01-01T00:00:00Z", "goVersion": "n/a", "compiler": "rustc",
            "platform": "linux/amd64",
        }));
    }
    if path == "/api" {
        return Some(
            json!({"kind": "APIVersions", "apiVersion": "v1", "versions": ["v1"], "serverAddressByClientCIDRs": []}),
        );
    }
    if path == "/apis" {
        let groups: Vec<Value> = resources::group_versions()
            .into_iter()
            .filter(|(g, _)| !g.is_empty())
            .map(|(g, v)| {
                let gv = json!({"groupVersion": format!("{g}/{v}"), "version": v});
                json!({"name": g, "versions": [gv.clone()], "preferredVersion": gv})
            })
            .collect();
        return Some(json!({"kind": "APIGroupList", "apiVersion": "v1", "groups": groups}));
    }
    let (group, version) = match path
        .trim_start_matches('/')
        .split('/')
        .collect::<Vec<_>>()
        .as_slice()
    {
        ["api", v] => ("", (*v).to_string()),
        ["apis", g, v] => (*g, (*v).to_string()),
        _ => return None,
    };
    let mut list = Vec::new();
    for rt in RESOURCES
        .iter()
        .filter(|r| r.group == group && r.version == version)
    {
        let verbs = json!([
            "create",
            "delete",
            "deletecollection",
            "get",
            "list",
            "patch",
            "update",
            "watch"
        ]);
        list.push(json!({"name": rt.plural, "singularName": rt.kind.to_lowercase(), "namespaced": rt.namespaced, "kind": rt.kind, "verbs": verbs}));
        if rt.status_subresource {
            list.push(json!({"name": format!("{}/status", rt.plural), "singularName": "", "namespaced": rt.namespaced, "kind": rt.kind, "verbs": ["get", "patch", "update"]}));
        }
    }
    if list.is_empty() {
        return None;
    }
    let gv = if group.is_empty() {
        version
    } else {
        format!("{group}/{version}")
    };
    Some(
        json!({"kind": "APIResourceList", "apiVersion": "v1", "groupVersion": gv, "resources": list}),
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn routes() {
        let lease = resources::lookup("coordination.k8s.io", "v1", "leases").unwrap();
        let r = parse_path("/apis/coordination.k8s.io/v1/namespaces/kube-system/leases/a").unwrap();
        assert_eq!(
            r,
            Route {
                res: lease,
                namespace: Some("kube-system".into()),
                name: Some("a".into()),
                sub: Sub::Main
            }
        );
        assert_eq!(
            parse_path("/apis/coordination.k8s.io/v1/leases")
                .unwrap()
                .namespace,
            None
        );
        assert!(parse_path("/apis/coordination.k8s.io/v1/leases/a").is_none());
        let r = parse_path("/api/v1/nodes/n1/status").unwrap();
        assert_eq!((r.name.as_deref(), r.sub), (Some("n1"), Sub::Status));
        let r = parse_path("/api/v1/namespaces/ns1").unwrap();
        assert_eq!(
            (RESOURCES[r.res].plural, r.name.as_deref()),
            ("namespaces", Some("ns1"))
        );
        assert!(parse_path("/api/v1/namespaces/d/secrets/s/status").is_none());
        assert!(parse_path("/api/v1/persistentvolumes").is_none());
    }
}
