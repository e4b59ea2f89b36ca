//! The placement kept up to date by the watch tasks, off the election thread.
//!
//! Why: planning every Service from scratch on the election thread took 18–26 ms at 10,000
//! Services on 1,000 nodes, per relevant event, and the thread sent no heartbeat meanwhile
//! (issue 29, T5). Each watch task now feeds the [`Planner`] the objects it applied to its
//! store and re-places what they touched (microseconds for a Service or an EndpointSlice); the
//! changes pile up in one [`PlanDelta`] until the election thread takes them, which costs it
//! O(changes).
//!
//! Pitfall: the planner starts with the agent's final [`Selection`] (known only after the
//! watches started, once the class question is settled), from the stores as they are then:
//! until [`PlanFeed::start`] the watch tasks feed nothing. Every event a store applied before
//! the start is in the stores the planner starts from, and every later one is fed, because a
//! task feeds after applying and both sides hold this feed's lock.

use std::sync::{Arc, Mutex, MutexGuard};

use k8s_openapi::api::{
    core::v1::{Node, Service},
    discovery::v1::EndpointSlice,
};
use kube::runtime::{
    reflector::{ObjectRef, Store},
    watcher,
};

use crate::{
    ipam::AddressPool,
    placement::{
        eligibility::Selection,
        planner::{PlanDelta, Planned, Planner},
    },
};

/// The planner and what changed since the election thread last looked. Shared by the watch
/// tasks and the election thread behind one lock ([`SharedPlan`]).
#[derive(Default)]
pub struct PlanFeed {
    planner: Option<Planner>,
    pending: PlanDelta,
}

/// The feed as the watches and the agent share it.
pub type SharedPlan = Arc<Mutex<PlanFeed>>;

/// Locks the feed; a panic elsewhere while it was held leaves a usable planner (each update is
/// a whole object), so a poisoned lock is taken anyway.
pub fn lock(plan: &SharedPlan) -> MutexGuard<'_, PlanFeed> {
    plan.lock().unwrap_or_else(|e| e.into_inner())
}

/// The stores a planner starts from.
pub struct Stores<'a> {
    pub services: &'a Store<Service>,
    pub slices: &'a Store<EndpointSlice>,
    pub nodes: &'a Store<Node>,
    pub pools: &'a Store<AddressPool>,
}

impl PlanFeed {
    /// Starts planning with `sel` from the stores as they are, if not started yet.
    pub fn start(&mut self, sel: &Selection, stores: Stores<'_>) {
        if self.planner.is_some() {
            return;
        }
        let mut p = Planner::new(sel.clone());
        Node::resync(&mut p, stores.nodes.state());
        AddressPool::resync(&mut p, stores.pools.state());
        EndpointSlice::resync(&mut p, stores.slices.state());
        Service::resync(&mut p, stores.services.state());
        p.replan();
        self.planner = Some(p);
        self.pending = PlanDelta::default();
    }

    /// The planner, once started.
    pub fn planner(&self) -> Option<&Planner> {
        self.planner.as_ref()
    }

    /// What changed since the last call (or the start).
    pub fn take(&mut self) -> PlanDelta {
        std::mem::take(&mut self.pending)
    }

    /// Feeds one watch event of `K`, after `store` applied it; whether the placement changed
    /// (the election thread has something to take).
    pub fn feed<K>(&mut self, ev: &watcher::Event<K>, store: &Store<K>) -> bool
    where
        K: Planned + kube::Resource + Clone,
        K::DynamicType: Default + Eq + std::hash::Hash + Clone,
    {
        let Some(p) = self.planner.as_mut() else {
            return false;
        };
        match ev {
            watcher::Event::Apply(o) => {
                // The store's copy: the planner holds no second one.
                let obj = store
                    .get(&ObjectRef::from_obj(o))
                    .unwrap_or_else(|| Arc::new(o.clone()));
                K::apply(p, obj);
            }
            watcher::Event::Delete(o) => K::delete(p, o),
            watcher::Event::InitDone => K::resync(p, store.state()),
            // A relist's objects are buffered by the store until it is done.
            watcher::Event::Init | watcher::Event::InitApply(_) => return false,
        }
        self.pending.merge(p.replan());
        !self.pending.is_empty()
    }
}
