//! On-disk cache of compiled components.
//!
//! An entry is `<component sha256>-<engine hash>.cwasm`: the serialized component followed by
//! the sha256 of those bytes. The trailer lets a truncated or corrupted entry be detected and
//! recompiled instead of handed to `Component::deserialize` (which trusts its input). Entries are
//! written to a temporary file and renamed into place, so readers never see half an entry.

use std::hash::{Hash, Hasher};
use std::io::Write;
use std::path::PathBuf;

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

    /// The cached component, or `None` when absent or unusable (a bad entry is removed).
    pub(crate) fn get(&self, engine: &Engine, sha: &str) -> Option<Component> {
        let path = self.path(sha);
        let bytes = match std::fs::read(&path) {
            Ok(b) => b,
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => return None,
            Err(e) => {
                tracing::warn!(path = %path.display(), error = %e, "cannot read compiled-code cache entry; recompiling");
                return None;
            }
        };
        let valid = bytes.len() > 32 && {
            let (body, trailer) = bytes.split_at(bytes.len() - 32);
            Sha256::digest(body).as_slice() == trailer
        };
        if !valid {
            tracing::warn!(path = %path.display(), "corrupt compiled-code cache entry; recompiling");
            let _ = std::fs::remove_file(&path);
            return None;
        }
        // SAFETY: the bytes were produced by `Component::serialize` of an engine with the same
        // compatibility hash (it is part of the file name) and are verified against the sha256
        // trailer written with them, so they are exactly what wasmtime wrote.
        match unsafe { Component::deserialize(engine, &bytes[..bytes.len() - 32]) } {
            Ok(c) => Some(c),
            Err(e) => {
                tracing::warn!(path = %path.display(), error = %format!("{e:#}"), "unusable compiled-code cache entry; recompiling");
                let _ = std::fs::remove_file(&path);
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
        let mut bytes = component
            .serialize()
            .map_err(|e| std::io::Error::other(format!("{e:#}")))?;
        let digest = Sha256::digest(&bytes);
        bytes.extend_from_slice(&digest);
        std::fs::create_dir_all(&self.dir)?;
        let final_path = self.path(sha);
        static SEQ: std::sync::atomic::AtomicU64 = std::sync::atomic::AtomicU64::new(0);
        let seq = SEQ.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
        let tmp = self.dir.join(format!(
            ".{sha}-{}.{}-{seq}.tmp",
            self.engine_hash,
            std::process::id()
        ));
        let result = (|| {
            let mut f = std::fs::File::create(&tmp)?;
            f.write_all(&bytes)?;
            f.sync_all()?;
            std::fs::rename(&tmp, &final_path)
        })();
        if result.is_err() {
            let _ = std::fs::remove_file(&tmp);
        }
        result
    }
}
