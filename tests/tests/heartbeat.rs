//! Heartbeats over real UDP sockets on loopback (no root needed): what one agent sends, the
//! other hears; what a stranger forges or replays, it counts and drops.

use std::{
    net::SocketAddr,
    sync::{Arc, Mutex},
};

use announcer::{
    agent::heartbeat::{HeartbeatSocket, SendReport, unix_ms_now},
    election::{Beat, NodeName},
    heartbeat::{Key, KeyUsed, Keys, Reject, Sealer, Verified, Verifier},
    wire::MacAddr,
};
use tokio::sync::{mpsc, oneshot};

const INC: u64 = 1_700_000_000_000_000_000;

fn key(b: u8) -> Key {
    Key::new(&[b; 32]).unwrap()
}

fn beat(node: &str, mac: u8) -> Beat {
    Beat {
        node: node.into(),
        incarnation: INC,
        mac: MacAddr([2, 0, 0, 0, 0, mac]),
        leaving: false,
        api_ok: true,
        ready: true,
        acks: vec![],
        hears: vec![],
        config: 0,
        view: 0,
    }
}

/// One agent's heartbeat endpoint on 127.0.0.1, with its receive loop running.
struct Agent {
    sock: HeartbeatSocket,
    addr: SocketAddr,
    beats: mpsc::Receiver<Verified>,
    stop: Option<oneshot::Sender<()>>,
    task: tokio::task::JoinHandle<()>,
}

impl Agent {
    async fn start(node: &str, keys: Keys) -> Agent {
        let sock = HeartbeatSocket::bind("127.0.0.1:0".parse().unwrap()).unwrap();
        let addr = sock.local_addr().unwrap();
        let verifier = Arc::new(Mutex::new(Verifier::new(keys, NodeName::from(node))));
        let (tx, beats) = mpsc::channel(16);
        let (stop, stopped) = oneshot::channel::<()>();
        let rx = sock.clone();
        let task = tokio::spawn(async move {
            rx.receive(verifier, tx, async {
                let _ = stopped.await;
            })
            .await;
        });
        Agent {
            sock,
            addr,
            beats,
            stop: Some(stop),
            task,
        }
    }

    async fn shut_down(mut self) {
        self.stop.take().unwrap().send(()).unwrap();
        self.task.await.unwrap();
    }
}

#[tokio::test]
async fn agents_hear_each_other_and_drop_forged_and_replayed_beats() {
    let mut a = Agent::start("node-a", Keys::new(key(1))).await;
    let mut b = Agent::start("node-b", Keys::new(key(1))).await;
    let mut seal_a = Sealer::new(key(1), "node-a".into(), INC).unwrap();
    let mut seal_b = Sealer::new(key(1), "node-b".into(), INC).unwrap();

    // Both ways.
    let from_a = seal_a.seal(&beat("node-a", 1), unix_ms_now());
    assert_eq!(
        a.sock.send(&from_a, &[b.addr]),
        SendReport { sent: 1, failed: 0 }
    );
    let got = b.beats.recv().await.unwrap();
    assert_eq!(got.beat, beat("node-a", 1));
    assert_eq!((got.sequence, got.key), (1, KeyUsed::Current));

    b.sock
        .send(&seal_b.seal(&beat("node-b", 2), unix_ms_now()), &[a.addr]);
    assert_eq!(a.beats.recv().await.unwrap().beat, beat("node-b", 2));

    // A stranger without the key forges a "node-a is leaving" beat; then the first beat is
    // replayed verbatim; then node-a's real next beat. Loopback keeps the order and the loop
    // handles datagrams one at a time, so once the real one arrives the others were judged.
    let stranger = HeartbeatSocket::bind("127.0.0.1:0".parse().unwrap()).unwrap();
    let mut forger = Sealer::new(key(9), "node-a".into(), INC + 1).unwrap();
    let forged = forger.seal(
        &Beat {
            leaving: true,
            ..beat("node-a", 1)
        },
        unix_ms_now(),
    );
    stranger.send(&forged, &[b.addr]);
    stranger.send(&from_a, &[b.addr]);
    stranger.send(b"not a heartbeat at all", &[b.addr]);
    a.sock
        .send(&seal_a.seal(&beat("node-a", 1), unix_ms_now()), &[b.addr]);
    let next = b.beats.recv().await.unwrap();
    assert_eq!((next.beat.leaving, next.sequence), (false, 2));

    let stats = b.sock.stats().snapshot();
    assert_eq!(stats.accepted, 2);
    assert_eq!(stats.rejected(Reject::BadTag), 1, "{stats:?}");
    assert_eq!(stats.rejected(Reject::Replayed), 1, "{stats:?}");
    assert_eq!(stats.rejected(Reject::BadMagic), 1, "{stats:?}");
    assert_eq!(stats.rejected.iter().sum::<u64>(), 3, "{stats:?}");
    let labels: Vec<_> = stats.rejects().filter(|(_, n)| *n > 0).collect();
    assert_eq!(
        labels,
        [("bad_magic", 1), ("bad_tag", 1), ("replayed", 1)],
        "metric labels"
    );
    assert_eq!(a.sock.stats().snapshot().sent, 2);

    a.shut_down().await;
    b.shut_down().await;
}

#[tokio::test]
async fn a_rotated_key_is_accepted_alongside_the_old_one() {
    let mut b = Agent::start("node-b", Keys::rotating(key(2), key(1))).await;
    let sock = HeartbeatSocket::bind("127.0.0.1:0".parse().unwrap()).unwrap();
    let mut old = Sealer::new(key(1), "node-a".into(), INC).unwrap();
    sock.send(&old.seal(&beat("node-a", 1), unix_ms_now()), &[b.addr]);
    assert_eq!(b.beats.recv().await.unwrap().key, KeyUsed::Previous);
    old.set_key(key(2));
    sock.send(&old.seal(&beat("node-a", 1), unix_ms_now()), &[b.addr]);
    assert_eq!(b.beats.recv().await.unwrap().key, KeyUsed::Current);
    b.shut_down().await;
}

#[tokio::test]
async fn sending_to_an_unreachable_peer_is_counted_not_fatal() {
    let sock = HeartbeatSocket::bind("127.0.0.1:0".parse().unwrap()).unwrap();
    let ok: SocketAddr = "127.0.0.1:9".parse().unwrap();
    // An IPv6 peer from an IPv4 socket: the kernel refuses at once.
    let bad: SocketAddr = "[::1]:9".parse().unwrap();
    let report = sock.send(b"x", &[bad, ok]);
    assert_eq!(report, SendReport { sent: 1, failed: 1 });
    let stats = sock.stats().snapshot();
    assert_eq!((stats.sent, stats.send_errors), (1, 1));
}
