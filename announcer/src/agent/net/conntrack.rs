//! Deleting the unreplied TCP flows towards an address from this node's conntrack table,
//! over netlink (ctnetlink): what `conntrack -D -p tcp --reply-src ADDR` would delete, minus
//! every flow that ever saw a reply.
//!
//! Why: kube-proxy DNATs a new connection to an endpoint once and conntrack pins the choice
//! to the flow's 4-tuple. For the second or so between a node's crash and kube-proxy's removal
//! of its endpoints, new connections are DNATed to the dead node's Pods; their SYNs are never
//! answered and their entries sit in `SYN_SENT` for `nf_conntrack_tcp_timeout_syn_sent`
//! (120 s). A client that reuses a source port within that time (a busy client, a proxy, a NAT
//! gateway in front of the cluster) sends a fresh SYN that matches the stale entry, is
//! DNATed to the dead Pod again and times out. kube-proxy clears such entries for UDP only
//! (kubernetes/kubernetes#101607; TCP was left out so as not to break graceful termination,
//! whose flows are replied). An unreplied entry carries no connection: deleting it lets the
//! next SYN of that tuple be load-balanced afresh, which is all this does.
//!
//! The dump is filtered in the kernel (`CTA_FILTER` on the reply tuple's source and protocol,
//! and the status mask on `IPS_SEEN_REPLY` where the kernel knows it); every entry is checked
//! again here before it is deleted by its original tuple.

use std::net::IpAddr;

use netlink_packet_core::{
    DefaultNla, NLM_F_ACK, NLM_F_DUMP, NLM_F_REQUEST, NetlinkHeader, NetlinkMessage, NetlinkPayload,
};
use netlink_packet_netfilter::{
    NetfilterHeader, NetfilterMessage, NetfilterMessageInner, NetfilterProtoFamily,
    conntrack::{
        ConntrackAttribute, ConntrackMessage, IPTuple, ProtoTuple, Protocol, Status, Tuple,
    },
};
use netlink_sys::{Socket, SocketAddr, protocols::NETLINK_NETFILTER};

/// Why a sweep failed.
#[derive(Debug, thiserror::Error)]
pub enum ConntrackError {
    /// The netlink socket could not be opened or used (no CAP_NET_ADMIN; no nf_conntrack).
    #[error("conntrack netlink: {0}")]
    Io(#[from] std::io::Error),
    /// The kernel refused a request.
    #[error("conntrack netlink: the kernel answered {0}")]
    Kernel(std::io::Error),
    /// A message could not be parsed.
    #[error("conntrack netlink: unparsable answer: {0}")]
    Decode(String),
}

/// How long a read of the kernel's answer may take.
pub const RECEIVE_TIMEOUT: std::time::Duration = std::time::Duration::from_secs(5);

/// `CTA_FILTER` (uapi `nfnetlink_conntrack.h`), nested.
const CTA_FILTER: u16 = 25;
/// `CTA_STATUS_MASK`.
const CTA_STATUS_MASK: u16 = 26;
const NLA_F_NESTED: u16 = 1 << 15;
/// `CTA_FILTER_REPLY_FLAGS`, inside `CTA_FILTER`.
const CTA_FILTER_REPLY_FLAGS: u16 = 2;
/// `CTA_FILTER_FLAG(CTA_IP_SRC)` and `CTA_FILTER_FLAG(CTA_PROTO_NUM)`.
const FILTER_IP_SRC: u32 = 1 << 0;
const FILTER_PROTO_NUM: u32 = 1 << 3;

/// The entries of one sweep.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Swept {
    /// Unreplied TCP entries towards the address, deleted.
    pub deleted: u64,
    /// Entries the kernel's filter returned that were replied after all (left alone).
    pub replied: u64,
}

/// One ctnetlink socket.
pub struct Conntrack {
    socket: Socket,
    seq: u32,
}

impl Conntrack {
    /// Opens the socket (in the caller's network namespace). A read waits at most
    /// [`RECEIVE_TIMEOUT`]: a sweep never hangs its caller.
    pub fn open() -> Result<Conntrack, ConntrackError> {
        let mut socket = Socket::new(NETLINK_NETFILTER)?;
        socket.bind_auto()?;
        socket.connect(&SocketAddr::new(0, 0))?;
        nix::sys::socket::setsockopt(
            &socket,
            nix::sys::socket::sockopt::ReceiveTimeout,
            &nix::sys::time::TimeVal::new(RECEIVE_TIMEOUT.as_secs() as i64, 0),
        )
        .map_err(std::io::Error::from)?;
        Ok(Conntrack { socket, seq: 0 })
    }

