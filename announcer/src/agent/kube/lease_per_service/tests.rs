//! Tests of the lease-per-service timing rules, on virtual time (no sleeping).

use super::*;

const T: Timing = Timing::CILIUM;

fn secs(s: u64) -> Duration {
    Duration::from_secs(s)
}

fn rec(rv: &str, holder: Option<&str>, renew: &str, transitions: i32) -> LeaseRecord {
    LeaseRecord {
        resource_version: rv.into(),
        holder: holder.map(String::from),
        renew_time: Some(renew.into()),
        duration: T.lease_duration,
        transitions,
    }
}

fn me() -> NodeName {
    NodeName::from("node-a")
}

fn update(rv: &str, take: bool, transitions: i32) -> Action {
    Action::Update {
        resource_version: rv.into(),
        take,
        transitions,
    }
}

#[test]
fn a_missing_lease_is_created_and_then_renewed() {
    let t0 = Instant::now();
    let mut c = Contender::new(&me(), T);
    assert!(!c.leading(t0));
    assert_eq!(c.on_get(t0, Got::Missing), Action::Create);
    c.on_write(t0, Wrote::Ok(rec("1", Some("node-a"), "r1", 0)));
    assert!(c.leading(t0));
    let t1 = t0 + T.retry_period;
    assert_eq!(
        c.on_get(t1, Got::Found(rec("1", Some("node-a"), "r1", 0))),
        update("1", false, 0)
    );
    c.on_write(t1, Wrote::Ok(rec("2", Some("node-a"), "r2", 0)));
    assert!(c.leading(t1 + T.renew_deadline - Duration::from_millis(1)));
}

#[test]
fn another_holder_is_waited_for_until_expired_on_the_local_clock() {
    let t0 = Instant::now();
    let mut c = Contender::new(&me(), T);
    // First sighting: however old its renewTime, expiry counts from now.
    let other = rec("5", Some("node-b"), "2001-01-01T00:00:00Z", 3);
    assert_eq!(c.on_get(t0, Got::Found(other.clone())), Action::Wait);
    assert_eq!(
        c.on_get(t0 + T.lease_duration - secs(1), Got::Found(other.clone())),
        Action::Wait
    );
    // Expired: take it, one more transition.
    assert_eq!(
        c.on_get(t0 + T.lease_duration, Got::Found(other)),
        update("5", true, 4)
    );
}

#[test]
fn a_renewing_holder_is_never_taken_over() {
    let t0 = Instant::now();
    let mut c = Contender::new(&me(), T);
    for i in 0..20u64 {
        let now = t0 + secs(2 * i);
        let r = rec(&i.to_string(), Some("node-b"), &format!("r{i}"), 0);
        assert_eq!(c.on_get(now, Got::Found(r)), Action::Wait, "round {i}");
    }
}

#[test]
fn a_released_lease_is_taken_at_once() {
    let t0 = Instant::now();
    let mut c = Contender::new(&me(), T);
    assert_eq!(
        c.on_get(t0, Got::Found(rec("9", Some(""), "r", 2))),
        update("9", true, 3)
    );
    let mut c = Contender::new(&me(), T);
    assert_eq!(
        c.on_get(t0, Got::Found(rec("9", None, "r", 0))),
        update("9", true, 1)
    );
}

#[test]
fn a_conflict_does_not_make_a_leader_and_the_next_round_rereads() {
    let t0 = Instant::now();
    let mut c = Contender::new(&me(), T);
    assert_eq!(c.on_get(t0, Got::Missing), Action::Create);
    c.on_write(t0, Wrote::Conflict);
    assert!(!c.leading(t0));
    // Someone else created it meanwhile: wait for them.
    let t1 = t0 + T.retry_period;
    assert_eq!(
        c.on_get(t1, Got::Found(rec("1", Some("node-b"), "r", 0))),
        Action::Wait
    );
}

#[test]
fn a_leader_that_cannot_renew_stops_at_the_renew_deadline() {
    let t0 = Instant::now();
    let mut c = Contender::new(&me(), T);
    c.on_get(t0, Got::Missing);
    c.on_write(t0, Wrote::Ok(rec("1", Some("node-a"), "r1", 0)));
    // The API server is unreachable from here on.
    let mut now = t0;
    while now < t0 + T.renew_deadline {
        assert!(c.leading(now));
        assert_eq!(c.on_get(now, Got::Error), Action::Wait);
        c.on_write(now, Wrote::Failed);
        now += Duration::from_millis(500);
    }
    assert!(!c.leading(t0 + T.renew_deadline));
    assert_eq!(c.lapses_at(), Some(t0 + T.renew_deadline));
}

