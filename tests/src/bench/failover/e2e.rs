//! `crash-e2e-local` and `crash-e2e-cluster`: what a real client of a LoadBalancer Service
//! sees when the VIP's owner node crashes, end to end: HTTP over a new connection every 10 ms
//! (200 ms timeout, at most 20 in flight) to `VIP:80`, through the real kube-proxy (nftables)
//! of the node that receives it, to real Pods (one per node) whose EndpointSlices the real
//! endpointslice controller writes ([`crate::env::lan::datapath`]). Needs the real control
//! plane: every testbed of the bench runs on it.
//!
//! One trial: the owner of the Service's VIP crashes at T (link down, agent, kubelet and
//! kube-proxy gone: [`Testbed::crash`]); the HTTP client and the UDP echo prober (the layer-2
//! view) run from 1 s (plus a random phase) before T to T + [`WATCH`]; meanwhile a watch on
//! the EndpointSlices takes the moment the crashed node's endpoint stops being ready (the node
//! lifecycle controller's grace period, or a withdrawal, then the endpointslice controller),
//! to the millisecond (a poll every 250 ms overstated it by up to 0.3 s). Then the node
//! comes back ([`DataPath::revive`]: link, kubelet, kube-proxy, its Pods' readiness as the
//! kubelet's status manager restores it), its agent restarts, and the trial waits until every
//! endpoint is ready and programmed again.
//!
//! * `Local`: the new owner sends the client to its own Pod, so HTTP is back when the address
//!   moved (the layer-2 failover).
//! * `Cluster`: the new owner spreads connections over every ready endpoint, the crashed
//!   node's included until it is marked not ready: about one connection in three fails until
//!   then. [`E2eOutcome::endpoints_not_ready`] next to the layer-2 failover time says how
//!   much of the outage is the address move and how much the endpoint removal.
//! * `announcer-withdraw` ([`System::withdraws`]): the Services' namespace is opted in to fast
//!   endpoint withdrawal and [`WITHDRAWER_REPLICAS`] `announcer withdrawer` processes run in
//!   the last nodes' namespaces (a crash of such a node takes its replica down; it is started
//!   again when the node returns). The trial also watches every Pod for a false withdrawal
//!   (`Ready` False for our reason on a node that did not crash,
//!   [`E2eOutcome::healthy_withdrawn`]) and times the return ([`E2eOutcome::ready_again`]).
//!
//! Caveat: kube-proxy would also DNAT the testbed's echo Services (their Pods are the nodes),
//! hiding which node received a probe; [`DataPath::install`] labels the Services that exist
//! then so that kube-proxy ignores them. Services created later (crash-100's, which runs after
//! these scenarios) are not labelled: run `crash-100` in a run of its own.

use std::{
    collections::BTreeMap,
    net::{IpAddr, SocketAddr},
    time::{Duration, Instant},
};

use super::{
    measure::{Expect, owner_check, vip_outcome},
    scenarios::{Bed, Scenario},
    systems::{System, WITHDRAWER_REPLICAS},
    trial::{E2eOutcome, LATE_AFTER, LATE_KEPT, PHASE_SPREAD, PROBE_INTERVAL, Trial},
};
use crate::env::{
    kube::workloads,
    lan::{
        SERVICE_NAMESPACE,
        datapath::{
            Announcer, DataPath, HttpClient, SERVICE_PORT, add_http_service, fetch, http_outcome,
            wait_service_ready,
        },
        opt_in, withdrawn_pods,
    },
};

/// Trials of an e2e cell unless `--trials` asks for fewer (each waits for the node lifecycle
/// controller, about a minute).
pub const E2E_TRIALS: usize = 10;
/// How long after the crash the client keeps requesting: past the node lifecycle controller's
/// grace (40 s) and the endpoint update, and the window of the failed share.
pub const WATCH: Duration = Duration::from_secs(60);
/// Requesting before the crash (plus a random fraction of [`PHASE_SPREAD`]).
const PRE_ROLL: Duration = Duration::from_secs(1);
/// Bound for setup steps and for the return of the crashed node.
const SETTLE: Duration = Duration::from_secs(90);
/// The VIP numbers of the two Services.
const LOCAL_VIP: u32 = 900;
const CLUSTER_VIP: u32 = 901;
/// The app (Pod label value) behind both Services: one Pod per node.
const APP: &str = "e2e";

