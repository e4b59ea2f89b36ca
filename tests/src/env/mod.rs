//! The test worlds, one module per kind:
//!
//! * [`netns`]: network namespaces, veth pairs and the cleanup rules every world relies on.
//! * [`node`]: one node namespace with the API server inside it, for a single agent with the
//!   real data plane.
//! * [`cluster`]: the in-repo API server plus real `announcer agent` processes (no data plane
//!   by default).
//! * [`lan`]: a multi-node L2 segment on a bridge, with the real XDP data plane on every node
//!   (the `Testbed`).
//! * [`process`]: the one guard every world runs its processes under.

pub mod cluster;
pub mod lan;
pub mod netns;
pub mod node;
pub mod process;
