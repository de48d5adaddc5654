//! Opening databases the way a sandbox allows, and turning SQLite's errors into tool errors.

use std::fs;

use cordon_sdk::ToolError;
use cordon_sdk::paths::GrantedDirs;
use rusqlite::limits::Limit;
use rusqlite::{Connection, ErrorCode, OpenFlags};

use crate::args::{Params, Scalar};

/// The page cache of a read connection, in KiB (SQLite's negative `cache_size`), which is also
/// the size of the sorted runs SQLite's external sorter writes for `GROUP BY`/`ORDER BY` (the
/// sorter takes the larger of this and `SQLITE_SORTER_PMASZ`, set to 256 KiB in
/// `plugins/.cargo/config.toml`). SQLite's default, 2 MiB, sorts each run as a linked list that
/// no longer fits the CPU's caches: with 512 KiB runs a `GROUP BY` over 200k rows took ~20% less
/// time when the caches were contended (as WebAssembly and natively alike) and 0-4% less
/// otherwise; a join of 40k index lookups is unchanged.
/// A read connection lives for one call, so its cache only serves pages revisited in one
/// statement.
const READ_CACHE_KIB: i64 = 512;

/// How long a writer waits for another writer's lock before reporting "locked".
const BUSY_TIMEOUT_MS: u64 = 2_000;

/// Turns the `database` argument into a normalised guest path inside a grant (relative paths
/// are taken inside the grant), so errors and results name it the way the user granted it.
/// Outside every grant, the host is told the call lacked the database's directory: read-write
/// when the call `writes`.
pub fn resolve_database(arg: &str, writes: bool) -> Result<String, ToolError> {
    let dirs = GrantedDirs::from_env();
    let path = if writes {
        dirs.resolve_to_write(arg, "database")?
    } else {
        dirs.resolve(arg, "database")?
    };
    if !dirs.is_granted(&path) {
        return Err(ToolError::invalid(format!(
            "{path} is a directory, not a SQLite database file; granted directories: {}",
            dirs.roots().join(", ")
        )));
    }
    Ok(path)
}

/// Checks that the database file exists.
fn existing_file(database: &str) -> Result<(), ToolError> {
    match fs::metadata(database) {
        Ok(meta) if meta.is_file() => Ok(()),
        Ok(_) => Err(ToolError::invalid(format!(
            "{database} is a directory, not a SQLite database file"
        ))),
        Err(err) => Err(GrantedDirs::from_env().io_error(database, &err)),
    }
}

/// A `file:` URI for `path` with `query`, escaping what URI parsing would misread.
fn file_uri(path: &str, query: &str) -> String {
    let mut uri = String::from("file:");
    if path.starts_with("//") {
        // "file://x" would make x an authority; an empty authority keeps it a path.
        uri.push_str("//");
    }
    for c in path.chars() {
        match c {
            '%' => uri.push_str("%25"),
            '?' => uri.push_str("%3f"),
            '#' => uri.push_str("%23"),
            _ => uri.push(c),
        }
    }
    uri.push('?');
    uri.push_str(query);
    uri
}

/// Settings every connection gets: no other database files can be attached, so a call reaches
/// only the file it names. (Temp files need no setting: [`crate::tempfiles`] keeps them in
/// memory, as a sandbox has no /tmp.)
fn configure(conn: &Connection) -> Result<(), ToolError> {
    conn.set_limit(Limit::SQLITE_LIMIT_ATTACHED, 0)
        .map_err(|e| sqlite_error("", &e))?;
    Ok(())
}

/// Opens `database` for reading: read-only and immutable (no lock files, which a read-only
/// grant could not create), and `query_only` so SQLite refuses any write.
///
/// Immutable mode ignores a `-wal` or hot `-journal` file, so those are checked first and
/// reported instead of answering from stale data. (Loading small databases into memory in
/// one read was measured and not faster for scans, but 4x slower for indexed lookups.)
pub fn open_read(database: &str) -> Result<Connection, ToolError> {
    crate::tempfiles::install();
    existing_file(database)?;
    check_pending_changes(database)?;
    let flags = OpenFlags::SQLITE_OPEN_READ_ONLY
        | OpenFlags::SQLITE_OPEN_URI
        | OpenFlags::SQLITE_OPEN_NO_MUTEX;
    let conn = Connection::open_with_flags(file_uri(database, "immutable=1"), flags)
        .map_err(|e| sqlite_error(database, &e))?;
    configure(&conn)?;
    conn.pragma_update(None, "query_only", true)
        .map_err(|e| sqlite_error(database, &e))?;
    conn.pragma_update(None, "cache_size", -READ_CACHE_KIB)
        .map_err(|e| sqlite_error(database, &e))?;
    // Reading the schema makes "file is not a database" appear here, not mid-query.
    conn.query_row("SELECT count(*) FROM sqlite_schema", [], |_| Ok(()))
        .map_err(|e| sqlite_error(database, &e))?;
    Ok(conn)
}

