//! A hostile host on the LAN: forged ARP/NDP answers and floods from raw `AF_PACKET` sockets.
//!
//! Why: the announcer listens to the segment (probe answers, heartbeats), and anything on the
//! segment can talk to it. [`Testbed::add_hostile_host`] adds a namespace on `br0` like the
//! client (`eth0` [`HOSTILE_MAC`], [`HOSTILE_V4`], [`HOSTILE_V6`]); its helpers send whole
//! Ethernet frames from it:
//!
//! * [`Testbed::start_spoofing`]: forged unicast ARP replies "VIP is-at MAC" (and Neighbor
//!   Advertisements for IPv6 VIPs) to every node's MAC at a fixed interval, in the background
//!   until [`Spoofer::stop`] (or its drop, or its time limit);
//! * [`Testbed::flood`]: one [`FloodKind`] at line rate for a bounded time and frame count.
//!
//! Safety: every frame leaves from the hostile namespace's own veth into the testbed's bridge;
//! nothing runs outside the testbed's namespaces. Every sender stops by itself ([`MAX_FLOOD`],
//! [`MAX_FLOOD_FRAMES`], the spoofer's `max`). The Ethernet source of every frame is
//! [`HOSTILE_MAC`] (the forged identities are inside the ARP/NDP payloads), so the bridge's
//! forwarding table is not polluted and the node ports keep their MACs: the attack is on the
//! agents, not on the switch.

use std::{
    net::{IpAddr, Ipv4Addr, Ipv6Addr},
    sync::{
        Arc,
        atomic::{AtomicBool, AtomicU64, Ordering},
    },
    thread::JoinHandle,
    time::{Duration, Instant, SystemTime, UNIX_EPOCH},
};

use announcer_ebpf::wire::{MacAddr, NaFlags, ethernet::ethertype, frame};
use rand::{Rng, SeedableRng};
use rand_chacha::ChaCha8Rng;

use super::{IFACE, PREFIX_V4, PREFIX_V6, Testbed, net};
use crate::{
    env::packet::PacketSocket,
    frames::{write_arp_reply, write_arp_request, write_na, write_ns_multicast, write_udp4},
    netns::{Netns, wait_oper_up},
};

/// The hostile host's MAC.
pub const HOSTILE_MAC: [u8; 6] = [0x02, 0x78, 0, 0, 0, 0xfb];
/// The hostile host's IPv4 address.
pub const HOSTILE_V4: Ipv4Addr = Ipv4Addr::new(10, 78, 0, 251);
/// The hostile host's IPv6 address.
pub const HOSTILE_V6: Ipv6Addr = Ipv6Addr::new(0xfd78, 0, 0, 0, 0, 0, 0, 0xfb);
/// The agents' heartbeat port (their default).
pub const HEARTBEAT_PORT: u16 = 9747;
/// The longest one [`Testbed::flood`] runs, whatever it is asked.
pub const MAX_FLOOD: Duration = Duration::from_secs(10);
/// The most frames one [`Testbed::flood`] sends.
pub const MAX_FLOOD_FRAMES: u64 = 5_000_000;
/// The longest a [`Spoofer`] runs, whatever it is asked.
pub const MAX_SPOOF: Duration = Duration::from_secs(120);
/// Distinct frames per flood, sent round-robin (building each frame anew would make the flood
/// measure the frame builder rather than the receivers).
const POOL: usize = 512;

/// What a flood sends (all from [`HOSTILE_MAC`]).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum FloodKind {
    /// Broadcast ARP requests for the IPv4 VIPs, from random sender MACs and IPs (in
    /// 10.78.1.0–10.78.127.255: no node's, the client's or a VIP's).
    ArpRequest,
    /// Unicast ARP replies to every node: "IPv4 VIP is-at <random MAC>".
    ArpReply,
    /// Multicast Neighbor Solicitations for the IPv6 VIPs from random sources and SLLAOs.
    NeighborSolicit,
    /// Unicast Neighbor Advertisements to every node: "IPv6 VIP is at <random MAC>" (S, O).
    NeighborAdvert,
    /// UDP datagrams of random bytes (16–600) to every node's heartbeat port.
    HeartbeatNoise,
    /// Structurally valid version-1 heartbeats (magic, flags, DNS-1123 name, counters, current
    /// timestamp, MAC, acks) with random names and a random tag, to every node's heartbeat port.
    HeartbeatForged,
    /// Random Ethernet frames (14–1514 bytes) to the nodes' MACs and broadcast, EtherType
    /// random or ARP/IPv4/IPv6/802.1Q with a random payload.
    Garbage,
}

