//! Running a compiled trace: a small engine around wasmtime. [`FastPathEngine::load`]
//! compiles a module, runs its `init` once and keeps the initialised memory as the starting
//! image of every request (as Wizer does); [`Loaded::run`] serves one request in an instance
//! whose memory is that image (a fresh one, or one an earlier request used, its memory put
//! back), bounded in time (an epoch deadline) and memory (the module's fixed memory, under the
//! engine's cap). Every way a request can fail here is a
//! [`Outcome::Miss`] with a reason: ☠, a guard, a trap, the deadline, the arena. The host
//! never panics on what the module does.

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

use wasmtime::{
    Caller, Config, Engine, Global, InstancePre, Linker, Memory, Module, Store, StoreLimits,
    StoreLimitsBuilder, Trap, TypedFunc,
};

use crate::compile::imports::{self, DIRECT_ARGS};
use crate::compile::{DEPTH, EXACT_ERRORS};
use crate::runtime::heap::{Heap, HEAP_TOP};
use crate::runtime::value::{Value, TAG_CLOSURE};
use crate::runtime::{self, errors, json, ops, Guest, Intrinsics, Miss, NoIntrinsics, Raised};

/// How often the deadline clock ticks.
const TICK: Duration = Duration::from_millis(1);

/// What a request may use.
#[derive(Debug, Clone)]
pub struct Limits {
    /// The largest memory a module may declare, in bytes.
    pub max_memory_bytes: usize,
    /// How long `init` may run when a module is loaded.
    pub init_deadline: Duration,
}

impl Default for Limits {
    fn default() -> Limits {
        Limits {
            max_memory_bytes: 32 << 20,
            init_deadline: Duration::from_secs(1),
        }
    }
}

/// How a request ended on the fast path.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Outcome {
    /// The handler's answer, as JSON.
    Answer(Vec<u8>),
    /// The handler threw: the function's error, as the Node runtime answers and logs it.
    Error(crate::runtime::thrown::FunctionError),
    /// The request left the fast path: it must run in Node.
    Miss { reason: String, at: Option<String> },
}

impl From<Miss> for Outcome {
    fn from(miss: Miss) -> Outcome {
        Outcome::Miss {
            reason: miss.reason,
            at: miss.at,
        }
    }
}

/// Why a module could not be loaded.
#[derive(Debug, thiserror::Error)]
pub enum LoadError {
    /// wasmtime refused the module (it is not one the compiler made, or it is too large).
    #[error("the module could not be compiled or instantiated")]
    Module(#[source] wasmtime::Error),
    /// The module's `init` missed: its top level is off the traced paths.
    #[error("the module's top level missed: {0}")]
    Init(String),
}

/// The engine of the fast path: wasmtime with epoch deadlines, and the clock that ticks them.
pub struct FastPathEngine {
    engine: Engine,
    limits: Limits,
    clock: Arc<Clock>,
}

/// The thread that ticks an engine's epochs; it stops when the engine and every module
/// loaded in it are dropped.
struct Clock {
    stop: Arc<AtomicBool>,
    thread: Option<JoinHandle<()>>,
}

impl Drop for Clock {
    fn drop(&mut self) {
        self.stop.store(true, Ordering::Relaxed);
        if let Some(thread) = self.thread.take() {
            let _ = thread.join();
        }
    }
}

impl FastPathEngine {
    pub fn new(limits: Limits) -> Result<FastPathEngine, LoadError> {
        let mut config = Config::new();
        config.epoch_interruption(true);
        if std::env::var_os("KILN_BREAKOUT_PERFMAP").is_some() {
            // `perf report` then names the module's functions (/tmp/perf-PID.map).
            config.profiler(wasmtime::ProfilingStrategy::PerfMap);
        }
        let engine = Engine::new(&config).map_err(LoadError::Module)?;
        let stop = Arc::new(AtomicBool::new(false));
        let thread = {
            let engine = engine.clone();
            let stop = stop.clone();
            std::thread::spawn(move || {
                while !stop.load(Ordering::Relaxed) {
                    std::thread::sleep(TICK);
                    engine.increment_epoch();
                }
            })
        };
        Ok(FastPathEngine {
            engine,
            limits,
            clock: Arc::new(Clock {
                stop,
                thread: Some(thread),
            }),
        })
    }