/// Opens `database` for writing. The file must exist unless `create` is set.
///
/// A read-only grant refuses to open the file for writing; that is reported as `denied`
/// before SQLite gets to produce a less helpful error about its lock file.
pub fn open_write(database: &str, create: bool) -> Result<Connection, ToolError> {
    crate::tempfiles::install();
    if create && fs::metadata(database).is_err() {
        // Create the (empty) file here, so a read-only grant is reported as denied rather
        // than as SQLite's "unable to open database file". SQLite starts a new database in
        // an empty file.
        if let Err(err) = fs::OpenOptions::new()
            .write(true)
            .create_new(true)
            .open(database)
        {
            return Err(write_refused(database, &err));
        }
    } else {
        existing_file(database)?;
        if let Err(err) = fs::OpenOptions::new().read(true).write(true).open(database) {
            return Err(write_refused(database, &err));
        }
        if is_wal(database) {
            return Err(ToolError::failed(format!(
                "{database} uses WAL journal mode, which the sandboxed SQLite cannot write \
                 (it has no shared memory). On the host, switch the file \
                 with `sqlite3 FILE 'PRAGMA journal_mode=DELETE'` (after closing programs \
                 that use it), or only read it with sql_query"
            )));
        }
    }
    let mut flags = OpenFlags::SQLITE_OPEN_READ_WRITE
        | OpenFlags::SQLITE_OPEN_URI
        | OpenFlags::SQLITE_OPEN_NO_MUTEX;
    if create {
        flags |= OpenFlags::SQLITE_OPEN_CREATE;
    }
    let mode = if create { "mode=rwc" } else { "mode=rw" };
    let conn = Connection::open_with_flags(file_uri(database, mode), flags)
        .map_err(|e| sqlite_error(database, &e))?;
    configure(&conn)?;
    conn.busy_timeout(std::time::Duration::from_millis(BUSY_TIMEOUT_MS))
        .map_err(|e| sqlite_error(database, &e))?;
    Ok(conn)
}

fn write_refused(database: &str, err: &std::io::Error) -> ToolError {
    match err.kind() {
        std::io::ErrorKind::NotFound => ToolError::from_io(database, err),
        _ => ToolError::denied(format!(
            "cannot open {database} for writing ({err}); the directory is probably granted \
             read-only. Ask the user for a read-write grant of it, or only read it with sql_query"
        )),
    }
}

/// Whether the database header says WAL mode (file format versions 2 at offsets 18–19).
fn is_wal(database: &str) -> bool {
    let mut header = [0u8; 20];
    match fs::File::open(database) {
        Ok(mut f) => {
            use std::io::Read;
            f.read_exact(&mut header).is_ok() && header[18] == 2 && header[19] == 2
        }
        Err(_) => false,
    }
}

fn file_len(path: &str) -> Option<u64> {
    fs::metadata(path).ok().map(|m| m.len())
}

/// Refuses to read a database whose latest changes live in a `-wal` or hot `-journal` file
/// that immutable mode would ignore.
fn check_pending_changes(database: &str) -> Result<(), ToolError> {
    let journal = format!("{database}-journal");
    // Never rolled back from here: the sandboxed SQLite cannot see a native writer's locks, so
    // the journal of a `sqlite3` writing right now would look interrupted, and a read must not
    // undo a live write.
    if file_len(&journal).is_some_and(|n| n > 0) {
        return Err(ToolError::failed(format!(
            "{database} has a non-empty rollback journal ({journal}): a write is in progress or \
             was interrupted, so its content may be inconsistent. Retry when the writer has \
             finished; a write Cordon's sql tool had begun and was stopped is rolled back by the \
             next sql_execute"
        )));
    }
    let wal = format!("{database}-wal");
    let Some(wal_len) = file_len(&wal).filter(|&n| n > 0) else {
        return Ok(());
    };
    if wal_fully_checkpointed(&format!("{database}-shm")) {
        return Ok(());
    }
    Err(ToolError::failed(format!(
        "{database} is in WAL mode and {wal} holds {wal_len} bytes of changes not yet \
         checkpointed into the database file; the sandboxed SQLite cannot read the WAL, so it \
         would answer from stale data. On the host run \
         `sqlite3 FILE 'PRAGMA wal_checkpoint(TRUNCATE)'` on the file (or close the program \
         writing it), then retry"
    )))
}

