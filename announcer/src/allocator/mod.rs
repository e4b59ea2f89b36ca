//! The address allocator (`announcer allocator`): the `announcer-allocator` Deployment's Pods,
//! one of them active at a time (the holder of the `announcer-allocator` Lease, [`lease`]),
//! write the addresses [`crate::ipam::plan`] computes into the Services'
//! `status.loadBalancer.ingress`, the pools' usage into their status, and a Warning Event for
//! each Service it cannot serve.
//!
//! Why a Deployment of its own, not a task of every agent: writing a Service's addresses is
//! the one permission that lets its holder point traffic anywhere on the segment. Run inside
//! the DaemonSet, every node's credentials carried it, so root on one node could move any
//! Service's address (issue 25, finding 1). Now only the allocator's ServiceAccount may write
//! `status.loadBalancer`; the agents' may change only the `announcer.dev/Announced` condition
//! (deploy/admission-policy.yaml), and the allocator runs on no host network with no
//! capability. It is the same binary, so the rules and the agent never disagree on a version.
//!
//! Why this shape:
//!
//! * **Idle without pools.** While the `AddressPool` store is empty, nothing happens: no
//!   Lease, no extra watch, no write, so a cluster that assigns addresses some other way sees
//!   no new API traffic.
//! * **One writer, O(changes) writes.** Only the Lease holder writes, and it writes only what
//!   differs from the objects (a Service's addresses, a pool's status), each once: a
//!   recompute that changes nothing sends nothing. The Lease renewal (every 5 s) is the only
//!   steady-state request. Namespaces (for `namespaceSelector`) are watched only while active.
//! * **No state of its own.** What is allocated is what the Services' status says; a new
//!   leader recomputes from the same objects and moves nothing. Every Service write carries
//!   the Service's `resourceVersion`: if it changed meanwhile (409), the watch brings the new
//!   version and the next recompute decides again.
//! * **Gentle when the API server struggles.** A write that fails (429, 5xx, unreachable) is
//!   retried per item after an exponential backoff with jitter ([`backoff`]), and at most
//!   [`backoff::MAX_CONCURRENT_WRITES`] writes are in flight, so a struggling API server is not
//!   sent every pending write again every second.
//! * **Events once per problem.** A Warning is recorded when a problem appears on a Service,
//!   not on every recompute.

pub mod backoff;
mod leader;
pub mod lease;

use std::{future::Future, path::PathBuf};

use futures::StreamExt;
use k8s_openapi::api::core::v1::Service;
use kube::{
    Api, ResourceExt,
    runtime::{WatchStreamExt, reflector, watcher},
};
use tokio::sync::watch;

pub use self::leader::{
    AllocatorConfig, CONTROLLER, NOT_ALLOCATED, WriteError, not_allocated_note, run as run_with,
    unserved_classless,
};
use crate::{
    agent::{kube::other_announcers, shutdown},
    ipam::AddressPool,
};

/// `announcer allocator` flags.
#[derive(Clone, Debug, clap::Args)]
pub struct AllocatorArgs {
    /// This replica's name, the Lease holder identity (from the downward API: the Pod name,
    /// which the admission policy matches against the token's pod-name claim).
    #[arg(long, env = "POD_NAME")]
    pub identity: String,
    /// Namespace of the `announcer-allocator` Lease.
    #[arg(long, env = "POD_NAMESPACE", default_value = "announcer-system")]
    pub namespace: String,
    /// kubeconfig to use (default: in-cluster config, else $KUBECONFIG / ~/.kube/config).
    #[arg(long, env = "ANNOUNCER_KUBECONFIG")]
    pub kubeconfig: Option<PathBuf>,
    /// Assign addresses to Services with this `spec.loadBalancerClass`.
    #[arg(long, default_value = "announcer.dev/l2")]
    pub load_balancer_class: String,
    /// Also assign addresses to class-less LoadBalancer Services (by default only to Services
    /// of our class).
    #[arg(long, conflicts_with = "class_only")]
    pub classless: bool,
    /// Only Services of our class (the agents' `classOnly`): overrides `--classless`.
    #[arg(long)]
    pub class_only: bool,
    /// With `--classless`: assign class-less Services addresses even when another announcer
    /// (MetalLB's `metallb.io` API, Cilium's `CiliumL2AnnouncementPolicy`) is installed; by
    /// default they are left to it (docs/configure.md).
    #[arg(long, requires = "classless")]
    pub force_classless: bool,
    /// The most API writes per second: Service addresses, pool status and Events, evenly
    /// spaced at 95 % of it, so that the API server never sees more in a second (the Lease
    /// renewal is not counted and never waits for them). 10,000 new Services take about 110 s
    /// at the default.
    #[arg(long, default_value = "100")]
    pub write_qps: std::num::NonZeroU32,
}

