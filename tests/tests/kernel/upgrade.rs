//! The running XDP program follows the binary: `load` (what the agent calls on start) swaps a
//! program whose tag differs in place, leaves an identical one alone, re-attaches in a changed
//! mode and migrates pinned maps of an older layout, keeping the VIP entries, while a client
//! keeps asking. The older program comes from `load --program-version N` (this build's object
//! with another version stamped in: another tag, as a newer or older build would have).

use std::{net::Ipv4Addr, os::fd::AsFd, thread, time::Duration};

use announcer::dataplane::{loader, pins, sys::bpfobj};
use announcer_ebpf::{
    maps::{LAYOUT, MAX_VIPS, VIPS_V4},
    version::MAP_LAYOUT_VERSION,
};
use announcer_tests::{
    cli::Cli,
    netns::{CLIENT_IF, NODE_IF, NODE_MAC, Netns, Pair},
    tools::{ArpingResult, arping},
};

const VIP4: Ipv4Addr = Ipv4Addr::new(10, 77, 0, 100);
const T: Duration = Duration::from_millis(600);

/// What `ip -d link show` says about XDP on `iface` ([`Netns::xdp_on`]).
pub(crate) fn xdp_on(ns: &Netns, iface: &str) -> (String, u32, String) {
    ns.xdp_on(iface)
}

/// `count` ARP requests for [`VIP4`] from the client over `over`, while `during` runs.
fn asking_while<R: Send>(
    pair: &Pair,
    count: u32,
    over: Duration,
    during: impl FnOnce() -> R + Send,
) -> (ArpingResult, R) {
    thread::scope(|s| {
        let probe = s.spawn(|| arping(&pair.client, CLIENT_IF, VIP4, count, over));
        thread::sleep(over / 4);
        let r = during();
        (probe.join().expect("arping"), r)
    })
}

#[test]
fn a_differing_program_is_swapped_in_place_keeping_the_entries_and_every_answer() {
    let _ns = crate::shared(); // see main.rs
    let pair = Pair::new("swap");
    let cli = Cli::new(&pair.node);
    cli.load_version(NODE_IF, "generic", 7);
    let (_, old_id, old_tag) = xdp_on(&pair.node, NODE_IF);
    cli.add_vip(VIP4, NODE_IF, &["--permanent"]);

    let (r, out) = asking_while(&pair, 80, Duration::from_millis(2000), || {
        cli.load(NODE_IF, "generic")
    });
    assert!(out.contains("replaced the program"), "{out}");
    assert_eq!(
        r.replies, 80,
        "a request went unanswered across the swap: {r:?}"
    );
    assert_eq!(r.unique_macs(), vec![NODE_MAC]);
    let (mode, id, tag) = xdp_on(&pair.node, NODE_IF);
    assert_eq!(mode, "generic");
    assert_ne!(id, old_id, "a new program runs");
    assert_ne!(tag, old_tag, "with another tag");
    // The entry written before the swap is still there and answered after it.
    let r = arping(&pair.client, CLIENT_IF, VIP4, 2, T);
    assert_eq!(r.unique_macs(), vec![NODE_MAC], "{r:?}");
}

#[test]
fn an_identical_program_is_left_running() {
    let _ns = crate::shared(); // see main.rs
    let pair = Pair::new("same");
    let cli = Cli::new(&pair.node);
    cli.load(NODE_IF, "generic");
    let before = xdp_on(&pair.node, NODE_IF);
    let out = cli.load(NODE_IF, "generic");
    assert!(out.contains("same program"), "{out}");
    assert_eq!(
        xdp_on(&pair.node, NODE_IF),
        before,
        "program id and tag unchanged"
    );
    let out = cli.ok(&["load", "--iface", NODE_IF]);
    assert!(
        out.contains("nothing changed"),
        "auto accepts the attached mode: {out}"
    );
    assert_eq!(xdp_on(&pair.node, NODE_IF), before);
}

