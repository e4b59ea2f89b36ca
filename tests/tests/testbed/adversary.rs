//! End to end against a hostile or unusual LAN: a node with a wrong wall clock, a host forging
//! ARP/NDP answers, a flood of every frame type the agents listen to, VIPs on a second NIC, a
//! SIGTERM with no successor. Each test reproduces one defect found by attacking real agents
//! on the namespace testbed (real agent processes, real XDP data plane, in-repo API server).
//!
//! Correctness only: the bounds are generous for a loaded 2-core machine and still tight
//! enough to catch the defect (a normal crash failover is ~0.4 s; a bound of 2 s catches one
//! of over 5 s). Speed targets belong in the benches. Needs root; never skips. What the client
//! sees is asked with raw ARP/NDP ([`Testbed::resolve_all`]): every MAC that answers, in a
//! window, for all VIPs at once.

use std::{
    collections::BTreeMap,
    net::IpAddr,
    time::{Duration, Instant},
};

use announcer_tests::{
    env::cluster::rendezvous_owner,
    env::lan::{
        Answers, FloodKind, ProbeKind, Testbed, TestbedConfig, nic2_vip4, nic2_vip6, vip4, vip6,
    },
    netns::fmt_mac,
};

/// Generous bound for anything the agents have to do.
const T: Duration = Duration::from_secs(30);
/// One raw ARP/NDP round: requests at 0, 1/3 and 2/3 of it, every answer collected.
const ROUND: Duration = Duration::from_millis(600);

async fn testbed(tag: &str, nodes: usize) -> Testbed {
    Testbed::start(TestbedConfig {
        nodes,
        native_xdp: false,
        tag: tag.into(),
        ..Default::default()
    })
    .await
}

/// The node the election settles on for `vip` among all of the testbed's nodes.
fn rendezvous(tb: &Testbed, vip: IpAddr) -> String {
    let nodes = tb.nodes();
    let names: Vec<&str> = nodes.iter().map(String::as_str).collect();
    rendezvous_owner(&vip.to_string(), &names)
}

/// An IPv6 VIP (from `vip6(from..)`, or `nic2_vip6` when `nic2`) with the same rendezvous
/// owner as `v4`, so one node's fault covers both families.
fn v6_with_owner_of(tb: &Testbed, v4: IpAddr, from: u32, nic2: bool) -> IpAddr {
    let want = rendezvous(tb, v4);
    (from..from + 200)
        .map(|k| {
            if nic2 {
                IpAddr::V6(nic2_vip6(k))
            } else {
                IpAddr::V6(vip6(k))
            }
        })
        .find(|v| rendezvous(tb, *v) == want)
        .expect("an IPv6 VIP with the same owner")
}

/// "vip: node-a, node-b" for every VIP of a resolve round.
fn describe(tb: &Testbed, r: &Answers) -> String {
    r.iter()
        .map(|(v, macs)| format!("{v}: [{}]", tb.names_of_macs(macs).join(", ")))
        .collect::<Vec<_>>()
        .join("; ")
}

/// Waits until the client sees exactly `want[vip]` answer for every VIP.
fn wait_client_sees(tb: &Testbed, want: &BTreeMap<IpAddr, [u8; 6]>) {
    let vips: Vec<IpAddr> = want.keys().copied().collect();
    let end = Instant::now() + T;
    loop {
        let r = tb.resolve_all(&vips, ROUND);
        if want.iter().all(|(v, m)| r[v] == vec![*m]) {
            return;
        }
        if Instant::now() >= end {
            panic!(
                "the client never saw {:?}; last: {}\n{}",
                want.iter()
                    .map(|(v, m)| format!("{v} at {}", fmt_mac(*m)))
                    .collect::<Vec<_>>(),
                describe(tb, &r),
                tb.log_tails()
            );
        }
    }
}