/// Whether `s` is `crash-e2e-local` or `crash-e2e-cluster`.
pub fn is_e2e(s: Scenario) -> bool {
    matches!(s, Scenario::CrashE2eLocal | Scenario::CrashE2eCluster)
}

/// Trials of an e2e cell: `--trials`, at most [`E2E_TRIALS`].
pub fn trials(requested: usize) -> usize {
    requested.min(E2E_TRIALS)
}

/// The data path of one bed, set up by its first e2e trial.
pub struct E2eBed {
    dp: DataPath,
    /// The nodes whose namespaces run a withdrawer replica (`announcer-withdraw` only).
    withdrawers: Vec<String>,
}

fn err(what: &str) -> impl FnOnce(String) -> String + '_ {
    move |e| format!("{what}: {e}")
}

impl E2eBed {
    /// kube-proxy on every node, one Pod per node, and the two Services (Local and Cluster)
    /// ready and programmed everywhere.
    pub fn setup(bed: &mut Bed) -> Result<E2eBed, String> {
        let tb = &mut bed.tb;
        let mut dp = DataPath::install(tb).map_err(|e| format!("the data path: {e}"))?;
        let nodes = tb.nodes();
        let all: Vec<&str> = nodes.iter().map(String::as_str).collect();
        dp.add_pods(tb, APP, &all)
            .map_err(|e| format!("the Pods: {e}"))?;
        let by = announcer(bed.system);
        for sc in [Scenario::CrashE2eLocal, Scenario::CrashE2eCluster] {
            let (client, name, v) = (tb.kube(), service(sc), service_vip(bed.system, sc));
            tb.block_on(async move {
                add_http_service(client, name, v, sc == Scenario::CrashE2eLocal, APP, by).await
            })
            .map_err(|e| e.to_string())
            .map_err(err("the Services"))?;
            wait_service_ready(tb, service(sc), v, &all, SETTLE)
                .map_err(|e| e.to_string())
                .map_err(err("the Services ready"))?;
        }
        let mut withdrawers = Vec::new();
        if bed.system.withdraws() {
            let client = tb.kube();
            tb.block_on(async move { opt_in(client, SERVICE_NAMESPACE, true).await })
                .map_err(err("opting the Services' namespace in"))?;
            // The last nodes: the Services' VIPs settle on the last node here, so every crash
            // trial takes a replica down with its node (the other one acts alone).
            withdrawers = nodes
                .iter()
                .rev()
                .take(WITHDRAWER_REPLICAS)
                .cloned()
                .collect();
            for n in &withdrawers {
                tb.start_withdrawer(n);
            }
        }
        Ok(E2eBed { dp, withdrawers })
    }
}

fn service(sc: Scenario) -> &'static str {
    if sc == Scenario::CrashE2eLocal {
        "e2e-local"
    } else {
        "e2e-cluster"
    }
}

/// The VIP of `sc`'s Service for `system` (a peer's from its own range).
fn service_vip(system: System, sc: Scenario) -> IpAddr {
    super::system_vip(
        system,
        if sc == Scenario::CrashE2eLocal {
            LOCAL_VIP
        } else {
            CLUSTER_VIP
        },
    )
}

/// Whom the e2e Services are for: a peer's class and address annotation, or this agent's.
fn announcer(system: System) -> Announcer {
    match system.peer() {
        Some(kind) => Announcer {
            class: kind.lb_class(),
            ip_annotation: Some(kind.ip_annotation()),
        },
        None => Announcer::OURS,
    }
}

/// Waits until both Services have a ready and programmed endpoint on every node.
pub fn wait_all_ready(bed: &Bed) -> Result<(), String> {
    let nodes = bed.tb.nodes();
    let all: Vec<&str> = nodes.iter().map(String::as_str).collect();
    for sc in [Scenario::CrashE2eLocal, Scenario::CrashE2eCluster] {
        wait_service_ready(
            &bed.tb,
            service(sc),
            service_vip(bed.system, sc),
            &all,
            SETTLE,
        )
        .map_err(|e| format!("endpoints ready on every node: {e}"))?;
    }
    Ok(())
}

