//! Address ranges as an `AddressPool` lists them: `10.0.0.0/24`, `fd00::/120`, and inclusive
//! `10.0.0.10-10.0.0.20` (both ends of one family, first ≤ last).
//!
//! Why our own small type rather than a CIDR crate: pools mix CIDRs with arbitrary inclusive
//! ranges, and all the allocator needs is "first address, last address, family" with
//! containment, overlap, size and in-order iteration. Both families are held as `u128` (IPv4
//! in the low 32 bits), so one code path serves both and nothing allocates.

use std::{
    fmt,
    net::{IpAddr, Ipv4Addr, Ipv6Addr},
};

/// An address family.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub enum Family {
    /// IPv4.
    V4,
    /// IPv6.
    V6,
}

impl Family {
    /// The family of `ip`.
    pub fn of(ip: IpAddr) -> Family {
        match ip {
            IpAddr::V4(_) => Family::V4,
            IpAddr::V6(_) => Family::V6,
        }
    }

    /// Its name in `spec.ipFamilies`.
    pub fn k8s_name(self) -> &'static str {
        match self {
            Family::V4 => "IPv4",
            Family::V6 => "IPv6",
        }
    }

    /// Parses a `spec.ipFamilies` entry.
    pub fn from_k8s(s: &str) -> Option<Family> {
        match s {
            "IPv4" => Some(Family::V4),
            "IPv6" => Some(Family::V6),
            _ => None,
        }
    }

    /// The other family.
    pub fn other(self) -> Family {
        match self {
            Family::V4 => Family::V6,
            Family::V6 => Family::V4,
        }
    }

    fn bits(self) -> u32 {
        match self {
            Family::V4 => 32,
            Family::V6 => 128,
        }
    }
}

impl fmt::Display for Family {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.k8s_name())
    }
}

/// Why an address entry does not parse. Each variant names the text.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
pub enum RangeError {
    /// Neither a CIDR nor a range: an end or the network is not an address.
    #[error("{text:?}: not an IP address, CIDR or range")]
    NotAnAddress {
        /// The entry.
        text: String,
    },
    /// The prefix length is not a number within the family's width.
    #[error("{text:?}: bad prefix length")]
    BadPrefix {
        /// The entry.
        text: String,
    },
    /// The two ends of a range are of different families.
    #[error("{text:?}: the ends of a range must be of one family")]
    MixedFamilies {
        /// The entry.
        text: String,
    },
    /// The first end is after the last.
    #[error("{text:?}: the first address is after the last")]
    Reversed {
        /// The entry.
        text: String,
    },
}

/// An inclusive range of addresses of one family.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct Range {
    family: Family,
    first: u128,
    last: u128,
}

fn to_u128(ip: IpAddr) -> u128 {
    match ip {
        IpAddr::V4(a) => u128::from(u32::from(a)),
        IpAddr::V6(a) => u128::from(a),
    }
}

fn from_u128(family: Family, v: u128) -> IpAddr {
    match family {
        // Only ever called with values inside an IPv4 range, so the truncation is exact.
        Family::V4 => IpAddr::V4(Ipv4Addr::from(v as u32)),
        Family::V6 => IpAddr::V6(Ipv6Addr::from(v)),
    }
}

impl Range {
    /// Parses `a.b.c.d/len`, an IPv6 CIDR, or `first-last`. Host bits in a CIDR are ignored
    /// (`10.0.0.5/24` is `10.0.0.0/24`), as the CRD's `isCIDR` accepts them.
    pub fn parse(text: &str) -> Result<Range, RangeError> {
        let t = text.trim();
        let bad = || RangeError::NotAnAddress { text: text.into() };
        if let Some((net, len)) = t.split_once('/') {
            let ip: IpAddr = net.trim().parse().map_err(|_| bad())?;
            let family = Family::of(ip);
            let len: u32 = len
                .trim()
                .parse()
                .ok()
                .filter(|l| *l <= family.bits())
                .ok_or_else(|| RangeError::BadPrefix { text: text.into() })?;
            let host_bits = family.bits() - len;
            let mask = if host_bits == 128 {
                0
            } else {
                !((1u128 << host_bits) - 1)
            };
            let width_mask = if family.bits() == 128 {
                u128::MAX
            } else {
                (1u128 << family.bits()) - 1
            };
            let first = to_u128(ip) & mask & width_mask;
            let last = first | (!mask & width_mask);
            return Ok(Range {
                family,
                first,
                last,
            });
        }
        if let Some((a, b)) = t.split_once('-') {
            let a: IpAddr = a.trim().parse().map_err(|_| bad())?;
            let b: IpAddr = b.trim().parse().map_err(|_| bad())?;
            if Family::of(a) != Family::of(b) {
                return Err(RangeError::MixedFamilies { text: text.into() });
            }
            let (first, last) = (to_u128(a), to_u128(b));
            if first > last {
                return Err(RangeError::Reversed { text: text.into() });
            }
            return Ok(Range {
                family: Family::of(a),
                first,
                last,
            });
        }
        let ip: IpAddr = t.parse().map_err(|_| bad())?;
        Ok(Range::single(ip))
    }

