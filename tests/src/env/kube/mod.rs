//! A real Kubernetes control plane for tests, benches and the demo: etcd, kube-apiserver,
//! kube-controller-manager and kube-scheduler, built from the Go module proxy by `cargo xtask
//! setup` (`target/kube/bin/`), plus a stand-in for the kubelets ([`kubelet`]).
//!
//! Why real: the in-repo API server (`crate::apiserver`) is faithful where we looked, but users
//! run kube-apiserver, with RBAC, admission (the `ValidatingAdmissionPolicy` in `deploy/`),
//! schema validation, the watch cache and etcd compaction. Faults here are real ones: SIGSTOP
//! of kube-apiserver for an outage, a restart, an etcd compaction.
//!
//! What runs, all on 127.0.0.1 of the test process with ports of their own:
//! * etcd (`--unsafe-no-fsync`: a scratch store);
//! * kube-apiserver with RBAC, client-certificate users (one CA, [`certs`]) and a
//!   ServiceAccount signing key, the default admission plugins (ServiceAccount, Priority,
//!   ResourceQuota, PodSecurity, ValidatingAdmissionPolicy, ...);
//! * kube-controller-manager with the controllers that matter here: endpointslice,
//!   serviceaccount and its tokens, namespace, garbage collector, daemonset, deployment and
//!   replicaset (the allocator's Deployment), and node lifecycle
//!   (grace period [`NODE_MONITOR_GRACE`], so a node whose [`kubelet`] stops goes NotReady);
//! * kube-scheduler, which binds the DaemonSet's Pods to the Nodes (nothing runs them unless
//!   [`Kubelets::run_pods`] runs them from their image: [`pods`]).
//!
//! [`KubeControlPlane::serve_in`] makes the API server reachable from a network namespace (the
//! testbed's bridge) through a TCP relay, so agents inside the node namespaces reach it as
//! they would reach a control-plane endpoint.
//!
//! Pitfalls: every child is a [`Guarded`] process of the thread that started the fixture (keep
//! that thread alive as long as the fixture: the test's thread or the runtime's); dropping the
//! fixture kills them and removes the data directory, except when the test panicked (then the
//! logs stay, and their path is in the panic message of whatever waited).

pub mod certs;
pub mod kubelet;
pub mod metallb;
pub mod pods;
pub mod rbac;
pub(crate) mod relay;
pub mod withdrawal;
pub mod workloads;

use std::{
    net::{IpAddr, Ipv4Addr, SocketAddr},
    path::{Path, PathBuf},
    process::{Command, Stdio},
    time::{Duration, Instant},
};

use k8s_openapi::api::{
    authentication::v1::{BoundObjectReference, TokenRequest, TokenRequestSpec},
    core::v1::{Pod, ServiceAccount},
};
use kube::{
    Api, Client,
    api::{ListParams, PostParams},
};
use serde_json::{Value, json};

use crate::{
    env::{
        NAMESPACE,
        process::{Guarded, free_port},
    },
    netns::Netns,
    programs::kube_program,
};

pub use kubelet::Kubelets;

/// The agent's ServiceAccount, as `deploy/` creates it (in [`NAMESPACE`]).
pub const AGENT_SERVICE_ACCOUNT: &str = "announcer";
/// The allocator Deployment's ServiceAccount (deploy/allocator.yaml).
pub const ALLOCATOR_SERVICE_ACCOUNT: &str = "announcer-allocator";
/// The withdrawal controller's ServiceAccount (`deploy/withdrawer.yaml`).
pub const WITHDRAWAL_SERVICE_ACCOUNT: &str = "announcer-withdrawal";

/// The allocator's user on a real API server:
/// `system:serviceaccount:<NAMESPACE>:<ALLOCATOR_SERVICE_ACCOUNT>`.
pub fn allocator_user() -> String {
    format!("system:serviceaccount:{NAMESPACE}:{ALLOCATOR_SERVICE_ACCOUNT}")
}

/// The agents' user on a real API server (audit records, `kubectl --as`):
/// `system:serviceaccount:<NAMESPACE>:<AGENT_SERVICE_ACCOUNT>`.
pub fn agent_user() -> String {
    format!("system:serviceaccount:{NAMESPACE}:{AGENT_SERVICE_ACCOUNT}")
}
/// The withdrawal controller's user on a real API server:
/// `system:serviceaccount:<NAMESPACE>:<WITHDRAWAL_SERVICE_ACCOUNT>`.
pub fn withdrawal_user() -> String {
    format!("system:serviceaccount:{NAMESPACE}:{WITHDRAWAL_SERVICE_ACCOUNT}")
}

/// kube-controller-manager's `--node-monitor-grace-period`: a node whose Lease was last renewed
/// this long ago goes NotReady (Kubernetes' default before 1.32, which the seed's scenario is
/// about; 1.32 raised the default to 50 s).
pub const NODE_MONITOR_GRACE: Duration = Duration::from_secs(40);
/// How long a component may take to become ready.
const START_TIMEOUT: Duration = Duration::from_secs(90);

