//! `announcer load` on an interface where another XDP program is attached (a CNI's
//! acceleration): it names that program (id, name, mode) and the ways out, exits with
//! EX_UNAVAILABLE, and leaves the other program attached and answering for its owner.

use announcer_tests::{
    cli::{Cli, ForeignXdp},
    netns::{NODE_IF, Pair},
};

use crate::upgrade::xdp_on;

#[test]
fn load_onto_another_xdp_program_names_it_and_replaces_nothing() {
    let _ns = crate::shared(); // see main.rs
    let pair = Pair::new("foreign");
    let foreign = ForeignXdp::attach(&pair.node, NODE_IF);
    let id = foreign.id;
    let cli = Cli::new(&pair.node);
    for mode in ["generic", "native", "auto"] {
        let out = cli.output(&["load", "--iface", NODE_IF, "--mode", mode]);
        let stderr = String::from_utf8_lossy(&out.stderr);
        assert_eq!(out.status.code(), Some(69), "--mode {mode}: {out:?}");
        assert!(
            stderr.contains(&format!(
                "another XDP program is attached to {NODE_IF}: id {id}"
            )),
            "--mode {mode}: {stderr}"
        );
        assert!(stderr.contains("does not replace it"), "{stderr}");
        assert_eq!(
            xdp_on(&pair.node, NODE_IF).1,
            id,
            "--mode {mode} replaced the other program"
        );
    }
}
