//! One trial: pick the victim (the node answering the first VIP), probe its VIPs from the
//! client, inject the failure, watch until the VIPs moved (or a bound passed), and measure.

use std::{
    collections::BTreeMap,
    net::IpAddr,
    time::{Duration, Instant},
};

use serde::Serialize;

use super::{
    measure::{
        OwnerCheck, OwnerPoll, RejoinOutcome, SplitOutcome, combine, max_gap, moved_back,
        owner_check, split_outcome, vip_outcome,
    },
    scenarios::{
        API_OUTAGE_HOLD, API_OUTAGE_LEAD, Bed, FREEZE_FOR, PARTITION_HOLD, REJOIN_READY_BOUND,
        REJOIN_SETTLE, REJOIN_WATCH, RESTART_AFTER, Scenario,
    },
};
use crate::env::lan::datapath::{HttpError, HttpOutcome};

/// UDP probe interval (per VIP).
pub const PROBE_INTERVAL: Duration = Duration::from_millis(10);
/// Probing before the failure, to know who answered before it.
const PRE_ROLL: Duration = Duration::from_secs(1);
/// On top of [`PRE_ROLL`], a random wait of up to this long, so that the failure lands at a
/// random point of the system's heartbeat (advert) cycle. Without it, a trial starts a fixed
/// time after the restore converged, and convergence is seen right after a heartbeat: every
/// failure then hit the same phase of the cycle, and the measured failover times were those of
/// one phase (at 100 ms heartbeats, 160–190 ms instead of 150–250 ms), not what a crash at a
/// random moment costs. One second covers every period compared (keepalived's default advert
/// interval is the longest).
pub const PHASE_SPREAD: Duration = Duration::from_secs(1);
/// Probing after the VIPs moved (the prober's `stop` then waits the 1 s after which it calls
/// a probe lost, so every probe counted had its chance).
const TAIL: Duration = Duration::from_millis(300);
/// How many VIPs the crash-100 scenario probes.
pub const MASS_PROBED: usize = 100;

/// What one trial measured.
#[derive(Clone, Debug, Serialize)]
pub struct Trial {
    /// The node failed.
    pub victim: String,
    /// VIPs probed (those the victim owned).
    pub vips: usize,
    /// The slowest probed VIP's failover time; `None`: some VIP did not answer again.
    #[serde(serialize_with = "ser_ms")]
    pub failover: Option<Duration>,
    /// The most probes lost by one VIP.
    pub lost: u32,
    /// Another node answered VIP 0 after the failure.
    pub switched: bool,
    /// Who answered VIP 0 last.
    pub after: Option<String>,
    /// Whether the owner change (or no change) the scenario expects was observed
    /// ([`super::scenarios::Scenario::expected_owner`]).
    pub owner: OwnerCheck,
    /// Partition only.
    pub split: Option<SplitOutcome>,
    /// Rejoin only (its failover, lost probes and owner fields are those of the rejoin
    /// window).
    pub rejoin: Option<RejoinOutcome>,
    /// The e2e scenarios only: what the HTTP client saw, and when the crashed node's endpoint
    /// went not ready (the failover fields above are the layer-2 ones, from the UDP probes).
    pub e2e: Option<E2eOutcome>,
}

fn ser_ms<S: serde::Serializer>(d: &Option<Duration>, s: S) -> Result<S::Ok, S::Error> {
    match d {
        Some(d) => s.serialize_f64(d.as_secs_f64() * 1e3),
        None => s.serialize_none(),
    }
}

fn sleep_until(t: Instant) {
    let now = Instant::now();
    if t > now {
        std::thread::sleep(t - now);
    }
}

