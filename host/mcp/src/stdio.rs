//! MCP over this process's stdin and stdout, one JSON-RPC message per line. Unlike the SDK's
//! own stdio transport, a line that is not JSON, or not a JSON-RPC message, is answered with
//! the JSON-RPC error for it (`-32700`, `-32600`) instead of being dropped without a word, and
//! a line longer than [`MAX_LINE`] is refused without being held in memory. Either way the
//! server goes on reading: one bad line never ends the conversation.

use std::os::fd::AsFd;
use std::os::unix::fs::MetadataExt;

use futures::StreamExt;
use rmcp::RoleServer;
use rmcp::service::{RxJsonRpcMessage, TxJsonRpcMessage};
use rmcp::transport::Transport;
use serde_json::{Value, json};
use tokio::io::{AsyncRead, AsyncWrite, AsyncWriteExt};
use tokio::net::unix::pipe;
use tokio::sync::mpsc;
use tokio_util::bytes::BytesMut;
use tokio_util::codec::{Decoder, FramedRead, LinesCodec, LinesCodecError};

/// The longest message taken: arguments beyond any tool's limit are refused anyway.
pub const MAX_LINE: usize = 16 << 20;

/// Messages waiting to be written; a client that stops reading slows the server down rather
/// than growing its memory.
const OUTBOX: usize = 256;

/// The transport of `cordon mcp`.
pub struct StdioTransport {
    lines: FramedRead<Box<dyn AsyncRead + Send + Sync + Unpin>, Lines>,
    outbox: mpsc::Sender<String>,
}

/// One line the client sent, as [`Lines`] reads it.
#[derive(Debug, PartialEq)]
enum Line {
    /// A line of text.
    Text(String),
    /// A line longer than [`MAX_LINE`]; what was read of it is dropped, and so is the rest.
    TooLong,
    /// A line that is not UTF-8.
    NotText,
}

/// Lines of at most [`MAX_LINE`] bytes, where a line too long or not UTF-8 is an item, not an
/// error: `FramedRead` ends its stream after a decoder error, which would end the server.
struct Lines(LinesCodec);

impl Lines {
    fn new(max: usize) -> Self {
        Self(LinesCodec::new_with_max_length(max))
    }

    fn read(decoded: Result<Option<String>, LinesCodecError>) -> std::io::Result<Option<Line>> {
        match decoded {
            Ok(line) => Ok(line.map(Line::Text)),
            // The codec goes on discarding up to the end of the line.
            Err(LinesCodecError::MaxLineLengthExceeded) => Ok(Some(Line::TooLong)),
            // The codec's only error of its own: the line, taken off the buffer, is not
            // UTF-8. Reading stdin's own failures come to `FramedRead` as I/O errors, not
            // through `decode`.
            Err(LinesCodecError::Io(_)) => Ok(Some(Line::NotText)),
        }
    }
}

impl Decoder for Lines {
    type Item = Line;
    type Error = std::io::Error;

    fn decode(&mut self, buf: &mut BytesMut) -> std::io::Result<Option<Line>> {
        Self::read(self.0.decode(buf))
    }

    fn decode_eof(&mut self, buf: &mut BytesMut) -> std::io::Result<Option<Line>> {
        Self::read(self.0.decode_eof(buf))
    }
}

/// The fuzz targets' way in: `data` read as stdin would be, in pieces of the lengths its
/// first byte picks and lines of at most `max` bytes (its second byte, so that long lines are
/// tried without megabytes of input), each line read as a message.
#[cfg(feature = "fuzzing")]
pub fn read_lines(data: &[u8]) {
    let (cut, max, body) = match data {
        [cut, max, body @ ..] => (usize::from(*cut % 64) + 1, usize::from(*max) + 1, body),
        _ => return,
    };
    let mut lines = Lines::new(max);
    let mut buf = BytesMut::new();
    let read = |line: Line| match line {
        Line::Text(text) => {
            assert!(text.len() <= max && !text.contains('\n'));
            if let Err(refusal) = read_message(text.as_bytes()) {
                assert!(matches!(refusal.code, -32700 | -32600));
            }
        }
        Line::TooLong | Line::NotText => {}
    };
    for piece in body.chunks(cut) {
        buf.extend_from_slice(piece);
        while let Some(line) = lines.decode(&mut buf).expect("decoding never fails") {
            read(line);
        }
    }
    while let Some(line) = lines.decode_eof(&mut buf).expect("decoding never fails") {
        read(line);
    }
}

