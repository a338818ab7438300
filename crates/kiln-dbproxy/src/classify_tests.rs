use super::*;
use proptest::prelude::*;

fn one(sql: &str) -> Kind {
    let k = classify(sql);
    assert_eq!(k.len(), 1, "{sql}: {k:?}");
    k[0]
}

#[test]
fn refusals_name_their_kind() {
    let cases = [
        ("SET search_path = foo", Refusal::Set),
        ("set statement_timeout to 5", Refusal::Set),
        ("SET SESSION work_mem = '1MB'", Refusal::Set),
        ("RESET ALL", Refusal::Set),
        ("reset work_mem", Refusal::Set),
        ("SELECT set_config('search_path', 'x', false)", Refusal::Set),
        ("SET ROLE admin", Refusal::Role),
        ("SET SESSION AUTHORIZATION bob", Refusal::Role),
        ("RESET ROLE", Refusal::Role),
        ("PREPARE q AS SELECT 1", Refusal::SqlPrepare),
        ("EXECUTE q", Refusal::SqlPrepare),
        ("LISTEN jobs", Refusal::Listen),
        ("SELECT pg_advisory_lock(1)", Refusal::AdvisoryLock),
        (
            "select pg_try_advisory_lock_shared(1, 2)",
            Refusal::AdvisoryLock,
        ),
        ("CREATE TEMP TABLE t (a int)", Refusal::TempTable),
        ("create temporary table t as select 1", Refusal::TempTable),
        (
            "CREATE TEMP TABLE t (a int) ON COMMIT DELETE ROWS",
            Refusal::TempTable,
        ),
        ("SELECT 1 INTO TEMP t", Refusal::TempTable),
        (
            "DECLARE c CURSOR WITH HOLD FOR SELECT 1",
            Refusal::HoldCursor,
        ),
        ("LOAD 'auto_explain'", Refusal::Load),
        ("DISCARD ALL", Refusal::Discard),
    ];
    for (sql, r) in cases {
        assert_eq!(one(sql), Kind::Refused(r), "{sql}");
    }
}

#[test]
fn allowed_statements() {
    let cases = [
        ("SET LOCAL statement_timeout = 5", Kind::SetLocal),
        ("SET TIME ZONE 'UTC'", Kind::TrackedSet),
        ("SET timezone TO 'UTC'", Kind::TrackedSet),
        ("SET \"TimeZone\" = 'UTC'", Kind::TrackedSet),
        ("SET datestyle = ISO", Kind::TrackedSet),
        ("SET NAMES 'UTF8'", Kind::TrackedSet),
        ("SET application_name = 'x'", Kind::TrackedSet),
        ("RESET TimeZone", Kind::TrackedSet),
        ("SET TRANSACTION ISOLATION LEVEL SERIALIZABLE", Kind::Other),
        ("SELECT set_config('search_path', 'x', true)", Kind::Other),
        ("SELECT set_config('TimeZone', 'UTC', false)", Kind::Other),
        ("SELECT pg_advisory_xact_lock(1)", Kind::Other),
        ("CREATE TEMP TABLE t (a int) ON COMMIT DROP", Kind::Other),
        ("DECLARE c CURSOR FOR SELECT 1", Kind::Other),
        ("BEGIN", Kind::Begin),
        (
            "start transaction isolation level repeatable read",
            Kind::Begin,
        ),
        ("COMMIT", Kind::Commit),
        ("END", Kind::Commit),
        ("ROLLBACK", Kind::Rollback),
        ("ROLLBACK TO SAVEPOINT a", Kind::Other),
        ("PREPARE TRANSACTION 'x'", Kind::PrepareTransaction),
        ("COMMIT PREPARED 'x'", Kind::Other),
        ("VACUUM t", Kind::NoTxnBlock),
        ("CREATE INDEX CONCURRENTLY i ON t (a)", Kind::NoTxnBlock),
        (
            "SELECT abalance FROM pgbench_accounts WHERE aid = 5",
            Kind::ReadOnly,
        ),
        ("SELECT count(*) FROM t", Kind::Other),
        ("SELECT * FROM t FOR UPDATE", Kind::Other),
        ("INSERT INTO t VALUES (1)", Kind::Other),
        ("UNLISTEN *", Kind::Other),
        ("DEALLOCATE ALL", Kind::Deallocate),
    ];
    for (sql, k) in cases {
        assert_eq!(one(sql), k, "{sql}");
    }
}

