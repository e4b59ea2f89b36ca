//! A benchmark's judged claim, shared by the benchmarks that check targets (control plane,
//! failover): one shape for the PASS/FAIL lines of the tables and the `verdicts` in the JSON.

/// One judged claim (`pass: None`: informational).
#[derive(Clone, Debug, PartialEq, serde::Serialize)]
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

/// The header of a verdict table whose claim column is `width` wide.
pub fn table_header(width: usize) -> String {
    format!(
        "{:<width$} {:>10}  {:>8}  verdict / what",
        "claim", "measured", "limit"
    )
}

/// One row of a verdict table: claim, value (`decimals` places), limit, mark and text.
pub fn table_row(v: &Verdict, width: usize, decimals: usize) -> String {
    format!(
        "{:<width$} {:>10}  {:>8}  {} {}",
        v.name,
        v.value.map_or("-".into(), |x| format!("{x:.decimals$}")),
        v.limit.map_or("-".into(), |x| format!("{x:.0}")),
        v.mark(),
        v.text
    )
}

/// Whether any judged claim failed (informational ones never do): what decides a benchmark's
/// exit status.
pub fn any_failed(verdicts: &[Verdict]) -> bool {
    verdicts.iter().any(|v| v.pass == Some(false))
}

/// The names of the failed claims, for the error a benchmark exits with.
pub fn failed_names(verdicts: &[Verdict]) -> Vec<&str> {
    verdicts
        .iter()
        .filter(|v| v.pass == Some(false))
        .map(|v| v.name.as_str())
        .collect()
}

#[cfg(test)]
mod unit {
    use super::*;

    fn verdict(name: &str, pass: Option<bool>) -> Verdict {
        Verdict {
            name: name.into(),
            text: String::new(),
            value: None,
            limit: None,
            pass,
        }
    }

    #[test]
    fn one_failed_verdict_fails_the_run() {
        let v = [verdict("a", Some(true)), verdict("b", Some(false))];
        assert!(any_failed(&v));
        assert_eq!(failed_names(&v), ["b"]);
    }

    #[test]
    fn passed_and_informational_verdicts_do_not_fail_the_run() {
        assert!(!any_failed(&[verdict("a", Some(true)), verdict("i", None)]));
        assert!(!any_failed(&[]));
    }
}
