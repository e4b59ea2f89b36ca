//! The real kube-proxy (nftables mode) in a node namespace, with the credentials a cluster
//! gives it: kubeadm runs it as ServiceAccount `kube-system/kube-proxy`, bound to the
//! bootstrapped ClusterRole `system:node-proxier` (Services, EndpointSlices, Nodes, Events).
//! The token here is a TokenRequest of that ServiceAccount, what the kubelet projects into the
//! kube-proxy DaemonSet's Pod.
//!
//! Why a token and not a client certificate (`system:kube-proxy`): the control plane's CA key
//! never leaves its fixture, and a ServiceAccount is how kubeadm and most distributions run
//! kube-proxy; RBAC sees the same role either way.

use std::{net::IpAddr, path::Path, process::Command};

use k8s_openapi::api::{
    authentication::v1::{TokenRequest, TokenRequestSpec},
    core::v1::ServiceAccount,
    rbac::v1::ClusterRoleBinding,
};
use kube::{Api, Client, ResourceExt, api::PostParams};
use serde_json::json;

use super::{CLUSTER_CIDR, DataPathError};
use crate::{
    env::kube::{Credentials, kubeconfig_yaml},
    programs::kube_program,
};

/// The ServiceAccount kube-proxy runs as (kubeadm's).
pub const PROXY_SERVICE_ACCOUNT: &str = "kube-proxy";
/// Its namespace.
pub const PROXY_NAMESPACE: &str = "kube-system";
/// The bootstrapped ClusterRole kube-proxy needs.
pub const NODE_PROXIER_ROLE: &str = "system:node-proxier";
/// kube-proxy's health port (its default), in each node namespace.
pub const HEALTHZ_PORT: u16 = 10256;

fn created<T>(what: &str, r: Result<T, kube::Error>) -> Result<(), DataPathError> {
    match r {
        Ok(_) => Ok(()),
        Err(kube::Error::Api(e)) if e.code == 409 => Ok(()),
        Err(source) => Err(DataPathError::Api {
            what: what.to_owned(),
            source,
        }),
    }
}

/// Creates kube-proxy's ServiceAccount and its binding to [`NODE_PROXIER_ROLE`] (idempotent),
/// and returns a token of it valid for a day.
pub async fn proxy_token(client: Client) -> Result<String, DataPathError> {
    let sa: Api<ServiceAccount> = Api::namespaced(client.clone(), PROXY_NAMESPACE);
    let account: ServiceAccount = serde_json::from_value(json!({
        "metadata": {"name": PROXY_SERVICE_ACCOUNT, "namespace": PROXY_NAMESPACE},
    }))
    .expect("a valid ServiceAccount");
    created(
        "creating kube-proxy's ServiceAccount",
        sa.create(&PostParams::default(), &account).await,
    )?;
    let binding: ClusterRoleBinding = serde_json::from_value(json!({
        "metadata": {"name": "announcer-test:node-proxier"},
        "roleRef": {
            "apiGroup": "rbac.authorization.k8s.io",
            "kind": "ClusterRole",
            "name": NODE_PROXIER_ROLE,
        },
        "subjects": [{
            "kind": "ServiceAccount",
            "name": PROXY_SERVICE_ACCOUNT,
            "namespace": PROXY_NAMESPACE,
        }],
    }))
    .expect("a valid ClusterRoleBinding");
    created(
        "binding kube-proxy to system:node-proxier",
        Api::<ClusterRoleBinding>::all(client)
            .create(&PostParams::default(), &binding)
            .await,
    )?;
    let req = TokenRequest {
        spec: Some(TokenRequestSpec {
            audiences: None,
            expiration_seconds: Some(24 * 3600),
            ..Default::default()
        }),
        ..Default::default()
    };
    let resp = sa
        .create_token_request(PROXY_SERVICE_ACCOUNT, &PostParams::default(), &req)
        .await
        .map_err(|source| DataPathError::Api {
            what: format!("TokenRequest for {}", account.name_any()),
            source,
        })?;
    Ok(resp.status.and_then(|s| s.token).unwrap_or_default())
}

/// Writes kube-proxy's kubeconfig (shared by every node: one ServiceAccount, as a DaemonSet).
pub fn write_kubeconfig(
    path: &Path,
    server: &str,
    ca: &Path,
    token: String,
) -> Result<(), DataPathError> {
    std::fs::write(
        path,
        kubeconfig_yaml(server, ca, "kube-proxy", &Credentials::Token(token)),
    )?;
    Ok(())
}

/// The kube-proxy command for `node` (to spawn inside its namespace), logging to `log`.
pub fn command(
    node: &str,
    node_ip: IpAddr,
    kubeconfig: &Path,
    log: &Path,
) -> Result<Command, DataPathError> {
    let out = std::fs::OpenOptions::new()
        .create(true)
        .append(true)
        .open(log)?;
    let err = out.try_clone()?;
    let mut cmd = Command::new(kube_program("kube-proxy"));
    cmd.args([
        format!("--kubeconfig={}", kubeconfig.display()),
        "--proxy-mode=nftables".into(),
        format!("--hostname-override={node}"),
        format!("--bind-address={node_ip}"),
        format!("--cluster-cidr={CLUSTER_CIDR}"),
        // Leave the (host-wide) conntrack table size and timeouts alone, as kind does in
        // containers.
        "--conntrack-max-per-core=0".into(),
        "--conntrack-tcp-timeout-established=0".into(),
        "--conntrack-tcp-timeout-close-wait=0".into(),
        format!("--healthz-bind-address=0.0.0.0:{HEALTHZ_PORT}"),
        "--metrics-bind-address=127.0.0.1:10249".into(),
        "--v=2".into(),
    ])
    .stdin(std::process::Stdio::null())
    .stdout(out)
    .stderr(err);
    Ok(cmd)
}
