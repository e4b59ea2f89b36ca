//! `announcer announce`: send the announcement burst for a VIP by hand
//! ([`crate::dataplane::announce`]), as the agent does when it takes one over.

use std::{net::IpAddr, process::ExitCode};

use super::{At, BurstArgs};
use crate::{
    dataplane::{
        Error, Vip,
        announce::{self, AnnounceError, BurstConfig, PacketSocket},
        sys::netif,
    },
    wire::MacAddr,
};

/// `announcer announce`'s flags.
#[derive(clap::Args)]
pub struct AnnounceArgs {
    /// The VIP.
    pub vip: IpAddr,
    #[command(flatten)]
    pub at: At,
    #[command(flatten)]
    pub burst: BurstArgs,
}

/// `announcer announce`.
pub fn run(args: AnnounceArgs) -> ExitCode {
    super::exit(try_run(args))
}

fn try_run(AnnounceArgs { vip, at, burst }: AnnounceArgs) -> Result<(), Error> {
    let mac = match at.mac {
        Some(m) => m,
        None => netif::mac(&at.iface)?,
    };
    Vip::new(vip, at.vlan)?;
    send_burst(&at, vip, mac, &burst.config())
}

/// Sends the burst for `vip` from `mac` on `at`, and says how it went.
pub(super) fn send_burst(
    at: &At,
    vip: IpAddr,
    mac: MacAddr,
    cfg: &BurstConfig,
) -> Result<(), Error> {
    let ifindex = netif::ifindex(&at.iface)?;
    let sock = PacketSocket::open(ifindex).map_err(|e| match e {
        AnnounceError::Open { source, .. } if source.raw_os_error() == Some(libc::EPERM) => {
            Error::Privileges {
                action: "open a raw packet socket",
                source,
            }
        }
        other => Error::Io {
            context: "announcing".into(),
            source: std::io::Error::other(other),
        },
    })?;
    let r = announce::burst_blocking(&sock, mac, vip, at.vlan, cfg);
    println!(
        "announced {vip} from {mac}: {} frames sent, {} failed",
        r.sent, r.failed
    );
    Ok(())
}
