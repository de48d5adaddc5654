//! `cordon init`: a commented `cordon.toml` for a project directory, and the installs and grants
//! that would let the bundled tools work on it.
//!
//! Grants live in the home, not in the config, so they are suggested as commands to run (and
//! repeated as comments in the file) rather than written anywhere. The config file in use is
//! out of reach of every grant (it holds the approval rules), so the project directory that
//! holds it is not granted itself: its subdirectories are, each seen under `/project`. What is
//! suggested follows what they hold: the `files` tool read-only on them always, `sql` on those
//! that hold SQLite databases, a writable grant only on a scratch directory. Files at the top
//! of the project are named as out of reach, and files that usually hold secrets are named,
//! since a grant of their directory lets a tool read them.

use std::fmt::Write as _;
use std::path::{Path, PathBuf};

use clap::Args;
use cordon_core::{ReservedKind, ReservedPaths};
use cordon_home::Home;

use crate::term::outln;

#[derive(Debug, Args)]
pub struct InitArgs {
    /// The project directory (default: the current one).
    dir: Option<PathBuf>,
    /// Replace an existing cordon.toml.
    #[arg(long)]
    force: bool,
}

/// Why `cordon init` wrote nothing.
#[derive(Debug, thiserror::Error)]
pub enum InitError {
    /// The directory cannot be used.
    #[error("cannot set up `{}`: {reason}", dir.display())]
    Dir {
        /// The directory as given.
        dir: PathBuf,
        /// What is wrong.
        reason: String,
    },
    /// There is a cordon.toml already.
    #[error("{} exists already; edit it, or run `cordon init --force` to replace it", path.display())]
    Exists {
        /// The file.
        path: PathBuf,
    },
}

/// Files whose names say they usually hold credentials.
const SECRET_NAMES: &[&str] = &[
    ".env",
    ".npmrc",
    ".pypirc",
    ".netrc",
    ".git-credentials",
    "credentials",
    "credentials.json",
    "id_rsa",
    "id_ed25519",
];
const SECRET_SUFFIXES: &[&str] = &[".pem", ".key", ".p12", ".pfx"];
const DATABASE_SUFFIXES: &[&str] = &[".db", ".sqlite", ".sqlite3"];
/// Subdirectories a tool may write to, when the project has one.
const SCRATCH_NAMES: &[&str] = &["scratch", "tmp", "out", "output"];
/// Subdirectories that hold what tools and caches build, not the project's content.
const SKIPPED_DIRS: &[&str] = &[
    "node_modules",
    "target",
    "__pycache__",
    "venv",
    "build",
    "dist",
];
/// Entries looked at, at most: a huge directory still gets its file in a moment.
const MAX_ENTRIES: usize = 10_000;
/// Subdirectories suggested at most; past it, the rest are named to grant by hand.
const MAX_GRANTED_DIRS: usize = 8;

/// What the directory holds that changes the suggestions.
#[derive(Debug, Default)]
struct Survey {
    /// Content subdirectories (names), granted read-only.
    dirs: Vec<String>,
    /// Content subdirectories past [`MAX_GRANTED_DIRS`].
    more_dirs: Vec<String>,
    /// Subdirectories (names) holding SQLite databases.
    database_dirs: Vec<String>,
    /// The databases, as paths in the project.
    databases: Vec<String>,
    /// Files that usually hold secrets, inside the granted subdirectories.
    secrets: Vec<String>,
    /// Files at the top of the project, which no grant reaches.
    top_files: Vec<String>,
    scratch: Option<String>,
    python: bool,
    /// Names with control characters, which the file and the commands leave out (shown
    /// escaped): such a name could write lines of its own into `cordon.toml`.
    odd_names: Vec<String>,
    /// Whether the look inside the subdirectories stopped early (too many entries, or deeper
    /// than it goes), so the secrets named may not be all of them.
    cut_short: bool,
}

/// Whether a name can be written into the config and a shell command as it is.
fn plain_name(name: &str) -> bool {
    !name.chars().any(char::is_control)
}

