//! An app's configuration: what the API accepts, what is kept, and every check on it (each
//! refusal names its field).

use std::net::SocketAddr;
use std::time::Duration;

use serde::{Deserialize, Serialize};

use super::control::Policy;
use super::routes::Pattern;
use super::store;

/// An app's configuration, as stored and as the API shows it (the database password aside).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "PascalCase")]
pub struct AppSpec {
    pub name: String,
    pub listen: SocketAddr,
    /// The monolith's servers, `http://host:port`; requests go to the least loaded.
    pub upstreams: Vec<String>,
    /// The web function that serves offloaded requests.
    pub function: String,
    /// `postgresql://user@host:port/db`, without its password.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub database: Option<String>,
    /// `spill`, `ratio` or `slo`.
    pub policy: String,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub max_inflight: Option<u32>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub ratio: Option<f64>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub p99_ms: Option<f64>,
    /// The share of the monolith's accumulated server time the offloaded routes make up.
    pub cover: f64,
    pub cooldown_seconds: f64,
    /// Routes to offload that the framework does not declare.
    #[serde(default)]
    pub offload: Vec<String>,
    /// Routes kept on the monolith.
    #[serde(default)]
    pub pin: Vec<String>,
    /// How long the monolith may take to answer before the gateway answers 504.
    pub upstream_timeout_seconds: f64,
    /// Instances of the function kept ready at all times (the paper's warm case).
    #[serde(default)]
    pub min_warm: u32,
}

/// Defaults of the optional fields.
pub const DEFAULT_COVER: f64 = 0.8;
pub const DEFAULT_COOLDOWN_SECONDS: f64 = 30.0;
pub const DEFAULT_UPSTREAM_TIMEOUT_SECONDS: f64 = 60.0;

/// What the API accepts: an app's configuration, every field but the name optional on an
/// update (what is absent is kept).
#[derive(Debug, Clone, Default, Deserialize)]
#[serde(rename_all = "PascalCase", deny_unknown_fields)]
pub struct AppInput {
    pub listen: Option<String>,
    pub upstreams: Option<Vec<String>>,
    pub function: Option<String>,
    pub database: Option<String>,
    /// Never echoed back; kept in `kiln.db` beside the app.
    pub database_password: Option<String>,
    pub policy: Option<String>,
    pub max_inflight: Option<u32>,
    pub ratio: Option<f64>,
    pub p99_ms: Option<f64>,
    pub cover: Option<f64>,
    pub cooldown_seconds: Option<f64>,
    pub offload: Option<Vec<String>>,
    pub pin: Option<Vec<String>>,
    pub upstream_timeout_seconds: Option<f64>,
    pub min_warm: Option<u32>,
}

