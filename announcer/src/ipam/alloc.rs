//! The allocation rules: from the pools, the Services and the namespaces' labels to the
//! addresses each Service should have in `status.loadBalancer.ingress`, the problems to report
//! on it, and each pool's usage.
//!
//! Why a pure function of the objects: the allocator keeps no state of its own. What is
//! allocated is what the Services' status says, so a new allocator (after a failover, a
//! restart, a split brain) reads the same objects and reaches the same answer. The rules that
//! make that safe:
//!
//! * **holdings before requests**: the addresses Services already have are settled first, and
//!   only then are requests (`announcer.dev/load-balancer-ips`, `spec.loadBalancerIP`) and new
//!   allocations served, so a request never takes an address another Service holds, whatever
//!   their ages (a tenant with an old Service cannot evict a younger one); a request that
//!   cannot be served is a Warning and changes nothing;
//! * **no reshuffle**: an address a Service already has is kept, also when a pool edit (new
//!   selectors, narrower ranges, `autoAssign: false`) would no longer give it (a Warning says
//!   so, and how to move it); pool rules apply to new allocations and requests only;
//! * **one claimant order among holders**: when two Services that may not share hold one
//!   address (a split brain, or a hand-written status), the older (creationTimestamp, then
//!   namespace/name) keeps it and the younger is re-allocated, with a warning;
//! * **selectors on every path**: a pool's `serviceSelector` and `namespaceSelector` hold for
//!   automatic allocation, for a pool named by `announcer.dev/address-pool` and for a requested
//!   address alike;
//! * **sharing is opt-in on both sides**: one sharing key, one namespace (or both Services
//!   allowing the other's), the same traffic policy (`Local` ones selecting the same Pods),
//!   and no port clash;
//! * **first fit** over the pools sorted by name, so the outcome depends on nothing but the
//!   objects; O(1) amortised per address (a cursor per range that a release moves back, and
//!   the addresses of each sharing key in an index), so a plan costs O(S log S) for S
//!   Services, not O(S²);
//! * addresses held by LoadBalancer Services that are not ours (another class) are never
//!   handed out;
//! * an address in no pool at all (another IPAM assigned it, or its pool was deleted) is left
//!   where it is: adding a pool for some Services must not take addresses from the others. It
//!   counts in no pool's usage.

use std::{
    collections::{BTreeMap, BTreeSet, HashMap},
    net::IpAddr,
};

use k8s_openapi::{
    api::core::v1::Service,
    apimachinery::pkg::apis::meta::v1::{Condition, Time},
    jiff::Timestamp,
};
use kube::core::{Selector, SelectorExt};

use super::{
    pool::{
        ADDRESS_POOL_ANNOTATION, ALLOW_SHARED_IP_ANNOTATION, ALLOW_SHARED_IP_NAMESPACES_ANNOTATION,
        AddressPool, AddressPoolStatus, LOAD_BALANCER_IPS_ANNOTATION,
    },
    range::{Family, Range, is_buggy, saturating_i64},
};

/// Which LoadBalancer Services the allocation rules serve: those of our class, and
/// class-less ones too if so configured. (The agent's running allocator wraps it in its
/// `AllocatorConfig`, with the Lease it holds and where.)
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct AllocationScope {
    /// Our `spec.loadBalancerClass`.
    pub class: String,
    /// Whether class-less LoadBalancer Services get addresses too.
    pub classless: bool,
}

/// A Service, by namespace and name.
#[derive(Clone, Debug, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct ServiceKey {
    /// Its namespace.
    pub namespace: String,
    /// Its name.
    pub name: String,
}

impl std::fmt::Display for ServiceKey {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "{}/{}", self.namespace, self.name)
    }
}

/// Why a Service cannot be served (fully): the reason of its Warning Event.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub enum Reason {
    /// No free address left in the pools the Service may use.
    PoolExhausted,
    /// The requested address is held by another Service it may not share with.
    RequestedIpTaken,
    /// The requested address lies in no pool the Service may use (also: in a pool whose
    /// selectors do not match the Service).
    RequestedIpOutsidePools,
    /// The requested addresses do not parse.
    BadRequestedIp,
    /// No pool the Service may use has an address of a family it needs.
    FamilyNotAvailable,
    /// The pool the Service names does not exist or is not valid.
    UnknownPool,
    /// The pool the Service names exists, but its selectors do not match the Service.
    PoolNotAllowed,
    /// Its address was also held by an older Service: it gets another.
    AddressConflict,
    /// It holds an address its pool's current rules would not give it (the pool was edited,
    /// or the Service names another pool): kept, never moved.
    AddressOutsidePoolRules,
}