fn survey(dir: &Path) -> Survey {
    let mut found = Survey::default();
    let mut seen = 0usize;
    let Ok(entries) = std::fs::read_dir(dir) else {
        return found;
    };
    let mut subdirs = Vec::new();
    for entry in entries.flatten() {
        let name = entry.file_name().to_string_lossy().into_owned();
        let Ok(kind) = entry.file_type() else {
            continue;
        };
        if !plain_name(&name) {
            found.odd_names.push(name.escape_debug().to_string());
            continue;
        }
        if kind.is_dir() {
            if SCRATCH_NAMES.contains(&name.as_str()) && found.scratch.is_none() {
                found.scratch = Some(name);
            } else if !name.starts_with('.') && !SKIPPED_DIRS.contains(&name.as_str()) {
                subdirs.push(name);
            }
        } else if name != "cordon.toml" {
            found.top_files.push(name);
        }
    }
    subdirs.sort();
    found.top_files.sort();
    for name in &subdirs {
        let mut walk = vec![(name.clone(), dir.join(name), 0u32)];
        while let Some((shown, path, depth)) = walk.pop() {
            let Ok(entries) = std::fs::read_dir(&path) else {
                continue;
            };
            for entry in entries.flatten() {
                seen += 1;
                if seen > MAX_ENTRIES {
                    found.cut_short = true;
                    break;
                }
                let file = entry.file_name().to_string_lossy().into_owned();
                let shown = format!("{shown}/{file}");
                if !plain_name(&file) {
                    found.odd_names.push(shown.escape_debug().to_string());
                    continue;
                }
                match entry.file_type() {
                    Ok(k) if k.is_dir() => {
                        if SKIPPED_DIRS.contains(&file.as_str()) {
                            // What tools and caches build: not looked into.
                        } else if depth < 2 {
                            walk.push((shown, entry.path(), depth + 1));
                        } else {
                            found.cut_short = true;
                        }
                    }
                    Ok(_) => {
                        if SECRET_NAMES.contains(&file.as_str())
                            || SECRET_SUFFIXES.iter().any(|s| file.ends_with(s))
                            || file.starts_with(".env.")
                        {
                            found.secrets.push(shown);
                        } else if DATABASE_SUFFIXES.iter().any(|s| file.ends_with(s)) {
                            found.databases.push(shown);
                            if !found.database_dirs.contains(name) {
                                found.database_dirs.push(name.clone());
                            }
                        } else if [".py", ".csv", ".ipynb"].iter().any(|s| file.ends_with(s)) {
                            found.python = true;
                        }
                    }
                    Err(_) => {}
                }
            }
        }
    }
    found.databases.sort();
    found.secrets.sort();
    let more = subdirs.split_off(subdirs.len().min(MAX_GRANTED_DIRS));
    found.dirs = subdirs;
    found.more_dirs = more;
    found
}

