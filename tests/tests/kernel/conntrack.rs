//! Sweeping stale flows from the real conntrack table (needs root): in a namespace of its own,
//! an nftables DNAT stands in for kube-proxy's, first to an endpoint that never answers (a
//! crashed node's Pod behind a link where nothing answers), then to a live one (kube-proxy after the endpoint
//! left). A client that reuses its source port keeps hitting the dead endpoint through the
//! stale `SYN_SENT` entry until the agent's sweep
//! ([`announcer::agent::net::conntrack::Conntrack::delete_unreplied_tcp`]) deletes it.

use std::{
    io::{Read, Write},
    net::{IpAddr, Ipv4Addr, SocketAddr, SocketAddrV4, TcpListener, TcpStream},
    os::fd::{AsFd, AsRawFd, FromRawFd, IntoRawFd},
    time::Duration,
};

use announcer::agent::net::conntrack::{Conntrack, Swept};
use announcer_tests::netns::{Netns, require_root};
use nix::{
    poll::{PollFd, PollFlags, PollTimeout, poll},
    sys::socket::{
        AddressFamily, SockFlag, SockType, SockaddrIn, bind, connect, getsockopt, setsockopt,
        socket, sockopt,
    },
};

/// The Service address kube-proxy's DNAT matches.
const SERVICE: Ipv4Addr = Ipv4Addr::new(10, 99, 0, 1);
/// The dead endpoint (nothing on its link answers).
const DEAD: Ipv4Addr = Ipv4Addr::new(10, 98, 0, 9);
/// The live endpoint's port on loopback.
const LIVE_PORT: u16 = 8080;
/// The client's source port, reused.
const CLIENT_PORT: u16 = 40001;
/// Long enough for an answered connect on loopback.
const CONNECT: Duration = Duration::from_millis(300);

/// A namespace with a silent link for [`DEAD`], a listener on loopback answering one line per
/// connection, and the DNAT of [`SERVICE`]:80 to `to`.
fn world(tag: &str) -> Netns {
    require_root();
    let ns = Netns::new(tag);
    ns.ip(&["link", "set", "lo", "up"]);
    // The dead endpoint's link: a veth whose far end has no address, with a permanent
    // neighbour entry, so the SYN leaves and nothing ever answers.
    ns.ip(&["link", "add", "v0", "type", "veth", "peer", "name", "v1"]);
    ns.ip(&["addr", "add", "10.98.0.1/24", "dev", "v0"]);
    ns.ip(&["link", "set", "v0", "up"]);
    ns.ip(&["link", "set", "v1", "up"]);
    ns.ip(&[
        "neigh",
        "add",
        "10.98.0.9",
        "lladdr",
        "02:00:00:00:00:09",
        "dev",
        "v0",
        "nud",
        "permanent",
    ]);
    // The Service address is routed (kube-proxy's DNAT comes first) out of that link too.
    ns.ip(&["route", "add", "default", "dev", "v0"]);
    ns.run(&["nft", "add", "table", "ip", "kp"]);
    ns.run(&[
        "nft",
        "add chain ip kp out { type nat hook output priority -100 ; }",
    ]);
    dnat_to(&ns, SocketAddrV4::new(DEAD, LIVE_PORT));
    ns
}

/// Points the DNAT at `to` (what kube-proxy's resync does when the endpoints change).
fn dnat_to(ns: &Netns, to: SocketAddrV4) {
    ns.run(&["nft", "flush", "chain", "ip", "kp", "out"]);
    ns.run(&[
        "nft",
        &format!("add rule ip kp out ip daddr {SERVICE} tcp dport 80 dnat to {to}"),
    ]);
}

