use std::{io::Write, path::Path, time::Duration};

use clap::Parser;

use super::ConfigFile;
use crate::agent::config::{AgentArgs, Election, XdpMode};

/// `announcer agent` as main.rs embeds it.
#[derive(Parser)]
struct Cli {
    #[command(flatten)]
    agent: AgentArgs,
}

/// A temporary config file with `text`, removed on drop.
struct TempFile(std::path::PathBuf);

impl TempFile {
    fn new(text: &str) -> TempFile {
        let path = std::env::temp_dir().join(format!(
            "announcer-config-{}-{}.yaml",
            std::process::id(),
            rand::random::<u64>()
        ));
        let mut f = std::fs::File::create(&path).expect("create");
        f.write_all(text.as_bytes()).expect("write");
        TempFile(path)
    }
}

impl Drop for TempFile {
    fn drop(&mut self) {
        let _ = std::fs::remove_file(&self.0);
    }
}

fn parse(args: &[&str]) -> Result<AgentArgs, clap::Error> {
    let mut argv = vec!["agent", "--node-name", "n1"];
    argv.extend_from_slice(args);
    Cli::try_parse_from(argv).map(|c| c.agent)
}

fn err(text: &str) -> String {
    ConfigFile::parse(text)
        .expect_err("must be rejected")
        .to_string()
}

/// The file deploy/ ships is accepted and gives the defaults (it documents them).
#[test]
fn shipped_file_is_valid_and_states_the_defaults() {
    let shipped = include_str!("../../../../../deploy/config.yaml");
    let f = TempFile::new(shipped);
    let with = parse(&["--config", f.0.to_str().expect("utf-8")]).expect("shipped file");
    with.validate().expect("shipped file validates");
    let without = parse(&[]).expect("defaults");
    assert!(with.config.is_some());
    let mut a = with.0.clone();
    a.config = None;
    assert_eq!(format!("{a:?}"), format!("{:?}", without.0));
}

/// A file that sets every key but `classOnly` and `allocator` (also a golden fixture).
/// (`forceClassless` without `classOnly` is allowed: it matters only with `classOnly: false`.)
pub(super) const EVERY_KEY: &str = r#"
loadBalancerClass: example.com/l2
serviceSelector: "l2=true,tier in (web)"
nodeSelector: "!node-role.kubernetes.io/control-plane"
ignoreExcludeLabel: true
forceClassless: true
interfaces: [eth1, "bond*", eth0.100]
ipv4: true
ipv6: false
election: lease-per-service
heartbeat: {interval: 50ms, misses: 4, port: 7000}
lease: {duration: 20s, renew: 5s}
serviceLease: {duration: 10s, renewDeadline: 4s, retry: 1s}
announcement: {count: 2, interval: 1500ms, refreshInterval: 30s, rate: 250}
grace: 8s
probeTimeout: 150ms
warmup: 1s
handoverTimeout: 3s
xdpMode: generic
stateDir: /var/lib/announcer-test
announceOutsidePools: true
"#;

