//! File stamps: a cheap way to tell that a file is still the one whose contents were checked.
//!
//! Hashing a 20–40 MB component or compiled-code file on every `cordon call` costs tens of
//! milliseconds. Like git's index, Cordon instead remembers the `stat` of a file at the moment
//! its contents were verified, and hashes it again only when the stat differs. Any write
//! through the filesystem changes the change time (`ctime`), which no user-level tool can set
//! back, and replacing the file changes its inode; so a matching stamp means the bytes are the
//! ones that were verified.

use std::fmt;
use std::path::Path;
use std::str::FromStr;

/// What `stat` says about a file, as far as it changes when the file's contents can have.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct FileStamp {
    len: u64,
    device: u64,
    inode: u64,
    modified_ns: i128,
    changed_ns: i128,
}

impl FileStamp {
    /// The stamp of the file at `path` as it is now (symlinks followed).
    #[cfg(unix)]
    pub fn of(path: &Path) -> std::io::Result<FileStamp> {
        std::fs::metadata(path).map(|m| FileStamp::from_metadata(&m))
    }

    /// The stamp of an open file as it is now.
    #[cfg(unix)]
    pub fn of_file(file: &std::fs::File) -> std::io::Result<FileStamp> {
        file.metadata().map(|m| FileStamp::from_metadata(&m))
    }

    #[cfg(unix)]
    fn from_metadata(m: &std::fs::Metadata) -> FileStamp {
        use std::os::unix::fs::MetadataExt;
        let ns = |secs: i64, nanos: i64| i128::from(secs) * 1_000_000_000 + i128::from(nanos);
        FileStamp {
            len: m.len(),
            device: m.dev(),
            inode: m.ino(),
            modified_ns: ns(m.mtime(), m.mtime_nsec()),
            changed_ns: ns(m.ctime(), m.ctime_nsec()),
        }
    }

    /// Without a change time the stamp cannot be trusted, so off Unix every check hashes.
    #[cfg(not(unix))]
    pub fn of(_path: &Path) -> std::io::Result<FileStamp> {
        Err(unsupported())
    }

    /// Without a change time the stamp cannot be trusted, so off Unix every check hashes.
    #[cfg(not(unix))]
    pub fn of_file(_file: &std::fs::File) -> std::io::Result<FileStamp> {
        Err(unsupported())
    }

    /// The file's identity (device and inode).
    pub fn id(&self) -> crate::FileId {
        crate::FileId {
            device: self.device,
            inode: self.inode,
        }
    }

    /// The file's size in bytes.
    pub fn len(&self) -> u64 {
        self.len
    }

    /// Whether the file is empty.
    pub fn is_empty(&self) -> bool {
        self.len == 0
    }
}

/// One line of text, so a stamp can be stored beside what it vouches for.
impl fmt::Display for FileStamp {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(
            f,
            "len={} dev={} ino={} mtime={} ctime={}",
            self.len, self.device, self.inode, self.modified_ns, self.changed_ns
        )
    }
}

#[cfg(not(unix))]
fn unsupported() -> std::io::Error {
    std::io::Error::new(
        std::io::ErrorKind::Unsupported,
        "file stamps need Unix metadata",
    )
}

impl serde::Serialize for FileStamp {
    fn serialize<S: serde::Serializer>(&self, serializer: S) -> Result<S::Ok, S::Error> {
        serializer.collect_str(self)
    }
}

impl<'de> serde::Deserialize<'de> for FileStamp {
    fn deserialize<D: serde::Deserializer<'de>>(deserializer: D) -> Result<Self, D::Error> {
        let s = String::deserialize(deserializer)?;
        s.parse().map_err(serde::de::Error::custom)
    }
}

/// Why a stored stamp could not be read back; the caller then simply verifies the file again.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("not a file stamp: {0:?}")]
pub struct BadStamp(String);

impl FromStr for FileStamp {
    type Err = BadStamp;

