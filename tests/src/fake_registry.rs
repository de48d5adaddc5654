//! A registry under a test's control on 127.0.0.1, for what a real one would never do: each
//! request is answered by the test's handler, which may announce and stream a body of any size
//! without holding it, or trickle one a byte at a time. It records every request and counts the
//! body bytes it managed to send. Every body is bounded, so every connection ends.

use std::io::{BufRead, BufReader, Read, Write};
use std::net::{SocketAddr, TcpListener, TcpStream};
use std::sync::atomic::{AtomicBool, AtomicU64, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

/// A request as received.
#[derive(Debug, Clone)]
pub struct Request {
    /// `GET`, `PUT`, ...
    pub method: String,
    /// The request target: a path with its query, or an absolute URL when sent to a proxy.
    pub target: String,
    /// The headers, names in lowercase.
    pub headers: Vec<(String, String)>,
}

impl Request {
    /// The first header called `name` (lowercase).
    pub fn header(&self, name: &str) -> Option<&str> {
        self.headers
            .iter()
            .find(|(k, _)| k == name)
            .map(|(_, v)| v.as_str())
    }

    /// The target without its query.
    pub fn path(&self) -> &str {
        self.target.split('?').next().unwrap_or_default()
    }
}

/// What a response's body is.
pub enum Body {
    /// These bytes, with their length.
    Bytes(Vec<u8>),
    /// `total` bytes of filler streamed without being held; `Content-Length: announced`, or
    /// none (the body then ends when the connection closes).
    Filler {
        /// The `Content-Length` sent, if any.
        announced: Option<u64>,
        /// How many bytes at most are sent.
        total: u64,
    },
    /// One filler byte every `every`, at most `count` of them, under `Content-Length:
    /// announced`; then the connection closes.
    Trickle {
        /// The `Content-Length` sent.
        announced: u64,
        /// How many bytes at most are sent.
        count: u64,
        /// The pause before each byte.
        every: Duration,
    },
}

/// A response to send.
pub struct Response {
    /// The status code.
    pub status: u16,
    /// Extra headers.
    pub headers: Vec<(String, String)>,
    /// The body.
    pub body: Body,
}

impl Response {
    /// `status` with `body`.
    pub fn new(status: u16, body: Body) -> Response {
        Response {
            status,
            headers: Vec::new(),
            body,
        }
    }

    /// 200 with `bytes`.
    pub fn ok(bytes: impl Into<Vec<u8>>) -> Response {
        Response::new(200, Body::Bytes(bytes.into()))
    }

    /// `status` with an empty body.
    pub fn status(status: u16) -> Response {
        Response::new(status, Body::Bytes(Vec::new()))
    }

    /// The same response with header `name: value`.
    pub fn with_header(mut self, name: &str, value: &str) -> Response {
        self.headers.push((name.to_string(), value.to_string()));
        self
    }
}

type Handler = dyn Fn(&Request) -> Response + Send + Sync;

/// The server; stops accepting when dropped.
pub struct FakeRegistry {
    addr: SocketAddr,
    stop: Arc<AtomicBool>,
    accept: Option<JoinHandle<()>>,
    requests: Arc<Mutex<Vec<Request>>>,
    sent: Arc<AtomicU64>,
    open: Arc<AtomicUsize>,
}

impl FakeRegistry {
    /// Serves every request with `handler`, one thread per connection.
    pub fn start(handler: impl Fn(&Request) -> Response + Send + Sync + 'static) -> FakeRegistry {
        let listener = TcpListener::bind("127.0.0.1:0").expect("bind loopback");
        listener.set_nonblocking(true).expect("nonblocking");
        let addr = listener.local_addr().expect("local addr");
        let stop = Arc::new(AtomicBool::new(false));
        let requests = Arc::new(Mutex::new(Vec::new()));
        let sent = Arc::new(AtomicU64::new(0));
        let open = Arc::new(AtomicUsize::new(0));
        let handler: Arc<Handler> = Arc::new(handler);
        let accept = {
            let (stop, requests, sent, open) =
                (stop.clone(), requests.clone(), sent.clone(), open.clone());
            std::thread::spawn(move || {
                while !stop.load(Ordering::Relaxed) {
                    match listener.accept() {
                        Ok((stream, _)) => {
                            let _ = stream.set_nonblocking(false);
                            let (handler, requests, sent, open) = (
                                handler.clone(),
                                requests.clone(),
                                sent.clone(),
                                open.clone(),
                            );
                            open.fetch_add(1, Ordering::SeqCst);
                            std::thread::spawn(move || {
                                let _ = serve(stream, &*handler, &requests, &sent);
                                open.fetch_sub(1, Ordering::SeqCst);
                            });
                        }
                        Err(e) if e.kind() == std::io::ErrorKind::WouldBlock => {
                            std::thread::sleep(Duration::from_millis(10));
                        }
                        Err(_) => break,
                    }
                }
            })
        };
        FakeRegistry {
            addr,
            stop,
            accept: Some(accept),
            requests,
            sent,
            open,
        }
    }

    /// `127.0.0.1:PORT`, as an `oci://` reference names the registry.
    pub fn host(&self) -> String {
        self.addr.to_string()
    }

    /// The port.
    pub fn port(&self) -> u16 {
        self.addr.port()
    }

    /// Every request received so far.
    pub fn requests(&self) -> Vec<Request> {
        self.requests.lock().unwrap().clone()
    }

    /// The body bytes sent so far, once every connection has ended (waiting at most 20 s for
    /// them to).
    pub fn body_bytes_sent(&self) -> u64 {
        let deadline = Instant::now() + Duration::from_secs(20);
        while self.open.load(Ordering::SeqCst) > 0 && Instant::now() < deadline {
            std::thread::sleep(Duration::from_millis(20));
        }
        self.sent.load(Ordering::SeqCst)
    }
}

impl Drop for FakeRegistry {
    fn drop(&mut self) {
        self.stop.store(true, Ordering::Relaxed);
        if let Some(h) = self.accept.take() {
            let _ = h.join();
        }
    }
}

/// Answers the one request on `stream` (each response closes the connection).
fn serve(
    mut stream: TcpStream,
    handler: &Handler,
    requests: &Mutex<Vec<Request>>,
    sent: &AtomicU64,
) -> std::io::Result<()> {
    stream.set_read_timeout(Some(Duration::from_secs(10)))?;
    let mut reader = BufReader::new(stream.try_clone()?);
    let mut line = String::new();
    reader.read_line(&mut line)?;
    let mut parts = line.split_whitespace();
    let method = parts.next().unwrap_or_default().to_string();
    let target = parts.next().unwrap_or("/").to_string();
    let mut headers = Vec::new();
    // At most 100 headers.
    for _ in 0..100 {
        let mut header = String::new();
        if reader.read_line(&mut header)? == 0 || header.trim().is_empty() {
            break;
        }
        if let Some((name, value)) = header.split_once(':') {
            headers.push((name.trim().to_ascii_lowercase(), value.trim().to_string()));
        }
    }
    let request = Request {
        method,
        target,
        headers,
    };
    // An upload's body is read and dropped.
    let length: u64 = request
        .header("content-length")
        .and_then(|v| v.parse().ok())
        .unwrap_or(0);
    std::io::copy(&mut (&mut reader).take(length), &mut std::io::sink())?;
    requests.lock().unwrap().push(request.clone());
    let response = handler(&request);
    let reason = match response.status {
        200 => "OK",
        201 => "Created",
        202 => "Accepted",
        401 => "Unauthorized",
        404 => "Not Found",
        _ => "Status",
    };
    let mut head = format!(
        "HTTP/1.1 {} {reason}\r\nConnection: close\r\n",
        response.status
    );
    for (name, value) in &response.headers {
        head.push_str(&format!("{name}: {value}\r\n"));
    }
    let announced = match &response.body {
        Body::Bytes(bytes) => Some(bytes.len() as u64),
        Body::Filler { announced, .. } => *announced,
        Body::Trickle { announced, .. } => Some(*announced),
    };
    if let Some(length) = announced {
        head.push_str(&format!("Content-Length: {length}\r\n"));
    }
    head.push_str("\r\n");
    stream.write_all(head.as_bytes())?;
    match response.body {
        Body::Bytes(bytes) => {
            stream.write_all(&bytes)?;
            sent.fetch_add(bytes.len() as u64, Ordering::SeqCst);
        }
        Body::Filler { total, .. } => {
            let chunk = vec![b' '; 64 * 1024];
            let mut left = total;
            while left > 0 {
                let n = left.min(chunk.len() as u64) as usize;
                stream.write_all(&chunk[..n])?;
                sent.fetch_add(n as u64, Ordering::SeqCst);
                left -= n as u64;
            }
        }
        Body::Trickle { count, every, .. } => {
            for _ in 0..count {
                std::thread::sleep(every);
                stream.write_all(b" ")?;
                stream.flush()?;
                sent.fetch_add(1, Ordering::SeqCst);
            }
        }
    }
    stream.flush()
}