#[test]
fn every_key_is_applied() {
    let f = TempFile::new(EVERY_KEY);
    let a = parse(&["--config", f.0.to_str().expect("utf-8")]).expect("valid");
    a.validate().expect("consistent");
    assert_eq!(a.load_balancer_class, "example.com/l2");
    assert_eq!(a.service_selector.as_deref(), Some("l2=true,tier in (web)"));
    assert_eq!(
        a.node_selector.as_deref(),
        Some("!node-role.kubernetes.io/control-plane")
    );
    assert_eq!(a.interfaces, ["eth1", "bond*", "eth0.100"]);
    assert!(!a.no_ipv4 && a.no_ipv6);
    assert_eq!(a.election, Election::LeasePerService);
    assert_eq!(a.heartbeat_interval, Duration::from_millis(50));
    assert_eq!(a.heartbeat_misses, 4);
    assert_eq!(a.heartbeat_port, 7000);
    assert_eq!(a.lease_duration, Duration::from_secs(20));
    assert_eq!(a.lease_renew, Duration::from_secs(5));
    assert_eq!(a.service_lease_duration, Duration::from_secs(10));
    assert_eq!(a.service_lease_renew_deadline, Duration::from_secs(4));
    assert_eq!(a.service_lease_retry, Duration::from_secs(1));
    assert_eq!(a.burst_count, 2);
    assert_eq!(a.burst_interval, Duration::from_millis(1500));
    assert_eq!(a.announce_refresh_interval, Some(Duration::from_secs(30)));
    assert_eq!(a.announce_rate, 250);
    assert!(a.ignore_exclude_label);
    assert!(a.force_classless);
    assert_eq!(a.grace, Duration::from_secs(8));
    assert_eq!(a.probe_timeout, Duration::from_millis(150));
    assert_eq!(a.warmup, Duration::from_secs(1));
    assert_eq!(a.handover_timeout, Duration::from_secs(3));
    assert_eq!(a.xdp_mode, XdpMode::Generic);
    assert_eq!(a.state_dir(), Path::new("/var/lib/announcer-test"));
    assert!(a.announce_outside_pools);
}

#[test]
fn state_dir_defaults_to_one_directory_per_node_under_var_lib() {
    let a = parse(&[]).expect("defaults");
    assert_eq!(a.state_dir, None);
    assert_eq!(a.state_dir(), Path::new("/var/lib/announcer/n1"));
    let a = parse(&["--state-dir", "/tmp/s"]).expect("flag");
    assert_eq!(a.state_dir(), Path::new("/tmp/s"));
}

#[test]
fn state_dir_in_the_file_must_be_absolute() {
    let e = err("stateDir: var/lib/announcer\n");
    assert!(
        e.contains("stateDir") && e.contains("not an absolute path"),
        "{e}"
    );
}

#[test]
fn the_removed_heartbeat_secret_key_is_rejected_saying_why() {
    let e = err("heartbeat:\n  interval: 100ms\n  secret: announcer-heartbeat-key\n");
    assert!(e.contains("heartbeat.secret"), "{e}");
    assert!(e.contains("line 3"), "{e}");
    assert!(e.contains("removed") && e.contains("per-node keys"), "{e}");
    // Whatever its value.
    for value in ["null", "{name: k}", "[k]", "42"] {
        let e = err(&format!("heartbeat: {{secret: {value}}}\n"));
        assert!(
            e.contains("heartbeat.secret") && e.contains("removed"),
            "{e}"
        );
    }
    // Not offered to someone who misspells another key.
    let e = err("heartbeat: {mises: 3}\n");
    assert!(
        e.contains("unknown field `mises`") && !e.contains("secret"),
        "{e}"
    );
}

#[test]
fn command_line_flags_override_the_file() {
    let f =
        TempFile::new("heartbeat: {interval: 50ms, misses: 4}\nipv6: false\ninterfaces: [eth1]\n");
    let path = f.0.to_str().expect("utf-8");
    let a = parse(&[
        "--config",
        path,
        "--heartbeat-misses",
        "3",
        "--interface",
        "eth9",
    ])
    .expect("valid");
    // Given explicitly, even when equal to the default: the command line wins.
    assert_eq!(a.heartbeat_misses, 3);
    assert_eq!(a.interfaces, ["eth9"]);
    // Not given: the file's value.
    assert_eq!(a.heartbeat_interval, Duration::from_millis(50));
    assert!(a.no_ipv6);
}

#[test]
fn empty_or_comment_only_file_changes_nothing() {
    assert_eq!(ConfigFile::parse("").expect("empty"), ConfigFile::default());
    assert_eq!(
        ConfigFile::parse("# nothing set\n").expect("comments"),
        ConfigFile::default()
    );
}

#[test]
fn unknown_keys_are_errors_with_their_line() {
    let e = err("heartbeat:\n  interval: 100ms\n  mises: 3\n");
    assert!(e.contains("unknown field `mises`"), "{e}");
    assert!(e.contains("heartbeat"), "{e}");
    assert!(e.contains("line 3"), "{e}");
    let e = err("loadBalancerclass: x\n");
    assert!(e.contains("unknown field `loadBalancerclass`"), "{e}");
}

