//! The lease-per-service mode's shell: [`super::kube::lease_per_service::run`] contends for one Lease per
//! Service; this loop turns its ownership changes into map writes, bursts and Events, and
//! keeps owned entries refreshed.

use std::{collections::BTreeMap, net::IpAddr, sync::Arc};

use kube::runtime::events::EventType;
use tokio::sync::{mpsc, watch};

use super::{
    context::Context,
    error::AgentError,
    kube::lease_per_service::{self, LeaseApiStats, Ownership, Timing},
    shutdown,
};
use crate::{
    election::{ElectionStats, IfaceName, NodeName, ServiceRef},
    state::{AgentState, OwnedVip},
};

/// Runs until SIGTERM, then releases every Lease it holds.
pub(super) async fn run(mut ctx: Context) -> Result<(), AgentError> {
    let node = NodeName::from(ctx.args.node_name.as_str());
    let timing = Timing {
        lease_duration: ctx.args.service_lease_duration,
        renew_deadline: ctx.args.service_lease_renew_deadline,
        retry_period: ctx.args.service_lease_retry,
    };
    let (plan_tx, plan_rx) = watch::channel(ctx.plan().unwrap_or_default());
    let (own_tx, mut owns) = mpsc::channel::<Ownership>(1024);
    let (stop_trigger, stop) = shutdown::channel();
    let stats = Arc::new(LeaseApiStats::default());
    ctx.report.sources.set_service_leases(stats.clone());
    // Takeovers and handovers, as the node-lease core counts them, for `/state` and metrics.
    let mut counts = ElectionStats::default();
    let contender = tokio::spawn(lease_per_service::run(
        ctx.kube.client.clone(),
        lease_per_service::ServiceLeaseConfig {
            node: node.clone(),
            namespace: ctx.args.namespace.clone(),
            timing,
        },
        plan_rx,
        own_tx,
        stop,
        stats.clone(),
    ));
    let grace = ctx.args.grace;
    let mut refresh = tokio::time::interval(grace / 3);
    let mut changed = ctx.kube.watches.changed.clone();
    let mut owned: BTreeMap<IpAddr, (IfaceName, ServiceRef)> = BTreeMap::new();
    let mut stopping = false;
    let mut contender = contender;
    let mut term = ctx.term.clone();
    loop {
        tokio::select! {
            () = term.recv(), if !stopping => {
                tracing::info!("SIGTERM: releasing Service Leases");
                stopping = true;
                stop_trigger.fire();
            }
            Ok(()) = changed.changed() => {
                changed.borrow_and_update();
                if let Some(plan) = ctx.plan() {
                    ctx.report_problems(&plan.problems, |_| true);
                    let _ = plan_tx.send(plan);
                }
            }
            Some(o) = owns.recv() => apply(&mut ctx, &mut owned, o, &node, &mut counts),
            _ = refresh.tick() => {
                for (vip, (iface, _)) in &owned {
                    if let Err(e) = ctx.net.plane.install(*vip, iface, grace) {
                        tracing::error!(%vip, %iface, error = %e, "map refresh failed");
                    }
                }
            }
            r = &mut contender => {
                if let Err(e) = r {
                    tracing::error!(error = %e, "lease-per-service task failed");
                }
                // Drain the last ownership changes (releases) and stop.
                while let Ok(o) = owns.try_recv() {
                    apply(&mut ctx, &mut owned, o, &node, &mut counts);
                }
                ctx.publish_state(state(&ctx, &owned, &counts));
                return Ok(());
            }
        }
        ctx.publish_state(state(&ctx, &owned, &counts));
    }
}

fn apply(
    ctx: &mut Context,
    owned: &mut BTreeMap<IpAddr, (IfaceName, ServiceRef)>,
    o: Ownership,
    node: &NodeName,
    counts: &mut ElectionStats,
) {
    // Drop VIPs of this Service that it no longer has (or all, when released).
    let stale: Vec<IpAddr> = owned
        .iter()
        .filter(|(vip, (_, svc))| *svc == o.service && (!o.owned || !o.vips.contains(vip)))
        .map(|(vip, _)| *vip)
        .collect();
    for vip in stale {
        let (iface, _) = owned.remove(&vip).expect("listed");
        counts.releases += 1;
        match ctx.net.plane.remove(vip, &iface) {
            Ok(()) => tracing::info!(%vip, service = %o.service, "released"),
            Err(e) => tracing::error!(%vip, error = %e, "map delete failed"),
        }
    }
    if !o.owned {
        return;
    }
    for vip in o.vips {
        if owned.contains_key(&vip) {
            continue;
        }
        // (Pools' `interfaces` are honoured by the node-lease election only.)
        let Some(iface) = ctx.choose(vip, &[]) else {
            continue;
        };
        if let Err(e) = ctx.net.plane.install(vip, &iface, ctx.args.grace) {
            tracing::error!(%vip, %iface, error = %e, "map write failed");
            continue;
        }
        if let Err(e) = ctx.net.plane.announce(vip, &iface) {
            tracing::error!(%vip, %iface, error = %e, "announcement failed");
        }
        counts.takeovers += 1;
        let note = format!("announcing {vip} from {node} on {iface}");
        tracing::info!(%vip, service = %o.service, "{note}");
        ctx.kube
            .events
            .record(&o.service, EventType::Normal, "Announcing", &note);
        owned.insert(vip, (iface, o.service.clone()));
    }
}

fn state(
    ctx: &Context,
    owned: &BTreeMap<IpAddr, (IfaceName, ServiceRef)>,
    counts: &ElectionStats,
) -> AgentState {
    AgentState {
        node: ctx.args.node_name.clone(),
        election: "lease-per-service".into(),
        incarnation: 0,
        ready: true,
        dataplane: ctx.net.plane.enabled(),
        owned: owned
            .iter()
            .map(|(vip, (iface, svc))| OwnedVip {
                vip: *vip,
                iface: iface.to_string(),
                service: Some(svc.to_string()),
            })
            .collect::<Vec<_>>()
            .into(),
        peers: Vec::new(),
        stats: counts.clone(),
        api_ok: *ctx.kube.watches.healthy.borrow(),
        standby: false,
    }
}
