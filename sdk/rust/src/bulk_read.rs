//! Reading many whole files at once, on the host's threads (`cordon:tool/bulk-read`).
//!
//! A component has one thread, and every file read through `std::fs` costs several calls out
//! of the sandbox, one after another. A tool that reads thousands of files (a search, an
//! index) queues their paths in a [`BulkReader`] instead; the host reads them ahead on its own
//! threads while the tool works on the ones it has, and hands them back in the order queued.
//! It reaches exactly what the plugin's granted directories reach, and only regular files.
//!
//! ```no_run
//! use cordon_sdk::bulk_read::BulkReader;
//!
//! let mut reader = BulkReader::new(16 << 20);
//! for path in ["/data/a.txt", "/data/b.txt"] {
//!     reader.add(path).expect("two paths fit in the queue");
//! }
//! while reader.queued() > 0 {
//!     for file in reader.take(32) {
//!         match file.contents {
//!             Ok(bytes) => println!("{}: {} bytes", file.path, bytes.len()),
//!             Err(e) => println!("{}: {e}", file.path),
//!         }
//!     }
//! }
//! ```
//!
//! A search can go further: a [sifting](BulkReader::sifting) reader is given byte strings
//! ("needles") of which every match must contain one, and the host looks for them in each file
//! as it reads it, with native code on its own threads. [`take_sifted`](BulkReader::take_sifted)
//! then hands over only the files that contain one (or begin with a byte-order mark); of the
//! others it says only how large they are and where their first NUL byte is, which is all a
//! text search needs to count them as searched or binary.
//!
//! Compiled natively (a plugin's unit tests) the files are read with `std::fs` when taken.

use std::fmt;

/// Why one queued file was not read.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum ReadError {
    /// The path is not inside a granted directory, or not absolute, or has `..` in it.
    NotGranted,
    /// Nothing exists at the path.
    NotFound,
    /// It is a directory, device, FIFO or socket, not a regular file.
    NotAFile,
    /// It is larger than the reader's size limit; the size in bytes.
    TooLarge(u64),
    /// Anything else, with the system's message.
    Other(String),
}

impl fmt::Display for ReadError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            ReadError::NotGranted => f.write_str("not inside a granted directory"),
            ReadError::NotFound => f.write_str("not found"),
            ReadError::NotAFile => f.write_str("not a regular file"),
            ReadError::TooLarge(size) => write!(f, "too large to read whole ({size} bytes)"),
            ReadError::Other(message) => f.write_str(message),
        }
    }
}

impl std::error::Error for ReadError {}

/// Why [`BulkReader::add`] did not queue a path.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum AddError {
    /// 4096 paths (or 1 MiB of paths) are queued and not yet taken, over all readers of the
    /// call: [`take`](BulkReader::take) some first.
    QueueFull,
    /// The path is longer than 4096 bytes, longer than any path a file can have.
    PathTooLong,
}

impl fmt::Display for AddError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            AddError::QueueFull => "the read queue is full; take files first",
            AddError::PathTooLong => "the path is longer than 4096 bytes",
        })
    }
}

impl std::error::Error for AddError {}

/// One queued file, read or not.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct File {
    /// The path as it was queued.
    pub path: String,
    /// The whole contents, or why they were not read.
    pub contents: Result<Vec<u8>, ReadError>,
}

/// A file as [`BulkReader::take_sifted`] hands it over.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Sifted {
    /// The whole contents: the file contains a needle, begins with a Unicode byte-order mark
    /// (UTF-8, UTF-16 LE or BE), or the reader has no needles.
    Whole(Vec<u8>),
    /// The file contains none of the needles.
    PassedOver {
        /// Its size in bytes when it was read.
        size: u64,
        /// The offset of its first NUL byte, if any.
        first_nul: Option<u64>,
    },
}

/// One file taken with [`BulkReader::take_sifted`], or why it was not read.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SiftedFile {
    /// The path as it was queued.
    pub path: String,
    /// What was read.
    pub contents: Result<Sifted, ReadError>,
}

