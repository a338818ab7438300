//! Instruments a package: `cargo run -p kiln-breakout --example instrument SRC OUT`.

fn main() {
    let mut args = std::env::args().skip(1);
    let src = args.next().expect("usage: instrument SRC OUT");
    let out = args.next().expect("usage: instrument SRC OUT");
    match kiln_breakout::instrument::instrument_dir(src.as_ref(), out.as_ref()) {
        Ok(report) => println!("{}", serde_json::to_string_pretty(&report).unwrap()),
        Err(error) => eprintln!("{error}"),
    }
}
