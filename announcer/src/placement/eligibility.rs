//! Which VIPs the cluster wants announced, and which nodes may announce each: a pure function
//! of the watched Services, EndpointSlices and Nodes.
//!
//! Why pure and shared: every agent runs [`plan`] on the same watch data, so every agent ranks
//! the same candidates for a VIP (the election core depends on that), and the rules — which
//! are where users' "why is my IP not answered?" questions end up — can be tested one by one.
//!
//! The rules:
//!
//! * Services: `spec.type: LoadBalancer`, `spec.loadBalancerClass` ours or (unless
//!   `--class-only`) unset, matching the configured service selector. VIPs come from `status.loadBalancer.ingress[].ip` only; an
//!   ingress entry with a hostname and no IP cannot be announced at layer 2 and is reported as
//!   a [`ProblemReason::NoIp`] (not silently ignored: for a Service of our class it means a
//!   misconfigured IPAM). An address that does not parse or can never be a VIP is reported and
//!   skipped; the Service's other VIPs are still planned. One address claimed by two Services
//!   is planned for the first by namespace/name only, and reported on the others, unless they
//!   carry the same `announcer.dev/allow-shared-ip` key: then it is one VIP for all of them,
//!   eligible wherever any of them is (under `Local`, the union of their endpoints' nodes).
//!   Sharers must also agree: the same `externalTrafficPolicy` (a Local Service placed where
//!   only a Cluster one has endpoints would have its traffic dropped by kube-proxy), and the
//!   same namespace unless both opt in with `announcer.dev/allow-shared-ip-namespaces`
//!   (the other's namespace, a comma-separated list, or `*`), as Cilium asks. Of two that
//!   disagree the younger (creationTimestamp, then namespace/name) is refused
//!   ([`ProblemReason::SharingConflict`], naming both), as MetalLB and Cilium refuse them.
//! * Refusals ([`super::refusal`]): whatever a status says, an agent never announces an
//!   address of a Node of the cluster (`InternalIP`, `ExternalIP`), nor a link-local,
//!   multicast, unspecified, loopback or broadcast one; and once any `AddressPool` exists, an
//!   address outside every pool only with [`Selection::announce_outside_pools`]
//!   ([`ProblemReason::Refused`]). Whoever can write a Service's status must not be able to
//!   make a healthy node answer for the gateway or another node.
//! * Pools (placement): a VIP inside an `AddressPool` (the oldest one containing it, as the
//!   allocator decides overlaps) is announced only by nodes matching the pool's
//!   `nodeSelector` (besides the agent's), and only on interfaces matching its `interfaces`
//!   ([`VipPlacement::interfaces`]; the election core ranks a node only if it has one). A pool
//!   that says nothing keeps the agent's flags. A VIP in no pool (assigned by another IPAM)
//!   is placed as before pools existed, if announced at all (see Refusals).
//! * Nodes: condition `Ready` is `True`, no `node.kubernetes.io/exclude-from-external-load-balancers`
//!   label (any value: Kubernetes checks presence; `ignoreExcludeLabel` lifts this), matching the
//!   configured node selector.
//! * Endpoints: the EndpointSlices labelled `kubernetes.io/service-name=<service>` in the
//!   Service's namespace. An endpoint is ready when `conditions.ready` is `true` or unset ("a
//!   nil value should be interpreted as true", EndpointConditions API reference). A Service with
//!   no ready endpoint anywhere is announced nowhere: traffic to it would be dropped anyway,
//!   and silence lets clients fail fast. Under `externalTrafficPolicy: Local`, only eligible
//!   nodes hosting a ready endpoint (`nodeName`) are eligible, since kube-proxy drops the
//!   traffic on the others; under `Cluster`, every eligible node is.
//!
//! VIPs that end up with no eligible node are still in [`Placement::vips`] (with an empty set)
//! so the election core withdraws them, and a [`Problem`] says why.

use std::{
    borrow::Borrow,
    collections::{BTreeMap, BTreeSet},
    fmt,
    net::IpAddr,
    sync::Arc,
};

use k8s_openapi::{
    api::{
        core::v1::{LoadBalancerIngress, Node, Service},
        discovery::v1::EndpointSlice,
    },
    apimachinery::pkg::apis::meta::v1::LabelSelector,
};
use kube::core::{ParseExpressionError, Selector, SelectorExt};

use super::refusal::{self, Refusal};
use crate::{
    dataplane::Vip,
    election::{IfaceName, NodeName, NodeSet, ServiceRef, VipSpec},
    ipam::{
        ALLOW_SHARED_IP_ANNOTATION, ALLOW_SHARED_IP_NAMESPACES_ANNOTATION, AddressPool,
        AddressPoolSpec, OtherNamespaces,
    },
};