/// Reads the WAL index (`-shm`): if both copies of its header agree and every frame in the
/// log has been copied back (`nBackfill == mxFrame`), the database file is current.
///
/// Anything unreadable or inconsistent counts as "not checkpointed", the safe answer.
fn wal_fully_checkpointed(shm: &str) -> bool {
    let Ok(bytes) = fs::read(shm) else {
        return false;
    };
    if bytes.len() < 100 || bytes[0..48] != bytes[48..96] {
        return false;
    }
    let u32_at =
        |i: usize| u32::from_ne_bytes([bytes[i], bytes[i + 1], bytes[i + 2], bytes[i + 3]]);
    let is_init = bytes[12] == 1;
    let max_frame = u32_at(16);
    let backfilled = u32_at(96);
    is_init && backfilled == max_frame
}

/// Maps a rusqlite error to the tool error a model can act on, keeping SQLite's message.
pub fn sqlite_error(database: &str, err: &rusqlite::Error) -> ToolError {
    let db = if database.is_empty() {
        String::new()
    } else {
        format!("{database}: ")
    };
    let failure = match err {
        rusqlite::Error::SqliteFailure(e, msg) => {
            Some((e.code, msg.clone().unwrap_or_else(|| e.to_string())))
        }
        rusqlite::Error::SqlInputError {
            error, msg, offset, ..
        } => Some((error.code, format!("{msg} (at byte {offset} of the SQL)"))),
        _ => None,
    };
    if let Some((code, message)) = failure {
        return match code {
            ErrorCode::ReadOnly => ToolError::denied(format!(
                "SQLite refused to write ({message}). sql_query and sql_schema only read; \
                 use sql_execute, which needs a read-write grant"
            )),
            ErrorCode::DatabaseBusy | ErrorCode::DatabaseLocked => ToolError::failed(format!(
                "{db}SQLite error: {message}. Another call or program is writing it; retry \
                 later. (Cordon removes the lock an interrupted call leaves; a \
                 {database}.lock directory left by a program outside Cordon must be removed \
                 on the host)"
            )),
            ErrorCode::NotADatabase => {
                ToolError::invalid(format!("{db}not a SQLite database ({message})"))
            }
            ErrorCode::CannotOpen => ToolError::not_found(format!(
                "{db}SQLite cannot open it ({message}); check the path is inside a granted directory"
            )),
            ErrorCode::PermissionDenied => ToolError::denied(format!(
                "{db}SQLite error: {message}; the grant may be read-only"
            )),
            ErrorCode::Unknown
            | ErrorCode::ConstraintViolation
            | ErrorCode::TypeMismatch
            | ErrorCode::TooBig => {
                if message.starts_with("no such table") {
                    ToolError::not_found(format!(
                        "SQLite error: {message}; call sql_schema to see the tables"
                    ))
                } else {
                    ToolError::invalid(format!("SQLite error: {message}"))
                }
            }
            _ => ToolError::failed(format!("{db}SQLite error: {message}")),
        };
    }
    match err {
        rusqlite::Error::MultipleStatement => ToolError::invalid(
            "`sql` contains more than one statement; send exactly one (sql_execute accepts \
             several only when no `params` are given)",
        ),
        rusqlite::Error::InvalidParameterCount(given, expected) => ToolError::invalid(format!(
            "the statement has {expected} placeholder(s) but {given} value(s) were given in `params`"
        )),
        rusqlite::Error::InvalidParameterName(name) => {
            ToolError::invalid(format!("the statement has no placeholder named {name}"))
        }
        rusqlite::Error::NulError(_) => {
            ToolError::invalid("`sql` contains a NUL character; remove it")
        }
        other => ToolError::failed(format!("{db}SQLite error: {other}")),
    }
}

fn bind_one(
    stmt: &mut rusqlite::Statement<'_>,
    index: usize,
    value: &Scalar,
) -> rusqlite::Result<()> {
    match value {
        Scalar::Null => stmt.raw_bind_parameter(index, rusqlite::types::Null),
        Scalar::Bool(b) => stmt.raw_bind_parameter(index, i64::from(*b)),
        Scalar::Integer(i) => stmt.raw_bind_parameter(index, i),
        Scalar::Real(f) => stmt.raw_bind_parameter(index, f),
        Scalar::Text(s) => stmt.raw_bind_parameter(index, s),
    }
}

