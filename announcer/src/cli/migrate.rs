//! `announcer migrate metallb`: MetalLB's layer-2 configuration (`IPAddressPool` and
//! `L2Advertisement`, `metallb.io/v1beta1`) as the equivalent [`AddressPool`]s, printed as YAML
//! documents for `kubectl apply -f -`, with a warning on stderr for each thing that has no
//! exact equivalent (`docs/migrate-from-metallb.md`).
//!
//! Why a command and not a page of instructions: MetalLB spreads one pool's behaviour over two
//! kinds of object (where its addresses go in the pool, where they are announced in the
//! advertisements that select it), and the mapping has corners (an advertisement selecting no
//! pool, a pool no advertisement selects, ORs a label selector cannot say) that are easy to get
//! wrong by hand and silent when wrong. The conversion is a pure function ([`convert`]) of the
//! objects, so every corner is unit-tested; the command only reads them (from files or the
//! API) and prints.
//!
//! What each MetalLB field becomes (also in the docs):
//! * `addresses`, `autoAssign`, `avoidBuggyIPs`: the same fields (a range's `a - b` loses its
//!   spaces).
//! * `serviceAllocation.serviceSelectors`: one becomes `serviceSelector`; several are an OR,
//!   which one label selector cannot say: the first is kept, and a warning names the others
//!   (narrower, never wider: a Service matching only another gets no address from the pool).
//! * `serviceAllocation.namespaces`: a `namespaceSelector` on `kubernetes.io/metadata.name`
//!   `In` the list (exact). Together with `namespaceSelectors`, or several of those: an OR,
//!   handled as above. MetalLB enforces `serviceAllocation` on every path, and so does the
//!   allocator with the pool's selectors: naming the pool (`announcer.dev/address-pool`) or
//!   requesting one of its addresses does not get around them.
//! * `serviceAllocation.priority`: no equivalent (warning).
//! * The `L2Advertisement`s selecting the pool (by `ipAddressPools`, `ipAddressPoolSelectors`,
//!   or all pools when both are empty): their `nodeSelectors` become the pool's `nodeSelector`
//!   when they agree on one (or any of them has none: every node); different ones are an OR
//!   (warning, the first kept: fewer nodes announce, none that MetalLB would not). Their
//!   `interfaces` are united (empty if any has none: MetalLB's "every interface" is the
//!   agent's own rule here).
//! * A pool no `L2Advertisement` selects is not announced by MetalLB: it is emitted with
//!   `autoAssign: false` (its addresses stay reserved, a Service naming it still gets one), and
//!   warned about. An advertisement selecting nothing, or naming a pool that is not there, is
//!   warned about.
//! * BGP objects (`BGPAdvertisement`, `BGPPeer`, `BFDProfile`, `Community`): not converted,
//!   warned about (this is a layer-2 announcer). Other kinds are skipped with a warning;
//!   MetalLB's own status objects silently.
//!
//! Options for a staged migration: `--auto-assign=false` emits every pool with
//! `autoAssign: false`, `--service-selector k=v` adds `k=v` to every pool's `serviceSelector`,
//! so that the new pools take only the Services moved on purpose.

use std::{
    collections::{BTreeMap, BTreeSet},
    io::Read as _,
    path::PathBuf,
    process::ExitCode,
};

use anyhow::Context as _;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::{
    LabelSelector, LabelSelectorRequirement, ObjectMeta,
};
use kube::core::{Selector, SelectorExt as _};
use serde::Deserialize;
use serde_json::Value;

use crate::{
    agent::config::yaml::{self, YamlError},
    ipam::{AddressPool, AddressPoolSpec},
};

/// MetalLB's API group.
const METALLB_GROUP: &str = "metallb.io";
/// The label every emitted pool carries, so that a rollback deletes exactly them.
pub const MIGRATED_LABEL: &str = "announcer.dev/migrated-from";
/// The namespace label the API server sets on every Namespace (its name).
const NAMESPACE_NAME_LABEL: &str = "kubernetes.io/metadata.name";
/// MetalLB's BGP kinds: not converted.
const BGP_KINDS: &[&str] = &["BGPAdvertisement", "BGPPeer", "BFDProfile", "Community"];
/// MetalLB's status objects, written by its speaker: nothing to convert, nothing to say.
const STATUS_KINDS: &[&str] = &["ServiceL2Status", "ServiceBGPStatus"];

/// `announcer migrate`.
#[derive(clap::Subcommand)]
pub enum MigrateCmd {
    /// Print MetalLB's IPAddressPools (as their L2Advertisements announce them) as
    /// AddressPools, for `kubectl apply -f -`; what cannot be expressed is warned about on
    /// stderr.
    Metallb(MetallbArgs),
}

/// `announcer migrate metallb`.
#[derive(clap::Args)]
#[command(group(clap::ArgGroup::new("source").required(true).args(["from_cluster", "filename"])))]
pub struct MetallbArgs {
    /// Read the objects from the API server.
    #[arg(long)]
    pub from_cluster: bool,
    /// With --from-cluster: MetalLB's namespace.
    #[arg(
        long,
        short = 'n',
        default_value = "metallb-system",
        conflicts_with = "filename"
    )]
    pub namespace: String,
    /// With --from-cluster: the kubeconfig (default: $KUBECONFIG, ~/.kube/config, in-cluster).
    #[arg(long, conflicts_with = "filename")]
    pub kubeconfig: Option<PathBuf>,
    /// Read the objects from this YAML file (several documents, `kind: List` too); repeatable;
    /// `-` is stdin.
    #[arg(long, short = 'f')]
    pub filename: Vec<PathBuf>,
    /// Emit every pool with this autoAssign (false: only Services naming the pool with
    /// announcer.dev/address-pool get its addresses, for a staged migration).
    #[arg(long, value_name = "BOOL")]
    pub auto_assign: Option<bool>,
    /// Add these labels (`key=value,...`) to every pool's serviceSelector: only Services
    /// carrying them get its addresses.
    #[arg(long, value_name = "LABELS")]
    pub service_selector: Option<String>,
}

