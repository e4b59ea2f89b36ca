//! An in-process stand-in for kube-apiserver, faithful for what the announcer agent uses.
//!
//! Why it stays beside the real control plane (`env::kube`, built by `cargo xtask setup`): it
//! starts at once, so the agent tests and the demo use it by default, and it injects the faults a
//! real kube-apiserver cannot be made to show on demand, while the agent is still exercised through
//! the real `kube` client, its watcher, its retry policy, and its error parsing. Where the two are
//! compared, it must behave as the real one does. This server speaks the same HTTP/JSON protocol
//! for the agent's kinds (services, nodes, namespaces, secrets, configmaps, pods, core and
//! `events.k8s.io` events, endpointslices, leases): one global etcd-like revision, optimistic
//! concurrency, status subresources, the four patch types, selectors, and watches with history
//! replay, 410 `Expired`, bookmarks and streaming lists. On top it counts requests per client token
//! and injects faults (latency, errors, outages, watch drops, history compaction) — through
//! [`ApiServerHandle`] in-process and through `/_admin/` for other processes. `tests/APISERVER.md`
//! lists exactly which kube-apiserver behaviours are reproduced and which are not.
//!
//! ```no_run
//! # async fn demo() {
//! use announcer_tests::apiserver::{ApiServer, Fault, OutageMode};
//! let server = ApiServer::builder().start().await.unwrap();
//! let client = server.client("node-a").await.unwrap(); // a kube::Client
//! server.set_faults(vec![Fault::outage(OutageMode::Refuse).for_client("node-a")]);
//! server.shutdown().await;
//! # }
//! ```

mod admin;
mod admission;
mod conn;
mod counts;
mod faults;
mod http;
mod kubeconfig;
mod patch;
mod remote;
mod resources;
mod seed;
mod selectors;
mod status;
mod store;
mod validate;
mod watch;

use std::fmt;
use std::net::SocketAddr;
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::Duration;

use axum::Router;
use serde_json::Value;
use tokio::sync::oneshot;
use tokio::task::JoinHandle;

pub use counts::{ANONYMOUS, CountEntry, Counts, Verb};
pub use faults::{Fault, FaultAction, OutageMode, Scope};
pub use kubeconfig::{CLUSTER, kubeconfig_yaml};
pub use remote::RemoteAdmin;
pub use seed::parse_manifests;
pub use watch::WatchInfo;

use conn::{ConnHandle, KillListener};
use http::Shared;

/// Why the server could not start or a helper failed.
#[derive(Debug)]
pub enum ApiServerError {
    /// Binding the listen address failed.
    Bind(std::io::Error),
    /// Reading or writing a file failed.
    File {
        path: PathBuf,
        source: std::io::Error,
    },
    /// A seed manifest is not valid YAML/JSON objects.
    Manifest(String),
    /// A seed object was rejected (unsupported kind, invalid, duplicate).
    Seed(String),
    /// Building a `kube` client from the generated kubeconfig failed.
    Client(String),
    /// An `/_admin/` request failed.
    Admin(String),
}

impl fmt::Display for ApiServerError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Self::Bind(e) => write!(f, "binding the apiserver listener: {e}"),
            Self::File { path, source } => write!(f, "{}: {source}", path.display()),
            Self::Manifest(e) => write!(f, "parsing seed manifests: {e}"),
            Self::Seed(e) => write!(f, "seeding object {e}"),
            Self::Client(e) => write!(f, "building a kube client: {e}"),
            Self::Admin(e) => write!(f, "apiserver admin request: {e}"),
        }
    }
}

impl std::error::Error for ApiServerError {
    fn source(&self) -> Option<&(dyn std::error::Error + 'static)> {
        match self {
            Self::Bind(e) | Self::File { source: e, .. } => Some(e),
            _ => None,
        }
    }
}

/// The entry point: `ApiServer::builder()…start()`.
pub struct ApiServer;

impl ApiServer {
    pub fn builder() -> ApiServerBuilder {
        ApiServerBuilder::default()
    }
}

/// Server settings; every one has a test-friendly default.
#[derive(Debug, Clone)]
pub struct ApiServerBuilder {
    listen: SocketAddr,
    bookmark_interval: Duration,
    history: usize,
    watch_timeout: Duration,
    fault_seed: u64,
    seed_objects: Vec<Value>,
    extra_listeners: Vec<Arc<std::net::TcpListener>>,
}

