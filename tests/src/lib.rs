//! `announcer-tests`: the worlds the announcer is tested and measured in, and the tools to
//! drive and observe them. The test binaries are in `tests/tests/` (kernel, agent, testbed,
//! sim, deploy); the benchmarks, the demo and the soak run are in `src/bin/`.
//!
//! * Test worlds, in [`env`](mod@env): [`env::netns`] (namespaces and veth pairs), [`env::node`] (one
//!   node with the API server in its namespace), [`env::cluster`] (the API server plus agent
//!   processes, no data plane), [`env::lan`] (a multi-node LAN on a bridge with the real XDP
//!   data plane); [`sim`] (the election core in a discrete-event simulator) and [`apiserver`]
//!   (an in-process stand-in for kube-apiserver).
//! * The data plane in the kernel: [`testrun`] (`BPF_PROG_TEST_RUN`), [`frames`] (requests as
//!   clients send them), [`model`] (a reference model of the responder).
//! * Driving and observing: [`cli`] (the real `announcer` binary), [`tools`] (`arping`,
//!   `ndisc6`, `ip neigh`), [`timeline_plot`].
//! * [`bench`](mod@bench): the XDP, control-plane and failover benchmarks, their reports and plots.

pub mod apiserver;
pub mod bench;
pub mod cli;
pub mod env;
pub mod frames;
pub mod model;
pub mod sim;
pub mod testrun;
pub mod timeline_plot;
pub mod tools;
