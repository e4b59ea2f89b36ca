//! The RBAC half of the deploy tests: real agents, both election modes, every request counted,
//! on both API servers. The in-repo server counts requests per client token; kube-apiserver's
//! audit log records them per user (the agents' ServiceAccount, with the node claim of their
//! Pod-bound tokens) with the RBAC decision, so on the real server no agent request may have
//! been forbidden either.

use std::{collections::BTreeSet, time::Duration};

use announcer_tests::env::{
    ApiKind, NAMESPACE, agent_cmd::PER_SERVICE_ELECTION, cluster::Cluster, kube::agent_user,
};
use k8s_openapi::api::{coordination::v1::Lease, events::v1::Event};
use kube::{Api, api::ListParams};

use super::{deploy_dir, documents, s};

/// (API group, resource, verb) as RBAC rules and the API server's counters name them.
type Grant = (String, String, String);

/// The rules bound to ServiceAccount `sa` in deploy/rbac.yaml, as (group, resource, verb)
/// with the scope each is granted in (`None` = cluster-wide).
fn grants_of(sa: &str) -> BTreeSet<(Grant, Option<String>)> {
    let docs = documents("rbac.yaml");
    let mut out = BTreeSet::new();
    for b in docs
        .iter()
        .filter(|d| d["kind"] == "RoleBinding" || d["kind"] == "ClusterRoleBinding")
    {
        let bound = b["subjects"].as_array().expect("subjects").iter().any(|x| {
            x["kind"] == "ServiceAccount" && x["name"] == sa && x["namespace"] == NAMESPACE
        });
        if !bound {
            continue;
        }
        let role_kind = s(&b["roleRef"]["kind"]);
        let role = docs
            .iter()
            .find(|d| d["kind"] == role_kind && d["metadata"]["name"] == b["roleRef"]["name"])
            .expect("bound role exists");
        let scope = (b["kind"] == "RoleBinding").then(|| s(&b["metadata"]["namespace"]).to_owned());
        for rule in role["rules"].as_array().expect("rules") {
            for g in rule["apiGroups"].as_array().expect("groups") {
                for r in rule["resources"].as_array().expect("resources") {
                    for v in rule["verbs"].as_array().expect("verbs") {
                        let grant = (s(g).to_owned(), s(r).to_owned(), s(v).to_owned());
                        out.insert((grant, scope.clone()));
                    }
                }
            }
        }
    }
    out
}

/// What the agents sent: on the in-repo server its counts for their tokens (= node names); on
/// kube-apiserver its audit log for their ServiceAccount, where none may have been forbidden.
fn used_by(c: &Cluster, nodes: &[&str]) -> BTreeSet<Grant> {
    let Some(cp) = c.kube() else {
        return c
            .api()
            .counts()
            .entries
            .into_iter()
            .filter(|e| nodes.contains(&e.client.as_str()) && e.count > 0)
            .map(|e| (e.group, e.resource, e.verb.to_string()))
            .collect();
    };
    let agent = agent_user();
    let records: Vec<_> = cp
        .audit()
        .expect("the audit log")
        .into_iter()
        .filter(|r| r.user == agent)
        .collect();
    let forbidden: Vec<_> = records.iter().filter(|r| r.code == 403).collect();
    assert!(
        forbidden.is_empty(),
        "deploy/rbac.yaml forbade requests the agents made: {forbidden:#?}"
    );
    assert!(
        records
            .iter()
            .all(|r| r.node.as_deref().is_some_and(|n| nodes.contains(&n))),
        "every agent request carries its node claim"
    );
    records
        .into_iter()
        .map(|r| (r.group, r.resource, r.verb))
        .collect()
}

const NODES: [&str; 3] = ["node-a", "node-b", "node-c"];
/// Generous: convergence takes about a second, the host may be loaded.
const T: Duration = Duration::from_secs(30);

/// The nodes announcing `vip`, if exactly one does.
fn sole_owner(c: &Cluster, vip: &str) -> Option<String> {
    let owners = c.owners(vip);
    (owners.len() == 1).then(|| owners[0].clone())
}