impl Reason {
    /// The Event reason.
    pub fn as_str(self) -> &'static str {
        match self {
            Reason::PoolExhausted => "PoolExhausted",
            Reason::RequestedIpTaken => "RequestedIPTaken",
            Reason::RequestedIpOutsidePools => "RequestedIPOutsidePools",
            Reason::BadRequestedIp => "BadRequestedIP",
            Reason::FamilyNotAvailable => "IPFamilyNotAvailable",
            Reason::UnknownPool => "UnknownAddressPool",
            Reason::PoolNotAllowed => "AddressPoolNotAllowed",
            Reason::AddressConflict => "AddressConflict",
            Reason::AddressOutsidePoolRules => "AddressOutsidePoolRules",
        }
    }
}

/// A problem with one Service: the reason and a message saying why.
#[derive(Clone, Debug, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct Problem {
    /// The Event reason.
    pub reason: Reason,
    /// The Event note.
    pub message: String,
}

/// What a Service should have.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Assignment {
    /// The addresses for `status.loadBalancer.ingress`, in family order.
    pub ips: Vec<IpAddr>,
    /// What could not be done.
    pub problems: Vec<Problem>,
}

/// One pool's usage and health.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct PoolReport {
    /// Addresses held by Services, per family.
    pub assigned: BTreeMap<Family, u128>,
    /// Addresses still free, per family (only the families the pool has).
    pub available: BTreeMap<Family, u128>,
    /// Why the pool is not used, if it is not.
    pub invalid: Option<String>,
}

impl PoolReport {
    /// The families the pool has but has no free address of.
    pub fn exhausted(&self) -> Vec<Family> {
        self.available
            .iter()
            .filter(|(_, n)| **n == 0)
            .map(|(f, _)| *f)
            .collect()
    }
}

/// The outcome of [`plan`]: what every Service should have, and every pool's usage.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Allocation {
    /// Every Service the allocator is responsible for (ours, and those whose addresses must be
    /// cleared), with what it should have.
    pub services: BTreeMap<ServiceKey, Assignment>,
    /// Every pool, by name.
    pub pools: BTreeMap<String, PoolReport>,
}

struct PoolView {
    name: String,
    ranges: Vec<Range>,
    auto: bool,
    avoid_buggy: bool,
    services: Option<Selector>,
    namespaces: Option<Selector>,
    invalid: Option<String>,
}

impl PoolView {
    /// Why the pool's selectors refuse a Service with these labels in a namespace with these
    /// labels, or `None` if they let it in.
    fn refuses(
        &self,
        labels: &BTreeMap<String, String>,
        ns_labels: &BTreeMap<String, String>,
    ) -> Option<&'static str> {
        if self
            .namespaces
            .as_ref()
            .is_some_and(|s| !s.matches(ns_labels))
        {
            Some("its namespaceSelector does not match the Service's namespace")
        } else if self.services.as_ref().is_some_and(|s| !s.matches(labels)) {
            Some("its serviceSelector does not match the Service")
        } else {
            None
        }
    }

    fn contains(&self, ip: IpAddr) -> bool {
        self.ranges.iter().any(|r| r.contains(ip))
    }

    fn has(&self, f: Family) -> bool {
        self.ranges.iter().any(|r| r.family() == f)
    }

    fn usable_size(&self, f: Family) -> u128 {
        self.ranges
            .iter()
            .filter(|r| r.family() == f)
            .map(|r| {
                let n = r.size();
                if self.avoid_buggy {
                    n - r.buggy_count()
                } else {
                    n
                }
            })
            .fold(0u128, u128::saturating_add)
    }
}

fn parse_pool(p: &AddressPool) -> PoolView {
    let mut invalid = None;
    let mut ranges = Vec::new();
    for a in &p.spec.addresses {
        match Range::parse(a) {
            Ok(r) => ranges.push(r),
            Err(e) => {
                invalid.get_or_insert(e.to_string());
            }
        }
    }
    for (i, a) in ranges.iter().enumerate() {
        if let Some(b) = ranges[..i].iter().find(|b| b.overlaps(a)) {
            invalid.get_or_insert(format!("its entries {b} and {a} overlap"));
        }
    }
    let mut selector = |s: &Option<_>, what: &str| match s.clone().map(Selector::try_from) {
        None => None,
        Some(Ok(s)) => Some(s),
        Some(Err(e)) => {
            invalid.get_or_insert(format!("its {what} does not parse: {e}"));
            None
        }
    };
    let services = selector(&p.spec.service_selector, "serviceSelector");
    let namespaces = selector(&p.spec.namespace_selector, "namespaceSelector");
    PoolView {
        name: p.metadata.name.clone().unwrap_or_default(),
        ranges,
        auto: p.spec.auto_assign,
        avoid_buggy: p.spec.avoid_buggy_ips,
        services,
        namespaces,
        invalid,
    }
}

