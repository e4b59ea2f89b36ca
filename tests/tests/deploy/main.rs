//! `deploy/`, checked as an operator would before `kubectl apply -k deploy/`:
//!
//! * every manifest validates against the Kubernetes OpenAPI schemas (offline, strict: unknown
//!   fields are errors), with the generated ConfigMap, for the oldest and newest Kubernetes
//!   versions we claim;
//! * `kubectl kustomize deploy/`, by the kubectl `cargo xtask setup` builds (what `kubectl apply
//!   -k` runs), renders exactly the manifests' objects and the hash-named ConfigMap holding
//!   config.yaml, namespaced and labelled, with the DaemonSet pointing at that ConfigMap and
//!   the image `images:` names, and the result validates too; without that kubectl the test
//!   fails, naming `cargo xtask setup`;
//! * the DaemonSet has what the agent needs and nothing more (host network, the four
//!   capabilities, bpffs, the downward API, probes on the agent's ports, a grace period that
//!   fits the SIGTERM handover), and its settings agree with the agent's flags and config;
//! * the agent's state directory (its heartbeat identity and incarnation counter) is on the
//!   host, where the agent looks for it, and is the only writable path besides bpffs;
//! * the shared heartbeat key is gone: no key-generator Job, no second ServiceAccount, no grant
//!   on Secrets;
//! * the RBAC is exactly what each account uses: real agents and allocators run a scenario in
//!   both election modes on both API servers, and the withdrawal controller one withdrawal on
//!   kube-apiserver; every (API group, resource, verb) they sent must be granted, in the
//!   grant's scope, and every grant must have been used (bar a justified allow-list).
//!
//! * the image `cargo xtask image` writes is a valid OCI layout, at most 30 MB, labelled with
//!   its version and commit, and its binary runs inside it (chroot) with deploy/'s arguments
//!   and Debian's CA certificates ([`image`]).
//!
//! The RBAC scenario is in [`rbac`]; the Helm chart (`deploy/chart/`), checked against the
//! kustomization, in [`chart`].

mod applied;
mod chart;
mod image;
mod metallb;
mod rbac;
mod rbac_removed;
mod upgrade;
mod withdrawal_policy;

use std::{
    path::{Path, PathBuf},
    process::Command,
    time::Duration,
};

use announcer::agent::config::{AgentArgs, DEFAULT_STATE_ROOT, file::ConfigFile};
use announcer_tests::{
    env::kube::{deploy_dir, rbac::documents},
    programs::kube_program,
};
use clap::Parser;
use serde_json::Value;

/// The Kubernetes versions the manifests must validate against: the oldest supported (the one
/// minimum, docs/install.md#support-matrix and [`announcer::agent::admission::MIN_KUBERNETES`]),
/// and the newest the validator knows.
const KUBE_VERSIONS: [&str; 2] = ["1.32.0", "1.37.0"];

fn kustomization() -> Value {
    documents("kustomization.yaml").remove(0)
}

/// The files the kustomization lists under `resources`.
fn resource_files() -> Vec<String> {
    kustomization()["resources"]
        .as_array()
        .expect("resources")
        .iter()
        .map(|r| r.as_str().expect("file name").to_owned())
        .collect()
}

/// Every object the kustomization installs (before kustomize's transformations).
fn objects() -> Vec<Value> {
    resource_files().iter().flat_map(|f| documents(f)).collect()
}

fn object(kind: &str, name: &str) -> Value {
    objects()
        .into_iter()
        .find(|o| o["kind"] == kind && o["metadata"]["name"] == name)
        .unwrap_or_else(|| panic!("no {kind} {name} in deploy/"))
}

fn s(v: &Value) -> &str {
    v.as_str().unwrap_or_else(|| panic!("not a string: {v:?}"))
}

/// `announcer agent` as the binary parses it.
#[derive(Parser)]
struct AgentCli {
    #[command(flatten)]
    agent: AgentArgs,
}