/// Every API call path the agent has in normal operation: start, a Service added, changed and
/// deleted, an ineligible Service (Warning Event), a crash and takeover, a restart and a
/// SIGTERM handover. Returns what the agents sent.
async fn scenario(api: ApiKind, name: &str, mode_args: &[&str]) -> BTreeSet<Grant> {
    const VIP1: &str = "10.0.70.1";
    const VIP2: &str = "fd00::70:2";
    const LONELY: &str = "10.0.70.3";
    let mut c = Cluster::start_on(api, name).await;
    for n in NODES {
        c.add_node(n, &[], true).await;
    }
    c.add_service("apps", "web", &[VIP1], false).await;
    c.set_endpoints("apps", "web", &[("node-a", true)]).await;
    // The agents run with deploy/config.yaml; the testbed's flags (ports, addresses, the mode)
    // override it, as flags on the DaemonSet would.
    let config = deploy_dir().join("config.yaml");
    // The Services' addresses are in no pool: still announced once the allocator's pool exists.
    let mut args = vec![
        "--config",
        config.to_str().expect("utf-8"),
        "--announce-outside-pools",
    ];
    args.extend_from_slice(mode_args);
    for n in NODES {
        c.start_agent(n, &args);
    }
    c.wait_ready(T).await;
    c.wait_for("one owner of VIP1", T, |c| sole_owner(c, VIP1).is_some())
        .await;

    // The Service changes its address.
    c.set_ingress("apps", "web", &[VIP2]).await;
    c.wait_for("one owner of VIP2, none of VIP1", T, |c| {
        sole_owner(c, VIP2).is_some() && c.owners(VIP1).is_empty()
    })
    .await;

    // An ineligible Service: Local traffic policy, no ready endpoint.
    c.add_service("apps", "lonely", &[LONELY], true).await;
    c.set_endpoints("apps", "lonely", &[("node-b", false)])
        .await;
    c.wait_for_event("apps", "NoReadyEndpoints on lonely", T, |e: &Event| {
        e.type_.as_deref() == Some("Warning")
            && e.regarding.as_ref().and_then(|r| r.name.as_deref()) == Some("lonely")
    })
    .await;

    // A crash: another node takes over; the crashed agent comes back.
    let owner = sole_owner(&c, VIP2).expect("owner");
    c.kill(&owner);
    c.wait_for("takeover after a crash", T, |c| {
        sole_owner(c, VIP2).is_some_and(|o| o != owner)
    })
    .await;
    c.restart(&owner);
    c.wait_ready(T).await;
    c.wait_for("one owner after the restart", T, |c| {
        sole_owner(c, VIP2).is_some()
    })
    .await;

    // A SIGTERM handover.
    let owner = sole_owner(&c, VIP2).expect("owner");
    c.signal(&owner, libc::SIGTERM);
    assert_eq!(c.wait_exit(&owner, T), Some(0), "SIGTERM exits cleanly");
    c.wait_for("handover after SIGTERM", T, |c| {
        sole_owner(c, VIP2).is_some_and(|o| o != owner)
    })
    .await;

    // The allocator: a pool, and a Service of our class that gets an address from it, which
    // the pool's status counts.
    {
        use announcer::ipam::{AddressPool, AddressPoolSpec};
        let pool = AddressPool::new(
            "rbac",
            AddressPoolSpec {
                addresses: vec!["10.0.72.0/24".into()],
                auto_assign: true,
                ..Default::default()
            },
        );
        Api::<AddressPool>::all(c.client.clone())
            .create(&Default::default(), &pool)
            .await
            .expect("create the pool");
        allocate(&c).await;
    }

    // The Service goes away.
    c.delete_service("apps", "web").await;
    c.wait_for("nobody announces a deleted Service", T, |c| {
        c.owners(VIP2).is_empty()
    })
    .await;

    // Namespace scope: Leases only in the agent namespace; Events where the Services are.
    // (The agents' Leases, by their label: a real cluster has the kubelets' too.)
    let leases = Api::<Lease>::all(c.client.clone())
        .list(&ListParams::default().labels("announcer.dev/lease"))
        .await
        .expect("leases");
    assert!(!leases.items.is_empty(), "the agents wrote Leases");
    for l in &leases.items {
        assert_eq!(
            l.metadata.namespace.as_deref(),
            Some(NAMESPACE),
            "{:?}",
            l.metadata.name
        );
    }
    assert!(
        !c.event_objects("apps").await.is_empty(),
        "Events go to the Service's namespace, so events need a cluster-wide grant"
    );
    used_by(&c, &NODES)
}

