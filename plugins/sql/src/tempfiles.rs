//! SQLite's temporary files kept in memory, so sorting works the way it does natively.
//!
//! A sandbox has no writable temp directory, and `PRAGMA temp_store=MEMORY` is not a good
//! substitute: with it SQLite's external sorter never spills, so `GROUP BY`/`ORDER BY` over a
//! large table sorts one huge linked list of individually allocated records, which is about 2x
//! slower than the chunked sort with temp files (measured natively with sqlite3 3.40 and in
//! wasm with 3.50 on 200k rows). This VFS wraps the default one and answers only the opens
//! without a name — SQLite's anonymous temp files (sorter runs, temp tables, statement
//! journals) — with a growable buffer; every named file goes to the default VFS unchanged. The
//! buffers live in the plugin's linear memory, so the runtime's memory limit still bounds them.

use rusqlite::ffi;
use std::ffi::{c_int, c_void};
use std::ptr;
use std::sync::Once;
use std::sync::atomic::{AtomicUsize, Ordering};

/// How many temp files this VFS has opened in this process (lets tests see it in use).
static OPENED: AtomicUsize = AtomicUsize::new(0);

/// Registers the VFS as the process default, once, before any connection is opened.
pub fn install() {
    static INSTALL: Once = Once::new();
    INSTALL.call_once(|| {
        // SAFETY: sqlite3_vfs_find(NULL) returns the built-in default VFS, which lives for the
        // whole process; the wrapper is leaked so it does too, as sqlite3_vfs_register requires.
        unsafe {
            let inner = ffi::sqlite3_vfs_find(ptr::null());
            if inner.is_null() {
                return;
            }
            let mut vfs: ffi::sqlite3_vfs = ptr::read(inner);
            vfs.szOsFile = vfs.szOsFile.max(size_of::<MemFile>() as c_int);
            vfs.pNext = ptr::null_mut();
            vfs.zName = c"cordon-memtemp".as_ptr();
            vfs.pAppData = inner.cast::<c_void>();
            vfs.xOpen = Some(open);
            let vfs = Box::leak(Box::new(vfs));
            // If registering fails SQLite keeps using its default VFS: slower sorts, same answers.
            ffi::sqlite3_vfs_register(vfs, 1);
        }
    });
}

/// The default VFS this one wraps (stored in `pAppData`). Its other methods were copied as they
/// are; they read only the `pAppData` they were given, which is the same pointer.
unsafe fn inner_vfs(vfs: *mut ffi::sqlite3_vfs) -> *mut ffi::sqlite3_vfs {
    // SAFETY: `vfs` is the wrapper registered by `install`, whose pAppData is the default VFS.
    unsafe { (*vfs).pAppData.cast::<ffi::sqlite3_vfs>() }
}

unsafe extern "C" fn open(
    vfs: *mut ffi::sqlite3_vfs,
    name: ffi::sqlite3_filename,
    file: *mut ffi::sqlite3_file,
    flags: c_int,
    out_flags: *mut c_int,
) -> c_int {
    // SAFETY: SQLite passes a VFS registered by `install` and a `szOsFile`-sized, suitably
    // aligned block for `file`, which is at least as large as a `MemFile`.
    unsafe {
        if !name.is_null() {
            let inner = inner_vfs(vfs);
            return match (*inner).xOpen {
                Some(inner_open) => inner_open(inner, name, file, flags, out_flags),
                None => ffi::SQLITE_CANTOPEN,
            };
        }
        OPENED.fetch_add(1, Ordering::Relaxed);
        ptr::write(
            file.cast::<MemFile>(),
            MemFile {
                base: ffi::sqlite3_file {
                    pMethods: &MEM_FILE_METHODS,
                },
                data: Vec::new(),
            },
        );
        if !out_flags.is_null() {
            *out_flags = flags;
        }
        ffi::SQLITE_OK
    }
}

/// An anonymous temp file: SQLite's file header, then the bytes.
#[repr(C)]
struct MemFile {
    base: ffi::sqlite3_file,
    data: Vec<u8>,
}

/// # Safety
/// `file` must have been opened by [`open`] as a `MemFile` and not yet closed.
unsafe fn mem<'a>(file: *mut ffi::sqlite3_file) -> &'a mut MemFile {
    // SAFETY: guaranteed by the caller; SQLite never uses a file from two threads at once.
    unsafe { &mut *file.cast::<MemFile>() }
}

static MEM_FILE_METHODS: ffi::sqlite3_io_methods = ffi::sqlite3_io_methods {
    iVersion: 1,
    xClose: Some(mem_close),
    xRead: Some(mem_read),
    xWrite: Some(mem_write),
    xTruncate: Some(mem_truncate),
    xSync: Some(mem_ok),
    xFileSize: Some(mem_file_size),
    xLock: Some(mem_lock),
    xUnlock: Some(mem_lock),
    xCheckReservedLock: Some(mem_check_reserved_lock),
    xFileControl: Some(mem_file_control),
    xSectorSize: Some(mem_sector_size),
    xDeviceCharacteristics: Some(mem_device_characteristics),
    xShmMap: None,
    xShmLock: None,
    xShmBarrier: None,
    xShmUnmap: None,
    xFetch: None,
    xUnfetch: None,
};

