//! The cap across replicas: the nodes withdrawn now, in one shared object, the Lease
//! `announcer-withdrawal` in the announcer namespace (annotation [`WITHDRAWN_ANNOTATION`]).
//!
//! Why a shared object: every replica acts (no leader election: a withdrawal must not wait
//! for one), so each replica's own [`crate::withdraw::Tracker`] caps only what *it* does. Two
//! replicas that see different nodes proven gone at the same moment would together exceed
//! `max_withdrawn`. A slot is claimed by compare-and-swap on the Lease's `resourceVersion`
//! (409: re-read and decide again); a node listed already is held (another replica claimed it
//! for the same proof: go on, the Pod writes are idempotent).
//!
//! Why entries carry a time: a replica that claimed a slot and died before the node returned
//! would otherwise hold it forever (a restarted replica knows nothing of it and never frees
//! it). An entry older than the TTL (default 10 min, far beyond the node lifecycle
//! controller's 40–55 s takeover, after which our slot means nothing) no longer counts and
//! is dropped at the next write. This is wall-clock time, compared across replicas; it only
//! bounds a leak, no decision to withdraw depends on it.

use std::{collections::BTreeMap, fmt, time::Duration};

use k8s_openapi::{
    api::coordination::v1::{Lease, LeaseSpec},
    apimachinery::pkg::apis::meta::v1::ObjectMeta,
    jiff::{SignedDuration, Timestamp},
};
use kube::{
    Api,
    api::{PostParams, Resource},
};

use crate::election::NodeName;

/// The shared Lease's name.
pub const LEASE_NAME: &str = "announcer-withdrawal";
/// Its annotation: `node=RFC 3339 time` entries, space-separated, sorted by node.
pub const WITHDRAWN_ANNOTATION: &str = "announcer.dev/withdrawn";
/// How many read-decide-write rounds a claim or release makes before giving up.
const ATTEMPTS: usize = 8;

/// An entry of the annotation that is not `node=time`.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
#[error("{WITHDRAWN_ANNOTATION}: entry {entry:?} is not node=RFC3339-time")]
pub struct BadEntry {
    /// The entry (cut to 80 characters).
    pub entry: String,
}

/// The withdrawn nodes and when each was claimed.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Slots(pub BTreeMap<NodeName, Timestamp>);

/// What a claim of a slot for a node finds.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Claim {
    /// The node holds a slot already.
    Held,
    /// A slot is free: write these slots.
    Take(Slots),
    /// Every slot is held by these nodes.
    Full(Vec<NodeName>),
}

impl Slots {
    /// Parses an annotation value; bad entries are dropped and returned (a value nobody can
    /// read must not stop withdrawals for good; it is overwritten at the next claim).
    pub fn parse(s: &str) -> (Slots, Vec<BadEntry>) {
        let mut slots = BTreeMap::new();
        let mut bad = Vec::new();
        for entry in s.split_ascii_whitespace() {
            match entry
                .split_once('=')
                .and_then(|(n, t)| Some((n, t.parse::<Timestamp>().ok()?)))
            {
                Some((node, at)) if !node.is_empty() => {
                    slots.insert(NodeName::from(node), at);
                }
                _ => bad.push(BadEntry {
                    entry: entry.chars().take(80).collect(),
                }),
            }
        }
        (Slots(slots), bad)
    }

    /// The entries younger than `ttl` at `now`.
    fn live(&self, now: Timestamp, ttl: Duration) -> Slots {
        let ttl = SignedDuration::try_from(ttl).unwrap_or(SignedDuration::MAX);
        Slots(
            self.0
                .iter()
                .filter(|(_, at)| now.duration_since(**at) < ttl)
                .map(|(n, at)| (n.clone(), *at))
                .collect(),
        )
    }

    /// A slot for `node`, at most `max` held at once.
    pub fn claim(&self, node: &NodeName, max: usize, now: Timestamp, ttl: Duration) -> Claim {
        let mut live = self.live(now, ttl);
        if live.0.contains_key(node) {
            return Claim::Held;
        }
        if live.0.len() >= max {
            return Claim::Full(live.0.into_keys().collect());
        }
        live.0.insert(node.clone(), now);
        Claim::Take(live)
    }