/// The agent's settings under deploy/: its defaults with deploy/config.yaml applied.
fn deployed_settings() -> AgentArgs {
    let config = deploy_dir().join("config.yaml");
    let a = AgentCli::try_parse_from([
        "agent",
        "--node-name",
        "n",
        "--config",
        config.to_str().expect("utf-8"),
    ])
    .expect("deploy/config.yaml is accepted")
    .agent;
    a.validate().expect("deploy/config.yaml validates");
    a
}

/// Runs kubernetes-validate; panics (never skips) if it is not installed.
fn validate(files: &[PathBuf], version: &str) -> (bool, String) {
    let probe = Command::new("python3")
        .args(["-m", "kubernetes_validate", "--version"])
        .output();
    assert!(
        probe.as_ref().is_ok_and(|o| o.status.success()),
        "kubernetes-validate is not installed for python3: run `cargo xtask setup` \
         (it pip-installs the pinned version); {probe:?}"
    );
    let out = Command::new("python3")
        .args([
            "-m",
            "kubernetes_validate",
            "--strict",
            "--quiet",
            "-k",
            version,
        ])
        .args(files)
        .output()
        .expect("run kubernetes-validate");
    let text =
        String::from_utf8_lossy(&out.stdout).into_owned() + &String::from_utf8_lossy(&out.stderr);
    (out.status.success(), text)
}

/// A scratch directory, removed on drop.
struct Scratch(PathBuf);

impl Scratch {
    fn new(name: &str) -> Scratch {
        let p = std::env::temp_dir().join(format!("anndeploy-{}-{name}", std::process::id()));
        let _ = std::fs::remove_dir_all(&p);
        std::fs::create_dir_all(&p).expect("scratch dir");
        Scratch(p)
    }
}

impl Drop for Scratch {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.0);
    }
}

#[test]
fn the_uninstall_manifests_validate_against_the_kubernetes_schemas() {
    let dir = deploy_dir().join("uninstall");
    let k: Value = serde_saphyr::from_str(
        &std::fs::read_to_string(dir.join("kustomization.yaml")).expect("kustomization"),
    )
    .expect("YAML");
    let files: Vec<PathBuf> = k["resources"]
        .as_array()
        .expect("resources")
        .iter()
        .map(|r| dir.join(s(r)))
        .collect();
    assert!(files.len() >= 2, "{files:?}");
    for version in KUBE_VERSIONS {
        let (ok, out) = validate(&files, version);
        assert!(
            ok,
            "deploy/uninstall/ does not validate against Kubernetes {version}:\n{out}"
        );
    }
}