/// The `spec.loadBalancerClass` the agent serves by default.
pub const DEFAULT_CLASS: &str = "announcer.dev/l2";
/// Nodes carrying this label (any value) never announce (well-known label, KEP-1143).
pub const EXCLUDE_LABEL: &str = "node.kubernetes.io/exclude-from-external-load-balancers";
/// The label linking an EndpointSlice to its Service.
pub const SERVICE_NAME_LABEL: &str = "kubernetes.io/service-name";
/// Which Services and Nodes this agent considers.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Selection {
    /// Our `spec.loadBalancerClass`: Services with no class or this class are ours. `None`:
    /// only Services with no class.
    pub load_balancer_class: Option<String>,
    /// Services with no class are not ours (`--class-only`: MetalLB serves them).
    pub class_only: bool,
    /// Only Services whose labels match (`None`: all).
    pub service_selector: Option<Selector>,
    /// Only Nodes whose labels match may announce (`None`: all).
    pub node_selector: Option<Selector>,
    /// Announce IPv4 VIPs.
    pub ipv4: bool,
    /// Announce IPv6 VIPs.
    pub ipv6: bool,
    /// Once an `AddressPool` exists, announce addresses outside every pool too
    /// (`announceOutsidePools`; without any pool they always are).
    pub announce_outside_pools: bool,
    /// Nodes labelled [`EXCLUDE_LABEL`] may announce too (`ignoreExcludeLabel`, like MetalLB's
    /// `--ignore-exclude-lb`): for clusters whose only nodes are control-plane nodes, which
    /// kubeadm and Talos label so.
    pub ignore_exclude_label: bool,
}

impl Default for Selection {
    fn default() -> Self {
        Selection {
            load_balancer_class: Some(DEFAULT_CLASS.to_owned()),
            class_only: false,
            service_selector: None,
            node_selector: None,
            ipv4: true,
            ipv6: true,
            announce_outside_pools: false,
            ignore_exclude_label: false,
        }
    }
}

/// A label selector from the configuration that cannot be used.
#[derive(Debug, thiserror::Error)]
#[error("invalid {which} selector: {source}")]
pub struct SelectionError {
    /// "service" or "node".
    pub which: &'static str,
    /// What kube-core said.
    #[source]
    pub source: ParseExpressionError,
}

impl Selection {
    /// The default selection with these selectors (`matchLabels` and `matchExpressions` with
    /// `In`, `NotIn`, `Exists`, `DoesNotExist`), parsed once so a bad operator is refused at
    /// start rather than silently matching nothing.
    pub fn with_selectors(
        service: Option<LabelSelector>,
        node: Option<LabelSelector>,
    ) -> Result<Self, SelectionError> {
        let parse = |which, s: Option<LabelSelector>| {
            s.map(Selector::try_from)
                .transpose()
                .map_err(|source| SelectionError { which, source })
        };
        Ok(Selection {
            service_selector: parse("service", service)?,
            node_selector: parse("node", node)?,
            ..Selection::default()
        })
    }
}

/// The outcome of [`plan`], the placement of every VIP: what to announce and where, and what
/// cannot be announced and why.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Placement {
    /// Every VIP of our Services, sorted by address. Unique addresses.
    pub vips: Vec<VipPlacement>,
    /// Why some VIPs are not (or not fully) announced, sorted by Service then VIP.
    pub problems: Vec<Problem>,
}

/// One VIP's placement: the nodes (and interfaces) that may announce it.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct VipPlacement {
    /// The address.
    pub vip: IpAddr,
    /// Its Service.
    pub service: ServiceRef,
    /// Nodes that may announce it; empty: nowhere (a [`Problem`] says why). Shared between
    /// the VIPs that have the same set (under `Cluster`, most of them).
    pub eligible: NodeSet,
    /// The Service has `externalTrafficPolicy: Local`.
    pub local_policy: bool,
    /// Services sharing the address (`announcer.dev/allow-shared-ip`), besides `service`.
    pub shared_with: Vec<ServiceRef>,
    /// The `AddressPool` the address is in (`None`: in no pool; another IPAM assigned it).
    pub pool: Option<String>,
    /// The pool's `interfaces` (names or globs): only those may announce it. Empty: the
    /// agent's own rule.
    pub interfaces: Vec<String>,
    /// The eligible nodes its pool prefers (`spec.preferredNodes`): ranked first.
    pub preferred: NodeSet,
}