    /// The slots without `node`, if it held one.
    pub fn release(&self, node: &NodeName) -> Option<Slots> {
        self.0.contains_key(node).then(|| {
            let mut s = self.clone();
            s.0.remove(node);
            s
        })
    }
}

impl fmt::Display for Slots {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        for (i, (node, at)) in self.0.iter().enumerate() {
            if i > 0 {
                f.write_str(" ")?;
            }
            write!(f, "{node}={at}")?;
        }
        Ok(())
    }
}

/// The slots a Lease holds (bad entries logged and dropped).
pub fn of_lease(lease: &Lease) -> Slots {
    let value = lease
        .metadata
        .annotations
        .as_ref()
        .and_then(|a| a.get(WITHDRAWN_ANNOTATION))
        .map_or("", String::as_str);
    let (slots, bad) = Slots::parse(value);
    for e in bad {
        tracing::warn!(lease = LEASE_NAME, error = %e, "dropping a bad slot entry");
    }
    slots
}

/// What [`SlotLease::claim`] did.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum ClaimOutcome {
    /// The node has a slot: `taken` now by this replica, or held already (another replica
    /// claimed it for the same proof).
    Granted {
        /// Whether this replica took it.
        taken: bool,
    },
    /// Every slot is held, by these nodes.
    Full(Vec<NodeName>),
}

/// Why the shared Lease could not be read or written.
#[derive(Debug, thiserror::Error)]
pub enum SlotError {
    /// The API server refused or failed.
    #[error("Lease {LEASE_NAME}: {0}")]
    Api(#[from] kube::Error),
    /// Other writers won every round.
    #[error("Lease {LEASE_NAME}: still conflicting after {ATTEMPTS} attempts")]
    Contention,
}

/// The shared Lease, in one namespace.
#[derive(Clone)]
pub struct SlotLease {
    api: Api<Lease>,
    max: usize,
    ttl: Duration,
}

fn is_conflict(e: &kube::Error) -> bool {
    matches!(e, kube::Error::Api(s) if s.code == 409)
}

impl SlotLease {
    /// The Lease in `api`'s namespace, `max` slots, entries living `ttl`.
    pub fn new(api: Api<Lease>, max: usize, ttl: Duration) -> Self {
        SlotLease { api, max, ttl }
    }

    /// Claims a slot for `node`.
    pub async fn claim(&self, node: &NodeName) -> Result<ClaimOutcome, SlotError> {
        for _ in 0..ATTEMPTS {
            let now = Timestamp::now();
            let Some(lease) = self.api.get_opt(LEASE_NAME).await? else {
                let slots = Slots([(node.clone(), now)].into());
                match self
                    .api
                    .create(&PostParams::default(), &new_lease(&slots))
                    .await
                {
                    Ok(_) => return Ok(ClaimOutcome::Granted { taken: true }),
                    Err(e) if is_conflict(&e) => continue,
                    Err(e) => return Err(e.into()),
                }
            };
            match of_lease(&lease).claim(node, self.max, now, self.ttl) {
                Claim::Held => return Ok(ClaimOutcome::Granted { taken: false }),
                Claim::Full(holders) => return Ok(ClaimOutcome::Full(holders)),
                Claim::Take(slots) => match self.write(lease, &slots).await {
                    Ok(()) => return Ok(ClaimOutcome::Granted { taken: true }),
                    Err(e) if is_conflict(&e) => continue,
                    Err(e) => return Err(e.into()),
                },
            }
        }
        Err(SlotError::Contention)
    }

    /// Frees `node`'s slot (nothing to do if it holds none).
    pub async fn release(&self, node: &NodeName) -> Result<(), SlotError> {
        for _ in 0..ATTEMPTS {
            let Some(lease) = self.api.get_opt(LEASE_NAME).await? else {
                return Ok(());
            };
            let Some(slots) = of_lease(&lease).release(node) else {
                return Ok(());
            };
            match self.write(lease, &slots).await {
                Ok(()) => return Ok(()),
                Err(e) if is_conflict(&e) => continue,
                Err(e) => return Err(e.into()),
            }
        }
        Err(SlotError::Contention)
    }

