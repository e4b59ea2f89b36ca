//! A node owning many VIPs dies (issue 29, T4): its successor probes it once per interval,
//! not once per VIP, and takes all of them at the same instant.

use super::*;

const VIPS: usize = 600;

fn vip(i: usize) -> IpAddr {
    IpAddr::from([10, 1, (i / 250) as u8, (i % 250) as u8 + 1])
}

/// Two nodes sharing [`VIPS`] VIPs, settled; node 0's VIPs.
fn settled() -> (World, Vec<IpAddr>) {
    let mut w = World::new(2);
    let eligible: NodeSet = std::sync::Arc::new((0..2).map(World::name).collect());
    let set: Vec<VipSpec> = (0..VIPS)
        .map(|i| VipSpec {
            vip: vip(i),
            service: ServiceRef {
                namespace: "default".into(),
                name: format!("svc-{i}"),
            },
            eligible: eligible.clone(),
            local: Some("eth0".into()),
            interfaces: Vec::new(),
            preferred: Default::default(),
        })
        .collect();
    for i in 0..2 {
        w.input(i, Input::Vips(set.clone()));
    }
    w.run_for(Duration::from_secs(3));
    let owned: Vec<IpAddr> = w.nodes[0].core.owned().iter().map(|(ip, _)| *ip).collect();
    assert!(owned.len() > VIPS / 4, "node 0 owns {} VIPs", owned.len());
    (w, owned)
}

fn probes(w: &World, i: usize) -> usize {
    w.nodes[i]
        .outputs
        .iter()
        .filter(|o| matches!(o, Output::Probe { .. }))
        .count()
}

/// Runs until node 1 holds every VIP of `lost`; how long that took.
fn until_taken(w: &mut World, lost: &[IpAddr]) -> Duration {
    let start = w.t;
    loop {
        let held: BTreeSet<IpAddr> = w.nodes[1].core.owned().iter().map(|(ip, _)| *ip).collect();
        if lost.iter().all(|ip| held.contains(ip)) {
            return w.t - start;
        }
        w.run_for(MS);
        assert!(w.t - start < Duration::from_secs(5), "not taken in 5 s");
    }
}

#[test]
fn a_dead_owner_of_many_vips_is_probed_once_per_interval_not_once_per_vip() {
    let (mut w, lost) = settled();
    let before = probes(&w, 1);
    w.nodes[0].up = false;
    until_taken(&mut w, &lost);
    let sent = probes(&w, 1) - before;
    assert!(
        (1..=FIRST_PROBES as usize).contains(&sent),
        "{sent} probe frames for {} VIPs of one silent MAC",
        lost.len()
    );
}

#[test]
fn a_dead_owner_of_many_vips_is_taken_over_all_at_once() {
    let (mut w, lost) = settled();
    w.nodes[0].up = false;
    let mut first_held = None;
    let start = w.t;
    loop {
        let held = lost
            .iter()
            .filter(|ip| w.nodes[1].core.owned().iter().any(|(o, _)| o == *ip))
            .count();
        if held > 0 && first_held.is_none() {
            first_held = Some(held);
        }
        if held == lost.len() {
            break;
        }
        w.run_for(MS);
        assert!(w.t - start < Duration::from_secs(5), "not taken in 5 s");
    }
    assert_eq!(
        first_held,
        Some(lost.len()),
        "the VIPs of one dead node were taken over in several steps"
    );
}