/// How to convert, besides the objects.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct Options {
    /// Overrides every pool's `autoAssign`.
    pub auto_assign: Option<bool>,
    /// Labels added to every pool's `serviceSelector.matchLabels`.
    pub service_labels: BTreeMap<String, String>,
}

/// What [`convert`] made: the pools, by name, and the warnings, in the order found.
#[derive(Clone, Debug, Default)]
pub struct Conversion {
    /// The equivalent pools, sorted by name.
    pub pools: Vec<AddressPool>,
    /// What could not be expressed exactly, one sentence each, naming the object.
    pub warnings: Vec<String>,
}

/// Input that cannot be converted.
#[derive(Debug, thiserror::Error)]
pub enum MigrateError {
    /// A document is not YAML.
    #[error("not YAML: {0}")]
    Yaml(#[from] YamlError),
    /// The pools cannot be printed as YAML.
    #[error("cannot print YAML: {0}")]
    Print(#[from] serde_saphyr::SerializeError),
    /// A MetalLB object does not have the shape of its kind.
    #[error("{kind} {name}: {source}")]
    Malformed {
        /// Its kind.
        kind: String,
        /// `namespace/name`.
        name: String,
        /// What serde said.
        #[source]
        source: serde_json::Error,
    },
    /// Two pools of one name in two namespaces: an AddressPool is cluster-scoped.
    #[error(
        "IPAddressPools {first} and {second} would both be AddressPool {name} (cluster-scoped): \
         rename one"
    )]
    DuplicateName {
        /// The pool's name.
        name: String,
        /// `namespace/name` of the first.
        first: String,
        /// `namespace/name` of the second.
        second: String,
    },
    /// `--service-selector` is not `key=value,...`.
    #[error("--service-selector {0:?}: expected key=value pairs separated by commas")]
    ServiceSelector(String),
}

/// `metadata` as far as the conversion reads it.
#[derive(Clone, Debug, Default, Deserialize)]
struct Meta {
    #[serde(default)]
    name: String,
    #[serde(default)]
    namespace: Option<String>,
    #[serde(default)]
    labels: BTreeMap<String, String>,
}

impl Meta {
    fn id(&self) -> String {
        match &self.namespace {
            Some(ns) => format!("{ns}/{}", self.name),
            None => self.name.clone(),
        }
    }
}

/// MetalLB's `IPAddressPool` (the fields that matter here; unknown ones are ignored, as a
/// newer MetalLB's objects must still convert).
#[derive(Clone, Debug, Deserialize)]
struct IpAddressPool {
    #[serde(default)]
    metadata: Meta,
    spec: IpAddressPoolSpec,
}

#[derive(Clone, Debug, Deserialize)]
#[serde(rename_all = "camelCase")]
struct IpAddressPoolSpec {
    addresses: Vec<String>,
    #[serde(default)]
    auto_assign: Option<bool>,
    #[serde(default, rename = "avoidBuggyIPs")]
    avoid_buggy_ips: bool,
    #[serde(default)]
    service_allocation: Option<ServiceAllocation>,
}

#[derive(Clone, Debug, Default, Deserialize)]
#[serde(rename_all = "camelCase")]
struct ServiceAllocation {
    #[serde(default)]
    priority: Option<i64>,
    #[serde(default)]
    namespaces: Vec<String>,
    #[serde(default)]
    namespace_selectors: Vec<LabelSelector>,
    #[serde(default)]
    service_selectors: Vec<LabelSelector>,
}

/// MetalLB's `L2Advertisement`.
#[derive(Clone, Debug, Deserialize)]
struct L2Advertisement {
    #[serde(default)]
    metadata: Meta,
    #[serde(default)]
    spec: L2AdvertisementSpec,
}

#[derive(Clone, Debug, Default, Deserialize)]
#[serde(rename_all = "camelCase")]
struct L2AdvertisementSpec {
    #[serde(default)]
    ip_address_pools: Vec<String>,
    #[serde(default)]
    ip_address_pool_selectors: Vec<LabelSelector>,
    #[serde(default)]
    node_selectors: Vec<LabelSelector>,
    #[serde(default)]
    interfaces: Vec<String>,
}

/// The documents of one YAML stream, `kind: List`s flattened into their items, empty
/// documents dropped.
pub fn parse_documents(text: &str) -> Result<Vec<Value>, MigrateError> {
    let mut out = Vec::new();
    for v in yaml::documents(text)? {
        flatten(v, &mut out);
    }
    Ok(out)
}

fn flatten(v: Value, out: &mut Vec<Value>) {
    if v.is_null() {
        return;
    }
    if v["kind"] == "List" {
        if let Some(items) = v.get("items").and_then(Value::as_array) {
            for i in items {
                flatten(i.clone(), out);
            }
        }
        return;
    }
    out.push(v);
}

/// `key=value,...` as labels.
pub fn parse_labels(s: &str) -> Result<BTreeMap<String, String>, MigrateError> {
    let bad = || MigrateError::ServiceSelector(s.to_owned());
    s.split(',')
        .map(|kv| {
            let (k, v) = kv.split_once('=').ok_or_else(bad)?;
            let (k, v) = (k.trim(), v.trim());
            if k.is_empty() || k.contains(['!', '(', ')', ' ']) || v.contains(['=', ' ']) {
                return Err(bad());
            }
            Ok((k.to_owned(), v.to_owned()))
        })
        .collect()
}