/// Why an app request failed.
#[derive(Debug, thiserror::Error)]
pub enum AppError {
    /// A field is invalid: 400, naming it.
    #[error("{field}: {message}")]
    Invalid {
        field: &'static str,
        message: String,
    },
    #[error("app {0} does not exist")]
    NotFound(String),
    #[error(transparent)]
    Store(#[from] store::StoreError),
}

pub(crate) fn invalid(field: &'static str, message: impl Into<String>) -> AppError {
    AppError::Invalid {
        field,
        message: message.into(),
    }
}

impl AppSpec {
    /// The spec `input` makes of `current` (or of nothing, for a new app), checked; and the
    /// database password, if `input` has one (from the field or the URL).
    pub fn merge(
        name: &str,
        current: Option<&AppSpec>,
        input: AppInput,
    ) -> Result<(AppSpec, Option<String>), AppError> {
        if name.is_empty()
            || name.len() > 64
            || !name
                .chars()
                .all(|c| c.is_ascii_alphanumeric() || c == '-' || c == '_')
        {
            return Err(invalid(
                "Name",
                "1 to 64 letters, digits, hyphens and underscores",
            ));
        }
        let required = |field: &'static str| invalid(field, "is required to create an app");
        let listen = match (input.listen, current) {
            (Some(l), _) => l
                .parse::<SocketAddr>()
                .map_err(|_| invalid("Listen", format!("{l:?} is not an address:port")))?,
            (None, Some(c)) => c.listen,
            (None, None) => return Err(required("Listen")),
        };
        let upstreams = match (input.upstreams, current) {
            (Some(u), _) => u,
            (None, Some(c)) => c.upstreams.clone(),
            (None, None) => return Err(required("Upstreams")),
        };
        if upstreams.is_empty() {
            return Err(invalid("Upstreams", "an app needs at least one upstream"));
        }
        for u in &upstreams {
            upstream_authority(u)?;
        }
        let function = match (input.function, current) {
            (Some(f), _) => f,
            (None, Some(c)) => c.function.clone(),
            (None, None) => return Err(required("Function")),
        };
        let mut password = input.database_password;
        let database = match (input.database, current) {
            (Some(d), _) if d.is_empty() => None,
            (Some(d), _) => {
                let (url, from_url) = database_url(&d)?;
                password = password.or(from_url);
                Some(url)
            }
            (None, Some(c)) => c.database.clone(),
            (None, None) => None,
        };
        let policy = input
            .policy
            .or_else(|| current.map(|c| c.policy.clone()))
            .unwrap_or_else(|| "spill".into());
        let keep = |new: Option<f64>, old: Option<f64>| new.or(old);
        let mut spec = AppSpec {
            name: name.to_string(),
            listen,
            upstreams,
            function,
            database,
            policy,
            max_inflight: input.max_inflight.or(current.and_then(|c| c.max_inflight)),
            ratio: keep(input.ratio, current.and_then(|c| c.ratio)),
            p99_ms: keep(input.p99_ms, current.and_then(|c| c.p99_ms)),
            cover: input
                .cover
                .or(current.map(|c| c.cover))
                .unwrap_or(DEFAULT_COVER),
            cooldown_seconds: input
                .cooldown_seconds
                .or(current.map(|c| c.cooldown_seconds))
                .unwrap_or(DEFAULT_COOLDOWN_SECONDS),
            offload: input
                .offload
                .or(current.map(|c| c.offload.clone()))
                .unwrap_or_default(),
            pin: input
                .pin
                .or(current.map(|c| c.pin.clone()))
                .unwrap_or_default(),
            upstream_timeout_seconds: input
                .upstream_timeout_seconds
                .or(current.map(|c| c.upstream_timeout_seconds))
                .unwrap_or(DEFAULT_UPSTREAM_TIMEOUT_SECONDS),
            min_warm: input.min_warm.or(current.map(|c| c.min_warm)).unwrap_or(0),
        };
        if spec.min_warm > 64 {
            return Err(invalid("MinWarm", "must be at most 64"));
        }
        spec.policy()?;
        if !(spec.cover > 0.0 && spec.cover <= 1.0) {
            return Err(invalid("Cover", "must be in (0, 1]"));
        }
        if !(0.0..=3600.0).contains(&spec.cooldown_seconds) {
            return Err(invalid("CooldownSeconds", "must be in [0, 3600]"));
        }
        if !(spec.upstream_timeout_seconds > 0.0 && spec.upstream_timeout_seconds <= 3600.0) {
            return Err(invalid("UpstreamTimeoutSeconds", "must be in (0, 3600]"));
        }
        let offload = parse_patterns("Offload", &spec.offload)?;
        let pin = parse_patterns("Pin", &spec.pin)?;
        if let Some(both) = offload.iter().find(|p| pin.contains(p)) {
            return Err(invalid(
                "Pin",
                format!("{both} is both pinned and offloaded"),
            ));
        }
        spec.offload = offload.iter().map(|p| p.to_string()).collect();
        spec.pin = pin.iter().map(|p| p.to_string()).collect();
        // Only the fields of the policy in force are kept.
        match spec.policy.as_str() {
            "spill" => (spec.ratio, spec.p99_ms) = (None, None),
            "ratio" => (spec.max_inflight, spec.p99_ms) = (None, None),
            _ => (spec.max_inflight, spec.ratio) = (None, None),
        }
        Ok((spec, password))
    }

    pub fn policy(&self) -> Result<Policy, AppError> {
        match self.policy.as_str() {
            "spill" => match self.max_inflight {
                Some(0) => Err(invalid("MaxInflight", "must be at least 1")),
                max_inflight => Ok(Policy::Spill { max_inflight }),
            },
            "ratio" => match self.ratio {
                Some(r) if (0.0..=1.0).contains(&r) => Ok(Policy::Ratio { ratio: r }),
                Some(_) => Err(invalid("Ratio", "must be in [0, 1]")),
                None => Err(invalid("Ratio", "the ratio policy needs a ratio")),
            },
            "slo" => match self.p99_ms {
                Some(p) if p > 0.0 && p.is_finite() => Ok(Policy::Slo { p99_ms: p }),
                Some(_) => Err(invalid("P99Ms", "must be greater than 0")),
                None => Err(invalid("P99Ms", "the slo policy needs a p99 target")),
            },
            other => Err(invalid(
                "Policy",
                format!("{other:?} is not one of spill, ratio, slo"),
            )),
        }
    }

    pub fn cooldown(&self) -> Duration {
        Duration::from_secs_f64(self.cooldown_seconds)
    }

