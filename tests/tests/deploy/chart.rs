//! `deploy/chart/`, the Helm chart, checked as an operator would before `helm install`:
//!
//! * with its default values it renders the objects `kubectl kustomize deploy/` renders, object
//!   by object (Helm's own labels, the ConfigMap's name and the config checksum aside), but for
//!   the Namespace, which Helm needs to exist before it installs (`--create-namespace`);
//! * `helm lint --strict` passes, and the rendered objects validate against the Kubernetes
//!   schemas (the oldest and newest versions we claim), the PodMonitor and PrometheusRule
//!   against the Prometheus Operator's CRDs on a real kube-apiserver;
//! * the alerts are those `docs/operate.md` lists, one per row, on metrics the agent exports;
//! * `helm install` on a real kube-apiserver gets an agent Pod bound to every node and the
//!   allocator's replicas, as `kubectl apply -k deploy/` does; `helm upgrade` rolls the agents
//!   and `helm uninstall` leaves only the CRD, as docs/install.md says;
//! * the values change what they say (image, config keys, scheduling), every config key the
//!   agent reads has a value, and the values' schema refuses a key the agent would refuse.
//!
//! helm is the one `cargo xtask setup` builds from `tests/kube/helm/`; without it the tests
//! fail, naming that command.

use std::{
    collections::{BTreeMap, BTreeSet},
    path::{Path, PathBuf},
    process::{Command, Output},
    sync::Arc,
    time::Duration,
};

use announcer::agent::{
    config::file::ConfigFile, metrics::Metrics, net::heartbeat_socket::HeartbeatStats,
    published::PublishedState,
};
use announcer_tests::{
    env::{
        NAMESPACE,
        kube::{KubeControlPlane, KubeOptions, allocator_pods},
    },
    programs::kube_program,
};
use serde_json::Value;

use super::{KUBE_VERSIONS, Scratch, deploy_dir, kustomization, kustomize, s, validate};

/// Labels Helm charts add and the kustomization does not (the chart adds them to every object
/// it templates).
const HELM_LABELS: [&str; 4] = [
    "app.kubernetes.io/instance",
    "app.kubernetes.io/version",
    "app.kubernetes.io/managed-by",
    "helm.sh/chart",
];
/// The Pod template annotation that rolls the agents when config.yaml changes.
const CONFIG_CHECKSUM: &str = "checksum/config";
/// The chart's ConfigMap (kustomize's is this with a hash suffix).
const CONFIG_MAP: &str = "announcer-config";
/// The kinds the monitoring values add.
const MONITORING_KINDS: [&str; 2] = ["PodMonitor", "PrometheusRule"];

fn chart_dir() -> PathBuf {
    deploy_dir().join("chart")
}

/// helm, with its cache, configuration and data in a scratch directory of its own (never the
/// user's).
struct Helm {
    home: Scratch,
}

impl Helm {
    fn new(name: &str) -> Helm {
        Helm {
            home: Scratch::new(&format!("helm-{name}")),
        }
    }

    fn command(&self) -> Command {
        let mut c = Command::new(kube_program("helm"));
        for (var, sub) in [
            ("HELM_CACHE_HOME", "cache"),
            ("HELM_CONFIG_HOME", "config"),
            ("HELM_DATA_HOME", "data"),
        ] {
            c.env(var, self.home.0.join(sub));
        }
        c
    }

    /// Runs helm with `args`; panics with its output unless it succeeds.
    fn run(&self, args: &[&str]) -> String {
        let out = self.output(args);
        assert!(
            out.status.success(),
            "helm {} failed ({}):\n{}{}",
            args.join(" "),
            out.status,
            String::from_utf8_lossy(&out.stderr),
            String::from_utf8_lossy(&out.stdout)
        );
        String::from_utf8(out.stdout).expect("helm prints UTF-8")
    }

    fn output(&self, args: &[&str]) -> Output {
        self.command()
            .args(args)
            .output()
            .unwrap_or_else(|e| panic!("cannot run helm: {e}"))
    }

    /// `helm template` of the chart as release `announcer` in [`NAMESPACE`], CRDs included,
    /// with `args` (`--set ...`, `-f ...`): its YAML.
    fn template_text(&self, args: &[&str]) -> String {
        let chart = chart_dir();
        let mut all = vec![
            "template",
            "announcer",
            chart.to_str().expect("utf-8"),
            "--namespace",
            NAMESPACE,
            "--include-crds",
        ];
        all.extend(args);
        self.run(&all)
    }

    /// [`Self::template_text`], parsed: every object.
    fn template(&self, args: &[&str]) -> Vec<Value> {
        parse_objects(&self.template_text(args))
    }
}

fn parse_objects(text: &str) -> Vec<Value> {
    serde_saphyr::from_multiple::<Value>(text)
        .unwrap_or_else(|e| panic!("not YAML: {e}\n{text}"))
        .into_iter()
        .filter(|v| !v.is_null())
        .collect()
}

/// `Kind namespace/name` (namespace empty for cluster-scoped objects).
fn key(o: &Value) -> String {
    format!(
        "{} {}/{}",
        s(&o["kind"]),
        o["metadata"]["namespace"].as_str().unwrap_or(""),
        s(&o["metadata"]["name"])
    )
}

fn by_key(objects: Vec<Value>) -> BTreeMap<String, Value> {
    let mut map = BTreeMap::new();
    for o in objects {
        let k = key(&o);
        assert!(map.insert(k.clone(), o).is_none(), "{k} is rendered twice");
    }
    map
}