/// Binds `params` to `stmt`, checking that every placeholder gets exactly one value.
pub fn bind(stmt: &mut rusqlite::Statement<'_>, params: Option<&Params>) -> Result<(), ToolError> {
    let count = stmt.parameter_count();
    let map = |e: rusqlite::Error| sqlite_error("", &e);
    match params {
        None if count == 0 => Ok(()),
        None => Err(ToolError::invalid(format!(
            "the statement has {count} placeholder(s) but no `params` were given"
        ))),
        Some(Params::Positional(values)) => {
            if values.len() != count {
                return Err(ToolError::invalid(format!(
                    "the statement has {count} placeholder(s) but `params` has {} value(s)",
                    values.len()
                )));
            }
            for (i, v) in values.iter().enumerate() {
                bind_one(stmt, i + 1, v).map_err(map)?;
            }
            Ok(())
        }
        Some(Params::Named(values)) => {
            let mut bound = vec![false; count + 1];
            for (key, v) in values {
                let index = if key.starts_with([':', '@', '$']) {
                    stmt.parameter_index(key).map_err(map)?
                } else {
                    [":", "@", "$"]
                        .iter()
                        .find_map(|p| stmt.parameter_index(&format!("{p}{key}")).ok().flatten())
                };
                let Some(index) = index else {
                    let names: Vec<String> = (1..=count)
                        .filter_map(|i| stmt.parameter_name(i).map(str::to_owned))
                        .collect();
                    return Err(ToolError::invalid(format!(
                        "`params` names `{key}`, but the statement's named placeholders are: {}",
                        if names.is_empty() {
                            "(none)".to_owned()
                        } else {
                            names.join(", ")
                        }
                    )));
                };
                bind_one(stmt, index, v).map_err(map)?;
                bound[index] = true;
            }
            let missing: Vec<String> = (1..=count)
                .filter(|&i| !bound[i])
                .map(|i| {
                    stmt.parameter_name(i)
                        .map_or(format!("?{i}"), str::to_owned)
                })
                .collect();
            if missing.is_empty() {
                Ok(())
            } else {
                Err(ToolError::invalid(format!(
                    "`params` gives no value for: {}",
                    missing.join(", ")
                )))
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The read connection refuses writes by itself, even if the statement check were
    /// bypassed: SQLite answers SQLITE_READONLY, mapped to `denied`.
    #[test]
    fn read_connection_refuses_writes_itself() {
        let dir = std::env::temp_dir().join(format!("cordon-sql-{}", std::process::id()));
        fs::create_dir_all(&dir).unwrap();
        let path = dir.join("t.db");
        let _ = fs::remove_file(&path);
        let db = path.to_str().unwrap();
        Connection::open(db)
            .unwrap()
            .execute_batch("CREATE TABLE t (x INTEGER); INSERT INTO t VALUES (1), (2);")
            .unwrap();
        let conn = open_read(db).unwrap();
        let sum: i64 = conn
            .query_row("SELECT sum(x) FROM t", [], |r| r.get(0))
            .unwrap();
        assert_eq!(sum, 3);
        let cache: i64 = conn
            .query_row("PRAGMA cache_size", [], |r| r.get(0))
            .unwrap();
        assert_eq!(cache, -READ_CACHE_KIB, "sorted runs of READ_CACHE_KIB");
        let min_run: bool = conn
            .query_row(
                "SELECT sqlite_compileoption_used('SORTER_PMASZ=64')",
                [],
                |r| r.get(0),
            )
            .unwrap();
        assert!(
            min_run,
            "LIBSQLITE3_FLAGS in plugins/.cargo/config.toml sets SORTER_PMASZ"
        );
        for sql in [
            "DELETE FROM t",
            "CREATE TABLE u (y)",
            "PRAGMA user_version = 3",
        ] {
            let err = conn.execute(sql, []).unwrap_err();
            assert!(
                matches!(sqlite_error(db, &err), ToolError::Denied(_)),
                "{sql}: {err}"
            );
        }
        let n: i64 = Connection::open(db)
            .unwrap()
            .query_row("SELECT count(*) FROM t", [], |r| r.get(0))
            .unwrap();
        assert_eq!(n, 2);
        fs::remove_dir_all(&dir).unwrap();
    }
}
