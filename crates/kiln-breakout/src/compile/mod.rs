//! The trace compiler: a validated trace to a WebAssembly module, with `wasm-encoder`.
//!
//! Values are NaN-boxed `i64`s ([`crate::runtime::value`]); strings, objects, arrays and
//! closures live in an arena in the module's memory, laid out as [`crate::runtime::heap`]
//! says, and the general operations on them are host functions the module imports from
//! `kiln_rt` ([`imports`], defined by [`crate::exec`]). The code does control flow,
//! variables, closure environments and the number cases of the operators inline.
//!
//! Each handler of kind `function` becomes a wasm function; `named` calls are inlined into
//! their caller, guarded on the callee being the traced closure. Every path the trace does
//! not hold compiles to a miss (☠) that carries its reason and, where known, its position:
//! an `unknown` node, an untraced branch, an `unsupported` site, a builtin the runtime does
//! not have, a `throw` no `try` of its handler catches ("uncaught throw"). A miss traps; the
//! engine reads the reason the module recorded.
//!
//! The module exports:
//! - `memory` (its size fixed at [`CompileOptions::memory_pages`]);
//! - `init()`: the files' top levels (the handlers of kind `module` no call made), run once;
//! - `run(address, length) -> i64`: parses the event (UTF-8 JSON in memory), calls
//!   `module.exports.handler` with it and the platform's context, and answers the result as JSON
//!   in memory, its address in the high 32 bits and its length in the low;
//! - `apply(closure, this, argc, a0, a1, a2, a3) -> i64`: calls a closure whose function the
//!   trace has as a handler (the runtime's way back in, for callbacks and constructors).

mod access;
mod callbacks;
mod captures;
mod codegen;
mod data;
mod expr;
mod function_id;
pub mod imports;
mod modules;
mod objects;

use std::collections::{HashMap, HashSet};

use std::sync::Arc;

use wasm_encoder::{
    CodeSection, ConstExpr, DataSection, EntityType, ExportKind, ExportSection, Function,
    FunctionSection, GlobalSection, GlobalType, ImportSection, MemoryType, Module, TypeSection,
    ValType,
};

use crate::package::{Environment, Package};
use crate::runtime::heap::{CLOSURE_ENVIRONMENT, HEAP_TOP};
use crate::runtime::modules::RECORD_EXPORTS;
use crate::runtime::value::Value;
use crate::trace::{validate, Expr, Handler, HandlerKind, Node, Trace, TraceError};
use codegen::{mem32, Frame, Generator, Shared};
use imports::{IMPORTS, MODULE};

/// The exported global that says whether an error the runtime raises in the handler is the
/// function's error ([`errors_exact`]): 1 when it is.
pub const EXACT_ERRORS: &str = "exact_errors";

/// The exported global counting the closures the module applies itself, nested: the host
/// adds it to its own count of nested runs.
pub const DEPTH: &str = "depth";

/// The default cap of the fast path's memory: 32 MiB, in 64 KiB pages.
pub const DEFAULT_MEMORY_PAGES: u32 = 512;

/// How a trace is compiled.
#[derive(Debug, Clone)]
pub struct CompileOptions {
    /// The module's memory, fixed (its minimum and maximum): the arena and the module's data.
    /// A request that needs more misses ("out of memory").
    pub memory_pages: u32,
    /// The package's files, so a `require` of a relative path resolves as in Node; without
    /// them such a `require` misses.
    pub package: Option<Arc<Package>>,
    /// The function's environment, for `process.env`; without it a read misses.
    pub env: Option<Environment>,
    /// The function's handler setting (`index.handler`, `dir/file.nested.fn`): the file whose
    /// export a request calls. Without it, the first file the trace loaded and its `handler`.
    pub handler: Option<String>,
}

impl Default for CompileOptions {
    fn default() -> CompileOptions {
        CompileOptions {
            memory_pages: DEFAULT_MEMORY_PAGES,
            package: None,
            env: None,
            handler: None,
        }
    }
}

