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
    // A panic Cordon catches itself (a library's, under a net such as the one around
    // wit-parser's decoder) is no finding; one that leaves the target is, and aborts.
    afl::fuzz_nohook!(|data: &[u8]| {
        if std::panic::catch_unwind(|| (target.run)(data)).is_err() {
            std::process::abort();
        }
    });
}
