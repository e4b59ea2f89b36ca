//! Address management: the `AddressPool` resource (`announcer.dev/v1alpha1`), the address
//! ranges it holds, and the pure allocation rules the agent's allocator applies to Services.
//!
//! Why a layer of its own, with no I/O: the allocator is one active process in the cluster,
//! but its decisions must be reproducible from the objects alone, because its state lives in
//! the Services' `status.loadBalancer.ingress`, not in its memory: a new allocator, after a
//! failover or a restart, reads the same objects and must reach the same assignments without
//! reshuffling. Keeping the rules a function of the objects makes that testable without an API
//! server. The agent's election (which node announces) reads the same pools for placement
//! (`nodeSelector`, `interfaces`), and the CLI's `migrate metallb` writes them.

pub mod alloc;
pub mod pool;
pub mod range;

pub use alloc::{
    Allocation, AllocationScope, Assignment, OtherNamespaces, PoolReport, Problem, Reason,
    ServiceKey, plan, pool_status,
};
pub use pool::{
    ADDRESS_POOL_ANNOTATION, ALLOW_SHARED_IP_ANNOTATION, ALLOW_SHARED_IP_NAMESPACES_ANNOTATION,
    AddressPool, AddressPoolSpec, AddressPoolStatus, LOAD_BALANCER_IPS_ANNOTATION,
};
pub use range::{Family, Range, RangeError};
