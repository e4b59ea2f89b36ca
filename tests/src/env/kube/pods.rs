//! The stand-in kubelets' container runtime: for every registered node, the Pods bound to it
//! (a watch with `fieldSelector spec.nodeName=<node>`, as the kubelet's) are run from the
//! unpacked root file system of their image, with the entrypoint, arguments, environment,
//! volumes, user and capabilities the Pod says, and their status is reported as the kubelet
//! reports it. So `helm install` / `kubectl apply -k` of the real manifests runs the real image
//! (issue 27): nothing of the agent comes from the host but the kernel.
//!
//! How a container is run (one process per container, no shim):
//! * **Image**: an [`ImageRegistry`] maps references (`announcer:0.1.0` is
//!   `docker.io/library/announcer:0.1.0`) to OCI archives, each unpacked once
//!   ([`crate::env::image`]). Each container gets a root of its own made with hard links
//!   (`cp -al`), so files it creates or deletes are its own. An image the registry does not
//!   hold leaves the container `waiting` with `ErrImagePull`: the host's binary is never run
//!   instead.
//! * **Namespaces**: the node's network namespace, for `hostNetwork` Pods and for the others
//!   too (the allocator Deployment's Pods have no network of their own here: their podIP is
//!   the node's, which only matters to what talks to them, and nothing does). A private mount
//!   namespace (`/` made a slave, as `mountPropagation: HostToContainer` would see it), a UTS
//!   namespace (hostname: the node's name with host networking, else the Pod's). No PID
//!   namespace: `/proc` shows the host's processes (the agent looks at none), and the
//!   container's pid is the host's, which is what the tests read `/proc/PID/root` of.
//! * **Mounts**, in the container's mount namespace only (they go away with its last process):
//!   the root bound on itself (remounted read-only with `readOnlyRootFilesystem`), `/proc`,
//!   `/sys` read-only (the node's interfaces, since it is mounted from the node's namespace),
//!   `/dev` a tmpfs with the usual device nodes, then the volumes: `hostPath` mapped into a
//!   per-node "host" directory ([`PodRunner::host_dir`]) so three nodes on one machine do not
//!   share `/var/lib/announcer`, except `/sys/fs/bpf` (and below), which maps to a per-node
//!   directory on the real bpffs ([`PodRunner::bpffs_dir`]: pins need bpffs); `configMap`,
//!   `secret`, `downwardAPI` and `projected` volumes written as files (the projected
//!   ServiceAccount token is a TokenRequest bound to the Pod, as the kubelet's; `ca.crt` comes
//!   from the `kube-root-ca.crt` ConfigMap, or, where the control plane does not run that
//!   publisher, from the control plane's CA file); `emptyDir`.
//! * **Process**: `chroot` into the root, the working directory, then the user (runAsUser /
//!   runAsGroup, else the image's `User`), the bounding, permitted, effective and inheritable
//!   capability sets (the runtime default set, minus `drop`, plus `add`), and
//!   `no_new_privs` unless `allowPrivilegeEscalation`; all between fork and exec. Not done:
//!   seccomp profiles, resource limits (cgroups), liveness probes, `/etc/hosts` and
//!   `/etc/resolv.conf`.
//! * **Environment**: the image's `Env`, `KUBERNETES_SERVICE_HOST`/`PORT` (the API server as
//!   reachable from the node's namespace), then the container's `env` with `fieldRef`s and
//!   `$(VAR)` expansion; command and args as Kubernetes combines them with the image's
//!   Entrypoint and Cmd.
//! * **Status**: phase, hostIP/podIP (the node's InternalIP), init and container statuses with
//!   restart counts, `Ready` from the `httpGet` readiness probe polled from inside the node's
//!   namespace. An exited container is restarted after a short backoff (1 s doubling to 10 s).
//! * **Deletion**: once `deletionTimestamp` is set, SIGTERM, at most the grace period, SIGKILL,
//!   then the Pod is deleted with grace 0 (uid precondition), as the kubelet does; so the real
//!   DaemonSet controller rolls a changed template one node at a time.
//! * **Logs**: `<dir>/logs/<namespace>_<pod>_<container>.log` (stdout and stderr, every
//!   restart appended after a `=====` line).
//!
//! Teardown ([`PodRunner::stop`], also on a panic): every container process is SIGKILLed (its
//! mounts go with its mount namespace), then the per-Pod roots, the unpacked images, the
//! per-node host directories and the per-node bpffs directories are removed. Processes also
//! get a parent-death SIGKILL from the runner's thread.
//!
//! Pods whose every image is one of [`ImageRegistry::leave_alone`] (by default
//! [`super::workloads::POD_IMAGE`]: the trivial endpoint Pods whose status
//! `super::workloads` reports itself) are not touched.

use std::{
    collections::{BTreeMap, BTreeSet},
    ffi::CString,
    fs::File,
    net::{IpAddr, SocketAddr},
    os::{fd::AsRawFd, unix::ffi::OsStrExt, unix::process::CommandExt},
    path::{Path, PathBuf},
    process::{Command, Stdio},
    sync::{
        Arc, Mutex,
        atomic::{AtomicBool, Ordering},
    },
    thread::JoinHandle,
    time::{Duration, Instant},
};

use futures::StreamExt;
use k8s_openapi::api::core::v1::{
    ConfigMap, Container, EnvVar, Pod, Secret, ServiceAccount, Volume,
};
use kube::{
    Api, Client,
    api::{DeleteParams, Patch, PatchParams, PostParams, Preconditions},
    runtime::{WatchStreamExt, reflector, watcher},
};
use serde_json::{Value, json};

use crate::env::{
    image::{ImageError, UnpackedImage},
    process::{Guarded, exit_code},
};

/// How often the runner looks at its Pods and containers.
const TICK: Duration = Duration::from_millis(200);
/// The first restart backoff; doubles per restart up to [`MAX_BACKOFF`].
const FIRST_BACKOFF: Duration = Duration::from_secs(1);
/// The longest restart backoff.
const MAX_BACKOFF: Duration = Duration::from_secs(10);
/// A container that ran this long starts its backoff over.
const BACKOFF_RESET: Duration = Duration::from_secs(20);

/// Why the runner could not do something (reported in the container's status, and logged).
#[derive(Debug, thiserror::Error)]
pub enum PodError {
    /// The image is not in the registry.
    #[error("image {0} is not in the test's image registry")]
    UnknownImage(String),
    /// Unpacking the image failed.
    #[error("{0}")]
    Image(#[from] ImageError),
    /// A file operation failed.
    #[error("{what}: {source}")]
    Io {
        /// What was done.
        what: String,
        /// What happened.
        source: std::io::Error,
    },
    /// The Pod asks for something this runner does not do, or its spec is wrong.
    #[error("{0}")]
    Config(String),
    /// An API request failed.
    #[error("{what}: {source}")]
    Api {
        /// What was asked.
        what: String,
        /// The client's error.
        source: kube::Error,
    },
}

fn io(what: impl Into<String>) -> impl FnOnce(std::io::Error) -> PodError {
    let what = what.into();
    move |source| PodError::Io { what, source }
}

fn api(what: impl Into<String>) -> impl FnOnce(kube::Error) -> PodError {
    let what = what.into();
    move |source| PodError::Api { what, source }
}

/// `name[:tag]` as a runtime resolves it: `announcer:0.1.0` →
/// `docker.io/library/announcer:0.1.0`, no tag → `:latest`.
pub fn normalize_ref(reference: &str) -> String {
    let (name, suffix) = match reference.split_once('@') {
        Some((n, d)) => (n, format!("@{d}")),
        None => {
            let last = reference.rsplit('/').next().unwrap_or(reference);
            match last.rsplit_once(':') {
                Some((_, tag)) => (
                    &reference[..reference.len() - tag.len() - 1],
                    format!(":{tag}"),
                ),
                None => (reference, ":latest".to_string()),
            }
        }
    };
    let first = name.split('/').next().unwrap_or(name);
    let has_registry =
        name.contains('/') && (first.contains('.') || first.contains(':') || first == "localhost");
    let full = if has_registry {
        name.to_string()
    } else if name.contains('/') {
        format!("docker.io/{name}")
    } else {
        format!("docker.io/library/{name}")
    };
    format!("{full}{suffix}")
}

/// The images the stand-in kubelets can "pull": references to OCI archives.
#[derive(Clone, Debug)]
pub struct ImageRegistry {
    archives: BTreeMap<String, PathBuf>,
    leave_alone: BTreeSet<String>,
}

impl Default for ImageRegistry {
    fn default() -> Self {
        ImageRegistry {
            archives: BTreeMap::new(),
            leave_alone: [normalize_ref(super::workloads::POD_IMAGE)].into(),
        }
    }
}

impl ImageRegistry {
    /// An empty registry (that leaves [`super::workloads::POD_IMAGE`] Pods alone).
    pub fn new() -> ImageRegistry {
        ImageRegistry::default()
    }

