//! The hollow-peer generator: the N−1 peers of one real agent, played by one process.
//!
//! Why: issue 29 asks what one agent costs in a cluster of 1,000 or 5,000 nodes, and a
//! 2-core machine holds a handful of real agents at most. A hollow peer is everything a real
//! agent looks like *to another agent*, and nothing else: a Node (Ready, an `InternalIP`), a
//! node Lease renewed on the agents' period with a heartbeat key, address and links, sealed
//! heartbeats at the agents' rate that echo the real agent's configuration and view
//! fingerprints and say they hear it, and a data plane that answers the real agent's probes
//! (unicast ARP requests to its MAC, nonce echoed) while it is alive. The real agent cannot
//! tell them from agents that agree with it; it pays for each the way it pays for a real one.
//!
//! What a hollow peer does not do: announce VIPs (no client asks it; the bench asks only VIPs
//! the real agent takes over), beat other hollow peers (only the real agent's costs are
//! measured), or react to the real agent's statements (acks, leaving).
//!
//! Threads (all of this process's, pinned where the caller pins the process):
//! * the sender: peer `i`'s `k`-th beat is due at `k·period + i·period/N`, so the N−1
//!   datagrams of a period are spread evenly over it; a late loop catches up in a burst, and
//!   [`Counters::beats_sent`] against [`Generator::beats_due`] says whether it kept up;
//! * the receiver: verifies every datagram of the real agent with the recipient's pairwise key
//!   and replay state (the agent's own [`Verifier`]), and takes its fingerprints;
//! * the responder: answers ARP probes addressed to a live hollow peer's MAC;
//! * on the caller's runtime, [`renew_leases`] and [`churn`].
//!
//! Crashing a hollow peer ([`Generator::crash`]) stops its beats, its probe answers and its
//! Lease renewals at once, and tells when its last beat left; [`Generator::restart`] brings it
//! back with a new incarnation, as a restarted agent would.

use std::{
    collections::HashMap,
    net::{Ipv4Addr, SocketAddr, UdpSocket},
    sync::{
        Arc,
        atomic::{AtomicBool, AtomicU64, Ordering},
    },
    thread,
    time::{Duration, Instant, SystemTime, UNIX_EPOCH},
};

use announcer::{
    agent::kube::node_lease::{LeaseContents, NodeLease, WriteBody},
    election::{Beat, Link, NodeName},
    heartbeat::{Identity, Keyring, PublicKey, Sealer, Verifier, wire::Packet},
    wire::MacAddr,
};
use anyhow::{Context, Result};
use k8s_openapi::api::coordination::v1::Lease;
use kube::Api;

use crate::{env::packet::PacketSocket, frames};

/// `ETH_P_ARP`.
const ETH_P_ARP: u16 = 0x0806;
/// Offset of the ARP packet in an untagged frame, and its length: the probe's nonce follows
/// it in the frame's padding ([`announcer::agent::net::probe`]).
const ARP_AT: usize = 14;
const ARP_LEN: usize = 28;
const NONCE_LEN: usize = 8;
/// The minimum Ethernet frame without its FCS.
const MIN_FRAME: usize = 60;

/// The name of hollow peer `i` (0-based): `hollow-00001`, ...
pub fn hollow_name(i: usize) -> String {
    format!("hollow-{:05}", i + 1)
}

/// The MAC of hollow peer `i`: locally administered, `02:68:xx:xx:xx:xx`.
pub fn hollow_mac(i: usize) -> MacAddr {
    let b = (i as u32 + 1).to_be_bytes();
    MacAddr([0x02, 0x68, b[0], b[1], b[2], b[3]])
}

/// The `InternalIP` of hollow peer `i`'s Node: in 10.200.0.0/14, off the testbed's LAN (no
/// VIP is refused for it, nothing is routed to it).
pub fn hollow_node_ip(i: usize) -> Ipv4Addr {
    Ipv4Addr::from(u32::from(Ipv4Addr::new(10, 200, 0, 0)) + i as u32 + 1)
}

