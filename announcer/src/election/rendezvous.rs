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

use std::net::IpAddr;

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
    preferred: &std::collections::BTreeSet<NodeName>,
) -> Vec<&'a NodeName> {
    let mut v: Vec<_> = candidates
        .into_iter()
        .map(|n| (preferred.contains(n), score(n, vip), n))
        .collect();
    v.sort_by(|a, b| b.cmp(a));
    v.into_iter().map(|(_, _, n)| n).collect()
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
