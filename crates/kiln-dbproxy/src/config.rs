//! The proxy's configuration, validated once.

use std::time::Duration;

/// What to do with a statement that would leave session state on a backend.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum SessionStatePolicy {
    /// Refuse it with SQLSTATE 0A000 and a message naming the fix (the default).
    Refuse,
    /// Run it and keep the backend for that client until it disconnects, for at most
    /// `max_pinned` clients at once; the backend is then closed, not returned.
    Pin,
}

impl std::str::FromStr for SessionStatePolicy {
    type Err = String;
    fn from_str(s: &str) -> Result<Self, String> {
        match s {
            "refuse" => Ok(SessionStatePolicy::Refuse),
            "pin" => Ok(SessionStatePolicy::Pin),
            other => Err(format!(
                "unknown session-state policy {other:?}: use refuse or pin"
            )),
        }
    }
}

/// How the proxy reaches PostgreSQL and what it asks of its clients. Its `Debug` output leaves
/// the passwords out.
#[derive(Clone)]
pub struct ProxyConfig {
    /// PostgreSQL's `HOST:PORT`.
    pub upstream: String,
    /// The database the proxy logs in to; clients must ask for this one.
    pub database: String,
    /// The role the proxy logs in as, and its password (SCRAM-SHA-256, md5 or trust).
    pub upstream_user: String,
    pub upstream_password: String,
    /// The credentials clients must present (SCRAM-SHA-256).
    pub client_user: String,
    pub client_password: String,
    /// Backends at most.
    pub pool_size: usize,
    /// How long a transaction waits for a backend before SQLSTATE 53300.
    pub queue_timeout: Duration,
    pub session_state: SessionStatePolicy,
    /// Clients that may hold a pinned backend at once (policy `pin`).
    pub max_pinned: usize,
    /// `SET LOCAL lock_timeout` and `statement_timeout` of each shadow transaction.
    pub shadow_lock_timeout: Duration,
    pub shadow_statement_timeout: Duration,
    /// How long logging in to PostgreSQL may take.
    pub connect_timeout: Duration,
}

impl std::fmt::Debug for ProxyConfig {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("ProxyConfig")
            .field("upstream", &self.upstream)
            .field("database", &self.database)
            .field("upstream_user", &self.upstream_user)
            .field("client_user", &self.client_user)
            .field("pool_size", &self.pool_size)
            .field("queue_timeout", &self.queue_timeout)
            .field("session_state", &self.session_state)
            .field("max_pinned", &self.max_pinned)
            .field("shadow_lock_timeout", &self.shadow_lock_timeout)
            .field("shadow_statement_timeout", &self.shadow_statement_timeout)
            .field("connect_timeout", &self.connect_timeout)
            .finish_non_exhaustive()
    }
}

/// A configuration that cannot work.
#[derive(Debug, thiserror::Error, PartialEq, Eq)]
pub enum ConfigError {
    /// the pool size must be at least 1
    #[error("the pool size must be at least 1")]
    PoolSize,
    /// a required field is empty
    #[error("{0} must not be empty")]
    Empty(&'static str),
    /// pinning needs fewer pinned clients than backends
    #[error("max_pinned ({0}) must be below the pool size ({1}) so that unpinned clients still get a backend")]
    MaxPinned(usize, usize),
}

impl ProxyConfig {
    /// A configuration with the defaults: a pool of 16, a 5 s queue timeout, refusals, and
    /// 1 s lock / 10 s statement timeouts for shadow transactions.
    pub fn new(
        upstream: impl Into<String>,
        database: impl Into<String>,
        user: impl Into<String>,
        password: impl Into<String>,
    ) -> ProxyConfig {
        let user = user.into();
        let password = password.into();
        ProxyConfig {
            upstream: upstream.into(),
            database: database.into(),
            client_user: user.clone(),
            client_password: password.clone(),
            upstream_user: user,
            upstream_password: password,
            pool_size: 16,
            queue_timeout: Duration::from_secs(5),
            session_state: SessionStatePolicy::Refuse,
            max_pinned: 4,
            shadow_lock_timeout: Duration::from_secs(1),
            shadow_statement_timeout: Duration::from_secs(10),
            connect_timeout: Duration::from_secs(5),
        }
    }

    pub fn validate(&self) -> Result<(), ConfigError> {
        for (name, v) in [
            ("upstream", &self.upstream),
            ("database", &self.database),
            ("upstream_user", &self.upstream_user),
            ("client_user", &self.client_user),
        ] {
            if v.is_empty() {
                return Err(ConfigError::Empty(name));
            }
        }
        if self.pool_size == 0 {
            return Err(ConfigError::PoolSize);
        }
        if self.session_state == SessionStatePolicy::Pin && self.max_pinned >= self.pool_size {
            return Err(ConfigError::MaxPinned(self.max_pinned, self.pool_size));
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn debug_output_leaves_the_passwords_out() {
        let cfg = ProxyConfig::new("127.0.0.1:5432", "blog", "blog", "hunter2");
        assert!(!format!("{cfg:?}").contains("hunter2"));
    }

    #[test]
    fn pinning_needs_room_for_unpinned_clients() {
        let mut cfg = ProxyConfig::new("127.0.0.1:5432", "blog", "blog", "pw");
        cfg.session_state = SessionStatePolicy::Pin;
        cfg.pool_size = 4;
        cfg.max_pinned = 4;
        assert_eq!(cfg.validate(), Err(ConfigError::MaxPinned(4, 4)));
        cfg.pool_size = 0;
        assert_eq!(cfg.validate(), Err(ConfigError::PoolSize));
    }
}
