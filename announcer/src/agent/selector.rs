//! Label selectors from the command line (`--node-selector 'zone in (a,b),!spot'`), in the
//! syntax of `kubectl -l`, turned into a `LabelSelector`.
//!
//! kube-core can match a `LabelSelector` but does not parse the string form, so this small
//! parser covers the grammar of `k8s.io/apimachinery/pkg/labels.Parse`: `k=v`, `k==v`,
//! `k!=v`, `k in (a,b)`, `k notin (a,b)`, `k` and `!k`, joined by commas.

use std::collections::BTreeMap;

use k8s_openapi::apimachinery::pkg::apis::meta::v1::{LabelSelector, LabelSelectorRequirement};

/// A selector string that does not parse; says where and why.
#[derive(Debug, thiserror::Error, PartialEq, Eq)]
#[error("invalid label selector {input:?}: {why}")]
pub struct ParseError {
    /// The whole selector.
    pub input: String,
    /// What is wrong.
    pub why: String,
}

/// Parses `s` into a `LabelSelector`. An empty string selects everything.
pub fn parse(s: &str) -> Result<LabelSelector, ParseError> {
    let err = |why: String| ParseError {
        input: s.to_owned(),
        why,
    };
    let mut labels = BTreeMap::new();
    let mut exprs = Vec::new();
    for term in split_terms(s) {
        let term = term.trim();
        if term.is_empty() {
            continue;
        }
        let req = |key: &str,
                   op: &str,
                   values: Option<Vec<String>>|
         -> Result<LabelSelectorRequirement, ParseError> {
            check_key(key).map_err(err)?;
            Ok(LabelSelectorRequirement {
                key: key.to_owned(),
                operator: op.to_owned(),
                values,
            })
        };
        if let Some(key) = term.strip_prefix('!') {
            exprs.push(req(key.trim(), "DoesNotExist", None)?);
        } else if let Some((k, v)) = term.split_once("!=") {
            exprs.push(req(k.trim(), "NotIn", Some(vec![v.trim().to_owned()]))?);
        } else if let Some((k, v)) = term.split_once("==").or_else(|| term.split_once('=')) {
            check_key(k.trim()).map_err(err)?;
            labels.insert(k.trim().to_owned(), v.trim().to_owned());
        } else if let Some((k, rest)) = split_set(term, " notin ") {
            exprs.push(req(k, "NotIn", Some(set_values(rest).map_err(err)?))?);
        } else if let Some((k, rest)) = split_set(term, " in ") {
            exprs.push(req(k, "In", Some(set_values(rest).map_err(err)?))?);
        } else {
            exprs.push(req(term, "Exists", None)?);
        }
    }
    Ok(LabelSelector {
        match_labels: (!labels.is_empty()).then_some(labels),
        match_expressions: (!exprs.is_empty()).then_some(exprs),
    })
}

/// Splits on commas outside parentheses.
fn split_terms(s: &str) -> Vec<&str> {
    let (mut out, mut depth, mut start) = (Vec::new(), 0i32, 0);
    for (i, c) in s.char_indices() {
        match c {
            '(' => depth += 1,
            ')' => depth -= 1,
            ',' if depth == 0 => {
                out.push(&s[start..i]);
                start = i + 1;
            }
            _ => {}
        }
    }
    out.push(&s[start..]);
    out
}

fn split_set<'a>(term: &'a str, op: &str) -> Option<(&'a str, &'a str)> {
    term.split_once(op).map(|(k, r)| (k.trim(), r.trim()))
}

fn set_values(rest: &str) -> Result<Vec<String>, String> {
    let inner = rest
        .strip_prefix('(')
        .and_then(|r| r.strip_suffix(')'))
        .ok_or_else(|| format!("expected a parenthesized set, got {rest:?}"))?;
    let values: Vec<String> = inner
        .split(',')
        .map(|v| v.trim().to_owned())
        .filter(|v| !v.is_empty())
        .collect();
    if values.is_empty() {
        return Err("empty set".into());
    }
    Ok(values)
}

fn check_key(key: &str) -> Result<(), String> {
    let ok = !key.is_empty()
        && key.len() <= 317
        && key
            .chars()
            .all(|c| c.is_ascii_alphanumeric() || "-_./".contains(c));
    if ok {
        Ok(())
    } else {
        Err(format!("{key:?} is not a valid label key"))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn kubectl_grammar() {
        let s = parse("app=web, tier in (a, b),zone notin (x),!spot,gpu,env!=dev").unwrap();
        assert_eq!(s.match_labels.unwrap()["app"], "web");
        let e = s.match_expressions.unwrap();
        let ops: Vec<_> = e
            .iter()
            .map(|r| (r.key.as_str(), r.operator.as_str()))
            .collect();
        assert_eq!(
            ops,
            [
                ("tier", "In"),
                ("zone", "NotIn"),
                ("spot", "DoesNotExist"),
                ("gpu", "Exists"),
                ("env", "NotIn")
            ]
        );
        assert_eq!(e[0].values.as_deref().unwrap(), ["a", "b"]);
    }

    #[test]
    fn empty_selects_everything() {
        assert_eq!(parse("").unwrap(), LabelSelector::default());
    }

    #[test]
    fn errors_say_why() {
        assert!(
            parse("tier in a,b")
                .unwrap_err()
                .why
                .contains("parenthesized")
        );
        assert!(
            parse("bad key=1")
                .unwrap_err()
                .why
                .contains("not a valid label key")
        );
        assert!(parse("k in ()").is_err());
    }
}
