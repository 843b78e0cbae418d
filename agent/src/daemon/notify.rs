//! systemd's notification protocol (sd_notify(3)), by hand: one datagram per state change to the unix
//! socket named by `NOTIFY_SOCKET` (a path, or `@name` for the abstract namespace). Without the
//! variable (not started by systemd with Type=notify) every call is a no-op.
//!
//! The socket never blocks: a service manager that does not read (its queue of `max_dgram_qlen` datagrams
//! full) loses a notification, never the watch loop's time (a blocked send would also withhold every later
//! watchdog ping and scan). And a watchdog ping is not sent while an earlier datagram of ours is still
//! unread (`SIOCOUTQ`): the manager has not seen the last one yet, so another adds nothing, and pings never
//! fill its queue ahead of a state change (RELOADING, READY, STOPPING).

use std::os::unix::net::{SocketAddr, UnixDatagram};
use std::time::Duration;

/// Talks to the service manager.
pub struct Notifier {
    socket: Option<(UnixDatagram, SocketAddr)>,
    watchdog: Option<Duration>,
}

impl Notifier {
    /// From `NOTIFY_SOCKET` and `WATCHDOG_USEC`/`WATCHDOG_PID`.
    pub fn from_env() -> Notifier {
        let socket = std::env::var_os("NOTIFY_SOCKET").and_then(|name| {
            let addr = socket_addr(name.as_encoded_bytes()).ok()?;
            Some((unbound_nonblocking().ok()?, addr))
        });
        let for_us = std::env::var("WATCHDOG_PID")
            .ok()
            .and_then(|p| p.trim().parse::<u32>().ok())
            .is_none_or(|pid| pid == std::process::id());
        let watchdog = std::env::var("WATCHDOG_USEC")
            .ok()
            .and_then(|u| u.trim().parse::<u64>().ok())
            .filter(|&u| u > 0 && for_us)
            .map(Duration::from_micros);
        Notifier { socket, watchdog }
    }

    /// A notifier sending to `addr` (tests).
    #[cfg(test)]
    pub fn to_address(addr: SocketAddr, watchdog: Option<Duration>) -> std::io::Result<Notifier> {
        Ok(Notifier {
            socket: Some((unbound_nonblocking()?, addr)),
            watchdog,
        })
    }

    /// The service's watchdog timeout (WatchdogSec=), when one is set for us.
    pub fn watchdog(&self) -> Option<Duration> {
        self.watchdog
    }

    /// Send one notification (`KEY=value` lines); errors are returned but harmless to ignore.
    pub fn send(&self, state: &str) -> std::io::Result<()> {
        match &self.socket {
            Some((socket, addr)) => socket.send_to_addr(state.as_bytes(), addr).map(|_| ()),
            None => Ok(()),
        }
    }

    pub fn ready(&self, status: &str) {
        let _ = self.send(&format!("READY=1\nSTATUS={}", one_line(status)));
    }

    /// Reload begins; [`Notifier::ready`] ends it.
    pub fn reloading(&self) {
        let usec = crate::watch::capture_clock_ns() / 1000;
        let _ = self.send(&format!("RELOADING=1\nMONOTONIC_USEC={usec}"));
    }

    pub fn stopping(&self) {
        let _ = self.send("STOPPING=1");
    }

    pub fn watchdog_ping(&self) {
        if self.watchdog.is_some() && self.unread_bytes().is_none_or(|bytes| bytes == 0) {
            let _ = self.send("WATCHDOG=1");
        }
    }

    /// Bytes of our datagrams the manager has not read yet (`SIOCOUTQ`: a unix datagram stays charged to
    /// its sender until it is received); None without a socket or when the kernel does not say.
    fn unread_bytes(&self) -> Option<usize> {
        use std::os::fd::AsRawFd;
        let (socket, _) = self.socket.as_ref()?;
        let mut bytes: libc::c_int = 0;
        // SAFETY: SIOCOUTQ (the same request number as TIOCOUTQ) on a socket we own writes one int, which
        // `bytes` is.
        let rc = unsafe { libc::ioctl(socket.as_raw_fd(), libc::TIOCOUTQ, &mut bytes) };
        (rc == 0).then_some(bytes.max(0) as usize)
    }

    pub fn status(&self, status: &str) {
        let _ = self.send(&format!("STATUS={}", one_line(status)));
    }
}

/// The sending socket: unbound, non-blocking.
fn unbound_nonblocking() -> std::io::Result<UnixDatagram> {
    let socket = UnixDatagram::unbound()?;
    socket.set_nonblocking(true)?;
    Ok(socket)
}

