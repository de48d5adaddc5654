//! Cordon's replacements in `wasi:filesystem/types`, one module per concern: listings
//! (`readdir`), lookups a fresh listing answers (`fresh_listing`), the open-files cap
//! (`open_files`), lock directories no call leaves behind (`lock_dirs`) and the file-streams
//! cap (`file_streams`).

use wasmtime::component::Linker;

use super::OverrideView;

pub(crate) mod file_streams;
#[cfg(unix)]
pub(crate) mod fresh_listing;
pub(crate) mod lock_dirs;
pub(crate) mod open_files;
#[cfg(unix)]
pub(crate) mod readdir;

/// Replaces wasmtime-wasi's functions listed for this interface in
/// [`OVERRIDES`](super::OVERRIDES); shadowing must be allowed by the caller.
pub(crate) fn shadow<T: OverrideView>(linker: &mut Linker<T>) -> wasmtime::Result<()> {
    #[cfg(unix)]
    readdir::shadow(linker)?;
    #[cfg(unix)]
    fresh_listing::shadow(linker)?;
    open_files::shadow(linker)?;
    lock_dirs::shadow(linker)?;
    file_streams::shadow(linker)
}