/// Paths queued for reading; see the [module](self) documentation. A call may hold at most 16
/// readers at once.
pub struct BulkReader {
    #[cfg(target_arch = "wasm32")]
    host: crate::bindings::cordon::tool::bulk_read::Reader,
    #[cfg(not(target_arch = "wasm32"))]
    pending: std::collections::VecDeque<String>,
    #[cfg(not(target_arch = "wasm32"))]
    max_size: u64,
    #[cfg(not(target_arch = "wasm32"))]
    needles: Vec<Vec<u8>>,
}

impl BulkReader {
    /// A reader for files of at most `max_size` bytes (larger ones come back as
    /// [`ReadError::TooLarge`]; the host also caps this at the call's memory limit).
    pub fn new(max_size: u64) -> BulkReader {
        BulkReader {
            #[cfg(target_arch = "wasm32")]
            host: crate::bindings::cordon::tool::bulk_read::Reader::new(max_size),
            #[cfg(not(target_arch = "wasm32"))]
            pending: Default::default(),
            #[cfg(not(target_arch = "wasm32"))]
            max_size,
            #[cfg(not(target_arch = "wasm32"))]
            needles: Vec::new(),
        }
    }

    /// A reader like [`new`](Self::new) whose [`take_sifted`](Self::take_sifted) hands over
    /// only the files containing at least one of `needles` (see the [module](self)
    /// documentation): at most 1024 needles of 1 to 1024 bytes, 64 KiB in all. No needles: every
    /// file whole. The error says what is wrong with the needles.
    pub fn sifting(max_size: u64, needles: &[Vec<u8>]) -> Result<BulkReader, String> {
        #[cfg(target_arch = "wasm32")]
        {
            use crate::bindings::cordon::tool::bulk_read::Reader;
            let lengths: Vec<u32> = needles
                .iter()
                .map(|n| u32::try_from(n.len()).unwrap_or(u32::MAX))
                .collect();
            Ok(BulkReader {
                host: Reader::sifting(max_size, &needles.concat(), &lengths)?,
            })
        }
        #[cfg(not(target_arch = "wasm32"))]
        {
            check_needles(needles)?;
            Ok(BulkReader {
                needles: needles.to_vec(),
                ..BulkReader::new(max_size)
            })
        }
    }

    /// Queues `path` (a guest path such as `/data/notes.txt`).
    pub fn add(&mut self, path: &str) -> Result<(), AddError> {
        #[cfg(target_arch = "wasm32")]
        {
            use crate::bindings::cordon::tool::bulk_read::AddError as Wit;
            self.host.add(path).map_err(|e| match e {
                Wit::QueueFull => AddError::QueueFull,
                Wit::PathTooLong => AddError::PathTooLong,
            })
        }
        #[cfg(not(target_arch = "wasm32"))]
        {
            if path.len() > 4096 {
                return Err(AddError::PathTooLong);
            }
            if self.pending.len() >= 4096 {
                return Err(AddError::QueueFull);
            }
            self.pending.push_back(path.to_owned());
            Ok(())
        }
    }

    /// How many queued files have not been taken yet.
    pub fn queued(&self) -> usize {
        #[cfg(target_arch = "wasm32")]
        {
            self.host.queued() as usize
        }
        #[cfg(not(target_arch = "wasm32"))]
        {
            self.pending.len()
        }
    }

    /// Up to `max` of the next queued files, in the order they were queued, waiting until they
    /// are read: fewer when fewer are queued or when their contents would pass 8 MiB (a file
    /// larger than that comes alone). Empty only when nothing is queued.
    pub fn take(&mut self, max: usize) -> Vec<File> {
        let max = u32::try_from(max).unwrap_or(u32::MAX);
        #[cfg(target_arch = "wasm32")]
        {
            self.host
                .take(max)
                .into_iter()
                .map(|file| File {
                    path: file.path,
                    contents: file.contents.map_err(read_error),
                })
                .collect()
        }
        #[cfg(not(target_arch = "wasm32"))]
        {
            // The host's rule: at most 64 files and 8 MiB of contents, a larger file alone.
            let mut files: Vec<File> = Vec::new();
            let mut bytes = 0u64;
            while files.len() < (max as usize).min(64)
                && let Some(path) = self.pending.front()
            {
                // The size decides before the file is read, so a file left for the next take
                // is read only then.
                let checked = size_native(path, self.max_size);
                let size = *checked.as_ref().unwrap_or(&0);
                if !files.is_empty() && (size > BATCH_BYTES || bytes + size > BATCH_BYTES) {
                    break;
                }
                bytes += size;
                let path = self.pending.pop_front().expect("front checked");
                let contents = checked.and_then(|_| std::fs::read(&path).map_err(native_error));
                files.push(File { path, contents });
                if size > BATCH_BYTES {
                    break;
                }
            }
            files
        }
    }
}