    /// The range of one address.
    pub fn single(ip: IpAddr) -> Range {
        let v = to_u128(ip);
        Range {
            family: Family::of(ip),
            first: v,
            last: v,
        }
    }

    /// Its family.
    pub fn family(&self) -> Family {
        self.family
    }

    /// Its first address.
    pub fn first(&self) -> IpAddr {
        from_u128(self.family, self.first)
    }

    /// Its last address.
    pub fn last(&self) -> IpAddr {
        from_u128(self.family, self.last)
    }

    /// How many addresses it holds (a whole IPv6 space saturates at `u128::MAX`).
    pub fn size(&self) -> u128 {
        (self.last - self.first).saturating_add(1)
    }

    /// How many of its addresses are IPv4 `.0` or `.255` (none for IPv6).
    pub fn buggy_count(&self) -> u128 {
        if self.family != Family::V4 {
            return 0;
        }
        // Addresses x in [0, n] with x % 256 in {0, 255}.
        let upto = |n: u128| n / 256 * 2 + 1 + u128::from(n % 256 == 255);
        let below = if self.first == 0 {
            0
        } else {
            upto(self.first - 1)
        };
        upto(self.last) - below
    }

    /// Whether it holds `ip`.
    pub fn contains(&self, ip: IpAddr) -> bool {
        Family::of(ip) == self.family && (self.first..=self.last).contains(&to_u128(ip))
    }

    /// Whether the two share an address.
    pub fn overlaps(&self, other: &Range) -> bool {
        self.family == other.family && self.first <= other.last && other.first <= self.last
    }

    /// Its addresses in order, starting at `from` (or the first, if `from` is before it).
    pub fn iter_from(&self, from: Option<IpAddr>) -> impl Iterator<Item = IpAddr> + use<> {
        let family = self.family;
        let start = from
            .filter(|f| Family::of(*f) == family)
            .map_or(self.first, |f| to_u128(f).max(self.first));
        let last = self.last;
        (start..=last).map(move |v| from_u128(family, v))
    }

    /// Its addresses in order.
    pub fn iter(&self) -> impl Iterator<Item = IpAddr> + use<> {
        self.iter_from(None)
    }
}

impl fmt::Display for Range {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}-{}", self.first(), self.last())
    }
}

/// Whether `ip` is an IPv4 address ending in `.0` or `.255`.
pub fn is_buggy(ip: IpAddr) -> bool {
    matches!(ip, IpAddr::V4(a) if matches!(a.octets()[3], 0 | 255))
}

/// A count for the pool status: saturates at `i64::MAX`.
pub fn saturating_i64(n: u128) -> i64 {
    i64::try_from(n).unwrap_or(i64::MAX)
}

#[cfg(test)]
mod tests {
    use proptest::prelude::*;

    use super::*;

    fn ip(s: &str) -> IpAddr {
        s.parse().unwrap()
    }

    #[test]
    fn ipv4_cidr_covers_its_network() {
        let r = Range::parse("10.0.0.0/24").unwrap();
        assert_eq!((r.first(), r.last()), (ip("10.0.0.0"), ip("10.0.0.255")));
        assert_eq!(r.size(), 256);
        assert_eq!(r.family(), Family::V4);
    }

    #[test]
    fn host_bits_of_a_cidr_are_ignored() {
        assert_eq!(
            Range::parse("10.0.0.77/24").unwrap(),
            Range::parse("10.0.0.0/24").unwrap()
        );
    }

    #[test]
    fn ipv6_cidr_and_whole_spaces_parse() {
        let r = Range::parse("fd00::/120").unwrap();
        assert_eq!((r.first(), r.last()), (ip("fd00::"), ip("fd00::ff")));
        assert_eq!(Range::parse("::/0").unwrap().size(), u128::MAX);
        assert_eq!(Range::parse("0.0.0.0/0").unwrap().size(), 1 << 32);
        assert_eq!(Range::parse("10.1.2.3/32").unwrap().size(), 1);
    }

