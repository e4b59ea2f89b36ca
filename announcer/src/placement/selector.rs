//! Label selectors in their string form (`--node-selector 'zone in (a,b),!spot'`, and
//! `?labelSelector=` for the in-repo API server), parsed as
//! `k8s.io/apimachinery/pkg/labels.Parse` does: `k=v`, `k==v`, `k!=v`, `k in (a,b)`,
//! `k notin (a,b)`, `k` and `!k`, AND-ed by commas, with keys and values validated; the
//! numeric `gt`/`lt` operators are rejected.
//!
//! kube-core matches a `LabelSelector` but does not parse the string form, hence this module;
//! [`LabelQuery::to_label_selector`] hands the result to kube-core.

use std::collections::BTreeMap;

use k8s_openapi::apimachinery::pkg::apis::meta::v1::{LabelSelector, LabelSelectorRequirement};

/// A malformed selector, with what is wrong.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("{0}")]
pub struct SelectorError(pub String);

/// Parses `s` into a `LabelSelector`. An empty string selects everything.
pub fn parse(s: &str) -> Result<LabelSelector, SelectorError> {
    LabelQuery::parse(s).map(|q| q.to_label_selector())
}

#[derive(Debug, Clone, PartialEq, Eq)]
enum Op {
    Eq(String),
    NotEq(String),
    In(Vec<String>),
    NotIn(Vec<String>),
    Exists,
    NotExists,
}

#[derive(Debug, Clone, PartialEq, Eq)]
struct Requirement {
    key: String,
    op: Op,
}

impl Requirement {
    fn matches(&self, value: Option<&str>) -> bool {
        match (&self.op, value) {
            (Op::Eq(v), Some(have)) => have == v,
            (Op::Eq(_), None) => false,
            // `!=` and `notin` also match objects without the label (labels.Requirement.Matches).
            (Op::NotEq(v), have) => have != Some(v.as_str()),
            (Op::In(vs), Some(have)) => vs.iter().any(|v| v == have),
            (Op::In(_), None) => false,
            (Op::NotIn(vs), have) => have.is_none_or(|h| !vs.iter().any(|v| v == h)),
            (Op::Exists, have) => have.is_some(),
            (Op::NotExists, have) => have.is_none(),
        }
    }
}

/// Split on top-level commas (commas inside `( … )` belong to a set).
fn split_top(s: &str) -> Result<Vec<&str>, SelectorError> {
    let mut out = Vec::new();
    let mut depth = 0i32;
    let mut start = 0;
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
        if !(0..=1).contains(&depth) {
            return Err(SelectorError(format!(
                "unbalanced parentheses in selector {s:?}"
            )));
        }
    }
    if depth != 0 {
        return Err(SelectorError(format!(
            "unbalanced parentheses in selector {s:?}"
        )));
    }
    out.push(&s[start..]);
    Ok(out)
}

fn check_key(key: &str) -> Result<String, SelectorError> {
    if is_qualified_name(key) {
        Ok(key.to_string())
    } else {
        Err(SelectorError(format!("invalid label key {key:?}")))
    }
}

fn check_value(value: &str) -> Result<String, SelectorError> {
    if is_label_value(value) {
        Ok(value.to_string())
    } else {
        Err(SelectorError(format!("invalid label value: {value:?}")))
    }
}

fn parse_set(rest: &str) -> Result<Vec<String>, SelectorError> {
    let inner = rest
        .trim()
        .strip_prefix('(')
        .and_then(|r| r.strip_suffix(')'))
        .ok_or_else(|| SelectorError(format!("expected a parenthesised set, found {rest:?}")))?;
    if inner.trim().is_empty() {
        return Err(SelectorError(
            "for 'in', 'notin' operators, values set can't be empty".into(),
        ));
    }
    inner.split(',').map(|v| check_value(v.trim())).collect()
}

fn parse_requirement(term: &str) -> Result<Requirement, SelectorError> {
    let term = term.trim();
    if let Some(key) = term.strip_prefix('!') {
        return Ok(Requirement {
            key: check_key(key.trim())?,
            op: Op::NotExists,
        });
    }
    if let Some((key, value)) = term.split_once("!=") {
        return Ok(Requirement {
            key: check_key(key.trim())?,
            op: Op::NotEq(check_value(value.trim())?),
        });
    }
    if let Some((key, value)) = term.split_once("==").or_else(|| term.split_once('=')) {
        return Ok(Requirement {
            key: check_key(key.trim())?,
            op: Op::Eq(check_value(value.trim())?),
        });
    }
    if let Some((key, rest)) = term.split_once(char::is_whitespace) {
        let rest = rest.trim_start();
        if let Some(set) = rest.strip_prefix("notin") {
            return Ok(Requirement {
                key: check_key(key)?,
                op: Op::NotIn(parse_set(set)?),
            });
        }
        if let Some(set) = rest.strip_prefix("in") {
            return Ok(Requirement {
                key: check_key(key)?,
                op: Op::In(parse_set(set)?),
            });
        }
        return Err(SelectorError(format!(
            "unsupported selector operator in {term:?}"
        )));
    }
    if term.contains(['<', '>', '(', ')']) {
        return Err(SelectorError(format!(
            "unsupported selector operator in {term:?}"
        )));
    }
    Ok(Requirement {
        key: check_key(term)?,
        op: Op::Exists,
    })
}

/// A parsed label selector; the empty selector matches everything.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct LabelQuery(Vec<Requirement>);

