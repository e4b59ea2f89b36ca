//! End to end, as a user on the LAN sees it: a multi-node testbed (real agents, real XDP data
//! plane) and a client that asks ARP/NDP and sends traffic to the VIPs. Each test runs on both
//! API servers (`NAME::in_repo`, `NAME::kube`: see `on_both_api_servers!`); on the real control
//! plane the Services' endpoints are Pods and the endpointslice controller writes the slices.
//! `native_xdp_answers_too` is about the data plane only, so it runs in-repo only.
//!
//! Each test builds its own testbed (own namespaces, bridge and API server), so they run in
//! parallel. Correctness only: every wait is a generous bound, never a speed assertion (speed
//! is the failover benchmark's business). Needs root; never skips.

use std::{
    collections::BTreeMap,
    net::IpAddr,
    time::{Duration, Instant},
};

use announcer_tests::{
    env::ApiKind,
    env::cluster::{owned_vips, rendezvous_owner},
    env::lan::{ProbeKind, Testbed, TestbedConfig, nic2_vip4, vip4, vip6},
    on_both_api_servers,
};

/// Generous bound for anything the agents have to do.
const T: Duration = Duration::from_secs(30);
/// Agent flags for every test: the defaults (the agent attaches XDP before its election
/// starts, so a slow attach does not look like a dead node to its peers).
const AGENT_ARGS: &[&str] = &[];
/// How long one ARP/NDP question or echo may take.
const Q: Duration = Duration::from_millis(800);
/// The agents' default grace: how long entries answer after their agent died.
const GRACE: Duration = Duration::from_secs(5);
/// One raw ARP/NDP round of [`Testbed::resolve_all`]: every answer in the window.
const ROUND: Duration = Duration::from_millis(600);
/// VIPs a node found answered by another one too after it had taken them (a partition).
const OVERLAPS: &str = "announcer_partition_overlaps_total";
/// VIPs a node took over.
const TAKEOVERS: &str = "announcer_takeovers_total";

async fn testbed(api: ApiKind, tag: &str, nodes: usize) -> Testbed {
    Testbed::start(TestbedConfig {
        nodes,
        native_xdp: false,
        tag: tag.into(),
        api,
    })
    .await
}

/// Asserts what the client sees for `vip`: only `owner`'s MAC answers ARP/NDP, and the
/// client's traffic reaches `owner` (waiting for both, since the client may still hold an old
/// neighbour entry for a moment).
fn client_sees(tb: &Testbed, vip: IpAddr, owner: &str) {
    let mac = tb.node_mac(owner);
    let mut seen = Vec::new();
    tb.wait_for(
        &format!("only {owner} answering ARP/NDP for {vip} (last: {seen:02x?})"),
        T,
        |tb| {
            seen = tb.arp_macs(vip, Q);
            seen == vec![mac]
        },
    );
    let mut answered = None;
    tb.wait_for(&format!("{vip} traffic reaching {owner}"), T, |tb| {
        answered = tb.ask(vip, Q);
        answered.as_deref() == Some(owner)
    });
}

/// Waits for the settled owner of each of `vips` and for the client to see it there
/// ([`client_sees`]); the owners, in the order of `vips`.
fn owners_seen(tb: &Testbed, vips: &[IpAddr]) -> Vec<String> {
    vips.iter()
        .map(|vip| {
            let owner = tb.wait_owner(*vip, T);
            client_sees(tb, *vip, &owner);
            owner
        })
        .collect()
}

/// The node the election must settle on for `vip` among `nodes` (all alive and ready).
fn successor(vip: IpAddr, nodes: &[String]) -> String {
    let names: Vec<&str> = nodes.iter().map(String::as_str).collect();
    rendezvous_owner(&vip.to_string(), &names)
}

/// The testbed's nodes without `gone`.
fn without(tb: &Testbed, gone: &str) -> Vec<String> {
    tb.nodes().into_iter().filter(|n| n != gone).collect()
}