    /// Compiles a module, links the runtime, runs `init` and keeps the memory it leaves.
    pub fn load(&self, bytes: &[u8]) -> Result<Loaded, LoadError> {
        let module = Module::new(&self.engine, bytes).map_err(LoadError::Module)?;
        let pre = linker(&self.engine)
            .and_then(|l| l.instantiate_pre(&module))
            .map_err(LoadError::Module)?;
        let mut loaded = Loaded {
            engine: self.engine.clone(),
            pre,
            limits: self.limits.clone(),
            image: Vec::new(),
            idle: Mutex::new(Vec::new()),
            exact_errors: false,
            _clock: self.clock.clone(),
        };
        let (mut store, instance) = loaded
            .instantiate(Box::new(NoIntrinsics), self.limits.init_deadline)
            .map_err(LoadError::Module)?;
        let init: TypedFunc<(), ()> = instance
            .get_typed_func(&mut store, "init")
            .map_err(LoadError::Module)?;
        if let Err(error) = init.call(&mut store, ()) {
            let miss = miss_of(&mut store, &error);
            return Err(LoadError::Init(miss.reason));
        }
        loaded.exact_errors = instance
            .get_global(&mut store, EXACT_ERRORS)
            .and_then(|g| g.get(&mut store).i32())
            == Some(1);
        let memory = store.data().memory.expect("set at instantiation");
        let data = memory.data(&store);
        let top = heap_top(data).unwrap_or(0);
        loaded.image = data[..top.min(data.len())].to_vec();
        Ok(loaded)
    }
}

/// The heap's top as the memory records it.
fn heap_top(data: &[u8]) -> Option<usize> {
    let at = HEAP_TOP as usize;
    let bytes = data.get(at..at + 4)?;
    Some(u32::from_le_bytes(bytes.try_into().ok()?) as usize)
}

/// A loaded module, its memory after `init`.
pub struct Loaded {
    engine: Engine,
    pre: InstancePre<State>,
    limits: Limits,
    image: Vec<u8>,
    /// Instances that served a request and whose memory is the image again, for the next
    /// ones: a fresh instance costs an allocation of its memory and a page fault per page
    /// the request touches, a reused one a copy of the image and the zeroing of the arena
    /// the last request used (the code never writes past the heap's top).
    idle: Mutex<Vec<Ready>>,
    /// Whether an error the runtime raises in the handler, as V8 would, is the function's
    /// error: the module says so when nothing in the trace could catch it or make V8 word it
    /// otherwise (`compile::errors_exact`).
    exact_errors: bool,
    /// Kept so the deadlines keep ticking while the module is in use.
    _clock: Arc<Clock>,
}

/// An instance ready to serve a request: its memory is the image.
struct Ready {
    store: Store<State>,
    run: TypedFunc<(i32, i32), i64>,
    /// When it last served a request (or was made).
    since: Instant,
}

type Apply = TypedFunc<(i64, i64, i32, i64, i64, i64, i64), i64>;

/// A request's store.
struct State {
    memory: Option<Memory>,
    apply: Option<Apply>,
    /// The module's count of the closures it applies itself, nested (`compile::DEPTH`).
    depth: Option<Global>,
    /// The first miss recorded: the cause of the trap that follows.
    miss: Option<Miss>,
    /// How deep the runs of compiled functions are nested (the handler a request calls runs
    /// at 1; a callback a builtin calls from it at 2).
    nesting: u32,
    /// A value thrown out of the handler a request called: the function's error.
    thrown: Option<Value>,
    /// An error the runtime raised in that handler (not in a callback), as V8 would have.
    raised: Option<Raised>,
    intrinsics: Box<dyn Intrinsics>,
    limits: StoreLimits,
}

impl Loaded {
    fn instantiate(
        &self,
        intrinsics: Box<dyn Intrinsics>,
        deadline: Duration,
    ) -> wasmtime::Result<(Store<State>, wasmtime::Instance)> {
        let state = State {
            memory: None,
            apply: None,
            depth: None,
            miss: None,
            nesting: 0,
            thrown: None,
            raised: None,
            intrinsics,
            limits: StoreLimitsBuilder::new()
                .memory_size(self.limits.max_memory_bytes)
                .build(),
        };
        let mut store = Store::new(&self.engine, state);
        store.limiter(|s| &mut s.limits);
        store.set_epoch_deadline(ticks(deadline));
        let instance = self.pre.instantiate(&mut store)?;
        let memory = instance
            .get_memory(&mut store, "memory")
            .ok_or_else(|| wasmtime::Error::msg("the module has no memory"))?;
        let apply = instance.get_typed_func(&mut store, "apply")?;
        store.data_mut().memory = Some(memory);
        store.data_mut().apply = Some(apply);
        store.data_mut().depth = instance.get_global(&mut store, DEPTH);
        Ok((store, instance))
    }

