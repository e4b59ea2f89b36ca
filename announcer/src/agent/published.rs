//! The last `/state` document the agent loop published ([`PublishedState`]), and when.
//!
//! Why a module of its own: the loop writes it, and the HTTP server (`/state`, `/healthz`,
//! `/readyz`) and the metrics (ownership, peers, the core's counters) read it; here, neither
//! reader needs the other.

use std::{
    sync::{Arc, Mutex},
    time::{Duration, Instant},
};

use crate::state::AgentState;

/// The last state the agent loop published (it writes; the HTTP server and the metrics read),
/// and when: its age is the loop's liveness.
#[derive(Clone)]
pub struct PublishedState {
    state: Arc<Mutex<(AgentState, Instant)>>,
}

impl Default for PublishedState {
    fn default() -> Self {
        PublishedState {
            state: Arc::new(Mutex::new((AgentState::default(), Instant::now()))),
        }
    }
}

impl PublishedState {
    /// Publish a new state; also the loop's liveness beacon.
    pub fn set(&self, state: AgentState) {
        *self.state.lock().expect("state lock") = (state, Instant::now());
    }

    /// The last published state and how long ago it was published.
    pub fn get(&self) -> (AgentState, Duration) {
        let g = self.state.lock().expect("state lock");
        (g.0.clone(), g.1.elapsed())
    }
}