/// Waits until nobody answers ARP/NDP for `gone` and no agent claims it, while in the same
/// look `control` is claimed and answered by `control_owner` alone: silence for `gone` then
/// means a withdrawal, not dead agents or a dead data plane (which would silence the control
/// VIP too).
fn nobody_answers_but_the_control(
    tb: &Testbed,
    gone: IpAddr,
    control: IpAddr,
    control_owner: &str,
) {
    let mac = tb.node_mac(control_owner);
    let end = std::time::Instant::now() + T;
    loop {
        let claims = tb.owners(gone);
        let control_claims = tb.owners(control);
        let gone_macs = tb.arp_macs(gone, Q);
        let control_macs = tb.arp_macs(control, Q);
        let control_node = tb.ask(control, Q);
        if claims.is_empty()
            && gone_macs.is_empty()
            && control_claims == [control_owner]
            && control_macs == vec![mac]
            && control_node.as_deref() == Some(control_owner)
        {
            return;
        }
        assert!(
            std::time::Instant::now() < end,
            "after {T:?}: {gone} still claimed by {claims:?} / answered by {gone_macs:02x?}, or \
             the control VIP {control} not claimed and answered by {control_owner} alone \
             (claimed by {control_claims:?}, ARP/NDP {control_macs:02x?}, traffic reached \
             {control_node:?})\n{}",
            tb.log_tails()
        );
        std::thread::sleep(Duration::from_millis(100));
    }
}

/// The control Service's VIPs (`vip4(k)`, `vip6(k)`): Service `control`, which must stay
/// answered while another Service's VIPs are withdrawn. Add it before the agents start.
async fn add_control_service(tb: &Testbed, k: u32) -> [IpAddr; 2] {
    let vips = [IpAddr::V4(vip4(k)), IpAddr::V6(vip6(k))];
    tb.add_service("control", &vips, false, &["node-a"]).await;
    vips
}

on_both_api_servers! {
async fn each_vip_is_answered_by_its_rendezvous_owner_alone(api) {
    let mut tb = testbed(api, "one", 3).await;
    let (v4, v6) = (IpAddr::V4(vip4(0)), IpAddr::V6(vip6(0)));
    tb.add_service("web", &[v4, v6], false, &["node-a"]).await;
    tb.start_agents(AGENT_ARGS);
    for vip in [v4, v6] {
        let owner = tb.wait_owner(vip, T);
        assert_eq!(
            owner,
            successor(vip, &tb.nodes()),
            "the rendezvous owner of {vip}"
        );
        client_sees(&tb, vip, &owner);
    }
    // Continuous traffic: every probe answered, and by the owner.
    let prober = tb.start_prober(&[v4, v6], Duration::from_millis(20));
    std::thread::sleep(Duration::from_millis(500));
    let timeline = prober.stop();
    for vip in [v4, v6] {
        let owner = tb.owners(vip);
        for kind in [ProbeKind::Udp, ProbeKind::Tcp] {
            assert!(
                timeline.answered(vip, kind) > 0,
                "no {kind:?} answer for {vip}"
            );
            assert_eq!(timeline.lost(vip, kind), 0, "{kind:?} probes of {vip} lost");
        }
        let answered: Vec<(u64, &str)> = timeline
            .of(vip, ProbeKind::Udp)
            .filter_map(|s| Some((s.seq, s.node.as_deref()?)))
            .collect();
        assert!(
            answered.iter().all(|(_, n)| owner == [*n]),
            "{vip}: UDP answers from another node than the owner {owner:?}: {answered:?}"
        );
    }
}
}

on_both_api_servers! {
async fn a_deleted_services_vips_are_answered_by_nobody_while_other_services_stay_answered(api) {
    let mut tb = testbed(api, "delete", 3).await;
    let (v4, v6) = (IpAddr::V4(vip4(7)), IpAddr::V6(vip6(7)));
    tb.add_service("web", &[v4, v6], false, &["node-a"]).await;
    let control = add_control_service(&tb, 8).await;
    tb.start_agents(AGENT_ARGS);
    owners_seen(&tb, &[v4, v6]);
    let control_owners = owners_seen(&tb, &control);

    tb.delete_service("web").await;
    for (gone, (c, o)) in [v4, v6]
        .into_iter()
        .zip(control.iter().zip(&control_owners))
    {
        nobody_answers_but_the_control(&tb, gone, *c, o);
    }
}
}

