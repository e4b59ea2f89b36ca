//! The RBAC half of the deploy tests: real agents, both election modes, every request counted,
//! on both API servers. The in-repo server counts requests per client token; kube-apiserver's
//! audit log records them per user (the agents' ServiceAccount, with the node claim of their
//! Pod-bound tokens) with the RBAC decision, so on the real server no agent request may have
//! been forbidden either.

use std::{collections::BTreeSet, time::Duration};

use announcer_tests::env::{
    ApiKind, NAMESPACE,
    agent_cmd::PER_SERVICE_ELECTION,
    cluster::Cluster,
    kube::{
        AGENT_SERVICE_ACCOUNT, ALLOCATOR_SERVICE_ACCOUNT, KubeControlPlane,
        WITHDRAWAL_SERVICE_ACCOUNT, agent_user, allocator_user,
        rbac::{Grant, Scope, grants},
        withdrawal::Scene,
        withdrawal_user,
    },
};
use k8s_openapi::api::{coordination::v1::Lease, events::v1::Event};
use kube::{Api, api::ListParams};

use super::deploy_dir;

/// One of the install's accounts.
#[derive(Clone, Copy, Debug)]
enum Account {
    /// The agents' (deploy/rbac.yaml).
    Agents,
    /// The allocator's (deploy/allocator.yaml).
    Allocator,
    /// The withdrawal controller's (deploy/withdrawer.yaml).
    Withdrawal,
}

impl Account {
    fn file(self) -> &'static str {
        match self {
            Account::Agents => "rbac.yaml",
            Account::Allocator => "allocator.yaml",
            Account::Withdrawal => "withdrawer.yaml",
        }
    }

    fn service_account(self) -> &'static str {
        match self {
            Account::Agents => AGENT_SERVICE_ACCOUNT,
            Account::Allocator => ALLOCATOR_SERVICE_ACCOUNT,
            Account::Withdrawal => WITHDRAWAL_SERVICE_ACCOUNT,
        }
    }

    fn user(self) -> String {
        match self {
            Account::Agents => agent_user(),
            Account::Allocator => allocator_user(),
            Account::Withdrawal => withdrawal_user(),
        }
    }

    /// The rules bound to this account in its file, with the scope each is granted in.
    fn grants(self) -> BTreeSet<(Grant, Scope)> {
        grants(self.file(), self.service_account())
    }
}

/// One request as sent: what, and (on kube-apiserver; `None` on the in-repo server, which does
/// not record it) in which namespace on which name.
type Use = (Grant, Option<(Option<String>, Option<String>)>);

/// What `account` sent: on the in-repo server its counts for the tokens `clients` (node names,
/// allocator identities); on kube-apiserver its audit log for the account, where none may have
/// been forbidden and each carries its Pod-bound token's claim.
fn used_by(c: &Cluster, account: Account, clients: &[String]) -> BTreeSet<Use> {
    let Some(cp) = c.kube() else {
        return c
            .api()
            .counts()
            .entries
            .into_iter()
            .filter(|e| clients.contains(&e.client) && e.count > 0)
            .map(|e| ((e.group, e.resource, e.verb.to_string()), None))
            .collect();
    };
    let user = account.user();
    // Non-resource requests (API discovery, `/apis`: how agents and the allocator find another
    // announcer's CRDs) have no resource: every authenticated user may make them through
    // kube-apiserver's own `system:discovery` role, not a grant of deploy/.
    let records: Vec<_> = cp
        .audit()
        .expect("the audit log")
        .into_iter()
        .filter(|r| r.user == user && !r.resource.is_empty())
        .collect();
    // The one expected denial: the agent's start-up check that the admission policy is in force
    // (a dry-run create RBAC allows and the policy must refuse).
    let policy_probe = |r: &&announcer_tests::env::kube::AuditRecord| {
        r.name.as_deref() == Some(announcer::agent::admission::PROBE_LEASE)
            && r.decision.as_deref() == Some("allow")
    };
    let forbidden: Vec<_> = records
        .iter()
        .filter(|r| r.code == 403 && !policy_probe(r))
        .collect();
    assert!(
        forbidden.is_empty(),
        "deploy/{} forbade requests the {account:?} made: {forbidden:#?}",
        account.file()
    );
    let claim_ok = |r: &announcer_tests::env::kube::AuditRecord| match account {
        Account::Agents => r
            .node
            .as_deref()
            .is_some_and(|n| clients.iter().any(|c| c == n)),
        Account::Allocator => r
            .pod
            .as_deref()
            .is_some_and(|p| clients.iter().any(|c| c == p)),
        // The test runs it with a token bound to no Pod (the Deployment's are bound to its
        // Pods, but nothing checks their claims).
        Account::Withdrawal => true,
    };
    assert!(
        records.iter().all(claim_ok),
        "every {account:?} request carries its Pod-bound token's claim"
    );
    records
        .into_iter()
        .map(|r| ((r.group, r.resource, r.verb), Some((r.namespace, r.name))))
        .collect()
}