    /// Serves `archive` as `reference` (normalized: `announcer:0.1.0` is
    /// `docker.io/library/announcer:0.1.0`).
    pub fn with(mut self, reference: &str, archive: &Path) -> ImageRegistry {
        self.archives
            .insert(normalize_ref(reference), archive.to_owned());
        self
    }

    /// Pods whose every container has this image are not run nor reported by the runner.
    pub fn leave_alone(mut self, reference: &str) -> ImageRegistry {
        self.leave_alone.insert(normalize_ref(reference));
        self
    }

    fn archive(&self, reference: &str) -> Option<&Path> {
        self.archives
            .get(&normalize_ref(reference))
            .map(PathBuf::as_path)
    }
}

/// A node whose Pods the runner runs.
#[derive(Clone, Debug)]
pub struct PodNode {
    /// The Node's name.
    pub name: String,
    /// Its network namespace (`/run/netns/...`).
    pub netns: PathBuf,
    /// Its InternalIP: the Pods' hostIP and podIP.
    pub ip: IpAddr,
}

/// What the runner needs.
#[derive(Clone, Debug)]
pub struct PodRunnerConfig {
    /// The images it can run.
    pub images: ImageRegistry,
    /// Its working directory (logs, Pod roots, unpacked images, per-node host directories).
    pub dir: PathBuf,
    /// A directory on bpffs; each node's `/sys/fs/bpf` is `<bpffs>/<node>`.
    pub bpffs: PathBuf,
    /// The API server as the node namespaces reach it (`KUBERNETES_SERVICE_HOST`/`PORT`).
    pub api: SocketAddr,
    /// The CA of the API server (`ca.crt` when no `kube-root-ca.crt` ConfigMap exists).
    pub ca_cert: PathBuf,
    /// An admin kubeconfig for the runner's own client.
    pub kubeconfig: PathBuf,
}

/// One running container, as the tests see it.
#[derive(Clone, Debug)]
pub struct ContainerInfo {
    /// The node it runs on.
    pub node: String,
    /// The Pod's namespace.
    pub namespace: String,
    /// The Pod's name.
    pub pod: String,
    /// The Pod's uid.
    pub uid: String,
    /// The container's name.
    pub container: String,
    /// Whether it is an init container.
    pub init: bool,
    /// Its process id (host pid namespace).
    pub pid: u32,
    /// Its root directory (on the host).
    pub root: PathBuf,
    /// The image reference of the spec.
    pub image: String,
    /// The image's manifest digest.
    pub image_digest: String,
    /// The unpacked image's root file system (what `root` was linked from).
    pub image_rootfs: PathBuf,
    /// Its log file.
    pub log: PathBuf,
    /// How often it was restarted.
    pub restarts: u32,
    /// Whether its readiness probe passes (running, for one without a probe).
    pub ready: bool,
}

type Shared = Arc<Mutex<Vec<ContainerInfo>>>;

/// The running runner; see the module docs. Stopping (or dropping) it kills every container
/// and removes what it made.
pub struct PodRunner {
    cfg: PodRunnerConfig,
    nodes: Vec<PodNode>,
    shared: Shared,
    stop: Arc<AtomicBool>,
    thread: Option<JoinHandle<()>>,
}

impl PodRunner {
    /// Starts running the Pods bound to `nodes`, on a thread of its own (with its own runtime
    /// and client, and the containers' parent-death signal tied to it).
    pub fn start(cfg: PodRunnerConfig, nodes: Vec<PodNode>) -> Result<PodRunner, PodError> {
        for n in &nodes {
            let host = cfg.dir.join("hosts").join(&n.name);
            // What every host has, for `hostPath` volumes of type Directory (the uninstall's
            // /var/lib).
            for d in [
                host.join("var/lib"),
                host.join("etc"),
                cfg.bpffs.join(&n.name),
            ] {
                std::fs::create_dir_all(&d).map_err(io(format!("creating {}", d.display())))?;
            }
        }
        let shared = Shared::default();
        let stop = Arc::new(AtomicBool::new(false));
        let (c, ns, sh, st) = (cfg.clone(), nodes.clone(), shared.clone(), stop.clone());
        let thread = std::thread::Builder::new()
            .name("pod-runner".into())
            .spawn(move || {
                let rt = tokio::runtime::Builder::new_current_thread()
                    .enable_all()
                    .build()
                    .expect("pod runner runtime");
                rt.block_on(run(c, ns, sh, st));
            })
            .map_err(io("spawning the pod runner thread"))?;
        Ok(PodRunner {
            cfg,
            nodes,
            shared,
            stop,
            thread: Some(thread),
        })
    }

    /// Every container running now.
    pub fn containers(&self) -> Vec<ContainerInfo> {
        self.shared.lock().expect("pod runner").clone()
    }

    /// `node`'s `/sys/fs/bpf`: a directory on the real bpffs.
    pub fn bpffs_dir(&self, node: &str) -> PathBuf {
        self.cfg.bpffs.join(node)
    }

    /// `node`'s host root: where its `hostPath` volumes (other than bpffs) live.
    pub fn host_dir(&self, node: &str) -> PathBuf {
        self.cfg.dir.join("hosts").join(node)
    }

    /// The last lines of every container log.
    pub fn log_tails(&self) -> String {
        let mut logs: Vec<PathBuf> = std::fs::read_dir(self.cfg.dir.join("logs"))
            .into_iter()
            .flatten()
            .flatten()
            .map(|e| e.path())
            .collect();
        logs.sort();
        logs.iter()
            .map(|l| {
                format!(
                    "--- {}\n{}\n",
                    l.file_name().unwrap_or_default().to_string_lossy(),
                    crate::env::node::log_tail(l)
                )
            })
            .collect()
    }

