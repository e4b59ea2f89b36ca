//! The placement kept up to date one watched object at a time.
//!
//! Why: [`plan_placed`](super::eligibility::plan_placed) plans every Service from scratch,
//! 26 ms at 10,000 Services on 1,000 nodes (`cargo xtask bench core`), and an agent re-plans on
//! every relevant Service, EndpointSlice, Node and pool event: ten EndpointSlice changes a
//! second would take a quarter of a core. An address's placement depends only on the Services
//! that claim it (their order, sharing keys, endpoints) and on the [`Rules`] (the eligible
//! nodes, pools, nodes' own addresses), so a change to one Service or its endpoints re-places
//! only its own addresses, and only a change of the rules re-places them all.
//!
//! The placement is the same as planning from scratch, by construction (both go through
//! [`Rules::place`]) and by test (random event sequences against `plan_placed`).
//!
//! Pitfall: objects are keyed by namespace/name; feed every applied and deleted object of the
//! four kinds, in the order the watches saw them, and call [`Planner::replan`] before reading.

use std::{
    collections::{BTreeMap, BTreeSet},
    net::IpAddr,
    sync::Arc,
};

use k8s_openapi::api::{
    core::v1::{Node, Service},
    discovery::v1::EndpointSlice,
};

use super::eligibility::{
    self, Claimant, Endpoints, Placement, Problem, Rules, SERVICE_NAME_LABEL, Selection,
    VipPlacement,
};
use crate::{
    election::{NodeSet, ServiceRef},
    ipam::AddressPool,
};

/// What [`Planner::replan`] changed (or several, [merged](PlanDelta::merge)).
#[derive(Clone, Debug, Default, PartialEq)]
pub struct PlanDelta {
    /// Addresses placed anew or differently, as they are placed now.
    pub placed: BTreeMap<IpAddr, VipPlacement>,
    /// Addresses no longer placed.
    pub gone: BTreeSet<IpAddr>,
    /// Whether any problem appeared or went away.
    pub problems_changed: bool,
}

impl PlanDelta {
    /// Nothing changed.
    pub fn is_empty(&self) -> bool {
        self.placed.is_empty() && self.gone.is_empty() && !self.problems_changed
    }

    /// This delta followed by `later`, as one.
    pub fn merge(&mut self, later: PlanDelta) {
        for (ip, v) in later.placed {
            self.gone.remove(&ip);
            self.placed.insert(ip, v);
        }
        for ip in later.gone {
            self.placed.remove(&ip);
            self.gone.insert(ip);
        }
        self.problems_changed |= later.problems_changed;
    }
}

/// The four kinds of object a [`Planner`] is fed, so that a watch can feed it whatever it
/// watches.
pub trait Planned: Sized {
    /// An object was created or changed.
    fn apply(planner: &mut Planner, obj: Arc<Self>);
    /// An object was deleted.
    fn delete(planner: &mut Planner, obj: &Self);
    /// A complete list (after a relist): the objects of this kind not in it are deleted.
    fn resync(planner: &mut Planner, all: Vec<Arc<Self>>);
}

impl Planned for Service {
    fn apply(planner: &mut Planner, obj: Arc<Self>) {
        planner.apply_service(obj);
    }
    fn delete(planner: &mut Planner, obj: &Self) {
        planner.delete_service(obj);
    }
    fn resync(planner: &mut Planner, all: Vec<Arc<Self>>) {
        let keep: BTreeSet<ServiceRef> = all.iter().filter_map(|s| service_ref(s)).collect();
        let gone: Vec<ServiceRef> = planner
            .services
            .keys()
            .filter(|k| !keep.contains(*k))
            .cloned()
            .collect();
        for sref in gone {
            planner.forget_service(&sref);
        }
        for s in all {
            planner.apply_service(s);
        }
    }
}

impl Planned for EndpointSlice {
    fn apply(planner: &mut Planner, obj: Arc<Self>) {
        planner.apply_slice(&obj);
    }
    fn delete(planner: &mut Planner, obj: &Self) {
        planner.delete_slice(obj);
    }
    fn resync(planner: &mut Planner, all: Vec<Arc<Self>>) {
        let keep: BTreeSet<(String, String)> = all.iter().filter_map(|s| slice_key(s)).collect();
        let gone: Vec<(String, String)> = planner
            .slices
            .keys()
            .filter(|k| !keep.contains(*k))
            .cloned()
            .collect();
        for key in gone {
            let before = planner.slices.remove(&key);
            planner.slice_moved(&key, before);
        }
        for s in all {
            planner.apply_slice(&s);
        }
    }
}