impl BulkReader {
    /// Like [`take`](Self::take), but a file with none of a sifting reader's needles comes as
    /// [`Sifted::PassedOver`], without its contents.
    pub fn take_sifted(&mut self, max: usize) -> Vec<SiftedFile> {
        #[cfg(target_arch = "wasm32")]
        {
            use crate::bindings::cordon::tool::bulk_read::Sifted as Wit;
            let max = u32::try_from(max).unwrap_or(u32::MAX);
            self.host
                .take_sifted(max)
                .into_iter()
                .map(|file| SiftedFile {
                    path: file.path,
                    contents: file
                        .contents
                        .map(|sifted| match sifted {
                            Wit::Whole(bytes) => Sifted::Whole(bytes),
                            Wit::PassedOver(p) => Sifted::PassedOver {
                                size: p.size,
                                first_nul: p.first_nul,
                            },
                        })
                        .map_err(read_error),
                })
                .collect()
        }
        #[cfg(not(target_arch = "wasm32"))]
        {
            // The host's batches may be larger (files passed over hand over no bytes); the
            // order and the contents are the same.
            self.take(max)
                .into_iter()
                .map(|file| SiftedFile {
                    contents: file.contents.map(|bytes| self.sift_native(bytes)),
                    path: file.path,
                })
                .collect()
        }
    }

    #[cfg(not(target_arch = "wasm32"))]
    fn sift_native(&self, bytes: Vec<u8>) -> Sifted {
        let marked = [&[0xEF, 0xBB, 0xBF][..], &[0xFF, 0xFE], &[0xFE, 0xFF]]
            .iter()
            .any(|bom| bytes.starts_with(bom));
        let contains = |needle: &Vec<u8>| bytes.windows(needle.len()).any(|w| w == needle);
        if self.needles.is_empty() || marked || self.needles.iter().any(contains) {
            return Sifted::Whole(bytes);
        }
        Sifted::PassedOver {
            size: bytes.len() as u64,
            first_nul: bytes.iter().position(|&b| b == 0).map(|at| at as u64),
        }
    }
}

/// The host's rules for needles, checked in the host's order with its messages.
#[cfg(not(target_arch = "wasm32"))]
fn check_needles(needles: &[Vec<u8>]) -> Result<(), String> {
    if needles.len() > 1024 {
        return Err(format!(
            "{} needles were given; a sifting reader takes at most 1024: pass fewer, shorter \
             ones (any one of which a match must contain), or none to take every file whole",
            needles.len()
        ));
    }
    for (i, needle) in needles.iter().enumerate() {
        if needle.is_empty() {
            return Err(format!(
                "needle {i} is empty, and every file contains the empty string: pass no \
                 needles to take every file whole"
            ));
        }
        if needle.len() > 1024 {
            return Err(format!(
                "needle {i} is {} bytes; a needle may have at most 1024 (a prefix of it is a \
                 needle too)",
                needle.len()
            ));
        }
    }
    let all: usize = needles.iter().map(Vec::len).sum();
    if all > 64 << 10 {
        return Err(format!(
            "the needles have {all} bytes in all; at most 65536 are allowed: pass fewer or \
             shorter ones"
        ));
    }
    Ok(())
}