/// What the real agent publishes and runs with, as the generator needs it.
#[derive(Clone, Debug)]
pub struct AgentSide {
    /// Its node name.
    pub node: NodeName,
    /// Its heartbeat public key (from its Lease).
    pub key: PublicKey,
    /// Its heartbeat address (from its Lease).
    pub heartbeat: SocketAddr,
    /// Its links (from its Lease): every hollow peer publishes the same with its own MAC.
    pub links: Vec<Link>,
    /// The namespace of the node Leases.
    pub namespace: String,
}

/// Timing of the peers: the agents' defaults unless a bench says otherwise.
#[derive(Clone, Copy, Debug)]
pub struct Timing {
    /// Between two beats of one peer.
    pub heartbeat_interval: Duration,
    /// Between two Lease renewals of one peer.
    pub lease_renew: Duration,
    /// The Lease duration written.
    pub lease_duration: Duration,
    /// A peer says it hears the agent if a beat of the agent arrived within this.
    pub hears_within: Duration,
}

impl Default for Timing {
    fn default() -> Self {
        use announcer::election::defaults as d;
        Self {
            heartbeat_interval: d::HEARTBEAT_INTERVAL,
            lease_renew: d::LEASE_RENEW,
            lease_duration: d::LEASE_DURATION,
            hears_within: d::HEARTBEAT_INTERVAL * d::HEARTBEAT_MISSES,
        }
    }
}

/// The generator's counters.
#[derive(Debug, Default)]
pub struct Counters {
    /// Beats sealed and handed to the kernel.
    pub beats_sent: AtomicU64,
    /// Beats that could not be sent.
    pub send_errors: AtomicU64,
    /// Datagrams of the real agent verified.
    pub beats_received: AtomicU64,
    /// Datagrams of the real agent rejected (any reason).
    pub beats_rejected: AtomicU64,
    /// Probes to a hollow MAC seen, and answered (the peer was alive).
    pub probes_seen: AtomicU64,
    pub probes_answered: AtomicU64,
    /// Lease writes done, and failed (conflicts re-read and retried next round).
    pub lease_writes: AtomicU64,
    pub lease_failures: AtomicU64,
    /// Churn writes done, and failed.
    pub churn_writes: AtomicU64,
    pub churn_failures: AtomicU64,
}

impl Counters {
    /// The value of one counter.
    pub fn get(c: &AtomicU64) -> u64 {
        c.load(Ordering::Relaxed)
    }

    fn bump(c: &AtomicU64) {
        c.fetch_add(1, Ordering::Relaxed);
    }
}

/// One hollow peer's shared state.
struct PeerState {
    alive: AtomicBool,
    /// Its agent is frozen: no beats, but its data plane answers and its Lease is renewed.
    muted: AtomicBool,
    /// Its incarnation (the sender re-seals under a new one when it changes).
    incarnation: AtomicU64,
    /// Nanoseconds after [`Generator::epoch`] of its last beat sent (0: none).
    last_sent_ns: AtomicU64,
    /// Nanoseconds after the epoch of the last beat of the agent it received (0: none).
    heard_ns: AtomicU64,
}

/// What the generator's threads share.
struct Shared {
    names: Vec<NodeName>,
    states: Vec<PeerState>,
    keyrings: Vec<Keyring>,
    counters: Arc<Counters>,
    /// Fingerprints of the agent's configuration and view, from its last verified beat.
    fingerprints: (AtomicU64, AtomicU64),
    /// What the peers' `*_ns` times count from.
    epoch: Instant,
    timing: Timing,
    stop: Arc<AtomicBool>,
}

/// The running generator; dropping it stops its threads.
pub struct Generator {
    shared: Arc<Shared>,
    threads: Vec<thread::JoinHandle<()>>,
}

