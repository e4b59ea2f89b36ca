//! The `announcer.dev/Announced` condition on Services (format: [`crate::state::announced`]):
//! this node writes the entries of the VIPs it takes over, and removes them when it lets go.
//!
//! Why a task of its own: a takeover must never wait for the API server (it may be down exactly
//! then), and a burst of takeovers (a node with 1,000 VIPs died) must not become 1,000 writes
//! at once. [`Announced::claim`] and [`Announced::release`] return at once; the task coalesces
//! what is pending per Service, writes at most [`WRITES_PER_SECOND`], and writes nothing when
//! the condition already says it, so a steady state writes nothing at all.
//!
//! Each write is a merge patch of `status.conditions` carrying the `resourceVersion` the
//! Service store holds: another owner's write in between (the other VIP of a dual-stack
//! Service) makes it a 409, and the entry is merged again into the fresh object. Only this
//! node's own entries are ever changed.
//!
//! The writes are edges; what this node announces is a level. Edges get lost: a write given up
//! after [`TRIES`], or a stale writer (a node that held a VIP for a moment during a failover
//! claims it, overwriting the owner's entry, then releases it, removing the entry altogether)
//! leaves the condition wrong with no change left to write. So the task also remembers every
//! entry it wants and, every [`RESYNC`], compares them with the Service in the store and
//! writes again where they disagree (released entries are forgotten once the condition no
//! longer names us). In agreement that costs no request.
//!
//! Pitfall: during an API outage the condition lags the truth (a takeover whose writes all
//! failed) until the server is back and the next resync; `announcer status` on the node and
//! the Announcing Events stay authoritative.

use std::{collections::BTreeMap, net::IpAddr, sync::Arc, time::Duration};

use k8s_openapi::{
    api::core::v1::Service,
    apimachinery::pkg::apis::meta::v1::{Condition, Time},
    jiff::Timestamp,
};
use kube::{
    Api, Client,
    api::{Patch, PatchParams},
    runtime::reflector::{ObjectRef, Store},
};
use tokio::sync::mpsc;

use crate::{
    agent::shutdown::Shutdown,
    election::{NodeName, ServiceRef},
    state::announced::{self, CONDITION_TYPE, Entry, REASON_ANNOUNCED, REASON_PARTIAL},
};

/// The most condition writes per second, whatever the burst of takeovers.
pub const WRITES_PER_SECOND: u32 = 20;
/// Tries per pending change (409s and failures) before it is left to the next resync.
const TRIES: u32 = 5;
/// How often this node's wanted entries are compared with the Services in the store.
pub const RESYNC: Duration = Duration::from_secs(2);

/// A change to this node's entries.
#[derive(Debug)]
enum Change {
    /// This node announces `vip` of these Services on `iface`.
    Claim {
        services: Vec<ServiceRef>,
        vip: IpAddr,
        iface: String,
    },
    /// This node stopped announcing `vip`.
    Release {
        services: Vec<ServiceRef>,
        vip: IpAddr,
    },
}

/// The handle the election shell uses; cheap to clone.
#[derive(Clone, Debug)]
pub struct Announced {
    tx: mpsc::UnboundedSender<Change>,
}

impl Announced {
    /// Starts the writer for `node`. It reads Services from `services` (the agent's watch
    /// store) and stops with `stop`.
    pub fn spawn(client: Client, node: NodeName, services: Store<Service>, stop: Shutdown) -> Self {
        let (tx, rx) = mpsc::unbounded_channel();
        tokio::spawn(run(client, node, services, rx, stop));
        Announced { tx }
    }

    /// This node now announces `vip` (of `services`) on `iface`.
    pub fn claim(&self, services: Vec<ServiceRef>, vip: IpAddr, iface: &str) {
        let _ = self.tx.send(Change::Claim {
            services,
            vip,
            iface: iface.to_owned(),
        });
    }

