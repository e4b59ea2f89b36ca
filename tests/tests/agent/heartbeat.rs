//! Heartbeats over real UDP sockets on loopback (no root needed): what one agent sends, the
//! other hears; what a stranger or a compromised peer forges or replays, it counts and drops.

use std::{
    net::SocketAddr,
    sync::{
        Arc, Mutex, RwLock,
        atomic::{AtomicBool, Ordering},
    },
    thread,
};

use announcer::{
    agent::net::heartbeat_socket::{HeartbeatSocket, SendReport, unix_ms_now},
    election::{Beat, NodeName},
    heartbeat::{Identity, Keyring, PeerKeyChange, Reject, Sealer, Verified, Verifier},
    wire::MacAddr,
};
use tokio::sync::mpsc;

const INC: u64 = 1_700_000_000_000_000_000;

fn id(b: u8) -> Identity {
    Identity::from_secret_bytes([b; 32])
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
        config: 7,
        view: 8,
    }
}

/// `own`'s keyring with the public keys of `peers`.
fn ring(own: Identity, peers: &[(&str, &Identity)]) -> Keyring {
    let mut k = Keyring::new(own);
    for (name, peer) in peers {
        k.set_peer(NodeName::from(*name), peer.public()).unwrap();
    }
    k
}

/// One agent's heartbeat endpoint on 127.0.0.1, with its receiving thread running (as the
/// agent runs it).
struct Agent {
    sock: HeartbeatSocket,
    addr: SocketAddr,
    keyring: Arc<RwLock<Keyring>>,
    beats: mpsc::Receiver<Verified>,
    stop: Arc<AtomicBool>,
    thread: thread::JoinHandle<()>,
}

impl Agent {
    async fn start(node: &str, keyring: Keyring) -> Agent {
        let sock = HeartbeatSocket::bind("127.0.0.1:0".parse().unwrap()).unwrap();
        let addr = sock.local_addr().unwrap();
        let verifier = Arc::new(Mutex::new(Verifier::new(NodeName::from(node))));
        let keyring = Arc::new(RwLock::new(keyring));
        let (tx, beats) = mpsc::channel(16);
        let stop = Arc::new(AtomicBool::new(false));
        let stopped = stop.clone();
        let thread = sock
            .spawn_receiver(verifier, keyring.clone(), tx, move || {
                stopped.load(Ordering::Relaxed)
            })
            .unwrap();
        Agent {
            sock,
            addr,
            keyring,
            beats,
            stop,
            thread,
        }
    }

    /// Seals `beat` for `to` with this agent's keyring.
    fn seal(&self, sealer: &mut Sealer, beat: &Beat, to: &str) -> Vec<u8> {
        sealer
            .seal(
                &self.keyring.read().unwrap(),
                beat,
                &NodeName::from(to),
                unix_ms_now(),
            )
            .unwrap()
    }

    async fn shut_down(self) {
        self.stop.store(true, Ordering::Relaxed);
        let thread = self.thread;
        tokio::task::spawn_blocking(move || thread.join())
            .await
            .unwrap()
            .unwrap();
    }
}