    /// Deletes every TCP entry whose reply comes from `addr` (the flow was DNATed to it) and
    /// that never saw a reply.
    pub fn delete_unreplied_tcp(&mut self, addr: IpAddr) -> Result<Swept, ConntrackError> {
        let family = family(addr);
        let mut swept = Swept::default();
        let entries = self.dump(family, dump_filter(addr))?;
        for attrs in entries {
            match Entry::read(&attrs) {
                Some(e) if e.reply_src == Some(addr) && e.tcp && !e.replied => {
                    match self.request(
                        family,
                        ConntrackMessage::Delete(vec![ConntrackAttribute::CtaTupleOrig(e.orig)]),
                    ) {
                        Ok(()) => swept.deleted += 1,
                        // Gone meanwhile (expired, or deleted by another sweep).
                        Err(ConntrackError::Kernel(k))
                            if k.raw_os_error() == Some(libc::ENOENT) => {}
                        Err(e) => return Err(e),
                    }
                }
                Some(e) if e.reply_src == Some(addr) && e.tcp => swept.replied += 1,
                _ => {}
            }
        }
        Ok(swept)
    }

    fn next_seq(&mut self) -> u32 {
        self.seq = self.seq.wrapping_add(1);
        self.seq
    }

    fn send(
        &mut self,
        family: NetfilterProtoFamily,
        flags: u16,
        msg: ConntrackMessage,
    ) -> Result<u32, ConntrackError> {
        let mut header = NetlinkHeader::default();
        header.flags = flags;
        let seq = self.next_seq();
        header.sequence_number = seq;
        let mut packet = NetlinkMessage::new(
            header,
            NetlinkPayload::from(NetfilterMessage::new(
                NetfilterHeader::new(family, 0, 0),
                msg,
            )),
        );
        packet.finalize();
        let mut buf = vec![0; packet.buffer_len()];
        packet.serialize(&mut buf);
        mark_nested(&mut buf, CTA_FILTER);
        self.socket.send(&buf, 0)?;
        Ok(seq)
    }

    /// Sends `msg` and waits for its acknowledgement.
    fn request(
        &mut self,
        family: NetfilterProtoFamily,
        msg: ConntrackMessage,
    ) -> Result<(), ConntrackError> {
        let seq = self.send(family, NLM_F_REQUEST | NLM_F_ACK, msg)?;
        self.receive(seq, |m| match m.payload {
            NetlinkPayload::Error(e) => match e.code {
                None => Ok(true),
                Some(code) => Err(kernel(code.get())),
            },
            _ => Ok(false),
        })
    }

    /// Every entry of `family` the kernel's filter `attrs` lets through.
    fn dump(
        &mut self,
        family: NetfilterProtoFamily,
        attrs: Vec<ConntrackAttribute>,
    ) -> Result<Vec<Vec<ConntrackAttribute>>, ConntrackError> {
        let seq = self.send(
            family,
            NLM_F_REQUEST | NLM_F_DUMP,
            ConntrackMessage::Get(attrs),
        )?;
        let mut out = Vec::new();
        self.receive(seq, |m| match m.payload {
            NetlinkPayload::Done(_) => Ok(true),
            NetlinkPayload::Error(e) => match e.code {
                None => Ok(true),
                Some(code) => Err(kernel(code.get())),
            },
            NetlinkPayload::InnerMessage(NetfilterMessage {
                inner: NetfilterMessageInner::Conntrack(ConntrackMessage::New(a)),
                ..
            }) => {
                out.push(a);
                Ok(false)
            }
            _ => Ok(false),
        })?;
        Ok(out)
    }

