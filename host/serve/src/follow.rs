//! How a session's events reach an HTTP client as Server-Sent Events.
//!
//! A session may have hundreds of followers (consoles, dashboards, clients that stopped
//! reading), and on a small host their work competes for the same cores with the turn they
//! follow. What a follower costs the turn is therefore bounded, in this order:
//!
//! 1. The turn never waits for a follower: events go through a channel of 1,024 places
//!    (`EVENT_BUFFER`); a follower that falls further behind is sent a
//!    `lagged` event saying how many it missed, and goes on from the oldest it can still have.
//! 2. Each event is framed once ([`Published::frame`]) and the bytes are shared by every
//!    follower.
//! 3. A follower takes everything waiting for it at once and writes it as one chunk.
//! 4. A follower of the session ([`Pace::Follower`]) that has just written waits
//!    [`FOLLOWER_PACE`] before it takes more, so it wakes at most about 40 times a second
//!    however fast the turn goes; the client that asked for the turn ([`Pace::EachEvent`])
//!    gets each event as it comes.
//! 5. A follower that reads nothing at all is let go by the connection's send timeout
//!    (`send_timeout_secs`); what it was sent is bounded by the connection's write buffer.
//! 6. A stream quiet for [`KEEP_ALIVE`] gets a comment, so proxies keep it open.

use std::convert::Infallible;
use std::sync::Arc;
use std::time::Duration;

use axum::body::Body;
use axum::http::header;
use axum::response::{IntoResponse, Response};
use bytes::{Bytes, BytesMut};
use futures::Stream;
use serde_json::json;
use tokio::sync::broadcast::{self, error::RecvError, error::TryRecvError};
use tokio::time::Instant;

use crate::live::Published;

/// How long a follower of a session waits after a write before it takes more.
pub(crate) const FOLLOWER_PACE: Duration = Duration::from_millis(25);

/// How long a stream may stay quiet before it is sent a comment.
const KEEP_ALIVE: Duration = Duration::from_secs(15);

/// The most bytes put into one chunk; past it the rest waits for the next.
const MAX_CHUNK: usize = 256 * 1024;

/// How often a stream takes what is waiting for it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Pace {
    /// As each event comes: the client that asked for the turn.
    EachEvent,
    /// At most once per [`FOLLOWER_PACE`]: anyone following the session.
    Follower,
}

struct Following {
    events: broadcast::Receiver<Arc<Published>>,
    one_turn: bool,
    pace: Pace,
    last_write: Option<Instant>,
    done: bool,
}

/// A session's events as SSE chunks; with `one_turn`, the stream ends with the turn's end.
pub(crate) fn event_stream(
    events: broadcast::Receiver<Arc<Published>>,
    one_turn: bool,
    pace: Pace,
) -> impl Stream<Item = Result<Bytes, Infallible>> + Send + 'static {
    let following = Following {
        events,
        one_turn,
        pace,
        last_write: None,
        done: false,
    };
    futures::stream::unfold(following, |mut f| async move {
        if f.done {
            return None;
        }
        if let (Pace::Follower, Some(last)) = (f.pace, f.last_write) {
            tokio::time::sleep_until(last + FOLLOWER_PACE).await;
        }
        let first = match tokio::time::timeout(KEEP_ALIVE, f.events.recv()).await {
            Err(_quiet) => return Some((Ok(Bytes::from_static(b":\n\n")), f)),
            Ok(Err(RecvError::Closed)) => return None,
            Ok(received) => received,
        };
        let mut chunk = Chunk::default();
        let mut next = Some(first.map_err(|e| match e {
            RecvError::Lagged(n) => TryRecvError::Lagged(n),
            RecvError::Closed => TryRecvError::Closed,
        }));
        while let Some(received) = next.take() {
            match received {
                Ok(event) => {
                    chunk.push(event.frame());
                    if f.one_turn && event.event.ends_turn() {
                        f.done = true;
                        break;
                    }
                }
                Err(TryRecvError::Lagged(n)) => chunk.push(&lagged(n)),
                Err(TryRecvError::Closed) => {
                    f.done = true;
                    break;
                }
                Err(TryRecvError::Empty) => break,
            }
            if chunk.len() < MAX_CHUNK {
                next = Some(f.events.try_recv());
            }
        }
        f.last_write = Some(Instant::now());
        Some((Ok(chunk.into_bytes()), f))
    })
}

