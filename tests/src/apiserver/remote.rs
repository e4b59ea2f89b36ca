//! A typed client for `/_admin/`, for processes that only know the server's URL (benchmarks
//! driving an `apiserver` child process, xtask, the demo).
//!
//! It goes through `kube::Client::request_text`, so it shares the transport the agents use and
//! needs no extra HTTP client; admin requests are neither counted nor subject to faults.

use axum::http::Request;
use serde::de::DeserializeOwned;
use serde_json::{Value, json};

use super::{ApiServerError, Counts, Fault, WatchInfo, kubeconfig_yaml};

/// The admin API of a server at some URL.
#[derive(Clone)]
pub struct RemoteAdmin {
    client: kube::Client,
}

fn admin_err(e: impl std::fmt::Display) -> ApiServerError {
    ApiServerError::Admin(e.to_string())
}

impl RemoteAdmin {
    /// For the server at `url` (`http://127.0.0.1:PORT`).
    pub async fn new(url: &str) -> Result<Self, ApiServerError> {
        let kubeconfig = kube::config::Kubeconfig::from_yaml(&kubeconfig_yaml(url, &["admin"]))
            .map_err(|e| ApiServerError::Client(e.to_string()))?;
        let mut config = kube::Config::from_custom_kubeconfig(
            kubeconfig,
            &kube::config::KubeConfigOptions::default(),
        )
        .await
        .map_err(|e| ApiServerError::Client(e.to_string()))?;
        config.default_retry = false;
        let client =
            kube::Client::try_from(config).map_err(|e| ApiServerError::Client(e.to_string()))?;
        Ok(Self { client })
    }

    async fn call<T: DeserializeOwned>(
        &self,
        method: &str,
        path: &str,
        body: Option<Value>,
    ) -> Result<T, ApiServerError> {
        let body = body
            .map(|b| serde_json::to_vec(&b))
            .transpose()
            .map_err(admin_err)?
            .unwrap_or_default();
        let request = Request::builder()
            .method(method)
            .uri(format!("/_admin/{path}"))
            .header("Content-Type", "application/json")
            .body(body)
            .map_err(admin_err)?;
        let text = self.client.request_text(request).await.map_err(admin_err)?;
        serde_json::from_str(&text).map_err(admin_err)
    }

    pub async fn counts(&self) -> Result<Counts, ApiServerError> {
        self.call("GET", "counts", None).await
    }

    pub async fn reset_counts(&self) -> Result<(), ApiServerError> {
        self.call::<Value>("POST", "counts/reset", None)
            .await
            .map(drop)
    }

    pub async fn faults(&self) -> Result<Vec<Fault>, ApiServerError> {
        self.call("GET", "faults", None).await
    }

    /// Replace the active faults.
    pub async fn set_faults(&self, faults: &[Fault]) -> Result<(), ApiServerError> {
        self.call::<Value>("PUT", "faults", Some(json!(faults)))
            .await
            .map(drop)
    }

    pub async fn add_fault(&self, fault: &Fault) -> Result<(), ApiServerError> {
        self.call::<Value>("POST", "faults", Some(json!(fault)))
            .await
            .map(drop)
    }

    pub async fn clear_faults(&self) -> Result<(), ApiServerError> {
        self.call::<Value>("DELETE", "faults", None).await.map(drop)
    }

    /// End open watches (all, or only `client`'s); returns how many ended.
    pub async fn drop_watches(&self, client: Option<&str>) -> Result<u64, ApiServerError> {
        let v: Value = self
            .call("POST", "drop_watches", Some(json!({"client": client})))
            .await?;
        Ok(v["dropped"].as_u64().unwrap_or(0))
    }

    pub async fn open_watches(&self) -> Result<Vec<WatchInfo>, ApiServerError> {
        self.call("GET", "watches", None).await
    }

    /// Discard the watch history; returns the current revision.
    pub async fn compact(&self) -> Result<u64, ApiServerError> {
        let v: Value = self.call("POST", "compact", None).await?;
        v["resourceVersion"]
            .as_str()
            .and_then(|s| s.parse().ok())
            .ok_or_else(|| admin_err("no resourceVersion"))
    }
}
