//! The statement classifier: what each statement of a query means to a transaction pooler.
//! Pure: a lexer that knows PostgreSQL's comments (`--`, nested `/* */`), strings (`''`,
//! `E''` with backslashes), dollar quotes and quoted identifiers, then rules over the words.
//! It sees statement text only, not the bodies of functions or `DO` blocks.

/// Parameters PostgreSQL reports to clients (`GUC_REPORT`) that the proxy tracks per client and
/// applies at checkout, so setting them is allowed.
pub const TRACKED_PARAMS: [&str; 6] = [
    "client_encoding",
    "DateStyle",
    "TimeZone",
    "IntervalStyle",
    "standard_conforming_strings",
    "application_name",
];

/// The canonical spelling of a tracked parameter, matched without regard to case.
pub fn tracked_param(name: &str) -> Option<&'static str> {
    TRACKED_PARAMS
        .iter()
        .copied()
        .find(|p| p.eq_ignore_ascii_case(name))
}

/// Why a statement is refused: it would leave state on a backend that outlives the transaction.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Refusal {
    Set,
    Role,
    SqlPrepare,
    Listen,
    AdvisoryLock,
    TempTable,
    HoldCursor,
    Load,
    Discard,
    /// Only for shadow clients: a statement a rollback cannot contain.
    ShadowUncontained,
}

impl Refusal {
    pub const ALL: [Refusal; 10] = [
        Refusal::Set,
        Refusal::Role,
        Refusal::SqlPrepare,
        Refusal::Listen,
        Refusal::AdvisoryLock,
        Refusal::TempTable,
        Refusal::HoldCursor,
        Refusal::Load,
        Refusal::Discard,
        Refusal::ShadowUncontained,
    ];

    /// The metrics label.
    pub fn label(self) -> &'static str {
        match self {
            Refusal::Set => "set",
            Refusal::Role => "role",
            Refusal::SqlPrepare => "sql_prepare",
            Refusal::Listen => "listen",
            Refusal::AdvisoryLock => "advisory_lock",
            Refusal::TempTable => "temp_table",
            Refusal::HoldCursor => "hold_cursor",
            Refusal::Load => "load",
            Refusal::Discard => "discard",
            Refusal::ShadowUncontained => "shadow_uncontained",
        }
    }

    /// The message sent with SQLSTATE 0A000: what was refused and the fix.
    pub fn message(self) -> &'static str {
        match self {
            Refusal::Set => "kiln's database proxy pools connections per transaction, so a session-level SET, RESET or set_config(…, false) would leak to other clients: use SET LOCAL (or set_config(…, true)) inside a transaction, or ALTER ROLE … SET for a default",
            Refusal::Role => "kiln's database proxy pools connections per transaction, so SET ROLE and SET SESSION AUTHORIZATION would leak to other clients: use SET LOCAL ROLE inside a transaction, or connect as that role",
            Refusal::SqlPrepare => "kiln's database proxy pools connections per transaction, so SQL-level PREPARE, EXECUTE and DEALLOCATE are not supported: use the protocol's prepared statements (your driver's prepare), which the proxy tracks",
            Refusal::Listen => "kiln's database proxy pools connections per transaction, so LISTEN cannot deliver notifications: connect to PostgreSQL directly to listen",
            Refusal::AdvisoryLock => "kiln's database proxy pools connections per transaction, so session-level advisory locks would outlive it: use pg_advisory_xact_lock (or pg_try_advisory_xact_lock) inside a transaction",
            Refusal::TempTable => "kiln's database proxy pools connections per transaction, so a temporary table would outlive it: create it with ON COMMIT DROP inside a transaction",
            Refusal::HoldCursor => "kiln's database proxy pools connections per transaction, so DECLARE … WITH HOLD would outlive it: declare the cursor without WITH HOLD inside a transaction (Django: DISABLE_SERVER_SIDE_CURSORS = True)",
            Refusal::Load => "kiln's database proxy pools connections per transaction, so LOAD would affect other clients: preload the library with session_preload_libraries on the server",
            Refusal::Discard => "kiln's database proxy pools connections per transaction and resets session state itself, so DISCARD is not supported: remove it (or your pool's reset query)",
            Refusal::ShadowUncontained => "this is a shadow run, whose writes kiln's database proxy rolls back: PREPARE TRANSACTION, statements that cannot run in a transaction block, and transaction control mixed with other statements in one query cannot be contained; send BEGIN, COMMIT and ROLLBACK as queries of their own",
        }
    }
}