unsafe extern "C" fn mem_close(file: *mut ffi::sqlite3_file) -> c_int {
    // SAFETY: SQLite closes each file once; the buffer is dropped and the header cleared.
    unsafe {
        ptr::drop_in_place(ptr::addr_of_mut!((*file.cast::<MemFile>()).data));
        (*file).pMethods = ptr::null();
    }
    ffi::SQLITE_OK
}

/// Byte range `[offset, offset + amount)` as indices, or `None` when it cannot exist.
fn range(offset: ffi::sqlite3_int64, amount: c_int) -> Option<(usize, usize)> {
    let start = usize::try_from(offset).ok()?;
    let len = usize::try_from(amount).ok()?;
    Some((start, start.checked_add(len)?))
}

unsafe extern "C" fn mem_read(
    file: *mut ffi::sqlite3_file,
    buf: *mut c_void,
    amount: c_int,
    offset: ffi::sqlite3_int64,
) -> c_int {
    let Some((start, end)) = range(offset, amount) else {
        return ffi::SQLITE_IOERR_READ;
    };
    // SAFETY: SQLite hands a buffer of `amount` bytes for a file opened by `open`.
    unsafe {
        let data = &mem(file).data;
        let out = std::slice::from_raw_parts_mut(buf.cast::<u8>(), end - start);
        let have = data.len().clamp(start, end) - start;
        out[..have].copy_from_slice(&data[start..start + have]);
        if have < out.len() {
            // SQLite requires the unread part zeroed on a short read.
            out[have..].fill(0);
            return ffi::SQLITE_IOERR_SHORT_READ;
        }
    }
    ffi::SQLITE_OK
}

unsafe extern "C" fn mem_write(
    file: *mut ffi::sqlite3_file,
    buf: *const c_void,
    amount: c_int,
    offset: ffi::sqlite3_int64,
) -> c_int {
    let Some((start, end)) = range(offset, amount) else {
        return ffi::SQLITE_IOERR_WRITE;
    };
    // SAFETY: SQLite hands `amount` readable bytes for a file opened by `open`.
    unsafe {
        let data = &mut mem(file).data;
        if end > data.len() {
            // Grow without aborting: running out of memory becomes SQLite's "out of memory".
            if data.try_reserve(end - data.len()).is_err() {
                return ffi::SQLITE_IOERR_NOMEM;
            }
            data.resize(end, 0);
        }
        let input = std::slice::from_raw_parts(buf.cast::<u8>(), end - start);
        data[start..end].copy_from_slice(input);
    }
    ffi::SQLITE_OK
}

unsafe extern "C" fn mem_truncate(file: *mut ffi::sqlite3_file, size: ffi::sqlite3_int64) -> c_int {
    let Ok(size) = usize::try_from(size) else {
        return ffi::SQLITE_IOERR_TRUNCATE;
    };
    // SAFETY: a file opened by `open`.
    let data = unsafe { &mut mem(file).data };
    if size < data.len() {
        data.truncate(size);
        data.shrink_to(size);
    }
    ffi::SQLITE_OK
}

unsafe extern "C" fn mem_ok(_file: *mut ffi::sqlite3_file, _flags: c_int) -> c_int {
    ffi::SQLITE_OK
}

unsafe extern "C" fn mem_file_size(
    file: *mut ffi::sqlite3_file,
    size: *mut ffi::sqlite3_int64,
) -> c_int {
    // SAFETY: a file opened by `open` and an out-pointer from SQLite.
    unsafe {
        *size = mem(file).data.len() as ffi::sqlite3_int64;
    }
    ffi::SQLITE_OK
}

/// Only this connection ever sees an anonymous temp file, so locks always succeed.
unsafe extern "C" fn mem_lock(_file: *mut ffi::sqlite3_file, _level: c_int) -> c_int {
    ffi::SQLITE_OK
}

unsafe extern "C" fn mem_check_reserved_lock(
    _file: *mut ffi::sqlite3_file,
    out: *mut c_int,
) -> c_int {
    // SAFETY: an out-pointer from SQLite.
    unsafe {
        *out = 0;
    }
    ffi::SQLITE_OK
}

unsafe extern "C" fn mem_file_control(
    _file: *mut ffi::sqlite3_file,
    _op: c_int,
    _arg: *mut c_void,
) -> c_int {
    ffi::SQLITE_NOTFOUND
}

unsafe extern "C" fn mem_sector_size(_file: *mut ffi::sqlite3_file) -> c_int {
    4096
}

