//! The election core in the discrete-event simulator (no root, no kernel).

mod election;