    fn from_str(s: &str) -> Result<FileStamp, BadStamp> {
        let bad = || BadStamp(s.chars().take(80).collect());
        let mut fields = [None::<&str>; 5];
        for part in s.split_whitespace() {
            let (key, value) = part.split_once('=').ok_or_else(bad)?;
            let slot = match key {
                "len" => 0,
                "dev" => 1,
                "ino" => 2,
                "mtime" => 3,
                "ctime" => 4,
                _ => return Err(bad()),
            };
            fields[slot] = Some(value);
        }
        let field = |i: usize| fields[i].ok_or_else(bad);
        Ok(FileStamp {
            len: field(0)?.parse().map_err(|_| bad())?,
            device: field(1)?.parse().map_err(|_| bad())?,
            inode: field(2)?.parse().map_err(|_| bad())?,
            modified_ns: field(3)?.parse().map_err(|_| bad())?,
            changed_ns: field(4)?.parse().map_err(|_| bad())?,
        })
    }
}

/// A file's sha256 together with the stamp it had when that digest was computed, stored as one
/// line in a small record file beside (or on behalf of) the file.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct DigestRecord {
    /// Lower-case hex sha256 of the file's bytes.
    pub sha256_hex: String,
    /// The file's stamp when those bytes were hashed.
    pub stamp: FileStamp,
}

impl DigestRecord {
    /// Reads a record; `None` when it is missing or unreadable, which only costs a re-hash.
    pub fn read(record: &Path) -> Option<DigestRecord> {
        let text = std::fs::read_to_string(record).ok()?;
        let (digest, stamp) = text.trim().split_once(' ')?;
        let sha256_hex = digest.strip_prefix("sha256=")?;
        if sha256_hex.len() != 64 || !sha256_hex.bytes().all(|b| b.is_ascii_hexdigit()) {
            return None;
        }
        Some(DigestRecord {
            sha256_hex: sha256_hex.to_ascii_lowercase(),
            stamp: stamp.parse().ok()?,
        })
    }

    /// Writes the record through a temporary file and a rename, so a reader never sees half
    /// of one. It only saves a re-hash, so it is not flushed to disk.
    pub fn write(&self, record: &Path) -> std::io::Result<()> {
        replace_file(
            record,
            format!("sha256={} {}\n", self.sha256_hex, self.stamp).as_bytes(),
            false,
        )
    }
}

/// The compiled code of a component as the host recorded it when it wrote it to the compile
/// cache: which engine it is for, the sha256 of the file, and the file's stamp when that digest
/// was taken.
///
/// Loading compiled code maps machine code into the host, and wasmtime documents that
/// deserializing untrusted bytes is unsafe; so the cache itself vouches for nothing. This pin is
/// kept where only the host writes (the lock file entry of the plugin) and the cache file must
/// match it — by its stamp, or else by its digest — before it is loaded. A file that matches
/// neither is not loaded: the component is compiled again from its own pinned bytes.
#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
#[serde(deny_unknown_fields)]
pub struct CompiledPin {
    /// The engine's compatibility hash the code was compiled for (code for another engine,
    /// say another Cordon version, is compiled again).
    pub engine: String,
    /// Lower-case hex sha256 of the compiled file.
    pub sha256: String,
    /// The file's stamp when it was written or last hashed.
    pub stamp: FileStamp,
}

/// Replaces `path` with `bytes` through a temporary file in the same directory and a rename,
/// so readers see the old file or the whole new one, never a part; `durable` flushes the data
/// to disk before the rename. The temporary file is removed again on failure.
pub fn replace_file(path: &Path, bytes: &[u8], durable: bool) -> std::io::Result<()> {
    replace_file_with(path, bytes, durable, &|_| Ok(()))
}