    /// This node no longer announces `vip`.
    pub fn release(&self, services: Vec<ServiceRef>, vip: IpAddr) {
        let _ = self.tx.send(Change::Release { services, vip });
    }
}

/// What this node wants its entries in one Service's condition to be: `Some(iface)` announced
/// here, `None` not by us.
type Wanted = BTreeMap<IpAddr, Option<String>>;

async fn run(
    client: Client,
    node: NodeName,
    services: Store<Service>,
    mut rx: mpsc::UnboundedReceiver<Change>,
    mut stop: Shutdown,
) {
    let mut entries = Entries::default();
    let pause = Duration::from_secs(1) / WRITES_PER_SECOND;
    let mut next_resync = tokio::time::Instant::now() + RESYNC;
    loop {
        // Take everything queued, then write one Service.
        while let Ok(c) = rx.try_recv() {
            entries.queue(c);
        }
        if tokio::time::Instant::now() >= next_resync {
            entries.resync(&node, |s| {
                services.get(&ObjectRef::new(&s.name).within(&s.namespace))
            });
            next_resync = tokio::time::Instant::now() + RESYNC;
        }
        let Some((sref, (wanted, tries))) = entries.pending.pop_first() else {
            tokio::select! {
                () = stop.recv() => return,
                () = tokio::time::sleep_until(next_resync) => {}
                c = rx.recv() => match c {
                    Some(c) => entries.queue(c),
                    None => return,
                },
            }
            continue;
        };
        let mut wait = pause;
        match write(&client, &node, &services, &sref, &wanted).await {
            Ok(()) => {}
            Err(e) if tries + 1 < TRIES => {
                // A 409 is settled by the watch within moments; anything else is the API server
                // failing, for every Service alike: back off the whole writer.
                wait = pause.max(Duration::from_millis(250) * 2u32.pow(tries));
                tracing::debug!(service = %sref, error = %e, "Announced condition not written yet; retrying");
                let entry = entries
                    .pending
                    .entry(sref)
                    .or_insert_with(|| (Wanted::new(), tries + 1));
                // Newer changes win over the retried ones.
                for (vip, w) in wanted {
                    entry.0.entry(vip).or_insert(w);
                }
                entry.1 = entry.1.max(tries + 1);
            }
            Err(e) => {
                tracing::warn!(service = %sref, error = %e, "Announced condition not written; trying again at the next resync");
            }
        }
        tokio::select! {
            () = stop.recv() => return,
            () = tokio::time::sleep(wait) => {}
        }
    }
}

/// What this node wants its entries to be (`wanted`, per Service: a level), and the writes
/// not done yet (`pending`, with the tries spent).
#[derive(Debug, Default)]
struct Entries {
    wanted: BTreeMap<ServiceRef, Wanted>,
    pending: BTreeMap<ServiceRef, (Wanted, u32)>,
}

impl Entries {
    /// A claim or release: remembered, and queued to be written.
    fn queue(&mut self, c: Change) {
        let (services, vip, want) = match c {
            Change::Claim {
                services,
                vip,
                iface,
            } => (services, vip, Some(iface)),
            Change::Release { services, vip } => (services, vip, None),
        };
        for s in services {
            self.wanted
                .entry(s.clone())
                .or_default()
                .insert(vip, want.clone());
            let e = self.pending.entry(s).or_insert_with(|| (Wanted::new(), 0));
            e.0.insert(vip, want.clone());
            e.1 = 0;
        }
    }

