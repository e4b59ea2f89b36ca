//! Every grant of deploy/rbac.yaml (the agents') and deploy/allocator.yaml (the allocator's)
//! is needed: on a real kube-apiserver (whose RBAC is what authorises them), `deploy/` applied
//! with one (API group, resource, verb) removed from one account breaks a named behaviour a
//! user would notice. One test per grant; [`every_grant_has_a_removal_test`] keeps the table
//! complete.
//!
//! Each case starts three agents ([`LEASE_ARGS`]) and the allocator's two replicas with two
//! Services: `web` (a ready endpoint on node-a) and `local` (externalTrafficPolicy Local, its
//! endpoint on node-b), an `AddressPool` and a third Service, `auto` (our class, no address:
//! the allocator's), and `outside` (asking for an address in no pool: a Warning); a few
//! seconds in, a pool `late` and a Service `late` that names it; and watches for [`WINDOW`].

use std::time::{Duration, Instant};

use announcer_tests::env::{
    ApiKind,
    agent_cmd::PER_SERVICE_ELECTION,
    cluster::{Cluster, owned_vips},
};
use k8s_openapi::api::{core::v1::Service, events::v1::Event};
use kube::{Api, api::PostParams};
use serde_json::Value;

use super::documents;

const NODES: [&str; 3] = ["node-a", "node-b", "node-c"];
const WEB: &str = "10.0.71.1";
const LOCAL: &str = "10.0.71.2";
/// How long a case watches: several Lease durations, and long enough to start on a loaded host.
const WINDOW: Duration = Duration::from_secs(15);
/// The end of the window in which trust must hold throughout.
const STEADY: Duration = Duration::from_secs(5);
/// A 4 s Lease renewed every second: a refused renewal shows within the window, and a write
/// slowed by a loaded host (in flight for a renewal period counts as failed) rarely does.
/// (`web`'s and `local`'s addresses are in no pool: announced beside the `auto` pool only with
/// `--announce-outside-pools`.)
const LEASE_ARGS: [&str; 5] = [
    "--lease-duration",
    "4s",
    "--lease-renew",
    "1s",
    "--announce-outside-pools",
];

/// What a user would notice.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Behaviour {
    /// `web`'s VIP is announced by exactly one node.
    AnnouncesTheVip,
    /// `local`'s VIP is announced, by node-b (where its endpoint is).
    AnnouncesTheLocalVipWhereItsEndpointIs,
    /// An `Announcing` Event is recorded on `web`.
    RecordsAnAnnouncingEvent,
    /// Every agent's `/state` says it trusts the API, all through the window's last
    /// [`STEADY`].
    TrustsTheApi,
    /// Every agent's `/state` lists both peers with a valid Lease (at the end of the window).
    SeesItsPeersLeases,
    /// `auto` gets an address from the pool.
    AllocatesAnAddress,
    /// `late`, created with its pool `late` after the allocator started, gets an address from
    /// it (the allocator follows Services and pools with watches).
    AllocatesFromAPoolAddedLater,
    /// The allocator records a Warning on `outside` (an address in no pool).
    WarnsAboutAServiceItCannotServe,
    /// At the end of the window an allocator replica holds its Lease, renewed recently.
    HoldsTheAllocatorLease,
    /// `web` carries the agents' `announcer.dev/Announced` condition.
    WritesTheAnnouncedCondition,
    /// The pool's status counts `auto`'s address (at the end of the window).
    CountsThePoolsAddresses,
    /// The agents list the pools about once each, then follow a watch ([`RELISTS`]).
    WatchesPoolsWithoutRelisting,
    /// The active allocator follows the Namespaces with a watch (the audit log shows one it
    /// was not refused). Without it, kube's watcher retries the watch from its last
    /// resourceVersion and never relists: a namespace's label change (`namespaceSelector`)
    /// would never reach the allocator.
    FollowsNamespaceChanges,
    /// A standby allocator follows the `announcer-allocator` Lease with a watch by name (the
    /// audit log shows one it was not refused). Without it, it logs that it may not watch the
    /// Lease and reads it once per Lease duration instead: allocation still works, but every
    /// standby polls the API server.
    WatchesTheAllocatorLease,
}

use Behaviour::*;

