//! Unknown query parameters are refused: `GET /api/v1/flows?limt=10` answers 400 naming `limt`
//! and the parameters the route takes, instead of quietly answering another question (the
//! default limit) to a script with a typo. What each route takes is what the OpenAPI document
//! (`openapi.json`, served at `/api/v1/openapi.json`) says, so the document and the check cannot
//! drift apart; a route the document does not list is not checked.

use axum::extract::{Query, Request};
use axum::http::{Method, StatusCode};
use axum::middleware::Next;
use axum::response::{IntoResponse, Response};
use axum::Json;
use serde_json::{json, Value};
use std::sync::OnceLock;

/// One operation of the OpenAPI document: method, path template and parameter names.
struct Operation {
    method: Method,
    /// Path segments; `None` for a `{template}` segment.
    segments: Vec<Option<String>>,
    params: Vec<String>,
}

impl Operation {
    fn matches(&self, method: &Method, path: &str) -> bool {
        if self.method != method {
            return false;
        }
        let mut parts = path.trim_start_matches('/').split('/');
        for seg in &self.segments {
            match (seg, parts.next()) {
                (_, None) => return false,
                (Some(lit), Some(p)) if lit != p => return false,
                _ => {}
            }
        }
        parts.next().is_none()
    }
}

fn operations() -> &'static [Operation] {
    static OPS: OnceLock<Vec<Operation>> = OnceLock::new();
    OPS.get_or_init(|| {
        let doc: Value = serde_json::from_str(crate::OPENAPI).unwrap_or(Value::Null);
        let mut ops = Vec::new();
        for (path, item) in doc["paths"].as_object().into_iter().flatten() {
            let segments = path
                .trim_start_matches('/')
                .split('/')
                .map(|s| (!s.starts_with('{')).then(|| s.to_string()))
                .collect::<Vec<_>>();
            for (method, op) in item.as_object().into_iter().flatten() {
                let Ok(method) = method.to_uppercase().parse::<Method>() else {
                    continue;
                };
                let params = op["parameters"]
                    .as_array()
                    .into_iter()
                    .flatten()
                    .filter(|p| p["in"] == "query")
                    .filter_map(|p| p["name"].as_str().map(str::to_string))
                    .collect();
                ops.push(Operation {
                    method,
                    segments: segments.clone(),
                    params,
                });
            }
        }
        ops
    })
}

/// The middleware: 400 for a query parameter the route does not take.
pub(crate) async fn layer(req: Request, next: Next) -> Response {
    if req.uri().query().is_some_and(|q| !q.is_empty()) {
        let path = req.uri().path();
        if let Some(op) = operations()
            .iter()
            .find(|op| op.matches(req.method(), path))
        {
            let Ok(Query(pairs)) = Query::<Vec<(String, String)>>::try_from_uri(req.uri()) else {
                return bad("the query string is not valid URL encoding".into());
            };
            if let Some((unknown, _)) = pairs.iter().find(|(k, _)| !op.params.contains(k)) {
                let takes = if op.params.is_empty() {
                    "it takes none".to_string()
                } else {
                    format!("it takes {}", op.params.join(", "))
                };
                return bad(format!(
                    "unknown query parameter {unknown:?} for {} {path}: {takes}",
                    req.method()
                ));
            }
        }
    }
    next.run(req).await
}

fn bad(error: String) -> Response {
    (StatusCode::BAD_REQUEST, Json(json!({ "error": error }))).into_response()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn routes_and_their_parameters_come_from_the_openapi_document() {
        let ops = operations();
        assert!(ops.len() >= 30, "{} operations", ops.len());
        let find = |m: Method, p: &str| ops.iter().find(|o| o.matches(&m, p));
        let flows = find(Method::GET, "/api/v1/flows").unwrap();
        assert!(flows.params.iter().any(|p| p == "limit"));
        assert!(!flows.params.iter().any(|p| p == "limt"));
        // A template segment matches one segment, not several, and not none.
        assert!(find(Method::GET, "/api/v1/hosts/10.0.0.1").is_some());
        assert!(find(Method::GET, "/api/v1/hosts/10.0.0.1/x").is_none());
        assert!(find(Method::POST, "/api/v1/flows").is_none());
        // Path parameters are not query parameters.
        let host = find(Method::GET, "/api/v1/hosts/10.0.0.1").unwrap();
        assert!(!host.params.iter().any(|p| p == "ip"));
    }
}