impl Generator {
    /// Makes `peers` identities, each keyed with the agent's public key. Starts nothing: the
    /// Leases come first ([`renew_leases`]), so the agent knows the keys before beats arrive.
    pub fn new(peers: usize, agent: &AgentSide, timing: Timing) -> Result<Self> {
        let mut keyrings = Vec::with_capacity(peers);
        for _ in 0..peers {
            let mut k = Keyring::new(Identity::generate());
            k.set_peer(agent.node.clone(), agent.key)
                .context("keying a hollow peer with the agent's public key")?;
            keyrings.push(k);
        }
        let incarnation = unix_ns();
        let states = (0..peers)
            .map(|_| PeerState {
                alive: AtomicBool::new(true),
                muted: AtomicBool::new(false),
                incarnation: AtomicU64::new(incarnation),
                last_sent_ns: AtomicU64::new(0),
                heard_ns: AtomicU64::new(0),
            })
            .collect();
        Ok(Self {
            shared: Arc::new(Shared {
                names: (0..peers).map(|i| NodeName::from(hollow_name(i))).collect(),
                states,
                keyrings,
                counters: Arc::default(),
                fingerprints: Default::default(),
                epoch: Instant::now(),
                timing,
                stop: Arc::default(),
            }),
            threads: Vec::new(),
        })
    }

    /// Peer `i`'s name.
    pub fn name(&self, i: usize) -> &NodeName {
        &self.shared.names[i]
    }

    /// The counters.
    pub fn counters(&self) -> &Counters {
        &self.shared.counters
    }

    /// Peer `i`'s Lease contents: its key, the agent's links with its own MAC.
    pub fn lease_contents(&self, i: usize, agent: &AgentSide) -> LeaseContents {
        let links = agent
            .links
            .iter()
            .map(|l| Link {
                mac: hollow_mac(i),
                ..l.clone()
            })
            .collect();
        LeaseContents {
            key: Some(self.shared.keyrings[i].public().to_string()),
            links: Some(links),
            ..LeaseContents::default()
        }
    }

    /// Starts the sender and the receiver on `socket` (bound where the peers' Leases say, in
    /// the namespace the agent reaches them in) and the probe responder on `responder`.
    pub fn start(
        &mut self,
        socket: UdpSocket,
        responder: PacketSocket,
        agent: &AgentSide,
    ) -> Result<()> {
        socket
            .set_read_timeout(Some(Duration::from_millis(100)))
            .context("receive timeout on the generator's socket")?;
        let rx = socket
            .try_clone()
            .context("cloning the generator's socket")?;
        let sender = Sender {
            socket,
            to: agent.heartbeat,
            agent: agent.node.clone(),
            shared: Arc::clone(&self.shared),
            started: Instant::now(),
        };
        self.threads.push(
            thread::Builder::new()
                .name("hollow-send".into())
                .spawn(move || sender.run())?,
        );
        let receiver = Receiver {
            socket: rx,
            shared: Arc::clone(&self.shared),
        };
        self.threads.push(
            thread::Builder::new()
                .name("hollow-recv".into())
                .spawn(move || receiver.run())?,
        );
        let macs: HashMap<[u8; 6], usize> = (0..self.shared.names.len())
            .map(|i| (hollow_mac(i).0, i))
            .collect();
        let shared = Arc::clone(&self.shared);
        self.threads.push(
            thread::Builder::new()
                .name("hollow-probes".into())
                .spawn(move || respond(&responder, &macs, &shared))?,
        );
        Ok(())
    }

    /// Beats due in `alive_peer_seconds` (the sum over peers of the time each was alive), on
    /// the sender's schedule.
    pub fn beats_due(&self, alive_peer_seconds: f64) -> f64 {
        alive_peer_seconds / self.shared.timing.heartbeat_interval.as_secs_f64()
    }

    /// Crashes peer `i`: no beat, no probe answer, no Lease renewal from now on. Returns when
    /// its last beat left (waiting out a send in flight).
    pub fn crash(&self, i: usize) -> Option<Instant> {
        self.shared.states[i].alive.store(false, Ordering::SeqCst);
        // A send that read `alive` just before the store may still go out: wait it out.
        thread::sleep(Duration::from_millis(5));
        self.last_sent(i)
    }

    /// When peer `i`'s last beat left.
    pub fn last_sent(&self, i: usize) -> Option<Instant> {
        match self.shared.states[i].last_sent_ns.load(Ordering::SeqCst) {
            0 => None,
            ns => Some(self.shared.epoch + Duration::from_nanos(ns)),
        }
    }

    /// Freezes (`true`) or thaws peer `i`'s agent: its beats stop, its data plane keeps
    /// answering probes and its Lease is renewed (an agent stalled, not a node down).
    pub fn mute(&self, i: usize, muted: bool) {
        self.shared.states[i].muted.store(muted, Ordering::SeqCst);
    }

