//! The object store: what etcd plus the registry strategies do for the served kinds.
//!
//! One global revision counter stamps every write, like an etcd revision, so a `resourceVersion`
//! is comparable across kinds and a list's `metadata.resourceVersion` is a valid watch start.
//! Every write appends to a bounded event history (the watch cache's ring buffer) and is
//! broadcast to open watches; both happen under the store lock, so a watch that replays the
//! history and then subscribes sees every event exactly once. The write path follows the
//! generic registry: fill type meta, check name/namespace against the URL, optimistic
//! concurrency on `metadata.resourceVersion`, status-subresource isolation, immutable metadata,
//! decode-and-validate, skip no-op updates (no new revision, no event), bump `generation` on
//! `spec` changes.

use std::collections::{BTreeMap, VecDeque};
use std::sync::{Arc, Mutex, MutexGuard};

use k8s_openapi::apimachinery::pkg::apis::meta::v1::Time;
use k8s_openapi::jiff::Timestamp;
use rand::{Rng, SeedableRng};
use rand_chacha::ChaCha8Rng;
use serde_json::{Map, Value, json};
use tokio::sync::broadcast;

use super::resources::{RESOURCES, ResourceType};
use super::selectors::Selectors;
use super::status::ApiError;
use super::validate::{self, Cause};

/// A store key: resource index, namespace (empty for cluster-scoped), name.
pub(crate) type ObjKey = (usize, String, String);

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum EventType {
    Added,
    Modified,
    Deleted,
}

/// One committed write.
#[derive(Debug)]
pub(crate) struct LogEvent {
    pub rv: u64,
    pub res: usize,
    pub namespace: String,
    pub kind: EventType,
    /// The new object (for deletes: the last state, stamped with the deletion revision).
    pub object: Arc<Value>,
    /// The previous state, for modifications (selectors need both).
    pub prev: Option<Arc<Value>>,
}

/// The object a request addresses.
#[derive(Debug, Clone, Copy)]
pub(crate) struct ObjRef<'a> {
    pub res: usize,
    /// Empty for cluster-scoped kinds.
    pub ns: &'a str,
    pub name: &'a str,
}

/// Which part of an object a write addresses.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Sub {
    Main,
    Status,
}

/// Delete preconditions (`DeleteOptions.preconditions`).
#[derive(Debug, Clone, Default)]
pub(crate) struct Preconditions {
    pub uid: Option<String>,
    pub resource_version: Option<String>,
}

/// Where a watch starts.
#[derive(Debug, Clone, Copy)]
pub(crate) enum WatchFrom {
    /// Synthesise ADDED events for the current state.
    Now,
    /// Replay the history after this revision.
    After(u64),
}

/// A watch's starting point: the events to send first, and the live feed after them.
pub(crate) struct WatchStart {
    pub initial: Vec<Arc<LogEvent>>,
    pub rv: u64,
    pub rx: broadcast::Receiver<Arc<LogEvent>>,
}

/// Counters for the admin API.
#[derive(Debug, Clone, Copy, serde::Serialize)]
pub(crate) struct StoreStats {
    pub resource_version: u64,
    pub objects: usize,
    pub history: usize,
    pub oldest_watchable: u64,
}

struct Inner {
    rv: u64,
    objects: BTreeMap<ObjKey, Arc<Value>>,
    history: VecDeque<Arc<LogEvent>>,
    history_limit: usize,
    /// Watches may start from any revision ≥ `floor`.
    floor: u64,
    rng: ChaCha8Rng,
}

pub(crate) struct Store {
    inner: Mutex<Inner>,
    tx: broadcast::Sender<Arc<LogEvent>>,
}

fn rv_of(obj: &Value) -> &str {
    obj["metadata"]["resourceVersion"].as_str().unwrap_or("")
}

fn meta_mut(obj: &mut Value) -> &mut Map<String, Value> {
    if !obj["metadata"].is_object() {
        obj["metadata"] = json!({});
    }
    obj["metadata"]
        .as_object_mut()
        .expect("metadata was just made an object")
}

fn set_or_remove(obj: &mut Value, key: &str, value: Value) {
    if let Some(map) = obj.as_object_mut() {
        if value.is_null() {
            map.remove(key);
        } else {
            map.insert(key.to_string(), value);
        }
    }
}