/// Generic → native → generic while the client asks; prints the gap the loader measured and
/// the requests lost (a measurement, not a bound: timing targets live in benches).
#[test]
fn a_changed_mode_re_attaches_in_the_requested_mode() {
    let _ns = crate::shared(); // see main.rs
    let pair = Pair::new("mode");
    let cli = Cli::new(&pair.node);
    // veth delivers native-mode XDP_TX only if the peer runs XDP too (see e2e_responder.rs).
    let peer = Cli::new(&pair.client);
    peer.load(CLIENT_IF, "native");
    cli.load(NODE_IF, "generic");
    cli.add_vip(VIP4, NODE_IF, &["--permanent"]);
    for (to, from) in [("native", "generic"), ("generic", "native")] {
        let (r, out) = asking_while(&pair, 200, Duration::from_millis(2000), || {
            cli.load(NODE_IF, to)
        });
        assert!(out.contains(&format!("in {to} mode (was {from})")), "{out}");
        assert_eq!(xdp_on(&pair.node, NODE_IF).0, to);
        let gap = out
            .split("; ")
            .find(|p| p.ends_with("without XDP\n") || p.contains("ms without XDP"))
            .unwrap_or("?");
        println!(
            "mode change {from} -> {to}: {} | requests answered {}/200",
            gap.lines().next().unwrap_or(gap),
            r.replies
        );
    }
    let r = arping(&pair.client, CLIENT_IF, VIP4, 2, T);
    assert_eq!(
        r.unique_macs(),
        vec![NODE_MAC],
        "answered after the changes: {r:?}"
    );
}

/// An older build's pins: the program running on maps whose VIP map holds 1024 entries and
/// no `LAYOUT` pin (layout version 1), attached (generic) and pinned as the loader does.
fn pin_an_older_layout(ns: &Netns, cli: &Cli) {
    let dir = pins::PinLayout::new(cli.root(), NODE_IF);
    ns.enter(|| {
        std::fs::create_dir_all(dir.dir()).expect("pin dir");
        let mut loader = aya::EbpfLoader::new();
        let paths: Vec<_> = pins::DATA_MAPS.iter().map(|m| (*m, dir.map(m))).collect();
        for (m, p) in &paths {
            loader.map_pin_path(m, p.as_path());
        }
        loader.map_max_entries(VIPS_V4, 1024);
        let mut ebpf = loader.load(loader::OBJECT).expect("load the object");
        let prog: &mut aya::programs::Xdp = ebpf
            .program_mut(announcer_ebpf::maps::PROGRAM)
            .unwrap()
            .try_into()
            .unwrap();
        prog.load().expect("verify");
        let id = prog
            .attach(NODE_IF, aya::programs::XdpMode::Skb)
            .expect("attach");
        let link = aya::programs::links::FdLink::try_from(prog.take_link(id).unwrap()).unwrap();
        link.pin(dir.link()).expect("pin the link");
    });
}

fn shape_of(ns: &Netns, path: std::path::PathBuf) -> bpfobj::MapShape {
    ns.enter(move || {
        let fd = bpfobj::obj_get(&path).expect("pinned");
        bpfobj::map_shape(fd.as_fd()).expect("shape")
    })
}