on_both_api_servers! {
/// The documented restart behaviour (`announcer::election::core`, "Restarts"; docs/cli.md: "if it
/// restarts within [the grace], clients notice nothing"): the pinned entries keep answering
/// while the agent is down, peers probe them, get answers and wait, and the restarted agent
/// picks them up. So the client loses no probe, every answer and every ARP/NDP answer comes
/// from the owner alone, and no other agent ever claims the VIP (a takeover and handback
/// would show in all three, a dark spell in the ARP/NDP answers).
async fn an_agent_restarted_within_its_grace_keeps_its_vips_without_losing_a_probe(api) {
    let mut tb = testbed(api, "restart", 3).await;
    let (v4, v6) = (IpAddr::V4(vip4(1)), IpAddr::V6(vip6(1)));
    tb.add_service("web", &[v4, v6], false, &["node-a"]).await;
    tb.start_agents(AGENT_ARGS);
    let owners: BTreeMap<IpAddr, String> =
        [v4, v6].into_iter().zip(owners_seen(&tb, &[v4, v6])).collect();
    let victim = owners[&v4].clone();
    let old = tb.incarnation(&victim).expect("incarnation");

    let prober = tb.start_prober(&[v4, v6], Duration::from_millis(10));
    std::thread::sleep(Duration::from_millis(300));
    let at = prober.mark(&format!("restart {victim}"));
    let restarted = Instant::now();
    tb.kill_agent(&victim);
    tb.restart_agent(&victim);
    // Watch every agent's claims and who answers ARP/NDP (the client's probes alone would not
    // see a dark spell: it keeps sending to the MAC it has cached) past the grace (5 s), so
    // that a takeover when the old entries would have expired shows too, and until the
    // restarted agent owns its VIPs again.
    let macs: BTreeMap<IpAddr, [u8; 6]> =
        owners.iter().map(|(v, o)| (*v, tb.node_mac(o))).collect();
    let vips: Vec<IpAddr> = owners.keys().copied().collect();
    let mut claims = Vec::new();
    let mut back = false;
    while restarted.elapsed() < GRACE + Duration::from_secs(2) || !back {
        assert!(
            restarted.elapsed() < T,
            "{victim} did not come back owning {v4} within {T:?}\n{}",
            tb.log_tails()
        );
        let when = restarted.elapsed().as_secs_f64();
        for (vip, answered) in tb.resolve_all(&vips, ROUND) {
            if answered != [macs[&vip]] {
                claims.push(format!(
                    "+{when:.1}s ARP/NDP for {vip} answered by {:?} (owner {})",
                    tb.names_of_macs(&answered),
                    owners[&vip]
                ));
            }
        }
        for (node, owned) in tb.ownership() {
            for (vip, o) in &owners {
                if owned.contains(vip) && node != *o {
                    claims.push(format!("+{when:.1}s {node} claims {vip} (owner {o})"));
                }
            }
        }
        back = tb.state(&victim).is_some_and(|s| {
            s["ready"] == true
                && s["incarnation"].as_u64().is_some_and(|i| i != old)
                && owned_vips(&s).contains(&v4)
        });
    }
    let timeline = prober.stop();
    assert!(
        claims.is_empty(),
        "while {victim}'s agent restarted, another agent claimed its VIPs or they were not \
         answered by their owner alone:\n{}\n{}",
        claims.join("\n"),
        tb.log_tails()
    );
    for (vip, owner) in &owners {
        for kind in [ProbeKind::Udp, ProbeKind::Tcp] {
            assert!(
                timeline.answered(*vip, kind) > 0,
                "no {kind:?} answer for {vip}"
            );
            assert_eq!(
                timeline.lost(*vip, kind),
                0,
                "{kind:?} probes of {vip} lost over {victim}'s restart: {:?}",
                timeline.outage(*vip, kind, at)
            );
        }
        let others = timeline.udp_answered_by_others(*vip, owner);
        assert!(
            others.is_empty(),
            "{vip}: answered by another node than its owner {owner} over {victim}'s restart: \
             {others:?}"
        );
    }
}
}

