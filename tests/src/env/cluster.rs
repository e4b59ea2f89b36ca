//! A control-plane testbed: an API server plus real `announcer agent` processes. The API
//! server is the in-repo one ([`Cluster::start`]: fault hooks and request counts) or a real
//! kube-apiserver with its controllers ([`Cluster::start_on`] with [`ApiKind::Kube`]:
//! `deploy/` applied, each agent authenticated by a token bound to its node's DaemonSet Pod).
//!
//! Why processes and not tasks: SIGTERM handover, SIGKILL and restarts are what the tests are
//! about, and they only mean something for a process. Agents run with `--no-dataplane` by
//! default (election only, no XDP), each with its own kubeconfig token (so the API server
//! counts and faults per node), heartbeat port and `/state` port on 127.0.0.1. Everything is
//! killed when the [`Cluster`] is dropped, also when a test panics.

use std::{
    collections::BTreeMap,
    net::{IpAddr, TcpListener},
    path::PathBuf,
    time::{Duration, Instant},
};

use k8s_openapi::{
    api::{
        core::v1::{Node, NodeAddress, NodeCondition, NodeStatus, Service},
        discovery::v1::{Endpoint, EndpointConditions, EndpointSlice},
        events::v1::Event,
    },
    apimachinery::pkg::apis::meta::v1::ObjectMeta,
};
use kube::{
    Api, Client,
    api::{DeleteParams, ListParams, Patch, PatchParams, PostParams},
};
use serde_json::{Value, json};

use announcer::election::{NodeName, rendezvous};

use crate::{
    apiserver::{ApiServer, ApiServerHandle},
    env::{
        ApiKind,
        agent_cmd::AgentCommand,
        allocator_cmd::AllocatorCommand,
        kube::{KubeControlPlane, KubeOptions},
        process::{Guarded, free_port},
    },
};

use crate::env::kube::relay;

/// One agent process.
pub struct Agent {
    child: Guarded,
    /// Its `/state` address.
    pub http: u16,
    /// Its heartbeat port.
    pub heartbeat: u16,
    /// Its log file.
    pub log: PathBuf,
    /// How it was started, to restart it identically.
    cmd: AgentCommand,
}

/// One `announcer allocator` process (a replica of the `announcer-allocator` Deployment).
pub struct Allocator {
    child: Guarded,
    /// Its log file.
    pub log: PathBuf,
    cmd: AllocatorCommand,
}

/// The API server a world runs against.
pub enum Backend {
    /// The in-repo API server.
    InRepo(ApiServerHandle),
    /// A real control plane.
    Kube(Box<KubeControlPlane>),
}

/// The API server and the agents.
pub struct Cluster {
    backend: Backend,
    /// An admin client.
    pub client: Client,
    dir: PathBuf,
    agents: BTreeMap<String, Agent>,
    /// The allocator replicas, by identity (their Pod's name on a real control plane).
    allocators: BTreeMap<String, Allocator>,
    /// Reach a real API server through a counting relay per agent ([`Cluster::relay_agents`]).
    relayed: bool,
    relays: BTreeMap<String, relay::Relay>,
}

/// Bytes through one agent's relay (TLS records, so headers and framing included).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct RelayBytes {
    /// From the agent to the API server.
    pub to_api: u64,
    /// From the API server to the agent.
    pub from_api: u64,
}

impl Cluster {
    /// Starts the in-repo API server (1 s bookmarks).
    pub async fn start(name: &str) -> Cluster {
        Self::start_on(ApiKind::InRepo, name).await
    }

    /// Starts a real control plane with the kustomization in `dir` applied instead of
    /// `deploy/` (e.g. an older release's manifests, to test an upgrade).
    pub async fn start_with_kustomization(name: &str, dir: &std::path::Path) -> Cluster {
        let cp = KubeControlPlane::start(KubeOptions {
            tag: name.into(),
            apply_deploy: false,
            ..Default::default()
        })
        .await
        .unwrap_or_else(|e| panic!("the real control plane starts: {e}"));
        cp.apply_kustomization(dir)
            .await
            .unwrap_or_else(|e| panic!("apply {}: {e}", dir.display()));
        let client = cp.client();
        Self::with_backend(Backend::Kube(Box::new(cp)), client, name, ApiKind::Kube)
    }