    /// Reads the messages answering `seq`, handing each to `each` until it says the answer
    /// is complete (`Ok(true)`) or fails.
    fn receive(
        &mut self,
        seq: u32,
        mut each: impl FnMut(NetlinkMessage<NetfilterMessage>) -> Result<bool, ConntrackError>,
    ) -> Result<(), ConntrackError> {
        let mut buf = vec![0u8; 64 * 1024];
        loop {
            let n = self.socket.recv(&mut &mut buf[..], 0)?;
            let mut offset = 0;
            while offset < n {
                let msg = NetlinkMessage::<NetfilterMessage>::deserialize(&buf[offset..n])
                    .map_err(|e| ConntrackError::Decode(e.to_string()))?;
                let len = msg.header.length as usize;
                if msg.header.sequence_number == seq && each(msg)? {
                    return Ok(());
                }
                if len == 0 {
                    break;
                }
                offset += len;
            }
        }
    }
}

/// Sets `NLA_F_NESTED` on the top-level attribute `kind` of the serialized message `buf`: the
/// kernel parses `CTA_FILTER` with `nla_parse_nested`, which insists on the flag, and the
/// crate's `DefaultNla` (the only way to carry an attribute it does not model) emits none.
fn mark_nested(buf: &mut [u8], kind: u16) {
    // nlmsghdr (16 bytes) and nfgenmsg (4), then the attributes, each 4-aligned.
    let mut at = 20;
    while at + 4 <= buf.len() {
        let len = u16::from_ne_bytes([buf[at], buf[at + 1]]) as usize;
        let ty = u16::from_ne_bytes([buf[at + 2], buf[at + 3]]);
        if ty & !NLA_F_NESTED == kind {
            buf[at + 2..at + 4].copy_from_slice(&(kind | NLA_F_NESTED).to_ne_bytes());
        }
        if len < 4 {
            return;
        }
        at += (len + 3) & !3;
    }
}

/// A netlink error code (negative errno) as an error.
fn kernel(code: i32) -> ConntrackError {
    ConntrackError::Kernel(std::io::Error::from_raw_os_error(-code))
}

fn family(addr: IpAddr) -> NetfilterProtoFamily {
    match addr {
        IpAddr::V4(_) => NetfilterProtoFamily::IPv4,
        IpAddr::V6(_) => NetfilterProtoFamily::IPv6,
    }
}

/// The dump request's attributes: the reply tuple's source `addr` and protocol TCP through
/// `CTA_FILTER`, and "`IPS_SEEN_REPLY` clear" through the status and its mask.
fn dump_filter(addr: IpAddr) -> Vec<ConntrackAttribute> {
    let mut flags = Vec::with_capacity(8);
    flags.extend_from_slice(&8u16.to_ne_bytes());
    flags.extend_from_slice(&CTA_FILTER_REPLY_FLAGS.to_ne_bytes());
    flags.extend_from_slice(&(FILTER_IP_SRC | FILTER_PROTO_NUM).to_ne_bytes());
    vec![
        ConntrackAttribute::CtaTupleReply(vec![
            Tuple::Ip(vec![IPTuple::SourceAddress(addr)]),
            Tuple::Proto(vec![ProtoTuple::Protocol(Protocol::Tcp)]),
        ]),
        // Nested: see [`mark_nested`].
        ConntrackAttribute::Other(DefaultNla::new(CTA_FILTER, flags)),
        ConntrackAttribute::CtaStatus(Status::empty()),
        ConntrackAttribute::Other(DefaultNla::new(
            CTA_STATUS_MASK,
            Status::SeenReply.bits().to_be_bytes().to_vec(),
        )),
    ]
}

/// What a dumped entry says about itself.
struct Entry {
    orig: Vec<Tuple>,
    reply_src: Option<IpAddr>,
    tcp: bool,
    replied: bool,
}

