//! Entry points for the fuzz targets in `tests/fuzz`: what a model server sends, read by the
//! same code the client reads it with. Built only with the `fuzzing` feature.

use tokio_util::sync::CancellationToken;

use crate::llm::{LlmError, parse_full, read_events};

/// A chat completion stream: `data` is what the server sent, cut into the pieces it came in
/// at the lengths its first byte picks, so a frame, a line or a UTF-8 character split across
/// pieces is tried too. Whatever comes, the text forwarded as it came is the answer's text.
pub fn completion_stream(data: &[u8]) {
    let (cut, body) = match data.split_first() {
        Some((cut, body)) => (usize::from(*cut % 64) + 1, body),
        None => (1, data),
    };
    let pieces: Vec<Result<&[u8], std::convert::Infallible>> = body.chunks(cut).map(Ok).collect();
    let mut forwarded = String::new();
    let mut on_text = |t: &str| forwarded.push_str(t);
    let cancel = CancellationToken::new();
    let read = read_events("fuzz", futures::stream::iter(pieces), &mut on_text, &cancel);
    match futures::executor::block_on(read) {
        Ok(response) => assert_eq!(response.content, forwarded),
        Err(LlmError::Failed(failure)) => assert!(!failure.message.is_empty()),
        Err(LlmError::Cancelled { .. }) => unreachable!("nothing cancels"),
    }
}

/// A chat completion answered whole.
pub fn completion(data: &[u8]) {
    if let Ok(text) = std::str::from_utf8(data) {
        let _ = parse_full(text);
    }
}

/// Tool calls written in a model's text (for models without native tool calls): the text
/// that is left and the calls found together never hold more than what was written.
pub fn text_tool_calls(data: &[u8]) {
    if let Ok(text) = std::str::from_utf8(data) {
        let (rest, calls) = crate::text_tool_calls::parse(text, 0);
        assert!(rest.len() <= text.len());
        assert!(calls.len() <= text.len());
    }
}

/// `cordon.toml`, as `cordon` reads it (checked as a whole, policy rules included).
pub fn config(data: &[u8]) {
    if let Ok(text) = std::str::from_utf8(data) {
        let _ = crate::AgentConfig::from_toml(text, "fuzz.toml");
    }
}