fn malformed(kind: &str, doc: &Value) -> impl FnOnce(serde_json::Error) -> MigrateError {
    let name = Meta::deserialize(&doc["metadata"])
        .map(|m| m.id())
        .unwrap_or_default();
    let kind = kind.to_owned();
    move |source| MigrateError::Malformed { kind, name, source }
}

/// MetalLB's objects in `docs` as AddressPools; see the module docs for the mapping.
pub fn convert(docs: &[Value], opts: &Options) -> Result<Conversion, MigrateError> {
    let mut warnings = Vec::new();
    let mut pools: Vec<IpAddressPool> = Vec::new();
    let mut ads: Vec<L2Advertisement> = Vec::new();
    for doc in docs {
        let kind = doc["kind"].as_str().unwrap_or_default();
        let group = doc["apiVersion"]
            .as_str()
            .unwrap_or_default()
            .split('/')
            .next()
            .unwrap_or_default();
        let id = Meta::deserialize(&doc["metadata"])
            .map(|m| m.id())
            .unwrap_or_default();
        if group != METALLB_GROUP {
            warnings.push(format!(
                "{} {id}: not a MetalLB object; skipped",
                if kind.is_empty() { "(no kind)" } else { kind }
            ));
            continue;
        }
        match kind {
            "IPAddressPool" => {
                pools.push(IpAddressPool::deserialize(doc).map_err(malformed(kind, doc))?)
            }
            "L2Advertisement" => {
                ads.push(L2Advertisement::deserialize(doc).map_err(malformed(kind, doc))?)
            }
            k if BGP_KINDS.contains(&k) => warnings.push(format!(
                "{k} {id}: not converted: announcer announces on layer 2 only (no BGP); \
                 pools that only BGP advertised get autoAssign: false below"
            )),
            k if STATUS_KINDS.contains(&k) => {}
            k => warnings.push(format!("{k} {id}: not a kind this command reads; skipped")),
        }
    }

    // Which advertisements select each pool, and the advertisements that select nothing.
    let mut advertised: BTreeMap<usize, Vec<&L2Advertisement>> = BTreeMap::new();
    for ad in &ads {
        let id = ad.metadata.id();
        let s = &ad.spec;
        let mut selected = BTreeSet::new();
        if s.ip_address_pools.is_empty() && s.ip_address_pool_selectors.is_empty() {
            selected.extend(0..pools.len());
        }
        for name in &s.ip_address_pools {
            let found: Vec<usize> = (0..pools.len())
                .filter(|i| pools[*i].metadata.name == *name)
                .collect();
            if found.is_empty() {
                warnings.push(format!(
                    "L2Advertisement {id}: ipAddressPools names {name}, which is not among \
                     the IPAddressPools read"
                ));
            }
            selected.extend(found);
        }
        for sel in &s.ip_address_pool_selectors {
            let text = selector_text(sel);
            let Ok(parsed) = Selector::try_from(sel.clone()) else {
                warnings.push(format!(
                    "L2Advertisement {id}: ipAddressPoolSelector {text} is not a valid \
                     selector; it selects nothing"
                ));
                continue;
            };
            let found: Vec<usize> = (0..pools.len())
                .filter(|i| parsed.matches(&pools[*i].metadata.labels))
                .collect();
            if found.is_empty() {
                warnings.push(format!(
                    "L2Advertisement {id}: ipAddressPoolSelector {text} matches no \
                     IPAddressPool read"
                ));
            }
            selected.extend(found);
        }
        if selected.is_empty() && !pools.is_empty() {
            warnings.push(format!(
                "L2Advertisement {id}: selects no pool; it changes nothing"
            ));
        }
        for i in selected {
            advertised.entry(i).or_default().push(ad);
        }
    }

    let mut out: BTreeMap<String, (String, AddressPool)> = BTreeMap::new();
    for (i, pool) in pools.iter().enumerate() {
        let ads = advertised.get(&i).map(Vec::as_slice).unwrap_or_default();
        let id = pool.metadata.id();
        let (spec, mut w) = pool_spec(pool, ads, opts);
        warnings.extend(w.drain(..).map(|w| format!("IPAddressPool {id}: {w}")));
        let name = pool.metadata.name.clone();
        if let Some((first, _)) = out.get(&name) {
            return Err(MigrateError::DuplicateName {
                name,
                first: first.clone(),
                second: id,
            });
        }
        let mut ap = AddressPool::new(&name, spec);
        ap.metadata = ObjectMeta {
            name: Some(name.clone()),
            labels: Some([(MIGRATED_LABEL.to_owned(), "metallb".to_owned())].into()),
            ..Default::default()
        };
        out.insert(name, (id, ap));
    }
    Ok(Conversion {
        pools: out.into_values().map(|(_, p)| p).collect(),
        warnings,
    })
}