    /// Starts the API server of `kind`: the in-repo one (1 s bookmarks), or a real control
    /// plane with `deploy/` applied.
    pub async fn start_on(kind: ApiKind, name: &str) -> Cluster {
        let (backend, client) = match kind {
            ApiKind::InRepo => {
                let api = ApiServer::builder()
                    .bookmark_interval(Duration::from_secs(1))
                    .start()
                    .await
                    .expect("API server starts");
                let client = api.client("admin").await.expect("client");
                (Backend::InRepo(api), client)
            }
            ApiKind::Kube => {
                let cp = KubeControlPlane::start_applied(name).await;
                let client = cp.client();
                (Backend::Kube(Box::new(cp)), client)
            }
        };
        Self::with_backend(backend, client, name, kind)
    }

    fn with_backend(backend: Backend, client: Client, name: &str, kind: ApiKind) -> Cluster {
        let dir =
            std::env::temp_dir().join(format!("anncluster-{}-{name}-{kind}", std::process::id()));
        let _ = std::fs::remove_dir_all(&dir);
        std::fs::create_dir_all(&dir).expect("temp dir");
        Cluster {
            backend,
            client,
            dir,
            agents: BTreeMap::new(),
            allocators: BTreeMap::new(),
            relayed: false,
            relays: BTreeMap::new(),
        }
    }

    /// On a real API server, whether each agent started from now on reaches it through a TCP
    /// relay of its own on 127.0.0.1 that counts the bytes both ways ([`Cluster::relay_bytes`];
    /// kept across restarts of the agent). The in-repo server counts requests itself: there
    /// agents always connect directly.
    pub fn relay_agents(&mut self, on: bool) {
        self.relayed = on;
    }

    /// The bytes through `node`'s relay so far (see [`Cluster::relay_agents`]), if it has one.
    pub fn relay_bytes(&self, node: &str) -> Option<RelayBytes> {
        self.relays.get(node).map(|r| {
            let b = r.bytes();
            RelayBytes {
                to_api: b.to_server,
                from_api: b.from_server,
            }
        })
    }

    /// The URL `node`'s agent reaches the real API server at: its relay's (started on first
    /// use) when relayed, else the server's own.
    fn agent_server_url(&mut self, node: &str) -> String {
        let Backend::Kube(cp) = &self.backend else {
            unreachable!("only a real API server is relayed");
        };
        let url = cp.url();
        if !self.relayed {
            return url;
        }
        let relay = self.relays.entry(node.to_string()).or_insert_with(|| {
            let api: std::net::SocketAddr = url
                .trim_start_matches("https://")
                .parse()
                .expect("the API server's address");
            let listener = TcpListener::bind("127.0.0.1:0").expect("bind a relay");
            relay::Relay::start(listener, api).expect("start a relay")
        });
        format!("https://127.0.0.1:{}", relay.port())
    }

    /// Which API server this is.
    pub fn kind(&self) -> ApiKind {
        match self.backend {
            Backend::InRepo(_) => ApiKind::InRepo,
            Backend::Kube(_) => ApiKind::Kube,
        }
    }

    /// The in-repo API server (fault hooks, request counts). Panics on a real one: a test
    /// that needs these runs on the in-repo server only.
    pub fn api(&self) -> &ApiServerHandle {
        match &self.backend {
            Backend::InRepo(api) => api,
            Backend::Kube(_) => panic!("fault hooks and request counts are the in-repo server's"),
        }
    }

    /// The real control plane, if this runs on one.
    pub fn kube(&self) -> Option<&KubeControlPlane> {
        match &self.backend {
            Backend::Kube(cp) => Some(cp),
            Backend::InRepo(_) => None,
        }
    }

    /// The real control plane, mutably (to restart kube-apiserver), if this runs on one.
    pub fn kube_mut(&mut self) -> Option<&mut KubeControlPlane> {
        match &mut self.backend {
            Backend::Kube(cp) => Some(cp),
            Backend::InRepo(_) => None,
        }
    }