    pub fn upstream_timeout(&self) -> Duration {
        Duration::from_secs_f64(self.upstream_timeout_seconds)
    }

    #[cfg(test)]
    pub fn example() -> Self {
        AppSpec::merge(
            "blog",
            None,
            AppInput {
                listen: Some("127.0.0.1:0".into()),
                upstreams: Some(vec!["http://127.0.0.1:8000".into()]),
                function: Some("blog-web".into()),
                ..Default::default()
            },
        )
        .unwrap()
        .0
    }
}

/// Whether `f` can serve an app: what a shadow run of it can reach must be what kiln contains.
pub fn check_function(f: &crate::function::Function) -> Result<(), AppError> {
    if f.config.web.is_none() {
        return Err(invalid(
            "Function",
            format!(
                "{} is not a web function: deploy the app's code with KilnWeb \
                 (kiln deploy --web-app, --web-start or --web-command)",
                f.name
            ),
        ));
    }
    if f.config.network == crate::function::NetworkMode::Host {
        return Err(invalid(
            "Function",
            format!(
                "{} uses the host network: a shadow run could reach services kiln cannot \
                 contain, so an app's function must use the isolated network",
                f.name
            ),
        ));
    }
    if f.config.sessions.is_some() {
        return Err(invalid(
            "Function",
            format!(
                "{} uses kiln's sessions, which an unmodified web app does not: deploy it \
                 without KilnSessions",
                f.name
            ),
        ));
    }
    Ok(())
}

fn parse_patterns(field: &'static str, texts: &[String]) -> Result<Vec<Pattern>, AppError> {
    texts
        .iter()
        .map(|t| Pattern::parse(t).map_err(|e| invalid(field, e.to_string())))
        .collect()
}

/// An upstream's `host:port`: it must be `http://host[:port][/]`.
pub fn upstream_authority(url: &str) -> Result<String, AppError> {
    let fail = |why: &str| invalid("Upstreams", format!("{url:?}: {why}"));
    let uri: http::Uri = url.parse().map_err(|_| fail("not a URL"))?;
    match uri.scheme_str() {
        Some("http") => {}
        Some("https") => {
            return Err(fail(
                "kiln reaches upstreams over plain http (the monolith is on this network)",
            ))
        }
        _ => return Err(fail("must be an http:// URL")),
    }
    if uri.path() != "/" && !uri.path().is_empty() || uri.query().is_some() {
        return Err(fail("must have no path: requests keep their own"));
    }
    let authority = uri.authority().ok_or_else(|| fail("has no host"))?;
    let port = authority.port_u16().unwrap_or(80);
    Ok(format!("{}:{port}", authority.host()))
}

/// A PostgreSQL URL without its password, and the password it had.
fn database_url(url: &str) -> Result<(String, Option<String>), AppError> {
    let fail = |why: &str| invalid("Database", why.to_string());
    let rest = url
        .strip_prefix("postgresql://")
        .or_else(|| url.strip_prefix("postgres://"))
        .ok_or_else(|| fail("must be a postgresql:// URL"))?;
    let (userinfo, hostpart) = rest
        .rsplit_once('@')
        .ok_or_else(|| fail("must name a user: postgresql://USER@HOST:PORT/DB"))?;
    let (user, password) = match userinfo.split_once(':') {
        Some((u, p)) => (u, Some(p.to_string())),
        None => (userinfo, None),
    };
    if user.is_empty() {
        return Err(fail("must name a user: postgresql://USER@HOST:PORT/DB"));
    }
    let (hostport, db) = hostpart
        .split_once('/')
        .ok_or_else(|| fail("must name a database: postgresql://USER@HOST:PORT/DB"))?;
    if db.is_empty() || db.contains(['/', '?']) {
        return Err(fail("must name one database, with no options"));
    }
    let (host, port) = match hostport.rsplit_once(':') {
        Some((h, p)) if !h.ends_with(']') || hostport.starts_with('[') => (
            h,
            p.parse::<u16>()
                .map_err(|_| fail("the port must be a number"))?,
        ),
        _ => (hostport, 5432),
    };
    if host.is_empty() {
        return Err(fail("has no host"));
    }
    // Inside a sandbox the proxy listens at this address: a loopback literal as is, a host
    // name through the sandbox's /etc/hosts. Any other literal would shadow a real host.
    let bare = host.trim_start_matches('[').trim_end_matches(']');
    if let Ok(ip) = bare.parse::<std::net::IpAddr>() {
        if !ip.is_loopback() {
            return Err(fail(
                "an address other than a loopback one cannot be served inside the sandbox: \
                 use a host name or 127.0.0.1",
            ));
        }
    }
    Ok((format!("postgresql://{user}@{host}:{port}/{db}"), password))
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::time::Duration;

    fn input() -> AppInput {
        AppInput {
            listen: Some("127.0.0.1:8080".into()),
            upstreams: Some(vec!["http://127.0.0.1:8000".into()]),
            function: Some("blog-web".into()),
            ..Default::default()
        }
    }

    fn field_of(r: Result<(AppSpec, Option<String>), AppError>) -> &'static str {
        match r {
            Err(AppError::Invalid { field, .. }) => field,
            other => panic!("{other:?}"),
        }
    }