/// One pool's spec from the pool and the advertisements selecting it, and what it could not
/// say.
fn pool_spec(
    pool: &IpAddressPool,
    ads: &[&L2Advertisement],
    opts: &Options,
) -> (AddressPoolSpec, Vec<String>) {
    let mut w = Vec::new();
    let alloc = pool.spec.service_allocation.clone().unwrap_or_default();
    if let Some(p) = alloc.priority {
        w.push(format!(
            "serviceAllocation.priority {p} is not expressed: an AddressPool has no priority; \
             name the pool on a Service (announcer.dev/address-pool) where the choice matters"
        ));
    }

    let mut namespace_alternatives = Vec::new();
    if !alloc.namespaces.is_empty() {
        namespace_alternatives.push(LabelSelector {
            match_expressions: Some(vec![LabelSelectorRequirement {
                key: NAMESPACE_NAME_LABEL.into(),
                operator: "In".into(),
                values: Some(alloc.namespaces.clone()),
            }]),
            match_labels: None,
        });
    }
    namespace_alternatives.extend(alloc.namespace_selectors.iter().cloned());
    let namespace_selector = first_of_or(
        namespace_alternatives,
        "serviceAllocation's namespaces and namespaceSelectors",
        "a Service in a namespace matching only another one gets nothing from this pool, \
         named or not",
        &mut w,
    );
    let mut service_selector = first_of_or(
        alloc.service_selectors.clone(),
        "serviceAllocation.serviceSelectors",
        "a Service matching only another one gets nothing from this pool, named or not",
        &mut w,
    );
    if !opts.service_labels.is_empty() {
        let s = service_selector.get_or_insert_default();
        s.match_labels
            .get_or_insert_default()
            .extend(opts.service_labels.clone());
    }

    let mut auto_assign = pool.spec.auto_assign.unwrap_or(true);
    if ads.is_empty() {
        w.push(
            "no L2Advertisement selects it, so MetalLB does not announce its addresses: \
             emitted with autoAssign: false (a Service naming it still gets an address, and \
             announcer announces it)"
                .into(),
        );
        auto_assign = false;
    }
    if let Some(a) = opts.auto_assign {
        auto_assign = a;
    }

    // Nodes: every node if any advertisement leaves them open, else the OR of all selectors.
    let node_selector = if ads.iter().any(|a| a.spec.node_selectors.is_empty()) {
        None
    } else {
        let mut alternatives: Vec<LabelSelector> = Vec::new();
        for s in ads.iter().flat_map(|a| &a.spec.node_selectors) {
            if !alternatives.contains(s) {
                alternatives.push(s.clone());
            }
        }
        first_of_or(
            alternatives,
            "the nodeSelectors of the L2Advertisements selecting it",
            "a node matching only another one does not announce the pool's addresses",
            &mut w,
        )
    };
    let interfaces = if ads.iter().any(|a| a.spec.interfaces.is_empty()) {
        Vec::new()
    } else {
        let set: BTreeSet<&String> = ads.iter().flat_map(|a| &a.spec.interfaces).collect();
        set.into_iter().cloned().collect()
    };

    let spec = AddressPoolSpec {
        addresses: pool.spec.addresses.iter().map(|a| normalize(a)).collect(),
        auto_assign,
        avoid_buggy_ips: pool.spec.avoid_buggy_ips,
        service_selector,
        namespace_selector,
        node_selector,
        interfaces,
        preferred_nodes: Vec::new(),
    };
    (spec, w)
}

/// The first of `alternatives` (an OR in MetalLB): a label selector cannot say an OR, so more
/// than one is warned about, naming those dropped.
fn first_of_or(
    mut alternatives: Vec<LabelSelector>,
    what: &str,
    who_loses: &str,
    w: &mut Vec<String>,
) -> Option<LabelSelector> {
    if alternatives.len() > 1 {
        let dropped: Vec<String> = alternatives[1..].iter().map(selector_text).collect();
        w.push(format!(
            "{what} are an OR of {} selectors, which one label selector cannot say: kept {}, \
             dropped {} ({who_loses})",
            alternatives.len(),
            selector_text(&alternatives[0]),
            dropped.join(", ")
        ));
    }
    (!alternatives.is_empty()).then(|| alternatives.swap_remove(0))
}

/// A selector in `kubectl`'s words (`a=b,c in (d,e)`), `{}` for "everything".
fn selector_text(s: &LabelSelector) -> String {
    let text = Selector::try_from(s.clone())
        .map(|s| s.to_string())
        .unwrap_or_else(|_| format!("{s:?}"));
    if text.is_empty() {
        "{}".into()
    } else {
        format!("\"{text}\"")
    }
}

/// MetalLB's address as the AddressPool schema takes it: `a - b` without the spaces.
fn normalize(addr: &str) -> String {
    match addr.split_once('-') {
        Some((a, b)) => format!("{}-{}", a.trim(), b.trim()),
        None => addr.trim().to_owned(),
    }
}

/// The pools as YAML documents, `---` between them.
pub fn to_yaml(pools: &[AddressPool]) -> Result<String, MigrateError> {
    let mut out = String::new();
    for p in pools {
        let mut v = serde_json::to_value(p).map_err(|source| MigrateError::Malformed {
            kind: "AddressPool".into(),
            name: p.metadata.name.clone().unwrap_or_default(),
            source,
        })?;
        // The CRD's field is `avoidBuggyIPs`; `AddressPoolSpec` (camelCase) says
        // `avoidBuggyIps`, which the API server would drop (or refuse, validating strictly).
        if let Some(spec) = v.get_mut("spec").and_then(Value::as_object_mut)
            && let Some(b) = spec.remove("avoidBuggyIps")
        {
            spec.insert("avoidBuggyIPs".into(), b);
        }
        out.push_str("---\n");
        out.push_str(&yaml::to_string(&v)?);
    }
    Ok(out)
}

/// `announcer migrate`.
pub fn run(cmd: MigrateCmd) -> ExitCode {
    let MigrateCmd::Metallb(args) = cmd;
    match metallb(&args) {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("error: {e:#}");
            // EX_DATAERR for input that cannot be converted, EX_UNAVAILABLE otherwise.
            if e.downcast_ref::<MigrateError>().is_some() {
                ExitCode::from(65)
            } else {
                ExitCode::from(69)
            }
        }
    }
}

