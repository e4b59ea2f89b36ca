//! A discrete-event simulator for the election core, in virtual time.
//!
//! Why: failover is the product, and its failure modes are races (a crash during a probe, a
//! restart just before the entries lapse, a partition that splits one VIP's candidates). A
//! deterministic world — N nodes each running the real sans-IO [`announcer::election::Core`]
//! behind a simulated shell, an API server, a lossy network with partitions, data planes whose
//! entries expire, and clients with neighbour caches — replays thousands of generated
//! schedules in seconds, checks what clients would see against invariants ([`check`]), and
//! replays any failure exactly from its seed.
//!
//! Use: [`run::run_seed`] runs one seed; [`report::Summary`] aggregates runs per scenario.

pub mod agent;
pub mod check;
pub mod naive;
pub mod queue;
pub mod report;
pub mod run;
pub mod scenario;
pub mod world;
