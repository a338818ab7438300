//! The apps' series on `/metrics`: `kiln_app_*` from each gateway, `kiln_dbproxy_*` from each
//! app's database proxy.

use super::gateway;
use crate::metrics::duration;

/// Appends the apps' series to an OpenMetrics exposition (before its `# EOF`).
pub fn render_metrics(
    apps: &[gateway::AppStatus],
    databases: &[(String, kiln_dbproxy::MetricsSnapshot)],
    text: &mut String,
) {
    use std::fmt::Write;
    if apps.is_empty() {
        return;
    }
    let had_eof = text.ends_with("# EOF\n");
    if had_eof {
        text.truncate(text.len() - "# EOF\n".len());
    }
    let label = |v: &str| v.replace('\\', "\\\\").replace('"', "\\\"");
    let _ = writeln!(
        text,
        "# HELP kiln_app_requests Requests an app's gateway answered, by who served them."
    );
    let _ = writeln!(text, "# TYPE kiln_app_requests counter");
    for a in apps {
        for (by, n) in [
            ("monolith", a.served.monolith),
            ("function", a.served.function),
            ("fallback", a.served.fallback),
            ("gateway", a.served.gateway),
        ] {
            let _ = writeln!(
                text,
                "kiln_app_requests_total{{app=\"{}\",served_by=\"{by}\"}} {n}",
                label(&a.name)
            );
        }
    }
    let _ = writeln!(
        text,
        "# HELP kiln_app_request_duration_seconds The gateway's latency from a request's arrival to its answer's head, by who served it."
    );
    let _ = writeln!(text, "# TYPE kiln_app_request_duration_seconds histogram");
    for a in apps {
        for l in &a.latency {
            let labels = format!("app=\"{}\",served_by=\"{}\"", label(&a.name), l.served_by);
            let mut cumulative = 0;
            for (i, n) in l.counts.iter().enumerate() {
                cumulative += n;
                let le = duration::BOUNDS
                    .get(i)
                    .map_or("+Inf".to_string(), |b| b.to_string());
                let _ = writeln!(
                    text,
                    "kiln_app_request_duration_seconds_bucket{{{labels},le=\"{le}\"}} {cumulative}"
                );
            }
            let _ = writeln!(
                text,
                "kiln_app_request_duration_seconds_sum{{{labels}}} {}",
                l.sum_seconds
            );
            let _ = writeln!(
                text,
                "kiln_app_request_duration_seconds_count{{{labels}}} {cumulative}"
            );
        }
    }
    type Gauge = (&'static str, &'static str, fn(&gateway::AppStatus) -> f64);
    let gauges: [Gauge; 3] = [
        (
            "kiln_app_offload_ratio",
            "The share of offloadable requests functions served during bursts.",
            |a| a.control.offload_ratio,
        ),
        ("kiln_app_in_burst", "1 while the app is in a burst.", |a| {
            f64::from(u8::from(a.control.in_burst))
        }),
        (
            "kiln_app_inflight_limit",
            "The limit of requests in flight per upstream.",
            |a| a.control.limit,
        ),
    ];
    for (name, help, value) in gauges {
        let _ = writeln!(text, "# HELP {name} {help}");
        let _ = writeln!(text, "# TYPE {name} gauge");
        for a in apps {
            let _ = writeln!(text, "{name}{{app=\"{}\"}} {}", label(&a.name), value(a));
        }
    }
    let _ = writeln!(
        text,
        "# HELP kiln_app_upstream_in_flight Requests in flight at each upstream."
    );
    let _ = writeln!(text, "# TYPE kiln_app_upstream_in_flight gauge");
    for a in apps {
        for u in &a.upstreams {
            let _ = writeln!(
                text,
                "kiln_app_upstream_in_flight{{app=\"{}\",upstream=\"{}\"}} {}",
                label(&a.name),
                label(&u.url),
                u.in_flight
            );
        }
    }
    type DbSeries = (
        &'static str,
        &'static str,
        &'static str,
        fn(&kiln_dbproxy::MetricsSnapshot) -> u64,
    );
    let series: [DbSeries; 8] = [
        (
            "kiln_dbproxy_backends",
            "gauge",
            "PostgreSQL backends the proxy holds open.",
            |m| m.backends_open,
        ),
        (
            "kiln_dbproxy_waiters",
            "gauge",
            "Transactions waiting for a backend.",
            |m| m.waiters,
        ),
        (
            "kiln_dbproxy_clients",
            "gauge",
            "Client connections open.",
            |m| m.clients,
        ),
        (
            "kiln_dbproxy_checkouts",
            "counter",
            "Transactions given a backend.",
            |m| m.checkouts,
        ),
        (
            "kiln_dbproxy_queue_timeouts",
            "counter",
            "Transactions refused with 53300 after waiting.",
            |m| m.queue_timeouts,
        ),
        (
            "kiln_dbproxy_shadow_rollbacks",
            "counter",
            "Shadow runs' transactions rolled back.",
            |m| m.shadow_rollbacks,
        ),
        (
            "kiln_dbproxy_auth_failures",
            "counter",
            "Clients refused at login.",
            |m| m.auth_failures,
        ),
        (
            "kiln_dbproxy_pool_wait_seconds_sum",
            "counter",
            "Time transactions waited for a backend.",
            |m| m.pool_wait_micros_sum,
        ),
    ];
    for (name, kind, help, value) in series {
        let _ = writeln!(text, "# HELP {name} {help}");
        let _ = writeln!(text, "# TYPE {name} {kind}");
        let suffix = if kind == "counter" && !name.ends_with("_sum") {
            "_total"
        } else {
            ""
        };
        for (app, m) in databases {
            let v = value(m);
            if name.ends_with("seconds_sum") {
                let _ = writeln!(text, "{name}{{app=\"{}\"}} {}", label(app), v as f64 / 1e6);
            } else {
                let _ = writeln!(text, "{name}{suffix}{{app=\"{}\"}} {v}", label(app));
            }
        }
    }
    let _ = writeln!(
        text,
        "# HELP kiln_dbproxy_refusals Statements refused because they would outlive a transaction."
    );
    let _ = writeln!(text, "# TYPE kiln_dbproxy_refusals counter");
    for (app, m) in databases {
        for (kind, n) in &m.refusals {
            let _ = writeln!(
                text,
                "kiln_dbproxy_refusals_total{{app=\"{}\",kind=\"{kind}\"}} {n}",
                label(app)
            );
        }
    }
    if had_eof {
        text.push_str("# EOF\n");
    }
}