const ALL: [Behaviour; 14] = [
    AnnouncesTheVip,
    AnnouncesTheLocalVipWhereItsEndpointIs,
    RecordsAnAnnouncingEvent,
    TrustsTheApi,
    SeesItsPeersLeases,
    AllocatesAnAddress,
    AllocatesFromAPoolAddedLater,
    WarnsAboutAServiceItCannotServe,
    HoldsTheAllocatorLease,
    WritesTheAnnouncedCondition,
    CountsThePoolsAddresses,
    WatchesPoolsWithoutRelisting,
    FollowsNamespaceChanges,
    WatchesTheAllocatorLease,
];

/// Lists of one resource, per lister, beyond which it counts as relisting: a working watch
/// lists once (twice if a watch is replaced); a refused one relists on every backoff step
/// (several times within [`WINDOW`]).
const RELISTS: usize = 2;
const AUTO: &str = "10.0.71.128/25";
/// The pool created a few seconds in (10.0.71.64 – 10.0.71.69).
const LATE: &str = "10.0.71.64/29";

/// Which election mode a case runs (`get` on Leases is only the per-Service mode's).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Mode {
    NodeLease,
    PerService,
}

/// The agents' grants.
const AGENTS: &str = "rbac.yaml";
/// The allocator's grants.
const ALLOCATOR: &str = "allocator.yaml";

/// (file, group, resource, verb) removed, the mode, and the behaviour that must break.
const CASES: [(&str, &str, &str, &str, Mode, Behaviour); 29] = [
    (
        AGENTS,
        "",
        "services",
        "list",
        Mode::NodeLease,
        AnnouncesTheVip,
    ),
    (
        AGENTS,
        "",
        "services",
        "watch",
        Mode::NodeLease,
        TrustsTheApi,
    ),
    (
        AGENTS,
        "",
        "nodes",
        "list",
        Mode::NodeLease,
        AnnouncesTheVip,
    ),
    (AGENTS, "", "nodes", "watch", Mode::NodeLease, TrustsTheApi),
    (
        AGENTS,
        "discovery.k8s.io",
        "endpointslices",
        "list",
        Mode::NodeLease,
        AnnouncesTheVip,
    ),
    (
        AGENTS,
        "discovery.k8s.io",
        "endpointslices",
        "watch",
        Mode::NodeLease,
        TrustsTheApi,
    ),
    (
        AGENTS,
        "events.k8s.io",
        "events",
        "create",
        Mode::NodeLease,
        RecordsAnAnnouncingEvent,
    ),
    (
        AGENTS,
        "coordination.k8s.io",
        "leases",
        "create",
        Mode::NodeLease,
        SeesItsPeersLeases,
    ),
    (
        AGENTS,
        "coordination.k8s.io",
        "leases",
        "update",
        Mode::NodeLease,
        TrustsTheApi,
    ),
    (
        AGENTS,
        "coordination.k8s.io",
        "leases",
        "list",
        Mode::NodeLease,
        SeesItsPeersLeases,
    ),
    (
        AGENTS,
        "coordination.k8s.io",
        "leases",
        "watch",
        Mode::NodeLease,
        TrustsTheApi,
    ),
    (
        AGENTS,
        "coordination.k8s.io",
        "leases",
        "get",
        Mode::PerService,
        AnnouncesTheVip,
    ),
    (
        AGENTS,
        "announcer.dev",
        "addresspools",
        "list",
        Mode::NodeLease,
        WatchesPoolsWithoutRelisting,
    ),
    (
        AGENTS,
        "announcer.dev",
        "addresspools",
        "watch",
        Mode::NodeLease,
        WatchesPoolsWithoutRelisting,
    ),
    (
        AGENTS,
        "",
        "services/status",
        "patch",
        Mode::NodeLease,
        WritesTheAnnouncedCondition,
    ),
    (
        ALLOCATOR,
        "",
        "services",
        "list",
        Mode::NodeLease,
        AllocatesAnAddress,
    ),
    (
        ALLOCATOR,
        "",
        "services",
        "watch",
        Mode::NodeLease,
        AllocatesFromAPoolAddedLater,
    ),
    (
        ALLOCATOR,
        "",
        "services/status",
        "patch",
        Mode::NodeLease,
        AllocatesAnAddress,
    ),
    (
        ALLOCATOR,
        "announcer.dev",
        "addresspools",
        "list",
        Mode::NodeLease,
        AllocatesAnAddress,
    ),
    (
        ALLOCATOR,
        "announcer.dev",
        "addresspools",
        "watch",
        Mode::NodeLease,
        AllocatesFromAPoolAddedLater,
    ),
    (
        ALLOCATOR,
        "announcer.dev",
        "addresspools/status",
        "patch",
        Mode::NodeLease,
        CountsThePoolsAddresses,
    ),
    (
        ALLOCATOR,
        "",
        "namespaces",
        "list",
        Mode::NodeLease,
        AllocatesAnAddress,
    ),
    (
        ALLOCATOR,
        "",
        "namespaces",
        "watch",
        Mode::NodeLease,
        FollowsNamespaceChanges,
    ),
    (
        ALLOCATOR,
        "events.k8s.io",
        "events",
        "create",
        Mode::NodeLease,
        WarnsAboutAServiceItCannotServe,
    ),
    (
        ALLOCATOR,
        "coordination.k8s.io",
        "leases",
        "get",
        Mode::NodeLease,
        AllocatesAnAddress,
    ),
    (
        ALLOCATOR,
        "coordination.k8s.io",
        "leases",
        "update",
        Mode::NodeLease,
        HoldsTheAllocatorLease,
    ),
    (
        ALLOCATOR,
        "coordination.k8s.io",
        "leases",
        "create",
        Mode::NodeLease,
        AllocatesAnAddress,
    ),
    (
        ALLOCATOR,
        "coordination.k8s.io",
        "leases",
        "list",
        Mode::NodeLease,
        WatchesTheAllocatorLease,
    ),
    (
        ALLOCATOR,
        "coordination.k8s.io",
        "leases",
        "watch",
        Mode::NodeLease,
        WatchesTheAllocatorLease,
    ),
];

