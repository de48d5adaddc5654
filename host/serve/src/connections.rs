//! The connections `cordon serve` accepts: set up for streaming, and numbered, so that what a
//! client answered can be bound to the one program that holds its connection.

use std::sync::atomic::{AtomicU64, Ordering};

use axum::extract::connect_info::Connected;
use axum::serve::{IncomingStream, Listener};
use tokio::net::{TcpListener, TcpStream};

/// The server's TCP listener.
pub(crate) struct Accepting(pub TcpListener);

impl Listener for Accepting {
    type Io = TcpStream;
    type Addr = std::net::SocketAddr;

    async fn accept(&mut self) -> (TcpStream, std::net::SocketAddr) {
        let (tcp, addr) = Listener::accept(&mut self.0).await;
        // Streamed answers are many small writes: sent at once, not held back until the
        // client acknowledges the previous one (Nagle's algorithm).
        if let Err(e) = tcp.set_nodelay(true) {
            tracing::debug!("cannot set TCP_NODELAY on a connection: {e}");
        }
        (tcp, addr)
    }

    fn local_addr(&self) -> std::io::Result<std::net::SocketAddr> {
        Listener::local_addr(&self.0)
    }
}

/// The number of one accepted connection, in every request that comes over it. Numbers come
/// from one counter of the process, so no two connections ever share one, unlike their
/// addresses (a closed connection's port is given to the next program that connects). The
/// operating system gives a connection's socket to the process that opened it (and to what
/// it hands the socket to), so another program cannot send on it: what comes over one
/// connection comes from one program.
#[derive(Debug, Clone, Copy)]
pub(crate) struct ConnectionId(pub u64);

impl Connected<IncomingStream<'_, Accepting>> for ConnectionId {
    fn connect_info(_accepted: IncomingStream<'_, Accepting>) -> Self {
        static NEXT: AtomicU64 = AtomicU64::new(1);
        ConnectionId(NEXT.fetch_add(1, Ordering::Relaxed))
    }
}