/// The scope each account's grants must have: what the install means, written down apart from
/// the manifests so that widening (a Lease grant cluster-wide, a name-scoped rule losing its
/// names) or narrowing one fails here.
fn intended_scope(account: Account, (_, resource, verb): &Grant) -> Scope {
    match (account, resource.as_str(), verb.as_str()) {
        // Node and per-Service Leases: any name in the agent namespace (the admission policy
        // narrows it to the node's own).
        (Account::Agents, "leases", _) => Scope::agent_namespace(),
        // The allocator's one Lease, by name; create cannot be name-scoped by RBAC (the
        // admission policy does it).
        (Account::Allocator, "leases", "create") => Scope::agent_namespace(),
        (Account::Allocator, "leases", _) => Scope::named(&["announcer-allocator"]),
        // The withdrawal cap's one Lease, by name (read and compare-and-swap); every node and
        // agent Lease read (list and watch) wherever it is: the kubelets' are in
        // kube-node-lease.
        (Account::Withdrawal, "leases", "get" | "update") => {
            Scope::named(&[announcer::withdrawer::slots::LEASE_NAME])
        }
        // Services, their status, Events, EndpointSlices, Nodes, Namespaces, pools, Pods: where
        // the users' objects are, cluster-wide.
        _ => Scope::cluster(),
    }
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
/// SIGTERM handover; and the allocator's: a pool, an address assigned, a Warning Event for a
/// Service it cannot serve. Returns what the agents and the allocator sent.
async fn scenario(api: ApiKind, name: &str, mode_args: &[&str]) -> Used {
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
    let allocators = c.start_allocators(2, &[]);
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
        // A Service asking for an address in no pool: the allocator's Warning Event.
        c.ensure_namespace("apps").await;
        let svc: k8s_openapi::api::core::v1::Service = serde_json::from_value(serde_json::json!({
            "metadata": {"name": "outside", "namespace": "apps",
                         "annotations": {"announcer.dev/load-balancer-ips": "10.0.99.9"}},
            "spec": {"type": "LoadBalancer", "loadBalancerClass": "announcer.dev/l2",
                     "ports": [{"port": 80}]},
        }))
        .expect("service");
        Api::<k8s_openapi::api::core::v1::Service>::namespaced(c.client.clone(), "apps")
            .create(&Default::default(), &svc)
            .await
            .expect("create outside");
        c.wait_for_event(
            "apps",
            "the allocator's Warning on outside",
            T,
            |e: &Event| {
                e.type_.as_deref() == Some("Warning")
                    && e.reporting_controller.as_deref() == Some("announcer.dev/allocator")
                    && e.regarding.as_ref().and_then(|r| r.name.as_deref()) == Some("outside")
            },
        )
        .await;
        // And it renews its Lease (every 5 s while active).
        let leases = Api::<Lease>::namespaced(c.client.clone(), NAMESPACE);
        let end = std::time::Instant::now() + T;
        loop {
            let renewed = leases
                .get_opt("announcer-allocator")
                .await
                .ok()
                .flatten()
                .and_then(|l| l.spec)
                .is_some_and(|s| s.renew_time.is_some() && s.renew_time != s.acquire_time);
            if renewed {
                break;
            }
            assert!(
                std::time::Instant::now() < end,
                "the allocator never renewed its Lease\n{}",
                c.log_tails()
            );
            tokio::time::sleep(Duration::from_millis(250)).await;
        }
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
    let nodes: Vec<String> = NODES.iter().map(|n| n.to_string()).collect();
    Used {
        agents: used_by(&c, Account::Agents, &nodes),
        allocator: used_by(&c, Account::Allocator, &allocators),
    }
}

/// What each account sent in a scenario.
struct Used {
    agents: BTreeSet<Use>,
    allocator: BTreeSet<Use>,
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

/// Grants needed only on paths no short test reaches, each with the reason (every account
/// records Events through kube's recorder).
const RARE: [(&str, &str, &str, &str); 1] = [(
    "events.k8s.io",
    "events",
    "patch",
    "the Event recorder patches a series when the same Event recurs after the 60 s dedupe window",
)];

/// Checks one account: every request it sent is granted, in the grant's scope; every grant
/// was used (bar [`RARE`]); every grant has the scope [`intended_scope`] says.
fn check(account: Account, used: &BTreeSet<Use>) {
    let grants = account.grants();
    let file = account.file();
    let granted: BTreeSet<Grant> = grants.iter().map(|(g, _)| g.clone()).collect();
    let verbs: BTreeSet<Grant> = used.iter().map(|(g, _)| g.clone()).collect();

    let missing: Vec<&Grant> = verbs.difference(&granted).collect();
    assert!(
        missing.is_empty(),
        "the {account:?} sent requests deploy/{file} does not allow: {missing:?}"
    );
    let rare: BTreeSet<Grant> = RARE
        .iter()
        .map(|(g, r, v, _)| (g.to_string(), r.to_string(), v.to_string()))
        .collect();
    let unused: Vec<&Grant> = granted
        .iter()
        .filter(|g| !verbs.contains(*g) && !rare.contains(*g))
        .collect();
    assert!(
        unused.is_empty(),
        "deploy/{file} grants the {account:?} what they never used: {unused:?}"
    );
    for (grant, scope) in &grants {
        assert_eq!(
            *scope,
            intended_scope(account, grant),
            "deploy/{file}: {grant:?} granted to the {account:?} at the wrong scope"
        );
    }
    // Each request within the scope of a grant of its verb (kube-apiserver's audit log names
    // the namespace and object; the in-repo counts do not, and pass trivially).
    for (grant, at) in used {
        let Some((ns, name)) = at else { continue };
        assert!(
            grants
                .iter()
                .any(|(g, scope)| g == grant && scope.contains(ns.as_deref(), name.as_deref())),
            "the {account:?} sent {grant:?} on {ns:?}/{name:?}, outside every grant's scope"
        );
    }
    eprintln!("{account:?} used: {verbs:?}");
}

#[test]
fn a_grant_wider_than_intended_fails_the_scope_check() {
    // The check itself: the allocator's Lease grant without its resourceNames, or the agents'
    // Leases cluster-wide, are not what the install means.
    let g = (
        "coordination.k8s.io".to_owned(),
        "leases".to_owned(),
        "update".to_owned(),
    );
    assert_ne!(
        Scope::agent_namespace(),
        intended_scope(Account::Allocator, &g)
    );
    assert_ne!(
        Scope::agent_namespace(),
        intended_scope(Account::Withdrawal, &g)
    );
    assert_ne!(Scope::cluster(), intended_scope(Account::Agents, &g));
}

announcer_tests::on_both_api_servers! {
async fn rbac_grants_each_account_exactly_what_it_uses_in_its_scope(api) {
    let node_lease = scenario(api, "rbac-node-lease", &[]).await;
    let per_service = scenario(api, "rbac-per-service", &PER_SERVICE_ELECTION).await;
    let agents: BTreeSet<Use> = node_lease.agents.union(&per_service.agents).cloned().collect();
    let allocator: BTreeSet<Use> =
        node_lease.allocator.union(&per_service.allocator).cloned().collect();
    check(Account::Agents, &agents);
    check(Account::Allocator, &allocator);
}
}

/// The withdrawal controller's account on kube-apiserver, through one withdrawal (its lists and
/// watches, the cap Lease, the Pod read and status patch, the Events): nothing forbidden, every
/// grant used, each request within its grant's scope.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn rbac_grants_the_withdrawal_account_exactly_what_one_withdrawal_uses() {
    let cp = KubeControlPlane::start_applied("rbac-withdrawal").await;
    let scene = Scene::stage(&cp).await;
    scene.crash_and_report().await;
    scene.wait_endpoint(false, T).await;
    // Its Events are recorded in the background.
    tokio::time::sleep(Duration::from_secs(2)).await;
    let records = cp.audit().expect("the audit log");
    let user = withdrawal_user();
    let mine: Vec<_> = records
        .into_iter()
        .filter(|r| r.user == user && !r.resource.is_empty())
        .collect();
    let forbidden: Vec<_> = mine.iter().filter(|r| r.code == 403).collect();
    assert!(
        forbidden.is_empty(),
        "deploy/withdrawer.yaml forbade requests the withdrawer made: {forbidden:#?}"
    );
    let used: BTreeSet<Use> = mine
        .into_iter()
        .map(|r| ((r.group, r.resource, r.verb), Some((r.namespace, r.name))))
        .collect();
    check(Account::Withdrawal, &used);
}
