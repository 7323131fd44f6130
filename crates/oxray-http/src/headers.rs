//! Headers on every response: `X-Content-Type-Options: nosniff`, so a browser never runs a
//! log or a JSON reply as a script or a stylesheet whatever it holds, and, on every page, a
//! Content-Security-Policy under which scripts load only from this server's `/static/` files
//! (not from any other route of it, such as a log a job wrote).

use axum::extract::Request;
use axum::http::{HeaderValue, header};
use axum::middleware::Next;
use axum::response::Response;

/// The policy of a page served as `host` (the request's `Host`).
fn page_policy(host: Option<&str>) -> String {
    // A host made of anything else gets no script source at all, rather than a policy it could bend.
    let host = host.filter(|h| !h.is_empty() && h.bytes().all(|b| b.is_ascii_alphanumeric() || b".-:[]".contains(&b)));
    let scripts = match host {
        Some(host) => format!("http://{host}/static/ https://{host}/static/"),
        None => "'none'".to_string(),
    };
    format!(
        "default-src 'self'; script-src {scripts}; style-src 'self' 'unsafe-inline'; img-src 'self' data:; \
         object-src 'none'; base-uri 'none'; frame-ancestors 'none'"
    )
}

pub(crate) async fn add_security_headers(request: Request, next: Next) -> Response {
    let host = request.headers().get(header::HOST).and_then(|v| v.to_str().ok()).map(str::to_string);
    let mut response = next.run(request).await;
    let headers = response.headers_mut();
    headers.insert(header::X_CONTENT_TYPE_OPTIONS, HeaderValue::from_static("nosniff"));
    let is_page =
        headers.get(header::CONTENT_TYPE).and_then(|v| v.to_str().ok()).is_some_and(|t| t.starts_with("text/html"));
    if is_page
        && !headers.contains_key(header::CONTENT_SECURITY_POLICY)
        && let Ok(policy) = HeaderValue::from_str(&page_policy(host.as_deref()))
    {
        headers.insert(header::CONTENT_SECURITY_POLICY, policy);
    }
    response
}

#[cfg(test)]
mod tests {
    use super::page_policy;

    #[test]
    fn scripts_come_from_the_static_files_of_the_host_asked() {
        let policy = page_policy(Some("127.0.0.1:8265"));
        assert!(policy.contains("script-src http://127.0.0.1:8265/static/ https://127.0.0.1:8265/static/;"));
        assert!(policy.contains("frame-ancestors 'none'"));
        for odd in [None, Some(""), Some("evil; script-src *"), Some("a b")] {
            assert!(page_policy(odd).contains("script-src 'none';"), "{odd:?}");
        }
    }
}