    /// Creates (or replaces) Node `name` with InternalIP 127.0.0.1. On a real control plane
    /// a stand-in kubelet registers it and renews its node Lease.
    pub async fn add_node(&self, name: &str, labels: &[(&str, &str)], ready: bool) {
        if let Some(cp) = self.kube() {
            let api = Api::<Node>::all(self.client.clone());
            if api.get_opt(name).await.expect("get node").is_some() {
                api.delete(name, &DeleteParams::default())
                    .await
                    .expect("delete node");
            }
            cp.kubelets()
                .register(name, IpAddr::from([127, 0, 0, 1]), labels)
                .await
                .expect("register the node");
            if !ready {
                self.set_node_ready(name, false).await;
            }
            return;
        }
        let node = Node {
            metadata: ObjectMeta {
                name: Some(name.into()),
                labels: Some(
                    labels
                        .iter()
                        .map(|(k, v)| (k.to_string(), v.to_string()))
                        .collect(),
                ),
                ..Default::default()
            },
            ..Default::default()
        };
        let api = Api::<Node>::all(self.client.clone());
        let _ = api.delete(name, &DeleteParams::default()).await;
        api.create(&PostParams::default(), &node)
            .await
            .expect("create node");
        self.set_node_ready(name, ready).await;
    }

    /// Creates a Node as the kubelet registers it, before it fills in any status (no
    /// addresses, no conditions); [`Cluster::set_node_ready`] does that later.
    pub async fn add_node_without_status(&self, name: &str) {
        let node = Node {
            metadata: ObjectMeta {
                name: Some(name.into()),
                ..Default::default()
            },
            ..Default::default()
        };
        Api::<Node>::all(self.client.clone())
            .create(&PostParams::default(), &node)
            .await
            .expect("create node");
    }

    /// Sets the Node's Ready condition (through the status subresource, as the kubelet does).
    pub async fn set_node_ready(&self, name: &str, ready: bool) {
        if let Some(cp) = self.kube() {
            cp.kubelets()
                .set_ready(name, ready)
                .await
                .expect("node status");
            return;
        }
        let status = NodeStatus {
            conditions: Some(vec![NodeCondition {
                type_: "Ready".into(),
                status: if ready { "True" } else { "False" }.into(),
                ..Default::default()
            }]),
            addresses: Some(vec![NodeAddress {
                type_: "InternalIP".into(),
                address: "127.0.0.1".into(),
            }]),
            ..Default::default()
        };
        Api::<Node>::all(self.client.clone())
            .patch_status(
                name,
                &PatchParams::default(),
                &Patch::Merge(json!({ "status": status })),
            )
            .await
            .expect("node status");
    }

    /// Merges `labels` into the Node's labels (`None` value: remove).
    pub async fn label_node(&self, name: &str, labels: &[(&str, Option<&str>)]) {
        let l: serde_json::Map<String, Value> = labels
            .iter()
            .map(|(k, v)| (k.to_string(), v.map_or(Value::Null, |v| json!(v))))
            .collect();
        Api::<Node>::all(self.client.clone())
            .patch(
                name,
                &PatchParams::default(),
                &Patch::Merge(json!({"metadata": {"labels": l}})),
            )
            .await
            .expect("label node");
    }

    /// Creates a LoadBalancer Service with these ingress IPs (status set as a load-balancer
    /// IPAM controller would), `externalTrafficPolicy: Local` if `local`.
    pub async fn add_service(&self, ns: &str, name: &str, ips: &[&str], local: bool) {
        let policy = if local { "Local" } else { "Cluster" };
        self.create_service(ns, name, ips, json!({ "externalTrafficPolicy": policy }))
            .await;
    }

    /// Creates a LoadBalancer Service whose `spec` is `{type: LoadBalancer, ports: [80]}`
    /// merged with `spec` (e.g. `{"loadBalancerClass": "other.dev/lb"}`), then sets its ingress
    /// IPs in the status.
    pub async fn create_service(&self, ns: &str, name: &str, ips: &[&str], spec: Value) {
        let mut full = json!({"type": "LoadBalancer", "ports": [{"port": 80}]});
        if let (Some(full), Some(extra)) = (full.as_object_mut(), spec.as_object()) {
            full.extend(extra.clone());
        }
        let svc: Service = serde_json::from_value(json!({
            "metadata": {"name": name, "namespace": ns},
            "spec": full,
        }))
        .expect("service");
        self.ensure_namespace(ns).await;
        let api = Api::<Service>::namespaced(self.client.clone(), ns);
        api.create(&PostParams::default(), &svc)
            .await
            .expect("create service");
        self.set_ingress(ns, name, ips).await;
    }