/// What one statement means to the pooler.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Kind {
    Empty,
    Begin,
    Commit,
    Rollback,
    PrepareTransaction,
    /// `SET`/`RESET` of a tracked parameter: reported back by ParameterStatus.
    TrackedSet,
    SetLocal,
    /// Cannot run inside a transaction block (VACUUM, CREATE DATABASE, … CONCURRENTLY).
    NoTxnBlock,
    /// `DEALLOCATE name|ALL`: answered by the proxy for the client's protocol statements
    /// (psycopg sends it); refused mixed with other statements.
    Deallocate,
    /// Certainly writes nothing (a plain SELECT calling no function).
    ReadOnly,
    Refused(Refusal),
    Other,
}

impl Kind {
    pub fn is_txn_control(self) -> bool {
        matches!(
            self,
            Kind::Begin | Kind::Commit | Kind::Rollback | Kind::PrepareTransaction
        )
    }
}

#[derive(Debug, Clone, PartialEq)]
enum Tok {
    /// An unquoted word, lower-cased.
    Word(String),
    /// A quoted identifier, as written between the quotes.
    Ident(String),
    /// A string constant's contents.
    Str(String),
    Punct(char),
    Other,
}

/// Classifies each statement of a query string, in order; empty statements are dropped.
pub fn classify(sql: &str) -> Vec<Kind> {
    split(sql)
        .iter()
        .map(|toks| classify_tokens(toks))
        .filter(|k| *k != Kind::Empty)
        .collect()
}

/// What a lone `DEALLOCATE [PREPARE] name|ALL` drops: `Some(None)` for all.
pub fn deallocate_target(sql: &str) -> Option<Option<String>> {
    let stmts = split(sql);
    let [t] = stmts.as_slice() else { return None };
    if word(t.first()) != Some("deallocate") {
        return None;
    }
    let i = if word(t.get(1)) == Some("prepare") {
        2
    } else {
        1
    };
    match (t.get(i), t.len()) {
        (Some(Tok::Word(w)), n) if w == "all" && n == i + 1 => Some(None),
        (Some(Tok::Word(w)) | Some(Tok::Ident(w)), n) if n == i + 1 => Some(Some(w.clone())),
        _ => None,
    }
}

/// Whether a query runs `COPY … FROM` (the client streams data to the backend).
pub fn is_copy_from(sql: &str) -> bool {
    split(sql).iter().any(|t| {
        word(t.first()) == Some("copy")
            && t.iter().any(|x| matches!(x, Tok::Word(w) if w == "from"))
    })
}

