//! The in-repo apiserver against the real `kube` client: what the announcer agent relies on
//! must behave as kube-apiserver does, errors must surface as `kube` reports them from a real
//! cluster, and the fault and counting machinery must do what the benchmarks assume.

use std::collections::BTreeMap;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use announcer_tests::apiserver::{
    ApiServer, ApiServerHandle, Counts, Fault, OutageMode, RemoteAdmin, Verb, parse_manifests,
};
use futures::{StreamExt, TryStreamExt};
use k8s_openapi::api::coordination::v1::{Lease, LeaseSpec};
use k8s_openapi::api::core::v1::{
    Namespace, Node, NodeStatus, Service, ServicePort, ServiceSpec, ServiceStatus,
};
use k8s_openapi::api::discovery::v1::{Endpoint, EndpointSlice};
use k8s_openapi::api::events::v1::Event as EventV1;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta;
use kube::api::{
    Api, DeleteParams, ListParams, Patch, PatchParams, PostParams, WatchEvent, WatchParams,
};
use kube::runtime::events::{Event, EventType, Recorder, Reporter};
use kube::runtime::{WatchStreamExt, watcher};
use kube::{Client, Resource, ResourceExt};
use serde_json::json;

const NS: &str = "default";

fn lease(name: &str, holder: &str) -> Lease {
    Lease {
        metadata: ObjectMeta {
            name: Some(name.into()),
            namespace: Some(NS.into()),
            ..Default::default()
        },
        spec: Some(LeaseSpec {
            holder_identity: Some(holder.into()),
            lease_duration_seconds: Some(15),
            ..Default::default()
        }),
    }
}

fn service(name: &str, labels: &[(&str, &str)]) -> Service {
    Service {
        metadata: ObjectMeta {
            name: Some(name.into()),
            labels: Some(
                labels
                    .iter()
                    .map(|(k, v)| (k.to_string(), v.to_string()))
                    .collect(),
            ),
            ..Default::default()
        },
        spec: Some(ServiceSpec {
            type_: Some("LoadBalancer".into()),
            ports: Some(vec![ServicePort {
                port: 80,
                ..Default::default()
            }]),
            ..Default::default()
        }),
        ..Default::default()
    }
}

/// Creates Lease `name` held by `holder` through `api`; the stored object.
async fn create_lease(api: &Api<Lease>, name: &str, holder: &str) -> Lease {
    api.create(&PostParams::default(), &lease(name, holder))
        .await
        .unwrap()
}

/// The HTTP code of the API error `request` must end in (panicking on any other outcome).
async fn refused<T: std::fmt::Debug>(request: impl Future<Output = kube::Result<T>>) -> u16 {
    api_err(request.await.unwrap_err()).code
}

fn api_err(err: kube::Error) -> Box<kube::core::Status> {
    match err {
        kube::Error::Api(status) => status,
        other => panic!("expected an API error, got {other:?}"),
    }
}

