//! The CLI's surface without privileges: help, and argument errors with their exit codes.
//! (Everything that touches the kernel is in `tests/tests/kernel/e2e_responder.rs`.)

use std::process::Command;

fn announcer(args: &[&str]) -> std::process::Output {
    Command::new(env!("CARGO_BIN_EXE_announcer"))
        .args(args)
        .output()
        .expect("run announcer")
}

#[test]
fn help_lists_every_command() {
    let o = announcer(&["--help"]);
    assert!(o.status.success());
    let help = String::from_utf8_lossy(&o.stdout);
    for cmd in ["load", "unload", "vip", "announce", "status"] {
        assert!(help.contains(cmd), "{cmd} missing from:\n{help}");
    }
    let o = announcer(&["vip", "--help"]);
    let help = String::from_utf8_lossy(&o.stdout);
    for cmd in ["add", "del", "list"] {
        assert!(help.contains(cmd), "{cmd} missing from:\n{help}");
    }
}

#[test]
fn malformed_addresses_and_macs_are_usage_errors() {
    for args in [
        &["vip", "add", "10.0.0.300", "--iface", "lo"][..],
        &[
            "vip",
            "add",
            "10.0.0.5",
            "--iface",
            "lo",
            "--mac",
            "02:00:00:00:00",
        ],
        &["vip", "add", "10.0.0.5", "--iface", "lo", "--ttl", "soon"],
        &["load", "--iface", "lo", "--mode", "fastest"],
    ] {
        let o = announcer(args);
        assert_eq!(o.status.code(), Some(2), "{args:?}");
        assert!(
            String::from_utf8_lossy(&o.stderr).contains("invalid value"),
            "{args:?}"
        );
    }
}
