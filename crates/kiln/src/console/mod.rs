//! The console: a web UI served by `kiln up` at `/ui/` on the API listener.
//!
//! The console is a client of kiln's API and nothing more: its pages are static files embedded
//! in the binary ([`assets`]), and they read and change kiln through the API every other client
//! uses. What is the console's own is signing in: the admin key and secret open a server-side
//! session ([`sessions`]) whose cookie the API accepts in place of a SigV4 signature, with a
//! CSRF token on every request that changes something; failed sign-ins are limited per client
//! address ([`limiter`]). The HTTP side is `api/console.rs`.

pub mod assets;
pub mod limiter;
pub mod sessions;

use std::net::IpAddr;
use std::time::{Duration, Instant};

use crate::auth::{constant_time_eq, Credentials};
use crate::objects::keys::{KeyRing, Principal};
use limiter::{SignInLimiter, SignInLimits};
use sessions::{Fingerprint, Opened, SessionView, Sessions};

/// The session cookie's name.
pub const COOKIE: &str = "kiln_console";
/// The header that carries a session's CSRF token.
pub const CSRF_HEADER: &str = "x-kiln-csrf";
/// A session's lifetime unless `--ui-session-ttl` says otherwise.
pub const DEFAULT_SESSION_TTL: Duration = Duration::from_secs(12 * 3600);

/// Settings of the console (`--ui`, `--ui-listen`, `--ui-session-ttl`).
#[derive(Debug, Clone)]
pub struct ConsoleConfig {
    /// Its own listener: `None` is the API's port + 2 (an ephemeral port when the API's is 0).
    pub listen: Option<std::net::SocketAddr>,
    pub session_ttl: Duration,
    pub sign_in_limits: SignInLimits,
}

impl ConsoleConfig {
    /// Where the console listens, next to the API's configured address by default.
    pub fn address(&self, api: std::net::SocketAddr) -> std::net::SocketAddr {
        self.listen.unwrap_or_else(|| {
            let port = match api.port() {
                0 => 0,
                port => port.checked_add(2).unwrap_or(0),
            };
            std::net::SocketAddr::new(api.ip(), port)
        })
    }
}

impl Default for ConsoleConfig {
    fn default() -> Self {
        Self {
            listen: None,
            session_ttl: DEFAULT_SESSION_TTL,
            sign_in_limits: SignInLimits::default(),
        }
    }
}

/// Why the console refused a request.
#[derive(Debug, thiserror::Error, PartialEq, Eq)]
pub enum ConsoleError {
    /// The access key or secret is wrong.
    #[error("The access key or secret is wrong.")]
    WrongCredentials,
    /// A function's key was given: only kiln's admin key can sign in.
    #[error("Function keys cannot sign in to the console: use kiln's admin access key and secret (the data dir's credentials.json).")]
    FunctionKey,
    /// Too many failed sign-ins from this address.
    #[error("Too many failed sign-ins from this address: try again in {} s.", .retry_after.as_secs().max(1))]
    TooManyAttempts { retry_after: Duration },
    /// No session, or it has ended (signed out, expired, or the credentials were rotated).
    #[error("Not signed in, or the console session has ended: sign in again.")]
    SignedOut,
    /// A request that changes something came without its session's CSRF token.
    #[error("This request changes something and needs the session's CSRF token in the x-kiln-csrf header.")]
    Csrf,
}

pub struct Console {
    sessions: Sessions,
    limiter: SignInLimiter,
}

impl Console {
    pub fn new(config: ConsoleConfig) -> Self {
        Self {
            sessions: Sessions::new(config.session_ttl),
            limiter: SignInLimiter::new(config.sign_in_limits),
        }
    }

    pub fn session_ttl(&self) -> Duration {
        self.sessions.ttl()
    }