/// Why the allocator could not start.
#[derive(Debug, thiserror::Error)]
pub enum AllocatorError {
    /// No usable kubeconfig / in-cluster configuration.
    #[error("no Kubernetes configuration: {0}")]
    KubeConfig(String),
    /// The identity is empty (POD_NAME unset).
    #[error("--identity (POD_NAME) is empty: set it to the Pod's name (downward API)")]
    NoIdentity,
}

/// Runs the allocator until `shutdown` completes (SIGTERM), then gives its Lease up.
pub async fn run(
    args: AllocatorArgs,
    shutdown: impl Future<Output = ()> + Send + 'static,
) -> Result<(), AllocatorError> {
    if args.identity.is_empty() {
        return Err(AllocatorError::NoIdentity);
    }
    let client = crate::agent::kube::client(args.kubeconfig.as_deref())
        .await
        .map_err(AllocatorError::KubeConfig)?;
    let (trigger, stop) = shutdown::channel();
    let (changed_tx, changed) = watch::channel(0u64);
    let services = watch_into_store::<Service>(Api::all(client.clone()), changed_tx.clone());
    let pools = watch_into_store::<AddressPool>(Api::all(client.clone()), changed_tx);
    tracing::info!(identity = %args.identity, namespace = %args.namespace, "address allocator starting");
    // Another announcer: class-less Services are its own (refused unless --force-classless),
    // and none of them is told that nothing will allocate it.
    let others = other_announcers::detect_retrying(&client).await;
    let classless = other_announcers::decide(
        !args.classless || args.class_only,
        args.force_classless,
        others.clone(),
    );
    if let Some((reason, note)) = classless.report() {
        tracing::warn!(reason, "{note}");
    }
    let mut cfg = AllocatorConfig::from_args(&args);
    cfg.scope.classless = classless.served();
    cfg.other_announcers = others;
    let task = tokio::spawn(run_with(client, cfg, services.0, pools.0, changed, stop));
    shutdown.await;
    trigger.fire();
    // Let it release its Lease, so another replica takes over without waiting for it to
    // expire; never hold the exit up for long.
    let _ = tokio::time::timeout(std::time::Duration::from_secs(2), task).await;
    services.1.abort();
    pools.1.abort();
    Ok(())
}

/// A reflector store of every `K`, kept by a watch task; `changed` is bumped on every change.
fn watch_into_store<K>(
    api: Api<K>,
    changed: watch::Sender<u64>,
) -> (reflector::Store<K>, tokio::task::JoinHandle<()>)
where
    K: kube::Resource<DynamicType = ()>
        + Clone
        + std::fmt::Debug
        + serde::de::DeserializeOwned
        + Send
        + Sync
        + 'static,
{
    let (reader, writer) = reflector::store::<K>();
    let task = tokio::spawn(async move {
        let stream = watcher(api, watcher::Config::default())
            .modify(|o: &mut K| o.managed_fields_mut().clear())
            .default_backoff()
            .reflect(writer);
        let mut stream = std::pin::pin!(stream);
        while let Some(ev) = stream.next().await {
            match ev {
                Ok(
                    watcher::Event::InitDone | watcher::Event::Apply(_) | watcher::Event::Delete(_),
                ) => {
                    changed.send_modify(|g| *g = g.wrapping_add(1));
                }
                Ok(_) => {}
                Err(e) => tracing::warn!(error = %e, "allocator watch"),
            }
        }
    });
    (reader, task)
}
