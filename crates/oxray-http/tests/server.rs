//! The HTTP server over a real socket: the token on every non-public route,
//! Ray's refusal bodies, `/api/version` and the browser rules.

use oxray_http::{HttpConfig, HttpServer};
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::{TcpListener, TcpStream};

const TOKEN: &str = "0123456789abcdef";

async fn server() -> HttpServer {
    server_with(oxray_http::ConnectionLimits::default()).await
}

async fn server_with(limits: oxray_http::ConnectionLimits) -> HttpServer {
    let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
    let config = HttpConfig {
        token: TOKEN.into(),
        session_name: "session_test".into(),
        jobs: None,
        cluster: None,
        metrics_window_ms: 60_000,
        limits,
        https: None,
    };
    HttpServer::start(listener, config).unwrap()
}

/// Sends one HTTP/1.1 request; returns (status, headers, body).
async fn request(server: &HttpServer, method: &str, path: &str, headers: &[&str]) -> (u16, String, String) {
    let mut stream = TcpStream::connect(server.local_addr()).await.unwrap();
    let mut text = format!("{method} {path} HTTP/1.1\r\nHost: localhost\r\nConnection: close\r\nContent-Length: 0\r\n");
    for h in headers {
        text.push_str(h);
        text.push_str("\r\n");
    }
    text.push_str("\r\n");
    stream.write_all(text.as_bytes()).await.unwrap();
    let mut reply = String::new();
    stream.read_to_string(&mut reply).await.unwrap();
    let (head, body) = reply.split_once("\r\n\r\n").unwrap();
    let status = head.split(' ').nth(1).unwrap().parse().unwrap();
    (status, head.to_string(), body.to_string())
}

const GOOD: &str = "Authorization: Bearer 0123456789abcdef";

#[tokio::test]
async fn version_needs_the_token() {
    let server = server().await;
    let (status, _, body) = request(&server, "GET", "/api/version", &[]).await;
    assert_eq!((status, body.as_str()), (401, "Unauthorized: Missing authentication token"));
    let (status, _, body) = request(&server, "GET", "/api/version", &["Authorization: Bearer wrong"]).await;
    assert_eq!((status, body.as_str()), (403, "Forbidden: Invalid authentication token"));
    let (status, _, body) = request(&server, "GET", "/api/version", &[GOOD]).await;
    assert_eq!(status, 200);
    let version: serde_json::Value = serde_json::from_str(&body).unwrap();
    assert_eq!(version["version"], "4");
    assert_eq!(version["ray_version"], "2.60.0");
    assert_eq!(version["session_name"], "session_test");
    server.shutdown().await;
}

#[tokio::test]
async fn unknown_routes_are_refused_before_they_are_found() {
    let server = server().await;
    assert_eq!(request(&server, "GET", "/api/jobs/x", &[]).await.0, 401, "no token: nothing is revealed");
    assert_eq!(request(&server, "GET", "/no/such/route", &[GOOD]).await.0, 404);
    server.shutdown().await;
}