    /// Creates namespace `ns` if it does not exist. kube-apiserver refuses objects in a
    /// namespace that does not exist (NamespaceLifecycle admission); the in-repo server accepts
    /// any, but the allocator reads Namespaces (their labels), so it gets them too.
    pub async fn ensure_namespace(&self, ns: &str) {
        let api = Api::<k8s_openapi::api::core::v1::Namespace>::all(self.client.clone());
        if api.get_opt(ns).await.expect("get namespace").is_none() {
            let obj = serde_json::from_value(json!({"metadata": {"name": ns}})).expect("namespace");
            match api.create(&PostParams::default(), &obj).await {
                Ok(_) => {}
                Err(kube::Error::Api(e)) if e.code == 409 => {}
                Err(e) => panic!("create namespace {ns}: {e}"),
            }
        }
    }

    /// Replaces the Service's `status.loadBalancer.ingress` with these IPs.
    pub async fn set_ingress(&self, ns: &str, name: &str, ips: &[&str]) {
        let ingress: Vec<Value> = ips.iter().map(|ip| json!({"ip": ip})).collect();
        Api::<Service>::namespaced(self.client.clone(), ns)
            .patch_status(
                name,
                &PatchParams::default(),
                &Patch::Merge(json!({"status": {"loadBalancer": {"ingress": ingress}}})),
            )
            .await
            .expect("service status");
    }

    /// The admin client of whichever API server this cluster runs on.
    pub fn client(&self) -> kube::Client {
        self.client.clone()
    }

    /// The Service as stored now (`None`: absent).
    pub async fn service(&self, ns: &str, name: &str) -> Option<Service> {
        Api::<Service>::namespaced(self.client.clone(), ns)
            .get_opt(name)
            .await
            .expect("get service")
    }

    /// Every Service in `ns` with the IPs of its `status.loadBalancer.ingress`, by name.
    pub async fn ingress_ips(&self, ns: &str) -> BTreeMap<String, Vec<String>> {
        Api::<Service>::namespaced(self.client.clone(), ns)
            .list(&ListParams::default())
            .await
            .expect("list services")
            .items
            .into_iter()
            .map(|s| {
                let ips = s
                    .status
                    .and_then(|st| st.load_balancer)
                    .and_then(|lb| lb.ingress)
                    .unwrap_or_default()
                    .into_iter()
                    .filter_map(|i| i.ip)
                    .collect();
                (s.metadata.name.unwrap_or_default(), ips)
            })
            .collect()
    }

    /// Deletes a Service.
    pub async fn delete_service(&self, ns: &str, name: &str) {
        Api::<Service>::namespaced(self.client.clone(), ns)
            .delete(name, &DeleteParams::default())
            .await
            .expect("delete service");
    }

    /// Replaces the Service's EndpointSlice with one endpoint per `(node, ready)`.
    pub async fn set_endpoints(&self, ns: &str, svc: &str, endpoints: &[(&str, bool)]) {
        let slice = EndpointSlice {
            metadata: ObjectMeta {
                name: Some(format!("{svc}-slice")),
                namespace: Some(ns.into()),
                labels: Some([("kubernetes.io/service-name".to_string(), svc.to_string())].into()),
                ..Default::default()
            },
            address_type: "IPv4".into(),
            endpoints: Some(
                endpoints
                    .iter()
                    .enumerate()
                    .map(|(i, (node, ready))| Endpoint {
                        addresses: vec![format!("10.244.0.{}", i + 1)],
                        node_name: Some(node.to_string()),
                        conditions: Some(EndpointConditions {
                            ready: Some(*ready),
                            ..Default::default()
                        }),
                        ..Default::default()
                    })
                    .collect(),
            ),
            ports: None,
        };
        let api = Api::<EndpointSlice>::namespaced(self.client.clone(), ns);
        let name = format!("{svc}-slice");
        let _ = api.delete(&name, &DeleteParams::default()).await;
        api.create(&PostParams::default(), &slice)
            .await
            .expect("create slice");
    }

