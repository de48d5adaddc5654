//! Reading whole files with as few calls out of the sandbox as possible.
//!
//! Every filesystem call from the component crosses into the host, and opening through
//! std/wasi-libc costs several extra `stat`s per file. When searching tens of thousands of
//! files that overhead dominates, so in the component files are opened directly relative to
//! their granted directory (`wasi:filesystem` `open-at`) and read in 64 KiB pieces, which
//! for most source files is a single call. Native builds (tests) use std.

use std::io;

/// Size of one read; a read shorter than this means the end of a regular file.
#[cfg(target_arch = "wasm32")]
const CHUNK: u64 = 64 * 1024;

/// Opens files below the granted directories.
pub struct FileReader {
    #[cfg(target_arch = "wasm32")]
    roots: Vec<(wasip2::filesystem::types::Descriptor, String)>,
}

impl FileReader {
    /// Takes hold of the granted directories (once per call).
    pub fn new() -> Self {
        Self {
            #[cfg(target_arch = "wasm32")]
            roots: wasip2::filesystem::preopens::get_directories()
                .into_iter()
                .map(|(d, p)| (d, cordon_sdk::paths::normalize(&p)))
                .collect(),
        }
    }

    /// Reads the file at guest path `path` entirely if it has at most `max` bytes;
    /// `Ok(None)` if it is larger (the caller then streams it).
    pub fn read_small(&self, path: &str, max: usize) -> io::Result<Option<Vec<u8>>> {
        #[cfg(target_arch = "wasm32")]
        {
            if let Some(result) = self.read_at_root(path, max) {
                return result;
            }
        }
        read_std(path, max)
    }

    #[cfg(target_arch = "wasm32")]
    fn read_at_root(&self, path: &str, max: usize) -> Option<io::Result<Option<Vec<u8>>>> {
        use wasip2::filesystem::types::{DescriptorFlags, OpenFlags, PathFlags};
        let (dir, root) = self
            .roots
            .iter()
            .filter(|(_, r)| cordon_sdk::paths::within(path, r))
            .max_by_key(|(_, r)| r.len())?;
        let rel = path[root.len()..].trim_start_matches('/');
        if rel.is_empty() {
            return None;
        }
        let file = match dir.open_at(
            PathFlags::empty(),
            rel,
            OpenFlags::empty(),
            DescriptorFlags::READ,
        ) {
            Ok(f) => f,
            Err(e) => return Some(Err(io_error(e))),
        };
        let mut out = Vec::new();
        loop {
            match file.read(CHUNK, out.len() as u64) {
                Ok((bytes, eof)) => {
                    let short = (bytes.len() as u64) < CHUNK;
                    out.extend_from_slice(&bytes);
                    if out.len() > max {
                        return Some(Ok(None));
                    }
                    if eof || short {
                        return Some(Ok(Some(out)));
                    }
                }
                Err(e) => return Some(Err(io_error(e))),
            }
        }
    }
}

impl Default for FileReader {
    fn default() -> Self {
        Self::new()
    }
}

#[cfg(target_arch = "wasm32")]
fn io_error(code: wasip2::filesystem::types::ErrorCode) -> io::Error {
    use wasip2::filesystem::types::ErrorCode as E;
    let kind = match code {
        E::NoEntry => io::ErrorKind::NotFound,
        E::Access | E::NotPermitted | E::ReadOnly => io::ErrorKind::PermissionDenied,
        E::IsDirectory => io::ErrorKind::IsADirectory,
        E::Loop => io::ErrorKind::InvalidInput,
        _ => io::ErrorKind::Other,
    };
    io::Error::new(kind, format!("{code:?}"))
}

fn read_std(path: &str, max: usize) -> io::Result<Option<Vec<u8>>> {
    use std::io::Read;
    let mut file = std::fs::File::open(path)?;
    let len = file.metadata()?.len();
    if len > max as u64 {
        return Ok(None);
    }
    // Exactly `len` bytes: no size-hint stat and no extra read to find the end. A file that
    // shrank meanwhile fails with UnexpectedEof and counts as unreadable.
    let mut bytes = vec![0; len as usize];
    file.read_exact(&mut bytes)?;
    Ok(Some(bytes))
}