    /// An idle instance, or a fresh one with the image copied in.
    fn ready(&self) -> Result<Ready, Miss> {
        if let Some(ready) = self.idle.lock().ok().and_then(|mut idle| idle.pop()) {
            return Ok(ready);
        }
        let fresh =
            self.instantiate(Box::new(NoIntrinsics), TICK)
                .and_then(|(mut store, instance)| {
                    let run = instance.get_typed_func(&mut store, "run")?;
                    Ok(Ready {
                        store,
                        run,
                        since: Instant::now(),
                    })
                });
        let ready = fresh.map_err(|error| Miss::new(format!("instantiation: {error}")))?;
        let memory = ready.store.data().memory.expect("set at instantiation");
        let mut ready = ready;
        let data = memory.data_mut(&mut ready.store);
        let Some(start) = data.get_mut(..self.image.len()) else {
            return Err(Miss::new("out of memory"));
        };
        start.copy_from_slice(&self.image);
        Ok(ready)
    }

    /// Puts the memory back to the image (what the request allocated zeroed) and keeps the
    /// instance for the next request; drops it if its heap's top is not one the runtime
    /// could have left.
    fn release(&self, mut ready: Ready) {
        let state = ready.store.data_mut();
        state.intrinsics = Box::new(NoIntrinsics);
        state.miss = None;
        let memory = state.memory.expect("set at instantiation");
        let data = memory.data_mut(&mut ready.store);
        let image = self.image.len();
        match heap_top(data) {
            Some(top) if top >= image && top <= data.len() => {
                data[..image].copy_from_slice(&self.image);
                data[image..top].fill(0);
            }
            _ => return,
        }
        ready.since = Instant::now();
        if let Ok(mut idle) = self.idle.lock() {
            idle.push(ready);
        }
    }

    /// Lets the instances that have served no request for `idle_for` go, and the memory
    /// their requests touched with them; returns how many went. The next request after a
    /// quiet spell instantiates one again and copies the image in.
    pub fn release_idle(&self, idle_for: Duration) -> usize {
        let Some(cutoff) = Instant::now().checked_sub(idle_for) else {
            return 0;
        };
        let gone: Vec<Ready> = match self.idle.lock() {
            // Taken and put back last in, first out: the oldest are at the front.
            Ok(mut idle) => {
                let stale = idle.iter().take_while(|r| r.since <= cutoff).count();
                idle.drain(..stale).collect()
            }
            Err(_) => return 0,
        };
        gone.len()
    }

    /// The size of the image every request starts from (the memory `init` left, up to the
    /// heap's top).
    pub fn image_bytes(&self) -> usize {
        self.image.len()
    }

    /// How many instances are idle, ready for a request.
    pub fn idle_instances(&self) -> usize {
        self.idle.lock().map_or(0, |idle| idle.len())
    }