    /// Replaces `lease` (over its resourceVersion) with `slots` in its annotation.
    async fn write(&self, mut lease: Lease, slots: &Slots) -> Result<(), kube::Error> {
        lease
            .meta_mut()
            .annotations
            .get_or_insert_default()
            .insert(WITHDRAWN_ANNOTATION.into(), slots.to_string());
        lease.metadata.managed_fields = None;
        self.api
            .replace(LEASE_NAME, &PostParams::default(), &lease)
            .await
            .map(|_| ())
    }
}

/// The shared Lease, first written with `slots` (the manifests normally create it empty).
fn new_lease(slots: &Slots) -> Lease {
    Lease {
        metadata: ObjectMeta {
            name: Some(LEASE_NAME.into()),
            annotations: Some([(WITHDRAWN_ANNOTATION.into(), slots.to_string())].into()),
            labels: Some(
                [(
                    "app.kubernetes.io/name".to_string(),
                    "announcer".to_string(),
                )]
                .into(),
            ),
            ..ObjectMeta::default()
        },
        spec: Some(LeaseSpec::default()),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const TTL: Duration = Duration::from_secs(600);

    fn t(s: &str) -> Timestamp {
        s.parse().unwrap()
    }

    fn n(s: &str) -> NodeName {
        s.into()
    }

    #[test]
    fn slots_round_trip_through_the_annotation() {
        let s = Slots(
            [
                (n("node-d"), t("2026-12-04T13:45:01Z")),
                (n("node-c"), t("2026-12-04T13:45:00Z")),
            ]
            .into(),
        );
        let text = s.to_string();
        assert_eq!(
            text,
            "node-c=2026-12-04T13:45:00Z node-d=2026-12-04T13:45:01Z"
        );
        assert_eq!(Slots::parse(&text), (s, vec![]));
    }

    #[test]
    fn a_bad_entry_is_dropped_and_named_and_the_rest_kept() {
        let (s, bad) = Slots::parse("node-c=2026-12-04T13:45:00Z node-d =yesterday");
        assert_eq!(s.0.keys().cloned().collect::<Vec<_>>(), [n("node-c")]);
        assert_eq!(
            bad,
            ["node-d", "=yesterday"].map(|e| BadEntry { entry: e.into() })
        );
    }

    #[test]
    fn a_node_already_listed_holds_its_slot_even_when_all_are_taken() {
        let (s, _) = Slots::parse("node-c=2026-12-04T13:45:00Z node-d=2026-12-04T13:45:00Z");
        assert_eq!(
            s.claim(&n("node-c"), 2, t("2026-12-04T13:46:00Z"), TTL),
            Claim::Held
        );
    }

    #[test]
    fn a_claim_beyond_max_is_full_naming_the_holders() {
        let (s, _) = Slots::parse("node-c=2026-12-04T13:45:00Z node-d=2026-12-04T13:45:00Z");
        assert_eq!(
            s.claim(&n("node-e"), 2, t("2026-12-04T13:46:00Z"), TTL),
            Claim::Full(vec![n("node-c"), n("node-d")])
        );
    }

    #[test]
    fn a_claim_under_max_takes_a_slot_stamped_now() {
        let (s, _) = Slots::parse("node-c=2026-12-04T13:45:00Z");
        let now = t("2026-12-04T13:46:00Z");
        let Claim::Take(new) = s.claim(&n("node-e"), 2, now, TTL) else {
            panic!("expected a slot");
        };
        assert_eq!(new.0.get(&n("node-e")), Some(&now));
        assert_eq!(new.0.len(), 2);
    }

    #[test]
    fn an_entry_older_than_the_ttl_frees_its_slot_and_is_dropped() {
        let (s, _) = Slots::parse("node-c=2026-12-04T13:00:00Z");
        let Claim::Take(new) = s.claim(&n("node-e"), 1, t("2026-12-04T13:20:00Z"), TTL) else {
            panic!("the stale entry must not count");
        };
        assert_eq!(new.0.keys().cloned().collect::<Vec<_>>(), [n("node-e")]);
    }

    #[test]
    fn release_removes_only_that_node_and_is_nothing_for_an_unlisted_one() {
        let (s, _) = Slots::parse("node-c=2026-12-04T13:45:00Z node-d=2026-12-04T13:45:00Z");
        let r = s.release(&n("node-c")).unwrap();
        assert_eq!(r.to_string(), "node-d=2026-12-04T13:45:00Z");
        assert_eq!(s.release(&n("node-x")), None);
    }
}
