//! What the proxy does around one unit of client work (a simple Query, or extended-protocol
//! messages up to Sync): refuse it, wrap it, roll it back, check its commit. Pure over the
//! statement kinds and the backend's transaction status, so it is tested without PostgreSQL.

use crate::classify::{Kind, Refusal};

/// A query the proxy adds around a unit; its answers never reach the client.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Injected {
    /// Run and drop the answer.
    Swallow(String),
    /// `SELECT pg_current_xact_id_if_assigned()`, kept for the ledger.
    CaptureXid,
    /// The COMMIT of a wrapped implicit transaction; recorded in the ledger.
    LedgerCommit,
}

pub const CAPTURE_XID_SQL: &str = "SELECT pg_current_xact_id_if_assigned()";

#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Plan {
    pub pre: Vec<Injected>,
    pub post: Vec<Injected>,
    /// The status the client sees in the unit's ReadyForQuery.
    pub rfq_override: Option<u8>,
    /// Shadow: the client's COMMIT runs as ROLLBACK and is answered `COMMIT`.
    pub commit_as_rollback: bool,
    /// The client's own COMMIT goes to the ledger (its xid was captured just before).
    pub ledger_commit: bool,
    /// The unit may write and cannot be checked: the ledger counts it as a write.
    pub unchecked: bool,
    pub shadow_rollback: bool,
}

/// Timeouts set in each shadow transaction, in milliseconds.
#[derive(Debug, Clone, Copy)]
pub struct ShadowTimeouts {
    pub lock_ms: u128,
    pub statement_ms: u128,
}

impl ShadowTimeouts {
    fn set_local(self) -> String {
        // The idle timeout bounds how long a shadow's locks outlive a client that stopped
        // talking mid-transaction (PostgreSQL then ends that backend).
        format!(
            "SET LOCAL lock_timeout = '{0}ms'; SET LOCAL statement_timeout = '{1}ms'; \
             SET LOCAL idle_in_transaction_session_timeout = '{1}ms'",
            self.lock_ms, self.statement_ms
        )
    }
}

/// A refusal for a unit, before anything of it runs. `kinds` are the statements the unit
/// parses or runs.
pub fn refusal(shadow: bool, kinds: &[Kind]) -> Option<Refusal> {
    if let Some(Kind::Refused(r)) = kinds.iter().find(|k| matches!(k, Kind::Refused(_))) {
        return Some(*r);
    }
    if kinds.len() > 1 && kinds.contains(&Kind::Deallocate) {
        return Some(Refusal::SqlPrepare);
    }
    if shadow {
        let uncontained = kinds
            .iter()
            .any(|k| matches!(k, Kind::PrepareTransaction | Kind::NoTxnBlock));
        let mixed = kinds.len() > 1 && kinds.iter().any(|k| k.is_txn_control());
        if uncontained || mixed {
            return Some(Refusal::ShadowUncontained);
        }
    }
    None
}