    /// Kills every container and removes the Pod roots, the unpacked images, the host and
    /// bpffs directories (idempotent).
    pub fn stop(&mut self) {
        self.stop.store(true, Ordering::Relaxed);
        if let Some(t) = self.thread.take() {
            let _ = t.join();
        }
        for d in ["pods", "images", "hosts"] {
            let _ = std::fs::remove_dir_all(self.cfg.dir.join(d));
        }
        for n in &self.nodes {
            let _ = std::fs::remove_dir_all(self.cfg.bpffs.join(&n.name));
        }
        let _ = std::fs::remove_dir(&self.cfg.bpffs);
    }
}

impl Drop for PodRunner {
    fn drop(&mut self) {
        self.stop();
    }
}

/// A container's process state.
enum Proc {
    /// Not started yet, or waiting (reason, message) until `at`.
    Waiting {
        at: Instant,
        reason: String,
        message: String,
    },
    Running {
        child: Guarded,
        since: Instant,
        started_at: String,
    },
    /// Exited (an init container that succeeded stays so).
    Exited {
        code: i32,
        started_at: String,
        finished_at: String,
    },
}

struct Probe {
    next: Instant,
    inflight: Option<tokio::sync::oneshot::Receiver<bool>>,
    successes: i32,
    failures: i32,
}

struct ContainerRun {
    spec: Container,
    init: bool,
    proc: Proc,
    restarts: u32,
    backoff: Duration,
    last_exit: Option<(i32, String, String)>,
    ready: bool,
    probe: Option<Probe>,
    root: PathBuf,
    log: PathBuf,
    image: Option<UnpackedImage>,
}

struct PodRun {
    pod: Pod,
    node: PodNode,
    dir: PathBuf,
    /// Volumes written (configMap, token, ...): name → directory.
    volumes: Option<BTreeMap<String, PathBuf>>,
    containers: Vec<ContainerRun>,
    start_time: String,
    /// Deleted from the API (watch), not only marked for deletion.
    gone: bool,
    /// SIGTERM sent; SIGKILL at this instant.
    kill_at: Option<Instant>,
    /// The last status sent, and the Ready condition's (value, since).
    sent: Option<Value>,
    ready_since: Option<(bool, String)>,
    init_since: Option<(bool, String)>,
    config_error: Option<String>,
}

fn now_rfc3339() -> String {
    humantime::format_rfc3339_seconds(std::time::SystemTime::now()).to_string()
}

fn pod_name(p: &Pod) -> (String, String, String) {
    (
        p.metadata.namespace.clone().unwrap_or_default(),
        p.metadata.name.clone().unwrap_or_default(),
        p.metadata.uid.clone().unwrap_or_default(),
    )
}

async fn run(cfg: PodRunnerConfig, nodes: Vec<PodNode>, shared: Shared, stop: Arc<AtomicBool>) {
    let client = match super::client_from(&cfg.kubeconfig).await {
        Ok(c) => c,
        Err(e) => {
            tracing::error!("pod runner: no client: {e}");
            return;
        }
    };
    let _ = std::fs::create_dir_all(cfg.dir.join("logs"));
    let mut stores = Vec::new();
    for n in &nodes {
        let (reader, writer) = reflector::store::<Pod>();
        let api: Api<Pod> = Api::all(client.clone());
        let stream = reflector(
            writer,
            watcher(
                api,
                watcher::Config::default().fields(&format!("spec.nodeName={}", n.name)),
            ),
        )
        .default_backoff();
        let name = n.name.clone();
        tokio::spawn(async move {
            let mut stream = std::pin::pin!(stream);
            while let Some(ev) = stream.next().await {
                if let Err(e) = ev {
                    tracing::debug!("pod runner {name}: watch: {e}");
                }
            }
        });
        stores.push((n.clone(), reader));
    }
    let mut runner = Runner {
        cfg,
        client,
        images: BTreeMap::new(),
        pods: BTreeMap::new(),
        done: BTreeSet::new(),
    };
    while !stop.load(Ordering::Relaxed) {
        let mut seen = BTreeSet::new();
        for (node, store) in &stores {
            for pod in store.state() {
                let (_, _, uid) = pod_name(&pod);
                seen.insert(uid.clone());
                if runner.done.contains(&uid) || runner.left_alone(&pod) {
                    continue;
                }
                match runner.pods.get_mut(&uid) {
                    Some(run) => run.pod = (*pod).clone(),
                    None => {
                        let run = runner.new_pod((*pod).clone(), node.clone());
                        runner.pods.insert(uid, run);
                    }
                }
            }
        }
        for (uid, run) in runner.pods.iter_mut() {
            if !seen.contains(uid) {
                run.gone = true;
            }
        }
        let uids: Vec<String> = runner.pods.keys().cloned().collect();
        for uid in uids {
            let mut run = runner.pods.remove(&uid).expect("listed");
            let finished = runner.reconcile(&mut run).await;
            if finished {
                runner.done.insert(uid);
            } else {
                runner.pods.insert(uid, run);
            }
        }
        *shared.lock().expect("pod runner") = runner.infos();
        tokio::time::sleep(TICK).await;
    }
    // Teardown: SIGKILL (and reap) every container; their mounts go with them.
    runner.pods.clear();
    shared.lock().expect("pod runner").clear();
}

struct Runner {
    cfg: PodRunnerConfig,
    client: Client,
    /// Normalized reference → unpacked image.
    images: BTreeMap<String, UnpackedImage>,
    pods: BTreeMap<String, PodRun>,
    /// Pods finished (deleted): never run again.
    done: BTreeSet<String>,
}

impl Runner {
    fn left_alone(&self, pod: &Pod) -> bool {
        let spec = pod.spec.as_ref();
        let images: Vec<String> = spec
            .into_iter()
            .flat_map(|s| {
                s.containers
                    .iter()
                    .chain(s.init_containers.iter().flatten())
            })
            .map(|c| normalize_ref(c.image.as_deref().unwrap_or_default()))
            .collect();
        !images.is_empty()
            && images
                .iter()
                .all(|i| self.cfg.images.leave_alone.contains(i))
    }

    fn new_pod(&self, pod: Pod, node: PodNode) -> PodRun {
        let (ns, name, uid) = pod_name(&pod);
        let dir = self
            .cfg
            .dir
            .join("pods")
            .join(format!("{ns}_{name}_{}", &uid[..uid.len().min(8)]));
        let spec = pod.spec.clone().unwrap_or_default();
        let mk = |c: &Container, init: bool| ContainerRun {
            spec: c.clone(),
            init,
            proc: Proc::Waiting {
                at: Instant::now(),
                reason: "ContainerCreating".into(),
                message: String::new(),
            },
            restarts: 0,
            backoff: FIRST_BACKOFF,
            last_exit: None,
            ready: false,
            probe: None,
            root: dir.join(&c.name).join("rootfs"),
            log: self
                .cfg
                .dir
                .join("logs")
                .join(format!("{ns}_{name}_{}.log", c.name)),
            image: None,
        };
        let mut containers: Vec<ContainerRun> = spec
            .init_containers
            .iter()
            .flatten()
            .map(|c| mk(c, true))
            .collect();
        containers.extend(spec.containers.iter().map(|c| mk(c, false)));
        PodRun {
            pod,
            node,
            dir,
            volumes: None,
            containers,
            start_time: now_rfc3339(),
            gone: false,
            kill_at: None,
            sent: None,
            ready_since: None,
            init_since: None,
            config_error: None,
        }
    }

    fn infos(&self) -> Vec<ContainerInfo> {
        let mut out = Vec::new();
        for run in self.pods.values() {
            let (ns, name, uid) = pod_name(&run.pod);
            for c in &run.containers {
                if let (Proc::Running { child, .. }, Some(image)) = (&c.proc, &c.image) {
                    out.push(ContainerInfo {
                        node: run.node.name.clone(),
                        namespace: ns.clone(),
                        pod: name.clone(),
                        uid: uid.clone(),
                        container: c.spec.name.clone(),
                        init: c.init,
                        pid: child.id(),
                        root: c.root.clone(),
                        image: c.spec.image.clone().unwrap_or_default(),
                        image_digest: image.digest.clone(),
                        image_rootfs: image.rootfs.clone(),
                        log: c.log.clone(),
                        restarts: c.restarts,
                        ready: c.ready,
                    });
                }
            }
        }
        out
    }

    /// One look at `run`: start, reap, restart, probe, terminate, report. True once the Pod
    /// is finished (terminated and deleted).
    async fn reconcile(&mut self, run: &mut PodRun) -> bool {
        if run.gone || run.pod.metadata.deletion_timestamp.is_some() {
            return self.terminate(run).await;
        }
        if run.volumes.is_none() {
            match self.write_volumes(run).await {
                Ok(v) => {
                    run.volumes = Some(v);
                    run.config_error = None;
                }
                Err(e) => {
                    tracing::warn!("pod runner: volumes of {:?}: {e}", pod_name(&run.pod));
                    run.config_error = Some(e.to_string());
                }
            }
        }
        if run.volumes.is_some() {
            self.step_containers(run);
        }
        poll_probes(run);
        self.report(run).await;
        false
    }

    fn step_containers(&mut self, run: &mut PodRun) {
        let now = Instant::now();
        let policy = run
            .pod
            .spec
            .as_ref()
            .and_then(|s| s.restart_policy.clone())
            .unwrap_or_else(|| "Always".into());
        // Init containers one after the other, each to success; then the others together.
        let mut init_done = true;
        for i in 0..run.containers.len() {
            let c = &mut run.containers[i];
            if !c.init && !init_done {
                break;
            }
            // Reap.
            if let Proc::Running {
                child,
                since,
                started_at,
            } = &mut c.proc
                && let Some(status) = child.try_exited()
            {
                let code = exit_code(status);
                let ran = since.elapsed();
                let started_at = started_at.clone();
                let finished_at = now_rfc3339();
                append_log(&c.log, &format!("===== pod runner: exited with {code}"));
                c.ready = false;
                c.probe = None;
                c.last_exit = Some((code, started_at.clone(), finished_at.clone()));
                // A succeeded init container is done; so is any under Never, and a succeeded
                // one under OnFailure.
                if (c.init && code == 0)
                    || policy == "Never"
                    || (policy == "OnFailure" && code == 0)
                {
                    c.proc = Proc::Exited {
                        code,
                        started_at,
                        finished_at,
                    };
                } else {
                    if ran >= BACKOFF_RESET {
                        c.backoff = FIRST_BACKOFF;
                    }
                    c.restarts += 1;
                    c.proc = Proc::Waiting {
                        at: now + c.backoff,
                        reason: "CrashLoopBackOff".into(),
                        message: format!("back-off {:?} restarting failed container", c.backoff),
                    };
                    c.backoff = (c.backoff * 2).min(MAX_BACKOFF);
                }
            }
            let due = matches!(&c.proc, Proc::Waiting { at, .. } if *at <= now);
            if due {
                match self.start_container(run, i) {
                    Ok(()) => {}
                    Err((reason, e)) => {
                        let c = &mut run.containers[i];
                        append_log(&c.log, &format!("===== pod runner: not started: {e}"));
                        c.proc = Proc::Waiting {
                            at: now + c.backoff,
                            reason: reason.into(),
                            message: e.to_string(),
                        };
                        c.backoff = (c.backoff * 2).min(MAX_BACKOFF);
                    }
                }
            }
            let c = &run.containers[i];
            if c.init && !matches!(c.proc, Proc::Exited { code: 0, .. }) {
                init_done = false;
            }
        }
    }