fn find<'a>(objects: &'a [Value], kind: &str, name: &str) -> &'a Value {
    objects
        .iter()
        .find(|o| o["kind"] == kind && o["metadata"]["name"] == name)
        .unwrap_or_else(|| panic!("no {kind} {name} rendered"))
}

/// config.yaml of the agents, as a YAML value (comments dropped) of a rendered ConfigMap.
fn config_value(cm: &Value) -> Value {
    let text = s(&cm["data"]["config.yaml"]);
    serde_saphyr::from_str::<Value>(text).unwrap_or_else(|e| panic!("config.yaml: {e}\n{text}"))
}

/// The rendered ConfigMap's config.yaml, as the agent reads it.
fn config_file(objects: &[Value]) -> ConfigFile {
    let cm = find(objects, "ConfigMap", CONFIG_MAP);
    ConfigFile::parse(s(&cm["data"]["config.yaml"]))
        .unwrap_or_else(|e| panic!("the agent rejects the chart's config.yaml: {e}"))
}

fn remove_empty(map: &mut Value, field: &str) {
    if map[field].as_object().is_some_and(|m| m.is_empty()) {
        map.as_object_mut().expect("object").remove(field);
    }
}

/// A chart object as kustomize would render it: Helm's labels (which must be there) and the
/// config checksum (ditto, on the DaemonSet) removed, config.yaml parsed, the admission
/// policies' whitespace collapsed.
fn normalise_chart(mut o: Value) -> Value {
    let what = key(&o);
    if o["kind"] != "CustomResourceDefinition" {
        let labels = o["metadata"]["labels"]
            .as_object_mut()
            .unwrap_or_else(|| panic!("{what} has no labels"));
        for l in HELM_LABELS {
            assert!(labels.remove(l).is_some(), "{what} lacks the label {l}");
        }
    }
    match s(&o["kind"]) {
        "ConfigMap" => o["data"]["config.yaml"] = config_value(&o),
        "DaemonSet" => {
            let meta = &mut o["spec"]["template"]["metadata"];
            let annotations = meta["annotations"]
                .as_object_mut()
                .unwrap_or_else(|| panic!("{what}: no Pod template annotations"));
            assert!(
                annotations.remove(CONFIG_CHECKSUM).is_some(),
                "{what}: no {CONFIG_CHECKSUM} annotation"
            );
            remove_empty(meta, "annotations");
        }
        // As kustomize's (see normalise_kustomize).
        "ValidatingAdmissionPolicy" => collapse_whitespace(&mut o["spec"]),
        _ => {}
    }
    o
}

/// A kustomize object as the chart renders it: the ConfigMap without its hash suffix (and the
/// DaemonSet's volume naming it), config.yaml parsed, the CRD without the kustomization's
/// labels (Helm installs `crds/` verbatim), the admission policies without a namespace.
fn normalise_kustomize(mut o: Value) -> Value {
    let hashed = |name: &str| {
        name.strip_prefix(CONFIG_MAP)
            .is_some_and(|rest| rest.len() == 11 && rest.starts_with('-'))
    };
    match s(&o["kind"]) {
        "ConfigMap" => {
            assert!(hashed(s(&o["metadata"]["name"])), "{}", key(&o));
            o["metadata"]["name"] = CONFIG_MAP.into();
            o["data"]["config.yaml"] = config_value(&o);
        }
        "DaemonSet" => {
            for v in o["spec"]["template"]["spec"]["volumes"]
                .as_array_mut()
                .expect("volumes")
            {
                if v["configMap"]["name"].as_str().is_some_and(hashed) {
                    v["configMap"]["name"] = CONFIG_MAP.into();
                }
            }
        }
        // kustomize does not know these kinds are cluster-scoped and gives them the
        // kustomization's namespace, which the API server ignores.
        "ValidatingAdmissionPolicyBinding" => {
            o["metadata"]
                .as_object_mut()
                .expect("metadata")
                .remove("namespace");
        }
        "ValidatingAdmissionPolicy" => {
            o["metadata"]
                .as_object_mut()
                .expect("metadata")
                .remove("namespace");
            // kustomize's YAML reads a folded (`>-`) scalar with more-indented lines with one
            // line break more than YAML 1.2 (and Helm) do; CEL and the messages do not care.
            collapse_whitespace(&mut o["spec"]);
        }
        "CustomResourceDefinition" => {
            let k = kustomization();
            let common = k["labels"][0]["pairs"].as_object().expect("labels");
            let meta = &mut o["metadata"];
            let labels = meta["labels"].as_object_mut().expect("labels");
            for l in common.keys() {
                labels.remove(l);
            }
            remove_empty(meta, "labels");
        }
        _ => {}
    }
    o
}

/// Every string under `v` with its runs of whitespace made one space.
fn collapse_whitespace(v: &mut Value) {
    match v {
        Value::String(text) => *text = text.split_whitespace().collect::<Vec<_>>().join(" "),
        Value::Array(items) => items.iter_mut().for_each(collapse_whitespace),
        Value::Object(map) => map.values_mut().for_each(collapse_whitespace),
        _ => {}
    }
}