/// Why a trace could not be compiled.
#[derive(Debug, thiserror::Error)]
pub enum CompileError {
    /// The trace does not pass [`crate::trace::validate`].
    #[error("the trace is not valid")]
    Invalid(#[source] TraceError),
    /// A handler would need more wasm locals than a function may have.
    #[error("handler {0} is too large to compile")]
    TooLarge(String),
    /// The module's data does not fit in its memory.
    #[error("the module's data does not fit in {0} pages of memory")]
    MemoryTooSmall(u32),
}

/// The parameters of a handler's function: its environment, `this`, the argument count and
/// the arguments.
const HANDLER_PARAMS: [ValType; 7] = [
    ValType::I32,
    ValType::I64,
    ValType::I32,
    ValType::I64,
    ValType::I64,
    ValType::I64,
    ValType::I64,
];

/// Compiles a trace (validated here) into a module's bytes.
pub fn compile(trace: &Trace, options: &CompileOptions) -> Result<Vec<u8>, CompileError> {
    validate(trace).map_err(CompileError::Invalid)?;
    let environments = captures::environments(trace);
    let mut functions: HashMap<String, u32> = HashMap::new();
    for name in trace
        .handlers
        .iter()
        .map(|h| &h.function)
        .chain(environments.keys())
    {
        let next = functions.len() as u32;
        functions.entry(name.clone()).or_insert(next);
    }
    let callable_count = trace
        .handlers
        .iter()
        .filter(|h| h.kind == HandlerKind::Function)
        .count() as u32;
    let modules_count = trace.handlers.len() as u32 - callable_count;
    // The functions: the imports, the handlers, the files' top levels, `apply`, `init`,
    // `run`, then the helpers.
    let apply_index = imports::COUNT + callable_count + modules_count;
    let helpers = objects::Helpers::at(apply_index + 3);
    let mut shared = Shared {
        helpers,
        sites: 0,
        data: data::Data::default(),
        functions,
        environments,
        package: options.package.clone(),
        env: options.env.clone(),
        records: HashMap::new(),
        tops: HashMap::new(),
        exported: modules::exported(trace),
    };

    let callable: Vec<&Handler> = trace
        .handlers
        .iter()
        .filter(|h| h.kind == HandlerKind::Function)
        .collect();
    let called_back: HashSet<u32> = trace
        .handlers
        .iter()
        .flat_map(|h| called(&h.body))
        .collect();
    // Every file's top level is a function; `init` calls those no `require` ran (the files
    // the platform loaded), the others run when required.
    let modules: Vec<&Handler> = trace
        .handlers
        .iter()
        .filter(|h| h.kind == HandlerKind::Module)
        .collect();
    let first = imports::COUNT;
    let modules_start = first + callable.len() as u32;
    for (i, handler) in modules.iter().enumerate() {
        shared.tops.insert(
            function_id::file_of(&handler.function).to_string(),
            modules_start + i as u32,
        );
    }
    let tops: Vec<u32> = modules
        .iter()
        .enumerate()
        .filter(|(_, h)| !called_back.contains(&h.id))
        .map(|(i, _)| modules_start + i as u32)
        .collect();

    let mut bodies = Vec::new();
    for handler in &callable {
        bodies.push(handler_function(&mut shared, handler)?);
    }
    for handler in &modules {
        bodies.push(top_level_function(&mut shared, handler)?);
    }
    debug_assert_eq!(apply_index, first + bodies.len() as u32);
    let handler_indices: Vec<(u32, u32)> = callable
        .iter()
        .enumerate()
        .map(|(i, h)| (shared.functions[&h.function], first + i as u32))
        .collect();
    bodies.push(apply_function(&mut shared, &handler_indices));
    bodies.push(init_function(&tops));
    let entry = entry_of(&modules, &called_back, options.handler.as_deref());
    bodies.push(run_function(&mut shared, entry));
    let prototype_key = shared.data.string("prototype");
    let out_of_memory = shared.data.reason("out of memory", None);
    let memory_bytes = u64::from(options.memory_pages) * 65536;
    bodies.push(objects::lookup_function());
    bodies.push(objects::set_own_function());
    bodies.push(objects::alloc_function(memory_bytes, out_of_memory));
    bodies.push(objects::object_function(helpers.alloc));
    bodies.push(objects::construct_function(
        helpers,
        apply_index,
        prototype_key,
    ));
    bodies.push(objects::call_function(apply_index));
    bodies.push(objects::function_of_function());
    bodies.push(objects::array_function(helpers.alloc, out_of_memory));
    let heap_start = shared.data.end();
    if u64::from(heap_start) >= u64::from(options.memory_pages) * 65536 {
        return Err(CompileError::MemoryTooSmall(options.memory_pages));
    }

    let mut types = Types::default();
    let mut import_section = ImportSection::new();
    for import in IMPORTS {
        let ty = types.index(import.params, import.results);
        import_section.import(MODULE, import.name, EntityType::Function(ty));
    }
    let mut function_section = FunctionSection::new();
    for _ in &callable {
        function_section.function(types.index(&HANDLER_PARAMS, &[ValType::I64]));
    }
    for _ in &modules {
        function_section.function(types.index(&[], &[]));
    }
    let mut apply_params = vec![ValType::I64, ValType::I64, ValType::I32];
    apply_params.extend([ValType::I64; 4]);
    function_section.function(types.index(&apply_params, &[ValType::I64]));
    function_section.function(types.index(&[], &[]));
    function_section.function(types.index(&[ValType::I32, ValType::I32], &[ValType::I64]));
    for (params, results) in objects::Helpers::signatures() {
        function_section.function(types.index(&params, &results));
    }

    let mut memories = wasm_encoder::MemorySection::new();
    memories.memory(MemoryType {
        minimum: u64::from(options.memory_pages),
        maximum: Some(u64::from(options.memory_pages)),
        memory64: false,
        shared: false,
        page_size_log2: None,
    });
    // Global 0: whether a request has started (`run` sets it; `init` runs before any).
    let mut globals = GlobalSection::new();
    globals.global(
        GlobalType {
            val_type: ValType::I32,
            mutable: true,
            shared: false,
        },
        &ConstExpr::i32_const(0),
    );
    // Global 1: [`EXACT_ERRORS`].
    globals.global(
        GlobalType {
            val_type: ValType::I32,
            mutable: false,
            shared: false,
        },
        &ConstExpr::i32_const(i32::from(errors_exact(trace))),
    );
    // Global 2: closures the module applies itself, nested ([`objects::DEPTH_GLOBAL`]).
    // Then one per site cache.
    for _ in 0..1 + shared.sites {
        globals.global(
            GlobalType {
                val_type: ValType::I32,
                mutable: true,
                shared: false,
            },
            &ConstExpr::i32_const(0),
        );
    }
    let mut exports = ExportSection::new();
    exports.export("memory", ExportKind::Memory, 0);
    exports.export(EXACT_ERRORS, ExportKind::Global, 1);
    exports.export(DEPTH, ExportKind::Global, objects::DEPTH_GLOBAL);
    exports.export("apply", ExportKind::Func, apply_index);
    exports.export("init", ExportKind::Func, apply_index + 1);
    exports.export("run", ExportKind::Func, apply_index + 2);
    let mut code = CodeSection::new();
    for body in &bodies {
        code.function(body);
    }
    let mut data_section = DataSection::new();
    data_section.active(
        0,
        &ConstExpr::i32_const(HEAP_TOP as i32),
        heap_start.to_le_bytes(),
    );
    data_section.active(
        0,
        &ConstExpr::i32_const(crate::runtime::heap::DATA_START as i32),
        shared.data.bytes.iter().copied(),
    );

    let mut module = Module::new();
    module.section(&types.section);
    module.section(&import_section);
    module.section(&function_section);
    module.section(&memories);
    module.section(&globals);
    module.section(&exports);
    module.section(&code);
    module.section(&data_section);
    Ok(module.finish())
}

/// Whether an error the runtime raises in the handler (a property of `undefined` read, say)
/// is the function's error, worded as V8 words it: when nothing in the trace could catch it
/// (no `try`) and no property is read or set on a variable normalisation made (`$kb…`) other
/// than the plain temporaries of the normal form (hint `t`: a method call's receiver, a
/// `&&`'s value), each of which holds a value a member access of the source reads. The others
/// stand for another construct (a destructuring, hints `o`, `a`, `v`, `p`, `d`, for which V8
/// says "Cannot destructure property 'a' of 'undefined'"; `for…of`; a class's base).
/// Otherwise such an error is a miss.
fn errors_exact(trace: &Trace) -> bool {
    fn holds_try(nodes: &[Node]) -> bool {
        let body = |b: &Option<Vec<Node>>| b.as_deref().is_some_and(holds_try);
        nodes.iter().any(|node| match node {
            Node::Try { .. } => true,
            Node::If {
                then, otherwise, ..
            } => body(then) || body(otherwise),
            Node::While { body: b, .. }
            | Node::Label { body: b, .. }
            | Node::Block { body: b }
            | Node::Named { body: b, .. } => body(b),
            _ => false,
        })
    }
    let mut made = false;
    for handler in &trace.handlers {
        if holds_try(&handler.body) {
            return false;
        }
        captures::walk_nodes(&handler.body, true, &mut |e| {
            if let Expr::Get { object, .. } | Expr::Index { object, .. } = e {
                if let Expr::Id { name } | Expr::From { name } = object.as_ref() {
                    made |= name.starts_with("$kb") && !plain_temporary(name);
                }
            }
        });
    }
    !made
}

/// Whether `name` is a plain temporary of the normal form: the fresh prefix (`$kb`, then
/// `_`s), `t` and a number.
fn plain_temporary(name: &str) -> bool {
    let rest = name.trim_start_matches("$kb").trim_start_matches('_');
    rest.strip_prefix('t')
        .is_some_and(|n| !n.is_empty() && n.bytes().all(|b| b.is_ascii_digit()))
}

/// The handlers the calls of a body name (callbacks, constructors, required files).
fn called(body: &[Node]) -> Vec<u32> {
    let mut out = Vec::new();
    for node in body {
        match node {
            Node::Call { handlers, .. } => out.extend(handlers),
            Node::If {
                then, otherwise, ..
            } => {
                out.extend(called(then.as_deref().unwrap_or_default()));
                out.extend(called(otherwise.as_deref().unwrap_or_default()));
            }
            Node::While { body, .. }
            | Node::Label { body, .. }
            | Node::Block { body }
            | Node::Named { body, .. } => out.extend(called(body.as_deref().unwrap_or_default())),
            Node::Try { body, handler, .. } => {
                out.extend(called(body.as_deref().unwrap_or_default()));
                out.extend(called(handler.as_deref().unwrap_or_default()));
            }
            _ => {}
        }
    }
    out
}

#[derive(Default)]
struct Types {
    section: TypeSection,
    seen: HashMap<(Vec<ValType>, Vec<ValType>), u32>,
}

impl Types {
    fn index(&mut self, params: &[ValType], results: &[ValType]) -> u32 {
        let key = (params.to_vec(), results.to_vec());
        if let Some(&i) = self.seen.get(&key) {
            return i;
        }
        let i = self.seen.len() as u32;
        self.section
            .ty()
            .function(params.iter().copied(), results.iter().copied());
        self.seen.insert(key, i);
        i
    }
}

fn finished(g: Generator<'_>, handler: &Handler) -> Result<Function, CompileError> {
    g.finish()
        .ok_or_else(|| CompileError::TooLarge(handler.function.clone()))
}

/// A handler of kind `function`: its parameters from the arguments, its body, `undefined`
/// when it falls off its end.
fn handler_function(shared: &mut Shared, handler: &Handler) -> Result<Function, CompileError> {
    let mut g = Generator::new(shared, HANDLER_PARAMS.len() as u32);
    g.frames.push(Frame {
        function: Some(handler.function.clone()),
        file: function_id::file_of(&handler.function).to_string(),
        environment: Some(0),
        this: Some(1),
        captured: captures::captured(&handler.body),
        result: None,
    });
    g.scopes.push(Vec::new());
    if handler.rest.is_some() || handler.params.len() > imports::DIRECT_ARGS {
        g.miss(
            "a handler with rest parameters or more than four not compiled",
            None,
        );
    } else {
        for (i, param) in handler.params.iter().enumerate() {
            g.sink().local_get(3 + i as u32);
            g.bind_new(param);
        }
        g.body(&handler.body);
    }
    g.value(Value::UNDEFINED);
    finished(g, handler)
}

/// A file's top level: it runs once.
fn top_level_function(shared: &mut Shared, handler: &Handler) -> Result<Function, CompileError> {
    let mut g = Generator::new(shared, 0);
    g.frames.push(Frame {
        function: None,
        file: function_id::file_of(&handler.function).to_string(),
        environment: None,
        this: None,
        captured: captures::captured(&handler.body),
        result: None,
    });
    g.top_level_once();
    g.body(&handler.body);
    finished(g, handler)
}

/// `apply`: the closure's function index picks its handler's function.
fn apply_function(shared: &mut Shared, handlers: &[(u32, u32)]) -> Function {
    let mut g = Generator::new(shared, 7);
    let function = g.local(ValType::I32);
    let function_of = g.shared.helpers.function_of;
    g.sink().local_get(0).call(function_of).local_set(function);
    for &(index, wasm) in handlers {
        g.sink()
            .local_get(function)
            .i32_const(index as i32)
            .i32_eq()
            .if_(wasm_encoder::BlockType::Empty)
            .local_get(0)
            .i32_wrap_i64()
            .i32_load(mem32(u64::from(CLOSURE_ENVIRONMENT)))
            .local_get(1)
            .local_get(2)
            .local_get(3)
            .local_get(4)
            .local_get(5)
            .local_get(6)
            .call(wasm)
            .return_()
            .end();
    }
    g.miss("a call of a function the trace never entered", None);
    g.value(Value::UNDEFINED);
    g.finish().expect("apply has one local")
}

fn init_function(tops: &[u32]) -> Function {
    let mut f = Function::new([]);
    let mut sink = f.instructions();
    for &top in tops {
        sink.call(top);
    }
    sink.end();
    f
}

/// The file whose export a request calls, and the export's path: the handler setting's
/// module (`dir/file` as `dir/file`, `.js`, `.mjs` or `.cjs`, as the shim loads it) among the
/// files the platform loaded, or the last of them and `handler`. `None` when the setting
/// names no file the trace has.
fn entry_of(
    modules: &[&Handler],
    called_back: &HashSet<u32>,
    handler: Option<&str>,
) -> Option<(String, Vec<String>)> {
    let loaded: Vec<&str> = modules
        .iter()
        .filter(|h| !called_back.contains(&h.id))
        .map(|h| function_id::file_of(&h.function))
        .collect();
    // The file the platform loads runs last: a CommonJS file's requires run inside it, an ES
    // module's imports before it.
    let Some(setting) = handler else {
        return loaded
            .last()
            .map(|f| (f.to_string(), vec!["handler".to_string()]));
    };
    let (root, base) = setting.rsplit_once('/').unwrap_or(("", setting));
    let (module, path) = base.split_once('.')?;
    if setting.contains("..") || module.is_empty() || path.is_empty() {
        return None;
    }
    let stem = if root.is_empty() {
        module.to_string()
    } else {
        format!("{root}/{module}")
    };
    let file = ["", ".js", ".mjs", ".cjs"]
        .iter()
        .map(|e| format!("{stem}{e}"))
        .find(|f| loaded.contains(&f.as_str()))?;
    Some((file, path.split('.').map(String::from).collect()))
}

fn run_function(shared: &mut Shared, entry: Option<(String, Vec<String>)>) -> Function {
    let mut g = Generator::new(shared, 2);
    g.frames.push(Frame {
        function: None,
        file: String::new(),
        environment: None,
        this: None,
        captured: HashSet::new(),
        result: None,
    });
    let event = g.local(ValType::I64);
    g.sink()
        .i32_const(1)
        .global_set(0)
        .i32_const(0)
        .global_set(objects::DEPTH_GLOBAL)
        .local_get(0)
        .local_get(1)
        .call(imports::JSON_PARSE)
        .local_set(event);
    match entry {
        Some((file, path)) => {
            g.record_address(&file);
            g.sink().i64_load(codegen::mem64(u64::from(RECORD_EXPORTS)));
            for key in path {
                let key = g.shared.data.string(&key);
                g.value(key);
                g.sink().call(imports::GET);
            }
        }
        None => {
            g.miss("the handler's file was not traced", None);
            g.value(Value::UNDEFINED);
        }
    }
    g.value(Value::UNDEFINED);
    g.sink()
        .i32_const(2)
        .local_get(event)
        .call(imports::CONTEXT);
    g.value(Value::UNDEFINED);
    g.value(Value::UNDEFINED);
    g.sink().call(imports::CALL).call(imports::JSON_ANSWER);
    g.finish().expect("run has one local")
}

#[cfg(test)]
mod tests {
    use super::*;