impl VipPlacement {
    /// The election core's view of this VIP, with the interface this node would use.
    pub fn spec(&self, local: Option<IfaceName>) -> VipSpec {
        VipSpec {
            vip: self.vip,
            service: self.service.clone(),
            eligible: self.eligible.clone(),
            local,
            interfaces: self.interfaces.clone(),
            preferred: self.preferred.clone(),
        }
    }
}

impl Placement {
    /// The Services `node` is eligible for, with their VIPs (for the lease-per-service mode).
    pub fn services_for(&self, node: &NodeName) -> BTreeMap<ServiceRef, Vec<IpAddr>> {
        let mut out: BTreeMap<ServiceRef, Vec<IpAddr>> = BTreeMap::new();
        for v in self.vips.iter().filter(|v| v.eligible.contains(node)) {
            out.entry(v.service.clone()).or_default().push(v.vip);
        }
        out
    }
}

/// A VIP (or ingress entry) that cannot be announced.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Problem {
    /// The Service to record an Event on.
    pub service: ServiceRef,
    /// The ingress entry concerned, verbatim (`None`: the Service as a whole).
    pub vip: Option<String>,
    /// Why, typed.
    pub reason: ProblemReason,
    /// Why, for people (Event note and log line).
    pub message: String,
}

/// Why a VIP is not announced.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum ProblemReason {
    /// `ip` does not parse, or can never be a VIP (the text says which).
    BadAddress(String),
    /// The ingress entry has no `ip` (hostname only, or empty).
    NoIp,
    /// The address family is disabled in the agent's configuration.
    FamilyDisabled,
    /// Another Service (first by namespace/name) already claims the address.
    Duplicate(ServiceRef),
    /// The Service has no ready endpoint anywhere.
    NoReadyEndpoints,
    /// No node is Ready, included and selected (and, under `Local`, hosts a ready endpoint).
    NoEligibleNode,
    /// The address is one an agent never announces (the rule says which).
    Refused(Refusal),
    /// The Service shares the address with this older one, but their traffic policies differ
    /// or they are in different namespaces without both opting in.
    SharingConflict(ServiceRef),
}

impl ProblemReason {
    /// The Event `reason` (PascalCase, as Kubernetes conventions ask).
    pub fn event_reason(&self) -> &'static str {
        match self {
            ProblemReason::BadAddress(_) => "BadAddress",
            ProblemReason::NoIp => "NoIp",
            ProblemReason::FamilyDisabled => "FamilyDisabled",
            ProblemReason::Duplicate(_) => "DuplicateAddress",
            ProblemReason::NoReadyEndpoints => "NoReadyEndpoints",
            ProblemReason::NoEligibleNode => "NoEligibleNode",
            // Never unicast: refused as a bad address since the first release; the Event
            // reason users may alert on stays.
            ProblemReason::Refused(r) if !r.unicast() => "BadAddress",
            ProblemReason::Refused(_) => "AddressRefused",
            ProblemReason::SharingConflict(_) => "SharingConflict",
        }
    }

    /// The metric label of a refusal (a [`Refusal::label`] or `sharing_conflict`); `None` for
    /// the problems that are not refusals.
    pub fn refusal_label(&self) -> Option<&'static str> {
        match self {
            ProblemReason::Refused(r) => Some(r.label()),
            ProblemReason::SharingConflict(_) => Some("sharing_conflict"),
            _ => None,
        }
    }
}

impl fmt::Display for Problem {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}: {}", self.service, self.message)
    }
}

/// Whether the node's `Ready` condition is `True`.
pub fn node_ready(node: &Node) -> bool {
    node.status
        .as_ref()
        .and_then(|s| s.conditions.as_ref())
        .is_some_and(|cs| cs.iter().any(|c| c.type_ == "Ready" && c.status == "True"))
}

/// The nodes that may announce anything: Ready, not excluded (unless
/// [`Selection::ignore_exclude_label`]), selected.
pub fn eligible_nodes<N: Borrow<Node>>(nodes: &[N], sel: &Selection) -> BTreeSet<NodeName> {
    let empty = BTreeMap::new();
    nodes
        .iter()
        .map(Borrow::borrow)
        .filter(|n| node_ready(n))
        .filter(|n| {
            let labels = n.metadata.labels.as_ref().unwrap_or(&empty);
            (sel.ignore_exclude_label || !labels.contains_key(EXCLUDE_LABEL))
                && sel.node_selector.as_ref().is_none_or(|s| s.matches(labels))
        })
        .filter_map(|n| n.metadata.name.as_deref().map(NodeName::from))
        .collect()
}