/// Every place where `got` differs from `want`, by path (`spec.template.spec.containers[0].image`).
fn differences(want: &Value, got: &Value, path: &str, out: &mut Vec<String>) {
    match (want, got) {
        (Value::Object(w), Value::Object(g)) => {
            let keys: BTreeSet<&String> = w.keys().chain(g.keys()).collect();
            for k in keys {
                let p = if path.is_empty() {
                    k.clone()
                } else {
                    format!("{path}.{k}")
                };
                match (w.get(k), g.get(k)) {
                    (Some(a), Some(b)) => differences(a, b, &p, out),
                    (Some(a), None) => out.push(format!("{p}: only kustomize has it ({a})")),
                    (None, Some(b)) => out.push(format!("{p}: only the chart has it ({b})")),
                    (None, None) => unreachable!(),
                }
            }
        }
        (Value::Array(w), Value::Array(g)) if w.len() == g.len() => {
            for (i, (a, b)) in w.iter().zip(g).enumerate() {
                differences(a, b, &format!("{path}[{i}]"), out);
            }
        }
        (a, b) if a != b => out.push(format!("{path}: kustomize {a}, chart {b}")),
        _ => {}
    }
}

/// Both renderings, normalised and keyed; panics naming each object and path that differ.
fn assert_same_objects(kustomized: &BTreeMap<String, Value>, charted: &BTreeMap<String, Value>) {
    let want: BTreeSet<&String> = kustomized.keys().collect();
    let got: BTreeSet<&String> = charted.keys().collect();
    assert_eq!(
        want,
        got,
        "the chart renders other objects than kubectl kustomize deploy/:\n only kustomize: \
         {:?}\n only the chart: {:?}",
        want.difference(&got).collect::<Vec<_>>(),
        got.difference(&want).collect::<Vec<_>>()
    );
    let mut report = Vec::new();
    for (k, want) in kustomized {
        let mut diffs = Vec::new();
        differences(want, &charted[k], "", &mut diffs);
        report.extend(diffs.into_iter().map(|d| format!("{k}: {d}")));
    }
    assert!(
        report.is_empty(),
        "the chart's objects differ from kubectl kustomize deploy/'s:\n{}",
        report.join("\n")
    );
}

#[test]
fn helm_template_renders_the_objects_of_kubectl_kustomize() {
    let helm = Helm::new("same");
    let mut kustomized = by_key(
        parse_objects(&kustomize())
            .into_iter()
            .map(normalise_kustomize)
            .collect(),
    );
    // The one object the chart leaves out: Helm installs into a namespace that exists (made by
    // `helm install --create-namespace`, or by hand with the Pod Security labels; it cannot
    // create the release's own namespace from the chart).
    kustomized
        .remove(&format!("Namespace /{NAMESPACE}"))
        .expect("kustomize renders the Namespace");
    let charted = by_key(
        helm.template(&[])
            .into_iter()
            .map(normalise_chart)
            .collect(),
    );
    assert_same_objects(&kustomized, &charted);
}

#[test]
fn the_chart_s_crds_are_deploy_s() {
    let files = |dir: &Path| -> BTreeMap<String, Vec<u8>> {
        std::fs::read_dir(dir)
            .unwrap_or_else(|e| panic!("{dir:?}: {e}"))
            .map(|e| e.expect("entry").path())
            .map(|p| {
                let name = p.file_name().expect("name").to_string_lossy().into_owned();
                (name, std::fs::read(&p).expect("read"))
            })
            .collect()
    };
    let deploy = files(&deploy_dir().join("crds"));
    let chart = files(&chart_dir().join("crds"));
    assert_eq!(
        deploy.keys().collect::<Vec<_>>(),
        chart.keys().collect::<Vec<_>>(),
        "deploy/crds/ and deploy/chart/crds/ hold other files"
    );
    for (name, text) in &deploy {
        assert!(
            chart[name] == *text,
            "deploy/chart/crds/{name} differs from deploy/crds/{name}: copy it over"
        );
    }
}

#[test]
fn helm_lint_strict_passes() {
    let helm = Helm::new("lint");
    let chart = chart_dir();
    let chart = chart.to_str().expect("utf-8");
    for extra in [
        &[][..],
        &[
            "--set",
            "monitoring.podMonitor.enabled=true,monitoring.prometheusRule.enabled=true",
        ],
    ] {
        let mut args = vec!["lint", "--strict", chart, "--namespace", NAMESPACE];
        args.extend(extra);
        let out = helm.run(&args);
        assert!(out.contains("0 chart(s) failed"), "{out}");
    }
}

/// Writes `objects` as one YAML stream to `path`.
fn write_objects(path: &Path, objects: &[&Value]) {
    let text: Vec<String> = objects
        .iter()
        .map(|o| serde_saphyr::to_string(o).expect("yaml"))
        .collect();
    std::fs::write(path, text.join("---\n")).expect("write");
}

#[test]
fn the_rendered_chart_validates_against_the_kubernetes_schemas() {
    let helm = Helm::new("validate");
    let scratch = Scratch::new("chart-validate");
    for (what, args) in [
        ("defaults", &[][..]),
        (
            "monitoring on",
            &[
                "--set",
                "monitoring.podMonitor.enabled=true,monitoring.prometheusRule.enabled=true",
            ][..],
        ),
    ] {
        let objects = helm.template(args);
        // The Prometheus Operator's kinds are not Kubernetes': checked against its CRDs in
        // the_monitoring_objects_are_accepted_by_the_prometheus_operator_crds.
        let core: Vec<&Value> = objects
            .iter()
            .filter(|o| !MONITORING_KINDS.contains(&s(&o["kind"])))
            .collect();
        assert_eq!(
            objects.len() - core.len(),
            if what == "monitoring on" { 2 } else { 0 },
            "{what}: the monitoring objects"
        );
        let path = scratch.0.join(format!("{}.yaml", what.replace(' ', "-")));
        write_objects(&path, &core);
        for version in KUBE_VERSIONS {
            let (ok, out) = validate(std::slice::from_ref(&path), version);
            assert!(
                ok,
                "helm template ({what}) does not validate against Kubernetes {version}:\n{out}"
            );
        }
    }
}

