//! On-disk cache of compiled components.
//!
//! An entry is `<component sha256>-<engine hash>.cwasm`, exactly what `Component::serialize`
//! wrote, plus `<same>.sum`: the sha256 of the entry and the entry file's stamp when that was
//! computed (see [`cordon_core::FileStamp`]). `Component::deserialize_file` trusts its input, so
//! an entry is only used when its digest checks out; thanks to the stamp that check is a `stat`
//! rather than hashing tens of megabytes on every start. Loading maps the file instead of
//! reading it, so a large plugin's memory image is used copy-on-write straight from the page
//! cache. Entries are written to a temporary file and renamed into place, so readers never see
//! half an entry, and a mapped entry is never truncated under a running process.

use std::hash::{Hash, Hasher};
use std::path::{Path, PathBuf};

use cordon_core::{DigestCheck, DigestRecord, FileStamp, replace_file, verify_file_digest};
use sha2::{Digest, Sha256};
use wasmtime::Engine;
use wasmtime::component::Component;

pub(crate) struct Cache {
    dir: PathBuf,
    engine_hash: String,
}

/// Feeds `Hash` into sha256 so the engine's compatibility hash is stable across processes
/// (std's `DefaultHasher` makes no such promise).
struct ShaHasher(Sha256);

impl Hasher for ShaHasher {
    fn finish(&self) -> u64 {
        let d = self.0.clone().finalize();
        u64::from_le_bytes([d[0], d[1], d[2], d[3], d[4], d[5], d[6], d[7]])
    }
    fn write(&mut self, bytes: &[u8]) {
        self.0.update(bytes);
    }
}

impl Cache {
    pub(crate) fn new(dir: PathBuf, engine: &Engine) -> Cache {
        let mut h = ShaHasher(Sha256::new());
        engine.precompile_compatibility_hash().hash(&mut h);
        let engine_hash = hex::encode(&h.0.finalize()[..8]);
        Cache { dir, engine_hash }
    }

    fn path(&self, sha: &str) -> PathBuf {
        self.dir.join(format!("{sha}-{}.cwasm", self.engine_hash))
    }

    fn sum_path(entry: &Path) -> PathBuf {
        entry.with_extension("sum")
    }

    /// The cached component, or `None` when absent or unusable (a bad entry is removed).
    pub(crate) fn get(&self, engine: &Engine, sha: &str) -> Option<Component> {
        let path = self.path(sha);
        let sum = Self::sum_path(&path);
        // No record: absent, being written by another process right now, or from an older
        // Cordon. Recompiling replaces it either way.
        let record = DigestRecord::read(&sum)?;
        let discard = |why: &str| {
            tracing::warn!(path = %path.display(), "{why} compiled-code cache entry; recompiling");
            let _ = std::fs::remove_file(&path);
            let _ = std::fs::remove_file(&sum);
        };
        match verify_file_digest(&path, &sum, &record.sha256_hex) {
            Ok(DigestCheck::Matches) => {}
            Ok(DigestCheck::Differs { .. }) => {
                discard("corrupt");
                return None;
            }
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => return None,
            Err(e) => {
                tracing::warn!(path = %path.display(), error = %e, "cannot read compiled-code cache entry; recompiling");
                return None;
            }
        }
        // SAFETY: the file was produced by `Component::serialize` of an engine with the same
        // compatibility hash (it is part of the file name), its bytes match the digest recorded
        // when it was written, and Cordon only ever replaces entries by renaming, never by
        // writing into a file that may be mapped.
        match unsafe { Component::deserialize_file(engine, &path) } {
            Ok(c) => Some(c),
            Err(e) => {
                tracing::warn!(error = %format!("{e:#}"), "unusable entry");
                discard("unusable");
                None
            }
        }
    }

    /// Stores a compiled component. Failures only cost a recompile next time, so they are
    /// logged, not returned.
    pub(crate) fn put(&self, sha: &str, component: &Component) {
        if let Err(e) = self.try_put(sha, component) {
            tracing::warn!(dir = %self.dir.display(), error = %e, "cannot write compiled-code cache entry");
        }
    }

    fn try_put(&self, sha: &str, component: &Component) -> std::io::Result<()> {
        let bytes = component
            .serialize()
            .map_err(|e| std::io::Error::other(format!("{e:#}")))?;
        let sha256_hex = hex::encode(Sha256::digest(&bytes));
        std::fs::create_dir_all(&self.dir)?;
        let entry = self.path(sha);
        replace_file(&entry, &bytes, true)?;
        // The stamp after the rename (which itself changes the change time).
        let stamp = FileStamp::of(&entry)?;
        DigestRecord { sha256_hex, stamp }.write(&Self::sum_path(&entry))
    }
}
