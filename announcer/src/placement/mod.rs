//! Placement: which VIPs the cluster wants announced, and which nodes (and interfaces) may
//! announce each, as a pure function of the watched Services, EndpointSlices, Nodes and
//! `AddressPool`s.
//!
//! * [`eligibility`]: the rules, from the objects to the plan and the problems to report;
//! * [`planner`]: the same plan kept up to date one object at a time;
//! * [`refusal`]: the addresses an agent never announces, whatever a Service's status says
//!   (a node's own, link-local, multicast…, and the announcing link's network and broadcast);
//! * [`selector`]: label selectors in their string form (`--node-selector 'zone in (a,b)'`),
//!   which the rules and the configuration filter by.
//!
//! Why a layer of its own, with no I/O: every agent computes the same plan from the same
//! objects (the election core ranks candidates on it), and the rules are where an operator's
//! "why is my IP not answered?" ends up, so they are tested one by one without an API server.
//! The agent only feeds them its watch stores and acts on the result, as it does with the
//! allocation rules of [`crate::ipam`].

pub mod eligibility;
pub mod planner;
pub mod refusal;
pub mod selector;
