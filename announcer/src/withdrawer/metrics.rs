//! The withdrawer's Prometheus metrics and its `/metrics` and `/healthz` endpoints.
//!
//! Every name starts with `announcer_withdrawer_` and carries its unit.

use std::{sync::Arc, time::Duration};

use axum::{Router, http::header, routing::get};
use prometheus_client::{
    encoding::{EncodeLabelSet, EncodeLabelValue, text},
    metrics::{counter::Counter, family::Family, gauge::Gauge, histogram::Histogram},
    registry::Registry,
};

/// The `Content-Type` of [`Metrics::encode`]'s output.
pub const CONTENT_TYPE: &str = "application/openmetrics-text; version=1.0.0; charset=utf-8";

/// How a withdrawal decision ended.
#[derive(Clone, Copy, Debug, Hash, PartialEq, Eq)]
pub enum Outcome {
    /// The node holds a slot; its Pods were written.
    Withdrawn,
    /// The cap was reached (this replica's, or the shared one).
    Capped,
    /// The shared slot could not be claimed (API error, contention).
    Failed,
}

/// What became of one Pod.
#[derive(Clone, Copy, Debug, Hash, PartialEq, Eq)]
pub enum PodResult {
    /// Its `Ready` was set False by this replica.
    Withdrawn,
    /// Already not ready, or bound elsewhere: nothing to do.
    Skipped,
    /// Changed under us twice (409): left to whoever wrote.
    Conflict,
    /// Refused by admission or RBAC (403, 422): final.
    Refused,
    /// Deleted meanwhile (404).
    Gone,
    /// Another error (network, 5xx).
    Error,
}

/// How a slot was freed.
#[derive(Clone, Copy, Debug, Hash, PartialEq, Eq)]
pub enum Return {
    /// The node showed life.
    Returned,
    /// The node lifecycle controller took over, or the Node was deleted.
    HandedOver,
}

impl Outcome {
    /// The label value (lowercase, as every announcer metric's).
    pub fn as_str(self) -> &'static str {
        match self {
            Outcome::Withdrawn => "withdrawn",
            Outcome::Capped => "capped",
            Outcome::Failed => "failed",
        }
    }
}

impl PodResult {
    /// The label value.
    pub fn as_str(self) -> &'static str {
        match self {
            PodResult::Withdrawn => "withdrawn",
            PodResult::Skipped => "skipped",
            PodResult::Conflict => "conflict",
            PodResult::Refused => "refused",
            PodResult::Gone => "gone",
            PodResult::Error => "error",
        }
    }
}

impl Return {
    /// The label value.
    pub fn as_str(self) -> &'static str {
        match self {
            Return::Returned => "returned",
            Return::HandedOver => "handed_over",
        }
    }
}

