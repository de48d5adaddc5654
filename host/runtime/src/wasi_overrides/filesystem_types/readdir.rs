//! `wasi:filesystem` directory listings without a `stat` per entry.
//!
//! wasmtime-wasi 48 lists a directory by `stat`ing every entry to learn its type, although
//! the kernel reports the type with each name (`d_type`). Walking a 20k-file tree made ~24k
//! extra `statx` calls for that, about a fifth of all system calls of a `find_files`. Cordon
//! links its own `read-directory` (and the entry stream it returns) over wasmtime's: the same
//! entries in the same order, types from `d_type`, and a `stat` only for entries whose type
//! the filesystem does not report.
//!
//! wasi-libc's `readdir` then asks `metadata-hash-at` for every entry it returns, to fill in
//! `d_ino`: another `stat` per entry, a quarter of all system calls of a search. The listing
//! already has the entry's inode number, so the `metadata-hash-at` for the entry a listing
//! handed out last is answered from it, with the same hash wasmtime-wasi computes from a
//! `stat`. Only where the listing's identity is the one a `stat` reports: not for
//! subdirectories (a mount point or a btrfs subvolume lists the inode underneath it, or the
//! parent's device), and only on filesystems whose listings carry the real inode number
//! (ext2/3/4, xfs, btrfs, tmpfs, f2fs; not overlayfs, FUSE or FAT, which may report another
//! layer's device, one shared number or made-up ones). A regular file bind-mounted over another
//! is listed with the inode underneath, as native `readdir` lists it too.
//!
//! What a guest can list is unchanged: the directory is a descriptor from the guest's own
//! resource table, a preopen or one opened through wasmtime-wasi's sandboxed `open-at`, and a
//! listing reveals names and types only. Revisit this when wasmtime is upgraded; it must keep
//! the interface version wasmtime-wasi links ([`WASI_FILESYSTEM_TYPES`]).

use std::ffi::CStr;
use std::fs::File;
use std::io;
use std::os::fd::BorrowedFd;
use std::sync::{Arc, Weak};

use rustix::fs::{AtFlags, Dir, FileType, Mode, OFlags};
use wasmtime::StoreContextMut;
use wasmtime::component::{Linker, Resource, ResourceType};
use wasmtime_wasi::filesystem::Descriptor;
use wasmtime_wasi::filesystem::WasiFilesystemView;
use wasmtime_wasi::p2::bindings::filesystem::types::{
    DescriptorType, DirectoryEntry, ErrorCode, Host, HostDescriptor, MetadataHashValue, PathFlags,
};

use crate::caps::MAX_LISTED_BYTES_PER_CALL;
use crate::wasi_overrides::{OverrideParts, OverrideView, WASI_FILESYSTEM_TYPES};

/// One listing, handed out an entry per `read-directory-entry` call.
pub(crate) struct DirEntries {
    /// Host memory the whole listing took (see [`MAX_LISTED_BYTES_PER_CALL`]).
    bytes: usize,
    /// Each entry with its inode number.
    entries: std::vec::IntoIter<Result<(DirectoryEntry, u64), ErrorCode>>,
    /// The listed directory: the descriptor's file, and the device it is on if a listed
    /// file's identity is (device, inode number from the listing).
    dir: Weak<File>,
    device: Option<u64>,
}

/// The entry a listing handed out last, for the `metadata-hash-at` that asks about it next.
pub(crate) struct ListedEntry {
    /// The directory it was listed from (a weak reference keeps the address from being reused
    /// by another file while this is kept).
    dir: Weak<File>,
    name: String,
    /// Device and inode number.
    identity: (u64, u64),
}