/// One trial of `scenario` (an e2e one) on `bed`, setting the data path up first if `state`
/// has none. The bed is left restored (node back, endpoints ready).
pub fn run(bed: &mut Bed, state: &mut Option<E2eBed>, scenario: Scenario) -> Result<Trial, String> {
    if state.is_none() {
        *state = Some(E2eBed::setup(bed)?);
    }
    let e2e = state.as_ref().expect("set up");
    let (svc, v) = (service(scenario), service_vip(bed.system, scenario));
    let target = SocketAddr::new(v, SERVICE_PORT);
    let victim = bed
        .converge(&[v], SETTLE)
        .and_then(|o| o.get(&v).cloned())
        .ok_or_else(|| format!("no single settled owner of {v} before the crash"))?;
    let end = Instant::now() + SETTLE;
    while fetch(bed.tb.client(), target).is_none() {
        if Instant::now() > end {
            return Err(format!("no HTTP answer through {target} before the crash"));
        }
        std::thread::sleep(Duration::from_millis(100));
    }
    let not_ready_at = {
        let (client, node) = (bed.tb.kube(), victim.clone());
        bed.tb.spawn(async move {
            workloads::endpoint_not_ready_at(
                client,
                SERVICE_NAMESPACE,
                svc,
                &node,
                WATCH + PRE_ROLL + PHASE_SPREAD,
            )
            .await
        })
    };
    let prober = bed.tb.start_prober(&[v], PROBE_INTERVAL);
    let client = HttpClient::start(bed.tb.client(), target);
    std::thread::sleep(PRE_ROLL + PHASE_SPREAD.mul_f64(rand::random::<f64>()));
    let t0 = Instant::now();
    let label = format!("{} {victim}", scenario.name());
    prober.mark(&label);
    let http_at = client.mark(&label);
    bed.tb.crash(&victim);
    let mut takeover_seen = false;
    let mut healthy_withdrawn = std::collections::BTreeSet::new();
    while t0.elapsed() < WATCH {
        takeover_seen = takeover_seen || bed.announced_elsewhere(&[v], &victim);
        if bed.system.withdraws() {
            let client = bed.tb.kube();
            let seen = bed
                .tb
                .block_on(async move { withdrawn_pods(client, SERVICE_NAMESPACE).await })
                .unwrap_or_default();
            healthy_withdrawn.extend(
                seen.into_iter()
                    .filter(|(_, node)| *node != victim)
                    .map(|(pod, node)| format!("{pod} on {node}")),
            );
        }
        std::thread::sleep(Duration::from_millis(250));
    }
    let stop = Instant::now();
    let not_ready = bed
        .tb
        .block_on(async move { not_ready_at.await.ok().flatten() })
        .map(|at| at.saturating_duration_since(t0));
    let http_until = client.since(stop);
    let http = client.stop();
    let tl = prober.stop();
    let o = vip_outcome(&tl.samples, v, tl.since(t0), tl.since(stop));
    let owner = owner_check(
        Some(Expect::Moves),
        std::slice::from_ref(&o),
        &victim,
        takeover_seen,
    );
    let after = |from: Duration| {
        http.samples
            .iter()
            .filter(move |s| s.sent >= from && s.sent < http_until && !s.ok)
    };
    let mut errors = BTreeMap::new();
    for e in after(http_at).filter_map(|s| s.error) {
        *errors.entry(e).or_default() += 1;
    }
    let mut outcome = E2eOutcome {
        http: http_outcome(&http.samples, http_at, http_until),
        endpoints_not_ready: not_ready,
        skipped: http.skipped,
        failed_after_endpoint_removal: not_ready.map(|d| after(http_at + d).count()),
        errors,
        ready_again: None,
        healthy_withdrawn: healthy_withdrawn.into_iter().collect(),
        late_failures: not_ready
            .map(|d| {
                after(http_at + d + LATE_AFTER)
                    .filter_map(|s| Some((s.sent - http_at, s.error?)))
                    .take(LATE_KEPT)
                    .collect()
            })
            .unwrap_or_default(),
    };

    // The node comes back; the trial ends when everything is ready again.
    let back = Instant::now();
    e2e.dp
        .revive(&mut bed.tb, &victim)
        .map_err(|e| format!("reviving {victim}: {e}"))?;
    bed.start_after_reboot(&victim);
    if e2e.withdrawers.contains(&victim) {
        bed.tb.start_withdrawer(&victim);
    }
    wait_all_ready(bed).map_err(|e| format!("after {victim} came back: {e}"))?;
    outcome.ready_again = Some(back.elapsed());
    Ok(Trial {
        victim,
        vips: 1,
        failover: o.failover,
        lost: o.lost,
        switched: o.switched,
        after: o.after,
        owner,
        split: None,
        rejoin: None,
        e2e: Some(outcome),
    })
}
