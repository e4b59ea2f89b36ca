//! `cargo xtask bench heartbeat`: the CPU cost of heartbeat authentication, version 2
//! (per-node X25519 identities, one pairwise HMAC-SHA256 per datagram, one datagram per peer)
//! next to version 1 (one HMAC-SHA256 under the cluster-wide key per beat, sent to every
//! peer), for one agent among `--peers` peers at `--rate` beats per second.
//!
//! Version 1 is gone from the code, so its cost is computed inline: a plain HMAC-SHA256 with a
//! shared key over a message of the same size as a version 2 datagram (the tag work is what
//! differs; the framing is the same order of cost). Per agent and second, version 1 sealed
//! `rate` beats and verified `rate × peers`; version 2 seals and verifies `rate × peers` each.
//! The one-time cost of a peer key change (X25519 + HKDF + keying the HMAC) is measured with
//! [`Keyring::set_peer`]. Each figure is the median of `--rounds` timed rounds.
//!
//! A table on stdout and, with `--json`, one JSON document as the last stdout line. Needs no
//! root and no network.

use std::{
    hint::black_box,
    time::{Duration, Instant},
};

use announcer::{
    election::{Beat, NodeName},
    heartbeat::{Identity, Keyring, Sealer, Verifier},
    wire::MacAddr,
};
use anyhow::{Result, ensure};
use clap::Parser;
use hmac::{Hmac, Mac};
use sha2::Sha256;

type HmacSha256 = Hmac<Sha256>;

#[derive(Parser)]
#[command(about = "Benchmark heartbeat sealing and verification (v2 pairwise keys vs v1)")]
struct Args {
    /// Also print one JSON document as the last line of stdout.
    #[arg(long)]
    json: bool,
    /// Peers of the agent.
    #[arg(long, default_value_t = 50)]
    peers: usize,
    /// Heartbeats per second per agent (default: the agent's default period,
    /// `HEARTBEAT_INTERVAL`, 75 ms: 13.3 beats/s).
    #[arg(long, default_value_t = default_rate())]
    rate: f64,
    /// Datagrams sealed and verified per peer in one timed round.
    #[arg(long, default_value_t = 2_000)]
    beats: u32,
    /// Timed rounds; the median is reported.
    #[arg(long, default_value_t = 5)]
    rounds: u32,
}

/// Beats per second at the agent's default heartbeat period.
fn default_rate() -> f64 {
    1.0 / announcer::election::defaults::HEARTBEAT_INTERVAL.as_secs_f64()
}

const NOW: u64 = 1_700_000_000_000;
const INC: u64 = 1_700_000_000_000_000_000;

fn progress(line: &str) {
    eprintln!("[bench-heartbeat] {line}");
}

/// A node name of a typical length (a cloud provider's, 26 to 28 characters).
fn name(i: usize) -> NodeName {
    format!("ip-10-0-{}-{}.ec2.internal", i / 250, i % 250 + 1).into()
}

fn beat(node: &NodeName, hears: Vec<NodeName>) -> Beat {
    Beat {
        node: node.clone(),
        incarnation: INC,
        mac: MacAddr([2, 0, 0, 0, 0, 1]),
        leaving: false,
        api_ok: true,
        ready: true,
        acks: vec![],
        hears,
        config: 0x0123_4567_89ab_cdef,
        view: 0xfedc_ba98_7654_3210,
    }
}

/// Median of `rounds` runs of `f`, each returning (elapsed, operations), in ns per operation.
fn median_ns(rounds: u32, mut f: impl FnMut() -> (Duration, u64)) -> f64 {
    let mut v: Vec<f64> = (0..rounds)
        .map(|_| {
            let (d, ops) = f();
            d.as_nanos() as f64 / ops as f64
        })
        .collect();
    v.sort_by(f64::total_cmp);
    v[v.len() / 2]
}