/// Writes DIR/cordon.toml and prints the suggested installs.
pub fn run(home: &Home, args: InitArgs) -> anyhow::Result<()> {
    let given = match args.dir {
        Some(d) => d,
        None => std::env::current_dir()?,
    };
    let bad = |reason: String| InitError::Dir {
        dir: given.clone(),
        reason,
    };
    let dir = std::fs::canonicalize(&given).map_err(|e| bad(e.to_string()))?;
    if !dir.is_dir() {
        return Err(bad("it is not a directory".into()).into());
    }
    let path = dir.join("cordon.toml");
    // A link named cordon.toml (a cloned repository may hold one) is never written through.
    match std::fs::symlink_metadata(&path) {
        Ok(meta) if meta.file_type().is_symlink() => {
            return Err(bad(format!(
                "{} is a symbolic link; remove it, or write the config elsewhere",
                path.display()
            ))
            .into());
        }
        Ok(_) if !args.force => return Err(InitError::Exists { path }.into()),
        _ => {}
    }
    // A project that holds Cordon's home, or lies inside it, is no project: say so now.
    ReservedPaths::none()
        .with(home.root(), ReservedKind::Home)
        .check_dir(&dir)
        .map_err(|e| {
            bad(format!(
                "no tool may be granted it ({e}); run `cordon init` in a project directory"
            ))
        })?;
    let found = survey(&dir);
    let commands = suggestions(&dir, &found);
    let text = config_text(&dir, &found, &commands);
    // Checked before it is written: the file loads, and says nothing but comments (nothing a
    // name in the project could have slipped in).
    let loaded = cordon_agent::config::AgentConfig::from_toml(&text, "the generated cordon.toml")?;
    if loaded != cordon_agent::config::AgentConfig::default() {
        return Err(
            bad("the config written would set something; nothing was written".into()).into(),
        );
    }
    write_new(&path, &text, args.force)
        .map_err(|e| bad(format!("{} cannot be written ({e})", path.display())))?;
    outln!(
        "Wrote {} (every setting commented; edit what you need).",
        path.display()
    );
    if !found.secrets.is_empty() {
        let one = found.secrets.len() == 1;
        outln!(
            "Note: {} usually hold{} secrets; a tool granted {} directory can read {}. Leave \
             that grant out, or move {} elsewhere.",
            found.secrets.join(", "),
            if one { "s" } else { "" },
            if one { "its" } else { "their" },
            if one { "it" } else { "them" },
            if one { "it" } else { "them" },
        );
    }
    if !found.odd_names.is_empty() {
        outln!(
            "Note: left out, since their names hold control characters: {}",
            shown_list(&found.odd_names)
        );
    }
    if found.cut_short {
        outln!(
            "Note: the look for databases and secrets stopped early (more than {MAX_ENTRIES} \
             entries, or deeper than two levels below each subdirectory): there may be more."
        );
    }
    if !found.top_files.is_empty() {
        outln!(
            "Note: the files at the top of the project ({}) stay out of reach: it holds \
             cordon.toml, which no grant may reach, so only its subdirectories are granted. \
             Move files tools should see into one (e.g. data/).",
            shown_list(&found.top_files)
        );
    }
    if !found.more_dirs.is_empty() {
        outln!(
            "Note: {} more subdirector{} not in the suggestions ({}); add --grant for those a \
             tool should see.",
            found.more_dirs.len(),
            if found.more_dirs.len() == 1 {
                "y is"
            } else {
                "ies are"
            },
            shown_list(&found.more_dirs)
        );
    }
    if commands.is_empty() {
        outln!(
            "Nothing to suggest: the project has no subdirectories to grant. Put what tools \
             should see in one (e.g. data/) and run `cordon init --force` again."
        );
        return Ok(());
    }
    outln!("To let the bundled tools work on this project (each shows what it grants first):");
    for (command, why) in &commands {
        outln!("  {command}");
        outln!("      # {why}");
    }
    outln!("Then: cordon doctor (checks the setup), cordon chat (talk to your model).");
    Ok(())
}

/// Writes `text` to `path` through a new file beside it, renamed over it: never through a link,
/// and never over an existing file unless `force`.
fn write_new(path: &Path, text: &str, force: bool) -> std::io::Result<()> {
    use std::io::Write as _;
    use std::os::unix::fs::PermissionsExt;
    let dir = path.parent().unwrap_or(Path::new("."));
    let mut tmp = tempfile::Builder::new()
        .prefix(".cordon-init-")
        .tempfile_in(dir)?;
    tmp.write_all(text.as_bytes())?;
    // The user's to read and edit like any file they make (a temporary file starts readable
    // by its owner only).
    tmp.as_file()
        .set_permissions(std::fs::Permissions::from_mode(0o644))?;
    if force {
        tmp.persist(path).map_err(|e| e.error)?;
    } else {
        tmp.persist_noclobber(path).map_err(|e| e.error)?;
    }
    Ok(())
}