#[test]
fn like_client_go_a_leader_seeing_another_holder_leads_until_its_deadline() {
    let t0 = Instant::now();
    let mut c = Contender::new(&me(), T);
    c.on_get(t0, Got::Missing);
    c.on_write(t0, Wrote::Ok(rec("1", Some("node-a"), "r1", 0)));
    let t1 = t0 + secs(1);
    assert_eq!(
        c.on_get(t1, Got::Found(rec("2", Some("node-b"), "r2", 1))),
        Action::Wait
    );
    assert!(c.leading(t1));
    assert!(!c.leading(t0 + T.renew_deadline));
    // And it no longer releases a Lease that is not its own.
    assert_eq!(c.release(), None);
}

#[test]
fn release_carries_the_last_version_and_transitions() {
    let t0 = Instant::now();
    let mut c = Contender::new(&me(), T);
    assert_eq!(c.release(), None);
    c.on_get(t0, Got::Found(rec("4", Some("node-b"), "r", 2)));
    assert_eq!(c.release(), None);
    c.on_get(
        t0 + T.lease_duration,
        Got::Found(rec("4", Some("node-b"), "r", 2)),
    );
    c.on_write(
        t0 + T.lease_duration,
        Wrote::Ok(rec("7", Some("node-a"), "r7", 3)),
    );
    assert_eq!(
        c.release(),
        Some(Write::Release {
            resource_version: "7".into(),
            transitions: 3
        })
    );
    c.released();
    assert!(!c.leading(t0 + T.lease_duration));
    assert_eq!(c.release(), None);
}

#[test]
fn written_objects_match_client_go() {
    let now: Timestamp = "2025-01-02T03:04:05Z".parse().unwrap();
    let name = lease_name(&ServiceRef {
        namespace: "default".into(),
        name: "web".into(),
    });
    assert_eq!(name, "announcer-svc-default.web");
    let created =
        lease_object(None, &name, &me(), &T, &Write::Acquire(Action::Create), now).unwrap();
    let spec = created.spec.clone().unwrap();
    assert_eq!(created.metadata.resource_version, None);
    assert_eq!(spec.holder_identity.as_deref(), Some("node-a"));
    assert_eq!(spec.lease_duration_seconds, Some(15));
    assert_eq!(spec.lease_transitions, Some(0));
    assert_eq!(spec.acquire_time, Some(MicroTime(now)));
    let labels = created.metadata.labels.clone().unwrap();
    assert_eq!(
        labels.get("announcer.dev/lease").map(String::as_str),
        Some("service")
    );

    let mut stored = created.clone();
    stored.metadata.resource_version = Some("3".into());
    let later: Timestamp = "2025-01-02T03:04:07Z".parse().unwrap();
    let renewed = lease_object(
        Some(&stored),
        &name,
        &me(),
        &T,
        &Write::Acquire(update("3", false, 0)),
        later,
    )
    .unwrap();
    let spec = renewed.spec.clone().unwrap();
    assert_eq!(renewed.metadata.resource_version.as_deref(), Some("3"));
    assert_eq!(spec.acquire_time, Some(MicroTime(now)), "kept on renew");
    assert_eq!(spec.renew_time, Some(MicroTime(later)));

    let released = lease_object(
        Some(&stored),
        &name,
        &me(),
        &T,
        &Write::Release {
            resource_version: "3".into(),
            transitions: 0,
        },
        later,
    )
    .unwrap();
    let spec = released.spec.unwrap();
    assert_eq!(spec.holder_identity.as_deref(), Some(""));
    assert_eq!(spec.lease_duration_seconds, Some(1));
    assert_eq!(
        lease_object(None, &name, &me(), &T, &Write::Acquire(Action::Wait), now),
        None
    );
}