#[tokio::test]
async fn health_and_mode_are_public() {
    let server = server().await;
    assert_eq!(request(&server, "GET", "/api/healthz", &[]).await.2, "success");
    assert_eq!(request(&server, "GET", "/-/healthz", &[]).await.0, 200);
    let (status, _, body) = request(&server, "GET", "/api/authentication_mode", &[]).await;
    assert_eq!((status, body.as_str()), (200, r#"{"authentication_mode":"token"}"#));
    server.shutdown().await;
}

/// The `Set-Cookie` value of a reply's head.
fn set_cookie(head: &str) -> &str {
    head.lines().find_map(|l| l.split_once(':').filter(|(k, _)| k.eq_ignore_ascii_case("set-cookie"))).unwrap().1.trim()
}

#[tokio::test]
async fn a_login_cookie_carries_a_session_never_the_token() {
    let server = server().await;
    let port = server.local_addr().port();
    assert_eq!(request(&server, "POST", "/api/authenticate", &["Authorization: Bearer nope"]).await.0, 403);
    let (status, head, _) = request(&server, "POST", "/api/authenticate", &[GOOD]).await;
    assert_eq!(status, 200);
    let cookie = set_cookie(&head);
    // What another server on this host would receive with it (cookies ignore ports): no token.
    assert!(!cookie.contains(TOKEN), "{cookie}");
    let (pair, attributes) = cookie.split_once(';').unwrap();
    let (name, session) = pair.split_once('=').unwrap();
    assert_eq!(name, format!("oxray-session-{port}"));
    for attribute in ["HttpOnly", "SameSite=Strict", "Path=/"] {
        assert!(attributes.contains(attribute), "{cookie}");
    }
    assert!(!attributes.contains("Secure"), "plain HTTP: {cookie}");
    let with_session = format!("Cookie: {name}={session}");
    assert_eq!(request(&server, "GET", "/api/version", &[&with_session]).await.0, 200);
    // The token itself as a cookie (Ray's old cookie, or this one's name) lets nobody in.
    let token_cookie = format!("Cookie: ray-authentication-token={TOKEN}; {name}={TOKEN}");
    assert_eq!(request(&server, "GET", "/api/version", &[&token_cookie]).await.0, 403);
    // A second login is a second session; logging out ends only its own.
    let (_, head, _) = request(&server, "POST", "/api/authenticate", &[GOOD]).await;
    let other = set_cookie(&head).split_once(';').unwrap().0.to_string();
    assert_ne!(other, pair);
    let (status, head, _) = request(&server, "POST", "/api/logout", &[&with_session]).await;
    assert_eq!(status, 200);
    assert!(set_cookie(&head).contains("Max-Age=0"), "{head}");
    assert_eq!(request(&server, "GET", "/api/version", &[&with_session]).await.0, 403, "ended at logout");
    assert_eq!(request(&server, "GET", "/api/version", &[&format!("Cookie: {other}")]).await.0, 200);
    server.shutdown().await;
}

#[tokio::test]
async fn a_login_link_redirects_to_a_url_without_the_token() {
    let server = server().await;
    let (status, head, _) = request(&server, "GET", &format!("/?token={TOKEN}"), &[]).await;
    assert_eq!(status, 303, "{head}");
    let location = head.lines().find_map(|l| l.strip_prefix("location: ")).unwrap();
    assert_eq!(location, "/overview");
    assert!(!set_cookie(&head).contains(TOKEN));
    assert_eq!(request(&server, "GET", "/?token=wrong", &[]).await.0, 403);
    server.shutdown().await;
}

#[tokio::test]
async fn a_websocket_is_opened_only_from_this_servers_own_pages() {
    let server = server().await;
    let (_, head, _) = request(&server, "POST", "/api/authenticate", &[GOOD]).await;
    let session = format!("Cookie: {}", set_cookie(&head).split_once(';').unwrap().0);
    let upgrade = ["Connection: Upgrade", "Upgrade: websocket", "Sec-WebSocket-Version: 13"];
    let key = "Sec-WebSocket-Key: dGhlIHNhbXBsZSBub25jZQ==";
    // A page on another port of this host: same-site, so its browser sends the cookie along.
    let evil = [&session[..], "Origin: http://localhost:9999", upgrade[0], upgrade[1], upgrade[2], key];
    let (status, _, body) = request(&server, "GET", "/api/version", &evil).await;
    assert_eq!(status, 403, "{body}");
    assert!(body.contains("WebSocket"), "{body}");
    // The same handshake from the server's own origin gets past the check (to the route's own answer).
    let own = [&session[..], "Origin: http://localhost", upgrade[0], upgrade[1], upgrade[2], key];
    assert_eq!(request(&server, "GET", "/api/version", &own).await.0, 200);
    server.shutdown().await;
}

#[tokio::test]
async fn browsers_may_only_read() {
    let server = server().await;
    let browser = "User-Agent: Mozilla/5.0";
    assert_eq!(request(&server, "GET", "/api/version", &[GOOD, browser]).await.0, 200);
    for method in ["POST", "PUT", "DELETE", "PATCH"] {
        let (status, _, _) = request(&server, method, "/api/version", &[GOOD, browser]).await;
        assert_eq!(status, 405, "{method} from a browser");
    }
    assert_eq!(request(&server, "DELETE", "/api/version", &[GOOD, "Sec-Fetch-Mode: cors"]).await.0, 405);
    server.shutdown().await;
}

/// Reads until the server closes the connection (EOF or a reset); what it sent. A server that
/// never closes it fails the test after a minute instead of hanging it.
async fn until_closed(stream: &mut TcpStream) -> Vec<u8> {
    let mut got = Vec::new();
    let mut buf = [0u8; 1024];
    let read_all = async {
        loop {
            match stream.read(&mut buf).await {
                Ok(0) | Err(_) => return,
                Ok(n) => got.extend_from_slice(&buf[..n]),
            }
        }
    };
    tokio::time::timeout(std::time::Duration::from_secs(60), read_all)
        .await
        .expect("the server never closed the connection");
    got
}

#[tokio::test]
async fn a_connection_past_the_cap_is_closed_at_once_and_others_still_answer() {
    let limits = oxray_http::ConnectionLimits { max_connections: 4, ..Default::default() };
    let server = server_with(limits).await;
    let mut held = Vec::new();
    for _ in 0..4 {
        let mut stream = TcpStream::connect(server.local_addr()).await.unwrap();
        stream.write_all(b"GET /api/healthz HTTP/1.1\r\nHost: x\r\n").await.unwrap(); // never finished
        held.push(stream);
    }
    // The fifth is closed unanswered; nothing was read, no token checked.
    let mut fifth = TcpStream::connect(server.local_addr()).await.unwrap();
    let _ = fifth.write_all(b"GET /api/healthz HTTP/1.1\r\nHost: x\r\n\r\n").await;
    assert!(until_closed(&mut fifth).await.is_empty());
    drop(held.pop());
    // One place is free again once the server has seen that close: a request then answers.
    loop {
        let mut stream = TcpStream::connect(server.local_addr()).await.unwrap();
        let _ = stream.write_all(b"GET /api/healthz HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n").await;
        if !until_closed(&mut stream).await.is_empty() {
            break;
        }
        tokio::task::yield_now().await;
    }
    held.clear();
    server.shutdown().await;
}

#[tokio::test]
async fn half_sent_headers_and_idle_connections_are_closed_after_the_header_timeout() {
    let limits =
        oxray_http::ConnectionLimits { header_timeout: std::time::Duration::from_millis(300), ..Default::default() };
    let server = server_with(limits).await;
    let mut slow = TcpStream::connect(server.local_addr()).await.unwrap();
    slow.write_all(b"GET /api/healthz HTTP/1.1\r\nHost: x\r\n").await.unwrap();
    let mut idle = TcpStream::connect(server.local_addr()).await.unwrap();
    idle.write_all(b"GET /api/healthz HTTP/1.1\r\nHost: x\r\n\r\n").await.unwrap();
    // Both end, the slow one unanswered (or with a 408), the idle one after its one answer.
    let slow_got = String::from_utf8_lossy(&until_closed(&mut slow).await).to_string();
    assert!(slow_got.is_empty() || slow_got.starts_with("HTTP/1.1 408"), "{slow_got}");
    let idle_got = String::from_utf8_lossy(&until_closed(&mut idle).await).to_string();
    assert!(idle_got.starts_with("HTTP/1.1 200") && idle_got.ends_with("success"), "{idle_got}");
    server.shutdown().await;
}