/// Stdin as the transport reads it. A pipe, which is how MCP clients start servers, is read
/// by the runtime's own event loop, so a message wakes the thread that handles it directly;
/// tokio's `stdin()` reads on a helper thread that must then wake it (a hand-off per message,
/// on a 2-core machine a good part of a no-op call's round trip). Anything else (a terminal, a
/// file) is read that way.
fn stdin_reader() -> Box<dyn AsyncRead + Send + Sync + Unpin> {
    let pipe = std::io::stdin()
        .as_fd()
        .try_clone_to_owned()
        .ok()
        .and_then(|fd| pipe::Receiver::from_owned_fd(fd).ok());
    match pipe {
        Some(pipe) => Box::new(pipe),
        None => Box::new(tokio::io::stdin()),
    }
}

/// Stdout as the transport writes it: a pipe directly from the runtime's thread, for the
/// reason [`stdin_reader`] gives; anything else through tokio's `stdout()`. Also that when
/// stderr is the same pipe (`2>&1`): writing a pipe this way makes it non-blocking, and a log
/// line written to a full non-blocking stderr would fail instead of waiting.
fn stdout_writer() -> Box<dyn AsyncWrite + Send + Unpin> {
    let same_as_stderr = match (
        std::fs::metadata("/proc/self/fd/1"),
        std::fs::metadata("/proc/self/fd/2"),
    ) {
        (Ok(out), Ok(err)) => out.dev() == err.dev() && out.ino() == err.ino(),
        _ => true,
    };
    let pipe = (!same_as_stderr)
        .then(|| std::io::stdout().as_fd().try_clone_to_owned().ok())
        .flatten()
        .and_then(|fd| pipe::Sender::from_owned_fd(fd).ok());
    match pipe {
        Some(pipe) => Box::new(pipe),
        None => Box::new(tokio::io::stdout()),
    }
}

/// Writing to stdout failed (the client went away).
#[derive(Debug, thiserror::Error)]
#[error("the MCP client stopped reading: {0}")]
pub struct StdoutClosed(String);

impl StdioTransport {
    /// Reads stdin and writes stdout (through a task that owns it).
    pub fn new() -> Self {
        Self::over(stdin_reader(), stdout_writer())
    }

    /// Reads `input` and writes `output` (through a task that owns it).
    fn over(
        input: Box<dyn AsyncRead + Send + Sync + Unpin>,
        mut stdout: Box<dyn AsyncWrite + Send + Unpin>,
    ) -> Self {
        let (outbox, mut rx) = mpsc::channel::<String>(OUTBOX);
        tokio::spawn(async move {
            while let Some(mut line) = rx.recv().await {
                line.push('\n');
                if stdout.write_all(line.as_bytes()).await.is_err() || stdout.flush().await.is_err()
                {
                    break;
                }
            }
        });
        Self {
            lines: FramedRead::new(input, Lines::new(MAX_LINE)),
            outbox,
        }
    }

    async fn answer(&self, refusal: Refusal) {
        let _ = self.outbox.send(refusal.to_response().to_string()).await;
    }
}

impl Default for StdioTransport {
    fn default() -> Self {
        Self::new()
    }
}

/// Why a message was refused, as the JSON-RPC error that answers it.
#[derive(Debug, Clone, PartialEq)]
pub struct Refusal {
    /// The request's id when one can be read, else `null`.
    pub id: Value,
    /// `-32700` (not JSON) or `-32600` (not a message this server takes).
    pub code: i64,
    /// What was wrong.
    pub message: String,
}

impl Refusal {
    /// The JSON-RPC error response.
    pub fn to_response(&self) -> Value {
        json!({"jsonrpc": "2.0", "id": self.id, "error": {"code": self.code, "message": self.message}})
    }
}

/// Reads one message a client sent (a stdio line, an HTTP body), or says, as JSON-RPC does,
/// why it is not one: not JSON (`-32700`), or JSON but no JSON-RPC 2.0 request, notification
/// or response (`-32600`, with the id when it has one). Both transports answer alike.
pub fn read_message(text: &[u8]) -> Result<RxJsonRpcMessage<RoleServer>, Refusal> {
    if let Ok(message) = serde_json::from_slice(text) {
        return Ok(message);
    }
    Err(match serde_json::from_slice::<Value>(text) {
        Err(e) => Refusal {
            id: Value::Null,
            code: -32700,
            message: format!("Parse error: the message is not JSON ({e})"),
        },
        Ok(value) => Refusal {
            id: match value.get("id") {
                Some(id @ (Value::String(_) | Value::Number(_))) => id.clone(),
                _ => Value::Null,
            },
            code: -32600,
            message: "Invalid Request: not a JSON-RPC 2.0 request, notification or response \
                      this server takes"
                .to_string(),
        },
    })
}