/// Each label enum encodes as its [`as_str`](Outcome::as_str).
macro_rules! label_value {
    ($($t:ty),*) => {$(
        impl EncodeLabelValue for $t {
            fn encode(
                &self,
                encoder: &mut prometheus_client::encoding::LabelValueEncoder<'_>,
            ) -> Result<(), std::fmt::Error> {
                std::fmt::Write::write_str(encoder, self.as_str())
            }
        }
    )*};
}
label_value!(Outcome, PodResult, Return);

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
struct OutcomeLabel {
    outcome: Outcome,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
struct ResultLabel {
    result: PodResult,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
struct ReturnLabel {
    how: Return,
}

/// Withdrawn durations: a returning kubelet renews within seconds; the node lifecycle
/// controller takes over within a minute.
const WITHDRAWN_BUCKETS: [f64; 10] = [0.5, 1.0, 2.5, 5.0, 10.0, 20.0, 30.0, 60.0, 120.0, 300.0];

/// The metrics (cheap to share through an [`Arc`]).
#[derive(Debug)]
pub struct Metrics {
    registry: Registry,
    withdrawals: Family<OutcomeLabel, Counter>,
    pods: Family<ResultLabel, Counter>,
    withdrawn_now: Gauge,
    returns: Family<ReturnLabel, Counter>,
    withdrawn_seconds: Histogram,
    bad_reports: Counter,
}

impl Default for Metrics {
    fn default() -> Self {
        Self::new()
    }
}

impl Metrics {
    /// Registered, all zero.
    pub fn new() -> Self {
        let mut registry = Registry::default();
        let withdrawals = Family::<OutcomeLabel, Counter>::default();
        let pods = Family::<ResultLabel, Counter>::default();
        let withdrawn_now = Gauge::default();
        let returns = Family::<ReturnLabel, Counter>::default();
        let withdrawn_seconds = Histogram::new(WITHDRAWN_BUCKETS);
        let bad_reports = Counter::default();
        registry.register(
            "announcer_withdrawer_withdrawals",
            "Nodes proven unreachable, by what became of the withdrawal",
            withdrawals.clone(),
        );
        registry.register(
            "announcer_withdrawer_pods",
            "Pods of withdrawn nodes, by what became of their write (result=withdrawn: Ready set False)",
            pods.clone(),
        );
        registry.register(
            "announcer_withdrawer_nodes_withdrawn",
            "Nodes this replica holds withdrawn now",
            withdrawn_now.clone(),
        );
        registry.register(
            "announcer_withdrawer_returns",
            "Withdrawn nodes whose slot was freed, by how",
            returns.clone(),
        );
        registry.register(
            "announcer_withdrawer_withdrawn_seconds",
            "How long a node was withdrawn until it showed life again",
            withdrawn_seconds.clone(),
        );
        registry.register(
            "announcer_withdrawer_bad_reports",
            "Agent Lease annotations that were not a report (read as empty)",
            bad_reports.clone(),
        );
        Metrics {
            registry,
            withdrawals,
            pods,
            withdrawn_now,
            returns,
            withdrawn_seconds,
            bad_reports,
        }
    }

    /// One withdrawal decision ended so.
    pub fn withdrawal(&self, outcome: Outcome) {
        self.withdrawals
            .get_or_create(&OutcomeLabel { outcome })
            .inc();
    }

    /// One Pod's write ended so.
    pub fn pod(&self, result: PodResult) {
        self.pods.get_or_create(&ResultLabel { result }).inc();
    }

    /// The nodes withdrawn now.
    pub fn set_withdrawn(&self, n: usize) {
        self.withdrawn_now.set(i64::try_from(n).unwrap_or(i64::MAX));
    }

    /// A slot was freed; `after`: how long the node was withdrawn, when it returned.
    pub fn returned(&self, how: Return, after: Option<Duration>) {
        self.returns.get_or_create(&ReturnLabel { how }).inc();
        if let Some(d) = after {
            self.withdrawn_seconds.observe(d.as_secs_f64());
        }
    }

    /// An annotation that was not a report.
    pub fn bad_report(&self) {
        self.bad_reports.inc();
    }

    /// The OpenMetrics text.
    pub fn encode(&self) -> String {
        let mut out = String::new();
        let _ = text::encode(&mut out, &self.registry);
        out
    }
}

/// `/metrics` and `/healthz`.
pub fn router(metrics: Arc<Metrics>) -> Router {
    Router::new()
        .route(
            "/metrics",
            get(
                |axum::extract::State(m): axum::extract::State<Arc<Metrics>>| async move {
                    ([(header::CONTENT_TYPE, CONTENT_TYPE)], m.encode())
                },
            ),
        )
        .route("/healthz", get(|| async { "ok" }))
        .with_state(metrics)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_family_is_exported_with_its_labels() {
        let m = Metrics::new();
        m.withdrawal(Outcome::Capped);
        m.pod(PodResult::Withdrawn);
        m.set_withdrawn(1);
        m.returned(Return::Returned, Some(Duration::from_secs(3)));
        let text = m.encode();
        for want in [
            "announcer_withdrawer_withdrawals_total{outcome=\"capped\"} 1",
            "announcer_withdrawer_pods_total{result=\"withdrawn\"} 1",
            "announcer_withdrawer_nodes_withdrawn 1",
            "announcer_withdrawer_returns_total{how=\"returned\"} 1",
            "announcer_withdrawer_withdrawn_seconds_count 1",
            "announcer_withdrawer_bad_reports_total 0",
        ] {
            assert!(text.contains(want), "{want} missing in:\n{text}");
        }
    }
}
