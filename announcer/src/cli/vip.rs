//! `announcer vip add|del|list`: the VIP table by hand ([`crate::dataplane::table`]), for
//! static use without an agent and for looking at what an agent wrote.

use std::{net::IpAddr, path::Path, process::ExitCode, time::Duration};

use clap::Subcommand;

use super::{At, BurstArgs, announce::send_burst};
use crate::dataplane::{
    Dataplane, Error, Lifetime, Vip, VipStatus, pins::pinned_interfaces, sys::netif,
};

/// `announcer vip`'s subcommands.
#[derive(Subcommand)]
pub enum VipCmd {
    /// Answer for a VIP (one map write); with --announce, then send the burst.
    Add {
        /// The VIP (IPv4 or IPv6).
        vip: IpAddr,
        #[command(flatten)]
        at: At,
        /// Lifetime of the entry; the agent refreshes it. Ignored with --permanent.
        #[arg(long, value_parser = humantime::parse_duration, default_value = "30s")]
        ttl: Duration,
        /// Never expire (static use without an agent).
        #[arg(long)]
        permanent: bool,
        /// Send the announcement burst after the map write.
        #[arg(long)]
        announce: bool,
        #[command(flatten)]
        burst: BurstArgs,
    },
    /// Stop answering for a VIP at once.
    Del {
        /// The VIP.
        vip: IpAddr,
        #[command(flatten)]
        at: At,
    },
    /// List VIPs with MAC, time to expiry and counters.
    List {
        /// Only this interface (default: every interface with pins).
        #[arg(long)]
        iface: Option<String>,
        /// JSON instead of a table.
        #[arg(long)]
        json: bool,
    },
}

/// `announcer vip …`.
pub fn run(root: &Path, cmd: VipCmd) -> ExitCode {
    super::exit(try_run(root, cmd))
}

fn try_run(root: &Path, cmd: VipCmd) -> Result<(), Error> {
    match cmd {
        VipCmd::Add {
            vip,
            at,
            ttl,
            permanent,
            announce,
            burst,
        } => {
            let v = Vip::new(vip, at.vlan)?;
            let mac = match at.mac {
                Some(m) => m,
                None => netif::mac(&at.iface)?,
            };
            let lifetime = if permanent {
                Lifetime::Permanent
            } else {
                Lifetime::Ttl(ttl)
            };
            Dataplane::open(root, &at.iface)?.upsert(v, mac, lifetime)?;
            println!(
                "answering for {vip} on {} as {mac}",
                describe(&at.iface, v.vlan)
            );
            if v.vlan != 0 && netif::rx_vlan_offload(&at.iface) == Some(true) {
                eprintln!(
                    "note: {iface} has rx-vlan-offload on; NICs that strip 802.1Q tags in hardware hide them \
                     from XDP (veth does not). If tagged requests go unanswered: ethtool -K {iface} rxvlan off",
                    iface = at.iface
                );
            }
            if announce {
                send_burst(&at, vip, mac, &burst.config())?;
            }
        }
        VipCmd::Del { vip, at } => {
            let v = Vip::new(vip, at.vlan)?;
            Dataplane::open(root, &at.iface)?.remove(v)?;
            println!(
                "stopped answering for {vip} on {}",
                describe(&at.iface, v.vlan)
            );
        }
        VipCmd::List { iface, json } => {
            let rows = collect(root, iface.as_deref())?;
            print_vips(&rows, json);
        }
    }
    Ok(())
}

/// `iface`, or `iface vlan N`.
fn describe(iface: &str, vlan: u16) -> String {
    if vlan == 0 {
        iface.to_owned()
    } else {
        format!("{iface} vlan {vlan}")
    }
}

/// Interfaces with pins under `root`, or just `only`.
fn interfaces(root: &Path, only: Option<&str>) -> Vec<String> {
    match only {
        Some(i) => vec![i.to_owned()],
        None => pinned_interfaces(root),
    }
}

fn collect(root: &Path, only: Option<&str>) -> Result<Vec<(String, VipStatus)>, Error> {
    let mut rows = Vec::new();
    for iface in interfaces(root, only) {
        for r in Dataplane::open(root, &iface)?.list()? {
            rows.push((iface.clone(), r));
        }
    }
    Ok(rows)
}

fn expiry(r: &VipStatus) -> String {
    match r.expires_in {
        None => "permanent".into(),
        Some(d) if d.is_zero() => "EXPIRED".into(),
        Some(d) => format!("{:.1}s", d.as_secs_f64()),
    }
}

fn vip_json(iface: &str, r: &VipStatus) -> serde_json::Value {
    serde_json::json!({
        "iface": iface,
        "vip": r.vip.addr.to_string(),
        "vlan": r.vip.vlan,
        "mac": r.mac.to_string(),
        "live": r.is_live(),
        "expires_in_s": r.expires_in.map(|d| d.as_secs_f64()),
        "answered": r.stats.answered,
        "expired": r.stats.expired,
        "malformed": r.stats.malformed,
    })
}

fn print_vips(rows: &[(String, VipStatus)], json: bool) {
    if json {
        let v: Vec<_> = rows.iter().map(|(i, r)| vip_json(i, r)).collect();
        println!("{}", serde_json::Value::Array(v));
        return;
    }
    println!(
        "{:<10} {:<28} {:>4} {:<17} {:>10} {:>10} {:>8} {:>9}",
        "IFACE", "VIP", "VLAN", "MAC", "EXPIRES", "ANSWERED", "EXPIRED", "MALFORMED"
    );
    for (iface, r) in rows {
        println!(
            "{:<10} {:<28} {:>4} {:<17} {:>10} {:>10} {:>8} {:>9}",
            iface,
            r.vip.addr,
            r.vip.vlan,
            r.mac,
            expiry(r),
            r.stats.answered,
            r.stats.expired,
            r.stats.malformed
        );
    }
}