unsafe extern "C" fn mem_device_characteristics(_file: *mut ffi::sqlite3_file) -> c_int {
    ffi::SQLITE_IOCAP_POWERSAFE_OVERWRITE | ffi::SQLITE_IOCAP_SAFE_APPEND
}

#[cfg(test)]
mod tests {
    use super::*;
    use rusqlite::Connection;

    /// Sorting more than the sorter keeps in one run spills runs to temp files; they must come
    /// from this VFS (a sandbox has no temp directory) and the result must be exact.
    #[test]
    fn large_sorts_spill_to_memory_files_and_stay_correct() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("big.db");
        let db = path.to_str().unwrap();
        let conn = Connection::open(db).unwrap();
        conn.execute_batch(
            "CREATE TABLE items (id INTEGER PRIMARY KEY, category TEXT, pad TEXT);
             WITH RECURSIVE n(i) AS (SELECT 0 UNION ALL SELECT i + 1 FROM n WHERE i < 59999)
             INSERT INTO items SELECT i, 'cat' || (i * 7919 % 37), hex(randomblob(24)) FROM n;",
        )
        .unwrap();
        drop(conn);

        let before = OPENED.load(Ordering::Relaxed);
        let conn = crate::db::open_read(db).unwrap();
        let mut stmt = conn
            .prepare(
                "SELECT category, count(*), max(pad) FROM items GROUP BY category ORDER BY category",
            )
            .unwrap();
        let groups: Vec<(String, i64)> = stmt
            .query_map([], |r| Ok((r.get(0)?, r.get(1)?)))
            .unwrap()
            .map(Result::unwrap)
            .collect();
        assert!(
            OPENED.load(Ordering::Relaxed) > before,
            "the sort did not use in-memory temp files"
        );
        assert_eq!(groups.len(), 37);
        assert_eq!(groups.iter().map(|g| g.1).sum::<i64>(), 60_000);
        assert!(groups.windows(2).all(|w| w[0].0 < w[1].0), "not sorted");

        // A full ORDER BY over wide rows comes back in order, every row once.
        let ids: Vec<i64> = conn
            .prepare("SELECT id FROM items ORDER BY pad, id")
            .unwrap()
            .query_map([], |r| r.get(0))
            .unwrap()
            .map(Result::unwrap)
            .collect();
        assert_eq!(ids.len(), 60_000);
        let mut unique = ids.clone();
        unique.sort_unstable();
        unique.dedup();
        assert_eq!(unique.len(), 60_000);
    }

    /// Temp tables live in the same memory files and read back what was written.
    #[test]
    fn temp_tables_round_trip() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("t.db");
        let db = path.to_str().unwrap();
        let conn = crate::db::open_write(db, true).unwrap();
        conn.execute_batch(
            "CREATE TEMP TABLE scratch (x INTEGER, s TEXT);
             WITH RECURSIVE n(i) AS (SELECT 1 UNION ALL SELECT i + 1 FROM n WHERE i < 20000)
             INSERT INTO scratch SELECT i, hex(randomblob(64)) FROM n;
             DELETE FROM scratch WHERE x % 2 = 0;",
        )
        .unwrap();
        let (n, sum): (i64, i64) = conn
            .query_row("SELECT count(*), sum(x) FROM scratch", [], |r| {
                Ok((r.get(0)?, r.get(1)?))
            })
            .unwrap();
        assert_eq!(n, 10_000);
        assert_eq!(sum, 100_000_000);
        // Nothing but the database itself was written next to it.
        let names: Vec<_> = std::fs::read_dir(dir.path())
            .unwrap()
            .map(|e| e.unwrap().file_name())
            .collect();
        assert_eq!(names, ["t.db"]);
    }

    #[test]
    fn short_reads_are_zero_filled() {
        // Closed by `mem_close` below, as SQLite would, so never dropped here.
        let mut file = std::mem::ManuallyDrop::new(MemFile {
            base: ffi::sqlite3_file {
                pMethods: &MEM_FILE_METHODS,
            },
            data: Vec::new(),
        });
        let f = ptr::addr_of_mut!(*file).cast::<ffi::sqlite3_file>();
        let mut buf = [7u8; 8];
        unsafe {
            assert_eq!(mem_write(f, b"abc".as_ptr().cast(), 3, 2), ffi::SQLITE_OK);
            assert_eq!(
                mem_read(f, buf.as_mut_ptr().cast(), 8, 0),
                ffi::SQLITE_IOERR_SHORT_READ
            );
            assert_eq!(&buf, b"\0\0abc\0\0\0");
            let mut size = 0;
            mem_file_size(f, &mut size);
            assert_eq!(size, 5);
            mem_truncate(f, 1);
            mem_file_size(f, &mut size);
            assert_eq!(size, 1);
            assert_eq!(
                mem_write(f, b"x".as_ptr().cast(), 1, -1),
                ffi::SQLITE_IOERR_WRITE
            );
            mem_close(f);
        }
    }
}