#[test]
fn every_manifest_validates_against_the_kubernetes_schemas() {
    let dir = deploy_dir();
    let listed = resource_files();
    // Every manifest is part of the install, and every listed file exists.
    // (The CRDs live in `crds/`.)
    let yaml_in = |sub: &str| -> Vec<String> {
        std::fs::read_dir(dir.join(sub))
            .expect("deploy/")
            .map(|e| e.expect("entry").file_name().to_string_lossy().into_owned())
            .filter(|n| n.ends_with(".yaml"))
            .map(|n| {
                if sub.is_empty() {
                    n
                } else {
                    format!("{sub}/{n}")
                }
            })
            .collect()
    };
    let mut on_disk: Vec<String> = yaml_in("")
        .into_iter()
        .chain(yaml_in("crds"))
        .filter(|n| n != "kustomization.yaml" && n != "config.yaml")
        .collect();
    on_disk.sort();
    let mut sorted = listed.clone();
    sorted.sort();
    assert_eq!(
        sorted, on_disk,
        "deploy/*.yaml and kustomization.yaml resources differ"
    );

    // The ConfigMap the configMapGenerator makes (kustomize adds a hash suffix to its name).
    let k = kustomization();
    let generator = &k["configMapGenerator"][0];
    assert_eq!(generator["name"], "announcer-config");
    let file = s(&generator["files"][0]);
    let text = std::fs::read_to_string(dir.join(file)).expect("config file");
    ConfigFile::parse(&text).expect("the generated ConfigMap holds a valid agent config");
    let scratch = Scratch::new("validate");
    let cm = serde_saphyr::to_string(&serde_json::json!({
        "apiVersion": "v1",
        "kind": "ConfigMap",
        "metadata": {"name": "announcer-config-0000000000", "namespace": s(&k["namespace"])},
        "data": {file: text},
    }))
    .expect("yaml");
    let cm_path = scratch.0.join("configmap.yaml");
    std::fs::write(&cm_path, cm).expect("write");

    let mut files: Vec<PathBuf> = listed.iter().map(|f| dir.join(f)).collect();
    files.push(cm_path);
    for version in KUBE_VERSIONS {
        let (ok, out) = validate(&files, version);
        assert!(
            ok,
            "deploy/ does not validate against Kubernetes {version}:\n{out}"
        );
    }

    // The check has teeth: a misspelt field is rejected.
    let ds = std::fs::read_to_string(dir.join("daemonset.yaml")).expect("daemonset");
    let bad = ds.replacen(
        "hostNetwork: true",
        "hostNetwork: true\n      hostNetwrok: true",
        1,
    );
    assert_ne!(bad, ds);
    let bad_path = scratch.0.join("bad-daemonset.yaml");
    std::fs::write(&bad_path, bad).expect("write");
    let (ok, out) = validate(&[bad_path], KUBE_VERSIONS[0]);
    assert!(
        !ok && out.contains("hostNetwrok"),
        "typo not caught:\n{out}"
    );
}

/// One minimum Kubernetes version: the schemas the manifests are validated against start at the
/// agent's [`MIN_KUBERNETES`](announcer::agent::admission::MIN_KUBERNETES), and every page and
/// manifest that names a minimum names that one (an operator reading any of them reaches the
/// same answer).
#[test]
fn every_manifest_doc_and_test_names_the_same_minimum_kubernetes() {
    let min = announcer::agent::admission::MIN_KUBERNETES;
    assert_eq!(
        KUBE_VERSIONS[0],
        format!("{min}.0"),
        "the oldest schema validated is not the minimum"
    );
    let root = deploy_dir().join("..");
    let phrase = regex_lite_minimums();
    let mut named = Vec::new();
    for file in [
        "README.md",
        "docs/install.md",
        "docs/operate.md",
        "docs/migrate-from-metallb.md",
        "docs/testing.md",
        "deploy/admission-policy.yaml",
        "deploy/crds/addresspool.yaml",
    ] {
        let text = std::fs::read_to_string(root.join(file)).expect(file);
        for (line_no, line) in text.lines().enumerate() {
            for v in phrase(line) {
                named.push((file, line_no + 1, v));
            }
        }
    }
    let install = std::fs::read_to_string(root.join("docs/install.md")).expect("install.md");
    assert!(
        install.contains("## Support matrix")
            && install.contains(&format!("Kubernetes {min} or newer")),
        "docs/install.md states the minimum ({min}) in its Requirements and Support matrix"
    );
    let wrong: Vec<_> = named.iter().filter(|(_, _, v)| v != min).collect();
    assert!(
        wrong.is_empty() && !named.is_empty(),
        "minimums other than {min}: {wrong:?}"
    );
}

/// The versions a line claims as the minimum: `Kubernetes 1.N or newer`, `Kubernetes 1.N+`,
/// `(before 1.N) is unsupported`.
fn regex_lite_minimums() -> impl Fn(&str) -> Vec<String> {
    |line: &str| {
        let mut out = Vec::new();
        for (prefix, suffixes) in [
            ("Kubernetes ", &[" or newer", "+"][..]),
            ("(before ", &[") is unsupported"][..]),
        ] {
            let mut rest = line;
            while let Some(i) = rest.find(prefix) {
                rest = &rest[i + prefix.len()..];
                let v: String = rest
                    .chars()
                    .take_while(|c| c.is_ascii_digit() || *c == '.')
                    .collect();
                let after = &rest[v.len()..];
                if v.starts_with("1.") && suffixes.iter().any(|s| after.starts_with(s)) {
                    out.push(v.trim_end_matches('.').to_owned());
                }
            }
        }
        out
    }
}