/// Polls until another node announces every one of `targets` and each of them answered the
/// client from a node other than `victim` at least once, or until `deadline`; whether they
/// did. (With many VIPs the last GARPs go out well after the first.)
fn wait_takeover(bed: &Bed, targets: &[IpAddr], victim: &str, deadline: Instant) -> bool {
    let mut pending: Vec<IpAddr> = targets.to_vec();
    let mut announced = false;
    while Instant::now() < deadline {
        announced = announced || bed.announced_elsewhere(targets, victim);
        if announced {
            pending.retain(|v| {
                bed.tb
                    .ask(*v, Duration::from_millis(60))
                    .is_none_or(|n| n == victim)
            });
            if pending.is_empty() {
                return true;
            }
        }
        std::thread::sleep(Duration::from_millis(30));
    }
    false
}

/// The victim and the VIPs probed: for crash-100 the node owning most of `owners` (at most
/// [`MASS_PROBED`] of its VIPs), else the owner of the first VIP and every VIP it owns.
pub fn pick_victim(
    scenario: Scenario,
    vips: &[IpAddr],
    owners: &BTreeMap<IpAddr, String>,
) -> (String, Vec<IpAddr>) {
    let victim = if scenario == Scenario::Crash100 {
        let mut count: BTreeMap<&String, usize> = BTreeMap::new();
        for o in owners.values() {
            *count.entry(o).or_default() += 1;
        }
        count
            .into_iter()
            .max_by_key(|(_, c)| *c)
            .map(|(n, _)| n.clone())
            .expect("some VIP has an owner")
    } else {
        owners[&vips[0]].clone()
    };
    let limit = if scenario == Scenario::Crash100 {
        MASS_PROBED
    } else {
        usize::MAX
    };
    let targets = vips
        .iter()
        .filter(|v| owners.get(v) == Some(&victim))
        .take(limit)
        .copied()
        .collect();
    (victim, targets)
}

