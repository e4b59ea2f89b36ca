//! The withdrawal controller (`announcer withdrawer`): the `announcer-withdrawal` Deployment's
//! Pods turn the agents' reports of unreachable peers ([`crate::withdraw::report`]) into the
//! node lifecycle controller's own action, 30–50 s earlier: `Ready` False on the unreachable
//! node's Pods that back our LoadBalancer Services, in namespaces labelled
//! `announcer.dev/fast-endpoint-withdrawal=true` (docs/design/endpoint-withdrawal.md, issue 28).
//!
//! Why this shape:
//!
//! * **A shell around [`crate::withdraw::Tracker`].** The decisions (quorum of fresh
//!   reporters, life outranks reports, the cap) are the sans-IO tracker's; this module only
//!   feeds it what the watches see ([`watch`]), with tokio's monotonic clock, and acts on what
//!   it decides ([`act`]).
//! * **Every replica acts; no leader election.** A withdrawal must not wait for one, and the
//!   writes are idempotent: each Pod write carries the Pod's `uid` and `resourceVersion`, so a
//!   second replica gets a 409 or finds `Ready` False already and skips.
//! * **The cap holds across replicas** through one shared object ([`slots`]): the Lease
//!   `announcer-withdrawal` in the announcer namespace, claimed by compare-and-swap.
//! * **Its own account, confined by admission.** `announcer-withdrawal` may patch `pods/status`
//!   (RBAC cannot say which field); the `announcer-withdrawal-pod-status` policy
//!   (deploy/admission-policy.yaml) lets it turn only `Ready` from True to False with our
//!   reason, only in opted-in namespaces. It reads Pods with `get` only: the ones to act on
//!   come from the EndpointSlices of our Services ([`select`]).
//! * **Never writes True.** A node that returns gets its Pods' readiness back from its kubelet
//!   (within about 10 s); `Returned` and `HandedOver` only free the slot.

pub mod act;
pub mod metrics;
pub mod pod;
pub mod select;
pub mod slots;
pub mod watch;

use std::{future::Future, net::SocketAddr, path::PathBuf, sync::Arc, time::Duration};

use k8s_openapi::api::{
    coordination::v1::Lease,
    core::v1::{Namespace, Node, Service},
    discovery::v1::EndpointSlice,
};
use kube::{
    Api,
    runtime::{reflector, watcher},
};
use tokio::sync::mpsc;

use self::{act::Actor, metrics::Metrics, slots::SlotLease, watch::Input};
use crate::{
    agent::{kube as agent_kube, shutdown},
    withdraw::{Tracker, TrackerConfig},
};

/// `announcer withdrawer` flags.
#[derive(Clone, Debug, clap::Args)]
pub struct WithdrawerArgs {
    /// This replica's name, for its Events (the Pod name, from the downward API).
    #[arg(long, env = "POD_NAME", default_value = "announcer-withdrawal")]
    pub identity: String,
    /// The announcer namespace: the agents' node Leases and the shared `announcer-withdrawal`
    /// Lease are there.
    #[arg(long, env = "POD_NAMESPACE", default_value = "announcer-system")]
    pub namespace: String,
    /// kubeconfig to use (default: in-cluster config, else $KUBECONFIG / ~/.kube/config).
    #[arg(long, env = "ANNOUNCER_KUBECONFIG")]
    pub kubeconfig: Option<PathBuf>,
    /// The most nodes withdrawn at once, across replicas.
    #[arg(long, default_value_t = TrackerConfig::default().max_withdrawn)]
    pub max_withdrawn: usize,
    /// The fewest agreeing reports that prove a node gone (raised to 2 if lower).
    #[arg(long, default_value_t = TrackerConfig::default().min_quorum)]
    pub min_quorum: usize,
    /// How long an agent still counts as a reporter after its Lease was last renewed (the
    /// agents' Lease duration).
    #[arg(long, value_parser = humantime::parse_duration, default_value = "10s")]
    pub reporter_fresh: Duration,
    /// A shared slot nobody freed expires after this long (a replica that died holding it).
    #[arg(long, value_parser = humantime::parse_duration, default_value = "10m")]
    pub slot_ttl: Duration,
    /// Where to serve `/metrics` and `/healthz`.
    #[arg(long, default_value = "0.0.0.0:9748")]
    pub http_address: SocketAddr,
}

impl WithdrawerArgs {
    /// The tracker's configuration.
    pub fn tracker_config(&self) -> TrackerConfig {
        TrackerConfig {
            reporter_fresh: self.reporter_fresh,
            min_quorum: self.min_quorum,
            max_withdrawn: self.max_withdrawn,
        }
    }
}

/// Why the withdrawer could not start or stopped.
#[derive(Debug, thiserror::Error)]
pub enum WithdrawerError {
    /// No usable kubeconfig / in-cluster configuration.
    #[error("no Kubernetes configuration: {0}")]
    KubeConfig(String),
    /// `--max-withdrawn 0` would withdraw nothing: leave the Deployment out instead.
    #[error(
        "--max-withdrawn must be at least 1 (to turn withdrawal off, do not deploy the withdrawer)"
    )]
    NoSlots,
    /// The metrics port could not be bound.
    #[error("cannot serve on {0}: {1}")]
    Http(SocketAddr, #[source] std::io::Error),
}

