//! A benchmark's judged claim, shared by the benchmarks that check targets (control plane,
//! failover): one shape for the PASS/FAIL lines of the tables and the `verdicts` in the JSON.

/// One judged claim (`pass: None`: informational).
#[derive(Clone, Debug, PartialEq)]
pub struct Verdict {
    /// Key in the JSON document.
    pub name: String,
    /// What was found, in words.
    pub text: String,
    /// The measured value, if the claim has one.
    pub value: Option<f64>,
    /// The target it was judged against.
    pub limit: Option<f64>,
    /// Whether it passed; `None`: informational.
    pub pass: Option<bool>,
}

impl Verdict {
    /// `PASS`, `FAIL` or `info`, for the table.
    pub fn mark(&self) -> &'static str {
        match self.pass {
            Some(true) => "PASS",
            Some(false) => "FAIL",
            None => "info",
        }
    }
}
