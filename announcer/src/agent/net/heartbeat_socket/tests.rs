//! The heartbeat socket over real loopback sockets (no root needed): batched sends and
//! receives, and the counters; and the rejection summary.

use std::{net::UdpSocket, sync::atomic::AtomicBool};

use announcer_ebpf::wire::MacAddr;

use super::*;
use crate::{
    election::Beat,
    heartbeat::{Identity, MAX_DATAGRAM, Sealer},
};

const INC: u64 = 1_700_000_000_000_000_000;

fn loopback() -> SocketAddr {
    "127.0.0.1:0".parse().unwrap()
}

/// A plain socket on loopback, standing for a peer, that waits at most 5 s for a datagram.
fn peer() -> (UdpSocket, SocketAddr) {
    let sock = UdpSocket::bind(loopback()).unwrap();
    sock.set_read_timeout(Some(Duration::from_secs(5))).unwrap();
    let addr = sock.local_addr().unwrap();
    (sock, addr)
}

fn recv(sock: &UdpSocket) -> Vec<u8> {
    let mut buf = [0u8; 2048];
    let n = sock.recv(&mut buf).expect("a datagram within 5 s");
    buf[..n].to_vec()
}

fn ring(own: u8, peer: (&str, u8)) -> Keyring {
    let mut k = Keyring::new(Identity::from_secret_bytes([own; 32]));
    k.set_peer(
        NodeName::from(peer.0),
        Identity::from_secret_bytes([peer.1; 32]).public(),
    )
    .unwrap();
    k
}

fn beat() -> Beat {
    Beat {
        node: "node-a".into(),
        incarnation: INC,
        mac: MacAddr([2, 0, 0, 0, 0, 1]),
        leaving: false,
        api_ok: true,
        ready: true,
        acks: vec![],
        hears: vec![],
        config: 7,
        view: 8,
    }
}

#[test]
fn send_batch_delivers_every_datagram_in_order_of_peers() {
    let sock = HeartbeatSocket::bind(loopback()).unwrap();
    let peers = [peer(), peer(), peer()];
    // 150 datagrams: more than two `sendmmsg` calls, round robin over three peers.
    let batch: Vec<(Vec<u8>, SocketAddr)> = (0..150u8)
        .map(|i| (vec![i; 100 + usize::from(i)], peers[usize::from(i) % 3].1))
        .collect();
    assert_eq!(
        sock.send_batch(&batch),
        SendReport {
            sent: 150,
            failed: 0
        }
    );
    for (k, (peer, _)) in peers.iter().enumerate() {
        for (bytes, _) in batch.iter().skip(k).step_by(3) {
            assert_eq!(&recv(peer), bytes);
        }
    }
    let stats = sock.stats().snapshot();
    assert_eq!((stats.sent, stats.send_errors), (150, 0));
}

#[test]
fn send_batch_of_nothing_sends_nothing() {
    let sock = HeartbeatSocket::bind(loopback()).unwrap();
    let none: &[(&[u8], SocketAddr)] = &[];
    assert_eq!(sock.send_batch(none), SendReport::default());
}

#[test]
fn send_batch_skips_an_unsendable_address_and_sends_the_rest() {
    let sock = HeartbeatSocket::bind(loopback()).unwrap();
    let (peer, addr) = peer();
    // An IPv6 address on an IPv4 socket: the kernel refuses that one datagram alone.
    let v6: SocketAddr = "[::1]:9".parse().unwrap();
    let batch: Vec<(&[u8], SocketAddr)> = vec![
        (b"one", addr),
        (b"two", addr),
        (b"lost", v6),
        (b"three", addr),
    ];
    assert_eq!(sock.send_batch(&batch), SendReport { sent: 3, failed: 1 });
    for want in [&b"one"[..], b"two", b"three"] {
        assert_eq!(recv(&peer), want);
    }
    let stats = sock.stats().snapshot();
    assert_eq!((stats.sent, stats.send_errors), (3, 1));
}

#[test]
fn send_batch_counts_a_full_buffer_as_failed_not_blocking() {
    let sock = HeartbeatSocket::bind(loopback()).unwrap();
    let addr: SocketAddr = "10.78.1.2:9747".parse().unwrap();
    let batch: Vec<(Vec<u8>, SocketAddr)> = (0..200).map(|_| (vec![0; 120], addr)).collect();
    // The kernel takes 64, then 40 (its buffer full after them), then nothing: `EAGAIN`.
    let mut calls = Vec::new();
    let report = sock.send_batch_with(&batch, |rest| {
        calls.push(rest.len());
        match calls.len() {
            1 => Ok(mmsg::Sent::of(&[120; 64])),
            2 => Ok(mmsg::Sent::of(&[120; 40])),
            _ => Err(io::ErrorKind::WouldBlock.into()),
        }
    });
    assert_eq!(calls, [200, 136, 96], "no retry after EAGAIN");
    assert_eq!(
        report,
        SendReport {
            sent: 104,
            failed: 96
        }
    );
    let stats = sock.stats().snapshot();
    assert_eq!((stats.sent, stats.send_errors), (104, 96));
}

