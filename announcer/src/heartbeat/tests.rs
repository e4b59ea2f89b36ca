//! Sealing and verification: authentication, freshness and replay rules.

use announcer_ebpf::wire::MacAddr;
use proptest::prelude::*;

use super::*;

const NOW: u64 = 1_700_000_000_000;
const INC: u64 = 1_700_000_000_000_000_000;
const MAC: MacAddr = MacAddr([2, 0, 0, 0, 0, 1]);

fn key(b: u8) -> Key {
    Key::new(&[b; 32]).unwrap()
}

fn beat() -> Beat {
    Beat {
        node: "node-a".into(),
        incarnation: INC,
        mac: MAC,
        leaving: false,
        api_ok: true,
        ready: true,
        acks: vec!["node-c".into()],
        hears: vec![],
        config: 0,
        view: 0,
    }
}

fn sealer() -> Sealer {
    Sealer::new(key(1), "node-a".into(), INC).unwrap()
}

fn verifier() -> Verifier {
    Verifier::new(Keys::new(key(1)), "node-b".into())
}

#[test]
fn round_trip() {
    let mut s = sealer();
    let mut v = verifier();
    for seq in 1..=3 {
        let b = Beat {
            leaving: seq == 3,
            ..beat()
        };
        let got = v.open(&s.seal(&b, NOW + seq), NOW).unwrap();
        assert_eq!(
            got,
            Verified {
                beat: b,
                sequence: seq,
                sent_unix_ms: NOW + seq,
                key: KeyUsed::Current,
            }
        );
    }
    assert_eq!(v.last_seen(&"node-a".into()), Some((INC, 3)));
}

#[test]
fn the_sealer_names_itself_whatever_the_beat_says() {
    let mut s = sealer();
    let b = Beat {
        node: "other".into(),
        incarnation: 7,
        ..beat()
    };
    let got = verifier().open(&s.seal(&b, NOW), NOW).unwrap();
    assert_eq!(got.beat, beat());
}

#[test]
fn every_single_bit_flip_is_rejected() {
    let bytes = sealer().seal(&beat(), NOW);
    for i in 0..bytes.len() * 8 {
        let mut b = bytes.clone();
        b[i / 8] ^= 1 << (i % 8);
        let mut v = verifier();
        assert!(v.open(&b, NOW).is_err(), "flip of bit {i} accepted");
        assert_eq!(v.last_seen(&"node-a".into()), None, "bit {i}");
    }
}

#[test]
fn the_wrong_key_is_rejected_and_the_previous_one_accepted() {
    let bytes = sealer().seal(&beat(), NOW);
    let mut other = Verifier::new(Keys::new(key(2)), "node-b".into());
    assert_eq!(other.open(&bytes, NOW).unwrap_err(), Reject::BadTag);

    let mut rotating = Verifier::new(Keys::rotating(key(2), key(1)), "node-b".into());
    assert_eq!(rotating.open(&bytes, NOW).unwrap().key, KeyUsed::Previous);

    // After the rotation, the sender switches and the receiver drops the old key.
    let mut s = sealer();
    s.seal(&beat(), NOW);
    s.set_key(key(2));
    let mut done = Verifier::new(Keys::new(key(2)), "node-b".into());
    let got = done.open(&s.seal(&beat(), NOW), NOW).unwrap();
    assert_eq!((got.key, got.sequence), (KeyUsed::Current, 2));
    assert_eq!(done.open(&bytes, NOW).unwrap_err(), Reject::BadTag);
}

#[test]
fn short_keys_and_bad_names_are_refused() {
    assert_eq!(
        Key::new(&[0; 15]).unwrap_err(),
        KeyError::TooShort { len: 15 }
    );
    assert!(Key::new(&[0; 16]).is_ok());
    assert!(KeyError::TooShort { len: 3 }.to_string().contains("16"));
    assert!(matches!(
        Sealer::new(key(1), "Node_A".into(), 1),
        Err(KeyError::BadNodeName { .. })
    ));
    assert_eq!(format!("{:?}", key(1)), "Key(..)", "keys are never printed");
}

#[test]
fn replays_and_reordering_are_rejected() {
    let mut s = sealer();
    let mut v = verifier();
    let first = s.seal(&beat(), NOW);
    let second = s.seal(&beat(), NOW);
    assert!(v.open(&second, NOW).is_ok());
    assert_eq!(v.open(&second, NOW).unwrap_err(), Reject::Replayed);
    assert_eq!(v.open(&first, NOW).unwrap_err(), Reject::Replayed);
    // Rejections leave the state alone.
    assert_eq!(v.last_seen(&"node-a".into()), Some((INC, 2)));
    assert!(v.open(&s.seal(&beat(), NOW), NOW).is_ok());
}

