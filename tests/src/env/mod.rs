//! The test worlds, one module per kind:
//!
//! * [`node`]: one node namespace with the API server inside it, for a single agent with the
//!   real data plane.
//! * [`cluster`]: the in-repo API server plus real `announcer agent` processes (no data plane
//!   by default).
//! * [`lan`]: a multi-node L2 segment on a bridge, with the real XDP data plane on every node
//!   (the `Testbed`).
//! * [`image`]: an OCI image archive unpacked (the image tests, the stand-in kubelets).
//! * [`kube`]: a real control plane (etcd, kube-apiserver, kube-controller-manager,
//!   kube-scheduler) built from the Go module proxy, with stand-in kubelets.
//! * [`agent_cmd`]: the one way every world and test starts an agent.
//! * [`process`]: the one guard every world runs its processes under.
//! * [`packet`]: the one raw packet socket of the tests (forged and probing frames, floods).
//! * [`snooping`]: links whose multicast filtering is real (an MLD-snooping bridge, a macvlan).

pub mod agent_cmd;
pub mod allocator_cmd;
pub mod cluster;
pub mod image;
pub mod kube;
pub mod lan;
pub mod node;
pub mod packet;
pub mod process;
pub mod snooping;
pub mod withdrawer_cmd;

/// The agents' namespace (their Leases, heartbeat Secret and ServiceAccount), as `deploy/`
/// creates it; every world starts its agents in it ([`agent_cmd::AgentCommand`]).
pub const NAMESPACE: &str = "announcer-system";

/// Which API server a world runs against.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub enum ApiKind {
    /// The in-repo API server (`crate::apiserver`): starts at once, has fault hooks and
    /// request counts.
    #[default]
    InRepo,
    /// A real control plane ([`kube::KubeControlPlane`]): kube-apiserver, etcd,
    /// kube-controller-manager, kube-scheduler.
    Kube,
}

impl std::fmt::Display for ApiKind {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(match self {
            ApiKind::InRepo => "in-repo",
            ApiKind::Kube => "kube",
        })
    }
}

impl std::str::FromStr for ApiKind {
    type Err = String;
    fn from_str(s: &str) -> Result<Self, String> {
        match s {
            "in-repo" | "embedded" => Ok(ApiKind::InRepo),
            "kube" | "kube-apiserver" => Ok(ApiKind::Kube),
            other => Err(format!("unknown API server {other:?}: in-repo or kube")),
        }
    }
}