/// Rounds of [`Testbed::resolve_all`] for `dur`: (offset from the start, answers).
fn watch(tb: &Testbed, vips: &[IpAddr], dur: Duration) -> Vec<(Duration, Answers)> {
    let start = Instant::now();
    let mut rounds = Vec::new();
    while start.elapsed() < dur {
        let at = start.elapsed();
        rounds.push((at, tb.resolve_all(vips, ROUND)));
    }
    rounds
}

/// One Service with `v4` and `v6`, the agents started; returns their owner once both have the
/// rendezvous owner.
async fn serve(tb: &mut Testbed, v4: IpAddr, v6: IpAddr) -> String {
    let owner = rendezvous(tb, v4);
    tb.add_service("web", &[v4, v6], false, &["node-a"]).await;
    tb.start_agents(&[]);
    for vip in [v4, v6] {
        assert_eq!(
            tb.wait_owner(vip, T),
            owner,
            "the rendezvous owner of {vip}"
        );
    }
    owner
}

/// The documented isolation bound (docs/safety.md, "A node that cannot hear, or be heard by,
/// its peers"): one owner per VIP within 5.3 s of the fault.
const ISOLATION_BOUND: Duration = Duration::from_millis(5_300);
/// How soon a node whose clock was corrected is heard again and answers its VIPs, from the
/// restart of its agent (docs/safety.md, "Incarnations"): the agent's start and warm-up, its
/// Lease seen by the peers, then heartbeats both ways for the 1 s rejoin hold.
const REJOIN_BOUND: Duration = Duration::from_secs(15);
/// "Far ahead": far beyond the 5 s skew window, and long enough that an incarnation counted
/// from the skewed clock is still in the future when the clock is corrected (the lock-out of
/// issue 25, finding 7, lasted until the real clock caught up with it).
const CLOCK_AHEAD_S: u64 = 120;

/// Whether every VIP got exactly one MAC in a round.
fn one_mac_each(r: &Answers) -> bool {
    r.values().all(|m| m.len() == 1)
}

/// What `node`'s `/state` says of `peer`: alive by heartbeats?
fn hears(tb: &Testbed, node: &str, peer: &str) -> bool {
    tb.state(node).is_some_and(|s| {
        s["peers"]
            .as_array()
            .into_iter()
            .flatten()
            .any(|p| p["node"].as_str() == Some(peer) && p["alive"].as_bool() == Some(true))
    })
}