fn metallb(args: &MetallbArgs) -> anyhow::Result<()> {
    let opts = Options {
        auto_assign: args.auto_assign,
        service_labels: match &args.service_selector {
            Some(s) => parse_labels(s)?,
            None => BTreeMap::new(),
        },
    };
    let mut docs = Vec::new();
    for f in &args.filename {
        let text = if f.as_os_str() == "-" {
            let mut s = String::new();
            std::io::stdin()
                .read_to_string(&mut s)
                .context("reading stdin")?;
            s
        } else {
            std::fs::read_to_string(f).with_context(|| format!("reading {}", f.display()))?
        };
        docs.extend(parse_documents(&text).with_context(|| format!("parsing {}", f.display()))?);
    }
    if args.from_cluster {
        let rt = tokio::runtime::Builder::new_current_thread()
            .enable_all()
            .build()
            .context("starting the runtime")?;
        docs.extend(rt.block_on(from_cluster(args.kubeconfig.as_deref(), &args.namespace))?);
    }
    let c = convert(&docs, &opts)?;
    for w in &c.warnings {
        eprintln!("warning: {w}");
    }
    if c.pools.is_empty() {
        eprintln!("warning: no IPAddressPool found: nothing to print");
    }
    print!("{}", to_yaml(&c.pools)?);
    Ok(())
}

/// Every object of MetalLB's kinds in `namespace`, as documents with `apiVersion` and `kind`.
/// A kind whose CRD is not installed is skipped (MetalLB installed without BGP), except
/// `IPAddressPool`, without which there is nothing to migrate.
async fn from_cluster(
    kubeconfig: Option<&std::path::Path>,
    namespace: &str,
) -> anyhow::Result<Vec<Value>> {
    use kube::{
        Api, Client,
        api::{ApiResource, DynamicObject, ListParams},
    };
    let config = match kubeconfig {
        Some(path) => {
            let kc = kube::config::Kubeconfig::read_from(path)
                .with_context(|| format!("reading {}", path.display()))?;
            kube::Config::from_custom_kubeconfig(kc, &Default::default())
                .await
                .with_context(|| format!("loading {}", path.display()))?
        }
        None => kube::Config::infer()
            .await
            .context("no kubeconfig found (use --kubeconfig)")?,
    };
    let client = Client::try_from(config).context("building the client")?;
    let kinds = [
        ("IPAddressPool", "ipaddresspools", "v1beta1"),
        ("L2Advertisement", "l2advertisements", "v1beta1"),
        ("BGPAdvertisement", "bgpadvertisements", "v1beta1"),
        ("BGPPeer", "bgppeers", "v1beta2"),
        ("BFDProfile", "bfdprofiles", "v1beta1"),
        ("Community", "communities", "v1beta1"),
    ];
    let mut out = Vec::new();
    for (kind, plural, version) in kinds {
        let ar = ApiResource {
            group: METALLB_GROUP.into(),
            version: version.into(),
            api_version: format!("{METALLB_GROUP}/{version}"),
            kind: kind.into(),
            plural: plural.into(),
        };
        let api: Api<DynamicObject> = Api::namespaced_with(client.clone(), namespace, &ar);
        let list = match api.list(&ListParams::default()).await {
            Ok(l) => l,
            Err(kube::Error::Api(e)) if e.code == 404 && kind != "IPAddressPool" => continue,
            Err(e) => {
                return Err(e).with_context(|| {
                    format!("listing {plural}.{METALLB_GROUP} in namespace {namespace}")
                });
            }
        };
        for item in list.items {
            let mut v = serde_json::to_value(&item).context("a listed object")?;
            v["apiVersion"] = ar.api_version.clone().into();
            v["kind"] = kind.into();
            out.push(v);
        }
    }
    Ok(out)
}

#[cfg(test)]
mod golden;
#[cfg(test)]
mod tests {
    use super::*;

    /// A pool with every pool field set, and one advertisement for all pools.
    pub(super) const FULL: &str = "
apiVersion: metallb.io/v1beta1
kind: IPAddressPool
metadata: {name: prod, namespace: metallb-system, labels: {tier: prod}}
spec:
  addresses: [192.168.10.0/24, 192.168.9.1 - 192.168.9.5, 'fc00::/124']
  autoAssign: false
  avoidBuggyIPs: true
---
apiVersion: metallb.io/v1beta1
kind: L2Advertisement
metadata: {name: all, namespace: metallb-system}
";

    /// An advertisement for every pool, to append to fixtures about pools alone.
    const ADVERTISE_ALL: &str = "
---
apiVersion: metallb.io/v1beta1
kind: L2Advertisement
metadata: {name: all, namespace: metallb-system}
";

    pub(super) fn pool_doc(name: &str, labels: &str, spec_extra: &str) -> String {
        format!(
            "---\napiVersion: metallb.io/v1beta1\nkind: IPAddressPool\nmetadata: {{name: {name}, \
             namespace: metallb-system, labels: {{{labels}}}}}\nspec:\n  addresses: \
             [10.0.0.0/28]\n{spec_extra}\n"
        )
    }

    pub(super) fn ad_doc(name: &str, spec: &str) -> String {
        format!(
            "---\napiVersion: metallb.io/v1beta1\nkind: L2Advertisement\nmetadata: {{name: \
             {name}, namespace: metallb-system}}\nspec:\n{spec}\n"
        )
    }

    fn conv_with(yaml: &str, opts: &Options) -> Conversion {
        convert(&parse_documents(yaml).expect("YAML"), opts).expect("converts")
    }

    fn conv(yaml: &str) -> Conversion {
        conv_with(yaml, &Options::default())
    }

