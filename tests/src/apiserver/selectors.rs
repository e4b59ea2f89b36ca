//! Label and field selectors, as parsed by `k8s.io/apimachinery/pkg/labels` and `.../fields`.
//!
//! Label selectors support the equality (`=`, `==`, `!=`) and set-based (`in`, `notin`, `key`,
//! `!key`) requirements, AND-ed by commas; the numeric `gt`/`lt` operators are rejected. Field
//! selectors support `metadata.name` and `metadata.namespace` with `=`, `==`, `!=` — the fields
//! every kind indexes; per-kind fields (e.g. `spec.nodeName`) are rejected with the same
//! "field label not supported" 400 a real server gives for unknown ones.

use std::fmt;

use serde_json::Value;

use super::validate::{is_label_value, is_qualified_name};

/// A malformed selector; becomes a 400.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct SelectorError(pub String);

impl fmt::Display for SelectorError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.0)
    }
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

/// A parsed `labelSelector`; the empty selector matches everything.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub(crate) struct LabelSelector(Vec<Requirement>);

impl LabelSelector {
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

    pub fn matches(&self, obj: &Value) -> bool {
        let labels = &obj["metadata"]["labels"];
        self.0.iter().all(|r| r.matches(labels[&r.key].as_str()))
    }
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Field {
    Name,
    Namespace,
}

/// A parsed `fieldSelector` over `metadata.name` / `metadata.namespace`.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub(crate) struct FieldSelector(Vec<(Field, bool, String)>);

impl FieldSelector {
    pub fn parse(s: &str) -> Result<Self, SelectorError> {
        if s.trim().is_empty() {
            return Ok(Self::default());
        }
        let mut terms = Vec::new();
        for term in s.split(',') {
            let (key, equal, value) = if let Some((k, v)) = term.split_once("!=") {
                (k, false, v)
            } else if let Some((k, v)) = term.split_once("==").or_else(|| term.split_once('=')) {
                (k, true, v)
            } else {
                return Err(SelectorError(format!(
                    "invalid selector: '{term}'; can't understand '{term}'"
                )));
            };
            let field = match key.trim() {
                "metadata.name" => Field::Name,
                "metadata.namespace" => Field::Namespace,
                other => return Err(SelectorError(format!("field label not supported: {other}"))),
            };
            terms.push((field, equal, value.trim().to_string()));
        }
        Ok(Self(terms))
    }

    pub fn matches(&self, obj: &Value) -> bool {
        self.0.iter().all(|(field, equal, value)| {
            let have = match field {
                Field::Name => obj["metadata"]["name"].as_str().unwrap_or(""),
                Field::Namespace => obj["metadata"]["namespace"].as_str().unwrap_or(""),
            };
            (have == value) == *equal
        })
    }
}

/// Both selectors of a list or watch.
#[derive(Debug, Clone, Default)]
pub(crate) struct Selectors {
    pub labels: LabelSelector,
    pub fields: FieldSelector,
}

impl Selectors {
    pub fn matches(&self, obj: &Value) -> bool {
        self.labels.matches(obj) && self.fields.matches(obj)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn obj(labels: Value) -> Value {
        json!({"metadata": {"name": "a", "namespace": "ns", "labels": labels}})
    }

    #[test]
    fn label_selectors() {
        let o = obj(json!({"app": "web", "tier": "front"}));
        let yes = [
            "app=web",
            "app==web",
            "app!=db",
            "app in (web, db)",
            "tier notin (back)",
            "app",
            "!missing",
            "app=web,tier",
        ];
        for s in yes {
            assert!(LabelSelector::parse(s).unwrap().matches(&o), "{s}");
        }
        let no = [
            "app=db",
            "app!=web",
            "app in (db)",
            "tier notin (front,back)",
            "missing",
            "!app",
            "app=web,tier=back",
        ];
        for s in no {
            assert!(!LabelSelector::parse(s).unwrap().matches(&o), "{s}");
        }
        assert!(LabelSelector::parse("missing!=x").unwrap().matches(&o));
        for bad in ["app in web", "app=(", "app>1", "-x=y", "a in ()"] {
            assert!(LabelSelector::parse(bad).is_err(), "{bad}");
        }
    }

    #[test]
    fn field_selectors() {
        let o = obj(json!({}));
        assert!(
            FieldSelector::parse("metadata.name=a,metadata.namespace==ns")
                .unwrap()
                .matches(&o)
        );
        assert!(
            !FieldSelector::parse("metadata.name!=a")
                .unwrap()
                .matches(&o)
        );
        assert_eq!(
            FieldSelector::parse("spec.nodeName=x").unwrap_err().0,
            "field label not supported: spec.nodeName"
        );
    }
}
