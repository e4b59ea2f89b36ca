//! The watches that feed the [`crate::withdraw::Tracker`]: the agents' node Leases, the
//! kubelets' Leases and the Nodes, each turned into an [`Input`] on one channel. The stores the
//! withdrawal itself reads (EndpointSlices, Services, opted-in Namespaces) are reflectors.
//!
//! "Renewed" is decided here, per Lease, by `spec.renewTime` moving since this watch last saw
//! it: the first sight of a Lease (at startup, or a Lease created later) is no renewal, as the
//! tracker requires (a Lease in the initial list may be long dead).

use std::collections::HashMap;

use futures::StreamExt;
use k8s_openapi::{
    api::{coordination::v1::Lease, core::v1::Node},
    apimachinery::pkg::apis::meta::v1::MicroTime,
};
use kube::{
    Api, Resource, ResourceExt,
    runtime::{WatchStreamExt, reflector, watcher},
};
use tokio::sync::mpsc;

use super::metrics::Metrics;
use crate::{
    agent::kube::node_lease,
    election::NodeName,
    withdraw::{Report, UNREACHABLE_ANNOTATION},
};

/// What a watch saw, for the tracker.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Input {
    /// An agent's node Lease.
    AgentLease {
        /// Its node.
        node: NodeName,
        /// Whom it lists (empty when the annotation is absent or bad).
        report: Report,
        /// Whether `spec.renewTime` moved.
        renewed: bool,
    },
    /// An agent's node Lease was deleted.
    AgentLeaseDeleted(NodeName),
    /// A kubelet's Lease.
    KubeletLease {
        /// Its node.
        node: NodeName,
        /// Whether `spec.renewTime` moved.
        renewed: bool,
    },
    /// A Node's `Ready` condition (`None`: Unknown or absent).
    NodeReady(NodeName, Option<bool>),
    /// A Node was deleted.
    NodeDeleted(NodeName),
}

/// The namespace of the kubelets' Leases.
pub const KUBELET_LEASE_NAMESPACE: &str = "kube-node-lease";

fn renew_time(lease: &Lease) -> Option<MicroTime> {
    lease.spec.as_ref()?.renew_time.clone()
}

/// Remembers each Lease's last `renewTime` and says whether a new sight moved it.
#[derive(Debug, Default)]
pub struct Renewals(HashMap<String, Option<MicroTime>>);

impl Renewals {
    /// Whether `lease` (by name) was renewed since the last sight; false on the first.
    pub fn renewed(&mut self, lease: &Lease) -> bool {
        let now = renew_time(lease);
        match self.0.insert(lease.name_any(), now.clone()) {
            None => false,
            Some(before) => now.is_some() && now != before,
        }
    }

    /// Forgets a deleted Lease.
    pub fn forget(&mut self, lease: &Lease) {
        self.0.remove(&lease.name_any());
    }
}

/// The node an agent Lease belongs to: its holder, else the name without the prefix.
pub fn agent_lease_node(lease: &Lease) -> Option<NodeName> {
    let name = lease.meta().name.as_deref()?;
    let rest = name.strip_prefix(node_lease::LEASE_PREFIX)?;
    node_lease::node_of(lease).or_else(|| (!rest.is_empty()).then(|| NodeName::from(rest)))
}

/// The report an agent Lease carries; a bad annotation is logged, counted and read as empty.
pub fn agent_report(lease: &Lease, metrics: &Metrics) -> Report {
    let Some(value) = lease
        .metadata
        .annotations
        .as_ref()
        .and_then(|a| a.get(UNREACHABLE_ANNOTATION))
    else {
        return Report::default();
    };
    match value.parse() {
        Ok(r) => r,
        Err(e) => {
            tracing::warn!(lease = %lease.name_any(), error = %e, "ignoring a bad unreachable report");
            metrics.bad_report();
            Report::default()
        }
    }
}

/// A Node's `Ready`: True, False, or `None` for Unknown or absent.
pub fn node_ready(node: &Node) -> Option<bool> {
    let c = node
        .status
        .as_ref()?
        .conditions
        .as_ref()?
        .iter()
        .find(|c| c.type_ == "Ready")?;
    match c.status.as_str() {
        "True" => Some(true),
        "False" => Some(false),
        _ => None,
    }
}

/// Watches the agents' node Leases in `namespace`.
pub async fn agent_leases(
    api: Api<Lease>,
    tx: mpsc::UnboundedSender<Input>,
    metrics: std::sync::Arc<Metrics>,
) {
    let cfg = watcher::Config::default().labels(&format!(
        "{}={}",
        node_lease::KIND_LABEL.0,
        node_lease::KIND_LABEL.1
    ));
    let mut renewals = Renewals::default();
    let mut nodes: HashMap<String, NodeName> = HashMap::new();
    let mut stream = std::pin::pin!(watcher(api, cfg).default_backoff());
    while let Some(ev) = stream.next().await {
        let input = match ev {
            Ok(watcher::Event::Apply(l) | watcher::Event::InitApply(l)) => {
                let Some(node) = agent_lease_node(&l) else {
                    continue;
                };
                nodes.insert(l.name_any(), node.clone());
                Input::AgentLease {
                    report: agent_report(&l, &metrics),
                    renewed: renewals.renewed(&l),
                    node,
                }
            }
            Ok(watcher::Event::Delete(l)) => {
                renewals.forget(&l);
                let Some(node) = nodes.remove(&l.name_any()).or_else(|| agent_lease_node(&l))
                else {
                    continue;
                };
                Input::AgentLeaseDeleted(node)
            }
            Ok(_) => continue,
            Err(e) => {
                tracing::warn!(error = %e, "agent Lease watch");
                continue;
            }
        };
        if tx.send(input).is_err() {
            return;
        }
    }
}