/// `kubectl kustomize deploy/`, by the kubectl that `cargo xtask setup` builds: the kustomize
/// that `kubectl apply -k deploy/` runs. Panics (never skips) if kubectl is not built or fails.
fn kustomize() -> String {
    let kubectl = kube_program("kubectl");
    let out = Command::new(&kubectl)
        .arg("kustomize")
        .arg(deploy_dir())
        .output()
        .unwrap_or_else(|e| panic!("cannot run {}: {e}", kubectl.display()));
    assert!(
        out.status.success(),
        "`kubectl kustomize deploy/` failed ({}):\n{}",
        out.status,
        String::from_utf8_lossy(&out.stderr)
    );
    String::from_utf8(out.stdout).expect("kubectl kustomize prints UTF-8")
}

/// The kinds in deploy/ that have no namespace.
const CLUSTER_SCOPED: [&str; 4] = [
    "Namespace",
    "ClusterRole",
    "ClusterRoleBinding",
    "CustomResourceDefinition",
];

#[test]
fn kubectl_kustomize_renders_the_install() {
    // The kustomize is the one a kubectl of the version tests/kube/ pins runs.
    let kubectl = kube_program("kubectl");
    let out = Command::new(&kubectl)
        .args(["version", "--client", "-o", "json"])
        .output()
        .expect("kubectl version");
    let version: serde_json::Value = serde_json::from_slice(&out.stdout).expect("version JSON");
    let go_mod = std::fs::read_to_string(Path::new(env!("CARGO_MANIFEST_DIR")).join("kube/go.mod"))
        .expect("tests/kube/go.mod");
    let pinned = go_mod
        .lines()
        .find_map(|l| l.trim().strip_prefix("k8s.io/kubernetes v"))
        .and_then(|l| l.split_whitespace().next())
        .expect("tests/kube/go.mod requires k8s.io/kubernetes");
    assert_eq!(
        version["clientVersion"]["gitVersion"],
        format!("v{pinned}"),
        "{} is not the pinned kubectl: run `cargo xtask setup`",
        kubectl.display()
    );
    eprintln!(
        "kubectl {}, kustomize {}",
        version["clientVersion"]["gitVersion"], version["kustomizeVersion"]
    );

    let text = kustomize();
    let rendered: Vec<Value> = serde_saphyr::from_multiple::<Value>(&text)
        .expect("kubectl kustomize prints YAML")
        .into_iter()
        .filter(|v| !v.is_null())
        .collect();
    let k = kustomization();
    let namespace = s(&k["namespace"]);

    // Exactly the manifests' objects and the generated ConfigMap, under a name with the hash
    // of its content.
    let configmaps: Vec<&Value> = rendered
        .iter()
        .filter(|o| o["kind"] == "ConfigMap")
        .collect();
    assert_eq!(configmaps.len(), 1, "one ConfigMap, the generated one");
    let cm = configmaps[0];
    let cm_name = s(&cm["metadata"]["name"]);
    let generator = &k["configMapGenerator"][0];
    let hash = cm_name
        .strip_prefix(&format!("{}-", s(&generator["name"])))
        .unwrap_or_else(|| panic!("ConfigMap {cm_name} is not the generator's"));
    assert!(
        hash.len() == 10 && hash.bytes().all(|b| b.is_ascii_alphanumeric()),
        "ConfigMap {cm_name} carries no content hash"
    );
    let key = |o: &Value| format!("{}/{}", s(&o["kind"]), s(&o["metadata"]["name"]));
    let mut want: Vec<String> = objects().iter().map(key).collect();
    want.push(format!("ConfigMap/{cm_name}"));
    want.sort();
    let mut got: Vec<String> = rendered.iter().map(key).collect();
    got.sort();
    assert_eq!(got, want, "kubectl kustomize deploy/ renders other objects");

    // The ConfigMap holds deploy/config.yaml as it is.
    let file = s(&generator["files"][0]);
    let config = std::fs::read_to_string(deploy_dir().join(file)).expect("config file");
    assert_eq!(s(&cm["data"][file]), config, "the ConfigMap's {file}");

    let labels = k["labels"][0]["pairs"].as_object().expect("labels");
    for o in &rendered {
        let what = key(o);
        // Every namespaced object is in the kustomization's namespace, the rest in none.
        if CLUSTER_SCOPED.contains(&s(&o["kind"])) {
            assert!(
                o["metadata"]["namespace"].is_null(),
                "{what} has a namespace"
            );
        } else {
            assert_eq!(s(&o["metadata"]["namespace"]), namespace, "{what}");
        }
        // Every object carries the kustomization's labels.
        for (l, v) in labels {
            assert_eq!(o["metadata"]["labels"][l], *v, "{what}: label {l:?}");
        }
        // Every grant is to the ServiceAccount of its name (the agents' `announcer`, the
        // allocator's `announcer-allocator`), in that namespace.
        for subject in o["subjects"].as_array().into_iter().flatten() {
            assert_eq!(s(&subject["kind"]), "ServiceAccount", "{what}");
            assert_eq!(s(&subject["name"]), s(&o["metadata"]["name"]), "{what}");
            assert_eq!(s(&subject["namespace"]), namespace, "{what}");
        }
    }
    assert!(
        rendered
            .iter()
            .any(|o| o["kind"] == "Namespace" && o["metadata"]["name"] == namespace)
    );

    let ds = rendered
        .iter()
        .find(|o| o["kind"] == "DaemonSet")
        .expect("the DaemonSet");
    // The labels stay off the selector (`includeSelectors: false`: a DaemonSet's selector is
    // immutable, so a label added later must not change it).
    assert_eq!(
        ds["spec"]["selector"],
        object("DaemonSet", "announcer")["spec"]["selector"],
        "the DaemonSet's selector"
    );
    let pod = &ds["spec"]["template"]["spec"];
    // The config volume is the generated ConfigMap, by its hashed name, so that a new
    // config.yaml rolls the DaemonSet.
    let volume = pod["volumes"]
        .as_array()
        .expect("volumes")
        .iter()
        .find(|v| !v["configMap"].is_null())
        .expect("a ConfigMap volume");
    assert_eq!(s(&volume["configMap"]["name"]), cm_name);
    // The image is the one `images:` names.
    let image = &k["images"][0];
    let want_image = format!(
        "{}:{}",
        image["newName"].as_str().unwrap_or(s(&image["name"])),
        s(&image["newTag"])
    );
    assert_eq!(s(&pod["containers"][0]["image"]), want_image);

    // And the rendered install validates, as the API server would take it.
    let scratch = Scratch::new("rendered");
    let path = scratch.0.join("rendered.yaml");
    std::fs::write(&path, &text).expect("write");
    for version in KUBE_VERSIONS {
        let (ok, out) = validate(std::slice::from_ref(&path), version);
        assert!(ok, "kubectl kustomize output, Kubernetes {version}:\n{out}");
    }
}

