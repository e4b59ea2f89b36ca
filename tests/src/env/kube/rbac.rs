//! What a file of `deploy/` grants a ServiceAccount, rule by rule, and whether a request falls
//! within a grant: the RBAC audits (every account sends exactly what it is granted, each
//! request within its grant's scope) read the manifests through this rather than trusting a
//! list kept beside them.

use std::collections::BTreeSet;

use serde_json::Value;

use super::deploy_dir;
use crate::env::NAMESPACE;

/// (API group, resource, verb) as RBAC rules and kube-apiserver's audit log name them.
pub type Grant = (String, String, String);

/// Where a grant holds: its binding's namespace (`None`: cluster-wide) and its rule's
/// `resourceNames` (`None`: every name).
#[derive(Clone, Debug, PartialEq, Eq, PartialOrd, Ord)]
pub struct Scope {
    pub namespace: Option<String>,
    pub names: Option<Vec<String>>,
}

impl Scope {
    /// Anywhere: a ClusterRoleBinding of a rule without `resourceNames`.
    pub fn cluster() -> Scope {
        Scope {
            namespace: None,
            names: None,
        }
    }

    /// Any name in [`NAMESPACE`].
    pub fn agent_namespace() -> Scope {
        Scope {
            namespace: Some(NAMESPACE.to_owned()),
            names: None,
        }
    }

    /// Only `names`, in [`NAMESPACE`].
    pub fn named(names: &[&str]) -> Scope {
        Scope {
            namespace: Some(NAMESPACE.to_owned()),
            names: Some(names.iter().map(|n| n.to_string()).collect()),
        }
    }

    /// Whether a request in `namespace` on `name` falls within this scope.
    pub fn contains(&self, namespace: Option<&str>, name: Option<&str>) -> bool {
        self.namespace
            .as_deref()
            .is_none_or(|ns| namespace == Some(ns))
            && self
                .names
                .as_ref()
                .is_none_or(|names| name.is_some_and(|n| names.iter().any(|x| x == n)))
    }
}

/// Every YAML document in `file` (under deploy/).
pub fn documents(file: &str) -> Vec<Value> {
    let path = deploy_dir().join(file);
    let text = std::fs::read_to_string(&path).unwrap_or_else(|e| panic!("{path:?}: {e}"));
    serde_saphyr::from_multiple::<Value>(&text)
        .unwrap_or_else(|e| panic!("{path:?}: {e}"))
        .into_iter()
        .filter(|v| !v.is_null())
        .collect()
}

fn s(v: &Value) -> &str {
    v.as_str().unwrap_or_else(|| panic!("not a string: {v:?}"))
}

/// The rules `file` binds to ServiceAccount `account` (in [`NAMESPACE`]), as (group, resource,
/// verb) with the scope each is granted in.
pub fn grants(file: &str, account: &str) -> BTreeSet<(Grant, Scope)> {
    let docs = documents(file);
    let mut out = BTreeSet::new();
    for b in docs
        .iter()
        .filter(|d| d["kind"] == "RoleBinding" || d["kind"] == "ClusterRoleBinding")
    {
        let bound = b["subjects"].as_array().expect("subjects").iter().any(|x| {
            x["kind"] == "ServiceAccount" && x["name"] == account && x["namespace"] == NAMESPACE
        });
        if !bound {
            continue;
        }
        let role_kind = s(&b["roleRef"]["kind"]);
        let role = docs
            .iter()
            .find(|d| d["kind"] == role_kind && d["metadata"]["name"] == b["roleRef"]["name"])
            .expect("bound role exists");
        let namespace =
            (b["kind"] == "RoleBinding").then(|| s(&b["metadata"]["namespace"]).to_owned());
        for rule in role["rules"].as_array().expect("rules") {
            let names = rule["resourceNames"]
                .as_array()
                .map(|n| n.iter().map(|x| s(x).to_owned()).collect());
            let scope = Scope {
                namespace: namespace.clone(),
                names,
            };
            for g in rule["apiGroups"].as_array().expect("groups") {
                for r in rule["resources"].as_array().expect("resources") {
                    for v in rule["verbs"].as_array().expect("verbs") {
                        let grant = (s(g).to_owned(), s(r).to_owned(), s(v).to_owned());
                        out.insert((grant, scope.clone()));
                    }
                }
            }
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_named_scope_holds_only_its_names_in_its_namespace() {
        let named = Scope::named(&["announcer-allocator"]);
        assert!(named.contains(Some(NAMESPACE), Some("announcer-allocator")));
        assert!(!named.contains(Some(NAMESPACE), Some("announcer-node-a")));
        assert!(!named.contains(Some("default"), Some("announcer-allocator")));
        assert!(Scope::cluster().contains(Some("default"), None));
    }

    #[test]
    fn the_withdrawal_account_is_granted_its_cap_lease_by_name_only() {
        let g = grants("withdrawer.yaml", super::super::WITHDRAWAL_SERVICE_ACCOUNT);
        let lease_update = (
            "coordination.k8s.io".to_owned(),
            "leases".to_owned(),
            "update".to_owned(),
        );
        let scopes: Vec<&Scope> = g
            .iter()
            .filter(|(gr, _)| *gr == lease_update)
            .map(|(_, s)| s)
            .collect();
        assert_eq!(scopes, vec![&Scope::named(&["announcer-withdrawal"])]);
    }
}