    fn image(&mut self, reference: &str) -> Result<UnpackedImage, PodError> {
        let key = normalize_ref(reference);
        if let Some(i) = self.images.get(&key) {
            return Ok(i.clone());
        }
        let archive = self
            .cfg
            .images
            .archive(reference)
            .ok_or_else(|| PodError::UnknownImage(key.clone()))?
            .to_owned();
        // One directory per archive, so two references to one archive share it.
        let dir = self
            .cfg
            .dir
            .join("images")
            .join(format!("{}", self.images.len()));
        let _ = std::fs::remove_dir_all(&dir);
        let image = UnpackedImage::unpack(&archive, &dir)?;
        self.images.insert(key, image.clone());
        Ok(image)
    }

    /// Starts container `i` of `run`; on failure the waiting reason and why.
    fn start_container(
        &mut self,
        run: &mut PodRun,
        i: usize,
    ) -> Result<(), (&'static str, PodError)> {
        let spec = run.containers[i].spec.clone();
        let reference = spec.image.clone().unwrap_or_default();
        let image = self.image(&reference).map_err(|e| ("ErrImagePull", e))?;
        let c = &mut run.containers[i];
        c.image = Some(image.clone());
        let launch = prepare(run, i, &image, &self.cfg).map_err(|e| ("CreateContainerError", e))?;
        let c = &mut run.containers[i];
        let log = std::fs::OpenOptions::new()
            .create(true)
            .append(true)
            .open(&c.log)
            .map_err(|e| {
                (
                    "CreateContainerError",
                    io(format!("{}", c.log.display()))(e),
                )
            })?;
        append_log(
            &c.log,
            &format!(
                "===== pod runner: starting {:?} (image {reference}, {}), restart {}",
                launch.argv, image.digest, c.restarts
            ),
        );
        let err = log
            .try_clone()
            .map_err(|e| ("CreateContainerError", io("log")(e)))?;
        let argv = launch.argv.clone();
        let mut cmd = launch.command(log, err);
        let child = Guarded::spawn(&mut cmd)
            .map_err(|e| ("RunContainerError", io(format!("starting {argv:?}"))(e)))?;
        let c = &mut run.containers[i];
        c.proc = Proc::Running {
            child,
            since: Instant::now(),
            started_at: now_rfc3339(),
        };
        c.ready = false;
        c.probe = c.spec.readiness_probe.as_ref().map(|p| Probe {
            next: Instant::now()
                + Duration::from_secs(p.initial_delay_seconds.unwrap_or(0).max(0) as u64),
            inflight: None,
            successes: 0,
            failures: 0,
        });
        Ok(())
    }

    /// Writes the Pod's configMap, secret, downwardAPI and projected volumes, creates its
    /// emptyDirs and hostPath directories; name → host directory.
    async fn write_volumes(&self, run: &PodRun) -> Result<BTreeMap<String, PathBuf>, PodError> {
        let (ns, _, _) = pod_name(&run.pod);
        let spec = run.pod.spec.clone().unwrap_or_default();
        let mut out = BTreeMap::new();
        for v in spec.volumes.iter().flatten() {
            let dir = run.dir.join("volumes").join(&v.name);
            let path = self.write_volume(run, &ns, v, &dir).await?;
            out.insert(v.name.clone(), path);
        }
        Ok(out)
    }

    async fn write_volume(
        &self,
        run: &PodRun,
        ns: &str,
        v: &Volume,
        dir: &Path,
    ) -> Result<PathBuf, PodError> {
        let mkdir = |d: &Path| std::fs::create_dir_all(d).map_err(io(format!("{}", d.display())));
        if let Some(h) = &v.host_path {
            let path = self.host_path(&run.node.name, &h.path);
            match h.type_.as_deref() {
                Some("Directory") if !path.is_dir() => {
                    return Err(PodError::Config(format!(
                        "hostPath {} ({}) is not a directory",
                        h.path,
                        path.display()
                    )));
                }
                Some("File" | "FileOrCreate" | "Socket" | "CharDevice" | "BlockDevice") => {
                    return Err(PodError::Config(format!(
                        "hostPath type {:?} is not supported here",
                        h.type_
                    )));
                }
                _ => mkdir(&path)?,
            }
            return Ok(path);
        }
        mkdir(dir)?;
        if v.empty_dir.is_some() {
            return Ok(dir.to_owned());
        }
        let mut files: Vec<(String, Vec<u8>)> = Vec::new();
        if let Some(cm) = &v.config_map {
            let items = cm.items.clone().unwrap_or_default();
            let data = self
                .config_map(ns, &cm.name, cm.optional.unwrap_or(false))
                .await?;
            files.extend(select(data, &items, &cm.name)?);
        } else if let Some(s) = &v.secret {
            let name = s.secret_name.clone().unwrap_or_default();
            let data = self.secret(ns, &name).await?;
            files.extend(select(data, &s.items.clone().unwrap_or_default(), &name)?);
        } else if let Some(d) = &v.downward_api {
            for item in d.items.iter().flatten() {
                let value = match &item.field_ref {
                    Some(f) => field(&run.pod, &run.node, &f.field_path)?,
                    None => return Err(PodError::Config("downwardAPI resourceFieldRef".into())),
                };
                files.push((item.path.clone(), value.into_bytes()));
            }
        } else if let Some(p) = &v.projected {
            for src in p.sources.iter().flatten() {
                if let Some(t) = &src.service_account_token {
                    let token = self.token(&run.pod, t.audience.clone(), t.expiration_seconds);
                    files.push((t.path.clone(), token.await?.into_bytes()));
                }
                if let Some(cm) = &src.config_map {
                    let items = cm.items.clone().unwrap_or_default();
                    let data = match self.config_map(ns, &cm.name, true).await? {
                        // The root CA publisher is not among the controllers the control
                        // plane runs: the CA it would publish.
                        d if d.is_empty() && cm.name == "kube-root-ca.crt" => {
                            let ca = std::fs::read(&self.cfg.ca_cert)
                                .map_err(io(format!("{}", self.cfg.ca_cert.display())))?;
                            BTreeMap::from([("ca.crt".to_string(), ca)])
                        }
                        d => d,
                    };
                    files.extend(select(data, &items, &cm.name)?);
                }
                if let Some(d) = &src.downward_api {
                    for item in d.items.iter().flatten() {
                        if let Some(f) = &item.field_ref {
                            let value = field(&run.pod, &run.node, &f.field_path)?;
                            files.push((item.path.clone(), value.into_bytes()));
                        }
                    }
                }
                if let Some(s) = &src.secret {
                    let data = self.secret(ns, &s.name).await?;
                    files.extend(select(data, &s.items.clone().unwrap_or_default(), &s.name)?);
                }
            }
        } else {
            return Err(PodError::Config(format!(
                "volume {}: a kind this runner does not do",
                v.name
            )));
        }
        for (rel, bytes) in files {
            let path = dir.join(&rel);
            if rel.starts_with('/') || rel.split('/').any(|c| c == "..") {
                return Err(PodError::Config(format!("volume file path {rel}")));
            }
            if let Some(parent) = path.parent() {
                mkdir(parent)?;
            }
            std::fs::write(&path, bytes).map_err(io(format!("{}", path.display())))?;
        }
        Ok(dir.to_owned())
    }

    /// Where `node`'s host path `path` is: under its bpffs directory for `/sys/fs/bpf`, else
    /// under its host directory.
    fn host_path(&self, node: &str, path: &str) -> PathBuf {
        let rel = Path::new(path.trim_start_matches('/'));
        match rel.strip_prefix("sys/fs/bpf") {
            Ok(rest) => self.cfg.bpffs.join(node).join(rest),
            Err(_) => self.cfg.dir.join("hosts").join(node).join(rel),
        }
    }

    async fn config_map(
        &self,
        ns: &str,
        name: &str,
        optional: bool,
    ) -> Result<BTreeMap<String, Vec<u8>>, PodError> {
        let cm = Api::<ConfigMap>::namespaced(self.client.clone(), ns)
            .get_opt(name)
            .await
            .map_err(api(format!("ConfigMap {ns}/{name}")))?;
        let Some(cm) = cm else {
            return if optional {
                Ok(BTreeMap::new())
            } else {
                Err(PodError::Config(format!("ConfigMap {ns}/{name} not found")))
            };
        };
        let mut out: BTreeMap<String, Vec<u8>> = cm
            .data
            .unwrap_or_default()
            .into_iter()
            .map(|(k, v)| (k, v.into_bytes()))
            .collect();
        out.extend(
            cm.binary_data
                .unwrap_or_default()
                .into_iter()
                .map(|(k, v)| (k, v.0)),
        );
        Ok(out)
    }

    async fn secret(&self, ns: &str, name: &str) -> Result<BTreeMap<String, Vec<u8>>, PodError> {
        let s = Api::<Secret>::namespaced(self.client.clone(), ns)
            .get(name)
            .await
            .map_err(api(format!("Secret {ns}/{name}")))?;
        Ok(s.data
            .unwrap_or_default()
            .into_iter()
            .map(|(k, v)| (k, v.0))
            .collect())
    }

