//! Golden tests of the configuration file: every fixture the tests accept parses to exactly
//! this `ConfigFile`, and every fixture they reject fails with exactly this text.
//!
//! Why: the YAML library underneath can change (these were written against serde_yaml before
//! the move to serde-saphyr) and must not read a key differently or word an error differently
//! where the wording is ours or serde's. Where the library's own text is embedded (a node of
//! the wrong shape, and the syntax errors at the end), only that inner text differs: each such
//! entry notes serde_yaml's text above it.

use super::{ConfigFile, tests::EVERY_KEY};

/// Accepted: (file, `{:?}` of what it parses to).
const ACCEPTED: &[(&str, &str)] = &[
    (
        include_str!("../../../../../deploy/config.yaml"),
        "ConfigFile { load_balancer_class: Some(\"announcer.dev/l2\"), class_only: Some(false), force_classless: Some(false), allocator: None, service_selector: Some(Selector(\"\")), node_selector: Some(Selector(\"\")), ignore_exclude_label: Some(false), interfaces: Some([]), ipv4: Some(true), ipv6: Some(true), election: Some(NodeLease), heartbeat: Some(HeartbeatSection { interval: Some(Dur(75ms)), misses: Some(3), port: Some(9747) }), lease: Some(LeaseSection { duration: Some(Dur(10s)), renew: Some(Dur(3s)) }), service_lease: Some(ServiceLeaseSection { duration: Some(Dur(15s)), renew_deadline: Some(Dur(5s)), retry: Some(Dur(2s)) }), announcement: Some(AnnouncementSection { count: Some(3), interval: Some(Dur(1s)), refresh_interval: None, rate: Some(1000) }), grace: Some(Dur(5s)), probe_timeout: Some(Dur(75ms)), warmup: Some(Dur(500ms)), handover_timeout: Some(Dur(2s)), xdp_mode: Some(Auto), state_dir: None, announce_outside_pools: Some(false) }",
    ),
    (
        EVERY_KEY,
        "ConfigFile { load_balancer_class: Some(\"example.com/l2\"), class_only: None, force_classless: Some(true), allocator: None, service_selector: Some(Selector(\"l2=true,tier in (web)\")), node_selector: Some(Selector(\"!node-role.kubernetes.io/control-plane\")), ignore_exclude_label: Some(true), interfaces: Some([InterfacePattern(\"eth1\"), InterfacePattern(\"bond*\"), InterfacePattern(\"eth0.100\")]), ipv4: Some(true), ipv6: Some(false), election: Some(LeasePerService), heartbeat: Some(HeartbeatSection { interval: Some(Dur(50ms)), misses: Some(4), port: Some(7000) }), lease: Some(LeaseSection { duration: Some(Dur(20s)), renew: Some(Dur(5s)) }), service_lease: Some(ServiceLeaseSection { duration: Some(Dur(10s)), renew_deadline: Some(Dur(4s)), retry: Some(Dur(1s)) }), announcement: Some(AnnouncementSection { count: Some(2), interval: Some(Dur(1.5s)), refresh_interval: Some(Dur(30s)), rate: Some(250) }), grace: Some(Dur(8s)), probe_timeout: Some(Dur(150ms)), warmup: Some(Dur(1s)), handover_timeout: Some(Dur(3s)), xdp_mode: Some(Generic), state_dir: Some(StateDirPath(\"/var/lib/announcer-test\")), announce_outside_pools: Some(true) }",
    ),
    (
        "",
        "ConfigFile { load_balancer_class: None, class_only: None, force_classless: None, allocator: None, service_selector: None, node_selector: None, ignore_exclude_label: None, interfaces: None, ipv4: None, ipv6: None, election: None, heartbeat: None, lease: None, service_lease: None, announcement: None, grace: None, probe_timeout: None, warmup: None, handover_timeout: None, xdp_mode: None, state_dir: None, announce_outside_pools: None }",
    ),
    (
        "# nothing set\n",
        "ConfigFile { load_balancer_class: None, class_only: None, force_classless: None, allocator: None, service_selector: None, node_selector: None, ignore_exclude_label: None, interfaces: None, ipv4: None, ipv6: None, election: None, heartbeat: None, lease: None, service_lease: None, announcement: None, grace: None, probe_timeout: None, warmup: None, handover_timeout: None, xdp_mode: None, state_dir: None, announce_outside_pools: None }",
    ),
    (
        "heartbeat: {interval: 50ms, misses: 4}\nipv6: false\ninterfaces: [eth1]\n",
        "ConfigFile { load_balancer_class: None, class_only: None, force_classless: None, allocator: None, service_selector: None, node_selector: None, ignore_exclude_label: None, interfaces: Some([InterfacePattern(\"eth1\")]), ipv4: None, ipv6: Some(false), election: None, heartbeat: Some(HeartbeatSection { interval: Some(Dur(50ms)), misses: Some(4), port: None }), lease: None, service_lease: None, announcement: None, grace: None, probe_timeout: None, warmup: None, handover_timeout: None, xdp_mode: None, state_dir: None, announce_outside_pools: None }",
    ),
    (
        "lease: {duration: 3s, renew: 3s}\n",
        "ConfigFile { load_balancer_class: None, class_only: None, force_classless: None, allocator: None, service_selector: None, node_selector: None, ignore_exclude_label: None, interfaces: None, ipv4: None, ipv6: None, election: None, heartbeat: None, lease: Some(LeaseSection { duration: Some(Dur(3s)), renew: Some(Dur(3s)) }), service_lease: None, announcement: None, grace: None, probe_timeout: None, warmup: None, handover_timeout: None, xdp_mode: None, state_dir: None, announce_outside_pools: None }",
    ),
    (
        "ipv4: false\nipv6: false\n",
        "ConfigFile { load_balancer_class: None, class_only: None, force_classless: None, allocator: None, service_selector: None, node_selector: None, ignore_exclude_label: None, interfaces: None, ipv4: Some(false), ipv6: Some(false), election: None, heartbeat: None, lease: None, service_lease: None, announcement: None, grace: None, probe_timeout: None, warmup: None, handover_timeout: None, xdp_mode: None, state_dir: None, announce_outside_pools: None }",
    ),
    (
        "classOnly: true\nallocator: {enabled: false, classless: true}\n",
        "ConfigFile { load_balancer_class: None, class_only: Some(true), force_classless: None, allocator: Some(AllocatorSection { enabled: Some(false), classless: Some(true) }), service_selector: None, node_selector: None, ignore_exclude_label: None, interfaces: None, ipv4: None, ipv6: None, election: None, heartbeat: None, lease: None, service_lease: None, announcement: None, grace: None, probe_timeout: None, warmup: None, handover_timeout: None, xdp_mode: None, state_dir: None, announce_outside_pools: None }",
    ),
    (
        "serviceSelector: ''\nnodeSelector: \"\"\ninterfaces: []\n",
        "ConfigFile { load_balancer_class: None, class_only: None, force_classless: None, allocator: None, service_selector: Some(Selector(\"\")), node_selector: Some(Selector(\"\")), ignore_exclude_label: None, interfaces: Some([]), ipv4: None, ipv6: None, election: None, heartbeat: None, lease: None, service_lease: None, announcement: None, grace: None, probe_timeout: None, warmup: None, handover_timeout: None, xdp_mode: None, state_dir: None, announce_outside_pools: None }",
    ),
];