/// `spec.ipFamilyPolicy`.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Policy {
    Single,
    Prefer,
    Require,
}

type Ports = BTreeSet<(i32, String)>;

struct Svc<'a> {
    key: ServiceKey,
    labels: BTreeMap<String, String>,
    current: Vec<IpAddr>,
    requested: Result<Vec<IpAddr>, String>,
    pool: Option<&'a str>,
    sharing: Sharing,
    families: Vec<Family>,
    policy: Policy,
}

/// Which other namespaces' Services a Service may share its address with: its
/// `announcer.dev/allow-shared-ip-namespaces` annotation (comma-separated names, or `*`). The
/// allocator and the agents' placement read it with this one parser.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub enum OtherNamespaces {
    /// None (no annotation).
    #[default]
    None,
    /// These.
    Some(BTreeSet<String>),
    /// Every one (`*`).
    All,
}

impl OtherNamespaces {
    /// The annotation's value (`None`: no annotation, shares within its namespace only).
    pub fn parse(text: Option<&str>) -> OtherNamespaces {
        let Some(text) = text else {
            return OtherNamespaces::None;
        };
        let names: BTreeSet<String> = text
            .split(',')
            .map(str::trim)
            .filter(|n| !n.is_empty())
            .map(String::from)
            .collect();
        if names.contains("*") {
            OtherNamespaces::All
        } else if names.is_empty() {
            OtherNamespaces::None
        } else {
            OtherNamespaces::Some(names)
        }
    }

    /// Whether a Service of namespace `ns` may share with this one.
    pub fn allows(&self, ns: &str) -> bool {
        match self {
            OtherNamespaces::None => false,
            OtherNamespaces::Some(names) => names.contains(ns),
            OtherNamespaces::All => true,
        }
    }
}

/// What decides whether two Services may share an address.
#[derive(Clone, Debug, Default)]
struct Sharing {
    /// `announcer.dev/allow-shared-ip` (`None`: shares with nobody).
    key: Option<String>,
    /// `announcer.dev/allow-shared-ip-namespaces`.
    namespaces: OtherNamespaces,
    /// `externalTrafficPolicy: Local`.
    local: bool,
    /// `spec.selector`, which must be the same for two `Local` Services: each is announced
    /// only from nodes with its own endpoints, so one address for two Pod sets would land
    /// where kube-proxy drops one Service's traffic.
    selector: Option<BTreeMap<String, String>>,
    /// Port and protocol pairs, which must not clash.
    ports: Ports,
}

/// Who holds an address.
#[derive(Clone)]
struct Holder {
    svc: ServiceKey,
    sharing: Sharing,
}

impl Holder {
    /// Why `svc` may not hold the address `ip` beside this holder, if it may not.
    fn refuses(&self, ip: IpAddr, svc: &Svc) -> Option<String> {
        let (h, s) = (&self.sharing, &svc.sharing);
        let Some(key) = s.key.as_deref().filter(|k| h.key.as_deref() == Some(*k)) else {
            return Some(format!("{ip} is held by {}", self.svc));
        };
        let (hns, sns) = (&self.svc.namespace, &svc.key.namespace);
        if hns != sns && !(h.namespaces.allows(sns) && s.namespaces.allows(hns)) {
            return Some(format!(
                "{ip} is held by {} with sharing key {key:?}, but in namespace {hns}: sharing \
                 across namespaces needs both Services to allow the other's namespace \
                 ({ALLOW_SHARED_IP_NAMESPACES_ANNOTATION})",
                self.svc
            ));
        }
        if h.local != s.local {
            let policy = |local| if local { "Local" } else { "Cluster" };
            return Some(format!(
                "{ip} is held by {} with sharing key {key:?}, but its externalTrafficPolicy is \
                 {}, not {}",
                self.svc,
                policy(h.local),
                policy(s.local)
            ));
        }
        if h.local && (h.selector.is_none() || h.selector != s.selector) {
            return Some(format!(
                "{ip} is held by {} with sharing key {key:?}, but two externalTrafficPolicy: \
                 Local Services share only with the same Pod selector",
                self.svc
            ));
        }
        if let Some(p) = h.ports.intersection(&s.ports).next() {
            return Some(format!(
                "{ip} is shared with {}, whose port {}/{} clashes",
                self.svc, p.0, p.1
            ));
        }
        None
    }
}

