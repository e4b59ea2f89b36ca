//! `announcer withdrawer` (fast endpoint withdrawal, issue 28) as a process against the
//! in-repo API server: synthetic agent Leases carrying `announcer.dev/unreachable` reports,
//! kubelet Leases, Nodes, an announced LoadBalancer Service, its Pods and EndpointSlices, and
//! what the controller does to the Pods' `Ready` condition ([`controller`]).
//!
//! The admission policy that confines the controller's account is tested on the real
//! kube-apiserver, in the deploy suite (`withdrawal_policy`).

mod controller;
mod real;