/// Why the control plane could not start or do what was asked.
#[derive(Debug, thiserror::Error)]
pub enum KubeError {
    /// A file could not be written.
    #[error("{0}")]
    Io(#[from] std::io::Error),
    /// The PKI could not be written.
    #[error("{0}")]
    Pki(#[from] certs::PkiError),
    /// A component did not become ready.
    #[error("{component} did not become ready within {timeout:?}: {detail}; log: {log}")]
    NotReady {
        /// Which one.
        component: &'static str,
        /// How long it had.
        timeout: Duration,
        /// The last error seen.
        detail: String,
        /// Its log file.
        log: PathBuf,
    },
    /// A component exited.
    #[error("{component} exited ({status}); log: {log}")]
    Exited {
        /// Which one.
        component: &'static str,
        /// How.
        status: String,
        /// Its log file.
        log: PathBuf,
    },
    /// A request to the API server failed.
    #[error("{what}: {source}")]
    Api {
        /// What was asked.
        what: String,
        /// The client's error.
        source: kube::Error,
    },
    /// kubectl failed.
    #[error("kubectl {args}: {output}")]
    Kubectl {
        /// Its arguments.
        args: String,
        /// Its stderr and stdout.
        output: String,
    },
    /// An etcd request failed.
    #[error("etcd {what}: {detail}")]
    Etcd {
        /// What was asked.
        what: &'static str,
        /// Why it failed.
        detail: String,
    },
    /// Something did not happen in time.
    #[error("timed out after {0:?} waiting for {1}")]
    Timeout(Duration, String),
}

fn api_err(what: impl Into<String>) -> impl FnOnce(kube::Error) -> KubeError {
    let what = what.into();
    move |source| KubeError::Api { what, source }
}

/// What to start.
#[derive(Clone, Debug, Default)]
pub struct KubeOptions {
    /// Readable part of the data directory's name (use the test's name).
    pub tag: String,
    /// More addresses the serving certificate must name (where [`KubeControlPlane::serve_in`]
    /// will listen).
    pub extra_server_ips: Vec<IpAddr>,
    /// `kubectl apply -k deploy/` once the control plane is up.
    pub apply_deploy: bool,
}

/// A running control plane; see the module docs.
pub struct KubeControlPlane {
    dir: PathBuf,
    pki: certs::Pki,
    admin_kubeconfig: PathBuf,
    etcd_url: String,
    api_port: u16,
    apiserver_args: Vec<String>,
    etcd: Guarded,
    apiserver: Option<Guarded>,
    controller_manager: Option<Guarded>,
    scheduler: Option<Guarded>,
    admin: Client,
    kubelets: Kubelets,
    relays: Vec<relay::Relay>,
    keep_dir: bool,
}

/// The workspace's `deploy/` directory.
pub fn deploy_dir() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .parent()
        .expect("tests/ is in the workspace")
        .join("deploy")
}

/// A kubeconfig for `server` trusting `ca`, as `user` with either a client certificate or a
/// bearer token.
pub fn kubeconfig_yaml(server: &str, ca: &Path, user: &str, auth: &Credentials) -> String {
    let user_entry = match auth {
        Credentials::Cert(c) => json!({
            "client-certificate": c.cert, "client-key": c.key,
        }),
        Credentials::Token(t) => json!({"token": t}),
    };
    let config = json!({
        "apiVersion": "v1",
        "kind": "Config",
        "clusters": [{"name": "announcer-test", "cluster": {
            "server": server, "certificate-authority": ca,
        }}],
        "users": [{"name": user, "user": user_entry}],
        "contexts": [{"name": user, "context": {"cluster": "announcer-test", "user": user}}],
        "current-context": user,
        "preferences": {},
    });
    serde_saphyr::to_string(&config).unwrap_or_default()
}

/// How a kubeconfig's user authenticates.
#[derive(Clone, Debug)]
pub enum Credentials {
    /// A client certificate (CN user, O groups).
    Cert(certs::CertFiles),
    /// A bearer token (a ServiceAccount token).
    Token(String),
}

fn spawn_logged(bin: &Path, args: &[String], log: &Path) -> Result<Guarded, KubeError> {
    let out = std::fs::OpenOptions::new()
        .create(true)
        .append(true)
        .open(log)?;
    let err = out.try_clone()?;
    Ok(Guarded::spawn(
        Command::new(bin)
            .args(args)
            .stdin(Stdio::null())
            .stdout(out)
            .stderr(err),
    )?)
}

fn exited(component: &'static str, child: &mut Guarded, log: &Path) -> Result<(), KubeError> {
    match child.try_exited() {
        Some(status) => Err(KubeError::Exited {
            component,
            status: status.to_string(),
            log: log.to_owned(),
        }),
        None => Ok(()),
    }
}

impl KubeControlPlane {
    /// Starts etcd, kube-apiserver, kube-controller-manager and kube-scheduler, and waits until
    /// the API server is ready (`/readyz`, so RBAC's bootstrap roles exist).
    /// [`Self::start`] with `deploy/` applied and nothing else asked, for a test: panics,
    /// naming `tag`, if it does not start.
    pub async fn start_applied(tag: &str) -> KubeControlPlane {
        KubeControlPlane::start(KubeOptions {
            tag: tag.into(),
            apply_deploy: true,
            ..Default::default()
        })
        .await
        .unwrap_or_else(|e| panic!("the real control plane ({tag}) with deploy/ applied: {e}"))
    }