impl Entry {
    fn read(attrs: &[ConntrackAttribute]) -> Option<Entry> {
        let mut orig = None;
        let mut reply_src = None;
        let mut tcp = false;
        let mut replied = false;
        for a in attrs {
            match a {
                ConntrackAttribute::CtaTupleOrig(t) => {
                    tcp = t.iter().any(|t| {
                        matches!(t, Tuple::Proto(p) if p.iter().any(|p| matches!(p, ProtoTuple::Protocol(Protocol::Tcp))))
                    });
                    orig = Some(t.clone());
                }
                ConntrackAttribute::CtaTupleReply(t) => {
                    reply_src = t.iter().find_map(|t| match t {
                        Tuple::Ip(ips) => ips.iter().find_map(|i| match i {
                            IPTuple::SourceAddress(a) => Some(*a),
                            _ => None,
                        }),
                        _ => None,
                    });
                }
                ConntrackAttribute::CtaStatus(s) => replied = s.contains(Status::SeenReply),
                _ => {}
            }
        }
        Some(Entry {
            orig: orig?,
            reply_src,
            tcp,
            replied,
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use netlink_packet_core::Emitable;

    #[test]
    fn the_dump_filter_asks_for_the_reply_source_and_tcp_and_no_reply_seen() {
        let attrs = dump_filter("10.244.3.2".parse().unwrap());
        let mut buf = vec![0; attrs.as_slice().buffer_len()];
        attrs.as_slice().emit(&mut buf);
        // CTA_TUPLE_REPLY (nested): CTA_TUPLE_IP (nested) { CTA_IP_V4_SRC 10.244.3.2 },
        // CTA_TUPLE_PROTO (nested) { CTA_PROTO_NUM 6 }.
        let reply: &[u8] = &[
            28, 0, 2, 0x80, //
            12, 0, 1, 0x80, 8, 0, 1, 0, 10, 244, 3, 2, //
            12, 0, 2, 0x80, 5, 0, 1, 0, 6, 0, 0, 0,
        ];
        assert_eq!(&buf[..28], reply);
        // CTA_FILTER { CTA_FILTER_REPLY_FLAGS = IP_SRC | PROTO_NUM, host order } (its nested
        // flag is set on the serialized message).
        let mut filter = vec![12, 0, 25, 0, 8, 0, 2, 0];
        filter.extend_from_slice(&(FILTER_IP_SRC | FILTER_PROTO_NUM).to_ne_bytes());
        assert_eq!(&buf[28..40], &filter[..]);
        // CTA_STATUS 0 and CTA_STATUS_MASK IPS_SEEN_REPLY, big-endian.
        assert_eq!(
            &buf[40..56],
            &[8, 0, 3, 0, 0, 0, 0, 0, 8, 0, 26, 0, 0, 0, 0, 2]
        );
    }

    #[test]
    fn the_filter_attribute_is_marked_nested_in_the_serialized_message() {
        let attrs = dump_filter("10.244.3.2".parse().unwrap());
        let mut buf = vec![0; 20 + attrs.as_slice().buffer_len()];
        attrs.as_slice().emit(&mut buf[20..]);
        mark_nested(&mut buf, CTA_FILTER);
        assert_eq!(&buf[20 + 28..20 + 32], &[12, 0, 25, 0x80]);
        // Nothing else changed: the reply tuple was nested already, the status is not.
        assert_eq!(&buf[20 + 2..20 + 4], &[2, 0x80]);
        assert_eq!(&buf[20 + 42..20 + 44], &[3, 0]);
    }

    #[test]
    fn an_entry_reads_its_original_tuple_reply_source_and_whether_it_was_replied() {
        let orig = vec![
            Tuple::Ip(vec![
                IPTuple::SourceAddress("10.78.0.250".parse().unwrap()),
                IPTuple::DestinationAddress("10.78.131.133".parse().unwrap()),
            ]),
            Tuple::Proto(vec![
                ProtoTuple::Protocol(Protocol::Tcp),
                ProtoTuple::SourcePort(37536),
                ProtoTuple::DestinationPort(80),
            ]),
        ];
        let attrs = vec![
            ConntrackAttribute::CtaTupleOrig(orig.clone()),
            ConntrackAttribute::CtaTupleReply(vec![Tuple::Ip(vec![
                IPTuple::SourceAddress("10.244.3.2".parse().unwrap()),
                IPTuple::DestinationAddress("10.78.0.1".parse().unwrap()),
            ])]),
            ConntrackAttribute::CtaStatus(Status::Confirmed | Status::DstNat),
        ];
        let e = Entry::read(&attrs).expect("an entry");
        assert_eq!(e.orig, orig);
        assert_eq!(e.reply_src, Some("10.244.3.2".parse().unwrap()));
        assert!(e.tcp);
        assert!(!e.replied);
        let mut replied = attrs.clone();
        replied[2] = ConntrackAttribute::CtaStatus(Status::SeenReply | Status::Confirmed);
        assert!(Entry::read(&replied).expect("an entry").replied);
    }
}