#[test]
fn service_lease_names_do_not_collide() {
    let n = |ns: &str, name: &str| {
        lease_name(&ServiceRef {
            namespace: ns.into(),
            name: name.into(),
        })
    };
    assert_ne!(n("a-b", "c"), n("a", "b-c"));
    let long = n(&"n".repeat(63), &"s".repeat(63));
    assert!(long.len() <= 253);
}

#[test]
fn lease_records_default_a_missing_duration() {
    let l = Lease {
        metadata: ObjectMeta {
            resource_version: Some("1".into()),
            ..Default::default()
        },
        spec: None,
    };
    let r = LeaseRecord::of(&l, secs(15)).unwrap();
    assert_eq!((r.duration, r.holder, r.transitions), (secs(15), None, 0));
    assert_eq!(LeaseRecord::of(&Lease::default(), secs(15)), None);
}

#[tokio::test]
async fn run_contends_only_where_eligible_and_returns_on_shutdown() {
    // No API server: every GET fails, so nothing is ever owned, and shutdown still returns.
    let cfg = kube::Config::new("http://127.0.0.1:1".parse().unwrap());
    let client = Client::try_from(cfg).unwrap();
    let node = me();
    let plan = Placement {
        vips: vec![crate::placement::eligibility::VipPlacement {
            vip: "10.0.0.5".parse().unwrap(),
            service: ServiceRef {
                namespace: "default".into(),
                name: "web".into(),
            },
            eligible: std::sync::Arc::new([node.clone()].into()),
            local_policy: false,
            shared_with: Vec::new(),
            pool: None,
            interfaces: Vec::new(),
            preferred: Default::default(),
        }],
        problems: vec![],
    };
    let (_plan_tx, plan_rx) = watch::channel(plan);
    let (out_tx, mut out_rx) = mpsc::channel(8);
    let (stop, shutdown) = shutdown::channel();
    let stats = Arc::new(LeaseApiStats::default());
    let cfg = ServiceLeaseConfig {
        node,
        namespace: "announcer".into(),
        timing: T,
    };
    let h = tokio::spawn(run(client, cfg, plan_rx, out_tx, shutdown, stats.clone()));
    // The first round starts at once; wait until its GET has been counted, then stop.
    while stats.gets.load(Ordering::Relaxed) == 0 {
        tokio::task::yield_now().await;
    }
    stop.fire();
    h.await.unwrap();
    assert_eq!(out_rx.recv().await, None, "never owned, nothing announced");
    assert_eq!(stats.writes.load(Ordering::Relaxed), 0);
}

/// An in-memory Lease API (GET, POST, PUT with resourceVersion preconditions).
async fn lease_server() -> Client {
    use axum::{
        Json, Router,
        extract::{Path, State},
        http::StatusCode,
        routing::{get, post},
    };
    use std::sync::Mutex;
    type Db = Arc<Mutex<(u64, HashMap<String, Lease>)>>;
    type Answer = (StatusCode, Json<serde_json::Value>);
    fn status(code: u16, reason: &str) -> Answer {
        let body = serde_json::json!({
            "kind": "Status", "apiVersion": "v1", "status": "Failure",
            "reason": reason, "code": code, "message": reason,
        });
        (StatusCode::from_u16(code).unwrap(), Json(body))
    }
    fn store(db: &mut (u64, HashMap<String, Lease>), mut l: Lease, code: StatusCode) -> Answer {
        db.0 += 1;
        l.metadata.resource_version = Some(db.0.to_string());
        db.1.insert(l.metadata.name.clone().unwrap(), l.clone());
        (code, Json(serde_json::to_value(l).unwrap()))
    }
    async fn read(State(db): State<Db>, Path(name): Path<String>) -> Answer {
        match db.lock().unwrap().1.get(&name) {
            Some(l) => (StatusCode::OK, Json(serde_json::to_value(l).unwrap())),
            None => status(404, "NotFound"),
        }
    }
    async fn create(State(db): State<Db>, Json(l): Json<Lease>) -> Answer {
        let mut db = db.lock().unwrap();
        if db.1.contains_key(l.metadata.name.as_deref().unwrap()) {
            return status(409, "AlreadyExists");
        }
        store(&mut db, l, StatusCode::CREATED)
    }
    async fn replace(
        State(db): State<Db>,
        Path(name): Path<String>,
        Json(l): Json<Lease>,
    ) -> Answer {
        let mut db = db.lock().unwrap();
        let Some(cur) = db.1.get(&name) else {
            return status(404, "NotFound");
        };
        if cur.metadata.resource_version != l.metadata.resource_version {
            return status(409, "Conflict");
        }
        store(&mut db, l, StatusCode::OK)
    }
    let base = "/apis/coordination.k8s.io/v1/namespaces/announcer/leases";
    let app = Router::new()
        .route(base, post(create))
        .route(&format!("{base}/{{name}}"), get(read).put(replace))
        .with_state(Db::default());
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let url = format!("http://{}", listener.local_addr().unwrap());
    tokio::spawn(async move { axum::serve(listener, app).await.unwrap() });
    Client::try_from(kube::Config::new(url.parse().unwrap())).unwrap()
}

