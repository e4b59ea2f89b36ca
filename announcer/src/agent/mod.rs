//! The Kubernetes agent: the thin tokio shell around [`crate::election::Core`] (being written).

pub mod config;
pub mod http;
pub mod plane;
pub mod eligibility;
pub mod events;
pub mod iface;
pub mod node_lease;
pub mod per_service;
pub mod watch;
