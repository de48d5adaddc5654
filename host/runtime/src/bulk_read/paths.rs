//! Resolving a guest path to a granted directory and reading a regular file below it,
//! with the sandboxed open wasmtime-wasi's own resolution comes from.

use std::fs::File as HostFile;
use std::io;
use std::path::Path;

use super::{ReadError, Root, Source};
use crate::wasi_overrides::filesystem_preopens::Preopen;

/// The call's granted directories, the same handles the plugin's preopens wrap.
pub(super) fn roots(preopens: &[Preopen]) -> Vec<Root> {
    preopens
        .iter()
        .map(|p| Root {
            guest: components(&p.guest_path).map(str::to_owned).collect(),
            dir: p.dir.dir.clone(),
        })
        .collect()
}

/// The non-empty, non-`.` components of a path.
fn components(path: &str) -> impl Iterator<Item = &str> {
    path.split('/').filter(|c| !c.is_empty() && *c != ".")
}

/// The preopen with the longest guest path containing `path`, and the rest of the path below
/// it; `None` unless `path` is absolute, free of `..` and inside a preopen.
pub(super) fn resolve<'a>(roots: &'a [Root], path: &str) -> Option<(&'a Root, String)> {
    if !path.starts_with('/') {
        return None;
    }
    let parts: Vec<&str> = components(path).collect();
    if parts.contains(&"..") {
        return None;
    }
    let root = roots
        .iter()
        .filter(|r| r.guest.len() <= parts.len() && r.guest.iter().zip(&parts).all(|(a, b)| a == b))
        .max_by_key(|r| r.guest.len())?;
    let mut below = parts[root.guest.len()..].join("/");
    // A trailing slash names a directory, as in POSIX: keep it for the open to check.
    if !below.is_empty() && (path.ends_with('/') || path.ends_with("/.")) {
        below.push('/');
    }
    Some((root, below))
}

pub(super) fn read_file(source: &Source, path: &str) -> Result<Vec<u8>, ReadError> {
    let (file, size) = open_regular(source, path)?;
    read_contents(&file, size)
}

/// Opens the regular file at guest path `path` and returns it with its size, if it may be
/// read whole.
pub(super) fn open_regular(source: &Source, path: &str) -> Result<(HostFile, u64), ReadError> {
    let Some((root, below)) = resolve(&source.roots, path) else {
        source
            .refused
            .refuse(format!("path: {path} is outside the grants (bulk read)"));
        return Err(ReadError::NotGranted);
    };
    if below.is_empty() {
        // The granted directory itself.
        return Err(ReadError::NotAFile);
    }
    let mut options = cap_primitives::fs::OpenOptions::new();
    options.read(true);
    #[cfg(unix)]
    {
        use cap_primitives::fs::OpenOptionsExt;
        // A FIFO would block the open until a writer came; a terminal must not become ours.
        let flags = rustix::fs::OFlags::NONBLOCK | rustix::fs::OFlags::NOCTTY;
        options.custom_flags(flags.bits() as i32);
    }
    let file = cap_primitives::fs::open(&root.dir, Path::new(&below), &options).map_err(|e| {
        let e = read_error(e);
        if e == ReadError::NotGranted {
            source.refused.refuse(format!(
                "path: {path} escapes the grant at /{} (bulk read)",
                root.guest.join("/")
            ));
        }
        e
    })?;
    let metadata = file.metadata().map_err(read_error)?;
    if !metadata.is_file() {
        return Err(ReadError::NotAFile);
    }
    let size = metadata.len();
    if size > source.max_size {
        return Err(ReadError::TooLarge(size));
    }
    Ok((file, size))
}

pub(super) fn read_contents(file: &HostFile, size: u64) -> Result<Vec<u8>, ReadError> {
    // The size `stat` reported, read straight into the buffer without zeroing it first and
    // without a further read to find the end. A file that grows meanwhile is read as it was;
    // one that shrinks, up to its end.
    let mut contents = Vec::with_capacity(size as usize);
    while (contents.len() as u64) < size {
        match read_into_spare(file, &mut contents) {
            Ok(0) => break,
            Ok(_) => {}
            Err(e) if e.kind() == io::ErrorKind::Interrupted => {}
            Err(e) => return Err(read_error(e)),
        }
    }
    Ok(contents)
}

/// One read into the unused capacity of `buf`, extending it by what was read.
#[cfg(unix)]
fn read_into_spare(file: &HostFile, buf: &mut Vec<u8>) -> io::Result<usize> {
    Ok(rustix::io::read(file, rustix::buffer::spare_capacity(buf))?)
}

#[cfg(not(unix))]
fn read_into_spare(mut file: &HostFile, buf: &mut Vec<u8>) -> io::Result<usize> {
    let start = buf.len();
    buf.resize(buf.capacity(), 0);
    let n = file.read(&mut buf[start..]);
    buf.truncate(start + *n.as_ref().unwrap_or(&0));
    n
}

fn read_error(e: io::Error) -> ReadError {
    match e.kind() {
        io::ErrorKind::NotFound => ReadError::NotFound,
        io::ErrorKind::IsADirectory | io::ErrorKind::NotADirectory => ReadError::NotAFile,
        // Leaving the directory (`..` through a link, an absolute link) is refused as not
        // granted, like a path outside every grant: by the kernel (EXDEV from
        // RESOLVE_BENEATH), or by cap-primitives' own resolution (a permission error that
        // did not come from the system).
        io::ErrorKind::PermissionDenied if e.raw_os_error().is_none() => ReadError::NotGranted,
        #[cfg(unix)]
        _ if e.raw_os_error() == Some(rustix::io::Errno::XDEV.raw_os_error()) => {
            ReadError::NotGranted
        }
        _ => ReadError::Other(e.to_string()),
    }
}
