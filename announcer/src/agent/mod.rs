//! The Kubernetes agent: the thin tokio shell around [`crate::election::Core`] (being written).

pub mod config;
pub mod http;
pub mod plane;