    /// Signs `client` in with `access_key_id` and `secret` if they are kiln's admin
    /// credentials; failures are counted against the address and logged.
    pub fn sign_in(
        &self,
        client: IpAddr,
        access_key_id: &str,
        secret: &str,
        admin: &Credentials,
        now: Instant,
    ) -> Result<Opened, ConsoleError> {
        if let Err(retry_after) = self.limiter.check(client, now) {
            tracing::warn!(%client, "console: sign-in refused, too many failures from this address");
            return Err(ConsoleError::TooManyAttempts { retry_after });
        }
        let refusal = match KeyRing::new(admin.clone()).lookup(access_key_id) {
            Some((Principal::Admin, _))
                if constant_time_eq(secret.as_bytes(), admin.secret_access_key.as_bytes()) =>
            {
                None
            }
            Some((Principal::Function(_), _)) => Some(ConsoleError::FunctionKey),
            _ => Some(ConsoleError::WrongCredentials),
        };
        if let Some(refusal) = refusal {
            let failures = self.limiter.failed(client, now);
            tracing::warn!(%client, failures, reason = %refusal, "console: failed sign-in");
            return Err(refusal);
        }
        self.limiter.succeeded(client);
        tracing::info!(%client, "console: signed in");
        Ok(self
            .sessions
            .open(Fingerprint::of(admin), now, chrono::Utc::now().timestamp()))
    }

    /// The session a cookie's token names, if it is still open under `admin`.
    pub fn session(&self, token: &str, admin: &Credentials) -> Result<SessionView, ConsoleError> {
        self.sessions
            .check(token, Fingerprint::of(admin), Instant::now())
            .ok_or(ConsoleError::SignedOut)
    }

    /// Lets a request through on its session: any request needs one, and one that changes
    /// something (`safe` false) also needs the session's CSRF token.
    pub fn authorize(
        &self,
        token: &str,
        csrf: Option<&str>,
        safe: bool,
        admin: &Credentials,
    ) -> Result<SessionView, ConsoleError> {
        let session = self.session(token, admin)?;
        if !safe
            && !csrf.is_some_and(|c| constant_time_eq(c.as_bytes(), session.csrf_token.as_bytes()))
        {
            return Err(ConsoleError::Csrf);
        }
        Ok(session)
    }

    /// Signs out: the session ends whether or not its cookie is ever sent again.
    pub fn sign_out(&self, token: &str) -> bool {
        self.sessions.end(token)
    }
}