/// Fill `apiVersion`/`kind` from the URL when absent; reject a body of another type.
fn fill_type(res: &ResourceType, obj: &mut Value) -> Result<(), ApiError> {
    let Some(map) = obj.as_object_mut() else {
        return Err(ApiError::bad_request(
            "the body of the request was not a JSON object",
        ));
    };
    let api_version = res.api_version();
    for (field, want) in [("apiVersion", api_version.as_str()), ("kind", res.kind)] {
        match map.get(field).and_then(Value::as_str) {
            None | Some("") => {
                map.insert(field.to_string(), Value::String(want.to_string()));
            }
            Some(have) if have != want => {
                return Err(ApiError::bad_request(format!(
                    "the API version in the data ({}/{}) does not match the expected API version ({api_version}/{})",
                    map.get("apiVersion").and_then(Value::as_str).unwrap_or(""),
                    map.get("kind").and_then(Value::as_str).unwrap_or(""),
                    res.kind
                )));
            }
            Some(_) => {}
        }
    }
    Ok(())
}

/// Check the body's namespace against the URL's, filling it in when absent.
fn fill_namespace(res: &ResourceType, obj: &mut Value, ns: &str) -> Result<(), ApiError> {
    let meta = meta_mut(obj);
    if !res.namespaced {
        meta.remove("namespace");
        return Ok(());
    }
    match meta.get("namespace").and_then(Value::as_str) {
        None | Some("") => {
            meta.insert("namespace".into(), Value::String(ns.to_string()));
            Ok(())
        }
        Some(have) if have != ns => Err(ApiError::bad_request(
            "the namespace of the provided object does not match the namespace sent on the request",
        )),
        Some(_) => Ok(()),
    }
}

/// Decode through the typed schema, then run the semantic checks.
fn decode_and_validate(res: &ResourceType, obj: Value, name: &str) -> Result<Value, ApiError> {
    let obj = (res.decode)(obj).map_err(|e| {
        ApiError::bad_request(format!(
            "{} in version \"{}\" cannot be handled as a {}: {e}",
            res.kind, res.version, res.kind
        ))
    })?;
    let mut causes = validate::object_meta(&obj, res.name_rule);
    causes.extend((res.check)(&obj));
    if causes.is_empty() {
        Ok(obj)
    } else {
        Err(ApiError::invalid(res, name, causes))
    }
}

fn now() -> Value {
    serde_json::to_value(Time(Timestamp::now())).unwrap_or(Value::Null)
}

impl Inner {
    fn new_uid(&mut self) -> String {
        let a: u64 = self.rng.random();
        let b: u64 = self.rng.random();
        // RFC 9562 §5.4: version 4, variant 0b10.
        let a = (a & !0xf000) | 0x4000;
        let b = (b & !(0b11 << 62)) | (0b10 << 62);
        format!(
            "{:08x}-{:04x}-{:04x}-{:04x}-{:012x}",
            a >> 32,
            (a >> 16) & 0xffff,
            a & 0xffff,
            b >> 48,
            b & 0xffff_ffff_ffff
        )
    }

    /// `names.SimpleNameGenerator`: five characters from a vowel-free alphabet.
    fn generate_name(&mut self, res: usize, ns: &str, base: &str) -> String {
        const ALPHABET: &[u8] = b"bcdfghjklmnpqrstvwxz2456789";
        loop {
            let suffix: String = (0..5)
                .map(|_| ALPHABET[self.rng.random_range(0..ALPHABET.len())] as char)
                .collect();
            let name = format!("{base}{suffix}");
            if !self
                .objects
                .contains_key(&(res, ns.to_string(), name.clone()))
            {
                return name;
            }
        }
    }

    fn record(&mut self, tx: &broadcast::Sender<Arc<LogEvent>>, event: LogEvent) {
        let event = Arc::new(event);
        self.history.push_back(event.clone());
        while self.history.len() > self.history_limit {
            if let Some(old) = self.history.pop_front() {
                self.floor = old.rv;
            }
        }
        // No receivers is fine: nobody is watching.
        let _ = tx.send(event);
    }

    fn get(&self, res: usize, ns: &str, name: &str) -> Result<Arc<Value>, ApiError> {
        self.objects
            .get(&(res, ns.to_string(), name.to_string()))
            .cloned()
            .ok_or_else(|| ApiError::not_found(&RESOURCES[res], name))
    }
}

impl Store {
    pub fn new(history_limit: usize, seed: u64) -> Self {
        let (tx, _) = broadcast::channel(1 << 16);
        let inner = Inner {
            rv: 0,
            objects: BTreeMap::new(),
            history: VecDeque::new(),
            history_limit,
            floor: 0,
            rng: ChaCha8Rng::seed_from_u64(seed),
        };
        Self {
            inner: Mutex::new(inner),
            tx,
        }
    }