impl FloodKind {
    /// Every kind, in a fixed order.
    pub const ALL: [FloodKind; 7] = [
        FloodKind::ArpRequest,
        FloodKind::ArpReply,
        FloodKind::NeighborSolicit,
        FloodKind::NeighborAdvert,
        FloodKind::HeartbeatNoise,
        FloodKind::HeartbeatForged,
        FloodKind::Garbage,
    ];
}

/// What one flood sent.
#[derive(Clone, Debug)]
pub struct FloodStats {
    pub kind: FloodKind,
    /// Frames the socket accepted.
    pub frames: u64,
    /// Sends that failed (e.g. `ENOBUFS`).
    pub errors: u64,
    pub elapsed: Duration,
}

impl FloodStats {
    /// Frames per second.
    pub fn rate(&self) -> f64 {
        self.frames as f64 / self.elapsed.as_secs_f64().max(1e-9)
    }
}

/// A node as the hostile host addresses it.
#[derive(Clone, Debug)]
struct Target {
    v4: Ipv4Addr,
    v6: Ipv6Addr,
    mac: [u8; 6],
}

fn open_socket() -> PacketSocket {
    let sock = PacketSocket::open(IFACE, 0)
        .unwrap_or_else(|e| panic!("AF_PACKET socket on the hostile host's {IFACE}: {e:#}"));
    // Straight to the driver, as flood tools do; a failure only makes the flood slower.
    let _ = sock.bypass_qdisc();
    sock
}

/// The EtherType of a frame (after one 802.1Q tag, if any), for the socket address.
fn proto_of(f: &[u8]) -> u16 {
    let t = u16::from_be_bytes([f[12], f[13]]);
    if t == 0x8100 && f.len() >= 18 {
        u16::from_be_bytes([f[16], f[17]])
    } else {
        t
    }
}

/// A random locally administered unicast MAC.
fn random_mac(rng: &mut ChaCha8Rng) -> MacAddr {
    let mut m: [u8; 6] = rng.random();
    m[0] = (m[0] & 0xfc) | 0x02;
    MacAddr(m)
}

/// A random IPv4 address in 10.78.1.0–10.78.127.255 (on the LAN, nobody's).
fn random_v4(rng: &mut ChaCha8Rng) -> Ipv4Addr {
    Ipv4Addr::new(10, 78, rng.random_range(1..=127), rng.random())
}

/// A random IPv6 address in fd78::1:0:0/96 (on the LAN, nobody's).
fn random_v6(rng: &mut ChaCha8Rng) -> Ipv6Addr {
    Ipv6Addr::new(0xfd78, 0, 0, 0, 0, 1, rng.random(), rng.random())
}

/// A random DNS-1123 node name such as `node-x7k2q9`.
fn random_name(rng: &mut ChaCha8Rng) -> String {
    const CHARS: &[u8] = b"abcdefghijklmnopqrstuvwxyz0123456789";
    let len = rng.random_range(4..=12);
    let tail: String = (0..len)
        .map(|_| char::from(CHARS[rng.random_range(0..CHARS.len())]))
        .collect();
    format!("node-{tail}")
}