/// Tokenises `sql` into statements separated by top-level semicolons.
fn split(sql: &str) -> Vec<Vec<Tok>> {
    let s: Vec<char> = sql.chars().collect();
    let mut stmts = vec![Vec::new()];
    let mut i = 0;
    let n = s.len();
    while i < n {
        let c = s[i];
        if c.is_whitespace() {
            i += 1;
        } else if c == '-' && s.get(i + 1) == Some(&'-') {
            while i < n && s[i] != '\n' {
                i += 1;
            }
        } else if c == '/' && s.get(i + 1) == Some(&'*') {
            let mut depth = 0usize;
            while i < n {
                if s[i] == '/' && s.get(i + 1) == Some(&'*') {
                    depth += 1;
                    i += 2;
                } else if s[i] == '*' && s.get(i + 1) == Some(&'/') {
                    depth -= 1;
                    i += 2;
                    if depth == 0 {
                        break;
                    }
                } else {
                    i += 1;
                }
            }
        } else if c == '\'' {
            let (v, next) = quoted(&s, i + 1, '\'', false);
            push(&mut stmts, Tok::Str(v));
            i = next;
        } else if (c == 'e' || c == 'E') && s.get(i + 1) == Some(&'\'') && !prev_is_word(&s, i) {
            let (v, next) = quoted(&s, i + 2, '\'', true);
            push(&mut stmts, Tok::Str(v));
            i = next;
        } else if c == '"' {
            let (v, next) = quoted(&s, i + 1, '"', false);
            push(&mut stmts, Tok::Ident(v));
            i = next;
        } else if c == '$' && !prev_is_word(&s, i) {
            // A dollar quote `$tag$…$tag$`, or a parameter `$1`.
            let mut j = i + 1;
            while j < n
                && (s[j].is_alphanumeric() || s[j] == '_')
                && !(j == i + 1 && s[j].is_ascii_digit())
            {
                j += 1;
            }
            if j < n && s[j] == '$' {
                let tag: String = s[i..=j].iter().collect();
                let tag: Vec<char> = tag.chars().collect();
                let body_start = j + 1;
                let mut k = body_start;
                let end = loop {
                    if k + tag.len() > n {
                        break None;
                    }
                    if s[k..k + tag.len()] == tag[..] {
                        break Some(k);
                    }
                    k += 1;
                };
                match end {
                    Some(e) => {
                        push(&mut stmts, Tok::Str(s[body_start..e].iter().collect()));
                        i = e + tag.len();
                    }
                    None => {
                        push(&mut stmts, Tok::Str(s[body_start..].iter().collect()));
                        i = n;
                    }
                }
            } else {
                i += 1;
                while i < n && s[i].is_ascii_digit() {
                    i += 1;
                }
                push(&mut stmts, Tok::Other);
            }
        } else if c.is_alphabetic() || c == '_' {
            let start = i;
            while i < n && (s[i].is_alphanumeric() || s[i] == '_' || s[i] == '$') {
                i += 1;
            }
            let w: String = s[start..i].iter().collect::<String>().to_lowercase();
            push(&mut stmts, Tok::Word(w));
        } else if c.is_ascii_digit() {
            while i < n && (s[i].is_ascii_alphanumeric() || s[i] == '.') {
                i += 1;
            }
            push(&mut stmts, Tok::Other);
        } else if c == ';' {
            stmts.push(Vec::new());
            i += 1;
        } else {
            push(&mut stmts, Tok::Punct(c));
            i += 1;
        }
    }
    stmts.retain(|t| !t.is_empty());
    stmts
}

fn prev_is_word(s: &[char], i: usize) -> bool {
    i > 0 && (s[i - 1].is_alphanumeric() || s[i - 1] == '_' || s[i - 1] == '$')
}

fn push(stmts: &mut [Vec<Tok>], t: Tok) {
    if let Some(last) = stmts.last_mut() {
        last.push(t);
    }
}

/// Reads a quoted token starting after its opening quote; a doubled quote is the quote itself.
fn quoted(s: &[char], mut i: usize, q: char, backslash: bool) -> (String, usize) {
    let mut v = String::new();
    while i < s.len() {
        let c = s[i];
        if backslash && c == '\\' {
            if let Some(&d) = s.get(i + 1) {
                v.push(d);
            }
            i += 2;
        } else if c == q {
            if s.get(i + 1) == Some(&q) {
                v.push(q);
                i += 2;
            } else {
                return (v, i + 1);
            }
        } else {
            v.push(c);
            i += 1;
        }
    }
    (v, s.len())
}