    fn lock(&self) -> MutexGuard<'_, Inner> {
        self.inner.lock().unwrap_or_else(|e| e.into_inner())
    }

    pub fn stats(&self) -> StoreStats {
        let inner = self.lock();
        StoreStats {
            resource_version: inner.rv,
            objects: inner.objects.len(),
            history: inner.history.len(),
            oldest_watchable: inner.floor,
        }
    }

    pub fn get(&self, res: usize, ns: &str, name: &str) -> Result<Arc<Value>, ApiError> {
        self.lock().get(res, ns, name)
    }

    /// The matching objects in key order (namespace, name) and the current revision.
    pub fn list(
        &self,
        res: usize,
        ns: Option<&str>,
        selectors: &Selectors,
    ) -> (u64, Vec<Arc<Value>>) {
        let inner = self.lock();
        let items = inner
            .objects
            .iter()
            .filter(|((r, n, _), _)| *r == res && ns.is_none_or(|ns| ns == n))
            .filter(|(_, obj)| selectors.matches(obj))
            .map(|(_, obj)| obj.clone())
            .collect();
        (inner.rv, items)
    }

    pub fn create(
        &self,
        res: usize,
        ns: &str,
        body: Value,
        dry_run: bool,
    ) -> Result<Value, ApiError> {
        let mut inner = self.lock();
        self.create_locked(&mut inner, res, ns, body, None, dry_run)
    }

    fn create_locked(
        &self,
        inner: &mut Inner,
        res: usize,
        ns: &str,
        mut obj: Value,
        url_name: Option<&str>,
        dry_run: bool,
    ) -> Result<Value, ApiError> {
        let rt = &RESOURCES[res];
        fill_type(rt, &mut obj)?;
        fill_namespace(rt, &mut obj, ns)?;
        if !rv_of(&obj).is_empty() {
            return Err(ApiError::internal(
                "resourceVersion should not be set on objects to be created",
            ));
        }
        let ns = obj["metadata"]["namespace"]
            .as_str()
            .unwrap_or("")
            .to_string();
        let mut name = obj["metadata"]["name"].as_str().unwrap_or("").to_string();
        if let Some(url_name) = url_name {
            if name.is_empty() {
                name = url_name.to_string();
            } else if name != url_name {
                return Err(ApiError::bad_request(format!(
                    "the name of the object ({name}) does not match the name on the URL ({url_name})"
                )));
            }
        }
        if name.is_empty() {
            match obj["metadata"]["generateName"]
                .as_str()
                .filter(|g| !g.is_empty())
            {
                Some(base) => name = inner.generate_name(res, &ns, base),
                None => {
                    let cause = Cause {
                        reason: "FieldValueRequired",
                        field: "metadata.name".into(),
                        message: "Required value: name or generateName is required".into(),
                    };
                    return Err(ApiError::invalid(rt, "", vec![cause]));
                }
            }
        }
        let uid = inner.new_uid();
        let meta = meta_mut(&mut obj);
        meta.insert("name".into(), Value::String(name.clone()));
        meta.insert("uid".into(), Value::String(uid));
        meta.insert("creationTimestamp".into(), now());
        meta.remove("deletionTimestamp");
        meta.remove("deletionGracePeriodSeconds");
        meta.remove("managedFields");
        if obj.get("spec").is_some() {
            meta_mut(&mut obj).insert("generation".into(), json!(1));
        } else {
            meta_mut(&mut obj).remove("generation");
        }
        if rt.clear_status_on_create {
            set_or_remove(&mut obj, "status", Value::Null);
        }
        if rt.kind == "Namespace" && obj["status"]["phase"].is_null() {
            obj["status"] = json!({"phase": "Active"});
        }
        let mut obj = decode_and_validate(rt, obj, &name)?;
        let key = (res, ns.clone(), name.clone());
        if inner.objects.contains_key(&key) {
            return Err(ApiError::already_exists(rt, &name));
        }
        let rv = inner.rv + 1;
        meta_mut(&mut obj).insert("resourceVersion".into(), Value::String(rv.to_string()));
        if !dry_run {
            inner.rv = rv;
            let obj = Arc::new(obj.clone());
            inner.objects.insert(key, obj.clone());
            let event = LogEvent {
                rv,
                res,
                namespace: ns,
                kind: EventType::Added,
                object: obj,
                prev: None,
            };
            inner.record(&self.tx, event);
        }
        Ok(obj)
    }

    /// Replace (`update`) or transform (`patch`) an existing object. `f` computes the candidate
    /// from the current state; everything else follows the registry's update path.
    pub fn modify(
        &self,
        at: ObjRef<'_>,
        sub: Sub,
        dry_run: bool,
        f: impl FnOnce(&Value) -> Result<Value, ApiError>,
    ) -> Result<Value, ApiError> {
        let mut inner = self.lock();
        let old = inner.get(at.res, at.ns, at.name)?;
        let candidate = f(&old)?;
        self.commit_update(&mut inner, at, sub, dry_run, &old, candidate)
    }

    /// Server-side apply: create when absent (main resource only), else merge the applied
    /// configuration into the live object with `merge`.
    pub fn apply(
        &self,
        at: ObjRef<'_>,
        sub: Sub,
        dry_run: bool,
        applied: Value,
        merge: impl FnOnce(&Value, &Value) -> Value,
    ) -> Result<(Value, bool), ApiError> {
        let mut inner = self.lock();
        match inner.get(at.res, at.ns, at.name) {
            Ok(old) => {
                let candidate = merge(&old, &applied);
                self.commit_update(&mut inner, at, sub, dry_run, &old, candidate)
                    .map(|o| (o, false))
            }
            Err(e) if sub == Sub::Status => Err(e),
            Err(_) => {
                let mut applied = applied;
                if let Some(meta) = applied["metadata"].as_object_mut() {
                    meta.remove("resourceVersion");
                }
                self.create_locked(&mut inner, at.res, at.ns, applied, Some(at.name), dry_run)
                    .map(|o| (o, true))
            }
        }
    }

    fn commit_update(
        &self,
        inner: &mut Inner,
        at: ObjRef<'_>,
        sub: Sub,
        dry_run: bool,
        old: &Arc<Value>,
        mut obj: Value,
    ) -> Result<Value, ApiError> {
        let ObjRef { res, ns, name } = at;
        let rt = &RESOURCES[res];
        fill_type(rt, &mut obj)?;
        fill_namespace(rt, &mut obj, ns)?;
        match obj["metadata"]["name"].as_str() {
            None | Some("") => {
                meta_mut(&mut obj).insert("name".into(), Value::String(name.to_string()));
            }
            Some(have) if have != name => {
                return Err(ApiError::bad_request(format!(
                    "the name of the object ({have}) does not match the name on the URL ({name})"
                )));
            }
            Some(_) => {}
        }
        let wanted_rv = rv_of(&obj);
        if !wanted_rv.is_empty() && wanted_rv != rv_of(old) {
            return Err(ApiError::stale(rt, name));
        }
        // A `metadata.uid` in the body (a patch's, or a PUT's) is a precondition too.
        if let Some(uid) = obj["metadata"]["uid"].as_str().filter(|u| !u.is_empty())
            && Some(uid) != old["metadata"]["uid"].as_str()
        {
            return Err(ApiError::conflict(
                rt,
                name,
                &format!(
                    "Precondition failed: UID in precondition: {uid}, UID in object meta: {}",
                    old["metadata"]["uid"].as_str().unwrap_or("")
                ),
            ));
        }
        if rt.status_subresource {
            match sub {
                Sub::Main => set_or_remove(&mut obj, "status", old["status"].clone()),
                Sub::Status => {
                    let status = obj["status"].clone();
                    obj = (**old).clone();
                    set_or_remove(&mut obj, "status", status);
                }
            }
        }
        let meta = meta_mut(&mut obj);
        for field in ["uid", "creationTimestamp", "generation", "resourceVersion"] {
            match old["metadata"].get(field) {
                Some(v) => meta.insert(field.to_string(), v.clone()),
                None => meta.remove(field),
            };
        }
        meta.remove("managedFields");
        let mut obj = decode_and_validate(rt, obj, name)?;
        if obj == **old {
            // A no-op write: etcd is not touched, no revision, no event.
            return Ok(obj);
        }
        if obj.get("spec") != old.get("spec")
            && let Some(generation) = old["metadata"]["generation"].as_i64()
        {
            meta_mut(&mut obj).insert("generation".into(), json!(generation + 1));
        }
        let rv = inner.rv + 1;
        meta_mut(&mut obj).insert("resourceVersion".into(), Value::String(rv.to_string()));
        if !dry_run {
            inner.rv = rv;
            let new = Arc::new(obj.clone());
            inner
                .objects
                .insert((res, ns.to_string(), name.to_string()), new.clone());
            let event = LogEvent {
                rv,
                res,
                namespace: ns.to_string(),
                kind: EventType::Modified,
                object: new,
                prev: Some(old.clone()),
            };
            inner.record(&self.tx, event);
        }
        Ok(obj)
    }

    /// Delete, returning the last state (stamped with the deletion revision).
    pub fn delete(
        &self,
        res: usize,
        ns: &str,
        name: &str,
        pre: &Preconditions,
        dry_run: bool,
    ) -> Result<Value, ApiError> {
        let mut inner = self.lock();
        self.delete_locked(&mut inner, res, ns, name, pre, dry_run)
    }

    fn delete_locked(
        &self,
        inner: &mut Inner,
        res: usize,
        ns: &str,
        name: &str,
        pre: &Preconditions,
        dry_run: bool,
    ) -> Result<Value, ApiError> {
        let rt = &RESOURCES[res];
        let old = inner.get(res, ns, name)?;
        let uid = old["metadata"]["uid"].as_str().unwrap_or("");
        if let Some(want) = pre.uid.as_deref().filter(|u| *u != uid) {
            let why = format!(
                "Precondition failed: UID in precondition: {want}, UID in object meta: {uid}"
            );
            return Err(ApiError::conflict(rt, name, &why));
        }
        if let Some(want) = pre
            .resource_version
            .as_deref()
            .filter(|v| *v != rv_of(&old))
        {
            let why = format!(
                "Precondition failed: ResourceVersion in precondition: {want}, ResourceVersion in object meta: {}",
                rv_of(&old)
            );
            return Err(ApiError::conflict(rt, name, &why));
        }
        let rv = inner.rv + 1;
        let mut last = (*old).clone();
        meta_mut(&mut last).insert("resourceVersion".into(), Value::String(rv.to_string()));
        if !dry_run {
            inner.rv = rv;
            inner
                .objects
                .remove(&(res, ns.to_string(), name.to_string()));
            let event = LogEvent {
                rv,
                res,
                namespace: ns.to_string(),
                kind: EventType::Deleted,
                object: Arc::new(last.clone()),
                prev: Some(old),
            };
            inner.record(&self.tx, event);
        }
        Ok(last)
    }

    /// Delete every matching object; returns the deleted objects.
    pub fn delete_collection(
        &self,
        res: usize,
        ns: Option<&str>,
        selectors: &Selectors,
        dry_run: bool,
    ) -> Vec<Value> {
        let mut inner = self.lock();
        let keys: Vec<ObjKey> = inner
            .objects
            .iter()
            .filter(|((r, n, _), obj)| {
                *r == res && ns.is_none_or(|ns| ns == n) && selectors.matches(obj)
            })
            .map(|(k, _)| k.clone())
            .collect();
        keys.iter()
            .filter_map(|(r, n, name)| {
                self.delete_locked(&mut inner, *r, n, name, &Preconditions::default(), dry_run)
                    .ok()
            })
            .collect()
    }

    /// Forget the event history: a watch from any earlier revision now gets 410 Expired.
    pub fn compact(&self) -> u64 {
        let mut inner = self.lock();
        inner.history.clear();
        inner.floor = inner.rv;
        inner.rv
    }

    /// Subscribe a watch; fails with 410 when `from` predates the retained history.
    pub fn watch(
        &self,
        res: usize,
        ns: Option<&str>,
        from: WatchFrom,
    ) -> Result<WatchStart, ApiError> {
        let inner = self.lock();
        let in_scope = |r: usize, n: &str| r == res && ns.is_none_or(|ns| ns == n);
        let initial = match from {
            WatchFrom::Now => inner
                .objects
                .iter()
                .filter(|((r, n, _), _)| in_scope(*r, n))
                .map(|((r, n, _), obj)| {
                    Arc::new(LogEvent {
                        rv: rv_of(obj).parse().unwrap_or(0),
                        res: *r,
                        namespace: n.clone(),
                        kind: EventType::Added,
                        object: obj.clone(),
                        prev: None,
                    })
                })
                .collect(),
            WatchFrom::After(rv) if rv < inner.floor => {
                return Err(ApiError::expired(rv, inner.floor + 1));
            }
            WatchFrom::After(rv) => inner
                .history
                .iter()
                .filter(|e| e.rv > rv && in_scope(e.res, &e.namespace))
                .cloned()
                .collect(),
        };
        Ok(WatchStart {
            initial,
            rv: inner.rv,
            rx: self.tx.subscribe(),
        })
    }
}
