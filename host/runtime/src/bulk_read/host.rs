//! The `cordon:tool/bulk-read` host functions: creating readers within the per-call caps,
//! queueing paths and taking files.

use wasmtime::component::Resource;

use super::paths::read_file;
use super::queue::{Reader, Taken};
use super::sieve::Sieve;
use crate::bindings::cordon::tool::bulk_read::{self, AddError, File, Sifted, SiftedFile};
use crate::caps::{
    MAX_BULK_READ_PATH, MAX_BULK_READ_QUEUED_PATH_BYTES, MAX_BULK_READ_QUEUED_PATHS,
    MAX_BULK_READERS_PER_CALL,
};
use crate::sandbox::HostState;

impl bulk_read::Host for HostState {}

impl HostState {
    fn push_reader(
        &mut self,
        max_size: u64,
        sieve: Option<Sieve>,
    ) -> wasmtime::Result<Resource<Reader>> {
        if self.fs.bulk_read.readers >= MAX_BULK_READERS_PER_CALL {
            wasmtime::bail!(
                "the plugin holds {MAX_BULK_READERS_PER_CALL} bulk-read readers at once, the most one call \
                 may hold; it must drop one before creating another"
            );
        }
        let reader = Reader::new(self, max_size, sieve)?;
        let reader = self.table.push(reader)?;
        self.fs.bulk_read.readers += 1;
        Ok(reader)
    }

    async fn take_files(
        &mut self,
        reader: Resource<Reader>,
        max: u32,
        sifted: bool,
    ) -> wasmtime::Result<Vec<Taken>> {
        let deadline = self.budget.deadline;
        let files = self
            .table
            .get_mut(&reader)?
            .take(max, deadline, sifted)
            .await;
        self.fs.bulk_read.paths -= files.len() as u64;
        self.fs.bulk_read.path_bytes -= files.iter().map(|f| f.path().len() as u64).sum::<u64>();
        Ok(files)
    }
}

impl bulk_read::HostReader for HostState {
    fn new(&mut self, max_size: u64) -> wasmtime::Result<Resource<Reader>> {
        self.push_reader(max_size, None)
    }

    fn sifting(
        &mut self,
        max_size: u64,
        needles: Vec<u8>,
        lengths: Vec<u32>,
    ) -> wasmtime::Result<Result<Resource<Reader>, String>> {
        match Sieve::new(&needles, &lengths) {
            Ok(sieve) => Ok(Ok(self.push_reader(max_size, sieve)?)),
            Err(why) => Ok(Err(why)),
        }
    }

    fn add(
        &mut self,
        reader: Resource<Reader>,
        path: String,
    ) -> wasmtime::Result<Result<(), AddError>> {
        if path.len() > MAX_BULK_READ_PATH {
            return Ok(Err(AddError::PathTooLong));
        }
        let budget = &mut self.fs.bulk_read;
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

    fn queued(&mut self, reader: Resource<Reader>) -> wasmtime::Result<u32> {
        let reader = self.table.get(&reader)?;
        Ok((reader.added - reader.taken) as u32)
    }

    async fn take(&mut self, reader: Resource<Reader>, max: u32) -> wasmtime::Result<Vec<File>> {
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

    async fn take_sifted(
        &mut self,
        reader: Resource<Reader>,
        max: u32,
    ) -> wasmtime::Result<Vec<SiftedFile>> {
        let files = self.take_files(reader, max, true).await?;
        Ok(files
            .into_iter()
            .map(|taken| match taken {
                Taken::Whole(path, contents) => SiftedFile {
                    path,
                    contents: contents.map(Sifted::Whole),
                },
                Taken::PassedOver(path, passed_over) => SiftedFile {
                    path,
                    contents: Ok(Sifted::PassedOver(passed_over)),
                },
            })
            .collect())
    }

    fn drop(&mut self, reader: Resource<Reader>) -> wasmtime::Result<()> {
        let reader = self.table.delete(reader)?;
        self.fs.bulk_read.readers -= 1;
        self.fs.bulk_read.paths -= reader.added - reader.taken;
        self.fs.bulk_read.path_bytes -= reader.queued_path_bytes;
        Ok(())
    }
}
