//! The bytes a proxy and a replica exchange. A request is one argument: a little-endian `u32`
//! length, the ASGI scope's fields as JSON, then the whole body. A reply is a batch of the
//! response: whether it is complete, the status and headers when the batch starts the response
//! (status 0 otherwise), and body chunks. A streamed response comes in several batches, the
//! proxy asking for the next one (`http_next`) until one is complete.

use serde::Serialize;

/// The scope fields the replica turns into an ASGI `http` scope (header names and values are
/// Latin-1 strings, as ASGI's bytes decode).
#[derive(Debug, Serialize)]
pub struct RequestMeta<'a> {
    /// "http", or "websocket" for an upgrade.
    pub kind: &'a str,
    pub method: &'a str,
    pub scheme: &'a str,
    pub path: &'a str,
    pub query_string: &'a str,
    pub root_path: &'a str,
    /// The route prefix it matched (the `route` of the replica's metrics).
    pub route: &'a str,
    pub http_version: &'a str,
    pub headers: Vec<(String, String)>,
    pub client: Option<(String, u16)>,
    pub server: Option<(String, u16)>,
    pub request_id: &'a str,
    /// The proxy's own id for the request's stream (`http_next`, `http_cancel`, `ws_*`).
    pub stream_id: &'a str,
}

/// Bytes as Latin-1 text: each byte one char, so the replica gets the exact bytes back.
pub fn latin1(bytes: &[u8]) -> String {
    bytes.iter().map(|&b| b as char).collect()
}

pub fn encode_request(meta: &RequestMeta<'_>, body: &[u8]) -> Vec<u8> {
    let json = serde_json::to_vec(meta).expect("request metadata is plain strings and numbers");
    let mut out = Vec::with_capacity(4 + json.len() + body.len());
    out.extend_from_slice(&(json.len() as u32).to_le_bytes());
    out.extend_from_slice(&json);
    out.extend_from_slice(body);
    out
}

/// A response's status and headers (names and values as bytes).
pub type ResponseStart = (u16, Vec<(Vec<u8>, Vec<u8>)>);

/// One batch of a response.
#[derive(Debug, Default, PartialEq)]
pub struct ReplyBatch {
    pub done: bool,
    /// Status and headers, when this batch starts the response.
    pub start: Option<ResponseStart>,
    pub chunks: Vec<Vec<u8>>,
}

#[derive(Debug, thiserror::Error, PartialEq)]
#[error("a replica's reply is malformed ({0}); the replica and the proxy are from different oxray versions?")]
pub struct MalformedReply(&'static str);

struct Reader<'a>(&'a [u8]);

impl<'a> Reader<'a> {
    fn take(&mut self, n: usize, what: &'static str) -> Result<&'a [u8], MalformedReply> {
        if self.0.len() < n {
            return Err(MalformedReply(what));
        }
        let (head, rest) = self.0.split_at(n);
        self.0 = rest;
        Ok(head)
    }
    fn u32(&mut self, what: &'static str) -> Result<u32, MalformedReply> {
        Ok(u32::from_le_bytes(self.take(4, what)?.try_into().expect("4 bytes")))
    }
    fn bytes(&mut self, what: &'static str) -> Result<Vec<u8>, MalformedReply> {
        let n = self.u32(what)? as usize;
        Ok(self.take(n, what)?.to_vec())
    }
}

pub fn decode_reply(raw: &[u8]) -> Result<ReplyBatch, MalformedReply> {
    let mut r = Reader(raw);
    let done = r.take(1, "done flag")?[0] != 0;
    let status = u16::from_le_bytes(r.take(2, "status")?.try_into().expect("2 bytes"));
    let mut start = None;
    if status != 0 {
        let n = r.u32("header count")? as usize;
        let mut headers = Vec::with_capacity(n.min(256));
        for _ in 0..n {
            headers.push((r.bytes("header name")?, r.bytes("header value")?));
        }
        start = Some((status, headers));
    }
    let n = r.u32("chunk count")? as usize;
    let mut chunks = Vec::with_capacity(n.min(256));
    for _ in 0..n {
        chunks.push(r.bytes("body chunk")?);
    }
    if !r.0.is_empty() {
        return Err(MalformedReply("bytes after the last chunk"));
    }
    Ok(ReplyBatch { done, start, chunks })
}

/// A WebSocket message between the proxy and the replica: a kind byte (0 text, 1 binary, 2 close
/// with a little-endian `u16` code first), then its bytes.
#[derive(Debug, PartialEq)]
pub enum WsMessage {
    Text(Vec<u8>),
    Binary(Vec<u8>),
    Close(u16, Vec<u8>),
}

impl WsMessage {
    pub fn encode(&self) -> Vec<u8> {
        match self {
            WsMessage::Text(data) => [&[0u8][..], data].concat(),
            WsMessage::Binary(data) => [&[1u8][..], data].concat(),
            WsMessage::Close(code, reason) => [&[2u8][..], &code.to_le_bytes(), reason].concat(),
        }
    }

