//! The `cordon:tool/bulk-read` host functions as the bindings declare them, linked for any
//! store data that is a [`BulkReadView`] as wasmtime-wasi links its interfaces: the functions
//! are implemented on the borrows the view lends out ([`BulkReadParts`], through the
//! [`HasData`] type [`BulkRead`]), each the bulk_read call of the same name with its values
//! turned into the WIT types. Kept out of `bulk_read`, which the bindings name (its `Reader` is
//! the `reader` resource), so that bulk_read does not depend on the bindings in turn; only the
//! engine uses this module, to link it.

use wasmtime::component::{HasData, Linker, Resource};

use crate::bindings::cordon::tool::bulk_read::{
    self as wit, AddError, File, PassedOver, ReadError, Sifted, SiftedFile,
};
use crate::bulk_read::{self, BulkReadParts, BulkReadView, Reader, Taken};

/// Links `cordon:tool/bulk-read` into `linker`, its functions running on what
/// [`BulkReadView::bulk_read`] lends out.
pub(crate) fn add_to_linker<T: BulkReadView>(linker: &mut Linker<T>) -> wasmtime::Result<()> {
    wit::add_to_linker::<T, BulkRead>(linker, T::bulk_read)
}

/// The [`HasData`] whose data, in a call, is [`BulkReadParts`].
pub(crate) struct BulkRead;

impl HasData for BulkRead {
    type Data<'a> = BulkReadParts<'a>;
}

impl wit::Host for BulkReadParts<'_> {}

impl wit::HostReader for BulkReadParts<'_> {
    fn new(&mut self, max_size: u64) -> wasmtime::Result<Resource<Reader>> {
        BulkReadParts::new_reader(self, max_size)
    }

    fn sifting(
        &mut self,
        max_size: u64,
        needles: Vec<u8>,
        lengths: Vec<u32>,
    ) -> wasmtime::Result<Result<Resource<Reader>, String>> {
        BulkReadParts::sifting(self, max_size, &needles, &lengths)
    }

    fn add(
        &mut self,
        reader: Resource<Reader>,
        path: String,
    ) -> wasmtime::Result<Result<(), AddError>> {
        Ok(BulkReadParts::add(self, reader, path)?.map_err(add_error))
    }

    fn queued(&mut self, reader: Resource<Reader>) -> wasmtime::Result<u32> {
        BulkReadParts::queued(self, reader)
    }

    async fn take(&mut self, reader: Resource<Reader>, max: u32) -> wasmtime::Result<Vec<File>> {
        let files = BulkReadParts::take(self, reader, max).await?;
        Ok(files
            .into_iter()
            .map(|f| File {
                path: f.path,
                contents: f.contents.map_err(read_error),
            })
            .collect())
    }

    async fn take_sifted(
        &mut self,
        reader: Resource<Reader>,
        max: u32,
    ) -> wasmtime::Result<Vec<SiftedFile>> {
        let files = BulkReadParts::take_sifted(self, reader, max).await?;
        Ok(files
            .into_iter()
            .map(|taken| match taken {
                Taken::Whole(path, contents) => SiftedFile {
                    path,
                    contents: contents.map(Sifted::Whole).map_err(read_error),
                },
                Taken::PassedOver(path, passed_over) => SiftedFile {
                    path,
                    contents: Ok(Sifted::PassedOver(PassedOver {
                        size: passed_over.size,
                        first_nul: passed_over.first_nul,
                    })),
                },
            })
            .collect())
    }

    fn drop(&mut self, reader: Resource<Reader>) -> wasmtime::Result<()> {
        BulkReadParts::drop_reader(self, reader)
    }
}

fn read_error(e: bulk_read::ReadError) -> ReadError {
    match e {
        bulk_read::ReadError::NotGranted => ReadError::NotGranted,
        bulk_read::ReadError::NotFound => ReadError::NotFound,
        bulk_read::ReadError::NotAFile => ReadError::NotAFile,
        bulk_read::ReadError::TooLarge(size) => ReadError::TooLarge(size),
        bulk_read::ReadError::Other(message) => ReadError::Other(message),
    }
}

fn add_error(e: bulk_read::AddError) -> AddError {
    match e {
        bulk_read::AddError::QueueFull => AddError::QueueFull,
        bulk_read::AddError::PathTooLong => AddError::PathTooLong,
    }
}