impl Planned for Node {
    fn apply(planner: &mut Planner, obj: Arc<Self>) {
        planner.apply_node(obj);
    }
    fn delete(planner: &mut Planner, obj: &Self) {
        planner.delete_node(obj);
    }
    fn resync(planner: &mut Planner, all: Vec<Arc<Self>>) {
        planner.nodes.clear();
        planner.rules_stale = true;
        for n in all {
            planner.apply_node(n);
        }
    }
}

impl Planned for AddressPool {
    fn apply(planner: &mut Planner, obj: Arc<Self>) {
        planner.apply_pool(obj);
    }
    fn delete(planner: &mut Planner, obj: &Self) {
        planner.delete_pool(obj);
    }
    fn resync(planner: &mut Planner, all: Vec<Arc<Self>>) {
        planner.pools.clear();
        planner.rules_stale = true;
        for p in all {
            planner.apply_pool(p);
        }
    }
}

/// One address's placement and its problems.
#[derive(Clone, Debug, Default, PartialEq)]
struct Placed {
    vip: Option<VipPlacement>,
    problems: Vec<Problem>,
}

/// The ready endpoints one EndpointSlice contributes to its Service.
#[derive(Clone, Debug, PartialEq)]
struct SliceEntry {
    service: ServiceRef,
    endpoints: Endpoints,
}

/// The placement of every VIP, updated incrementally. See the module docs.
pub struct Planner {
    sel: Selection,
    nodes: BTreeMap<String, Arc<Node>>,
    pools: BTreeMap<String, Arc<AddressPool>>,
    rules: Rules,
    /// Nodes or pools changed since `rules` were made.
    rules_stale: bool,
    /// Our Services.
    services: BTreeMap<ServiceRef, Arc<Service>>,
    /// The addresses each of our Services claims.
    addresses: BTreeMap<ServiceRef, BTreeSet<IpAddr>>,
    /// The Services claiming each address, in namespace/name order.
    claimants: BTreeMap<IpAddr, BTreeSet<ServiceRef>>,
    /// By (namespace, slice name).
    slices: BTreeMap<(String, String), SliceEntry>,
    /// Each Service's slices, by name.
    slices_of: BTreeMap<ServiceRef, BTreeSet<String>>,
    /// Each Service's ready endpoints (the union of its slices').
    endpoints: BTreeMap<ServiceRef, Endpoints>,
    /// Problems of ingress entries that claim no address, by Service.
    unparsed: BTreeMap<ServiceRef, Vec<Problem>>,
    placed: BTreeMap<IpAddr, Placed>,
    /// Addresses to place again at the next [`Planner::replan`].
    dirty: BTreeSet<IpAddr>,
    /// An unparsed problem changed since the last replan.
    unparsed_changed: bool,
}

impl Planner {
    /// A planner with no objects.
    pub fn new(sel: Selection) -> Self {
        let rules = Rules::new::<Node, AddressPool>(&[], &[], &sel);
        Planner {
            sel,
            nodes: BTreeMap::new(),
            pools: BTreeMap::new(),
            rules,
            rules_stale: false,
            services: BTreeMap::new(),
            addresses: BTreeMap::new(),
            claimants: BTreeMap::new(),
            slices: BTreeMap::new(),
            slices_of: BTreeMap::new(),
            endpoints: BTreeMap::new(),
            unparsed: BTreeMap::new(),
            placed: BTreeMap::new(),
            dirty: BTreeSet::new(),
            unparsed_changed: false,
        }
    }

    // ---- inputs ----

    /// A Service was created or changed.
    pub fn apply_service(&mut self, svc: Arc<Service>) {
        let Some(sref) = service_ref(&svc) else {
            return;
        };
        if eligibility::our_ref(&svc, &self.sel).is_none() {
            self.forget_service(&sref);
            return;
        }
        let now = eligibility::addresses(&svc);
        let before = self.addresses.insert(sref.clone(), now.clone());
        for ip in before.iter().flatten().filter(|ip| !now.contains(ip)) {
            self.unclaim(*ip, &sref);
        }
        for ip in &now {
            self.claimants.entry(*ip).or_default().insert(sref.clone());
            self.dirty.insert(*ip);
        }
        let unparsed = eligibility::unparsed(&sref, &svc);
        if self
            .unparsed
            .get(&sref)
            .map_or(!unparsed.is_empty(), |u| *u != unparsed)
        {
            self.unparsed_changed = true;
        }
        if unparsed.is_empty() {
            self.unparsed.remove(&sref);
        } else {
            self.unparsed.insert(sref.clone(), unparsed);
        }
        self.services.insert(sref, svc);
    }

    /// A Service was deleted.
    pub fn delete_service(&mut self, svc: &Service) {
        if let Some(sref) = service_ref(svc) {
            self.forget_service(&sref);
        }
    }

