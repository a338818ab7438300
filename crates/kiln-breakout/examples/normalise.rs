//! Prints a file normalised: `cargo run -p kiln-breakout --example normalise FILE [module]`.

fn main() {
    let mut args = std::env::args().skip(1);
    let path = args.next().expect("usage: normalise FILE [module]");
    let kind = match args.next().as_deref() {
        Some("module") => kiln_breakout::SourceKind::Module,
        _ => kiln_breakout::SourceKind::CommonJs,
    };
    let text = std::fs::read_to_string(path).expect("a readable file");
    match kiln_breakout::normalise::normalise(&text, kind) {
        Ok(out) => print!("{out}"),
        Err(error) => eprintln!("{error}"),
    }
}