/// Whether the Service is one of ours: LoadBalancer, our class, selected.
fn ours(svc: &Service, sel: &Selection) -> bool {
    let Some(spec) = &svc.spec else { return false };
    if spec.type_.as_deref() != Some("LoadBalancer") {
        return false;
    }
    match &spec.load_balancer_class {
        None if sel.class_only => return false,
        None => {}
        Some(c) if Some(c) == sel.load_balancer_class.as_ref() => {}
        Some(_) => return false,
    }
    let empty = BTreeMap::new();
    let labels = svc.metadata.labels.as_ref().unwrap_or(&empty);
    sel.service_selector
        .as_ref()
        .is_none_or(|s| s.matches(labels))
}

/// Ready endpoints of a Service: whether any exists, and the nodes hosting one.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub(super) struct Endpoints {
    any_ready: bool,
    nodes: BTreeSet<NodeName>,
}

impl Endpoints {
    /// The ready endpoints of one slice.
    pub(super) fn of(slice: &EndpointSlice) -> Self {
        let mut e = Endpoints::default();
        for ep in slice.endpoints.iter().flatten() {
            let ready = ep.conditions.as_ref().and_then(|c| c.ready).unwrap_or(true);
            if !ready {
                continue;
            }
            e.any_ready = true;
            if let Some(n) = &ep.node_name {
                e.nodes.insert(NodeName::from(n.as_str()));
            }
        }
        e
    }

    /// Adds another slice's.
    pub(super) fn add(&mut self, other: &Endpoints) {
        self.any_ready |= other.any_ready;
        self.nodes.extend(other.nodes.iter().cloned());
    }
}

/// Ready endpoints of every Service, by (namespace, name), from one pass over the slices.
fn endpoints<'a>(
    slices: impl IntoIterator<Item = &'a EndpointSlice>,
) -> BTreeMap<(&'a str, &'a str), Endpoints> {
    let mut out: BTreeMap<(&str, &str), Endpoints> = BTreeMap::new();
    for s in slices {
        let Some(ns) = s.metadata.namespace.as_deref() else {
            continue;
        };
        let Some(svc) = s
            .metadata
            .labels
            .as_ref()
            .and_then(|l| l.get(SERVICE_NAME_LABEL))
        else {
            continue;
        };
        out.entry((ns, svc.as_str()))
            .or_default()
            .add(&Endpoints::of(s));
    }
    out
}

/// Computes the placement without pools: [`plan_placed`] with none.
pub fn plan<S, E, N>(services: &[S], slices: &[E], nodes: &[N], sel: &Selection) -> Placement
where
    S: Borrow<Service>,
    E: Borrow<EndpointSlice>,
    N: Borrow<Node>,
{
    plan_placed::<S, E, N, AddressPool>(services, slices, nodes, &[], sel)
}

/// Where a pool's addresses may be announced: the nodes its `nodeSelector` allows (already
/// narrowed to the eligible ones) and its interfaces.
#[derive(Clone, Debug, PartialEq)]
struct PoolPlacement {
    name: String,
    /// A subset of the plan's base set.
    nodes: NodeSet,
    interfaces: Vec<String>,
    preferred: NodeSet,
}

/// The pools, oldest first (creationTimestamp, then name: the order that decides overlaps),
/// each with the eligible nodes its selector allows. A selector that does not parse allows
/// none, and is reported on the pool's Services.
fn placements<P: Borrow<AddressPool>>(
    pools: &[P],
    nodes: &[&Node],
    base: &NodeSet,
) -> Vec<(AddressPoolSpec, PoolPlacement, Option<String>)> {
    let mut sorted: Vec<&AddressPool> = pools.iter().map(Borrow::borrow).collect();
    sorted.sort_by(|a, b| {
        let key = |p: &AddressPool| {
            (
                p.metadata.creation_timestamp.as_ref().map(|t| t.0),
                p.metadata.name.clone(),
            )
        };
        key(a).cmp(&key(b))
    });
    let empty = BTreeMap::new();
    sorted
        .into_iter()
        .map(|p| {
            let name = p.metadata.name.clone().unwrap_or_default();
            let (allowed, error) = match p.spec.node_selector.clone().map(Selector::try_from) {
                None => (base.clone(), None),
                Some(Ok(sel)) => (
                    Arc::new(
                        nodes
                            .iter()
                            .filter(|n| sel.matches(n.metadata.labels.as_ref().unwrap_or(&empty)))
                            .filter_map(|n| n.metadata.name.as_deref().map(NodeName::from))
                            .filter(|n| base.contains(n))
                            .collect(),
                    ),
                    None,
                ),
                Some(Err(e)) => (
                    NodeSet::default(),
                    Some(format!("AddressPool {name}: invalid nodeSelector: {e}")),
                ),
            };
            let placement = PoolPlacement {
                name,
                nodes: allowed,
                interfaces: p.spec.interfaces.clone(),
                preferred: Arc::new(
                    p.spec
                        .preferred_nodes
                        .iter()
                        .map(|n| NodeName::from(n.as_str()))
                        .collect(),
                ),
            };
            (p.spec.clone(), placement, error)
        })
        .collect()
}