#[test]
fn a_map_of_an_older_layout_is_migrated_with_its_entries_while_answering() {
    let _ns = crate::shared(); // see main.rs
    let pair = Pair::new("layout");
    let cli = Cli::new(&pair.node);
    pin_an_older_layout(&pair.node, &cli);
    let dir = pins::PinLayout::new(cli.root(), NODE_IF);
    assert_eq!(shape_of(&pair.node, dir.map(VIPS_V4)).max_entries, 1024);
    assert!(!dir.map(LAYOUT).exists());
    cli.add_vip(VIP4, NODE_IF, &["--permanent"]);
    let (_, old_id, _) = xdp_on(&pair.node, NODE_IF);

    let (r, out) = asking_while(&pair, 80, Duration::from_millis(2000), || {
        cli.load(NODE_IF, "generic")
    });
    assert!(out.contains("migrated map VIPS_V4"), "{out}");
    assert!(out.contains("1 entries copied, 0 dropped"), "{out}");
    assert_eq!(
        r.replies, 80,
        "a request went unanswered across the migration: {r:?}"
    );
    assert_eq!(shape_of(&pair.node, dir.map(VIPS_V4)).max_entries, MAX_VIPS);
    assert_ne!(
        xdp_on(&pair.node, NODE_IF).1,
        old_id,
        "the program runs on the new maps"
    );
    // The layout version is pinned now; a second load finds nothing to do.
    let layout = dir.map(LAYOUT);
    let v = pair.node.enter(move || {
        let fd = bpfobj::obj_get(&layout).expect("LAYOUT pinned");
        let shape = bpfobj::map_shape(fd.as_fd()).unwrap();
        bpfobj::map_lookup(fd.as_fd(), &shape, &0u32.to_ne_bytes()).unwrap()
    });
    assert_eq!(v, Some(MAP_LAYOUT_VERSION.to_ne_bytes().to_vec()));
    assert!(cli.load(NODE_IF, "generic").contains("nothing changed"));
    // The copied entry is what answers.
    let r = arping(&pair.client, CLIENT_IF, VIP4, 2, T);
    assert_eq!(r.unique_macs(), vec![NODE_MAC], "{r:?}");
    assert!(
        !std::fs::read_dir(dir.dir())
            .unwrap()
            .any(|e| { e.unwrap().file_name().to_string_lossy().ends_with("-new") }),
        "no temporary pin left"
    );
}

/// What the agent's container may do (deploy/daemonset.yaml: no CAP_SYS_ADMIN, so no program
/// read by id): swap a differing program, through the program pin.
#[test]
fn a_differing_program_is_swapped_with_only_the_daemonsets_capabilities() {
    let _ns = crate::shared(); // see main.rs
    let pair = Pair::new("swapcaps");
    let cli = Cli::new(&pair.node);
    cli.load_version(NODE_IF, "generic", 7);
    let (_, old_id, old_tag) = xdp_on(&pair.node, NODE_IF);

    let out = cli.output_as_daemonset(&["load", "--iface", NODE_IF, "--mode", "generic"]);
    assert!(out.status.success(), "{out:?}");
    let (mode, new_id, new_tag) = xdp_on(&pair.node, NODE_IF);
    assert_eq!(mode, "generic");
    assert_ne!(new_id, old_id, "{out:?}");
    assert_ne!(new_tag, old_tag);
    // And the next start, as the same container, finds this build's program running.
    let again = cli.output_as_daemonset(&["load", "--iface", NODE_IF, "--mode", "generic"]);
    assert!(again.status.success(), "{again:?}");
    assert!(
        String::from_utf8_lossy(&again.stdout).contains("same program"),
        "{again:?}"
    );
    assert_eq!(xdp_on(&pair.node, NODE_IF).1, new_id);
}

/// Pins left by a build that did not pin the program: its tag cannot be read without
/// CAP_SYS_ADMIN, so the program is swapped (atomic), and pinned from then on.
#[test]
fn pins_without_the_program_pin_are_swapped_without_cap_sys_admin() {
    let _ns = crate::shared(); // see main.rs
    let pair = Pair::new("swapnopin");
    let cli = Cli::new(&pair.node);
    cli.load(NODE_IF, "generic");
    let (_, old_id, _) = xdp_on(&pair.node, NODE_IF);
    let prog = cli.root().join(NODE_IF).join("prog");
    std::fs::remove_file(&prog).expect("the program pin");

    let out = cli.output_as_daemonset(&["load", "--iface", NODE_IF, "--mode", "generic"]);
    assert!(out.status.success(), "{out:?}");
    assert!(
        String::from_utf8_lossy(&out.stdout).contains("was") && prog.exists(),
        "{out:?}"
    );
    assert_ne!(xdp_on(&pair.node, NODE_IF).1, old_id);
}