fn plan_for(nodes: &[&str]) -> Placement {
    Placement {
        vips: vec![crate::placement::eligibility::VipPlacement {
            vip: "10.0.0.5".parse().unwrap(),
            service: ServiceRef {
                namespace: "default".into(),
                name: "web".into(),
            },
            eligible: std::sync::Arc::new(nodes.iter().map(|n| NodeName::from(*n)).collect()),
            local_policy: false,
            shared_with: Vec::new(),
            pool: None,
            interfaces: Vec::new(),
            preferred: Default::default(),
        }],
        problems: vec![],
    }
}

/// Starts one agent's lease-per-service loop.
fn agent(
    client: &Client,
    node: &str,
    plan: watch::Receiver<Placement>,
) -> (mpsc::Receiver<Ownership>, shutdown::Trigger, JoinHandle<()>) {
    let (out_tx, out_rx) = mpsc::channel(8);
    let (stop, shutdown) = shutdown::channel();
    let cfg = ServiceLeaseConfig {
        node: NodeName::from(node),
        namespace: "announcer".into(),
        timing: Timing {
            lease_duration: secs(30),
            renew_deadline: secs(20),
            retry_period: Duration::from_millis(20),
        },
    };
    let h = tokio::spawn(run(
        client.clone(),
        cfg,
        plan,
        out_tx,
        shutdown,
        Arc::default(),
    ));
    (out_rx, stop, h)
}

#[tokio::test]
async fn one_holder_at_a_time_and_a_graceful_leaver_hands_over_without_waiting_for_expiry() {
    let client = lease_server().await;
    let (plan_tx, plan_rx) = watch::channel(plan_for(&["a"]));
    let (mut out_a, stop_a, run_a) = agent(&client, "a", plan_rx.clone());
    let got = out_a.recv().await.unwrap();
    assert_eq!((got.owned, got.vips.len()), (true, 1));

    // b becomes eligible too: a keeps it (b waits, the Lease is renewed well within 30 s).
    plan_tx.send(plan_for(&["a", "b"])).unwrap();
    let (mut out_b, stop_b, run_b) = agent(&client, "b", plan_rx.clone());
    let api: Api<Lease> = Api::namespaced(client.clone(), "announcer");
    let name = "announcer-svc-default.web";
    // Let b contend for a few rounds (each round GETs and leaves a trace in a's renewals).
    let first = api.get(name).await.unwrap().metadata.resource_version;
    while api.get(name).await.unwrap().metadata.resource_version == first {
        tokio::task::yield_now().await;
    }
    assert!(out_b.try_recv().is_err(), "b must not own while a renews");

    // a leaves: it stops announcing, releases, and b takes over at its next round.
    stop_a.fire();
    run_a.await.unwrap();
    assert_eq!(out_a.recv().await.map(|o| o.owned), Some(false));
    let got = out_b.recv().await.unwrap();
    assert!(got.owned);
    let lease = api.get(name).await.unwrap().spec.unwrap();
    assert_eq!(lease.holder_identity.as_deref(), Some("b"));
    assert_eq!(lease.lease_transitions, Some(1));

    // b is no longer eligible: it stops and releases.
    plan_tx.send(plan_for(&["a"])).unwrap();
    assert_eq!(out_b.recv().await.map(|o| o.owned), Some(false));
    stop_b.fire();
    run_b.await.unwrap();
    let lease = api.get(name).await.unwrap().spec.unwrap();
    assert_eq!(lease.holder_identity.as_deref(), Some(""));
}
