//! Rendezvous (highest-random-weight) hashing: the owner of a VIP is the candidate with the
//! highest `score(node, vip)`.
//!
//! Why: it needs no shared state and no per-VIP writes. Every agent that knows the same
//! candidates computes the same owner; a node leaving moves only the VIPs it owned (each to its
//! own runner-up), and a node joining takes about `M / (N + 1)` of `M` VIPs, the ones it now
//! tops (Thaler & Ravishankar, "Using name-based mappings to increase hit rates", 1998).
//!
//! The score is XXH3-64 of the node name, a separator and the VIP's address bytes (4 for IPv4,
//! 16 for IPv6). XXH3 is fixed by its specification, so agents of different builds and
//! architectures agree. Ties (probability 2^-64) go to the greater node name.
//!
//! Balance is statistical: with `N` nodes each owns a binomial share of `M` VIPs, standard
//! deviation `sqrt(M (1/N) (1 - 1/N))`; the simulator and `cargo xtask bench control-plane`
//! report the measured spread.

use std::{collections::BTreeSet, net::IpAddr};

use xxhash_rust::xxh3::Xxh3;

use super::NodeName;

/// The weight of `node` for `vip`.
pub fn score(node: &NodeName, vip: IpAddr) -> u64 {
    let mut h = Xxh3::new();
    h.update(node.as_str().as_bytes());
    h.update(&[0]);
    match vip {
        IpAddr::V4(a) => h.update(&a.octets()),
        IpAddr::V6(a) => h.update(&a.octets()),
    }
    h.digest()
}

/// The owner of `vip` among `candidates`: the highest score, ties to the greater name.
pub fn owner<'a>(
    vip: IpAddr,
    candidates: impl IntoIterator<Item = &'a NodeName>,
) -> Option<&'a NodeName> {
    candidates.into_iter().max_by_key(|n| (score(n, vip), *n))
}

/// The top of `candidates` for an arbitrary key (a Service name): used to pick one node to
/// report a cluster-wide problem, so that not every node raises the same Event.
pub fn owner_of_key<'a>(
    key: &[u8],
    candidates: impl IntoIterator<Item = &'a NodeName>,
) -> Option<&'a NodeName> {
    candidates.into_iter().max_by_key(|n| {
        let mut h = Xxh3::new();
        h.update(n.as_str().as_bytes());
        h.update(&[1]);
        h.update(key);
        (h.digest(), *n)
    })
}

/// All `candidates` ordered from owner to last resort.
pub fn ranking<'a>(
    vip: IpAddr,
    candidates: impl IntoIterator<Item = &'a NodeName>,
) -> Vec<&'a NodeName> {
    let mut v: Vec<_> = candidates.into_iter().map(|n| (score(n, vip), n)).collect();
    v.sort_by(|a, b| b.cmp(a));
    v.into_iter().map(|(_, n)| n).collect()
}

/// [`ranking`], with the `preferred` candidates first (each group in rendezvous order): an
/// `AddressPool`'s `preferredNodes`. A preferred node that comes back ranks first again and
/// takes the VIP back the way any returning top node does, make-before-break.
pub fn ranking_preferring<'a>(
    vip: IpAddr,
    candidates: impl IntoIterator<Item = &'a NodeName>,
    preferred: &BTreeSet<NodeName>,
) -> Vec<&'a NodeName> {
    let mut v: Vec<_> = candidates
        .into_iter()
        .map(|n| (preferred.contains(n), score(n, vip), n))
        .collect();
    v.sort_by(|a, b| b.cmp(a));
    v.into_iter().map(|(_, _, n)| n).collect()
}

/// One VIP's ranking ([`ranking_preferring`]) as the core keeps it: its best
/// [`Ranking::KEPT`] nodes, with the rest computed only when a walk gets past them.
///
/// Why: the core walks a VIP's ranking from the top and stops at the first candidate, almost
/// always within the first few nodes. A full ranking per VIP costs N names of memory (16 KB per
/// VIP at 1,000 nodes, 160 MB at 10,000 VIPs) and N hashes and a sort whenever the eligible
/// nodes change; this keeps 16 and is updated in place when a few nodes join or leave.
///
/// Pitfall: the ranking is of `eligible` and `preferred` as given to [`Ranking::new`] and
/// [`Ranking::update`]; [`Ranking::iter`] must be given the same sets, which the core keeps
/// beside it in the VIP's spec.
#[derive(Clone, Debug, Default)]
pub struct Ranking {
    /// The best nodes, best first: a prefix of the full ranking.
    top: Vec<Ranked>,
    /// `top` holds every eligible node.
    complete: bool,
}

/// One ranked node and the key it is ranked by (greater first).
#[derive(Clone, Debug, PartialEq, Eq, PartialOrd, Ord)]
struct Ranked {
    preferred: bool,
    score: u64,
    node: NodeName,
}