fn one_line(text: &str) -> String {
    text.replace('\n', " ")
}

/// `NOTIFY_SOCKET`'s value → an address: `@name` is abstract, anything else a path.
pub fn socket_addr(name: &[u8]) -> std::io::Result<SocketAddr> {
    match name.strip_prefix(b"@") {
        Some(abstract_name) => {
            use std::os::linux::net::SocketAddrExt;
            SocketAddr::from_abstract_name(abstract_name)
        }
        None => {
            use std::os::unix::ffi::OsStrExt;
            SocketAddr::from_pathname(std::path::Path::new(std::ffi::OsStr::from_bytes(name)))
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn receive(socket: &UnixDatagram) -> String {
        socket
            .set_read_timeout(Some(Duration::from_secs(2)))
            .unwrap();
        let mut buf = [0u8; 512];
        let n = socket.recv(&mut buf).unwrap();
        String::from_utf8_lossy(&buf[..n]).into_owned()
    }

    /// A manager's socket at a path (kept while the directory lives) and a notifier with a watchdog sending
    /// to it.
    fn path_socket() -> (tempfile::TempDir, UnixDatagram, Notifier) {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("notify");
        let server = UnixDatagram::bind(&path).unwrap();
        let addr = socket_addr(path.as_os_str().as_encoded_bytes()).unwrap();
        let notifier = Notifier::to_address(addr, Some(Duration::from_secs(30))).unwrap();
        (dir, server, notifier)
    }

    #[test]
    fn sends_to_a_path_socket() {
        let (_dir, server, notifier) = path_socket();
        notifier.ready("watching 3 processes\nsecond line");
        assert_eq!(
            receive(&server),
            "READY=1\nSTATUS=watching 3 processes second line"
        );
        notifier.watchdog_ping();
        assert_eq!(receive(&server), "WATCHDOG=1");
        notifier.reloading();
        assert!(receive(&server).starts_with("RELOADING=1\nMONOTONIC_USEC="));
        notifier.stopping();
        assert_eq!(receive(&server), "STOPPING=1");
    }

    #[test]
    fn a_manager_that_does_not_read_loses_notifications_and_never_blocks_the_sender() {
        let (_dir, server, notifier) = path_socket();
        // Far more than any queue holds (net.unix.max_dgram_qlen, 10 by default): a blocking socket would
        // hang here for good.
        let refused = (0..10_000)
            .filter_map(|_| notifier.send("WATCHDOG=1").err())
            .collect::<Vec<_>>();
        assert!(!refused.is_empty());
        assert!(refused
            .iter()
            .all(|err| err.kind() == std::io::ErrorKind::WouldBlock));
        // What was queued is intact, and reading makes room again.
        assert_eq!(receive(&server), "WATCHDOG=1");
        notifier.stopping();
        let mut last = String::new();
        server.set_nonblocking(true).unwrap();
        let mut buf = [0u8; 64];
        while let Ok(n) = server.recv(&mut buf) {
            last = String::from_utf8_lossy(&buf[..n]).into_owned();
        }
        assert_eq!(last, "STOPPING=1");
    }

    #[test]
    fn pings_wait_for_the_manager_to_read_and_state_changes_still_get_through() {
        let (_dir, server, notifier) = path_socket();
        // A manager that does not read for a while: one ping is queued, the rest are not sent.
        for _ in 0..100 {
            notifier.watchdog_ping();
        }
        notifier.status("busy");
        notifier.stopping();
        assert_eq!(receive(&server), "WATCHDOG=1");
        assert_eq!(receive(&server), "STATUS=busy");
        assert_eq!(receive(&server), "STOPPING=1");
        // Once it has read everything, pings flow again.
        notifier.watchdog_ping();
        assert_eq!(receive(&server), "WATCHDOG=1");
    }

    #[test]
    fn sends_to_an_abstract_socket() {
        use std::os::linux::net::SocketAddrExt;
        let name = format!("wedge-capture-test-{}", std::process::id());
        let server =
            UnixDatagram::bind_addr(&SocketAddr::from_abstract_name(name.as_bytes()).unwrap())
                .unwrap();
        let addr = socket_addr(format!("@{name}").as_bytes()).unwrap();
        let notifier = Notifier::to_address(addr, None).unwrap();
        notifier.status("ok");
        assert_eq!(receive(&server), "STATUS=ok");
        // Without a watchdog, pings are not sent: the next datagram is the next real message.
        notifier.watchdog_ping();
        notifier.stopping();
        assert_eq!(receive(&server), "STOPPING=1");
    }
}