/// Rejected: (file, the error's text).
const REJECTED: &[(&str, &str)] = &[
    (
        "stateDir: var/lib/announcer\n",
        "stateDir: invalid state directory \"var/lib/announcer\": not an absolute path at line 1 column 11",
    ),
    (
        "heartbeat:\n  interval: 100ms\n  secret: announcer-heartbeat-key\n",
        "heartbeat.secret: this key was removed: heartbeats are no longer authenticated with a shared Secret but with per-node keys (each agent keeps its own key pair in its state directory, see stateDir, and publishes the public key in its node Lease); delete the key at line 3 column 3",
    ),
    (
        "heartbeat: {secret: null}\n",
        "heartbeat.secret: this key was removed: heartbeats are no longer authenticated with a shared Secret but with per-node keys (each agent keeps its own key pair in its state directory, see stateDir, and publishes the public key in its node Lease); delete the key at line 1 column 13",
    ),
    (
        "heartbeat: {secret: {name: k}}\n",
        "heartbeat.secret: this key was removed: heartbeats are no longer authenticated with a shared Secret but with per-node keys (each agent keeps its own key pair in its state directory, see stateDir, and publishes the public key in its node Lease); delete the key at line 1 column 13",
    ),
    (
        "heartbeat: {secret: [k]}\n",
        "heartbeat.secret: this key was removed: heartbeats are no longer authenticated with a shared Secret but with per-node keys (each agent keeps its own key pair in its state directory, see stateDir, and publishes the public key in its node Lease); delete the key at line 1 column 13",
    ),
    (
        "heartbeat: {secret: 42}\n",
        "heartbeat.secret: this key was removed: heartbeats are no longer authenticated with a shared Secret but with per-node keys (each agent keeps its own key pair in its state directory, see stateDir, and publishes the public key in its node Lease); delete the key at line 1 column 13",
    ),
    (
        "heartbeat: {mises: 3}\n",
        "heartbeat: unknown field `mises`, expected one of `interval`, `misses`, `port` at line 1 column 13",
    ),
    (
        "heartbeat:\n  interval: 100ms\n  mises: 3\n",
        "heartbeat: unknown field `mises`, expected one of `interval`, `misses`, `port` at line 3 column 3",
    ),
    (
        "loadBalancerclass: x\n",
        "unknown field `loadBalancerclass`, expected one of `loadBalancerClass`, `classOnly`, `forceClassless`, `allocator`, `serviceSelector`, `nodeSelector`, `ignoreExcludeLabel`, `interfaces`, `ipv4`, `ipv6`, `election`, `heartbeat`, `lease`, `serviceLease`, `announcement`, `grace`, `probeTimeout`, `warmup`, `handoverTimeout`, `xdpMode`, `stateDir`, `announceOutsidePools`",
    ),
    (
        "grace: 5s\nheartbeat:\n  interval: 100\n",
        "heartbeat.interval: invalid duration \"100\": time unit needed, for example 100sec or 100ms at line 3 column 13",
    ),
    (
        "lease:\n  renew: 3 seconds please\n",
        "lease.renew: invalid duration \"3 seconds please\": expected number at 10 at line 2 column 10",
    ),
    (
        "serviceSelector: \"tier in (web\"\n",
        "serviceSelector: invalid label selector \"tier in (web\": unbalanced parentheses in selector \"tier in (web\" at line 1 column 18",
    ),
    (
        "interfaces: [eth0, \"eth 1\"]\n",
        "interfaces[1]: invalid interface pattern \"eth 1\": interface names contain no whitespace, '/' or ':' at line 1 column 20",
    ),
    (
        "interfaces: [\"^eth[0-9]+$\"]\n",
        "interfaces[0]: invalid interface pattern \"^eth[0-9]+$\": patterns are globs like eth* (only * is special), not regexes at line 1 column 14",
    ),
    (
        "election: leader\n",
        "election: unknown variant `leader`, expected `node-lease` or `lease-per-service` at line 1 column 11",
    ),
    (
        "xdpMode: driver\n",
        "xdpMode: unknown variant `driver`, expected one of `auto`, `native`, `generic` at line 1 column 10",
    ),
    (
        "announcement: {count: -1}\n",
        "announcement.count: invalid type: integer `-1`, expected u32 at line 1 column 23",
    ),
    (
        "ipv4: maybe\n",
        "ipv4: invalid type: string \"maybe\", expected a boolean at line 1 column 7",
    ),
    (
        "heartbeat: [1, 2]\n",
        // serde_yaml: "heartbeat: invalid type: sequence, expected struct HeartbeatSection at line 1 column 12"
        "heartbeat: expected mapping start at line 1 column 12",
    ),
    (
        "[1, 2]\n",
        // serde_yaml: "invalid type: sequence, expected struct ConfigFile"
        "expected mapping start",
    ),
    (
        "heartbeat: {interval: 50ms\n",
        // serde_yaml: "did not find expected ',' or '}' at line 2 column 1, while parsing a flow mapping at line 1 column 12"
        "unclosed bracket '{' at line 1 column 12",
    ),
    (
        "grace: 'x\n",
        // serde_yaml: "found unexpected end of stream at line 2 column 1, while scanning a quoted scalar at line 1 column 8"
        "unclosed quote at line 1 column 8",
    ),
    (
        "heartbeat:\n\tinterval: 50ms\n",
        // serde_yaml: "found character that cannot start any token at line 2 column 1, while scanning for the next token"
        "tabs disallowed within this context (block indentation) at line 2 column 2",
    ),
];

#[test]
fn accepted_fixtures_parse_to_the_same_configuration() {
    for (text, want) in ACCEPTED {
        let got = ConfigFile::parse(text).unwrap_or_else(|e| panic!("{text:?}: {e}"));
        assert_eq!(format!("{got:?}"), *want, "{text:?}");
    }
}

#[test]
fn rejected_fixtures_fail_with_the_same_text() {
    let differ: Vec<String> = REJECTED
        .iter()
        .filter_map(|(text, want)| {
            let got = ConfigFile::parse(text).expect_err(text).to_string();
            (got != *want).then(|| format!("{text:?}\n  want {want:?}\n  got  {got:?}"))
        })
        .collect();
    assert!(differ.is_empty(), "{}", differ.join("\n"));
}
