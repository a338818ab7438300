//! `kiln breakout …`: the BREAKOUT fast path's tools that need no server.

use std::path::PathBuf;

use clap::{Args, Subcommand};

use crate::error_chain;

#[derive(Args, Debug)]
pub struct BreakoutArgs {
    #[command(subcommand)]
    pub command: BreakoutCommand,
}

#[derive(Subcommand, Debug)]
pub enum BreakoutCommand {
    /// List the constructs of a function's package outside the subset the fast path supports,
    /// as `file:line:col: construct: reason` (docs/breakout.md). Exit status: 0 when there
    /// are none, 1 when there are, 2 when DIR cannot be checked.
    Check {
        /// The function's package: the directory `kiln deploy --code` would zip.
        dir: PathBuf,
    },
    /// Write the function's package, instrumented for tracing, to OUT: every file the check
    /// reads normalised, with calls into the tracing runtime (runtimes/nodejs/breakout.js)
    /// and each unsupported construct a ☠ where it runs. Files that cannot be rewritten are
    /// copied as they are and listed. Exit status: 0 when written, 2 when it cannot be.
    Instrument {
        /// The function's package.
        dir: PathBuf,
        /// Where to write the instrumented copy (created; not inside DIR).
        #[arg(long)]
        out: PathBuf,
    },
}

/// Exit status of a check that found unsupported constructs.
const FOUND: i32 = 1;
/// Exit status of a check that could not run.
const CANNOT_CHECK: i32 = 2;

pub fn run(args: BreakoutArgs, json_output: bool) -> anyhow::Result<i32> {
    match args.command {
        BreakoutCommand::Check { dir } => check(&dir, json_output),
        BreakoutCommand::Instrument { dir, out } => instrument(&dir, &out, json_output),
    }
}

fn instrument(
    dir: &std::path::Path,
    out: &std::path::Path,
    json_output: bool,
) -> anyhow::Result<i32> {
    let report = match kiln_breakout::instrument::instrument_dir(dir, out) {
        Ok(report) => report,
        Err(e) => {
            eprintln!("kiln: {}", error_chain(&e));
            return Ok(CANNOT_CHECK);
        }
    };
    if json_output {
        println!("{}", serde_json::to_string_pretty(&report)?);
    } else {
        for (file, why) in &report.left {
            println!("{file}: copied as it is: {why}");
        }
        eprintln!(
            "{} file{} instrumented, {} copied as {}, {} unsupported construct{} marked",
            report.instrumented.len(),
            if report.instrumented.len() == 1 {
                ""
            } else {
                "s"
            },
            report.left.len(),
            if report.left.len() == 1 {
                "it is"
            } else {
                "they are"
            },
            report.sites.len(),
            if report.sites.len() == 1 { "" } else { "s" },
        );
    }
    Ok(0)
}

fn check(dir: &std::path::Path, json_output: bool) -> anyhow::Result<i32> {
    let report = match kiln_breakout::check::check_dir(dir) {
        Ok(report) => report,
        Err(e) => {
            eprintln!("kiln: {}", error_chain(&e));
            return Ok(CANNOT_CHECK);
        }
    };
    if json_output {
        println!("{}", serde_json::to_string_pretty(&report)?);
    } else {
        for site in &report.sites {
            println!("{site}");
        }
        eprintln!(
            "{} unsupported construct{} in {} file{} checked",
            report.sites.len(),
            if report.sites.len() == 1 { "" } else { "s" },
            report.files_checked,
            if report.files_checked == 1 { "" } else { "s" },
        );
    }
    Ok(if report.sites.is_empty() { 0 } else { FOUND })
}