    pub async fn start(opts: KubeOptions) -> Result<KubeControlPlane, KubeError> {
        let started = Instant::now();
        let etcd_bin = kube_program("etcd");
        let apiserver_bin = kube_program("kube-apiserver");
        // Fail before anything starts if one is missing.
        kube_program("kube-controller-manager");
        kube_program("kube-scheduler");
        let dir = std::env::temp_dir().join(format!(
            "annkube-{}-{}-{}",
            std::process::id(),
            next_id(),
            opts.tag
        ));
        let _ = std::fs::remove_dir_all(&dir);
        std::fs::create_dir_all(dir.join("pki"))?;

        let mut ips = vec![IpAddr::V4(Ipv4Addr::LOCALHOST)];
        ips.extend(opts.extra_server_ips.iter().copied());
        let pki = certs::Pki::create(&dir.join("pki"), &ips)?;

        // etcd.
        let (client_port, peer_port) = (free_port(), free_port());
        let etcd_url = format!("http://127.0.0.1:{client_port}");
        let peer_url = format!("http://127.0.0.1:{peer_port}");
        let etcd_log = dir.join("etcd.log");
        let etcd_args: Vec<String> = vec![
            "--name=test".into(),
            format!("--data-dir={}", dir.join("etcd").display()),
            format!("--listen-client-urls={etcd_url}"),
            format!("--advertise-client-urls={etcd_url}"),
            format!("--listen-peer-urls={peer_url}"),
            format!("--initial-advertise-peer-urls={peer_url}"),
            format!("--initial-cluster=test={peer_url}"),
            "--unsafe-no-fsync".into(),
            "--log-level=warn".into(),
        ];
        let mut etcd = spawn_logged(&etcd_bin, &etcd_args, &etcd_log)?;
        wait_until("etcd", START_TIMEOUT, &etcd_log, || {
            exited("etcd", &mut etcd, &etcd_log)?;
            etcd_get(&etcd_url, "/health").map(|_| ())
        })
        .await?;

        // kube-apiserver.
        let api_port = free_port();
        std::fs::write(dir.join("audit-policy.yaml"), AUDIT_POLICY)?;
        let apiserver_args = apiserver_args(&dir, &pki, &etcd_url, api_port);
        let api_log = dir.join("kube-apiserver.log");
        let apiserver = spawn_logged(&apiserver_bin, &apiserver_args, &api_log)?;

        let admin_cert = pki.client("admin", "admin", &["system:masters"])?;
        let url = format!("https://127.0.0.1:{api_port}");
        let admin_kubeconfig = dir.join("kubeconfig");
        std::fs::write(
            &admin_kubeconfig,
            kubeconfig_yaml(&url, &pki.ca_cert, "admin", &Credentials::Cert(admin_cert)),
        )?;
        let admin = client_from(&admin_kubeconfig).await?;
        let mut cp = KubeControlPlane {
            dir: dir.clone(),
            admin_kubeconfig,
            etcd_url,
            api_port,
            apiserver_args,
            etcd,
            apiserver: Some(apiserver),
            controller_manager: None,
            scheduler: None,
            kubelets: Kubelets::new(admin.clone()),
            admin,
            pki,
            relays: Vec::new(),
            keep_dir: false,
        };
        // Kept when starting fails: the logs say why.
        if let Err(e) = cp.start_components(&dir, opts.apply_deploy).await {
            cp.keep_dir = true;
            return Err(e);
        }
        tracing::info!(
            "control plane up in {:.1} s: {}",
            started.elapsed().as_secs_f64(),
            cp.dir.display()
        );
        Ok(cp)
    }

    /// After etcd and kube-apiserver started: waits for the API server, then starts
    /// kube-controller-manager, kube-scheduler and the kubelets, and applies `deploy/`.
    async fn start_components(&mut self, dir: &Path, apply_deploy: bool) -> Result<(), KubeError> {
        let cm_bin = kube_program("kube-controller-manager");
        let sched_bin = kube_program("kube-scheduler");
        self.wait_apiserver_ready().await?;

        // kube-controller-manager and kube-scheduler, each with its own client certificate.
        let cm_kubeconfig =
            self.component_kubeconfig("kube-controller-manager", "system:kube-controller-manager")?;
        let cm_log = dir.join("kube-controller-manager.log");
        let cm_args = controller_manager_args(&self.pki, &cm_kubeconfig);
        self.controller_manager = Some(spawn_logged(&cm_bin, &cm_args, &cm_log)?);
        let sched_kubeconfig =
            self.component_kubeconfig("kube-scheduler", "system:kube-scheduler")?;
        let sched_log = dir.join("kube-scheduler.log");
        let sched_args = vec![
            format!("--kubeconfig={}", sched_kubeconfig.display()),
            format!("--authentication-kubeconfig={}", sched_kubeconfig.display()),
            format!("--authorization-kubeconfig={}", sched_kubeconfig.display()),
            "--leader-elect=false".into(),
            "--bind-address=127.0.0.1".into(),
            format!("--secure-port={}", free_port()),
        ];
        self.scheduler = Some(spawn_logged(&sched_bin, &sched_args, &sched_log)?);
        self.kubelets.run(self.admin_kubeconfig.clone());
        if apply_deploy {
            self.apply_deploy().await?;
        }
        Ok(())
    }

    async fn wait_apiserver_ready(&mut self) -> Result<(), KubeError> {
        let log = self.dir.join("kube-apiserver.log");
        let client = self.admin.clone();
        let deadline = Instant::now() + START_TIMEOUT;
        let mut last;
        loop {
            if let Some(a) = self.apiserver.as_mut() {
                exited("kube-apiserver", a, &log)?;
            }
            let req = http::Request::get("/readyz")
                .body(Vec::new())
                .expect("a valid request");
            match client.request_text(req).await {
                Ok(body) if body.trim() == "ok" => return Ok(()),
                Ok(body) => last = body,
                Err(e) => last = e.to_string(),
            }
            if Instant::now() > deadline {
                return Err(KubeError::NotReady {
                    component: "kube-apiserver",
                    timeout: START_TIMEOUT,
                    detail: last,
                    log,
                });
            }
            tokio::time::sleep(Duration::from_millis(200)).await;
        }
    }