#[test]
fn deallocate_names_its_target() {
    assert_eq!(deallocate_target("DEALLOCATE ALL"), Some(None));
    assert_eq!(
        deallocate_target("deallocate prepare _pg3_1"),
        Some(Some("_pg3_1".into()))
    );
    assert_eq!(
        deallocate_target("DEALLOCATE \"S 1\""),
        Some(Some("S 1".into()))
    );
    assert_eq!(deallocate_target("DEALLOCATE a; SELECT 1"), None);
}

#[test]
fn quoting_hides_statements() {
    let hidden = [
        "SELECT 1 -- ; LISTEN x",
        "SELECT 1 /* outer /* inner ; LISTEN x */ still ; LISTEN y */",
        "SELECT '; LISTEN x'",
        "SELECT 'it''s; LISTEN x'",
        "SELECT E'\\'; LISTEN x'",
        "SELECT $$; LISTEN x$$",
        "SELECT $tag$ $$; LISTEN x $tag$",
        "SELECT \"; LISTEN x\" FROM t",
        "SELECT 'pg_advisory_lock(1)'",
    ];
    for sql in hidden {
        let k = classify(sql);
        assert_eq!(k.len(), 1, "{sql}: {k:?}");
        assert!(!matches!(k[0], Kind::Refused(_)), "{sql}: {k:?}");
    }
}

#[test]
fn several_statements_in_one_query() {
    assert_eq!(
        classify("BEGIN; INSERT INTO t VALUES (1);; COMMIT;"),
        vec![Kind::Begin, Kind::Other, Kind::Commit]
    );
    assert_eq!(
        classify("SELECT 1; SET search_path = x"),
        vec![Kind::ReadOnly, Kind::Refused(Refusal::Set)]
    );
    assert_eq!(classify("SELECT $1, $2"), vec![Kind::ReadOnly]);
    assert!(classify("  -- nothing\n ; /* */ ").is_empty());
}

/// Statements with their kinds, for the property tests.
fn known() -> Vec<(&'static str, Kind)> {
    vec![
        ("SELECT 1", Kind::ReadOnly),
        ("INSERT INTO t VALUES ('a;b')", Kind::Other),
        ("SET search_path = x", Kind::Refused(Refusal::Set)),
        ("LISTEN \"a;b\"", Kind::Refused(Refusal::Listen)),
        ("SELECT $q$;$q$", Kind::ReadOnly),
        ("BEGIN", Kind::Begin),
        ("COMMIT", Kind::Commit),
        ("SET LOCAL lock_timeout = '1s'", Kind::SetLocal),
        (
            "DO $$ BEGIN PERFORM pg_advisory_lock(1); END $$",
            Kind::Other,
        ),
    ]
}

fn filler() -> impl Strategy<Value = String> {
    prop_oneof![
        Just(" ".to_string()),
        Just("\n".to_string()),
        Just("-- a comment; LISTEN x\n".to_string()),
        Just("/* c /* nested; */ SET x = 1 */".to_string()),
        Just("\t".to_string()),
    ]
}

proptest! {
    #[test]
    fn arbitrary_text_never_panics(s in ".{0,200}") {
        let _ = classify(&s);
    }

    #[test]
    fn arbitrary_sql_chars_never_panic(s in "[a-zE$'\";/*\\-() \n1]{0,80}") {
        let _ = classify(&s);
    }

    #[test]
    fn joined_statements_keep_their_kinds(
        picks in proptest::collection::vec((0usize..9, filler(), filler()), 1..6)
    ) {
        let table = known();
        let mut sql = String::new();
        let mut expected = Vec::new();
        for (ix, before, after) in &picks {
            let (text, kind) = table[*ix];
            sql.push_str(before);
            sql.push_str(text);
            sql.push_str(after);
            sql.push(';');
            expected.push(kind);
        }
        prop_assert_eq!(classify(&sql), expected);
    }
}
