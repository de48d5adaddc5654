//! The binary AFL++ runs: `cordon-fuzz TARGET`, one input per iteration, in AFL++'s
//! persistent mode. Built by `make fuzz` with `cargo afl build --features afl`.

fn main() {
    let name = std::env::args().nth(1).unwrap_or_default();
    let Some(target) = cordon_fuzz::target(&name) else {
        let names: Vec<&str> = cordon_fuzz::TARGETS.iter().map(|t| t.name).collect();
        eprintln!("usage: cordon-fuzz TARGET, one of: {}", names.join(", "));
        std::process::exit(2);
    };
    // Whatever a target sets up once (a component compiled) is done before the fork server
    // starts, not once per input.
    (target.run)(b"");
    afl::fuzz!(|data: &[u8]| {
        (target.run)(data);
    });
}