    fn component_kubeconfig(&self, name: &str, user: &str) -> Result<PathBuf, KubeError> {
        let cert = self.pki.client(name, user, &[])?;
        let path = self.dir.join(format!("{name}.kubeconfig"));
        std::fs::write(
            &path,
            kubeconfig_yaml(
                &self.url(),
                &self.pki.ca_cert,
                user,
                &Credentials::Cert(cert),
            ),
        )?;
        Ok(path)
    }

    /// `https://127.0.0.1:<port>`.
    pub fn url(&self) -> String {
        format!("https://127.0.0.1:{}", self.api_port)
    }

    /// The CA every client must trust.
    pub fn ca_cert(&self) -> &Path {
        &self.pki.ca_cert
    }

    /// The admin kubeconfig (a file named `kubeconfig`; user `admin` in `system:masters`).
    pub fn kubeconfig(&self) -> &Path {
        &self.admin_kubeconfig
    }

    /// Writes `<dir>/<account>.kubeconfig`, a kubeconfig for this server with a token (one
    /// hour, bound to no Pod) of ServiceAccount `account` in [`NAMESPACE`]: what a test runs a
    /// controller or sends a request under that account with. Returns the path.
    pub async fn write_account_kubeconfig(&self, account: &str) -> Result<PathBuf, KubeError> {
        let sa: Api<ServiceAccount> = Api::namespaced(self.client(), NAMESPACE);
        let req = TokenRequest {
            spec: Some(TokenRequestSpec {
                expiration_seconds: Some(3600),
                ..Default::default()
            }),
            ..Default::default()
        };
        let token = sa
            .create_token_request(account, &PostParams::default(), &req)
            .await
            .map_err(api_err(format!("TokenRequest for {account}")))?
            .status
            .and_then(|s| s.token)
            .unwrap_or_default();
        let path = self.dir.join(format!("{account}.kubeconfig"));
        std::fs::write(
            &path,
            kubeconfig_yaml(
                &self.url(),
                self.ca_cert(),
                &format!("system:serviceaccount:{NAMESPACE}:{account}"),
                &Credentials::Token(token),
            ),
        )?;
        Ok(path)
    }

    /// The data directory (logs, PKI, etcd data, kubeconfigs).
    pub fn dir(&self) -> &Path {
        &self.dir
    }

    /// An admin client.
    pub fn client(&self) -> Client {
        self.admin.clone()
    }

    /// The stand-in kubelets.
    pub fn kubelets(&self) -> &Kubelets {
        &self.kubelets
    }

    /// Keeps the data directory after drop (the logs of a failed run).
    pub fn keep_dir(&mut self) {
        self.keep_dir = true;
    }

    /// Runs kubectl with the admin kubeconfig; its stdout.
    pub fn kubectl(&self, args: &[&str]) -> Result<String, KubeError> {
        let out = Command::new(kube_program("kubectl"))
            .arg(format!("--kubeconfig={}", self.admin_kubeconfig.display()))
            .args(args)
            .output()?;
        if out.status.success() {
            Ok(String::from_utf8_lossy(&out.stdout).into_owned())
        } else {
            Err(KubeError::Kubectl {
                args: args.join(" "),
                output: format!(
                    "{}{}",
                    String::from_utf8_lossy(&out.stderr),
                    String::from_utf8_lossy(&out.stdout)
                ),
            })
        }
    }

    /// `kubectl apply -k deploy/`, then waits until the agent's ServiceAccount exists.
    pub async fn apply_deploy(&self) -> Result<(), KubeError> {
        self.apply_kustomization(&deploy_dir()).await
    }

    /// `kubectl apply -k DIR` (a kustomization derived from `deploy/`, e.g. with a rule
    /// removed), then waits until the agent's ServiceAccount exists.
    pub async fn apply_kustomization(&self, dir: &Path) -> Result<(), KubeError> {
        let dir = dir.to_str().expect("utf-8 path");
        self.kubectl(&["apply", "-k", dir])?;
        let sa: Api<ServiceAccount> = Api::namespaced(self.client(), NAMESPACE);
        poll(Duration::from_secs(30), "the agent ServiceAccount", || {
            let sa = sa.clone();
            async move { sa.get_opt(AGENT_SERVICE_ACCOUNT).await.ok().flatten() }
        })
        .await?;
        self.wait_admission_policy().await
    }

    /// Waits until the admission policy of `deploy/` (if applied) is in effect: kube-apiserver
    /// loads a new ValidatingAdmissionPolicy a few seconds after it is created, and until then
    /// an agent's write to a peer's Lease would pass. Probes with a server-side dry run as the
    /// agent's ServiceAccount without a node claim, which the policy denies.
    async fn wait_admission_policy(&self) -> Result<(), KubeError> {
        if self
            .kubectl(&["get", "validatingadmissionpolicy", "announcer-agent-leases"])
            .is_err()
        {
            return Ok(());
        }
        let probe = self.dir.join("policy-probe.yaml");
        std::fs::write(
            &probe,
            format!(
                "apiVersion: coordination.k8s.io/v1\nkind: Lease\nmetadata:\n  name: \
                 announcer-node-policy-probe\n  namespace: {NAMESPACE}\n"
            ),
        )?;
        let probe = probe.display().to_string();
        let as_agent = format!("--as={}", agent_user());
        poll(
            Duration::from_secs(60),
            "the admission policy in effect",
            || {
                let denied = match self.kubectl(&[
                    "create",
                    "--dry-run=server",
                    &as_agent,
                    "--as-group=system:serviceaccounts",
                    "-f",
                    &probe,
                ]) {
                    Err(KubeError::Kubectl { output, .. }) => {
                        output.contains("ValidatingAdmissionPolicy")
                    }
                    _ => false,
                };
                async move { denied.then_some(()) }
            },
        )
        .await
    }

