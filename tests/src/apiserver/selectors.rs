//! Label and field selectors, as parsed by `k8s.io/apimachinery/pkg/labels` and `.../fields`.
//!
//! Label selectors support the equality (`=`, `==`, `!=`) and set-based (`in`, `notin`, `key`,
//! `!key`) requirements, AND-ed by commas; the numeric `gt`/`lt` operators are rejected. Field
//! selectors support `metadata.name` and `metadata.namespace` with `=`, `==`, `!=` — the fields
//! every kind indexes; per-kind fields (e.g. `spec.nodeName`) are rejected with the same
//! "field label not supported" 400 a real server gives for unknown ones.

use serde_json::Value;

use announcer::placement::selector::LabelQuery;
pub(crate) use announcer::placement::selector::SelectorError;

/// A parsed `labelSelector` (the agent's parser, so both read selectors alike).
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub(crate) struct LabelSelector(LabelQuery);

impl LabelSelector {
    pub fn parse(s: &str) -> Result<Self, SelectorError> {
        LabelQuery::parse(s).map(Self)
    }

    pub fn matches(&self, obj: &Value) -> bool {
        let labels = &obj["metadata"]["labels"];
        self.0.matches(|k| labels[k].as_str())
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
    fn label_selectors_read_the_object_labels() {
        // The grammar is tested with the parser (announcer::placement::selector); this checks the
        // lookup in an object's `metadata.labels`, also when it has none.
        let o = obj(json!({"app": "web"}));
        assert!(LabelSelector::parse("app=web,!tier").unwrap().matches(&o));
        assert!(!LabelSelector::parse("app=db").unwrap().matches(&o));
        let bare = json!({"metadata": {"name": "a"}});
        assert!(LabelSelector::parse("!app").unwrap().matches(&bare));
        assert!(LabelSelector::parse("app in (web").is_err());
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