/// Runs one trial of `scenario` from the converged `owners` of `vips`. The testbed is left
/// failed; the caller restores it.
pub fn run(
    bed: &mut Bed,
    scenario: Scenario,
    vips: &[IpAddr],
    owners: &BTreeMap<IpAddr, String>,
) -> Trial {
    let (victim, targets) = pick_victim(scenario, vips, owners);
    let bound = bed.system.takeover_bound();
    if scenario == Scenario::ApiOutageCrash {
        bed.api_outage(true);
        std::thread::sleep(API_OUTAGE_LEAD);
    }
    let prober = bed.tb.start_prober(&targets, PROBE_INTERVAL);
    std::thread::sleep(PRE_ROLL + PHASE_SPREAD.mul_f64(rand::random::<f64>()));
    let t0 = Instant::now();
    prober.mark(&format!("{} {victim}", scenario.name()));
    let mut polls: Vec<(Instant, usize)> = vec![];
    let mut heal_at = None;
    // Where the client's view is measured from: the failure, or the return of the crashed node
    // (rejoin).
    let mut from = t0;
    let mut rejoin_takeover = None;
    // Whether another node announced every target and answered it within the bound (only the
    // scenarios that wait for a takeover set it).
    let mut takeover_seen = false;
    match scenario {
        Scenario::Crash | Scenario::Crash100 => {
            bed.crash(&victim);
            takeover_seen = wait_takeover(bed, &targets, &victim, t0 + bound);
        }
        Scenario::LinkDown => {
            bed.link_down(&victim);
            takeover_seen = wait_takeover(bed, &targets, &victim, t0 + bound);
        }
        Scenario::Sigkill => {
            bed.kill(&victim);
            takeover_seen = wait_takeover(bed, &targets, &victim, t0 + bound);
        }
        Scenario::Sigterm => {
            bed.term(&victim);
            takeover_seen = wait_takeover(bed, &targets, &victim, t0 + bound);
        }
        Scenario::Restart => {
            bed.kill(&victim);
            sleep_until(t0 + RESTART_AFTER);
            bed.restart(&victim);
            prober.mark(&format!("restart {victim}"));
            std::thread::sleep(bed.system.restart_settle());
        }
        Scenario::Freeze => {
            bed.freeze(&victim);
            sleep_until(t0 + FREEZE_FOR);
            bed.thaw(&victim);
            prober.mark(&format!("thaw {victim}"));
            std::thread::sleep(bed.system.restart_settle());
        }
        Scenario::Rejoin => {
            bed.crash(&victim);
            rejoin_takeover = Some(wait_takeover(bed, &targets, &victim, t0 + bound));
            std::thread::sleep(REJOIN_SETTLE);
            from = Instant::now();
            prober.mark(&format!("rejoin {victim}"));
            bed.rejoin(&victim);
            if bed.wait_ready(&victim, REJOIN_READY_BOUND) {
                prober.mark(&format!("ready {victim}"));
            }
            std::thread::sleep(REJOIN_WATCH);
        }
        Scenario::Stress => unreachable!("stress runs no trials (see super::stress)"),
        Scenario::StressE2e
        | Scenario::PartitionE2e
        | Scenario::BlackoutE2e
        | Scenario::AgentCrashloopE2e => {
            unreachable!("the e2e safety scenarios run no trials (see super::safety)")
        }
        Scenario::CrashE2eLocal | Scenario::CrashE2eCluster => {
            unreachable!("the e2e scenarios run their trials in super::e2e")
        }
        Scenario::ApiOutageCrash => {
            bed.crash(&victim);
            takeover_seen = wait_takeover(bed, &targets, &victim, t0 + API_OUTAGE_HOLD);
            if !takeover_seen {
                bed.api_outage(false);
                prober.mark("api back");
                takeover_seen = wait_takeover(bed, &targets, &victim, Instant::now() + bound);
            }
        }
        Scenario::Partition => {
            let nodes = bed.tb.nodes();
            let partner = bed
                .successor
                .get(&victim)
                .cloned()
                .or_else(|| nodes.iter().find(|n| **n != victim).cloned())
                .expect("at least two nodes");
            bed.partition(&victim, &partner);
            let poll = |bed: &Bed, polls: &mut Vec<(Instant, usize)>| {
                let n = bed
                    .owners(&targets[..1])
                    .values()
                    .next()
                    .map_or(0, Vec::len);
                polls.push((Instant::now(), n));
                n
            };
            while t0.elapsed() < PARTITION_HOLD {
                poll(bed, &mut polls);
                std::thread::sleep(Duration::from_millis(40));
            }
            bed.heal_all();
            let h = Instant::now();
            heal_at = Some(h);
            prober.mark("heal");
            // Until one owner for 1 s, or the bound.
            let mut single_since: Option<Instant> = None;
            while h.elapsed() < bound {
                if poll(bed, &mut polls) == 1 {
                    let s = *single_since.get_or_insert_with(Instant::now);
                    if s.elapsed() >= Duration::from_secs(1) {
                        break;
                    }
                } else {
                    single_since = None;
                }
                std::thread::sleep(Duration::from_millis(40));
            }
        }
    }
    std::thread::sleep(TAIL);
    let stop = Instant::now();
    let tl = prober.stop();
    let at = tl.since(from);
    let until = tl.since(stop);
    let per_vip: Vec<_> = targets
        .iter()
        .map(|v| vip_outcome(&tl.samples, *v, at, until))
        .collect();
    let (failover, lost) = combine(&per_vip);
    let owner = owner_check(
        scenario.expected_owner(bed.system),
        &per_vip,
        &victim,
        takeover_seen,
    );
    let first = per_vip.first();
    let switched = first.is_some_and(|o| o.switched);
    let after = first.and_then(|o| o.after.clone());
    if let Some(a) = after
        .as_ref()
        .filter(|_| switched && !matches!(scenario, Scenario::Partition | Scenario::Rejoin))
    {
        bed.successor.insert(victim.clone(), a.clone());
    }
    let split = heal_at.map(|h| {
        let polls: Vec<OwnerPoll> = polls
            .iter()
            .map(|(t, n)| OwnerPoll {
                at: tl.since(*t),
                owners: *n,
            })
            .collect();
        split_outcome(&polls, tl.since(h))
    });
    let rejoin = rejoin_takeover.map(|taken_over| RejoinOutcome {
        taken_over,
        moved_back: moved_back(&per_vip, &victim),
        max_gap: targets
            .iter()
            .map(|v| max_gap(&tl.samples, *v, at, until))
            .max()
            .unwrap_or_default(),
    });
    Trial {
        victim,
        vips: targets.len(),
        failover,
        lost,
        switched,
        after,
        owner,
        split,
        rejoin,
        e2e: None,
    }
}