#[test]
fn daemonset_gives_the_agent_what_it_needs_and_no_more() {
    let settings = deployed_settings();
    let ds = object("DaemonSet", "announcer");
    let pod = &ds["spec"]["template"]["spec"];
    assert_eq!(pod["hostNetwork"], true);
    assert_eq!(s(&pod["priorityClassName"]), "system-node-critical");
    assert_eq!(s(&pod["serviceAccountName"]), "announcer");
    let containers = pod["containers"].as_array().expect("containers");
    assert_eq!(containers.len(), 1);
    let c = &containers[0];

    let sc = &c["securityContext"];
    assert_ne!(sc["privileged"], true, "not privileged");
    assert_eq!(sc["allowPrivilegeEscalation"], false);
    let mut caps: Vec<&str> = sc["capabilities"]["add"]
        .as_array()
        .expect("caps")
        .iter()
        .map(s)
        .collect();
    caps.sort();
    assert_eq!(caps, ["BPF", "NET_ADMIN", "NET_RAW", "PERFMON"]);
    assert_eq!(sc["capabilities"]["drop"][0], "ALL");

    // The downward API gives the agent its node and namespace.
    let env = c["env"].as_array().expect("env");
    let field = |name: &str| {
        env.iter()
            .find(|e| e["name"] == name)
            .map(|e| s(&e["valueFrom"]["fieldRef"]["fieldPath"]).to_owned())
    };
    assert_eq!(field("NODE_NAME").as_deref(), Some("spec.nodeName"));
    assert_eq!(
        field("POD_NAMESPACE").as_deref(),
        Some("metadata.namespace")
    );

    // bpffs from the host, the config from the generated ConfigMap.
    let mount_of = |path: &str| mount_at(pod, c, path).1;
    assert_eq!(
        s(&mount_of("/sys/fs/bpf")["hostPath"]["path"]),
        "/sys/fs/bpf"
    );
    let config = mount_of("/etc/announcer");
    assert_eq!(
        config["configMap"]["name"],
        kustomization()["configMapGenerator"][0]["name"]
    );
    let args: Vec<&str> = c["args"].as_array().expect("args").iter().map(s).collect();
    assert_eq!(args, ["agent", "--config=/etc/announcer/config.yaml"]);

    // Ports and probes match what the agent listens on.
    let port = |name: &str| {
        c["ports"]
            .as_array()
            .expect("ports")
            .iter()
            .find(|p| p["name"] == name)
            .and_then(|p| p["containerPort"].as_u64())
            .unwrap_or_else(|| panic!("port {name}"))
    };
    assert_eq!(port("http"), u64::from(settings.http_address.port()));
    assert_eq!(port("heartbeat"), u64::from(settings.heartbeat_port));
    assert_eq!(c["livenessProbe"]["httpGet"]["path"], "/healthz");
    assert_eq!(c["readinessProbe"]["httpGet"]["path"], "/readyz");
    assert_eq!(c["livenessProbe"]["httpGet"]["port"], "http");
    assert_eq!(c["readinessProbe"]["httpGet"]["port"], "http");

    // The rolling update relies on the SIGTERM handover: one node at a time, no surge (host
    // ports), and a grace period longer than the handover timeout plus the Lease release.
    let ru = &ds["spec"]["updateStrategy"];
    assert_eq!(ru["type"], "RollingUpdate");
    assert_eq!(ru["rollingUpdate"]["maxSurge"], 0);
    assert_eq!(ru["rollingUpdate"]["maxUnavailable"], 1);
    let grace = pod["terminationGracePeriodSeconds"]
        .as_u64()
        .expect("grace");
    assert!(
        Duration::from_secs(grace) >= settings.handover_timeout + Duration::from_secs(5),
        "terminationGracePeriodSeconds {grace} leaves too little after handoverTimeout {:?}",
        settings.handover_timeout
    );
}

