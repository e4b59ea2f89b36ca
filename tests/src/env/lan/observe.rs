//! What an operator reads off a running testbed besides `/state`: the Services' Events and the
//! agents' counters.
//!
//! Why here: assertions about faults that two nodes see differently (an overlap after a
//! partition) have to name *which* node counted what and which one raised the Event; both live
//! in the API server and in each agent's `/metrics`, not in the client's view.

use std::time::Duration;

use k8s_openapi::api::events::v1::Event;

use super::{SERVICE_NAMESPACE, Testbed};
use crate::env::cluster::{list_events, wait_for_event};

/// The sum of every sample of `name` (any labels) in `/metrics` text; `None` if it has none.
pub fn metric_sum(text: &str, name: &str) -> Option<f64> {
    let mut found = None;
    for l in text.lines().filter(|l| !l.starts_with('#')) {
        let Some((series, value)) = l.rsplit_once(' ') else {
            continue;
        };
        if series.split('{').next() == Some(name)
            && let Ok(v) = value.trim().parse::<f64>()
        {
            *found.get_or_insert(0.0) += v;
        }
    }
    found
}

impl Testbed {
    /// The sum of every sample of `name` in `node`'s `/metrics`; `None` if the agent does not
    /// answer or has no such sample.
    pub fn metric(&self, node: &str, name: &str) -> Option<f64> {
        metric_sum(&self.metrics(node)?, name)
    }

    /// The incarnation `node`'s agent reports in `/state`, if it answers.
    pub fn incarnation(&self, node: &str) -> Option<u64> {
        self.state(node)?["incarnation"].as_u64()
    }

    /// The Events in the Services' namespace (`events.k8s.io/v1`).
    pub async fn events(&self) -> Vec<Event> {
        list_events(&self.kube(), SERVICE_NAMESPACE).await
    }

    /// Waits up to `timeout` for an Event in the Services' namespace matching `pred`; returns
    /// it. Panics with the Events seen and the agents' log tails if none comes.
    pub async fn wait_for_event(
        &self,
        what: &str,
        timeout: Duration,
        pred: impl Fn(&Event) -> bool,
    ) -> Event {
        let tails = || self.log_tails();
        wait_for_event(&self.kube(), SERVICE_NAMESPACE, what, timeout, pred, tails).await
    }
}

#[cfg(test)]
mod unit {
    use super::*;

    #[test]
    fn sums_every_series_of_one_name_only() {
        let text = "# TYPE a counter\na_total 2\na_total{x=\"1\"} 3\nab_total 7\n";
        assert_eq!(metric_sum(text, "a_total"), Some(5.0));
        assert_eq!(metric_sum(text, "ab_total"), Some(7.0));
        assert_eq!(metric_sum(text, "c_total"), None);
    }
}
