//! The Kubernetes agent (`announcer agent`): the thin tokio shell around the election.
//!
//! Why thin: every decision (who owns a VIP, when to take over, when to let go) lives in the
//! sans-IO [`crate::election::Core`], tested over thousands of simulated schedules. This module
//! only connects it to the world, and [`run`] only wires the parts together:
//!
//! * [`kube`]: the API server: watches (which the rules of [`crate::placement`] read), the
//!   node Lease, Events, and the lease-per-service mode's election (the comparison baseline,
//!   built the way Cilium and kube-vip elect);
//! * [`net`]: the node: interfaces, the heartbeat socket, probes of an old owner's data plane,
//!   and the agent's handle on the data plane;
//! * the node-lease mode's loop (`shell`) and the lease-per-service mode's (`service_shell`),
//!   over what both share (`context`);
//! * [`unreachable`]: the rules behind the peers this node reports proven unreachable in its
//!   Lease (fast endpoint withdrawal, issue 28), and [`stale_flows`]: the conntrack entries
//!   kube-proxy DNATed to those peers' Pods, swept;
//! * [`shutdown`]: the stop and SIGTERM signals every task listens to;
//! * [`http`] and [`metrics`]: `/healthz`, `/readyz`, `/state` ([`crate::state`], as last
//!   [`published`]) and `/metrics`;
//! * [`admission`]: the start-up check that the admission policy is in force;
//! * [`config`] (flags and file) and [`persist`] (the state directory: identity, incarnation);
//! * [`AgentError`]: why the agent could not start or had to stop (the CLI maps it to an exit
//!   code).

pub mod admission;
pub mod config;
pub mod http;
pub mod kube;
pub mod metrics;
pub mod net;
pub mod persist;
pub mod published;
pub mod refresh;
pub mod shutdown;
pub mod stale_flows;
pub mod unreachable;

mod context;
mod error;
mod service_shell;
mod shell;

use std::{future::Future, path::PathBuf, sync::Arc};

pub use self::error::AgentError;
use self::{
    config::{AgentArgs, AgentFlags, Election},
    context::{Context, KubeSide, NodeNet, Reporting},
    kube::{announced::Announced, events::Events, node_lease, other_announcers, watch::Watches},
    metrics::{Metrics, Recorder},
    net::{iface::IfaceConfig, plane::Plane},
    published::PublishedState,
};
use crate::placement::eligibility::Selection;
use ::kube::{Client, runtime::events::EventType};

/// Runs the agent until `shutdown` completes (SIGTERM) and the handover is done.
pub async fn run(
    args: AgentArgs,
    pin_root: PathBuf,
    shutdown: impl Future<Output = ()> + Send + 'static,
) -> Result<(), AgentError> {
    args.validate()?;
    if args.allocator_settings {
        // Issue 25: the allocator left the agents (it is the announcer-allocator Deployment).
        tracing::warn!(
            "the agent no longer allocates addresses: the allocator: section, --no-allocator and \
             --allocate-classless are ignored; the announcer-allocator Deployment (`announcer \
             allocator`, flags --classless/--class-only) does it (docs/install.md, upgrade notes)"
        );
    }
    let mut selection = context::selection_from(&args)?;
    let client = kube::client(args.kubeconfig.as_deref())
        .await
        .map_err(AgentError::KubeConfig)?;
    let (stop_trigger, stop) = shutdown::channel();
    let (term_trigger, term) = shutdown::channel();
    tokio::spawn(async move {
        shutdown.await;
        term_trigger.fire();
    });
    let published = PublishedState::default();
    let metrics = Arc::new(Metrics::new());
    metrics.sources().set_state(published.clone());
    if !args.no_dataplane {
        metrics.sources().set_dataplane(pin_root.clone());
    }
    {
        let (addr, published, mut stop) = (args.http_address, published.clone(), stop.clone());
        let metrics = metrics.clone();
        tokio::spawn(async move {
            let stop = async move { stop.recv().await };
            if let Err(e) = http::serve(addr, published, metrics, stop).await {
                tracing::error!(%addr, error = %e, "health endpoint failed");
            }
        });
    }
    // The admission policy must be in force before this node's credentials write anything
    // (the HTTP server is up meanwhile: /readyz says not ready while the API is unreachable).
    if let Err(e) = admission::require_policy(&client, &args.namespace, term.clone()).await {
        stop_trigger.fire();
        return Err(e.into());
    }
    // Node Leases (the lease-per-service mode has none, so its watch stays empty).
    let lease_selector = node_lease::selector();
    let watches = Watches::start(
        client.clone(),
        &args.namespace,
        &lease_selector,
        stop.clone(),
    );
    metrics.sources().set_watches(watches.counters.clone());
    let events = Events::new(client.clone(), &args.node_name.as_str().into())
        .with_services(watches.services.clone());
    metrics.sources().set_events(events.clone());
    settle_classless(&client, &args, &mut selection, &events, &metrics.recorder()).await;
    let announced = Announced::spawn(
        client.clone(),
        args.node_name.as_str().into(),
        watches.services.clone(),
        stop.clone(),
    );
    refresh::spawn(
        pin_root.clone(),
        args.announce_refresh_interval
            .filter(|_| !args.no_dataplane),
        stop.clone(),
    );
    let mut ctx = Context {
        kube: KubeSide {
            rt: tokio::runtime::Handle::current(),
            client,
            watches,
            events,
            announced,
            vip_services: Default::default(),
            selection,
            synced: false,
        },
        report: Reporting {
            recorder: metrics.recorder(),
            sources: metrics.sources().clone(),
            published,
            reported: Default::default(),
        },
        net: NodeNet {
            plane: Plane::new(
                pin_root,
                args.xdp_mode.into(),
                args.burst(),
                args.pace(),
                !args.no_dataplane,
            ),
            iface_cfg: IfaceConfig {
                allow: args.interfaces.clone(),
                internal_ips: Vec::new(),
            },
            ifaces: Vec::new(),
            used_ifaces: Default::default(),
            heartbeat_ip: [0, 0, 0, 0].into(),
            heartbeat_mac: None,
        },
        stop,
        term,
        args,
    };
    if ctx.net.plane.enabled() {
        ctx.report.sources.set_mcast(ctx.net.plane.mcast_stats());
    }
    let result = match ctx.start().await {
        Ok(true) => match ctx.args.election {
            Election::NodeLease => shell::run_on_own_thread(ctx).await,
            Election::LeasePerService => service_shell::run(ctx).await,
        },
        Ok(false) => Ok(()),
        Err(e) => Err(e),
    };
    stop_trigger.fire();
    result
}

/// The agent's start: decides ([`other_announcers::classless`]) and narrows `selection` to our class when
/// class-less Services are refused; a Warning Event on the Node and the
/// `announcer_other_announcer_detected` metric say so.
async fn settle_classless(
    client: &Client,
    args: &AgentFlags,
    selection: &mut Selection,
    events: &Events,
    recorder: &Recorder,
) {
    let decision = other_announcers::classless(client, args.class_only, args.force_classless).await;
    selection.class_only = !decision.served();
    recorder.other_announcers(&decision);
    if let Some((reason, note)) = decision.report() {
        events.record_on_node(EventType::Warning, reason, &note);
    }
}
