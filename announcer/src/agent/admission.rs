//! The start-up check that the admission policy of `deploy/admission-policy.yaml` is in force.
//!
//! Why: RBAC lets every agent write every Lease of its namespace and patch any Service's
//! status; only the ValidatingAdmissionPolicies narrow that to the node's own Lease and the
//! `announcer.dev/Announced` condition (issue 25). Without them one compromised node could
//! move any Service's address or take over peers' Leases, so an agent that finds them absent
//! refuses to start (Kubernetes without ValidatingAdmissionPolicy v1 is unsupported).
//!
//! How: a behavioural probe rather than reading the policy objects. The agent asks for a
//! server-side dry run (`dryRun=All`: admission runs, nothing is stored) of creating a Lease
//! the policy must deny (`announcer-admission-probe`, neither a node nor a per-Service
//! Lease), and checks that the denial carries the policy's message. Why not a `get` of the
//! named policy: that needs a cluster-wide read grant on admission policies, and proves only
//! that an object exists, not that it is bound, loaded and matches the agent's account; the
//! probe proves exactly what the agent relies on, with a grant it already has (Leases,
//! create). It costs one request per start.
//!
//! Pitfall: the probe shows the Lease policy is in force, not its siblings in the same file
//! (`announcer-agent-service-status`, `announcer-allocator-leases`): a Service-status write
//! cannot be dry-run without a Service to write. `kubectl apply -k deploy/` applies all three
//! together; deleting one by hand is not detected.

use std::time::Duration;

use k8s_openapi::api::coordination::v1::Lease;
use kube::{
    Api, Client,
    api::{ObjectMeta, PostParams},
};

use super::shutdown::Shutdown;

/// The oldest Kubernetes the announcer supports: ValidatingAdmissionPolicy v1 (1.30) with the
/// node claim in Pod-bound ServiceAccount tokens GA (`ServiceAccountTokenPodNodeInfo`, 1.32, no
/// longer a gate that can be off), and the CRD's CEL `ip()`/`cidr()` (1.31). docs/install.md
/// (Support matrix), the manifests' comments and the schema tests say the same.
pub const MIN_KUBERNETES: &str = "1.32";

/// The Lease name the probe asks to create (never stored: a dry run the policy denies).
pub const PROBE_LEASE: &str = "announcer-admission-probe";
/// What the `announcer-agent-leases` policy's denial of the probe says.
pub const POLICY_DENIAL: &str = "an announcer agent writes only announcer-node-*";

/// Why the agent will not start.
#[derive(Debug, thiserror::Error)]
pub enum PolicyError {
    /// The probe was accepted: nothing denies it.
    #[error(
        "the admission policy announcer-agent-leases is not in force: a dry run of creating Lease \
         {PROBE_LEASE} in {namespace} was accepted. Apply deploy/admission-policy.yaml \
         (Kubernetes {min} or newer: ValidatingAdmissionPolicy v1 and the node claim); without it \
         one node's credentials could move any Service's address",
        min = MIN_KUBERNETES
    )]
    Absent {
        /// The agent namespace.
        namespace: String,
    },
    /// The probe was refused, but not by the policy (RBAC, a missing namespace, ...).
    #[error("the admission policy check was refused by something else than the policy: {0}")]
    Refused(String),
}

/// Checks the policy with the probe. Retries while the API server cannot be reached or
/// answers 5xx/429 (never more often than every second); `Ok(())` also when `stop` fires.
pub async fn require_policy(
    client: &Client,
    namespace: &str,
    mut stop: Shutdown,
) -> Result<(), PolicyError> {
    let api: Api<Lease> = Api::namespaced(client.clone(), namespace);
    let probe = Lease {
        metadata: ObjectMeta {
            name: Some(PROBE_LEASE.to_owned()),
            ..ObjectMeta::default()
        },
        spec: None,
    };
    let pp = PostParams {
        dry_run: true,
        ..PostParams::default()
    };
    let mut wait = Duration::from_secs(1);
    loop {
        match api.create(&pp, &probe).await {
            Err(kube::Error::Api(e)) if e.code == 403 && e.message.contains(POLICY_DENIAL) => {
                return Ok(());
            }
            Ok(_) => {
                return Err(PolicyError::Absent {
                    namespace: namespace.to_owned(),
                });
            }
            // Already exists: nothing denied the create before storage looked (admission
            // runs first), so the policy is absent.
            Err(kube::Error::Api(e)) if e.code == 409 => {
                return Err(PolicyError::Absent {
                    namespace: namespace.to_owned(),
                });
            }
            Err(kube::Error::Api(e)) if e.code < 500 && e.code != 429 => {
                return Err(PolicyError::Refused(format!("{} ({})", e.message, e.code)));
            }
            Err(e) => {
                tracing::warn!(error = %e, "admission policy check: API server unavailable, retrying");
            }
        }
        tokio::select! {
            () = stop.recv() => return Ok(()),
            () = tokio::time::sleep(wait) => {}
        }
        wait = (wait * 2).min(Duration::from_secs(10));
    }
}
