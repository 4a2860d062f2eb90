//! Who may do what over HTTP: `-read-token` guards every read of the ui (the API and the status page's data),
//! `-write-token` guards writes and grants reads too, `-metrics-token` guards `/metrics` and `/healthz`.
//! The status page's own files (`/` and `/assets/*`) stay open: they are the same for everyone, in the
//! binary, and hold no data; a browser cannot send a bearer token when it navigates, so the page asks for the
//! token and sends it with every read it makes (`ui/page/page.js`).
//! A token is a bearer token (`Authorization: Bearer <token>`), compared in constant time; a wrong or missing
//! one answers 401 with `WWW-Authenticate: Bearer`, counted in `jaque_http_unauthorized_total`.

use axum::extract::{Request, State};
use axum::http::{HeaderMap, Method, StatusCode};
use axum::middleware::Next;
use axum::response::{IntoResponse, Response};
use axum::Json;
use serde_json::json;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use subtle::ConstantTimeEq;

/// The HTTP API's tokens (each `None`: that part is open).
#[derive(Clone, Debug, Default)]
pub struct Tokens {
    pub read: Option<String>,
    pub write: Option<String>,
    pub metrics: Option<String>,
}

static UNAUTHORIZED: AtomicU64 = AtomicU64::new(0);

/// Requests refused for a wrong or missing token, process-wide.
pub fn unauthorized_total() -> u64 {
    UNAUTHORIZED.load(Ordering::Relaxed)
}

/// The bearer token a request carries.
fn bearer(headers: &HeaderMap) -> Option<&[u8]> {
    let value = headers.get("authorization")?.as_bytes();
    value.strip_prefix(b"Bearer ")
}

/// Whether `given` is one of `tokens`, in time that does not depend on where they differ (`subtle`). The
/// lengths are not secret: a token's length tells an attacker nothing a guess would not.
fn matches(given: Option<&[u8]>, tokens: &[Option<&str>]) -> bool {
    let Some(given) = given else { return false };
    let mut ok = false;
    for token in tokens.iter().flatten() {
        ok |= bool::from(given.ct_eq(token.as_bytes()));
    }
    ok
}

fn refuse(what: &str) -> Response {
    UNAUTHORIZED.fetch_add(1, Ordering::Relaxed);
    (StatusCode::UNAUTHORIZED, [("www-authenticate", "Bearer")], Json(json!({ "error": what }))).into_response()
}

/// A write's check: `None` when it may go on.
pub fn write_denied(write_token: Option<&str>, headers: &HeaderMap) -> Option<Response> {
    let token = write_token?;
    (!matches(bearer(headers), &[Some(token)]))
        .then(|| refuse("writes need Authorization: Bearer <token> (the -write-token)"))
}

/// The status page's files: the same bytes for everyone, no data in them.
pub fn page_file(path: &str) -> bool {
    path == "/" || path.starts_with("/assets/")
}

/// What `-metrics-token` guards (a scraper's and a probe's paths).
pub fn metrics_path(path: &str) -> bool {
    path == "/metrics" || path == "/healthz"
}

/// The middleware in front of every route. Writes are checked by their handler (`write_denied`), after
/// the body is known to be a write, so that a 401 comes before a 503 or a 400 there too.
pub async fn guard(State(tokens): State<Arc<Tokens>>, request: Request, next: Next) -> Response {
    let path = request.uri().path();
    let read = matches!(*request.method(), Method::GET | Method::HEAD);
    if metrics_path(path) {
        if let Some(token) = &tokens.metrics {
            if !matches(bearer(request.headers()), &[Some(token)]) {
                return refuse("this endpoint needs Authorization: Bearer <token> (the -metrics-token)");
            }
        }
    } else if read && !page_file(path) {
        if let Some(token) = &tokens.read {
            if !matches(bearer(request.headers()), &[Some(token), tokens.write.as_deref()]) {
                return refuse("reads need Authorization: Bearer <token> (the -read-token, or the -write-token)");
            }
        }
    }
    next.run(request).await
}

#[cfg(test)]
mod tests {
    use super::*;

    fn headers(auth: &str) -> HeaderMap {
        let mut h = HeaderMap::new();
        h.insert("authorization", auth.parse().unwrap());
        h
    }

    #[test]
    fn a_token_matches_only_itself_whole() {
        assert!(matches(Some(b"s3cret"), &[Some("s3cret")]));
        for wrong in [&b"s3cre"[..], b"s3cret!", b"S3cret", b""] {
            assert!(!matches(Some(wrong), &[Some("s3cret")]), "{wrong:?}");
        }
        assert!(!matches(None, &[Some("s3cret")]));
        assert!(matches(Some(b"w"), &[Some("r"), Some("w")]), "either of two");
        assert!(!matches(Some(b"x"), &[None, None]), "no token configured matches nothing");
    }

    #[test]
    fn only_the_page_files_are_open_to_reads_without_the_read_token() {
        for open in ["/", "/assets/page.js", "/assets/page.css"] {
            assert!(page_file(open), "{open}");
        }
        for guarded in ["/api/objects", "/api/stream", "/api/summary", "/api/openapi.json", "/index.html", "/api"] {
            assert!(!page_file(guarded), "{guarded}");
        }
    }

    #[test]
    fn writes_need_the_bearer_scheme_and_the_token() {
        assert!(write_denied(None, &HeaderMap::new()).is_none(), "no -write-token: open");
        assert!(write_denied(Some("t"), &headers("Bearer t")).is_none());
        for bad in ["Bearer u", "bearer t", "Basic t", "t", "Bearer  t"] {
            let r = write_denied(Some("t"), &headers(bad)).expect(bad);
            assert_eq!(r.status(), StatusCode::UNAUTHORIZED);
            assert_eq!(r.headers()["www-authenticate"], "Bearer");
        }
    }
}