/// The agent container of the DaemonSet, and its Pod spec.
fn agent_container() -> (Value, Value) {
    let ds = object("DaemonSet", "announcer");
    let pod = ds["spec"]["template"]["spec"].clone();
    let c = pod["containers"][0].clone();
    (pod, c)
}

/// The container's mount at `path` and the Pod volume behind it.
fn mount_at(pod: &Value, c: &Value, path: &str) -> (Value, Value) {
    let m = c["volumeMounts"]
        .as_array()
        .expect("mounts")
        .iter()
        .find(|m| m["mountPath"] == path)
        .unwrap_or_else(|| panic!("nothing mounted at {path}"))
        .clone();
    let v = pod["volumes"]
        .as_array()
        .expect("volumes")
        .iter()
        .find(|v| v["name"] == m["name"])
        .expect("volume")
        .clone();
    (m, v)
}

#[test]
fn the_state_directory_is_a_read_write_host_path_where_the_agent_looks() {
    let (pod, c) = agent_container();
    let (mount, volume) = mount_at(&pod, &c, DEFAULT_STATE_ROOT);
    assert_eq!(s(&volume["hostPath"]["path"]), DEFAULT_STATE_ROOT);
    assert_eq!(s(&volume["hostPath"]["type"]), "DirectoryOrCreate");
    assert_ne!(
        mount["readOnly"], true,
        "the agent writes its identity and counter"
    );
    assert!(mount["subPath"].is_null() && mount["mountPropagation"].is_null());
    // The agent's default (no stateDir in deploy/config.yaml) is inside the mount.
    let dir = deployed_settings().state_dir();
    assert!(
        dir.starts_with(DEFAULT_STATE_ROOT) && dir != Path::new(DEFAULT_STATE_ROOT),
        "the agent keeps its state in {dir:?}, outside the hostPath mount"
    );
}

