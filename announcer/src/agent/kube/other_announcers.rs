//! Another layer-2 announcer in the cluster, found through API discovery, and what it means
//! for class-less Services (`classOnly: false`).
//!
//! Why: a LoadBalancer Service without `spec.loadBalancerClass` is everybody's. With
//! `classOnly: false` the agents answer ARP/NDP for the addresses of class-less Services, and
//! so does MetalLB's speaker (or Cilium's L2 announcements) if one runs: two MACs answer for
//! one address and clients flip between them. So when another announcer is installed, the
//! agents and the allocator leave class-less Services to it, unless the operator says they
//! know better (`forceClassless: true`, e.g. a MetalLB installed for BGP only).
//!
//! How: discovery of the other announcer's API, not of its Pods. MetalLB installs the
//! `metallb.io` group (IPAddressPool, L2Advertisement, ...); Cilium installs `cilium.io`
//! always, so only its `CiliumL2AnnouncementPolicy` kind counts (the CRD exists only with
//! `l2announcements.enabled`). Discovery (`/apis`, `/apis/<group>/<version>`) is open to every
//! authenticated user (the `system:discovery` ClusterRole): no grant, no cluster-wide Pod
//! read. The check runs once at start: a MetalLB installed later is noticed at the next roll
//! (docs/configure.md says so).

use std::fmt;

use kube::Client;

/// Another announcer, as its API shows it.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub enum OtherAnnouncer {
    /// MetalLB: the `metallb.io` API group.
    MetalLb,
    /// Cilium's L2 announcements: the `CiliumL2AnnouncementPolicy` kind in `cilium.io`.
    CiliumL2,
}

impl OtherAnnouncer {
    /// The metric label and log name.
    pub fn label(self) -> &'static str {
        match self {
            OtherAnnouncer::MetalLb => "metallb",
            OtherAnnouncer::CiliumL2 => "cilium-l2",
        }
    }

    /// What discovery showed.
    pub fn evidence(self) -> &'static str {
        match self {
            OtherAnnouncer::MetalLb => "the metallb.io API group (MetalLB)",
            OtherAnnouncer::CiliumL2 => {
                "the CiliumL2AnnouncementPolicy kind in cilium.io (Cilium L2 announcements)"
            }
        }
    }
}

impl fmt::Display for OtherAnnouncer {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.label())
    }
}

/// The API group MetalLB installs.
pub const METALLB_GROUP: &str = "metallb.io";
/// The API group Cilium installs.
pub const CILIUM_GROUP: &str = "cilium.io";
/// Cilium's L2 announcement policy kind.
pub const CILIUM_L2_KIND: &str = "CiliumL2AnnouncementPolicy";

/// Whether class-less Services are served, and why.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Classless {
    /// `classOnly: true`: never.
    Ignored,
    /// `classOnly: false` and no other announcer found.
    Served,
    /// `classOnly: false`, another announcer found, `forceClassless: true`: served anyway.
    Forced(Vec<OtherAnnouncer>),
    /// `classOnly: false`, another announcer found: left to it.
    Refused(Vec<OtherAnnouncer>),
}

impl Classless {
    /// Whether class-less Services are ours.
    pub fn served(&self) -> bool {
        matches!(self, Classless::Served | Classless::Forced(_))
    }

    /// The announcers found (empty when none was, or none was looked for).
    pub fn others(&self) -> &[OtherAnnouncer] {
        match self {
            Classless::Forced(o) | Classless::Refused(o) => o,
            Classless::Ignored | Classless::Served => &[],
        }
    }

    /// The Event (reason, note) and log line for a decision that needs one.
    pub fn report(&self) -> Option<(&'static str, String)> {
        let names = |o: &[OtherAnnouncer]| {
            o.iter()
                .map(|a| a.evidence())
                .collect::<Vec<_>>()
                .join(" and ")
        };
        match self {
            Classless::Refused(o) => Some((
                "ClasslessRefused",
                format!(
                    "another announcer is installed ({}): Services without spec.loadBalancerClass \
                     are left to it. Give the announcer's Services loadBalancerClass \
                     announcer.dev/l2, or set forceClassless: true (agents) / --force-classless \
                     (allocator) if it does not announce them",
                    names(o)
                ),
            )),
            Classless::Forced(o) => Some((
                "ClasslessForced",
                format!(
                    "another announcer is installed ({}), and forceClassless is set: Services \
                     without spec.loadBalancerClass are served here too; if the other one \
                     announces them as well, two nodes answer for one address",
                    names(o)
                ),
            )),
            Classless::Ignored | Classless::Served => None,
        }
    }
}

