//! The tools that come with Cordon (`sql`, `files`, `python`), installed by a bare name:
//! `cordon plugin install sql --grant …`. A bare name is one with no `/`, no `.` and no URL
//! scheme that names no file in the current directory; anything else is a path or a URL as
//! before, so a file called `sql` next to the user still wins.
//!
//! Where a bare name is looked for, first match wins:
//! 1. `$CORDON_PLUGINS_DIR`, when set (a packager's or a user's own place);
//! 2. `<the cordon binary's directory>/../share/cordon/plugins`, where `make install` puts them
//!    (`~/.local/bin/cordon` finds `~/.local/share/cordon/plugins`);
//! 3. `<the cordon binary's directory>/../plugins`, where a build in the checkout puts them
//!    (`target/debug/cordon` finds `target/plugins`).

use std::path::{Path, PathBuf};

use crate::error::HomeError;

/// Whether `arg` is a bare name rather than a path or a URL.
pub fn is_bare_name(arg: &str) -> bool {
    !arg.is_empty()
        && arg.len() <= 64
        && arg
            .chars()
            .all(|c| c.is_ascii_alphanumeric() || c == '-' || c == '_')
        && !Path::new(arg).is_file()
}

/// The directories searched, in order (see the module's doc).
pub fn dirs() -> Vec<PathBuf> {
    let from_env = std::env::var_os("CORDON_PLUGINS_DIR")
        .filter(|v| !v.is_empty())
        .map(PathBuf::from);
    let exe_dir = std::env::current_exe()
        .ok()
        .and_then(|exe| exe.canonicalize().ok())
        .and_then(|exe| exe.parent().map(Path::to_path_buf));
    dirs_for(from_env, exe_dir.as_deref())
}

fn dirs_for(from_env: Option<PathBuf>, exe_dir: Option<&Path>) -> Vec<PathBuf> {
    let mut dirs: Vec<PathBuf> = from_env.into_iter().collect();
    if let Some(bin) = exe_dir.and_then(Path::parent) {
        dirs.push(bin.join("share").join("cordon").join("plugins"));
        dirs.push(bin.join("plugins"));
    }
    dirs
}

/// The component a bare name stands for, in the first of `dirs` that has `NAME.wasm`.
pub fn find(name: &str, dirs: &[PathBuf]) -> Result<PathBuf, HomeError> {
    if let Some(found) = dirs
        .iter()
        .map(|d| d.join(format!("{name}.wasm")))
        .find(|p| p.is_file())
    {
        return Ok(found);
    }
    let mut available: Vec<String> = dirs
        .iter()
        .filter_map(|d| std::fs::read_dir(d).ok())
        .flatten()
        .filter_map(|entry| {
            let path = entry.ok()?.path();
            (path.extension()? == "wasm")
                .then(|| path.file_stem()?.to_str().map(str::to_string))
                .flatten()
        })
        .collect();
    available.sort();
    available.dedup();
    Err(HomeError::UnknownBundled {
        name: name.to_string(),
        searched: dirs.to_vec(),
        available,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_installed_layout_and_the_checkouts_are_searched_after_the_environment() {
        let dirs = dirs_for(
            Some(PathBuf::from("/opt/tools")),
            Some(Path::new("/home/u/.local/bin")),
        );
        assert_eq!(
            dirs,
            [
                PathBuf::from("/opt/tools"),
                PathBuf::from("/home/u/.local/share/cordon/plugins"),
                PathBuf::from("/home/u/.local/plugins"),
            ]
        );
        assert_eq!(
            dirs_for(None, Some(Path::new("/src/cordon/target/debug"))),
            [
                PathBuf::from("/src/cordon/target/share/cordon/plugins"),
                PathBuf::from("/src/cordon/target/plugins"),
            ]
        );
    }

    #[test]
    fn the_first_directory_holding_the_name_wins_and_a_miss_names_what_there_is() {
        let root = tempfile::tempdir().unwrap();
        let (first, second) = (root.path().join("a"), root.path().join("b"));
        std::fs::create_dir_all(&first).unwrap();
        std::fs::create_dir_all(&second).unwrap();
        std::fs::write(second.join("sql.wasm"), b"x").unwrap();
        std::fs::write(second.join("files.wasm"), b"x").unwrap();
        std::fs::write(first.join("files.wasm"), b"x").unwrap();
        let dirs = [first.clone(), second.clone()];
        assert_eq!(find("sql", &dirs).unwrap(), second.join("sql.wasm"));
        assert_eq!(find("files", &dirs).unwrap(), first.join("files.wasm"));
        let missing = find("sqll", &dirs).unwrap_err();
        let text = missing.to_string();
        assert!(text.contains("`sqll`"), "{text}");
        assert!(text.contains("files, sql"), "{text}");
        assert!(text.contains(&first.display().to_string()), "{text}");
        assert!(missing.is_usage());
    }

    #[test]
    fn paths_urls_and_files_here_are_not_bare_names() {
        assert!(is_bare_name("sql"));
        assert!(is_bare_name("my-tool_2"));
        for arg in ["./sql", "sql.wasm", "a/b", "oci://r/x:1", "", "~sql"] {
            assert!(!is_bare_name(arg), "{arg}");
        }
    }
}