#[test]
fn the_only_writable_paths_are_the_state_directory_and_bpffs() {
    let (_, c) = agent_container();
    assert_eq!(c["securityContext"]["readOnlyRootFilesystem"], true);
    let mut writable: Vec<&str> = c["volumeMounts"]
        .as_array()
        .expect("mounts")
        .iter()
        .filter(|m| m["readOnly"] != true)
        .map(|m| s(&m["mountPath"]))
        .collect();
    writable.sort();
    assert_eq!(writable, ["/sys/fs/bpf", DEFAULT_STATE_ROOT]);
}

#[test]
fn no_key_generator_and_no_service_account_but_the_agents_the_allocators_and_the_withdrawers() {
    assert!(
        !deploy_dir().join("keygen-job.yaml").exists(),
        "deploy/keygen-job.yaml is back"
    );
    let objects = objects();
    let jobs: Vec<&Value> = objects.iter().filter(|o| o["kind"] == "Job").collect();
    assert!(jobs.is_empty(), "the install runs no Job: {jobs:?}");
    let accounts: Vec<&str> = objects
        .iter()
        .filter(|o| o["kind"] == "ServiceAccount")
        .map(|o| s(&o["metadata"]["name"]))
        .collect();
    assert_eq!(
        accounts,
        ["announcer", "announcer-allocator", "announcer-withdrawal"]
    );
}

/// The allocator (issue 25, finding 1) holds the one permission that moves addresses, so it
/// runs with nothing else: its own account, two replicas, no host network, no capability, not
/// root, a read-only root filesystem, no host path.
#[test]
fn the_allocator_deployment_runs_with_no_privilege() {
    let d = object("Deployment", "announcer-allocator");
    assert_eq!(d["spec"]["replicas"], 2, "two replicas, one active");
    let pod = &d["spec"]["template"]["spec"];
    assert_eq!(s(&pod["serviceAccountName"]), "announcer-allocator");
    assert!(
        pod["hostNetwork"].is_null() || pod["hostNetwork"] == false,
        "no host network"
    );
    assert_eq!(pod["securityContext"]["runAsNonRoot"], true);
    assert!(
        pod["volumes"]
            .as_array()
            .is_none_or(|v| v.iter().all(|v| v["hostPath"].is_null())),
        "no host path"
    );
    let containers = pod["containers"].as_array().expect("containers");
    assert_eq!(containers.len(), 1);
    let c = &containers[0];
    assert_eq!(c["args"][0], "allocator", "runs `announcer allocator`");
    let sc = &c["securityContext"];
    assert_eq!(sc["readOnlyRootFilesystem"], true);
    assert_eq!(sc["allowPrivilegeEscalation"], false);
    assert_eq!(sc["runAsNonRoot"], true);
    assert_eq!(sc["capabilities"]["drop"], serde_json::json!(["ALL"]));
    assert!(sc["capabilities"]["add"].is_null(), "no capability added");
    assert!(sc["privileged"].is_null() || sc["privileged"] == false);
    // Its identity is its Pod's name: the admission policy matches the Lease holder against
    // the token's pod-name claim.
    let env = c["env"].as_array().expect("env");
    assert!(
        env.iter().any(|e| e["name"] == "POD_NAME"
            && e["valueFrom"]["fieldRef"]["fieldPath"] == "metadata.name")
    );
    // The flags parse as `announcer allocator` parses them.
    let args: Vec<&str> = c["args"]
        .as_array()
        .expect("args")
        .iter()
        .map(|a| a.as_str().expect("string"))
        .collect();
    let mut argv = vec!["announcer"];
    argv.extend(&args);
    argv.extend(["--identity", "x"]);
    announcer::cli::Cli::try_parse_from(argv).expect("the Deployment's arguments parse");
}

