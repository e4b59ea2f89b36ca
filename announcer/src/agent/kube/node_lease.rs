//! This node's Lease (`coordination.k8s.io/v1`), and reading peers' Leases.
//!
//! Why one Lease per node rather than per Service: API cost then grows with nodes, not with
//! Services × nodes (see [`super::lease_per_service`] for the alternative, kept for comparison).
//! The Lease says "this agent is alive and can reach the API server", and carries where to
//! send it heartbeats (`announcer.dev/heartbeat`) and whether it has left for good
//! (`announcer.dev/released`). Every write carries the `resourceVersion` last seen, so two
//! writers (an agent and its restarted self) can never overwrite each other silently: the
//! loser gets 409 and re-reads (optimistic concurrency, Kubernetes API conventions).

use std::{collections::BTreeMap, net::SocketAddr, sync::Mutex, time::Duration};

use k8s_openapi::{
    api::coordination::v1::{Lease, LeaseSpec},
    apimachinery::pkg::apis::meta::v1::{MicroTime, ObjectMeta},
    jiff::Timestamp,
};
use kube::{Api, Client, api::PostParams};
use xxhash_rust::xxh3::xxh3_64;

use crate::{
    election::{LeaseView, LeaseWriteResult, Link, NodeName, Subnet},
    wire::MacAddr,
    withdraw::{Report, UNREACHABLE_ANNOTATION},
};

/// Prefix of node Lease names: `announcer-node-<node>`.
pub const LEASE_PREFIX: &str = "announcer-node-";
/// `app.kubernetes.io/name` on every object the agent writes.
pub const APP_LABEL: (&str, &str) = ("app.kubernetes.io/name", "announcer");
/// Marks node Leases (as opposed to the lease-per-service mode's).
pub const KIND_LABEL: (&str, &str) = ("announcer.dev/lease", "node");
/// Annotation: the node's heartbeat address, `ip:port`.
pub const HEARTBEAT_ANNOTATION: &str = "announcer.dev/heartbeat";
/// Annotation: `"true"` once the node has handed its VIPs over and left.
pub const RELEASED_ANNOTATION: &str = "announcer.dev/released";
/// Annotation: the node's heartbeat public key (X25519, base64). Peers derive the pairwise
/// key of its heartbeats from it.
pub const KEY_ANNOTATION: &str = "announcer.dev/heartbeat-key";
/// Annotation: `"true"` while the node has stepped back (it exchanges heartbeats with no peer).
pub const STANDBY_ANNOTATION: &str = "announcer.dev/standby";
/// Annotation: how many peers the node exchanges heartbeats with both ways.
pub const CONNECTED_ANNOTATION: &str = "announcer.dev/connected";
/// Annotation: the links the node can announce on, space-separated, each
/// `MAC=subnet,subnet[,*]` (`*`: VIPs in no subnet of any link go there), e.g.
/// `02:00:00:00:00:01=10.0.0.0/24,fd00::/64,* 02:00:00:00:01:01=10.1.0.0/24`.
pub const LINKS_ANNOTATION: &str = "announcer.dev/links";
/// Annotation: the interface names of those links, space-separated, in the same order (an
/// `AddressPool`'s `interfaces` are matched against them). Apart from the links annotation so
/// that agents that predate it, during a roll, still parse the links.
pub const LINK_NAMES_ANNOTATION: &str = "announcer.dev/link-names";
/// Annotation: the interfaces where the node's data plane is down (the XDP program could not
/// be attached: another program is there, or the kernel refused), space-separated. Their links
/// stay in the links annotation (with their subnets, so that a VIP of theirs is not taken for
/// one of the fallback link's), and peers read them as down ([`Link::down`]): they rank the
/// node for no VIP that belongs on them. Agents that predate it rank it as before.
pub const DATAPLANE_DOWN_ANNOTATION: &str = "announcer.dev/dataplane-down";

/// The link-names annotation's value (`None` when some link has no name).
pub fn format_link_names(links: &[Link]) -> Option<String> {
    let names: Option<Vec<&str>> = links.iter().map(|l| l.name.as_deref()).collect();
    names.map(|n| n.join(" "))
}