impl Ranked {
    fn of(vip: IpAddr, node: &NodeName, preferred: &BTreeSet<NodeName>) -> Self {
        Ranked {
            preferred: preferred.contains(node),
            score: score(node, vip),
            node: node.clone(),
        }
    }
}

impl Ranking {
    /// How many of the best nodes are kept.
    pub const KEPT: usize = 16;
    /// Below this many kept nodes (of more eligible), [`Ranking::update`] ranks afresh.
    const REFILL: usize = Self::KEPT / 2;

    /// Ranks `eligible` for `vip`: O(N) hashes, a selection, and a sort of the kept few.
    pub fn new(vip: IpAddr, eligible: &BTreeSet<NodeName>, preferred: &BTreeSet<NodeName>) -> Self {
        let mut all: Vec<Ranked> = eligible
            .iter()
            .map(|n| Ranked::of(vip, n, preferred))
            .collect();
        let complete = all.len() <= Self::KEPT;
        if !complete {
            all.select_nth_unstable_by(Self::KEPT - 1, |a, b| b.cmp(a));
            all.truncate(Self::KEPT);
            all.shrink_to_fit(); // else each VIP keeps room for N
        }
        all.sort_unstable_by(|a, b| b.cmp(a));
        Ranking { top: all, complete }
    }

    /// The ranking after `added` joined and `removed` left the eligible nodes (now
    /// `eligible`), with `preferred` unchanged: O(changes · KEPT) unless the kept nodes run
    /// low, then [`Ranking::new`].
    pub fn update(
        &mut self,
        vip: IpAddr,
        eligible: &BTreeSet<NodeName>,
        preferred: &BTreeSet<NodeName>,
        added: &[NodeName],
        removed: &[NodeName],
    ) {
        self.top.retain(|r| !removed.contains(&r.node));
        for n in added {
            let r = Ranked::of(vip, n, preferred);
            // A prefix stays a prefix when a node joins behind it, unless it held them all.
            let at = self.top.partition_point(|t| *t > r);
            if at < self.top.len() || self.complete {
                self.top.insert(at, r);
            }
        }
        self.top.truncate(Self::KEPT);
        self.complete = self.top.len() == eligible.len();
        if !self.complete && self.top.len() < Self::REFILL {
            *self = Ranking::new(vip, eligible, preferred);
        }
    }

    /// The eligible nodes, best first. Past the kept ones the full ranking is computed from
    /// `eligible` and `preferred` (which must be the sets it was ranked from), for this walk
    /// only: O(N log N), and rare (no candidate among the kept nodes).
    pub fn iter<'a>(
        &'a self,
        vip: IpAddr,
        eligible: &'a BTreeSet<NodeName>,
        preferred: &'a BTreeSet<NodeName>,
    ) -> impl Iterator<Item = &'a NodeName> + 'a {
        let kept = self.top.len();
        let complete = self.complete;
        self.top
            .iter()
            .map(|r| &r.node)
            .chain(std::iter::once(()).flat_map(move |()| {
                let rest = if complete {
                    Vec::new()
                } else {
                    ranking_preferring(vip, eligible, preferred)
                };
                rest.into_iter().skip(kept)
            }))
    }
}

#[cfg(test)]
mod tests {
    use std::{collections::BTreeMap, net::Ipv4Addr};

    use super::*;

    fn nodes(n: usize) -> Vec<NodeName> {
        (0..n)
            .map(|i| NodeName::from(format!("node-{i}")))
            .collect()
    }

    fn vips(m: u32) -> Vec<IpAddr> {
        (0..m)
            .map(|i| IpAddr::V4(Ipv4Addr::from(0x0a00_0000 + i)))
            .collect()
    }

    const PINNED_V4: u64 = 11849662717611604172;
    const PINNED_V6: u64 = 6569097146412088708;

    #[test]
    fn score_is_stable_across_builds() {
        // Pinned values: a change here would split a mixed-version cluster.
        let n = NodeName::from("node-a");
        assert_eq!(
            score(&n, "10.0.0.5".parse().unwrap()),
            score(&n, "10.0.0.5".parse().unwrap())
        );
        assert_ne!(
            score(&n, "10.0.0.5".parse().unwrap()),
            score(&n, "10.0.0.6".parse().unwrap())
        );
        assert_eq!(score(&n, "10.0.0.5".parse().unwrap()), PINNED_V4);
        assert_eq!(score(&n, "fd00::5".parse().unwrap()), PINNED_V6);
    }

    #[test]
    fn owner_is_first_of_ranking() {
        let ns = nodes(7);
        for v in vips(200) {
            assert_eq!(owner(v, &ns), Some(ranking(v, &ns)[0]));
        }
    }