/// Replaces wasmtime-wasi's `read-directory`, `read-directory-entry`, the
/// `directory-entry-stream` resource and `metadata-hash-at` in `linker`; shadowing must be
/// allowed by the caller.
pub(crate) fn shadow<T: OverrideView>(linker: &mut Linker<T>) -> wasmtime::Result<()> {
    let mut types = linker.instance(WASI_FILESYSTEM_TYPES)?;
    types.resource(
        "directory-entry-stream",
        ResourceType::host::<DirEntries>(),
        |mut store, rep| {
            store
                .data_mut()
                .overrides()
                .table
                .delete(Resource::<DirEntries>::new_own(rep))?;
            Ok(())
        },
    )?;
    types.func_wrap(
        "[method]descriptor.read-directory",
        |mut store: StoreContextMut<'_, T>, (fd,): (Resource<Descriptor>,)| {
            let OverrideParts {
                table, fs, plugin, ..
            } = store.data_mut().overrides();
            let held = fs.listings.live_sum(table, |l| l.bytes);
            let devices = &mut fs.listed_devices;
            let listing = match table.get(&fd)? {
                Descriptor::Dir(dir) => list(&dir.dir, devices).map(|(entries, device)| {
                    let bytes = entries
                        .iter()
                        .map(|e| {
                            size_of_val(e) + e.as_ref().map_or(0, |(entry, _)| entry.name.len())
                        })
                        .sum();
                    let names = entries
                        .iter()
                        .map(|e| e.as_ref().map(|(e, _)| e).map_err(|_| ()));
                    let now = std::time::Instant::now();
                    fs.fresh_listing
                        .listed(&dir.dir, names, device.is_some(), now);
                    DirEntries {
                        bytes,
                        entries: entries.into_iter(),
                        dir: Arc::downgrade(&dir.dir),
                        device,
                    }
                }),
                Descriptor::File(_) => Err(ErrorCode::NotDirectory),
            };
            let stream = match listing {
                Ok(entries) if held + entries.bytes > MAX_LISTED_BYTES_PER_CALL => {
                    if !std::mem::replace(&mut fs.listings_warned, true) {
                        tracing::warn!(
                            plugin = %plugin,
                            "refusing to list another directory: the call's listings would take \
                             more than {} MiB of host memory, the most one call may hold",
                            MAX_LISTED_BYTES_PER_CALL >> 20
                        );
                    }
                    Err(ErrorCode::InsufficientMemory)
                }
                Ok(entries) => {
                    let stream = table.push(entries)?;
                    fs.listings.record(&stream);
                    Ok(stream)
                }
                Err(code) => Err(code),
            };
            Ok((stream,))
        },
    )?;
    types.func_wrap(
        "[method]directory-entry-stream.read-directory-entry",
        |mut store: StoreContextMut<'_, T>, (stream,): (Resource<DirEntries>,)| {
            let OverrideParts { table, fs, .. } = store.data_mut().overrides();
            let listing = table.get_mut(&stream)?;
            let next = listing.entries.next();
            fs.last_listed = match (&next, listing.device) {
                (Some(Ok((entry, inode))), Some(device))
                    if entry.type_ != DescriptorType::Directory =>
                {
                    Some(ListedEntry {
                        dir: listing.dir.clone(),
                        name: entry.name.clone(),
                        identity: (device, *inode),
                    })
                }
                _ => None,
            };
            Ok((next.map(|entry| entry.map(|(entry, _)| entry)).transpose(),))
        },
    )?;
    types.func_wrap_async(
        "[method]descriptor.metadata-hash-at",
        |mut store: StoreContextMut<'_, T>,
         (fd, path_flags, path): (Resource<Descriptor>, PathFlags, String)| {
            Box::new(async move {
                let state = store.data_mut();
                let mut parts = state.overrides();
                if let Some(listed) = parts.fs.last_listed.take()
                    && !path_flags.contains(PathFlags::SYMLINK_FOLLOW)
                    && listed.name == path
                    && let Descriptor::Dir(dir) = parts.table.get(&fd)?
                    && std::ptr::eq(Arc::as_ptr(&dir.dir), listed.dir.as_ptr())
                {
                    return Ok((Ok(metadata_hash(listed.identity)),));
                }
                if crate::wasi_overrides::filesystem_types::fresh_listing::absent_at(
                    &mut parts, &fd, &path,
                )? {
                    return Ok((Err(ErrorCode::NoEntry),));
                }
                let mut fs = state.filesystem();
                let result =
                    match HostDescriptor::metadata_hash_at(&mut fs, fd, path_flags, path).await {
                        Ok(hash) => Ok(hash),
                        Err(e) => Err(Host::convert_error_code(&mut state.filesystem(), e)?),
                    };
                Ok((result,))
            })
        },
    )?;
    Ok(())
}