on_both_api_servers! {
async fn a_crashed_nodes_vips_move_to_their_rendezvous_successors(api) {
    let mut tb = testbed(api, "crash", 3).await;
    let (v4, v6) = (IpAddr::V4(vip4(9)), IpAddr::V6(vip6(9)));
    tb.add_service("web", &[v4, v6], false, &["node-a"]).await;
    tb.start_agents(AGENT_ARGS);
    let [owner, owner6]: [String; 2] = owners_seen(&tb, &[v4, v6]).try_into().expect("two");

    // Crash (link down + SIGKILL): the VIPs move to the rendezvous successor among the rest.
    tb.crash(&owner);
    let alive = without(&tb, &owner);
    for vip in [v4, v6] {
        let want = if vip == v6 && owner6 != owner {
            owner6.clone()
        } else {
            successor(vip, &alive)
        };
        let o = tb.wait_owner(vip, T);
        assert_eq!(o, want, "owner of {vip} after {owner} crashed");
        client_sees(&tb, vip, &o);
    }
}
}

on_both_api_servers! {
async fn sigterm_hands_over_to_the_successor_without_losing_a_probe(api) {
    let mut tb = testbed(api, "term", 3).await;
    let (v4, v6) = (IpAddr::V4(vip4(2)), IpAddr::V6(vip6(2)));
    tb.add_service("web", &[v4, v6], false, &["node-a"]).await;
    tb.start_agents(AGENT_ARGS);
    let [owner, owner6]: [String; 2] = owners_seen(&tb, &[v4, v6]).try_into().expect("two");

    let prober = tb.start_prober(&[v4, v6], Duration::from_millis(10));
    std::thread::sleep(Duration::from_millis(300));
    let at = prober.mark(&format!("SIGTERM {owner}"));
    tb.term_agent(&owner);
    let code = tb.wait_agent_exit(&owner, T);
    assert_eq!(
        code,
        Some(0),
        "{owner}'s agent exit\n{}",
        tb.agent_log_tail(&owner)
    );
    let alive = without(&tb, &owner);
    let want4 = successor(v4, &alive);
    let want6 = if owner6 == owner {
        successor(v6, &alive)
    } else {
        owner6.clone()
    };
    assert_eq!(tb.wait_owner(v4, T), want4);
    assert_eq!(tb.wait_owner(v6, T), want6);
    client_sees(&tb, v4, &want4);
    client_sees(&tb, v6, &want6);
    std::thread::sleep(Duration::from_millis(300));
    let timeline = prober.stop();
    for (vip, want) in [(v4, &want4), (v6, &want6)] {
        for kind in [ProbeKind::Udp, ProbeKind::Tcp] {
            assert_eq!(
                timeline.lost(vip, kind),
                0,
                "{kind:?} probes of {vip} lost over a SIGTERM handover: {:?}",
                timeline.outage(vip, kind, at)
            );
        }
        let outage = timeline.outage(vip, ProbeKind::Udp, at);
        assert_eq!(outage.after.as_ref(), Some(want), "{vip}: {outage:?}");
    }
}
}

on_both_api_servers! {
async fn etp_local_vips_follow_their_endpoint(api) {
    let mut tb = testbed(api, "etp", 3).await;
    let (v4, v6) = (IpAddr::V4(vip4(3)), IpAddr::V6(vip6(3)));
    tb.add_service("local", &[v4, v6], true, &["node-b"]).await;
    tb.start_agents(AGENT_ARGS);
    for (vip, o) in [v4, v6].into_iter().zip(owners_seen(&tb, &[v4, v6])) {
        assert_eq!(o, "node-b", "{vip} on the endpoint's node");
    }
    tb.set_endpoints("local", &["node-c"]).await;
    for (vip, o) in [v4, v6].into_iter().zip(owners_seen(&tb, &[v4, v6])) {
        assert_eq!(o, "node-c", "{vip} follows the endpoint");
    }
}
}