impl LabelQuery {
    /// Parses the string form (`kubectl -l`, `?labelSelector=`).
    pub fn parse(s: &str) -> Result<Self, SelectorError> {
        if s.trim().is_empty() {
            return Ok(Self::default());
        }
        split_top(s)?
            .into_iter()
            .map(parse_requirement)
            .collect::<Result<_, _>>()
            .map(Self)
    }

    /// Whether labels looked up with `get` satisfy every requirement.
    pub fn matches<'a>(&self, get: impl Fn(&str) -> Option<&'a str>) -> bool {
        self.0.iter().all(|r| r.matches(get(&r.key)))
    }

    /// The same selector as a `LabelSelector` (`matchLabels` for `=`, `matchExpressions` for
    /// the rest), as the Kubernetes API and kube-core take it.
    pub fn to_label_selector(&self) -> LabelSelector {
        let mut labels = BTreeMap::new();
        let mut exprs = Vec::new();
        for r in &self.0 {
            let req = |op: &str, values: Option<Vec<String>>| LabelSelectorRequirement {
                key: r.key.clone(),
                operator: op.to_owned(),
                values,
            };
            match &r.op {
                Op::Eq(v) => {
                    labels.insert(r.key.clone(), v.clone());
                }
                Op::NotEq(v) => exprs.push(req("NotIn", Some(vec![v.clone()]))),
                Op::In(vs) => exprs.push(req("In", Some(vs.clone()))),
                Op::NotIn(vs) => exprs.push(req("NotIn", Some(vs.clone()))),
                Op::Exists => exprs.push(req("Exists", None)),
                Op::NotExists => exprs.push(req("DoesNotExist", None)),
            }
        }
        LabelSelector {
            match_labels: (!labels.is_empty()).then_some(labels),
            match_expressions: (!exprs.is_empty()).then_some(exprs),
        }
    }
}

/// RFC 1123 label: lower-case alphanumerics and `-`, alphanumeric at both ends, ≤ 63 bytes.
pub fn is_dns1123_label(s: &str) -> bool {
    let b = s.as_bytes();
    !b.is_empty()
        && b.len() <= 63
        && b.iter()
            .all(|c| c.is_ascii_lowercase() || c.is_ascii_digit() || *c == b'-')
        && b[0] != b'-'
        && b[b.len() - 1] != b'-'
}

/// RFC 1123 subdomain: dot-separated labels, ≤ 253 bytes.
pub fn is_dns1123_subdomain(s: &str) -> bool {
    s.len() <= 253 && s.split('.').all(is_dns1123_label)
}

/// RFC 1035 label: an RFC 1123 label that starts with a letter.
pub fn is_dns1035_label(s: &str) -> bool {
    is_dns1123_label(s) && s.as_bytes()[0].is_ascii_lowercase()
}

/// A label/annotation key: optional DNS-subdomain prefix and `/`, then a ≤ 63-byte name of
/// alphanumerics, `-`, `_`, `.` with alphanumerics at both ends (`IsQualifiedName`).
pub fn is_qualified_name(s: &str) -> bool {
    let (prefix, name) = match s.split_once('/') {
        Some((p, n)) => (Some(p), n),
        None => (None, s),
    };
    prefix.is_none_or(|p| !p.is_empty() && is_dns1123_subdomain(p))
        && is_label_value(name)
        && !name.is_empty()
}

/// A label value: empty, or ≤ 63 bytes of alphanumerics, `-`, `_`, `.` with alphanumerics at
/// both ends (`IsValidLabelValue`).
pub fn is_label_value(s: &str) -> bool {
    let b = s.as_bytes();
    if b.is_empty() {
        return true;
    }
    b.len() <= 63
        && b.iter()
            .all(|c| c.is_ascii_alphanumeric() || matches!(c, b'-' | b'_' | b'.'))
        && b[0].is_ascii_alphanumeric()
        && b[b.len() - 1].is_ascii_alphanumeric()
}

#[cfg(test)]
mod tests {
    use super::*;

    fn q(s: &str) -> LabelQuery {
        LabelQuery::parse(s).unwrap()
    }

    #[test]
    fn matches_like_kubernetes() {
        let labels: BTreeMap<&str, &str> = [("app", "web"), ("tier", "front")].into();
        let get = |k: &str| labels.get(k).copied();
        for s in [
            "app=web",
            "app==web",
            "app!=db",
            "app in (web, db)",
            "tier notin (back)",
            "app",
            "!missing",
            "app=web,tier",
            "missing!=x",
        ] {
            assert!(q(s).matches(get), "{s}");
        }
        for s in [
            "app=db",
            "app!=web",
            "app in (db)",
            "tier notin (front,back)",
            "missing",
            "!app",
            "app=web,tier=back",
        ] {
            assert!(!q(s).matches(get), "{s}");
        }
        for bad in ["app in web", "app=(", "app>1", "-x=y", "a in ()"] {
            assert!(LabelQuery::parse(bad).is_err(), "{bad}");
        }
    }

    #[test]
    fn converts_to_a_label_selector() {
        let s = parse("app=web, tier in (a, b),zone notin (x),!spot,gpu,env!=dev").unwrap();
        assert_eq!(s.match_labels.unwrap()["app"], "web");
        let ops: Vec<_> = s
            .match_expressions
            .unwrap()
            .into_iter()
            .map(|r| (r.key, r.operator))
            .collect();
        let want = [
            ("tier", "In"),
            ("zone", "NotIn"),
            ("spot", "DoesNotExist"),
            ("gpu", "Exists"),
            ("env", "NotIn"),
        ];
        assert_eq!(ops, want.map(|(k, o)| (k.to_string(), o.to_string())));
        assert_eq!(parse("").unwrap(), LabelSelector::default());
    }
}