/// Names the links from the link-names annotation; a count that does not match names none
/// (an annotation out of step with the links says nothing reliable).
pub fn apply_link_names(links: &mut [Link], names: &str) {
    let names: Vec<&str> = names.split_whitespace().collect();
    if names.len() == links.len() {
        for (l, n) in links.iter_mut().zip(names) {
            l.name = Some(n.into());
        }
    }
}

/// The links annotation's value.
pub fn format_links(links: &[Link]) -> String {
    links
        .iter()
        .map(|l| {
            let mut parts: Vec<String> = l.subnets.iter().map(Subnet::to_string).collect();
            if l.fallback {
                parts.push("*".into());
            }
            format!("{}={}", l.mac, parts.join(","))
        })
        .collect::<Vec<_>>()
        .join(" ")
}

/// Parses the links annotation; the error says what is wrong.
pub fn parse_links(value: &str) -> Result<Vec<Link>, String> {
    value
        .split_whitespace()
        .map(|entry| {
            let (mac, rest) = entry
                .split_once('=')
                .ok_or_else(|| format!("{entry:?}: expected MAC=subnets"))?;
            let mac: MacAddr = mac.parse().map_err(|_| format!("{mac:?}: not a MAC"))?;
            let mut link = Link {
                name: None,
                mac,
                subnets: Vec::new(),
                fallback: false,
                down: false,
            };
            for part in rest.split(',').filter(|p| !p.is_empty()) {
                if part == "*" {
                    link.fallback = true;
                } else {
                    link.subnets.push(part.parse()?);
                }
            }
            Ok(link)
        })
        .collect()
}

/// The contents of this node's Lease besides its renewal: what peers read from it.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct LeaseContents {
    /// Its heartbeat public key.
    pub key: Option<String>,
    /// Its links (`None`: none written).
    pub links: Option<Vec<Link>>,
    /// Interfaces where its data plane is down ([`DATAPLANE_DOWN_ANNOTATION`]).
    pub dataplane_down: Vec<String>,
    /// The peers it has proven unreachable ([`UNREACHABLE_ANNOTATION`]; absent when none).
    pub unreachable: Report,
}

/// What one write says.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct WriteBody {
    /// Handed over and left.
    pub release: bool,
    /// Stepped back.
    pub standby: bool,
    /// Peers exchanging heartbeats with it both ways (`None`: nothing written).
    pub connected: Option<u32>,
}

/// A peer's Lease as the agent uses it.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct PeerLease {
    /// The election core's view.
    pub view: LeaseView,
    /// Where to send it heartbeats.
    pub heartbeat: Option<SocketAddr>,
    /// Its heartbeat public key, verbatim (parsed by the caller).
    pub key: Option<String>,
}
/// Longest object name (DNS subdomain, RFC 1123).
pub const MAX_NAME: usize = 253;

/// The label selector matching every node Lease (for the Lease watch).
pub fn selector() -> String {
    format!(
        "{}={},{}={}",
        APP_LABEL.0, APP_LABEL.1, KIND_LABEL.0, KIND_LABEL.1
    )
}

/// `prefix` + `body`, cut to [`MAX_NAME`] with a hash of the whole appended when too long, so
/// distinct long names stay distinct and the same input always gives the same name.
pub fn bounded_name(prefix: &str, body: &str) -> String {
    let full = format!("{prefix}{body}");
    if full.len() <= MAX_NAME {
        return full;
    }
    let hash = format!("-{:016x}", xxh3_64(full.as_bytes()));
    let mut cut = MAX_NAME - hash.len();
    while !full.is_char_boundary(cut) {
        cut -= 1;
    }
    let head = full[..cut].trim_end_matches(['-', '.']);
    format!("{head}{hash}")
}

/// The name of `node`'s Lease.
pub fn lease_name(node: &NodeName) -> String {
    bounded_name(LEASE_PREFIX, node.as_str())
}