/// The Prometheus Operator's CRDs that `cargo xtask setup` copies from its Go module.
fn prometheus_operator_crds() -> Vec<PathBuf> {
    let dir = Path::new(env!("CARGO_MANIFEST_DIR")).join("../target/prometheus-operator/crds");
    let files: Vec<PathBuf> = ["podmonitors", "prometheusrules"]
        .iter()
        .map(|k| dir.join(format!("monitoring.coreos.com_{k}.yaml")))
        .collect();
    for f in &files {
        assert!(
            f.is_file(),
            "{} is missing: run `cargo xtask setup` (it copies the Prometheus Operator's CRDs \
             from its Go module)",
            f.display()
        );
    }
    files
}

async fn control_plane(tag: &str) -> KubeControlPlane {
    KubeControlPlane::start(KubeOptions {
        tag: tag.into(),
        ..Default::default()
    })
    .await
    .unwrap_or_else(|e| panic!("control plane: {e}"))
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_monitoring_objects_are_accepted_by_the_prometheus_operator_crds() {
    let helm = Helm::new("monitoring");
    let objects = helm.template(&[
        "--set",
        "monitoring.podMonitor.enabled=true,monitoring.prometheusRule.enabled=true",
    ]);
    let monitoring: Vec<&Value> = objects
        .iter()
        .filter(|o| MONITORING_KINDS.contains(&s(&o["kind"])))
        .collect();
    assert_eq!(monitoring.len(), 2, "a PodMonitor and a PrometheusRule");

    let cp = control_plane("chart-monitoring").await;
    let kubectl = |args: &[&str]| {
        cp.kubectl(args)
            .unwrap_or_else(|e| panic!("kubectl {}: {e}", args.join(" ")))
    };
    for crd in prometheus_operator_crds() {
        kubectl(&["apply", "--server-side", "-f", crd.to_str().expect("utf-8")]);
    }
    kubectl(&[
        "wait",
        "--for=condition=Established",
        "--timeout=60s",
        "crd/podmonitors.monitoring.coreos.com",
        "crd/prometheusrules.monitoring.coreos.com",
    ]);
    kubectl(&["create", "namespace", NAMESPACE]);
    let path = cp.dir().join("monitoring.yaml");
    write_objects(&path, &monitoring);
    let file = path.to_str().expect("utf-8");
    // Strict: an unknown field is an error, as in the Kubernetes schema checks.
    kubectl(&[
        "create",
        "--dry-run=server",
        "--validate=strict",
        "-f",
        file,
    ]);

    // The check has teeth: a misspelt field is rejected.
    let text = std::fs::read_to_string(&path).expect("read");
    let bad = text.replacen("podMetricsEndpoints", "podMetricEndpoints", 1);
    assert_ne!(bad, text);
    std::fs::write(&path, bad).expect("write");
    let err = cp
        .kubectl(&[
            "create",
            "--dry-run=server",
            "--validate=strict",
            "-f",
            file,
        ])
        .expect_err("a misspelt PodMonitor field must be rejected");
    assert!(err.to_string().contains("podMetricEndpoints"), "{err}");
}

/// The metric families the agent exports, by name, with their type (`# TYPE` lines of a scrape
/// of an agent whose state, heartbeat socket and (empty) data plane are set, and that recorded
/// one of each labelled event: a family with no series is not in a scrape).
fn exported_families() -> BTreeMap<String, String> {
    let m = Metrics::new();
    let r = m.recorder();
    let peer = announcer::election::NodeName::from("node-b");
    r.refusals(&[]);
    r.peer_key_changed(&peer);
    r.heartbeat_rejected_from(&peer, "clock_skew");
    r.state_dir_problem("identity_corrupt");
    r.dataplane_up("eth0", false);
    r.attach_failed("eth0", "foreign_program");
    m.sources().set_state(PublishedState::default());
    m.sources()
        .set_heartbeat(Arc::new(HeartbeatStats::default()));
    let pins = Scratch::new("metrics-pins");
    m.sources().set_dataplane(pins.0.clone());
    m.encode()
        .lines()
        .filter_map(|l| l.strip_prefix("# TYPE "))
        .map(|l| {
            let (name, t) = l.split_once(' ').expect("# TYPE name type");
            (name.to_owned(), t.to_owned())
        })
        .collect()
}

/// Whether `sample` is a sample name of an exported family (a counter's `_total`, a
/// histogram's `_bucket`, `_sum`, `_count`, a gauge's own name).
fn is_exported(sample: &str, families: &BTreeMap<String, String>) -> bool {
    families.iter().any(|(name, t)| match t.as_str() {
        "counter" => sample == format!("{name}_total"),
        "histogram" => ["_bucket", "_sum", "_count"]
            .iter()
            .any(|suffix| sample == format!("{name}{suffix}")),
        _ => sample == name,
    })
}

/// The `announcer_*` identifiers in `text`.
fn metric_names(text: &str) -> BTreeSet<String> {
    text.split(|c: char| !(c.is_ascii_alphanumeric() || c == '_'))
        .filter(|w| w.starts_with("announcer_"))
        .map(str::to_owned)
        .collect()
}

/// The rows of docs/operate.md's "Metrics worth alerting on" table: the metrics of each.
fn documented_alert_rows() -> Vec<BTreeSet<String>> {
    let path = Path::new(env!("CARGO_MANIFEST_DIR")).join("../docs/operate.md");
    let text = std::fs::read_to_string(&path).unwrap_or_else(|e| panic!("{path:?}: {e}"));
    let section = text
        .split("### Metrics worth alerting on")
        .nth(1)
        .expect("docs/operate.md has the alerting section");
    let section = section.split("\n### ").next().expect("section");
    section
        .lines()
        .filter(|l| l.starts_with("| `announcer_"))
        .map(|l| metric_names(l.split('|').nth(1).expect("first cell")))
        .collect()
}

#[test]
fn the_alerts_are_operate_md_s_on_metrics_the_agent_exports() {
    let helm = Helm::new("alerts");
    let objects = helm.template(&["--set", "monitoring.prometheusRule.enabled=true"]);
    let rule = find(&objects, "PrometheusRule", "announcer");
    let alerts: Vec<(&str, &str)> = rule["spec"]["groups"]
        .as_array()
        .expect("groups")
        .iter()
        .flat_map(|g| g["rules"].as_array().expect("rules"))
        .map(|r| (s(&r["alert"]), s(&r["expr"])))
        .collect();
    let rows = documented_alert_rows();
    assert!(rows.len() >= 10, "the table was not found: {rows:?}");
    // One alert per row of the table, on that row's metrics.
    assert_eq!(
        alerts.len(),
        rows.len(),
        "{} alerts for the {} rows of docs/operate.md's table: {alerts:?}",
        alerts.len(),
        rows.len()
    );
    for row in &rows {
        let matching: Vec<&str> = alerts
            .iter()
            .filter(|(_, expr)| {
                let names = metric_names(expr);
                // A histogram's row names the family; the alert reads its `_bucket`s.
                row.iter().all(|m| {
                    names.contains(m)
                        || ["_bucket", "_sum", "_count"]
                            .iter()
                            .any(|suffix| names.contains(&format!("{m}{suffix}")))
                })
            })
            .map(|(a, _)| *a)
            .collect();
        assert_eq!(
            matching.len(),
            1,
            "docs/operate.md's row on {row:?} has alerts {matching:?}, not one"
        );
    }
    // Every metric an alert reads is one the agent exports.
    let families = exported_families();
    for (alert, expr) in &alerts {
        for m in metric_names(expr) {
            assert!(
                is_exported(&m, &families),
                "{alert} reads {m}, which the agent does not export (families: {:?})",
                families.keys().collect::<Vec<_>>()
            );
        }
    }
}

/// A control plane with `nodes` registered and the chart installed as docs/install.md says
/// (`helm install announcer deploy/chart -n announcer-system --create-namespace`, plus
/// `extra`); with its helm and admin kubeconfig.
async fn installed(tag: &str, nodes: &[&str], extra: &[&str]) -> (KubeControlPlane, Helm, String) {
    let cp = control_plane(tag).await;
    for n in nodes {
        cp.kubelets()
            .register(n, std::net::Ipv4Addr::LOCALHOST.into(), &[])
            .await
            .unwrap_or_else(|e| panic!("{e}"));
    }
    let helm = Helm::new(tag);
    let chart = chart_dir();
    let kubeconfig = cp.kubeconfig().to_str().expect("utf-8").to_owned();
    let mut args = vec![
        "install",
        "announcer",
        chart.to_str().expect("utf-8"),
        "--namespace",
        NAMESPACE,
        "--create-namespace",
        "--kubeconfig",
        &kubeconfig,
    ];
    args.extend(extra);
    let out = helm.run(&args);
    assert!(out.contains("STATUS: deployed"), "{out}");
    (cp, helm, kubeconfig)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn helm_install_gets_an_agent_pod_bound_to_every_node_and_the_allocator() {
    let nodes = ["node-a", "node-b", "node-c"];
    let (cp, helm, kubeconfig) = installed("helm-install", &nodes, &[]).await;
    for n in nodes {
        crate::applied::assert_agent_pod_bound(&cp, n).await;
    }
    let replicas = allocator_pods(cp.client(), 2, Duration::from_secs(60))
        .await
        .unwrap_or_else(|e| panic!("{e}\n{}", cp.log_tails()));
    for p in &replicas {
        let spec = p.spec.as_ref().expect("spec");
        assert_eq!(
            spec.service_account_name.as_deref(),
            Some("announcer-allocator")
        );
    }
    // The CRD came from the chart's crds/.
    cp.kubectl(&["get", "crd", "addresspools.announcer.dev"])
        .unwrap_or_else(|e| panic!("{e}"));
    // And Helm knows the release.
    let status = helm.run(&[
        "status",
        "announcer",
        "--namespace",
        NAMESPACE,
        "--kubeconfig",
        &kubeconfig,
    ]);
    assert!(status.contains("STATUS: deployed"), "{status}");
}

/// `kubectl get` of the agents' DaemonSet, as JSON.
fn daemonset(cp: &KubeControlPlane) -> Value {
    let out = cp
        .kubectl(&[
            "-n",
            NAMESPACE,
            "get",
            "daemonset",
            "announcer",
            "-o",
            "json",
        ])
        .unwrap_or_else(|e| panic!("{e}"));
    serde_json::from_str(&out).expect("JSON")
}

/// docs/install.md's upgrade: `helm upgrade --reuse-values` with a new tag and a config value
/// changes the agents' Pod template (the DaemonSet rolls) and their config.yaml.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn helm_upgrade_with_a_new_tag_and_config_rolls_the_agents() {
    let (cp, helm, kubeconfig) = installed("helm-upgrade", &["node-a"], &[]).await;
    let before = daemonset(&cp);
    let chart = chart_dir();
    let out = helm.run(&[
        "upgrade",
        "announcer",
        chart.to_str().expect("utf-8"),
        "--namespace",
        NAMESPACE,
        "--reuse-values",
        "--set",
        "image.tag=0.2.0,config.xdpMode=native",
        "--kubeconfig",
        &kubeconfig,
    ]);
    assert!(out.contains("REVISION: 2"), "{out}");
    let after = daemonset(&cp);
    assert_eq!(
        after["metadata"]["generation"],
        before["metadata"]["generation"]
            .as_i64()
            .expect("generation")
            + 1,
        "one new Pod template"
    );
    let template = &after["spec"]["template"];
    assert_eq!(
        template["spec"]["containers"][0]["image"],
        "announcer:0.2.0"
    );
    assert_ne!(
        template["metadata"]["annotations"][CONFIG_CHECKSUM],
        before["spec"]["template"]["metadata"]["annotations"][CONFIG_CHECKSUM],
        "the config checksum changed"
    );
    let cm: Value = serde_json::from_str(
        &cp.kubectl(&[
            "-n",
            NAMESPACE,
            "get",
            "configmap",
            CONFIG_MAP,
            "-o",
            "json",
        ])
        .unwrap_or_else(|e| panic!("{e}")),
    )
    .expect("JSON");
    let config = ConfigFile::parse(s(&cm["data"]["config.yaml"])).expect("config.yaml");
    assert_eq!(
        config.xdp_mode,
        Some(announcer::agent::config::XdpMode::Native)
    );
}

/// docs/install.md's uninstall: `helm uninstall` removes every object of the release but the
/// CRD (Helm never deletes what `crds/` installed), so the pools survive.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn helm_uninstall_removes_all_but_the_crd() {
    let (cp, helm, kubeconfig) = installed("helm-uninstall", &["node-a"], &[]).await;
    let kinds = [
        "daemonsets,deployments,configmaps,serviceaccounts,resourcequotas,roles,rolebindings",
        "clusterroles,clusterrolebindings",
        "validatingadmissionpolicies,validatingadmissionpolicybindings",
    ];
    let left = |what: &str| -> String {
        cp.kubectl(&[
            "get",
            what,
            "-A",
            "-l",
            "app.kubernetes.io/managed-by=Helm",
            "-o",
            "name",
        ])
        .unwrap_or_else(|e| panic!("{e}"))
    };
    // The release's objects are there, and found by Helm's label.
    for what in kinds {
        assert!(!left(what).trim().is_empty(), "no {what} installed");
    }
    helm.run(&[
        "uninstall",
        "announcer",
        "--namespace",
        NAMESPACE,
        "--kubeconfig",
        &kubeconfig,
    ]);
    for what in kinds {
        announcer_tests::env::kube::poll(Duration::from_secs(30), what, || {
            let l = left(what);
            async move { l.trim().is_empty().then_some(()) }
        })
        .await
        .unwrap_or_else(|e| panic!("{e}: left {}", left(what)));
    }
    cp.kubectl(&["get", "crd", "addresspools.announcer.dev"])
        .expect("the CRD stays");
}