    /// The agent DaemonSet's Pod on `node`, once the scheduler has bound it.
    pub async fn agent_pod(&self, node: &str, timeout: Duration) -> Result<Pod, KubeError> {
        agent_pod(self.client(), node, timeout).await
    }

    /// A token of the agent's ServiceAccount bound to its DaemonSet Pod on `node` (what the
    /// kubelet would project into the Pod): it names the Pod and, as a claim, the node, which
    /// the admission policy in `deploy/` matches against the Lease names.
    pub async fn agent_token(&self, node: &str) -> Result<String, KubeError> {
        agent_token(self.client(), node).await
    }

    /// Writes a kubeconfig for `node`'s agent to `path`: [`Self::agent_token`], for `server`
    /// (this process's [`Self::url`], or the address of a [`Self::serve_in`] relay).
    pub async fn write_agent_kubeconfig(
        &self,
        node: &str,
        server: &str,
        path: &Path,
    ) -> Result<(), KubeError> {
        write_agent_kubeconfig(self.client(), self.ca_cert(), node, server, path).await
    }

    /// Makes the API server reachable at `addr` inside `ns` (a TCP relay to 127.0.0.1 of this
    /// process; `addr` must be one of [`KubeOptions::extra_server_ips`]). Returns the URL.
    pub fn serve_in(&mut self, ns: &Netns, addr: SocketAddr) -> Result<String, KubeError> {
        let listener = ns.enter(|| std::net::TcpListener::bind(addr))?;
        let relay =
            relay::Relay::start(listener, SocketAddr::from(([127, 0, 0, 1], self.api_port)))?;
        self.relays.push(relay);
        Ok(format!("https://{addr}"))
    }

    /// Starts (`Some`) or ends (`None`) a fault on every relay of [`Self::serve_in`]: the path
    /// from the network namespaces to the API server (see [`relay::RelayFault`]). This
    /// process's own clients ([`Self::client`], kubectl) talk to 127.0.0.1 and are not
    /// affected.
    pub(crate) fn set_relay_fault(&self, fault: Option<relay::RelayFault>) {
        for r in &self.relays {
            r.set_fault(fault);
        }
    }

    /// SIGSTOPs kube-apiserver: an outage in which connections stay open and hang.
    pub fn pause_apiserver(&self) {
        if let Some(a) = &self.apiserver {
            a.signal(libc::SIGSTOP);
        }
    }

    /// SIGCONTs kube-apiserver after [`Self::pause_apiserver`].
    pub fn resume_apiserver(&self) {
        if let Some(a) = &self.apiserver {
            a.signal(libc::SIGCONT);
        }
    }

    /// SIGKILLs kube-apiserver (connections reset; requests fail at once until it is back).
    pub fn kill_apiserver(&mut self) {
        if let Some(mut a) = self.apiserver.take() {
            a.kill();
        }
    }

    /// Starts kube-apiserver again (same port and flags; a new watch cache, so watches
    /// resuming from an older resourceVersion may get 410 Gone) and waits until it is ready.
    pub async fn start_apiserver(&mut self) -> Result<(), KubeError> {
        self.kill_apiserver();
        let log = self.dir.join("kube-apiserver.log");
        self.apiserver = Some(spawn_logged(
            &kube_program("kube-apiserver"),
            &self.apiserver_args,
            &log,
        )?);
        self.wait_apiserver_ready().await
    }

    /// etcd's current revision (the resourceVersion of the latest write).
    pub fn etcd_revision(&self) -> Result<i64, KubeError> {
        // A range over an empty key is the cheapest request that carries the header.
        let v = etcd_post(&self.etcd_url, "/v3/kv/range", &json!({"key": "AA=="}))?;
        v["header"]["revision"]
            .as_str()
            .and_then(|r| r.parse().ok())
            .ok_or_else(|| KubeError::Etcd {
                what: "revision",
                detail: v.to_string(),
            })
    }

    /// Deletes `key` in etcd directly (e.g. `/registry/services/specs/NS/NAME`), behind the API
    /// server's back: what a watch can only learn by relisting once the history is compacted.
    pub fn etcd_delete(&self, key: &str) -> Result<(), KubeError> {
        use base64::Engine;
        let key = base64::engine::general_purpose::STANDARD.encode(key);
        let v = etcd_post(&self.etcd_url, "/v3/kv/deleterange", &json!({"key": key}))?;
        match v["deleted"].as_str() {
            Some("1") => Ok(()),
            _ => Err(KubeError::Etcd {
                what: "delete",
                detail: format!("nothing deleted: {v}"),
            }),
        }
    }

    /// Compacts etcd at its current revision (physically): every older resourceVersion is
    /// gone, so a watch or list from one gets 410 Gone once the watch cache cannot serve it.
    pub fn compact_etcd(&self) -> Result<i64, KubeError> {
        let rev = self.etcd_revision()?;
        etcd_post(
            &self.etcd_url,
            "/v3/kv/compaction",
            &json!({"revision": rev.to_string(), "physical": true}),
        )?;
        Ok(rev)
    }

