//! Acting on the tracker's decisions, one at a time in order (so a node's claim and release
//! never race): claim the node's shared slot ([`super::slots`]), select its Pods
//! ([`super::select`]), write each one's `Ready` False in parallel (at most
//! [`MAX_CONCURRENT_WRITES`]), and record Events on the Pods, the Node and the Services.
//!
//! Per Pod (the design's rule 5): fetch it fresh; write only if its `Ready` is True; a 409
//! means someone wrote first: fetch it once more and write only if `Ready` is still True; a
//! 403 or 422 (the admission policy: the namespace label removed, `Ready` no longer True) is
//! final; 404: it is gone.

use std::{collections::BTreeSet, sync::Arc};

use futures::StreamExt;
use k8s_openapi::{
    api::{
        core::v1::{Node, ObjectReference, Pod, Service},
        discovery::v1::EndpointSlice,
    },
    jiff::Timestamp,
};
use kube::{
    Api, Client, Resource,
    api::{Patch, PatchParams},
    runtime::{
        events::{Event, EventType, Recorder, Reporter},
        reflector::{ObjectRef, Store},
    },
};

use super::{
    metrics::{Metrics, Outcome, PodResult, Return},
    pod::{self, REASON, Skip},
    select::{self, Key, OPT_IN_LABEL},
    slots::{ClaimOutcome, SlotError, SlotLease},
};
use crate::{election::NodeName, withdraw::Decision};

/// The most `pods/status` writes in flight at once.
pub const MAX_CONCURRENT_WRITES: usize = 16;
/// The reason of the Warning Event on a Node left to the node lifecycle controller.
pub const REASON_CAPPED: &str = "AnnouncerWithdrawalCapped";
/// The `reportingController` of our Events.
pub const CONTROLLER: &str = "announcer.dev/withdrawer";
/// Tries of a slot claim while the API server fails, and the first backoff (doubled each
/// time, plus up to half again at random): about 1.5 s in all.
const CLAIM_TRIES: u32 = 4;
const CLAIM_BACKOFF: std::time::Duration = std::time::Duration::from_millis(100);

/// Whether `e` is worth another try: no answer, a server error or throttling.
fn transient(e: &kube::Error) -> bool {
    match e {
        kube::Error::Api(s) => s.code >= 500 || s.code == 429,
        kube::Error::HyperError(_) | kube::Error::Service(_) => true,
        _ => false,
    }
}

/// What the actor reads and writes.
#[derive(Clone)]
pub struct Actor {
    /// The API client.
    pub client: Client,
    /// The shared slots.
    pub slots: SlotLease,
    /// EndpointSlices, every namespace.
    pub slices: Store<EndpointSlice>,
    /// Services, every namespace.
    pub services: Store<Service>,
    /// The opted-in Namespaces.
    pub namespaces: Store<k8s_openapi::api::core::v1::Namespace>,
    /// Nodes (for the Events' UIDs).
    pub nodes: Store<Node>,
    /// Metrics.
    pub metrics: Arc<Metrics>,
    /// This replica's identity, for the Events.
    pub identity: String,
}

impl Actor {
    /// Acts on one decision.
    pub async fn act(&self, d: Decision) {
        match d {
            Decision::Withdraw {
                node,
                reporters,
                expected,
            } => self.withdraw(&node, &reporters, expected).await,
            Decision::Capped { node, withdrawn } => {
                tracing::warn!(%node, ?withdrawn, "proven unreachable, but the cap is reached: left to the node lifecycle controller");
                self.metrics.withdrawal(Outcome::Capped);
                self.capped_event(&node, &withdrawn);
            }
            Decision::Returned { node, after } => {
                tracing::info!(%node, ?after, "returned: its kubelet sets its Pods ready again");
                self.metrics.returned(Return::Returned, Some(after));
                self.release(&node).await;
            }
            Decision::HandedOver { node } => {
                tracing::info!(%node, "handed over to the node lifecycle controller");
                self.metrics.returned(Return::HandedOver, None);
                self.release(&node).await;
            }
        }
    }

    async fn release(&self, node: &NodeName) {
        if let Err(e) = self.slots.release(node).await {
            tracing::warn!(%node, error = %e, "could not free the slot (it expires)");
        }
    }

