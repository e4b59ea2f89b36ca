//! Sealing and verification: identities, pairwise keys, authentication, freshness and replay
//! rules. Three nodes (`node-a`, `node-b`, `node-c`) with fixed secrets, and `mallory`, a
//! compromised node that holds only its own secret.

use std::{os::unix::fs::PermissionsExt, path::PathBuf, sync::LazyLock};

use announcer_ebpf::wire::MacAddr;
use proptest::prelude::*;

use super::{keyring::pairwise_key, *};

const NOW: u64 = 1_700_000_000_000;
const INC: u64 = 1_700_000_000_000_000_000;
const MAC: MacAddr = MacAddr([2, 0, 0, 0, 0, 1]);

fn id(b: u8) -> Identity {
    Identity::from_secret_bytes([b; KEY_LEN])
}

fn a() -> Identity {
    id(1)
}
fn b() -> Identity {
    id(2)
}
fn c() -> Identity {
    id(3)
}
fn mallory() -> Identity {
    id(9)
}

fn n(s: &str) -> NodeName {
    NodeName::from(s)
}

/// `own`'s keyring with the real public keys of `peers`.
fn ring(own: Identity, peers: &[(&str, Identity)]) -> Keyring {
    let mut k = Keyring::new(own);
    for (name, peer) in peers {
        k.set_peer(n(name), peer.public()).unwrap();
    }
    k
}

/// Every node's keyring, derived once (X25519 is slow in debug builds).
struct Cluster {
    a: Keyring,
    b: Keyring,
    c: Keyring,
}

static CLUSTER: LazyLock<Cluster> = LazyLock::new(|| Cluster {
    a: ring(
        a(),
        &[("node-b", b()), ("node-c", c()), ("mallory", mallory())],
    ),
    b: ring(
        b(),
        &[("node-a", a()), ("node-c", c()), ("mallory", mallory())],
    ),
    c: ring(
        c(),
        &[("node-a", a()), ("node-b", b()), ("mallory", mallory())],
    ),
});

fn beat() -> Beat {
    Beat {
        node: n("node-a"),
        incarnation: INC,
        mac: MAC,
        leaving: false,
        api_ok: true,
        ready: true,
        acks: vec![],
        hears: vec![],
        config: 0x0123_4567_89ab_cdef,
        view: 0xfedc_ba98_7654_3210,
    }
}

fn sealer() -> Sealer {
    Sealer::new(n("node-a"), INC).unwrap()
}

fn verifier() -> Verifier {
    Verifier::new(n("node-b"))
}

/// One beat from node-a to node-b, sealed at `at`.
fn a_to_b(s: &mut Sealer, beat: &Beat, at: u64) -> Vec<u8> {
    s.seal(&CLUSTER.a, beat, &n("node-b"), at).unwrap()
}

fn open_at_b(v: &mut Verifier, bytes: &[u8]) -> Result<Verified, Rejected> {
    v.open(&CLUSTER.b, bytes, NOW)
}

fn reason(r: Result<Verified, Rejected>) -> Reject {
    r.unwrap_err().reason
}