    /// Every request recorded so far in kube-apiserver's audit log (one record per request: a
    /// watch is recorded when it starts, everything else when it completes).
    pub fn audit(&self) -> Result<Vec<AuditRecord>, KubeError> {
        let text = std::fs::read_to_string(self.dir.join("audit.log"))?;
        Ok(text
            .lines()
            .filter_map(parse_audit_line)
            .filter(|r| match (r.verb.as_str(), r.stage.as_str()) {
                // A watch that starts streaming is recorded again when it ends; one refused
                // (403) never starts.
                ("watch", "ResponseStarted") => true,
                ("watch", _) => r.code >= 400,
                (_, stage) => stage == "ResponseComplete",
            })
            .collect())
    }

    /// The log file of `component` (`etcd`, `kube-apiserver`, ...).
    pub fn log(&self, component: &str) -> PathBuf {
        self.dir.join(format!("{component}.log"))
    }

    /// The last lines of every component's log.
    pub fn log_tails(&self) -> String {
        [
            "etcd",
            "kube-apiserver",
            "kube-controller-manager",
            "kube-scheduler",
        ]
        .iter()
        .map(|c| format!("--- {c} ---\n{}", crate::env::node::log_tail(&self.log(c))))
        .collect::<Vec<_>>()
        .join("\n")
    }

    /// Fails if a component exited.
    pub fn check_running(&mut self) -> Result<(), KubeError> {
        let dir = self.dir.clone();
        exited("etcd", &mut self.etcd, &dir.join("etcd.log"))?;
        if let Some(a) = self.apiserver.as_mut() {
            exited("kube-apiserver", a, &dir.join("kube-apiserver.log"))?;
        }
        if let Some(c) = self.controller_manager.as_mut() {
            exited(
                "kube-controller-manager",
                c,
                &dir.join("kube-controller-manager.log"),
            )?;
        }
        if let Some(s) = self.scheduler.as_mut() {
            exited("kube-scheduler", s, &dir.join("kube-scheduler.log"))?;
        }
        Ok(())
    }
}

impl Drop for KubeControlPlane {
    fn drop(&mut self) {
        self.kubelets.stop();
        self.relays.clear();
        for c in [self.scheduler.as_mut(), self.controller_manager.as_mut()]
            .into_iter()
            .flatten()
        {
            c.kill();
        }
        if let Some(a) = self.apiserver.as_mut() {
            // A paused process dies of SIGKILL too; continue it anyway so nothing waits on it.
            a.signal(libc::SIGCONT);
            a.kill();
        }
        self.etcd.kill();
        if !self.keep_dir && !std::thread::panicking() {
            let _ = std::fs::remove_dir_all(&self.dir);
        }
    }
}

/// The agent DaemonSet's Pod on `node`, once the scheduler has bound it (owned arguments, to
/// run on a runtime of the caller's choosing).
pub async fn agent_pod(client: Client, node: &str, timeout: Duration) -> Result<Pod, KubeError> {
    let pods: Api<Pod> = Api::namespaced(client, NAMESPACE);
    let lp = ListParams::default()
        .labels("app.kubernetes.io/name=announcer,app.kubernetes.io/component=agent")
        .fields(&format!("spec.nodeName={node}"));
    poll(timeout, &format!("the agent Pod bound to {node}"), || {
        let (pods, lp) = (pods.clone(), lp.clone());
        async move {
            let list = pods.list(&lp).await.ok()?;
            list.items
                .into_iter()
                .find(|p| p.metadata.deletion_timestamp.is_none())
        }
    })
    .await
}

/// The allocator Deployment's Pods, once the scheduler has bound `n` of them (sorted by name).
pub async fn allocator_pods(
    client: Client,
    n: usize,
    timeout: Duration,
) -> Result<Vec<Pod>, KubeError> {
    let pods: Api<Pod> = Api::namespaced(client, NAMESPACE);
    let lp = ListParams::default()
        .labels("app.kubernetes.io/name=announcer,app.kubernetes.io/component=allocator");
    poll(
        timeout,
        &format!("{n} allocator Pods bound to nodes"),
        || {
            let (pods, lp) = (pods.clone(), lp.clone());
            async move {
                let list = pods.list(&lp).await.ok()?;
                let mut bound: Vec<Pod> = list
                    .items
                    .into_iter()
                    .filter(|p| p.metadata.deletion_timestamp.is_none())
                    .filter(|p| p.spec.as_ref().is_some_and(|s| s.node_name.is_some()))
                    .collect();
                bound.sort_by(|a, b| a.metadata.name.cmp(&b.metadata.name));
                (bound.len() >= n).then_some(bound)
            }
        },
    )
    .await
}

/// A token of the agent's ServiceAccount bound to `pod`.
pub async fn token_for(client: Client, pod: &Pod) -> Result<String, KubeError> {
    token_of(client, AGENT_SERVICE_ACCOUNT, pod).await
}

/// A token of ServiceAccount `account` (in [`NAMESPACE`]) bound to `pod`: the claims the
/// kubelet's projected token carries (the Pod's name and node).
pub async fn token_of(client: Client, account: &str, pod: &Pod) -> Result<String, KubeError> {
    let sa: Api<ServiceAccount> = Api::namespaced(client, NAMESPACE);
    let req = TokenRequest {
        spec: Some(TokenRequestSpec {
            audiences: None,
            bound_object_ref: Some(BoundObjectReference {
                api_version: Some("v1".into()),
                kind: Some("Pod".into()),
                name: pod.metadata.name.clone(),
                uid: pod.metadata.uid.clone(),
            }),
            expiration_seconds: Some(24 * 3600),
            ..Default::default()
        }),
        ..Default::default()
    };
    let resp = sa
        .create_token_request(account, &PostParams::default(), &req)
        .await
        .map_err(api_err(format!("TokenRequest for {account}")))?;
    Ok(resp.status.and_then(|s| s.token).unwrap_or_default())
}

/// [`KubeControlPlane::agent_token`] with an owned client.
pub async fn agent_token(client: Client, node: &str) -> Result<String, KubeError> {
    let pod = agent_pod(client.clone(), node, Duration::from_secs(60)).await?;
    token_for(client, &pod).await
}

/// [`KubeControlPlane::write_agent_kubeconfig`] with an owned client.
pub async fn write_agent_kubeconfig(
    client: Client,
    ca: &Path,
    node: &str,
    server: &str,
    path: &Path,
) -> Result<(), KubeError> {
    let token = agent_token(client, node).await?;
    std::fs::write(
        path,
        kubeconfig_yaml(
            server,
            ca,
            &format!("announcer-{node}"),
            &Credentials::Token(token),
        ),
    )?;
    Ok(())
}

/// Writes `kubeconfig.<pod>` in `dir` for each of the allocator Deployment's first `n` bound
/// Pods: a token of the `announcer-allocator` ServiceAccount bound to that Pod (its pod-name
/// claim is what the admission policy checks the Lease holder against). Returns the Pods'
/// names, the allocators' identities.
pub async fn write_allocator_kubeconfigs(
    client: Client,
    ca: &Path,
    server: &str,
    dir: &Path,
    n: usize,
) -> Result<Vec<String>, KubeError> {
    let pods = allocator_pods(client.clone(), n, Duration::from_secs(60)).await?;
    let mut ids = Vec::new();
    for pod in pods.iter().take(n) {
        let name = pod.metadata.name.clone().unwrap_or_default();
        let token = token_of(client.clone(), ALLOCATOR_SERVICE_ACCOUNT, pod).await?;
        std::fs::write(
            dir.join(format!("kubeconfig.{name}")),
            kubeconfig_yaml(server, ca, &name, &Credentials::Token(token)),
        )?;
        ids.push(name);
    }
    Ok(ids)
}

/// Metadata for every request, once (when the response is complete, or for a watch when it
/// starts), so a request is one line.
const AUDIT_POLICY: &str = "apiVersion: audit.k8s.io/v1
kind: Policy
omitStages: [RequestReceived]
rules:
  - level: Metadata
";

/// One request as kube-apiserver's audit log records it.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct AuditRecord {
    /// The user (`system:serviceaccount:NS:SA` for an agent).
    pub user: String,
    /// The node claim of a Pod-bound ServiceAccount token.
    pub node: Option<String>,
    /// The pod-name claim of a Pod-bound ServiceAccount token (an allocator's identity).
    pub pod: Option<String>,
    /// `get`, `list`, `watch`, `create`, `update`, `patch`, `delete`.
    pub verb: String,
    /// API group (`""` for core).
    pub group: String,
    /// Resource (`leases`), with `/subresource` if any.
    pub resource: String,
    /// Namespace, if namespaced.
    pub namespace: Option<String>,
    /// Object name, if one.
    pub name: Option<String>,
    /// HTTP status.
    pub code: u16,
    /// The RBAC decision (`allow`, `forbid`), if it was recorded.
    pub decision: Option<String>,
    /// `ResponseStarted` (a watch) or `ResponseComplete`.
    pub stage: String,
}

