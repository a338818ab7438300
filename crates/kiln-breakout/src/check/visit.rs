//! The visitor that finds unsupported constructs in a parsed file (`docs/breakout.md` lists
//! the subset and why each construct outside it is refused).

use oxc_ast::ast::*;
use oxc_ast_visit::{walk, Visit};
use oxc_semantic::{ScopeFlags, Scoping};
use oxc_span::{GetSpan, Span};

use super::found::{FileCheck, PackageUse};
use super::modules::{classify, Target};
use crate::position::LineIndex;
use crate::site::{Construct, ModuleSyntax, Site};

/// What `super` refers to in the code being visited: a class's members, or an object
/// literal's methods (whose home object the fast path does not model).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Home {
    Class,
    ObjectLiteral,
}

pub struct Checker<'s> {
    file: &'s str,
    index: &'s LineIndex<'s>,
    scoping: &'s Scoping,
    homes: Vec<Home>,
    found: FileCheck,
}

impl<'s> Checker<'s> {
    pub fn new(file: &'s str, index: &'s LineIndex<'s>, scoping: &'s Scoping) -> Self {
        Checker {
            file,
            index,
            scoping,
            homes: Vec::new(),
            found: FileCheck::default(),
        }
    }

    pub fn finish(self) -> FileCheck {
        self.found
    }

    fn site(&mut self, span: Span, construct: Construct) {
        let (line, col) = self.index.line_col(span.start);
        self.found.sites.push(Site {
            file: self.file.to_string(),
            line,
            col,
            construct,
        });
    }

    /// Whether a name refers to a global: it is bound nowhere in the file.
    fn is_global(&self, ident: &IdentifierReference<'_>) -> bool {
        match ident.reference_id.get() {
            Some(id) => self.scoping.get_reference(id).symbol_id().is_none(),
            None => true,
        }
    }

    fn global_name<'e>(&self, expression: &'e Expression<'_>) -> Option<&'e str> {
        match expression {
            Expression::Identifier(ident) if self.is_global(ident) => Some(ident.name.as_str()),
            _ => None,
        }
    }

    /// A module named by `specifier` at `span`: refused, an intrinsic, the package's own, or
    /// a package to check.
    fn module(&mut self, syntax: ModuleSyntax, specifier: &str, span: Span) {
        match classify(specifier) {
            Target::Relative | Target::Intrinsic => {}
            Target::Package(name) => {
                let (line, col) = self.index.line_col(span.start);
                self.found.packages.push(PackageUse {
                    name,
                    specifier: specifier.to_string(),
                    syntax,
                    file: self.file.to_string(),
                    line,
                    col,
                });
            }
            Target::Refused(refusal) => self.site(
                span,
                Construct::Module {
                    syntax,
                    specifier: specifier.to_string(),
                    refusal,
                },
            ),
        }
    }

    /// `require(…)`: its one argument must be a literal.
    fn require(&mut self, call: &CallExpression<'_>) {
        let literal = match call.arguments.as_slice() {
            [Argument::StringLiteral(s)] => Some(s.value.as_str()),
            [Argument::TemplateLiteral(t)] if t.expressions.is_empty() => t
                .quasis
                .first()
                .and_then(|q| q.value.cooked.as_ref())
                .map(|c| c.as_str()),
            _ => None,
        };
        match literal {
            Some(specifier) => self.module(ModuleSyntax::Require, specifier, call.span),
            None => self.site(call.span, Construct::RequireNonLiteral),
        }
    }

    fn with_home(&mut self, home: Home, visit: impl FnOnce(&mut Self)) {
        self.homes.push(home);
        visit(self);
        self.homes.pop();
    }
}

/// A global that is refused wherever it is named, and as what.
fn refused_global(name: &str) -> Option<Construct> {
    use Construct::*;
    Some(match name {
        "eval" => Eval,
        "Function" => FunctionConstructor,
        "Proxy" => Proxy,
        "Reflect" => Reflect,
        "WebAssembly" => WebAssembly,
        "BigInt" => BigInt,
        "globalThis" => GlobalObject("globalThis"),
        "global" => GlobalObject("global"),
        "Symbol" => Symbol,
        "WeakRef" => GarbageCollection("WeakRef"),
        "FinalizationRegistry" => GarbageCollection("FinalizationRegistry"),
        "SharedArrayBuffer" => SharedMemory("SharedArrayBuffer"),
        "Atomics" => SharedMemory("Atomics"),
        "setTimeout" => Timer("setTimeout"),
        "setInterval" => Timer("setInterval"),
        "setImmediate" => Timer("setImmediate"),
        "queueMicrotask" => Timer("queueMicrotask"),
        "clearTimeout" => Timer("clearTimeout"),
        "clearInterval" => Timer("clearInterval"),
        "clearImmediate" => Timer("clearImmediate"),
        "fetch" => Network("fetch"),
        "WebSocket" => Network("WebSocket"),
        "process" => Process,
        "arguments" => Arguments,
        "require" => RequireValue,
        _ => return None,
    })
}