/// The plan for a unit that runs `executed` statements on a backend whose status is `status`.
pub fn plan(shadow: bool, status: u8, executed: &[Kind], timeouts: ShadowTimeouts) -> Plan {
    let mut p = Plan::default();
    let lone = |k: Kind| executed.len() == 1 && executed[0] == k;
    if executed.is_empty() {
        return p;
    }
    if shadow {
        p.commit_as_rollback = executed.contains(&Kind::Commit);
        if status == b'I' {
            if lone(Kind::Begin) {
                p.post.push(Injected::Swallow(timeouts.set_local()));
            } else {
                p.pre.push(Injected::Swallow(format!(
                    "BEGIN; {}",
                    timeouts.set_local()
                )));
                p.rfq_override = Some(b'I');
                p.post.push(Injected::Swallow("ROLLBACK".into()));
                p.shadow_rollback = true;
            }
        } else if lone(Kind::Commit) {
            p.shadow_rollback = true;
        }
        return p;
    }
    let may_write = executed
        .iter()
        .any(|k| matches!(k, Kind::Other | Kind::NoTxnBlock | Kind::PrepareTransaction));
    let txn_control = executed.iter().filter(|k| k.is_txn_control()).count();
    // `BEGIN; …` leaves the transaction open: its COMMIT, later, is checked.
    let opens_only = executed[0] == Kind::Begin && txn_control == 1;
    match status {
        b'I' if txn_control == 0 && may_write => {
            if executed.contains(&Kind::NoTxnBlock) {
                p.unchecked = true;
            } else {
                p.pre.push(Injected::Swallow("BEGIN".into()));
                p.rfq_override = Some(b'I');
                p.post.push(Injected::CaptureXid);
                p.post.push(Injected::LedgerCommit);
            }
        }
        b'T' if lone(Kind::Commit) => {
            p.pre.push(Injected::CaptureXid);
            p.ledger_commit = true;
        }
        // Transaction control among other statements in one query (`INSERT …; COMMIT`,
        // `ROLLBACK; INSERT …`): what committed cannot be told apart.
        _ if txn_control > 0 && may_write && !opens_only => p.unchecked = true,
        _ => {}
    }
    p
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::classify::classify;
    use proptest::prelude::*;

    fn any_kind() -> impl Strategy<Value = Kind> {
        prop_oneof![
            Just(Kind::Begin),
            Just(Kind::Commit),
            Just(Kind::Rollback),
            Just(Kind::PrepareTransaction),
            Just(Kind::TrackedSet),
            Just(Kind::SetLocal),
            Just(Kind::NoTxnBlock),
            Just(Kind::ReadOnly),
            Just(Kind::Deallocate),
            Just(Kind::Other),
        ]
    }

    proptest! {
        /// Whatever a shadow client runs, a unit either is refused, or ends in a rollback the
        /// proxy adds, or runs inside the client's own transaction, whose COMMIT rolls back.
        #[test]
        fn shadow_units_never_commit(kinds in proptest::collection::vec(any_kind(), 0..5),
                                     status in prop_oneof![Just(b'I'), Just(b'T'), Just(b'E')]) {
            if refusal(true, &kinds).is_some() || kinds.is_empty() {
                return Ok(());
            }
            let p = plan(true, status, &kinds, T);
            prop_assert!(!p.pre.iter().chain(&p.post).any(|i| matches!(i, Injected::LedgerCommit | Injected::CaptureXid)));
            if status == b'I' && kinds != [Kind::Begin] {
                prop_assert_eq!(p.post.last(), Some(&Injected::Swallow("ROLLBACK".into())));
                prop_assert_eq!(p.rfq_override, Some(b'I'));
            }
            if kinds.contains(&Kind::Commit) {
                prop_assert!(p.commit_as_rollback);
            }
        }

        /// For other clients, a unit that may write either has its commit checked or is
        /// counted as unchecked, unless it stays inside an open transaction.
        #[test]
        fn writes_are_checked_or_counted(kinds in proptest::collection::vec(any_kind(), 1..5),
                                         status in prop_oneof![Just(b'I'), Just(b'T')]) {
            let p = plan(false, status, &kinds, T);
            prop_assert!(!p.pre.iter().chain(&p.post).any(|i| matches!(i, Injected::Swallow(s) if s.contains("ROLLBACK"))));
            let may_write = kinds.iter().any(|k| matches!(k, Kind::Other | Kind::NoTxnBlock | Kind::PrepareTransaction));
            let control = kinds.iter().filter(|k| k.is_txn_control()).count();
            let opens_only = kinds[0] == Kind::Begin && control == 1;
            let commits_now = may_write && !opens_only && (status == b'I' || control > 0);
            if kinds == [Kind::Commit] && status == b'T' {
                prop_assert!(p.ledger_commit);
            }
            if commits_now {
                let checked = p.ledger_commit || p.post.contains(&Injected::LedgerCommit);
                prop_assert!(checked || p.unchecked, "{:?} at {}: {:?}", kinds, status as char, p);
            }
        }
    }

    const T: ShadowTimeouts = ShadowTimeouts {
        lock_ms: 1000,
        statement_ms: 10000,
    };

    #[test]
    fn autocommit_write_is_wrapped_for_the_ledger() {
        let p = plan(false, b'I', &classify("INSERT INTO t VALUES (1)"), T);
        assert_eq!(p.pre, vec![Injected::Swallow("BEGIN".into())]);
        assert_eq!(p.post, vec![Injected::CaptureXid, Injected::LedgerCommit]);
        assert_eq!(p.rfq_override, Some(b'I'));
    }

    #[test]
    fn plain_select_is_not_wrapped() {
        assert_eq!(
            plan(false, b'I', &classify("SELECT a FROM t WHERE id = 1"), T),
            Plan::default()
        );
    }

    #[test]
    fn explicit_commit_captures_the_xid_first() {
        let p = plan(false, b'T', &[Kind::Commit], T);
        assert_eq!(p.pre, vec![Injected::CaptureXid]);
        assert!(p.ledger_commit);
    }

    #[test]
    fn commit_mixed_with_writes_is_unchecked() {
        assert!(
            plan(
                false,
                b'I',
                &classify("BEGIN; INSERT INTO t VALUES (1); COMMIT"),
                T
            )
            .unchecked
        );
        assert!(
            plan(
                false,
                b'T',
                &classify("INSERT INTO t VALUES (1); COMMIT"),
                T
            )
            .unchecked
        );
        assert!(plan(false, b'I', &classify("VACUUM t"), T).unchecked);
        assert!(
            plan(
                false,
                b'T',
                &classify("ROLLBACK; INSERT INTO t VALUES (1)"),
                T
            )
            .unchecked
        );
        assert!(!plan(false, b'I', &classify("BEGIN; INSERT INTO t VALUES (1)"), T).unchecked);
    }

    #[test]
    fn shadow_wraps_implicit_transactions_in_a_rollback() {
        let p = plan(true, b'I', &classify("INSERT INTO t VALUES (1)"), T);
        assert!(
            matches!(&p.pre[0], Injected::Swallow(s) if s.starts_with("BEGIN; SET LOCAL lock_timeout = '1000ms'"))
        );
        assert_eq!(p.post, vec![Injected::Swallow("ROLLBACK".into())]);
        assert_eq!(p.rfq_override, Some(b'I'));
    }

    #[test]
    fn shadow_begin_gets_its_timeouts_and_commit_rolls_back() {
        let p = plan(true, b'I', &[Kind::Begin], T);
        assert!(matches!(&p.post[0], Injected::Swallow(s) if s.starts_with("SET LOCAL")));
        assert!(p.pre.is_empty());
        let p = plan(true, b'T', &[Kind::Commit], T);
        assert!(p.commit_as_rollback && p.shadow_rollback);
    }

    #[test]
    fn shadow_refuses_what_a_rollback_cannot_contain() {
        assert_eq!(
            refusal(true, &classify("PREPARE TRANSACTION 'x'")),
            Some(Refusal::ShadowUncontained)
        );
        assert_eq!(
            refusal(true, &classify("BEGIN; INSERT INTO t VALUES (1)")),
            Some(Refusal::ShadowUncontained)
        );
        assert_eq!(
            refusal(true, &classify("VACUUM")),
            Some(Refusal::ShadowUncontained)
        );
        assert_eq!(
            refusal(false, &classify("BEGIN; INSERT INTO t VALUES (1)")),
            None
        );
        assert_eq!(refusal(false, &classify("LISTEN x")), Some(Refusal::Listen));
    }
}