/// The addresses in the Service's `status.loadBalancer.ingress` (unparsable ones left out).
pub fn current_ips(s: &Service) -> Vec<IpAddr> {
    s.status
        .as_ref()
        .and_then(|st| st.load_balancer.as_ref())
        .and_then(|lb| lb.ingress.as_ref())
        .into_iter()
        .flatten()
        .filter_map(|i| i.ip.as_deref().and_then(|ip| ip.parse().ok()))
        .collect()
}

fn key_of(s: &Service) -> ServiceKey {
    ServiceKey {
        namespace: s.metadata.namespace.clone().unwrap_or_default(),
        name: s.metadata.name.clone().unwrap_or_default(),
    }
}

fn annotation<'a>(s: &'a Service, k: &str) -> Option<&'a str> {
    s.metadata
        .annotations
        .as_ref()
        .and_then(|a| a.get(k))
        .map(String::as_str)
        .map(str::trim)
        .filter(|v| !v.is_empty())
}

fn requested(s: &Service) -> Result<Vec<IpAddr>, String> {
    let mut out = Vec::new();
    let spec_ip = s
        .spec
        .as_ref()
        .and_then(|sp| sp.load_balancer_ip.as_deref())
        .filter(|v| !v.is_empty());
    let texts = annotation(s, LOAD_BALANCER_IPS_ANNOTATION)
        .into_iter()
        .flat_map(|a| a.split(','))
        .chain(spec_ip);
    for t in texts {
        let t = t.trim();
        let ip: IpAddr = t
            .parse()
            .map_err(|_| format!("requested address {t:?} is not an IP address"))?;
        if let Some(other) = out
            .iter()
            .find(|o: &&IpAddr| Family::of(**o) == Family::of(ip))
        {
            if *other != ip {
                return Err(format!(
                    "requested addresses {other} and {ip} are of one family (at most one per family)"
                ));
            }
            continue;
        }
        out.push(ip);
    }
    Ok(out)
}

fn view<'a>(s: &'a Service) -> Svc<'a> {
    let spec = s.spec.as_ref();
    let mut families: Vec<Family> = spec
        .and_then(|sp| sp.ip_families.as_ref())
        .into_iter()
        .flatten()
        .filter_map(|f| Family::from_k8s(f))
        .collect();
    families.dedup();
    if families.is_empty() {
        families.push(Family::V4);
    }
    let policy = match spec.and_then(|sp| sp.ip_family_policy.as_deref()) {
        Some("PreferDualStack") => Policy::Prefer,
        Some("RequireDualStack") => Policy::Require,
        _ => Policy::Single,
    };
    match policy {
        Policy::Single => families.truncate(1),
        Policy::Prefer | Policy::Require => {
            let other = families[0].other();
            if !families.contains(&other) {
                families.push(other);
            }
        }
    }
    let ports = spec
        .and_then(|sp| sp.ports.as_ref())
        .into_iter()
        .flatten()
        .map(|p| (p.port, p.protocol.clone().unwrap_or_else(|| "TCP".into())))
        .collect();
    let sharing = Sharing {
        key: annotation(s, ALLOW_SHARED_IP_ANNOTATION).map(String::from),
        namespaces: OtherNamespaces::parse(annotation(s, ALLOW_SHARED_IP_NAMESPACES_ANNOTATION)),
        local: spec.and_then(|sp| sp.external_traffic_policy.as_deref()) == Some("Local"),
        selector: spec.and_then(|sp| sp.selector.clone()),
        ports,
    };
    Svc {
        key: key_of(s),
        labels: s.metadata.labels.clone().unwrap_or_default(),
        current: current_ips(s),
        requested: requested(s),
        pool: annotation(s, ADDRESS_POOL_ANNOTATION),
        sharing,
        families,
        policy,
    }
}

fn is_lb(s: &Service) -> bool {
    s.spec.as_ref().and_then(|sp| sp.type_.as_deref()) == Some("LoadBalancer")
}

fn is_ours(s: &Service, cfg: &AllocationScope) -> bool {
    match s
        .spec
        .as_ref()
        .and_then(|sp| sp.load_balancer_class.as_deref())
    {
        None => cfg.classless,
        Some(c) => c == cfg.class,
    }
}

fn age(meta: &k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta) -> Option<Timestamp> {
    meta.creation_timestamp.as_ref().map(|t| t.0)
}

