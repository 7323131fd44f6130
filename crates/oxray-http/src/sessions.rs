//! Browser sessions. A login (`POST /api/authenticate` with the token, or a `/?token=` link)
//! trades the cluster token for a random session id: the cookie carries that id, never the
//! token, so a cookie the browser also sends to another server on the same host (cookies are
//! not bound to a port) gives that server nothing it can use anywhere else. Sessions live on
//! the head, end after `IDLE` without a request or `LIFETIME` after the login, and at logout.

use base64::Engine;
use rand::Rng;
use std::collections::HashMap;
use std::sync::Mutex;
use std::time::{Duration, Instant};

/// A session unused this long ends.
pub(crate) const IDLE: Duration = Duration::from_secs(12 * 3600);
/// A session ends this long after its login, used or not.
pub(crate) const LIFETIME: Duration = Duration::from_secs(7 * 24 * 3600);
/// The most sessions kept at once; a login past it ends the oldest.
const MAX_SESSIONS: usize = 10_000;

struct Session {
    started: Instant,
    last_used: Instant,
}

/// The live sessions of one HTTP server, and its cookie's name and attributes.
pub(crate) struct Sessions {
    live: Mutex<HashMap<String, Session>>,
    cookie_name: String,
    secure: bool,
    idle: Duration,
    lifetime: Duration,
}

impl Sessions {
    /// Sessions for the server on `port`; `secure` when it speaks HTTPS (the cookie is then
    /// sent over HTTPS only).
    pub(crate) fn new(port: u16, secure: bool) -> Self {
        Self::with_limits(port, secure, IDLE, LIFETIME)
    }

    pub(crate) fn with_limits(port: u16, secure: bool, idle: Duration, lifetime: Duration) -> Self {
        Sessions {
            live: Mutex::new(HashMap::new()),
            // The port in the name: two clusters on one host keep their own sessions.
            cookie_name: format!("oxray-session-{port}"),
            secure,
            idle,
            lifetime,
        }
    }

    /// Starts a session and returns its id (256 random bits).
    pub(crate) fn start(&self) -> String {
        let id = base64::engine::general_purpose::URL_SAFE_NO_PAD.encode(rand::rng().random::<[u8; 32]>());
        let now = Instant::now();
        let mut live = self.lock();
        live.retain(|_, s| self.is_current(s, now));
        if live.len() >= MAX_SESSIONS
            && let Some(oldest) = live.iter().min_by_key(|(_, s)| s.started).map(|(id, _)| id.clone())
        {
            live.remove(&oldest);
        }
        live.insert(id.clone(), Session { started: now, last_used: now });
        id
    }

    /// Whether `id` is a live session; using it keeps it from idling out.
    pub(crate) fn touch(&self, id: &str) -> bool {
        let now = Instant::now();
        let mut live = self.lock();
        match live.get_mut(id) {
            Some(session) if self.is_current(session, now) => {
                session.last_used = now;
                true
            }
            Some(_) => {
                live.remove(id);
                false
            }
            None => false,
        }
    }

    /// Ends session `id` (a logout).
    pub(crate) fn end(&self, id: &str) {
        self.lock().remove(id);
    }

    /// The session id a request's cookies carry for this server, if any.
    pub(crate) fn id_in<'a>(&self, cookie_headers: impl Iterator<Item = &'a str>) -> Option<&'a str> {
        cookie_headers
            .flat_map(|cookies| cookies.split(';'))
            .filter_map(|pair| pair.trim().split_once('='))
            .find(|(name, _)| *name == self.cookie_name)
            .map(|(_, value)| value)
    }

    /// The `Set-Cookie` value that gives a browser session `id`.
    pub(crate) fn cookie(&self, id: &str) -> String {
        let secure = if self.secure { "; Secure" } else { "" };
        format!(
            "{}={id}; Max-Age={}; Path=/; HttpOnly; SameSite=Strict{secure}",
            self.cookie_name,
            self.lifetime.as_secs()
        )
    }

    /// The `Set-Cookie` value that removes the session cookie (a logout).
    pub(crate) fn removal_cookie(&self) -> String {
        let secure = if self.secure { "; Secure" } else { "" };
        format!("{}=; Max-Age=0; Path=/; HttpOnly; SameSite=Strict{secure}", self.cookie_name)
    }

    fn is_current(&self, session: &Session, now: Instant) -> bool {
        now.duration_since(session.last_used) < self.idle && now.duration_since(session.started) < self.lifetime
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, HashMap<String, Session>> {
        // A panic while holding it leaves the map whole (every change is one call on it).
        self.live.lock().unwrap_or_else(std::sync::PoisonError::into_inner)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_session_id_is_random_and_not_the_token() {
        let sessions = Sessions::new(8265, false);
        let (a, b) = (sessions.start(), sessions.start());
        assert_ne!(a, b);
        assert_eq!(a.len(), 43, "{a}");
        assert!(sessions.touch(&a) && sessions.touch(&b));
        assert!(!sessions.touch("made-up"));
    }

    #[test]
    fn the_cookie_names_the_port_and_is_script_proof() {
        let plain = Sessions::new(8265, false).cookie("id");
        assert_eq!(plain, "oxray-session-8265=id; Max-Age=604800; Path=/; HttpOnly; SameSite=Strict");
        assert!(Sessions::new(443, true).cookie("id").ends_with("; Secure"));
        assert!(Sessions::new(8265, false).removal_cookie().contains("Max-Age=0"));
    }

    #[test]
    fn sessions_end_when_idle_too_long_past_their_lifetime_or_at_logout() {
        let idle = Sessions::with_limits(1, false, Duration::ZERO, LIFETIME);
        let id = idle.start();
        assert!(!idle.touch(&id), "an idle limit of zero ends it at once");
        let old = Sessions::with_limits(1, false, IDLE, Duration::ZERO);
        assert!(!old.touch(&old.start()), "a lifetime of zero ends it at once");
        let sessions = Sessions::new(1, false);
        let id = sessions.start();
        sessions.end(&id);
        assert!(!sessions.touch(&id));
    }

    #[test]
    fn the_id_is_read_from_this_servers_cookie_only() {
        let sessions = Sessions::new(8265, false);
        let headers = ["a=1; oxray-session-9999=other", "oxray-session-8265=mine; b=2"];
        assert_eq!(sessions.id_in(headers.into_iter()), Some("mine"));
        assert_eq!(sessions.id_in(["oxray-session-9999=other"].into_iter()), None);
    }
}