/// The image of the DaemonSet's and the Deployment's container, and its pull policy.
fn images(objects: &[Value]) -> [(String, Value); 2] {
    [
        ("DaemonSet", "announcer"),
        ("Deployment", "announcer-allocator"),
    ]
    .map(|(kind, name)| {
        let c = &find(objects, kind, name)["spec"]["template"]["spec"]["containers"][0];
        (s(&c["image"]).to_owned(), c["imagePullPolicy"].clone())
    })
}

fn chart_metadata() -> Value {
    let path = chart_dir().join("Chart.yaml");
    let text = std::fs::read_to_string(&path).unwrap_or_else(|e| panic!("{path:?}: {e}"));
    serde_saphyr::from_str(&text).unwrap_or_else(|e| panic!("{path:?}: {e}"))
}

#[test]
fn the_image_values_set_the_image_of_the_agents_and_the_allocator() {
    let helm = Helm::new("image");
    // The default tag is the chart's appVersion, the workspace's version.
    let app_version = s(&chart_metadata()["appVersion"]).to_owned();
    assert_eq!(
        app_version,
        env!("CARGO_PKG_VERSION"),
        "Chart.yaml appVersion"
    );
    for (image, policy) in images(&helm.template(&[])) {
        assert_eq!(image, format!("announcer:{app_version}"));
        assert!(policy.is_null(), "no pull policy by default: {policy}");
    }
    for (image, policy) in images(&helm.template(&[
        "--set",
        "image.repository=registry.example.com/announcer,image.tag=0.2.0,image.pullPolicy=Always",
    ])) {
        assert_eq!(image, "registry.example.com/announcer:0.2.0");
        assert_eq!(policy, "Always");
    }
    let digest = format!("sha256:{}", "ab".repeat(32));
    for (image, _) in images(&helm.template(&[
        "--set",
        &format!("image.repository=registry.example.com/announcer,image.digest={digest}"),
    ])) {
        assert_eq!(image, format!("registry.example.com/announcer@{digest}"));
    }
}

