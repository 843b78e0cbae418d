//! The agent's metrics endpoint: a deliberately small HTTP/1.1 server on its own threads (std::net only:
//! two fixed routes do not justify an async runtime or a web framework in a root daemon).
//!
//! - `GET /metrics`: the last [`Published`] text, as the watch loop left it; `GET /healthz`: 200 while the
//!   loop publishes, 503 once it has not for [`Published::stale_after`] (a stuck loop gets its pod
//!   restarted). Anything else: 404/405/400/431. Every response closes the connection.
//! - Bounds: at most [`defaults::METRICS_MAX_CONNECTIONS`] connections are served at once (one short-lived
//!   thread each); the next ones are closed as soon as they are accepted. A request head larger than
//!   [`defaults::METRICS_MAX_REQUEST_BYTES`], or not complete within
//!   [`defaults::METRICS_REQUEST_DEADLINE`], ends its connection; writes share the same deadline.
//! - The watch loop never waits on a client: it only swaps an `Arc` under a mutex that the server holds
//!   for an `Arc` clone (never while reading or writing a socket).

use std::io::{ErrorKind, Read, Write};
use std::net::{SocketAddr, TcpListener, TcpStream};
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use crate::defaults;

/// What the watch loop last published: the exposition text and when.
#[derive(Debug)]
pub struct Published {
    latest: Mutex<(Arc<Vec<u8>>, Instant)>,
    /// `/healthz` fails once nothing was published for this long.
    pub stale_after: Duration,
}

impl Published {
    pub fn new(stale_after: Duration) -> Published {
        Published {
            latest: Mutex::new((Arc::new(Vec::new()), Instant::now())),
            stale_after,
        }
    }

    /// Replace the text (the watch loop, after each scan).
    pub fn publish(&self, text: Vec<u8>) {
        let text = Arc::new(text);
        // A poisoned lock only means a server thread panicked between two plain assignments.
        let mut latest = self.latest.lock().unwrap_or_else(|p| p.into_inner());
        *latest = (text, Instant::now());
    }

    fn latest(&self) -> (Arc<Vec<u8>>, Instant) {
        let latest = self.latest.lock().unwrap_or_else(|p| p.into_inner());
        (latest.0.clone(), latest.1)
    }
}

/// Content type of the classic Prometheus text format (what [`Published`] holds).
const CONTENT_TYPE: &str = "text/plain; version=0.0.4; charset=utf-8";

/// Bind `addr` and serve on a thread of its own; returns the bound address (port 0 picks one).
pub fn serve(addr: SocketAddr, published: Arc<Published>) -> std::io::Result<SocketAddr> {
    let listener = TcpListener::bind(addr)?;
    let bound = listener.local_addr()?;
    std::thread::Builder::new()
        .name("metrics-http".into())
        .spawn(move || accept_loop(listener, published))?;
    Ok(bound)
}

fn accept_loop(listener: TcpListener, published: Arc<Published>) {
    let active = Arc::new(AtomicUsize::new(0));
    loop {
        let stream = match listener.accept() {
            Ok((stream, _)) => stream,
            Err(err) => {
                // EMFILE and friends: back off instead of spinning; the next accept may work.
                if err.kind() != ErrorKind::Interrupted {
                    std::thread::sleep(Duration::from_millis(10));
                }
                continue;
            }
        };
        if active.fetch_add(1, Ordering::SeqCst) >= defaults::METRICS_MAX_CONNECTIONS {
            active.fetch_sub(1, Ordering::SeqCst);
            drop(stream);
            continue;
        }
        let slot = Slot(active.clone());
        let published = published.clone();
        // A thread that cannot be spawned drops its closure, so the stream and the slot go with it.
        let _ = std::thread::Builder::new()
            .name("metrics-conn".into())
            .stack_size(64 * 1024)
            .spawn(move || {
                let _slot = slot;
                handle(stream, &published);
            });
    }
}

/// One connection slot, given back when the connection's thread ends.
struct Slot(Arc<AtomicUsize>);