    #[test]
    fn leaving_moves_only_the_leavers_vips() {
        let ns = nodes(10);
        let vs = vips(5000);
        let before: Vec<_> = vs.iter().map(|v| owner(*v, &ns).unwrap().clone()).collect();
        let gone = ns[3].clone();
        let rest: Vec<_> = ns.iter().filter(|n| **n != gone).cloned().collect();
        for (v, b) in vs.iter().zip(&before) {
            let after = owner(*v, &rest).unwrap();
            if *b != gone {
                assert_eq!(after, b, "{v} moved although its owner stayed");
            }
        }
    }

    #[test]
    fn joining_takes_about_one_share() {
        let ns = nodes(9);
        let vs = vips(9000);
        let mut with = ns.clone();
        with.push(NodeName::from("node-new"));
        let moved = vs
            .iter()
            .filter(|v| owner(**v, &ns) != owner(**v, &with))
            .count();
        // Expect 9000 / 10 = 900, binomial sd = 28.
        assert!((780..=1020).contains(&moved), "moved {moved}");
        // And every moved VIP went to the newcomer.
        for v in &vs {
            if owner(*v, &ns) != owner(*v, &with) {
                assert_eq!(owner(*v, &with).unwrap().as_str(), "node-new");
            }
        }
    }

    #[test]
    fn balance_within_ten_percent() {
        for (n, m) in [(3, 3000), (10, 10000), (50, 50000)] {
            let ns = nodes(n);
            let mut count: BTreeMap<&NodeName, usize> = BTreeMap::new();
            for v in vips(m as u32) {
                *count.entry(owner(v, &ns).unwrap()).or_default() += 1;
            }
            let share = m as f64 / n as f64;
            for (node, c) in count {
                let dev = (c as f64 - share).abs() / share;
                assert!(
                    dev <= 0.10,
                    "{node} owns {c} of {m} with {n} nodes ({:.1}% off)",
                    dev * 100.0
                );
            }
        }
    }
}

#[cfg(test)]
mod ranking_tests {
    use std::net::Ipv4Addr;

    use super::*;

    fn set(ids: impl IntoIterator<Item = u32>) -> BTreeSet<NodeName> {
        ids.into_iter()
            .map(|i| NodeName::from(format!("node-{i}")))
            .collect()
    }

    fn walked(
        r: &Ranking,
        vip: IpAddr,
        e: &BTreeSet<NodeName>,
        p: &BTreeSet<NodeName>,
    ) -> Vec<NodeName> {
        r.iter(vip, e, p).cloned().collect()
    }

    fn full(vip: IpAddr, e: &BTreeSet<NodeName>, p: &BTreeSet<NodeName>) -> Vec<NodeName> {
        ranking_preferring(vip, e, p).into_iter().cloned().collect()
    }

    #[test]
    fn a_kept_ranking_walks_like_the_full_one() {
        let preferred = set([3, 17, 40]);
        for n in [0, 1, 5, 16, 17, 100] {
            let e = set(0..n);
            for i in 0..50 {
                let vip = IpAddr::V4(Ipv4Addr::from(0x0a00_0000 + i));
                let r = Ranking::new(vip, &e, &preferred);
                assert_eq!(
                    walked(&r, vip, &e, &preferred),
                    full(vip, &e, &preferred),
                    "{n} nodes, {vip}"
                );
            }
        }
    }

    #[test]
    fn a_ranking_updated_in_place_walks_like_one_ranked_afresh() {
        // Nodes join and leave one at a time (a Node turning Ready, an endpoint moving);
        // every step is checked against a full ranking of the new set.
        let vip = IpAddr::V4(Ipv4Addr::new(10, 0, 0, 7));
        let preferred = set([5, 9]);
        let mut e = set(0..40);
        let mut r = Ranking::new(vip, &e, &preferred);
        let mut x: u64 = 0x9e37_79b9_7f4a_7c15;
        for step in 0..2000 {
            x ^= x << 13;
            x ^= x >> 7;
            x ^= x << 17;
            let id = (x % 60) as u32;
            let node = NodeName::from(format!("node-{id}"));
            let (added, removed) = if e.contains(&node) {
                e.remove(&node);
                (vec![], vec![node])
            } else {
                e.insert(node.clone());
                (vec![node], vec![])
            };
            r.update(vip, &e, &preferred, &added, &removed);
            assert_eq!(
                walked(&r, vip, &e, &preferred),
                full(vip, &e, &preferred),
                "step {step}"
            );
        }
    }

    #[test]
    fn a_ranking_whose_kept_nodes_all_leave_ranks_afresh() {
        let vip = IpAddr::V4(Ipv4Addr::new(10, 0, 0, 9));
        let none = BTreeSet::new();
        let mut e = set(0..100);
        let mut r = Ranking::new(vip, &e, &none);
        let gone: Vec<NodeName> = r
            .iter(vip, &e, &none)
            .take(Ranking::KEPT)
            .cloned()
            .collect();
        for n in &gone {
            e.remove(n);
        }
        r.update(vip, &e, &none, &[], &gone);
        assert_eq!(walked(&r, vip, &e, &none), full(vip, &e, &none));
    }
}