/// At most five names, then how many more.
fn shown_list(names: &[String]) -> String {
    let mut shown = names.iter().take(5).cloned().collect::<Vec<_>>().join(", ");
    if names.len() > 5 {
        let _ = write!(shown, " and {} more", names.len() - 5);
    }
    shown
}

/// Shell words: quoted when they hold anything a shell would split or expand.
fn shell_word(s: &str) -> String {
    if s.chars()
        .all(|c| c.is_ascii_alphanumeric() || "/._-:=@+,".contains(c))
    {
        s.to_string()
    } else {
        format!("'{}'", s.replace('\'', r"'\''"))
    }
}

/// `--grant fs:DIR/NAME:/project/NAME:MODE` words for `names`.
fn grant_words(dir: &Path, names: &[String], mode: &str) -> String {
    names
        .iter()
        .map(|n| {
            let grant = format!("fs:{}:/project/{n}:{mode}", dir.join(n).display());
            format!("--grant {}", shell_word(&grant))
        })
        .collect::<Vec<_>>()
        .join(" ")
}

/// The installs to run, each with why.
fn suggestions(dir: &Path, found: &Survey) -> Vec<(String, String)> {
    let mut out = Vec::new();
    let mut files_scratch = false;
    if !found.dirs.is_empty() {
        out.push((
            format!(
                "cordon plugin install files {}",
                grant_words(dir, &found.dirs, "ro")
            ),
            format!(
                "read, list and search {}/ (seen under /project); nothing can change them",
                found.dirs.join("/, ")
            ),
        ));
    } else if let Some(scratch) = &found.scratch {
        out.push((
            format!(
                "cordon plugin install files {}",
                grant_words(dir, std::slice::from_ref(scratch), "rw")
            ),
            format!("read and write {scratch}/ only (seen as /project/{scratch})"),
        ));
        files_scratch = true;
    }
    if !found.database_dirs.is_empty() {
        out.push((
            format!(
                "cordon plugin install sql {}",
                grant_words(dir, &found.database_dirs, "ro")
            ),
            format!(
                "query {} read-only (under /project)",
                found.databases.join(", ")
            ),
        ));
    }
    if let Some(scratch) = &found.scratch
        && !files_scratch
        && !found.dirs.is_empty()
    {
        let grant = format!("fs:{}:/project/{scratch}:rw", dir.join(scratch).display());
        out.push((
            format!("cordon grant files {}", shell_word(&grant)),
            format!("let the files tool write in {scratch}/ only"),
        ));
    }
    if found.python {
        out.push((
            "cordon plugin install python".to_string(),
            "run Python the model writes, with no files and no network at all".to_string(),
        ));
    }
    out
}