    /// Serves one request: the event (JSON) in, the answer (JSON) or a miss out.
    pub fn run(
        &self,
        event_json: &[u8],
        intrinsics: Box<dyn Intrinsics>,
        deadline: Duration,
    ) -> Outcome {
        let mut ready = match self.ready() {
            Ok(ready) => ready,
            Err(miss) => return Outcome::from(miss),
        };
        let outcome = self.serve(&mut ready, event_json, intrinsics, deadline);
        self.release(ready);
        outcome
    }

    fn serve(
        &self,
        ready: &mut Ready,
        event_json: &[u8],
        intrinsics: Box<dyn Intrinsics>,
        deadline: Duration,
    ) -> Outcome {
        let store = &mut ready.store;
        store.data_mut().intrinsics = intrinsics;
        store.data_mut().nesting = 0;
        store.data_mut().thrown = None;
        store.data_mut().raised = None;
        store.set_epoch_deadline(ticks(deadline));
        let memory = store.data().memory.expect("set at instantiation");
        let event = {
            let mut heap = Heap::new(memory.data_mut(&mut *store));
            heap.alloc(event_json.len() as u32).inspect(|&address| {
                let a = address as usize;
                heap.mem[a..a + event_json.len()].copy_from_slice(event_json);
            })
        };
        let address = match event {
            Ok(address) => address,
            Err(miss) => return Outcome::from(miss),
        };
        match ready
            .run
            .call(&mut *store, (address as i32, event_json.len() as i32))
        {
            Ok(packed) => {
                let (a, len) = (
                    (packed as u64 >> 32) as usize,
                    (packed as u64 & 0xFFFF_FFFF) as usize,
                );
                match memory.data(&*store).get(a..a + len) {
                    Some(bytes) => Outcome::Answer(bytes.to_vec()),
                    None => Outcome::from(Miss::new("an answer outside the memory")),
                }
            }
            Err(error) => {
                let miss = miss_of(store, &error);
                let thrown = store.data_mut().thrown.take();
                let raised = store.data_mut().raised.take();
                let mut heap = Heap::new(memory.data_mut(&mut *store));
                let thrown = match (thrown, raised) {
                    (Some(value), _) => Ok(value),
                    (None, Some(raised)) if self.exact_errors => {
                        errors::raise(&mut heap, raised.class, &raised.message)
                    }
                    (None, _) => return Outcome::from(miss),
                };
                match thrown.and_then(|v| crate::runtime::thrown::function_error(&mut heap, v)) {
                    Ok(error) => Outcome::Error(error),
                    Err(miss) => Outcome::from(miss),
                }
            }
        }
    }
}

/// A deadline in the clock's ticks.
fn ticks(deadline: Duration) -> u64 {
    (deadline.as_millis() / TICK.as_millis()).max(1) as u64
}

/// The miss a trap stands for: the one the module or runtime recorded, or the trap's own.
fn miss_of(store: &mut Store<State>, error: &wasmtime::Error) -> Miss {
    if let Some(miss) = store.data_mut().miss.take() {
        return miss;
    }
    match error.downcast_ref::<Trap>() {
        Some(Trap::Interrupt) => Miss::new("out of time"),
        Some(Trap::StackOverflow) => Miss::new("stack overflow"),
        Some(trap) => Miss::new(format!("trap: {trap}")),
        None => Miss::new(format!("trap: {error}")),
    }
}

/// The runtime as seen from a host function.
struct Host<'a, 'c> {
    caller: &'a mut Caller<'c, State>,
}

impl Guest for Host<'_, '_> {
    fn heap(&mut self) -> Heap<'_> {
        let memory = self.caller.data().memory.expect("set at instantiation");
        Heap::new(memory.data_mut(&mut *self.caller))
    }