fn main() -> Result<()> {
    let args = Args::parse();
    ensure!(args.peers > 0, "--peers must be at least 1");
    ensure!(
        args.beats > 0 && args.rounds > 0,
        "--beats and --rounds must be at least 1"
    );

    let own_name = name(0);
    let own = Identity::from_secret_bytes([1; 32]);
    let peers: Vec<(NodeName, Identity)> = (1..=args.peers)
        .map(|i| {
            let mut secret = [0u8; 32];
            secret[..8].copy_from_slice(&(i as u64).to_le_bytes());
            secret[31] = 0x5a;
            (name(i), Identity::from_secret_bytes(secret))
        })
        .collect();

    progress(&format!("deriving pairwise keys for {} peers", args.peers));
    let mut keyring = Keyring::new(own.clone());
    for (n, id) in &peers {
        keyring.set_peer(n.clone(), id.public())?;
    }

    // One-time cost of a key change: each peer flips between two keys, so every call derives.
    let other = Identity::from_secret_bytes([7; 32]).public();
    let key_change_ns = median_ns(args.rounds, || {
        let mut ring = Keyring::new(own.clone());
        let started = Instant::now();
        for (n, id) in &peers {
            black_box(ring.set_peer(n.clone(), id.public()).unwrap());
            black_box(ring.set_peer(n.clone(), other).unwrap());
        }
        (started.elapsed(), 2 * peers.len() as u64)
    });

    // Sealing: one datagram per peer per beat.
    progress("sealing");
    // Sorted, as the core builds it (sealing looks each recipient up by binary search).
    let mut hears: Vec<NodeName> = peers.iter().map(|(n, _)| n.clone()).collect();
    hears.sort();
    let ours = beat(&own_name, hears);
    let mut datagram_bytes = 0;
    let seal_ns = median_ns(args.rounds, || {
        let mut sealer = Sealer::new(own_name.clone(), INC).unwrap();
        let started = Instant::now();
        for _ in 0..args.beats {
            for (n, _) in &peers {
                let d = sealer.seal(&keyring, &ours, n, NOW).unwrap();
                datagram_bytes = d.len();
                black_box(d);
            }
        }
        (
            started.elapsed(),
            u64::from(args.beats) * peers.len() as u64,
        )
    });

    // Verifying: every peer's beats to us, in arrival order (peer by peer within a period).
    progress("verifying");
    let mut inbound = Vec::with_capacity(args.beats as usize * peers.len());
    {
        let mut senders: Vec<(Keyring, Sealer, Beat)> = peers
            .iter()
            .map(|(n, id)| {
                let mut ring = Keyring::new(id.clone());
                ring.set_peer(own_name.clone(), own.public()).unwrap();
                let b = beat(n, vec![own_name.clone()]);
                (ring, Sealer::new(n.clone(), INC).unwrap(), b)
            })
            .collect();
        for _ in 0..args.beats {
            for (ring, sealer, b) in &mut senders {
                inbound.push(sealer.seal(ring, b, &own_name, NOW).unwrap());
            }
        }
    }
    let verify_ns = median_ns(args.rounds, || {
        let mut verifier = Verifier::new(own_name.clone());
        let started = Instant::now();
        for d in &inbound {
            black_box(verifier.open(&keyring, d, NOW).unwrap());
        }
        (started.elapsed(), inbound.len() as u64)
    });

    // Version 1: one shared key, a message of the same signed length.
    progress("version 1 reference (shared-key HMAC)");
    let shared = HmacSha256::new_from_slice(&[0x42; 32]).unwrap();
    let message = vec![0x5au8; datagram_bytes - 16];
    let v1_seal_ns = median_ns(args.rounds, || {
        let n = u64::from(args.beats) * peers.len() as u64;
        let started = Instant::now();
        for i in 0..n {
            let mut out = Vec::with_capacity(message.len() + 16);
            out.extend_from_slice(&message);
            out[0] = i as u8;
            let tag = shared.clone().chain_update(&out).finalize().into_bytes();
            out.extend_from_slice(&tag[..16]);
            black_box(out);
        }
        (started.elapsed(), n)
    });
    let mut signed = message.clone();
    let tag = shared.clone().chain_update(&signed).finalize().into_bytes();
    signed.extend_from_slice(&tag[..16]);
    let v1_verify_ns = median_ns(args.rounds, || {
        let n = u64::from(args.beats) * peers.len() as u64;
        let started = Instant::now();
        for _ in 0..n {
            let (body, tag) = black_box(&signed[..]).split_at(signed.len() - 16);
            let ok = shared
                .clone()
                .chain_update(body)
                .verify_truncated_left(tag)
                .is_ok();
            assert!(black_box(ok));
        }
        (started.elapsed(), n)
    });

    let rate = args.rate;
    let p = peers.len() as f64;
    // ns of CPU per second / 1e9 s × 100 %.
    let cpu = |ns_per_s: f64| ns_per_s / 1e7;
    let v2_cpu = cpu(rate * p * (seal_ns + verify_ns));
    let v1_cpu = cpu(rate * v1_seal_ns + rate * p * v1_verify_ns);

    println!(
        "heartbeat authentication, {} peers, {:.1} beats/s, {datagram_bytes}-byte datagrams (median of {} rounds)",
        args.peers, args.rate, args.rounds
    );
    println!("{:<44} {:>12}", "", "ns");
    println!(
        "{:<44} {:>12.0}",
        "v2 seal (one datagram, pairwise HMAC)", seal_ns
    );
    println!("{:<44} {:>12.0}", "v2 verify (one datagram)", verify_ns);
    println!(
        "{:<44} {:>12.0}",
        "v1 seal (shared-key HMAC, same size)", v1_seal_ns
    );
    println!(
        "{:<44} {:>12.0}",
        "v1 verify (shared-key HMAC, same size)", v1_verify_ns
    );
    println!(
        "{:<44} {:>12.0}",
        "peer key change (X25519 + HKDF + HMAC key)", key_change_ns
    );
    println!();
    println!("{:<44} {:>12}", "per agent", "CPU %");
    println!(
        "{:<44} {:>12.4}",
        format!("v2: {:.0} seals + {:.0} verifies /s", rate * p, rate * p),
        v2_cpu
    );
    println!(
        "{:<44} {:>12.4}",
        format!("v1: {:.0} seals + {:.0} verifies /s", rate, rate * p),
        v1_cpu
    );
    println!();
    println!(
        "all {} peers changing keys at once: {:.1} ms of CPU, once",
        args.peers,
        p * key_change_ns / 1e6
    );

    if args.json {
        let doc = serde_json::json!({
            "benchmark": "heartbeat",
            "peers": args.peers,
            "rate_hz": args.rate,
            "datagram_bytes": datagram_bytes,
            "rounds": args.rounds,
            "seal_ns": seal_ns.round(),
            "verify_ns": verify_ns.round(),
            "v1_seal_ns": v1_seal_ns.round(),
            "v1_verify_ns": v1_verify_ns.round(),
            "key_change_ns": key_change_ns.round(),
            "all_peers_key_change_ms": p * key_change_ns / 1e6,
        });
        let mut doc = doc;
        let peers = args.peers;
        doc[format!("cpu_percent_{peers}_peers")] = v2_cpu.into();
        doc[format!("v1_cpu_percent_{peers}_peers")] = v1_cpu.into();
        println!("{doc}");
    }
    Ok(())
}
