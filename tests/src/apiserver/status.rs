//! `metav1.Status` failures, the only error shape a Kubernetes client understands.
//!
//! kube-apiserver answers every failed request with a JSON `Status` object and the matching HTTP
//! code; `kube` parses that body into `kube::Error::Api(Status)`, and callers branch on
//! `code`/`reason` (409 `Conflict` → re-read and retry, 404 `NotFound`, 410 `Expired` → re-list).
//! The messages copy kube-apiserver's wording (`k8s.io/apimachinery/pkg/api/errors`) so logs read
//! the same as against a real cluster.

use axum::http::StatusCode;
use axum::response::{IntoResponse, Response};
use serde_json::{Value, json};

use super::resources::ResourceType;
use super::validate::Cause;

/// A failed API request: becomes a `Status` body with `code` as the HTTP status.
#[derive(Debug, Clone)]
pub(crate) struct ApiError {
    pub code: u16,
    pub reason: &'static str,
    pub message: String,
    pub details: Option<Value>,
}

impl ApiError {
    pub fn new(code: u16, reason: &'static str, message: impl Into<String>) -> Self {
        Self {
            code,
            reason,
            message: message.into(),
            details: None,
        }
    }

    fn with_details(mut self, details: Value) -> Self {
        self.details = Some(details);
        self
    }

    /// `leases.coordination.k8s.io "x" not found` (`NewNotFound`).
    pub fn not_found(res: &ResourceType, name: &str) -> Self {
        Self::new(
            404,
            "NotFound",
            format!("{} \"{name}\" not found", res.qualified()),
        )
        .with_details(json!({"name": name, "group": res.group, "kind": res.plural}))
    }

    /// `NewAlreadyExists`.
    pub fn already_exists(res: &ResourceType, name: &str) -> Self {
        Self::new(
            409,
            "AlreadyExists",
            format!("{} \"{name}\" already exists", res.qualified()),
        )
        .with_details(json!({"name": name, "group": res.group, "kind": res.plural}))
    }

    /// `NewConflict` with the optimistic-concurrency message of the registry store.
    pub fn conflict(res: &ResourceType, name: &str, why: &str) -> Self {
        Self::new(
            409,
            "Conflict",
            format!(
                "Operation cannot be fulfilled on {} \"{name}\": {why}",
                res.qualified()
            ),
        )
        .with_details(json!({"name": name, "group": res.group, "kind": res.plural}))
    }

    /// The stale-`resourceVersion` conflict (`registry.OptimisticLockErrorMsg`).
    pub fn stale(res: &ResourceType, name: &str) -> Self {
        Self::conflict(
            res,
            name,
            "the object has been modified; please apply your changes to the latest version and try again",
        )
    }

    /// `NewInvalid`: semantic validation failed (HTTP 422).
    pub fn invalid(res: &ResourceType, name: &str, causes: Vec<Cause>) -> Self {
        let summary: Vec<String> = causes
            .iter()
            .map(|c| format!("{}: {}", c.field, c.message))
            .collect();
        let body = if summary.len() == 1 {
            summary[0].clone()
        } else {
            format!("[{}]", summary.join(", "))
        };
        let causes: Vec<Value> = causes
            .iter()
            .map(|c| json!({"reason": c.reason, "message": c.message, "field": c.field}))
            .collect();
        Self::new(
            422,
            "Invalid",
            format!("{} \"{name}\" is invalid: {body}", res.kind_qualified()),
        )
        .with_details(json!({"name": name, "group": res.group, "kind": res.kind, "causes": causes}))
    }

    pub fn bad_request(message: impl Into<String>) -> Self {
        Self::new(400, "BadRequest", message)
    }

    pub fn internal(message: impl Into<String>) -> Self {
        Self::new(500, "InternalError", message)
    }

    /// The route exists in no API group we serve.
    pub fn no_route() -> Self {
        Self::new(
            404,
            "NotFound",
            "the server could not find the requested resource",
        )
    }

    pub fn method_not_allowed(method: &str) -> Self {
        Self::new(
            405,
            "MethodNotAllowed",
            format!("the server does not allow this method on the requested resource ({method})"),
        )
    }

    /// The watch-cache answer for a `resourceVersion` older than the retained history.
    pub fn expired(requested: u64, oldest: u64) -> Self {
        Self::new(
            410,
            "Expired",
            format!("too old resource version: {requested} ({oldest})"),
        )
    }

    /// The `reason` kube-apiserver uses for a bare HTTP code (`StatusReason` constants).
    pub fn reason_for_code(code: u16) -> &'static str {
        match code {
            400 => "BadRequest",
            401 => "Unauthorized",
            403 => "Forbidden",
            404 => "NotFound",
            405 => "MethodNotAllowed",
            409 => "Conflict",
            410 => "Expired",
            415 => "UnsupportedMediaType",
            422 => "Invalid",
            429 => "TooManyRequests",
            500 => "InternalError",
            503 => "ServiceUnavailable",
            504 => "Timeout",
            _ => "Unknown",
        }
    }

    /// The `Status` object itself (also the `object` of a watch `ERROR` event).
    pub fn to_status(&self) -> Value {
        let mut status = json!({
            "kind": "Status",
            "apiVersion": "v1",
            "metadata": {},
            "status": "Failure",
            "message": self.message,
            "reason": self.reason,
            "code": self.code,
        });
        if let Some(details) = &self.details {
            status["details"] = details.clone();
        }
        status
    }
}

impl IntoResponse for ApiError {
    fn into_response(self) -> Response {
        let code = StatusCode::from_u16(self.code).unwrap_or(StatusCode::INTERNAL_SERVER_ERROR);
        json_response(code, &self.to_status())
    }
}

/// A JSON body with `Content-Type: application/json`.
pub(crate) fn json_response(code: StatusCode, body: &Value) -> Response {
    let bytes = serde_json::to_vec(body).unwrap_or_default();
    (
        code,
        [(axum::http::header::CONTENT_TYPE, "application/json")],
        bytes,
    )
        .into_response()
}

/// The `Status` a successful delete returns (`status: Success`, `details.kind` = plural).
pub(crate) fn delete_success(res: &ResourceType, name: &str, uid: &Value) -> Value {
    json!({
        "kind": "Status",
        "apiVersion": "v1",
        "metadata": {},
        "status": "Success",
        "details": {"name": name, "group": res.group, "kind": res.plural, "uid": uid},
    })
}
