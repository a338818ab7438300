//! The support check's findings: sites, each a construct outside the supported subset at a
//! source position. Plain data: the check produces them, the CLI prints them, and (later) the
//! instrumenter turns each one into an `unsupported(reason)` that records ☠ when reached.

use std::fmt;

use serde::{Serialize, Serializer};

/// One construct outside the supported subset, where it is.
///
/// Sites order by file, line, column and then construct, so a report is the same whatever
/// order the files were read in.
#[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Ord)]
pub struct Site {
    /// The file's path relative to the checked directory, with `/` separators.
    pub file: String,
    /// 1-based line.
    pub line: u32,
    /// 1-based column, in UTF-16 code units (as in Node's stack traces).
    pub col: u32,
    pub construct: Construct,
}

impl fmt::Display for Site {
    /// `file:line:col: construct: reason`, the form compilers use, so editors can jump to it.
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(
            f,
            "{}:{}:{}: {}: {}",
            self.file,
            self.line,
            self.col,
            self.construct.name(),
            self.construct.reason()
        )
    }
}

impl Serialize for Site {
    /// `{file, line, col, construct, reason}`, the construct and reason as text.
    fn serialize<S: Serializer>(&self, serializer: S) -> Result<S::Ok, S::Error> {
        #[derive(Serialize)]
        struct Wire<'a> {
            file: &'a str,
            line: u32,
            col: u32,
            construct: String,
            reason: String,
        }
        Wire {
            file: &self.file,
            line: self.line,
            col: self.col,
            construct: self.construct.name(),
            reason: self.construct.reason(),
        }
        .serialize(serializer)
    }
}

/// How a module was asked for.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
pub enum ModuleSyntax {
    Require,
    Import,
    ExportFrom,
}

/// Why a module cannot be loaded in the fast path.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
pub enum ModuleRefusal {
    Filesystem,
    Processes,
    Network,
    Threads,
    CodeEvaluation,
    WebAssembly,
    /// A Node module that is none of the above and not an intrinsic (yet).
    NodeBuiltin,
    /// An AWS SDK client other than the S3 one.
    OtherAwsSdk,
    /// An absolute path: outside the package.
    Absolute,
    /// A bare name that is not in the package's `node_modules`.
    Missing,
}