/// The DaemonSet's Pod template annotation that rolls the agents.
fn config_checksum(objects: &[Value]) -> String {
    let ds = find(objects, "DaemonSet", "announcer");
    s(&ds["spec"]["template"]["metadata"]["annotations"][CONFIG_CHECKSUM]).to_owned()
}

#[test]
fn a_config_value_reaches_the_agents_config_and_rolls_them() {
    use announcer::agent::config::XdpMode;
    let helm = Helm::new("config");
    let defaults = helm.template(&[]);
    let changed = helm.template(&["--set", "config.xdpMode=native,config.heartbeat.port=9800"]);
    let config = config_file(&changed);
    assert_eq!(config.xdp_mode, Some(XdpMode::Native));
    assert_eq!(config.heartbeat.as_ref().and_then(|h| h.port), Some(9800));
    // The rest stays the default.
    assert_eq!(
        config.lease,
        config_file(&defaults).lease,
        "other keys keep their values"
    );
    assert_ne!(
        config_checksum(&changed),
        config_checksum(&defaults),
        "a changed config must roll the agents"
    );
    // The heartbeat port is the container port too.
    let ds = find(&changed, "DaemonSet", "announcer");
    let ports = ds["spec"]["template"]["spec"]["containers"][0]["ports"]
        .as_array()
        .expect("ports");
    let heartbeat = ports
        .iter()
        .find(|p| p["name"] == "heartbeat")
        .expect("heartbeat port");
    assert_eq!(heartbeat["containerPort"], 9800);

    // The class settings reach the allocator's flags, as allocator.yaml asks.
    let args = |objects: &[Value]| -> Vec<String> {
        find(objects, "Deployment", "announcer-allocator")["spec"]["template"]["spec"]["containers"]
            [0]["args"]
            .as_array()
            .expect("args")
            .iter()
            .map(|a| s(a).to_owned())
            .collect()
    };
    assert_eq!(args(&defaults), ["allocator"]);
    let classy = helm.template(&[
        "--set",
        "config.loadBalancerClass=example.com/l2,config.classOnly=true",
    ]);
    assert_eq!(
        args(&classy),
        [
            "allocator",
            "--load-balancer-class=example.com/l2",
            "--class-only"
        ]
    );
    let mut argv = vec!["announcer".to_owned()];
    argv.extend(args(&classy));
    argv.extend(["--identity".into(), "x".into()]);
    <announcer::cli::Cli as clap::Parser>::try_parse_from(argv)
        .expect("the allocator's arguments parse");
}

