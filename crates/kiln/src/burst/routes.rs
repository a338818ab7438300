//! Route patterns: the routes a web framework declares, in kiln's notation, and matching a
//! request against them in the framework's order.
//!
//! A pattern is `METHOD /path`: `POST /comment/`, `GET /blog/archive/{year:\d{4}}/{month}/`.
//! The method is one of HTTP's or `*` (any; `GET` also matches `HEAD`, as frameworks do). In the
//! path, `{name}` is one segment, `{name:REGEX}` a segment matching REGEX, `{*name}` the rest of
//! the path (possibly empty); everything else is literal.

use std::fmt;

use regex_lite::Regex;

/// Why a pattern was refused.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("route pattern {pattern:?}: {reason}")]
pub struct PatternError {
    pub pattern: String,
    pub reason: String,
}

/// One route: a method and a path template, compiled.
#[derive(Clone)]
pub struct Pattern {
    text: String,
    method: Option<String>,
    path: Regex,
}

impl fmt::Debug for Pattern {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.text)
    }
}

impl PartialEq for Pattern {
    fn eq(&self, other: &Self) -> bool {
        self.text == other.text
    }
}

impl fmt::Display for Pattern {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.text)
    }
}

const METHODS: [&str; 9] = [
    "GET", "HEAD", "POST", "PUT", "DELETE", "PATCH", "OPTIONS", "CONNECT", "TRACE",
];

impl Pattern {
    pub fn parse(text: &str) -> Result<Self, PatternError> {
        let fail = |reason: &str| PatternError {
            pattern: text.to_string(),
            reason: reason.to_string(),
        };
        let trimmed = text.trim();
        let (method, path) = match trimmed.split_once(char::is_whitespace) {
            Some((m, p)) => (m, p.trim()),
            None => ("*", trimmed),
        };
        let method = match method.to_ascii_uppercase().as_str() {
            "*" => None,
            m if METHODS.contains(&m) => Some(m.to_string()),
            _ => return Err(fail("the method must be an HTTP method or *")),
        };
        if !path.starts_with('/') {
            return Err(fail("the path must start with /"));
        }
        if path.len() > 1024 {
            return Err(fail("the path is longer than 1024 bytes"));
        }
        let mut regex = String::from("^");
        let mut chars = path.char_indices().peekable();
        let mut names: Vec<String> = Vec::new();
        while let Some((start, c)) = chars.next() {
            match c {
                '{' => {
                    // The parameter runs to the brace that closes this one: a regex inside may
                    // have braces of its own (`\d{4}`).
                    let mut depth = 1;
                    let mut end = None;
                    for (i, c) in chars.by_ref() {
                        match c {
                            '{' => depth += 1,
                            '}' => {
                                depth -= 1;
                                if depth == 0 {
                                    end = Some(i);
                                    break;
                                }
                            }
                            _ => {}
                        }
                    }
                    let end = end.ok_or_else(|| fail("a { is not closed"))?;
                    let inner = &path[start + 1..end];
                    let (name, re) = match inner.split_once(':') {
                        Some((n, r)) => (n, Some(r)),
                        None => (inner, None),
                    };
                    let (name, rest) = match name.strip_prefix('*') {
                        Some(n) => (n, true),
                        None => (name, false),
                    };
                    if name.is_empty()
                        || !name.chars().all(|c| c.is_ascii_alphanumeric() || c == '_')
                    {
                        return Err(fail("a parameter needs a name of letters, digits and _"));
                    }
                    if names.iter().any(|n| n == name) {
                        return Err(fail("a parameter name is used twice"));
                    }
                    names.push(name.to_string());
                    match (rest, re) {
                        (true, Some(_)) => {
                            return Err(fail("a rest parameter {*name} takes no regex"))
                        }
                        (true, None) => regex.push_str("(?:.*)"),
                        (false, None) => regex.push_str("(?:[^/]+)"),
                        (false, Some(re)) => {
                            if re.is_empty() {
                                return Err(fail("a parameter's regex is empty"));
                            }
                            // Checked on its own, so that it cannot close the group around it.
                            Regex::new(re).map_err(|e| {
                                fail(&format!("the regex of {{{name}}} is invalid: {e}"))
                            })?;
                            regex.push_str("(?:");
                            regex.push_str(re);
                            regex.push(')');
                        }
                    }
                }
                '}' => return Err(fail("a } has no {")),
                c => regex.push_str(&regex_lite::escape(c.encode_utf8(&mut [0; 4]))),
            }
        }
        regex.push('$');
        let path = Regex::new(&regex).map_err(|e| fail(&format!("invalid: {e}")))?;
        let text = match &method {
            Some(m) => format!("{m} {path_text}", path_text = path_str(trimmed)),
            None => format!("* {}", path_str(trimmed)),
        };
        Ok(Self { text, method, path })
    }