fn word(t: Option<&Tok>) -> Option<&str> {
    match t {
        Some(Tok::Word(w)) => Some(w),
        _ => None,
    }
}

/// A parameter name: a word or a quoted identifier (the latter keeps its case).
fn name(t: Option<&Tok>) -> Option<&str> {
    match t {
        Some(Tok::Word(w)) | Some(Tok::Ident(w)) => Some(w),
        _ => None,
    }
}

const ADVISORY_SESSION_LOCKS: [&str; 4] = [
    "pg_advisory_lock",
    "pg_advisory_lock_shared",
    "pg_try_advisory_lock",
    "pg_try_advisory_lock_shared",
];

fn classify_tokens(t: &[Tok]) -> Kind {
    if t.is_empty() {
        return Kind::Empty;
    }
    if let Some(r) = function_refusal(t) {
        return Kind::Refused(r);
    }
    let w = |i: usize| word(t.get(i));
    let has = |x: &str| t.iter().any(|tok| matches!(tok, Tok::Word(v) if v == x));
    let Some(first) = w(0) else {
        // `(SELECT …)`, `WITH` handled below; anything else may write.
        return Kind::Other;
    };
    match first {
        "begin" | "start" => Kind::Begin,
        "commit" | "end" if w(1) == Some("prepared") => Kind::Other,
        "commit" | "end" => Kind::Commit,
        "rollback" | "abort" if matches!(w(1), Some("to") | Some("prepared")) => Kind::Other,
        "rollback" | "abort" => Kind::Rollback,
        "prepare" if w(1) == Some("transaction") => Kind::PrepareTransaction,
        "deallocate" => Kind::Deallocate,
        "prepare" | "execute" => Kind::Refused(Refusal::SqlPrepare),
        "set" => classify_set(t),
        "reset" => match name(t.get(1)) {
            Some("role") => Kind::Refused(Refusal::Role),
            Some("session") if w(2) == Some("authorization") => Kind::Refused(Refusal::Role),
            Some(n) if tracked_param(n).is_some() => Kind::TrackedSet,
            _ => Kind::Refused(Refusal::Set),
        },
        "listen" => Kind::Refused(Refusal::Listen),
        "load" => Kind::Refused(Refusal::Load),
        "discard" => Kind::Refused(Refusal::Discard),
        "declare" => {
            if t.windows(2)
                .any(|p| word(p.first()) == Some("with") && word(p.get(1)) == Some("hold"))
            {
                Kind::Refused(Refusal::HoldCursor)
            } else {
                Kind::Other
            }
        }
        "create" => classify_create(t),
        "vacuum" => Kind::NoTxnBlock,
        "alter" if w(1) == Some("system") => Kind::NoTxnBlock,
        "drop" if matches!(w(1), Some("database") | Some("tablespace")) => Kind::NoTxnBlock,
        "drop" | "reindex" if has("concurrently") => Kind::NoTxnBlock,
        "select" | "values" | "show" | "table" => {
            if into_temp(t) {
                Kind::Refused(Refusal::TempTable)
            } else if first != "show" && (has("into") || has("for") || t.contains(&Tok::Punct('(')))
            {
                Kind::Other
            } else {
                Kind::ReadOnly
            }
        }
        _ => {
            if into_temp(t) {
                Kind::Refused(Refusal::TempTable)
            } else {
                Kind::Other
            }
        }
    }
}

