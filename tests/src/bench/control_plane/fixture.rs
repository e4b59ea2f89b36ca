//! The objects of one benchmark case and the ownership check.
//!
//! Why concurrent creation: 1,000 Services are 4,000 requests (Service, its status, its
//! EndpointSlice); one at a time they would take longer than the measurement. Why the check
//! reads `/state` once per agent (in parallel) rather than per VIP: with 50 agents and 1,000
//! VIPs, asking every agent about every VIP is 50,000 HTTP requests per poll.

use std::{
    collections::{BTreeMap, BTreeSet},
    fmt,
    net::{IpAddr, Ipv4Addr},
};

use futures::{StreamExt, stream};

use crate::env::cluster::Cluster;

/// The namespace of the benchmark's Services.
pub const SERVICE_NAMESPACE: &str = "default";

/// One IPv4 VIP per Service, from 10.0.0.0/16 (host parts 10–209 of each /24, so never a
/// network or broadcast address).
pub fn vips(services: usize) -> Vec<Ipv4Addr> {
    assert!(
        services <= 256 * 200,
        "10.0.0.0/16 holds 51,200 benchmark VIPs"
    );
    (0..services)
        .map(|i| Ipv4Addr::new(10, 0, (i / 200) as u8, (i % 200 + 10) as u8))
        .collect()
}

/// The name of the Service of the `i`th VIP.
pub fn service_name(i: usize) -> String {
    format!("svc-{i:04}")
}

/// Creates the Nodes, Ready, `concurrency` at a time.
pub async fn create_nodes(c: &Cluster, nodes: &[String], concurrency: usize) {
    stream::iter(nodes)
        .for_each_concurrent(concurrency.max(1), |n| c.add_node(n, &[], true))
        .await;
}

/// Creates one Service per VIP (`externalTrafficPolicy: Cluster`, the VIP as its ingress IP)
/// with an EndpointSlice holding one ready endpoint on `endpoint_node`, `concurrency` at a
/// time.
pub async fn create_services(
    c: &Cluster,
    vips: &[Ipv4Addr],
    endpoint_node: &str,
    concurrency: usize,
) {
    stream::iter(vips.iter().enumerate())
        .for_each_concurrent(concurrency.max(1), |(i, vip)| async move {
            let name = service_name(i);
            let ip = vip.to_string();
            c.add_service(SERVICE_NAMESPACE, &name, &[ip.as_str()], false)
                .await;
            c.set_endpoints(SERVICE_NAMESPACE, &name, &[(endpoint_node, true)])
                .await;
        })
        .await;
}

/// How many of the bench's Services carry a true `announcer.dev/Announced` condition (the
/// owners write it once after their takeover, rate-limited: part of converging, not of the
/// steady state the window measures).
pub async fn announced_services(c: &Cluster) -> usize {
    let list =
        kube::Api::<k8s_openapi::api::core::v1::Service>::namespaced(c.client(), SERVICE_NAMESPACE)
            .list(&Default::default())
            .await;
    list.map(|l| {
        l.items
            .iter()
            .filter(|s| {
                s.status
                    .as_ref()
                    .and_then(|st| st.conditions.as_ref())
                    .is_some_and(|cs| {
                        cs.iter().any(|c| {
                            c.type_ == announcer::state::announced::CONDITION_TYPE
                                && c.status == "True"
                        })
                    })
            })
            .count()
    })
    .unwrap_or(0)
}

/// Who owns the VIPs, as the agents' `/state` says.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Ownership {
    /// Agents whose `/state` answered.
    pub answering: usize,
    /// Agents that report ready.
    pub ready: usize,
    /// VIPs announced by exactly one agent.
    pub single: usize,
    /// VIPs announced by none.
    pub none: usize,
    /// VIPs announced by more than one.
    pub multiple: usize,
}

impl Ownership {
    /// Every one of `agents` ready and every VIP with exactly one owner.
    pub fn converged(&self, agents: usize) -> bool {
        self.ready == agents && self.none == 0 && self.multiple == 0
    }

    /// Every VIP with exactly one owner.
    pub fn single_owner(&self) -> bool {
        self.none == 0 && self.multiple == 0
    }
}

impl fmt::Display for Ownership {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(
            f,
            "{} answering, {} ready; VIPs: {} one owner, {} none, {} several",
            self.answering, self.ready, self.single, self.none, self.multiple
        )
    }
}

/// The VIPs one `/state` document lists as owned.
fn owned(state: &serde_json::Value) -> BTreeSet<IpAddr> {
    state["owned"]
        .as_array()
        .map(|o| {
            o.iter()
                .filter_map(|v| v["vip"].as_str()?.parse().ok())
                .collect()
        })
        .unwrap_or_default()
}