    /// A token of the Pod's ServiceAccount bound to the Pod (the kubelet's projection).
    async fn token(
        &self,
        pod: &Pod,
        audience: Option<String>,
        expiration: Option<i64>,
    ) -> Result<String, PodError> {
        use k8s_openapi::api::authentication::v1::{
            BoundObjectReference, TokenRequest, TokenRequestSpec,
        };
        let (ns, name, uid) = pod_name(pod);
        let account = pod
            .spec
            .as_ref()
            .and_then(|s| s.service_account_name.clone())
            .unwrap_or_else(|| "default".into());
        let req = TokenRequest {
            spec: Some(TokenRequestSpec {
                audiences: audience.map(|a| vec![a]),
                bound_object_ref: Some(BoundObjectReference {
                    api_version: Some("v1".into()),
                    kind: Some("Pod".into()),
                    name: Some(name),
                    uid: Some(uid),
                }),
                expiration_seconds: expiration,
                ..Default::default()
            }),
            ..Default::default()
        };
        let resp = Api::<ServiceAccount>::namespaced(self.client.clone(), &ns)
            .create_token_request(&account, &PostParams::default(), &req)
            .await
            .map_err(api(format!("TokenRequest for {ns}/{account}")))?;
        Ok(resp.status.and_then(|s| s.token).unwrap_or_default())
    }

    /// SIGTERM, the grace period, SIGKILL, then the Pod deleted with grace 0. True once done.
    async fn terminate(&mut self, run: &mut PodRun) -> bool {
        let now = Instant::now();
        if run.kill_at.is_none() {
            let grace = run
                .pod
                .metadata
                .deletion_grace_period_seconds
                .or(run
                    .pod
                    .spec
                    .as_ref()
                    .and_then(|s| s.termination_grace_period_seconds))
                .unwrap_or(30)
                .max(0) as u64;
            run.kill_at = Some(now + Duration::from_secs(grace));
            for c in &mut run.containers {
                if let Proc::Running { child, .. } = &c.proc {
                    append_log(&c.log, "===== pod runner: SIGTERM (Pod deleted)");
                    child.signal(libc::SIGTERM);
                }
            }
        }
        let mut running = false;
        for c in &mut run.containers {
            if let Proc::Running { child, .. } = &mut c.proc {
                match child.try_exited() {
                    Some(s) => append_log(
                        &c.log,
                        &format!("===== pod runner: exited with {}", exit_code(s)),
                    ),
                    None => running = true,
                }
                if child.try_exited().is_some() {
                    c.proc = Proc::Waiting {
                        at: far_future(),
                        reason: "Terminated".into(),
                        message: String::new(),
                    };
                }
            }
        }
        if running && run.kill_at.is_some_and(|t| now < t) {
            return false;
        }
        for c in &mut run.containers {
            if let Proc::Running { child, .. } = &mut c.proc {
                append_log(&c.log, "===== pod runner: SIGKILL (grace period over)");
                child.kill();
            }
            c.proc = Proc::Waiting {
                at: far_future(),
                reason: "Terminated".into(),
                message: String::new(),
            };
        }
        if !run.gone {
            let (ns, name, uid) = pod_name(&run.pod);
            let dp = DeleteParams {
                grace_period_seconds: Some(0),
                preconditions: Some(Preconditions {
                    uid: Some(uid),
                    resource_version: None,
                }),
                ..Default::default()
            };
            match Api::<Pod>::namespaced(self.client.clone(), &ns)
                .delete(&name, &dp)
                .await
            {
                Ok(_) => {}
                Err(kube::Error::Api(e)) if e.code == 404 || e.code == 409 => {}
                Err(e) => {
                    tracing::debug!("pod runner: deleting {ns}/{name}: {e}");
                    return false;
                }
            }
        }
        let _ = std::fs::remove_dir_all(&run.dir);
        true
    }

    /// Patches the Pod's status when it changed.
    async fn report(&self, run: &mut PodRun) {
        let status = status_of(run);
        if run.sent.as_ref() == Some(&status) {
            return;
        }
        let (ns, name, _) = pod_name(&run.pod);
        let patch = json!({"status": status});
        match Api::<Pod>::namespaced(self.client.clone(), &ns)
            .patch_status(&name, &PatchParams::default(), &Patch::Strategic(&patch))
            .await
        {
            Ok(_) => run.sent = Some(status),
            Err(e) => tracing::debug!("pod runner: status of {ns}/{name}: {e}"),
        }
    }
}

fn far_future() -> Instant {
    Instant::now() + Duration::from_secs(365 * 24 * 3600)
}

fn append_log(log: &Path, line: &str) {
    use std::io::Write;
    if let Ok(mut f) = std::fs::OpenOptions::new()
        .create(true)
        .append(true)
        .open(log)
    {
        let _ = writeln!(f, "{line}");
    }
}

/// The files of a configMap or secret volume: every key, or the `items` (key → path).
fn select(
    data: BTreeMap<String, Vec<u8>>,
    items: &[k8s_openapi::api::core::v1::KeyToPath],
    what: &str,
) -> Result<Vec<(String, Vec<u8>)>, PodError> {
    if items.is_empty() {
        return Ok(data.into_iter().collect());
    }
    items
        .iter()
        .map(|i| {
            data.get(&i.key)
                .map(|v| (i.path.clone(), v.clone()))
                .ok_or_else(|| PodError::Config(format!("{what} has no key {}", i.key)))
        })
        .collect()
}

/// A `fieldRef`'s value.
fn field(pod: &Pod, node: &PodNode, path: &str) -> Result<String, PodError> {
    let spec = pod.spec.as_ref();
    Ok(match path {
        "metadata.name" => pod.metadata.name.clone().unwrap_or_default(),
        "metadata.namespace" => pod.metadata.namespace.clone().unwrap_or_default(),
        "metadata.uid" => pod.metadata.uid.clone().unwrap_or_default(),
        "spec.nodeName" => spec.and_then(|s| s.node_name.clone()).unwrap_or_default(),
        "spec.serviceAccountName" => spec
            .and_then(|s| s.service_account_name.clone())
            .unwrap_or_default(),
        "status.hostIP" | "status.podIP" => node.ip.to_string(),
        other => {
            if let Some(key) = other
                .strip_prefix("metadata.labels['")
                .and_then(|k| k.strip_suffix("']"))
            {
                return Ok(pod
                    .metadata
                    .labels
                    .as_ref()
                    .and_then(|l| l.get(key).cloned())
                    .unwrap_or_default());
            }
            return Err(PodError::Config(format!(
                "fieldRef {other} is not supported"
            )));
        }
    })
}

/// `$(VAR)` references expanded as Kubernetes does: a defined variable is replaced, an
/// undefined reference is left as written, `$$` is one `$`.
pub fn expand(s: &str, env: &BTreeMap<String, String>) -> String {
    let mut out = String::new();
    let mut rest = s;
    while let Some(pos) = rest.find('$') {
        out.push_str(&rest[..pos]);
        let tail = &rest[pos..];
        if let Some(after) = tail.strip_prefix("$$") {
            out.push('$');
            rest = after;
        } else if let Some(inner) = tail.strip_prefix("$(")
            && let Some(end) = inner.find(')')
            && let Some(v) = env.get(&inner[..end])
        {
            out.push_str(v);
            rest = &inner[end + 1..];
        } else {
            out.push('$');
            rest = &tail[1..];
        }
    }
    out.push_str(rest);
    out
}

/// The names of the capabilities, by number.
const CAPS: [&str; 41] = [
    "CHOWN",
    "DAC_OVERRIDE",
    "DAC_READ_SEARCH",
    "FOWNER",
    "FSETID",
    "KILL",
    "SETGID",
    "SETUID",
    "SETPCAP",
    "LINUX_IMMUTABLE",
    "NET_BIND_SERVICE",
    "NET_BROADCAST",
    "NET_ADMIN",
    "NET_RAW",
    "IPC_LOCK",
    "IPC_OWNER",
    "SYS_MODULE",
    "SYS_RAWIO",
    "SYS_CHROOT",
    "SYS_PTRACE",
    "SYS_PACCT",
    "SYS_ADMIN",
    "SYS_BOOT",
    "SYS_NICE",
    "SYS_RESOURCE",
    "SYS_TIME",
    "SYS_TTY_CONFIG",
    "MKNOD",
    "LEASE",
    "AUDIT_WRITE",
    "AUDIT_CONTROL",
    "SETFCAP",
    "MAC_OVERRIDE",
    "MAC_ADMIN",
    "SYSLOG",
    "WAKE_ALARM",
    "BLOCK_SUSPEND",
    "AUDIT_READ",
    "PERFMON",
    "BPF",
    "CHECKPOINT_RESTORE",
];

/// containerd's default set.
const DEFAULT_CAPS: [&str; 14] = [
    "CHOWN",
    "DAC_OVERRIDE",
    "FSETID",
    "FOWNER",
    "MKNOD",
    "NET_RAW",
    "SETGID",
    "SETUID",
    "SETFCAP",
    "SETPCAP",
    "NET_BIND_SERVICE",
    "SYS_CHROOT",
    "KILL",
    "AUDIT_WRITE",
];

fn cap_mask(names: &[String]) -> Result<u64, PodError> {
    let mut mask = 0u64;
    for n in names {
        let n = n.trim_start_matches("CAP_").to_ascii_uppercase();
        if n == "ALL" {
            mask = (1u64 << CAPS.len()) - 1;
            continue;
        }
        let i = CAPS
            .iter()
            .position(|c| *c == n)
            .ok_or_else(|| PodError::Config(format!("unknown capability {n}")))?;
        mask |= 1 << i;
    }
    Ok(mask)
}

fn cstr(p: impl AsRef<std::ffi::OsStr>) -> Result<CString, PodError> {
    CString::new(p.as_ref().as_bytes()).map_err(|_| PodError::Config("a NUL in a path".into()))
}

/// One step between fork and exec.
enum Step {
    Mount {
        src: Option<CString>,
        target: CString,
        fstype: Option<CString>,
        flags: libc::c_ulong,
        data: Option<CString>,
    },
    Mknod {
        path: CString,
        major: u32,
        minor: u32,
    },
    Mkdir(CString),
    Symlink {
        target: CString,
        link: CString,
    },
}

/// Everything a container's process needs, computed before the fork.
struct Launch {
    netns: File,
    steps: Vec<Step>,
    root: CString,
    workdir: CString,
    hostname: CString,
    uid: u32,
    gid: u32,
    caps: u64,
    no_new_privs: bool,
    argv: Vec<String>,
    env: Vec<(String, String)>,
}

impl Launch {
    fn command(self, out: File, err: File) -> Command {
        let mut cmd = Command::new(&self.argv[0]);
        cmd.args(&self.argv[1..])
            .env_clear()
            .envs(self.env.iter().map(|(k, v)| (k, v)))
            .stdin(Stdio::null())
            .stdout(out)
            .stderr(err);
        // SAFETY: only async-signal-safe syscalls on data prepared before the fork; `self`
        // (moved in) keeps the namespace fd and the strings alive until exec.
        unsafe {
            cmd.pre_exec(move || self.in_child());
        }
        cmd
    }