fn config_text(dir: &Path, found: &Survey, commands: &[(String, String)]) -> String {
    let mut t = String::new();
    let _ = writeln!(t, "# Cordon settings for {}.", dir.display());
    t.push_str(
        "# `cordon chat`, `cordon run`, `cordon serve` and `cordon mcp` read this file when run here\n\
         # (or name it with --config). Every key is optional; unknown keys are errors.\n\
         #\n\
         # Grants are kept in the Cordon home, not here, and no grant may reach this file, so\n\
         # the project's subdirectories are granted rather than the project. Suggested:\n",
    );
    for (command, why) in commands {
        let _ = writeln!(t, "#   {command}\n#       ({why})");
    }
    if !found.secrets.is_empty() {
        let _ = writeln!(
            t,
            "# Files that usually hold secrets, which these grants would expose: {}",
            found.secrets.join(", ")
        );
    }
    t.push_str(
        r#"
[llm]
# url = "http://localhost:11434/v1"   # your model server's OpenAI-compatible API (Ollama's here;
#                                     # llama.cpp's server: http://localhost:8080/v1)
# model = "qwen2.5"
# api_key_env = "OPENAI_API_KEY"      # the variable holding an API key (never stored)

[approval]
# rule_of_two = "ask"                 # "deny": a session that saw private data and untrusted
#                                     # content never calls a tool that can send data out

[approval.tools]                      # ask / auto / deny, by tool or plugin.tool
# read_file = "auto"
# sql_execute = "ask"

[approval.plugins]                    # by plugin
# python = "ask"

[policy]                              # per-call rules; `cordon policy check` tests them
# rules = [
#   { id = "no-drop", tool = "sql.sql_execute", args = { sql = { regex = "(?i)\\bdrop\\b" } }, decision = "deny", reason = "nothing is dropped here" },
# ]
"#,
    );
    if !found.databases.is_empty() {
        t.push_str(
            "# The project holds databases: reads can run unasked, writes are asked for.\n\
             # rules = [{ id = \"reads\", tool = \"sql.sql_query\", decision = \"allow\" }]\n",
        );
    }
    t
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_survey_finds_databases_secrets_and_scratch() {
        let dir = tempfile::tempdir().unwrap();
        let d = dir.path();
        std::fs::write(d.join("top.db"), "").unwrap();
        std::fs::write(d.join(".env"), "KEY=1").unwrap();
        std::fs::create_dir_all(d.join("data/2026")).unwrap();
        std::fs::write(d.join("data/2026/old.sqlite"), "").unwrap();
        std::fs::write(d.join("data/server.pem"), "").unwrap();
        std::fs::create_dir_all(d.join("docs")).unwrap();
        std::fs::create_dir_all(d.join("scratch")).unwrap();
        std::fs::create_dir_all(d.join("node_modules/x")).unwrap();
        std::fs::write(d.join("node_modules/x/a.db"), "").unwrap();
        let found = survey(d);
        assert_eq!(found.dirs, ["data", "docs"]);
        assert_eq!(found.databases, ["data/2026/old.sqlite"]);
        assert_eq!(found.database_dirs, ["data"]);
        assert_eq!(found.secrets, ["data/server.pem"]);
        assert_eq!(found.top_files, [".env", "top.db"]);
        assert_eq!(found.scratch.as_deref(), Some("scratch"));
        let commands = suggestions(d, &found);
        assert_eq!(commands.len(), 3, "{commands:?}");
        let data = d.join("data").display().to_string();
        assert!(
            commands[1]
                .0
                .ends_with(&format!("--grant fs:{data}:/project/data:ro")),
            "{commands:?}"
        );
        let text = config_text(d, &found, &commands);
        let loaded = cordon_agent::config::AgentConfig::from_toml(&text, "test").unwrap();
        assert_eq!(loaded, cordon_agent::config::AgentConfig::default());
    }

    /// A name in the project cannot write lines of its own into the config: a file named to
    /// add a `[store]` table that would send every conversation elsewhere is left out.
    #[test]
    fn names_with_line_breaks_stay_out_of_the_config() {
        let dir = tempfile::tempdir().unwrap();
        let d = dir.path();
        std::fs::create_dir_all(d.join("data")).unwrap();
        // TOML's `\u002F` stands for the `/` a file name cannot hold.
        let evil = r#"a
[store]
url = "postgres:\u002F\u002Fx@evil\u002Fdb"
#.db"#;
        std::fs::write(d.join("data").join(evil), "").unwrap();
        std::fs::create_dir_all(d.join("b\n[audit]\nkeep_arguments = true\n#")).unwrap();
        let found = survey(d);
        assert_eq!(found.odd_names.len(), 2, "{:?}", found.odd_names);
        assert!(found.databases.is_empty());
        let commands = suggestions(d, &found);
        let text = config_text(d, &found, &commands);
        let loaded = cordon_agent::config::AgentConfig::from_toml(&text, "test").unwrap();
        assert_eq!(loaded, cordon_agent::config::AgentConfig::default());
    }

    #[test]
    fn words_a_shell_would_split_are_quoted() {
        assert_eq!(shell_word("fs:/a/b:/project:ro"), "fs:/a/b:/project:ro");
        assert_eq!(shell_word("fs:/a b/it's"), r"'fs:/a b/it'\''s'");
    }
}