    /// Queues a write for every Service (not queued already) whose condition disagrees with
    /// what this node wants. Forgets Services that are gone, and releases once the condition
    /// no longer names us for them.
    fn resync(&mut self, node: &NodeName, get: impl Fn(&ServiceRef) -> Option<Arc<Service>>) {
        let now = Timestamp::now();
        let pending = &mut self.pending;
        self.wanted.retain(|sref, wanted| {
            if pending.contains_key(sref) {
                return true;
            }
            let Some(svc) = get(sref) else {
                return false; // deleted: nothing to say
            };
            // An entry naming another node is that node's claim: left alone (two nodes that
            // both hold a VIP for a while would otherwise rewrite it in turns); when it lets
            // go it removes the entry, and the next resync writes ours.
            let others: Vec<IpAddr> = announced::condition(&svc)
                .map(|c| announced::parse(&c.message))
                .unwrap_or_default()
                .into_iter()
                .filter(|e| e.node != node.as_str())
                .map(|e| e.ip)
                .collect();
            let mut undisputed = wanted.clone();
            undisputed.retain(|ip, w| w.is_none() || !others.contains(ip));
            if updated_conditions(&svc, node, &undisputed, now).is_some() {
                pending.insert(sref.clone(), (undisputed, 0));
            } else {
                wanted.retain(|_, w| w.is_some());
            }
            !wanted.is_empty()
        });
    }
}

/// Why a write did not happen.
#[derive(Debug, thiserror::Error)]
enum WriteError {
    /// The API server refused it (409 when another writer came first) or is unreachable.
    #[error(transparent)]
    Api(#[from] kube::Error),
}

async fn write(
    client: &Client,
    node: &NodeName,
    services: &Store<Service>,
    sref: &ServiceRef,
    wanted: &Wanted,
) -> Result<(), WriteError> {
    let key = ObjectRef::new(&sref.name).within(&sref.namespace);
    let Some(svc) = services.get(&key) else {
        return Ok(()); // deleted: nothing to say
    };
    let now = Timestamp::now();
    let Some(conditions) = updated_conditions(&svc, node, wanted, now) else {
        return Ok(());
    };
    let patch = serde_json::json!({
        "metadata": { "resourceVersion": svc.metadata.resource_version },
        "status": { "conditions": conditions },
    });
    Api::<Service>::namespaced(client.clone(), &sref.namespace)
        .patch_status(&sref.name, &PatchParams::default(), &Patch::Merge(&patch))
        .await?;
    Ok(())
}

/// The Service's conditions with this node's entries changed as `wanted` says; `None` when the
/// condition would not change (nothing to write). Entries for addresses no longer in the
/// Service's ingress are dropped; `lastTransitionTime` moves whenever an owner changes.
pub fn updated_conditions(
    svc: &Service,
    node: &NodeName,
    wanted: &Wanted,
    now: Timestamp,
) -> Option<Vec<Condition>> {
    let status = svc.status.as_ref();
    let ingress = announced::ingress_ips(svc);
    let mut conditions = status
        .and_then(|s| s.conditions.clone())
        .unwrap_or_default();
    let old = conditions.iter().position(|c| c.type_ == CONDITION_TYPE);
    let mut entries: BTreeMap<IpAddr, Entry> = old
        .map(|i| announced::parse(&conditions[i].message))
        .unwrap_or_default()
        .into_iter()
        .map(|e| (e.ip, e))
        .collect();
    for (vip, want) in wanted {
        match want {
            Some(iface) => {
                entries.insert(
                    *vip,
                    Entry {
                        ip: *vip,
                        node: node.to_string(),
                        iface: iface.clone(),
                    },
                );
            }
            None => {
                if entries.get(vip).is_some_and(|e| e.node == node.as_str()) {
                    entries.remove(vip);
                }
            }
        }
    }
    entries.retain(|ip, _| ingress.contains(ip));
    let list: Vec<Entry> = entries.into_values().collect();
    let all = !ingress.is_empty() && list.len() == ingress.len();
    let (status_text, reason) = if all {
        ("True", REASON_ANNOUNCED)
    } else {
        ("False", REASON_PARTIAL)
    };
    let message = announced::format(&list);
    if let Some(i) = old {
        let c = &conditions[i];
        if c.status == status_text && c.reason == reason && c.message == message {
            return None;
        }
    } else if list.is_empty() {
        return None; // nothing to say, and nothing said yet
    }
    let condition = Condition {
        type_: CONDITION_TYPE.to_owned(),
        status: status_text.to_owned(),
        reason: reason.to_owned(),
        message,
        last_transition_time: Time(now),
        observed_generation: svc.metadata.generation,
    };
    match old {
        Some(i) => conditions[i] = condition,
        None => conditions.push(condition),
    }
    Some(conditions)
}

#[cfg(test)]
mod tests {
    use k8s_openapi::api::core::v1::{LoadBalancerIngress, LoadBalancerStatus, ServiceStatus};