/// A version-1 heartbeat as the wire layout has it (`announcer::heartbeat::wire`), built by
/// hand so it does not depend on the agent's types: magic `ANHB`, version 1, flags, name,
/// incarnation, sequence, timestamp (ms), MAC, acks, then a 16-byte tag (random: these are
/// forgeries without the key).
fn forged_heartbeat(rng: &mut ChaCha8Rng) -> Vec<u8> {
    let mut b = Vec::with_capacity(128);
    b.extend_from_slice(b"ANHB");
    b.push(1);
    b.push([0x06, 0x04, 0x02, 0x00, 0x07][rng.random_range(0..5)]);
    let name = random_name(rng);
    b.push(name.len() as u8);
    b.extend_from_slice(name.as_bytes());
    b.extend_from_slice(&rng.random::<u64>().to_be_bytes());
    b.extend_from_slice(&rng.random_range(0..1_000_000u64).to_be_bytes());
    let now_ms = SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map_or(0, |d| d.as_millis() as u64);
    b.extend_from_slice(&now_ms.to_be_bytes());
    b.extend_from_slice(&random_mac(rng).0);
    let acks = rng.random_range(0..=3);
    b.push(acks);
    for _ in 0..acks {
        let a = random_name(rng);
        b.push(a.len() as u8);
        b.extend_from_slice(a.as_bytes());
    }
    let tag: [u8; 16] = rng.random();
    b.extend_from_slice(&tag);
    b
}

/// `POOL` frames of `kind` (deterministic per `seed`).
fn build_pool(
    kind: FloodKind,
    vips: &[IpAddr],
    nodes: &[Target],
    port: u16,
    seed: u64,
) -> Vec<Vec<u8>> {
    let mut rng = ChaCha8Rng::seed_from_u64(seed ^ (kind as u64) << 32);
    let v4s: Vec<Ipv4Addr> = vips
        .iter()
        .filter_map(|v| match v {
            IpAddr::V4(a) => Some(*a),
            IpAddr::V6(_) => None,
        })
        .collect();
    let v6s: Vec<Ipv6Addr> = vips
        .iter()
        .filter_map(|v| match v {
            IpAddr::V6(a) => Some(*a),
            IpAddr::V4(_) => None,
        })
        .collect();
    let me = MacAddr(HOSTILE_MAC);
    let mut pool = Vec::with_capacity(POOL);
    for i in 0..POOL {
        let node = &nodes[i % nodes.len()];
        let mut buf = vec![0u8; 1600];
        let n = match kind {
            FloodKind::ArpRequest => {
                assert!(!v4s.is_empty(), "an ARP flood needs IPv4 VIPs");
                let vip = v4s[i % v4s.len()];
                let (sm, si) = (random_mac(&mut rng), random_v4(&mut rng));
                let n = write_arp_request(&mut buf, sm, si, vip, None);
                buf[6..12].copy_from_slice(&HOSTILE_MAC);
                n
            }
            FloodKind::ArpReply => {
                assert!(!v4s.is_empty(), "an ARP flood needs IPv4 VIPs");
                let vip = v4s[i % v4s.len()];
                write_arp_reply(
                    &mut buf,
                    me,
                    MacAddr(node.mac),
                    random_mac(&mut rng),
                    vip,
                    MacAddr(node.mac),
                    node.v4,
                )
            }
            FloodKind::NeighborSolicit => {
                assert!(!v6s.is_empty(), "an NDP flood needs IPv6 VIPs");
                let vip = v6s[i % v6s.len()];
                let (src, ll) = (random_v6(&mut rng), random_mac(&mut rng));
                write_ns_multicast(&mut buf, me, src, vip, Some(ll))
            }
            FloodKind::NeighborAdvert => {
                assert!(!v6s.is_empty(), "an NDP flood needs IPv6 VIPs");
                let vip = v6s[i % v6s.len()];
                let flags = NaFlags {
                    router: false,
                    solicited: rng.random(),
                    override_: true,
                };
                let src = if rng.random() {
                    vip
                } else {
                    random_v6(&mut rng)
                };
                write_na(
                    &mut buf,
                    me,
                    MacAddr(node.mac),
                    src,
                    node.v6,
                    vip,
                    Some(random_mac(&mut rng)),
                    flags,
                )
            }
            FloodKind::HeartbeatNoise | FloodKind::HeartbeatForged => {
                let payload = if kind == FloodKind::HeartbeatNoise {
                    let len = rng.random_range(16..=600);
                    (0..len).map(|_| rng.random::<u8>()).collect()
                } else {
                    forged_heartbeat(&mut rng)
                };
                write_udp4(
                    &mut buf,
                    me,
                    MacAddr(node.mac),
                    random_v4(&mut rng),
                    node.v4,
                    rng.random_range(1024..=65535),
                    port,
                    &payload,
                )
            }
            FloodKind::Garbage => {
                let len = rng.random_range(14..=1514);
                rng.fill(&mut buf[..len]);
                let dst = if rng.random_range(0..4) == 0 {
                    MacAddr::BROADCAST.0
                } else {
                    node.mac
                };
                buf[..6].copy_from_slice(&dst);
                buf[6..12].copy_from_slice(&HOSTILE_MAC);
                let et: u16 = match rng.random_range(0..5) {
                    0 => ethertype::ARP,
                    1 => ethertype::IPV4,
                    2 => ethertype::IPV6,
                    3 => 0x8100,
                    _ => rng.random(),
                };
                buf[12..14].copy_from_slice(&et.to_be_bytes());
                len
            }
        };
        buf.truncate(n);
        pool.push(buf);
    }
    pool
}