    /// Starts the agent of `node` (with `--no-dataplane` and fast test timings unless `extra`
    /// overrides them). Its state directory (heartbeat identity, incarnation counter) is
    /// `state-<node>` in the cluster's scratch directory, kept across restarts as a hostPath
    /// keeps it on a node.
    pub fn start_agent(&mut self, node: &str, extra: &[&str]) {
        let (http, heartbeat, cmd) = self.agent_command(node, extra);
        self.spawn(node, http, heartbeat, cmd);
    }

    /// The command [`Self::start_agent`] runs (its kubeconfig written), with its ports.
    fn agent_command(&mut self, node: &str, extra: &[&str]) -> (u16, u16, AgentCommand) {
        let kubeconfig = self.dir.join(format!("kubeconfig.{node}"));
        let state = self.dir.join(format!("state-{node}"));
        let server = match self.kind() {
            ApiKind::Kube => self.agent_server_url(node),
            ApiKind::InRepo => String::new(),
        };
        match &self.backend {
            Backend::InRepo(api) => api.write_kubeconfig(&kubeconfig, node).expect("kubeconfig"),
            // A token bound to the node's DaemonSet Pod, as the kubelet would project it.
            Backend::Kube(cp) => tokio::task::block_in_place(|| {
                tokio::runtime::Handle::current().block_on(cp.write_agent_kubeconfig(
                    node,
                    &server,
                    &kubeconfig,
                ))
            })
            .unwrap_or_else(|e| panic!("a kubeconfig for the agent of {node}: {e}")),
        }
        let (http, heartbeat) = match self.agents.get(node) {
            Some(a) => (a.http, a.heartbeat),
            None => (free_port(), free_port()),
        };
        let mut cmd = AgentCommand::new(node, &kubeconfig, &state)
            .heartbeat_port(heartbeat)
            .http_address(format!("127.0.0.1:{http}"));
        if !extra.contains(&"--dataplane") {
            cmd = cmd.no_dataplane();
        }
        // `--no-heartbeat-address`: heartbeats from the Node's InternalIP, as in a cluster.
        if !extra.contains(&"--no-heartbeat-address") {
            cmd = cmd.heartbeat_address(IpAddr::from([127, 0, 0, 1]));
        }
        let extra: Vec<&str> = extra
            .iter()
            .copied()
            .filter(|a| *a != "--dataplane" && *a != "--no-heartbeat-address")
            .collect();
        (http, heartbeat, cmd.extra(&extra))
    }

    fn spawn(&mut self, node: &str, http: u16, heartbeat: u16, cmd: AgentCommand) {
        let log = self.dir.join(format!("agent-{node}.log"));
        let child = cmd.spawn(None, &log);
        self.agents.insert(
            node.into(),
            Agent {
                child,
                http,
                heartbeat,
                log,
                cmd,
            },
        );
    }

    /// Replaces `node`'s agent (stopped: [`Self::kill`] or SIGTERM) by `binary` with the
    /// arguments it had (`None`: the `announcer` under test), as a rolling update does.
    pub fn restart_as(&mut self, node: &str, binary: Option<&std::path::Path>) {
        let a = self.agents.remove(node).expect("known agent");
        let mut cmd = a.cmd;
        cmd = match binary {
            Some(b) => cmd.binary(b),
            None => cmd.binary(&crate::cli::announcer_bin()),
        };
        self.spawn(node, a.http, a.heartbeat, cmd);
    }

    /// Starts `node`'s agent from `binary` (an older release), like [`Self::start_agent`].
    pub fn start_agent_from(&mut self, node: &str, binary: &std::path::Path, extra: &[&str]) {
        let (http, heartbeat, cmd) = self.agent_command(node, extra);
        self.spawn(node, http, heartbeat, cmd.binary(binary));
    }

    /// Restarts `node`'s agent with the arguments it had (after [`Self::kill`]).
    pub fn restart(&mut self, node: &str) {
        let a = self.agents.remove(node).expect("known agent");
        self.spawn(node, a.http, a.heartbeat, a.cmd);
    }

    /// Sends `signal` (e.g. `libc::SIGTERM`) to `node`'s agent.
    pub fn signal(&self, node: &str, signal: i32) {
        self.agents[node].child.signal(signal);
    }

    /// SIGKILLs `node`'s agent and reaps it.
    pub fn kill(&mut self, node: &str) {
        self.agents.get_mut(node).expect("known agent").child.kill();
    }