impl Drop for Slot {
    fn drop(&mut self) {
        self.0.fetch_sub(1, Ordering::SeqCst);
    }
}

fn handle(mut stream: TcpStream, published: &Published) {
    let deadline = Instant::now() + defaults::METRICS_REQUEST_DEADLINE;
    let response = match read_head(&mut stream, deadline) {
        Ok(head) => respond(&head, published),
        Err(HeadError::TooLarge) => plain(431, "Request Header Fields Too Large", "too large\n"),
        Err(HeadError::Gone) => return,
    };
    let _ = write_all_by(&mut stream, &response, deadline);
    let _ = stream.shutdown(std::net::Shutdown::Both);
}

enum HeadError {
    TooLarge,
    /// Closed, failed or too slow: nothing worth answering.
    Gone,
}

/// The request head (up to the blank line), read within `deadline`.
fn read_head(stream: &mut TcpStream, deadline: Instant) -> Result<Vec<u8>, HeadError> {
    let mut head = Vec::with_capacity(512);
    let mut chunk = [0u8; 1024];
    loop {
        let left = deadline.saturating_duration_since(Instant::now());
        if left.is_zero() {
            return Err(HeadError::Gone);
        }
        stream
            .set_read_timeout(Some(left))
            .map_err(|_| HeadError::Gone)?;
        let n = match stream.read(&mut chunk) {
            Ok(0) => return Err(HeadError::Gone),
            Ok(n) => n,
            Err(err) if err.kind() == ErrorKind::Interrupted => continue,
            Err(_) => return Err(HeadError::Gone),
        };
        head.extend_from_slice(&chunk[..n]);
        if let Some(end) = find_blank_line(&head) {
            head.truncate(end);
            return Ok(head);
        }
        if head.len() > defaults::METRICS_MAX_REQUEST_BYTES {
            return Err(HeadError::TooLarge);
        }
    }
}

fn find_blank_line(bytes: &[u8]) -> Option<usize> {
    bytes.windows(4).position(|w| w == b"\r\n\r\n").or_else(|| {
        // Lenient about bare LF line ends (curl never sends them; hand-typed requests do).
        bytes.windows(2).position(|w| w == b"\n\n")
    })
}

/// The full response for a request head.
fn respond(head: &[u8], published: &Published) -> Vec<u8> {
    let line = head.split(|&b| b == b'\n').next().unwrap_or_default();
    let line = String::from_utf8_lossy(line);
    let mut parts = line.trim_end().split(' ');
    let (Some(method), Some(target), Some(version)) = (parts.next(), parts.next(), parts.next())
    else {
        return plain(400, "Bad Request", "bad request\n");
    };
    if !version.starts_with("HTTP/1.") || parts.next().is_some() {
        return plain(400, "Bad Request", "bad request\n");
    }
    let path = target.split('?').next().unwrap_or_default();
    if method != "GET" && method != "HEAD" {
        return plain(405, "Method Not Allowed", "only GET\n");
    }
    let mut response = match path {
        "/metrics" => {
            let (text, _) = published.latest();
            response(200, "OK", CONTENT_TYPE, &text)
        }
        "/healthz" => {
            let (_, at) = published.latest();
            if at.elapsed() <= published.stale_after {
                plain(200, "OK", "ok\n")
            } else {
                plain(
                    503,
                    "Service Unavailable",
                    "the watch loop has not published recently\n",
                )
            }
        }
        _ => plain(404, "Not Found", "not found: try /metrics\n"),
    };
    if method == "HEAD" {
        if let Some(end) = find_blank_line(&response) {
            response.truncate(end + 4);
        }
    }
    response
}

fn plain(code: u16, reason: &str, body: &str) -> Vec<u8> {
    response(code, reason, "text/plain; charset=utf-8", body.as_bytes())
}

