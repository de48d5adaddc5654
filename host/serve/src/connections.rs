//! The connections `cordon serve` accepts: bounded in number, timed (headers, bodies, answers
//! left unread), set up for streaming, and numbered, so that what a client answered can be
//! bound to the one program that holds its connection. [`crate::admission`] says in which
//! order the bounds apply.

use std::future::Future;
use std::io;
use std::pin::Pin;
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::task::{Context, Poll, ready};
use std::time::Duration;

use axum::Router;
use axum::body::{Body, Bytes};
use axum::extract::ConnectInfo;
use cordon_agent::ServeLimits;
use hyper::body::Incoming;
use hyper_util::rt::{TokioIo, TokioTimer};
use hyper_util::server::graceful::GracefulShutdown;
use tokio::io::{AsyncRead, AsyncReadExt, AsyncWrite, AsyncWriteExt, ReadBuf};
use tokio::net::{TcpListener, TcpStream};
use tokio::sync::Semaphore;
use tokio::time::{Instant, Sleep};
use tower_service::Service;

/// The number of one accepted connection, in every request that comes over it. Numbers come
/// from one counter of the process, so no two connections ever share one, unlike their
/// addresses (a closed connection's port is given to the next program that connects). The
/// operating system gives a connection's socket to the process that opened it (and to what
/// it hands the socket to), so another program cannot send on it: what comes over one
/// connection comes from one program.
#[derive(Debug, Clone, Copy)]
pub(crate) struct ConnectionId(pub u64);

/// How many refused connections are answered at once; past it one is closed unanswered.
const MAX_REFUSING: usize = 64;
/// How long a refused connection is given to read its answer.
const REFUSAL_LINGER: Duration = Duration::from_secs(2);

/// Raises the process's soft limit on open files so `max` connections fit beside the files
/// the host itself opens (the store, spool files, plugins); a limit that cannot be raised
/// that far is said in the log, and `max_connections` is then reached as refused accepts.
#[cfg(unix)]
pub(crate) fn make_room_for(max: usize) {
    use rustix::process::{Resource, Rlimit, getrlimit, setrlimit};
    /// Files the host opens besides connections.
    const OWN_FILES: u64 = 512;
    let wanted = max as u64 + OWN_FILES;
    let limit = getrlimit(Resource::Nofile);
    let current = limit.current.unwrap_or(u64::MAX);
    if current >= wanted {
        return;
    }
    let raised = limit.maximum.map_or(wanted, |hard| hard.min(wanted));
    if raised > current
        && let Err(e) = setrlimit(
            Resource::Nofile,
            Rlimit {
                current: Some(raised),
                maximum: limit.maximum,
            },
        )
    {
        tracing::warn!("cannot raise the limit on open files to {raised}: {e}");
    }
    if raised < wanted {
        tracing::warn!(
            "the limit on open files ({raised}) leaves room for fewer than [serve.limits] \
             max_connections = {max} connections; raise it (ulimit -n) or lower max_connections"
        );
    }
}

#[cfg(not(unix))]
pub(crate) fn make_room_for(_max: usize) {}

/// Serves `app` on `listener` until `shutdown` completes; then takes no new connection and
/// lets each open one finish the request it is answering.
pub(crate) async fn serve(
    listener: TcpListener,
    app: Router,
    limits: &ServeLimits,
    shutdown: impl Future<Output = ()>,
) {
    let open = Arc::new(Semaphore::new(limits.max_connections));
    let refusing = Arc::new(Semaphore::new(MAX_REFUSING));
    let graceful = GracefulShutdown::new();
    let mut http = hyper::server::conn::http1::Builder::new();
    // The header timeout also closes a connection idle that long between requests.
    http.timer(TokioTimer::new())
        .header_read_timeout(Duration::from_secs(limits.header_timeout_secs))
        .keep_alive(true);
    let body_timeout = Duration::from_secs(limits.body_timeout_secs);
    let send_timeout = Duration::from_secs(limits.send_timeout_secs);
    let refusal = refusal_answer(limits.max_connections);
    tokio::pin!(shutdown);
    loop {
        let tcp = tokio::select! {
            accepted = listener.accept() => match accepted {
                Ok((tcp, _)) => tcp,
                Err(e) => {
                    // Out of file descriptors or memory: wait for connections to close
                    // rather than spin.
                    tracing::warn!("cannot accept a connection: {e}");
                    tokio::time::sleep(Duration::from_millis(50)).await;
                    continue;
                }
            },
            () = &mut shutdown => break,
        };
        // Streamed answers are many small writes: sent at once, not held back until the
        // client acknowledges the previous one (Nagle's algorithm).
        if let Err(e) = tcp.set_nodelay(true) {
            tracing::debug!("cannot set TCP_NODELAY on a connection: {e}");
        }
        let Ok(permit) = open.clone().try_acquire_owned() else {
            refuse(tcp, &refusing, refusal.clone());
            continue;
        };
        static NEXT: AtomicU64 = AtomicU64::new(1);
        let id = ConnectionId(NEXT.fetch_add(1, Ordering::Relaxed));
        let app = app.clone();
        let service = hyper::service::service_fn(move |request: hyper::Request<Incoming>| {
            let mut request = request.map(|body| Body::new(Deadline::new(body, body_timeout)));
            request.extensions_mut().insert(ConnectInfo(id));
            let mut app = app.clone();
            async move { app.call(request).await }
        });
        let io = TokioIo::new(Unread::new(tcp, send_timeout));
        let connection = graceful.watch(http.serve_connection(io, service));
        tokio::spawn(async move {
            let _open = permit;
            if let Err(e) = connection.await {
                tracing::debug!("a connection ended: {e}");
            }
        });
    }
    drop(listener);
    graceful.shutdown().await;
}

