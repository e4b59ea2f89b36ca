//! One agent's report: the peers it has proven unreachable, in an annotation on its own node
//! Lease (which the admission policy lets no other node write).
//!
//! The value is the peers' node names, space-separated and sorted (`node-b node-c`); empty or
//! absent means none. An agent lists a peer only while all three are silent: its heartbeats,
//! its data plane (the probe of a VIP at the MAC it answers with) and its kernel (ARP for an
//! IPv4 InternalIP, RFC 826; a Neighbor Solicitation for an IPv6 one, RFC 4861 §7.2.2). No
//! time is carried: the controller times reports by its own clock, so a node whose clock steps
//! cannot make a report look older or newer than it is.

use std::{collections::BTreeSet, fmt, str::FromStr};

use crate::election::NodeName;

/// The annotation on an agent's node Lease.
pub const UNREACHABLE_ANNOTATION: &str = "announcer.dev/unreachable";

/// The longest node name Kubernetes accepts (a DNS subdomain, RFC 1123).
const MAX_NAME: usize = 253;

/// The peers one agent has proven unreachable.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Report {
    /// Sorted, no duplicates.
    pub unreachable: BTreeSet<NodeName>,
}

/// Why an annotation value is not a report.
#[derive(Debug, thiserror::Error, PartialEq, Eq)]
pub enum ReportError {
    /// A word is not a node name (a lowercase RFC 1123 subdomain).
    #[error("{UNREACHABLE_ANNOTATION}: {word:?} is not a node name")]
    BadName {
        /// The offending word.
        word: String,
    },
}

impl Report {
    /// A report of `nodes`.
    pub fn of(nodes: impl IntoIterator<Item = NodeName>) -> Self {
        Report {
            unreachable: nodes.into_iter().collect(),
        }
    }

    /// Whether it lists no node.
    pub fn is_empty(&self) -> bool {
        self.unreachable.is_empty()
    }
}

impl FromStr for Report {
    type Err = ReportError;

    fn from_str(s: &str) -> Result<Self, Self::Err> {
        let mut unreachable = BTreeSet::new();
        for word in s.split_ascii_whitespace() {
            if !is_node_name(word) {
                return Err(ReportError::BadName {
                    word: word.chars().take(80).collect(),
                });
            }
            unreachable.insert(NodeName::from(word));
        }
        Ok(Report { unreachable })
    }
}

impl fmt::Display for Report {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        for (i, n) in self.unreachable.iter().enumerate() {
            if i > 0 {
                f.write_str(" ")?;
            }
            f.write_str(n.as_str())?;
        }
        Ok(())
    }
}

/// A lowercase RFC 1123 subdomain: dot-separated labels of `a-z`, `0-9` and `-`, each starting
/// and ending alphanumeric, at most [`MAX_NAME`] bytes.
fn is_node_name(s: &str) -> bool {
    s.len() <= MAX_NAME
        && s.split('.').all(|label| {
            let b = label.as_bytes();
            !b.is_empty()
                && b.len() <= 63
                && b.iter()
                    .all(|c| c.is_ascii_lowercase() || c.is_ascii_digit() || *c == b'-')
                && b[0] != b'-'
                && b[b.len() - 1] != b'-'
        })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_report_round_trips_sorted_without_duplicates() {
        let r: Report = "node-c node-b node-c".parse().unwrap();
        assert_eq!(r.to_string(), "node-b node-c");
        assert_eq!(r.to_string().parse::<Report>().unwrap(), r);
    }

    #[test]
    fn an_empty_value_reports_nobody() {
        assert!("".parse::<Report>().unwrap().is_empty());
        assert!("  ".parse::<Report>().unwrap().is_empty());
    }

    #[test]
    fn a_word_that_is_not_a_node_name_is_an_error_naming_it() {
        assert_eq!(
            "node-b Node_C".parse::<Report>(),
            Err(ReportError::BadName {
                word: "Node_C".into()
            })
        );
        assert!("-a".parse::<Report>().is_err());
        assert!("a..b".parse::<Report>().is_err());
        assert!("worker-1.example.com".parse::<Report>().is_ok());
    }
}