    fn apply(&mut self, closure: Value, this: Value, args: &[Value]) -> Result<Value, Miss> {
        if args.len() > DIRECT_ARGS {
            return Err(Miss::new(
                "a call back with more than four arguments not compiled",
            ));
        }
        let apply = self
            .caller
            .data()
            .apply
            .clone()
            .expect("set at instantiation");
        let arg = |i: usize| args.get(i).copied().unwrap_or(Value::UNDEFINED).0 as i64;
        let params = (
            closure.0 as i64,
            this.0 as i64,
            args.len() as i32,
            arg(0),
            arg(1),
            arg(2),
            arg(3),
        );
        self.caller.data_mut().nesting += 1;
        let result = apply.call(&mut *self.caller, params);
        self.caller.data_mut().nesting -= 1;
        match result {
            Ok(v) => Ok(Value(v as u64)),
            Err(error) => {
                // An error raised in a callback is not the handler's own: a miss.
                let recorded = self.caller.data_mut().miss.take().map(|mut miss| {
                    miss.raised = None;
                    miss
                });
                Err(
                    recorded.unwrap_or_else(|| match error.downcast_ref::<Trap>() {
                        Some(Trap::Interrupt) => Miss::new("out of time"),
                        Some(Trap::StackOverflow) => Miss::new("stack overflow"),
                        _ => Miss::new(format!("trap: {error}")),
                    }),
                )
            }
        }
    }

    fn intrinsics(&mut self) -> &mut dyn Intrinsics {
        self.caller.data_mut().intrinsics.as_mut()
    }

    fn intrinsic(&mut self, name: &str, args: &[Value]) -> Result<Value, Miss> {
        let mut values = Vec::new();
        for &a in args {
            values.push(runtime::to_json(&mut self.heap(), a)?);
        }
        let answer = self.caller.data_mut().intrinsics.call(name, &values)?;
        runtime::from_json(&mut self.heap(), &answer)
    }
}

/// Runs `f` over the guest; a miss is recorded (unless an inner one was) and traps.
fn host<R>(
    caller: &mut Caller<'_, State>,
    f: impl FnOnce(&mut Host<'_, '_>) -> Result<R, Miss>,
) -> wasmtime::Result<R> {
    let result = f(&mut Host {
        caller: &mut *caller,
    });
    result.map_err(|miss| {
        let nesting = nesting(caller);
        let state = caller.data_mut();
        if state.miss.is_none() {
            if nesting == 1 && state.thrown.is_none() {
                state.raised = miss.raised.clone();
            }
            state.miss = Some(miss);
        }
        wasmtime::Error::msg("miss")
    })
}

/// How deep the runs of compiled functions are nested: the host's applies and the module's own.
fn nesting(caller: &mut Caller<'_, State>) -> u32 {
    let depth = caller
        .data()
        .depth
        .and_then(|g| g.get(&mut *caller).i32())
        .unwrap_or(0);
    caller.data().nesting + depth.max(0) as u32
}

fn args_of(argc: i32, a: [i64; 4]) -> Vec<Value> {
    a[..(argc.clamp(0, 4) as usize)]
        .iter()
        .map(|&v| Value(v as u64))
        .collect()
}

