//! `announcer-tests`: the worlds the announcer is tested and measured in, and the tools to
//! drive and observe them. The test binaries are in `tests/tests/` (kernel, agent, testbed,
//! sim, deploy); the benchmarks, the demo and the soak run are in `src/bin/`.
//!
//! The modules, bottom up; each names only modules of the layers below its own (the layering
//! check in `xtask` holds them to it):
//!
//! * Building blocks: [`programs`] (where the programs the tests run are), [`netns`]
//!   (namespaces, veth pairs, bridges and the cleanup rules every world relies on), [`tools`]
//!   (`arping`, `ndisc6`, `ip neigh`, `tcpdump` inside a namespace), [`cli`] (the real
//!   `announcer` binary inside a namespace), [`frames`] (requests as clients send them),
//!   [`model`] (a reference model of the responder), [`testrun`] (`BPF_PROG_TEST_RUN`).
//! * [`apiserver`]: an in-process stand-in for kube-apiserver.
//! * Test worlds, in [`env`](mod@env): [`env::node`] (one node with the API server in its
//!   namespace), [`env::cluster`] (the API server plus agent processes, no data plane),
//!   [`env::lan`] (a multi-node LAN on a bridge with the real XDP data plane), [`env::kube`] (a
//!   real control plane).
//! * On top of the worlds: [`sim`] (the election core in a discrete-event simulator),
//!   [`plot`] (what the pictures share, and the demo's failover timeline), [`bench`](mod@bench) (the XDP,
//!   control-plane and failover benchmarks, their reports and plots).

pub mod apiserver;
pub mod bench;
pub mod cli;
pub mod env;
pub mod frames;
pub mod model;
pub mod netns;
pub mod plot;
pub mod programs;
pub mod sim;
pub mod testrun;
pub mod tools;

/// A test that runs on both API servers: `on_both_api_servers! { async fn NAME(api) { .. } }`
/// defines module `NAME` with the tests `NAME::in_repo` and `NAME::kube`, each running the
/// body with `api` set to [`env::ApiKind::InRepo`] or [`env::ApiKind::Kube`]. Doc comments
/// and attributes go on the module. Filter with `::kube` / `::in_repo`.
///
/// Why a module per test: the test keeps its name (the behaviour), and the server it ran on
/// is the last path segment, so a failure says which one differed.
#[macro_export]
macro_rules! on_both_api_servers {
    ($(#[$meta:meta])* async fn $name:ident($api:ident) $body:block) => {
        $(#[$meta])*
        mod $name {
            #[allow(unused_imports)]
            use super::*;

            async fn body($api: $crate::env::ApiKind) $body

            #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
            async fn in_repo() {
                body($crate::env::ApiKind::InRepo).await
            }

            #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
            async fn kube() {
                body($crate::env::ApiKind::Kube).await
            }
        }
    };
}