/// A watched Lease that cannot be used as a node Lease.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
pub enum MalformedLease {
    /// No `spec.holderIdentity`.
    #[error("Lease {0} has no holderIdentity")]
    NoHolder(String),
    /// The holder is not the node the name says.
    #[error("Lease {name} is held by {holder:?}, but its name says it is {expected}'s")]
    WrongHolder {
        /// Lease name.
        name: String,
        /// `spec.holderIdentity`.
        holder: String,
        /// The Lease name of that holder.
        expected: String,
    },
    /// No `metadata.resourceVersion`.
    #[error("Lease {0} has no resourceVersion")]
    NoResourceVersion(String),
    /// `leaseDurationSeconds` missing or not positive.
    #[error("Lease {name} has leaseDurationSeconds {value:?}; expected a positive number")]
    BadDuration {
        /// Lease name.
        name: String,
        /// What it says.
        value: Option<i32>,
    },
    /// The heartbeat annotation is not `ip:port`.
    #[error("Lease {name} has {HEARTBEAT_ANNOTATION}={value:?}; expected ip:port")]
    BadHeartbeat {
        /// Lease name.
        name: String,
        /// What it says.
        value: String,
    },
    /// The released annotation is neither `true` nor `false`.
    #[error("Lease {name} has {RELEASED_ANNOTATION}={value:?}; expected \"true\" or \"false\"")]
    BadReleased {
        /// Lease name.
        name: String,
        /// What it says.
        value: String,
    },
    /// Another annotation of ours does not parse.
    #[error("Lease {name} has a malformed {key}: {why}")]
    BadAnnotation {
        /// Lease name.
        name: String,
        /// The annotation.
        key: &'static str,
        /// What is wrong.
        why: String,
    },
}

/// The election core's view of a watched node Lease, and the peer's heartbeat address (`None`
/// if it does not publish one). Malformed Leases are refused with the reason, never guessed at.
pub fn view(lease: &Lease) -> Result<PeerLease, MalformedLease> {
    let name = lease.metadata.name.clone().unwrap_or_default();
    let spec = lease.spec.as_ref();
    let holder = spec
        .and_then(|s| s.holder_identity.as_deref())
        .filter(|h| !h.is_empty())
        .ok_or_else(|| MalformedLease::NoHolder(name.clone()))?;
    let node = NodeName::from(holder);
    let expected = lease_name(&node);
    if expected != name {
        return Err(MalformedLease::WrongHolder {
            name,
            holder: holder.to_owned(),
            expected,
        });
    }
    let resource_version = lease
        .metadata
        .resource_version
        .clone()
        .ok_or_else(|| MalformedLease::NoResourceVersion(name.clone()))?;
    let seconds = spec.and_then(|s| s.lease_duration_seconds);
    let duration = match seconds.map(u64::try_from) {
        Some(Ok(s)) if s > 0 => Duration::from_secs(s),
        _ => {
            return Err(MalformedLease::BadDuration {
                name,
                value: seconds,
            });
        }
    };
    let annotations = lease.metadata.annotations.as_ref();
    let annotation = |key: &str| annotations.and_then(|a| a.get(key));
    let heartbeat = match annotation(HEARTBEAT_ANNOTATION) {
        None => None,
        Some(v) => Some(
            v.parse::<SocketAddr>()
                .map_err(|_| MalformedLease::BadHeartbeat {
                    name: name.clone(),
                    value: v.clone(),
                })?,
        ),
    };
    let released = match annotation(RELEASED_ANNOTATION).map(String::as_str) {
        None | Some("false") => false,
        Some("true") => true,
        Some(v) => {
            return Err(MalformedLease::BadReleased {
                name,
                value: v.to_owned(),
            });
        }
    };
    let bad = |key: &'static str, why: String| MalformedLease::BadAnnotation {
        name: name.clone(),
        key,
        why,
    };
    let standby = match annotation(STANDBY_ANNOTATION).map(String::as_str) {
        None | Some("false") => false,
        Some("true") => true,
        Some(v) => return Err(bad(STANDBY_ANNOTATION, format!("{v:?}, expected \"true\""))),
    };
    let connected = match annotation(CONNECTED_ANNOTATION) {
        None => None,
        Some(v) => Some(
            v.parse()
                .map_err(|_| bad(CONNECTED_ANNOTATION, format!("{v:?}, expected a count")))?,
        ),
    };
    let mut links = annotation(LINKS_ANNOTATION)
        .map(|v| parse_links(v))
        .transpose()
        .map_err(|why| bad(LINKS_ANNOTATION, why))?;
    if let (Some(l), Some(names)) = (links.as_mut(), annotation(LINK_NAMES_ANNOTATION)) {
        apply_link_names(l, names);
    }
    if let (Some(l), Some(down)) = (links.as_mut(), annotation(DATAPLANE_DOWN_ANNOTATION)) {
        let down: Vec<&str> = down.split_whitespace().collect();
        for link in l.iter_mut() {
            link.down = link.name.as_deref().is_some_and(|n| down.contains(&n));
        }
    }
    let view = LeaseView {
        node,
        resource_version,
        renew_time: spec
            .and_then(|s| s.renew_time.as_ref())
            .map(|t| t.0.to_string()),
        duration,
        released,
        standby,
        connected,
        links,
    };
    Ok(PeerLease {
        view,
        heartbeat,
        key: annotation(KEY_ANNOTATION).cloned(),
    })
}

