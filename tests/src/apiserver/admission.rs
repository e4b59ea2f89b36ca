//! The part of deploy/admission-policy.yaml the in-repo server enforces: which Leases an agent
//! may create. kube-apiserver runs the real policy; here it is just enough for the agent's
//! start-up check ([`AGENT_LEASES_DENIAL`]: the agent refuses to start where the policy is
//! absent) to get the same answer from both servers, with kube-apiserver's message format.
//!
//! Who is who: the in-repo server knows callers by token only. `admin` is the test's admin,
//! `allocator-*` the allocator replicas ([`crate::env`]'s worlds name them so), `withdrawer-*`
//! the withdrawal controller's replicas (which write the `announcer-withdrawal` Lease); every other
//! token is an agent (its node name). Only Leases named `announcer-*` (the install's own) are
//! judged: the server's own tests write Leases of any name with tokens of any name.

use serde_json::Value;

use super::{resources::ResourceType, status::ApiError};

/// What the `announcer-agent-leases` policy says when an agent writes a Lease that is neither
/// a node Lease nor a per-Service one (deploy/admission-policy.yaml).
pub const AGENT_LEASES_DENIAL: &str =
    "an announcer agent writes only announcer-node-* and announcer-svc-* Leases, not ";

fn is_agent(client: &str) -> bool {
    client != "admin" && !client.starts_with("allocator-") && !client.starts_with("withdrawer-")
}

/// The policy's verdict on `client` creating `body` (of kind `rt`).
pub(crate) fn check_create(client: &str, rt: &ResourceType, body: &Value) -> Result<(), ApiError> {
    if rt.plural != "leases" || !is_agent(client) {
        return Ok(());
    }
    let name = body["metadata"]["name"].as_str().unwrap_or_default();
    if !name.starts_with("announcer-")
        || name.starts_with("announcer-node-")
        || name.starts_with("announcer-svc-")
    {
        return Ok(());
    }
    Err(ApiError::new(
        403,
        "Forbidden",
        format!(
            "leases.coordination.k8s.io \"{name}\" is forbidden: ValidatingAdmissionPolicy \
             'announcer-agent-leases' with binding 'announcer-agent-leases' denied request: \
             {AGENT_LEASES_DENIAL}{name}"
        ),
    ))
}