    /// [`SlotLease::claim`], again after a jittered backoff while the API server fails (a
    /// timeout, a 5xx, a 429): a withdrawal is worth a few hundred milliseconds more, not
    /// dropping. A refusal (4xx but 429) is final.
    async fn claim_retrying(&self, node: &NodeName) -> Result<ClaimOutcome, SlotError> {
        let mut backoff = CLAIM_BACKOFF;
        for _ in 1..CLAIM_TRIES {
            match self.slots.claim(node).await {
                Err(SlotError::Api(e)) if transient(&e) => {
                    tracing::info!(%node, error = %e, ?backoff, "claiming a slot failed; trying again");
                    let jitter = backoff.mul_f64(rand::random::<f64>() * 0.5);
                    tokio::time::sleep(backoff + jitter).await;
                    backoff *= 2;
                }
                other => return other,
            }
        }
        self.slots.claim(node).await
    }

    async fn withdraw(&self, node: &NodeName, reporters: &[NodeName], expected: usize) {
        let taken = match self.claim_retrying(node).await {
            Ok(ClaimOutcome::Granted { taken }) => taken,
            Ok(ClaimOutcome::Full(withdrawn)) => {
                tracing::warn!(%node, ?withdrawn, "proven unreachable, but every shared slot is held: left to the node lifecycle controller");
                self.metrics.withdrawal(Outcome::Capped);
                self.capped_event(node, &withdrawn);
                return;
            }
            Err(e) => {
                tracing::warn!(%node, error = %e, "could not claim a slot: not withdrawn");
                self.metrics.withdrawal(Outcome::Failed);
                return;
            }
        };
        self.metrics.withdrawal(Outcome::Withdrawn);
        let targets = {
            let opted_in: BTreeSet<String> = self
                .namespaces
                .state()
                .iter()
                .filter(|ns| {
                    ns.metadata
                        .labels
                        .as_ref()
                        .and_then(|l| l.get(OPT_IN_LABEL))
                        .is_some_and(|v| v == "true")
                })
                .filter_map(|ns| ns.metadata.name.clone())
                .collect();
            let slices = self.slices.state();
            select::pods_on_node(
                node.as_str(),
                slices.iter().map(|s| &**s),
                |ns| opted_in.contains(ns),
                |ns, name| {
                    self.services
                        .get(&ObjectRef::new(name).within(ns))
                        .is_some_and(|s| select::is_announced_load_balancer(&s))
                },
            )
        };
        let message = pod::message(node, reporters);
        tracing::info!(%node, ?reporters, expected, pods = targets.len(), "withdrawing");
        let results: Vec<(Key, BTreeSet<String>, PodResult)> =
            futures::stream::iter(targets.into_iter().map(|(key, services)| {
                let message = message.clone();
                async move {
                    let r = self.withdraw_pod(&key, node, &message).await;
                    (key, services, r)
                }
            }))
            .buffer_unordered(MAX_CONCURRENT_WRITES)
            .collect()
            .await;
        let mut done = 0usize;
        let mut by_service: std::collections::BTreeMap<Key, usize> = Default::default();
        for (key, services, r) in &results {
            self.metrics.pod(*r);
            if *r == PodResult::Withdrawn {
                done += 1;
                for s in services {
                    *by_service.entry(Key::new(&key.namespace, s)).or_default() += 1;
                }
            }
        }
        // Every replica acts on the same proof: the one that took the slot, and any that wrote
        // a Pod, say so; the others stay quiet (no duplicate Events).
        if !taken && done == 0 {
            return;
        }
        let who: Vec<&str> = reporters.iter().map(NodeName::as_str).collect();
        self.publish(
            self.node_ref(node),
            EventType::Warning,
            REASON,
            format!(
                "unreachable on the segment per {}: {done} Pod(s) of LoadBalancer Services set not ready",
                who.join(", ")
            ),
        );
        for (svc, n) in by_service {
            let reference = self
                .services
                .get(&ObjectRef::new(&svc.name).within(&svc.namespace))
                .map(|s| s.object_ref(&()))
                .unwrap_or_else(|| ObjectReference {
                    api_version: Some("v1".into()),
                    kind: Some("Service".into()),
                    namespace: Some(svc.namespace.clone()),
                    name: Some(svc.name.clone()),
                    ..ObjectReference::default()
                });
            self.publish(
                reference,
                EventType::Warning,
                REASON,
                format!("{n} endpoint(s) on node {node} set not ready: the node is unreachable"),
            );
        }
    }

