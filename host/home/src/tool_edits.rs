//! Where an install's tool edits ([`ToolEdits`]) come from: a file the installer names
//! (`--describe FILE`), else a sidecar beside a component file (`NAME.tools.toml` next to
//! `NAME.wasm`), else the edits the installed plugin already has. `--hide` adds to whichever
//! applies. A file states all the edits of a plugin, so reinstalling with an edited file is how
//! an edit is taken back.

use std::path::{Path, PathBuf};

use cordon_core::ToolEdits;

use crate::error::HomeError;
use crate::source::InstallSource;

/// Largest edits file read: descriptions of a few dozen tools fit many times over.
const MAX_EDITS_FILE_BYTES: u64 = 1 << 20;

/// The suffix of a sidecar file, in place of `.wasm`.
pub const SIDECAR_SUFFIX: &str = ".tools.toml";

/// An edits file, and the edits it holds.
#[derive(Debug, Clone)]
pub struct EditsFile {
    /// Where they were read.
    pub path: PathBuf,
    /// Whether it was found beside the component rather than named with `--describe`.
    pub sidecar: bool,
    /// What it says.
    pub edits: ToolEdits,
}

/// The edits file of an install: `describe` when given, else the sidecar of a component
/// file when there is one.
pub(crate) fn edits_file(
    describe: Option<&Path>,
    source: &InstallSource,
) -> Result<Option<EditsFile>, HomeError> {
    let (path, sidecar) = match describe {
        Some(p) => (p.to_path_buf(), false),
        None => match sidecar_of(source) {
            Some(p) if p.is_file() => (p, true),
            _ => return Ok(None),
        },
    };
    let edits = read(&path)?;
    Ok(Some(EditsFile {
        path,
        sidecar,
        edits,
    }))
}

/// `dir/NAME.tools.toml` for a component file `dir/NAME.wasm` (or `dir/NAME`).
fn sidecar_of(source: &InstallSource) -> Option<PathBuf> {
    let InstallSource::File { path, .. } = source else {
        return None;
    };
    let name = path.file_name()?.to_str()?;
    let stem = name.strip_suffix(".wasm").unwrap_or(name);
    Some(path.with_file_name(format!("{stem}{SIDECAR_SUFFIX}")))
}

fn read(path: &Path) -> Result<ToolEdits, HomeError> {
    let bad = |reason: String| HomeError::BadEditsFile {
        path: path.to_path_buf(),
        reason,
    };
    let meta = std::fs::metadata(path).map_err(|e| bad(format!("it cannot be read ({e})")))?;
    if meta.len() > MAX_EDITS_FILE_BYTES {
        return Err(bad(format!(
            "it is {} bytes long, more than the {MAX_EDITS_FILE_BYTES} accepted",
            meta.len()
        )));
    }
    let text = std::fs::read_to_string(path)
        .map_err(|e| bad(format!("it cannot be read as UTF-8 text ({e})")))?;
    toml::from_str(&text).map_err(|e| bad(e.to_string()))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn file_source(path: &Path) -> InstallSource {
        InstallSource::File {
            path: path.to_path_buf(),
            sha256: None,
        }
    }

    #[test]
    fn the_sidecar_is_found_beside_the_component_and_describe_wins() {
        let dir = tempfile::tempdir().unwrap();
        let wasm = dir.path().join("fetch.wasm");
        let source = file_source(&wasm);
        assert!(edits_file(None, &source).unwrap().is_none());
        std::fs::write(
            dir.path().join("fetch.tools.toml"),
            "hide = [\"exports_init\"]\n[tools.fetch]\ndescription = \"Fetches a URL.\"\n\
             read_only = true\n[tools.fetch.params]\nurl = \"The URL\"\n",
        )
        .unwrap();
        let found = edits_file(None, &source).unwrap().unwrap();
        assert!(found.sidecar);
        assert!(found.edits.hide.contains("exports_init"));
        assert_eq!(found.edits.tools["fetch"].params["url"], "The URL");
        let other = dir.path().join("other.toml");
        std::fs::write(&other, "hide = [\"fetch\"]\n").unwrap();
        let named = edits_file(Some(&other), &source).unwrap().unwrap();
        assert!(!named.sidecar && named.edits.tools.is_empty());
    }

    #[test]
    fn a_bad_file_is_named_with_what_is_wrong() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("x.toml");
        std::fs::write(&path, "[tools.fetch]\ndescripton = \"typo\"\n").unwrap();
        let e = edits_file(Some(&path), &file_source(&path))
            .unwrap_err()
            .to_string();
        assert!(e.contains("x.toml") && e.contains("descripton"), "{e}");
        let missing = dir.path().join("missing.toml");
        let e = edits_file(Some(&missing), &file_source(&path))
            .unwrap_err()
            .to_string();
        assert!(
            e.contains("missing.toml") && e.contains("cannot be read"),
            "{e}"
        );
    }
}