/// Whether `node`'s agent says it has stepped back.
fn standby(tb: &Testbed, node: &str) -> Option<bool> {
    tb.state(node)?["standby"].as_bool()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn clock_far_ahead_isolates_its_node_within_the_bound_and_correcting_it_brings_it_back() {
    let mut tb = testbed("clock", 3).await;
    let mut vips = Vec::new();
    // Three Services, and a fourth if needed so that node-a is the rendezvous owner of one:
    // that VIP must come back to it once its clock is corrected.
    let mut k = 20;
    while vips.len() < 6 || !vips.iter().any(|v| rendezvous(&tb, *v) == "node-a") {
        let pair = [IpAddr::V4(vip4(k)), IpAddr::V6(vip6(k))];
        tb.add_service(&format!("web-{k}"), &pair, false, &["node-a"])
            .await;
        vips.extend(pair);
        k += 1;
    }
    let mine: Vec<IpAddr> = vips
        .iter()
        .copied()
        .filter(|v| rendezvous(&tb, *v) == "node-a")
        .collect();
    tb.set_clock_offset("node-a", Some(&format!("+{CLOCK_AHEAD_S}s")));
    tb.start_agents(&[]);
    // The offset must really reach the agent's SystemTime::now(): node-a's log lines are
    // stamped ahead of the real time they were written at (and node-b's are not).
    tb.wait_clock_offset_effective("node-a", CLOCK_AHEAD_S as f64, T);
    tb.wait_clock_offset_effective("node-b", 0.0, T);

    // The fault counts from when every agent runs its election (all ready): from then on
    // node-a hears nobody and nobody hears it.
    let end = Instant::now() + T;
    while !tb.all_ready() {
        assert!(
            Instant::now() < end,
            "agents not ready:\n{}",
            tb.log_tails()
        );
        std::thread::sleep(Duration::from_millis(50));
    }
    let fault = Instant::now();
    let mut settled = None;
    while fault.elapsed() <= ISOLATION_BOUND {
        let began = fault.elapsed();
        let r = tb.resolve_all(&vips, ROUND);
        if one_mac_each(&r) && standby(&tb, "node-a") == Some(true) {
            settled = Some(began);
            break;
        }
    }
    assert!(
        settled.is_some(),
        "with node-a's wall clock {CLOCK_AHEAD_S} s ahead, no ARP/NDP round begun within the \
         documented {ISOLATION_BOUND:?} of all agents being ready saw one MAC per VIP with node-a \
         stepped back (node-a standby: {:?}); /state: {:?}\n{}",
        standby(&tb, "node-a"),
        tb.ownership(),
        tb.log_tails()
    );
    eprintln!(
        "isolated and one owner per VIP {:?} after all agents were ready",
        settled
    );
    let rounds = watch(&tb, &vips, Duration::from_secs(10));
    let bad: Vec<String> = rounds
        .iter()
        .filter(|(_, r)| !one_mac_each(r))
        .map(|(at, r)| format!("+{:.1}s {}", at.as_secs_f64(), describe(&tb, r)))
        .collect();
    assert!(
        bad.is_empty(),
        "with node-a's wall clock {CLOCK_AHEAD_S} s ahead, {} of {} ARP/NDP rounds in the 10 s \
         after it stepped back did not get exactly one MAC per VIP (the first ones):\n{}\n\
         /state: {:?}\n{}",
        bad.len(),
        rounds.len(),
        bad[..bad.len().min(3)].join("\n"),
        tb.ownership(),
        tb.log_tails()
    );

    // NTP corrects node-a's clock; its agent restarts (what the kubelet does after a crash or
    // an upgrade). Its stored incarnation was counted from the skewed clock and is still far
    // in the future: that must not keep it unheard.
    tb.set_clock_offset("node-a", None);
    tb.restart_agent("node-a");
    let restarted = Instant::now();
    tb.wait_clock_offset_effective("node-a", 0.0, T);
    let mac = tb.node_mac("node-a");
    let back = loop {
        let heard = ["node-b", "node-c"].iter().all(|p| hears(&tb, p, "node-a"))
            && ["node-b", "node-c"].iter().all(|p| hears(&tb, "node-a", p))
            && standby(&tb, "node-a") == Some(false);
        if heard {
            let r = tb.resolve_all(&mine, ROUND);
            if mine.iter().all(|v| r[v] == vec![mac]) {
                break Some(restarted.elapsed());
            }
        }
        if restarted.elapsed() > REJOIN_BOUND {
            break None;
        }
        std::thread::sleep(Duration::from_millis(100));
    };
    assert!(
        back.is_some(),
        "{REJOIN_BOUND:?} after node-a's clock was corrected and its agent restarted, node-a is \
         not heard again with its VIPs {mine:?} (node-b hears it: {}, node-c hears it: {}, \
         node-a standby: {:?}, incarnation {:?}); node-b's rejections: {:?}\n{}",
        hears(&tb, "node-b", "node-a"),
        hears(&tb, "node-c", "node-a"),
        standby(&tb, "node-a"),
        tb.incarnation("node-a"),
        tb.metrics("node-b").map(|m| m
            .lines()
            .filter(|l| l.contains("rejected_from") && l.contains("node-a"))
            .map(str::to_owned)
            .collect::<Vec<_>>()),
        tb.log_tails()
    );
    eprintln!("node-a heard again with its VIPs {back:?} after its restart");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn spoofed_arp_replies_do_not_delay_crash_failover() {
    let mut tb = testbed("spoof", 3).await;
    tb.add_hostile_host();
    let v4 = IpAddr::V4(vip4(30));
    let v6 = v6_with_owner_of(&tb, v4, 30, false);
    let owner = serve(&mut tb, v4, v6).await;
    let mac = tb.node_mac(&owner);
    wait_client_sees(&tb, &BTreeMap::from([(v4, mac), (v6, mac)]));

    // "VIP is-at <the owner's MAC>" to every node, every 20 ms, from before the crash on.
    let spoofer = tb.start_spoofing(
        &[(v4, mac), (v6, mac)],
        Duration::from_millis(20),
        Duration::from_secs(60),
    );
    std::thread::sleep(Duration::from_millis(500));
    let prober = tb.start_prober(&[v4, v6], Duration::from_millis(10));
    std::thread::sleep(Duration::from_millis(500));
    let at = prober.mark(&format!("crash {owner}"));
    tb.crash(&owner);
    let crashed = Instant::now();
    // Until both VIPs have a new owner (at most 20 s), then 2 s more so the client's recovery
    // is in the timeline: the failure message then tells how long the takeover really took.
    let mut taken = None;
    while crashed.elapsed() < Duration::from_secs(20) {
        if [v4, v6].iter().all(|v| !tb.owners(*v).is_empty()) {
            taken = Some(crashed.elapsed());
            break;
        }
        std::thread::sleep(Duration::from_millis(50));
    }
    std::thread::sleep(Duration::from_secs(2));
    let timeline = prober.stop();
    eprintln!("both VIPs claimed again (agents' /state) {taken:?} after the crash");
    let spoofed = spoofer.stop();
    let mut failures = Vec::new();
    for vip in [v4, v6] {
        let o = timeline.outage(vip, ProbeKind::Udp, at);
        let gap = o.recovered_at.map(|r| r.saturating_sub(at));
        eprintln!(
            "{vip}: recovered after {gap:?} (lost {}, before {:?}, after {:?}); {spoofed} \
             forged answers sent",
            o.lost, o.before, o.after
        );
        match gap {
            Some(g) if g <= Duration::from_secs(2) && o.after.as_deref() != Some(&owner) => {}
            _ => failures.push(format!(
                "{vip}: the client's probes were answered again after {gap:?} (bound 2 s; \
                 normal failover ~0.4 s): {o:?}"
            )),
        }
    }
    assert!(
        failures.is_empty(),
        "forged answers for the crashed {owner}'s MAC delayed the failover:\n{}\n/state: {:?}\n{}",
        failures.join("\n"),
        tb.ownership(),
        tb.log_tails()
    );
}

/// The longest an agent's `/state` may go unanswered during the flood (reads time out after
/// 2 s; a read every 100 ms in between): an agent whose loop the flood starves longer than
/// this is wedged for its users (`announcer status`, the probes), whatever its VIPs.
const SILENT_BOUND: Duration = Duration::from_secs(3);

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn flood_from_client_namespace_moves_no_vip() {
    let mut tb = testbed("flood", 3).await;
    // The flood comes from a host on the client's segment (the hostile host, a namespace like
    // the client's on the same bridge).
    tb.add_hostile_host();
    let mut vips = Vec::new();
    for k in 0..3 {
        let pair = [IpAddr::V4(vip4(40 + k)), IpAddr::V6(vip6(40 + k))];
        tb.add_service(&format!("web-{k}"), &pair, false, &["node-a"])
            .await;
        vips.extend(pair);
    }
    tb.start_agents(&[]);
    let before: BTreeMap<IpAddr, String> =
        vips.iter().map(|v| (*v, tb.wait_owner(*v, T))).collect();

    let prober = tb.start_prober(&vips, Duration::from_millis(20));
    std::thread::sleep(Duration::from_millis(500));
    let at = prober.mark("flood");
    // 7 kinds x 0.7 s: about 5 s of flood in all.
    let flood = tb.spawn_floods(&FloodKind::ALL, &vips, Duration::from_millis(700));
    let mut moved = Vec::new();
    let mut silent = 0u32;
    let mut samples = 0u32;
    // Per node: when its /state last answered, and the longest it went unanswered. A node
    // that does not answer is checked at its next answer (its ownership then must not have
    // moved either), and it may not stay silent longer than `SILENT_BOUND`: an agent the
    // flood wedges (its loop starved, its HTTP server unanswered) fails the test even if it
    // comes back with the same VIPs.
    let start = Instant::now();
    let mut last_ok: BTreeMap<String, Instant> =
        tb.nodes().into_iter().map(|n| (n, start)).collect();
    let mut longest: BTreeMap<String, Duration> = BTreeMap::new();
    let mut check = |tb: &Testbed, moved: &mut Vec<String>, silent: &mut u32, when: &str| {
        let own = tb.ownership();
        let now = Instant::now();
        for node in tb.nodes() {
            match own.get(&node) {
                Some(_) => {
                    last_ok.insert(node, now);
                }
                None => {
                    *silent += 1;
                    let span = now - last_ok[&node];
                    let l = longest.entry(node).or_default();
                    *l = (*l).max(span);
                }
            }
        }
        for (node, owned) in &own {
            for v in &vips {
                let should = before[v] == *node;
                if owned.contains(v) != should {
                    moved.push(format!(
                        "{when}: {node} {} {v} (owner before: {})",
                        if should { "dropped" } else { "claims" },
                        before[v]
                    ));
                }
            }
        }
    };
    while !flood.is_finished() {
        let when = format!("+{:.1}s", (prober.now() - at).as_secs_f64());
        check(&tb, &mut moved, &mut silent, &when);
        samples += 1;
        std::thread::sleep(Duration::from_millis(100));
    }
    let stats = flood.join().expect("flood thread");
    std::thread::sleep(Duration::from_secs(2));
    let timeline = prober.stop();
    for (v, o) in &before {
        assert_eq!(
            tb.wait_owner(*v, T),
            *o,
            "owner of {v} after the flood\n{}",
            tb.log_tails()
        );
    }
    check(&tb, &mut moved, &mut silent, "after");
    for s in &stats {
        eprintln!(
            "flood {:?}: {} frames in {:.2} s ({:.0}/s), {} send errors",
            s.kind,
            s.frames,
            s.elapsed.as_secs_f64(),
            s.rate(),
            s.errors
        );
    }
    let mut loss = Vec::new();
    for v in &vips {
        for kind in [ProbeKind::Udp, ProbeKind::Tcp] {
            let (lost, answered) = (timeline.lost(*v, kind), timeline.answered(*v, kind));
            let pct = 100.0 * f64::from(lost) / f64::from((lost + answered).max(1));
            eprintln!(
                "{v} {kind:?}: {lost} lost of {}, {pct:.2}%",
                lost + answered
            );
            loss.push((*v, kind, lost, answered, pct));
        }
    }
    eprintln!(
        "{samples} /state samples during the flood, {silent} unanswered /state reads; longest unanswered per node: {longest:?}"
    );
    let wedged: Vec<_> = longest.iter().filter(|(_, d)| **d > SILENT_BOUND).collect();
    assert!(
        wedged.is_empty(),
        "agents whose /state went unanswered for more than {SILENT_BOUND:?} during the flood: {wedged:?}\n{}",
        tb.log_tails()
    );
    for node in tb.nodes() {
        assert!(
            tb.agent_pid(&node).is_some() && tb.state(&node).is_some(),
            "{node}'s agent did not survive the flood\n{}",
            tb.agent_log_tail(&node)
        );
    }
    assert!(
        moved.is_empty(),
        "the flood moved VIPs:\n{}\n{}",
        moved.join("\n"),
        tb.log_tails()
    );
    let too_lossy: Vec<_> = loss.iter().filter(|l| l.4 > 5.0).collect();
    assert!(
        too_lossy.is_empty(),
        "the client lost more than 5% of its probes during the flood: {too_lossy:?}"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn vip_on_second_nic_is_probed_at_its_own_mac() {
    let mut tb = testbed("nic2", 3).await;
    tb.add_second_nic();
    let v4 = IpAddr::V4(nic2_vip4(1));
    let v6 = v6_with_owner_of(&tb, v4, 1, true);
    let owner = serve(&mut tb, v4, v6).await;
    // Announced on eth1 with eth1's MAC (not eth0's).
    let mac2 = tb.node_mac2(&owner);
    wait_client_sees(&tb, &BTreeMap::from([(v4, mac2), (v6, mac2)]));

    // Only the agent dies: the data plane keeps answering from the pinned map for its grace,
    // so a successor that probes the right MAC hears it and must not take over.
    tb.kill_agent(&owner);
    let killed = Instant::now();
    let rounds = watch(&tb, &[v4, v6], Duration::from_secs(3));
    let claims: BTreeMap<String, Vec<IpAddr>> = tb.ownership();
    eprintln!(
        "after SIGKILL of {owner}: {} rounds in {:.1} s; /state now {claims:?}",
        rounds.len(),
        killed.elapsed().as_secs_f64()
    );
    let bad: Vec<String> = rounds
        .iter()
        .filter(|(_, r)| r.values().any(|m| *m != vec![mac2]))
        .map(|(at, r)| format!("+{:.1}s {}", at.as_secs_f64(), describe(&tb, r)))
        .collect();
    assert!(
        bad.is_empty(),
        "within 3 s of SIGKILLing {owner}'s agent (its data plane still answering on eth1 \
         with {}), {} of {} ARP/NDP rounds saw another answer than only {owner}:\n{}\n\
         /state: {claims:?}\n{}",
        fmt_mac(mac2),
        bad.len(),
        rounds.len(),
        bad.join("\n"),
        tb.log_tails()
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn sigterm_keeps_vips_without_successor_on_their_ttl() {
    let mut tb = testbed("termttl", 3).await;
    let (v4, v6) = (IpAddr::V4(vip4(50)), IpAddr::V6(vip6(50)));
    // eTP Local, the only ready endpoint on node-b: no other node may take the VIPs.
    tb.add_service("local", &[v4, v6], true, &["node-b"]).await;
    tb.start_agents(&[]);
    for vip in [v4, v6] {
        assert_eq!(
            tb.wait_owner(vip, T),
            "node-b",
            "{vip} on the endpoint's node"
        );
    }
    let mac = tb.node_mac("node-b");
    wait_client_sees(&tb, &BTreeMap::from([(v4, mac), (v6, mac)]));

    tb.term_agent("node-b");
    let code = tb.wait_agent_exit("node-b", T);
    let exited = Instant::now();
    assert_eq!(
        code,
        Some(0),
        "node-b's agent exit after SIGTERM\n{}",
        tb.agent_log_tail("node-b")
    );
    let rounds = watch(&tb, &[v4, v6], Duration::from_secs(3));
    eprintln!(
        "after node-b's agent exited: {} rounds in {:.1} s; first {}; last {}",
        rounds.len(),
        exited.elapsed().as_secs_f64(),
        describe(&tb, &rounds[0].1),
        describe(&tb, &rounds[rounds.len() - 1].1)
    );
    let bad: Vec<String> = rounds
        .iter()
        .filter(|(_, r)| r.values().any(|m| *m != vec![mac]))
        .map(|(at, r)| format!("+{:.1}s {}", at.as_secs_f64(), describe(&tb, r)))
        .collect();
    assert!(
        bad.is_empty(),
        "after a SIGTERM of the only eligible node, its VIPs must live on their TTL (5 s) in \
         its data plane; within 3 s of the agent's exit {} of {} ARP/NDP rounds were not \
         answered by node-b alone:\n{}\n{}",
        bad.len(),
        rounds.len(),
        bad.join("\n"),
        tb.agent_log_tail("node-b")
    );
}
