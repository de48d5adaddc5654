//! `wasi:filesystem` directory listings without a `stat` per entry.
//!
//! wasmtime-wasi 48 lists a directory by `stat`ing every entry to learn its type, although
//! the kernel reports the type with each name (`d_type`). Walking a 20k-file tree made ~24k
//! extra `statx` calls for that, about a fifth of all system calls of a `find_files`. Cordon
//! links its own `read-directory` (and the entry stream it returns) over wasmtime's: the same
//! entries in the same order, types from `d_type`, and a `stat` only for entries whose type
//! the filesystem does not report.
//!
//! What a guest can list is unchanged: the directory is a descriptor from the guest's own
//! resource table, a preopen or one opened through wasmtime-wasi's sandboxed `open-at`, and a
//! listing reveals names and types only. Revisit this when wasmtime is upgraded; it must keep
//! the interface version wasmtime-wasi links ([`WASI_FILESYSTEM_TYPES`]).

use std::ffi::CStr;
use std::io;
use std::os::fd::BorrowedFd;

use rustix::fs::{AtFlags, Dir, FileType, Mode, OFlags};
use wasmtime::StoreContextMut;
use wasmtime::component::{Linker, Resource, ResourceType};
use wasmtime_wasi::filesystem::Descriptor;
use wasmtime_wasi::p2::bindings::filesystem::types::{DescriptorType, DirectoryEntry, ErrorCode};

use crate::engine::WASI_FILESYSTEM_TYPES;
use crate::sandbox::HostState;

/// One listing, handed out an entry per `read-directory-entry` call.
pub(crate) struct DirEntries(std::vec::IntoIter<Result<DirectoryEntry, ErrorCode>>);

/// Replaces wasmtime-wasi's `read-directory`, `read-directory-entry` and the
/// `directory-entry-stream` resource in `linker`; shadowing must be allowed by the caller.
pub(crate) fn shadow(linker: &mut Linker<HostState>) -> wasmtime::Result<()> {
    let mut types = linker.instance(WASI_FILESYSTEM_TYPES)?;
    types.resource(
        "directory-entry-stream",
        ResourceType::host::<DirEntries>(),
        |mut store, rep| {
            store
                .data_mut()
                .table
                .delete(Resource::<DirEntries>::new_own(rep))?;
            Ok(())
        },
    )?;
    types.func_wrap(
        "[method]descriptor.read-directory",
        |mut store: StoreContextMut<'_, HostState>, (fd,): (Resource<Descriptor>,)| {
            let table = &mut store.data_mut().table;
            let listing = match table.get(&fd)? {
                Descriptor::Dir(dir) => list(&dir.dir),
                Descriptor::File(_) => Err(ErrorCode::NotDirectory),
            };
            let stream = match listing {
                Ok(entries) => Ok(table.push(DirEntries(entries.into_iter()))?),
                Err(code) => Err(code),
            };
            Ok((stream,))
        },
    )?;
    types.func_wrap(
        "[method]directory-entry-stream.read-directory-entry",
        |mut store: StoreContextMut<'_, HostState>, (stream,): (Resource<DirEntries>,)| {
            let entries = store.data_mut().table.get_mut(&stream)?;
            Ok((entries.0.next().transpose(),))
        },
    )?;
    Ok(())
}

/// Reads the whole directory at once, like wasmtime-wasi (a later `read-directory-entry`
/// does no I/O). The directory is opened afresh as "." for reading, so the listing always
/// starts at the beginning and works on descriptors opened only as paths (preopens). An entry
/// whose name is not UTF-8, or whose type had to be looked up and could not be, becomes an
/// error in its place; a failure while reading ends the listing with an error after the
/// entries read so far.
fn list(dir: &std::fs::File) -> Result<Vec<Result<DirectoryEntry, ErrorCode>>, ErrorCode> {
    let flags = OFlags::RDONLY | OFlags::DIRECTORY | OFlags::NOFOLLOW | OFlags::CLOEXEC;
    let fd = rustix::fs::openat(dir, c".", flags, Mode::empty()).map_err(error_code)?;
    let mut listing = Dir::new(fd).map_err(error_code)?;
    let mut entries = Vec::new();
    while let Some(entry) = listing.read() {
        let entry = match entry {
            Ok(entry) => entry,
            Err(errno) => {
                entries.push(Err(error_code(errno)));
                break;
            }
        };
        let name = entry.file_name();
        if name == c"." || name == c".." {
            continue;
        }
        entries.push(describe(
            listing.fd().map_err(error_code)?,
            name,
            entry.file_type(),
        ));
    }
    Ok(entries)
}

fn describe(dir: BorrowedFd<'_>, name: &CStr, kind: FileType) -> Result<DirectoryEntry, ErrorCode> {
    let kind = match kind {
        // Some filesystems leave the type out of the listing; only those entries are looked
        // up, without following a link (as wasmtime-wasi does for every entry).
        FileType::Unknown => rustix::fs::statat(dir, name, AtFlags::SYMLINK_NOFOLLOW)
            .map(|stat| FileType::from_raw_mode(stat.st_mode))
            .map_err(error_code)?,
        known => known,
    };
    let name = name
        .to_str()
        .map_err(|_| ErrorCode::IllegalByteSequence)?
        .to_owned();
    Ok(DirectoryEntry {
        type_: descriptor_type(kind),
        name,
    })
}

/// The type wasmtime-wasi's `stat` reports for the same file, so listings and `stat` agree
/// (it calls FIFOs and sockets `unknown`).
fn descriptor_type(kind: FileType) -> DescriptorType {
    match kind {
        FileType::RegularFile => DescriptorType::RegularFile,
        FileType::Directory => DescriptorType::Directory,
        FileType::Symlink => DescriptorType::SymbolicLink,
        FileType::CharacterDevice => DescriptorType::CharacterDevice,
        FileType::BlockDevice => DescriptorType::BlockDevice,
        FileType::Fifo | FileType::Socket | FileType::Unknown => DescriptorType::Unknown,
    }
}

/// The error code wasmtime-wasi would report for the same failure.
fn error_code(errno: rustix::io::Errno) -> ErrorCode {
    ErrorCode::from(io::Error::from(errno))
}