/// Grants no short test can take away visibly (file, group, resource, verb, reason).
const UNTESTABLE: [(&str, &str, &str, &str, &str); 2] = [
    (
        AGENTS,
        "events.k8s.io",
        "events",
        "patch",
        "the Event recorder patches a series only when the same Event recurs after its 60 s \
         dedupe window; without it a recurring Event is dropped (the agent logs the failure)",
    ),
    (
        ALLOCATOR,
        "events.k8s.io",
        "events",
        "patch",
        "as for the agents: a series is continued only after the 60 s dedupe window",
    ),
];

/// deploy/`file` with `verb` on `group`/`resource` removed from every rule that grants it.
fn rbac_without(file: &str, group: &str, resource: &str, verb: &str) -> String {
    let mut docs = documents(file);
    let mut removed = 0;
    for d in &mut docs {
        let Some(rules) = d.get_mut("rules").and_then(Value::as_array_mut) else {
            continue;
        };
        for rule in rules.iter_mut() {
            let has = |k: &str, v: &str| {
                rule[k]
                    .as_array()
                    .is_some_and(|s| s.iter().any(|x| x.as_str() == Some(v)))
            };
            if !(has("apiGroups", group) && has("resources", resource) && has("verbs", verb)) {
                continue;
            }
            assert_eq!(
                rule["resources"].as_array().map(Vec::len),
                Some(1),
                "one resource per rule, so one verb can be removed alone"
            );
            let verbs = rule["verbs"].as_array_mut().expect("verbs");
            verbs.retain(|v| v.as_str() != Some(verb));
            removed += 1;
        }
        // A rule left without verbs is invalid: drop it.
        rules.retain(|r| r["verbs"].as_array().is_none_or(|v| !v.is_empty()));
    }
    assert_eq!(removed, 1, "{group}/{resource} {verb} is granted once");
    docs.iter()
        .map(|d| serde_saphyr::to_string(d).expect("yaml"))
        .collect::<Vec<_>>()
        .join("---\n")
}

/// What happened in one case.
#[derive(Debug, Default)]
struct Seen {
    announced: bool,
    local_on_b: bool,
    event: bool,
    trusts: bool,
    peers: bool,
    allocated: bool,
    late: bool,
    warned: bool,
    lease_held: bool,
    condition: bool,
    counted: bool,
    pool_lists: usize,
    namespace_watch: bool,
    lease_watch: bool,
}