    /// Waits up to `timeout` for `node`'s agent to exit; its exit code.
    pub fn wait_exit(&mut self, node: &str, timeout: Duration) -> Option<i32> {
        let end = Instant::now() + timeout;
        let a = self.agents.get_mut(node).expect("known agent");
        while Instant::now() < end {
            if let Some(s) = a.child.try_wait().expect("try_wait") {
                return s.code();
            }
            std::thread::sleep(Duration::from_millis(20));
        }
        None
    }

    /// Starts the allocator Deployment's `n` replicas, each with `extra` (e.g. `--classless`);
    /// returns their identities. On a real control plane these are the Deployment's Pods
    /// (`deploy/allocator.yaml`, bound by the scheduler), each run with a token of the
    /// `announcer-allocator` ServiceAccount bound to its Pod, as the kubelet would project it;
    /// on the in-repo server, `allocator-0`, `allocator-1`, ... with tokens of those names.
    pub fn start_allocators(&mut self, n: usize, extra: &[&str]) -> Vec<String> {
        let ids: Vec<String> = match &self.backend {
            Backend::InRepo(api) => (0..n)
                .map(|i| {
                    let id = format!("allocator-{i}");
                    let kc = self.dir.join(format!("kubeconfig.{id}"));
                    api.write_kubeconfig(&kc, &id).expect("kubeconfig");
                    id
                })
                .collect(),
            Backend::Kube(cp) => {
                let (client, ca, url, dir) = (
                    cp.client(),
                    cp.ca_cert().to_owned(),
                    cp.url(),
                    self.dir.clone(),
                );
                tokio::task::block_in_place(|| {
                    tokio::runtime::Handle::current().block_on(async move {
                        crate::env::kube::write_allocator_kubeconfigs(client, &ca, &url, &dir, n)
                            .await
                    })
                })
                .unwrap_or_else(|e| panic!("kubeconfigs for the allocator Pods: {e}"))
            }
        };
        for id in &ids {
            let kc = self.dir.join(format!("kubeconfig.{id}"));
            let cmd = AllocatorCommand::new(id, &kc).extra(extra);
            self.spawn_allocator(cmd);
        }
        ids
    }

    fn spawn_allocator(&mut self, cmd: AllocatorCommand) {
        let id = cmd.identity().to_owned();
        let log = self.dir.join(format!("allocator-{id}.log"));
        let child = cmd.spawn(None, &log);
        self.allocators.insert(id, Allocator { child, log, cmd });
    }

    /// Restarts allocator `id` with the arguments it had (after [`Self::kill_allocator`]).
    pub fn restart_allocator(&mut self, id: &str) {
        let a = self.allocators.remove(id).expect("known allocator");
        self.spawn_allocator(a.cmd);
    }

    /// Sends `signal` to allocator `id`.
    pub fn signal_allocator(&self, id: &str, signal: i32) {
        self.allocators[id].child.signal(signal);
    }

    /// SIGKILLs allocator `id` and reaps it.
    pub fn kill_allocator(&mut self, id: &str) {
        self.allocators
            .get_mut(id)
            .expect("known allocator")
            .child
            .kill();
    }

    /// Waits up to `timeout` for allocator `id` to exit; its exit code.
    pub fn wait_allocator_exit(&mut self, id: &str, timeout: Duration) -> Option<i32> {
        let end = Instant::now() + timeout;
        let a = self.allocators.get_mut(id).expect("known allocator");
        while Instant::now() < end {
            if let Some(s) = a.child.try_wait().expect("try_wait") {
                return s.code();
            }
            std::thread::sleep(Duration::from_millis(20));
        }
        None
    }

    /// The allocator replicas' identities.
    pub fn allocators(&self) -> Vec<String> {
        self.allocators.keys().cloned().collect()
    }

    /// `node`'s `/state`, if it answers.
    pub fn state(&self, node: &str) -> Option<Value> {
        state_at(self.agents.get(node)?.http)
    }

    /// The agent of `node`, if one was started.
    pub fn agent(&self, node: &str) -> Option<&Agent> {
        self.agents.get(node)
    }

    /// Whether `node`'s agent process is still running (not exited, not killed).
    pub fn running(&mut self, node: &str) -> bool {
        self.agents
            .get_mut(node)
            .is_some_and(|a| matches!(a.child.try_wait(), Ok(None)))
    }