on_both_api_servers! {
async fn etp_local_vips_without_an_endpoint_are_answered_by_nobody(api) {
    let mut tb = testbed(api, "etp-none", 3).await;
    let (v4, v6) = (IpAddr::V4(vip4(10)), IpAddr::V6(vip6(10)));
    tb.add_service("local", &[v4, v6], true, &["node-b"]).await;
    let control = add_control_service(&tb, 11).await;
    tb.start_agents(AGENT_ARGS);
    for (vip, o) in [v4, v6].into_iter().zip(owners_seen(&tb, &[v4, v6])) {
        assert_eq!(o, "node-b", "{vip} on the endpoint's node");
    }
    let control_owners = owners_seen(&tb, &control);
    // No endpoint anywhere: nobody may attract the traffic.
    tb.set_endpoints("local", &[]).await;
    for (gone, (c, o)) in [v4, v6]
        .into_iter()
        .zip(control.iter().zip(&control_owners))
    {
        nobody_answers_but_the_control(&tb, gone, *c, o);
    }
}
}

/// How long the partition tests cut the owner from its successor.
const CUT: Duration = Duration::from_secs(7);
/// `docs/safety.md`, "Heartbeats lost between two nodes only": one owner within a Lease
/// renewal period plus 0.4 s of the cut (3.4 s), plus 1.1 s for the watches and the testbed's
/// shared cores.
const ONE_OWNER_AFTER: Duration = Duration::from_millis(4500);
/// The longest the client may go without an answer from the VIP during a partition
/// (the simulator's bound for a dark VIP, invariant 9).
const DARK_BOUND: Duration = Duration::from_secs(1);

on_both_api_servers! {
/// During the cut the VIP stays answered and, after the documented bound, has one owner; after
/// the heal, exactly one owner, the rendezvous one.
async fn a_partition_heals_to_exactly_one_owner(api) {
    let mut tb = testbed(api, "part", 3).await;
    let v4 = IpAddr::V4(vip4(4));
    tb.add_service("web", &[v4], false, &["node-a"]).await;
    tb.start_agents(AGENT_ARGS);
    let owner = tb.wait_owner(v4, T);
    client_sees(&tb, v4, &owner);
    // Cut the owner from the node that would take over from it: that node stops hearing the
    // owner's heartbeats (both still reach the client, the third node and the API server).
    let next = successor(v4, &without(&tb, &owner));
    tb.partition(&owner, &next);
    let cut = Instant::now();
    let third = tb
        .nodes()
        .into_iter()
        .find(|n| *n != owner && *n != next)
        .expect("a third node");
    assert!(!tb.reachable(&owner, &next, Q), "{owner} -> {next} cut");
    assert!(tb.reachable(&owner, &third, Q), "{owner} -> {third} kept");
    assert!(tb.reachable(&next, &third, Q), "{next} -> {third} kept");
    // During the cut, what `docs/safety.md` ("Heartbeats lost between two nodes only")
    // promises: the VIP stays answered throughout (the owner keeps it, the successor may take
    // it beside it), and from `ONE_OWNER_AFTER` on, only the owner holds it (the successor saw
    // the owner alive by its Lease renewals and handed it back).
    let mut dark: Vec<String> = Vec::new();
    let mut two_owners: Vec<String> = Vec::new();
    let mut last_answer = cut;
    while cut.elapsed() < CUT {
        let at = cut.elapsed();
        if tb.ask(v4, Q).is_some() {
            last_answer = Instant::now();
        } else if last_answer.elapsed() > DARK_BOUND {
            dark.push(format!("+{:.1}s", at.as_secs_f64()));
        }
        if at >= ONE_OWNER_AFTER {
            let owners = tb.owners(v4);
            if owners != vec![owner.clone()] {
                two_owners.push(format!("+{:.1}s: {owners:?}", at.as_secs_f64()));
            }
        }
        std::thread::sleep(Duration::from_millis(100));
    }
    tb.heal(&owner, &next);
    assert!(
        dark.is_empty(),
        "{v4} unanswered for more than {DARK_BOUND:?} during the cut (at {dark:?})\n{}",
        tb.log_tails()
    );
    assert!(
        two_owners.is_empty(),
        "{v4} not held by {owner} alone {ONE_OWNER_AFTER:?} after the cut from {next}: {two_owners:?}\n{}",
        tb.log_tails()
    );
    // The owner's neighbour entry for `next` may be mid-way through its unicast probes (one a
    // second, RFC 4861 §7.3.3 and its ARP equivalent), so give resolution a few seconds.
    assert!(
        tb.reachable(&owner, &next, Duration::from_secs(10)),
        "{owner} -> {next} healed"
    );
    let o = tb.wait_owner(v4, T);
    assert_eq!(
        o,
        successor(v4, &tb.nodes()),
        "owner after the partition healed"
    );
    client_sees(&tb, v4, &o);
}
}

