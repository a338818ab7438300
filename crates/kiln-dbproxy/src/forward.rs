//! Client messages on their way to the backend: protocol statements renamed to their
//! server-side names (and parsed again where the backend lacks them), a shadow client's COMMIT
//! turned into ROLLBACK, and the answer each message is owed queued.

use std::collections::{HashMap, HashSet};
use std::sync::atomic::{AtomicU64, Ordering};

use bytes::BytesMut;

use crate::classify::{classify, Kind};
use crate::prepared::Statements;
use crate::responses::{Expect, Origin, Responses};
use crate::wire::{self, Message, WireError};

/// What forwarding a client's messages needs of its session and its backend.
pub(crate) struct Forwarder<'a> {
    pub shadow: bool,
    pub statements: &'a mut Statements,
    /// The client's named portals and what they run.
    pub portals: &'a mut HashMap<String, Kind>,
    /// The statements prepared on the backend, by server-side name.
    pub prepared: &'a mut HashSet<String>,
    pub responses: &'a mut Responses,
    pub reparses: &'a AtomicU64,
    /// Extended-protocol messages were sent without their Sync yet.
    pub in_batch: &'a mut bool,
    /// The batch parsed the unnamed statement.
    pub unnamed_parse: &'a mut bool,
}

impl Forwarder<'_> {
    /// Makes sure a client statement is prepared on the current backend.
    fn ensure_prepared(&mut self, name: &str, out: &mut BytesMut) -> Option<String> {
        let st = self.statements.get(name)?;
        let server = st.server_name.clone();
        if !self.prepared.contains(&server) {
            wire::parse(&server, &st.sql, &st.param_types).encode(out);
            self.prepared.insert(server.clone());
            self.reparses.fetch_add(1, Ordering::Relaxed);
            self.responses
                .expect(Expect::Parse(Origin::Swallow, Some(server.clone())));
        }
        Some(server)
    }

    pub fn forward(&mut self, m: Message, out: &mut BytesMut) -> Result<(), WireError> {
        let shadow = self.shadow;
        match m.tag {
            b'Q' => {
                // A simple query ends an unsynced batch: PostgreSQL answers it with
                // ReadyForQuery (asyncpg prepares with Flush, then sends COPY as a query).
                *self.in_batch = false;
                let mut cur = &m.body[..];
                let sql = wire::take_cstr(&mut cur)?;
                if shadow && classify(&sql) == [Kind::Commit] {
                    wire::query("ROLLBACK").encode(out);
                } else {
                    m.encode(out);
                }
                self.responses.expect(Expect::Query(Origin::Client));
            }
            b'F' => {
                *self.in_batch = false;
                m.encode(out);
                self.responses.expect(Expect::Query(Origin::Client));
            }
            b'P' => {
                *self.in_batch = true;
                let mut p = wire::decode_parse(&m.body)?;
                let kinds = classify(&p.sql);
                if shadow && kinds == [Kind::Commit] {
                    p.sql = "ROLLBACK".into();
                }
                if p.name.is_empty() {
                    *self.unnamed_parse = true;
                    wire::parse("", &p.sql, &p.param_types).encode(out);
                    self.responses.expect(Expect::Parse(Origin::Client, None));
                    return Ok(());
                }
                let kind = crate::unit::single(&kinds);
                let server =
                    self.statements
                        .define(p.name, p.sql.clone(), p.param_types.clone(), kind);
                if self.prepared.contains(&server) {
                    self.responses
                        .expect(Expect::Synthetic(Message::new(b'1', Vec::new())));
                } else {
                    self.prepared.insert(server.clone());
                    wire::parse(&server, &p.sql, &p.param_types).encode(out);
                    self.responses
                        .expect(Expect::Parse(Origin::Client, Some(server)));
                }
            }
            b'B' => {
                *self.in_batch = true;
                let (portal, stmt, rest) = wire::decode_bind_head(&m.body)?;
                let kind = self.statements.get(&stmt).map_or(Kind::Other, |s| s.kind);
                self.portals.insert(portal.clone(), kind);
                match self.ensure_prepared(&stmt, out) {
                    Some(server) => wire::rebind(&m.body, rest, &portal, &server).encode(out),
                    None => m.encode(out),
                }
                self.responses.expect(Expect::Bind);
            }
            b'D' | b'C' => {
                *self.in_batch = true;
                let (kind, name) = wire::decode_target(&m.body)?;
                if kind == b'S' && !name.is_empty() {
                    if m.tag == b'C' {
                        // The statement stays on the backends, shared by every client
                        // that prepares the same text.
                        self.statements.remove(&name);
                        self.responses
                            .expect(Expect::Synthetic(Message::new(b'3', Vec::new())));
                        return Ok(());
                    }
                    match self.ensure_prepared(&name, out) {
                        Some(server) => wire::target(b'D', b'S', &server).encode(out),
                        None => m.encode(out),
                    }
                } else {
                    if m.tag == b'C' {
                        self.portals.remove(&name);
                    }
                    m.encode(out);
                }
                self.responses.expect(if m.tag == b'D' {
                    Expect::Describe
                } else {
                    Expect::Close
                });
            }
            b'E' => {
                *self.in_batch = true;
                m.encode(out);
                self.responses.expect(Expect::Execute);
            }
            b'H' => {
                *self.in_batch = true;
                m.encode(out);
            }
            b'S' => {
                *self.in_batch = false;
                m.encode(out);
                self.responses.expect(Expect::Sync);
            }
            _ => m.encode(out),
        }
        Ok(())
    }
}