    /// Restarts peer `i` with a new incarnation, as a restarted agent.
    pub fn restart(&self, i: usize) {
        self.shared.states[i]
            .incarnation
            .store(unix_ns(), Ordering::SeqCst);
        self.shared.states[i].alive.store(true, Ordering::SeqCst);
    }

    /// Stops the threads.
    pub fn stop(&mut self) {
        self.shared.stop.store(true, Ordering::SeqCst);
        for t in self.threads.drain(..) {
            let _ = t.join();
        }
    }

    /// The counters, shared (for [`churn`]).
    pub fn counters_handle(&self) -> Arc<Counters> {
        Arc::clone(&self.shared.counters)
    }

    /// The stop flag, shared (for [`churn`]).
    pub fn stop_handle(&self) -> Arc<AtomicBool> {
        Arc::clone(&self.shared.stop)
    }

    /// Shared handles for [`renew_leases`].
    pub fn lease_handles(&self) -> LeaseHandles {
        LeaseHandles {
            shared: Arc::clone(&self.shared),
        }
    }
}

impl Drop for Generator {
    fn drop(&mut self) {
        self.stop();
    }
}

fn heard_recently(s: &PeerState, epoch: Instant, within: Duration) -> bool {
    match s.heard_ns.load(Ordering::Relaxed) {
        0 => false,
        ns => epoch.elapsed().saturating_sub(Duration::from_nanos(ns)) <= within,
    }
}

fn unix_ns() -> u64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map_or(0, |d| d.as_nanos() as u64)
}

fn unix_ms() -> u64 {
    unix_ns() / 1_000_000
}

struct Sender {
    socket: UdpSocket,
    to: SocketAddr,
    agent: NodeName,
    shared: Arc<Shared>,
    /// Beat `k` of peer `i` is due at `started + k·period + i·period/n`.
    started: Instant,
}

impl Sender {
    /// Peer `i`'s `k`-th beat at `started + k·period + i·period/n`, in that order.
    fn run(self) {
        let n = self.shared.names.len();
        let period = self.shared.timing.heartbeat_interval;
        let mut sealers: Vec<Option<(u64, Sealer)>> = (0..n).map(|_| None).collect();
        let (mut k, mut i) = (0u64, 0usize);
        let hears = vec![self.agent.clone()];
        while !self.shared.stop.load(Ordering::Relaxed) {
            let due = self.started + period * k as u32 + period * i as u32 / n as u32;
            let now = Instant::now();
            if due > now {
                thread::sleep((due - now).min(Duration::from_millis(2)));
                continue;
            }
            let s = &self.shared.states[i];
            if s.alive.load(Ordering::SeqCst) && !s.muted.load(Ordering::SeqCst) {
                self.beat(i, s, &mut sealers[i], &hears);
            }
            i += 1;
            if i == n {
                (i, k) = (0, k + 1);
            }
        }
    }

    fn beat(
        &self,
        i: usize,
        s: &PeerState,
        sealer: &mut Option<(u64, Sealer)>,
        hears: &[NodeName],
    ) {
        let inc = s.incarnation.load(Ordering::SeqCst);
        if sealer.as_ref().is_none_or(|(at, _)| *at != inc) {
            match Sealer::new(self.shared.names[i].clone(), inc) {
                Ok(x) => *sealer = Some((inc, x)),
                Err(_) => return,
            }
        }
        let Some((_, sealer)) = sealer.as_mut() else {
            return;
        };
        let beat = Beat {
            node: self.shared.names[i].clone(),
            incarnation: inc,
            mac: hollow_mac(i),
            leaving: false,
            api_ok: true,
            ready: true,
            acks: Vec::new(),
            hears: if heard_recently(s, self.shared.epoch, self.shared.timing.hears_within) {
                hears.to_vec()
            } else {
                Vec::new()
            },
            config: self.shared.fingerprints.0.load(Ordering::Relaxed),
            view: self.shared.fingerprints.1.load(Ordering::Relaxed),
        };
        let Ok(datagram) = sealer.seal(&self.shared.keyrings[i], &beat, &self.agent, unix_ms())
        else {
            Counters::bump(&self.shared.counters.send_errors);
            return;
        };
        match self.socket.send_to(&datagram, self.to) {
            Ok(_) => {
                s.last_sent_ns.store(
                    self.shared.epoch.elapsed().as_nanos() as u64,
                    Ordering::SeqCst,
                );
                Counters::bump(&self.shared.counters.beats_sent);
            }
            Err(_) => Counters::bump(&self.shared.counters.send_errors),
        }
    }
}