fn parse_audit_line(line: &str) -> Option<AuditRecord> {
    let v: Value = serde_json::from_str(line).ok()?;
    let o = &v["objectRef"];
    let str_of = |x: &Value| x.as_str().map(str::to_owned);
    let mut resource = str_of(&o["resource"]).unwrap_or_default();
    if let Some(sub) = o["subresource"].as_str() {
        resource = format!("{resource}/{sub}");
    }
    Some(AuditRecord {
        user: str_of(&v["user"]["username"])?,
        node: v["user"]["extra"]["authentication.kubernetes.io/node-name"][0]
            .as_str()
            .map(str::to_owned),
        pod: v["user"]["extra"]["authentication.kubernetes.io/pod-name"][0]
            .as_str()
            .map(str::to_owned),
        verb: str_of(&v["verb"])?,
        group: str_of(&o["apiGroup"]).unwrap_or_default(),
        resource,
        namespace: str_of(&o["namespace"]),
        name: str_of(&o["name"]),
        code: v["responseStatus"]["code"].as_u64().unwrap_or(0) as u16,
        decision: str_of(&v["annotations"]["authorization.k8s.io/decision"]),
        stage: str_of(&v["stage"]).unwrap_or_default(),
    })
}

fn next_id() -> u32 {
    static N: std::sync::atomic::AtomicU32 = std::sync::atomic::AtomicU32::new(0);
    N.fetch_add(1, std::sync::atomic::Ordering::Relaxed)
}