    fn module(id: u32, file: &str) -> Handler {
        Handler {
            id,
            function: format!("init:{file}"),
            kind: HandlerKind::Module,
            params: Vec::new(),
            rest: None,
            is_async: false,
            param_types: Vec::new(),
            body: Vec::new(),
        }
    }

    #[test]
    fn the_handler_setting_names_the_entry_as_the_shim_loads_it() {
        let handlers = [
            module(0, "lib/math.mjs"),
            module(1, "src/app.mjs"),
            module(2, "lib/required.js"),
        ];
        let modules: Vec<&Handler> = handlers.iter().collect();
        let required: HashSet<u32> = [2].into();
        let entry = |setting| entry_of(&modules, &required, setting);
        let path = |p: &[&str]| p.iter().map(|s| s.to_string()).collect::<Vec<_>>();
        assert_eq!(
            entry(Some("src/app.main")),
            Some(("src/app.mjs".into(), path(&["main"])))
        );
        assert_eq!(
            entry(Some("src/app.api.get")),
            Some(("src/app.mjs".into(), path(&["api", "get"])))
        );
        // A file a `require` loaded is not what the platform loads.
        assert_eq!(entry(Some("lib/required.handler")), None);
        assert_eq!(entry(Some("../app.main")), None);
        assert_eq!(entry(Some("app")), None);
        // Without a setting: the file loaded last (an ES module's imports run before it).
        assert_eq!(
            entry(None),
            Some(("src/app.mjs".into(), path(&["handler"])))
        );
    }
}
