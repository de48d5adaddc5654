//! `cordon new <rust|python|js|c> NAME [--dir D]`: a plugin project that builds outside the
//! Cordon tree. The SDK and the WIT contract are copied in (vendored, so the project builds
//! offline against exactly this Cordon's contract; third-party packages are pinned), with a
//! test, a README and the exact build and install commands.

use std::path::{Path, PathBuf};

use crate::term::outln;

/// The languages a project can be made for.
#[derive(Debug, Clone, Copy, PartialEq, Eq, clap::ValueEnum)]
pub enum Language {
    /// The Rust SDK (`sdk/rust`): a typed function per tool.
    Rust,
    /// The Python SDK (`sdk/python`) over componentize-py.
    Python,
    /// The JavaScript SDK (`sdk/js`) over componentize-js.
    Js,
    /// Plain typed exports in C (wit-bindgen c, clang 19): no SDK.
    C,
}

/// `cordon new`.
#[derive(Debug, clap::Args)]
pub struct NewArgs {
    /// The language of the project.
    #[arg(value_enum)]
    language: Language,
    /// The plugin's name: lowercase letters, digits, `-` and `_`, starting with a letter.
    name: String,
    /// Where to create it (default: ./NAME). Must not exist, or be an empty directory.
    #[arg(long, value_name = "DIR")]
    dir: Option<PathBuf>,
}

/// Why no project was made; the user can fix each.
#[derive(Debug, thiserror::Error)]
pub enum NewError {
    /// The name cannot name a plugin (and a crate or package).
    #[error(
        "`{0}` cannot name a plugin: use lowercase letters, digits, `-` and `_`, starting with \
         a letter, at most 64 characters"
    )]
    BadName(String),
    /// The directory has something in it already.
    #[error("{} already exists and is not empty: choose another --dir, or remove it", .0.display())]
    NotEmpty(PathBuf),
}

/// One file of a new project.
struct File {
    path: &'static str,
    text: &'static str,
}

macro_rules! files {
    ($($path:literal => $source:literal),* $(,)?) => {
        &[$(File { path: $path, text: include_str!(concat!("../../../", $source)) }),*]
    };
}

const CONTRACT: &str = include_str!("../../../wit/tool.wit");

const RUST: &[File] = files![
    "src/lib.rs" => "sdk/rust/examples/two_tools.rs",
    "cordon-sdk/Cargo.toml" => "sdk/rust/Cargo.toml",
    "cordon-sdk/README.md" => "sdk/rust/README.md",
    "cordon-sdk/examples/two_tools.rs" => "sdk/rust/examples/two_tools.rs",
    "cordon-sdk/src/lib.rs" => "sdk/rust/src/lib.rs",
    "cordon-sdk/src/bindings.rs" => "sdk/rust/src/bindings.rs",
    "cordon-sdk/src/bulk_read.rs" => "sdk/rust/src/bulk_read.rs",
    "cordon-sdk/src/content.rs" => "sdk/rust/src/content.rs",
    "cordon-sdk/src/error.rs" => "sdk/rust/src/error.rs",
    "cordon-sdk/src/grants.rs" => "sdk/rust/src/grants.rs",
    "cordon-sdk/src/log.rs" => "sdk/rust/src/log.rs",
    "cordon-sdk/src/paths.rs" => "sdk/rust/src/paths.rs",
    "cordon-sdk/src/schema.rs" => "sdk/rust/src/schema.rs",
    "cordon-sdk/src/written.rs" => "sdk/rust/src/written.rs",
    "Cargo.lock" => "sdk/rust/Cargo.lock",
];

const PYTHON: &[File] = files![
    "app.py" => "sdk/python/template/app.py",
    "Makefile" => "sdk/python/template/Makefile",
    ".gitignore" => "sdk/python/template/.gitignore",
    "tests/test_app.py" => "sdk/python/template/tests/test_app.py",
    "tests/test_component.py" => "sdk/python/template/tests/test_component.py",
    "sdk/cordon_sdk.py" => "sdk/python/cordon_sdk.py",
    "sdk/cordon_testing.py" => "sdk/python/cordon_testing.py",
    "sdk/README.md" => "sdk/python/README.md",
];

const JS: &[File] = files![
    "tools.js" => "sdk/js/template/tools.js",
    "app.js" => "sdk/js/template/app.js",
    "package.json" => "sdk/js/template/package.json",
    "README.md" => "sdk/js/template/README.md",
    ".gitignore" => "sdk/js/template/.gitignore",
    "tests/tools.test.js" => "sdk/js/template/tests/tools.test.js",
    "cordon_sdk.js" => "sdk/js/cordon_sdk.js",
    "testing/register.js" => "sdk/js/testing/register.js",
    "testing/hooks.js" => "sdk/js/testing/hooks.js",
    "testing/host/log.js" => "sdk/js/testing/host/log.js",
    "testing/host/bulk-read.js" => "sdk/js/testing/host/bulk-read.js",
    "testing/host/grant-wanted.js" => "sdk/js/testing/host/grant-wanted.js",
];

