//! The withdrawal controller's replicas (`announcer withdrawer`) on the testbed, each in a node's
//! network namespace as the kubelet of that node would run its Pod, so that a crash of the node
//! takes its replica down too (issue 28: trials include crashing a node that runs one).

use std::fs::OpenOptions;

use k8s_openapi::api::core::v1::{Namespace, Pod};
use kube::{
    Api, Client,
    api::{ListParams, Patch, PatchParams},
};
use serde_json::json;

use super::Testbed;
use crate::{apiserver::kubeconfig_yaml, env::withdrawer_cmd::WithdrawerCommand};

/// The namespace label that opts a namespace in to fast endpoint withdrawal.
pub const OPT_IN_LABEL: &str = "announcer.dev/fast-endpoint-withdrawal";
/// The reason the withdrawer writes in a withdrawn Pod's `Ready` condition.
pub const WITHDRAWN_REASON: &str = "AnnouncerNodeUnreachable";

/// Opts namespace `ns` in to fast endpoint withdrawal ([`OPT_IN_LABEL`]`=true`), or out (the
/// label removed).
pub async fn opt_in(client: Client, ns: &str, on: bool) -> Result<(), String> {
    let value = if on { json!("true") } else { json!(null) };
    let patch = json!({"metadata": {"labels": {OPT_IN_LABEL: value}}});
    Api::<Namespace>::all(client)
        .patch(ns, &PatchParams::default(), &Patch::Merge(&patch))
        .await
        .map(|_| ())
        .map_err(|e| format!("labelling namespace {ns}: {e}"))
}

/// The Pods of `ns` whose `Ready` condition is False with [`WITHDRAWN_REASON`], as
/// `(pod, node)`.
pub async fn withdrawn_pods(client: Client, ns: &str) -> Result<Vec<(String, String)>, String> {
    let pods = Api::<Pod>::namespaced(client, ns)
        .list(&ListParams::default())
        .await
        .map_err(|e| format!("listing the Pods of {ns}: {e}"))?;
    Ok(pods
        .items
        .into_iter()
        .filter(|p| {
            p.status
                .as_ref()
                .and_then(|s| s.conditions.as_ref())
                .is_some_and(|cs| {
                    cs.iter().any(|c| {
                        c.type_ == "Ready"
                            && c.status == "False"
                            && c.reason.as_deref() == Some(WITHDRAWN_REASON)
                    })
                })
        })
        .map(|p| {
            let node = p.spec.and_then(|s| s.node_name).unwrap_or_default();
            (p.metadata.name.unwrap_or_default(), node)
        })
        .collect())
}

impl Testbed {
    /// Starts a withdrawer replica in `node`'s namespace, identity `withdrawer-<node>`. On a real
    /// control plane it runs with a token of the `announcer-withdrawal` ServiceAccount (what the
    /// admission policy in `deploy/` confines); on the in-repo server with a kubeconfig of that
    /// identity. Logs go to `<dir>/withdrawer-<node>.log` (appended across restarts). Killed by
    /// [`Self::crash`] of the node; start it again when the node returns.
    pub fn start_withdrawer(&mut self, node: &str) {
        let id = format!("withdrawer-{node}");
        let kc = self.dir.join(format!("kubeconfig.{id}"));
        match &self.kube {
            None => std::fs::write(&kc, kubeconfig_yaml(&self.agent_url, &[&id]))
                .expect("write kubeconfig"),
            Some(_) => super::peers::write_sa_kubeconfig(
                self,
                crate::env::NAMESPACE,
                crate::env::kube::WITHDRAWAL_SERVICE_ACCOUNT,
                &kc,
            ),
        }
        let log = self.dir.join(format!("{id}.log"));
        let out = OpenOptions::new()
            .create(true)
            .append(true)
            .open(&log)
            .expect("withdrawer log");
        let mut cmd = WithdrawerCommand::new(&id, &kc).command(None);
        cmd.stderr(out);
        self.spawn_in_node(node, cmd);
    }
}
