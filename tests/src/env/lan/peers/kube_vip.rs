//! kube-vip on the testbed: ARP mode, Services only, one Lease per Service
//! (`svc_election`), run as its DaemonSet would run it (`kube-vip manifest daemonset
//! --services --arp --servicesElection`), one `kube-vip manager` per node namespace.
//!
//! What is installed: the RBAC that kube-vip itself generates (`kube-vip manifest rbac`:
//! ServiceAccount `kube-system/kube-vip`, ClusterRole `system:kube-vip-role` and its
//! binding). Each process gets a token of that ServiceAccount (`kubectl create token`, not
//! bound to a Pod: no kube-vip Pods exist here) in `$HOME/.kube/config`, HOME being a
//! directory of its own: kube-vip [`KUBE_VIP_VERSION`] reads `/etc/kubernetes/admin.conf`
//! first if that file exists (`pkg/manager/manager.go`), so [`install`] refuses to run if it
//! does. Its VIPs come from the annotation `kube-vip.io/loadbalancerIPs` (what
//! kube-vip-cloud-provider writes; no cloud provider runs here: the harness writes it from
//! this peer's range).
//!
//! Timings ([`KubeVipTimings`]): `vip_leaseduration`, `vip_renewdeadline`, `vip_retryperiod`
//! (whole seconds). kube-vip [`KUBE_VIP_VERSION`]'s defaults are 5 / 3 / 1
//! (`cmd/kube-vip.go`: `--leaseDuration`, `--leaseRenewDuration`, `--leaseRetry`; the manifest
//! generator writes them into the DaemonSet too). kube-vip documents nothing faster; the
//! fastest setting client-go's leader election accepts in whole seconds is 3 / 2 / 1 (lease >
//! renew deadline > 1.2 × retry period), [`KubeVipTimings::FASTEST`].

use std::process::Command;

use super::{Peer, Testbed, apply, clean_command, write_sa_kubeconfig};
use crate::programs::kube_program;

/// The kube-vip release run (its binary from `cargo xtask setup`).
pub const KUBE_VIP_VERSION: &str = "v1.0.0";
/// The `loadBalancerClass` kube-vip is started with (`lb_class_only`, `lb_class_name`).
pub const KUBE_VIP_LB_CLASS: &str = "kube-vip.io/kube-vip-class";
/// kube-vip's ServiceAccount namespace (its generated RBAC's).
const NAMESPACE: &str = "kube-system";
/// The file kube-vip prefers to any other kubeconfig.
const ADMIN_CONF: &str = "/etc/kubernetes/admin.conf";

/// kube-vip's leader-election timings, in whole seconds as its environment takes them.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct KubeVipTimings {
    /// `vip_leaseduration`.
    pub lease_duration_s: u32,
    /// `vip_renewdeadline`.
    pub renew_deadline_s: u32,
    /// `vip_retryperiod`.
    pub retry_period_s: u32,
}

impl KubeVipTimings {
    /// kube-vip's defaults (5 / 3 / 1); see the module docs.
    pub const DEFAULTS: KubeVipTimings = KubeVipTimings {
        lease_duration_s: 5,
        renew_deadline_s: 3,
        retry_period_s: 1,
    };
    /// The fastest whole-second timings client-go accepts (3 / 2 / 1); see the module docs.
    pub const FASTEST: KubeVipTimings = KubeVipTimings {
        lease_duration_s: 3,
        renew_deadline_s: 2,
        retry_period_s: 1,
    };
}

/// See the module docs.
pub(super) fn install(tb: &Testbed, peer: &Peer) {
    assert!(
        !std::path::Path::new(ADMIN_CONF).exists(),
        "{ADMIN_CONF} exists on this machine: kube-vip would use it instead of the testbed's \
         kubeconfig; remove it (or run the tests where it does not exist)"
    );
    let out = Command::new(kube_program("kube-vip"))
        .args(["manifest", "rbac"])
        .env_clear()
        .output()
        .expect("run kube-vip manifest rbac");
    assert!(
        out.status.success(),
        "kube-vip manifest rbac: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    apply(
        tb,
        peer,
        "kube-vip-rbac.yaml",
        &String::from_utf8_lossy(&out.stdout),
    );
    write_sa_kubeconfig(tb, NAMESPACE, "kube-vip", &peer.dir.join("kubeconfig"));
}

/// `kube-vip manager` on `node`, with the environment of its DaemonSet for Services in ARP
/// mode with per-Service election, this peer's class and `t`; its own HOME.
pub(super) fn command(peer: &Peer, node: &str, t: KubeVipTimings) -> Command {
    let home = peer.dir.join(format!("home-{node}"));
    std::fs::create_dir_all(home.join(".kube")).expect("kube-vip HOME");
    std::fs::copy(peer.dir.join("kubeconfig"), home.join(".kube/config"))
        .expect("kube-vip's kubeconfig");
    let mut cmd = clean_command(
        &kube_program("kube-vip"),
        &[
            ("HOME", home.display().to_string()),
            ("vip_arp", "true".into()),
            ("port", "6443".into()),
            ("vip_nodename", node.into()),
            ("vip_interface", "eth0".into()),
            ("svc_enable", "true".into()),
            ("svc_election", "true".into()),
            ("lb_class_only", "true".into()),
            ("lb_class_name", KUBE_VIP_LB_CLASS.into()),
            ("vip_leaseduration", t.lease_duration_s.to_string()),
            ("vip_renewdeadline", t.renew_deadline_s.to_string()),
            ("vip_retryperiod", t.retry_period_s.to_string()),
            ("prometheus_server", ":2112".into()),
        ],
    );
    cmd.arg("manager");
    cmd
}

#[cfg(test)]
mod unit {
    use super::*;

    #[test]
    fn both_timings_satisfy_client_gos_leader_election_checks() {
        for t in [KubeVipTimings::DEFAULTS, KubeVipTimings::FASTEST] {
            assert!(t.lease_duration_s > t.renew_deadline_s);
            assert!(f64::from(t.renew_deadline_s) > 1.2 * f64::from(t.retry_period_s));
        }
    }
}