    /// Runs in the child between fork and exec.
    fn in_child(&self) -> std::io::Result<()> {
        fn check(r: libc::c_int) -> std::io::Result<()> {
            if r < 0 {
                Err(std::io::Error::last_os_error())
            } else {
                Ok(())
            }
        }
        let null = std::ptr::null::<libc::c_char>();
        let opt = |c: &Option<CString>| c.as_ref().map_or(null, |c| c.as_ptr());
        // SAFETY: plain syscalls with valid NUL-terminated strings owned by `self`.
        unsafe {
            check(libc::setns(self.netns.as_raw_fd(), libc::CLONE_NEWNET))?;
            check(libc::unshare(libc::CLONE_NEWNS | libc::CLONE_NEWUTS))?;
            check(libc::mount(
                null,
                c"/".as_ptr(),
                null,
                libc::MS_REC | libc::MS_SLAVE,
                std::ptr::null(),
            ))?;
            for s in &self.steps {
                match s {
                    Step::Mount {
                        src,
                        target,
                        fstype,
                        flags,
                        data,
                    } => check(libc::mount(
                        opt(src),
                        target.as_ptr(),
                        opt(fstype),
                        *flags,
                        opt(data) as *const libc::c_void,
                    ))?,
                    Step::Mknod { path, major, minor } => check(libc::mknod(
                        path.as_ptr(),
                        libc::S_IFCHR | 0o666,
                        libc::makedev(*major, *minor),
                    ))?,
                    Step::Mkdir(p) => check(libc::mkdir(p.as_ptr(), 0o755))?,
                    Step::Symlink { target, link } => {
                        check(libc::symlink(target.as_ptr(), link.as_ptr()))?
                    }
                }
            }
            check(libc::chroot(self.root.as_ptr()))?;
            check(libc::chdir(self.workdir.as_ptr()))?;
            check(libc::sethostname(
                self.hostname.as_ptr(),
                self.hostname.as_bytes().len(),
            ))?;
            let last = CAPS.len() as u64 - 1;
            for cap in 0..=last {
                if self.caps & (1 << cap) == 0
                    && libc::prctl(libc::PR_CAPBSET_DROP, cap, 0, 0, 0) < 0
                {
                    // A capability this kernel does not know.
                    let e = std::io::Error::last_os_error();
                    if e.raw_os_error() != Some(libc::EINVAL) {
                        return Err(e);
                    }
                }
            }
            check(libc::setgroups(0, std::ptr::null()))?;
            check(libc::setresgid(self.gid, self.gid, self.gid))?;
            check(libc::setresuid(self.uid, self.uid, self.uid))?;
            if self.uid == 0 {
                // Root keeps exactly these across exec (bounding and inheritable).
                #[repr(C)]
                struct Header {
                    version: u32,
                    pid: libc::c_int,
                }
                #[repr(C)]
                #[derive(Clone, Copy)]
                struct Data {
                    effective: u32,
                    permitted: u32,
                    inheritable: u32,
                }
                let header = Header {
                    version: 0x2008_0522,
                    pid: 0,
                };
                let (lo, hi) = (self.caps as u32, (self.caps >> 32) as u32);
                let data = [
                    Data {
                        effective: lo,
                        permitted: lo,
                        inheritable: lo,
                    },
                    Data {
                        effective: hi,
                        permitted: hi,
                        inheritable: hi,
                    },
                ];
                check(libc::syscall(libc::SYS_capset, &header, data.as_ptr()) as libc::c_int)?;
            }
            if self.no_new_privs {
                check(libc::prctl(libc::PR_SET_NO_NEW_PRIVS, 1, 0, 0, 0))?;
            }
        }
        Ok(())
    }
}

/// A mount target inside `root` (created, as a directory, if missing), refusing symlinks on
/// the way: a link in the image must not lead a mount out of the root.
fn target_in(root: &Path, path: &str) -> Result<PathBuf, PodError> {
    let mut at = root.to_owned();
    for comp in Path::new(path).components() {
        use std::path::Component;
        match comp {
            Component::RootDir | Component::CurDir => {}
            Component::Normal(c) => {
                at.push(c);
                match std::fs::symlink_metadata(&at) {
                    Ok(m) if m.file_type().is_symlink() => {
                        return Err(PodError::Config(format!(
                            "mount path {path}: {} is a symlink in the image",
                            at.display()
                        )));
                    }
                    Ok(_) => {}
                    Err(_) => std::fs::create_dir(&at).map_err(io(format!("{}", at.display())))?,
                }
            }
            _ => return Err(PodError::Config(format!("mount path {path}"))),
        }
    }
    Ok(at)
}

/// Computes container `i`'s launch: root, mounts, environment, argv, user, capabilities.
fn prepare(
    run: &PodRun,
    i: usize,
    image: &UnpackedImage,
    cfg: &PodRunnerConfig,
) -> Result<Launch, PodError> {
    let c = &run.containers[i];
    let spec = &c.spec;
    let pod_spec = run.pod.spec.clone().unwrap_or_default();
    let ic = image.runtime_config();
    // The container's root: the image linked, once per container.
    if !c.root.exists() {
        let parent = c.root.parent().expect("a parent");
        std::fs::create_dir_all(parent).map_err(io(format!("{}", parent.display())))?;
        let out = Command::new("cp")
            .arg("-al")
            .arg(&image.rootfs)
            .arg(&c.root)
            .output()
            .map_err(io("cp -al"))?;
        if !out.status.success() {
            return Err(PodError::Config(format!(
                "cp -al {} {}: {}",
                image.rootfs.display(),
                c.root.display(),
                String::from_utf8_lossy(&out.stderr)
            )));
        }
    }
    let root = &c.root;
    let p = |t: &Path| cstr(t);
    let mut steps = vec![Step::Mount {
        src: Some(p(root)?),
        target: p(root)?,
        fstype: None,
        flags: libc::MS_BIND | libc::MS_REC,
        data: None,
    }];
    let (proc_, sys, dev) = (
        target_in(root, "/proc")?,
        target_in(root, "/sys")?,
        target_in(root, "/dev")?,
    );
    steps.push(Step::Mount {
        src: Some(cstr("proc")?),
        target: p(&proc_)?,
        fstype: Some(cstr("proc")?),
        flags: libc::MS_NOSUID | libc::MS_NODEV | libc::MS_NOEXEC,
        data: None,
    });
    steps.push(Step::Mount {
        src: Some(cstr("sysfs")?),
        target: p(&sys)?,
        fstype: Some(cstr("sysfs")?),
        flags: libc::MS_NOSUID | libc::MS_NODEV | libc::MS_NOEXEC | libc::MS_RDONLY,
        data: None,
    });
    steps.push(Step::Mount {
        src: Some(cstr("tmpfs")?),
        target: p(&dev)?,
        fstype: Some(cstr("tmpfs")?),
        flags: libc::MS_NOSUID,
        data: Some(cstr("mode=755,size=65536k")?),
    });
    for (name, major, minor) in [
        ("null", 1, 3),
        ("zero", 1, 5),
        ("full", 1, 7),
        ("random", 1, 8),
        ("urandom", 1, 9),
        ("tty", 5, 0),
    ] {
        steps.push(Step::Mknod {
            path: p(&dev.join(name))?,
            major,
            minor,
        });
    }
    steps.push(Step::Mkdir(p(&dev.join("shm"))?));
    steps.push(Step::Mount {
        src: Some(cstr("shm")?),
        target: p(&dev.join("shm"))?,
        fstype: Some(cstr("tmpfs")?),
        flags: libc::MS_NOSUID | libc::MS_NODEV | libc::MS_NOEXEC,
        data: Some(cstr("mode=1777,size=65536k")?),
    });
    for (link, target) in [
        ("fd", "/proc/self/fd"),
        ("stdin", "/proc/self/fd/0"),
        ("stdout", "/proc/self/fd/1"),
        ("stderr", "/proc/self/fd/2"),
    ] {
        steps.push(Step::Symlink {
            target: cstr(target)?,
            link: p(&dev.join(link))?,
        });
    }
    // The volumes, shallowest first.
    let volumes = run.volumes.as_ref().expect("volumes written");
    let mut mounts = spec.volume_mounts.clone().unwrap_or_default();
    mounts.sort_by_key(|m| m.mount_path.matches('/').count());
    for m in &mounts {
        let src = volumes
            .get(&m.name)
            .ok_or_else(|| PodError::Config(format!("no volume {}", m.name)))?;
        let src = match m.sub_path.as_deref() {
            Some(s) if !s.is_empty() => src.join(s),
            _ => src.clone(),
        };
        // Targets below /sys or /dev exist in those file systems once mounted (bpffs' mount
        // point is in sysfs); others are made in the container's root.
        let target = if m.mount_path.starts_with("/sys/") || m.mount_path.starts_with("/dev/") {
            root.join(m.mount_path.trim_start_matches('/'))
        } else {
            target_in(root, &m.mount_path)?
        };
        steps.push(Step::Mount {
            src: Some(p(&src)?),
            target: p(&target)?,
            fstype: None,
            flags: libc::MS_BIND | libc::MS_REC,
            data: None,
        });
        let kind = pod_spec.volumes.iter().flatten().find(|v| v.name == m.name);
        // The kubelet mounts these read-only whatever the Pod says.
        let ro_kind = kind.is_some_and(|v| {
            v.config_map.is_some()
                || v.secret.is_some()
                || v.projected.is_some()
                || v.downward_api.is_some()
        });
        if m.read_only.unwrap_or(false) || ro_kind {
            steps.push(Step::Mount {
                src: None,
                target: p(&target)?,
                fstype: None,
                flags: libc::MS_REMOUNT | libc::MS_BIND | libc::MS_RDONLY,
                data: None,
            });
        }
    }
    let sc = spec.security_context.clone().unwrap_or_default();
    let psc = pod_spec.security_context.clone().unwrap_or_default();
    if sc.read_only_root_filesystem.unwrap_or(false) {
        steps.push(Step::Mount {
            src: None,
            target: p(root)?,
            fstype: None,
            flags: libc::MS_REMOUNT | libc::MS_BIND | libc::MS_RDONLY,
            data: None,
        });
    }

    // The user: the container's, the Pod's, else the image's.
    let image_user = ic["User"].as_str().unwrap_or("");
    let (img_uid, img_gid) = match image_user.split_once(':') {
        Some((u, g)) => (u.parse::<u32>().ok(), g.parse::<u32>().ok()),
        None => (image_user.parse::<u32>().ok(), None),
    };
    let uid = sc
        .run_as_user
        .or(psc.run_as_user)
        .map(|u| u as u32)
        .or(img_uid)
        .unwrap_or(0);
    let gid = sc
        .run_as_group
        .or(psc.run_as_group)
        .map(|g| g as u32)
        .or(if Some(uid) == img_uid { img_gid } else { None })
        .or_else(|| passwd_gid(root, uid))
        .unwrap_or(0);
    if sc.run_as_non_root.or(psc.run_as_non_root) == Some(true) && uid == 0 {
        return Err(PodError::Config(
            "container has runAsNonRoot and image will run as root".into(),
        ));
    }
    let caps = if sc.privileged == Some(true) {
        cap_mask(&["ALL".into()])?
    } else {
        let defaults: Vec<String> = DEFAULT_CAPS.iter().map(|s| s.to_string()).collect();
        let (add, drop) = sc
            .capabilities
            .as_ref()
            .map(|c| {
                (
                    c.add.clone().unwrap_or_default(),
                    c.drop.clone().unwrap_or_default(),
                )
            })
            .unwrap_or_default();
        (cap_mask(&defaults)? & !cap_mask(&drop)?) | cap_mask(&add)?
    };

    // The environment.
    let mut env: Vec<(String, String)> = ic["Env"]
        .as_array()
        .into_iter()
        .flatten()
        .filter_map(|e| e.as_str()?.split_once('='))
        .map(|(k, v)| (k.to_string(), v.to_string()))
        .collect();
    let mut vars: BTreeMap<String, String> = BTreeMap::new();
    for (k, v) in [
        ("KUBERNETES_SERVICE_HOST", cfg.api.ip().to_string()),
        ("KUBERNETES_SERVICE_PORT", cfg.api.port().to_string()),
        ("KUBERNETES_SERVICE_PORT_HTTPS", cfg.api.port().to_string()),
        ("KUBERNETES_PORT", format!("tcp://{}", cfg.api)),
    ] {
        vars.insert(k.into(), v);
    }
    for e in spec.env.iter().flatten() {
        let value = env_value(e, &run.pod, &run.node, &vars)?;
        vars.insert(e.name.clone(), value);
    }
    for (k, v) in &vars {
        env.retain(|(n, _)| n != k);
        env.push((k.clone(), v.clone()));
    }
    let strings = |v: &Value| -> Vec<String> {
        v.as_array()
            .into_iter()
            .flatten()
            .filter_map(|s| s.as_str().map(str::to_owned))
            .collect()
    };
    let (entrypoint, cmd) = (strings(&ic["Entrypoint"]), strings(&ic["Cmd"]));
    let x = |v: &Vec<String>| -> Vec<String> { v.iter().map(|s| expand(s, &vars)).collect() };
    let argv: Vec<String> = match (&spec.command, &spec.args) {
        (Some(c), Some(a)) => [x(c), x(a)].concat(),
        (Some(c), None) => x(c),
        (None, Some(a)) => [entrypoint, x(a)].concat(),
        (None, None) => [entrypoint, cmd].concat(),
    };
    if argv.is_empty() {
        return Err(PodError::Config(
            "no command: the image has no entrypoint".into(),
        ));
    }
    let workdir = spec
        .working_dir
        .clone()
        .or_else(|| ic["WorkingDir"].as_str().map(str::to_owned))
        .filter(|w| !w.is_empty())
        .unwrap_or_else(|| "/".into());
    let host_network = pod_spec.host_network.unwrap_or(false);
    let hostname = if host_network {
        run.node.name.clone()
    } else {
        run.pod.metadata.name.clone().unwrap_or_default()
    };
    let netns = File::open(&run.node.netns).map_err(io(format!("{}", run.node.netns.display())))?;
    Ok(Launch {
        netns,
        steps,
        root: p(root)?,
        workdir: cstr(&workdir)?,
        hostname: cstr(&hostname)?,
        uid,
        gid,
        caps,
        no_new_privs: sc.allow_privilege_escalation == Some(false),
        argv,
        env,
    })
}

/// The primary group of `uid` in the image's `/etc/passwd`.
fn passwd_gid(root: &Path, uid: u32) -> Option<u32> {
    let text = std::fs::read_to_string(root.join("etc/passwd")).ok()?;
    text.lines().find_map(|l| {
        let f: Vec<&str> = l.split(':').collect();
        (f.len() > 3 && f[2].parse::<u32>().ok() == Some(uid)).then(|| f[3].parse().ok())?
    })
}

fn env_value(
    e: &EnvVar,
    pod: &Pod,
    node: &PodNode,
    vars: &BTreeMap<String, String>,
) -> Result<String, PodError> {
    if let Some(v) = &e.value {
        return Ok(expand(v, vars));
    }
    let Some(from) = &e.value_from else {
        return Ok(String::new());
    };
    if let Some(f) = &from.field_ref {
        return field(pod, node, &f.field_path);
    }
    Err(PodError::Config(format!(
        "env {}: only value and fieldRef are supported here (no manifest uses more)",
        e.name
    )))
}

/// Starts due readiness probes and collects finished ones.
fn poll_probes(run: &mut PodRun) {
    let ip = run.node.ip;
    let netns = run.node.netns.clone();
    for c in &mut run.containers {
        if !matches!(c.proc, Proc::Running { .. }) {
            continue;
        }
        let Some(spec) = c.spec.readiness_probe.clone() else {
            c.ready = true;
            continue;
        };
        let Some(probe) = c.probe.as_mut() else {
            continue;
        };
        if let Some(rx) = probe.inflight.as_mut() {
            match rx.try_recv() {
                Ok(ok) => {
                    probe.inflight = None;
                    if ok {
                        probe.successes += 1;
                        probe.failures = 0;
                        if probe.successes >= spec.success_threshold.unwrap_or(1) {
                            c.ready = true;
                        }
                    } else {
                        probe.failures += 1;
                        probe.successes = 0;
                        if probe.failures >= spec.failure_threshold.unwrap_or(3) {
                            c.ready = false;
                        }
                    }
                }
                Err(tokio::sync::oneshot::error::TryRecvError::Empty) => continue,
                Err(_) => probe.inflight = None,
            }
        }
        if Instant::now() < probe.next {
            continue;
        }
        probe.next =
            Instant::now() + Duration::from_secs(spec.period_seconds.unwrap_or(10).max(1) as u64);
        let Some(get) = spec.http_get.clone() else {
            // Only httpGet probes are run; others count as passing.
            c.ready = true;
            continue;
        };
        let port = match get.port {
            k8s_openapi::apimachinery::pkg::util::intstr::IntOrString::Int(p) => p as u16,
            k8s_openapi::apimachinery::pkg::util::intstr::IntOrString::String(name) => c
                .spec
                .ports
                .iter()
                .flatten()
                .find(|p| p.name.as_deref() == Some(name.as_str()))
                .map_or(0, |p| p.container_port as u16),
        };
        let host: IpAddr = get.host.and_then(|h| h.parse().ok()).unwrap_or(ip);
        let url = format!(
            "http://{}/{}",
            SocketAddr::from((host, port)),
            get.path.unwrap_or_default().trim_start_matches('/')
        );
        let timeout = Duration::from_secs(spec.timeout_seconds.unwrap_or(1).max(1) as u64);
        let (tx, rx) = tokio::sync::oneshot::channel();
        probe.inflight = Some(rx);
        let netns = netns.clone();
        std::thread::spawn(move || {
            let ok = File::open(&netns)
                .ok()
                .filter(|f| nix::sched::setns(f, nix::sched::CloneFlags::CLONE_NEWNET).is_ok())
                .is_some_and(|_| {
                    ureq::get(&url)
                        .timeout(timeout)
                        .call()
                        .is_ok_and(|r| (200..400).contains(&r.status()))
                });
            let _ = tx.send(ok);
        });
    }
}

/// The Pod's status as the kubelet reports it.
fn status_of(run: &mut PodRun) -> Value {
    let ip = run.node.ip.to_string();
    let now = now_rfc3339();
    let state = |c: &ContainerRun| -> Value {
        match &c.proc {
            Proc::Running { started_at, .. } => json!({"running": {"startedAt": started_at}}),
            Proc::Exited {
                code,
                started_at,
                finished_at,
            } => json!({"terminated": {
                "exitCode": code,
                "reason": if *code == 0 { "Completed" } else { "Error" },
                "startedAt": started_at, "finishedAt": finished_at,
            }}),
            Proc::Waiting {
                reason, message, ..
            } => {
                let mut w = json!({"reason": reason});
                if !message.is_empty() {
                    w["message"] = json!(message);
                }
                if let Some(e) = &run.config_error {
                    w = json!({"reason": "CreateContainerConfigError", "message": e});
                }
                json!({"waiting": w})
            }
        }
    };
    let statuses = |init: bool| -> Vec<Value> {
        run.containers
            .iter()
            .filter(|c| c.init == init)
            .map(|c| {
                let running = matches!(c.proc, Proc::Running { .. });
                let mut s = json!({
                    "name": c.spec.name,
                    "image": c.spec.image,
                    "imageID": c.image.as_ref().map(|i| i.digest.clone()).unwrap_or_default(),
                    "ready": if init { matches!(c.proc, Proc::Exited { code: 0, .. }) } else { running && c.ready },
                    "started": running,
                    "restartCount": c.restarts,
                    "state": state(c),
                });
                if let Proc::Running { child, .. } = &c.proc {
                    s["containerID"] = json!(format!("announcer-test://{}", child.id()));
                }
                if let Some((code, started, finished)) = &c.last_exit
                    && !matches!(c.proc, Proc::Exited { .. })
                {
                    s["lastState"] = json!({"terminated": {
                        "exitCode": code, "reason": if *code == 0 { "Completed" } else { "Error" },
                        "startedAt": started, "finishedAt": finished,
                    }});
                }
                s
            })
            .collect()
    };
    let init_done = run
        .containers
        .iter()
        .filter(|c| c.init)
        .all(|c| matches!(c.proc, Proc::Exited { code: 0, .. }));
    let mains: Vec<&ContainerRun> = run.containers.iter().filter(|c| !c.init).collect();
    let ready = init_done
        && mains
            .iter()
            .all(|c| matches!(c.proc, Proc::Running { .. }) && c.ready);
    let any_running = mains.iter().any(|c| matches!(c.proc, Proc::Running { .. }));
    if run.ready_since.as_ref().is_none_or(|(r, _)| *r != ready) {
        run.ready_since = Some((ready, now.clone()));
    }
    if run.init_since.as_ref().is_none_or(|(r, _)| *r != init_done) {
        run.init_since = Some((init_done, now.clone()));
    }
    let (r_since, i_since) = (
        run.ready_since.clone().expect("set").1,
        run.init_since.clone().expect("set").1,
    );
    let tf = |b: bool| if b { "True" } else { "False" };
    let mut status = json!({
        "phase": if init_done && any_running { "Running" } else { "Pending" },
        "hostIP": ip, "hostIPs": [{"ip": ip}],
        "podIP": ip, "podIPs": [{"ip": ip}],
        "startTime": run.start_time,
        "conditions": [
            {"type": "Initialized", "status": tf(init_done), "lastTransitionTime": i_since},
            {"type": "ContainersReady", "status": tf(ready), "lastTransitionTime": r_since},
            {"type": "Ready", "status": tf(ready), "lastTransitionTime": r_since},
        ],
        "containerStatuses": statuses(false),
    });
    let init = statuses(true);
    if !init.is_empty() {
        status["initContainerStatuses"] = json!(init);
    }
    status
}

#[cfg(test)]
mod unit {
    use super::*;