fn temp_path(name: &str) -> PathBuf {
    let dir = std::env::temp_dir().join(format!("announcer-hb-{}-{name}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    std::fs::create_dir_all(&dir).unwrap();
    dir.join("heartbeat.key")
}

// --- round trips ---------------------------------------------------------------------------

#[test]
fn a_beat_sealed_for_b_round_trips() {
    let mut s = sealer();
    let mut v = verifier();
    for seq in 1..=3 {
        let sent = Beat {
            leaving: seq == 3,
            ..beat()
        };
        let got = v
            .open(&CLUSTER.b, &a_to_b(&mut s, &sent, NOW + seq), NOW)
            .unwrap();
        assert_eq!(
            got,
            Verified {
                beat: sent,
                sequence: seq,
                sent_unix_ms: NOW + seq,
            }
        );
    }
    assert_eq!(v.last_seen(&n("node-a")), Some((INC, 3)));
}

#[test]
fn the_sealed_bytes_are_the_documented_layout() {
    let bytes = a_to_b(&mut sealer(), &beat(), NOW);
    let p = Packet::new_checked(&bytes[..]).unwrap();
    assert_eq!(
        Repr::parse(&p).unwrap(),
        Repr {
            sender: n("node-a"),
            recipient: n("node-b"),
            flags: wire::flags::API_OK | wire::flags::READY,
            incarnation: INC,
            sequence: 1,
            timestamp_ms: NOW,
            mac: MAC,
            config: beat().config,
            view: beat().view,
        }
    );
    assert_eq!(bytes.len(), wire::FIXED_LEN + 6 + 6);
    assert_eq!(&bytes[..6], b"ANHB\x02\x06");
}

#[test]
fn the_sealer_names_itself_whatever_the_beat_says() {
    let b = Beat {
        node: n("other"),
        incarnation: 7,
        ..beat()
    };
    let got = open_at_b(&mut verifier(), &a_to_b(&mut sealer(), &b, NOW)).unwrap();
    assert_eq!(got.beat, beat());
}

#[test]
fn the_sequence_grows_by_one_per_sealed_datagram_across_recipients() {
    let mut s = sealer();
    a_to_b(&mut s, &beat(), NOW);
    s.seal(&CLUSTER.a, &beat(), &n("node-c"), NOW).unwrap();
    assert_eq!(s.sequence(), 2);
    let got = open_at_b(&mut verifier(), &a_to_b(&mut s, &beat(), NOW)).unwrap();
    assert_eq!(got.sequence, 3);
}

// --- per-recipient bits ---------------------------------------------------------------------

#[test]
fn ack_is_set_only_in_the_datagram_for_the_acked_node() {
    let sent = Beat {
        acks: vec![n("node-c")],
        ..beat()
    };
    let mut s = sealer();
    let for_b = open_at_b(&mut verifier(), &a_to_b(&mut s, &sent, NOW)).unwrap();
    assert_eq!(for_b.beat.acks, Vec::<NodeName>::new());
    let for_c = Verifier::new(n("node-c"))
        .open(
            &CLUSTER.c,
            &s.seal(&CLUSTER.a, &sent, &n("node-c"), NOW).unwrap(),
            NOW,
        )
        .unwrap();
    assert_eq!(for_c.beat.acks, vec![n("node-c")]);
}

#[test]
fn hears_is_set_only_in_the_datagram_for_the_heard_node() {
    let sent = Beat {
        hears: vec![n("node-b")],
        ..beat()
    };
    let mut s = sealer();
    let for_b = open_at_b(&mut verifier(), &a_to_b(&mut s, &sent, NOW)).unwrap();
    assert_eq!(for_b.beat.hears, vec![n("node-b")]);
    let for_c = Verifier::new(n("node-c"))
        .open(
            &CLUSTER.c,
            &s.seal(&CLUSTER.a, &sent, &n("node-c"), NOW).unwrap(),
            NOW,
        )
        .unwrap();
    assert_eq!(for_c.beat.hears, Vec::<NodeName>::new());
}

// --- structure -----------------------------------------------------------------------------

#[test]
fn every_proper_prefix_of_a_sealed_beat_is_truncated() {
    let bytes = a_to_b(&mut sealer(), &beat(), NOW);
    for len in 0..bytes.len() {
        assert_eq!(
            reason(open_at_b(&mut verifier(), &bytes[..len])),
            Reject::Truncated,
            "{len} bytes"
        );
    }
}

#[test]
fn every_single_bit_flip_is_rejected() {
    let bytes = a_to_b(&mut sealer(), &beat(), NOW);
    for i in 0..bytes.len() * 8 {
        let mut flipped = bytes.clone();
        flipped[i / 8] ^= 1 << (i % 8);
        let mut v = verifier();
        assert!(
            open_at_b(&mut v, &flipped).is_err(),
            "flip of bit {i} accepted"
        );
        assert_eq!(v.tracked(), 0, "bit {i}");
    }
}

#[test]
fn a_version_1_datagram_is_unsupported() {
    // What a version 1 agent sends: `ANHB`, version 1, its own layout after that.
    let mut v1 = b"ANHB\x01\x06\x06node-a".to_vec();
    v1.extend_from_slice(&[0; 31 + 16]);
    assert_eq!(
        reason(open_at_b(&mut verifier(), &v1)),
        Reject::UnsupportedVersion
    );
}

// --- who may speak --------------------------------------------------------------------------

#[test]
fn beat_sealed_for_b_is_rejected_by_c() {
    let bytes = a_to_b(&mut sealer(), &beat(), NOW);
    let got = Verifier::new(n("node-c")).open(&CLUSTER.c, &bytes, NOW);
    assert_eq!(reason(got), Reject::WrongRecipient);
}

#[test]
fn a_node_with_only_its_own_secret_cannot_speak_as_another() {
    // Mallory names itself node-a, and keys the datagram with its own secret and node-b's
    // public key: the only pairwise key it can compute with node-b is (mallory, node-b).
    let forger_ring = ring(mallory(), &[("node-b", b())]);
    let mut forger = Sealer::new(n("node-a"), INC + 1).unwrap();
    let forged = forger
        .seal(
            &forger_ring,
            &Beat {
                leaving: true,
                ..beat()
            },
            &n("node-b"),
            NOW,
        )
        .unwrap();
    let got = open_at_b(&mut verifier(), &forged).unwrap_err();
    assert_eq!(got.reason, Reject::BadTag);
    assert_eq!(got.sender, None, "an unverified name is not reported");
}

#[test]
fn a_forged_max_incarnation_leaving_beat_does_not_lock_the_real_node_out() {
    let forger_ring = ring(mallory(), &[("node-b", b())]);
    let mut forger = Sealer::new(n("node-a"), u64::MAX).unwrap();
    let forged = forger
        .seal(
            &forger_ring,
            &Beat {
                leaving: true,
                ..beat()
            },
            &n("node-b"),
            NOW,
        )
        .unwrap();
    let mut v = verifier();
    assert_eq!(reason(open_at_b(&mut v, &forged)), Reject::BadTag);
    let real = open_at_b(&mut v, &a_to_b(&mut sealer(), &beat(), NOW)).unwrap();
    assert!(!real.beat.leaving);
}

/// Issue 25, finding 7: an agent started while its clock ran an hour ahead counted its
/// incarnation from that clock, and its stored counter keeps it there across restarts; once
/// NTP corrects the clock its heartbeats' timestamps are fresh again, and it must be heard.
#[test]
fn an_agent_whose_incarnation_ran_ahead_of_a_corrected_clock_is_heard() {
    let hour_ahead = (NOW + 3_600_000) * 1_000_000;
    let mut v = verifier();
    let mut s = Sealer::new(n("node-a"), hour_ahead).unwrap();
    let got = open_at_b(&mut v, &a_to_b(&mut s, &beat(), NOW)).unwrap();
    assert_eq!(got.beat.incarnation, hour_ahead);
    // Its next run continues the counter, and is heard too.
    let mut next = Sealer::new(n("node-a"), hour_ahead + 1).unwrap();
    assert!(open_at_b(&mut v, &a_to_b(&mut next, &beat(), NOW)).is_ok());
}

/// What the future-incarnation check once prevented, a node locking its own later runs out
/// with a huge incarnation, is undone by a new identity epoch: replay state belongs to the
/// peer's key, so under a new key (a wiped or replaced identity) a lower incarnation is heard.
#[test]
fn a_node_that_claimed_a_huge_incarnation_is_heard_again_under_a_new_key() {
    let mut k = ring(b(), &[("node-a", a())]);
    let mut v = verifier();
    let mut huge = Sealer::new(n("node-a"), u64::MAX).unwrap();
    let sealed = huge.seal(&CLUSTER.a, &beat(), &n("node-b"), NOW).unwrap();
    assert!(v.open(&k, &sealed, NOW).is_ok());
    // Under the same key a lower incarnation stays rejected: no replay of older runs.
    let lower = sealer()
        .seal(&CLUSTER.a, &beat(), &n("node-b"), NOW)
        .unwrap();
    assert_eq!(reason(v.open(&k, &lower, NOW)), Reject::OldIncarnation);
    // node-a gets a new key (a new identity epoch) and starts its counter afresh.
    let new_a = id(11);
    assert_eq!(
        k.set_peer(n("node-a"), new_a.public()),
        Ok(PeerKeyChange::Changed)
    );
    let fresh = sealer()
        .seal(&ring(new_a, &[("node-b", b())]), &beat(), &n("node-b"), NOW)
        .unwrap();
    let got = v.open(&k, &fresh, NOW).unwrap();
    assert_eq!(
        v.last_seen(&n("node-a")),
        Some((INC, 1)),
        "its own counter, for replay"
    );
    // For the election it is not below the huge one (it saturates at the top).
    assert_eq!(got.beat.incarnation, u64::MAX);
    // And the old key's beats, the huge one included, are forgeries now.
    assert_eq!(reason(v.open(&k, &sealed, NOW)), Reject::BadTag);
}

/// The election core ignores a beat whose incarnation is below the last one it saw from that
/// node (`election::peer`), whatever the key. A node starting a new identity epoch may count
/// from a lower value (its counter was lost while its clock had run ahead), so the verifier
/// orders the new key's incarnations after every one of the old key: the core sees a new life.
#[test]
fn a_new_key_with_a_lower_incarnation_is_a_later_incarnation_for_the_election() {
    let mut k = ring(b(), &[("node-a", a())]);
    let mut v = verifier();
    let mut ahead = Sealer::new(n("node-a"), INC + 1_000).unwrap();
    let old = v
        .open(
            &k,
            &ahead.seal(&CLUSTER.a, &beat(), &n("node-b"), NOW).unwrap(),
            NOW,
        )
        .unwrap();
    let new_a = id(11);
    k.set_peer(n("node-a"), new_a.public()).unwrap();
    let new_ring = ring(new_a, &[("node-b", b())]);
    let mut restarted = sealer();
    let first = v
        .open(
            &k,
            &restarted
                .seal(&new_ring, &beat(), &n("node-b"), NOW)
                .unwrap(),
            NOW,
        )
        .unwrap();
    assert!(
        first.beat.incarnation > old.beat.incarnation,
        "{} <= {}",
        first.beat.incarnation,
        old.beat.incarnation
    );
    // Within the new epoch, one incarnation stays one (a healed partition is not a restart).
    let second = v
        .open(
            &k,
            &restarted
                .seal(&new_ring, &beat(), &n("node-b"), NOW)
                .unwrap(),
            NOW,
        )
        .unwrap();
    assert_eq!(second.beat.incarnation, first.beat.incarnation);
}

#[test]
fn an_incarnation_of_any_size_is_accepted_while_the_timestamp_is_fresh() {
    let limit = (NOW + 5_000) * 1_000_000;
    let mut v = verifier().with_max_skew(Duration::from_secs(5));
    let mut at_limit = Sealer::new(n("node-a"), limit).unwrap();
    assert!(open_at_b(&mut v, &a_to_b(&mut at_limit, &beat(), NOW)).is_ok());
    let mut past = Sealer::new(n("node-a"), limit + 1).unwrap();
    assert!(open_at_b(&mut verifier(), &a_to_b(&mut past, &beat(), NOW)).is_ok());
    // What stays bounded is the timestamp: the same beat sent 5.001 s ahead is refused.
    assert_eq!(
        reason(open_at_b(
            &mut verifier(),
            &a_to_b(&mut past, &beat(), NOW + 5_001)
        )),
        Reject::ClockSkew
    );
}

#[test]
fn an_unknown_sender_is_rejected_without_naming_it() {
    let stranger_ring = ring(mallory(), &[("node-b", b())]);
    let mut s = Sealer::new(n("node-z"), INC).unwrap();
    let bytes = s.seal(&stranger_ring, &beat(), &n("node-b"), NOW).unwrap();
    let got = open_at_b(&mut verifier(), &bytes).unwrap_err();
    assert_eq!(got, Rejected::from(Reject::UnknownSender));
}

#[test]
fn verifier_memory_does_not_grow_for_10000_random_sender_names() {
    let stranger_ring = ring(mallory(), &[("node-b", b())]);
    let mut v = verifier();
    open_at_b(&mut v, &a_to_b(&mut sealer(), &beat(), NOW)).unwrap();
    let mut rng = rand::rng();
    for _ in 0..10_000 {
        let name = format!("n{:016x}", rand::Rng::random::<u64>(&mut rng));
        let mut s = Sealer::new(n(&name), INC).unwrap();
        let bytes = s.seal(&stranger_ring, &beat(), &n("node-b"), NOW).unwrap();
        assert_eq!(reason(open_at_b(&mut v, &bytes)), Reject::UnknownSender);
    }
    assert_eq!(v.tracked(), 1, "only node-a, the one real peer heard");
}

#[test]
fn replay_state_stays_bounded_by_the_keyring_when_peers_are_not_forgotten() {
    let mut kb = ring(b(), &[("node-a", a()), ("node-c", c())]);
    let mut v = verifier();
    let mut sa = sealer();
    let mut sc = Sealer::new(n("node-c"), INC).unwrap();
    let from_c = |sc: &mut Sealer| sc.seal(&CLUSTER.c, &beat(), &n("node-b"), NOW).unwrap();
    v.open(&kb, &a_to_b(&mut sa, &beat(), NOW), NOW).unwrap();
    v.open(&kb, &from_c(&mut sc), NOW).unwrap();
    assert_eq!(v.tracked(), 2);
    // node-a's Lease goes; the caller drops its key but forgets to `forget` it.
    kb.remove_peer(&n("node-a"));
    kb.set_peer(n("mallory"), mallory().public()).unwrap();
    let mut sm = Sealer::new(n("mallory"), INC).unwrap();
    let from_m = sm
        .seal(
            &ring(mallory(), &[("node-b", b())]),
            &beat(),
            &n("node-b"),
            NOW,
        )
        .unwrap();
    v.open(&kb, &from_m, NOW).unwrap();
    assert_eq!(v.tracked(), 2, "node-a's state went when mallory's came");
    assert_eq!(v.last_seen(&n("node-a")), None);
}

#[test]
fn our_own_heartbeats_are_rejected() {
    let own = ring(b(), &[("node-b", b())]);
    let mut me = Sealer::new(n("node-b"), INC).unwrap();
    let bytes = me.seal(&own, &beat(), &n("node-b"), NOW).unwrap();
    assert_eq!(reason(verifier().open(&own, &bytes, NOW)), Reject::FromSelf);
}

// --- freshness and replay -------------------------------------------------------------------

#[test]
fn replays_and_reordering_are_rejected() {
    let mut s = sealer();
    let mut v = verifier();
    let first = a_to_b(&mut s, &beat(), NOW);
    let second = a_to_b(&mut s, &beat(), NOW);
    assert!(open_at_b(&mut v, &second).is_ok());
    assert_eq!(reason(open_at_b(&mut v, &second)), Reject::Replayed);
    assert_eq!(reason(open_at_b(&mut v, &first)), Reject::Replayed);
    // Rejections leave the state alone.
    assert_eq!(v.last_seen(&n("node-a")), Some((INC, 2)));
    assert!(open_at_b(&mut v, &a_to_b(&mut s, &beat(), NOW)).is_ok());
}

#[test]
fn a_new_incarnation_resets_the_sequence_and_the_old_one_is_rejected() {
    let mut old = sealer();
    let mut v = verifier();
    for _ in 0..5 {
        open_at_b(&mut v, &a_to_b(&mut old, &beat(), NOW)).unwrap();
    }
    let mut restarted = Sealer::new(n("node-a"), INC + 1).unwrap();
    let got = open_at_b(&mut v, &a_to_b(&mut restarted, &beat(), NOW)).unwrap();
    assert_eq!((got.beat.incarnation, got.sequence), (INC + 1, 1));
    let stale = open_at_b(&mut v, &a_to_b(&mut old, &beat(), NOW)).unwrap_err();
    assert_eq!(stale.reason, Reject::OldIncarnation);
    assert_eq!(stale.sender, Some(n("node-a")));
    // Once the node's Lease is gone and it is forgotten, any incarnation is heard again.
    v.forget(&n("node-a"));
    assert!(open_at_b(&mut v, &a_to_b(&mut old, &beat(), NOW)).is_ok());
}

#[test]
fn clock_skew_is_rejected_both_ways() {
    let mut s = sealer();
    let mut v = verifier().with_max_skew(Duration::from_secs(5));
    assert!(open_at_b(&mut v, &a_to_b(&mut s, &beat(), NOW - 5000)).is_ok());
    assert!(open_at_b(&mut v, &a_to_b(&mut s, &beat(), NOW + 5000)).is_ok());
    assert_eq!(
        reason(open_at_b(&mut v, &a_to_b(&mut s, &beat(), NOW - 5001))),
        Reject::ClockSkew
    );
    assert_eq!(
        reason(open_at_b(&mut v, &a_to_b(&mut s, &beat(), NOW + 5001))),
        Reject::ClockSkew
    );
    // A fresh receiver (no replay state) refuses traffic captured long ago.
    let captured = a_to_b(&mut sealer(), &beat(), NOW - 60_000);
    assert_eq!(
        reason(open_at_b(&mut verifier(), &captured)),
        Reject::ClockSkew
    );
}

#[test]
fn clock_skew_reports_the_sender_and_the_skew() {
    let ahead = open_at_b(
        &mut verifier(),
        &a_to_b(&mut sealer(), &beat(), NOW + 10_200),
    )
    .unwrap_err();
    assert_eq!(
        ahead,
        Rejected {
            reason: Reject::ClockSkew,
            sender: Some(n("node-a")),
            skew_ms: Some(10_200),
        }
    );
    assert_eq!(
        ahead.to_string(),
        "heartbeats from node-a are rejected: timestamp outside the allowed clock skew \
         (its clock is 10.2 s ahead; it is heard again as soon as its clock is corrected, \
         without a restart)"
    );
    let behind = open_at_b(
        &mut verifier(),
        &a_to_b(&mut sealer(), &beat(), NOW - 61_500),
    )
    .unwrap_err();
    assert_eq!(behind.skew_ms, Some(-61_500));
    assert!(
        behind.to_string().ends_with(
            "(its clock is 61.5 s behind; it is heard again as soon as its clock is corrected, \
             without a restart)"
        ),
        "{behind}"
    );
}

// --- keys -----------------------------------------------------------------------------------

#[test]
fn both_ends_derive_the_same_pairwise_key_and_other_pairs_another() {
    let ab = pairwise_key(&a(), &b().public()).unwrap();
    assert_eq!(ab, pairwise_key(&b(), &a().public()).unwrap());
    assert_ne!(ab, pairwise_key(&a(), &c().public()).unwrap());
    assert_ne!(ab, pairwise_key(&mallory(), &b().public()).unwrap());
}

#[test]
fn a_low_order_peer_key_is_refused_and_the_peer_dropped() {
    let mut k = ring(b(), &[("node-a", a())]);
    let zero = PublicKey([0; KEY_LEN]);
    assert_eq!(
        k.set_peer(n("node-a"), zero),
        Err(KeyError::LowOrderPoint { key: zero })
    );
    assert!(
        !k.contains("node-a"),
        "neither the old nor the bad key is trusted"
    );
    assert!(
        KeyError::LowOrderPoint { key: zero }
            .to_string()
            .contains(LEASE_ANNOTATION)
    );
}

#[test]
fn a_peer_key_change_is_reported_and_old_key_beats_fail() {
    let mut k = Keyring::new(b());
    assert_eq!(
        k.set_peer(n("node-a"), a().public()),
        Ok(PeerKeyChange::Added)
    );
    assert_eq!(
        k.set_peer(n("node-a"), a().public()),
        Ok(PeerKeyChange::Unchanged)
    );
    let before = a_to_b(&mut sealer(), &beat(), NOW);
    let new_a = id(11);
    assert_eq!(
        k.set_peer(n("node-a"), new_a.public()),
        Ok(PeerKeyChange::Changed)
    );
    assert_eq!(k.peer_key("node-a"), Some(new_a.public()));
    assert_eq!(k.len(), 1);
    assert_eq!(reason(verifier().open(&k, &before, NOW)), Reject::BadTag);
    let after = sealer()
        .seal(&ring(new_a, &[("node-b", b())]), &beat(), &n("node-b"), NOW)
        .unwrap();
    assert!(verifier().open(&k, &after, NOW).is_ok());
}

#[test]
fn a_removed_peer_is_an_unknown_sender() {
    let mut k = ring(b(), &[("node-a", a())]);
    assert!(k.remove_peer(&n("node-a")));
    assert!(k.is_empty());
    let bytes = a_to_b(&mut sealer(), &beat(), NOW);
    assert_eq!(
        reason(verifier().open(&k, &bytes, NOW)),
        Reject::UnknownSender
    );
}

#[test]
fn sealing_for_a_peer_without_a_key_fails_and_uses_no_sequence() {
    let mut s = sealer();
    assert_eq!(
        s.seal(&CLUSTER.a, &beat(), &n("node-x"), NOW),
        Err(SealError::NoKey { node: n("node-x") })
    );
    assert_eq!(s.sequence(), 0);
}

#[test]
fn bad_node_names_are_refused() {
    assert!(matches!(
        Sealer::new(n("Node_A"), 1),
        Err(KeyError::BadNodeName { .. })
    ));
    assert!(matches!(
        Keyring::new(b()).set_peer(n("Node_A"), a().public()),
        Err(KeyError::BadNodeName { .. })
    ));
}

#[test]
fn public_keys_print_and_parse_as_base64() {
    let key = a().public();
    let text = key.to_string();
    assert_eq!(text.len(), 44);
    assert_eq!(text.parse::<PublicKey>(), Ok(key));
    assert_eq!(
        format!(" {text}\n").parse::<PublicKey>(),
        Ok(key),
        "whitespace is trimmed"
    );
}

#[test]
fn a_bad_published_key_says_what_is_wrong() {
    let not_b64 = "not base64!".parse::<PublicKey>().unwrap_err();
    assert!(matches!(not_b64, PublicKeyError::Base64 { .. }));
    assert!(not_b64.to_string().contains(LEASE_ANNOTATION), "{not_b64}");
    let short = "AAAA".parse::<PublicKey>().unwrap_err();
    assert_eq!(short, PublicKeyError::WrongLength { len: 3 });
    assert!(short.to_string().contains("32 bytes"), "{short}");
}

#[test]
fn an_identity_never_prints_its_secret() {
    let secret = PublicKey([1; KEY_LEN]).to_string(); // the secret bytes of `a()`, as base64
    let shown = format!("{:?} {:?}", a(), ring(a(), &[("node-b", b())]));
    assert!(!shown.contains(&secret), "{shown}");
    assert!(shown.contains(&a().public().to_string()));
}

// --- identity file --------------------------------------------------------------------------

#[test]
fn an_identity_file_is_created_0600_and_reloads_the_same_key() {
    let path = temp_path("create");
    let (made, created) = Identity::load_or_create(&path).unwrap();
    assert!(created);
    let meta = std::fs::metadata(&path).unwrap();
    assert_eq!(meta.permissions().mode() & 0o777, 0o600);
    assert_eq!(meta.len(), KEY_LEN as u64);
    let (loaded, created) = Identity::load_or_create(&path).unwrap();
    assert!(!created);
    assert_eq!(loaded.public(), made.public());
    let left: Vec<_> = std::fs::read_dir(path.parent().unwrap())
        .unwrap()
        .map(|e| e.unwrap().file_name())
        .collect();
    assert_eq!(
        left,
        [std::ffi::OsString::from("heartbeat.key")],
        "no temporary file left"
    );
}

#[test]
fn an_identity_file_readable_by_others_is_refused() {
    let path = temp_path("mode");
    Identity::load_or_create(&path).unwrap();
    std::fs::set_permissions(&path, std::fs::Permissions::from_mode(0o644)).unwrap();
    let err = Identity::load_or_create(&path).unwrap_err();
    assert!(
        matches!(err, IdentityError::Permissions { mode: 0o644, .. }),
        "{err}"
    );
    let text = err.to_string();
    assert!(text.contains(&path.display().to_string()), "{text}");
    assert!(text.contains("chmod 600"), "{text}");
}

#[test]
fn an_identity_file_of_the_wrong_size_is_refused() {
    let path = temp_path("size");
    std::fs::write(&path, b"too short").unwrap();
    std::fs::set_permissions(&path, std::fs::Permissions::from_mode(0o600)).unwrap();
    let err = Identity::load_or_create(&path).unwrap_err();
    assert!(
        matches!(err, IdentityError::WrongSize { len: 9, .. }),
        "{err}"
    );
    assert!(err.to_string().contains(&path.display().to_string()));
}

#[test]
fn generated_identities_differ() {
    assert_ne!(Identity::generate().public(), Identity::generate().public());
}

// --- metrics labels -------------------------------------------------------------------------

#[test]
fn reasons_are_distinct_labels_in_index_order() {
    let labels: std::collections::BTreeSet<_> = Reject::ALL.iter().map(|r| r.reason()).collect();
    assert_eq!(labels.len(), Reject::ALL.len());
    for (i, r) in Reject::ALL.iter().enumerate() {
        assert_eq!(r.index(), i);
        assert!(
            r.reason()
                .bytes()
                .all(|b| b.is_ascii_lowercase() || b == b'_')
        );
    }
}

proptest! {
    #[test]
    fn random_bytes_never_panic(bytes in proptest::collection::vec(any::<u8>(), 0..1400),
                                keep_header in any::<bool>()) {
        let mut bytes = bytes;
        if keep_header && bytes.len() >= 14 {
            bytes[..4].copy_from_slice(&wire::MAGIC);
            bytes[4] = wire::VERSION;
            bytes[6] = 6;
            bytes[7..13].copy_from_slice(b"node-a");
        }
        let _ = verifier().open(&CLUSTER.b, &bytes, NOW);
        if let Ok(p) = Packet::new_checked(&bytes[..]) {
            let _ = Repr::parse(&p);
        }
    }

    #[test]
    fn sealed_beats_round_trip(leaving in any::<bool>(), api_ok in any::<bool>(),
                               ready in any::<bool>(), ack in any::<bool>(),
                               hears in any::<bool>(), mac in any::<[u8; 6]>(),
                               config in any::<u64>(), view in any::<u64>(),
                               at in 0u64..u64::MAX / 2_000_000) {
        let only_b = |on: bool| if on { vec![n("node-b")] } else { vec![] };
        let sent = Beat {
            leaving, api_ok, ready, mac: MacAddr(mac), config, view,
            acks: only_b(ack),
            hears: only_b(hears),
            incarnation: at * 1_000_000,
            ..beat()
        };
        let mut s = Sealer::new(n("node-a"), at * 1_000_000).unwrap();
        let got = verifier().open(&CLUSTER.b, &a_to_b(&mut s, &sent, at), at).unwrap();
        prop_assert_eq!(got.beat, sent);
    }
}