/// [`replace_file`], calling `written` with the temporary file once its bytes are in it.
fn replace_file_with(
    path: &Path,
    bytes: &[u8],
    durable: bool,
    written: &dyn Fn(&std::fs::File) -> std::io::Result<()>,
) -> std::io::Result<()> {
    use std::io::Write;
    static SEQ: std::sync::atomic::AtomicU64 = std::sync::atomic::AtomicU64::new(0);
    let seq = SEQ.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
    let name = path
        .file_name()
        .map(|n| n.to_string_lossy().into_owned())
        .unwrap_or_default();
    let tmp = path.with_file_name(format!(".{name}.{}-{seq}.tmp", std::process::id()));
    let result = (|| {
        let mut f = std::fs::OpenOptions::new()
            .write(true)
            .create_new(true)
            .open(&tmp)?;
        f.write_all(bytes)?;
        if durable {
            f.sync_all()?;
        }
        written(&f)?;
        std::fs::rename(&tmp, path)
    })();
    if result.is_err() {
        let _ = std::fs::remove_file(&tmp);
    }
    result
}

/// Like [`replace_file`] (always durable), and returns the stamp of the file now at `path`,
/// which is checked to be the very file written (same inode as the temporary file): a record of
/// it vouches for these bytes and no others.
pub fn replace_file_stamped(path: &Path, bytes: &[u8]) -> std::io::Result<FileStamp> {
    let written = std::cell::Cell::new(None);
    replace_file_with(path, bytes, true, &|file| {
        written.set(Some(FileStamp::of_file(file)?.id()));
        Ok(())
    })?;
    let stamp = FileStamp::of(path)?;
    if written.get() != Some(stamp.id()) {
        return Err(std::io::Error::other(format!(
            "{} was replaced by another file while it was written",
            path.display()
        )));
    }
    Ok(stamp)
}

/// The lower-case hex sha256 of a file, read in chunks.
fn sha256_file(path: &Path) -> std::io::Result<String> {
    use sha2::Digest;
    let mut hasher = sha2::Sha256::new();
    std::io::copy(&mut std::fs::File::open(path)?, &mut hasher)?;
    Ok(hex::encode(hasher.finalize()))
}

/// What [`verify_file_digest`] found.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum DigestCheck {
    /// The file holds the expected bytes.
    Matches,
    /// It does not; `actual` is the lower-case hex sha256 of what it holds.
    Differs {
        /// The digest found.
        actual: String,
    },
}

/// Checks that the file at `path` holds bytes whose sha256 is `sha256_hex`.
///
/// When `record` vouches for that digest with the file's current stamp the answer is yes
/// without reading the file; otherwise the file is hashed, and a match is written to `record`
/// so the next check is a `stat`. The stamp is taken before hashing, so a file changed while
/// it is read never gets a record that matches it afterwards. Failing to write the record only
/// costs a re-hash next time.
pub fn verify_file_digest(
    path: &Path,
    record: &Path,
    sha256_hex: &str,
) -> std::io::Result<DigestCheck> {
    let stamp = FileStamp::of(path);
    if let (Ok(stamp), Some(known)) = (&stamp, DigestRecord::read(record))
        && known.stamp == *stamp
        && known.sha256_hex.eq_ignore_ascii_case(sha256_hex)
    {
        return Ok(DigestCheck::Matches);
    }
    let actual = sha256_file(path)?;
    if !actual.eq_ignore_ascii_case(sha256_hex) {
        let _ = std::fs::remove_file(record);
        return Ok(DigestCheck::Differs { actual });
    }
    if let Ok(stamp) = stamp {
        // A record that cannot be written only means hashing again next time.
        let _ = DigestRecord {
            sha256_hex: actual,
            stamp,
        }
        .write(record);
    }
    Ok(DigestCheck::Matches)
}

#[cfg(all(test, unix))]
mod tests {
    use super::*;
    use std::io::Write;

