//! How kiln talks to what runs in a sandbox: the framed protocol of kiln's runtime shims and
//! the AWS Lambda Runtime API that `provided` runtimes (and the official runtime interface
//! clients) speak.

pub(super) mod frame;
pub(super) mod runtime_api;
