//! What the `cordon:tool/bulk-read` functions do to one call: creating readers within the
//! per-call caps, queueing paths and taking files. `crate::bulk_read_bindings` hands each to the
//! guest as the WIT function of the same name.

use wasmtime::component::Resource;

use super::paths::read_file;
use super::queue::{Reader, Taken};
use super::sieve::Sieve;
use super::{AddError, BulkReadParts, File};
use crate::caps::{
    MAX_BULK_READ_PATH, MAX_BULK_READ_QUEUED_PATH_BYTES, MAX_BULK_READ_QUEUED_PATHS,
    MAX_BULK_READERS_PER_CALL,
};

impl BulkReadParts<'_> {
    fn push_reader(
        &mut self,
        max_size: u64,
        sieve: Option<Sieve>,
    ) -> wasmtime::Result<Resource<Reader>> {
        if self.budget.readers >= MAX_BULK_READERS_PER_CALL {
            wasmtime::bail!(
                "the plugin holds {MAX_BULK_READERS_PER_CALL} bulk-read readers at once, the most one call \
                 may hold; it must drop one before creating another"
            );
        }
        let reader = Reader::new(self, max_size, sieve)?;
        let reader = self.table.push(reader)?;
        self.budget.readers += 1;
        Ok(reader)
    }

    async fn take_files(
        &mut self,
        reader: Resource<Reader>,
        max: u32,
        sifted: bool,
    ) -> wasmtime::Result<Vec<Taken>> {
        let deadline = self.deadline;
        let files = self
            .table
            .get_mut(&reader)?
            .take(max, deadline, sifted)
            .await;
        self.budget.paths -= files.len() as u64;
        self.budget.path_bytes -= files.iter().map(|f| f.path().len() as u64).sum::<u64>();
        Ok(files)
    }

    /// `[constructor]reader`.
    pub(crate) fn new_reader(&mut self, max_size: u64) -> wasmtime::Result<Resource<Reader>> {
        self.push_reader(max_size, None)
    }

    /// `[static]reader.sifting`.
    pub(crate) fn sifting(
        &mut self,
        max_size: u64,
        needles: &[u8],
        lengths: &[u32],
    ) -> wasmtime::Result<Result<Resource<Reader>, String>> {
        match Sieve::new(needles, lengths) {
            Ok(sieve) => Ok(Ok(self.push_reader(max_size, sieve)?)),
            Err(why) => Ok(Err(why)),
        }
    }

    /// `[method]reader.add`.
    pub(crate) fn add(
        &mut self,
        reader: Resource<Reader>,
        path: String,
    ) -> wasmtime::Result<Result<(), AddError>> {
        if path.len() > MAX_BULK_READ_PATH {
            return Ok(Err(AddError::PathTooLong));
        }
        let budget = &mut self.budget;
        let len = path.len() as u64;
        if budget.paths >= MAX_BULK_READ_QUEUED_PATHS
            || budget.path_bytes + len > MAX_BULK_READ_QUEUED_PATH_BYTES
        {
            return Ok(Err(AddError::QueueFull));
        }
        self.table.get_mut(&reader)?.add(path);
        budget.paths += 1;
        budget.path_bytes += len;
        Ok(Ok(()))
    }

    /// `[method]reader.queued`.
    pub(crate) fn queued(&mut self, reader: Resource<Reader>) -> wasmtime::Result<u32> {
        let reader = self.table.get(&reader)?;
        Ok((reader.added - reader.taken) as u32)
    }

    /// `[method]reader.take`.
    pub(crate) async fn take(
        &mut self,
        reader: Resource<Reader>,
        max: u32,
    ) -> wasmtime::Result<Vec<File>> {
        let source = self.table.get(&reader)?.source.clone();
        let files = self.take_files(reader, max, false).await?;
        Ok(files
            .into_iter()
            .map(|taken| match taken {
                Taken::Whole(path, contents) => File { path, contents },
                // A plain take sifts nothing; were a file passed over, it is read again.
                Taken::PassedOver(path, _) => File {
                    contents: read_file(&source, &path),
                    path,
                },
            })
            .collect())
    }

    /// `[method]reader.take-sifted`: each file whole, or passed over.
    pub(crate) async fn take_sifted(
        &mut self,
        reader: Resource<Reader>,
        max: u32,
    ) -> wasmtime::Result<Vec<Taken>> {
        self.take_files(reader, max, true).await
    }

    /// Dropping a reader.
    pub(crate) fn drop_reader(&mut self, reader: Resource<Reader>) -> wasmtime::Result<()> {
        let reader = self.table.delete(reader)?;
        self.budget.readers -= 1;
        self.budget.paths -= reader.added - reader.taken;
        self.budget.path_bytes -= reader.queued_path_bytes;
        Ok(())
    }
}
