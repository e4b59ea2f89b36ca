//! `announcer status --cluster`: every LoadBalancer VIP in the cluster with its Service, pool,
//! announcing node and interface, and how long that node has had it, read from the API server.
//!
//! Why the API and not the nodes: the agents already publish who announces what in each
//! Service's `announcer.dev/Announced` condition ([`crate::state::announced`]), so one list of
//! Services answers for the whole cluster — no agent has to be reachable, no `kubectl exec`
//! into every Pod, and RBAC to read Services (and AddressPools) is all it takes. The view is
//! as fresh as the conditions: an owner change is written by the new owner right after its
//! takeover; `announcer status` on a node remains the truth about what that node answers now.
//!
//! Rows are one per ingress IP, so an IP in `status.loadBalancer.ingress` that no agent claims
//! in the condition shows up (`not-announced`) instead of being hidden. The pool column comes
//! from the AddressPools' ranges; a cluster without the CRD, or a user who may not list
//! pools, still gets the rest (pool `-`).
//!
//! [`rows`] and [`render`] are pure (objects and a clock in, rows and text out) so the tests
//! build Services by hand; [`run`] only lists and prints.

#[cfg(test)]
mod tests;

use std::{net::IpAddr, path::Path, process::ExitCode, time::Duration};

use anyhow::Context as _;
use comfy_table::CellAlignment;
use k8s_openapi::{api::core::v1::Service, jiff::Timestamp};
use kube::{Api, Client, Resource, api::ListParams};
use serde::{Serialize, de::DeserializeOwned};

use super::table::{Column, table};
use crate::{
    ipam::{ADDRESS_POOL_ANNOTATION, AddressPool},
    state::announced,
};

/// How long the whole listing may take: a CLI that hangs on an unreachable API server is worse
/// than one that says so.
const API_TIMEOUT: Duration = Duration::from_secs(30);
/// Objects per list page (large clusters are listed in pages, as kubectl does).
const PAGE: u32 = 500;

/// Whether a VIP has an announcing node, per its Service's condition.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize)]
#[serde(rename_all = "kebab-case")]
pub enum VipState {
    /// An agent claims it in the `announcer.dev/Announced` condition.
    Announced,
    /// In the Service's ingress, but no agent claims it (no condition, or no entry for it).
    NotAnnounced,
}

impl VipState {
    /// The table's word (one token, so `awk` and `grep -w` work on it).
    pub fn as_str(self) -> &'static str {
        match self {
            VipState::Announced => "announced",
            VipState::NotAnnounced => "not-announced",
        }
    }
}

/// One ingress IP of one LoadBalancer Service.
#[derive(Clone, Debug, PartialEq, Serialize)]
pub struct ClusterRow {
    /// The VIP.
    pub vip: IpAddr,
    /// `namespace/name` of the Service.
    pub service: String,
    /// The AddressPool whose addresses contain it (`None`: in no pool, or pools not listed).
    pub pool: Option<String>,
    /// The announcing node, per the condition.
    pub node: Option<String>,
    /// Its interface (`None` also when the agent runs without a data plane).
    pub iface: Option<String>,
    /// When the Service's owner last changed (the condition's `lastTransitionTime`, RFC 3339);
    /// only for announced VIPs.
    pub since: Option<String>,
    /// Seconds from `since` to the time of the report.
    pub age_s: Option<i64>,
    /// Announced or not.
    pub state: VipState,
}

/// The whole cluster view (the `--json` document).
#[derive(Clone, Debug, PartialEq, Serialize)]
pub struct ClusterReport {
    /// Every ingress IP of every LoadBalancer Service listed, sorted by VIP, then Service.
    pub vips: Vec<ClusterRow>,
    /// Whether the AddressPools could be listed (false: CRD not installed, or forbidden).
    pub pools_listed: bool,
    /// Problems found on the way, for stderr.
    pub warnings: Vec<String>,
}