pub(crate) fn lagged(missed: u64) -> Bytes {
    let data = json!({"type": "lagged", "missed": missed});
    Bytes::from(format!("event: lagged\ndata: {data}\n\n"))
}

/// Frames put together without copying the common case of one.
#[derive(Default)]
struct Chunk {
    one: Option<Bytes>,
    more: BytesMut,
}

impl Chunk {
    fn push(&mut self, frame: &Bytes) {
        match self.one.take() {
            None if self.more.is_empty() => self.one = Some(frame.clone()),
            first => {
                if let Some(first) = first {
                    self.more.extend_from_slice(&first);
                }
                self.more.extend_from_slice(frame);
            }
        }
    }

    fn len(&self) -> usize {
        self.one.as_ref().map_or(self.more.len(), Bytes::len)
    }

    fn into_bytes(self) -> Bytes {
        self.one.unwrap_or_else(|| self.more.freeze())
    }
}

/// An SSE response of `stream`.
pub(crate) fn sse_response<S>(stream: S) -> Response
where
    S: Stream<Item = Result<Bytes, Infallible>> + Send + 'static,
{
    (
        [
            (header::CONTENT_TYPE, "text/event-stream"),
            (header::CACHE_CONTROL, "no-cache"),
        ],
        Body::from_stream(stream),
    )
        .into_response()
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::live::{HostEvent, LiveSession, SessionEvent};
    use futures::StreamExt;

    fn stopped(reason: &str) -> SessionEvent {
        SessionEvent::Host(HostEvent::TurnStopped {
            reason: reason.into(),
        })
    }

    #[tokio::test(start_paused = true)]
    async fn a_follower_takes_what_waits_in_one_chunk_and_paces_itself() {
        let live = LiveSession::new("s");
        let mut stream = Box::pin(event_stream(live.subscribe(), false, Pace::Follower));
        live.publish(stopped("a"));
        let first = stream.next().await.unwrap().unwrap();
        let text = std::str::from_utf8(&first).unwrap();
        assert_eq!(text.matches("event: turn_stopped").count(), 1);
        for r in ["b", "c", "d"] {
            live.publish(stopped(r));
        }
        let started = Instant::now();
        let second = stream.next().await.unwrap().unwrap();
        // The three that came while it waited arrive together, one pace after the first.
        assert!(started.elapsed() >= FOLLOWER_PACE - Duration::from_millis(1));
        let text = String::from_utf8(second.to_vec()).unwrap();
        assert_eq!(text.matches("event: turn_stopped\n").count(), 3, "{text}");
        assert!(text.find("\"b\"").unwrap() < text.find("\"d\"").unwrap());
    }

    #[tokio::test(start_paused = true)]
    async fn the_requester_gets_each_event_at_once_and_the_stream_ends_with_the_turn() {
        let live = LiveSession::new("s");
        let mut stream = Box::pin(event_stream(live.subscribe(), true, Pace::EachEvent));
        live.publish(stopped("a"));
        let started = Instant::now();
        let chunk = stream.next().await.unwrap().unwrap();
        assert_eq!(started.elapsed(), Duration::ZERO);
        assert!(chunk.ends_with(b"\n\n"));
        assert!(stream.next().await.is_none(), "a stopped turn ends it");
    }

    #[tokio::test(start_paused = true)]
    async fn one_who_falls_behind_is_told_how_much_it_missed_and_a_quiet_stream_is_kept_alive() {
        let live = LiveSession::new("s");
        let mut stream = Box::pin(event_stream(live.subscribe(), false, Pace::Follower));
        for i in 0..1100 {
            live.publish(stopped(&i.to_string()));
        }
        let mut text = String::new();
        while !text.contains("\"1099\"") {
            let chunk = stream.next().await.unwrap().unwrap();
            assert!(chunk.len() <= MAX_CHUNK + 200);
            text.push_str(std::str::from_utf8(&chunk).unwrap());
        }
        assert!(
            text.starts_with("event: lagged\ndata: {\"type\":\"lagged\",\"missed\":76}"),
            "{}",
            &text[..80]
        );
        assert_eq!(text.matches("event: turn_stopped").count(), 1024);
        let quiet = stream.next().await.unwrap().unwrap();
        assert_eq!(&quiet[..], b":\n\n");
    }
}