/// The node a Lease belongs to (its `holderIdentity`), for turning a deleted Lease into the
/// core's `LeaseGone` without requiring the rest of it to be well-formed.
pub fn node_of(lease: &Lease) -> Option<NodeName> {
    lease
        .spec
        .as_ref()
        .and_then(|s| s.holder_identity.as_deref())
        .filter(|h| !h.is_empty())
        .map(NodeName::from)
}

/// `leaseDurationSeconds` for a duration: whole seconds, rounded up, at least 1.
pub fn duration_seconds(d: Duration) -> i32 {
    let s = d.as_secs() + u64::from(d.subsec_nanos() > 0);
    i32::try_from(s.max(1)).unwrap_or(i32::MAX)
}

/// Writes this node's Lease.
pub struct NodeLease {
    api: Api<Lease>,
    node: NodeName,
    name: String,
    heartbeat: SocketAddr,
    duration: Duration,
    /// `acquireTime` to keep on replaces: when this process first wrote the Lease.
    acquired: Mutex<Option<Timestamp>>,
    /// Key and links, as last set by the shell; sent with every write.
    contents: Mutex<LeaseContents>,
}

impl NodeLease {
    /// The Lease of `node` in `namespace`, advertising `heartbeat`, held for `duration`.
    pub fn new(
        client: Client,
        namespace: &str,
        node: NodeName,
        heartbeat: SocketAddr,
        duration: Duration,
    ) -> Self {
        NodeLease {
            api: Api::namespaced(client, namespace),
            name: lease_name(&node),
            node,
            heartbeat,
            duration,
            acquired: Mutex::new(None),
            contents: Mutex::new(LeaseContents::default()),
        }
    }

    /// Sets what the next writes carry. Returns whether it changed (the caller may then
    /// renew early so peers learn it sooner).
    pub fn set_contents(&self, p: LeaseContents) -> bool {
        let mut cur = self.contents.lock().unwrap_or_else(|e| e.into_inner());
        let changed = *cur != p;
        *cur = p;
        changed
    }

    /// The Lease name.
    pub fn name(&self) -> &str {
        &self.name
    }

    /// The object to write at `now`: `resource_version` is the precondition (`None` on create).
    pub fn build(
        &self,
        resource_version: Option<String>,
        body: WriteBody,
        now: Timestamp,
    ) -> Lease {
        let acquired = {
            let mut a = self.acquired.lock().unwrap_or_else(|e| e.into_inner());
            *a.get_or_insert(now)
        };
        let labels = BTreeMap::from([
            (APP_LABEL.0.to_owned(), APP_LABEL.1.to_owned()),
            (KIND_LABEL.0.to_owned(), KIND_LABEL.1.to_owned()),
        ]);
        let mut annotations =
            BTreeMap::from([(HEARTBEAT_ANNOTATION.to_owned(), self.heartbeat.to_string())]);
        if body.release {
            annotations.insert(RELEASED_ANNOTATION.to_owned(), "true".to_owned());
        }
        if body.standby {
            annotations.insert(STANDBY_ANNOTATION.to_owned(), "true".to_owned());
        }
        if let Some(c) = body.connected {
            annotations.insert(CONNECTED_ANNOTATION.to_owned(), c.to_string());
        }
        {
            let p = self.contents.lock().unwrap_or_else(|e| e.into_inner());
            if let Some(k) = &p.key {
                annotations.insert(KEY_ANNOTATION.to_owned(), k.clone());
            }
            if let Some(l) = &p.links {
                annotations.insert(LINKS_ANNOTATION.to_owned(), format_links(l));
                if let Some(names) = format_link_names(l) {
                    annotations.insert(LINK_NAMES_ANNOTATION.to_owned(), names);
                }
            }
            if !p.dataplane_down.is_empty() {
                annotations.insert(
                    DATAPLANE_DOWN_ANNOTATION.to_owned(),
                    p.dataplane_down.join(" "),
                );
            }
            if !p.unreachable.is_empty() {
                annotations.insert(UNREACHABLE_ANNOTATION.to_owned(), p.unreachable.to_string());
            }
        }
        Lease {
            metadata: ObjectMeta {
                name: Some(self.name.clone()),
                resource_version,
                labels: Some(labels),
                annotations: Some(annotations),
                ..Default::default()
            },
            spec: Some(LeaseSpec {
                holder_identity: Some(self.node.to_string()),
                lease_duration_seconds: Some(duration_seconds(self.duration)),
                renew_time: Some(MicroTime(now)),
                acquire_time: Some(MicroTime(acquired)),
                ..Default::default()
            }),
        }
    }