/// The `kiln_rt` imports.
fn linker(engine: &Engine) -> wasmtime::Result<Linker<State>> {
    let mut l = Linker::new(engine);
    let m = imports::MODULE;
    l.func_wrap(
        m,
        "miss",
        |mut c: Caller<'_, State>, address: i32, len: i32| {
            host(&mut c, |g| {
                let heap = g.heap();
                let (a, n) = (address as u32 as usize, len as u32 as usize);
                let bytes = heap.mem.get(a..a + n).unwrap_or_default();
                let text = String::from_utf8_lossy(bytes);
                let mut parts = text.splitn(2, '\0');
                Err::<(), _>(Miss {
                    raised: None,
                    reason: parts.next().unwrap_or_default().to_string(),
                    at: parts.next().map(String::from),
                })
            })
        },
    )?;
    l.func_wrap(
        m,
        "binary",
        |mut c: Caller<'_, State>, op: i32, a: i64, b: i64| {
            host(&mut c, |g| {
                let (a, b) = (Value(a as u64), Value(b as u64));
                let mut heap = g.heap();
                let v = match ops::BINARY.get(op as usize) {
                    Some(&"in") => Value::boolean(runtime::has(&mut heap, a, b)?),
                    Some(&"instanceof") => Value::boolean(runtime::instance_of(&mut heap, a, b)?),
                    _ => ops::binary(&mut heap, op as u32, a, b)?,
                };
                Ok(v.0 as i64)
            })
        },
    )?;
    l.func_wrap(m, "unary", |mut c: Caller<'_, State>, op: i32, a: i64| {
        host(&mut c, |g| {
            Ok(ops::unary(&mut g.heap(), op as u32, Value(a as u64))?.0 as i64)
        })
    })?;
    l.func_wrap(m, "truthy", |mut c: Caller<'_, State>, a: i64| {
        host(&mut c, |g| {
            Ok(i32::from(ops::truthy(&g.heap(), Value(a as u64))?))
        })
    })?;
    l.func_wrap(m, "get", |mut c: Caller<'_, State>, o: i64, k: i64| {
        host(&mut c, |g| {
            Ok(runtime::get(&mut g.heap(), Value(o as u64), Value(k as u64))?.0 as i64)
        })
    })?;
    l.func_wrap(
        m,
        "set",
        |mut c: Caller<'_, State>, o: i64, k: i64, v: i64| {
            host(&mut c, |g| {
                runtime::set(
                    &mut g.heap(),
                    Value(o as u64),
                    Value(k as u64),
                    Value(v as u64),
                )
            })
        },
    )?;
    l.func_wrap(m, "object", |mut c: Caller<'_, State>| {
        host(&mut c, |g| Ok(g.heap().object(Value::NULL)?.0 as i64))
    })?;
    l.func_wrap(m, "array", |mut c: Caller<'_, State>| {
        host(&mut c, |g| Ok(g.heap().array(0)?.0 as i64))
    })?;
    l.func_wrap(m, "push", |mut c: Caller<'_, State>, a: i64, v: i64| {
        host(&mut c, |g| {
            g.heap().push(Value(a as u64), Value(v as u64)).map(|_| ())
        })
    })?;
    l.func_wrap(
        m,
        "spread",
        |mut c: Caller<'_, State>, a: i64, from: i64| {
            host(&mut c, |g| {
                let mut heap = g.heap();
                let from = Value(from as u64);
                let items = match from.tag() {
                    crate::runtime::value::TAG_ARRAY => heap.elements(from)?,
                    _ => {
                        return Err(Miss::new(
                            "a spread of a value that is not an array not compiled",
                        ))
                    }
                };
                for item in items {
                    heap.push(Value(a as u64), item)?;
                }
                Ok(())
            })
        },
    )?;
    l.func_wrap(
        m,
        "assign",
        |mut c: Caller<'_, State>, o: i64, from: i64| {
            host(&mut c, |g| {
                runtime::builtins::assign(&mut g.heap(), Value(o as u64), Value(from as u64))
            })
        },
    )?;
    l.func_wrap(
        m,
        "closure",
        |mut c: Caller<'_, State>, function: i32, cells: i32| {
            host(&mut c, |g| {
                Ok(g.heap().closure(function as u32, cells as u32)?.0 as i64)
            })
        },
    )?;
    l.func_wrap(m, "cell", |mut c: Caller<'_, State>, v: i64| {
        host(&mut c, |g| Ok(g.heap().cell(Value(v as u64))? as i32))
    })?;
    l.func_wrap(
        m,
        "call",
        |mut c: Caller<'_, State>,
         f: i64,
         this: i64,
         argc: i32,
         a0: i64,
         a1: i64,
         a2: i64,
         a3: i64| {
            host(&mut c, |g| {
                let args = args_of(argc, [a0, a1, a2, a3]);
                Ok(runtime::call(g, Value(f as u64), Value(this as u64), &args)?.0 as i64)
            })
        },
    )?;
    l.func_wrap(
        m,
        "call_array",
        |mut c: Caller<'_, State>, f: i64, this: i64, args: i64| {
            host(&mut c, |g| {
                let args = g.heap().elements(Value(args as u64))?;
                Ok(runtime::call(g, Value(f as u64), Value(this as u64), &args)?.0 as i64)
            })
        },
    )?;
    l.func_wrap(
        m,
        "construct",
        |mut c: Caller<'_, State>, f: i64, argc: i32, a0: i64, a1: i64, a2: i64, a3: i64| {
            host(&mut c, |g| {
                let args = args_of(argc, [a0, a1, a2, a3]);
                Ok(runtime::construct(g, Value(f as u64), &args)?.0 as i64)
            })
        },
    )?;
    l.func_wrap(
        m,
        "construct_array",
        |mut c: Caller<'_, State>, f: i64, args: i64| {
            host(&mut c, |g| {
                let args = g.heap().elements(Value(args as u64))?;
                Ok(runtime::construct(g, Value(f as u64), &args)?.0 as i64)
            })
        },
    )?;
    l.func_wrap(m, "global", |mut c: Caller<'_, State>, name: i64| {
        host(&mut c, |g| {
            Ok(runtime::global(&mut g.heap(), Value(name as u64))?.0 as i64)
        })
    })?;
    l.func_wrap(
        m,
        "set_global",
        |mut c: Caller<'_, State>, name: i64, v: i64| {
            host(&mut c, |g| {
                runtime::set_global(&mut g.heap(), Value(name as u64), Value(v as u64))
            })
        },
    )?;
    l.func_wrap(
        m,
        "json_parse",
        |mut c: Caller<'_, State>, address: i32, len: i32| {
            host(&mut c, |g| {
                let mut heap = g.heap();
                let (a, n) = (address as u32 as usize, len as u32 as usize);
                let bytes = heap
                    .mem
                    .get(a..a + n)
                    .ok_or_else(|| Miss::new("an event outside the memory"))?;
                let text = std::str::from_utf8(bytes)
                    .map_err(|_| Miss::new("an event that is not UTF-8"))?;
                let units: Vec<u16> = text.encode_utf16().collect();
                Ok(json::parse(&mut heap, &units)?.0 as i64)
            })
        },
    )?;
    l.func_wrap(m, "json_answer", |mut c: Caller<'_, State>, v: i64| {
        host(&mut c, |g| {
            let mut heap = g.heap();
            // Lambda answers `undefined` as `null`.
            let units = json::stringify(&mut heap, Value(v as u64))?
                .unwrap_or_else(|| "null".encode_utf16().collect());
            let text = String::from_utf16(&units)
                .map_err(|_| Miss::new("an answer that is not Unicode"))?;
            let address = heap.alloc(text.len() as u32)?;
            let a = address as usize;
            heap.mem[a..a + text.len()].copy_from_slice(text.as_bytes());
            Ok(((u64::from(address) << 32) | text.len() as u64) as i64)
        })
    })?;
    l.func_wrap(m, "context", |mut c: Caller<'_, State>| {
        host(&mut c, |g| Ok(runtime::context(g)?.0 as i64))
    })?;
    l.func_wrap(m, "uncaught", |mut c: Caller<'_, State>, v: i64| {
        host(&mut c, |g| {
            let nesting = nesting(g.caller);
            let state = g.caller.data_mut();
            if nesting == 1 && state.thrown.is_none() {
                state.thrown = Some(Value(v as u64));
            }
            Err::<(), _>(Miss::new("uncaught throw"))
        })
    })?;
    l.func_wrap(m, "module_record", |mut c: Caller<'_, State>, file: i32| {
        host(&mut c, |g| {
            Ok(runtime::modules::record(&mut g.heap(), file as u32)? as i32)
        })
    })?;
    l.func_wrap(m, "function_of", |mut c: Caller<'_, State>, v: i64| {
        host(&mut c, |g| {
            let v = Value(v as u64);
            if v.tag() != TAG_CLOSURE {
                return Ok(-1);
            }
            Ok(g.heap().closure_function(v)? as i32)
        })
    })?;
    Ok(l)
}