    /// Whether a request for `method` on `path` (its decoded path, no query) is this route.
    pub fn matches(&self, method: &str, path: &str) -> bool {
        let method_ok = match self.method.as_deref() {
            None => true,
            Some(m) => m.eq_ignore_ascii_case(method) || (m == "GET" && method == "HEAD"),
        };
        method_ok && self.path.is_match(path)
    }

    pub fn as_str(&self) -> &str {
        &self.text
    }
}

fn path_str(pattern: &str) -> &str {
    match pattern.split_once(char::is_whitespace) {
        Some((_, p)) => p.trim(),
        None => pattern,
    }
}

/// The routes of an app in the framework's order: the first that matches is the route.
#[derive(Debug, Clone, Default)]
pub struct RouteTable {
    routes: Vec<Pattern>,
}

impl RouteTable {
    pub fn new(routes: Vec<Pattern>) -> Self {
        Self { routes }
    }

    /// The index of the route a request is, if any.
    pub fn find(&self, method: &str, path: &str) -> Option<usize> {
        self.routes.iter().position(|r| r.matches(method, path))
    }

    pub fn routes(&self) -> &[Pattern] {
        &self.routes
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    #[test]
    fn patterns_match_like_the_frameworks() {
        let archive = Pattern::parse(r"GET /blog/archive/{year:\d{4}}/{month}/").unwrap();
        assert!(archive.matches("GET", "/blog/archive/2024/5/"));
        assert!(archive.matches("HEAD", "/blog/archive/2024/5/"));
        assert!(!archive.matches("POST", "/blog/archive/2024/5/"));
        assert!(!archive.matches("GET", "/blog/archive/24/5/"));
        assert!(!archive.matches("GET", "/blog/archive/2024/5"));
        assert!(!archive.matches("GET", "/blog/archive/2024/5/x/"));
        let comment = Pattern::parse("post /comment/").unwrap();
        assert_eq!(comment.as_str(), "POST /comment/");
        assert!(comment.matches("POST", "/comment/"));
        assert!(!comment.matches("POST", "/comment"));
        let any = Pattern::parse("/static/{*rest}").unwrap();
        assert!(any.matches("GET", "/static/"));
        assert!(any.matches("DELETE", "/static/a/b.css"));
        let dots = Pattern::parse("GET /a.b/{id}").unwrap();
        assert!(dots.matches("GET", "/a.b/7"));
        assert!(!dots.matches("GET", "/axb/7"));
        assert!(Pattern::parse("GET /é/{x}").unwrap().matches("GET", "/é/ü"));
    }

    #[test]
    fn bad_patterns_are_refused_with_a_reason() {
        for (text, reason) in [
            ("FETCH /x", "method"),
            ("GET x", "start with /"),
            ("GET /{", "not closed"),
            ("GET /}", "has no {"),
            ("GET /{}", "name"),
            ("GET /{a}/{a}", "twice"),
            ("GET /{a:(}", "invalid"),
            ("GET /{a:x)(y}", "invalid"),
            ("GET /{*a:x}", "no regex"),
        ] {
            let e = Pattern::parse(text).unwrap_err();
            assert!(e.reason.contains(reason), "{text}: {}", e.reason);
        }
    }

    #[test]
    fn the_first_route_that_matches_wins() {
        let table = RouteTable::new(vec![
            Pattern::parse("GET /posts/new").unwrap(),
            Pattern::parse("GET /posts/{id}").unwrap(),
        ]);
        assert_eq!(table.find("GET", "/posts/new"), Some(0));
        assert_eq!(table.find("GET", "/posts/3"), Some(1));
        assert_eq!(table.find("GET", "/other"), None);
    }

    proptest! {
        #[test]
        fn parsing_never_panics(text in ".{0,60}") {
            let _ = Pattern::parse(&text);
        }

        #[test]
        fn a_literal_path_matches_itself_only(path in "/[a-z0-9._~+()*$-]{0,20}", other in "/[a-z0-9]{0,20}") {
            let p = Pattern::parse(&format!("GET {path}")).unwrap();
            prop_assert!(p.matches("GET", &path));
            prop_assert_eq!(p.matches("GET", &other), other == path);
        }
    }
}