#[tokio::test]
async fn agents_hear_each_other_and_drop_forged_and_replayed_beats() {
    let (ia, ib, im) = (id(1), id(2), id(9));
    let mut a = Agent::start("node-a", ring(ia.clone(), &[("node-b", &ib)])).await;
    let mut b = Agent::start(
        "node-b",
        ring(ib.clone(), &[("node-a", &ia), ("mallory", &im)]),
    )
    .await;
    let mut seal_a = Sealer::new("node-a".into(), INC).unwrap();
    let mut seal_b = Sealer::new("node-b".into(), INC).unwrap();

    // Both ways, with node-a's per-recipient HEARS bit for node-b.
    let hearing = Beat {
        hears: vec!["node-b".into()],
        ..beat("node-a", 1)
    };
    let from_a = a.seal(&mut seal_a, &hearing, "node-b");
    assert_eq!(
        a.sock.send(&from_a, &[b.addr]),
        SendReport { sent: 1, failed: 0 }
    );
    let got = b.beats.recv().await.unwrap();
    assert_eq!(got.beat, hearing);
    assert_eq!(got.sequence, 1);

    b.sock.send(
        &b.seal(&mut seal_b, &beat("node-b", 2), "node-a"),
        &[a.addr],
    );
    assert_eq!(a.beats.recv().await.unwrap().beat, beat("node-b", 2));

    // Mallory, a peer holding only its own secret, forges a "node-a is leaving" beat with the
    // highest incarnation; then node-a's first beat is replayed verbatim; a stranger names
    // itself node-z; then node-a's real next beat. Loopback keeps the order and the loop
    // handles datagrams one at a time, so once the real one arrives the others were judged.
    let stranger = HeartbeatSocket::bind("127.0.0.1:0".parse().unwrap()).unwrap();
    let mallory_ring = ring(im, &[("node-b", &ib)]);
    let mut forger = Sealer::new("node-a".into(), u64::MAX).unwrap();
    let forged = forger
        .seal(
            &mallory_ring,
            &Beat {
                leaving: true,
                ..beat("node-a", 1)
            },
            &"node-b".into(),
            unix_ms_now(),
        )
        .unwrap();
    let mut nobody = Sealer::new("node-z".into(), INC).unwrap();
    let unknown = nobody
        .seal(
            &mallory_ring,
            &beat("node-z", 3),
            &"node-b".into(),
            unix_ms_now(),
        )
        .unwrap();
    stranger.send(&forged, &[b.addr]);
    stranger.send(&from_a, &[b.addr]);
    stranger.send(&unknown, &[b.addr]);
    stranger.send(b"not a heartbeat at all", &[b.addr]);
    a.sock.send(
        &a.seal(&mut seal_a, &beat("node-a", 1), "node-b"),
        &[b.addr],
    );
    let next = b.beats.recv().await.unwrap();
    assert_eq!((next.beat.leaving, next.sequence), (false, 2));

    let stats = b.sock.stats().snapshot();
    assert_eq!(stats.accepted, 2);
    assert_eq!(stats.rejected(Reject::BadTag), 1, "{stats:?}");
    assert_eq!(stats.rejected(Reject::Replayed), 1, "{stats:?}");
    assert_eq!(stats.rejected(Reject::UnknownSender), 1, "{stats:?}");
    assert_eq!(stats.rejected(Reject::BadMagic), 1, "{stats:?}");
    assert_eq!(stats.rejected.iter().sum::<u64>(), 4, "{stats:?}");
    let labels: Vec<_> = stats.rejects().filter(|(_, n)| *n > 0).collect();
    assert_eq!(
        labels,
        [
            ("bad_magic", 1),
            ("unknown_sender", 1),
            ("bad_tag", 1),
            ("replayed", 1)
        ],
        "metric labels"
    );
    assert_eq!(a.sock.stats().snapshot().sent, 2);

    a.shut_down().await;
    b.shut_down().await;
}

#[tokio::test]
async fn a_beat_for_another_node_is_dropped_as_wrong_recipient() {
    let (ia, ib, ic) = (id(1), id(2), id(3));
    let mut c = Agent::start("node-c", ring(ic.clone(), &[("node-a", &ia)])).await;
    let a_ring = ring(ia, &[("node-b", &ib), ("node-c", &ic)]);
    let sock = HeartbeatSocket::bind("127.0.0.1:0".parse().unwrap()).unwrap();
    let mut s = Sealer::new("node-a".into(), INC).unwrap();
    let for_b = s
        .seal(&a_ring, &beat("node-a", 1), &"node-b".into(), unix_ms_now())
        .unwrap();
    let for_c = s
        .seal(&a_ring, &beat("node-a", 1), &"node-c".into(), unix_ms_now())
        .unwrap();
    sock.send(&for_b, &[c.addr]);
    sock.send(&for_c, &[c.addr]);
    assert_eq!(c.beats.recv().await.unwrap().sequence, 2);
    let stats = c.sock.stats().snapshot();
    assert_eq!(stats.rejected(Reject::WrongRecipient), 1, "{stats:?}");
    c.shut_down().await;
}

#[tokio::test]
async fn a_peer_key_change_takes_effect_on_the_running_receiver() {
    let (ia, ib, new_a) = (id(1), id(2), id(11));
    let mut b = Agent::start("node-b", ring(ib.clone(), &[("node-a", &ia)])).await;
    let sock = HeartbeatSocket::bind("127.0.0.1:0".parse().unwrap()).unwrap();
    let mut s = Sealer::new("node-a".into(), INC).unwrap();
    let new_ring = ring(new_a.clone(), &[("node-b", &ib)]);

    // node-a restarted with a new identity; node-b has not seen its Lease change yet.
    let early = s
        .seal(
            &new_ring,
            &beat("node-a", 1),
            &"node-b".into(),
            unix_ms_now(),
        )
        .unwrap();
    sock.send(&early, &[b.addr]);
    let judged = async {
        while b.sock.stats().snapshot().rejected(Reject::BadTag) == 0 {
            tokio::time::sleep(std::time::Duration::from_millis(5)).await;
        }
    };
    tokio::time::timeout(std::time::Duration::from_secs(5), judged)
        .await
        .expect("the beat under the new key is rejected while node-b has the old one");
    let change = b
        .keyring
        .write()
        .unwrap()
        .set_peer("node-a".into(), new_a.public())
        .unwrap();
    assert_eq!(change, PeerKeyChange::Changed);
    let late = s
        .seal(
            &new_ring,
            &beat("node-a", 1),
            &"node-b".into(),
            unix_ms_now(),
        )
        .unwrap();
    sock.send(&late, &[b.addr]);
    assert_eq!(b.beats.recv().await.unwrap().sequence, 2);
    let stats = b.sock.stats().snapshot();
    assert_eq!(
        (stats.accepted, stats.rejected(Reject::BadTag)),
        (1, 1),
        "{stats:?}"
    );
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
