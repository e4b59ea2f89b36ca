//! IPv6 VIPs where multicast filtering is real: behind a bridge doing MLD snooping (with a
//! querier, and no flooding of unregistered multicast to the node ports) and on a macvlan
//! port. A client's solicitation for a VIP goes to the VIP's solicited-node group, so it
//! reaches the XDP program only if the owner joined that group, which the agent's data plane
//! ([`Plane`]) does for each IPv6 VIP it installs, counted across VIPs sharing a group.
//!
//! The reproductions load the program and the VIP with the CLI, which joins nothing; the rest
//! drive [`Plane`] as the agent does.

use std::{net::Ipv6Addr, path::Path, time::Duration};

use announcer::{
    agent::net::plane::Plane,
    dataplane::{announce::BurstConfig, loader::Mode, mcast::solicited_node, pace::PaceConfig},
    election::IfaceName,
};
use announcer_tests::{
    cli::Cli,
    env::snooping::{MacvlanLan, OWNER_PORT, RxModes, SnoopingLan, maddr_groups, rx_modes},
    netns::{NODE_IF, NODE_MAC, NODE_V6, Netns},
};

use crate::shared;

/// Two VIPs with the same low 24 bits, so the same solicited-node group.
const VIP_A: Ipv6Addr = Ipv6Addr::new(0xfd77, 0, 0, 0, 0, 0, 0, 0x100);
const VIP_B: Ipv6Addr = Ipv6Addr::new(0xfd77, 0, 0, 0, 1, 0, 0, 0x100);
/// Long enough that no entry expires during a test.
const TTL: Duration = Duration::from_secs(600);
const NOT_PROMISC: RxModes = RxModes {
    promisc: false,
    allmulti: false,
};

fn iface() -> IfaceName {
    IfaceName::from(NODE_IF)
}

/// The agent's data plane for `owner`, pinned under `root` (the CLI's, which removes it).
fn plane(root: &Path) -> Plane {
    Plane::new(
        root.to_path_buf(),
        Mode::Generic,
        BurstConfig::default(),
        PaceConfig::default(),
        true,
    )
}

fn install(owner: &Netns, plane: &mut Plane, vip: Ipv6Addr) {
    owner.enter(|| plane.install(vip.into(), &iface(), TTL).expect("install"));
}

fn remove(owner: &Netns, plane: &mut Plane, vip: Ipv6Addr) {
    owner.enter(|| plane.remove(vip.into(), &iface()).expect("remove"));
}

fn group() -> Ipv6Addr {
    solicited_node(VIP_A)
}

#[test]
fn snooping_bridge_drops_the_ns_for_a_vip_whose_group_nobody_joined() {
    let _g = shared();
    let lan = SnoopingLan::new("mld-repro");
    let cli = Cli::new(&lan.owner);
    cli.load(NODE_IF, "generic");
    cli.add_vip(VIP_A, NODE_IF, &["--permanent"]);

    assert_eq!(lan.solicit(NODE_V6), Some(NODE_MAC), "own address answered");
    assert_eq!(
        lan.solicit(VIP_A),
        None,
        "the VIP's NS must not reach the owner: mdb ports for {}: {:?}",
        group(),
        lan.mdb_ports(group())
    );
}

#[test]
fn installed_ipv6_vip_is_answered_behind_a_snooping_bridge_through_its_group_alone() {
    let _g = shared();
    let lan = SnoopingLan::new("mld-join");
    let cli = Cli::new(&lan.owner);
    let mut plane = plane(cli.root());
    install(&lan.owner, &mut plane, VIP_A);

    assert_eq!(
        lan.solicit(VIP_A),
        Some(NODE_MAC),
        "mdb ports for {}: {:?}",
        group(),
        lan.mdb_ports(group())
    );
    assert_eq!(rx_modes(&lan.owner, NODE_IF), NOT_PROMISC);
    assert!(
        maddr_groups(&lan.owner, NODE_IF).contains(&group()),
        "ip maddr shows {}",
        group()
    );
    assert!(lan.mdb_ports(group()).iter().any(|p| p == OWNER_PORT));
}

#[test]
fn group_stays_joined_while_another_vip_of_it_is_installed() {
    let _g = shared();
    let lan = SnoopingLan::new("mld-ref");
    let cli = Cli::new(&lan.owner);
    let mut plane = plane(cli.root());
    install(&lan.owner, &mut plane, VIP_A);
    install(&lan.owner, &mut plane, VIP_B);
    remove(&lan.owner, &mut plane, VIP_A);

    assert!(maddr_groups(&lan.owner, NODE_IF).contains(&group()));
    assert_eq!(lan.solicit(VIP_B), Some(NODE_MAC));
}

#[test]
fn group_is_left_when_the_last_vip_of_it_is_removed() {
    let _g = shared();
    let lan = SnoopingLan::new("mld-leave");
    let cli = Cli::new(&lan.owner);
    let mut plane = plane(cli.root());
    install(&lan.owner, &mut plane, VIP_A);
    install(&lan.owner, &mut plane, VIP_B);
    assert!(maddr_groups(&lan.owner, NODE_IF).contains(&group()));
    remove(&lan.owner, &mut plane, VIP_A);
    remove(&lan.owner, &mut plane, VIP_B);

    assert!(
        !maddr_groups(&lan.owner, NODE_IF).contains(&group()),
        "{} still joined: {:?}",
        group(),
        maddr_groups(&lan.owner, NODE_IF)
    );
}

#[test]
fn restarted_plane_joins_again_for_the_entries_in_the_pinned_maps() {
    let _g = shared();
    let lan = SnoopingLan::new("mld-restart");
    let cli = Cli::new(&lan.owner);
    let mut first = plane(cli.root());
    install(&lan.owner, &mut first, VIP_A);
    // The agent exits within the grace: the entry stays pinned, the socket (and with it the
    // membership) goes.
    drop(first);
    assert!(!maddr_groups(&lan.owner, NODE_IF).contains(&group()));

    let mut second = plane(cli.root());
    let found = lan.owner.enter(|| second.existing(&[NODE_IF.to_owned()]));
    assert_eq!(found, vec![(VIP_A.into(), iface())]);
    assert!(maddr_groups(&lan.owner, NODE_IF).contains(&group()));
    assert_eq!(lan.solicit(VIP_A), Some(NODE_MAC));
}

#[test]
fn macvlan_drops_the_ns_for_a_vip_whose_group_it_was_not_given() {
    let _g = shared();
    let lan = MacvlanLan::new("mv-repro");
    let cli = Cli::new(&lan.owner);
    cli.load(NODE_IF, "generic");
    cli.add_vip(VIP_A, NODE_IF, &["--permanent"]);

    assert_eq!(lan.solicit(NODE_V6), Some(NODE_MAC), "own address answered");
    assert_eq!(lan.solicit(VIP_A), None);
}

#[test]
fn installed_ipv6_vip_is_answered_on_a_macvlan_port_through_its_group_alone() {
    let _g = shared();
    let lan = MacvlanLan::new("mv-join");
    let cli = Cli::new(&lan.owner);
    let mut plane = plane(cli.root());
    install(&lan.owner, &mut plane, VIP_A);

    assert_eq!(lan.solicit(VIP_A), Some(NODE_MAC));
    assert_eq!(rx_modes(&lan.owner, NODE_IF), NOT_PROMISC);
    assert!(maddr_groups(&lan.owner, NODE_IF).contains(&group()));
}
