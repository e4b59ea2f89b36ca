//! `announcer cleanup`, the uninstall's last step: no XDP program attached to any interface
//! that had pins, no pin left, the state directory gone if asked, and a second run harmless.

use announcer::dataplane::sys::bpfobj;
use announcer_tests::{
    cli::Cli,
    netns::{NODE_IF, Pair, veth},
};

use crate::upgrade::xdp_on;

#[test]
fn cleanup_detaches_every_interface_and_removes_every_pin() {
    let _ns = crate::shared(); // see main.rs
    let pair = Pair::new("cleanup");
    veth(&pair.node, "eth1", &pair.client, "eth1");
    let cli = Cli::new(&pair.node);
    cli.load(NODE_IF, "generic");
    cli.load("eth1", "native");
    cli.add_vip("10.77.0.100", NODE_IF, &["--permanent"]);
    assert_eq!(xdp_on(&pair.node, NODE_IF).0, "generic");
    assert_eq!(xdp_on(&pair.node, "eth1").0, "native");
    // Someone holding the link open (an agent not gone yet) must not keep it attached.
    let held = bpfobj::obj_get(&cli.root().join(NODE_IF).join("link")).expect("the link pin");
    let state = std::env::temp_dir().join(format!("ann-cleanup-state-{}", std::process::id()));
    std::fs::create_dir_all(state.join("sub")).unwrap();
    std::fs::write(state.join("sub/node-a"), b"x").unwrap();

    let out = cli.ok(&["cleanup", "--state-dir", state.to_str().unwrap()]);
    assert!(out.contains("detached the program"), "{out}");
    assert!(
        out.contains(&format!("removed {}", cli.root().display())),
        "{out}"
    );
    for iface in [NODE_IF, "eth1"] {
        assert_eq!(xdp_on(&pair.node, iface).0, "none", "XDP left on {iface}");
    }
    assert!(
        !cli.root().exists(),
        "pins left under {}",
        cli.root().display()
    );
    assert!(!state.exists(), "state directory left");
    drop(held);

    let again = cli.output(&["cleanup", "--state-dir", state.to_str().unwrap()]);
    assert!(again.status.success(), "{again:?}");
    assert!(
        String::from_utf8_lossy(&again.stdout).contains("nothing to remove"),
        "{again:?}"
    );
}
