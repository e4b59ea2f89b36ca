//! The defaults that used to surprise (issue 27, item 7), with real agents:
//!
//! * with `classOnly: false` (the default), a class-less Service is left alone when another
//!   announcer's API is installed (MetalLB's `metallb.io` group, found through discovery on a
//!   real kube-apiserver), with a `ClasslessRefused` Warning on the Nodes; `--force-classless`
//!   serves it anyway;
//! * `--ignore-exclude-label` lets a cluster whose every node carries
//!   `node.kubernetes.io/exclude-from-external-load-balancers` (kubeadm's and Talos' control
//!   planes) announce.

use std::time::Duration;

use announcer_tests::env::{ApiKind, cluster::rendezvous_owner};
use k8s_openapi::apiextensions_apiserver::pkg::apis::apiextensions::v1::CustomResourceDefinition;
use kube::api::{Api, PostParams};
use serde_json::json;

use crate::world::{NODES, three_nodes};

/// Generous: convergence takes about a second, the host may be loaded.
const T: Duration = Duration::from_secs(30);
/// How long "not announced" must keep holding once the class-of-ours control VIP is.
const HOLD: Duration = Duration::from_secs(2);
const CLASSLESS: &str = "10.0.27.5";
const CONTROL: &str = "10.0.27.9";
const EXCLUDE: &str = "node.kubernetes.io/exclude-from-external-load-balancers";

/// A real kube-apiserver with MetalLB's `IPAddressPool` CRD established, Service `web`
/// (class-less, [`CLASSLESS`]) and `control` (our class, [`CONTROL`]), endpoints on node-a,
/// and an agent with `args` on every node.
async fn beside_metallb(name: &str, args: &[&str]) -> announcer_tests::env::cluster::Cluster {
    let mut c = three_nodes(ApiKind::Kube, name).await;
    let crd: CustomResourceDefinition = serde_json::from_value(json!({
        "metadata": {"name": "ipaddresspools.metallb.io"},
        "spec": {
            "group": "metallb.io",
            "names": {"kind": "IPAddressPool", "plural": "ipaddresspools", "singular": "ipaddresspool", "listKind": "IPAddressPoolList"},
            "scope": "Namespaced",
            "versions": [{"name": "v1beta1", "served": true, "storage": true,
                          "schema": {"openAPIV3Schema": {"type": "object", "x-kubernetes-preserve-unknown-fields": true}}}],
        },
    }))
    .expect("a CRD");
    Api::<CustomResourceDefinition>::all(c.client())
        .create(&PostParams::default(), &crd)
        .await
        .expect("create MetalLB's CRD");
    let client = c.client();
    let deadline = std::time::Instant::now() + T;
    loop {
        let groups = client.list_api_groups().await.expect("discovery");
        if groups.groups.iter().any(|g| g.name == "metallb.io") {
            break;
        }
        assert!(
            std::time::Instant::now() < deadline,
            "metallb.io never served"
        );
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
    c.add_service("default", "web", &[CLASSLESS], false).await;
    c.set_endpoints("default", "web", &[("node-a", true)]).await;
    c.create_service(
        "default",
        "control",
        &[CONTROL],
        json!({"loadBalancerClass": "announcer.dev/l2"}),
    )
    .await;
    c.set_endpoints("default", "control", &[("node-a", true)])
        .await;
    let mut all = vec!["--heartbeat-misses", "10"];
    all.extend_from_slice(args);
    for n in NODES {
        c.start_agent(n, &all);
    }
    c
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_classless_service_is_left_to_metallb_when_its_api_is_installed() {
    let c = beside_metallb("classless-refused", &[]).await;
    let control = rendezvous_owner(CONTROL, &NODES);
    c.wait_for("the class-of-ours control VIP is announced", T, |c| {
        c.owners(CONTROL) == [control.as_str()]
    })
    .await;
    c.hold("nobody announces the class-less Service's VIP", HOLD, |c| {
        c.owners(CLASSLESS).is_empty()
    })
    .await;
    let e = c
        .wait_for_event("default", "ClasslessRefused on a Node", T, |e| {
            e.type_.as_deref() == Some("Warning")
                && e.reason.as_deref() == Some("ClasslessRefused")
                && e.regarding.as_ref().and_then(|r| r.kind.as_deref()) == Some("Node")
        })
        .await;
    let note = e.note.unwrap_or_default();
    assert!(
        note.contains("metallb.io") && note.contains("forceClassless"),
        "{note}"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn force_classless_serves_a_classless_service_beside_metallb() {
    let c = beside_metallb("classless-forced", &["--force-classless"]).await;
    let owner = rendezvous_owner(CLASSLESS, &NODES);
    c.wait_for("the class-less VIP is announced by its owner", T, |c| {
        c.owners(CLASSLESS) == [owner.as_str()]
    })
    .await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn ignore_exclude_label_lets_a_cluster_of_excluded_nodes_announce() {
    let mut c = three_nodes(ApiKind::InRepo, "ignore-exclude").await;
    for n in NODES {
        c.label_node(n, &[(EXCLUDE, Some(""))]).await;
    }
    c.add_service("default", "web", &[CLASSLESS], false).await;
    c.set_endpoints("default", "web", &[("node-a", true)]).await;
    for n in NODES {
        c.start_agent(n, &["--heartbeat-misses", "10", "--ignore-exclude-label"]);
    }
    let owner = rendezvous_owner(CLASSLESS, &NODES);
    c.wait_for("the VIP is announced by its rendezvous owner", T, |c| {
        c.owners(CLASSLESS) == [owner.as_str()]
    })
    .await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn without_the_override_a_cluster_of_excluded_nodes_announces_nothing() {
    let mut c = three_nodes(ApiKind::InRepo, "exclude-all").await;
    for n in NODES {
        c.label_node(n, &[(EXCLUDE, Some(""))]).await;
    }
    c.add_service("default", "web", &[CLASSLESS], false).await;
    c.set_endpoints("default", "web", &[("node-a", true)]).await;
    for n in NODES {
        c.start_agent(n, &["--heartbeat-misses", "10"]);
    }
    c.wait_for_event("default", "NoEligibleNode on web", T, |e| {
        e.reason.as_deref() == Some("NoEligibleNode")
    })
    .await;
    assert!(c.owners(CLASSLESS).is_empty());
}