#[test]
fn the_scheduling_values_reach_the_pods() {
    let helm = Helm::new("scheduling");
    let scratch = Scratch::new("chart-scheduling");
    let values = scratch.0.join("values.yaml");
    std::fs::write(
        &values,
        "agent:\n  tolerations:\n    - key: example.com/dedicated\n      operator: Equal\n      \
         value: lb\n      effect: NoSchedule\n  nodeSelector:\n    example.com/lb: \"true\"\n  \
         resources:\n    requests:\n      cpu: 100m\n  priorityClassName: example-critical\n\
         allocator:\n  replicas: 3\n",
    )
    .expect("write");
    let objects = helm.template(&["-f", values.to_str().expect("utf-8")]);
    let pod = &find(&objects, "DaemonSet", "announcer")["spec"]["template"]["spec"];
    assert_eq!(
        pod["tolerations"],
        serde_json::json!([{"key": "example.com/dedicated", "operator": "Equal",
                            "value": "lb", "effect": "NoSchedule"}]),
        "the values' tolerations replace the default"
    );
    assert_eq!(
        pod["nodeSelector"],
        serde_json::json!({"example.com/lb": "true"})
    );
    // Maps merge into the defaults (Helm's rule; `null` removes a default).
    assert_eq!(
        pod["containers"][0]["resources"],
        serde_json::json!({"requests": {"cpu": "100m", "memory": "64Mi"},
                           "limits": {"memory": "256Mi"}}),
    );
    assert_eq!(pod["priorityClassName"], "example-critical");
    // The quota admits that class instead.
    let quota = find(&objects, "ResourceQuota", "announcer-critical-pods");
    assert_eq!(
        quota["spec"]["scopeSelector"]["matchExpressions"][0]["values"],
        serde_json::json!(["example-critical"])
    );
    assert_eq!(
        find(&objects, "Deployment", "announcer-allocator")["spec"]["replicas"],
        3
    );
}

/// The keys of the config file (or of its section `section`), from the agent's own parser:
/// an unknown key's error lists the expected ones.
fn config_keys(section: Option<&str>) -> BTreeSet<String> {
    let probe = match section {
        None => "notAKey: 1\n".to_owned(),
        Some(s) => format!("{s}:\n  notAKey: 1\n"),
    };
    let err = ConfigFile::parse(&probe)
        .expect_err("an unknown key is refused")
        .to_string();
    // "... expected one of `a`, `b`, ..." or "expected `a` or `b`".
    let expected = err
        .split_once("expected ")
        .unwrap_or_else(|| panic!("no list of keys in {err:?}"))
        .1;
    expected
        .split('`')
        .skip(1)
        .step_by(2)
        .map(str::to_owned)
        .collect()
}