/// Tallies the `/state` documents of the agents (`None`: did not answer) against `vips`.
pub fn tally(states: &[Option<serde_json::Value>], vips: &[Ipv4Addr]) -> Ownership {
    let mut owners: BTreeMap<IpAddr, usize> = BTreeMap::new();
    let mut o = Ownership::default();
    for s in states.iter().flatten() {
        o.answering += 1;
        if s["ready"] == serde_json::json!(true) {
            o.ready += 1;
        }
        for vip in owned(s) {
            *owners.entry(vip).or_default() += 1;
        }
    }
    for vip in vips {
        match owners.get(&IpAddr::V4(*vip)).copied().unwrap_or(0) {
            0 => o.none += 1,
            1 => o.single += 1,
            _ => o.multiple += 1,
        }
    }
    o
}

/// Reads every agent's `/state` (in parallel: they may be slow when the machine is
/// saturated) and tallies ownership of `vips`.
pub fn ownership(c: &Cluster, vips: &[Ipv4Addr]) -> Ownership {
    let nodes = c.nodes();
    // `Cluster::state` blocks (a plain HTTP client): keep the runtime's other tasks, the API
    // server among them, running meanwhile.
    let states = tokio::task::block_in_place(|| {
        std::thread::scope(|scope| {
            let handles: Vec<_> = nodes
                .iter()
                .map(|n| scope.spawn(move || c.state(n)))
                .collect();
            handles
                .into_iter()
                .map(|h| h.join().ok().flatten())
                .collect::<Vec<_>>()
        })
    });
    tally(&states, vips)
}

/// CPU seconds (user + system) used so far by this process's `announcer` children: the
/// agents. Read from `/proc/<pid>/stat` (fields 4 `ppid`, 14 `utime`, 15 `stime`).
pub fn agents_cpu_s() -> f64 {
    children_cpu_s(&["announcer"])
}

/// CPU seconds (user + system) used so far by this process's children whose command name is
/// one of `names` (e.g. `kube-apiserver`, `etcd`).
pub fn children_cpu_s(names: &[&str]) -> f64 {
    let me = std::process::id().to_string();
    let Ok(dir) = std::fs::read_dir("/proc") else {
        return 0.0;
    };
    let mut ticks = 0u64;
    for e in dir.flatten() {
        let Ok(stat) = std::fs::read_to_string(e.path().join("stat")) else {
            continue;
        };
        // The command name is in parentheses and may contain spaces: split after it.
        let (Some(open), Some(close)) = (stat.find('('), stat.rfind(')')) else {
            continue;
        };
        if !names.contains(&&stat[open + 1..close]) {
            continue;
        }
        let f: Vec<&str> = stat[close + 1..].split_whitespace().collect();
        // f[0] is field 3 (state): ppid = f[1], utime = f[11], stime = f[12].
        if f.len() > 12 && f[1] == me {
            ticks += f[11].parse::<u64>().unwrap_or(0) + f[12].parse::<u64>().unwrap_or(0);
        }
    }
    // SAFETY: sysconf has no preconditions.
    let hz = unsafe { libc::sysconf(libc::_SC_CLK_TCK) };
    ticks as f64 / if hz > 0 { hz as f64 } else { 100.0 }
}

#[cfg(test)]
mod tests {
    use serde_json::json;

    use super::*;

    #[test]
    fn vips_are_distinct_host_addresses() {
        let v = vips(1000);
        assert_eq!(v.iter().collect::<BTreeSet<_>>().len(), 1000);
        assert!(
            v.iter()
                .all(|ip| ip.octets()[3] >= 10 && ip.octets()[3] < 210)
        );
        assert_eq!(v[0], Ipv4Addr::new(10, 0, 0, 10));
    }

    #[test]
    fn tally_counts_owners_per_vip() {
        let v = vips(3);
        let s = |ready: bool, owned: &[Ipv4Addr]| {
            Some(json!({
                "ready": ready,
                "owned": owned.iter().map(|ip| json!({"vip": ip.to_string(), "iface": "lo"})).collect::<Vec<_>>(),
            }))
        };
        let states = vec![s(true, &[v[0], v[1]]), s(false, &[v[1]]), None];
        let o = tally(&states, &v);
        assert_eq!(
            o,
            Ownership {
                answering: 2,
                ready: 1,
                single: 1,
                none: 1,
                multiple: 1
            }
        );
        assert!(!o.converged(2));
        let states = vec![s(true, &[v[0], v[1]]), s(true, &[v[2]])];
        assert!(tally(&states, &v).converged(2));
    }
}