    /// Who announces what right now: for each node whose `/state` answers, its owned VIPs.
    /// (One `/state` read per agent, so cheaper than [`Self::owners`] per VIP.)
    pub fn ownership(&self) -> BTreeMap<String, Vec<IpAddr>> {
        self.agents
            .iter()
            .filter_map(|(n, a)| Some((n.clone(), owned_vips(&state_at(a.http)?))))
            .collect()
    }

    /// For each of `vips`, the nodes that announce it, from one [`Self::ownership`] snapshot.
    pub fn owners_of(&self, vips: &[&str]) -> BTreeMap<IpAddr, Vec<String>> {
        let snap = self.ownership();
        vips.iter()
            .map(|v| {
                let vip: IpAddr = v.parse().expect("vip");
                let owners = snap
                    .iter()
                    .filter(|(_, owned)| owned.contains(&vip))
                    .map(|(n, _)| n.clone())
                    .collect();
                (vip, owners)
            })
            .collect()
    }

    /// Whether every VIP of `vips` is announced by exactly its rendezvous owner among `nodes`.
    pub fn settled(&self, vips: &[&str], nodes: &[&str]) -> bool {
        self.owners_of(vips)
            .iter()
            .all(|(vip, o)| *o == [rendezvous_owner(&vip.to_string(), nodes)])
    }

    /// Whether every agent answers `/state` and says `api_ok == ok` (an agent that does not
    /// answer makes it false: silence must not pass for "the API is down").
    pub fn api_ok(&self, ok: bool) -> bool {
        self.nodes()
            .iter()
            .all(|n| self.state(n).is_some_and(|s| s["api_ok"] == ok))
    }

    /// Waits until every started agent answers `/state` with `ready: true`.
    pub async fn wait_ready(&self, timeout: Duration) {
        self.wait_for("every agent ready", timeout, |c| c.all_ready())
            .await;
    }

    /// Full Events (`events.k8s.io/v1`) in `ns`, oldest first by creation.
    pub async fn event_objects(&self, ns: &str) -> Vec<Event> {
        list_events(&self.client, ns).await
    }

    /// The nodes whose agents say they announce `vip`.
    pub fn owners(&self, vip: &str) -> Vec<String> {
        let vip: IpAddr = vip.parse().expect("vip");
        self.agents
            .keys()
            .filter(|n| {
                self.state(n).is_some_and(|s| {
                    s["owned"].as_array().is_some_and(|o| {
                        o.iter()
                            .any(|v| v["vip"].as_str().and_then(|x| x.parse().ok()) == Some(vip))
                    })
                })
            })
            .cloned()
            .collect()
    }

    /// Whether every started, running agent reports ready.
    pub fn all_ready(&self) -> bool {
        self.agents
            .keys()
            .all(|n| self.state(n).is_some_and(|s| s["ready"] == json!(true)))
    }