const C: &[File] = files![
    "tool.c" => "sdk/c/template/tool.c",
    "wit/tool.wit" => "sdk/c/template/wit/tool.wit",
    "Makefile" => "sdk/c/template/Makefile",
    "README.md" => "sdk/c/template/README.md",
    ".gitignore" => "sdk/c/template/.gitignore",
];

/// What differs per language beyond the copied files: where the contract goes, the files
/// written for this project, and how to build, test and install it.
fn project(language: Language, name: &str) -> (Vec<(String, String)>, Vec<String>) {
    let copied = |files: &[File]| -> Vec<(String, String)> {
        files
            .iter()
            .map(|f| (f.path.to_string(), f.text.to_string()))
            .collect()
    };
    let crate_name = name.replace('-', "_");
    match language {
        Language::Rust => {
            let mut files = copied(RUST);
            files.push(("cordon-sdk/wit/tool.wit".into(), CONTRACT.into()));
            files.push((
                "Cargo.toml".into(),
                format!(
                    "[package]\nname = \"{name}\"\nversion = \"0.1.0\"\nedition = \"2024\"\n\n\
                 [lib]\ncrate-type = [\"cdylib\"]\n\n\
                 [dependencies]\ncordon-sdk = {{ path = \"cordon-sdk\" }}\nschemars = \"1\"\n\
                 serde = {{ version = \"1\", features = [\"derive\"] }}\nserde_json = \"1\"\n\n\
                 [profile.release]\nopt-level = \"s\"\nlto = true\nstrip = \"debuginfo\"\n"
                ),
            ));
            files.push((".gitignore".into(), "target/\n".into()));
            files.push(("README.md".into(), format!(
                "# {name}\n\nCordon tools in Rust: `src/lib.rs` declares them with the Cordon SDK \
                 (copied into `cordon-sdk/`, with the WIT contract).\n\n```sh\n\
                 rustup target add wasm32-wasip2\n\
                 cargo test                                     # the tools, natively\n\
                 cargo build --release --target wasm32-wasip2\n\
                 cordon plugin install target/wasm32-wasip2/release/{crate_name}.wasm --name {name}\n\
                 cordon call greet '{{\"name\": \"you\"}}'\n```\n"
            )));
            let lib = files
                .iter_mut()
                .find(|(p, _)| p == "src/lib.rs")
                .expect("listed above");
            lib.1 = lib.1.replacen(
                "//! A plugin with two tools, as in the README. Build it into a component with\n\
                 //! `cargo build --release --example two_tools --target wasm32-wasip2`.",
                "//! A plugin with two tools. Build it into a component with\n\
                 //! `cargo build --release --target wasm32-wasip2`.",
                1,
            ) + RUST_TESTS;
            (
                files,
                vec![
                    "cargo test".into(),
                    "cargo build --release --target wasm32-wasip2".into(),
                    format!(
                        "cordon plugin install target/wasm32-wasip2/release/{crate_name}.wasm --name {name}"
                    ),
                ],
            )
        }
        Language::Python => {
            let mut files = copied(PYTHON);
            files.push(("sdk/wit/tool.wit".into(), CONTRACT.into()));
            let makefile = files
                .iter_mut()
                .find(|(p, _)| p == "Makefile")
                .expect("listed above");
            makefile.1 = makefile
                .1
                .replace(
                    "COMPONENTIZE ?= ../../../target/venv/bin/componentize-py",
                    "COMPONENTIZE ?= .venv/bin/componentize-py",
                )
                .replace("SDK          ?= ..", "SDK          ?= sdk")
                .replace(
                    "PYTHON       ?= $(if $(wildcard ../../../target/venv/bin/python),../../../target/venv/bin/python,python3)",
                    "PYTHON       ?= $(if $(wildcard .venv/bin/python),.venv/bin/python,python3)",
                );
            files.push(("README.md".into(), format!(
                "# {name}\n\nCordon tools in Python: `app.py` declares them with the Cordon SDK \
                 (copied into `sdk/`, with the WIT contract); componentize-py builds the component.\n\n\
                 ```sh\npython3 -m venv .venv && .venv/bin/pip install componentize-py==0.25.1 wasmtime==50.0.1\n\
                 make test                                      # the tools, natively (and the component once built)\n\
                 make                                           # build/text_stats.wasm\n\
                 cordon plugin install build/text_stats.wasm --name {name}\n\
                 cordon call text_stats '{{\"text\": \"to be or not to be\"}}'\n```\n"
            )));
            (files, vec![
                "python3 -m venv .venv && .venv/bin/pip install componentize-py==0.25.1 wasmtime==50.0.1".into(),
                "make test".into(),
                "make".into(),
                format!("cordon plugin install build/text_stats.wasm --name {name}"),
            ])
        }
        Language::Js => {
            let mut files = copied(JS);
            files.push(("wit/tool.wit".into(), CONTRACT.into()));
            let package = files
                .iter_mut()
                .find(|(p, _)| p == "package.json")
                .expect("listed above");
            package.1 = package.1.replacen(
                "\"name\": \"cordon-plugin\"",
                &format!("\"name\": \"{name}\""),
                1,
            );
            (
                files,
                vec![
                    "npm install".into(),
                    "npm test".into(),
                    "npm run build".into(),
                    format!("cordon plugin install build/plugin.wasm --name {name}"),
                ],
            )
        }
        Language::C => (
            copied(C),
            vec![
                "make".into(),
                "make test".into(),
                format!("cordon plugin install build/tool.wasm --name {name}"),
            ],
        ),
    }
}

