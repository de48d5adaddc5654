//! A short pass of every fuzz target, in `cargo test`: its committed corpus, the inputs that
//! once broke it, and mutations of them from a fixed seed. The long runs are AFL++'s
//! (`make fuzz`, recorded in docs/reliability.md); this keeps what they found found.

use std::panic::{AssertUnwindSafe, catch_unwind};
use std::path::{Path, PathBuf};

use cordon_fuzz::{TARGETS, Target};

/// Mutations tried per target.
const MUTATIONS: usize = 3_000;

/// The longest input a mutation makes.
const MAX_INPUT: usize = 64 << 10;

fn dir(kind: &str, target: &str) -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .join(kind)
        .join(target)
}

fn inputs(kind: &str, target: &str) -> Vec<(String, Vec<u8>)> {
    let Ok(entries) = std::fs::read_dir(dir(kind, target)) else {
        return Vec::new();
    };
    let mut found: Vec<(String, Vec<u8>)> = entries
        .map(|e| e.expect("a directory entry").path())
        .filter(|p| p.is_file())
        .map(|p| {
            let bytes = std::fs::read(&p).expect("a corpus file reads");
            (p.display().to_string(), bytes)
        })
        .collect();
    found.sort();
    found
}

/// xorshift64*: the same mutations on every run, so a failure here fails again.
struct Rng(u64);

impl Rng {
    fn next(&mut self) -> u64 {
        self.0 ^= self.0 >> 12;
        self.0 ^= self.0 << 25;
        self.0 ^= self.0 >> 27;
        self.0.wrapping_mul(0x2545_F491_4F6C_DD1D)
    }

    fn below(&mut self, n: usize) -> usize {
        (self.next() % n.max(1) as u64) as usize
    }
}

/// Bytes parsers care about: structure, quotes, escapes, line ends, UTF-8 lead and
/// continuation bytes, and numbers at their edges.
const INTERESTING: &[&[u8]] = &[
    b"\"",
    b"{",
    b"}",
    b"[",
    b"]",
    b":",
    b",",
    b"\\",
    b"\\u0000",
    b"\\ud800",
    b"\n",
    b"\r\n",
    b"\n\n",
    b"data: ",
    b"\xff",
    b"\xc3",
    b"\xe2\x82",
    b"\x00",
    b"-",
    b".",
    b"e999",
    b"1e-999",
    b"18446744073709551616",
    b"-9223372036854775809",
    b"null",
    b"true",
    b"[]",
    b"{}",
    b"=",
    b"/",
    b"..",
    b"*",
    b"**",
    b"@",
    b"#",
    b"%",
    b"%00",
];

fn mutate(rng: &mut Rng, seeds: &[(String, Vec<u8>)]) -> Vec<u8> {
    let mut data = seeds[rng.below(seeds.len())].1.clone();
    for _ in 0..=rng.below(4) {
        let at = rng.below(data.len() + 1);
        match rng.below(7) {
            0 if !data.is_empty() => {
                let i = rng.below(data.len());
                data[i] ^= 1 << rng.below(8);
            }
            1 if !data.is_empty() => {
                let i = rng.below(data.len());
                data[i] = rng.next() as u8;
            }
            2 => {
                let piece = INTERESTING[rng.below(INTERESTING.len())];
                data.splice(at..at, piece.iter().copied());
            }
            3 if !data.is_empty() => {
                let end = (at + 1 + rng.below(16)).min(data.len());
                data.drain(at.min(end)..end);
            }
            4 if !data.is_empty() => {
                let from = rng.below(data.len());
                let end = (from + 1 + rng.below(64)).min(data.len());
                let piece = data[from..end].to_vec();
                data.splice(at..at, piece);
            }
            5 => {
                let other = &seeds[rng.below(seeds.len())].1;
                let from = rng.below(other.len() + 1);
                data.splice(at..at, other[from..].iter().copied());
            }
            _ => data.truncate(at),
        }
    }
    data.truncate(MAX_INPUT);
    data
}

/// Runs `input`; a panic is kept as a file under `target/fuzz-smoke/` and described.
fn run(target: &Target, input: &[u8], origin: &str) -> Option<String> {
    let outcome = catch_unwind(AssertUnwindSafe(|| (target.run)(input)));
    let panic = outcome.err()?;
    let message = panic
        .downcast_ref::<String>()
        .cloned()
        .or_else(|| panic.downcast_ref::<&str>().map(|s| s.to_string()))
        .unwrap_or_default();
    let kept = Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("../../target/fuzz-smoke")
        .join(target.name);
    let _ = std::fs::create_dir_all(&kept);
    let file = kept.join(format!("{:016x}", fnv(input)));
    let _ = std::fs::write(&file, input);
    Some(format!(
        "{}: {origin} panicked ({message}); the input is in {}",
        target.name,
        file.display()
    ))
}

fn fnv(data: &[u8]) -> u64 {
    data.iter().fold(0xcbf2_9ce4_8422_2325, |h, b| {
        (h ^ u64::from(*b)).wrapping_mul(0x0100_0000_01b3)
    })
}

#[test]
fn every_target_takes_its_corpus_its_regressions_and_mutations_of_them() {
    let mut failures = Vec::new();
    for (i, target) in TARGETS.iter().enumerate() {
        let corpus = inputs("corpus", target.name);
        assert!(
            corpus.len() >= 3,
            "{}: the corpus at {} has {} inputs; give it at least three",
            target.name,
            dir("corpus", target.name).display(),
            corpus.len()
        );
        let regressions = inputs("regressions", target.name);
        for (origin, input) in corpus.iter().chain(&regressions) {
            failures.extend(run(target, input, origin));
        }
        let mut rng = Rng(0x9E37_79B9_7F4A_7C15 ^ (i as u64 + 1));
        for n in 0..MUTATIONS {
            let input = mutate(&mut rng, &corpus);
            failures.extend(run(target, &input, &format!("mutation {n}")));
        }
    }
    assert!(failures.is_empty(), "{}", failures.join("\n"));
}

#[test]
fn every_target_has_a_corpus_and_no_stray_directories() {
    for kind in ["corpus", "regressions"] {
        let Ok(entries) = std::fs::read_dir(Path::new(env!("CARGO_MANIFEST_DIR")).join(kind))
        else {
            continue;
        };
        for entry in entries {
            let name = entry.unwrap().file_name().to_string_lossy().into_owned();
            assert!(
                cordon_fuzz::target(&name).is_some(),
                "{kind}/{name} is no target's"
            );
        }
    }
}