    use super::*;

    fn svc(ips: &[&str], conditions: Vec<Condition>) -> Service {
        Service {
            status: Some(ServiceStatus {
                load_balancer: Some(LoadBalancerStatus {
                    ingress: Some(
                        ips.iter()
                            .map(|ip| LoadBalancerIngress {
                                ip: Some(ip.to_string()),
                                ..Default::default()
                            })
                            .collect(),
                    ),
                }),
                conditions: Some(conditions),
            }),
            ..Default::default()
        }
    }

    fn cond(message: &str, status: &str, reason: &str) -> Condition {
        Condition {
            type_: CONDITION_TYPE.into(),
            status: status.into(),
            reason: reason.into(),
            message: message.into(),
            last_transition_time: Time(Timestamp::UNIX_EPOCH),
            observed_generation: None,
        }
    }

    fn claim(vip: &str, iface: &str) -> Wanted {
        [(vip.parse().unwrap(), Some(iface.to_string()))].into()
    }

    fn ours(c: &[Condition]) -> &Condition {
        c.iter().find(|c| c.type_ == CONDITION_TYPE).unwrap()
    }

    #[test]
    fn a_takeover_of_every_vip_makes_the_condition_true_and_names_node_and_interface() {
        let s = svc(&["10.0.0.5"], vec![]);
        let c = updated_conditions(
            &s,
            &"node-a".into(),
            &claim("10.0.0.5", "eth0"),
            Timestamp::now(),
        )
        .unwrap();
        let c = ours(&c);
        assert_eq!(
            (c.status.as_str(), c.reason.as_str()),
            ("True", REASON_ANNOUNCED)
        );
        assert_eq!(c.message, "10.0.0.5 by node-a on eth0");
    }

    #[test]
    fn another_owners_entry_is_kept_and_only_ours_changes() {
        let s = svc(
            &["10.0.0.5", "fd00::5"],
            vec![cond("fd00::5 by node-b on eth1", "False", REASON_PARTIAL)],
        );
        let c = updated_conditions(
            &s,
            &"node-a".into(),
            &claim("10.0.0.5", "eth0"),
            Timestamp::now(),
        )
        .unwrap();
        assert_eq!(
            ours(&c).message,
            "10.0.0.5 by node-a on eth0; fd00::5 by node-b on eth1"
        );
        assert_eq!(ours(&c).status, "True");
    }

    #[test]
    fn nothing_is_written_when_the_condition_already_says_it() {
        let s = svc(
            &["10.0.0.5"],
            vec![cond("10.0.0.5 by node-a on eth0", "True", REASON_ANNOUNCED)],
        );
        assert_eq!(
            updated_conditions(
                &s,
                &"node-a".into(),
                &claim("10.0.0.5", "eth0"),
                Timestamp::now()
            ),
            None
        );
    }

    #[test]
    fn a_release_removes_only_an_entry_that_names_us() {
        let s = svc(
            &["10.0.0.5"],
            vec![cond("10.0.0.5 by node-b on eth0", "True", REASON_ANNOUNCED)],
        );
        let release: Wanted = [("10.0.0.5".parse().unwrap(), None)].into();
        assert_eq!(
            updated_conditions(&s, &"node-a".into(), &release, Timestamp::now()),
            None,
            "node-b took it over: not ours to remove"
        );
        let c = updated_conditions(&s, &"node-b".into(), &release, Timestamp::now()).unwrap();
        assert_eq!(
            (ours(&c).status.as_str(), ours(&c).message.as_str()),
            ("False", "")
        );
    }