    fn spec<'a>(c: &'a Conversion, name: &str) -> &'a AddressPoolSpec {
        &c.pools
            .iter()
            .find(|p| p.metadata.name.as_deref() == Some(name))
            .unwrap_or_else(|| panic!("no pool {name} in {:?}", c.pools))
            .spec
    }

    fn labels(pairs: &[(&str, &str)]) -> LabelSelector {
        LabelSelector {
            match_labels: Some(
                pairs
                    .iter()
                    .map(|(k, v)| (k.to_string(), v.to_string()))
                    .collect(),
            ),
            match_expressions: None,
        }
    }

    fn warned(c: &Conversion, part: &str) -> bool {
        c.warnings.iter().any(|w| w.contains(part))
    }

    #[test]
    fn addresses_auto_assign_and_avoid_buggy_ips_carry_over() {
        let c = conv(FULL);
        let s = spec(&c, "prod");
        assert_eq!(
            s.addresses,
            ["192.168.10.0/24", "192.168.9.1-192.168.9.5", "fc00::/124"]
        );
        assert!(!s.auto_assign);
        assert!(s.avoid_buggy_ips);
        assert!(c.warnings.is_empty(), "{:?}", c.warnings);
    }

    #[test]
    fn auto_assign_defaults_to_true_as_in_metallb() {
        let c = conv(&(pool_doc("p", "", "") + ADVERTISE_ALL));
        assert!(spec(&c, "p").auto_assign);
    }

    #[test]
    fn the_name_is_kept_and_the_pool_labelled_as_migrated_without_namespace() {
        let c = conv(FULL);
        let m = &c.pools[0].metadata;
        assert_eq!(m.name.as_deref(), Some("prod"));
        assert_eq!(m.namespace, None);
        assert_eq!(
            m.labels.as_ref().and_then(|l| l.get(MIGRATED_LABEL)),
            Some(&"metallb".to_string())
        );
    }

    #[test]
    fn the_yaml_names_the_kind_and_the_crd_s_field_spelling() {
        let yaml = to_yaml(&conv(FULL).pools).expect("yaml");
        let docs = parse_documents(&yaml).expect("own output parses");
        assert_eq!(docs.len(), 1);
        assert_eq!(docs[0]["apiVersion"], "announcer.dev/v1alpha1");
        assert_eq!(docs[0]["kind"], "AddressPool");
        assert_eq!(docs[0]["spec"]["avoidBuggyIPs"], true);
        assert!(docs[0]["spec"].get("avoidBuggyIps").is_none());
        assert!(docs[0].get("status").is_none_or(Value::is_null));
    }

    #[test]
    fn pools_are_printed_sorted_by_name() {
        let c = conv(&(pool_doc("b", "", "") + &pool_doc("a", "", "") + ADVERTISE_ALL));
        let names: Vec<_> = c.pools.iter().map(|p| p.metadata.name.clone()).collect();
        assert_eq!(names, [Some("a".into()), Some("b".into())]);
    }

    #[test]
    fn a_pool_no_l2_advertisement_selects_gets_auto_assign_false_and_a_warning() {
        let c = conv(&pool_doc("lonely", "", ""));
        assert!(!spec(&c, "lonely").auto_assign);
        assert!(warned(&c, "lonely: no L2Advertisement selects it"));
    }

    #[test]
    fn an_advertisement_naming_no_pool_and_no_selector_selects_every_pool() {
        let c = conv(&(pool_doc("a", "", "") + &pool_doc("b", "", "") + ADVERTISE_ALL));
        assert!(spec(&c, "a").auto_assign && spec(&c, "b").auto_assign);
        assert!(c.warnings.is_empty(), "{:?}", c.warnings);
    }

    #[test]
    fn an_advertisement_naming_pools_selects_only_those() {
        let c = conv(
            &(pool_doc("a", "", "")
                + &pool_doc("b", "", "")
                + &ad_doc("only-a", "  ipAddressPools: [a]")),
        );
        assert!(spec(&c, "a").auto_assign);
        assert!(!spec(&c, "b").auto_assign);
    }

    #[test]
    fn pool_selectors_select_pools_by_label() {
        let c = conv(
            &(pool_doc("a", "tier: prod", "")
                + &pool_doc("b", "tier: dev", "")
                + &ad_doc(
                    "prod",
                    "  ipAddressPoolSelectors: [{matchLabels: {tier: prod}}]",
                )),
        );
        assert!(spec(&c, "a").auto_assign);
        assert!(!spec(&c, "b").auto_assign);
    }

    #[test]
    fn a_pool_selector_that_matches_nothing_is_warned_about() {
        let c = conv(
            &(pool_doc("a", "tier: dev", "")
                + &ad_doc(
                    "prod",
                    "  ipAddressPoolSelectors: [{matchLabels: {tier: prod}}]",
                )),
        );
        assert!(warned(
            &c,
            "L2Advertisement metallb-system/prod: ipAddressPoolSelector"
        ));
        assert!(warned(&c, "matches no IPAddressPool"));
        assert!(warned(&c, "selects no pool"));
    }

    #[test]
    fn an_advertisement_naming_a_missing_pool_is_warned_about() {
        let c = conv(&(pool_doc("a", "", "") + &ad_doc("l2", "  ipAddressPools: [a, gone]")));
        assert!(warned(&c, "names gone, which is not among"));
        assert!(spec(&c, "a").auto_assign);
    }

    #[test]
    fn one_node_selector_becomes_the_pool_s_node_selector() {
        let c = conv(
            &(pool_doc("a", "", "") + &ad_doc("l2", "  nodeSelectors: [{matchLabels: {zone: a}}]")),
        );
        assert_eq!(spec(&c, "a").node_selector, Some(labels(&[("zone", "a")])));
        assert!(c.warnings.is_empty(), "{:?}", c.warnings);
    }

    #[test]
    fn the_same_node_selector_in_two_advertisements_is_no_or() {
        let sel = "  nodeSelectors: [{matchLabels: {zone: a}}]";
        let c = conv(&(pool_doc("a", "", "") + &ad_doc("x", sel) + &ad_doc("y", sel)));
        assert_eq!(spec(&c, "a").node_selector, Some(labels(&[("zone", "a")])));
        assert!(c.warnings.is_empty(), "{:?}", c.warnings);
    }

    #[test]
    fn different_node_selectors_are_an_or_warned_about_and_the_first_kept() {
        let c = conv(
            &(pool_doc("a", "", "")
                + &ad_doc("x", "  nodeSelectors: [{matchLabels: {zone: a}}]")
                + &ad_doc("y", "  nodeSelectors: [{matchLabels: {zone: b}}]")),
        );
        assert_eq!(spec(&c, "a").node_selector, Some(labels(&[("zone", "a")])));
        assert!(warned(&c, "nodeSelectors of the L2Advertisements"));
        assert!(warned(&c, "dropped \"zone=b\""));
    }

    #[test]
    fn an_advertisement_without_node_selectors_opens_the_pool_to_every_node() {
        let c = conv(
            &(pool_doc("a", "", "")
                + &ad_doc("x", "  nodeSelectors: [{matchLabels: {zone: a}}]")
                + ADVERTISE_ALL),
        );
        assert_eq!(spec(&c, "a").node_selector, None);
        assert!(c.warnings.is_empty(), "{:?}", c.warnings);
    }

    #[test]
    fn interfaces_of_the_advertisements_are_united() {
        let c = conv(
            &(pool_doc("a", "", "")
                + &ad_doc("x", "  interfaces: [eth1, eth0]")
                + &ad_doc("y", "  interfaces: [eth0, bond0]")),
        );
        assert_eq!(spec(&c, "a").interfaces, ["bond0", "eth0", "eth1"]);
    }

    #[test]
    fn an_advertisement_without_interfaces_leaves_the_agent_s_rule() {
        let c =
            conv(&(pool_doc("a", "", "") + &ad_doc("x", "  interfaces: [eth1]") + ADVERTISE_ALL));
        assert!(spec(&c, "a").interfaces.is_empty());
    }

    #[test]
    fn namespaces_become_a_selector_on_the_namespace_name_label() {
        let c = conv(
            &(pool_doc("a", "", "  serviceAllocation: {namespaces: [web, api]}") + ADVERTISE_ALL),
        );
        let sel = spec(&c, "a").namespace_selector.clone().expect("selector");
        assert_eq!(
            sel.match_expressions,
            Some(vec![LabelSelectorRequirement {
                key: "kubernetes.io/metadata.name".into(),
                operator: "In".into(),
                values: Some(vec!["web".into(), "api".into()]),
            }])
        );
        assert!(c.warnings.is_empty(), "{:?}", c.warnings);
    }

    #[test]
    fn a_migrated_pool_for_one_namespace_is_refused_to_another_that_names_it() {
        use crate::ipam::{ADDRESS_POOL_ANNOTATION, AllocationScope, ServiceKey, plan};
        let c =
            conv(&(pool_doc("a", "", "  serviceAllocation: {namespaces: [web]}") + ADVERTISE_ALL));
        let service = |ns: &str| -> k8s_openapi::api::core::v1::Service {
            serde_json::from_value(serde_json::json!({
                "metadata": {"name": "x", "namespace": ns,
                    "annotations": {ADDRESS_POOL_ANNOTATION: "a"}},
                "spec": {"type": "LoadBalancer", "loadBalancerClass": "announcer.dev/l2",
                    "ports": [{"port": 80}]},
            }))
            .expect("service")
        };
        // The labels the API server sets on every namespace.
        let namespaces: BTreeMap<String, BTreeMap<String, String>> = ["web", "other"]
            .map(|ns| {
                (
                    ns.to_owned(),
                    [(NAMESPACE_NAME_LABEL.to_owned(), ns.to_owned())].into(),
                )
            })
            .into();
        let scope = AllocationScope {
            class: "announcer.dev/l2".into(),
            classless: false,
        };
        let p = plan(
            &c.pools,
            &[service("web"), service("other")],
            &namespaces,
            &scope,
        );
        let got = |ns: &str| {
            &p.services[&ServiceKey {
                namespace: ns.into(),
                name: "x".into(),
            }]
        };
        assert!(got("other").ips.is_empty(), "{:?}", got("other"));
        assert_eq!(
            got("other")
                .problems
                .iter()
                .map(|p| p.reason.as_str())
                .collect::<Vec<_>>(),
            ["AddressPoolNotAllowed"]
        );
        assert_eq!(got("web").ips.len(), 1, "{:?}", got("web"));
    }

    #[test]
    fn one_namespace_selector_is_kept() {
        let c = conv(
            &(pool_doc(
                "a",
                "",
                "  serviceAllocation: {namespaceSelectors: [{matchLabels: {team: x}}]}",
            ) + ADVERTISE_ALL),
        );
        assert_eq!(
            spec(&c, "a").namespace_selector,
            Some(labels(&[("team", "x")]))
        );
    }

    #[test]
    fn namespaces_with_namespace_selectors_are_an_or_warned_about() {
        let c = conv(
            &(pool_doc(
                "a",
                "",
                "  serviceAllocation: {namespaces: [web], namespaceSelectors: [{matchLabels: \
                 {team: x}}]}",
            ) + ADVERTISE_ALL),
        );
        let sel = spec(&c, "a").namespace_selector.clone().expect("selector");
        assert_eq!(
            sel.match_expressions.expect("the namespaces")[0].key,
            NAMESPACE_NAME_LABEL
        );
        assert!(warned(
            &c,
            "namespaces and namespaceSelectors are an OR of 2"
        ));
    }

    #[test]
    fn one_service_selector_is_kept() {
        let c = conv(
            &(pool_doc(
                "a",
                "",
                "  serviceAllocation: {serviceSelectors: [{matchLabels: {app: x}}]}",
            ) + ADVERTISE_ALL),
        );
        assert_eq!(
            spec(&c, "a").service_selector,
            Some(labels(&[("app", "x")]))
        );
        assert!(c.warnings.is_empty(), "{:?}", c.warnings);
    }

    #[test]
    fn several_service_selectors_are_an_or_warned_about_and_the_first_kept() {
        let c = conv(
            &(pool_doc(
                "a",
                "",
                "  serviceAllocation: {serviceSelectors: [{matchLabels: {app: x}}, \
                 {matchLabels: {app: y}}]}",
            ) + ADVERTISE_ALL),
        );
        assert_eq!(
            spec(&c, "a").service_selector,
            Some(labels(&[("app", "x")]))
        );
        assert!(warned(&c, "serviceSelectors are an OR of 2"));
        assert!(warned(&c, "dropped \"app=y\""));
    }

    #[test]
    fn priority_is_warned_about() {
        let c = conv(&(pool_doc("a", "", "  serviceAllocation: {priority: 10}") + ADVERTISE_ALL));
        assert!(warned(&c, "priority 10 is not expressed"));
    }

    #[test]
    fn bgp_objects_are_warned_about_and_not_converted() {
        let c = conv(
            "apiVersion: metallb.io/v1beta2\nkind: BGPPeer\nmetadata: {name: r, namespace: \
             metallb-system}\nspec: {myASN: 64500, peerASN: 64501, peerAddress: 10.0.0.1}\n",
        );
        assert!(c.pools.is_empty());
        assert!(warned(&c, "BGPPeer metallb-system/r: not converted"));
    }

    #[test]
    fn other_kinds_are_skipped_with_a_warning() {
        let c = conv("apiVersion: v1\nkind: ConfigMap\nmetadata: {name: config, namespace: x}\n");
        assert!(c.pools.is_empty());
        assert!(warned(&c, "ConfigMap x/config: not a MetalLB object"));
    }

    #[test]
    fn metallb_status_objects_are_skipped_silently() {
        let c = conv(
            "apiVersion: metallb.io/v1beta1\nkind: ServiceL2Status\nmetadata: {name: s, \
             namespace: metallb-system}\n",
        );
        assert!(c.warnings.is_empty(), "{:?}", c.warnings);
    }

    #[test]
    fn a_kubectl_list_is_read_item_by_item() {
        let list = format!(
            "apiVersion: v1\nkind: List\nitems:\n- {}\n",
            serde_json::to_string(&parse_documents(FULL).expect("yaml")[0]).expect("json")
        );
        let c = conv(&(list + ADVERTISE_ALL));
        assert_eq!(spec(&c, "prod").addresses.len(), 3);
    }

    #[test]
    fn the_auto_assign_option_overrides_every_pool() {
        let opts = Options {
            auto_assign: Some(false),
            ..Default::default()
        };
        let c = conv_with(&(pool_doc("a", "", "") + ADVERTISE_ALL), &opts);
        assert!(!spec(&c, "a").auto_assign);
    }

    #[test]
    fn the_service_selector_option_is_added_to_the_pool_s_own() {
        let opts = Options {
            service_labels: parse_labels("migrated=true").expect("labels"),
            ..Default::default()
        };
        let c = conv_with(
            &(pool_doc(
                "a",
                "",
                "  serviceAllocation: {serviceSelectors: [{matchLabels: {app: x}}]}",
            ) + &pool_doc("b", "", "")
                + ADVERTISE_ALL),
            &opts,
        );
        assert_eq!(
            spec(&c, "a").service_selector,
            Some(labels(&[("app", "x"), ("migrated", "true")]))
        );
        assert_eq!(
            spec(&c, "b").service_selector,
            Some(labels(&[("migrated", "true")]))
        );
    }

    #[test]
    fn the_service_selector_option_takes_only_key_value_pairs() {
        assert_eq!(
            parse_labels("a=b, c=d").expect("pairs"),
            BTreeMap::from([("a".into(), "b".into()), ("c".into(), "d".into())])
        );
        for bad in ["a", "a!=b", "a in (b)", "=b", ""] {
            assert!(parse_labels(bad).is_err(), "{bad:?} accepted");
        }
    }

    #[test]
    fn two_pools_of_one_name_in_two_namespaces_are_an_error() {
        let other = pool_doc("a", "", "").replace("metallb-system", "other");
        let docs = parse_documents(&(pool_doc("a", "", "") + &other)).expect("yaml");
        let e = convert(&docs, &Options::default()).expect_err("a clash");
        assert!(matches!(e, MigrateError::DuplicateName { .. }), "{e}");
    }

    #[test]
    fn a_pool_without_addresses_is_an_error() {
        let docs = parse_documents(
            "apiVersion: metallb.io/v1beta1\nkind: IPAddressPool\nmetadata: {name: a}\nspec: {}\n",
        )
        .expect("yaml");
        let e = convert(&docs, &Options::default()).expect_err("malformed");
        assert!(e.to_string().starts_with("IPAddressPool a:"), "{e}");
    }

    fn parse(args: &[&str]) -> Result<crate::cli::Cli, clap::Error> {
        use clap::Parser as _;
        crate::cli::Cli::try_parse_from(["announcer", "migrate", "metallb"].iter().chain(args))
    }

    #[test]
    fn the_command_needs_a_source() {
        assert!(parse(&[]).is_err());
        assert!(parse(&["--from-cluster"]).is_ok());
        assert!(parse(&["-f", "a.yaml", "-f", "-"]).is_ok());
    }

    #[test]
    fn namespace_and_kubeconfig_go_with_from_cluster_only() {
        assert!(parse(&["-f", "a.yaml", "--namespace", "x"]).is_err());
        assert!(parse(&["-f", "a.yaml", "--kubeconfig", "k"]).is_err());
        assert!(parse(&["--from-cluster", "-n", "x", "--kubeconfig", "k"]).is_ok());
    }

    #[test]
    fn text_that_is_not_yaml_is_an_error() {
        assert!(parse_documents("a: [").is_err());
    }
}