    /// Creates the Lease (`resource_version: None`; 409 AlreadyExists → `Conflict`) or
    /// replaces it with that `resourceVersion` as precondition (409 → `Conflict`; 404, deleted
    /// since we read it, also → `Conflict`: re-read and create). Anything else → `Failed`.
    pub async fn write(
        &self,
        resource_version: Option<String>,
        body: WriteBody,
    ) -> LeaseWriteResult {
        let create = resource_version.is_none();
        let lease = self.build(resource_version, body, Timestamp::now());
        let pp = PostParams {
            field_manager: Some("announcer".to_owned()),
            ..Default::default()
        };
        let res = if create {
            self.api.create(&pp, &lease).await
        } else {
            self.api.replace(&self.name, &pp, &lease).await
        };
        match res {
            Ok(l) => match l.metadata.resource_version {
                Some(resource_version) => LeaseWriteResult::Written { resource_version },
                None => {
                    tracing::warn!(lease = %self.name, "Lease write answered without resourceVersion");
                    LeaseWriteResult::Failed
                }
            },
            Err(kube::Error::Api(s)) if s.code == 409 || (!create && s.code == 404) => {
                tracing::debug!(lease = %self.name, code = s.code, reason = %s.reason, "Lease write conflict");
                LeaseWriteResult::Conflict
            }
            Err(e) => {
                tracing::warn!(lease = %self.name, error = %e, "Lease write failed");
                LeaseWriteResult::Failed
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn lease(name: &str, holder: Option<&str>, ann: &[(&str, &str)]) -> Lease {
        Lease {
            metadata: ObjectMeta {
                name: Some(name.into()),
                resource_version: Some("42".into()),
                annotations: Some(
                    ann.iter()
                        .map(|(k, v)| (k.to_string(), v.to_string()))
                        .collect(),
                ),
                ..Default::default()
            },
            spec: Some(LeaseSpec {
                holder_identity: holder.map(String::from),
                lease_duration_seconds: Some(10),
                renew_time: Some(MicroTime("2025-01-02T03:04:05.123456Z".parse().unwrap())),
                ..Default::default()
            }),
        }
    }

    #[test]
    fn a_peer_lease_becomes_a_view_and_a_heartbeat_address() {
        let l = lease(
            "announcer-node-node-b",
            Some("node-b"),
            &[(HEARTBEAT_ANNOTATION, "[fd00::2]:7946")],
        );
        let PeerLease {
            view: v,
            heartbeat: hb,
            ..
        } = view(&l).unwrap();
        assert_eq!(v.node, NodeName::from("node-b"));
        assert_eq!(v.resource_version, "42");
        assert_eq!(v.duration, Duration::from_secs(10));
        assert!(!v.released);
        assert_eq!(v.renew_time.as_deref(), Some("2025-01-02T03:04:05.123456Z"));
        assert_eq!(hb, Some("[fd00::2]:7946".parse().unwrap()));

        let l = lease(
            "announcer-node-node-b",
            Some("node-b"),
            &[(RELEASED_ANNOTATION, "true")],
        );
        let PeerLease {
            view: v,
            heartbeat: hb,
            ..
        } = view(&l).unwrap();
        assert!(v.released);
        assert_eq!(hb, None);
        assert_eq!(node_of(&l), Some(NodeName::from("node-b")));
    }

    #[test]
    fn malformed_leases_are_refused_with_the_reason() {
        let name = "announcer-node-b";
        let cases: Vec<(Lease, &str)> = vec![
            (lease(name, None, &[]), "has no holderIdentity"),
            (lease(name, Some(""), &[]), "has no holderIdentity"),
            (lease(name, Some("c"), &[]), "held by \"c\""),
            (
                lease(name, Some("b"), &[(HEARTBEAT_ANNOTATION, "10.0.0.1")]),
                "expected ip:port",
            ),
            (
                lease(name, Some("b"), &[(RELEASED_ANNOTATION, "yes")]),
                "\"true\" or \"false\"",
            ),
            (
                {
                    let mut l = lease(name, Some("b"), &[]);
                    l.spec.as_mut().unwrap().lease_duration_seconds = Some(0);
                    l
                },
                "leaseDurationSeconds Some(0)",
            ),
            (
                {
                    let mut l = lease(name, Some("b"), &[]);
                    l.metadata.resource_version = None;
                    l
                },
                "no resourceVersion",
            ),
        ];
        for (l, want) in cases {
            let err = view(&l).unwrap_err().to_string();
            assert!(err.contains(want), "{err:?} should contain {want:?}");
        }
    }

    #[test]
    fn long_names_are_cut_with_a_hash_and_stay_distinct() {
        let a = "a".repeat(250);
        let b = format!("{}b", "a".repeat(249));
        let (na, nb) = (
            lease_name(&NodeName::from(a.as_str())),
            lease_name(&NodeName::from(b.as_str())),
        );
        assert!(na.len() <= MAX_NAME && nb.len() <= MAX_NAME);
        assert_ne!(na, nb);
        assert_eq!(na, lease_name(&NodeName::from(a.as_str())));
        assert!(na.starts_with(LEASE_PREFIX));
        assert_eq!(
            lease_name(&NodeName::from("node-a")),
            "announcer-node-node-a"
        );
        // A view of a long-named node's Lease still matches its holder.
        let l = lease(&na, Some(&a), &[]);
        assert_eq!(view(&l).unwrap().view.node.as_str(), a);
    }

    #[test]
    fn durations_round_up_to_whole_seconds() {
        assert_eq!(duration_seconds(Duration::from_secs(10)), 10);
        assert_eq!(duration_seconds(Duration::from_millis(1500)), 2);
        assert_eq!(duration_seconds(Duration::ZERO), 1);
    }

    #[tokio::test]
    async fn written_lease_round_trips_through_view() {
        let cfg = kube::Config::new("http://127.0.0.1:1".parse().unwrap());
        let client = Client::try_from(cfg).unwrap();
        let hb: SocketAddr = "192.168.1.10:7946".parse().unwrap();
        let nl = NodeLease::new(
            client,
            "announcer",
            NodeName::from("node-a"),
            hb,
            Duration::from_secs(10),
        );
        let t0: Timestamp = "2025-01-02T03:04:05Z".parse().unwrap();
        let t1: Timestamp = "2025-01-02T03:04:08Z".parse().unwrap();
        let created = nl.build(None, WriteBody::default(), t0);
        assert_eq!(
            created.metadata.name.as_deref(),
            Some("announcer-node-node-a")
        );
        let labels = created.metadata.labels.clone().unwrap();
        assert_eq!(
            labels.get("announcer.dev/lease").map(String::as_str),
            Some("node")
        );
        let mut renewed = nl.build(
            Some("7".into()),
            WriteBody {
                release: true,
                ..Default::default()
            },
            t1,
        );
        let spec = renewed.spec.clone().unwrap();
        assert_eq!(
            spec.acquire_time,
            Some(MicroTime(t0)),
            "acquireTime kept from the create"
        );
        assert_eq!(spec.renew_time, Some(MicroTime(t1)));
        renewed.metadata.resource_version = Some("8".into());
        let PeerLease {
            view: v,
            heartbeat: got_hb,
            ..
        } = view(&renewed).unwrap();
        assert_eq!(v.node, NodeName::from("node-a"));
        assert_eq!(v.resource_version, "8");
        assert!(v.released);
        assert_eq!(got_hb, Some(hb));
    }

    /// A stub API server for Lease writes: creates answer rv 1; a replace carrying rv `n`
    /// answers rv `n+1` if `n` is current, 409 if stale, 500 for rv "boom".
    async fn stub() -> Client {
        use axum::{
            Json, Router,
            extract::State,
            http::StatusCode,
            routing::{post, put},
        };
        use std::sync::{Arc, Mutex as StdMutex};
        type Current = Arc<StdMutex<u64>>;
        fn status(code: u16, reason: &str) -> (StatusCode, Json<serde_json::Value>) {
            let body = serde_json::json!({
                "kind": "Status", "apiVersion": "v1", "status": "Failure",
                "reason": reason, "code": code, "message": reason,
            });
            (StatusCode::from_u16(code).unwrap(), Json(body))
        }
        async fn create(
            State(cur): State<Current>,
            Json(mut l): Json<Lease>,
        ) -> (StatusCode, Json<serde_json::Value>) {
            let mut c = cur.lock().unwrap();
            if *c > 0 {
                return status(409, "AlreadyExists");
            }
            *c = 1;
            l.metadata.resource_version = Some("1".into());
            (StatusCode::CREATED, Json(serde_json::to_value(l).unwrap()))
        }
        async fn replace(
            State(cur): State<Current>,
            Json(mut l): Json<Lease>,
        ) -> (StatusCode, Json<serde_json::Value>) {
            let mut c = cur.lock().unwrap();
            match l.metadata.resource_version.as_deref() {
                Some("boom") => status(500, "InternalError"),
                Some(rv) if rv == c.to_string() => {
                    *c += 1;
                    l.metadata.resource_version = Some(c.to_string());
                    (StatusCode::OK, Json(serde_json::to_value(l).unwrap()))
                }
                _ => status(409, "Conflict"),
            }
        }
        let base = "/apis/coordination.k8s.io/v1/namespaces/announcer/leases";
        let app = Router::new()
            .route(base, post(create))
            .route(&format!("{base}/{{name}}"), put(replace))
            .with_state(Current::default());
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        let url = format!("http://{}", listener.local_addr().unwrap());
        tokio::spawn(async move { axum::serve(listener, app).await.unwrap() });
        Client::try_from(kube::Config::new(url.parse().unwrap())).unwrap()
    }

    #[tokio::test]
    async fn writes_map_api_answers_to_results() {
        let nl = NodeLease::new(
            stub().await,
            "announcer",
            NodeName::from("node-a"),
            "192.168.1.10:7946".parse().unwrap(),
            Duration::from_secs(10),
        );
        let written = |rv: &str| LeaseWriteResult::Written {
            resource_version: rv.into(),
        };
        assert_eq!(nl.write(None, WriteBody::default()).await, written("1"));
        assert_eq!(
            nl.write(None, WriteBody::default()).await,
            LeaseWriteResult::Conflict
        );
        assert_eq!(
            nl.write(Some("1".into()), WriteBody::default()).await,
            written("2")
        );
        assert_eq!(
            nl.write(Some("1".into()), WriteBody::default()).await,
            LeaseWriteResult::Conflict
        );
        assert_eq!(
            nl.write(Some("boom".into()), WriteBody::default()).await,
            LeaseWriteResult::Failed
        );
        assert_eq!(
            nl.write(
                Some("2".into()),
                WriteBody {
                    release: true,
                    ..Default::default()
                }
            )
            .await,
            written("3")
        );
    }

    fn stub_lease() -> NodeLease {
        let cfg = kube::Config::new("http://127.0.0.1:1".parse().unwrap());
        NodeLease::new(
            Client::try_from(cfg).unwrap(),
            "announcer",
            NodeName::from("node-a"),
            "192.168.1.10:7946".parse().unwrap(),
            Duration::from_secs(10),
        )
    }

    fn unreachable_annotation(nl: &NodeLease) -> Option<String> {
        let l = nl.build(
            Some("1".into()),
            WriteBody::default(),
            "2025-01-02T03:04:05Z".parse().unwrap(),
        );
        l.metadata
            .annotations
            .and_then(|a| a.get(UNREACHABLE_ANNOTATION).cloned())
    }

    #[tokio::test]
    async fn the_unreachable_report_is_written_as_its_annotation() {
        let nl = stub_lease();
        nl.set_contents(LeaseContents {
            unreachable: Report::of([NodeName::from("node-c"), NodeName::from("node-b")]),
            ..LeaseContents::default()
        });
        let value = unreachable_annotation(&nl).expect("written");
        assert_eq!(value, "node-b node-c");
        assert_eq!(
            value.parse::<Report>().unwrap(),
            Report::of([NodeName::from("node-b"), NodeName::from("node-c")])
        );
    }

    #[tokio::test]
    async fn an_empty_unreachable_report_leaves_the_annotation_out() {
        let nl = stub_lease();
        nl.set_contents(LeaseContents::default());
        assert_eq!(unreachable_annotation(&nl), None);
    }

    #[test]
    fn selector_matches_what_is_written() {
        assert_eq!(
            selector(),
            "app.kubernetes.io/name=announcer,announcer.dev/lease=node"
        );
    }

    #[tokio::test]
    async fn standby_connected_links_and_key_round_trip_through_the_lease() {
        let cfg = kube::Config::new("http://127.0.0.1:1".parse().unwrap());
        let client = Client::try_from(cfg).unwrap();
        let nl = NodeLease::new(
            client,
            "announcer",
            NodeName::from("node-a"),
            "192.168.1.10:7946".parse().unwrap(),
            Duration::from_secs(10),
        );
        let links = vec![
            Link {
                name: Some("eth0".into()),
                mac: "02:00:00:00:00:01".parse().unwrap(),
                subnets: vec![
                    "192.168.1.0/24".parse().unwrap(),
                    "fd00::/64".parse().unwrap(),
                ],
                fallback: true,
                down: false,
            },
            Link {
                name: Some("eth1".into()),
                mac: "02:00:00:00:01:01".parse().unwrap(),
                subnets: vec!["10.1.0.0/16".parse().unwrap()],
                fallback: false,
                down: true,
            },
        ];
        assert!(nl.set_contents(LeaseContents {
            key: Some("a2V5".into()),
            links: Some(links.clone()),
            dataplane_down: vec!["eth1".into()],
            ..LeaseContents::default()
        }));
        let body = WriteBody {
            release: false,
            standby: true,
            connected: Some(2),
        };
        let mut l = nl.build(
            Some("1".into()),
            body,
            "2025-01-02T03:04:05Z".parse().unwrap(),
        );
        l.metadata.resource_version = Some("2".into());
        let p = view(&l).unwrap();
        assert!(p.view.standby);
        assert_eq!(p.view.connected, Some(2));
        assert_eq!(p.view.links, Some(links));
        assert_eq!(p.key.as_deref(), Some("a2V5"));
        let annotations = l.metadata.annotations.as_ref().unwrap();
        assert_eq!(annotations[DATAPLANE_DOWN_ANNOTATION], "eth1");
    }

    #[test]
    fn a_malformed_links_annotation_is_refused_with_the_reason() {
        let l = lease(
            "announcer-node-node-b",
            Some("node-b"),
            &[(LINKS_ANNOTATION, "02:00:00:00:00:01=10.0.0.0/33")],
        );
        let err = view(&l).unwrap_err().to_string();
        assert!(
            err.contains("announcer.dev/links") && err.contains("prefix"),
            "{err}"
        );
    }

    #[test]
    fn link_names_out_of_step_with_the_links_name_none() {
        let l = lease(
            "announcer-node-node-b",
            Some("node-b"),
            &[
                (LINKS_ANNOTATION, "02:00:00:00:00:01=10.0.0.0/24"),
                (LINK_NAMES_ANNOTATION, "eth0 eth1"),
            ],
        );
        let links = view(&l).unwrap().view.links.unwrap();
        assert_eq!(links[0].name, None);
    }

    #[test]
    fn links_without_a_names_annotation_parse_as_before() {
        let l = lease(
            "announcer-node-node-b",
            Some("node-b"),
            &[(LINKS_ANNOTATION, "02:00:00:00:00:01=10.0.0.0/24,*")],
        );
        let links = view(&l).unwrap().view.links.unwrap();
        assert_eq!((links[0].name.clone(), links[0].fallback), (None, true));
    }
}