    #[test]
    fn inclusive_range_parses_with_both_ends() {
        let r = Range::parse("10.0.0.10-10.0.0.20").unwrap();
        assert_eq!(r.size(), 11);
        assert!(r.contains(ip("10.0.0.10")) && r.contains(ip("10.0.0.20")));
        assert!(!r.contains(ip("10.0.0.21")) && !r.contains(ip("fd00::a")));
        assert_eq!(Range::parse("fd00::1 - fd00::3").unwrap().size(), 3);
    }

    #[test]
    fn reversed_range_is_an_error_naming_the_text() {
        let e = Range::parse("10.0.0.20-10.0.0.10").unwrap_err();
        assert_eq!(
            e,
            RangeError::Reversed {
                text: "10.0.0.20-10.0.0.10".into()
            }
        );
        assert!(e.to_string().contains("10.0.0.20-10.0.0.10"));
    }

    #[test]
    fn mixed_family_range_is_an_error() {
        assert!(matches!(
            Range::parse("10.0.0.1-fd00::1"),
            Err(RangeError::MixedFamilies { .. })
        ));
    }

    #[test]
    fn garbage_and_bad_prefixes_are_errors() {
        assert!(matches!(
            Range::parse("10.0.0/24"),
            Err(RangeError::NotAnAddress { .. })
        ));
        assert!(matches!(
            Range::parse("10.0.0.0/33"),
            Err(RangeError::BadPrefix { .. })
        ));
        assert!(matches!(
            Range::parse("fd00::/129"),
            Err(RangeError::BadPrefix { .. })
        ));
        assert!(matches!(
            Range::parse("x-y"),
            Err(RangeError::NotAnAddress { .. })
        ));
    }

    #[test]
    fn overlap_needs_one_family_and_a_shared_address() {
        let a = Range::parse("10.0.0.0/24").unwrap();
        assert!(a.overlaps(&Range::parse("10.0.0.255-10.0.1.5").unwrap()));
        assert!(!a.overlaps(&Range::parse("10.0.1.0/24").unwrap()));
        assert!(!a.overlaps(&Range::parse("::/0").unwrap()));
    }

    #[test]
    fn iteration_is_in_order_and_starts_where_asked() {
        let r = Range::parse("10.0.0.254-10.0.1.1").unwrap();
        let all: Vec<_> = r.iter().collect();
        assert_eq!(
            all,
            [
                ip("10.0.0.254"),
                ip("10.0.0.255"),
                ip("10.0.1.0"),
                ip("10.0.1.1")
            ]
        );
        assert_eq!(r.iter_from(Some(ip("10.0.1.0"))).count(), 2);
        assert_eq!(r.iter_from(Some(ip("1.0.0.0"))).count(), 4);
    }

    #[test]
    fn buggy_addresses_are_counted() {
        assert_eq!(Range::parse("10.0.0.0/24").unwrap().buggy_count(), 2);
        assert_eq!(
            Range::parse("10.0.0.1-10.0.0.254").unwrap().buggy_count(),
            0
        );
        assert_eq!(Range::parse("0.0.0.0/0").unwrap().buggy_count(), 1 << 25);
        assert_eq!(Range::parse("fd00::/120").unwrap().buggy_count(), 0);
    }

    #[test]
    fn sizes_saturate_for_status() {
        assert_eq!(
            saturating_i64(Range::parse("fd00::/64").unwrap().size()),
            i64::MAX
        );
        assert_eq!(saturating_i64(256), 256);
    }

    proptest! {
        #[test]
        fn buggy_count_matches_iteration(a in 0u32..5000, len in 0u32..2000) {
            let first = Ipv4Addr::from(a);
            let last = Ipv4Addr::from(a + len);
            let r = Range::parse(&format!("{first}-{last}")).unwrap();
            let counted = r.iter().filter(|i| is_buggy(*i)).count() as u128;
            prop_assert_eq!(r.buggy_count(), counted);
        }

        #[test]
        fn overlap_is_symmetric_and_agrees_with_containment(
            a in 0u32..300, b in 0u32..300, c in 0u32..300, d in 0u32..300
        ) {
            let mk = |x: u32, y: u32| {
                let (x, y) = (x.min(y), x.max(y));
                Range::parse(&format!("{}-{}", Ipv4Addr::from(x), Ipv4Addr::from(y))).unwrap()
            };
            let (r, s) = (mk(a, b), mk(c, d));
            prop_assert_eq!(r.overlaps(&s), s.overlaps(&r));
            let shared = r.iter().any(|i| s.contains(i));
            prop_assert_eq!(r.overlaps(&s), shared);
        }
    }
}
