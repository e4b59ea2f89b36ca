//! Agents against the in-repo API server and a real kube-apiserver (`on_both_api_servers!`):
//! ownership, eligibility and handover, as an operator would check them (`/state`, Events).

use std::{collections::BTreeSet, time::Duration};

use announcer_tests::on_both_api_servers;
use k8s_openapi::api::events::v1::Event;

use crate::world::web;

const VIP: &str = "10.0.0.5";

/// Each Event as (name, series count): a new Event adds one, a repeat bumps a count.
fn seen(events: &[Event]) -> BTreeSet<(String, i32)> {
    events
        .iter()
        .map(|e| {
            (
                e.metadata.name.clone().unwrap_or_default(),
                e.series.as_ref().map_or(1, |s| s.count),
            )
        })
        .collect()
}

on_both_api_servers! {
/// The handover must be visible where operators look: after the owner's SIGTERM, the new
/// owner records an `Announcing` Event for the VIP on the Service, naming itself, that did not
/// exist before the SIGTERM (the old owner's Event from start-up does not count).
async fn sigterm_handover_is_recorded_by_the_new_owners_announcing_event(api) {
    let mut c = web(api, "sigterm", &[VIP, "fd00::5"], &[]).await;
    c.wait_for("one owner", Duration::from_secs(10), |c| {
        c.owners(VIP).len() == 1
    })
    .await;
    let owner = c.owners(VIP)[0].clone();
    let old_note = format!("announcing {VIP} from {owner} (no data plane: --no-dataplane)");
    // The old owner's own Event is in before the SIGTERM: the one the handover must not be
    // mistaken for.
    c.wait_for_event("default", &old_note, Duration::from_secs(10), |e| {
        e.note.as_deref() == Some(old_note.as_str())
    })
    .await;
    let before = seen(&c.event_objects("default").await);

    c.signal(&owner, libc::SIGTERM);
    assert_eq!(
        c.wait_exit(&owner, Duration::from_secs(5)),
        Some(0),
        "{}",
        c.log_tails()
    );
    c.wait_for("a new owner", Duration::from_secs(5), |c| {
        let o = c.owners(VIP);
        o.len() == 1 && o[0] != owner
    })
    .await;
    let new = c.owners(VIP)[0].clone();
    let note = format!("announcing {VIP} from {new} (no data plane: --no-dataplane)");
    let e = c
        .wait_for_event("default", &note, Duration::from_secs(15), |e| {
            e.reason.as_deref() == Some("Announcing")
                && e.note.as_deref() == Some(note.as_str())
                && !before.contains(&(
                    e.metadata.name.clone().unwrap_or_default(),
                    e.series.as_ref().map_or(1, |s| s.count),
                ))
        })
        .await;
    assert_eq!(e.type_.as_deref(), Some("Normal"), "{e:?}");
    assert_eq!(e.reporting_instance.as_deref(), Some(new.as_str()), "{e:?}");
    assert_eq!(
        e.regarding.as_ref().and_then(|r| r.name.as_deref()),
        Some("web"),
        "{e:?}"
    );
}
}