struct Receiver {
    socket: UdpSocket,
    shared: Arc<Shared>,
}

impl Receiver {
    fn run(self) {
        let index: HashMap<&str, usize> = self
            .shared
            .names
            .iter()
            .enumerate()
            .map(|(i, n)| (n.as_str(), i))
            .collect();
        let mut verifiers: Vec<Verifier> = self
            .shared
            .names
            .iter()
            .map(|n| Verifier::new(n.clone()))
            .collect();
        let mut buf = [0u8; 2048];
        while !self.shared.stop.load(Ordering::Relaxed) {
            let Ok((len, _)) = self.socket.recv_from(&mut buf) else {
                continue;
            };
            let datagram = &buf[..len];
            let to = Packet::new_checked(datagram)
                .ok()
                .and_then(|p| std::str::from_utf8(p.recipient()).ok().map(str::to_owned))
                .and_then(|r| index.get(r.as_str()).copied());
            let Some(i) = to else {
                Counters::bump(&self.shared.counters.beats_rejected);
                continue;
            };
            match verifiers[i].open(&self.shared.keyrings[i], datagram, unix_ms()) {
                Ok(v) => {
                    self.shared.states[i].heard_ns.store(
                        self.shared.epoch.elapsed().as_nanos() as u64,
                        Ordering::Relaxed,
                    );
                    self.shared
                        .fingerprints
                        .0
                        .store(v.beat.config, Ordering::Relaxed);
                    self.shared
                        .fingerprints
                        .1
                        .store(v.beat.view, Ordering::Relaxed);
                    Counters::bump(&self.shared.counters.beats_received);
                }
                Err(_) => Counters::bump(&self.shared.counters.beats_rejected),
            }
        }
    }
}

/// Answers the agent's data-plane probes: a unicast ARP request to a live hollow peer's MAC
/// gets the reply the XDP responder would send (RFC 826: to the requester, sender the VIP at
/// that MAC), with the request's padding, and so its nonce, echoed.
fn respond(sock: &PacketSocket, macs: &HashMap<[u8; 6], usize>, shared: &Shared) {
    let (states, counters, stop) = (&shared.states, &shared.counters, &shared.stop);
    let _ = sock.set_recv_timeout(Duration::from_millis(100));
    let mut buf = [0u8; 2048];
    let mut out = [0u8; 128];
    while !stop.load(Ordering::Relaxed) {
        let Ok(Some(len)) = sock.recv(&mut buf) else {
            continue;
        };
        let f = &buf[..len];
        if len < ARP_AT + ARP_LEN || f[12..14] != ETH_P_ARP.to_be_bytes() {
            continue;
        }
        let Some(&i) = <[u8; 6]>::try_from(&f[0..6])
            .ok()
            .and_then(|d| macs.get(&d))
        else {
            continue;
        };
        let arp = &f[ARP_AT..ARP_AT + ARP_LEN];
        if arp[6..8] != 1u16.to_be_bytes() {
            continue; // not a request
        }
        Counters::bump(&counters.probes_seen);
        if !states[i].alive.load(Ordering::SeqCst) {
            continue;
        }
        let mac = |at: usize| MacAddr(arp[at..at + 6].try_into().expect("6 bytes"));
        let ip = |at: usize| Ipv4Addr::from(<[u8; 4]>::try_from(&arp[at..at + 4]).expect("4"));
        let (requester, requester_ip, vip) = (mac(8), ip(14), ip(24));
        let n = frames::write_arp_reply(
            &mut out,
            hollow_mac(i),
            requester,
            hollow_mac(i),
            vip,
            requester,
            requester_ip,
        );
        // The nonce sits right after the ARP packet, in the padding of the minimum frame
        // (which the builder may not have written: the reply goes out padded to 60 bytes).
        let at = ARP_AT + ARP_LEN;
        let n = n.max(MIN_FRAME);
        out[at..n].fill(0);
        if len >= at + NONCE_LEN {
            out[at..at + NONCE_LEN].copy_from_slice(&f[at..at + NONCE_LEN]);
        }
        if sock.send(&out[..n], ETH_P_ARP).is_ok() {
            Counters::bump(&counters.probes_answered);
        }
    }
}

