//! The console's sessions, held server-side: a random token in an `HttpOnly` cookie names one,
//! and only the token's SHA-256 is kept, with the session's CSRF token, its expiry and the
//! fingerprint of the credentials it was opened with.

use std::collections::HashMap;
use std::time::{Duration, Instant};

use base64::Engine;
use rand::RngCore;
use sha2::{Digest, Sha256};

use crate::auth::Credentials;
use crate::sync::LockExt;

/// What identifies the credentials a session was opened with; when they change (a rotation),
/// every session opened with the old ones ends.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Fingerprint([u8; 32]);

impl Fingerprint {
    pub fn of(credentials: &Credentials) -> Self {
        let mut hash = Sha256::new();
        hash.update(b"kiln console credentials v1\n");
        hash.update(credentials.access_key_id.as_bytes());
        hash.update(b"\n");
        hash.update(credentials.secret_access_key.as_bytes());
        Self(hash.finalize().into())
    }
}

/// A session just opened: the cookie's token goes to the browser once and is never kept.
#[derive(Debug, Clone)]
pub struct Opened {
    pub token: String,
    pub session: SessionView,
}

/// What a request learns of its session.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SessionView {
    pub csrf_token: String,
    /// Unix seconds.
    pub expires_at: i64,
}

struct Session {
    view: SessionView,
    expires: Instant,
    credentials: Fingerprint,
}

/// Open sessions by the SHA-256 of their token.
pub struct Sessions {
    ttl: Duration,
    open: std::sync::Mutex<HashMap<[u8; 32], Session>>,
}

fn random_token() -> String {
    let mut bytes = [0u8; 32];
    rand::rngs::OsRng.fill_bytes(&mut bytes);
    base64::engine::general_purpose::URL_SAFE_NO_PAD.encode(bytes)
}

fn key(token: &str) -> [u8; 32] {
    Sha256::digest(token.as_bytes()).into()
}

impl Sessions {
    pub fn new(ttl: Duration) -> Self {
        Self {
            ttl,
            open: Default::default(),
        }
    }

    pub fn ttl(&self) -> Duration {
        self.ttl
    }

    /// Opens a session for `credentials`; `now_unix` is the wall clock's reading of `now`.
    pub fn open(&self, credentials: Fingerprint, now: Instant, now_unix: i64) -> Opened {
        let token = random_token();
        let view = SessionView {
            csrf_token: random_token(),
            expires_at: now_unix.saturating_add(self.ttl.as_secs() as i64),
        };
        let mut open = self.open.locked();
        // Sessions are only made after a correct secret, so this stays small; expired ones go
        // whenever another opens.
        open.retain(|_, s| s.expires > now);
        open.insert(
            key(&token),
            Session {
                view: view.clone(),
                expires: now + self.ttl,
                credentials,
            },
        );
        Opened {
            token,
            session: view,
        }
    }

    /// The session `token` names, if it is open, unexpired and of the current credentials;
    /// one that is not any more is forgotten.
    pub fn check(&self, token: &str, current: Fingerprint, now: Instant) -> Option<SessionView> {
        let key = key(token);
        let mut open = self.open.locked();
        let session = open.get(&key)?;
        if session.expires <= now || session.credentials != current {
            open.remove(&key);
            return None;
        }
        Some(session.view.clone())
    }

    /// Ends the session `token` names; whether there was one.
    pub fn end(&self, token: &str) -> bool {
        self.open.locked().remove(&key(token)).is_some()
    }

    /// How many sessions are held (expired ones not yet dropped included).
    pub fn len(&self) -> usize {
        self.open.locked().len()
    }

    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn creds(secret: &str) -> Fingerprint {
        Fingerprint::of(&Credentials {
            access_key_id: "AKIAEXAMPLE".into(),
            secret_access_key: secret.into(),
        })
    }

    #[test]
    fn a_session_lives_until_its_expiry() {
        let sessions = Sessions::new(Duration::from_secs(60));
        let start = Instant::now();
        let opened = sessions.open(creds("s"), start, 1_000);
        assert_eq!(opened.session.expires_at, 1_060);
        let seen = sessions.check(&opened.token, creds("s"), start + Duration::from_secs(59));
        assert_eq!(seen, Some(opened.session.clone()));
        assert!(sessions
            .check(&opened.token, creds("s"), start + Duration::from_secs(60))
            .is_none());
        // Once expired it is gone, even if asked about at an earlier instant.
        assert!(sessions.check(&opened.token, creds("s"), start).is_none());
        assert!(sessions.is_empty());
    }

    #[test]
    fn sign_out_ends_only_its_own_session() {
        let sessions = Sessions::new(Duration::from_secs(60));
        let now = Instant::now();
        let a = sessions.open(creds("s"), now, 0);
        let b = sessions.open(creds("s"), now, 0);
        assert_ne!(a.token, b.token);
        assert_ne!(a.session.csrf_token, b.session.csrf_token);
        assert!(sessions.end(&a.token));
        assert!(!sessions.end(&a.token));
        assert!(sessions.check(&a.token, creds("s"), now).is_none());
        assert!(sessions.check(&b.token, creds("s"), now).is_some());
    }

    #[test]
    fn rotated_credentials_end_sessions() {
        let sessions = Sessions::new(Duration::from_secs(60));
        let now = Instant::now();
        let opened = sessions.open(creds("old"), now, 0);
        assert!(sessions.check(&opened.token, creds("new"), now).is_none());
        // And it does not come back with the old credentials.
        assert!(sessions.check(&opened.token, creds("old"), now).is_none());
    }

    #[test]
    fn unknown_and_malformed_tokens_name_no_session() {
        let sessions = Sessions::new(Duration::from_secs(60));
        let now = Instant::now();
        sessions.open(creds("s"), now, 0);
        for token in ["", "x", "%00", &"a".repeat(10_000)] {
            assert!(sessions.check(token, creds("s"), now).is_none());
        }
    }

    #[test]
    fn expired_sessions_are_dropped_when_another_opens() {
        let sessions = Sessions::new(Duration::from_secs(1));
        let now = Instant::now();
        sessions.open(creds("s"), now, 0);
        sessions.open(creds("s"), now + Duration::from_secs(2), 0);
        assert_eq!(sessions.len(), 1);
    }
}