/// The withdrawal controller (issue 28) may change Pods' readiness in opted-in namespaces, so
/// it too runs with nothing else: its own account, two replicas (both active), no host
/// network, no capability, not root, a read-only root filesystem, no host path; and its
/// account may write no Lease but the shared cap's, by name.
#[test]
fn the_withdrawer_deployment_runs_with_no_privilege() {
    let d = object("Deployment", "announcer-withdrawal");
    assert_eq!(d["spec"]["replicas"], 2, "two replicas, both active");
    let pod = &d["spec"]["template"]["spec"];
    assert_eq!(s(&pod["serviceAccountName"]), "announcer-withdrawal");
    assert!(
        pod["hostNetwork"].is_null() || pod["hostNetwork"] == false,
        "no host network"
    );
    assert_eq!(pod["securityContext"]["runAsNonRoot"], true);
    assert!(pod["volumes"].is_null(), "no volume");
    let c = &pod["containers"][0];
    let sc = &c["securityContext"];
    assert_eq!(sc["readOnlyRootFilesystem"], true);
    assert_eq!(sc["allowPrivilegeEscalation"], false);
    assert_eq!(sc["capabilities"]["drop"], serde_json::json!(["ALL"]));
    assert!(sc["capabilities"]["add"].is_null(), "no capability added");
    let args: Vec<&str> = c["args"].as_array().expect("args").iter().map(s).collect();
    let mut argv = vec!["announcer"];
    argv.extend(&args);
    announcer::cli::Cli::try_parse_from(argv).expect("the Deployment's arguments parse");
    // Its Lease grant names the cap's Lease, and it may not create one (the manifests do).
    let role = object("Role", "announcer-withdrawal");
    let rules = role["rules"].as_array().expect("rules");
    assert_eq!(rules.len(), 1, "{rules:?}");
    assert_eq!(
        rules[0]["resourceNames"],
        serde_json::json!(["announcer-withdrawal"])
    );
    assert_eq!(rules[0]["verbs"], serde_json::json!(["get", "update"]));
    assert_eq!(object("Lease", "announcer-withdrawal")["kind"], "Lease");
}

#[test]
fn nothing_is_granted_on_secrets() {
    let secrets: Vec<String> = objects()
        .iter()
        .filter(|o| o["kind"] == "Role" || o["kind"] == "ClusterRole")
        .flat_map(|o| o["rules"].as_array().expect("rules").clone())
        .filter(|r| {
            r["resources"]
                .as_array()
                .expect("resources")
                .iter()
                .any(|x| x == "secrets" || x == "*")
        })
        .map(|r| format!("{r:?}"))
        .collect();
    assert!(secrets.is_empty(), "rules on Secrets: {secrets:?}");
}