/// Sends `pool` round-robin until `duration` or `max` frames (on the calling thread, inside the
/// hostile namespace).
fn blast(kind: FloodKind, pool: &[Vec<u8>], duration: Duration, max: u64) -> FloodStats {
    let sock = open_socket();
    let protos: Vec<u16> = pool.iter().map(|f| proto_of(f)).collect();
    let start = Instant::now();
    let (mut frames, mut errors) = (0u64, 0u64);
    let mut i = 0usize;
    'outer: loop {
        // Check the clock every 256 frames.
        for _ in 0..256 {
            if frames >= max {
                break 'outer;
            }
            match sock.send(&pool[i], protos[i]) {
                Ok(()) => frames += 1,
                Err(_) => {
                    errors += 1;
                    std::thread::yield_now();
                }
            }
            i = (i + 1) % pool.len();
        }
        if start.elapsed() >= duration {
            break;
        }
    }
    FloodStats {
        kind,
        frames,
        errors,
        elapsed: start.elapsed(),
    }
}

/// The forged answers a [`Spoofer`] keeps sending; stops on [`Self::stop`], on drop, or after
/// its time limit.
pub struct Spoofer {
    stop: Arc<AtomicBool>,
    sent: Arc<AtomicU64>,
    thread: Option<JoinHandle<()>>,
}

impl Spoofer {
    /// Frames sent so far.
    pub fn sent(&self) -> u64 {
        self.sent.load(Ordering::Relaxed)
    }

    /// Stops and returns how many frames were sent.
    pub fn stop(mut self) -> u64 {
        self.halt();
        self.sent()
    }

    fn halt(&mut self) {
        self.stop.store(true, Ordering::SeqCst);
        if let Some(t) = self.thread.take() {
            let _ = t.join();
        }
    }
}

impl Drop for Spoofer {
    fn drop(&mut self) {
        self.halt();
    }
}

impl Testbed {
    /// Adds the hostile host (see the module docs); idempotent.
    pub fn add_hostile_host(&mut self) {
        if self.hostile.is_some() {
            return;
        }
        let ns = Netns::new(&format!("tb-{}-hostile", self.cfg.tag));
        net::attach(
            &self.bridge,
            &ns,
            &net::port_name("hostile"),
            HOSTILE_MAC,
            &format!("{HOSTILE_V4}/{PREFIX_V4}"),
            &format!("{HOSTILE_V6}/{PREFIX_V6}"),
        );
        wait_oper_up(&ns, IFACE, Duration::from_secs(5));
        self.hostile = Some(ns);
    }

    /// The hostile host's namespace.
    pub fn hostile_ns(&self) -> &Netns {
        self.hostile
            .as_ref()
            .expect("no hostile host: call add_hostile_host first")
    }

    fn targets(&self) -> Vec<Target> {
        self.nodes
            .iter()
            .map(|n| Target {
                v4: n.v4,
                v6: n.v6,
                mac: n.mac,
            })
            .collect()
    }