/// Connects from `CLIENT_PORT` to [`SERVICE`]:80 (inside the caller's namespace): whether a
/// connection was made within [`CONNECT`].
fn connect_from_the_same_port() -> bool {
    let fd = socket(
        AddressFamily::Inet,
        SockType::Stream,
        SockFlag::SOCK_NONBLOCK | SockFlag::SOCK_CLOEXEC,
        None,
    )
    .expect("socket");
    setsockopt(&fd, sockopt::ReuseAddr, &true).expect("SO_REUSEADDR");
    bind(
        fd.as_raw_fd(),
        &SockaddrIn::from(SocketAddrV4::new(Ipv4Addr::UNSPECIFIED, CLIENT_PORT)),
    )
    .expect("bind the client port");
    match connect(
        fd.as_raw_fd(),
        &SockaddrIn::from(SocketAddrV4::new(SERVICE, 80)),
    ) {
        Ok(()) | Err(nix::errno::Errno::EINPROGRESS) => {}
        Err(e) => panic!("connect: {e}"),
    }
    let mut fds = [PollFd::new(fd.as_fd(), PollFlags::POLLOUT)];
    let ready = poll(&mut fds, PollTimeout::try_from(CONNECT).expect("timeout")).expect("poll");
    if ready == 0 || getsockopt(&fd, sockopt::SocketError).expect("SO_ERROR") != 0 {
        return false;
    }
    // Connected: the listener's line comes back.
    let mut s = unsafe { TcpStream::from_raw_fd(fd.into_raw_fd()) };
    s.set_nonblocking(false).expect("blocking");
    s.set_read_timeout(Some(CONNECT)).expect("timeout");
    let mut line = [0u8; 3];
    s.read_exact(&mut line).is_ok() && &line == b"ok\n"
}

/// Serves "ok\n" on loopback:[`LIVE_PORT`] until the namespace's thread ends.
fn serve(listener: TcpListener) {
    for s in listener.incoming() {
        match s {
            Ok(mut s) => {
                let _ = s.write_all(b"ok\n");
            }
            Err(_) => return,
        }
    }
}

fn sweep(addr: Ipv4Addr) -> Swept {
    Conntrack::open()
        .expect("a ctnetlink socket")
        .delete_unreplied_tcp(IpAddr::V4(addr))
        .expect("the sweep")
}

#[test]
fn a_client_reusing_its_port_reaches_the_live_endpoint_once_the_stale_flow_is_swept() {
    let ns = world("ct-reuse");
    ns.enter(|| {
        let listener =
            TcpListener::bind(SocketAddr::from((Ipv4Addr::LOCALHOST, LIVE_PORT))).expect("listen");
        std::thread::spawn(move || serve(listener));
        // The endpoint is dead: no answer, and the flow stays in SYN_SENT.
        assert!(!connect_from_the_same_port(), "the dead endpoint answered");
        // kube-proxy moves the Service to the live endpoint; the same 4-tuple still follows
        // the stale entry to the dead one.
        dnat_to(&ns, SocketAddrV4::new(Ipv4Addr::LOCALHOST, LIVE_PORT));
        assert!(
            !connect_from_the_same_port(),
            "the stale entry was not in the way (the kernel changed?)"
        );
        let swept = sweep(DEAD);
        assert_eq!(swept.deleted, 1, "{swept:?}");
        assert!(
            connect_from_the_same_port(),
            "after the sweep the reused port reaches the live endpoint"
        );
    });
}

#[test]
fn a_sweep_leaves_an_answered_flow_towards_the_address_alone() {
    let ns = world("ct-answered");
    dnat_to(&ns, SocketAddrV4::new(Ipv4Addr::LOCALHOST, LIVE_PORT));
    ns.enter(|| {
        let listener =
            TcpListener::bind(SocketAddr::from((Ipv4Addr::LOCALHOST, LIVE_PORT))).expect("listen");
        let (tx, rx) = std::sync::mpsc::channel();
        std::thread::spawn(move || {
            if let Ok((mut s, _)) = listener.accept() {
                let mut b = [0u8; 1];
                while s.read_exact(&mut b).is_ok() {
                    let _ = s.write_all(&b);
                }
            }
            let _ = tx.send(());
        });
        let mut s = TcpStream::connect_timeout(&SocketAddr::from((SERVICE, 80)), CONNECT)
            .expect("connected through the DNAT");
        s.set_read_timeout(Some(CONNECT)).expect("timeout");
        let swept = sweep(Ipv4Addr::LOCALHOST);
        assert_eq!(swept.deleted, 0, "{swept:?}");
        // Its entry is still there: the connection carries data both ways.
        s.write_all(b"x").expect("write");
        let mut b = [0u8; 1];
        s.read_exact(&mut b)
            .expect("the echo through the same entry");
        assert_eq!(&b, b"x");
        drop(s);
        let _ = rx.recv_timeout(Duration::from_secs(1));
    });
}