impl Transport<RoleServer> for StdioTransport {
    type Error = StdoutClosed;

    fn send(
        &mut self,
        item: TxJsonRpcMessage<RoleServer>,
    ) -> impl Future<Output = Result<(), Self::Error>> + Send + 'static {
        let outbox = self.outbox.clone();
        async move {
            let line = serde_json::to_string(&item).map_err(|e| StdoutClosed(e.to_string()))?;
            outbox
                .send(line)
                .await
                .map_err(|_| StdoutClosed("stdout is closed".to_string()))
        }
    }

    async fn receive(&mut self) -> Option<RxJsonRpcMessage<RoleServer>> {
        loop {
            match self.lines.next().await? {
                Ok(Line::Text(line)) => {
                    if line.trim().is_empty() {
                        continue;
                    }
                    match read_message(line.as_bytes()) {
                        Ok(message) => return Some(message),
                        Err(refusal) => self.answer(refusal).await,
                    }
                }
                Ok(Line::TooLong) => {
                    self.answer(Refusal {
                        id: Value::Null,
                        code: -32600,
                        message: format!(
                            "Invalid Request: the message is longer than {} MiB, the most `cordon \
                             mcp` takes; it was dropped",
                            MAX_LINE >> 20
                        ),
                    })
                    .await;
                }
                Ok(Line::NotText) => {
                    self.answer(Refusal {
                        id: Value::Null,
                        code: -32700,
                        message: "Parse error: the message is not UTF-8 text".to_string(),
                    })
                    .await;
                }
                Err(_) => return None,
            }
        }
    }

    async fn close(&mut self) -> Result<(), Self::Error> {
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use tokio::io::AsyncBufReadExt;

    /// A line over the limit is answered and dropped, and the next line is read: the server
    /// does not end (tokio-util's `FramedRead` ends its stream after a decoder error).
    #[tokio::test]
    async fn a_line_too_long_is_answered_and_the_next_one_read() {
        let (mut client, server_in) = tokio::io::duplex(1 << 16);
        let (server_out, client_out) = tokio::io::duplex(1 << 16);
        let mut transport = StdioTransport::over(Box::new(server_in), Box::new(server_out));
        let writing = tokio::spawn(async move {
            let mut long = vec![b'x'; MAX_LINE + (1 << 20)];
            long.push(b'\n');
            client.write_all(&long).await.unwrap();
            client.write_all(b"\xff\xfe\n").await.unwrap();
            client
                .write_all(b"{\"jsonrpc\":\"2.0\",\"id\":9,\"method\":\"ping\"}\n")
                .await
                .unwrap();
            client
        });
        let message = transport
            .receive()
            .await
            .expect("the call after the long line");
        let text = serde_json::to_value(&message).unwrap();
        assert_eq!((&text["id"], &text["method"]), (&json!(9), &json!("ping")));
        drop(transport);
        drop(writing.await.unwrap());
        let mut answers = tokio::io::BufReader::new(client_out).lines();
        let too_long: Value =
            serde_json::from_str(&answers.next_line().await.unwrap().unwrap()).unwrap();
        assert_eq!(too_long["error"]["code"], json!(-32600));
        let message = too_long["error"]["message"].as_str().unwrap();
        assert!(message.contains("16 MiB"), "{message}");
        let not_text: Value =
            serde_json::from_str(&answers.next_line().await.unwrap().unwrap()).unwrap();
        assert_eq!(not_text["error"]["code"], json!(-32700));
    }

    #[test]
    fn lines_that_are_not_messages_get_the_right_error() {
        let e = read_message(b"{not json").unwrap_err();
        assert_eq!((e.id, e.code), (Value::Null, -32700));
        let e = read_message(br#"{"jsonrpc":"2.0","id":7,"methd":"x"}"#).unwrap_err();
        assert_eq!((e.id, e.code), (json!(7), -32600));
        let e = read_message(b"[1,2]").unwrap_err();
        assert_eq!((e.id, e.code), (Value::Null, -32600));
        assert!(read_message(br#"{"jsonrpc":"2.0","id":1,"method":"ping"}"#).is_ok());
        assert_eq!(
            Refusal {
                id: json!(3),
                code: -32600,
                message: "m".into()
            }
            .to_response(),
            json!({"jsonrpc": "2.0", "id": 3, "error": {"code": -32600, "message": "m"}})
        );
    }
}