    /// An EndpointSlice was created or changed.
    pub fn apply_slice(&mut self, slice: &EndpointSlice) {
        let Some(key) = slice_key(slice) else { return };
        let entry = slice_entry(slice);
        let before = match entry {
            Some(e) => self.slices.insert(key.clone(), e),
            None => self.slices.remove(&key),
        };
        self.slice_moved(&key, before);
    }

    /// An EndpointSlice was deleted.
    pub fn delete_slice(&mut self, slice: &EndpointSlice) {
        if let Some(key) = slice_key(slice) {
            let before = self.slices.remove(&key);
            self.slice_moved(&key, before);
        }
    }

    /// A Node was created or changed.
    pub fn apply_node(&mut self, node: Arc<Node>) {
        if let Some(name) = node.metadata.name.clone() {
            self.nodes.insert(name, node);
            self.rules_stale = true;
        }
    }

    /// A Node was deleted.
    pub fn delete_node(&mut self, node: &Node) {
        if let Some(name) = &node.metadata.name {
            self.rules_stale |= self.nodes.remove(name).is_some();
        }
    }

    /// An `AddressPool` was created or changed.
    pub fn apply_pool(&mut self, pool: Arc<AddressPool>) {
        if let Some(name) = pool.metadata.name.clone() {
            self.pools.insert(name, pool);
            self.rules_stale = true;
        }
    }

    /// An `AddressPool` was deleted.
    pub fn delete_pool(&mut self, pool: &AddressPool) {
        if let Some(name) = &pool.metadata.name {
            self.rules_stale |= self.pools.remove(name).is_some();
        }
    }

    // ---- planning ----

    /// Places again what the inputs since the last call changed: O(changed addresses) unless
    /// the rules changed (a Node's readiness, labels or addresses; a pool), then every address.
    pub fn replan(&mut self) -> PlanDelta {
        let mut delta = PlanDelta {
            problems_changed: std::mem::take(&mut self.unparsed_changed),
            ..PlanDelta::default()
        };
        if std::mem::take(&mut self.rules_stale) {
            let nodes: Vec<&Node> = self.nodes.values().map(|n| &**n).collect();
            let pools: Vec<&AddressPool> = self.pools.values().map(|p| &**p).collect();
            let rules = Rules::new(&nodes, &pools, &self.sel);
            // Equal rules: keep the old ones, whose node sets the placed VIPs share.
            if rules != self.rules {
                let substitutions = self.rules.substitutions(&rules);
                self.rules = rules;
                self.rules_changed(substitutions.as_deref(), &mut delta);
            }
        }
        let none = Endpoints::default();
        for ip in std::mem::take(&mut self.dirty) {
            let now = match self.claimants.get(&ip) {
                Some(refs) => {
                    let claimants: Vec<Claimant<'_>> = refs
                        .iter()
                        .filter_map(|sref| {
                            Some(Claimant {
                                sref,
                                svc: self.services.get(sref)?,
                                eps: self.endpoints.get(sref).unwrap_or(&none),
                            })
                        })
                        .collect();
                    let (vip, problems) = self.rules.place(ip, &claimants);
                    Placed { vip, problems }
                }
                None => Placed::default(),
            };
            let before = self.placed.remove(&ip).unwrap_or_default();
            delta.problems_changed |= before.problems != now.problems;
            match (&before.vip, &now.vip) {
                (Some(_), None) => {
                    delta.gone.insert(ip);
                }
                (b, Some(n)) if b.as_ref() != Some(n) => {
                    delta.placed.insert(ip, n.clone());
                }
                _ => {}
            }
            if now != Placed::default() {
                self.placed.insert(ip, now);
            }
        }
        delta
    }

    /// The whole placement as [`plan_placed`](eligibility::plan_placed) gives it (as of the
    /// last [`Planner::replan`]): O(V).
    pub fn placement(&self) -> Placement {
        let mut out = Placement {
            vips: self.placed.values().filter_map(|p| p.vip.clone()).collect(),
            problems: self.problems().cloned().collect(),
        };
        out.problems.sort_by(|a, b| {
            (&a.service, &a.vip, &a.message).cmp(&(&b.service, &b.vip, &b.message))
        });
        out
    }

    /// Every VIP placed, by address.
    pub fn vips(&self) -> impl Iterator<Item = &VipPlacement> {
        self.placed.values().filter_map(|p| p.vip.as_ref())
    }

    /// Every problem, in no particular order.
    pub fn problems(&self) -> impl Iterator<Item = &Problem> {
        self.unparsed
            .values()
            .flatten()
            .chain(self.placed.values().flat_map(|p| &p.problems))
    }

    // ---- bookkeeping ----