    #[test]
    fn entries_for_addresses_no_longer_in_the_ingress_are_dropped() {
        let s = svc(
            &["10.0.0.6"],
            vec![cond("10.0.0.5 by node-b on eth0", "True", REASON_ANNOUNCED)],
        );
        let c = updated_conditions(
            &s,
            &"node-a".into(),
            &claim("10.0.0.6", "eth0"),
            Timestamp::now(),
        )
        .unwrap();
        assert_eq!(ours(&c).message, "10.0.0.6 by node-a on eth0");
    }

    fn web() -> ServiceRef {
        ServiceRef {
            namespace: "default".into(),
            name: "web".into(),
        }
    }

    /// Entries after `change`, with its write done (nothing pending).
    fn written(change: Change) -> Entries {
        let mut e = Entries::default();
        e.queue(change);
        e.pending.clear();
        e
    }

    fn claimed() -> Change {
        Change::Claim {
            services: vec![web()],
            vip: "10.0.0.5".parse().unwrap(),
            iface: "eth0".into(),
        }
    }

    #[test]
    fn a_claim_another_writer_removed_is_written_again_at_the_resync() {
        let mut e = written(claimed());
        let emptied = Arc::new(svc(&["10.0.0.5"], vec![cond("", "False", REASON_PARTIAL)]));
        e.resync(&"node-a".into(), |_| Some(emptied.clone()));
        assert_eq!(
            e.pending.get(&web()).map(|(w, _)| w.clone()),
            Some(claim("10.0.0.5", "eth0"))
        );
    }

    #[test]
    fn a_condition_that_agrees_costs_no_write_at_the_resync() {
        let mut e = written(claimed());
        let agrees = Arc::new(svc(
            &["10.0.0.5"],
            vec![cond("10.0.0.5 by node-a on eth0", "True", REASON_ANNOUNCED)],
        ));
        e.resync(&"node-a".into(), |_| Some(agrees.clone()));
        assert!(e.pending.is_empty(), "{:?}", e.pending);
        assert_eq!(e.wanted.len(), 1, "the claim is still remembered");
    }

    #[test]
    fn a_release_is_forgotten_once_the_condition_no_longer_names_us() {
        let mut e = written(Change::Release {
            services: vec![web()],
            vip: "10.0.0.5".parse().unwrap(),
        });
        let names_us = Arc::new(svc(
            &["10.0.0.5"],
            vec![cond("10.0.0.5 by node-a on eth0", "True", REASON_ANNOUNCED)],
        ));
        e.resync(&"node-a".into(), |_| Some(names_us.clone()));
        assert!(
            e.pending.contains_key(&web()),
            "the stale entry is removed again"
        );
        e.pending.clear();
        let moved = Arc::new(svc(
            &["10.0.0.5"],
            vec![cond("10.0.0.5 by node-b on eth0", "True", REASON_ANNOUNCED)],
        ));
        e.resync(&"node-a".into(), |_| Some(moved.clone()));
        assert!(e.pending.is_empty() && e.wanted.is_empty(), "{e:?}");
    }

    #[test]
    fn a_deleted_service_is_forgotten_at_the_resync() {
        let mut e = written(claimed());
        e.resync(&"node-a".into(), |_| None);
        assert!(e.pending.is_empty() && e.wanted.is_empty(), "{e:?}");
    }

    #[test]
    fn a_vip_another_node_claims_now_is_not_rewritten_at_the_resync() {
        let mut e = written(claimed());
        let taken = Arc::new(svc(
            &["10.0.0.5"],
            vec![cond("10.0.0.5 by node-b on eth0", "True", REASON_ANNOUNCED)],
        ));
        e.resync(&"node-a".into(), |_| Some(taken.clone()));
        assert!(e.pending.is_empty(), "{:?}", e.pending);
    }
}
