//! Fault injection: what a flaky or partitioned control plane looks like to one agent.
//!
//! A fault applies to the requests matching its scope (client token, verb, resource — each
//! optional). Latency delays the answer; an error fault answers a `Status` with the given code
//! with some probability, drawn from a seeded ChaCha RNG so a run is reproducible; an outage
//! fails every matching request, either by resetting the connection without an answer
//! (`refuse`: what a dead apiserver or a partition looks like, surfacing in `kube` as a
//! transport error) or with a 503 `Status` (`unavailable`: an overloaded or starting apiserver,
//! which `kube`'s default retry policy retries). Watch compaction and watch drops are separate
//! handle calls, not faults, because they are events rather than conditions.

use std::sync::Mutex;
use std::time::Duration;

use rand::{Rng, SeedableRng};
use rand_chacha::ChaCha8Rng;
use serde::{Deserialize, Serialize};

use super::counts::Verb;

/// Which requests a fault applies to; `None` matches anything.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct Scope {
    /// The client's bearer token.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub client: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub verb: Option<Verb>,
    /// Plural resource, `/status` for the subresource (as in [`super::Counts`]).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub resource: Option<String>,
}

impl Scope {
    /// Whether a request matches. Requests outside the resource API (`/version`, discovery)
    /// have no verb/resource and only match scopes that filter on neither.
    pub fn matches(&self, client: &str, verb: Option<Verb>, resource: Option<&str>) -> bool {
        self.client.as_deref().is_none_or(|c| c == client)
            && self.verb.is_none_or(|v| Some(v) == verb)
            && self.resource.as_deref().is_none_or(|r| Some(r) == resource)
    }
}

/// How an outage fails requests.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum OutageMode {
    /// Reset the connection without any response.
    Refuse,
    /// Answer 503 `ServiceUnavailable`.
    Unavailable,
}

/// What a fault does.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(tag = "action", rename_all = "lowercase")]
pub enum FaultAction {
    /// Delay the answer (added up over all matching latency faults).
    Latency { delay_ms: u64 },
    /// Answer a failure `Status` with this HTTP code, with probability `probability` (0..=1).
    Error {
        code: u16,
        #[serde(default = "one")]
        probability: f64,
    },
    /// Fail every matching request.
    Outage { mode: OutageMode },
}

fn one() -> f64 {
    1.0
}

/// One fault: a scope and an action. JSON: `{"client": "node-a", "verb": "update",
/// "resource": "leases", "action": "error", "code": 500, "probability": 0.5}`.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Fault {
    #[serde(flatten)]
    pub scope: Scope,
    #[serde(flatten)]
    pub action: FaultAction,
}

impl Fault {
    pub fn latency(delay: Duration) -> Self {
        let delay_ms = u64::try_from(delay.as_millis()).unwrap_or(u64::MAX);
        Self {
            scope: Scope::default(),
            action: FaultAction::Latency { delay_ms },
        }
    }

    pub fn error(code: u16, probability: f64) -> Self {
        Self {
            scope: Scope::default(),
            action: FaultAction::Error { code, probability },
        }
    }

    pub fn outage(mode: OutageMode) -> Self {
        Self {
            scope: Scope::default(),
            action: FaultAction::Outage { mode },
        }
    }

    /// Only for requests with this bearer token.
    pub fn for_client(mut self, token: impl Into<String>) -> Self {
        self.scope.client = Some(token.into());
        self
    }

    pub fn for_verb(mut self, verb: Verb) -> Self {
        self.scope.verb = Some(verb);
        self
    }

    /// Only for this resource (`"leases"`, `"services/status"`).
    pub fn for_resource(mut self, resource: impl Into<String>) -> Self {
        self.scope.resource = Some(resource.into());
        self
    }
}

/// What the matching faults decided for one request.
#[derive(Debug, Clone, PartialEq)]
pub(crate) enum Outcome {
    Proceed,
    Refuse,
    Fail(u16),
}

/// The active faults and the RNG for probabilistic ones.
#[derive(Debug)]
pub(crate) struct FaultState {
    inner: Mutex<(Vec<Fault>, ChaCha8Rng)>,
}

impl FaultState {
    pub fn new(seed: u64) -> Self {
        Self {
            inner: Mutex::new((Vec::new(), ChaCha8Rng::seed_from_u64(seed))),
        }
    }

    pub fn list(&self) -> Vec<Fault> {
        self.inner
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .0
            .clone()
    }

    pub fn set(&self, faults: Vec<Fault>) {
        self.inner.lock().unwrap_or_else(|e| e.into_inner()).0 = faults;
    }

    pub fn add(&self, faults: Vec<Fault>) {
        self.inner
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .0
            .extend(faults);
    }

    pub fn reseed(&self, seed: u64) {
        self.inner.lock().unwrap_or_else(|e| e.into_inner()).1 = ChaCha8Rng::seed_from_u64(seed);
    }

    /// The total delay and the outcome for a request. An outage wins over errors; each matching
    /// error fault draws once, in order, and the first hit answers.
    pub fn decide(
        &self,
        client: &str,
        verb: Option<Verb>,
        resource: Option<&str>,
    ) -> (Duration, Outcome) {
        let mut guard = self.inner.lock().unwrap_or_else(|e| e.into_inner());
        let (faults, rng) = &mut *guard;
        let mut delay = Duration::ZERO;
        let mut outcome = Outcome::Proceed;
        for fault in faults
            .iter()
            .filter(|f| f.scope.matches(client, verb, resource))
        {
            match fault.action {
                FaultAction::Latency { delay_ms } => delay += Duration::from_millis(delay_ms),
                FaultAction::Outage { mode } => {
                    outcome = match mode {
                        OutageMode::Refuse => Outcome::Refuse,
                        OutageMode::Unavailable => Outcome::Fail(503),
                    };
                    return (Duration::ZERO, outcome);
                }
                FaultAction::Error { code, probability } => {
                    if outcome == Outcome::Proceed && rng.random_bool(probability.clamp(0.0, 1.0)) {
                        outcome = Outcome::Fail(code);
                    }
                }
            }
        }
        (delay, outcome)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn json_shape() {
        let f: Fault = serde_json::from_str(
            r#"{"client":"a","verb":"update","resource":"leases","action":"error","code":500}"#,
        )
        .unwrap();
        assert_eq!(
            f,
            Fault::error(500, 1.0)
                .for_client("a")
                .for_verb(Verb::Update)
                .for_resource("leases")
        );
        let f: Fault = serde_json::from_str(r#"{"action":"outage","mode":"refuse"}"#).unwrap();
        assert_eq!(f, Fault::outage(OutageMode::Refuse));
    }

    #[test]
    fn scope_and_probability() {
        let state = FaultState::new(7);
        state.set(vec![
            Fault::error(500, 0.5).for_client("a"),
            Fault::latency(Duration::from_millis(5)),
        ]);
        let fails = (0..1000)
            .filter(|_| state.decide("a", Some(Verb::Get), Some("leases")).1 != Outcome::Proceed)
            .count();
        assert!((400..600).contains(&fails), "{fails}");
        assert_eq!(
            state.decide("b", Some(Verb::Get), Some("leases")),
            (Duration::from_millis(5), Outcome::Proceed)
        );
    }
}