    /// The rules changed: every address is placed again, except those whose placement only
    /// takes the new node set in place of the old (see [`Rules::substitutions`]): a Node
    /// turning NotReady changes one set that thousands of VIPs share.
    fn rules_changed(
        &mut self,
        substitutions: Option<&[(NodeSet, NodeSet, bool)]>,
        delta: &mut PlanDelta,
    ) {
        let all: BTreeSet<IpAddr> = self
            .claimants
            .keys()
            .chain(self.placed.keys())
            .copied()
            .collect();
        for ip in all {
            let swapped = substitutions.and_then(|subs| {
                if self.dirty.contains(&ip) {
                    return None; // an event of its own: placed again anyway
                }
                let rules = &self.rules;
                let v = self.placed.get_mut(&ip)?.vip.as_mut()?;
                let prefers = v.pool.as_deref().is_some_and(|p| rules.pool_prefers(p));
                if !v.shared_with.is_empty() || prefers || v.eligible.is_empty() {
                    return None;
                }
                let (_, new, changed) = subs
                    .iter()
                    .find(|(old, _, _)| Arc::ptr_eq(old, &v.eligible))?;
                if new.is_empty() {
                    return None; // a problem to report: placed again
                }
                v.eligible = new.clone();
                Some(changed.then(|| v.clone()))
            });
            match swapped {
                Some(Some(v)) => {
                    delta.placed.insert(ip, v);
                }
                Some(None) => {}
                None => {
                    self.dirty.insert(ip);
                }
            }
        }
    }

    fn forget_service(&mut self, sref: &ServiceRef) {
        self.services.remove(sref);
        for ip in self.addresses.remove(sref).into_iter().flatten() {
            self.unclaim(ip, sref);
        }
        self.unparsed_changed |= self.unparsed.remove(sref).is_some();
    }

    fn unclaim(&mut self, ip: IpAddr, sref: &ServiceRef) {
        if let Some(c) = self.claimants.get_mut(&ip) {
            c.remove(sref);
            if c.is_empty() {
                self.claimants.remove(&ip);
            }
        }
        self.dirty.insert(ip);
    }

    /// A slice changed from `before` to what `slices` now holds under `key` (namespace,
    /// name): the endpoints of the Services it belonged to are summed up again.
    fn slice_moved(&mut self, key: &(String, String), before: Option<SliceEntry>) {
        let name = key.1.as_str();
        let mut touched = Vec::new();
        if let Some(b) = before {
            if let Some(s) = self.slices_of.get_mut(&b.service) {
                s.remove(name);
            }
            touched.push(b.service);
        }
        let now = self.slices.get(key).map(|e| e.service.clone());
        if let Some(sref) = now {
            self.slices_of
                .entry(sref.clone())
                .or_default()
                .insert(name.to_owned());
            touched.push(sref);
        }
        for sref in touched {
            self.sum_endpoints(&sref);
        }
    }

    /// A Service's ready endpoints from its slices; its addresses are placed again if they
    /// changed.
    fn sum_endpoints(&mut self, sref: &ServiceRef) {
        let mut eps = Endpoints::default();
        for name in self.slices_of.get(sref).into_iter().flatten() {
            let key = (sref.namespace.clone(), name.clone());
            if let Some(e) = self.slices.get(&key) {
                eps.add(&e.endpoints);
            }
        }
        if self.slices_of.get(sref).is_some_and(BTreeSet::is_empty) {
            self.slices_of.remove(sref);
        }
        let changed = self
            .endpoints
            .get(sref)
            .map_or(eps != Endpoints::default(), |e| *e != eps);
        if !changed {
            return;
        }
        if eps == Endpoints::default() {
            self.endpoints.remove(sref);
        } else {
            self.endpoints.insert(sref.clone(), eps);
        }
        if let Some(ips) = self.addresses.get(sref) {
            self.dirty.extend(ips.iter().copied());
        }
    }
}

fn service_ref(svc: &Service) -> Option<ServiceRef> {
    Some(ServiceRef {
        namespace: svc.metadata.namespace.clone()?,
        name: svc.metadata.name.clone()?,
    })
}

fn slice_key(slice: &EndpointSlice) -> Option<(String, String)> {
    Some((
        slice.metadata.namespace.clone()?,
        slice.metadata.name.clone()?,
    ))
}

/// What a slice contributes, if it belongs to a Service.
fn slice_entry(slice: &EndpointSlice) -> Option<SliceEntry> {
    let namespace = slice.metadata.namespace.clone()?;
    let name = slice
        .metadata
        .labels
        .as_ref()?
        .get(SERVICE_NAME_LABEL)?
        .clone();
    Some(SliceEntry {
        service: ServiceRef { namespace, name },
        endpoints: Endpoints::of(slice),
    })
}

#[cfg(test)]
mod tests;
