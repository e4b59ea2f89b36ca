//! The Kubernetes agent: the thin tokio shell around [`crate::election::Core`] (being written).