/// envtest's flags (controller-runtime), with RBAC, client certificates and the default
/// admission plugins.
fn apiserver_args(dir: &Path, pki: &certs::Pki, etcd_url: &str, port: u16) -> Vec<String> {
    let p = |p: &Path| p.display().to_string();
    vec![
        format!("--etcd-servers={etcd_url}"),
        "--bind-address=127.0.0.1".into(),
        "--advertise-address=127.0.0.1".into(),
        // The `kubernetes` Service's endpoints may not be loopback; nothing here uses them.
        "--endpoint-reconciler-type=none".into(),
        format!("--secure-port={port}"),
        format!("--cert-dir={}", dir.join("apiserver-certs").display()),
        format!("--tls-cert-file={}", p(&pki.serving.cert)),
        format!("--tls-private-key-file={}", p(&pki.serving.key)),
        format!("--client-ca-file={}", p(&pki.ca_cert)),
        "--authorization-mode=RBAC".into(),
        format!("--service-account-issuer=https://127.0.0.1:{port}"),
        format!("--service-account-key-file={}", p(&pki.sa_pub)),
        format!("--service-account-signing-key-file={}", p(&pki.sa_key)),
        // Dual-stack, so that Services may ask for both families (`ipFamilyPolicy`) and the
        // allocator assigns an address of each.
        "--service-cluster-ip-range=10.96.0.0/16,fd96::/112".into(),
        // Every request at Metadata level (who, verb, object, status, RBAC decision): the real
        // server's request accounting (`KubeControlPlane::audit`).
        format!(
            "--audit-policy-file={}",
            dir.join("audit-policy.yaml").display()
        ),
        format!("--audit-log-path={}", dir.join("audit.log").display()),
        "--audit-log-format=json".into(),
        "--audit-log-mode=blocking".into(),
        "--allow-privileged=true".into(),
        // Nothing here uses the aggregation layer or cloud providers; keep the log to what
        // matters.
        "--profiling=false".into(),
        "-v=1".into(),
    ]
}

/// The controllers that matter here (see the module docs), with per-controller
/// ServiceAccount credentials as kubeadm runs them.
fn controller_manager_args(pki: &certs::Pki, kubeconfig: &Path) -> Vec<String> {
    let p = |p: &Path| p.display().to_string();
    vec![
        format!("--kubeconfig={}", p(kubeconfig)),
        format!("--authentication-kubeconfig={}", p(kubeconfig)),
        format!("--authorization-kubeconfig={}", p(kubeconfig)),
        "--leader-elect=false".into(),
        "--bind-address=127.0.0.1".into(),
        format!("--secure-port={}", free_port()),
        "--use-service-account-credentials=true".into(),
        format!("--service-account-private-key-file={}", p(&pki.sa_key)),
        format!("--root-ca-file={}", p(&pki.ca_cert)),
        "--controllers=endpointslice-controller,serviceaccount-controller,\
         serviceaccount-token-controller,namespace-controller,garbage-collector-controller,\
         daemonset-controller,deployment-controller,replicaset-controller,\
         node-lifecycle-controller"
            .into(),
        format!(
            "--node-monitor-grace-period={}s",
            NODE_MONITOR_GRACE.as_secs()
        ),
        "--node-monitor-period=2s".into(),
        "-v=1".into(),
    ]
}

async fn client_from(kubeconfig: &Path) -> Result<Client, KubeError> {
    let yaml = std::fs::read_to_string(kubeconfig)?;
    let kc = kube::config::Kubeconfig::from_yaml(&yaml).map_err(|e| KubeError::Kubectl {
        args: format!("(reading {})", kubeconfig.display()),
        output: e.to_string(),
    })?;
    let config = kube::Config::from_custom_kubeconfig(kc, &Default::default())
        .await
        .map_err(|e| KubeError::Kubectl {
            args: format!("(loading {})", kubeconfig.display()),
            output: e.to_string(),
        })?;
    Client::try_from(config).map_err(api_err("building the admin client"))
}

/// A client from a kubeconfig file (an agent's, to act as it).
pub async fn client_for(kubeconfig: &Path) -> Result<Client, KubeError> {
    client_from(kubeconfig).await
}

fn etcd_get(url: &str, path: &str) -> Result<String, KubeError> {
    ureq::get(&format!("{url}{path}"))
        .timeout(Duration::from_secs(2))
        .call()
        .map_err(|e| KubeError::Etcd {
            what: "GET",
            detail: e.to_string(),
        })?
        .into_string()
        .map_err(|e| KubeError::Etcd {
            what: "GET",
            detail: e.to_string(),
        })
}

fn etcd_post(url: &str, path: &str, body: &Value) -> Result<Value, KubeError> {
    let what = "POST";
    let text = ureq::post(&format!("{url}{path}"))
        .timeout(Duration::from_secs(5))
        .send_string(&body.to_string())
        .map_err(|e| KubeError::Etcd {
            what,
            detail: format!("{path}: {e}"),
        })?
        .into_string()
        .map_err(|e| KubeError::Etcd {
            what,
            detail: e.to_string(),
        })?;
    serde_json::from_str(&text).map_err(|e| KubeError::Etcd {
        what,
        detail: format!("{path}: {e}: {text}"),
    })
}

async fn wait_until(
    component: &'static str,
    timeout: Duration,
    log: &Path,
    mut check: impl FnMut() -> Result<(), KubeError>,
) -> Result<(), KubeError> {
    let deadline = Instant::now() + timeout;
    loop {
        match check() {
            Ok(()) => return Ok(()),
            Err(e @ KubeError::Exited { .. }) => return Err(e),
            Err(e) if Instant::now() > deadline => {
                return Err(KubeError::NotReady {
                    component,
                    timeout,
                    detail: e.to_string(),
                    log: log.to_owned(),
                });
            }
            Err(_) => tokio::time::sleep(Duration::from_millis(100)).await,
        }
    }
}

/// Polls `f` every 200 ms until it returns something.
pub async fn poll<T, F, Fut>(timeout: Duration, what: &str, mut f: F) -> Result<T, KubeError>
where
    F: FnMut() -> Fut,
    Fut: std::future::Future<Output = Option<T>>,
{
    let deadline = Instant::now() + timeout;
    loop {
        if let Some(v) = f().await {
            return Ok(v);
        }
        if Instant::now() > deadline {
            return Err(KubeError::Timeout(timeout, what.to_string()));
        }
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
}