#[test]
fn every_config_key_has_a_value_and_the_defaults_are_deploy_s() {
    let values_path = chart_dir().join("values.yaml");
    let values: Value =
        serde_saphyr::from_str(&std::fs::read_to_string(&values_path).expect("values.yaml"))
            .expect("values.yaml is YAML");
    let config = values["config"].as_object().expect("config:");
    let keys =
        |m: &serde_json::Map<String, Value>| -> BTreeSet<String> { m.keys().cloned().collect() };
    // `allocator:` is deprecated and ignored by the agents (the allocator is a Deployment).
    let mut want = config_keys(None);
    want.remove("allocator");
    assert_eq!(
        keys(config),
        want,
        "values.yaml's config: against the agent's keys"
    );
    for (key, value) in config {
        if let Some(section) = value.as_object() {
            assert_eq!(
                keys(section),
                config_keys(Some(key)),
                "values.yaml's config.{key}: against the agent's keys"
            );
        }
    }
    // values.schema.json knows the same keys, and no other (Helm refuses the rest).
    let schema_path = chart_dir().join("values.schema.json");
    let schema: Value =
        serde_json::from_str(&std::fs::read_to_string(&schema_path).expect("values.schema.json"))
            .expect("values.schema.json is JSON");
    let config_schema = &schema["properties"]["config"];
    assert_eq!(config_schema["additionalProperties"], false);
    let properties = config_schema["properties"].as_object().expect("properties");
    assert_eq!(
        keys(properties),
        want,
        "values.schema.json's config against the agent's keys"
    );
    for (key, value) in properties {
        if let Some(section) = value["properties"].as_object() {
            assert_eq!(
                keys(section),
                config_keys(Some(key)),
                "values.schema.json's config.{key} against the agent's keys"
            );
            assert_eq!(value["additionalProperties"], false, "config.{key}");
        }
    }
    // The rendered defaults are deploy/config.yaml's, as the agent reads them.
    let helm = Helm::new("config-keys");
    let deployed =
        ConfigFile::parse(&std::fs::read_to_string(deploy_dir().join("config.yaml")).unwrap())
            .expect("deploy/config.yaml");
    assert_eq!(config_file(&helm.template(&[])), deployed);
}

#[test]
fn helm_refuses_a_misspelt_or_invalid_config_value() {
    let helm = Helm::new("schema");
    let chart = chart_dir();
    for (set, says) in [
        ("config.xdpmode=native", "'xdpmode' not allowed"),
        ("config.heartbeat.intervall=75ms", "'intervall' not allowed"),
        ("config.xdpMode=fast", "config/xdpMode"),
        ("config.grace=5", "config/grace"),
    ] {
        let out = helm.output(&[
            "template",
            "announcer",
            chart.to_str().expect("utf-8"),
            "--set",
            set,
        ]);
        let text = String::from_utf8_lossy(&out.stderr);
        assert!(
            !out.status.success() && text.contains(says),
            "helm template --set {set}: {} {text}",
            out.status
        );
    }
}

/// `withdrawer.enabled=false` leaves out the withdrawal controller, its account, its Lease and
/// its admission policy, and nothing else.
#[test]
fn withdrawer_enabled_false_renders_no_withdrawal_object() {
    let helm = Helm::new("withdrawer-off");
    let on = helm.template(&[]);
    let off = helm.template(&["--set", "withdrawer.enabled=false"]);
    let key = |o: &Value| format!("{}/{}", s(&o["kind"]), s(&o["metadata"]["name"]));
    let on: BTreeSet<String> = on.iter().map(key).collect();
    let off: BTreeSet<String> = off.iter().map(key).collect();
    let gone: Vec<&String> = on.difference(&off).collect();
    assert_eq!(
        gone,
        [
            "ClusterRole/announcer-withdrawal",
            "ClusterRoleBinding/announcer-withdrawal",
            "Deployment/announcer-withdrawal",
            "Lease/announcer-withdrawal",
            "Role/announcer-withdrawal",
            "RoleBinding/announcer-withdrawal",
            "ServiceAccount/announcer-withdrawal",
            "ValidatingAdmissionPolicy/announcer-withdrawal-pod-status",
            "ValidatingAdmissionPolicyBinding/announcer-withdrawal-pod-status",
        ]
    );
    assert!(off.is_subset(&on));
}

/// The cap and the quorum values reach the controller's flags, which parse.
#[test]
fn the_withdrawer_values_reach_its_flags() {
    let helm = Helm::new("withdrawer-flags");
    let objects = helm.template(&[
        "--set",
        "withdrawer.maxWithdrawn=3",
        "--set",
        "withdrawer.minQuorum=4",
        "--set",
        "withdrawer.replicas=3",
    ]);
    let d = find(&objects, "Deployment", "announcer-withdrawal");
    assert_eq!(d["spec"]["replicas"], 3);
    let args: Vec<&str> = d["spec"]["template"]["spec"]["containers"][0]["args"]
        .as_array()
        .expect("args")
        .iter()
        .map(s)
        .collect();
    assert_eq!(args, ["withdrawer", "--max-withdrawn=3", "--min-quorum=4"]);
    let mut argv = vec!["announcer"];
    argv.extend(&args);
    <announcer::cli::Cli as clap::Parser>::try_parse_from(argv)
        .expect("the Deployment's arguments parse");
    let defaults = helm.template(&[]);
    assert_eq!(
        find(&defaults, "Deployment", "announcer-withdrawal")["spec"]["template"]["spec"]["containers"]
            [0]["args"],
        serde_json::json!(["withdrawer"])
    );
}
