//! A model server's event stream handed to the SSE parser in whole lines, within bounds.
//!
//! The SSE parser (`eventsource-stream`) parses its buffer from the start each time a piece
//! arrives, so a long line sent in small pieces costs time quadratic in its length (a 50 KB
//! line in 17-byte pieces took 5 s). Handing it only whole lines makes each byte parsed once.
//! And a server could send a line, or an answer, that never ends: both are bounded.

use std::fmt;

use futures::{Stream, StreamExt};

/// The longest line taken: one chunk of a chat completion stream is far smaller.
pub const MAX_LINE: usize = 8 << 20;

/// The most bytes taken in one streamed answer.
pub const MAX_STREAM: usize = 256 << 20;

/// Why the stream ended early.
#[derive(Debug)]
pub enum Cut<E> {
    /// Reading failed.
    Transport(E),
    /// A line grew past [`MAX_LINE`] (or `max_line`).
    LineTooLong(usize),
    /// The answer grew past [`MAX_STREAM`] (or `max_stream`).
    TooMuch(usize),
}

impl<E: fmt::Display> fmt::Display for Cut<E> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Cut::Transport(e) => write!(f, "{e}"),
            Cut::LineTooLong(max) => write!(
                f,
                "it sent a line longer than {max} bytes, which no chat completion chunk is"
            ),
            Cut::TooMuch(max) => write!(f, "it sent more than {max} bytes for one answer"),
        }
    }
}

struct Reading<S> {
    inner: S,
    partial: Vec<u8>,
    total: usize,
    done: bool,
}

/// `bytes` as pieces that each end at a line end (`\n` or `\r`), but the last; a line longer
/// than `max_line` or more than `max_stream` bytes in all ends the stream with an error.
pub fn whole_lines<S, B, E>(
    bytes: S,
    max_line: usize,
    max_stream: usize,
) -> impl Stream<Item = Result<Vec<u8>, Cut<E>>> + Unpin
where
    S: Stream<Item = Result<B, E>> + Unpin,
    B: AsRef<[u8]>,
{
    let reading = Reading {
        inner: bytes,
        partial: Vec::new(),
        total: 0,
        done: false,
    };
    Box::pin(futures::stream::unfold(reading, move |mut r| async move {
        loop {
            if r.done {
                return None;
            }
            let piece = match r.inner.next().await {
                Some(Ok(piece)) => piece,
                Some(Err(e)) => {
                    r.done = true;
                    return Some((Err(Cut::Transport(e)), r));
                }
                None => {
                    r.done = true;
                    if r.partial.is_empty() {
                        return None;
                    }
                    let rest = std::mem::take(&mut r.partial);
                    return Some((Ok(rest), r));
                }
            };
            let piece = piece.as_ref();
            r.total += piece.len();
            if r.total > max_stream {
                r.done = true;
                return Some((Err(Cut::TooMuch(max_stream)), r));
            }
            match piece.iter().rposition(|b| matches!(b, b'\n' | b'\r')) {
                Some(end) => {
                    let mut whole = std::mem::take(&mut r.partial);
                    whole.extend_from_slice(&piece[..=end]);
                    r.partial.extend_from_slice(&piece[end + 1..]);
                    return Some((Ok(whole), r));
                }
                None => {
                    r.partial.extend_from_slice(piece);
                    if r.partial.len() > max_line {
                        r.done = true;
                        return Some((Err(Cut::LineTooLong(max_line)), r));
                    }
                }
            }
        }
    }))
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::convert::Infallible;

    fn read(pieces: &[&[u8]], max_line: usize, max_stream: usize) -> Vec<Result<Vec<u8>, String>> {
        let stream = futures::stream::iter(
            pieces
                .iter()
                .map(|p| Ok::<_, Infallible>(p.to_vec()))
                .collect::<Vec<_>>(),
        );
        futures::executor::block_on(
            whole_lines(stream, max_line, max_stream)
                .map(|r| r.map_err(|e| e.to_string()))
                .collect(),
        )
    }

    #[test]
    fn pieces_end_at_line_ends_and_nothing_is_lost() {
        let got = read(
            &[b"data: {\"a\"", b":1}\r", b"\n\ndata: x", b"y\n", b"tail"],
            64,
            1024,
        );
        let got: Vec<Vec<u8>> = got.into_iter().map(Result::unwrap).collect();
        assert_eq!(
            got,
            [
                b"data: {\"a\":1}\r".to_vec(),
                b"\n\n".to_vec(),
                b"data: xy\n".to_vec(),
                b"tail".to_vec()
            ]
        );
    }

    #[test]
    fn a_line_or_an_answer_past_its_bound_ends_the_stream_with_an_error() {
        let long = read(&[b"data: ", &[b'6'; 40], &[b'6'; 40]], 64, 1024);
        assert_eq!(long.len(), 1);
        assert!(
            long[0]
                .as_ref()
                .unwrap_err()
                .contains("longer than 64 bytes")
        );
        let much = read(&[&b"data: 1\n"[..]; 200], 64, 1024);
        assert!(
            much.last()
                .unwrap()
                .as_ref()
                .unwrap_err()
                .contains("more than 1024 bytes")
        );
        assert_eq!(much.len(), 1024 / 8 + 1);
    }
}