/// The hash wasmtime-wasi 48 gives a file with this device and inode number (std's
/// `DefaultHasher` over the pair, and the upper half derived from the lower the same way), so a
/// `d_ino` from a listing equals the `st_ino` of a `stat` of the same file. The runtime tests
/// compare the two for every entry of a directory.
fn metadata_hash(identity: (u64, u64)) -> MetadataHashValue {
    use std::hash::{Hash, Hasher};
    let mut hasher = std::collections::hash_map::DefaultHasher::new();
    identity.hash(&mut hasher);
    let lower = hasher.finish();
    MetadataHashValue {
        lower,
        upper: lower ^ 4614256656552045848,
    }
}

/// A directory's entries, each with its inode number.
type Listing = Vec<Result<(DirectoryEntry, u64), ErrorCode>>;

/// Reads the whole directory at once, like wasmtime-wasi (a later `read-directory-entry`
/// does no I/O). The directory is opened afresh as "." for reading, so the listing always
/// starts at the beginning and works on descriptors opened only as paths (preopens). An entry
/// whose name is not UTF-8, or whose type had to be looked up and could not be, becomes an
/// error in its place; a failure while reading ends the listing with an error after the
/// entries read so far. Also returns the device the directory is on if the listing's inode
/// numbers are the files' identities there (see [`identity_device`]).
fn list(dir: &File, devices: &mut Vec<(u64, bool)>) -> Result<(Listing, Option<u64>), ErrorCode> {
    let flags = OFlags::RDONLY | OFlags::DIRECTORY | OFlags::NOFOLLOW | OFlags::CLOEXEC;
    let fd = rustix::fs::openat(dir, c".", flags, Mode::empty()).map_err(error_code)?;
    let device = identity_device(&fd, devices)?;
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
        let described = describe(listing.fd().map_err(error_code)?, name, entry.file_type());
        entries.push(described.map(|described| (described, entry.ino())));
    }
    Ok((entries, device))
}

/// The device a listed file's identity is on, if the directory's filesystem lists real inode
/// numbers. `devices` remembers the answer per device, so a walk asks once per device.
fn identity_device(
    dir: &std::os::fd::OwnedFd,
    devices: &mut Vec<(u64, bool)>,
) -> Result<Option<u64>, ErrorCode> {
    let device = rustix::fs::fstat(dir).map_err(error_code)?.st_dev;
    let trusted = match devices.iter().find(|(d, _)| *d == device) {
        Some(&(_, known)) => known,
        None => {
            let known = lists_real_inodes(dir)?;
            devices.push((device, known));
            known
        }
    };
    Ok(trusted.then_some(device))
}

/// Whether the filesystem's listings carry each file's own inode number on its own device.
#[cfg(target_os = "linux")]
fn lists_real_inodes(dir: &std::os::fd::OwnedFd) -> Result<bool, ErrorCode> {
    const EXT_SUPER_MAGIC: i64 = 0xEF53;
    const XFS_SUPER_MAGIC: i64 = 0x5846_5342;
    const BTRFS_SUPER_MAGIC: i64 = 0x9123_683E;
    const TMPFS_MAGIC: i64 = 0x0102_1994;
    const F2FS_SUPER_MAGIC: i64 = 0xF2F5_2010;
    let filesystem = rustix::fs::fstatfs(dir).map_err(error_code)?;
    Ok(matches!(
        filesystem.f_type as i64,
        EXT_SUPER_MAGIC | XFS_SUPER_MAGIC | BTRFS_SUPER_MAGIC | TMPFS_MAGIC | F2FS_SUPER_MAGIC
    ))
}

/// Elsewhere every entry's identity comes from a real `stat`.
#[cfg(not(target_os = "linux"))]
fn lists_real_inodes(_: &std::os::fd::OwnedFd) -> Result<bool, ErrorCode> {
    Ok(false)
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
