//! The agent with its data plane, for real: the API server and one agent run inside a node
//! namespace (sharing its loopback), the agent attaches XDP (generic mode) to the node's veth,
//! and a client namespace on the other end checks what a neighbour on the LAN would see:
//! ARP/NDP answers with the node's MAC, the gratuitous announcements in its neighbour table, and
//! silence once the agent has been told to stop. Needs root; never skips.

use std::{
    net::{IpAddr, Ipv4Addr, Ipv6Addr},
    path::Path,
    time::Duration,
};

use announcer_tests::{
    cli::Cli,
    env::ApiKind,
    env::agent_cmd::AgentCommand,
    env::cluster::{owned_vips, state_at},
    env::kube::KubeControlPlane,
    env::node::{Proc, set_ingress, start_apiserver, wait},
    netns::{CLIENT_IF, NODE_IF, NODE_MAC, NODE_V4, Netns, Pair, fmt_mac, require_root},
    on_both_api_servers,
    tools::{arping, ndisc6, neigh_flush},
};
use k8s_openapi::api::{core::v1::Service, discovery::v1::EndpointSlice};
use kube::{
    Api,
    api::{Patch, PatchParams, PostParams},
};
use serde_json::{Value, json};

const VIP4: Ipv4Addr = Ipv4Addr::new(10, 77, 0, 100);
const VIP6: Ipv6Addr = Ipv6Addr::new(0xfd77, 0, 0, 0, 0, 0, 0, 0x100);
/// Control VIPs put in the data plane by hand (`vip add --permanent`) once the agent is gone:
/// still answered when the agent's entries have lapsed, so that silence for [`VIP4`] and
/// [`VIP6`] is their expiry and not a data plane that stopped answering altogether.
const CONTROL4: Ipv4Addr = Ipv4Addr::new(10, 77, 0, 101);
const CONTROL6: Ipv6Addr = Ipv6Addr::new(0xfd77, 0, 0, 0, 0, 0, 0, 0x101);
/// The agent's `/state` port inside the node namespace (nothing else listens there): its
/// default, so `status` (`status.rs`) finds it alone.
pub(crate) const HTTP: u16 = 9746;
/// Generous bound for the agent to start, attach and take the VIPs.
const T: Duration = Duration::from_secs(20);
/// How long a single ARP/NDP exchange may take.
const PROBE: Duration = Duration::from_millis(800);

/// The agent's `/state`, read from inside the node namespace.
fn state(ns: &Netns) -> Option<Value> {
    ns.enter(|| state_at(HTTP))
}

/// Starts the agent of `node-a` in `ns` (this file's and `status.rs`'s): the real data plane
/// (generic XDP) pinned under `cli`'s root, `/state` on 127.0.0.1:[`HTTP`], its kubeconfig
/// `dir/kubeconfig.node-a` (from [`start_node_api`]), its log `dir/agent.log`.
pub(crate) fn start_node_agent(ns: &Netns, cli: &Cli, dir: &Path) -> Proc {
    start_node_agent_with(ns, cli, dir, &[])
}

/// [`start_node_agent`] with `extra` flags.
pub(crate) fn start_node_agent_with(ns: &Netns, cli: &Cli, dir: &Path, extra: &[&str]) -> Proc {
    let log = dir.join("agent.log");
    let cmd = AgentCommand::new(
        "node-a",
        &dir.join("kubeconfig.node-a"),
        &dir.join("state-node-a"),
    )
    .pin_root(cli.root())
    .xdp_mode("generic")
    .http_address(format!("127.0.0.1:{HTTP}"))
    .extra(extra);
    Proc {
        child: cmd.spawn(Some(ns), &log),
        log,
    }
}

/// Whether the client's neighbour table maps `ip` to the node's MAC.
fn neighbour_is_node(client: &Netns, ip: IpAddr) -> bool {
    let out = client.ip(&["-j", "neigh", "show", "dev", CLIENT_IF]);
    let entries: Value = serde_json::from_str(&out).unwrap_or(Value::Null);
    entries.as_array().into_iter().flatten().any(|e| {
        e["dst"].as_str().and_then(|d| d.parse::<IpAddr>().ok()) == Some(ip)
            && e["lladdr"].as_str() == Some(fmt_mac(NODE_MAC).as_str())
    })
}