/// The rows for `services` (those not of type LoadBalancer are skipped), their pools looked
/// up in `pools`, ages taken at `now`; sorted by VIP, then Service.
pub fn rows(services: &[Service], pools: &[AddressPool], now: Timestamp) -> Vec<ClusterRow> {
    let pools = pools_by_precedence(pools);
    let mut out = Vec::new();
    for svc in services {
        let spec = svc.spec.as_ref();
        if spec.and_then(|s| s.type_.as_deref()) != Some("LoadBalancer") {
            continue;
        }
        let name = format!(
            "{}/{}",
            svc.metadata.namespace.as_deref().unwrap_or("default"),
            svc.metadata.name.as_deref().unwrap_or("")
        );
        let ingress = announced::ingress_ips(svc);
        let condition = announced::condition(svc);
        let entries = condition
            .map(|c| announced::parse(&c.message))
            .unwrap_or_default();
        let annotated = svc
            .metadata
            .annotations
            .as_ref()
            .and_then(|a| a.get(ADDRESS_POOL_ANNOTATION))
            .map(String::as_str);
        for vip in ingress {
            let entry = entries.iter().find(|e| e.ip == vip);
            let since = condition
                .filter(|_| entry.is_some())
                .map(|c| c.last_transition_time.0);
            out.push(ClusterRow {
                vip,
                service: name.clone(),
                pool: pool_of(vip, annotated, &pools).map(str::to_owned),
                node: entry.map(|e| e.node.clone()),
                iface: entry
                    .filter(|e| !e.iface.is_empty())
                    .map(|e| e.iface.clone()),
                since: since.map(|t| t.to_string()),
                age_s: since.map(|t| (now.as_second() - t.as_second()).max(0)),
                state: if entry.is_some() {
                    VipState::Announced
                } else {
                    VipState::NotAnnounced
                },
            });
        }
    }
    out.sort_by(|a, b| (a.vip, &a.service).cmp(&(b.vip, &b.service)));
    out
}

/// The pools in the order an address is attributed to them: valid ones first (a pool whose
/// `Valid` condition is `False` is not used by the allocator), then the older (an overlap is
/// reported on the newer pool), then by name, so the answer does not depend on list order.
fn pools_by_precedence(pools: &[AddressPool]) -> Vec<&AddressPool> {
    let invalid = |p: &AddressPool| {
        p.status.as_ref().is_some_and(|s| {
            s.conditions
                .iter()
                .any(|c| c.type_ == "Valid" && c.status == "False")
        })
    };
    let mut v: Vec<&AddressPool> = pools.iter().collect();
    v.sort_by_key(|p| {
        (
            invalid(p),
            p.metadata.creation_timestamp.as_ref().map(|t| t.0),
            p.metadata.name.clone(),
        )
    });
    v
}

/// The pool `ip` belongs to: the Service's annotated pool if it contains it, else the first
/// (by [`pools_by_precedence`]) that does.
fn pool_of<'a>(ip: IpAddr, annotated: Option<&str>, pools: &[&'a AddressPool]) -> Option<&'a str> {
    let name = |p: &&'a AddressPool| p.metadata.name.as_deref();
    pools
        .iter()
        .find(|p| annotated.is_some() && name(p) == annotated && p.spec.contains(ip))
        .or_else(|| pools.iter().find(|p| p.spec.contains(ip)))
        .and_then(name)
}

/// `secs` as kubectl prints an age: the largest whole unit (`45s`, `5m`, `2h`, `3d`).
pub fn short_age(secs: i64) -> String {
    let s = secs.max(0);
    match s {
        ..60 => format!("{s}s"),
        60..3600 => format!("{}m", s / 60),
        3600..86400 => format!("{}h", s / 3600),
        _ => format!("{}d", s / 86400),
    }
}

/// The report as a table, columns as wide as their widest cell, ending with a newline; a line
/// saying so when there is no VIP.
pub fn render(r: &ClusterReport) -> String {
    if r.vips.is_empty() {
        return "no LoadBalancer Service has an ingress IP\n".into();
    }
    let dash = |s: Option<&str>| s.unwrap_or("-").to_owned();
    let rows = r
        .vips
        .iter()
        .map(|v| {
            vec![
                v.vip.to_string(),
                v.service.clone(),
                dash(v.pool.as_deref()),
                dash(v.node.as_deref()),
                dash(v.iface.as_deref()),
                v.age_s.map_or_else(|| "-".into(), short_age),
                v.state.as_str().into(),
            ]
        })
        .collect();
    let columns = [
        "VIP",
        "SERVICE",
        "POOL",
        "NODE",
        "INTERFACE",
        "AGE",
        "STATE",
    ]
    .map(|name| Column(name, 0, CellAlignment::Left));
    let mut out = table(&columns, rows, 3).trim_fmt();
    out.push('\n');
    out
}