/// Properties that define or reach accessors, whatever the object.
fn accessor_property(name: &str) -> Option<Construct> {
    match name {
        "__defineGetter__" | "__defineSetter__" | "__lookupGetter__" | "__lookupSetter__" => {
            Some(Construct::LegacyAccessor(name.to_string()))
        }
        "__proto__" => Some(Construct::Proto),
        _ => None,
    }
}

/// The regex flags the fast path implements.
const REGEX_FLAGS: &str = "gimsu";

impl<'a> Visit<'a> for Checker<'_> {
    fn visit_identifier_reference(&mut self, it: &IdentifierReference<'a>) {
        if self.is_global(it) {
            if let Some(construct) = refused_global(it.name.as_str()) {
                self.site(it.span, construct);
            }
        }
    }

    fn visit_static_member_expression(&mut self, it: &StaticMemberExpression<'a>) {
        let property = it.property.name.as_str();
        match (self.global_name(&it.object), property) {
            // The two allowed uses of otherwise refused globals.
            (Some("process"), "env") | (Some("Symbol"), "iterator") => return,
            (Some("Object"), "defineProperty") => self.site(
                it.span,
                Construct::PropertyDescriptors("Object.defineProperty"),
            ),
            (Some("Object"), "defineProperties") => self.site(
                it.span,
                Construct::PropertyDescriptors("Object.defineProperties"),
            ),
            (Some("Object"), "freeze") => self.site(it.span, Construct::Freeze("Object.freeze")),
            (Some("Object"), "seal") => self.site(it.span, Construct::Freeze("Object.seal")),
            (Some("Object"), "preventExtensions") => {
                self.site(it.span, Construct::Freeze("Object.preventExtensions"))
            }
            _ => {}
        }
        if let Some(construct) = accessor_property(property) {
            self.site(it.property.span, construct);
        }
        walk::walk_static_member_expression(self, it);
    }

    fn visit_computed_member_expression(&mut self, it: &ComputedMemberExpression<'a>) {
        if let Expression::StringLiteral(key) = &it.expression {
            if let Some(construct) = accessor_property(key.value.as_str()) {
                self.site(key.span, construct);
            }
        }
        walk::walk_computed_member_expression(self, it);
    }

    fn visit_call_expression(&mut self, it: &CallExpression<'a>) {
        if self.global_name(&it.callee) == Some("require") {
            self.require(it);
            for argument in &it.arguments {
                self.visit_argument(argument);
            }
            return;
        }
        if let Expression::StaticMemberExpression(member) = &it.callee {
            if self.global_name(&member.object) == Some("Object")
                && member.property.name == "create"
                && it.arguments.len() > 1
            {
                self.site(it.span, Construct::PropertyDescriptors("Object.create"));
            }
        }
        walk::walk_call_expression(self, it);
    }

    fn visit_import_declaration(&mut self, it: &ImportDeclaration<'a>) {
        self.module(ModuleSyntax::Import, it.source.value.as_str(), it.span);
        walk::walk_import_declaration(self, it);
    }

    fn visit_export_from_declaration(&mut self, it: &ExportFromDeclaration<'a>) {
        self.module(ModuleSyntax::ExportFrom, it.source.value.as_str(), it.span);
        walk::walk_export_from_declaration(self, it);
    }

    fn visit_export_all_declaration(&mut self, it: &ExportAllDeclaration<'a>) {
        self.module(ModuleSyntax::ExportFrom, it.source.value.as_str(), it.span);
        walk::walk_export_all_declaration(self, it);
    }

    fn visit_import_expression(&mut self, it: &ImportExpression<'a>) {
        self.site(it.span, Construct::DynamicImport);
        walk::walk_import_expression(self, it);
    }

    fn visit_new_target(&mut self, it: &NewTarget) {
        self.site(it.span, Construct::NewTarget);
    }

    fn visit_import_meta(&mut self, it: &ImportMeta) {
        self.site(it.span, Construct::ImportMeta);
    }

    fn visit_tagged_template_expression(&mut self, it: &TaggedTemplateExpression<'a>) {
        self.site(it.span, Construct::TaggedTemplate);
        walk::walk_tagged_template_expression(self, it);
    }

    fn visit_big_int_literal(&mut self, it: &BigIntLiteral<'a>) {
        self.site(it.span, Construct::BigIntLiteral);
    }

    fn visit_reg_exp_literal(&mut self, it: &RegExpLiteral<'a>) {
        let flags = it.regex.flags.to_string();
        if let Some(flag) = flags.chars().find(|f| !REGEX_FLAGS.contains(*f)) {
            self.site(it.span, Construct::RegexFlag(flag));
        }
    }

    fn visit_with_statement(&mut self, it: &WithStatement<'a>) {
        self.site(it.span, Construct::With);
        walk::walk_with_statement(self, it);
    }

    fn visit_unary_expression(&mut self, it: &UnaryExpression<'a>) {
        if it.operator == UnaryOperator::Delete {
            self.site(it.span, Construct::Delete);
        }
        walk::walk_unary_expression(self, it);
    }

    fn visit_function(&mut self, it: &Function<'a>, flags: ScopeFlags) {
        if it.generator {
            self.site(it.span, Construct::Generator);
        }
        walk::walk_function(self, it, flags);
    }

    fn visit_yield_expression(&mut self, it: &YieldExpression<'a>) {
        self.site(it.span, Construct::Yield);
        walk::walk_yield_expression(self, it);
    }

    fn visit_object_property(&mut self, it: &ObjectProperty<'a>) {
        match it.kind {
            PropertyKind::Get => self.site(it.span, Construct::Getter),
            PropertyKind::Set => self.site(it.span, Construct::Setter),
            PropertyKind::Init => {
                // `{ __proto__: p }` sets the prototype; `{ ["__proto__"]: p }` does not.
                if !it.computed && !it.shorthand && !it.method && is_proto_key(&it.key) {
                    self.site(it.key.span(), Construct::Proto);
                }
            }
        }
        if it.method || it.kind != PropertyKind::Init {
            self.with_home(Home::ObjectLiteral, |this| {
                walk::walk_object_property(this, it)
            });
        } else {
            walk::walk_object_property(self, it);
        }
    }

    fn visit_method_definition(&mut self, it: &MethodDefinition<'a>) {
        match it.kind {
            MethodDefinitionKind::Get => self.site(it.span, Construct::Getter),
            MethodDefinitionKind::Set => self.site(it.span, Construct::Setter),
            MethodDefinitionKind::Constructor | MethodDefinitionKind::Method => {}
        }
        self.with_home(Home::Class, |this| walk::walk_method_definition(this, it));
    }

    fn visit_property_definition(&mut self, it: &PropertyDefinition<'a>) {
        self.with_home(Home::Class, |this| walk::walk_property_definition(this, it));
    }

    fn visit_accessor_property(&mut self, it: &AccessorProperty<'a>) {
        self.site(it.span, Construct::AutoAccessor);
        self.with_home(Home::Class, |this| walk::walk_accessor_property(this, it));
    }

    fn visit_static_block(&mut self, it: &StaticBlock<'a>) {
        self.site(it.span, Construct::StaticBlock);
        self.with_home(Home::Class, |this| walk::walk_static_block(this, it));
    }

    fn visit_private_identifier(&mut self, it: &PrivateIdentifier<'a>) {
        self.site(it.span, Construct::PrivateMember);
    }

    fn visit_decorator(&mut self, it: &Decorator<'a>) {
        self.site(it.span, Construct::Decorator);
        walk::walk_decorator(self, it);
    }

    fn visit_super(&mut self, it: &Super) {
        if self.homes.last() == Some(&Home::ObjectLiteral) {
            self.site(it.span, Construct::SuperInObjectLiteral);
        }
    }

    fn visit_for_in_statement(&mut self, it: &ForInStatement<'a>) {
        self.site(it.span, Construct::ForIn);
        walk::walk_for_in_statement(self, it);
    }

    fn visit_for_of_statement(&mut self, it: &ForOfStatement<'a>) {
        if it.r#await {
            self.site(it.span, Construct::ForAwait);
        }
        walk::walk_for_of_statement(self, it);
    }

    fn visit_try_statement(&mut self, it: &TryStatement<'a>) {
        if let Some(finalizer) = &it.finalizer {
            self.site(finalizer.span, Construct::TryFinally);
        }
        walk::walk_try_statement(self, it);
    }
}

fn is_proto_key(key: &PropertyKey<'_>) -> bool {
    match key {
        PropertyKey::StaticIdentifier(ident) => ident.name == "__proto__",
        PropertyKey::StringLiteral(s) => s.value == "__proto__",
        _ => false,
    }
}