/// Computes the placement. Deterministic: the same objects in any order give the same one.
/// Takes objects or `Arc`s of them (as reflector stores hold them).
///
/// This plans from scratch; [`super::planner::Planner`] keeps the same placement up to date
/// one object at a time, through the same rules ([`Rules::place`]).
pub fn plan_placed<S, E, N, P>(
    services: &[S],
    slices: &[E],
    nodes: &[N],
    pools: &[P],
    sel: &Selection,
) -> Placement
where
    S: Borrow<Service>,
    E: Borrow<EndpointSlice>,
    N: Borrow<Node>,
    P: Borrow<AddressPool>,
{
    let rules = Rules::new(nodes, pools, sel);
    let all_eps = endpoints(slices.iter().map(Borrow::borrow));
    let none = Endpoints::default();
    let mut ours: Vec<(ServiceRef, &Service)> = services
        .iter()
        .map(Borrow::borrow)
        .filter_map(|s| Some((our_ref(s, sel)?, s)))
        .collect();
    ours.sort_by(|a, b| a.0.cmp(&b.0));
    let mut out = Placement::default();
    let mut by_addr: BTreeMap<IpAddr, Vec<Claimant<'_>>> = BTreeMap::new();
    for (sref, svc) in &ours {
        let eps = all_eps
            .get(&(sref.namespace.as_str(), sref.name.as_str()))
            .unwrap_or(&none);
        out.problems.extend(unparsed(sref, svc));
        for ip in addresses(svc) {
            by_addr
                .entry(ip)
                .or_default()
                .push(Claimant { sref, svc, eps });
        }
    }
    for (ip, claimants) in by_addr {
        let (vip, problems) = rules.place(ip, &claimants);
        out.vips.extend(vip);
        out.problems.extend(problems);
    }
    out.problems
        .sort_by(|a, b| (&a.service, &a.vip, &a.message).cmp(&(&b.service, &b.vip, &b.message)));
    out
}

/// The Service's namespace/name if it is one of ours ([`ours`]).
pub(super) fn our_ref(svc: &Service, sel: &Selection) -> Option<ServiceRef> {
    if !ours(svc, sel) {
        return None;
    }
    let namespace = svc.metadata.namespace.clone()?;
    let name = svc.metadata.name.clone()?;
    Some(ServiceRef { namespace, name })
}

/// The Service's ingress entries.
fn ingress(svc: &Service) -> impl Iterator<Item = &LoadBalancerIngress> {
    svc.status
        .as_ref()
        .and_then(|s| s.load_balancer.as_ref())
        .and_then(|lb| lb.ingress.as_ref())
        .into_iter()
        .flatten()
}

/// The addresses the Service's ingress entries claim, each once.
pub(super) fn addresses(svc: &Service) -> BTreeSet<IpAddr> {
    ingress(svc)
        .filter_map(|i| i.ip.as_deref()?.parse().ok())
        .collect()
}

/// The problems of the Service's ingress entries that claim no address: no IP, or text that
/// is no IP address.
pub(super) fn unparsed(sref: &ServiceRef, svc: &Service) -> Vec<Problem> {
    let mut out = Vec::new();
    for ing in ingress(svc) {
        let (vip, reason, message) = match ing.ip.as_deref() {
            None => {
                let what = match &ing.hostname {
                    Some(h) => format!("ingress hostname {h:?} has no IP"),
                    None => "an ingress entry has no IP".to_owned(),
                };
                let message = format!("{what}: only IP addresses can be announced at layer 2");
                (ing.hostname.clone(), ProblemReason::NoIp, message)
            }
            Some(text) if text.parse::<IpAddr>().is_err() => {
                let why = format!("{text:?} is not an IP address");
                let message = format!("cannot announce ingress IP: {why}");
                (
                    Some(text.to_owned()),
                    ProblemReason::BadAddress(why),
                    message,
                )
            }
            Some(_) => continue,
        };
        out.push(Problem {
            service: sref.clone(),
            vip,
            reason,
            message,
        });
    }
    out
}

/// One Service claiming an address, with its ready endpoints.
pub(super) struct Claimant<'a> {
    pub sref: &'a ServiceRef,
    pub svc: &'a Service,
    pub eps: &'a Endpoints,
}