    #[test]
    fn a_new_app_gets_the_defaults() {
        let (spec, password) = AppSpec::merge("blog", None, input()).unwrap();
        assert_eq!(spec.policy().unwrap(), Policy::Spill { max_inflight: None });
        assert_eq!(spec.cover, DEFAULT_COVER);
        assert_eq!(spec.cooldown(), Duration::from_secs(30));
        assert_eq!(password, None);
    }

    #[test]
    fn bad_configuration_names_its_field() {
        let cases: Vec<(&str, AppInput)> = vec![
            ("Name", input()),
            (
                "Listen",
                AppInput {
                    listen: Some("nowhere".into()),
                    ..input()
                },
            ),
            (
                "Upstreams",
                AppInput {
                    upstreams: Some(vec!["ftp://x".into()]),
                    ..input()
                },
            ),
            (
                "Upstreams",
                AppInput {
                    upstreams: Some(vec![]),
                    ..input()
                },
            ),
            (
                "Upstreams",
                AppInput {
                    upstreams: Some(vec!["http://x:1/base".into()]),
                    ..input()
                },
            ),
            (
                "Ratio",
                AppInput {
                    policy: Some("ratio".into()),
                    ratio: Some(1.5),
                    ..input()
                },
            ),
            (
                "Ratio",
                AppInput {
                    policy: Some("ratio".into()),
                    ..input()
                },
            ),
            (
                "P99Ms",
                AppInput {
                    policy: Some("slo".into()),
                    p99_ms: Some(0.0),
                    ..input()
                },
            ),
            (
                "Policy",
                AppInput {
                    policy: Some("fastest".into()),
                    ..input()
                },
            ),
            (
                "MaxInflight",
                AppInput {
                    max_inflight: Some(0),
                    ..input()
                },
            ),
            (
                "Cover",
                AppInput {
                    cover: Some(0.0),
                    ..input()
                },
            ),
            (
                "Offload",
                AppInput {
                    offload: Some(vec!["GET /{".into()]),
                    ..input()
                },
            ),
            (
                "Pin",
                AppInput {
                    offload: Some(vec!["post /comment/".into()]),
                    pin: Some(vec!["POST /comment/".into()]),
                    ..input()
                },
            ),
            (
                "Database",
                AppInput {
                    database: Some("mysql://u@h/d".into()),
                    ..input()
                },
            ),
            (
                "Database",
                AppInput {
                    database: Some("postgresql://u@10.0.0.5:5432/d".into()),
                    ..input()
                },
            ),
            (
                "Database",
                AppInput {
                    database: Some("postgresql://h:5432/d".into()),
                    ..input()
                },
            ),
        ];
        for (i, (field, input)) in cases.into_iter().enumerate() {
            let name = if i == 0 { "bad name!" } else { "blog" };
            assert_eq!(
                field_of(AppSpec::merge(name, None, input)),
                field,
                "case {i}"
            );
        }
        assert_eq!(
            field_of(AppSpec::merge("blog", None, AppInput::default())),
            "Listen"
        );
    }

    #[test]
    fn the_database_password_is_taken_out_of_the_url() {
        let (spec, password) = AppSpec::merge(
            "blog",
            None,
            AppInput {
                database: Some("postgresql://blog:pw@127.0.0.1:5433/blog".into()),
                ..input()
            },
        )
        .unwrap();
        assert_eq!(
            spec.database.as_deref(),
            Some("postgresql://blog@127.0.0.1:5433/blog")
        );
        assert_eq!(password.as_deref(), Some("pw"));
        assert!(!serde_json::to_string(&spec).unwrap().contains("pw"));
    }

    #[test]
    fn an_update_keeps_what_it_does_not_name() {
        let (spec, _) = AppSpec::merge("blog", None, input()).unwrap();
        let (changed, _) = AppSpec::merge(
            "blog",
            Some(&spec),
            AppInput {
                policy: Some("ratio".into()),
                ratio: Some(0.5),
                ..Default::default()
            },
        )
        .unwrap();
        assert_eq!(changed.upstreams, spec.upstreams);
        assert_eq!(changed.policy().unwrap(), Policy::Ratio { ratio: 0.5 });
    }
}