#[cfg(target_arch = "wasm32")]
fn read_error(e: crate::bindings::cordon::tool::bulk_read::ReadError) -> ReadError {
    use crate::bindings::cordon::tool::bulk_read::ReadError as Wit;
    match e {
        Wit::NotGranted => ReadError::NotGranted,
        Wit::NotFound => ReadError::NotFound,
        Wit::NotAFile => ReadError::NotAFile,
        Wit::TooLarge(size) => ReadError::TooLarge(size),
        Wit::Other(message) => ReadError::Other(message),
    }
}

/// Most contents one `take` hands over, unless a single file is larger.
#[cfg(not(target_arch = "wasm32"))]
const BATCH_BYTES: u64 = 8 << 20;

/// The size of the regular file at `path` if it may be read whole, or why not.
#[cfg(not(target_arch = "wasm32"))]
fn size_native(path: &str, max_size: u64) -> Result<u64, ReadError> {
    let metadata = std::fs::metadata(path).map_err(native_error)?;
    if !metadata.is_file() {
        return Err(ReadError::NotAFile);
    }
    if metadata.len() > max_size {
        return Err(ReadError::TooLarge(metadata.len()));
    }
    Ok(metadata.len())
}

#[cfg(not(target_arch = "wasm32"))]
fn native_error(e: std::io::Error) -> ReadError {
    match e.kind() {
        std::io::ErrorKind::NotFound => ReadError::NotFound,
        _ => ReadError::Other(e.to_string()),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn files_come_back_in_the_order_queued_with_what_went_wrong() {
        let dir = std::env::temp_dir().join(format!("cordon-sdk-bulk-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        std::fs::write(dir.join("a"), "alpha").unwrap();
        std::fs::write(dir.join("big"), "x".repeat(100)).unwrap();
        let path = |name: &str| dir.join(name).to_str().unwrap().to_owned();
        let mut reader = BulkReader::new(10);
        for name in ["a", "missing", "big", ""] {
            reader.add(&path(name)).unwrap();
        }
        assert_eq!(reader.add(&"x".repeat(4097)), Err(AddError::PathTooLong));
        assert_eq!(reader.queued(), 4);
        let first = reader.take(1);
        assert_eq!(first[0].contents, Ok(b"alpha".to_vec()));
        let rest: Vec<_> = reader.take(10).into_iter().map(|f| f.contents).collect();
        assert_eq!(
            rest,
            [
                Err(ReadError::NotFound),
                Err(ReadError::TooLarge(100)),
                Err(ReadError::NotAFile)
            ]
        );
        assert!(reader.take(10).is_empty());
        std::fs::remove_dir_all(&dir).unwrap();
    }

    #[test]
    fn a_sifting_reader_passes_over_files_without_a_needle() {
        let dir = std::env::temp_dir().join(format!("cordon-sdk-sift-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let files: [(&str, &[u8]); 4] = [
            ("hit", b"one needle here"),
            ("miss", b"nothing\0here"),
            ("marked", b"\xEF\xBB\xBFnothing"),
            ("empty", b""),
        ];
        for (name, body) in files {
            std::fs::write(dir.join(name), body).unwrap();
        }
        let mut reader = BulkReader::sifting(1 << 20, &[b"needle".to_vec()]).unwrap();
        for (name, _) in files {
            reader.add(dir.join(name).to_str().unwrap()).unwrap();
        }
        let got: Vec<_> = reader
            .take_sifted(10)
            .into_iter()
            .map(|f| f.contents)
            .collect();
        assert_eq!(
            got,
            [
                Ok(Sifted::Whole(b"one needle here".to_vec())),
                Ok(Sifted::PassedOver {
                    size: 12,
                    first_nul: Some(7)
                }),
                Ok(Sifted::Whole(b"\xEF\xBB\xBFnothing".to_vec())),
                Ok(Sifted::PassedOver {
                    size: 0,
                    first_nul: None
                }),
            ]
        );
        let empty = BulkReader::sifting(1, &[Vec::new()]).err().unwrap();
        assert!(empty.contains("needle 0 is empty"), "{empty}");
        std::fs::remove_dir_all(&dir).unwrap();
    }
}