#[cfg(test)]
mod unit {
    use super::*;

    fn v(k: u8) -> IpAddr {
        IpAddr::from([10, 78, 128, k])
    }

    #[test]
    fn victim_is_the_owner_of_vip0_or_the_busiest_node() {
        let vips: Vec<IpAddr> = (0..5).map(v).collect();
        let owners: BTreeMap<IpAddr, String> = vips
            .iter()
            .zip(["node-b", "node-a", "node-b", "node-c", "node-a"])
            .map(|(v, n)| (*v, n.to_owned()))
            .collect();
        let (victim, t) = pick_victim(Scenario::Crash, &vips, &owners);
        assert_eq!((victim.as_str(), t), ("node-b", vec![v(0), v(2)]));
        let more: BTreeMap<IpAddr, String> = owners
            .into_iter()
            .map(|(k, n)| (k, if k == v(3) { "node-a".into() } else { n }))
            .collect();
        let (victim, t) = pick_victim(Scenario::Crash100, &vips, &more);
        assert_eq!((victim.as_str(), t), ("node-a", vec![v(1), v(3), v(4)]));
    }
}

/// What an e2e trial measured beyond the layer-2 figures of [`Trial`]. Times are since the
/// crash (T).
#[derive(Clone, Debug, Serialize)]
pub struct E2eOutcome {
    /// The HTTP figures ([`HttpOutcome`]; `None`: not recovered within `e2e::WATCH`).
    pub http: HttpOutcome,
    /// When the crashed node's endpoint was first seen not ready (or gone) in the Service's
    /// EndpointSlices (polled every ~250 ms); `None`: not within `e2e::WATCH`.
    pub endpoints_not_ready: Option<Duration>,
    /// Ticks the client skipped (20 requests pending).
    pub skipped: u64,
    /// Requests sent after [`Self::endpoints_not_ready`] (to the end of the trial) that
    /// failed: what the endpoint removal did not end.
    pub failed_after_endpoint_removal: Option<usize>,
    /// The failed requests after the crash by why they failed.
    pub errors: BTreeMap<HttpError, usize>,
    /// From the crashed node's return (link up, kubelet back) until every endpoint of both
    /// Services is ready and programmed again; `None`: not within the trial's bound.
    pub ready_again: Option<Duration>,
    /// Pods on nodes that did not crash that were seen with `Ready` False for our reason
    /// (`AnnouncerNodeUnreachable`) during the trial: false withdrawals, which must be none.
    pub healthy_withdrawn: Vec<String>,
    /// Failures sent more than [`LATE_AFTER`] after [`Self::endpoints_not_ready`] (at most
    /// [`LATE_KEPT`], the first ones): the stragglers that neither the address move nor the
    /// endpoint removal explains, each with its time after the crash and why it failed.
    pub late_failures: Vec<(Duration, HttpError)>,
}

/// See [`E2eOutcome::late_failures`]: kube-proxy's `minSyncPeriod` (1 s) and a margin.
pub const LATE_AFTER: Duration = Duration::from_secs(2);
/// See [`E2eOutcome::late_failures`].
pub const LATE_KEPT: usize = 20;
