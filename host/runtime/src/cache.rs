//! On-disk cache of compiled components.
//!
//! An entry is `<component sha256>-<engine hash>.cwasm`, exactly what `Component::serialize`
//! wrote. Loading it maps machine code into the host, so the cache vouches for nothing itself:
//! an entry is loaded only when it matches the [`CompiledPin`] its caller recorded where only the
//! host writes (the plugin's lock file entry) — the stamp the file had when it was written or
//! last hashed, else its sha256, computed from the very file descriptor that is then loaded.
//! Whoever can write files in the cache (but not the lock file) can therefore make Cordon
//! compile again, never run code it did not compile. Thanks to the stamp the usual check is one
//! `fstat` rather than hashing tens of megabytes on every start. Loading maps the file instead
//! of reading it, so a large plugin's memory image is used copy-on-write straight from the page
//! cache. Entries are written to a temporary file and renamed into place, so readers never see
//! half an entry, and a mapped entry is never truncated under a running process.

use std::hash::{Hash, Hasher};
use std::path::{Path, PathBuf};

use cordon_core::{CompiledPin, FileStamp, replace_file_stamped};
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
        self.dir.join(entry_name(sha, &self.engine_hash))
    }

    /// The cached component, if the entry for `sha` is the one `pin` records; `None` when
    /// absent, for another engine, or not matching the pin (a mismatched entry is removed and
    /// the reason logged). The pin returned is `pin` with the stamp the file has now (it changes
    /// when the file was copied or touched but its bytes are still the recorded ones).
    pub(crate) fn get(
        &self,
        engine: &Engine,
        sha: &str,
        pin: &CompiledPin,
    ) -> Option<(Component, CompiledPin)> {
        if pin.engine != self.engine_hash {
            tracing::debug!(
                sha,
                "compiled code recorded for another engine; recompiling"
            );
            return None;
        }
        let path = self.path(sha);
        let file = match open_entry(&path) {
            Ok(file) => file,
            Err(e) => {
                if e.kind() != std::io::ErrorKind::NotFound {
                    tracing::warn!(path = %path.display(), error = %e, "cannot read compiled-code cache entry; recompiling");
                }
                return None;
            }
        };
        // The stamp is taken before hashing: a change while hashing makes the next check hash
        // again rather than trust bytes nobody hashed.
        let now = FileStamp::of_file(&file).ok();
        let pin = if now.as_ref() == Some(&pin.stamp) {
            pin.clone()
        } else {
            match sha256_of(&file) {
                Ok(actual) if actual == pin.sha256 => CompiledPin {
                    stamp: now.unwrap_or(pin.stamp),
                    ..pin.clone()
                },
                Ok(actual) => {
                    tracing::warn!(
                        path = %path.display(),
                        recorded = %pin.sha256,
                        found = %actual,
                        "the compiled code in the cache is not what Cordon compiled (its digest \
                         differs from the one recorded in the lock file); not loading it, \
                         compiling the pinned component again"
                    );
                    let _ = std::fs::remove_file(&path);
                    return None;
                }
                Err(e) => {
                    tracing::warn!(path = %path.display(), error = %e, "cannot read compiled-code cache entry; recompiling");
                    return None;
                }
            }
        };
        // SAFETY: the bytes behind this descriptor were produced by `Component::serialize` of
        // an engine with the same compatibility hash: they match the digest the host recorded
        // when it wrote them, by the file's stamp (which any write changes) or by hashing them
        // just now. The path below names this descriptor's file, not whatever the cache path
        // names by now, and Cordon only ever replaces entries by renaming, never by writing
        // into a file that may be mapped.
        let loaded = unsafe { Component::deserialize_file(engine, descriptor_path(&file, &path)) };
        match loaded {
            Ok(c) => Some((c, pin)),
            Err(e) => {
                tracing::warn!(path = %path.display(), error = %format!("{e:#}"), "unusable compiled-code cache entry; recompiling");
                let _ = std::fs::remove_file(&path);
                None
            }
        }
    }

    /// Stores a compiled component and returns the pin to record for it. Failures only cost a
    /// recompile next time, so they are logged, not returned.
    pub(crate) fn put(&self, sha: &str, component: &Component) -> Option<CompiledPin> {
        match self.try_put(sha, component) {
            Ok(pin) => Some(pin),
            Err(e) => {
                tracing::warn!(dir = %self.dir.display(), error = %e, "cannot write compiled-code cache entry");
                None
            }
        }
    }

    fn try_put(&self, sha: &str, component: &Component) -> std::io::Result<CompiledPin> {
        let bytes = component
            .serialize()
            .map_err(|e| std::io::Error::other(format!("{e:#}")))?;
        let sha256 = hex::encode(Sha256::digest(&bytes));
        std::fs::create_dir_all(&self.dir)?;
        let stamp = replace_file_stamped(&self.path(sha), &bytes)?;
        Ok(CompiledPin {
            engine: self.engine_hash.clone(),
            sha256,
            stamp,
        })
    }
}

fn entry_name(sha: &str, engine_hash: &str) -> String {
    format!("{sha}-{engine_hash}.cwasm")
}

/// The name of the cache file `pin` describes, for the component whose sha256 (lower-case hex)
/// is `component_sha256`: what a home copies from an install's private cache into its own.
pub fn compiled_file_name(component_sha256: &str, pin: &CompiledPin) -> String {
    entry_name(component_sha256, &pin.engine)
}

/// Opens a cache entry for reading, not through a symbolic link.
fn open_entry(path: &Path) -> std::io::Result<std::fs::File> {
    let mut options = std::fs::OpenOptions::new();
    options.read(true);
    #[cfg(target_os = "linux")]
    {
        use std::os::unix::fs::OpenOptionsExt;
        options.custom_flags(rustix::fs::OFlags::NOFOLLOW.bits() as i32);
    }
    options.open(path)
}

/// The lower-case hex sha256 of an open file's bytes, from its start.
fn sha256_of(file: &std::fs::File) -> std::io::Result<String> {
    use std::io::Seek;
    let mut reader = file;
    reader.rewind()?;
    let mut hasher = Sha256::new();
    std::io::copy(&mut reader, &mut hasher)?;
    Ok(hex::encode(hasher.finalize()))
}

/// A path that opens exactly `file` (Linux's `/proc/self/fd/N`, a link to the open file, not to
/// a path), so the file mapped is the file checked; elsewhere, or without `/proc`, its path.
fn descriptor_path(file: &std::fs::File, path: &Path) -> PathBuf {
    #[cfg(target_os = "linux")]
    {
        use std::os::fd::AsRawFd;
        let by_descriptor = PathBuf::from(format!("/proc/self/fd/{}", file.as_raw_fd()));
        if by_descriptor.exists() {
            return by_descriptor;
        }
    }
    let _ = file;
    path.to_path_buf()
}