/// A construct outside the supported subset.
#[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Ord)]
pub enum Construct {
    /// The file does not parse (the parser's message), or has an early error.
    Syntax(String),
    /// The file is not UTF-8.
    NotUtf8,
    /// Nesting deeper than the checker follows (see `check::MAX_NESTING`).
    TooDeep,
    /// The file is larger than the checker reads (see `check::MAX_FILE_BYTES`).
    TooLarge,
    /// A native addon (`.node` file) in the package.
    NativeAddon,
    Eval,
    FunctionConstructor,
    Proxy,
    Reflect,
    WebAssembly,
    BigInt,
    /// `globalThis` or `global`.
    GlobalObject(&'static str),
    /// `Symbol` other than `Symbol.iterator`.
    Symbol,
    /// `WeakRef` or `FinalizationRegistry`.
    GarbageCollection(&'static str),
    /// `SharedArrayBuffer` or `Atomics`.
    SharedMemory(&'static str),
    /// `setTimeout` and the other timers.
    Timer(&'static str),
    /// `fetch`, `WebSocket`.
    Network(&'static str),
    /// `process` other than `process.env`.
    Process,
    Arguments,
    /// `require` other than called with one literal argument.
    RequireValue,
    RequireNonLiteral,
    DynamicImport,
    Module {
        syntax: ModuleSyntax,
        specifier: String,
        refusal: ModuleRefusal,
    },
    Getter,
    Setter,
    /// A class `accessor` field.
    AutoAccessor,
    /// `Object.defineProperty`, `Object.defineProperties`, `Object.create` with descriptors.
    PropertyDescriptors(&'static str),
    /// `__defineGetter__` and its relatives.
    LegacyAccessor(String),
    Proto,
    /// `Object.freeze`, `Object.seal`, `Object.preventExtensions`.
    Freeze(&'static str),
    With,
    Generator,
    Yield,
    Delete,
    /// A regular expression literal with a flag the fast path does not implement.
    RegexFlag(char),
    BigIntLiteral,
    TaggedTemplate,
    NewTarget,
    ImportMeta,
    SuperInObjectLiteral,
    ForIn,
    ForAwait,
    TryFinally,
    PrivateMember,
    StaticBlock,
    Decorator,
}

impl Construct {
    /// A short name of the construct, as it appears in source where it can.
    pub fn name(&self) -> String {
        use Construct::*;
        match self {
            Syntax(_) => "syntax error".into(),
            NotUtf8 => "not UTF-8".into(),
            TooDeep => "deep nesting".into(),
            TooLarge => "large file".into(),
            NativeAddon => "native addon".into(),
            Eval => "eval".into(),
            FunctionConstructor => "Function".into(),
            Proxy => "Proxy".into(),
            Reflect => "Reflect".into(),
            WebAssembly => "WebAssembly".into(),
            BigInt => "BigInt".into(),
            GlobalObject(name)
            | GarbageCollection(name)
            | SharedMemory(name)
            | Timer(name)
            | Network(name) => (*name).into(),
            Symbol => "Symbol".into(),
            Process => "process".into(),
            Arguments => "arguments".into(),
            RequireValue => "require".into(),
            RequireNonLiteral => "require(non-literal)".into(),
            DynamicImport => "import()".into(),
            Module {
                syntax, specifier, ..
            } => match syntax {
                ModuleSyntax::Require => format!("require('{specifier}')"),
                ModuleSyntax::Import => format!("import '{specifier}'"),
                ModuleSyntax::ExportFrom => format!("export … from '{specifier}'"),
            },
            Getter => "getter".into(),
            Setter => "setter".into(),
            AutoAccessor => "accessor".into(),
            PropertyDescriptors(name) | Freeze(name) => (*name).into(),
            LegacyAccessor(name) => name.clone(),
            Proto => "__proto__".into(),
            With => "with".into(),
            Generator => "generator".into(),
            Yield => "yield".into(),
            Delete => "delete".into(),
            RegexFlag(flag) => format!("regex flag {flag}"),
            BigIntLiteral => "BigInt literal".into(),
            TaggedTemplate => "tagged template".into(),
            NewTarget => "new.target".into(),
            ImportMeta => "import.meta".into(),
            SuperInObjectLiteral => "super".into(),
            ForIn => "for…in".into(),
            ForAwait => "for await…of".into(),
            TryFinally => "try…finally".into(),
            PrivateMember => "private member".into(),
            StaticBlock => "static block".into(),
            Decorator => "decorator".into(),
        }
    }

    /// Why the fast path does not take it: one short sentence.
    pub fn reason(&self) -> String {
        use Construct::*;
        let text = match self {
            Syntax(message) => return format!("the file does not parse: {message}"),
            NotUtf8 => "the file is not UTF-8 text",
            TooDeep => "it nests deeper than the checker follows (1000 levels)",
            TooLarge => "the file is larger than the checker reads (16 MiB)",
            NativeAddon => "a native addon runs machine code outside the traced JavaScript",
            Eval => "eval runs code made at run time, which cannot be traced ahead",
            FunctionConstructor => "the Function constructor compiles code made at run time",
            Proxy => "a proxy runs handler code on every property access",
            Reflect => "Reflect's meta-programming is not modelled by the compiler",
            WebAssembly => "embedded WebAssembly runs outside the traced JavaScript",
            BigInt | BigIntLiteral => "BigInt values are not represented in the fast path",
            GlobalObject(_) => {
                "the global object turns every global variable into a property access"
            }
            Symbol => "symbols other than Symbol.iterator are not represented",
            GarbageCollection(_) => "it observes garbage collection, which differs per engine",
            SharedMemory(_) => "shared memory belongs to threads, which the fast path has not",
            Timer(_) => "timers are not intrinsics: a fast request has no event loop",
            Network(_) => "outbound network I/O cannot be held back until the answer",
            Process => "only process.env is available in the fast path",
            Arguments => "`arguments` aliases the parameters; use rest parameters instead",
            RequireValue => "require used other than as require('…') hides what it loads",
            RequireNonLiteral => "a computed module name hides what it loads",
            DynamicImport => "import() loads code the check cannot see ahead",
            Module {
                specifier, refusal, ..
            } => return module_reason(specifier, *refusal),
            Getter | Setter | AutoAccessor => "accessors run code on a property access",
            PropertyDescriptors(_) => {
                "property descriptors make accessors and read-only properties"
            }
            LegacyAccessor(_) => "it defines or looks up an accessor",
            Proto => "__proto__ is an accessor of Object.prototype",
            Freeze(_) => "frozen or sealed objects change what a write does",
            With => "with makes every name inside a property lookup",
            Generator | Yield => "generators suspend mid-function, which traces do not model",
            Delete => "delete changes an object's shape after the fact",
            RegexFlag(flag) => {
                return format!("the regex flag `{flag}` is not implemented (g, i, m, s and u are)")
            }
            TaggedTemplate => "a tag function receives the template's raw strings object",
            NewTarget => "new.target depends on how a function was called",
            ImportMeta => "import.meta describes the module's location on disk",
            SuperInObjectLiteral => "super in an object literal's method needs its home object",
            ForIn => "for…in walks inherited enumerable properties; use Object.keys",
            ForAwait => "async iteration is not modelled",
            TryFinally => "a finally block runs on every way out of its try, not modelled yet",
            PrivateMember => "private class members (#name) are not represented",
            StaticBlock => "class static blocks are not normalised",
            Decorator => "decorators rewrite classes at definition time",
        };
        text.to_string()
    }
}

fn module_reason(specifier: &str, refusal: ModuleRefusal) -> String {
    use ModuleRefusal::*;
    match refusal {
        Filesystem => format!(
            "`{specifier}` reads or writes the local filesystem, which the fast path has not"
        ),
        Processes => format!("`{specifier}` starts processes"),
        Network => {
            format!("`{specifier}` does network I/O, which cannot be held back until the answer")
        }
        Threads => format!("`{specifier}` starts threads"),
        CodeEvaluation => format!("`{specifier}` evaluates code or inspects the engine"),
        WebAssembly => format!("`{specifier}` runs WebAssembly outside the traced JavaScript"),
        NodeBuiltin => format!("Node's `{specifier}` module is not an intrinsic of the fast path"),
        OtherAwsSdk => {
            format!("`{specifier}` is not an intrinsic: of the AWS SDK, only @aws-sdk/client-s3 is")
        }
        Absolute => format!("`{specifier}` is an absolute path, outside the package"),
        Missing => format!(
            "`{specifier}` is neither relative, an intrinsic, nor in the package's node_modules"
        ),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn site(file: &str, line: u32, col: u32, construct: Construct) -> Site {
        Site {
            file: file.into(),
            line,
            col,
            construct,
        }
    }

    #[test]
    fn displays_as_file_line_col_construct_reason() {
        let s = site("lib/a.js", 3, 7, Construct::Eval);
        assert_eq!(
            s.to_string(),
            "lib/a.js:3:7: eval: eval runs code made at run time, which cannot be traced ahead"
        );
    }

    #[test]
    fn serialises_the_construct_and_reason_as_text() {
        let s = site(
            "index.js",
            1,
            1,
            Construct::Module {
                syntax: ModuleSyntax::Require,
                specifier: "fs".into(),
                refusal: ModuleRefusal::Filesystem,
            },
        );
        let json = serde_json::to_value(&s).unwrap();
        assert_eq!(json["file"], "index.js");
        assert_eq!(json["line"], 1);
        assert_eq!(json["col"], 1);
        assert_eq!(json["construct"], "require('fs')");
        assert!(json["reason"].as_str().unwrap().contains("filesystem"));
    }

    #[test]
    fn sites_sort_by_file_then_position() {
        let mut sites = [
            site("b.js", 1, 1, Construct::Eval),
            site("a.js", 2, 1, Construct::Eval),
            site("a.js", 1, 9, Construct::Delete),
            site("a.js", 1, 9, Construct::Eval),
            site("a.js", 1, 2, Construct::With),
        ];
        sites.sort();
        let order: Vec<_> = sites
            .iter()
            .map(|s| format!("{}:{}:{}:{}", s.file, s.line, s.col, s.construct.name()))
            .collect();
        assert_eq!(
            order,
            [
                "a.js:1:2:with",
                "a.js:1:9:eval",
                "a.js:1:9:delete",
                "a.js:2:1:eval",
                "b.js:1:1:eval",
            ]
        );
    }

    #[test]
    fn every_reason_is_a_short_sentence() {
        for construct in [
            Construct::Syntax("Unexpected token".into()),
            Construct::Eval,
            Construct::Getter,
            Construct::RegexFlag('y'),
            Construct::TryFinally,
        ] {
            let reason = construct.reason();
            assert!(!reason.is_empty() && reason.len() < 120, "{reason}");
            assert!(!reason.ends_with('.'), "{reason}");
        }
    }
}