/// Runs the withdrawer until `shutdown` completes (SIGTERM).
pub async fn run(
    args: WithdrawerArgs,
    shutdown: impl Future<Output = ()> + Send + 'static,
) -> Result<(), WithdrawerError> {
    if args.max_withdrawn == 0 {
        return Err(WithdrawerError::NoSlots);
    }
    let client = agent_kube::client(args.kubeconfig.as_deref())
        .await
        .map_err(WithdrawerError::KubeConfig)?;
    let metrics = Arc::new(Metrics::new());
    let listener = tokio::net::TcpListener::bind(args.http_address)
        .await
        .map_err(|e| WithdrawerError::Http(args.http_address, e))?;
    let (trigger, stop) = shutdown::channel();
    let mut tasks = Vec::new();
    {
        let metrics = metrics.clone();
        let mut stop = stop.clone();
        tasks.push(tokio::spawn(async move {
            let app = metrics::router(metrics);
            if let Err(e) = axum::serve(listener, app)
                .with_graceful_shutdown(async move { stop.recv().await })
                .await
            {
                tracing::warn!(error = %e, "metrics server");
            }
        }));
    }
    tracing::info!(
        identity = %args.identity,
        namespace = %args.namespace,
        max_withdrawn = args.max_withdrawn,
        min_quorum = args.min_quorum,
        "withdrawal controller starting"
    );

    let (tx, rx) = mpsc::unbounded_channel::<Input>();
    tasks.push(tokio::spawn(watch::agent_leases(
        Api::namespaced(client.clone(), &args.namespace),
        tx.clone(),
        metrics.clone(),
    )));
    tasks.push(tokio::spawn(watch::kubelet_leases(
        Api::namespaced(client.clone(), watch::KUBELET_LEASE_NAMESPACE),
        tx.clone(),
    )));
    let (nodes, nodes_w) = reflector::store::<Node>();
    tasks.push(tokio::spawn(watch::nodes(
        Api::all(client.clone()),
        nodes_w,
        tx,
    )));
    let (slices, slices_w) = reflector::store::<EndpointSlice>();
    tasks.push(tokio::spawn(watch::store(
        Api::all(client.clone()),
        watcher::Config::default(),
        slices_w,
    )));
    let (services, services_w) = reflector::store::<Service>();
    tasks.push(tokio::spawn(watch::store(
        Api::all(client.clone()),
        watcher::Config::default(),
        services_w,
    )));
    let (namespaces, namespaces_w) = reflector::store::<Namespace>();
    tasks.push(tokio::spawn(watch::store(
        Api::all(client.clone()),
        watcher::Config::default().labels(select::OPT_IN_SELECTOR),
        namespaces_w,
    )));

    let actor = Actor {
        slots: SlotLease::new(
            Api::<Lease>::namespaced(client.clone(), &args.namespace),
            args.max_withdrawn,
            args.slot_ttl,
        ),
        client,
        slices,
        services,
        namespaces,
        nodes,
        metrics: metrics.clone(),
        identity: args.identity.clone(),
    };
    let main = tokio::spawn(drive(
        Tracker::new(args.tracker_config()),
        rx,
        actor,
        metrics,
        stop,
    ));
    shutdown.await;
    trigger.fire();
    let _ = tokio::time::timeout(Duration::from_secs(2), main).await;
    for t in tasks {
        t.abort();
    }
    Ok(())
}

/// Feeds the tracker from `rx` and its deadlines, and hands its decisions to `actor` in order.
async fn drive(
    mut tracker: Tracker,
    mut rx: mpsc::UnboundedReceiver<Input>,
    actor: Actor,
    metrics: Arc<Metrics>,
    mut stop: shutdown::Shutdown,
) {
    let (dtx, mut drx) = mpsc::unbounded_channel();
    // The actor waits for its stores before the first decision (decisions queue meanwhile),
    // then acts one decision at a time.
    let acting = tokio::spawn(async move {
        let _ = tokio::join!(
            actor.slices.wait_until_ready(),
            actor.services.wait_until_ready(),
            actor.namespaces.wait_until_ready(),
        );
        while let Some(d) = drx.recv().await {
            actor.act(d).await;
        }
    });
    loop {
        let now = tokio::time::Instant::now();
        let deadline = tracker.poll_timeout(now.into_std());
        tokio::select! {
            input = rx.recv() => {
                let Some(input) = input else { break };
                let now = tokio::time::Instant::now().into_std();
                apply(&mut tracker, now, input);
            }
            () = sleep_until(deadline) => {
                tracker.handle_timeout(tokio::time::Instant::now().into_std());
            }
            () = stop.recv() => break,
        }
        while let Some(d) = tracker.poll_decision() {
            if dtx.send(d).is_err() {
                break;
            }
        }
        metrics.set_withdrawn(tracker.withdrawn().len());
    }
    drop(dtx);
    let _ = acting.await;
}

/// Sleeps until `deadline`, forever if none.
async fn sleep_until(deadline: Option<std::time::Instant>) {
    match deadline {
        Some(d) => tokio::time::sleep_until(tokio::time::Instant::from_std(d)).await,
        None => std::future::pending().await,
    }
}

/// Hands one input to the tracker.
pub fn apply(tracker: &mut Tracker, now: std::time::Instant, input: Input) {
    match input {
        Input::AgentLease {
            node,
            report,
            renewed,
        } => tracker.handle_agent_lease(now, node, &report, renewed),
        Input::AgentLeaseDeleted(node) => tracker.handle_agent_lease_deleted(now, &node),
        Input::KubeletLease { node, renewed } => tracker.handle_kubelet_lease(now, node, renewed),
        Input::NodeReady(node, ready) => tracker.handle_node_ready(now, &node, ready),
        Input::NodeDeleted(node) => tracker.handle_node_deleted(now, &node),
    }
}
