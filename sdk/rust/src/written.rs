//! Writing a large result as it is made (WIT 0.1.4, `cordon:tool/result-stream`), instead of
//! returning it whole: neither the plugin nor the host then holds the whole result in memory,
//! and the host can keep results up to the output limit (64 MiB by default), showing the
//! model a preview and letting it page through the rest.
//!
//! A [`JsonWriter`] is what a tool added with [`Plugin::written_tool`](crate::Plugin::written_tool)
//! writes its one JSON object into, with `serde_json::to_writer` or `write!`, piece by piece
//! (an array of rows one row at a time). It sends what it is given in pieces of
//! [`CHUNK_BYTES`]; when compiled natively (unit tests) it keeps everything instead, and the
//! tool's result is the whole document as one JSON piece, as the host would see it.

use std::io;
use std::marker::PhantomData;

/// How much a writer gathers before it hands a piece to the host: each hand-over is one call
/// into the host, so fewer, larger pieces cost less.
pub const CHUNK_BYTES: usize = 64 << 10;

/// What a written tool writes its result into: one JSON document of type `O` (the type only
/// gives the tool its output schema). Implements [`io::Write`]; the bytes must be UTF-8 JSON,
/// which `serde_json` writes.
pub struct JsonWriter<O> {
    buf: Vec<u8>,
    /// Everything written, natively (there is no host to hand it to).
    #[cfg(not(target_arch = "wasm32"))]
    kept: Vec<u8>,
    /// Why the host refused a piece (the output limit), once it did.
    refused: Option<String>,
    written: u64,
    shape: PhantomData<fn() -> O>,
}

impl<O> std::fmt::Debug for JsonWriter<O> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("JsonWriter")
            .field("written", &self.written)
            .field("refused", &self.refused)
            .finish()
    }
}

impl<O> JsonWriter<O> {
    pub(crate) fn new() -> Self {
        JsonWriter {
            buf: Vec::with_capacity(CHUNK_BYTES),
            #[cfg(not(target_arch = "wasm32"))]
            kept: Vec::new(),
            refused: None,
            written: 0,
            shape: PhantomData,
        }
    }

    /// Bytes written so far, handed over or not.
    pub fn written(&self) -> u64 {
        self.written + self.buf.len() as u64
    }

    /// Why the host refused what was written (the output limit was passed), once it did:
    /// stop writing and return; the call then fails with that reason.
    pub fn refused(&self) -> Option<&str> {
        self.refused.as_deref()
    }

    /// Hands over what is gathered, up to the last whole UTF-8 character.
    fn hand_over(&mut self) -> io::Result<()> {
        if let Some(why) = &self.refused {
            return Err(io::Error::other(why.clone()));
        }
        let whole = match std::str::from_utf8(&self.buf) {
            Ok(text) => text.len(),
            // An error that is not at the end is no partial character: bad bytes.
            Err(e) if e.error_len().is_some() => {
                return Err(io::Error::new(
                    io::ErrorKind::InvalidData,
                    "a written result must be UTF-8",
                ));
            }
            Err(e) => e.valid_up_to(),
        };
        if whole == 0 {
            return Ok(());
        }
        if let Err(why) = self.send(whole) {
            self.refused = Some(why.clone());
            return Err(io::Error::other(why));
        }
        self.written += whole as u64;
        self.buf.drain(..whole);
        Ok(())
    }

    /// Hands over the rest: the tool's result is complete.
    pub(crate) fn finish(mut self) -> Result<Vec<crate::Content>, crate::ToolError> {
        self.hand_over().map_err(|e| {
            crate::ToolError::Failed(format!("the result could not be written: {e}"))
        })?;
        if !self.buf.is_empty() {
            return Err(crate::ToolError::Failed(
                "the written result ends inside a UTF-8 character".to_owned(),
            ));
        }
        #[cfg(not(target_arch = "wasm32"))]
        {
            let text = String::from_utf8(std::mem::take(&mut self.kept))
                .map_err(|_| crate::ToolError::Failed("the written result is not UTF-8".into()))?;
            Ok(vec![crate::Content::Json(text)])
        }
        #[cfg(target_arch = "wasm32")]
        {
            // Nothing written at all still makes the tool's (empty, so failing) JSON piece.
            if self.written == 0 {
                use crate::bindings::cordon::tool::result_stream::{PieceKind, write};
                write(PieceKind::Json, "").map_err(crate::ToolError::Failed)?;
            }
            Ok(Vec::new())
        }
    }
}

impl<O> JsonWriter<O> {
    /// Hands the first `whole` bytes gathered (whole characters) to the host.
    #[cfg(target_arch = "wasm32")]
    fn send(&mut self, whole: usize) -> Result<(), String> {
        use crate::bindings::cordon::tool::result_stream::{PieceKind, write};
        let text = std::str::from_utf8(&self.buf[..whole]).map_err(|e| e.to_string())?;
        write(PieceKind::Json, text)
    }

    /// Keeps the first `whole` bytes gathered: natively there is no host to hand them to.
    #[cfg(not(target_arch = "wasm32"))]
    fn send(&mut self, whole: usize) -> Result<(), String> {
        self.kept.extend_from_slice(&self.buf[..whole]);
        Ok(())
    }
}

impl<O> io::Write for JsonWriter<O> {
    fn write(&mut self, bytes: &[u8]) -> io::Result<usize> {
        if let Some(why) = &self.refused {
            return Err(io::Error::other(why.clone()));
        }
        self.buf.extend_from_slice(bytes);
        if self.buf.len() >= CHUNK_BYTES {
            self.hand_over()?;
        }
        Ok(bytes.len())
    }

    fn flush(&mut self) -> io::Result<()> {
        self.hand_over()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::io::Write;

    #[test]
    fn pieces_split_only_between_characters() {
        let mut w: JsonWriter<()> = JsonWriter::new();
        let text = format!("\"{}\"", "é".repeat(CHUNK_BYTES));
        // Byte by byte: every hand-over must end on a character boundary.
        for b in text.as_bytes() {
            w.write_all(std::slice::from_ref(b)).unwrap();
        }
        assert_eq!(w.written(), text.len() as u64);
        let out = w.finish().unwrap();
        assert_eq!(out, vec![crate::Content::Json(text)]);
    }

    #[test]
    fn bytes_that_are_not_utf8_are_refused() {
        let mut w: JsonWriter<()> = JsonWriter::new();
        w.write_all(b"\"\xff\"").unwrap();
        assert!(w.flush().is_err());
    }
}