/// The addresses held so far, and by whom, with two indexes that keep a plan O(1) amortised
/// per address: a cursor per range for first fit, and the addresses held per sharing key.
#[derive(Default)]
struct Claims {
    held: BTreeMap<IpAddr, Vec<Holder>>,
    /// Per range: every address of it before the cursor is held (or skipped as buggy), so
    /// first fit resumes there instead of walking the held addresses again for every new
    /// Service (10,000 new Services in one pool were 50 million look-ups). `None`: every
    /// address of it is. A release before the cursor moves it back, so the outcome is exactly
    /// first fit's.
    cursors: HashMap<Range, Option<IpAddr>>,
    /// Per sharing key, the addresses one of its holders holds: a Service with that key finds
    /// an address to share through it, not by a scan of every held address.
    by_key: HashMap<String, BTreeSet<IpAddr>>,
}

impl Claims {
    /// Whether `svc` may take `ip` (free, or shared by compatible Services only).
    fn may_take(&self, ip: IpAddr, svc: &Svc) -> Result<(), String> {
        let Some(holders) = self.held.get(&ip) else {
            return Ok(());
        };
        match holders
            .iter()
            .filter(|h| h.svc != svc.key)
            .find_map(|h| h.refuses(ip, svc))
        {
            Some(why) => Err(why),
            None => Ok(()),
        }
    }

    /// Records `holder` on `ip` (no-op if it holds it already).
    fn hold(&mut self, ip: IpAddr, holder: Holder) {
        let hs = self.held.entry(ip).or_default();
        if hs.iter().any(|h| h.svc == holder.svc) {
            return;
        }
        if let Some(k) = &holder.sharing.key {
            self.by_key.entry(k.clone()).or_default().insert(ip);
        }
        hs.push(holder);
    }

    fn take(&mut self, ip: IpAddr, svc: &Svc) {
        self.hold(
            ip,
            Holder {
                svc: svc.key.clone(),
                sharing: svc.sharing.clone(),
            },
        );
    }

    fn release(&mut self, ip: IpAddr, svc: &ServiceKey) {
        let Some(hs) = self.held.get_mut(&ip) else {
            return;
        };
        let Some(at) = hs.iter().position(|h| &h.svc == svc) else {
            return;
        };
        let gone = hs.remove(at);
        if let Some(k) = gone.sharing.key
            && !hs.iter().any(|h| h.sharing.key.as_ref() == Some(&k))
            && let Some(ips) = self.by_key.get_mut(&k)
        {
            ips.remove(&ip);
            if ips.is_empty() {
                self.by_key.remove(&k);
            }
        }
        if hs.is_empty() {
            self.held.remove(&ip);
            // Free again: first fit must find it, so a cursor past it moves back.
            for (r, c) in &mut self.cursors {
                if r.contains(ip) && c.is_none_or(|c| ip < c) {
                    *c = Some(ip);
                }
            }
        }
    }

    /// The first free address of `r` (buggy ones skipped if `avoid_buggy`), from its cursor;
    /// the cursor stays there (the caller takes it, or the next search skips it once).
    fn first_free(&mut self, r: Range, avoid_buggy: bool) -> Option<IpAddr> {
        let from = match self.cursors.get(&r) {
            Some(None) => return None,
            Some(Some(c)) => Some(*c),
            None => None,
        };
        let found = r
            .iter_from(from)
            .find(|ip| !(self.held.contains_key(ip) || avoid_buggy && is_buggy(*ip)));
        self.cursors.insert(r, found);
        found
    }
}