impl Seen {
    fn has(&self, b: Behaviour) -> bool {
        match b {
            AnnouncesTheVip => self.announced,
            AnnouncesTheLocalVipWhereItsEndpointIs => self.local_on_b,
            RecordsAnAnnouncingEvent => self.event,
            TrustsTheApi => self.trusts,
            SeesItsPeersLeases => self.peers,
            AllocatesAnAddress => self.allocated,
            AllocatesFromAPoolAddedLater => self.late,
            WarnsAboutAServiceItCannotServe => self.warned,
            HoldsTheAllocatorLease => self.lease_held,
            WritesTheAnnouncedCondition => self.condition,
            CountsThePoolsAddresses => self.counted,
            // Three agents list the pools.
            WatchesPoolsWithoutRelisting => self.pool_lists <= NODES.len() * RELISTS,
            FollowsNamespaceChanges => self.namespace_watch,
            WatchesTheAllocatorLease => self.lease_watch,
        }
    }
}

async fn run_case(removed: Option<(&str, &str, &str, &str)>, mode: Mode) -> Seen {
    let tag = removed.map_or("all".to_string(), |(f, _, r, v)| {
        let who = if f == ALLOCATOR { "alloc-" } else { "" };
        format!("{who}{r}-{v}").replace('/', "-")
    });
    let mut c = Cluster::start_on(ApiKind::Kube, &format!("rbac-without-{tag}")).await;
    let cp = c.kube().expect("real");
    if let Some((f, g, r, v)) = removed {
        let file = cp.dir().join("rbac-without.yaml");
        std::fs::write(&file, rbac_without(f, g, r, v)).expect("write");
        cp.kubectl(&["apply", "-f", file.to_str().expect("utf-8")])
            .unwrap_or_else(|e| panic!("{e}"));
    }
    for n in NODES {
        c.add_node(n, &[], true).await;
    }
    c.add_service("apps", "web", &[WEB], false).await;
    c.set_endpoints("apps", "web", &[("node-a", true)]).await;
    c.add_service("apps", "local", &[LOCAL], true).await;
    c.set_endpoints("apps", "local", &[("node-b", true)]).await;
    let pool = format!(
        "apiVersion: announcer.dev/v1alpha1\nkind: AddressPool\nmetadata:\n  name: auto\n\
         spec:\n  addresses: [{AUTO}]\n"
    );
    let file = cp.dir().join("pool.yaml");
    std::fs::write(&file, pool).expect("write");
    cp.kubectl(&["apply", "-f", file.to_str().expect("utf-8")])
        .unwrap_or_else(|e| panic!("{e}"));
    let svc: Service = serde_json::from_value(serde_json::json!({
        "metadata": {"name": "auto", "namespace": "apps"},
        "spec": {"type": "LoadBalancer", "loadBalancerClass": "announcer.dev/l2",
                 "ports": [{"port": 80}]},
    }))
    .expect("service");
    let services = Api::<Service>::namespaced(c.client.clone(), "apps");
    services
        .create(&PostParams::default(), &svc)
        .await
        .expect("create auto");
    let mut args: Vec<&str> = LEASE_ARGS.to_vec();
    if mode == Mode::PerService {
        args.extend(PER_SERVICE_ELECTION);
    }
    let outside: Service = serde_json::from_value(serde_json::json!({
        "metadata": {"name": "outside", "namespace": "apps",
                     "annotations": {"announcer.dev/load-balancer-ips": "10.0.99.9"}},
        "spec": {"type": "LoadBalancer", "loadBalancerClass": "announcer.dev/l2",
                 "ports": [{"port": 80}]},
    }))
    .expect("service");
    services
        .create(&PostParams::default(), &outside)
        .await
        .expect("create outside");
    for n in NODES {
        c.start_agent(n, &args);
    }
    c.start_allocators(2, &[]);
    let mut seen = Seen {
        trusts: true,
        ..Seen::default()
    };
    let start = Instant::now();
    let end = start + WINDOW;
    let mut late_created = false;
    while Instant::now() < end {
        if !late_created && start.elapsed() > Duration::from_secs(4) {
            late_created = true;
            let cp = c.kube().expect("real");
            let pool = format!(
                "apiVersion: announcer.dev/v1alpha1\nkind: AddressPool\nmetadata:\n  name: late\n\
                 spec:\n  addresses: [{LATE}]\n  autoAssign: false\n"
            );
            let file = cp.dir().join("pool-late.yaml");
            std::fs::write(&file, pool).expect("write");
            cp.kubectl(&["apply", "-f", file.to_str().expect("utf-8")])
                .unwrap_or_else(|e| panic!("{e}"));
            let late: Service = serde_json::from_value(serde_json::json!({
                "metadata": {"name": "late", "namespace": "apps",
                             "annotations": {"announcer.dev/address-pool": "late"}},
                "spec": {"type": "LoadBalancer", "loadBalancerClass": "announcer.dev/l2",
                         "ports": [{"port": 80}]},
            }))
            .expect("service");
            services
                .create(&PostParams::default(), &late)
                .await
                .expect("create late");
        }
        if late_created && !seen.late {
            seen.late = services
                .get("late")
                .await
                .ok()
                .and_then(|s| s.status?.load_balancer?.ingress)
                .is_some_and(|i| {
                    i.iter().any(|x| {
                        x.ip.as_deref()
                            .is_some_and(|ip| ip.starts_with("10.0.71.6"))
                    })
                });
        }
        if !seen.condition {
            seen.condition = services.get("web").await.ok().is_some_and(|s| {
                s.status
                    .and_then(|st| st.conditions)
                    .is_some_and(|c| c.iter().any(|c| c.type_ == "announcer.dev/Announced"))
            });
        }
        if !seen.warned {
            seen.warned = c.event_objects("apps").await.iter().any(|e: &Event| {
                e.type_.as_deref() == Some("Warning")
                    && e.reporting_controller.as_deref() == Some("announcer.dev/allocator")
                    && e.regarding.as_ref().and_then(|r| r.name.as_deref()) == Some("outside")
            });
        }
        if Instant::now() + STEADY >= end {
            seen.trusts &= NODES
                .iter()
                .all(|n| c.state(n).is_some_and(|s| s["api_ok"] == true));
        }
        seen.announced |= c.owners(WEB).len() == 1;
        seen.local_on_b |= c.owners(LOCAL) == ["node-b"];
        if !seen.allocated {
            seen.allocated = services
                .get("auto")
                .await
                .ok()
                .and_then(|s| s.status?.load_balancer?.ingress)
                .is_some_and(|i| !i.is_empty());
        }
        if !seen.event {
            seen.event = c.event_objects("apps").await.iter().any(|e: &Event| {
                e.reason.as_deref() == Some("Announcing")
                    && e.regarding.as_ref().and_then(|r| r.name.as_deref()) == Some("web")
            });
        }
        tokio::time::sleep(Duration::from_millis(250)).await;
    }
    let cp = c.kube().expect("real");
    seen.counted = cp
        .kubectl(&[
            "get",
            "addresspool",
            "auto",
            "-o",
            "jsonpath={.status.assignedIPv4}",
        ])
        .is_ok_and(|n| n.trim() == "1");
    let agent = announcer_tests::env::kube::agent_user();
    let audit = cp.audit().expect("audit log");
    seen.pool_lists = audit
        .iter()
        .filter(|r| r.user == agent && r.verb == "list" && r.resource == "addresspools")
        .count();
    let allocator = announcer_tests::env::kube::allocator_user();
    seen.namespace_watch = audit.iter().any(|r| {
        r.user == allocator && r.verb == "watch" && r.resource == "namespaces" && r.code < 400
    });
    seen.lease_watch = audit.iter().any(|r| {
        r.user == allocator
            && r.verb == "watch"
            && r.resource == "leases"
            && r.name.as_deref() == Some("announcer-allocator")
            && r.code < 400
    });
    seen.lease_held = Api::<k8s_openapi::api::coordination::v1::Lease>::namespaced(
        c.client.clone(),
        announcer_tests::env::NAMESPACE,
    )
    .get_opt("announcer-allocator")
    .await
    .ok()
    .flatten()
    .and_then(|l| l.spec)
    .is_some_and(|s| {
        s.holder_identity.is_some_and(|h| !h.is_empty())
            && s.renew_time.is_some_and(|t| {
                let age = k8s_openapi::jiff::Timestamp::now().duration_since(t.0);
                age.as_secs_f64() < 8.0
            })
    });
    let states: Vec<_> = NODES.iter().map(|n| c.state(n)).collect();
    seen.peers = mode == Mode::PerService
        || states.iter().all(|s| {
            s.as_ref().is_some_and(|s| {
                s["peers"]
                    .as_array()
                    .is_some_and(|p| p.len() == 2 && p.iter().all(|p| p["lease_valid"] == true))
            })
        });
    eprintln!(
        "without {removed:?} ({mode:?}): {seen:?}; owned: {:?}",
        NODES
            .iter()
            .map(|n| c.state(n).map(|s| owned_vips(&s)))
            .collect::<Vec<_>>()
    );
    seen
}

