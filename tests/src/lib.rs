//! The testbed: network namespaces and the tools that talk across them, request frames, a
//! reference model of the responder, and a harness that runs the real program with
//! `BPF_PROG_TEST_RUN`.

pub mod apiserver;
pub mod bench;
pub mod cli;
pub mod cluster;
pub mod frames;
pub mod model;
pub mod netns;
pub mod node_api;
pub mod sim;
pub mod testbed;
pub mod testrun;
pub mod timeline_plot;
pub mod tools;
