//! The refusal rules, as tables of addresses and verdicts (IPv4 and IPv6).

use k8s_openapi::{
    api::core::v1::{NodeAddress, NodeStatus},
    apimachinery::pkg::apis::meta::v1::ObjectMeta,
};

use super::*;

fn ip(s: &str) -> IpAddr {
    s.parse().expect("an address")
}

#[test]
fn addresses_that_are_never_a_services_are_refused_by_scope() {
    let table: &[(&str, Option<&str>)] = &[
        ("10.0.0.5", None),
        ("192.168.1.1", None),
        ("203.0.113.7", None),
        ("0.0.0.0", Some("unspecified")),
        ("127.0.0.1", Some("loopback")),
        ("127.255.0.9", Some("loopback")),
        ("224.0.0.1", Some("multicast")),
        ("239.255.255.250", Some("multicast")),
        ("255.255.255.255", Some("broadcast")),
        ("169.254.0.1", Some("link_local")),
        ("169.254.169.254", Some("link_local")),
        ("2001:db8::5", None),
        ("fd00::5", None),
        ("::", Some("unspecified")),
        ("::1", Some("loopback")),
        ("ff02::1", Some("multicast")),
        ("ff05::1:3", Some("multicast")),
        ("fe80::1", Some("link_local")),
        ("febf::1", Some("link_local")),
        ("fec0::1", None),
    ];
    for (addr, want) in table {
        assert_eq!(
            Refusal::of_address(ip(addr)).as_ref().map(Refusal::label),
            *want,
            "{addr}"
        );
    }
}

#[test]
fn the_network_and_broadcast_addresses_of_the_announcing_link_are_refused() {
    let link = [
        (ip("10.0.0.7"), 24),
        (ip("192.168.9.1"), 31),
        (ip("10.9.9.9"), 32),
        (ip("fd00::7"), 64),
        (ip("fe80::1"), 64),
    ];
    let table: &[(&str, Option<&str>)] = &[
        ("10.0.0.0", Some("network")),
        ("10.0.0.255", Some("broadcast")),
        ("10.0.0.1", None),
        ("10.0.0.254", None),
        ("10.0.1.0", None),
        // A /31 (point-to-point) and a /32 have neither.
        ("192.168.9.0", None),
        ("10.9.9.9", None),
        ("fd00::", Some("network")),
        ("fd00::ffff:ffff:ffff:ffff", None),
        ("fd00::5", None),
        ("fd00:0:0:1::", None),
    ];
    for (addr, want) in table {
        let got = match Refusal::on_link(ip(addr), &link) {
            None => None,
            Some(Refusal::LinkNetwork(..)) => Some("network"),
            Some(Refusal::LinkBroadcast(..)) => Some("broadcast"),
            Some(other) => panic!("{addr}: {other:?}"),
        };
        assert_eq!(got, *want, "{addr}");
    }
}

#[test]
fn node_addresses_are_internal_and_external_ips_of_every_node() {
    let node = |name: &str, addrs: &[(&str, &str)]| Node {
        metadata: ObjectMeta {
            name: Some(name.into()),
            ..Default::default()
        },
        status: Some(NodeStatus {
            addresses: Some(
                addrs
                    .iter()
                    .map(|(t, a)| NodeAddress {
                        type_: t.to_string(),
                        address: a.to_string(),
                    })
                    .collect(),
            ),
            ..Default::default()
        }),
        ..Default::default()
    };
    let nodes = [
        node(
            "b",
            &[
                ("InternalIP", "10.0.0.2"),
                ("InternalIP", "fd00::2"),
                ("ExternalIP", "203.0.113.2"),
                ("Hostname", "b"),
                ("InternalDNS", "b.example"),
            ],
        ),
        node(
            "a",
            &[("InternalIP", "10.0.0.1"), ("ExternalIP", "10.0.0.2")],
        ),
    ];
    let got: Vec<(String, String)> = node_addresses(&nodes)
        .into_iter()
        .map(|(ip, n)| (ip.to_string(), n.to_string()))
        .collect();
    let want: Vec<(String, String)> = [
        ("10.0.0.1", "a"),
        ("10.0.0.2", "a"),
        ("203.0.113.2", "b"),
        ("fd00::2", "b"),
    ]
    .iter()
    .map(|(i, n)| (i.to_string(), n.to_string()))
    .collect();
    assert_eq!(got, want);
}
