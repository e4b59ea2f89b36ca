//! Agent tests: real `announcer agent` processes against the in-repo API server (election,
//! eligibility, lifecycle, outages, per-service leases, metrics), with the real data plane on
//! a node namespace (`dataplane`, `status`), the heartbeat socket, and the API server itself.
//! Needs root for the namespace tests; never skips.
//!
//! One binary so that kube, axum and aya are linked once, not once per file. Each test builds
//! its own world (own namespaces, API server on an ephemeral port), so they run in parallel.

mod allocator_batch;
mod announced;
mod apiserver;
mod dataplane;
mod dataplane_down;
mod defaults;
mod election;
mod eligibility;
mod heartbeat;
mod ipam;
mod kube_faults;
mod lifecycle;
mod metrics;
mod mld;
mod outage;
mod pending;
mod per_service;
mod preferred;
mod refresh;
mod status;
mod status_cluster;
mod unreachable;
mod upgrade;
mod world;
