//! What a module specifier names: a file of the package, an intrinsic, a Node module, or a
//! package under `node_modules`. Pure: resolution on disk is the walker's.

use crate::site::ModuleRefusal;

/// The packages whose exports become intrinsics (host calls in the fast path); their code is
/// neither checked nor traced.
pub const INTRINSIC_PACKAGES: &[&str] = &["@aws-sdk/client-s3"];

/// The npm scopes of the AWS SDK and the packages it is built from. They are only reached
/// through the SDK, so a package's copy of them is never checked.
pub const SDK_SCOPES: &[&str] = &["@aws-sdk", "@smithy", "@aws-crypto"];

/// What a specifier names.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Target {
    /// `./x`, `../x`: a file of the same package, checked with the others.
    Relative,
    Intrinsic,
    /// A bare name: the package `name` (its first one or two segments) under `node_modules`.
    Package(String),
    Refused(ModuleRefusal),
}

/// Node's built-in modules (without `node:`), each with why it is refused. Everything here is
/// refused: none is an intrinsic yet.
const NODE_MODULES: &[(&str, ModuleRefusal)] = {
    use ModuleRefusal::*;
    &[
        ("assert", NodeBuiltin),
        ("async_hooks", NodeBuiltin),
        ("buffer", NodeBuiltin),
        ("child_process", Processes),
        ("cluster", Processes),
        ("console", NodeBuiltin),
        ("constants", NodeBuiltin),
        ("crypto", NodeBuiltin),
        ("dgram", Network),
        ("diagnostics_channel", NodeBuiltin),
        ("dns", Network),
        ("domain", NodeBuiltin),
        ("events", NodeBuiltin),
        ("fs", Filesystem),
        ("http", Network),
        ("http2", Network),
        ("https", Network),
        ("inspector", CodeEvaluation),
        ("module", CodeEvaluation),
        ("net", Network),
        ("os", NodeBuiltin),
        ("path", NodeBuiltin),
        ("perf_hooks", NodeBuiltin),
        ("process", NodeBuiltin),
        ("punycode", NodeBuiltin),
        ("querystring", NodeBuiltin),
        ("readline", Filesystem),
        ("repl", CodeEvaluation),
        ("sea", NodeBuiltin),
        ("sqlite", Filesystem),
        ("stream", NodeBuiltin),
        ("string_decoder", NodeBuiltin),
        ("sys", NodeBuiltin),
        ("test", NodeBuiltin),
        ("timers", NodeBuiltin),
        ("tls", Network),
        ("trace_events", NodeBuiltin),
        ("tty", NodeBuiltin),
        ("url", NodeBuiltin),
        ("util", NodeBuiltin),
        ("v8", CodeEvaluation),
        ("vm", CodeEvaluation),
        ("wasi", WebAssembly),
        ("worker_threads", Threads),
        ("zlib", NodeBuiltin),
    ]
};

/// Classifies a module specifier as written in `require('…')`, `import … from '…'` or
/// `export … from '…'`.
pub fn classify(specifier: &str) -> Target {
    if specifier == "."
        || specifier == ".."
        || specifier.starts_with("./")
        || specifier.starts_with("../")
    {
        return Target::Relative;
    }
    if specifier.starts_with('/') {
        return Target::Refused(ModuleRefusal::Absolute);
    }
    let (builtin, explicit) = match specifier.strip_prefix("node:") {
        Some(rest) => (rest, true),
        None => (specifier, false),
    };
    // `fs/promises` is `fs`'s, `path/posix` is `path`'s.
    let first = builtin.split('/').next().unwrap_or(builtin);
    if let Some((_, refusal)) = NODE_MODULES.iter().find(|(name, _)| *name == first) {
        return Target::Refused(*refusal);
    }
    if explicit {
        // `node:` names only Node's modules: one this list does not know is newer than it.
        return Target::Refused(ModuleRefusal::NodeBuiltin);
    }
    if INTRINSIC_PACKAGES.contains(&specifier) {
        return Target::Intrinsic;
    }
    let name = package_name(specifier);
    if name.starts_with("@aws-sdk/") {
        return Target::Refused(ModuleRefusal::OtherAwsSdk);
    }
    Target::Package(name.to_string())
}

/// The package a bare specifier is in: `lodash/fp` → `lodash`, `@scope/pkg/x` → `@scope/pkg`.
pub fn package_name(specifier: &str) -> &str {
    let segments = if specifier.starts_with('@') { 2 } else { 1 };
    let end = specifier
        .match_indices('/')
        .nth(segments - 1)
        .map_or(specifier.len(), |(i, _)| i);
    &specifier[..end]
}

#[cfg(test)]
mod tests {
    use super::*;
    use ModuleRefusal::*;

    #[test]
    fn relative_specifiers_are_the_packages_own() {
        for s in ["./lib", "../x.js", ".", "..", "./a/b.cjs"] {
            assert_eq!(classify(s), Target::Relative, "{s}");
        }
    }

    #[test]
    fn the_denied_node_modules_say_why() {
        for (s, why) in [
            ("fs", Filesystem),
            ("node:fs", Filesystem),
            ("fs/promises", Filesystem),
            ("node:fs/promises", Filesystem),
            ("child_process", Processes),
            ("http", Network),
            ("https", Network),
            ("net", Network),
            ("worker_threads", Threads),
            ("vm", CodeEvaluation),
            ("path", NodeBuiltin),
            ("node:crypto", NodeBuiltin),
            ("node:something_new", NodeBuiltin),
        ] {
            assert_eq!(classify(s), Target::Refused(why), "{s}");
        }
    }

    #[test]
    fn only_the_s3_client_of_the_sdk_is_an_intrinsic() {
        assert_eq!(classify("@aws-sdk/client-s3"), Target::Intrinsic);
        assert_eq!(
            classify("@aws-sdk/client-dynamodb"),
            Target::Refused(OtherAwsSdk)
        );
        assert_eq!(
            classify("@aws-sdk/client-s3/dist-cjs/index.js"),
            Target::Refused(OtherAwsSdk)
        );
    }

    #[test]
    fn other_bare_names_are_packages() {
        assert_eq!(classify("lodash"), Target::Package("lodash".into()));
        assert_eq!(classify("lodash/fp"), Target::Package("lodash".into()));
        assert_eq!(
            classify("@scope/pkg/x/y"),
            Target::Package("@scope/pkg".into())
        );
        assert_eq!(classify("/opt/x"), Target::Refused(Absolute));
    }
}