on_both_api_servers! {
/// `docs/safety.md`, "Heartbeats lost between two nodes only", and the core's partition rule:
/// cut from the owner, its successor takes the VIP over (a silent owner whose probe goes
/// unanswered) while the owner, still heard by the third node and the API, keeps it: both
/// answer. The successor then finds the owner alive (by its Lease renewals, or by its
/// heartbeats resuming with the same incarnation after the heal), hands the VIP back and
/// counts the overlap: `announcer_partition_overlaps_total` goes to 1 on the successor, and it
/// raises an `Overlap` Warning. The owner and the third node took nothing, so count nothing.
async fn a_partition_between_the_owner_and_its_successor_is_counted_once_by_the_successor(api) {
    let mut tb = testbed(api, "overlap", 3).await;
    let v4 = IpAddr::V4(vip4(6));
    tb.add_service("web", &[v4], false, &["node-a"]).await;
    tb.start_agents(AGENT_ARGS);
    let owner = tb.wait_owner(v4, T);
    client_sees(&tb, v4, &owner);
    let next = successor(v4, &without(&tb, &owner));
    let nodes = tb.nodes();
    for n in &nodes {
        assert_eq!(
            tb.metric(n, OVERLAPS),
            Some(0.0),
            "{n} counts no overlap before the partition"
        );
    }
    let took = tb.metric(&next, TAKEOVERS).expect("takeovers");

    tb.partition(&owner, &next);
    let cut = Instant::now();
    // Both answer: the successor takes the VIP over (its takeover counter moves), while the
    // owner never lets it go (it still reaches the API and the third node).
    let mut dropped = Vec::new();
    tb.wait_for(
        &format!("{next} takes {v4} over, cut from {owner}"),
        T,
        |tb| {
            if tb
                .state(&owner)
                .is_some_and(|s| !owned_vips(&s).contains(&v4))
            {
                dropped.push(cut.elapsed());
            }
            tb.metric(&next, TAKEOVERS).is_some_and(|t| t > took)
        },
    );
    // Keep the cut for 5 s in all, as the failover bench's partition does.
    while cut.elapsed() < Duration::from_secs(5) {
        if tb
            .state(&owner)
            .is_some_and(|s| !owned_vips(&s).contains(&v4))
        {
            dropped.push(cut.elapsed());
        }
        std::thread::sleep(Duration::from_millis(100));
    }
    assert!(
        dropped.is_empty(),
        "{owner} let {v4} go while cut from {next} only (at {dropped:?})\n{}",
        tb.log_tails()
    );
    tb.heal(&owner, &next);
    assert!(
        tb.reachable(&owner, &next, Duration::from_secs(10)),
        "{owner} -> {next} healed"
    );
    assert_eq!(tb.wait_owner(v4, T), owner, "owner after the heal");

    tb.wait_for(&format!("{next} counts the overlap"), T, |tb| {
        tb.metric(&next, OVERLAPS) == Some(1.0)
    });
    let note = format!("{owner} and {next} both answered {v4}");
    let e = tb
        .wait_for_event(&format!("Overlap from {next}: {note}"), T, |e| {
            e.reason.as_deref() == Some("Overlap")
                && e.note.as_deref().is_some_and(|n| n.starts_with(&note))
        })
        .await;
    assert_eq!(e.type_.as_deref(), Some("Warning"), "{e:?}");
    assert_eq!(
        e.reporting_instance.as_deref(),
        Some(next.as_str()),
        "{e:?}"
    );
    assert_eq!(
        e.regarding.as_ref().and_then(|r| r.name.as_deref()),
        Some("web"),
        "{e:?}"
    );
    // Counted once, and only where the VIP was taken: still so a while after the heal.
    std::thread::sleep(Duration::from_secs(2));
    let counts: BTreeMap<&str, Option<f64>> = nodes
        .iter()
        .map(|n| (n.as_str(), tb.metric(n, OVERLAPS)))
        .collect();
    let want: BTreeMap<&str, Option<f64>> = nodes
        .iter()
        .map(|n| (n.as_str(), Some(if *n == next { 1.0 } else { 0.0 })))
        .collect();
    assert_eq!(counts, want, "{OVERLAPS} per node\n{}", tb.log_tails());
    let overlaps: Vec<_> = tb
        .events()
        .await
        .into_iter()
        .filter(|e| e.reason.as_deref() == Some("Overlap"))
        .map(|e| (e.reporting_instance, e.note))
        .collect();
    assert_eq!(overlaps.len(), 1, "one Overlap Event: {overlaps:?}");
}
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn native_xdp_answers_too() {
    let mut tb = Testbed::start(TestbedConfig {
        nodes: 2,
        native_xdp: true,
        tag: "native".into(),
        ..Default::default()
    })
    .await;
    let (v4, v6) = (IpAddr::V4(vip4(5)), IpAddr::V6(vip6(5)));
    tb.add_service("web", &[v4, v6], false, &["node-a"]).await;
    tb.start_agents(AGENT_ARGS);
    owners_seen(&tb, &[v4, v6]);
}

/// Issue 25, finding 5, with real agents: a node announces one VIP on `eth0` and one on
/// `eth1`, both eTP Local with their only endpoint there (no other node may announce them).
/// `eth1` goes down: the VIP on `eth0` keeps being answered, by that node, the whole time (one
/// interface down used to withdraw every VIP of the node until the agent restarted, and with
/// no other node able to announce it, darken it).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn one_nic_going_down_leaves_the_vips_on_the_other_answered() {
    let mut tb = testbed(ApiKind::InRepo, "nic-down", 3).await;
    tb.add_second_nic();
    let on_eth0 = IpAddr::V4(vip4(70));
    let on_eth1 = IpAddr::V4(nic2_vip4(70));
    tb.add_service("local-0", &[on_eth0], true, &["node-b"])
        .await;
    tb.add_service("local-1", &[on_eth1], true, &["node-b"])
        .await;
    tb.start_agents(AGENT_ARGS);
    for vip in [on_eth0, on_eth1] {
        assert_eq!(
            tb.wait_owner(vip, T),
            "node-b",
            "{vip} on its endpoint's node"
        );
    }
    client_sees(&tb, on_eth0, "node-b");
    tb.node_ns("node-b")
        .ip(&["link", "set", "dev", "eth1", "down"]);
    let down = Instant::now();
    let mut missed = Vec::new();
    while down.elapsed() < Duration::from_secs(10) {
        let at = down.elapsed();
        // ARP, not traffic: the client's neighbour cache would carry traffic to node-b for a
        // while after node-b stopped answering.
        let answering = tb.arp_nodes(on_eth0, Q);
        if answering != ["node-b"] {
            missed.push(format!("+{:.1}s {answering:?}", at.as_secs_f64()));
        }
        std::thread::sleep(Duration::from_millis(200));
    }
    assert!(
        missed.is_empty(),
        "{on_eth0} (on node-b's eth0) not answered (ARP) by node-b alone after its eth1 went down, at {missed:?}\n/state: {:?}\n{}",
        tb.ownership(),
        tb.log_tails()
    );
    assert_eq!(
        tb.owners(on_eth0),
        vec!["node-b".to_owned()],
        "{on_eth0} still owned by node-b"
    );
}
