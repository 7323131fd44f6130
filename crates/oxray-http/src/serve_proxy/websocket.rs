//! WebSockets through the proxy: the replica's ASGI app accepts (or refuses) the connection in
//! `ws_open`; after the upgrade the proxy sends each client message with `ws_receive` (in order,
//! one call at a time) and forwards what the app sends, fetched with `ws_next` until the app
//! closes. A client that goes away is a `websocket.disconnect` for the app.

use super::wire::{self, ReplyBatch, WsMessage};
use super::{Failure, ServeProxy, take_slot, text};
use axum::extract::ws::{CloseFrame, Message, WebSocket, WebSocketUpgrade};
use axum::http::{HeaderName, HeaderValue, StatusCode};
use axum::response::{IntoResponse, Response};
use oxray_serve::routes::Route;
use std::sync::Arc;

/// The request id and one message, as `ws_receive` takes them.
fn inbound(request_id: &str, message: &WsMessage) -> Vec<u8> {
    let mut out = (request_id.len() as u32).to_le_bytes().to_vec();
    out.extend_from_slice(request_id.as_bytes());
    out.extend_from_slice(&message.encode());
    out
}

/// Tells the app its client is gone (`ws_receive` of a 1006 close) when dropped armed: the
/// upgrade failed, the client left, or the proxy could not reach the replica; disarmed once the
/// app ended the socket or heard the client's own close.
struct DisconnectOnDrop {
    calls: Arc<dyn super::ReplicaCalls>,
    actor: String,
    stream_id: String,
    armed: bool,
}

impl Drop for DisconnectOnDrop {
    fn drop(&mut self) {
        if self.armed {
            let message = inbound(&self.stream_id, &WsMessage::Close(1006, Vec::new()));
            self.calls.notify(&self.actor, "ws_receive", message);
        }
    }
}

pub(super) async fn open(
    proxy: &Arc<ServeProxy>,
    route: &Route,
    payload: Vec<u8>,
    request_id: &str,
    stream_id: &str,
    upgrade: WebSocketUpgrade,
) -> Response {
    let slot = match take_slot(proxy, route, None).await {
        Ok(slot) => slot,
        Err(Failure::Backpressure(status, message, _)) => return text(status, message),
        Err(Failure::Unavailable(message)) => return text(StatusCode::SERVICE_UNAVAILABLE, message),
        Err(Failure::TimedOut(_) | Failure::Internal(_)) => {
            return text(StatusCode::INTERNAL_SERVER_ERROR, "Internal Server Error".into());
        }
    };
    let calls = proxy.calls.clone();
    let actor = slot.replica.actor_id.clone();
    // Armed from the start: a client gone while the app decides is a disconnect for it too.
    let mut guard =
        DisconnectOnDrop { calls: calls.clone(), actor: actor.clone(), stream_id: stream_id.to_string(), armed: true };
    let first = match calls.call(&actor, "ws_open", payload).await.map_err(|e| e.to_string()) {
        Ok(raw) => wire::decode_reply(&raw).map_err(|e| e.to_string()),
        Err(e) => Err(e),
    };
    let batch: ReplyBatch = match first {
        Ok(batch) => batch,
        Err(why) => {
            guard.armed = false; // the replica never opened it
            tracing::warn!("Serve WebSocket {request_id} to {} failed: {why}", route.app);
            return text(StatusCode::INTERNAL_SERVER_ERROR, "Internal Server Error".into());
        }
    };
    let Some((101, headers)) = batch.start else {
        // The app closed before accepting: Ray's proxy answers 403.
        guard.armed = false;
        return (StatusCode::FORBIDDEN, "").into_response();
    };
    let protocol =
        headers.iter().find(|(k, _)| k.eq_ignore_ascii_case(b"sec-websocket-protocol")).map(|(_, v)| v.clone());
    let upgrade = match protocol.and_then(|p| String::from_utf8(p).ok()) {
        Some(p) => upgrade.protocols([p]),
        None => upgrade,
    };
    let mut response = upgrade.on_upgrade(move |socket| async move {
        pump(socket, &mut guard).await;
        drop(guard);
        drop(slot);
    });
    for (name, value) in headers {
        if let (Ok(name), Ok(value)) = (HeaderName::from_bytes(&name), HeaderValue::from_bytes(&value))
            && name.as_str() != "sec-websocket-protocol"
        {
            response.headers_mut().insert(name, value);
        }
    }
    response
}

async fn pump(mut socket: WebSocket, guard: &mut DisconnectOnDrop) {
    let (calls, actor, stream_id) = (guard.calls.clone(), guard.actor.clone(), guard.stream_id.clone());
    let next_batch = || calls.call(&actor, "ws_next", stream_id.clone().into_bytes());
    let mut next = next_batch();
    loop {
        tokio::select! {
            raw = &mut next => {
                let decoded = raw.map_err(|e| e.to_string()).and_then(|raw| wire::decode_reply(&raw).map_err(|e| e.to_string()));
                let Ok(batch) = decoded else {
                    let _ = socket.send(Message::Close(Some(CloseFrame { code: 1011, reason: "".into() }))).await;
                    return;
                };
                for chunk in batch.chunks {
                    let message = match WsMessage::decode(&chunk) {
                        Ok(WsMessage::Text(t)) => Message::Text(String::from_utf8_lossy(&t).into_owned().into()),
                        Ok(WsMessage::Binary(b)) => Message::Binary(b.into()),
                        Ok(WsMessage::Close(code, reason)) => Message::Close(Some(CloseFrame {
                            code,
                            reason: String::from_utf8_lossy(&reason).into_owned().into(),
                        })),
                        Err(_) => continue,
                    };
                    if socket.send(message).await.is_err() {
                        break;
                    }
                }
                if batch.done {
                    guard.armed = false;
                    return;
                }
                next = next_batch();
            }
            incoming = socket.recv() => {
                let message = match incoming {
                    Some(Ok(Message::Text(t))) => WsMessage::Text(t.as_bytes().to_vec()),
                    Some(Ok(Message::Binary(b))) => WsMessage::Binary(b.to_vec()),
                    Some(Ok(Message::Ping(_) | Message::Pong(_))) => continue,
                    Some(Ok(Message::Close(frame))) => WsMessage::Close(frame.map(|f| f.code).unwrap_or(1005), Vec::new()),
                    Some(Err(_)) | None => WsMessage::Close(1006, Vec::new()),
                };
                let closing = matches!(message, WsMessage::Close(..));
                // In order: the next message goes only once the replica has this one.
                let sent = calls.call(&actor, "ws_receive", inbound(&stream_id, &message)).await;
                if closing && sent.is_ok() {
                    guard.armed = false; // the app heard the close itself
                }
                if closing || sent.is_err() {
                    return; // the app hears of the close and ends; `next` dropped with it
                }
            }
        }
    }
}
