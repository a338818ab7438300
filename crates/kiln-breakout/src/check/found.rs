//! What checking one file finds: its unsupported sites and the packages it loads by a bare
//! name. The visitor fills it in; the file-level check hands it on.

use crate::site::{ModuleSyntax, Site};

/// What checking one file found.
#[derive(Debug, Default)]
pub struct FileCheck {
    /// Unsupported constructs, in source order.
    pub sites: Vec<Site>,
    /// Packages the file loads by a bare name: they are checked in turn.
    pub packages: Vec<PackageUse>,
}

/// A package loaded by a bare name, and where.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct PackageUse {
    /// The package: `uuid`, `@scope/name`.
    pub name: String,
    /// As written: `uuid/v4`.
    pub specifier: String,
    pub syntax: ModuleSyntax,
    pub file: String,
    pub line: u32,
    pub col: u32,
}