#[test]
fn a_new_incarnation_resets_the_sequence_and_the_old_one_is_rejected() {
    let mut old = sealer();
    let mut v = verifier();
    for _ in 0..5 {
        v.open(&old.seal(&beat(), NOW), NOW).unwrap();
    }
    let mut restarted = Sealer::new(key(1), "node-a".into(), INC + 1).unwrap();
    let got = v.open(&restarted.seal(&beat(), NOW), NOW).unwrap();
    assert_eq!((got.beat.incarnation, got.sequence), (INC + 1, 1));
    assert_eq!(
        v.open(&old.seal(&beat(), NOW), NOW).unwrap_err(),
        Reject::OldIncarnation
    );
    // Once the node's Lease is gone and it is forgotten, any incarnation is heard again.
    v.forget(&"node-a".into());
    assert!(v.open(&old.seal(&beat(), NOW), NOW).is_ok());
}

#[test]
fn clock_skew_is_rejected_both_ways() {
    let mut s = sealer();
    let mut v = verifier().with_max_skew(Duration::from_secs(5));
    assert!(v.open(&s.seal(&beat(), NOW - 5000), NOW).is_ok());
    assert!(v.open(&s.seal(&beat(), NOW + 5000), NOW).is_ok());
    assert_eq!(
        v.open(&s.seal(&beat(), NOW - 5001), NOW).unwrap_err(),
        Reject::ClockSkew
    );
    assert_eq!(
        v.open(&s.seal(&beat(), NOW + 5001), NOW).unwrap_err(),
        Reject::ClockSkew
    );
    // A fresh receiver (no replay state) refuses traffic captured long ago.
    let captured = sealer().seal(&beat(), NOW - 60_000);
    assert_eq!(
        verifier().open(&captured, NOW).unwrap_err(),
        Reject::ClockSkew
    );
}

#[test]
fn our_own_heartbeats_are_rejected() {
    let mut me = Sealer::new(key(1), "node-b".into(), INC).unwrap();
    assert_eq!(
        verifier().open(&me.seal(&beat(), NOW), NOW).unwrap_err(),
        Reject::FromSelf
    );
}

#[test]
fn every_truncation_is_rejected() {
    let bytes = sealer().seal(&beat(), NOW);
    for len in 0..bytes.len() {
        assert_eq!(
            verifier().open(&bytes[..len], NOW).unwrap_err(),
            Reject::Truncated,
            "{len} bytes"
        );
    }
}

#[test]
fn acks_are_packed_under_the_size_limit_and_rotate() {
    let long = |i: usize| NodeName::from(format!("{i}{}", "n".repeat(249)));
    let many: Vec<NodeName> = (0..6).map(long).collect();
    let b = Beat {
        acks: many.clone(),
        ..beat()
    };
    let mut s = sealer();
    let mut v = verifier();
    let mut heard = std::collections::BTreeSet::new();
    for _ in 0..6 {
        let bytes = s.seal(&b, NOW);
        assert!(bytes.len() <= MAX_DATAGRAM, "{}", bytes.len());
        let got = v.open(&bytes, NOW).unwrap();
        assert_eq!(got.beat.acks.len(), 4, "four 250-byte names fit");
        heard.extend(got.beat.acks);
    }
    assert_eq!(heard.len(), 6, "every ack got through within a few beats");

    // Short names: up to MAX_ACKS, in order; invalid names are never sent.
    let names: Vec<NodeName> = (0..10).map(|i| format!("n{i}").into()).collect();
    let mut with_bad = names.clone();
    with_bad.insert(0, "Not_A_Node".into());
    let got = v
        .open(
            &s.seal(
                &Beat {
                    acks: names[..8].to_vec(),
                    ..beat()
                },
                NOW,
            ),
            NOW,
        )
        .unwrap();
    assert_eq!(got.beat.acks, names[..8].to_vec());
    let got = v
        .open(
            &s.seal(
                &Beat {
                    acks: with_bad,
                    ..beat()
                },
                NOW,
            ),
            NOW,
        )
        .unwrap();
    assert_eq!(got.beat.acks.len(), wire::MAX_ACKS);
    assert!(got.beat.acks.iter().all(|a| names.contains(a)));
}

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
                                keep_magic in any::<bool>()) {
        let mut bytes = bytes;
        if keep_magic && bytes.len() >= 5 {
            bytes[..4].copy_from_slice(&wire::MAGIC);
            bytes[4] = wire::VERSION;
        }
        let _ = verifier().open(&bytes, NOW);
        if let Ok(p) = Packet::new_checked(&bytes[..]) {
            let _ = Repr::parse(&p);
            let _ = p.acks().count();
        }
    }

    #[test]
    fn sealed_beats_round_trip(leaving in any::<bool>(), api_ok in any::<bool>(),
                               ready in any::<bool>(), mac in any::<[u8; 6]>(),
                               acks in proptest::collection::vec("[a-z0-9]{1,20}", 0..8),
                               at in 0u64..u64::MAX / 2) {
        let b = Beat {
            leaving, api_ok, ready, mac: MacAddr(mac),
            acks: acks.into_iter().map(NodeName::from).collect(),
            ..beat()
        };
        let got = verifier().open(&sealer().seal(&b, at), at).unwrap();
        prop_assert_eq!(got.beat, b);
    }
}
