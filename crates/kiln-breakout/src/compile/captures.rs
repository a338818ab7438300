//! What each function's closures capture: the variables that must live in heap cells (so a
//! closure and its maker share them), and each closure function's environment layout.

use std::collections::{HashMap, HashSet};

use crate::trace::{Bind, Capture, Expr, Node, Trace};

/// The environment of each function that is made as a closure: its captured names in order
/// (the closure expression's), by function id.
pub fn environments(trace: &Trace) -> HashMap<String, Vec<String>> {
    let mut out = HashMap::new();
    for handler in &trace.handlers {
        walk_nodes(&handler.body, true, &mut |e| {
            if let Expr::Closure {
                function, captures, ..
            } = e
            {
                out.entry(function.clone()).or_insert_with(|| {
                    captures
                        .iter()
                        .map(|c| match c {
                            Capture::Ref { name } | Capture::From { name } => name.clone(),
                        })
                        .collect()
                });
            }
        });
    }
    out
}

/// The variables of one function body (not of the functions inlined in it) that a closure
/// made in it captures.
pub fn captured(body: &[Node]) -> HashSet<String> {
    let mut out = HashSet::new();
    walk_nodes(body, false, &mut |e| {
        if let Expr::Closure { captures, .. } = e {
            for capture in captures {
                if let Capture::Ref { name } = capture {
                    out.insert(name.clone());
                }
            }
        }
    });
    out
}

/// Calls `f` on every expression of `nodes`, into inlined bodies when `inlined`.
pub(super) fn walk_nodes(nodes: &[Node], inlined: bool, f: &mut dyn FnMut(&Expr)) {
    for node in nodes {
        let bind = |b: &Option<Bind>, f: &mut dyn FnMut(&Expr)| {
            if let Some(Bind::Set(target)) = b {
                walk_expr(target, f);
            }
        };
        let nested = |body: &Option<Vec<Node>>, f: &mut dyn FnMut(&Expr)| {
            if let Some(body) = body {
                walk_nodes(body, inlined, f);
            }
        };
        match node {
            Node::Unknown | Node::Unsupported { .. } | Node::Break { .. } => {}
            Node::Let { bind: b, value, .. } => {
                if let Bind::Set(target) = b {
                    walk_expr(target, f);
                }
                walk_expr(value, f);
            }
            Node::Expression { value, .. } | Node::Return { value, .. } | Node::Throw { value } => {
                walk_expr(value, f)
            }
            Node::If {
                test,
                then,
                otherwise,
            } => {
                walk_expr(test, f);
                nested(then, f);
                nested(otherwise, f);
            }
            Node::While { test, body } => {
                walk_expr(test, f);
                nested(body, f);
            }
            Node::Label { body, .. } | Node::Block { body } => nested(body, f),
            Node::Try { body, handler, .. } => {
                nested(body, f);
                nested(handler, f);
            }
            Node::Named {
                bind: b,
                callee,
                args,
                body,
                ..
            } => {
                walk_expr(callee, f);
                args.iter().for_each(|a| walk_expr(a, f));
                bind(b, f);
                if inlined {
                    nested(body, f);
                }
            }
            Node::Call {
                bind: b,
                callee,
                args,
                ..
            } => {
                walk_expr(callee, f);
                args.iter().for_each(|a| walk_expr(a, f));
                bind(b, f);
            }
            Node::Await { bind: b, value, .. } => {
                walk_expr(value, f);
                bind(b, f);
            }
        }
    }
}

fn walk_expr(e: &Expr, f: &mut dyn FnMut(&Expr)) {
    f(e);
    match e {
        Expr::Get { object, .. } => walk_expr(object, f),
        Expr::Index { object, key } => {
            walk_expr(object, f);
            walk_expr(key, f);
        }
        Expr::Unary { argument, .. } | Expr::Spread { argument } => walk_expr(argument, f),
        Expr::Binary { left, right, .. } => {
            walk_expr(left, f);
            walk_expr(right, f);
        }
        Expr::Array { items } => items.iter().for_each(|i| walk_expr(i, f)),
        Expr::Object { properties } => {
            for p in properties {
                for e in [&p.computed, &p.spread, &p.value].into_iter().flatten() {
                    walk_expr(e, f);
                }
            }
        }
        _ => {}
    }
}