    /// From the hostile host, every `interval` until [`Spoofer::stop`] (at most `max`, capped
    /// at [`MAX_SPOOF`]): for each `(vip, mac)` in `claims` and each node, a forged unicast
    /// answer to that node's `eth0` MAC claiming "`vip` is at `mac`": an ARP reply
    /// (sender `vip`/`mac`, target the node) for IPv4, a solicited+override Neighbor
    /// Advertisement (from `vip` to the node's address, Target Link-Layer Address `mac`) for
    /// IPv6. Exactly what the agents' probe listener takes as a sign of life of `mac`.
    pub fn start_spoofing(
        &self,
        claims: &[(IpAddr, [u8; 6])],
        interval: Duration,
        max: Duration,
    ) -> Spoofer {
        let mut frames: Vec<(Vec<u8>, u16)> = Vec::new();
        let me = MacAddr(HOSTILE_MAC);
        for &(vip, mac) in claims {
            for t in self.targets() {
                let mut buf = vec![0u8; frame::MAX_FRAME];
                let (n, proto) = match vip {
                    IpAddr::V4(v) => (
                        write_arp_reply(
                            &mut buf,
                            me,
                            MacAddr(t.mac),
                            MacAddr(mac),
                            v,
                            MacAddr(t.mac),
                            t.v4,
                        ),
                        ethertype::ARP,
                    ),
                    IpAddr::V6(v) => (
                        write_na(
                            &mut buf,
                            me,
                            MacAddr(t.mac),
                            v,
                            t.v6,
                            v,
                            Some(MacAddr(mac)),
                            NaFlags {
                                router: false,
                                solicited: true,
                                override_: true,
                            },
                        ),
                        ethertype::IPV6,
                    ),
                };
                buf.truncate(n);
                frames.push((buf, proto));
            }
        }
        let stop = Arc::new(AtomicBool::new(false));
        let sent = Arc::new(AtomicU64::new(0));
        let max = max.min(MAX_SPOOF);
        let (st, se) = (stop.clone(), sent.clone());
        let thread = self.hostile_ns().spawn("hostile-spoof", move || {
            let sock = open_socket();
            let start = Instant::now();
            let mut next = start;
            while !st.load(Ordering::SeqCst) && start.elapsed() < max {
                for (f, proto) in &frames {
                    if sock.send(f, *proto).is_ok() {
                        se.fetch_add(1, Ordering::Relaxed);
                    }
                }
                next += interval;
                let now = Instant::now();
                if next > now {
                    std::thread::sleep(next - now);
                } else {
                    next = now;
                }
            }
        });
        Spoofer {
            stop,
            sent,
            thread: Some(thread),
        }
    }

    /// Floods `kind` from the hostile host for `duration` (capped at [`MAX_FLOOD`] and
    /// [`MAX_FLOOD_FRAMES`]) as fast as its socket takes frames, about the VIPs `vips` and to
    /// every node; returns when done.
    pub fn flood(&self, kind: FloodKind, vips: &[IpAddr], duration: Duration) -> FloodStats {
        self.spawn_floods(&[kind], vips, duration)
            .join()
            .unwrap_or_else(|p| std::panic::resume_unwind(p))
            .remove(0)
    }

    /// Like [`Self::flood`] for each of `kinds` in turn, `each` long, on a background thread
    /// (so the caller can watch the agents meanwhile); join it for the stats.
    pub fn spawn_floods(
        &self,
        kinds: &[FloodKind],
        vips: &[IpAddr],
        each: Duration,
    ) -> JoinHandle<Vec<FloodStats>> {
        let nodes = self.targets();
        let seed = u64::from(std::process::id());
        let pools: Vec<(FloodKind, Vec<Vec<u8>>)> = kinds
            .iter()
            .map(|&k| (k, build_pool(k, vips, &nodes, HEARTBEAT_PORT, seed)))
            .collect();
        let each = each.min(MAX_FLOOD);
        self.hostile_ns().spawn("hostile-flood", move || {
            pools
                .iter()
                .map(|(k, pool)| blast(*k, pool, each, MAX_FLOOD_FRAMES))
                .collect()
        })
    }
}