impl Default for ApiServerBuilder {
    fn default() -> Self {
        Self {
            listen: SocketAddr::from(([127, 0, 0, 1], 0)),
            bookmark_interval: Duration::from_secs(1),
            history: 10_000,
            watch_timeout: Duration::from_secs(1800),
            fault_seed: 0,
            seed_objects: Vec::new(),
            extra_listeners: Vec::new(),
        }
    }
}

impl ApiServerBuilder {
    /// Listen address (default `127.0.0.1:0`, an ephemeral port).
    pub fn listen(mut self, addr: SocketAddr) -> Self {
        self.listen = addr;
        self
    }

    /// Interval of BOOKMARK events on watches that allow them (default 1 s; kube-apiserver
    /// sends them about once a minute).
    pub fn bookmark_interval(mut self, interval: Duration) -> Self {
        self.bookmark_interval = interval;
        self
    }

    /// How many events the watch history retains (default 10,000); older watch starts get 410.
    pub fn history(mut self, events: usize) -> Self {
        self.history = events;
        self
    }

    /// Watch duration when the request has no `timeoutSeconds` (default 30 min).
    pub fn watch_timeout(mut self, timeout: Duration) -> Self {
        self.watch_timeout = timeout;
        self
    }

    /// Seed of the RNG behind probabilistic error faults, uids and generated names.
    pub fn fault_seed(mut self, seed: u64) -> Self {
        self.fault_seed = seed;
        self
    }

    /// Also serve on this already-bound listener, e.g. one bound inside another network
    /// namespace (a socket stays in the namespace it was created in), so processes there reach
    /// the same server. [`ApiServerHandle::addr`] stays the main listener's address.
    pub fn extra_listener(mut self, listener: std::net::TcpListener) -> Self {
        self.extra_listeners.push(Arc::new(listener));
        self
    }

    /// Objects to create at start (full objects with `apiVersion` and `kind`).
    pub fn seed_objects(mut self, objects: impl IntoIterator<Item = Value>) -> Self {
        self.seed_objects.extend(objects);
        self
    }

    /// Objects to create at start, from a YAML/JSON multi-document file.
    pub fn seed_file(self, path: impl AsRef<Path>) -> Result<Self, ApiServerError> {
        let path = path.as_ref();
        let text = std::fs::read_to_string(path).map_err(|source| ApiServerError::File {
            path: path.to_path_buf(),
            source,
        })?;
        Ok(self.seed_objects(parse_manifests(&text)?))
    }

    /// Bind, seed, and serve in a background task.
    pub async fn start(self) -> Result<ApiServerHandle, ApiServerError> {
        let shared = Arc::new(Shared {
            store: store::Store::new(self.history, self.fault_seed),
            counts: counts::Counters::default(),
            faults: faults::FaultState::new(self.fault_seed),
            watches: Arc::default(),
            bookmark_interval: self.bookmark_interval,
            default_watch_timeout: self.watch_timeout,
        });
        // The namespaces kube-apiserver creates for itself (its system namespaces controller).
        let system = ["default", "kube-system", "kube-public", "kube-node-lease"].map(|n| {
            serde_json::json!({"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": n}})
        });
        seed::load(
            &shared.store,
            system.into_iter().chain(self.seed_objects).collect(),
        )?;
        let listener = tokio::net::TcpListener::bind(self.listen)
            .await
            .map_err(ApiServerError::Bind)?;
        let addr = listener.local_addr().map_err(ApiServerError::Bind)?;
        let mut listeners = vec![listener];
        for extra in &self.extra_listeners {
            let l = extra.try_clone().map_err(ApiServerError::Bind)?;
            l.set_nonblocking(true).map_err(ApiServerError::Bind)?;
            listeners.push(tokio::net::TcpListener::from_std(l).map_err(ApiServerError::Bind)?);
        }
        let router = Router::new()
            .nest("/_admin", admin::router())
            .fallback(http::api)
            .with_state(shared.clone());
        let (stop_tx, stop_rx) = oneshot::channel::<()>();
        let serve = axum::serve(
            KillListener(listeners),
            router.into_make_service_with_connect_info::<ConnHandle>(),
        )
        .with_graceful_shutdown(async move {
            let _ = stop_rx.await;
        });
        let task = tokio::spawn(async move { serve.await });
        tracing::info!(%addr, "apiserver listening");
        Ok(ApiServerHandle {
            addr,
            shared,
            stop: Some(stop_tx),
            task: Some(task),
        })
    }
}