/// The API server of a one-node world (this file's and `status.rs`'s), with the objects of
/// [`announcer_tests::env::node::seed`]: Node `node-a` (InternalIP [`NODE_V4`], Ready),
/// Service `default/web` with a ready endpoint on node-a and `vips` as its ingress. The agent's
/// kubeconfig is `dir/kubeconfig.node-a`, for a server it reaches on the namespace's loopback.
#[expect(dead_code, reason = "held, never read: dropping it stops the server")]
pub(crate) enum NodeApi {
    /// The in-repo `apiserver` binary inside the node namespace.
    InRepo(Proc),
    /// A real control plane beside the test, reached through a relay in the node namespace;
    /// the agent's token is bound to its DaemonSet Pod on node-a.
    Kube(Box<KubeControlPlane>),
}

/// Starts the API server of `api` for the node namespace `ns`; see [`NodeApi`].
pub(crate) async fn start_node_api(
    api: ApiKind,
    tag: &str,
    ns: &Netns,
    dir: &std::path::Path,
    vips: &[IpAddr],
) -> NodeApi {
    if api == ApiKind::InRepo {
        let (proc, addr) = start_apiserver(ns, dir);
        set_ingress(ns, &addr, vips);
        return NodeApi::InRepo(proc);
    }
    let mut cp = KubeControlPlane::start_applied(tag).await;
    let url = cp
        .serve_in(ns, std::net::SocketAddr::from(([127, 0, 0, 1], 6443)))
        .expect("the API server reachable in the node namespace");
    cp.kubelets()
        .register("node-a", IpAddr::V4(NODE_V4), &[])
        .await
        .expect("register node-a");
    let client = cp.client();
    let svc: Service = serde_json::from_value(json!({
        "metadata": {"name": "web", "namespace": "default"},
        "spec": {"type": "LoadBalancer", "ports": [{"port": 80}],
                 "externalTrafficPolicy": "Cluster"},
    }))
    .expect("a Service");
    let services = Api::<Service>::namespaced(client.clone(), "default");
    services
        .create(&PostParams::default(), &svc)
        .await
        .expect("create web");
    let ingress: Vec<Value> = vips.iter().map(|v| json!({"ip": v.to_string()})).collect();
    services
        .patch_status(
            "web",
            &PatchParams::default(),
            &Patch::Merge(json!({"status": {"loadBalancer": {"ingress": ingress}}})),
        )
        .await
        .expect("web's ingress");
    let slice: EndpointSlice = serde_json::from_value(json!({
        "metadata": {"name": "web-slice", "namespace": "default",
                     "labels": {"kubernetes.io/service-name": "web"}},
        "addressType": "IPv4",
        "endpoints": [{"addresses": ["10.244.0.1"], "nodeName": "node-a",
                       "conditions": {"ready": true}}],
    }))
    .expect("an EndpointSlice");
    Api::<EndpointSlice>::namespaced(client, "default")
        .create(&PostParams::default(), &slice)
        .await
        .expect("create web's EndpointSlice");
    cp.write_agent_kubeconfig("node-a", &url, &dir.join("kubeconfig.node-a"))
        .await
        .unwrap_or_else(|e| panic!("the agent's kubeconfig: {e}"));
    NodeApi::Kube(Box::new(cp))
}

/// `vip list --json` rows for our VIPs.
fn listed(cli: &Cli) -> Vec<Value> {
    let list: Value = serde_json::from_str(&cli.ok(&["vip", "list", "--json"])).expect("json");
    list.as_array()
        .cloned()
        .unwrap_or_default()
        .into_iter()
        .filter(|v| v["vip"] == VIP4.to_string() || v["vip"] == VIP6.to_string())
        .collect()
}

