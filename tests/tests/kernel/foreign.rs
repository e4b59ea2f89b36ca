//! `announcer load` on an interface where another XDP program is attached (a CNI's
//! acceleration): it names that program (id, name, mode) and the ways out, exits with
//! EX_UNAVAILABLE, and leaves the other program attached and answering for its owner.

use announcer::dataplane::loader::OBJECT;
use announcer_ebpf::maps::PROGRAM;
use announcer_tests::{
    cli::Cli,
    netns::{NODE_IF, Pair},
};
use aya::programs::{Xdp, XdpMode};

use crate::upgrade::xdp_on;

#[test]
fn load_onto_another_xdp_program_names_it_and_replaces_nothing() {
    let _ns = crate::shared(); // see main.rs
    let pair = Pair::new("foreign");
    // Another tool's program: the announcer's object, un-pinned, with maps of its own.
    let (_ebpf, id) = pair.node.enter(|| {
        let mut ebpf = aya::EbpfLoader::new()
            .load(OBJECT)
            .expect("load the object");
        let prog: &mut Xdp = ebpf
            .program_mut(PROGRAM)
            .expect("the program")
            .try_into()
            .expect("XDP");
        prog.load().expect("verify");
        let id = prog.info().expect("program info").id();
        prog.attach(NODE_IF, XdpMode::Skb)
            .expect("attach the foreign program");
        (ebpf, id)
    });
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