#[test]
fn send_batch_counts_a_short_send_as_failed_and_retries_after_an_interrupt() {
    let sock = HeartbeatSocket::bind(loopback()).unwrap();
    let addr: SocketAddr = "10.78.1.2:9747".parse().unwrap();
    let batch = [(&[0u8; 120][..], addr), (&[0u8; 120][..], addr)];
    let mut calls = 0;
    let report = sock.send_batch_with(&batch, |rest| {
        calls += 1;
        match calls {
            1 => Err(io::ErrorKind::Interrupted.into()),
            _ => Ok(mmsg::Sent::of(&vec![100; rest.len()])),
        }
    });
    assert_eq!(calls, 2);
    assert_eq!(report, SendReport { sent: 0, failed: 2 });
}

#[test]
fn receiver_reads_a_burst_larger_than_one_recvmmsg_batch() {
    const BEATS: u64 = 300;
    let sender = HeartbeatSocket::bind(loopback()).unwrap();
    let receiver = HeartbeatSocket::bind(loopback()).unwrap();
    let to = receiver.local_addr().unwrap();
    let keys_a = ring(1, ("node-b", 2));
    let keys_b = Arc::new(RwLock::new(ring(2, ("node-a", 1))));
    let mut sealer = Sealer::new("node-a".into(), INC).unwrap();
    let now = unix_ms_now();
    let mut burst: Vec<(Vec<u8>, SocketAddr)> = (0..BEATS)
        .map(|_| {
            let bytes = sealer.seal(&keys_a, &beat(), &"node-b".into(), now);
            (bytes.unwrap(), to)
        })
        .collect();
    // Noise among them: not heartbeats, one longer than a heartbeat may be.
    burst.insert(10, (b"not a heartbeat".to_vec(), to));
    burst.insert(200, (vec![0; MAX_DATAGRAM + 100], to));
    let total = burst.len() as u32;
    // All queued before the receiver starts: it finds five batches' worth.
    assert_eq!(
        sender.send_batch(&burst),
        SendReport {
            sent: total,
            failed: 0
        }
    );

    let (tx, mut rx) = mpsc::channel(16);
    let stop = Arc::new(AtomicBool::new(false));
    let verifier = Arc::new(Mutex::new(Verifier::new("node-b".into())));
    let thread = receiver
        .spawn_receiver(verifier, keys_b, tx, {
            let stop = stop.clone();
            move || stop.load(Ordering::Relaxed)
        })
        .unwrap();
    let sequences: Vec<u64> = (0..BEATS)
        .map(|_| rx.blocking_recv().expect("forwarded").sequence)
        .collect();
    assert_eq!(sequences, (1..=BEATS).collect::<Vec<_>>(), "all, in order");

    stop.store(true, Ordering::Relaxed);
    thread.join().unwrap();
    let stats = receiver.stats().snapshot();
    assert_eq!(stats.accepted, BEATS);
    assert_eq!(stats.rejected(Reject::BadMagic), 2, "{stats:?}");
    assert_eq!(stats.receive_errors, 0);
    assert!(rx.try_recv().is_err(), "nothing more forwarded");
}

#[test]
fn the_receiver_stops_when_its_channel_closes() {
    let receiver = HeartbeatSocket::bind(loopback()).unwrap();
    let (tx, rx) = mpsc::channel(1);
    let keys = Arc::new(RwLock::new(ring(2, ("node-a", 1))));
    let verifier = Arc::new(Mutex::new(Verifier::new("node-b".into())));
    let thread = receiver
        .spawn_receiver(verifier, keys, tx, || false)
        .unwrap();
    drop(rx);
    thread.join().unwrap();
}

fn from() -> SocketAddr {
    "10.78.1.2:4000".parse().unwrap()
}

#[test]
fn a_flood_of_rejections_makes_one_summary_per_interval() {
    let t0 = Instant::now();
    let mut s = RejectSummary::new(t0);
    let mut lines = Vec::new();
    // 70,000 datagrams over 2.5 s, checked before each one as the receive loop does.
    for k in 0..70_000u32 {
        let now = t0 + Duration::from_micros(u64::from(k) * 36);
        lines.extend(s.take_due(now));
        s.add(
            if k % 2 == 0 {
                Reject::BadMagic
            } else {
                Reject::UnsupportedVersion
            },
            from(),
        );
    }
    assert_eq!(lines.len(), 2, "{lines:?}");
    assert!(lines.iter().all(|l| l.over >= REJECT_SUMMARY_EVERY));
    let counted: u64 = lines.iter().map(RejectSummary::total).sum::<u64>() + s.total();
    assert_eq!(
        counted, 70_000,
        "every rejection is in a summary or still counted"
    );
    assert_eq!(lines[0].last_from, Some(from()));
    assert!(
        lines[0]
            .to_string()
            .starts_with("bad_magic=13889 unsupported_version=13889"),
        "{}",
        lines[0]
    );
}

#[test]
fn a_lone_rejection_after_a_quiet_spell_waits_for_its_own_interval() {
    let t0 = Instant::now();
    let mut s = RejectSummary::new(t0);
    assert_eq!(
        s.take_due(t0 + Duration::from_secs(60)),
        None,
        "nothing counted"
    );
    s.add(Reject::BadTag, from());
    // The window opened at the quiet check, not at t0.
    assert_eq!(s.take_due(t0 + Duration::from_millis(60_500)), None);
    let line = s.take_due(t0 + Duration::from_secs(61)).expect("due");
    assert_eq!((line.total(), line.to_string()), (1, "bad_tag=1".into()));
    assert_eq!(s.total(), 0);
}