    #[test]
    fn round_trips_through_text() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("f");
        std::fs::write(&path, b"abc").unwrap();
        let stamp = FileStamp::of(&path).unwrap();
        assert_eq!(stamp.len(), 3);
        assert_eq!(stamp.to_string().parse::<FileStamp>().unwrap(), stamp);
        assert!("len=3 dev=1".parse::<FileStamp>().is_err());
        assert!(
            "len=x dev=1 ino=2 mtime=3 ctime=4"
                .parse::<FileStamp>()
                .is_err()
        );
        assert!("colour=blue".parse::<FileStamp>().is_err());
    }

    #[test]
    fn any_write_or_replacement_changes_the_stamp() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("f");
        std::fs::write(&path, b"abc").unwrap();
        let before = FileStamp::of(&path).unwrap();
        assert_eq!(
            FileStamp::of(&path).unwrap(),
            before,
            "stat alone changes nothing"
        );

        // Same length, same mtime set back: the change time still moves.
        let mtime = std::fs::metadata(&path).unwrap().modified().unwrap();
        std::thread::sleep(std::time::Duration::from_millis(20));
        let mut f = std::fs::OpenOptions::new().write(true).open(&path).unwrap();
        f.write_all(b"xyz").unwrap();
        f.set_modified(mtime).unwrap();
        drop(f);
        let after = FileStamp::of(&path).unwrap();
        assert_eq!(after.len(), before.len());
        assert_ne!(after, before);

        // A different file renamed into place has another inode.
        let other = dir.path().join("g");
        std::fs::write(&other, b"abc").unwrap();
        std::fs::rename(&other, &path).unwrap();
        assert_ne!(FileStamp::of(&path).unwrap(), after);
    }

    #[test]
    fn digest_checks_trust_a_matching_record_and_nothing_else() {
        use sha2::Digest;
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("component.wasm");
        let record = dir.path().join("component.verified");
        std::fs::write(&path, b"original").unwrap();
        let good = hex::encode(sha2::Sha256::digest(b"original"));

        assert!(!record.exists());
        assert_eq!(
            verify_file_digest(&path, &record, &good).unwrap(),
            DigestCheck::Matches
        );
        let written = DigestRecord::read(&record).expect("a match is recorded");
        assert_eq!(written.sha256_hex, good);
        assert_eq!(written.stamp, FileStamp::of(&path).unwrap());

        // A record is only believed with the file's current stamp: one vouching for other bytes
        // under another file's stamp is ignored and the file is hashed.
        let elsewhere = dir.path().join("other");
        std::fs::write(&elsewhere, b"something else").unwrap();
        let forged = hex::encode(sha2::Sha256::digest(b"something else"));
        DigestRecord {
            sha256_hex: forged.clone(),
            stamp: FileStamp::of(&elsewhere).unwrap(),
        }
        .write(&record)
        .unwrap();
        assert_eq!(
            verify_file_digest(&path, &record, &forged).unwrap(),
            DigestCheck::Differs {
                actual: good.clone()
            }
        );
        assert!(!record.exists(), "a mismatch removes the record");

        // Changing the file in place is noticed even with the old record present.
        assert_eq!(
            verify_file_digest(&path, &record, &good).unwrap(),
            DigestCheck::Matches
        );
        std::thread::sleep(std::time::Duration::from_millis(20));
        std::fs::write(&path, b"tampered").unwrap();
        assert_eq!(
            verify_file_digest(&path, &record, &good).unwrap(),
            DigestCheck::Differs {
                actual: hex::encode(sha2::Sha256::digest(b"tampered"))
            }
        );

        // Garbage in the record file is no worse than no record.
        std::fs::write(&path, b"original").unwrap();
        std::fs::write(&record, "sha256=zz len=1").unwrap();
        assert_eq!(
            verify_file_digest(&path, &record, &good).unwrap(),
            DigestCheck::Matches
        );
        assert!(DigestRecord::read(&record).is_some());

        // A missing file is an error, not a mismatch.
        std::fs::remove_file(&path).unwrap();
        assert!(verify_file_digest(&path, &record, &good).is_err());
    }
}