    #[test]
    fn references_normalize_as_a_runtime_resolves_them() {
        assert_eq!(
            normalize_ref("announcer:0.1.0"),
            "docker.io/library/announcer:0.1.0"
        );
        assert_eq!(
            normalize_ref("announcer"),
            "docker.io/library/announcer:latest"
        );
        assert_eq!(
            normalize_ref("registry.example.com:5000/a/b:1"),
            "registry.example.com:5000/a/b:1"
        );
        assert_eq!(
            normalize_ref("registry.k8s.io/pause:3.10"),
            "registry.k8s.io/pause:3.10"
        );
        assert_eq!(normalize_ref("me/app"), "docker.io/me/app:latest");
    }

    #[test]
    fn references_expand_as_kubernetes_expands_them() {
        let env: BTreeMap<String, String> =
            [("A".to_string(), "x".to_string())].into_iter().collect();
        assert_eq!(expand("--a=$(A)", &env), "--a=x");
        assert_eq!(expand("$(B)", &env), "$(B)");
        assert_eq!(expand("$$(A)", &env), "$(A)");
        assert_eq!(expand("a$b", &env), "a$b");
        assert_eq!(expand("$(A", &env), "$(A");
    }

    #[test]
    fn capabilities_by_name() {
        assert_eq!(
            cap_mask(&["BPF".into(), "CAP_NET_ADMIN".into()]).unwrap(),
            (1 << 39) | (1 << 12)
        );
        assert!(cap_mask(&["NOPE".into()]).is_err());
    }
}
