//! The agent's side of the Kubernetes API: what it watches and what it writes. The pure rules
//! in between (which VIPs to announce, and where) are [`crate::placement`]'s.
//!
//! * [`watch`]: reflector-backed watches of Services, EndpointSlices, Nodes and node Leases.
//! * [`node_lease`]: this node's Lease (liveness, heartbeat address and key) and peers' Leases
//!   as the election core's input.
//! * [`events`]: Kubernetes Events on Services and on this Node, repeats folded.
//! * [`announced`]: the `announcer.dev/Announced` condition on Services (who announces each
//!   VIP), written only when an owner changes.
//! * [`lease_per_service`]: the comparison mode's election, one Lease per Service.
//!
//! Why together: these are the only modules that talk to the API server, so its load, RBAC
//! and failure modes are read in one place.

pub mod announced;
pub mod events;
pub mod lease_per_service;
pub mod node_lease;
pub mod other_announcers;
pub mod plan_feed;
pub mod watch;

use kube::Client;

/// A client from `kubeconfig`, else from the in-cluster configuration, `$KUBECONFIG` or
/// `~/.kube/config`; the error says why in words.
pub(crate) async fn client(kubeconfig: Option<&std::path::Path>) -> Result<Client, String> {
    let config = match kubeconfig {
        Some(path) => {
            let kc = kube::config::Kubeconfig::read_from(path).map_err(|e| e.to_string())?;
            kube::Config::from_custom_kubeconfig(kc, &Default::default())
                .await
                .map_err(|e| e.to_string())?
        }
        None => kube::Config::infer().await.map_err(|e| e.to_string())?,
    };
    Client::try_from(config).map_err(|e| e.to_string())
}
