//! MCP over this process's stdin and stdout, one JSON-RPC message per line. Unlike the SDK's
//! own stdio transport, a line that is not JSON, or not a JSON-RPC message, is answered with
//! the JSON-RPC error for it (`-32700`, `-32600`) instead of being dropped without a word, and
//! a line longer than [`MAX_LINE`] is refused without being held in memory.

use futures::StreamExt;
use rmcp::RoleServer;
use rmcp::service::{RxJsonRpcMessage, TxJsonRpcMessage};
use rmcp::transport::Transport;
use serde_json::{Value, json};
use tokio::io::AsyncWriteExt;
use tokio::sync::mpsc;
use tokio_util::codec::{FramedRead, LinesCodec, LinesCodecError};

/// The longest message taken: arguments beyond any tool's limit are refused anyway.
pub const MAX_LINE: usize = 16 << 20;

/// Messages waiting to be written; a client that stops reading slows the server down rather
/// than growing its memory.
const OUTBOX: usize = 256;

/// The transport of `cordon mcp`.
pub struct StdioTransport {
    lines: FramedRead<tokio::io::Stdin, LinesCodec>,
    outbox: mpsc::Sender<String>,
}

/// Writing to stdout failed (the client went away).
#[derive(Debug, thiserror::Error)]
#[error("the MCP client stopped reading: {0}")]
pub struct StdoutClosed(String);

impl StdioTransport {
    /// Reads stdin and writes stdout (through a task that owns it).
    pub fn new() -> Self {
        let (outbox, mut rx) = mpsc::channel::<String>(OUTBOX);
        tokio::spawn(async move {
            let mut stdout = tokio::io::stdout();
            while let Some(mut line) = rx.recv().await {
                line.push('\n');
                if stdout.write_all(line.as_bytes()).await.is_err() || stdout.flush().await.is_err()
                {
                    break;
                }
            }
        });
        Self {
            lines: FramedRead::new(
                tokio::io::stdin(),
                LinesCodec::new_with_max_length(MAX_LINE),
            ),
            outbox,
        }
    }

    async fn answer_error(&self, id: Value, code: i64, message: String) {
        let error =
            json!({"jsonrpc": "2.0", "id": id, "error": {"code": code, "message": message}});
        let _ = self.outbox.send(error.to_string()).await;
    }
}

impl Default for StdioTransport {
    fn default() -> Self {
        Self::new()
    }
}

/// The JSON-RPC error for a line that is not a message this server takes: its code, message,
/// and the request id when one can be read.
pub fn refusal(line: &str) -> (Value, i64, String) {
    match serde_json::from_str::<Value>(line) {
        Err(e) => (
            Value::Null,
            -32700,
            format!("Parse error: the message is not JSON ({e})"),
        ),
        Ok(value) => {
            let id = match value.get("id") {
                Some(id @ (Value::String(_) | Value::Number(_))) => id.clone(),
                _ => Value::Null,
            };
            (
                id,
                -32600,
                "Invalid Request: not a JSON-RPC 2.0 request, notification or response this \
                 server takes"
                    .to_string(),
            )
        }
    }
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
                Ok(line) => {
                    if line.trim().is_empty() {
                        continue;
                    }
                    match serde_json::from_str::<RxJsonRpcMessage<RoleServer>>(&line) {
                        Ok(message) => return Some(message),
                        Err(_) => {
                            let (id, code, message) = refusal(&line);
                            self.answer_error(id, code, message).await;
                        }
                    }
                }
                Err(LinesCodecError::MaxLineLengthExceeded) => {
                    let message = format!(
                        "Invalid Request: the message is longer than {} MiB",
                        MAX_LINE >> 20
                    );
                    self.answer_error(Value::Null, -32600, message).await;
                }
                Err(LinesCodecError::Io(_)) => return None,
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

    #[test]
    fn lines_that_are_not_messages_get_the_right_error() {
        assert_eq!(refusal("{not json").1, -32700);
        assert_eq!(refusal("{not json").0, Value::Null);
        let (id, code, _) = refusal(r#"{"jsonrpc":"2.0","id":7,"methd":"x"}"#);
        assert_eq!((id, code), (json!(7), -32600));
        let (id, code, _) = refusal(r#"[1,2]"#);
        assert_eq!((id, code), (Value::Null, -32600));
    }
}
