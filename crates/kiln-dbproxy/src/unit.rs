//! What a unit of client work (a simple Query, or extended-protocol messages up to Sync)
//! parses and runs, read from its messages.

use std::collections::HashMap;

use crate::classify::{classify, Kind};
use crate::prepared::Statements;
use crate::wire::{self, Message, WireError};

/// The statement kinds a unit parses and runs; statements and portals it names but does not
/// define are looked up in the client's.
pub(crate) fn kinds(
    unit: &[Message],
    statements: &Statements,
    known_portals: &HashMap<String, Kind>,
) -> Result<(Vec<Kind>, Vec<Kind>), WireError> {
    let (mut parsed, mut executed) = (Vec::new(), Vec::new());
    let mut stmts: HashMap<String, Kind> = HashMap::new();
    let mut portals: HashMap<String, Kind> = HashMap::new();
    for m in unit {
        match m.tag {
            b'Q' => {
                let mut cur = &m.body[..];
                let k = classify(&wire::take_cstr(&mut cur)?);
                parsed.extend_from_slice(&k);
                executed.extend(k);
            }
            b'F' => executed.push(Kind::Other),
            b'P' => {
                let p = wire::decode_parse(&m.body)?;
                let k = classify(&p.sql);
                let one = single(&k);
                parsed.extend(k);
                stmts.insert(p.name, one);
            }
            b'B' => {
                let (portal, stmt, _) = wire::decode_bind_head(&m.body)?;
                let k = stmts
                    .get(&stmt)
                    .copied()
                    .or_else(|| statements.get(&stmt).map(|s| s.kind))
                    .unwrap_or(Kind::Other);
                portals.insert(portal, k);
            }
            // Checked here so that a malformed one is refused before a backend is taken.
            b'D' | b'C' => {
                wire::decode_target(&m.body)?;
            }
            b'E' => {
                let portal = wire::decode_execute(&m.body)?;
                let k = portals
                    .get(&portal)
                    .copied()
                    .or_else(|| known_portals.get(&portal).copied())
                    .unwrap_or(Kind::Other);
                executed.push(k);
            }
            _ => {}
        }
    }
    Ok((parsed, executed))
}

/// Answers a unit that needs no backend (closing statements, a bare Sync), or None.
pub(crate) fn answer_without_backend(
    unit: &[Message],
    statements: &mut Statements,
) -> Option<Vec<Message>> {
    let mut answers = Vec::new();
    for m in unit {
        match m.tag {
            b'C' => match wire::decode_target(&m.body) {
                Ok((b'S', name)) if !name.is_empty() => {
                    answers.push(Message::new(b'3', Vec::new()))
                }
                _ => return None,
            },
            b'S' => answers.push(wire::ready_for_query(b'I')),
            b'H' => {}
            _ => return None,
        }
    }
    for m in unit {
        if let Ok((b'S', name)) = wire::decode_target(&m.body) {
            if m.tag == b'C' {
                statements.remove(&name);
            }
        }
    }
    Some(answers)
}

/// Whether a unit runs COPY … FROM (the client then sends data before its ReadyForQuery).
pub(crate) fn has_copy_from(unit: &[Message]) -> bool {
    unit.iter().any(|m| {
        let sql = match m.tag {
            b'Q' => wire::take_cstr(&mut &m.body[..]).ok(),
            b'P' => wire::decode_parse(&m.body).ok().map(|p| p.sql),
            _ => None,
        };
        // The lexer only runs on text that mentions COPY at all.
        sql.is_some_and(|s| {
            s.as_bytes()
                .windows(4)
                .any(|w| w.eq_ignore_ascii_case(b"copy"))
                && crate::classify::is_copy_from(&s)
        })
    })
}

/// The kind of a prepared statement (the protocol allows one statement per Parse).
pub(crate) fn single(kinds: &[Kind]) -> Kind {
    match kinds {
        [] => Kind::Empty,
        [k] => *k,
        _ => Kind::Other,
    }
}