/// What [`renew_leases`] needs of the generator.
pub struct LeaseHandles {
    shared: Arc<Shared>,
}

/// Renews every live hollow peer's Lease every `timing.lease_renew`, the renewals of all
/// peers spread evenly over the period, with `workers` writers in parallel (each owns the
/// peers `i ≡ w mod workers`). A conflict re-reads the Lease and writes again next round.
/// Returns when the generator stops.
pub async fn renew_leases(
    client: kube::Client,
    handles: LeaseHandles,
    agent: AgentSide,
    leases: Vec<(NodeLease, LeaseContents)>,
    timing: Timing,
    connected: u32,
    workers: usize,
) {
    let leases = Arc::new(leases);
    let n = leases.len();
    let handles = Arc::new(handles);
    let mut tasks = Vec::new();
    for w in 0..workers.max(1) {
        let (leases, handles, client, ns) = (
            Arc::clone(&leases),
            Arc::clone(&handles),
            client.clone(),
            agent.namespace.clone(),
        );
        tasks.push(tokio::spawn(async move {
            let api: Api<Lease> = Api::namespaced(client, &ns);
            let mine: Vec<usize> = (w..n).step_by(workers.max(1)).collect();
            let mut rv: Vec<Option<String>> = vec![None; mine.len()];
            let start = tokio::time::Instant::now();
            let mut round = 0u32;
            while !handles.shared.stop.load(Ordering::Relaxed) {
                for (j, &i) in mine.iter().enumerate() {
                    let due = start
                        + timing.lease_renew * round
                        + timing.lease_renew * i as u32 / n.max(1) as u32;
                    tokio::time::sleep_until(due).await;
                    if handles.shared.stop.load(Ordering::Relaxed) {
                        return;
                    }
                    if !handles.shared.states[i].alive.load(Ordering::SeqCst) {
                        continue;
                    }
                    let (lease, contents) = &leases[i];
                    lease.set_contents(contents.clone());
                    let body = WriteBody {
                        connected: Some(connected),
                        ..WriteBody::default()
                    };
                    match lease.write(rv[j].clone(), body).await {
                        announcer::election::LeaseWriteResult::Written { resource_version } => {
                            rv[j] = Some(resource_version);
                            Counters::bump(&handles.shared.counters.lease_writes);
                        }
                        _ => {
                            Counters::bump(&handles.shared.counters.lease_failures);
                            rv[j] = api
                                .get_opt(lease.name())
                                .await
                                .ok()
                                .flatten()
                                .and_then(|l| l.metadata.resource_version);
                        }
                    }
                }
                round += 1;
            }
        }));
    }
    for t in tasks {
        let _ = t.await;
    }
}

/// A hollow peer's Lease writer.
pub fn node_lease(
    client: kube::Client,
    agent: &AgentSide,
    i: usize,
    local: SocketAddr,
    timing: Timing,
) -> NodeLease {
    NodeLease::new(
        client,
        &agent.namespace,
        NodeName::from(hollow_name(i)),
        local,
        timing.lease_duration,
    )
}

/// The churn the issue measures with: Node status updates, EndpointSlice and Service changes
/// per second.
#[derive(Clone, Copy, Debug)]
pub struct ChurnRates {
    pub node_status_per_s: f64,
    pub slices_per_s: f64,
    pub services_per_s: f64,
}

impl ChurnRates {
    /// Issue 29's: N/300 Node status updates (the kubelet's 5-minute reports), 10
    /// EndpointSlice changes and 1 Service change per second.
    pub fn issue(nodes: usize) -> Self {
        Self {
            node_status_per_s: nodes as f64 / 300.0,
            slices_per_s: 10.0,
            services_per_s: 1.0,
        }
    }
}