/// Poll until `f` holds; panics after 20 s (a hang, not a timing assertion).
async fn eventually(what: &str, mut f: impl FnMut() -> bool) {
    let deadline = tokio::time::Instant::now() + Duration::from_secs(20);
    while !f() {
        assert!(
            tokio::time::Instant::now() < deadline,
            "timed out waiting for {what}"
        );
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
}

async fn start() -> ApiServerHandle {
    ApiServer::builder()
        .bookmark_interval(Duration::from_millis(200))
        .start()
        .await
        .expect("server starts")
}

/// A client without kube's default retry on 429/503, so injected 503s surface at once.
async fn no_retry_client(server: &ApiServerHandle, token: &str) -> Client {
    let mut config = server.client_config(token).await.unwrap();
    config.default_retry = false;
    Client::try_from(config).unwrap()
}

#[tokio::test]
async fn crud_conflicts_and_not_found() {
    let server = start().await;
    let leases: Api<Lease> = Api::namespaced(server.client("node-a").await.unwrap(), NS);

    assert_eq!(refused(leases.get("vip-1")).await, 404);
    let created = create_lease(&leases, "vip-1", "node-a").await;
    let meta = &created.metadata;
    assert!(meta.uid.as_deref().is_some_and(|u| u.len() == 36));
    assert!(meta.creation_timestamp.is_some());
    let rv1: u64 = meta.resource_version.as_deref().unwrap().parse().unwrap();
    assert_eq!(
        leases
            .get("vip-1")
            .await
            .unwrap()
            .spec
            .unwrap()
            .holder_identity
            .as_deref(),
        Some("node-a")
    );

    let dup = api_err(
        leases
            .create(&PostParams::default(), &lease("vip-1", "node-b"))
            .await
            .unwrap_err(),
    );
    assert_eq!((dup.code, dup.reason.as_str()), (409, "AlreadyExists"));

    // Optimistic concurrency: a write with the current RV wins, a second one with the same
    // (now stale) RV is a 409 Conflict with kube-apiserver's message.
    let mut a = created.clone();
    a.spec.as_mut().unwrap().holder_identity = Some("node-b".into());
    let replaced = leases
        .replace("vip-1", &PostParams::default(), &a)
        .await
        .unwrap();
    let rv2: u64 = replaced.resource_version().unwrap().parse().unwrap();
    assert!(rv2 > rv1);
    let stale = api_err(
        leases
            .replace("vip-1", &PostParams::default(), &a)
            .await
            .unwrap_err(),
    );
    assert_eq!((stale.code, stale.reason.as_str()), (409, "Conflict"));
    assert!(
        stale.message.contains("the object has been modified"),
        "{}",
        stale.message
    );

    // An empty resourceVersion is an unconditional update; an identical one is a no-op.
    let mut unconditional = replaced.clone();
    unconditional.metadata.resource_version = None;
    unconditional.spec.as_mut().unwrap().holder_identity = Some("node-c".into());
    let rv3 = leases
        .replace("vip-1", &PostParams::default(), &unconditional)
        .await
        .unwrap()
        .resource_version();
    let again = leases
        .replace("vip-1", &PostParams::default(), &unconditional)
        .await
        .unwrap();
    assert_eq!(
        again.resource_version(),
        rv3,
        "a no-op update does not bump the revision"
    );

    // Validation: a zero lease duration is 422 Invalid, a wrongly typed field 400.
    let mut bad = lease("vip-2", "node-a");
    bad.spec.as_mut().unwrap().lease_duration_seconds = Some(0);
    assert_eq!(
        refused(leases.create(&PostParams::default(), &bad)).await,
        422
    );
    let typed = Patch::Merge(json!({"spec": {"leaseDurationSeconds": "fifteen"}}));
    assert_eq!(
        refused(leases.patch("vip-1", &PatchParams::default(), &typed)).await,
        400
    );
    let mut upper = lease("Vip", "node-a");
    upper.metadata.name = Some("Not_A_Name".into());
    assert_eq!(
        refused(leases.create(&PostParams::default(), &upper)).await,
        422
    );

    // Delete: a stale precondition is a 409; then the object is gone.
    let stale_pre = DeleteParams {
        preconditions: Some(kube::api::Preconditions {
            resource_version: Some("1".into()),
            uid: None,
        }),
        ..Default::default()
    };
    assert_eq!(refused(leases.delete("vip-1", &stale_pre)).await, 409);
    let deleted = leases
        .delete("vip-1", &DeleteParams::default())
        .await
        .unwrap();
    assert!(deleted.right().is_some_and(|s| s.is_success()));
    assert_eq!(refused(leases.get("vip-1")).await, 404);
    assert_eq!(
        refused(leases.delete("vip-1", &DeleteParams::default())).await,
        404
    );
    let missing = Patch::Merge(json!({"metadata": {"labels": {"a": "b"}}}));
    assert_eq!(
        refused(leases.patch("vip-1", &PatchParams::default(), &missing)).await,
        404
    );

    // generateName.
    let mut generated = lease("", "node-a");
    generated.metadata.name = None;
    generated.metadata.generate_name = Some("vip-".into());
    let g = leases
        .create(&PostParams::default(), &generated)
        .await
        .unwrap();
    assert!(
        g.name_any().starts_with("vip-") && g.name_any().len() == 9,
        "{}",
        g.name_any()
    );
    server.shutdown().await;
}

#[tokio::test]
async fn status_subresource_is_isolated() {
    let server = start().await;
    let client = server.client("controller").await.unwrap();
    let services: Api<Service> = Api::namespaced(client.clone(), NS);

    // Services drop status on create.
    let mut svc = service("web", &[("app", "web")]);
    svc.status = Some(ServiceStatus {
        conditions: None,
        load_balancer: None,
    });
    let svc = services.create(&PostParams::default(), &svc).await.unwrap();
    assert_eq!(svc.metadata.generation, Some(1));

    // The status subresource changes only status…
    let mut with_status = svc.clone();
    with_status.status = Some(
        serde_json::from_value(json!({"loadBalancer": {"ingress": [{"ip": "192.0.2.10"}]}}))
            .unwrap(),
    );
    with_status.spec.as_mut().unwrap().ports.as_mut().unwrap()[0].port = 8080;
    let after = services
        .replace_status("web", &PostParams::default(), &with_status)
        .await
        .unwrap();
    assert_eq!(
        after.spec.as_ref().unwrap().ports.as_ref().unwrap()[0].port,
        80
    );
    let ip = |s: &Service| {
        s.status
            .as_ref()
            .and_then(|st| st.load_balancer.as_ref())
            .and_then(|lb| lb.ingress.as_ref())
            .map(|i| i[0].ip.clone().unwrap())
    };
    assert_eq!(ip(&after).as_deref(), Some("192.0.2.10"));
    assert_eq!(
        after.metadata.generation,
        Some(1),
        "a status write is not a spec change"
    );

    // …and the main resource cannot change status, while spec changes bump generation.
    let mut main = after.clone();
    main.status = None;
    main.spec.as_mut().unwrap().ports.as_mut().unwrap()[0].port = 443;
    let main = services
        .replace("web", &PostParams::default(), &main)
        .await
        .unwrap();
    assert_eq!(ip(&main).as_deref(), Some("192.0.2.10"));
    assert_eq!(main.metadata.generation, Some(2));

    // Merge-patching status through /status.
    let patch =
        Patch::Merge(json!({"status": {"loadBalancer": {"ingress": [{"ip": "192.0.2.11"}]}}}));
    let patched = services
        .patch_status("web", &PatchParams::default(), &patch)
        .await
        .unwrap();
    assert_eq!(ip(&patched).as_deref(), Some("192.0.2.11"));
    let ignored = services
        .patch(
            "web",
            &PatchParams::default(),
            &Patch::Merge(json!({"status": null})),
        )
        .await
        .unwrap();
    assert_eq!(ip(&ignored).as_deref(), Some("192.0.2.11"));

    // Nodes are cluster-scoped and keep status on create.
    let nodes: Api<Node> = Api::all(client);
    let node = Node {
        metadata: ObjectMeta {
            name: Some("node-a".into()),
            ..Default::default()
        },
        status: Some(NodeStatus {
            phase: Some("Running".into()),
            ..Default::default()
        }),
        ..Default::default()
    };
    nodes.create(&PostParams::default(), &node).await.unwrap();
    let node = nodes.get("node-a").await.unwrap();
    assert_eq!(node.metadata.namespace, None);
    assert_eq!(node.status.unwrap().phase.as_deref(), Some("Running"));
    server.shutdown().await;
}

#[tokio::test]
async fn patches_and_apply() {
    let server = start().await;
    let leases: Api<Lease> = Api::namespaced(server.client("node-a").await.unwrap(), NS);

    // Server-side apply creates, then merges.
    let applied = json!({"apiVersion": "coordination.k8s.io/v1", "kind": "Lease", "metadata": {"name": "vip"}, "spec": {"holderIdentity": "node-a", "leaseDurationSeconds": 10}});
    let pp = PatchParams::apply("announcer");
    let first = leases
        .patch("vip", &pp, &Patch::Apply(&applied))
        .await
        .unwrap();
    assert_eq!(
        first.spec.as_ref().unwrap().holder_identity.as_deref(),
        Some("node-a")
    );
    let second = leases
        .patch("vip", &pp, &Patch::Apply(json!({"apiVersion": "coordination.k8s.io/v1", "kind": "Lease", "metadata": {"name": "vip", "labels": {"a": "1"}}, "spec": {"leaseTransitions": 1}})))
        .await
        .unwrap();
    let spec = second.spec.as_ref().unwrap();
    assert_eq!(
        (
            spec.holder_identity.as_deref(),
            spec.lease_transitions,
            spec.lease_duration_seconds
        ),
        (Some("node-a"), Some(1), Some(10))
    );
    assert_eq!(second.labels().get("a").map(String::as_str), Some("1"));

    // Merge patch removes with null; JSON patch with a failing test op is rejected.
    let merged = leases
        .patch(
            "vip",
            &PatchParams::default(),
            &Patch::Merge(json!({"metadata": {"labels": {"a": null, "b": "2"}}})),
        )
        .await
        .unwrap();
    assert_eq!(
        merged.labels(),
        &BTreeMap::from([("b".to_string(), "2".to_string())])
    );
    let ops: json_patch::Patch = serde_json::from_value(json!([
        {"op": "test", "path": "/spec/holderIdentity", "value": "node-a"},
        {"op": "replace", "path": "/spec/holderIdentity", "value": "node-b"},
    ]))
    .unwrap();
    let jp = leases
        .patch(
            "vip",
            &PatchParams::default(),
            &Patch::<()>::Json(ops.clone()),
        )
        .await
        .unwrap();
    assert_eq!(
        jp.spec.as_ref().unwrap().holder_identity.as_deref(),
        Some("node-b")
    );
    assert_eq!(
        refused(leases.patch("vip", &PatchParams::default(), &Patch::<()>::Json(ops))).await,
        422
    );

    // A patch carrying a resourceVersion is a precondition.
    let stale = Patch::Merge(
        json!({"metadata": {"resourceVersion": first.resource_version().unwrap()}, "spec": {"holderIdentity": "node-c"}}),
    );
    assert_eq!(
        refused(leases.patch("vip", &PatchParams::default(), &stale)).await,
        409
    );
    let current = Patch::Merge(
        json!({"metadata": {"resourceVersion": jp.resource_version().unwrap()}, "spec": {"holderIdentity": "node-c"}}),
    );
    leases
        .patch("vip", &PatchParams::default(), &current)
        .await
        .unwrap();

    // Strategic merge is accepted (as a merge patch).
    let strategic = Patch::Strategic(json!({"metadata": {"annotations": {"x": "y"}}}));
    assert_eq!(
        leases
            .patch("vip", &PatchParams::default(), &strategic)
            .await
            .unwrap()
            .annotations()
            .get("x")
            .map(String::as_str),
        Some("y")
    );

    // Apply without a field manager is rejected by the server, as by kube-apiserver.
    let client = server.client("node-a").await.unwrap();
    let req =
        axum::http::Request::patch("/apis/coordination.k8s.io/v1/namespaces/default/leases/vip")
            .header("Content-Type", "application/apply-patch+yaml")
            .body(serde_json::to_vec(&applied).unwrap())
            .unwrap();
    assert_eq!(refused(client.request_text(req)).await, 422);
    server.shutdown().await;
}

#[tokio::test]
async fn lists_with_selectors() {
    let server = start().await;
    let client = server.client("controller").await.unwrap();
    let default: Api<Service> = Api::namespaced(client.clone(), NS);
    let other: Api<Service> = Api::namespaced(client.clone(), "other");
    default
        .create(
            &PostParams::default(),
            &service("web", &[("app", "web"), ("tier", "front")]),
        )
        .await
        .unwrap();
    default
        .create(&PostParams::default(), &service("db", &[("app", "db")]))
        .await
        .unwrap();
    other
        .create(
            &PostParams::default(),
            &service("cache", &[("app", "cache")]),
        )
        .await
        .unwrap();

    let names = |list: kube::core::ObjectList<Service>| {
        list.items.iter().map(|s| s.name_any()).collect::<Vec<_>>()
    };
    let list = default.list(&ListParams::default()).await.unwrap();
    assert!(
        list.metadata
            .resource_version
            .as_deref()
            .is_some_and(|rv| rv.parse::<u64>().unwrap() >= 3)
    );
    assert_eq!(names(list), ["db", "web"]);
    // The names a list with `lp` returns.
    let listed = async |api: &Api<Service>, lp: ListParams| names(api.list(&lp).await.unwrap());
    let lp = ListParams::default;
    assert_eq!(listed(&default, lp().labels("app=web")).await, ["web"]);
    assert_eq!(
        listed(&default, lp().labels("app in (web,db),!tier")).await,
        ["db"]
    );
    assert_eq!(listed(&default, lp().labels("app!=web")).await, ["db"]);
    assert_eq!(
        listed(&default, lp().fields("metadata.name=web")).await,
        ["web"]
    );
    let all: Api<Service> = Api::all(client.clone());
    assert_eq!(listed(&all, lp()).await, ["db", "web", "cache"]);
    assert_eq!(
        listed(&all, lp().fields("metadata.namespace!=default")).await,
        ["cache"]
    );
    assert_eq!(refused(all.list(&lp().labels("app in web"))).await, 400);
    assert_eq!(
        refused(all.list(&lp().fields("spec.type=LoadBalancer"))).await,
        400
    );

    // EndpointSlices, the other list the agent's controller reads.
    let slices: Api<EndpointSlice> = Api::namespaced(client, NS);
    let slice = EndpointSlice {
        metadata: ObjectMeta {
            name: Some("web-abc".into()),
            labels: Some(BTreeMap::from([(
                "kubernetes.io/service-name".into(),
                "web".into(),
            )])),
            ..Default::default()
        },
        address_type: "IPv4".into(),
        endpoints: Some(vec![Endpoint {
            addresses: vec!["10.0.0.5".into()],
            node_name: Some("node-a".into()),
            ..Default::default()
        }]),
        ports: None,
    };
    slices.create(&PostParams::default(), &slice).await.unwrap();
    let found = slices
        .list(&ListParams::default().labels("kubernetes.io/service-name=web"))
        .await
        .unwrap();
    assert_eq!(
        found.items[0].endpoints.as_ref().unwrap()[0]
            .node_name
            .as_deref(),
        Some("node-a")
    );
    server.shutdown().await;
}

/// What a watcher consumer has seen: the materialised state, event kinds, and errors.
#[derive(Default)]
struct Seen {
    state: BTreeMap<String, String>,
    buffer: BTreeMap<String, String>,
    events: Vec<String>,
    error_codes: Vec<u16>,
}

fn holder(l: &Lease) -> String {
    l.spec
        .as_ref()
        .and_then(|s| s.holder_identity.clone())
        .unwrap_or_default()
}

fn spawn_watcher(api: Api<Lease>, config: watcher::Config) -> Arc<Mutex<Seen>> {
    let seen = Arc::new(Mutex::new(Seen::default()));
    let out = seen.clone();
    tokio::spawn(async move {
        let mut stream = watcher(api, config).default_backoff().boxed();
        while let Some(item) = stream.next().await {
            let mut s = out.lock().unwrap();
            match item {
                Ok(watcher::Event::Init) => s.buffer.clear(),
                Ok(watcher::Event::InitApply(l)) => {
                    s.buffer.insert(l.name_any(), holder(&l));
                }
                Ok(watcher::Event::InitDone) => {
                    s.state = std::mem::take(&mut s.buffer);
                    s.events.push("RELIST".into());
                }
                Ok(watcher::Event::Apply(l)) => {
                    s.events.push(format!("APPLY {}", l.name_any()));
                    s.state.insert(l.name_any(), holder(&l));
                }
                Ok(watcher::Event::Delete(l)) => {
                    s.events.push(format!("DELETE {}", l.name_any()));
                    s.state.remove(&l.name_any());
                }
                Err(watcher::Error::WatchError(status)) => s.error_codes.push(status.code),
                Err(_) => s.error_codes.push(0),
            }
        }
    });
    seen
}

fn expect_state(seen: &Mutex<Seen>, want: &[(&str, &str)]) -> bool {
    let want: BTreeMap<String, String> = want
        .iter()
        .map(|(k, v)| (k.to_string(), v.to_string()))
        .collect();
    seen.lock().unwrap().state == want
}

#[tokio::test]
async fn watcher_survives_drops_and_compaction() {
    let server = start().await;
    let writer: Api<Lease> = Api::namespaced(server.client("writer").await.unwrap(), NS);
    let watched: Api<Lease> = Api::namespaced(server.client("watcher").await.unwrap(), NS);
    create_lease(&writer, "a", "node-a").await;
    let seen = spawn_watcher(watched, watcher::Config::default());
    eventually("initial list", || expect_state(&seen, &[("a", "node-a")])).await;
    eventually("watch open", || {
        server.open_watches().iter().any(|w| w.client == "watcher")
    })
    .await;

    // ADDED, MODIFIED, DELETED.
    create_lease(&writer, "b", "node-b").await;
    writer
        .patch(
            "a",
            &PatchParams::default(),
            &Patch::Merge(json!({"spec": {"holderIdentity": "node-c"}})),
        )
        .await
        .unwrap();
    writer.delete("b", &DeleteParams::default()).await.unwrap();
    eventually("events", || expect_state(&seen, &[("a", "node-c")])).await;
    assert_eq!(
        seen.lock().unwrap().events,
        ["RELIST", "APPLY b", "APPLY a", "DELETE b"]
    );

    // A dropped watch resumes from its last revision without a re-list and without loss.
    let lists_before = server
        .counts()
        .count(Some("watcher"), Some(Verb::List), Some("leases"));
    assert_eq!(server.drop_watches(Some("watcher")), 1);
    create_lease(&writer, "c", "node-a").await;
    eventually("resume after drop", || {
        expect_state(&seen, &[("a", "node-c"), ("c", "node-a")])
    })
    .await;
    assert_eq!(
        server
            .counts()
            .count(Some("watcher"), Some(Verb::List), Some("leases")),
        lists_before
    );

    // Cut the watcher off, write, compact: its resume version is gone, it gets 410 Expired,
    // re-lists, and converges on the final state.
    server.set_faults(vec![
        Fault::outage(OutageMode::Refuse).for_client("watcher"),
    ]);
    eventually("watch cut", || {
        server.open_watches().iter().all(|w| w.client != "watcher")
    })
    .await;
    writer.delete("c", &DeleteParams::default()).await.unwrap();
    create_lease(&writer, "d", "node-d").await;
    server.compact();
    server.clear_faults();
    eventually("re-list after 410", || {
        expect_state(&seen, &[("a", "node-c"), ("d", "node-d")])
    })
    .await;
    assert!(seen.lock().unwrap().error_codes.contains(&410));
    assert!(
        server
            .counts()
            .count(Some("watcher"), Some(Verb::List), Some("leases"))
            > lists_before
    );
    server.shutdown().await;
}

#[tokio::test]
async fn streaming_list_watcher() {
    let server = start().await;
    let writer: Api<Lease> = Api::namespaced(server.client("writer").await.unwrap(), NS);
    create_lease(&writer, "a", "node-a").await;
    let seen = spawn_watcher(
        Api::namespaced(server.client("watcher").await.unwrap(), NS),
        watcher::Config::default().streaming_lists(),
    );
    eventually("streaming list done", || {
        expect_state(&seen, &[("a", "node-a")])
    })
    .await;
    create_lease(&writer, "b", "node-b").await;
    eventually("live event", || {
        expect_state(&seen, &[("a", "node-a"), ("b", "node-b")])
    })
    .await;
    // The initial state came from the watch, not from a list.
    assert_eq!(
        server
            .counts()
            .count(Some("watcher"), Some(Verb::List), None),
        0
    );
    server.shutdown().await;
}

#[tokio::test]
async fn raw_watch_bookmarks_selectors_and_expiry() {
    let server = start().await;
    let leases: Api<Lease> = Api::namespaced(server.client("node-a").await.unwrap(), NS);
    let mut a = lease("a", "node-a");
    a.metadata.labels = Some(BTreeMap::from([("role".into(), "vip".into())]));
    leases.create(&PostParams::default(), &a).await.unwrap();

    // "0": the current state as ADDED, then bookmarks carrying a revision.
    let wp = WatchParams::default().labels("role=vip").timeout(30);
    let mut stream = leases.watch(&wp, "0").await.unwrap().boxed();
    match stream.try_next().await.unwrap() {
        Some(WatchEvent::Added(l)) => assert_eq!(l.name_any(), "a"),
        other => panic!("expected ADDED, got {other:?}"),
    }
    // An object that stops matching the selector is DELETED for this watch.
    leases
        .patch(
            "a",
            &PatchParams::default(),
            &Patch::Merge(json!({"metadata": {"labels": {"role": "other"}}})),
        )
        .await
        .unwrap();
    let deleted_rv = loop {
        match stream.try_next().await.unwrap() {
            Some(WatchEvent::Deleted(l)) => break l.resource_version().unwrap(),
            Some(WatchEvent::Bookmark(_)) => continue,
            other => panic!("expected DELETED, got {other:?}"),
        }
    };
    let rv = match stream.try_next().await.unwrap() {
        Some(WatchEvent::Bookmark(b)) => b.metadata.resource_version,
        other => panic!("expected BOOKMARK, got {other:?}"),
    };
    assert_eq!(
        rv, deleted_rv,
        "a bookmark carries the last revision the watch has seen"
    );

    // From a compacted revision: one ERROR event with 410 Expired, then the end.
    let old = server.resource_version() - 1;
    server.compact();
    let mut stream = leases
        .watch(&WatchParams::default(), &old.to_string())
        .await
        .unwrap()
        .boxed();
    match stream.try_next().await.unwrap() {
        Some(WatchEvent::Error(status)) => {
            assert_eq!((status.code, status.reason.as_str()), (410, "Expired"))
        }
        other => panic!("expected 410, got {other:?}"),
    }
    assert!(stream.try_next().await.unwrap().is_none());
    server.shutdown().await;
}

#[tokio::test]
async fn counts_by_verb_resource_and_client() {
    let server = start().await;
    let a: Api<Lease> = Api::namespaced(server.client("node-a").await.unwrap(), NS);
    let b: Api<Lease> = Api::namespaced(server.client("node-b").await.unwrap(), NS);
    let svc_b: Api<Service> = Api::namespaced(server.client("node-b").await.unwrap(), NS);
    let l = create_lease(&a, "vip", "node-a").await;
    a.get("vip").await.unwrap();
    a.get("vip").await.unwrap();
    a.replace("vip", &PostParams::default(), &l).await.unwrap();
    b.list(&ListParams::default()).await.unwrap();
    svc_b
        .create(&PostParams::default(), &service("web", &[]))
        .await
        .unwrap();
    svc_b
        .patch_status(
            "web",
            &PatchParams::default(),
            &Patch::Merge(json!({"status": {}})),
        )
        .await
        .unwrap();
    let _ = b.get("missing").await.unwrap_err();

    let c = server.counts();
    assert_eq!(
        c.count(Some("node-a"), Some(Verb::Create), Some("leases")),
        1
    );
    assert_eq!(c.count(Some("node-a"), Some(Verb::Get), Some("leases")), 2);
    assert_eq!(
        c.count(Some("node-a"), Some(Verb::Update), Some("leases")),
        1
    );
    assert_eq!(c.count(Some("node-b"), Some(Verb::List), Some("leases")), 1);
    assert_eq!(
        c.count(Some("node-b"), Some(Verb::Patch), Some("services/status")),
        1
    );
    assert_eq!(
        c.count(Some("node-b"), Some(Verb::Patch), Some("services")),
        0
    );
    assert_eq!(c.count(Some("node-b"), Some(Verb::Get), None), 1);
    assert_eq!(c.count(Some("node-a"), None, None), 4);
    assert_eq!(c.total(), 8);

    // The same numbers over the admin API, then a reset.
    let admin = server.client("admin").await.unwrap();
    let text = admin
        .request_text(
            axum::http::Request::get("/_admin/counts")
                .body(Vec::new())
                .unwrap(),
        )
        .await
        .unwrap();
    let over_http: Counts = serde_json::from_str(&text).unwrap();
    assert_eq!(over_http, c);
    admin
        .request_text(
            axum::http::Request::post("/_admin/counts/reset")
                .body(Vec::new())
                .unwrap(),
        )
        .await
        .unwrap();
    assert_eq!(server.counts().total(), 0);
    server.shutdown().await;
}

#[tokio::test]
async fn faults_surface_as_kube_errors() {
    let server = start().await;
    let a: Api<Lease> = Api::namespaced(no_retry_client(&server, "node-a").await, NS);
    let b: Api<Lease> = Api::namespaced(no_retry_client(&server, "node-b").await, NS);
    create_lease(&a, "vip", "node-a").await;

    // An error scoped to one client, verb and resource.
    server.set_faults(vec![
        Fault::error(500, 1.0)
            .for_client("node-a")
            .for_verb(Verb::Patch)
            .for_resource("leases"),
    ]);
    let patch = Patch::Merge(json!({"spec": {"holderIdentity": "x"}}));
    let err = api_err(
        a.patch("vip", &PatchParams::default(), &patch)
            .await
            .unwrap_err(),
    );
    assert_eq!((err.code, err.reason.as_str()), (500, "InternalError"));
    a.get("vip").await.unwrap();
    b.patch("vip", &PatchParams::default(), &patch)
        .await
        .unwrap();

    // Outage, unavailable: 503 for everything of that client.
    server.set_faults(vec![
        Fault::outage(OutageMode::Unavailable).for_client("node-a"),
    ]);
    let err = api_err(a.get("vip").await.unwrap_err());
    assert_eq!((err.code, err.reason.as_str()), (503, "ServiceUnavailable"));
    b.get("vip").await.unwrap();

    // Outage, refuse: the connection is reset; kube reports a transport error, not a Status.
    server.set_faults(vec![Fault::outage(OutageMode::Refuse).for_client("node-a")]);
    let err = a.get("vip").await.unwrap_err();
    assert!(
        !matches!(err, kube::Error::Api(_)),
        "expected a transport error, got {err:?}"
    );
    b.get("vip").await.unwrap();

    // Latency beyond the client's read timeout.
    server.set_faults(vec![
        Fault::latency(Duration::from_secs(3)).for_client("node-a"),
    ]);
    let mut config = server.client_config("node-a").await.unwrap();
    config.read_timeout = Some(Duration::from_millis(300));
    config.default_retry = false;
    let slow: Api<Lease> = Api::namespaced(Client::try_from(config).unwrap(), NS);
    let err = slow.get("vip").await.unwrap_err();
    assert!(
        !matches!(err, kube::Error::Api(_)),
        "expected a timeout, got {err:?}"
    );

    server.clear_faults();
    a.get("vip").await.unwrap();

    // The default client retries 503s (kube's retry policy) and succeeds once the outage ends.
    let retrying: Api<Lease> = Api::namespaced(server.client("node-c").await.unwrap(), NS);
    server.set_faults(vec![
        Fault::outage(OutageMode::Unavailable).for_client("node-c"),
    ]);
    let pending = tokio::spawn(async move { retrying.get("vip").await });
    eventually("a retried request", || {
        server.counts().count(Some("node-c"), Some(Verb::Get), None) >= 3
    })
    .await;
    server.clear_faults();
    pending.await.unwrap().unwrap();

    // Probabilistic errors draw from the seeded RNG: some but not all requests fail.
    server.set_faults(vec![Fault::error(500, 0.5).for_client("node-a")]);
    let mut failures = 0;
    for _ in 0..40 {
        if a.get("vip").await.is_err() {
            failures += 1;
        }
    }
    assert!(failures > 0 && failures < 40, "{failures}");

    // Faults over the admin API.
    let admin = server.client("admin").await.unwrap();
    admin
        .request_text(
            axum::http::Request::delete("/_admin/faults")
                .body(Vec::new())
                .unwrap(),
        )
        .await
        .unwrap();
    let body =
        serde_json::to_vec(&json!({"client": "node-b", "action": "error", "code": 409})).unwrap();
    admin
        .request_text(
            axum::http::Request::post("/_admin/faults")
                .body(body)
                .unwrap(),
        )
        .await
        .unwrap();
    assert_eq!(refused(b.get("vip")).await, 409);
    assert_eq!(
        server.faults(),
        vec![Fault::error(409, 1.0).for_client("node-b")]
    );
    server.shutdown().await;
}

#[tokio::test]
async fn recorder_publishes_events() {
    let server = start().await;
    let client = server.client("node-a").await.unwrap();
    let services: Api<Service> = Api::namespaced(client.clone(), NS);
    let svc = services
        .create(&PostParams::default(), &service("web", &[]))
        .await
        .unwrap();
    let recorder = Recorder::new(
        client.clone(),
        Reporter {
            controller: "announcer".into(),
            instance: Some("node-a".into()),
        },
    );
    let event = Event {
        type_: EventType::Normal,
        reason: "Announced".into(),
        note: Some("192.0.2.10 announced from node-a".into()),
        action: "Announce".into(),
        secondary: None,
    };
    let reference = svc.object_ref(&());
    recorder.publish(&event, &reference).await.unwrap();
    recorder.publish(&event, &reference).await.unwrap();

    let events: Api<EventV1> = Api::namespaced(client, NS);
    let list = events.list(&ListParams::default()).await.unwrap();
    assert_eq!(list.items.len(), 1);
    let e = &list.items[0];
    assert_eq!(e.reason.as_deref(), Some("Announced"));
    assert_eq!(
        e.regarding.as_ref().and_then(|r| r.name.as_deref()),
        Some("web")
    );
    assert_eq!(e.series.as_ref().map(|s| s.count), Some(2));
    let c = server.counts();
    assert_eq!(
        c.count(Some("node-a"), Some(Verb::Create), Some("events")),
        1
    );
    assert_eq!(
        c.count(Some("node-a"), Some(Verb::Patch), Some("events")),
        1
    );
    assert!(
        c.entries
            .iter()
            .filter(|e| e.resource == "events")
            .all(|e| e.group == "events.k8s.io")
    );
    server.shutdown().await;
}

#[tokio::test]
async fn kubeconfig_file_and_seed_objects() {
    let seed = "\
apiVersion: v1
kind: Namespace
metadata:
  name: announcer-system
---
apiVersion: v1
kind: Service
metadata:
  name: web
  namespace: prod
  resourceVersion: \"999\"
spec:
  type: LoadBalancer
  ports: [{port: 80}]
";
    let server = ApiServer::builder()
        .seed_objects(parse_manifests(seed).unwrap())
        .start()
        .await
        .unwrap();
    let dir = std::env::temp_dir().join(format!("apiserver-test-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let path = dir.join("kubeconfig");
    server.write_kubeconfig(&path, "node-z").unwrap();
    let kubeconfig = kube::config::Kubeconfig::read_from(&path).unwrap();
    let config = kube::Config::from_custom_kubeconfig(
        kubeconfig,
        &kube::config::KubeConfigOptions::default(),
    )
    .await
    .unwrap();
    let client = Client::try_from(config).unwrap();
    std::fs::remove_dir_all(&dir).unwrap();

    let namespaces: Api<Namespace> = Api::all(client.clone());
    let ns = namespaces.get("announcer-system").await.unwrap();
    assert_eq!(ns.status.unwrap().phase.as_deref(), Some("Active"));
    let web = Api::<Service>::namespaced(client.clone(), "prod")
        .get("web")
        .await
        .unwrap();
    assert_ne!(web.resource_version().as_deref(), Some("999"));
    assert_eq!(
        server.counts().count(Some("node-z"), Some(Verb::Get), None),
        2
    );
    let version = client.apiserver_version().await.unwrap();
    assert_eq!(version.major, "1");
    server.shutdown().await;
}

#[tokio::test]
async fn remote_admin_dry_run_and_delete_collection() {
    let server = start().await;
    let admin = RemoteAdmin::new(&server.url()).await.unwrap();
    let leases: Api<Lease> = Api::namespaced(server.client("node-a").await.unwrap(), NS);

    // Dry runs validate and answer, but persist nothing.
    let dry = leases
        .create(
            &PostParams {
                dry_run: true,
                ..Default::default()
            },
            &lease("dry", "node-a"),
        )
        .await
        .unwrap();
    assert_eq!(dry.name_any(), "dry");
    assert_eq!(refused(leases.get("dry")).await, 404);

    // Delete a labelled subset.
    for (name, role) in [("a", "vip"), ("b", "vip"), ("c", "other")] {
        let mut l = lease(name, "node-a");
        l.metadata.labels = Some(BTreeMap::from([("role".into(), role.into())]));
        leases.create(&PostParams::default(), &l).await.unwrap();
    }
    leases
        .delete_collection(
            &DeleteParams::default(),
            &ListParams::default().labels("role=vip"),
        )
        .await
        .unwrap();
    let left: Vec<String> = leases
        .list(&ListParams::default())
        .await
        .unwrap()
        .items
        .iter()
        .map(|l| l.name_any())
        .collect();
    assert_eq!(left, ["c"]);

    // The remote admin API drives the same state as the handle.
    assert_eq!(admin.counts().await.unwrap(), server.counts());
    admin
        .set_faults(&[Fault::error(500, 1.0).for_client("node-a")])
        .await
        .unwrap();
    assert_eq!(server.faults(), admin.faults().await.unwrap());
    assert_eq!(refused(leases.get("c")).await, 500);
    admin.clear_faults().await.unwrap();
    leases.get("c").await.unwrap();

    let _stream = leases
        .watch(&WatchParams::default(), "0")
        .await
        .unwrap()
        .boxed();
    eventually("watch open", || !server.open_watches().is_empty()).await;
    assert_eq!(admin.open_watches().await.unwrap().len(), 1);
    assert_eq!(admin.drop_watches(Some("node-a")).await.unwrap(), 1);
    let rv = admin.compact().await.unwrap();
    assert_eq!(rv, server.resource_version());
    admin.reset_counts().await.unwrap();
    assert_eq!(server.counts().total(), 0);
    server.shutdown().await;
}

#[tokio::test]
async fn bounded_history_expires_old_watch_starts() {
    let server = ApiServer::builder().history(2).start().await.unwrap();
    let leases: Api<Lease> = Api::namespaced(server.client("node-a").await.unwrap(), NS);
    let first = create_lease(&leases, "a", "node-a").await;
    let start: u64 = first.resource_version().unwrap().parse().unwrap();
    for name in ["b", "c", "d"] {
        create_lease(&leases, name, "node-a").await;
    }
    // Only the last two events (c, d) are retained: resuming after "a" would miss "b".
    let mut expired = leases
        .watch(&WatchParams::default(), &start.to_string())
        .await
        .unwrap()
        .boxed();
    match expired.try_next().await.unwrap() {
        Some(WatchEvent::Error(status)) => assert_eq!(status.code, 410),
        other => panic!("expected 410, got {other:?}"),
    }
    // Resuming after "b" replays c and d.
    let mut replay = leases
        .watch(&WatchParams::default(), &(start + 1).to_string())
        .await
        .unwrap()
        .boxed();
    for want in ["c", "d"] {
        match replay.try_next().await.unwrap() {
            Some(WatchEvent::Added(l)) => assert_eq!(l.name_any(), want),
            other => panic!("expected ADDED {want}, got {other:?}"),
        }
    }
    server.shutdown().await;
}
