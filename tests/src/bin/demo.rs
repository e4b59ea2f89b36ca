//! `cargo xtask demo`: the XDP responder answering ARP and NDP for VIPs between two network
//! namespaces, shown step by step with the tools an operator would use. Everything it creates
//! (namespaces, veths, pins) is removed at the end, also on failure or Ctrl-C.
//!
//! (The failover demo with several nodes arrives with the control plane and the testbed.)

use std::{
    net::{Ipv4Addr, Ipv6Addr},
    process::Command,
    time::Duration,
};

use announcer_tests::{
    cli::Cli,
    netns::{CLIENT_IF, NODE_IF, NODE_MAC, Pair, fmt_mac, require_root},
    tools::{arping, capture, ndisc6, neigh_flush},
};

const VIP4: Ipv4Addr = Ipv4Addr::new(10, 77, 0, 100);
const VIP6: Ipv6Addr = Ipv6Addr::new(0xfd77, 0, 0, 0, 0, 0, 0, 0x100);
const T: Duration = Duration::from_millis(500);

fn step(n: u32, total: u32, what: &str) {
    println!("\n\x1b[1m[{n}/{total}] {what}\x1b[0m");
}

fn show(out: &str) {
    for l in out.lines() {
        println!("    {l}");
    }
}

fn main() {
    require_root();
    // Ctrl-C: unwind through the guards instead of dying with namespaces left behind.
    ctrlc_unwind();
    let total = 7;
    step(
        1,
        total,
        "two network namespaces joined by a veth: a node (10.77.0.1, fd77::1) and a client",
    );
    let pair = Pair::new("demo");
    println!("    node   {} eth0 {}", pair.node.name(), fmt_mac(NODE_MAC));
    println!("    client {} eth0", pair.client.name());

    step(
        2,
        total,
        "load the XDP responder on the node's eth0 (pinned: it outlives this command)",
    );
    let cli = Cli::new(&pair.node);
    show(&cli.ok(&["load", "--iface", NODE_IF]));
    // A veth delivers native-mode XDP_TX frames only if its peer runs XDP too; the responder
    // with no VIPs passes everything, so it serves as that on the client end.
    let peer = Cli::new(&pair.client);
    peer.ok(&["load", "--iface", CLIENT_IF]);
    println!(
        "    (and on the client's end of the veth, with no VIPs: veth needs XDP on both ends for native XDP_TX)"
    );

    step(
        3,
        total,
        "the node takes over two VIPs: one map write each, then the announcement burst",
    );
    let capture = capture(&pair.client, CLIENT_IF, 3, "arp or icmp6");
    for vip in [VIP4.to_string(), VIP6.to_string()] {
        show(&cli.add_vip(
            &vip,
            NODE_IF,
            &["--permanent", "--announce", "--count", "1"],
        ));
    }
    let seen = capture.finish();
    println!("    the client saw (tcpdump):");
    show(&seen);

    step(
        4,
        total,
        "the client resolves the VIPs: answered by XDP, the kernel never sees the requests",
    );
    neigh_flush(&pair.client, CLIENT_IF);
    let r = arping(&pair.client, CLIENT_IF, VIP4, 3, T);
    println!(
        "    arping {VIP4}: {} of 3 answered, by {:?}",
        r.replies,
        r.unique_macs().into_iter().map(fmt_mac).collect::<Vec<_>>()
    );
    let m = ndisc6(&pair.client, VIP6, CLIENT_IF, T);
    println!(
        "    ndisc6 {VIP6}: {}",
        m.map(fmt_mac).unwrap_or_else(|| "no answer".into())
    );

    step(
        5,
        total,
        "what the node shows: announcer status, and bpftool on the pinned map",
    );
    show(&cli.ok(&["status"]));
    let dump = Command::new("bpftool")
        .args(["map", "dump", "pinned"])
        .arg(cli.root().join(NODE_IF).join("VIPS_V4"))
        .output()
        .map(|o| String::from_utf8_lossy(&o.stdout).into_owned())
        .unwrap_or_else(|e| format!("(bpftool: {e})"));
    println!(
        "    $ bpftool map dump pinned {}/eth0/VIPS_V4",
        cli.root().display()
    );
    show(&dump);

    step(
        6,
        total,
        "the node lets go of the IPv4 VIP: answers stop at once",
    );
    show(&cli.ok(&["vip", "del", &VIP4.to_string(), "--iface", NODE_IF]));
    neigh_flush(&pair.client, CLIENT_IF);
    let r = arping(&pair.client, CLIENT_IF, VIP4, 2, T);
    println!("    arping {VIP4}: {} of 2 answered", r.replies);

    step(
        7,
        total,
        "clean up: unload (detaches, removes exactly its pins), delete the namespaces",
    );
    show(&cli.ok(&["unload", "--iface", NODE_IF]));
    drop(cli);
    drop(peer);
    drop(pair);
    println!("\ndone: no namespace, link or pin is left behind.");
}

/// Turns SIGINT/SIGTERM into a panic on the main thread's next check, so guards run. A simple
/// flag is enough here: every step is short.
fn ctrlc_unwind() {
    use nix::sys::signal::{SaFlags, SigAction, SigHandler, SigSet, Signal, sigaction};
    extern "C" fn on_signal(_: i32) {
        // Namespaces are deleted by the harness's sweep of dead processes' namespaces on the next
        // run; here, remove ours right away through `ip netns` before exiting.
        let pid = std::process::id();
        let _ = Command::new("sh")
            .arg("-c")
            .arg(format!("for n in $(ip netns list | awk '{{print $1}}' | grep -- '-{pid}-'); do ip netns del $n; done; rm -rf /sys/fs/bpf/anntest-{pid}-*"))
            .status();
        std::process::exit(130);
    }
    let act = SigAction::new(
        SigHandler::Handler(on_signal),
        SaFlags::empty(),
        SigSet::empty(),
    );
    // SAFETY: installing a handler; it only spawns a cleanup command and exits.
    unsafe {
        let _ = sigaction(Signal::SIGINT, &act);
        let _ = sigaction(Signal::SIGTERM, &act);
    }
}