    /// One Pod: fetch, check, write; once more after a 409.
    async fn withdraw_pod(&self, key: &Key, node: &NodeName, message: &str) -> PodResult {
        let api: Api<Pod> = Api::namespaced(self.client.clone(), &key.namespace);
        for _ in 0..2 {
            let pod = match api.get_opt(&key.name).await {
                Ok(Some(p)) => p,
                Ok(None) => return PodResult::Gone,
                Err(e) => {
                    tracing::warn!(pod = %key, error = %e, "could not read the Pod");
                    return PodResult::Error;
                }
            };
            let (uid, rv) = match pod::check(&pod, node.as_str()) {
                Ok(v) => v,
                Err(Skip::NotReady | Skip::OtherNode | Skip::Unversioned) => {
                    return PodResult::Skipped;
                }
            };
            let patch = pod::withdraw_patch(uid, rv, message, Timestamp::now());
            match api
                .patch_status(
                    &key.name,
                    &PatchParams::default(),
                    &Patch::Strategic(&patch),
                )
                .await
            {
                Ok(_) => {
                    tracing::info!(pod = %key, %node, "Ready set False");
                    self.publish(
                        pod.object_ref(&()),
                        EventType::Warning,
                        REASON,
                        message.to_owned(),
                    );
                    return PodResult::Withdrawn;
                }
                Err(kube::Error::Api(s)) if s.code == 409 => continue,
                Err(kube::Error::Api(s)) if s.code == 403 || s.code == 422 => {
                    tracing::warn!(pod = %key, reason = %s.message, "write refused");
                    return PodResult::Refused;
                }
                Err(kube::Error::Api(s)) if s.code == 404 => return PodResult::Gone,
                Err(e) => {
                    tracing::warn!(pod = %key, error = %e, "write failed");
                    return PodResult::Error;
                }
            }
        }
        PodResult::Conflict
    }

    fn node_ref(&self, node: &NodeName) -> ObjectReference {
        self.nodes
            .get(&ObjectRef::new(node.as_str()))
            .map(|n| n.object_ref(&()))
            .unwrap_or_else(|| ObjectReference {
                api_version: Some("v1".into()),
                kind: Some("Node".into()),
                name: Some(node.to_string()),
                ..ObjectReference::default()
            })
    }

    fn capped_event(&self, node: &NodeName, withdrawn: &[NodeName]) {
        let held: Vec<&str> = withdrawn.iter().map(NodeName::as_str).collect();
        self.publish(
            self.node_ref(node),
            EventType::Warning,
            REASON_CAPPED,
            format!(
                "unreachable on the segment, but {} node(s) are withdrawn already ({}): its Pods are left to the node lifecycle controller",
                held.len(),
                held.join(", ")
            ),
        );
    }

    /// Records an Event in the background (never holds the withdrawal up).
    fn publish(&self, reference: ObjectReference, type_: EventType, reason: &str, note: String) {
        let recorder = Recorder::new(
            self.client.clone(),
            Reporter {
                controller: CONTROLLER.into(),
                instance: Some(self.identity.clone()),
            },
        );
        let event = Event {
            type_,
            reason: reason.to_owned(),
            note: Some(note),
            action: "Withdraw".into(),
            secondary: None,
        };
        tokio::spawn(async move {
            if let Err(e) = recorder.publish(&event, &reference).await {
                tracing::warn!(error = %e, "could not record Event");
            }
        });
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn api(code: u16) -> kube::Error {
        kube::Error::Api(
            kube::core::Status::failure("x", "y")
                .with_code(code)
                .boxed(),
        )
    }

    #[test]
    fn server_errors_and_throttling_are_tried_again_and_refusals_are_not() {
        assert!(transient(&api(500)));
        assert!(transient(&api(503)));
        assert!(transient(&api(429)));
        assert!(!transient(&api(403)));
        assert!(!transient(&api(404)));
        assert!(!transient(&api(422)));
    }
}