fn response(code: u16, reason: &str, content_type: &str, body: &[u8]) -> Vec<u8> {
    let mut out = format!(
        "HTTP/1.1 {code} {reason}\r\nContent-Type: {content_type}\r\nContent-Length: {}\r\n\
         Connection: close\r\n\r\n",
        body.len()
    )
    .into_bytes();
    out.extend_from_slice(body);
    out
}

fn write_all_by(
    stream: &mut TcpStream,
    mut bytes: &[u8],
    deadline: Instant,
) -> std::io::Result<()> {
    while !bytes.is_empty() {
        let left = deadline.saturating_duration_since(Instant::now());
        if left.is_zero() {
            return Err(ErrorKind::TimedOut.into());
        }
        stream.set_write_timeout(Some(left))?;
        match stream.write(bytes) {
            Ok(0) => return Err(ErrorKind::WriteZero.into()),
            Ok(n) => bytes = &bytes[n..],
            Err(err) if err.kind() == ErrorKind::Interrupted => {}
            Err(err) => return Err(err),
        }
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn server() -> (SocketAddr, Arc<Published>) {
        let published = Arc::new(Published::new(Duration::from_secs(60)));
        published.publish(b"wedge_capture_targets 3\n".to_vec());
        let addr = serve("127.0.0.1:0".parse().unwrap(), published.clone()).unwrap();
        (addr, published)
    }

    fn get(addr: SocketAddr, request: &[u8]) -> String {
        let mut stream = TcpStream::connect(addr).unwrap();
        stream
            .set_read_timeout(Some(Duration::from_secs(5)))
            .unwrap();
        stream.write_all(request).unwrap();
        let mut out = String::new();
        let _ = stream.read_to_string(&mut out);
        out
    }

    #[test]
    fn metrics_and_health_are_served_and_nothing_else() {
        let (addr, published) = server();
        let metrics = get(addr, b"GET /metrics HTTP/1.1\r\nHost: x\r\n\r\n");
        assert!(metrics.starts_with("HTTP/1.1 200 OK\r\n"), "{metrics}");
        assert!(metrics.ends_with("wedge_capture_targets 3\n"), "{metrics}");
        published.publish(b"wedge_capture_targets 4\n".to_vec());
        let metrics = get(addr, b"GET /metrics?x=1 HTTP/1.0\r\n\r\n");
        assert!(metrics.ends_with("wedge_capture_targets 4\n"), "{metrics}");
        assert!(get(addr, b"GET /healthz HTTP/1.1\r\n\r\n").contains(" 200 OK"));
        assert!(get(addr, b"GET /etc/passwd HTTP/1.1\r\n\r\n").contains(" 404 "));
        assert!(get(addr, b"POST /metrics HTTP/1.1\r\n\r\n").contains(" 405 "));
        assert!(get(addr, b"GARBAGE\r\n\r\n").contains(" 400 "));
        let head = get(addr, b"HEAD /metrics HTTP/1.1\r\n\r\n");
        assert!(head.ends_with("\r\n\r\n"), "{head}");
    }

    #[test]
    fn an_oversized_request_is_refused() {
        let (addr, _) = server();
        let mut request = b"GET /metrics HTTP/1.1\r\nX: ".to_vec();
        request.extend(vec![b'a'; defaults::METRICS_MAX_REQUEST_BYTES * 2]);
        let mut stream = TcpStream::connect(addr).unwrap();
        stream
            .set_read_timeout(Some(Duration::from_secs(5)))
            .unwrap();
        // The server may close before the whole request is sent: a write error is fine.
        let _ = stream.write_all(&request);
        let mut out = String::new();
        let _ = stream.read_to_string(&mut out);
        assert!(out.is_empty() || out.contains(" 431 "), "{out}");
    }

    #[test]
    fn a_stale_loop_fails_the_health_check() {
        let published = Arc::new(Published::new(Duration::ZERO));
        let addr = serve("127.0.0.1:0".parse().unwrap(), published).unwrap();
        std::thread::sleep(Duration::from_millis(5));
        assert!(get(addr, b"GET /healthz HTTP/1.1\r\n\r\n").contains(" 503 "));
    }
}