/// What every address's placement depends on besides its claimants: the nodes that may
/// announce anything, the pools and their nodes, the nodes' own addresses, the selection.
/// Equal rules give equal placements, so a planner re-places every address only when these
/// change.
#[derive(Clone, Debug, PartialEq)]
pub(super) struct Rules {
    base: NodeSet,
    pools: Vec<(AddressPoolSpec, PoolPlacement, Option<String>)>,
    node_addrs: BTreeMap<IpAddr, NodeName>,
    sel: Selection,
}

impl Rules {
    pub(super) fn new<N, P>(nodes: &[N], pools: &[P], sel: &Selection) -> Self
    where
        N: Borrow<Node>,
        P: Borrow<AddressPool>,
    {
        let base: NodeSet = Arc::new(eligible_nodes(nodes, sel));
        let node_refs: Vec<&Node> = nodes.iter().map(Borrow::borrow).collect();
        Rules {
            pools: placements(pools, &node_refs, &base),
            base,
            node_addrs: refusal::node_addresses(nodes),
            sel: sel.clone(),
        }
    }

    /// If `new` differs from these rules only in node sets (the base and the pools' nodes,
    /// which follow from it: a Node turned Ready or NotReady, or relabelled), each old set
    /// with the one that replaces it and whether their nodes differ. A placement whose
    /// eligible set is one of the old sets (not merged from sharers, in no pool that prefers
    /// nodes, neither set empty) is the same with the new set: no need to place it again.
    pub(super) fn substitutions(&self, new: &Rules) -> Option<Vec<(NodeSet, NodeSet, bool)>> {
        let same_but_nodes = self.sel == new.sel
            && self.node_addrs == new.node_addrs
            && self.pools.len() == new.pools.len()
            && self.pools.iter().zip(&new.pools).all(|(a, b)| {
                a.0 == b.0
                    && a.2 == b.2
                    && a.1.name == b.1.name
                    && a.1.interfaces == b.1.interfaces
                    && a.1.preferred == b.1.preferred
            });
        if !same_but_nodes {
            return None;
        }
        let pair = |a: &NodeSet, b: &NodeSet| (a.clone(), b.clone(), a != b);
        let mut out = vec![pair(&self.base, &new.base)];
        out.extend(
            self.pools
                .iter()
                .zip(&new.pools)
                .map(|(a, b)| pair(&a.1.nodes, &b.1.nodes)),
        );
        Some(out)
    }

    /// Whether the pool named `name` prefers any node (then its VIPs' preferred nodes depend
    /// on their eligible sets).
    pub(super) fn pool_prefers(&self, name: &str) -> bool {
        self.pools
            .iter()
            .any(|(_, p, _)| p.name == name && !p.preferred.is_empty())
    }

