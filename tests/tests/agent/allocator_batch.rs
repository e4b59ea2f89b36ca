//! The address allocator under a batch of Services, on the in-repo API server (which counts
//! every request per client): the writes go through `--write-qps` and each Service is written
//! once; a standby replica follows the allocator Lease with a watch and reads nothing while
//! the leader renews it, and still takes over when the leader dies.
//!
//! Behaviour, not speed: the bounds below are what the rate limiter and the Lease rules make
//! certain whatever the host's load (a limiter of 20 writes/s cannot write 100 Services in
//! less than 99/20 s); the allocator's speed at 10,000 Services is `cargo xtask bench
//! allocator` (docs/benchmarks.md).

use std::{
    collections::{BTreeMap, BTreeSet},
    time::{Duration, Instant},
};

use announcer_tests::{
    apiserver::Verb,
    env::{NAMESPACE, cluster::Cluster},
};
use k8s_openapi::api::{coordination::v1::Lease, core::v1::Service};
use kube::{Api, api::PostParams};
use serde_json::json;

const NS: &str = "apps";
const CLASS: &str = "announcer.dev/l2";
/// Generous: the host has 2 cores and may be loaded.
const T: Duration = Duration::from_secs(90);

async fn world(name: &str, pool: &str) -> Cluster {
    let c = Cluster::start(name).await;
    c.ensure_namespace(NS).await;
    let pool: announcer::ipam::AddressPool = serde_json::from_value(json!({
        "apiVersion": "announcer.dev/v1alpha1", "kind": "AddressPool",
        "metadata": {"name": "batch"},
        "spec": {"addresses": [pool]},
    }))
    .expect("a pool");
    Api::<announcer::ipam::AddressPool>::all(c.client.clone())
        .create(&PostParams::default(), &pool)
        .await
        .expect("create the pool");
    c
}

async fn create(c: &Cluster, name: &str) {
    let svc: Service = serde_json::from_value(json!({
        "metadata": {"name": name, "namespace": NS},
        "spec": {"type": "LoadBalancer", "loadBalancerClass": CLASS, "ports": [{"port": 80}]},
    }))
    .expect("a Service");
    Api::<Service>::namespaced(c.client.clone(), NS)
        .create(&PostParams::default(), &svc)
        .await
        .expect("create a Service");
}

async fn holder(c: &Cluster) -> Option<String> {
    Api::<Lease>::namespaced(c.client.clone(), NAMESPACE)
        .get_opt("announcer-allocator")
        .await
        .ok()
        .flatten()
        .and_then(|l| l.spec?.holder_identity)
        .filter(|h| !h.is_empty())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_batch_of_services_all_gets_addresses_each_written_once_at_the_write_qps() {
    const N: usize = 100;
    const QPS: f64 = 20.0;
    let mut c = world("allocator-batch", "10.0.150.0/24").await;
    for i in 0..N {
        create(&c, &format!("s{i:03}")).await;
    }
    let ids = c.start_allocators(2, &["--write-qps=20"]);
    // When each Service's address was first seen (polled every 100 ms).
    let mut first_seen: BTreeMap<String, Instant> = BTreeMap::new();
    let end = Instant::now() + T;
    while first_seen.len() < N {
        assert!(
            Instant::now() < end,
            "only {} of {N} Services got an address\n{}",
            first_seen.len(),
            c.log_tails()
        );
        for (name, ips) in c.ingress_ips(NS).await {
            if !ips.is_empty() {
                first_seen.entry(name).or_insert_with(Instant::now);
            }
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    let all = c.ingress_ips(NS).await;
    let distinct: BTreeSet<&String> = all.values().flatten().collect();
    assert_eq!(distinct.len(), N, "one address each, none shared: {all:?}");
    // The limiter spaces writes 1/QPS apart: N Service writes (and the pool's status) cannot
    // all land in less than (N - 1)/QPS, however fast the host. 10 % slack for the 100 ms poll.
    let first = first_seen.values().min().expect("some");
    let last = first_seen.values().max().expect("some");
    let spread = last.duration_since(*first).as_secs_f64();
    let floor = (N - 1) as f64 / QPS * 0.9;
    assert!(
        spread >= floor,
        "{N} Services got their addresses within {spread:.2} s: faster than {QPS} writes/s allows ({floor:.2} s)"
    );
    // Each Service written once: no plan queued a write that was already made.
    let counts = c.api().counts();
    let patches: u64 = ids
        .iter()
        .map(|id| counts.count(Some(id), Some(Verb::Patch), Some("services/status")))
        .sum();
    assert_eq!(
        patches, N as u64,
        "Service status patches by the allocators: {counts:?}"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_standby_allocator_watches_the_lease_instead_of_reading_it_and_still_takes_over() {
    let mut c = world("allocator-standby", "10.0.151.0/24").await;
    create(&c, "first").await;
    let ids = c.start_allocators(2, &[]);
    let end = Instant::now() + T;
    let leader = loop {
        let got = c
            .ingress_ips(NS)
            .await
            .get("first")
            .is_some_and(|i| !i.is_empty());
        if let (true, Some(h)) = (got, holder(&c).await) {
            break h;
        }
        assert!(
            Instant::now() < end,
            "no address, or no Lease holder\n{}",
            c.log_tails()
        );
        tokio::time::sleep(Duration::from_millis(200)).await;
    };
    let standby = ids
        .iter()
        .find(|i| **i != leader)
        .expect("two replicas")
        .clone();
    // A window longer than the Lease (15 s) and three renewals (every 5 s): the standby used
    // to read the Lease every 5-6 s.
    c.api().reset_counts();
    tokio::time::sleep(Duration::from_secs(17)).await;
    let counts = c.api().counts();
    let standby_gets = counts.count(Some(&standby), Some(Verb::Get), Some("leases"));
    let renewals = counts.count(Some(&leader), Some(Verb::Update), Some("leases"));
    assert!(
        renewals >= 2,
        "the leader renewed {renewals} times in 17 s: the window proves nothing"
    );
    assert_eq!(
        standby_gets, 0,
        "the standby read the Lease while the leader renewed it: {counts:?}"
    );
    assert!(
        c.api()
            .open_watches()
            .iter()
            .any(|w| w.client == standby && w.resource == "leases"),
        "the standby watches the Lease: {:?}",
        c.api().open_watches()
    );
    // The leader dies without giving the Lease up: the standby, judging expiry from what its
    // watch showed, takes over and allocates a new Service.
    c.kill_allocator(&leader);
    create(&c, "second").await;
    let end = Instant::now() + T;
    while c
        .ingress_ips(NS)
        .await
        .get("second")
        .is_none_or(|i| i.is_empty())
    {
        assert!(
            Instant::now() < end,
            "the standby never took over\n{}",
            c.log_tails()
        );
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
    assert_eq!(holder(&c).await.as_deref(), Some(standby.as_str()));
}