/// Native tests appended to the Rust example: the tools called as the host would call them.
const RUST_TESTS: &str = r##"
#[cfg(test)]
mod tests {
    #[test]
    fn greet_answers_and_refuses_too_much_excitement() {
        let plugin = super::plugin();
        let said = plugin.call("greet", r#"{"name": "you", "excitement": 2}"#).unwrap();
        assert_eq!(format!("{said:?}"), format!("{:?}", vec![cordon_sdk::Content::Text("Hello, you!!".into())]));
        assert!(plugin.call("greet", r#"{"name": "you", "excitement": 11}"#).is_err());
    }
}
"##;

fn valid_name(name: &str) -> bool {
    let mut chars = name.chars();
    matches!(chars.next(), Some(c) if c.is_ascii_lowercase())
        && chars.all(|c| c.is_ascii_lowercase() || c.is_ascii_digit() || c == '-' || c == '_')
        && name.len() <= 64
}

/// Makes the project and says how to build, test and install it.
pub fn run(args: NewArgs) -> anyhow::Result<()> {
    if !valid_name(&args.name) {
        return Err(NewError::BadName(args.name).into());
    }
    let dir = args.dir.unwrap_or_else(|| PathBuf::from(&args.name));
    if std::fs::read_dir(&dir).is_ok_and(|mut entries| entries.next().is_some()) {
        return Err(NewError::NotEmpty(dir).into());
    }
    let (files, commands) = project(args.language, &args.name);
    write_all(&dir, &files)?;
    outln!(
        "Created {} plugin `{}` in {} ({} files).",
        format!("{:?}", args.language).to_lowercase(),
        args.name,
        dir.display(),
        files.len()
    );
    outln!("Then, in {}:", dir.display());
    for command in commands {
        outln!("  {command}");
    }
    Ok(())
}

fn write_all(dir: &Path, files: &[(String, String)]) -> anyhow::Result<()> {
    use anyhow::Context;
    for (path, text) in files {
        let path = dir.join(path);
        if let Some(parent) = path.parent() {
            std::fs::create_dir_all(parent)
                .with_context(|| format!("cannot create {}", parent.display()))?;
        }
        std::fs::write(&path, text).with_context(|| format!("cannot write {}", path.display()))?;
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A new Rust project builds only if it carries every source file of the SDK.
    #[test]
    fn the_rust_template_carries_every_sdk_source_file() {
        let dir = concat!(env!("CARGO_MANIFEST_DIR"), "/../../sdk/rust/src");
        for entry in std::fs::read_dir(dir).unwrap() {
            let name = entry.unwrap().file_name().into_string().unwrap();
            let path = format!("cordon-sdk/src/{name}");
            assert!(
                RUST.iter().any(|f| f.path == path),
                "sdk/rust/src/{name} is not in the Rust template: add it to `RUST`"
            );
        }
    }

    #[test]
    fn names_must_suit_every_language() {
        for good in ["a", "word-count", "tool_2"] {
            assert!(valid_name(good), "{good}");
        }
        for bad in ["", "2x", "Tool", "a b", "a.b", "../x", &"a".repeat(65)] {
            assert!(!valid_name(bad), "{bad}");
        }
    }

    #[test]
    fn every_project_has_the_contract_and_its_commands() {
        for language in [Language::Rust, Language::Python, Language::Js, Language::C] {
            let (files, commands) = project(language, "my-tool");
            assert!(!commands.is_empty());
            let paths: Vec<&str> = files.iter().map(|(p, _)| p.as_str()).collect();
            assert!(
                paths.iter().any(|p| p.ends_with(".wit")),
                "{language:?}: {paths:?}"
            );
            assert!(
                paths
                    .iter()
                    .any(|p| p.contains("test") || *p == "src/lib.rs" || *p == "Makefile")
            );
        }
        let (files, _) = project(Language::Python, "my-tool");
        let makefile = &files.iter().find(|(p, _)| p == "Makefile").unwrap().1;
        assert!(
            makefile.contains("SDK          ?= sdk"),
            "the in-tree defaults were not replaced"
        );
        assert!(!makefile.contains("../../../target"), "{makefile}");
        let (files, _) = project(Language::Rust, "my-tool");
        let lib = &files.iter().find(|(p, _)| p == "src/lib.rs").unwrap().1;
        assert!(lib.contains("mod tests") && !lib.contains("--example two_tools"));
    }
}