/// A running server. Dropping it stops the server (abruptly); prefer [`Self::shutdown`].
pub struct ApiServerHandle {
    addr: SocketAddr,
    shared: Arc<Shared>,
    stop: Option<oneshot::Sender<()>>,
    task: Option<JoinHandle<std::io::Result<()>>>,
}

impl ApiServerHandle {
    pub fn addr(&self) -> SocketAddr {
        self.addr
    }

    /// `http://127.0.0.1:PORT`.
    pub fn url(&self) -> String {
        format!("http://{}", self.addr)
    }

    /// A kubeconfig for these tokens (see [`kubeconfig_yaml`]).
    pub fn kubeconfig(&self, tokens: &[&str]) -> String {
        kubeconfig_yaml(&self.url(), tokens)
    }

    /// Write a kubeconfig whose only user authenticates with `token`.
    pub fn write_kubeconfig(
        &self,
        path: impl AsRef<Path>,
        token: &str,
    ) -> Result<(), ApiServerError> {
        let path = path.as_ref();
        std::fs::write(path, self.kubeconfig(&[token])).map_err(|source| ApiServerError::File {
            path: path.to_path_buf(),
            source,
        })
    }

    /// The `kube::Config` a kubeconfig for `token` yields (e.g. to turn off `default_retry`).
    pub async fn client_config(&self, token: &str) -> Result<kube::Config, ApiServerError> {
        let kubeconfig = kube::config::Kubeconfig::from_yaml(&self.kubeconfig(&[token]))
            .map_err(|e| ApiServerError::Client(e.to_string()))?;
        kube::Config::from_custom_kubeconfig(
            kubeconfig,
            &kube::config::KubeConfigOptions::default(),
        )
        .await
        .map_err(|e| ApiServerError::Client(e.to_string()))
    }

    /// A `kube::Client` authenticating with `token`, built through the kubeconfig path.
    pub async fn client(&self, token: &str) -> Result<kube::Client, ApiServerError> {
        kube::Client::try_from(self.client_config(token).await?)
            .map_err(|e| ApiServerError::Client(e.to_string()))
    }

    /// The request counters.
    pub fn counts(&self) -> Counts {
        self.shared.counts.snapshot()
    }

    pub fn reset_counts(&self) {
        self.shared.counts.reset();
    }

    /// The active faults.
    pub fn faults(&self) -> Vec<Fault> {
        self.shared.faults.list()
    }

    /// Replace the active faults. An outage also ends the open watches it cuts off.
    pub fn set_faults(&self, faults: Vec<Fault>) {
        self.shared.faults.set(faults.clone());
        admin::drop_cut_off_watches(&self.shared, &faults);
    }

    /// Add one fault to the active ones.
    pub fn add_fault(&self, fault: Fault) {
        self.shared.faults.add(vec![fault.clone()]);
        admin::drop_cut_off_watches(&self.shared, &[fault]);
    }

    pub fn clear_faults(&self) {
        self.shared.faults.set(Vec::new());
    }

    /// Restart the error-fault RNG from `seed`.
    pub fn set_fault_seed(&self, seed: u64) {
        self.shared.faults.reseed(seed);
    }

    /// End the open watch streams now (all, or only `client`'s); returns how many ended.
    pub fn drop_watches(&self, client: Option<&str>) -> usize {
        self.shared.watches.drop_matching(client, None)
    }

    /// The open watch streams.
    pub fn open_watches(&self) -> Vec<WatchInfo> {
        self.shared.watches.list()
    }

    /// Discard the watch history: watches resuming from an earlier revision get 410 Expired.
    /// Returns the current revision.
    pub fn compact(&self) -> u64 {
        self.shared.store.compact()
    }

    /// The current global revision.
    pub fn resource_version(&self) -> u64 {
        self.shared.store.stats().resource_version
    }

    /// Stop: end the watch streams, let in-flight requests finish, close the listener.
    pub async fn shutdown(mut self) {
        if let Some(stop) = self.stop.take() {
            let _ = stop.send(());
        }
        self.shared.watches.drop_matching(None, None);
        if let Some(mut task) = self.task.take() {
            // Keep-alive connections close once idle; give stragglers a moment, then cut.
            if tokio::time::timeout(Duration::from_secs(5), &mut task)
                .await
                .is_err()
            {
                task.abort();
            }
        }
    }
}

impl Drop for ApiServerHandle {
    fn drop(&mut self) {
        if let Some(task) = self.task.take() {
            task.abort();
        }
    }
}