/// Runs case `i` of [`CASES`]: the named behaviour breaks.
async fn case(i: usize) {
    let (f, g, r, v, mode, breaks) = CASES[i];
    let seen = run_case(Some((f, g, r, v)), mode).await;
    assert!(
        !seen.has(breaks),
        "without {g}/{r} {v} in {f}, {breaks:?} still works: {seen:?}"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn with_every_grant_every_behaviour_works() {
    let seen = run_case(None, Mode::NodeLease).await;
    for b in ALL {
        assert!(
            seen.has(b),
            "{b:?} does not work with every grant: {seen:?}"
        );
    }
}

#[test]
fn every_grant_has_a_removal_test() {
    let mut granted = Vec::new();
    for file in [AGENTS, ALLOCATOR] {
        for d in documents(file) {
            for rule in d["rules"].as_array().into_iter().flatten() {
                for g in rule["apiGroups"].as_array().into_iter().flatten() {
                    for r in rule["resources"].as_array().into_iter().flatten() {
                        for v in rule["verbs"].as_array().into_iter().flatten() {
                            granted.push((
                                file,
                                g.as_str().unwrap_or_default().to_string(),
                                r.as_str().unwrap_or_default().to_string(),
                                v.as_str().unwrap_or_default().to_string(),
                            ));
                        }
                    }
                }
            }
        }
    }
    for (f, g, r, v) in &granted {
        let tested = CASES
            .iter()
            .any(|c| (c.0, c.1, c.2, c.3) == (*f, g.as_str(), r.as_str(), v.as_str()));
        let exempt = UNTESTABLE
            .iter()
            .any(|c| (c.0, c.1, c.2, c.3) == (*f, g.as_str(), r.as_str(), v.as_str()));
        assert!(
            tested || exempt,
            "{g}/{r} {v} is granted in {f} but no test shows what breaks without it"
        );
    }
    assert_eq!(
        CASES.len() + UNTESTABLE.len(),
        granted.len(),
        "a case for a grant that is not in deploy/rbac.yaml or deploy/allocator.yaml"
    );
}

macro_rules! removal_tests {
    ($($name:ident = $i:expr;)*) => {
        $(
            #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
            async fn $name() {
                case($i).await
            }
        )*
    };
}

removal_tests! {
    without_services_list_no_vip_is_announced = 0;
    without_services_watch_the_agents_distrust_the_api = 1;
    without_nodes_list_no_vip_is_announced = 2;
    without_nodes_watch_the_agents_distrust_the_api = 3;
    without_endpointslices_list_no_vip_is_announced = 4;
    without_endpointslices_watch_the_agents_distrust_the_api = 5;
    without_events_create_no_announcing_event_is_recorded = 6;
    without_leases_create_no_agent_sees_its_peers = 7;
    without_leases_update_the_agents_distrust_the_api = 8;
    without_leases_list_no_agent_sees_its_peers = 9;
    without_leases_watch_the_agents_distrust_the_api = 10;
    without_leases_get_per_service_mode_announces_nothing = 11;
    without_addresspools_list_the_agents_relist_the_pools_over_and_over = 12;
    without_addresspools_watch_the_agents_relist_the_pools_over_and_over = 13;
    without_services_status_patch_no_announced_condition_is_written = 14;
    allocator_without_services_list_no_service_gets_an_address = 15;
    allocator_without_services_watch_a_later_service_gets_no_address = 16;
    allocator_without_services_status_patch_the_service_gets_no_address = 17;
    allocator_without_addresspools_list_no_service_gets_an_address = 18;
    allocator_without_addresspools_watch_a_later_pool_is_not_used = 19;
    without_addresspools_status_patch_the_pool_status_counts_nothing = 20;
    without_namespaces_list_no_service_gets_an_address = 21;
    without_namespaces_watch_the_allocator_misses_namespace_label_changes = 22;
    allocator_without_events_create_no_warning_is_recorded = 23;
    allocator_without_leases_get_no_service_gets_an_address = 24;
    allocator_without_leases_update_the_allocator_loses_its_lease = 25;
    allocator_without_leases_create_no_service_gets_an_address = 26;
    allocator_without_leases_list_the_standby_reads_the_lease_instead_of_watching = 27;
    allocator_without_leases_watch_the_standby_reads_the_lease_instead_of_watching = 28;
}