/// Computes what every Service of ours should have, and each pool's usage. Deterministic: the
/// same objects give the same allocation, whatever their order.
pub fn plan(
    pools: &[AddressPool],
    services: &[Service],
    namespaces: &BTreeMap<String, BTreeMap<String, String>>,
    cfg: &AllocationScope,
) -> Allocation {
    // Validity: the older pool (creationTimestamp, then name) wins an overlap.
    let mut by_age: Vec<&AddressPool> = pools.iter().collect();
    by_age.sort_by(|a, b| {
        (age(&a.metadata), a.metadata.name.as_deref())
            .cmp(&(age(&b.metadata), b.metadata.name.as_deref()))
    });
    let mut views: Vec<PoolView> = Vec::new();
    for p in by_age {
        let mut v = parse_pool(p);
        if v.invalid.is_none()
            && let Some((older, r)) = views.iter().filter(|o| o.invalid.is_none()).find_map(|o| {
                o.ranges
                    .iter()
                    .find(|r| v.ranges.iter().any(|x| x.overlaps(r)))
                    .map(|r| (o.name.clone(), *r))
            })
        {
            v.invalid = Some(format!("it overlaps the older pool {older} ({r})"));
        }
        views.push(v);
    }
    views.sort_by(|a, b| a.name.cmp(&b.name));
    let usable: Vec<&PoolView> = views.iter().filter(|v| v.invalid.is_none()).collect();
    let in_our_pools = |ip: IpAddr| usable.iter().any(|p| p.contains(ip));

    let mut claims = Claims::default();
    let mut out = Allocation::default();
    let mut sorted: Vec<&Service> = services.iter().collect();
    sorted.sort_by_key(|s| (age(&s.metadata), key_of(s)));

    // Addresses of other load balancers are never handed out; Services that are no longer
    // LoadBalancers give theirs back.
    let mut ours = Vec::new();
    for s in sorted {
        let v = view(s);
        if !is_lb(s) {
            let keep: Vec<IpAddr> = v
                .current
                .iter()
                .copied()
                .filter(|ip| !in_our_pools(*ip))
                .collect();
            if keep.len() != v.current.len() {
                out.services.insert(
                    v.key.clone(),
                    Assignment {
                        ips: keep,
                        problems: Vec::new(),
                    },
                );
            }
        } else if is_ours(s, cfg) {
            ours.push(v);
        } else {
            for ip in &v.current {
                claims.hold(
                    *ip,
                    Holder {
                        svc: v.key.clone(),
                        sharing: Sharing::default(),
                    },
                );
            }
        }
    }

    // Which pools each Service may take addresses from (requests and new allocations), and
    // which it is auto-assigned from. The selectors hold on every path: naming a pool
    // (`announcer.dev/address-pool`) only lifts `autoAssign: false`.
    let empty = BTreeMap::new();
    let mut may_hold: Vec<Vec<&PoolView>> = Vec::new();
    let mut problems: Vec<Vec<Problem>> = vec![Vec::new(); ours.len()];
    // Why each pool refuses each Service (`None`: it may use it).
    let mut refusal: Vec<BTreeMap<&str, Option<&'static str>>> = Vec::new();
    for (i, v) in ours.iter().enumerate() {
        let ns_labels = namespaces.get(&v.key.namespace).unwrap_or(&empty);
        let why: BTreeMap<&str, Option<&'static str>> = usable
            .iter()
            .map(|p| (p.name.as_str(), p.refuses(&v.labels, ns_labels)))
            .collect();
        let allowed = |p: &&PoolView| why.get(p.name.as_str()).is_some_and(Option::is_none);
        let pools: Vec<&PoolView> = match v.pool {
            Some(name) => {
                let found: Vec<&PoolView> =
                    usable.iter().copied().filter(|p| p.name == name).collect();
                if found.is_empty() {
                    problems[i].push(Problem {
                        reason: Reason::UnknownPool,
                        message: format!(
                            "the address pool {name:?} it names does not exist or is not valid"
                        ),
                    });
                }
                if let Some(Some(no)) = why.get(name) {
                    problems[i].push(Problem {
                        reason: Reason::PoolNotAllowed,
                        message: format!(
                            "the address pool {name:?} it names may not be used by it: {no}"
                        ),
                    });
                }
                found.into_iter().filter(allowed).collect()
            }
            None => usable.iter().copied().filter(allowed).collect(),
        };
        may_hold.push(pools);
        refusal.push(why);
    }
    let auto_from = |i: usize, v: &Svc| -> Vec<&PoolView> {
        may_hold[i]
            .iter()
            .copied()
            .filter(|p| v.pool.is_some() || p.auto)
            .collect()
    };

    // Phase 1, oldest first: the addresses Services already have. Only an older holder it may
    // not share with takes one from a Service; pool edits never do (a Warning says so below).
    let mut got: Vec<BTreeMap<Family, IpAddr>> = vec![BTreeMap::new(); ours.len()];
    for (i, v) in ours.iter().enumerate() {
        for &f in &v.families {
            let Some(ip) = v.current.iter().copied().find(|ip| Family::of(*ip) == f) else {
                continue;
            };
            if !in_our_pools(ip) {
                // In no pool at all: another IPAM (or a person) assigned it, or its pool was
                // deleted; it is not ours to take back or to replace. It is announced as
                // before pools existed.
                got[i].insert(f, ip);
                continue;
            }
            match claims.may_take(ip, v) {
                Ok(()) => {
                    claims.take(ip, v);
                    got[i].insert(f, ip);
                }
                Err(why) => problems[i].push(Problem {
                    reason: Reason::AddressConflict,
                    message: format!("{why}, an older Service: it gets another address"),
                }),
            }
        }
    }

    // Phase 2, oldest first: requested addresses, which never take a held one. A request that
    // cannot be served is a Warning and changes nothing (the Service keeps what it has).
    for (i, v) in ours.iter().enumerate() {
        let requested = match &v.requested {
            Ok(r) => r.clone(),
            Err(msg) => {
                problems[i].push(Problem {
                    reason: Reason::BadRequestedIp,
                    message: msg.clone(),
                });
                continue;
            }
        };
        for ip in &requested {
            if !v.families.contains(&Family::of(*ip)) {
                problems[i].push(Problem {
                    reason: Reason::FamilyNotAvailable,
                    message: format!(
                        "requested {ip} is {}, not a family the Service uses ({})",
                        Family::of(*ip),
                        families_text(&v.families)
                    ),
                });
            }
        }
        for &f in &v.families {
            let Some(ip) = requested.iter().copied().find(|ip| Family::of(*ip) == f) else {
                continue;
            };
            if got[i].get(&f) == Some(&ip) {
                continue;
            }
            if !may_hold[i].iter().any(|p| p.contains(ip)) {
                let message = match usable.iter().find(|p| p.contains(ip)) {
                    Some(p) => match refusal[i].get(p.name.as_str()).copied().flatten() {
                        Some(no) => format!("requested {ip} is in pool {}, and {no}", p.name),
                        None => format!(
                            "requested {ip} is in pool {}, not in the pool it names",
                            p.name
                        ),
                    },
                    None => format!("requested {ip} is outside every pool it may use"),
                };
                problems[i].push(Problem {
                    reason: Reason::RequestedIpOutsidePools,
                    message,
                });
            } else if let Err(why) = claims.may_take(ip, v) {
                problems[i].push(Problem {
                    reason: Reason::RequestedIpTaken,
                    message: format!("requested {why}"),
                });
            } else {
                if let Some(old) = got[i].insert(f, ip) {
                    claims.release(old, &v.key);
                }
                claims.take(ip, v);
            }
        }
    }

    // Phase 3, oldest first: first fit for the families still missing (not requested).
    for (i, v) in ours.iter().enumerate() {
        let Ok(requested) = &v.requested else {
            continue;
        };
        let auto = auto_from(i, v);
        for &f in &v.families {
            if got[i].contains_key(&f) || requested.iter().any(|ip| Family::of(*ip) == f) {
                continue;
            }
            let pools: Vec<&PoolView> = auto.iter().copied().filter(|p| p.has(f)).collect();
            if pools.is_empty() {
                // A named pool that does not exist is reported once, as such.
                if v.pool.is_some() && may_hold[i].is_empty() {
                    continue;
                }
                if v.policy != Policy::Prefer || f == v.families[0] {
                    problems[i].push(Problem {
                        reason: Reason::FamilyNotAvailable,
                        message: format!("no address pool it may use has {f} addresses"),
                    });
                }
                continue;
            }
            match first_fit(&mut claims, v, &pools, f) {
                Some(ip) => {
                    claims.take(ip, v);
                    got[i].insert(f, ip);
                }
                None => problems[i].push(Problem {
                    reason: Reason::PoolExhausted,
                    message: format!(
                        "no free {f} address in {}",
                        pools
                            .iter()
                            .map(|p| p.name.as_str())
                            .collect::<Vec<_>>()
                            .join(", ")
                    ),
                }),
            }
        }
        if v.policy == Policy::Require && got[i].len() < v.families.len() {
            for ip in got[i].values() {
                claims.release(*ip, &v.key);
            }
            got[i].clear();
            problems[i].push(Problem {
                reason: Reason::FamilyNotAvailable,
                message: "RequireDualStack needs an address of each family: none assigned".into(),
            });
        }
    }

    // What a Service keeps against its pool's current rules: said, never moved.
    for (i, v) in ours.iter().enumerate() {
        for ip in got[i].values() {
            let Some(p) = usable.iter().find(|p| p.contains(*ip)) else {
                continue;
            };
            if may_hold[i].iter().any(|m| m.name == p.name) {
                continue;
            }
            let why = match (refusal[i].get(p.name.as_str()).copied().flatten(), v.pool) {
                (Some(no), _) => no.to_owned(),
                (None, Some(named)) => format!("the Service names the pool {named:?}"),
                (None, None) => "it is not in a pool the Service may use".to_owned(),
            };
            problems[i].push(Problem {
                reason: Reason::AddressOutsidePoolRules,
                message: format!(
                    "{ip} is from pool {}, which its current rules would not give it ({why}): \
                     kept, as held addresses are never moved; to move it, request an address \
                     ({LOAD_BALANCER_IPS_ANNOTATION}) or clear its status.loadBalancer.ingress",
                    p.name
                ),
            });
        }
    }

    for (i, v) in ours.iter().enumerate() {
        let ips = v
            .families
            .iter()
            .filter_map(|f| got[i].get(f).copied())
            .collect();
        let mut p = std::mem::take(&mut problems[i]);
        p.sort();
        p.dedup();
        out.services
            .insert(v.key.clone(), Assignment { ips, problems: p });
    }

    for p in &views {
        let mut r = PoolReport {
            invalid: p.invalid.clone(),
            ..PoolReport::default()
        };
        for f in [Family::V4, Family::V6] {
            if !p.has(f) {
                continue;
            }
            let assigned = if p.invalid.is_some() {
                0
            } else {
                claims
                    .held
                    .keys()
                    .filter(|ip| Family::of(**ip) == f && p.contains(**ip))
                    .count() as u128
            };
            let counted = if p.invalid.is_some() {
                0
            } else {
                claims
                    .held
                    .keys()
                    .filter(|ip| {
                        Family::of(**ip) == f
                            && p.contains(**ip)
                            && !(p.avoid_buggy && is_buggy(**ip))
                    })
                    .count() as u128
            };
            let size = if p.invalid.is_some() {
                0
            } else {
                p.usable_size(f)
            };
            r.assigned.insert(f, assigned);
            r.available.insert(f, size.saturating_sub(counted));
        }
        out.pools.insert(p.name.clone(), r);
    }
    out
}