/// What [`churn`] changes.
pub struct ChurnTargets {
    /// The Services' namespace.
    pub namespace: String,
    /// The Services (each with an EndpointSlice `<name>-slice`).
    pub services: Vec<String>,
    /// The real agent's node and address (its endpoint stays in every slice).
    pub agent_node: String,
    pub agent_ip: Ipv4Addr,
    /// Hollow peers (their Nodes get the status updates, and host the moving endpoint).
    pub hollow: usize,
}

/// The EndpointSlice of a Service: a ready endpoint on the agent's node and one on hollow
/// peer `j` (the one churn moves: a Pod rescheduled).
pub fn slice_endpoints(t: &ChurnTargets, j: usize) -> serde_json::Value {
    serde_json::json!([
        {"addresses": [t.agent_ip.to_string()], "nodeName": t.agent_node, "conditions": {"ready": true}},
        {"addresses": [hollow_node_ip(j).to_string()], "nodeName": hollow_name(j), "conditions": {"ready": true}},
    ])
}

/// Writes the churn at `rates` until `stop`: Node status heartbeats (Ready, a new
/// `lastHeartbeatTime`), an endpoint of a slice moved to another hollow node, a Service's
/// annotation changed. None of it changes a placement under `Cluster`: it costs the agent the
/// watch traffic and the planner's check, as the same churn does in a cluster.
pub async fn churn(
    client: kube::Client,
    t: ChurnTargets,
    rates: ChurnRates,
    counters: Arc<Counters>,
    stop: Arc<AtomicBool>,
) {
    use k8s_openapi::api::{core::v1::Node, core::v1::Service, discovery::v1::EndpointSlice};
    use kube::api::{Patch, PatchParams};
    let nodes: Api<Node> = Api::all(client.clone());
    let slices: Api<EndpointSlice> = Api::namespaced(client.clone(), &t.namespace);
    let services: Api<Service> = Api::namespaced(client, &t.namespace);
    let tick = Duration::from_millis(100);
    let mut credit = [0.0f64; 3];
    let mut next = [0usize; 3];
    let mut at = tokio::time::Instant::now();
    let pp = PatchParams::default();
    while !stop.load(Ordering::Relaxed) {
        at += tick;
        tokio::time::sleep_until(at).await;
        let rates = [
            rates.node_status_per_s,
            rates.slices_per_s,
            rates.services_per_s,
        ];
        for (c, r) in credit.iter_mut().zip(rates) {
            *c += r * tick.as_secs_f64();
        }
        while credit[0] >= 1.0 && t.hollow > 0 {
            credit[0] -= 1.0;
            let i = next[0] % t.hollow;
            next[0] += 1;
            let now = k8s_openapi::jiff::Timestamp::now().to_string();
            let patch = serde_json::json!({"status": {"conditions": [{
                "type": "Ready", "status": "True", "reason": "KubeletReady",
                "lastHeartbeatTime": now, "lastTransitionTime": "2026-01-01T00:00:00Z",
            }]}});
            let r = nodes
                .patch_status(&hollow_name(i), &pp, &Patch::Merge(patch))
                .await;
            count(&counters, r.is_ok());
        }
        while credit[1] >= 1.0 && !t.services.is_empty() {
            credit[1] -= 1.0;
            let k = next[1];
            next[1] += 1;
            let svc = &t.services[k % t.services.len()];
            let j = (k * 7919) % t.hollow.max(1);
            let patch = serde_json::json!({"endpoints": slice_endpoints(&t, j)});
            let r = slices
                .patch(&format!("{svc}-slice"), &pp, &Patch::Merge(patch))
                .await;
            count(&counters, r.is_ok());
        }
        while credit[2] >= 1.0 && !t.services.is_empty() {
            credit[2] -= 1.0;
            let k = next[2];
            next[2] += 1;
            let svc = &t.services[(k * 104_729) % t.services.len()];
            let patch = serde_json::json!({"metadata": {"annotations": {"bench.announcer.dev/churn": k.to_string()}}});
            let r = services.patch(svc, &pp, &Patch::Merge(patch)).await;
            count(&counters, r.is_ok());
        }
    }
}

fn count(counters: &Counters, ok: bool) {
    Counters::bump(if ok {
        &counters.churn_writes
    } else {
        &counters.churn_failures
    });
}