/// The decision: `class_only` first, then whether another announcer was found, then `force`.
pub fn decide(class_only: bool, force: bool, found: Vec<OtherAnnouncer>) -> Classless {
    if class_only {
        Classless::Ignored
    } else if found.is_empty() {
        Classless::Served
    } else if force {
        Classless::Forced(found)
    } else {
        Classless::Refused(found)
    }
}

/// What discovery lists: (group, its versions' `group/version` strings) and, per
/// `group/version`, the kinds served there.
pub fn recognise<'a>(
    groups: impl IntoIterator<Item = &'a str>,
    cilium_kinds: impl IntoIterator<Item = &'a str>,
) -> Vec<OtherAnnouncer> {
    let mut found = Vec::new();
    if groups.into_iter().any(|g| g == METALLB_GROUP) {
        found.push(OtherAnnouncer::MetalLb);
    }
    if cilium_kinds.into_iter().any(|k| k == CILIUM_L2_KIND) {
        found.push(OtherAnnouncer::CiliumL2);
    }
    found
}

/// Asks the API server's discovery which other announcers are installed.
pub async fn detect(client: &Client) -> Result<Vec<OtherAnnouncer>, kube::Error> {
    let groups = client.list_api_groups().await?;
    let mut cilium_kinds = Vec::new();
    if let Some(cilium) = groups.groups.iter().find(|g| g.name == CILIUM_GROUP) {
        for v in &cilium.versions {
            match client.list_api_group_resources(&v.group_version).await {
                Ok(list) => cilium_kinds.extend(list.resources.into_iter().map(|r| r.kind)),
                // A version listed but not served (an aggregated API down): ignore it.
                Err(e) => tracing::debug!(version = %v.group_version, error = %e, "discovery"),
            }
        }
    }
    Ok(recognise(
        groups.groups.iter().map(|g| g.name.as_str()),
        cilium_kinds.iter().map(String::as_str),
    ))
}

/// [`detect`], tried three times a second apart; a discovery that keeps failing counts as
/// "none found" (logged: the behaviour before this check existed).
pub async fn detect_retrying(client: &Client) -> Vec<OtherAnnouncer> {
    for attempt in 1..=3 {
        match detect(client).await {
            Ok(found) => return found,
            Err(e) => {
                tracing::warn!(attempt, error = %e, "API discovery for other announcers failed");
                tokio::time::sleep(std::time::Duration::from_secs(1)).await;
            }
        }
    }
    Vec::new()
}

/// [`detect_retrying`] (unless `class_only`: nothing to decide), then [`decide`]; logs the
/// decision.
pub async fn classless(client: &Client, class_only: bool, force: bool) -> Classless {
    let found = if class_only {
        Vec::new()
    } else {
        detect_retrying(client).await
    };
    let decision = decide(class_only, force, found);
    if let Some((reason, note)) = decision.report() {
        tracing::warn!(reason, "{note}");
    }
    decision
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn metallb_is_found_by_its_api_group() {
        let found = recognise(["apps", "metallb.io", "cilium.io"], []);
        assert_eq!(found, vec![OtherAnnouncer::MetalLb]);
    }

    #[test]
    fn cilium_counts_only_with_its_l2_announcement_policy() {
        // cilium.io alone (Cilium as CNI only) is no announcer.
        assert!(recognise(["cilium.io"], ["CiliumNetworkPolicy", "CiliumNode"]).is_empty());
        assert_eq!(
            recognise(["cilium.io"], ["CiliumNode", "CiliumL2AnnouncementPolicy"]),
            vec![OtherAnnouncer::CiliumL2]
        );
    }

    #[test]
    fn classless_services_are_refused_when_another_announcer_is_found_unless_forced() {
        let m = vec![OtherAnnouncer::MetalLb];
        assert_eq!(decide(false, false, vec![]), Classless::Served);
        assert_eq!(
            decide(false, false, m.clone()),
            Classless::Refused(m.clone())
        );
        assert!(!decide(false, false, m.clone()).served());
        assert_eq!(decide(false, true, m.clone()), Classless::Forced(m.clone()));
        assert!(decide(false, true, m.clone()).served());
        // classOnly wins over everything.
        assert_eq!(decide(true, true, m), Classless::Ignored);
    }

    #[test]
    fn a_refusal_says_what_was_found_and_how_to_force() {
        let (reason, note) = decide(false, false, vec![OtherAnnouncer::CiliumL2])
            .report()
            .expect("reported");
        assert_eq!(reason, "ClasslessRefused");
        assert!(note.contains("CiliumL2AnnouncementPolicy"), "{note}");
        assert!(note.contains("forceClassless: true"), "{note}");
        assert!(decide(false, false, vec![]).report().is_none());
    }
}
