//! A client's protocol-level prepared statements, and the names they have on backends.

use std::collections::HashMap;

use sha2::{Digest, Sha256};

use crate::classify::Kind;

/// A protocol-level prepared statement of the client.
pub(crate) struct Statement {
    pub server_name: String,
    pub sql: String,
    pub param_types: Vec<u32>,
    pub kind: Kind,
}

/// The client's statements by the names it gave them.
#[derive(Default)]
pub(crate) struct Statements {
    by_name: HashMap<String, Statement>,
}

impl Statements {
    /// Defines (or redefines) a statement; returns its server-side name.
    pub fn define(
        &mut self,
        name: String,
        sql: String,
        param_types: Vec<u32>,
        kind: Kind,
    ) -> String {
        let server_name = server_name(&sql, &param_types);
        self.by_name.insert(
            name,
            Statement {
                server_name: server_name.clone(),
                sql,
                param_types,
                kind,
            },
        );
        server_name
    }

    pub fn get(&self, name: &str) -> Option<&Statement> {
        self.by_name.get(name)
    }

    pub fn remove(&mut self, name: &str) -> Option<Statement> {
        self.by_name.remove(name)
    }

    pub fn clear(&mut self) {
        self.by_name.clear();
    }

    /// Carries out a lone `DEALLOCATE name|ALL`: the statements stay prepared on the backends,
    /// shared with other clients. Returns the command tag, or None if `sql` is not one (or
    /// names no statement of the client's: PostgreSQL then answers the error).
    pub fn deallocate(&mut self, sql: &str) -> Option<&'static str> {
        match crate::classify::deallocate_target(sql)? {
            None => {
                self.clear();
                Some("DEALLOCATE ALL")
            }
            Some(name) => {
                self.remove(&name)?;
                Some("DEALLOCATE")
            }
        }
    }

    /// Forgets the statements a failed Parse would have defined.
    pub fn forget_server_name(&mut self, server: &str) {
        self.by_name.retain(|_, s| s.server_name != server);
    }
}

/// A server-side statement name shared by every client preparing the same text and types,
/// so a backend prepares each statement once.
pub(crate) fn server_name(sql: &str, types: &[u32]) -> String {
    let mut h = Sha256::new();
    h.update(sql.as_bytes());
    for t in types {
        h.update(t.to_be_bytes());
    }
    let d = h.finalize();
    let hex: String = d.iter().take(12).map(|b| format!("{b:02x}")).collect();
    format!("kiln_{hex}")
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn same_text_and_types_share_a_server_name() {
        let mut a = Statements::default();
        let mut b = Statements::default();
        let x = a.define("s1".into(), "SELECT $1".into(), vec![23], Kind::ReadOnly);
        let y = b.define("other".into(), "SELECT $1".into(), vec![23], Kind::ReadOnly);
        assert_eq!(x, y);
        assert_ne!(x, server_name("SELECT $1", &[25]));
        assert!(x.len() < 64, "PostgreSQL truncates names at 63 bytes");
    }
}