/// Reads a duration such as `12h`, `90m`, `45s`, `1d` or `3600` (seconds).
pub fn parse_ttl(text: &str) -> Result<Duration, String> {
    let text = text.trim();
    let (digits, unit) = match text.find(|c: char| !c.is_ascii_digit()) {
        Some(at) => text.split_at(at),
        None => (text, "s"),
    };
    let scale = match unit {
        "s" => 1,
        "m" => 60,
        "h" => 3600,
        "d" => 86_400,
        _ => {
            return Err(format!(
                "`{text}` is not a duration: use a number with s, m, h or d (e.g. 12h)"
            ))
        }
    };
    let value: u64 = digits.parse().map_err(|_| {
        format!("`{text}` is not a duration: use a number with s, m, h or d (e.g. 12h)")
    })?;
    match value.checked_mul(scale) {
        Some(0) => Err("the console's session lifetime must be longer than 0".into()),
        Some(secs) if secs <= 366 * 86_400 => Ok(Duration::from_secs(secs)),
        _ => Err(format!("`{text}` is longer than a year")),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn admin() -> Credentials {
        Credentials {
            access_key_id: "AKIAADMINADMINADMIN0".into(),
            secret_access_key: "secret".into(),
        }
    }

    #[test]
    fn the_console_listens_next_to_the_api_by_default() {
        let api: std::net::SocketAddr = "127.0.0.1:9000".parse().unwrap();
        let config = ConsoleConfig::default();
        assert_eq!(config.address(api), "127.0.0.1:9002".parse().unwrap());
        let ephemeral: std::net::SocketAddr = "127.0.0.1:0".parse().unwrap();
        assert_eq!(config.address(ephemeral).port(), 0);
        let chosen = ConsoleConfig {
            listen: Some("0.0.0.0:8443".parse().unwrap()),
            ..ConsoleConfig::default()
        };
        assert_eq!(chosen.address(api), "0.0.0.0:8443".parse().unwrap());
    }

    fn console() -> Console {
        Console::new(ConsoleConfig {
            listen: None,
            session_ttl: Duration::from_secs(60),
            sign_in_limits: SignInLimits {
                max_failures: 2,
                window: Duration::from_secs(60),
            },
        })
    }

    const CLIENT: IpAddr = IpAddr::V4(std::net::Ipv4Addr::LOCALHOST);

    #[test]
    fn the_admin_key_signs_in_and_its_session_authorizes() {
        let console = console();
        let now = Instant::now();
        let opened = console
            .sign_in(CLIENT, &admin().access_key_id, "secret", &admin(), now)
            .unwrap();
        let csrf = opened.session.csrf_token.as_str();
        assert!(console
            .authorize(&opened.token, None, true, &admin())
            .is_ok());
        assert_eq!(
            console.authorize(&opened.token, None, false, &admin()),
            Err(ConsoleError::Csrf)
        );
        assert_eq!(
            console.authorize(&opened.token, Some("wrong"), false, &admin()),
            Err(ConsoleError::Csrf)
        );
        assert!(console
            .authorize(&opened.token, Some(csrf), false, &admin())
            .is_ok());
        assert!(console.sign_out(&opened.token));
        assert_eq!(
            console.authorize(&opened.token, Some(csrf), true, &admin()),
            Err(ConsoleError::SignedOut)
        );
    }

    #[test]
    fn function_keys_and_wrong_secrets_are_refused_then_limited() {
        let console = console();
        let now = Instant::now();
        let function = KeyRing::new(admin()).function_credentials("thumbs");
        assert_eq!(
            console
                .sign_in(
                    CLIENT,
                    &function.access_key_id,
                    &function.secret_access_key,
                    &admin(),
                    now
                )
                .unwrap_err(),
            ConsoleError::FunctionKey
        );
        assert_eq!(
            console
                .sign_in(CLIENT, &admin().access_key_id, "nope", &admin(), now)
                .unwrap_err(),
            ConsoleError::WrongCredentials
        );
        // Two failures: even the right secret is refused now.
        assert!(matches!(
            console.sign_in(CLIENT, &admin().access_key_id, "secret", &admin(), now),
            Err(ConsoleError::TooManyAttempts { .. })
        ));
    }

    #[test]
    fn rotated_credentials_end_the_session() {
        let console = console();
        let opened = console
            .sign_in(
                CLIENT,
                &admin().access_key_id,
                "secret",
                &admin(),
                Instant::now(),
            )
            .unwrap();
        let rotated = Credentials {
            secret_access_key: "rotated".into(),
            ..admin()
        };
        assert_eq!(
            console.session(&opened.token, &rotated),
            Err(ConsoleError::SignedOut)
        );
    }

    #[test]
    fn ttls_parse_with_units() {
        assert_eq!(parse_ttl("12h"), Ok(Duration::from_secs(43_200)));
        assert_eq!(parse_ttl("90m"), Ok(Duration::from_secs(5_400)));
        assert_eq!(parse_ttl("45s"), Ok(Duration::from_secs(45)));
        assert_eq!(parse_ttl("1d"), Ok(Duration::from_secs(86_400)));
        assert_eq!(parse_ttl("3600"), Ok(Duration::from_secs(3_600)));
        for bad in [
            "",
            "h",
            "0",
            "0h",
            "12x",
            "-1h",
            "1.5h",
            "99999999999999999999d",
            "400d",
        ] {
            assert!(parse_ttl(bad).is_err(), "{bad} should be refused");
        }
    }
}
