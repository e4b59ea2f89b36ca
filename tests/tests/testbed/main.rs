//! End to end on the multi-node namespace testbed (real agents, real XDP data plane, in-repo
//! API server): as a user on the LAN sees it (`e2e`), and against a hostile or unusual LAN
//! (`adversary`). Needs root; never skips.

mod adversary;
mod e2e;
mod e2e_http;
mod install;
mod node_lifecycle;
mod peers;
mod placement;
mod uninstall;
mod withdrawal;