    /// The placement of `ip` and its problems, from its claimants in namespace/name order
    /// (every entry of theirs that parses to `ip`, in order).
    pub(super) fn place(
        &self,
        ip: IpAddr,
        claimants: &[Claimant<'_>],
    ) -> (Option<VipPlacement>, Vec<Problem>) {
        let (sel, base, pools) = (&self.sel, &self.base, &self.pools);
        let conflicts = sharing_conflicts(claimants);
        // The address's first claimant and its sharing key, once one got past the checks.
        let mut claimed: Option<(&ServiceRef, Option<&str>)> = None;
        let mut placed: Option<VipPlacement> = None;
        let mut problems = Vec::new();
        for c in claimants {
            let (sref, svc, eps) = (c.sref, c.svc, c.eps);
            let local_policy = svc
                .spec
                .as_ref()
                .and_then(|s| s.external_traffic_policy.as_deref())
                == Some("Local");
            let share_key = svc
                .metadata
                .annotations
                .as_ref()
                .and_then(|a| a.get(ALLOW_SHARED_IP_ANNOTATION))
                .map(String::as_str)
                .filter(|k| !k.is_empty());
            let mut problem = |reason, message: String, text: &str| {
                problems.push(Problem {
                    service: sref.clone(),
                    vip: Some(text.to_owned()),
                    reason,
                    message,
                })
            };
            let entries = ingress(svc)
                .filter_map(|i| i.ip.as_deref())
                .filter(|t| t.parse::<IpAddr>().ok() == Some(ip));
            for text in entries {
                let vip = ip;
                if let Some(r) = Refusal::of_address(vip) {
                    let message = format!("not announcing {vip}: {r}");
                    problem(ProblemReason::Refused(r), message, text);
                    continue;
                }
                if let Err(e) = Vip::new(vip, None) {
                    let why = e.to_string();
                    let message = format!("cannot announce ingress IP: {why}");
                    problem(ProblemReason::BadAddress(why), message, text);
                    continue;
                }
                let family_on = match vip {
                    IpAddr::V4(_) => sel.ipv4,
                    IpAddr::V6(_) => sel.ipv6,
                };
                if !family_on {
                    let fam = if vip.is_ipv4() { "IPv4" } else { "IPv6" };
                    let message = format!(
                        "not announcing {vip}: {fam} is disabled in the agent's configuration"
                    );
                    problem(ProblemReason::FamilyDisabled, message, text);
                    continue;
                }
                let pool = pools.iter().find(|(p, _, _)| p.contains(vip));
                let refused = match self.node_addrs.get(&vip) {
                    Some(n) => Some(Refusal::NodeAddress(n.clone())),
                    None if pool.is_none() && !pools.is_empty() && !sel.announce_outside_pools => {
                        Some(Refusal::OutsidePools)
                    }
                    None => None,
                };
                if let Some(r) = refused {
                    let message = format!("not announcing {vip}: {r}");
                    problem(ProblemReason::Refused(r), message, text);
                    continue;
                }
                if let Some((_, _, Some(why))) = pool {
                    let message = format!("not announcing {vip}: {why}");
                    problem(ProblemReason::NoEligibleNode, message, text);
                }
                // Where this Service alone could announce it. Under `Cluster` one set (the
                // base or the pool's) is shared by every VIP.
                let mut eligible: NodeSet = if !eps.any_ready {
                    NodeSet::default()
                } else if local_policy {
                    Arc::new(base.intersection(&eps.nodes).cloned().collect())
                } else {
                    base.clone()
                };
                if let Some((_, place, _)) = pool {
                    eligible = if Arc::ptr_eq(&eligible, base) {
                        place.nodes.clone()
                    } else {
                        Arc::new(
                            eligible
                                .iter()
                                .filter(|n| place.nodes.contains(*n))
                                .cloned()
                                .collect(),
                        )
                    };
                }
                let shares = match claimed {
                    Some((owner, _)) if owner == sref => continue, // listed twice in one Service
                    Some((_, key)) if key.is_some() && key == share_key => true,
                    Some((owner, _)) => {
                        let message = format!(
                            "not announcing {vip}: Service {owner} already claims it (share an address only with the same {ALLOW_SHARED_IP_ANNOTATION} key)"
                        );
                        problem(ProblemReason::Duplicate(owner.clone()), message, text);
                        continue;
                    }
                    None => {
                        claimed = Some((sref, share_key));
                        false
                    }
                };
                if let Some((older, why)) = conflicts.get(sref) {
                    let message = format!(
                        "not announcing {vip} for {sref}: it shares the address with the older Service {older}, but {why}"
                    );
                    problem(ProblemReason::SharingConflict(older.clone()), message, text);
                    continue;
                }
                if !eps.any_ready {
                    let message =
                        format!("not announcing {vip}: the Service has no ready endpoints");
                    problem(ProblemReason::NoReadyEndpoints, message, text);
                }
                // Sharers so far may all have been refused for a conflict: then this one
                // places it.
                if shares && let Some(v) = placed.as_mut() {
                    Arc::make_mut(&mut v.eligible).extend(eligible.iter().cloned());
                    v.local_policy &= local_policy;
                    v.shared_with.push(sref.clone());
                    continue;
                }
                placed = Some(VipPlacement {
                    vip,
                    service: sref.clone(),
                    eligible,
                    local_policy,
                    shared_with: Vec::new(),
                    pool: pool.map(|(_, p, _)| p.name.clone()),
                    interfaces: pool
                        .map(|(_, p, _)| p.interfaces.clone())
                        .unwrap_or_default(),
                    preferred: pool
                        .map(|(_, p, _)| p.preferred.clone())
                        .unwrap_or_default(),
                });
            }
        }
        let Some(mut v) = placed else {
            return (None, problems);
        };
        // A pool's preferred nodes count only while eligible (sharers included).
        if !v.preferred.iter().all(|n| v.eligible.contains(n)) {
            let eligible = &v.eligible;
            Arc::make_mut(&mut v.preferred).retain(|n| eligible.contains(n));
        }
        // No eligible node, once every sharer has contributed its nodes.
        let any_ready = claimants
            .iter()
            .filter(|c| *c.sref == v.service || v.shared_with.contains(c.sref))
            .any(|c| c.eps.any_ready);
        if any_ready && v.eligible.is_empty() {
            let why = if v.pool.is_some()
                && pools
                    .iter()
                    .any(|(_, p, _)| Some(&p.name) == v.pool.as_ref() && p.nodes != *base)
            {
                "no Ready, selected node matches its AddressPool's nodeSelector (or, under externalTrafficPolicy: Local, hosts a ready endpoint)"
            } else if v.local_policy {
                "no Ready, selected node hosts a ready endpoint (externalTrafficPolicy: Local)"
            } else {
                "no node is Ready, selected and not excluded from load balancers"
            };
            problems.push(Problem {
                service: v.service.clone(),
                vip: Some(v.vip.to_string()),
                reason: ProblemReason::NoEligibleNode,
                message: format!("not announcing {}: {why}", v.vip),
            });
        }
        (Some(v), problems)
    }
}

/// What decides whether two Services may share an address's placement.
struct Sharer<'a> {
    sref: &'a ServiceRef,
    age: (Option<k8s_openapi::jiff::Timestamp>, &'a ServiceRef),
    key: Option<&'a str>,
    local: bool,
    /// `spec.selector`: two `Local` sharers must select the same Pods (MetalLB's rule, and the
    /// allocator's), or one's traffic lands on nodes with only the other's endpoints.
    selector: Option<&'a std::collections::BTreeMap<String, String>>,
    across: OtherNamespaces,
}

impl<'a> Sharer<'a> {
    fn of(sref: &'a ServiceRef, svc: &'a Service) -> Self {
        let annotation = |k: &str| {
            svc.metadata
                .annotations
                .as_ref()
                .and_then(|a| a.get(k))
                .map(String::as_str)
        };
        Sharer {
            sref,
            age: (svc.metadata.creation_timestamp.as_ref().map(|t| t.0), sref),
            key: annotation(ALLOW_SHARED_IP_ANNOTATION).filter(|k| !k.is_empty()),
            local: svc
                .spec
                .as_ref()
                .and_then(|s| s.external_traffic_policy.as_deref())
                == Some("Local"),
            selector: svc.spec.as_ref().and_then(|s| s.selector.as_ref()),
            across: OtherNamespaces::parse(annotation(ALLOW_SHARED_IP_NAMESPACES_ANNOTATION)),
        }
    }