    /// Polls `cond` every 50 ms for up to `timeout`; panics with `what` and the agents' log
    /// tails if it never holds.
    pub async fn wait_for(
        &self,
        what: &str,
        timeout: Duration,
        mut cond: impl FnMut(&Cluster) -> bool,
    ) {
        let end = Instant::now() + timeout;
        while Instant::now() < end {
            if cond(self) {
                return;
            }
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
        panic!(
            "timed out after {timeout:?} waiting for {what}\n{}",
            self.log_tails()
        );
    }

    /// Polls `cond` every 50 ms for `duration` and panics with `what` (and the log tails) the
    /// first time it does not hold: for "nothing changes while …" assertions.
    pub async fn hold(
        &self,
        what: &str,
        duration: Duration,
        mut cond: impl FnMut(&Cluster) -> bool,
    ) {
        let end = Instant::now() + duration;
        loop {
            assert!(cond(self), "{what} stopped holding\n{}", self.log_tails());
            if Instant::now() >= end {
                return;
            }
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
    }

    /// Waits up to `timeout` for an Event in `ns` matching `pred`; returns it. Panics with the
    /// Events seen and the log tails if none comes.
    pub async fn wait_for_event(
        &self,
        ns: &str,
        what: &str,
        timeout: Duration,
        pred: impl Fn(&Event) -> bool,
    ) -> Event {
        wait_for_event(&self.client, ns, what, timeout, pred, || self.log_tails()).await
    }

    /// Events (`events.k8s.io/v1`) in `ns`: (reason, note, reporting instance).
    pub async fn events(&self, ns: &str) -> Vec<(String, String, String)> {
        list_events(&self.client, ns)
            .await
            .into_iter()
            .map(|e| {
                (
                    e.reason.unwrap_or_default(),
                    e.note.unwrap_or_default(),
                    e.reporting_instance.unwrap_or_default(),
                )
            })
            .collect()
    }

    /// The last lines of every agent's log.
    pub fn log_tails(&self) -> String {
        let mut out = String::new();
        for (n, a) in &self.agents {
            let text = std::fs::read_to_string(&a.log).unwrap_or_default();
            let lines: Vec<&str> = text.lines().collect();
            out += &format!("--- {n} ({})\n", a.log.display());
            for l in &lines[lines.len().saturating_sub(15)..] {
                out += l;
                out.push('\n');
            }
        }
        for (n, a) in &self.allocators {
            let text = std::fs::read_to_string(&a.log).unwrap_or_default();
            let lines: Vec<&str> = text.lines().collect();
            out += &format!("--- allocator {n} ({})\n", a.log.display());
            for l in &lines[lines.len().saturating_sub(15)..] {
                out += l;
                out.push('\n');
            }
        }
        out
    }

    /// The running agents' names.
    pub fn nodes(&self) -> Vec<String> {
        self.agents.keys().cloned().collect()
    }
}

/// The Events (`events.k8s.io/v1`) in `ns`.
pub async fn list_events(client: &Client, ns: &str) -> Vec<Event> {
    Api::<Event>::namespaced(client.clone(), ns)
        .list(&ListParams::default())
        .await
        .expect("list Events")
        .items
}

/// Polls the Events in `ns` for up to `timeout` until one matches `pred`; returns it. Panics
/// with `what`, the Events seen and `log_tails()` if none comes.
pub async fn wait_for_event(
    client: &Client,
    ns: &str,
    what: &str,
    timeout: Duration,
    pred: impl Fn(&Event) -> bool,
    log_tails: impl FnOnce() -> String,
) -> Event {
    let end = Instant::now() + timeout;
    loop {
        let events = list_events(client, ns).await;
        if let Some(e) = events.iter().find(|e| pred(e)) {
            return e.clone();
        }
        if Instant::now() >= end {
            let seen: Vec<_> = events
                .iter()
                .map(|e| {
                    (
                        e.type_.clone(),
                        e.reason.clone(),
                        e.reporting_instance.clone(),
                        e.note.clone(),
                    )
                })
                .collect();
            panic!(
                "timed out after {timeout:?} waiting for an Event: {what}\nEvents: {seen:#?}\n{}",
                log_tails()
            );
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
}

/// The `/state` of the agent serving on `127.0.0.1:http`, if it answers.
pub fn state_at(http: u16) -> Option<Value> {
    let body = ureq::get(&format!("http://127.0.0.1:{http}/state"))
        .timeout(Duration::from_secs(2))
        .call()
        .ok()?
        .into_string()
        .ok()?;
    serde_json::from_str(&body).ok()
}

/// The VIPs a `/state` document says are owned.
pub fn owned_vips(state: &Value) -> Vec<IpAddr> {
    state["owned"]
        .as_array()
        .into_iter()
        .flatten()
        .filter_map(|v| v["vip"].as_str()?.parse().ok())
        .collect()
}

/// The rendezvous owner of `vip` among `nodes`: whom the election must settle on when all of
/// them are eligible, alive and ready (computed with the agent's own ranking function).
pub fn rendezvous_owner(vip: &str, nodes: &[&str]) -> String {
    let vip: IpAddr = vip.parse().expect("vip");
    let names: Vec<NodeName> = nodes.iter().map(|n| NodeName::from(*n)).collect();
    rendezvous::owner(vip, &names)
        .expect("at least one node")
        .to_string()
}

impl Drop for Cluster {
    fn drop(&mut self) {
        // Guarded children: dropping them SIGKILLs and reaps them.
        self.agents.clear();
        self.allocators.clear();
        self.relays.clear();
        if !std::thread::panicking() {
            let _ = std::fs::remove_dir_all(&self.dir);
        }
    }
}