on_both_api_servers! {
async fn agent_answers_announces_and_leaves_its_entries_on_their_ttl_on_sigterm(api) {
    require_root();
    let pair = Pair::new("agent-dp");
    // A LAN neighbour that learns from gratuitous ARP and unsolicited NA. Linux only creates
    // entries from them when asked to: `arp_accept`, and for IPv6 `accept_untracked_na`, which
    // only applies to a router (RFC 9131), hence `forwarding`.
    for conf in ["all", CLIENT_IF] {
        let sysctl = |key: &str| pair.client.sysctl(key, "1");
        sysctl(&format!("net.ipv4.conf.{conf}.arp_accept"));
        sysctl(&format!("net.ipv6.conf.{conf}.forwarding"));
        sysctl(&format!("net.ipv6.conf.{conf}.accept_untracked_na"));
    }
    let dir = std::env::temp_dir().join(format!("anndp-{}-{api}", std::process::id()));
    std::fs::create_dir_all(&dir).expect("dir");
    let cli = Cli::new(&pair.node);
    let _api = start_node_api(api, "agent-dp", &pair.node, &dir, &[VIP4.into(), VIP6.into()]).await;

    let mut agent = start_node_agent(&pair.node, &cli, &dir);
    let log = agent.log.clone();

    let vips = [IpAddr::V4(VIP4), IpAddr::V6(VIP6)];
    wait("the agent to own both VIPs", T, &log, || {
        state(&pair.node).is_some_and(|s| {
            let owned = owned_vips(&s);
            s["dataplane"] == true && vips.iter().all(|v| owned.contains(v))
        })
    });

    // The takeover burst reached the client: its neighbour table has both VIPs at the node's
    // MAC without it having asked.
    wait(
        "the announcements in the client's neighbour table",
        T,
        &log,
        || vips.iter().all(|v| neighbour_is_node(&pair.client, *v)),
    );

    // Asked, the node answers with its MAC.
    neigh_flush(&pair.client, CLIENT_IF);
    let r = arping(&pair.client, CLIENT_IF, VIP4, 2, PROBE);
    assert!(r.replies >= 1, "ARP for the VIP answered: {r:?}");
    assert_eq!(r.unique_macs(), vec![NODE_MAC], "{r:?}");
    assert_eq!(ndisc6(&pair.client, VIP6, CLIENT_IF, PROBE), Some(NODE_MAC));

    // The operator's view of the map: both VIPs, live, with the node's MAC, on the veth.
    let rows = listed(&cli);
    assert_eq!(rows.len(), 2, "{rows:?}");
    for r in &rows {
        assert_eq!(r["live"], true, "{r}");
        assert_eq!(r["iface"], NODE_IF, "{r}");
        assert_eq!(r["mac"].as_str(), Some(fmt_mac(NODE_MAC).as_str()), "{r}");
    }

    // SIGTERM: no peer to hand over to, so the agent exits 0 and leaves its entries to answer
    // until their TTL (the grace) runs out, rather than darken the VIPs at once; a restart
    // within the grace would pick them up again.
    // SAFETY: kill(2) on a child we spawned and have not reaped.
    unsafe { libc::kill(agent.child.id() as i32, libc::SIGTERM) };
    let mut code = None;
    wait("the agent to exit", T, &log, || {
        code = agent.child.try_wait().expect("try_wait").map(|s| s.code());
        code.is_some()
    });
    let exited = std::time::Instant::now();
    assert_eq!(code, Some(Some(0)), "exit status\n{}", agent.log_tail());
    for control in [IpAddr::V4(CONTROL4), IpAddr::V6(CONTROL6)] {
        cli.add_vip(control, NODE_IF, &["--permanent"]);
    }
    neigh_flush(&pair.client, CLIENT_IF);
    let r = arping(&pair.client, CLIENT_IF, VIP4, 2, PROBE);
    assert_eq!(
        r.unique_macs(),
        vec![NODE_MAC],
        "answered on its TTL after SIGTERM: {r:?}"
    );
    // Then the entries lapse: each write gives them the grace plus one refresh interval
    // (`entry_ttl`, 6 s at the defaults), so they go dark between 5 and 6 s after the agent's
    // last refresh, which came at most one refresh interval before it exited.
    let lapse = announcer::election::ElectionConfig::new("node-a").entry_ttl() + Duration::from_millis(500);
    if let Some(left) = lapse.checked_sub(exited.elapsed()) {
        std::thread::sleep(left);
    }
    neigh_flush(&pair.client, CLIENT_IF);
    let r = arping(&pair.client, CLIENT_IF, VIP4, 2, PROBE);
    let control = arping(&pair.client, CLIENT_IF, CONTROL4, 2, PROBE);
    assert_eq!(r.replies, 0, "VIP still answered after its TTL: {r:?}");
    assert_eq!(
        control.unique_macs(),
        vec![NODE_MAC],
        "the data plane answers the control VIP {CONTROL4}: {control:?}"
    );
    assert_eq!(ndisc6(&pair.client, VIP6, CLIENT_IF, PROBE), None);
    assert_eq!(
        ndisc6(&pair.client, CONTROL6, CLIENT_IF, PROBE),
        Some(NODE_MAC),
        "the data plane answers the control VIP {CONTROL6}"
    );
    let _ = std::fs::remove_dir_all(&dir);
}
}