/// The whole answer to a connection past `max_connections`.
fn refusal_answer(max: usize) -> Bytes {
    // The API's error shape, as `ApiError` writes it.
    let body = serde_json::json!({"error": {"kind": "busy", "message": format!(
        "the host is busy: {max} connections are open, as many as [serve.limits] \
         max_connections allows; try again shortly"
    )}})
    .to_string();
    Bytes::from(format!(
        "HTTP/1.1 503 Service Unavailable\r\ncontent-type: application/json\r\nretry-after: 1\r\n\
         connection: close\r\ncontent-length: {}\r\n\r\n{body}",
        body.len()
    ))
}

/// Answers `503` on a connection past the bound and closes it so the client reads the
/// answer: the write side first, then what the client sent is read and dropped until it
/// closes its side (or [`REFUSAL_LINGER`] passed). Closing at once with unread bytes would
/// reset the connection, and the client would see a reset instead of the answer.
fn refuse(mut tcp: TcpStream, refusing: &Arc<Semaphore>, answer: Bytes) {
    cordon_core::metrics::request_refused("connections");
    let Ok(permit) = refusing.clone().try_acquire_owned() else {
        // Too many being refused at once: this one is closed unanswered.
        return;
    };
    tokio::spawn(async move {
        let _refusing = permit;
        let _ = tokio::time::timeout(REFUSAL_LINGER, async {
            tcp.write_all(&answer).await?;
            tcp.shutdown().await?;
            let mut sink = [0u8; 4096];
            while tcp.read(&mut sink).await? > 0 {}
            Ok::<(), io::Error>(())
        })
        .await;
    });
}

/// A request body that must arrive whole within a time counted from the request's headers.
struct Deadline {
    body: Incoming,
    timeout: Duration,
    sleep: Pin<Box<Sleep>>,
}

impl Deadline {
    fn new(body: Incoming, timeout: Duration) -> Self {
        Deadline {
            body,
            timeout,
            sleep: Box::pin(tokio::time::sleep(timeout)),
        }
    }
}

/// Why a body was refused.
#[derive(Debug, thiserror::Error)]
enum BodyError {
    #[error(
        "the request body did not arrive within {0} s ([serve.limits] body_timeout_secs); send it faster"
    )]
    TooSlow(u64),
    #[error("the request body could not be read: {0}")]
    Read(#[from] hyper::Error),
}

impl http_body::Body for Deadline {
    type Data = Bytes;
    type Error = BodyError;

    fn poll_frame(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
    ) -> Poll<Option<Result<http_body::Frame<Bytes>, BodyError>>> {
        if let Poll::Ready(frame) = Pin::new(&mut self.body).poll_frame(cx) {
            return Poll::Ready(frame.map(|f| f.map_err(BodyError::from)));
        }
        ready!(self.sleep.as_mut().poll(cx));
        Poll::Ready(Some(Err(BodyError::TooSlow(self.timeout.as_secs()))))
    }

    fn is_end_stream(&self) -> bool {
        self.body.is_end_stream()
    }

    fn size_hint(&self) -> http_body::SizeHint {
        self.body.size_hint()
    }
}

/// A connection whose writes fail once one has waited `timeout` for the client to read: a
/// client that stops reading gives up its connection instead of holding it (and what is
/// queued for it) forever.
struct Unread {
    tcp: TcpStream,
    timeout: Duration,
    stalled: Option<Pin<Box<Sleep>>>,
}

impl Unread {
    fn new(tcp: TcpStream, timeout: Duration) -> Self {
        Unread {
            tcp,
            timeout,
            stalled: None,
        }
    }

    /// After a write came back `Pending`: an error once the wait has lasted too long.
    fn waited(&mut self, cx: &mut Context<'_>) -> Poll<io::Error> {
        let timeout = self.timeout;
        let stalled = self
            .stalled
            .get_or_insert_with(|| Box::pin(tokio::time::sleep_until(Instant::now() + timeout)));
        ready!(stalled.as_mut().poll(cx));
        Poll::Ready(io::Error::new(
            io::ErrorKind::TimedOut,
            format!(
                "the client read nothing for {} s ([serve.limits] send_timeout_secs)",
                timeout.as_secs()
            ),
        ))
    }

    fn track<T>(&mut self, cx: &mut Context<'_>, done: Poll<io::Result<T>>) -> Poll<io::Result<T>> {
        match done {
            Poll::Ready(r) => {
                self.stalled = None;
                Poll::Ready(r)
            }
            Poll::Pending => match self.waited(cx) {
                Poll::Ready(e) => Poll::Ready(Err(e)),
                Poll::Pending => Poll::Pending,
            },
        }
    }
}

impl AsyncRead for Unread {
    fn poll_read(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &mut ReadBuf<'_>,
    ) -> Poll<io::Result<()>> {
        Pin::new(&mut self.tcp).poll_read(cx, buf)
    }
}

impl AsyncWrite for Unread {
    fn poll_write(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &[u8],
    ) -> Poll<io::Result<usize>> {
        let done = Pin::new(&mut self.tcp).poll_write(cx, buf);
        self.track(cx, done)
    }

    fn poll_write_vectored(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        bufs: &[io::IoSlice<'_>],
    ) -> Poll<io::Result<usize>> {
        let done = Pin::new(&mut self.tcp).poll_write_vectored(cx, bufs);
        self.track(cx, done)
    }

    fn is_write_vectored(&self) -> bool {
        self.tcp.is_write_vectored()
    }

    fn poll_flush(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        let done = Pin::new(&mut self.tcp).poll_flush(cx);
        self.track(cx, done)
    }

    fn poll_shutdown(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        Pin::new(&mut self.tcp).poll_shutdown(cx)
    }
}