/// `announcer status --cluster`: lists, prints the table or the JSON document. Exits 78
/// (EX_CONFIG) without a usable kubeconfig, 69 (EX_UNAVAILABLE) when Services cannot be listed.
pub fn run(kubeconfig: Option<&Path>, namespace: Option<&str>, json: bool) -> ExitCode {
    let rt = match tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
    {
        Ok(rt) => rt,
        Err(e) => {
            eprintln!("error: cannot start the runtime: {e}");
            return ExitCode::from(71);
        }
    };
    let report = rt.block_on(async {
        let client = match client(kubeconfig).await {
            Ok(c) => c,
            Err(e) => return Err((78, e)),
        };
        match tokio::time::timeout(API_TIMEOUT, gather(client, namespace)).await {
            Ok(r) => r.map_err(|e| (69, e)),
            Err(_) => Err((
                69,
                anyhow::anyhow!("the API server did not answer within {API_TIMEOUT:?}"),
            )),
        }
    });
    let report = match report {
        Ok(r) => r,
        Err((code, e)) => {
            eprintln!("error: {}", causes(&e));
            return ExitCode::from(code);
        }
    };
    for w in &report.warnings {
        eprintln!("warning: {w}");
    }
    if json {
        match serde_json::to_string_pretty(&report) {
            Ok(s) => println!("{s}"),
            Err(e) => {
                eprintln!("error: cannot encode the report: {e}");
                return ExitCode::from(70);
            }
        }
    } else {
        print!("{}", render(&report));
    }
    ExitCode::SUCCESS
}

/// `e` and its causes, `: `-joined, each said once (kube's errors repeat their source in their
/// own message).
fn causes(e: &anyhow::Error) -> String {
    let mut out = String::new();
    for c in e.chain() {
        let c = c.to_string();
        if !out.contains(&c) {
            if !out.is_empty() {
                out.push_str(": ");
            }
            out.push_str(&c);
        }
    }
    out
}

/// A client from `kubeconfig`, else from the in-cluster configuration, `$KUBECONFIG` or
/// `~/.kube/config`. The agent has the same few lines, but the layering rule keeps the CLI to
/// the agent's entry points (`crate::layers`), so they are repeated here rather than widened.
async fn client(kubeconfig: Option<&Path>) -> anyhow::Result<Client> {
    let config = match kubeconfig {
        Some(path) => {
            let kc = kube::config::Kubeconfig::read_from(path)
                .with_context(|| format!("cannot read the kubeconfig {}", path.display()))?;
            kube::Config::from_custom_kubeconfig(kc, &Default::default())
                .await
                .with_context(|| format!("cannot use the kubeconfig {}", path.display()))?
        }
        None => kube::Config::infer().await.context(
            "no cluster configuration (not in a Pod, no $KUBECONFIG or ~/.kube/config); \
             give --kubeconfig",
        )?,
    };
    Client::try_from(config).context("cannot build the API client")
}

/// Lists the Services (all namespaces, or `namespace`) and the AddressPools, and builds the
/// report. Pools that cannot be listed are a warning (none when the CRD is simply absent).
async fn gather(client: Client, namespace: Option<&str>) -> anyhow::Result<ClusterReport> {
    let services: Api<Service> = match namespace {
        Some(ns) => Api::namespaced(client.clone(), ns),
        None => Api::all(client.clone()),
    };
    let services = list_all(&services).await.context("cannot list Services")?;
    let mut warnings = Vec::new();
    let (pools, pools_listed) = match list_all(&Api::<AddressPool>::all(client)).await {
        Ok(p) => (p, true),
        // The CRD is not installed: pools are optional.
        Err(kube::Error::Api(s)) if s.code == 404 => (Vec::new(), false),
        Err(e) => {
            warnings.push(format!(
                "cannot list AddressPools ({e}); the POOL column is empty"
            ));
            (Vec::new(), false)
        }
    };
    Ok(ClusterReport {
        vips: rows(&services, &pools, Timestamp::now()),
        pools_listed,
        warnings,
    })
}

/// Every object of `api`, page by page.
async fn list_all<K>(api: &Api<K>) -> Result<Vec<K>, kube::Error>
where
    K: Resource + Clone + DeserializeOwned + std::fmt::Debug,
{
    let mut out = Vec::new();
    let mut params = ListParams::default().limit(PAGE);
    loop {
        let page = api.list(&params).await?;
        out.extend(page.items);
        match page.metadata.continue_.as_deref() {
            Some(token) if !token.is_empty() => params = params.continue_token(token),
            _ => return Ok(out),
        }
    }
}