    fn allows(&self, namespace: &str) -> bool {
        self.across.allows(namespace)
    }

    /// Why `self` may not share with `older`, if it may not.
    fn conflict(&self, older: &Sharer<'_>) -> Option<String> {
        let policy = |l: bool| if l { "Local" } else { "Cluster" };
        if self.local != older.local {
            return Some(format!(
                "{} has externalTrafficPolicy: {} and {} has {} (kube-proxy would drop one's traffic where only the other has endpoints)",
                self.sref,
                policy(self.local),
                older.sref,
                policy(older.local)
            ));
        }
        if self.local && self.selector != older.selector {
            return Some(format!(
                "{} and {} both have externalTrafficPolicy: Local but select different Pods (each is announced only where its own endpoints run)",
                self.sref, older.sref
            ));
        }
        let (mine, theirs) = (&self.sref.namespace, &older.sref.namespace);
        if mine != theirs && !(self.allows(theirs) && older.allows(mine)) {
            return Some(format!(
                "they are in different namespaces and both must allow it with {ALLOW_SHARED_IP_NAMESPACES_ANNOTATION} ({} in {}, {} in {})",
                self.sref, mine, older.sref, theirs
            ));
        }
        None
    }
}

/// The claimants of an address refused it although they would share it (same sharing key as its
/// first claimant by namespace/name) because they disagree with an older sharer: the older one
/// and why. Sharers are taken oldest first; each must agree with every one kept before it.
fn sharing_conflicts(claimants: &[Claimant<'_>]) -> BTreeMap<ServiceRef, (ServiceRef, String)> {
    let mut out = BTreeMap::new();
    if claimants.len() < 2 {
        return out; // the usual case: nobody to disagree with
    }
    let sharers: Vec<Sharer<'_>> = claimants
        .iter()
        .map(|c| Sharer::of(c.sref, c.svc))
        .collect();
    // Claimants come in namespace/name order: the first one's key decides who shares.
    let Some(key) = sharers.first().and_then(|c| c.key) else {
        return out;
    };
    let mut group: Vec<&Sharer<'_>> = sharers.iter().filter(|c| c.key == Some(key)).collect();
    group.sort_by(|a, b| a.age.cmp(&b.age));
    let mut kept: Vec<&Sharer<'_>> = Vec::new();
    for s in group {
        match kept.iter().find_map(|k| s.conflict(k).map(|why| (k, why))) {
            Some((older, why)) => {
                out.insert(s.sref.clone(), (older.sref.clone(), why));
            }
            None => kept.push(s),
        }
    }
    out
}

#[cfg(test)]
mod tests;