    pub fn decode(raw: &[u8]) -> Result<Self, MalformedReply> {
        match raw.split_first() {
            Some((0, data)) => Ok(WsMessage::Text(data.to_vec())),
            Some((1, data)) => Ok(WsMessage::Binary(data.to_vec())),
            Some((2, rest)) if rest.len() >= 2 => {
                Ok(WsMessage::Close(u16::from_le_bytes([rest[0], rest[1]]), rest[2..].to_vec()))
            }
            _ => Err(MalformedReply("a WebSocket message")),
        }
    }
}

#[cfg(test)]
pub(crate) fn encode_reply(batch: &ReplyBatch) -> Vec<u8> {
    let mut out = vec![batch.done as u8];
    match &batch.start {
        Some((status, headers)) => {
            out.extend_from_slice(&status.to_le_bytes());
            out.extend_from_slice(&(headers.len() as u32).to_le_bytes());
            for (name, value) in headers {
                for part in [name, value] {
                    out.extend_from_slice(&(part.len() as u32).to_le_bytes());
                    out.extend_from_slice(part);
                }
            }
        }
        None => out.extend_from_slice(&0u16.to_le_bytes()),
    }
    out.extend_from_slice(&(batch.chunks.len() as u32).to_le_bytes());
    for chunk in &batch.chunks {
        out.extend_from_slice(&(chunk.len() as u32).to_le_bytes());
        out.extend_from_slice(chunk);
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_reply_round_trips_and_a_truncated_one_is_refused() {
        let batch = ReplyBatch {
            done: true,
            start: Some((418, vec![(b"x-custom".to_vec(), b"1".to_vec())])),
            chunks: vec![b"tea".to_vec(), b"pot".to_vec()],
        };
        let raw = encode_reply(&batch);
        assert_eq!(decode_reply(&raw).unwrap(), batch);
        assert_eq!(decode_reply(&raw[..raw.len() - 1]).unwrap_err(), MalformedReply("body chunk"));
        let continued = ReplyBatch { done: false, start: None, chunks: vec![b"more".to_vec()] };
        assert_eq!(decode_reply(&encode_reply(&continued)).unwrap(), continued);
    }

    #[test]
    fn websocket_messages_round_trip_and_a_short_close_is_refused() {
        for message in
            [WsMessage::Text(b"hi".to_vec()), WsMessage::Binary(vec![0, 255]), WsMessage::Close(1000, b"bye".to_vec())]
        {
            assert_eq!(WsMessage::decode(&message.encode()).unwrap(), message);
        }
        assert!(WsMessage::decode(&[2, 1]).is_err());
        assert!(WsMessage::decode(&[]).is_err());
    }

    #[test]
    fn header_bytes_survive_as_latin1() {
        let raw: Vec<u8> = (0u8..=255).collect();
        let text = latin1(&raw);
        assert_eq!(text.chars().map(|c| c as u32 as u8).collect::<Vec<_>>(), raw);
    }
}