/// Watches the kubelets' Leases (`kube-node-lease`, named after their node).
pub async fn kubelet_leases(api: Api<Lease>, tx: mpsc::UnboundedSender<Input>) {
    let mut renewals = Renewals::default();
    let mut stream = std::pin::pin!(watcher(api, watcher::Config::default()).default_backoff());
    while let Some(ev) = stream.next().await {
        let input = match ev {
            Ok(watcher::Event::Apply(l) | watcher::Event::InitApply(l)) => Input::KubeletLease {
                renewed: renewals.renewed(&l),
                node: NodeName::from(l.name_any()),
            },
            Ok(watcher::Event::Delete(l)) => {
                renewals.forget(&l);
                continue;
            }
            Ok(_) => continue,
            Err(e) => {
                tracing::warn!(error = %e, "kubelet Lease watch");
                continue;
            }
        };
        if tx.send(input).is_err() {
            return;
        }
    }
}

/// Watches the Nodes into `writer` (the Events need their UIDs) and their `Ready`.
pub async fn nodes(
    api: Api<Node>,
    writer: reflector::store::Writer<Node>,
    tx: mpsc::UnboundedSender<Input>,
) {
    let stream = watcher(api, watcher::Config::default())
        .modify(|o: &mut Node| o.managed_fields_mut().clear())
        .default_backoff()
        .reflect(writer);
    let mut stream = std::pin::pin!(stream);
    while let Some(ev) = stream.next().await {
        let input = match ev {
            Ok(watcher::Event::Apply(n) | watcher::Event::InitApply(n)) => {
                Input::NodeReady(NodeName::from(n.name_any()), node_ready(&n))
            }
            Ok(watcher::Event::Delete(n)) => Input::NodeDeleted(NodeName::from(n.name_any())),
            Ok(_) => continue,
            Err(e) => {
                tracing::warn!(error = %e, "Node watch");
                continue;
            }
        };
        if tx.send(input).is_err() {
            return;
        }
    }
}

/// Keeps a reflector store of `K` (with `cfg`) until the task is aborted.
pub async fn store<K>(api: Api<K>, cfg: watcher::Config, writer: reflector::store::Writer<K>)
where
    K: Resource<DynamicType = ()>
        + Clone
        + std::fmt::Debug
        + serde::de::DeserializeOwned
        + Send
        + Sync
        + 'static,
{
    let stream = watcher(api, cfg)
        .modify(|o: &mut K| o.managed_fields_mut().clear())
        .default_backoff()
        .reflect(writer);
    let mut stream = std::pin::pin!(stream);
    while let Some(ev) = stream.next().await {
        if let Err(e) = ev {
            tracing::warn!(kind = %K::kind(&()), error = %e, "watch");
        }
    }
}

#[cfg(test)]
mod tests {
    use k8s_openapi::{
        api::coordination::v1::LeaseSpec, apimachinery::pkg::apis::meta::v1::ObjectMeta,
        jiff::Timestamp,
    };

    use super::*;

    fn lease(name: &str, holder: Option<&str>, renew: Option<&str>, report: Option<&str>) -> Lease {
        Lease {
            metadata: ObjectMeta {
                name: Some(name.into()),
                annotations: report
                    .map(|r| [(UNREACHABLE_ANNOTATION.to_string(), r.to_string())].into()),
                ..ObjectMeta::default()
            },
            spec: Some(LeaseSpec {
                holder_identity: holder.map(Into::into),
                renew_time: renew.map(|t| MicroTime(t.parse::<Timestamp>().unwrap())),
                ..LeaseSpec::default()
            }),
        }
    }

    #[test]
    fn a_lease_is_renewed_only_when_its_renew_time_moves_and_never_at_first_sight() {
        let mut r = Renewals::default();
        let a = lease("node-a", None, Some("2026-12-04T13:45:00Z"), None);
        assert!(!r.renewed(&a), "first sight");
        assert!(!r.renewed(&a), "same renewTime (an annotation write)");
        let b = lease("node-a", None, Some("2026-12-04T13:45:03Z"), None);
        assert!(r.renewed(&b));
    }

    #[test]
    fn an_agent_lease_belongs_to_its_holder_and_other_leases_to_nobody() {
        let l = lease("announcer-node-node-a", Some("node-a"), None, None);
        assert_eq!(agent_lease_node(&l), Some(NodeName::from("node-a")));
        let released = lease("announcer-node-node-b", None, None, None);
        assert_eq!(agent_lease_node(&released), Some(NodeName::from("node-b")));
        let other = lease("announcer-svc-x", Some("node-a"), None, None);
        assert_eq!(agent_lease_node(&other), None);
    }

    #[test]
    fn a_bad_report_is_read_as_empty_and_counted() {
        let m = Metrics::new();
        let l = lease("announcer-node-a", Some("a"), None, Some("node-c Bad_Name"));
        assert!(agent_report(&l, &m).is_empty());
        assert!(
            m.encode()
                .contains("announcer_withdrawer_bad_reports_total 1"),
            "{}",
            m.encode()
        );
        let good = lease("announcer-node-a", Some("a"), None, Some("node-c"));
        assert_eq!(
            agent_report(&good, &m),
            Report::of([NodeName::from("node-c")])
        );
    }
}