#[test]
fn bad_values_name_the_key_and_line() {
    let e = err("grace: 5s\nheartbeat:\n  interval: 100\n");
    assert!(e.contains("heartbeat.interval"), "{e}");
    assert!(e.contains("invalid duration \"100\""), "{e}");
    assert!(e.contains("line 3"), "{e}");

    let e = err("lease:\n  renew: 3 seconds please\n");
    assert!(
        e.contains("lease.renew") && e.contains("invalid duration"),
        "{e}"
    );

    let e = err("serviceSelector: \"tier in (web\"\n");
    assert!(
        e.contains("serviceSelector") && e.contains("invalid label selector"),
        "{e}"
    );
    assert!(e.contains("line 1"), "{e}");

    let e = err("interfaces: [eth0, \"eth 1\"]\n");
    assert!(
        e.contains("interfaces") && e.contains("invalid interface pattern"),
        "{e}"
    );
    let e = err("interfaces: [\"^eth[0-9]+$\"]\n");
    assert!(e.contains("globs like eth*"), "{e}");

    let e = err("election: leader\n");
    assert!(e.contains("election") && e.contains("node-lease"), "{e}");
    let e = err("xdpMode: driver\n");
    assert!(e.contains("xdpMode") && e.contains("native"), "{e}");
    let e = err("announcement: {count: -1}\n");
    assert!(e.contains("announcement.count"), "{e}");
    let e = err("ipv4: maybe\n");
    assert!(e.contains("ipv4"), "{e}");
}

#[test]
fn inconsistent_timings_from_the_file_fail_validation_naming_the_key() {
    let f = TempFile::new("lease: {duration: 3s, renew: 3s}\n");
    let a = parse(&["--config", f.0.to_str().expect("utf-8")]).expect("parses");
    let e = a.validate().expect_err("renew must be shorter").to_string();
    assert!(
        e.contains("lease.renew") && e.contains("--lease-renew"),
        "{e}"
    );

    let f = TempFile::new("ipv4: false\nipv6: false\n");
    let a = parse(&["--config", f.0.to_str().expect("utf-8")]).expect("parses");
    let e = a.validate().expect_err("nothing to announce").to_string();
    assert!(e.contains("ipv4: false"), "{e}");
}

#[test]
fn missing_or_bad_file_is_a_usage_error_naming_it() {
    let e = parse(&["--config", "/nonexistent/announcer.yaml"]).expect_err("missing file");
    assert_eq!(e.exit_code(), 2);
    assert!(e.to_string().contains("/nonexistent/announcer.yaml"), "{e}");
    let f = TempFile::new("heartbeat: [1, 2]\n");
    let path = f.0.to_str().expect("utf-8").to_owned();
    let e = parse(&["--config", &path]).expect_err("bad file");
    assert!(
        e.to_string().contains(&path) && e.to_string().contains("heartbeat"),
        "{e}"
    );
}

#[test]
fn an_announcement_rate_of_zero_is_refused_naming_the_key() {
    let f = TempFile::new("announcement: {rate: 0}\n");
    let a = parse(&["--config", f.0.to_str().expect("utf-8")]).expect("parses");
    let e = a.validate().expect_err("zero").to_string();
    assert!(e.contains("announcement.rate"), "{e}");
}

#[test]
fn a_refresh_interval_below_a_second_is_refused_naming_the_key() {
    let f = TempFile::new("announcement: {refreshInterval: 200ms}\n");
    let a = parse(&["--config", f.0.to_str().expect("utf-8")]).expect("parses");
    let e = a.validate().expect_err("too short").to_string();
    assert!(e.contains("announcement.refreshInterval"), "{e}");
    // Off unless set.
    assert_eq!(
        parse(&[]).expect("defaults").announce_refresh_interval,
        None
    );
}
