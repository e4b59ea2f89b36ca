//! The cluster-wide view of who announces what: the `announcer.dev/Announced` condition in a
//! Service's `status.conditions`, written by the agents that announce its VIPs and read by
//! `announcer status --cluster` and `kubectl`.
//!
//! Why a Service condition and not a resource of our own: it sits where users already look
//! (`kubectl describe svc`), it needs no extra watch, it is removed with the Service, and it
//! is written only when an owner changes (a takeover), so steady-state API writes stay flat.
//! Each owner rewrites only its own VIPs' entries (read from the Service it watches, written
//! back with that `resourceVersion`), so two owners of one dual-stack Service do not undo each
//! other.
//!
//! The message is for people and for the CLI: one entry per VIP, `"; "`-separated, each
//! `<ip> by <node> on <interface>`, sorted by address, e.g.
//! `10.0.0.5 by node-a on eth0; fd00::5 by node-b on eth0`. [`parse`] reads it back.

use std::{collections::BTreeSet, fmt, net::IpAddr};

use k8s_openapi::{api::core::v1::Service, apimachinery::pkg::apis::meta::v1::Condition};

/// The condition's `type`.
pub const CONDITION_TYPE: &str = "announcer.dev/Announced";
/// `reason` when every ingress IP of the Service has an owner.
pub const REASON_ANNOUNCED: &str = "Announced";
/// `reason` when only some have (status `False`).
pub const REASON_PARTIAL: &str = "PartiallyAnnounced";

/// One VIP and the node and interface announcing it.
#[derive(Clone, Debug, PartialEq, Eq, PartialOrd, Ord)]
pub struct Entry {
    /// The VIP.
    pub ip: IpAddr,
    /// The announcing node.
    pub node: String,
    /// Its interface (empty when the agent runs without a data plane).
    pub iface: String,
}

impl fmt::Display for Entry {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{} by {} on {}", self.ip, self.node, self.iface)
    }
}

/// The Service's ingress IPs (entries without a parsable `ip` are left out).
pub fn ingress_ips(svc: &Service) -> BTreeSet<IpAddr> {
    svc.status
        .as_ref()
        .and_then(|s| s.load_balancer.as_ref())
        .and_then(|lb| lb.ingress.as_ref())
        .into_iter()
        .flatten()
        .filter_map(|i| i.ip.as_deref()?.parse().ok())
        .collect()
}

/// The Service's `announcer.dev/Announced` condition, if any.
pub fn condition(svc: &Service) -> Option<&Condition> {
    svc.status
        .as_ref()?
        .conditions
        .as_ref()?
        .iter()
        .find(|c| c.type_ == CONDITION_TYPE)
}

/// The condition message for `entries` (sorted by address here).
pub fn format(entries: &[Entry]) -> String {
    let mut e = entries.to_vec();
    e.sort();
    e.iter()
        .map(ToString::to_string)
        .collect::<Vec<_>>()
        .join("; ")
}

/// The entries of a condition message; parts that are not entries are skipped.
pub fn parse(message: &str) -> Vec<Entry> {
    message
        .split("; ")
        .filter_map(|part| {
            let (ip, rest) = part.split_once(" by ")?;
            let (node, iface) = rest.split_once(" on ")?;
            Some(Entry {
                ip: ip.trim().parse().ok()?,
                node: node.to_owned(),
                iface: iface.to_owned(),
            })
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    fn entry(ip: &str, node: &str, iface: &str) -> Entry {
        Entry {
            ip: ip.parse().unwrap(),
            node: node.into(),
            iface: iface.into(),
        }
    }

    #[test]
    fn message_round_trips_sorted_by_address() {
        let e = [
            entry("fd00::5", "node-b", "eth0"),
            entry("10.0.0.5", "node-a", "eth1"),
        ];
        let m = format(&e);
        assert_eq!(m, "10.0.0.5 by node-a on eth1; fd00::5 by node-b on eth0");
        assert_eq!(parse(&m), vec![e[1].clone(), e[0].clone()]);
    }

    #[test]
    fn parse_skips_parts_that_are_not_entries() {
        assert_eq!(
            parse("hello; 10.0.0.5 by n on "),
            vec![entry("10.0.0.5", "n", "")]
        );
    }
}
