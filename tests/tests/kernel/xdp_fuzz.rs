//! Differential fuzzing of the responder against the reference model (`announcer_tests::model`):
//! hundreds of thousands of random and mutated frames through the real program in the kernel
//! (BPF_PROG_TEST_RUN). Every verdict and every answer byte must equal the model's, so no frame
//! that is not a valid request for a live VIP is ever answered.
//!
//! `ANNOUNCER_FUZZ_FRAMES` sets the count (default 300,000); `ANNOUNCER_FUZZ_SEED` the seed.

use std::{
    collections::HashMap,
    net::{IpAddr, Ipv4Addr, Ipv6Addr},
    time::Duration,
};

use announcer::dataplane::{Lifetime, Vip};
use announcer_tests::{
    frames::{self, VIP_MAC},
    model::{self, Entry, Table, Verdict},
    testrun::{Harness, IFINDEX},
};
use rand::{Rng, SeedableRng, rngs::StdRng};

const V4: [Ipv4Addr; 3] = [
    Ipv4Addr::new(10, 0, 0, 5),
    Ipv4Addr::new(10, 0, 0, 6),
    Ipv4Addr::new(10, 0, 0, 7),
];
const V6: [Ipv6Addr; 3] = [
    Ipv6Addr::new(0x2001, 0xdb8, 0, 0, 0, 0, 0, 5),
    Ipv6Addr::new(0x2001, 0xdb8, 0, 0, 0, 0, 0, 6),
    Ipv6Addr::new(0x2001, 0xdb8, 0, 0, 0, 0, 0, 7),
];

/// [0]: live untagged, [1]: live on VLAN 100, [2]: expired untagged.
fn setup() -> (Harness, Table) {
    let mut h = Harness::new();
    let mut table: Table = HashMap::new();
    for (addrs, _) in [(V4.map(IpAddr::V4), ()), (V6.map(IpAddr::V6), ())] {
        let plan = [
            (addrs[0], None, true),
            (addrs[1], Some(100), true),
            (addrs[2], None, false),
        ];
        for (a, vlan, live) in plan {
            let life = if live {
                Lifetime::Permanent
            } else {
                Lifetime::Ttl(Duration::ZERO)
            };
            h.dp.upsert(Vip::new(a, vlan).unwrap(), VIP_MAC, life)
                .unwrap();
            table.insert(
                (IFINDEX, vlan.unwrap_or(0), a),
                Entry { mac: VIP_MAC, live },
            );
        }
    }
    (h, table)
}

fn template(rng: &mut StdRng) -> Vec<u8> {
    let vlan = if rng.random_bool(0.3) {
        Some(if rng.random_bool(0.7) { 100 } else { 7 })
    } else {
        None
    };
    let client4 = Ipv4Addr::new(10, 0, 0, rng.random_range(1..=4));
    let client6 = Ipv6Addr::new(0x2001, 0xdb8, 0, 0, 0, 0, 0, rng.random_range(1..=4));
    let t4 = V4[rng.random_range(0..3)];
    let t6 = V6[rng.random_range(0..3)];
    match rng.random_range(0..6) {
        0 => frames::arp_request(client4, t4, vlan),
        1 => frames::arp_request(Ipv4Addr::UNSPECIFIED, t4, vlan),
        2 => frames::ns_multicast(client6, t6, vlan),
        3 => frames::ns(client6, t6, t6, None, vlan),
        4 => frames::ns_dad(t6, vlan),
        _ => {
            let n = rng.random_range(14..120);
            (0..n).map(|_| rng.random()).collect()
        }
    }
}

fn mutate(rng: &mut StdRng, f: &mut Vec<u8>) {
    match rng.random_range(0..10) {
        0..=3 => {} // keep valid: most frames should be answerable
        4..=6 => {
            for _ in 0..rng.random_range(1..=3) {
                let i = rng.random_range(0..f.len());
                f[i] = if rng.random_bool(0.5) {
                    rng.random()
                } else {
                    f[i] ^ (1 << rng.random_range(0..8))
                };
            }
        }
        7 => {
            let n = rng.random_range(14..=f.len());
            f.truncate(n);
        }
        8 => {
            for _ in 0..rng.random_range(1..24) {
                f.push(rng.random());
            }
        }
        _ => {
            // Hit the fields the rules look at: EtherType, ARP op/lengths, hop limit, ND type.
            let i =
                [12, 13, 16, 17, 18, 19, 20, 21, 21, 25, 54, 55, 58, 59][rng.random_range(0..14)];
            if i < f.len() {
                f[i] = rng.random();
            }
        }
    }
}

#[test]
fn kernel_matches_the_model_on_random_and_mutated_frames() {
    let n: usize = std::env::var("ANNOUNCER_FUZZ_FRAMES")
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(300_000);
    let seed: u64 = std::env::var("ANNOUNCER_FUZZ_SEED")
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(0x5eed);
    let (h, table) = setup();
    let mut rng = StdRng::seed_from_u64(seed);
    let (mut answered, mut passed) = (0usize, 0usize);
    for i in 0..n {
        let mut f = template(&mut rng);
        mutate(&mut rng, &mut f);
        let want = model::respond(&f, IFINDEX, &table);
        let got = h.verdict(&f);
        if got != want {
            panic!(
                "frame #{i} (seed {seed:#x}) diverges from the model\n frame: {}\n model: {want:?}\n kernel: {got:?}",
                hex(&f)
            );
        }
        match got {
            Verdict::Tx(_) => answered += 1,
            Verdict::Pass => passed += 1,
        }
        if i > 0 && i % 100_000 == 0 {
            eprintln!("{i} frames: {answered} answered, {passed} passed, all as the model says");
        }
    }
    eprintln!("{n} frames: {answered} answered, {passed} passed, all as the model says");
    assert!(
        answered > n / 10,
        "the corpus must exercise the answer path too ({answered})"
    );
    assert!(
        passed > n / 10,
        "the corpus must exercise the pass path too ({passed})"
    );
}

fn hex(b: &[u8]) -> String {
    b.iter().map(|x| format!("{x:02x}")).collect()
}
