//! One Pod's withdrawal: whether it is still to be withdrawn, and the write that does it.
//!
//! The write does what the node lifecycle controller's `MarkPodsNotReady` does (the `Ready`
//! condition to False, nothing else), with our own reason so the Pod says who did it
//! (docs/design/endpoint-withdrawal.md, "Rules for the controller" 3 and 4). It is a
//! **strategic merge patch** of `pods/status`: `conditions` merge by `type` there, so only
//! `Ready` changes. A JSON merge patch would replace the whole list, dropping every other
//! condition. The patch carries the Pod's `uid` and `resourceVersion` as preconditions: a Pod
//! recreated under the same name, or changed since it was read (the kubelet, the node
//! lifecycle controller, another replica), gets a 409 instead of our write.

use k8s_openapi::{api::core::v1::Pod, jiff::Timestamp};
use serde_json::{Value, json};

use crate::election::NodeName;

/// The reason on the `Ready` condition we write, and of the Pod's Event (the admission policy
/// admits this one only).
pub const REASON: &str = "AnnouncerNodeUnreachable";

/// Why a Pod is left alone.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Skip {
    /// Its `Ready` is False or absent: someone (the kubelet, the node lifecycle controller,
    /// another replica) has acted already.
    NotReady,
    /// It is bound to another node (or none): the slice was stale.
    OtherNode,
    /// No `uid` or `resourceVersion`: nothing to hold the write to.
    Unversioned,
}

/// The Pod's `Ready` condition: `Some(true)` for True, `Some(false)` for anything else,
/// `None` when absent.
pub fn ready(pod: &Pod) -> Option<bool> {
    pod.status
        .as_ref()?
        .conditions
        .as_ref()?
        .iter()
        .find(|c| c.type_ == "Ready")
        .map(|c| c.status == "True")
}

/// The `(uid, resourceVersion)` to write over, if `pod` is to be withdrawn from `node`.
pub fn check<'a>(pod: &'a Pod, node: &str) -> Result<(&'a str, &'a str), Skip> {
    if pod.spec.as_ref().and_then(|s| s.node_name.as_deref()) != Some(node) {
        return Err(Skip::OtherNode);
    }
    if ready(pod) != Some(true) {
        return Err(Skip::NotReady);
    }
    match (
        pod.metadata.uid.as_deref(),
        pod.metadata.resource_version.as_deref(),
    ) {
        (Some(uid), Some(rv)) => Ok((uid, rv)),
        _ => Err(Skip::Unversioned),
    }
}

/// The condition's message: the node and the agents that proved it gone.
pub fn message(node: &NodeName, reporters: &[NodeName]) -> String {
    let who: Vec<&str> = reporters.iter().map(NodeName::as_str).collect();
    format!(
        "node {node} is unreachable on the segment, reported by {} (announcer fast endpoint \
         withdrawal); its kubelet sets Ready again when it returns",
        who.join(", ")
    )
}

/// The strategic merge patch for `pods/status` that sets `Ready` False over `uid` and `rv`.
pub fn withdraw_patch(uid: &str, rv: &str, message: &str, now: Timestamp) -> Value {
    json!({
        "metadata": {"uid": uid, "resourceVersion": rv},
        "status": {
            "conditions": [{
                "type": "Ready",
                "status": "False",
                "reason": REASON,
                "message": message,
                "lastTransitionTime": now.to_string(),
            }],
        },
    })
}

#[cfg(test)]
mod tests {
    use k8s_openapi::{
        api::core::v1::{PodCondition, PodSpec, PodStatus},
        apimachinery::pkg::apis::meta::v1::ObjectMeta,
    };

    use super::*;

    fn pod(node: &str, ready: Option<&str>) -> Pod {
        Pod {
            metadata: ObjectMeta {
                name: Some("web-1".into()),
                namespace: Some("shop".into()),
                uid: Some("u-1".into()),
                resource_version: Some("42".into()),
                ..ObjectMeta::default()
            },
            spec: Some(PodSpec {
                node_name: Some(node.into()),
                ..PodSpec::default()
            }),
            status: Some(PodStatus {
                conditions: Some(
                    ready
                        .map(|s| PodCondition {
                            type_: "Ready".into(),
                            status: s.into(),
                            ..PodCondition::default()
                        })
                        .into_iter()
                        .chain([PodCondition {
                            type_: "ContainersReady".into(),
                            status: "True".into(),
                            ..PodCondition::default()
                        }])
                        .collect(),
                ),
                ..PodStatus::default()
            }),
        }
    }

    #[test]
    fn a_ready_pod_on_the_node_is_withdrawn_over_its_uid_and_resource_version() {
        assert_eq!(
            check(&pod("node-c", Some("True")), "node-c"),
            Ok(("u-1", "42"))
        );
    }

    #[test]
    fn a_pod_whose_ready_is_false_unknown_or_absent_is_left_alone() {
        for r in [Some("False"), Some("Unknown"), None] {
            assert_eq!(
                check(&pod("node-c", r), "node-c"),
                Err(Skip::NotReady),
                "{r:?}"
            );
        }
    }

    #[test]
    fn a_pod_bound_to_another_node_is_left_alone() {
        assert_eq!(
            check(&pod("node-a", Some("True")), "node-c"),
            Err(Skip::OtherNode)
        );
    }

    #[test]
    fn the_patch_sets_only_ready_false_with_our_reason_and_carries_both_preconditions() {
        let now: Timestamp = "2026-12-04T13:45:00Z".parse().unwrap();
        let p = withdraw_patch("u-1", "42", "gone", now);
        assert_eq!(
            p,
            json!({
                "metadata": {"uid": "u-1", "resourceVersion": "42"},
                "status": {"conditions": [{
                    "type": "Ready",
                    "status": "False",
                    "reason": "AnnouncerNodeUnreachable",
                    "message": "gone",
                    "lastTransitionTime": "2026-12-04T13:45:00Z",
                }]},
            })
        );
    }

    #[test]
    fn the_message_names_the_node_and_every_reporter() {
        let m = message(&"node-c".into(), &["node-a".into(), "node-b".into()]);
        assert!(m.starts_with("node node-c is unreachable"), "{m}");
        assert!(m.contains("reported by node-a, node-b"), "{m}");
    }
}