fn families_text(fs: &[Family]) -> String {
    fs.iter()
        .map(|f| f.k8s_name())
        .collect::<Vec<_>>()
        .join(", ")
}

/// A shared address of the Service's sharing key first (the lowest it may take), then the
/// first free address of family `f` in `pools` (in name order). O(1) amortised: the sharing
/// key's addresses come from their index, and each range's search resumes at its cursor.
fn first_fit(claims: &mut Claims, v: &Svc, pools: &[&PoolView], f: Family) -> Option<IpAddr> {
    if let Some(key) = &v.sharing.key {
        let shared = claims.by_key.get(key).and_then(|ips| {
            ips.iter().copied().find(|ip| {
                Family::of(*ip) == f
                    && pools.iter().any(|p| p.contains(*ip))
                    && claims.may_take(*ip, v).is_ok()
            })
        });
        if shared.is_some() {
            return shared;
        }
    }
    for p in pools {
        for r in p.ranges.iter().filter(|r| r.family() == f) {
            if let Some(ip) = claims.first_free(*r, p.avoid_buggy) {
                return Some(ip);
            }
        }
    }
    None
}

/// The status to write for a pool: `report` as counts and the `Valid` and `Exhausted`
/// conditions. A condition keeps its `lastTransitionTime` from `old` while its status stays,
/// so an unchanged pool gives an identical status (and no write).
pub fn pool_status(
    report: &PoolReport,
    old: Option<&AddressPoolStatus>,
    generation: Option<i64>,
    now: &Time,
) -> AddressPoolStatus {
    let count = |m: &BTreeMap<Family, u128>, f| saturating_i64(m.get(&f).copied().unwrap_or(0));
    let cond = |type_: &str, status: bool, reason: &str, message: String| {
        let status = if status { "True" } else { "False" }.to_owned();
        let since = old
            .and_then(|o| o.conditions.iter().find(|c| c.type_ == type_))
            .filter(|c| c.status == status)
            .map_or_else(|| now.clone(), |c| c.last_transition_time.clone());
        Condition {
            type_: type_.into(),
            status,
            reason: reason.into(),
            message,
            last_transition_time: since,
            observed_generation: generation,
        }
    };
    let valid = match &report.invalid {
        None => cond("Valid", true, "Valid", "the pool is in use".into()),
        Some(why) => cond("Valid", false, "Invalid", format!("not used: {why}")),
    };
    let exhausted = report.exhausted();
    let exhausted = if exhausted.is_empty() || report.invalid.is_some() {
        cond(
            "Exhausted",
            false,
            "AddressesFree",
            "free addresses left".into(),
        )
    } else {
        cond(
            "Exhausted",
            true,
            "NoFreeAddress",
            format!("no free {} address left", families_text(&exhausted)),
        )
    };
    AddressPoolStatus {
        assigned_ipv4: count(&report.assigned, Family::V4),
        available_ipv4: count(&report.available, Family::V4),
        assigned_ipv6: count(&report.assigned, Family::V6),
        available_ipv6: count(&report.available, Family::V6),
        conditions: vec![valid, exhausted],
        observed_generation: generation,
    }
}

#[cfg(test)]
mod tests;