/// Creates `apps/auto` (our class, no address) and waits until the allocator gave it one and
/// the pool's status counts it.
async fn allocate(c: &Cluster) {
    use k8s_openapi::api::core::v1::Service;
    use kube::api::{DynamicObject, PostParams};
    let svc: Service = serde_json::from_value(serde_json::json!({
        "metadata": {"name": "auto", "namespace": "apps"},
        "spec": {"type": "LoadBalancer", "loadBalancerClass": "announcer.dev/l2",
                 "ports": [{"port": 80}]},
    }))
    .expect("service");
    let api = Api::<Service>::namespaced(c.client.clone(), "apps");
    api.create(&PostParams::default(), &svc)
        .await
        .expect("create");
    let pools: Api<DynamicObject> = Api::all_with(
        c.client.clone(),
        &kube::discovery::ApiResource {
            group: "announcer.dev".into(),
            version: "v1alpha1".into(),
            api_version: "announcer.dev/v1alpha1".into(),
            kind: "AddressPool".into(),
            plural: "addresspools".into(),
        },
    );
    let end = std::time::Instant::now() + T;
    loop {
        let has_ip = api
            .get("auto")
            .await
            .ok()
            .and_then(|s| s.status?.load_balancer?.ingress)
            .is_some_and(|i| !i.is_empty());
        let counted = pools
            .get("rbac")
            .await
            .ok()
            .is_some_and(|p| p.data["status"]["assignedIPv4"] == 1);
        if has_ip && counted {
            return;
        }
        assert!(
            std::time::Instant::now() < end,
            "the allocator gave apps/auto no address\n{}",
            c.log_tails()
        );
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
}

/// Grants the agents need only on paths no short test reaches, each with the reason.
const RARE: [(&str, &str, &str, &str); 1] = [(
    "events.k8s.io",
    "events",
    "patch",
    "the Event recorder patches a series when the same Event recurs after the 60 s dedupe window",
)];

announcer_tests::on_both_api_servers! {
async fn rbac_grants_exactly_what_the_agents_use(api) {
    let node_lease = scenario(api, "rbac-node-lease", &[]).await;
    let per_service = scenario(api, "rbac-per-service", &PER_SERVICE_ELECTION).await;
    let used: BTreeSet<Grant> = node_lease.union(&per_service).cloned().collect();
    let grants = grants_of("announcer");
    let granted: BTreeSet<Grant> = grants
        .iter()
        .map(|(g, _)| g.clone())
        .collect();

    let missing: Vec<&Grant> = used.difference(&granted).collect();
    assert!(
        missing.is_empty(),
        "the agents sent requests deploy/rbac.yaml does not allow: {missing:?}"
    );

    let rare: BTreeSet<Grant> = RARE
        .iter()
        .map(|(g, r, v, _)| (g.to_string(), r.to_string(), v.to_string()))
        .collect();
    let unused: Vec<&Grant> = granted
        .iter()
        .filter(|g| !used.contains(*g) && !rare.contains(*g))
        .collect();
    assert!(
        unused.is_empty(),
        "deploy/rbac.yaml grants what the agents never used: {unused:?}"
    );

    // Leases are granted in the agent namespace only; what lives in users' namespaces
    // (Services, EndpointSlices, Events) and Nodes cluster-wide.
    for ((group, resource, verb), scope) in &grants {
        let namespaced = resource == "leases";
        assert_eq!(
            scope.as_deref(),
            namespaced.then_some(NAMESPACE),
            "{group}/{resource} {verb} granted at the wrong scope"
        );
    }
    eprintln!("agents used: {used:?}");
}
}