fn classify_set(t: &[Tok]) -> Kind {
    let mut i = 1;
    match word(t.get(1)) {
        Some("local") => return Kind::SetLocal,
        Some("session") => match word(t.get(2)) {
            Some("authorization") => return Kind::Refused(Refusal::Role),
            Some("characteristics") => return Kind::Refused(Refusal::Set),
            _ => i = 2,
        },
        Some("role") => return Kind::Refused(Refusal::Role),
        Some("transaction") | Some("constraints") => return Kind::Other,
        _ => {}
    }
    match name(t.get(i)) {
        Some("time") if word(t.get(i + 1)) == Some("zone") => Kind::TrackedSet,
        Some("names") => Kind::TrackedSet,
        Some("role") => Kind::Refused(Refusal::Role),
        Some("session") if word(t.get(i + 1)) == Some("authorization") => {
            Kind::Refused(Refusal::Role)
        }
        Some(n) if tracked_param(n).is_some() && t.get(i + 1) != Some(&Tok::Punct('.')) => {
            Kind::TrackedSet
        }
        _ => Kind::Refused(Refusal::Set),
    }
}

fn classify_create(t: &[Tok]) -> Kind {
    let words: Vec<&str> = t.iter().take(8).filter_map(|x| word(Some(x))).collect();
    let before_object = |obj: &str| words.iter().position(|w| *w == obj);
    if matches!(words.get(1), Some(&"database") | Some(&"tablespace")) {
        return Kind::NoTxnBlock;
    }
    if let Some(ix) = before_object("index") {
        if words.get(ix + 1) == Some(&"concurrently") {
            return Kind::NoTxnBlock;
        }
    }
    let temp = words
        .iter()
        .take_while(|w| !matches!(**w, "table" | "view" | "sequence"))
        .any(|w| matches!(*w, "temp" | "temporary"));
    if !temp {
        return Kind::Other;
    }
    let on_commit_drop = t.windows(3).any(|p| {
        word(p.first()) == Some("on")
            && word(p.get(1)) == Some("commit")
            && word(p.get(2)) == Some("drop")
    });
    let is_table = words.contains(&"table");
    if is_table && on_commit_drop {
        Kind::Other
    } else {
        Kind::Refused(Refusal::TempTable)
    }
}

/// `SELECT … INTO TEMP t` creates a temporary table too.
fn into_temp(t: &[Tok]) -> bool {
    t.windows(2).any(|p| {
        word(p.first()) == Some("into")
            && matches!(word(p.get(1)), Some("temp") | Some("temporary"))
    })
}

/// Function calls that create session state anywhere in a statement.
fn function_refusal(t: &[Tok]) -> Option<Refusal> {
    for (i, tok) in t.iter().enumerate() {
        let Tok::Word(f) = tok else { continue };
        if t.get(i + 1) != Some(&Tok::Punct('(')) {
            continue;
        }
        if ADVISORY_SESSION_LOCKS.contains(&f.as_str()) {
            return Some(Refusal::AdvisoryLock);
        }
        if f == "set_config" {
            let args = call_args(&t[i + 2..]);
            let tracked = matches!(args.first().map(|a| a.as_slice()), Some([Tok::Str(n)]) if tracked_param(n).is_some());
            let is_local = matches!(args.get(2).map(|a| a.as_slice()),
                Some([Tok::Word(w)]) if w == "true")
                || matches!(args.get(2).map(|a| a.as_slice()),
                Some([Tok::Str(s)]) if matches!(s.to_lowercase().as_str(), "t" | "true" | "on" | "yes" | "1"));
            if !is_local && !tracked {
                return Some(Refusal::Set);
            }
        }
    }
    None
}

/// The top-level comma-separated arguments of a call, from after its `(`.
fn call_args(t: &[Tok]) -> Vec<Vec<Tok>> {
    let mut args = vec![Vec::new()];
    let mut depth = 0usize;
    for tok in t {
        match tok {
            Tok::Punct('(') => depth += 1,
            Tok::Punct(')') if depth == 0 => break,
            Tok::Punct(')') => depth -= 1,
            Tok::Punct(',') if depth == 0 => {
                args.push(Vec::new());
                continue;
            }
            _ => {}
        }
        if let Some(a) = args.last_mut() {
            a.push(tok.clone());
        }
    }
    args
}

#[cfg(test)]
#[path = "classify_tests.rs"]
mod tests;
