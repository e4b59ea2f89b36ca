//! [`AgentError`]: why the agent could not start, or had to stop.
//!
//! Why a module of its own: the parts of the agent that fail (the shells, the context, the
//! heartbeat socket, the state directory) each contribute a variant, and the CLI maps every
//! variant to an exit code; here, none of them imports it from the agent's root.

use super::{config::ConfigError, net::heartbeat_socket::HeartbeatError, persist::PersistError};
use crate::{
    heartbeat::{IdentityError, KeyError},
    placement::{eligibility::SelectionError, selector::SelectorError},
};

/// Why the agent could not start (or had to stop).
#[derive(Debug, thiserror::Error)]
pub enum AgentError {
    /// Flags that do not fit together.
    #[error(transparent)]
    Config(#[from] ConfigError),
    /// A label selector flag that cannot be used.
    #[error(transparent)]
    Selection(#[from] SelectionError),
    /// A label selector flag that does not parse.
    #[error(transparent)]
    SelectorSyntax(#[from] SelectorError),
    /// No usable kubeconfig / in-cluster configuration.
    #[error("no Kubernetes configuration: {0}")]
    KubeConfig(String),
    /// The admission policy that confines the agents' credentials is not in force.
    #[error(transparent)]
    AdmissionPolicy(#[from] super::admission::PolicyError),
    /// The Kubernetes client failed.
    #[error(transparent)]
    Kube(#[from] kube::Error),
    /// The heartbeat socket.
    #[error(transparent)]
    Heartbeat(#[from] HeartbeatError),
    /// The heartbeat identity (its node name cannot be sent, or a key is unusable).
    #[error(transparent)]
    Key(#[from] KeyError),
    /// This node's heartbeat identity file.
    #[error(transparent)]
    Identity(#[from] IdentityError),
    /// The state directory (identity, incarnation counter).
    #[error(transparent)]
    State(#[from] PersistError),
    /// This node's Node object says nothing to announce from.
    #[error("node {0}: {1}")]
    Node(String, String),
    /// Local interfaces could not be read.
    #[error(transparent)]
    Interfaces(#[from] crate::dataplane::Error),
    /// The election's own thread.
    #[error("cannot start the election thread: {0}")]
    ElectionThread(#[source] std::io::Error),
    /// The thread receiving heartbeats.
    #[error("cannot start the heartbeat receiving thread: {0}")]
    HeartbeatThread(#[source] std::io::Error),
}
