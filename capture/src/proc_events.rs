//! Process events from the kernel's netlink proc connector: fork, exec, comm change and exit, as they
//! happen, so that target discovery need not list the whole proc root at every scan.
//!
//! The socket is non-blocking and drained once per scan ([`ProcEvents::drain`]); nothing here ever waits.
//! Lost events are not silent: a receive buffer that overflowed reads `ENOBUFS`, reported as
//! [`Drained::overrun`], after which the caller must list the proc root again (its safety net). Needs the
//! initial network namespace (the connector exists only there: `ECONNREFUSED` elsewhere) and the initial
//! user and pid namespaces (it reports host pids); older kernels also want `CAP_NET_ADMIN`, 6.18 does not; the kernel answers the subscription with an acknowledgement carrying its errno, which
//! [`ProcEvents::open`] checks.
//!
//! Datagrams are parsed by [`parse_datagram`], pure and bounded: any bytes give events or an error.

use std::os::fd::{AsRawFd, OwnedFd};

use crate::error::{Error, Result};
use crate::netlink::{
    i32_at, last_errno, messages, netlink_error, u16_at, u32_at, NLMSG_DONE, NLMSG_ERROR,
    NLMSG_HDR, NLMSG_OVERRUN,
};

const NETLINK_CONNECTOR: libc::c_int = 11;
const CN_IDX_PROC: u32 = 1;
const CN_VAL_PROC: u32 = 1;
const PROC_CN_MCAST_LISTEN: u32 = 1;

const PROC_EVENT_NONE: u32 = 0;
const PROC_EVENT_FORK: u32 = 1;
const PROC_EVENT_EXEC: u32 = 2;
const PROC_EVENT_COMM: u32 = 0x200;
const PROC_EVENT_EXIT: u32 = 0x8000_0000;

/// `struct cn_msg`: id (idx, val), seq, ack, len (u16), flags (u16).
const CN_MSG_HDR: usize = 20;
/// `struct proc_event` up to its union: what, cpu, timestamp_ns.
const EVENT_HDR: usize = 16;

/// Receive buffer asked for (root may exceed `rmem_max` with `SO_RCVBUFFORCE`): a fork storm of a few
/// thousand processes per interval fits.
const RECEIVE_BUFFER: libc::c_int = 4 << 20;
/// Most datagrams read per drain: the rest waits for the next scan, reported as an overrun so the
/// caller's safety net covers what it did not see.
const MAX_DATAGRAMS_PER_DRAIN: usize = 65_536;

/// One process event. Pids are host pids (`pid` is the thread, `tgid` its process).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ProcEvent {
    /// A new task: a process when `child_pid == child_tgid`, else a thread.
    Fork { child_pid: i32, child_tgid: i32 },
    /// A process executed a new program (its comm changed, and its cgroup may have before it).
    Exec { pid: i32, tgid: i32 },
    /// A thread's comm changed (`prctl(PR_SET_NAME)`, a write to `comm`); the process's comm is its
    /// leader's (`pid == tgid`).
    Comm { pid: i32, tgid: i32 },
    /// A task exited.
    Exit { pid: i32, tgid: i32 },
    /// The subscription's acknowledgement (`err` = the kernel's errno, 0 = subscribed).
    Ack { err: u32 },
}

fn parse_error(why: impl Into<String>) -> Error {
    crate::netlink::parse_error(WHAT, why)
}

const WHAT: &str = "proc connector datagram";

/// The events in one datagram, appended to `out`. Events of other kinds (uid, gid, sid, ptrace,
/// coredump) are skipped; a message that is not from the proc connector is an error.
pub fn parse_datagram(b: &[u8], out: &mut Vec<ProcEvent>) -> Result<()> {
    for message in messages(b, WHAT) {
        let (kind, _seq, message) = message?;
        match kind {
            NLMSG_DONE => {}
            NLMSG_ERROR | NLMSG_OVERRUN => {
                return Err(parse_error(format!("netlink message of type {kind}")))
            }
            _ => continue,
        }
        let header = (u32_at(message, 0), u32_at(message, 4));
        let (Some(idx), Some(val)) = header else {
            return Err(parse_error("truncated connector header"));
        };
        if (idx, val) != (CN_IDX_PROC, CN_VAL_PROC) {
            return Err(parse_error(format!(
                "connector message {idx}:{val}, not proc"
            )));
        }
        let data_len = usize::from(u16_at(message, 16).unwrap_or(0));
        let event = message
            .get(CN_MSG_HDR..CN_MSG_HDR.saturating_add(data_len))
            .ok_or_else(|| parse_error(format!("connector data of {data_len} bytes truncated")))?;
        let what = u32_at(event, 0).ok_or_else(|| parse_error("event without a kind"))?;
        let data = event.get(EVENT_HDR..).unwrap_or(&[]);
        let pair = |a: usize| -> Result<(i32, i32)> {
            match (i32_at(data, a), i32_at(data, a + 4)) {
                (Some(p), Some(t)) => Ok((p, t)),
                _ => Err(parse_error(format!("event {what:#x} truncated"))),
            }
        };
        let parsed = match what {
            // The acknowledgement's errno is in its data (`event_data.ack.err`); cn_msg's own `ack`
            // field is only the request's ack number plus one.
            PROC_EVENT_NONE => Some(ProcEvent::Ack {
                err: u32_at(data, 0).ok_or_else(|| parse_error("acknowledgement truncated"))?,
            }),
            PROC_EVENT_FORK => {
                let (child_pid, child_tgid) = pair(8)?;
                Some(ProcEvent::Fork {
                    child_pid,
                    child_tgid,
                })
            }
            PROC_EVENT_EXEC => pair(0).map(|(pid, tgid)| Some(ProcEvent::Exec { pid, tgid }))?,
            PROC_EVENT_COMM => pair(0).map(|(pid, tgid)| Some(ProcEvent::Comm { pid, tgid }))?,
            PROC_EVENT_EXIT => pair(0).map(|(pid, tgid)| Some(ProcEvent::Exit { pid, tgid }))?,
            _ => None,
        };
        out.extend(parsed);
    }
    Ok(())
}

/// What one drain found.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct Drained {
    /// Events were lost (the receive buffer overflowed, or more were queued than one drain reads):
    /// the caller must not trust its picture of the process table until it listed it again.
    pub overrun: bool,
    /// Datagrams read.
    pub datagrams: usize,
}

/// A subscription to the proc connector.
pub struct ProcEvents {
    fd: OwnedFd,
    buf: Vec<u8>,
}

impl ProcEvents {
    /// Subscribes; fails when the kernel refuses (no privilege, not the initial pid namespace, no
    /// `CONFIG_PROC_EVENTS`). Events from now on are queued for [`ProcEvents::drain`].
    pub fn open() -> Result<ProcEvents> {
        let fd = crate::netlink::socket(
            libc::SOCK_DGRAM | libc::SOCK_NONBLOCK,
            NETLINK_CONNECTOR,
            "proc connector socket",
        )?;
        let size = RECEIVE_BUFFER;
        for option in [libc::SO_RCVBUFFORCE, libc::SO_RCVBUF] {
            // SAFETY: setsockopt(2) reads one c_int from a live local.
            let rc = unsafe {
                libc::setsockopt(
                    fd.as_raw_fd(),
                    libc::SOL_SOCKET,
                    option,
                    std::ptr::addr_of!(size).cast(),
                    std::mem::size_of::<libc::c_int>() as libc::socklen_t,
                )
            };
            if rc == 0 {
                break;
            }
        }
        // SAFETY: an all-zero sockaddr_nl is valid; bind(2) reads it for the length given.
        let rc = unsafe {
            let mut address: libc::sockaddr_nl = std::mem::zeroed();
            address.nl_family = libc::AF_NETLINK as libc::sa_family_t;
            address.nl_groups = CN_IDX_PROC;
            libc::bind(
                fd.as_raw_fd(),
                std::ptr::addr_of!(address).cast(),
                std::mem::size_of::<libc::sockaddr_nl>() as libc::socklen_t,
            )
        };
        if rc != 0 {
            return Err(netlink_error("proc connector bind", last_errno()));
        }
        let mut events = ProcEvents {
            fd,
            buf: vec![0; 64 * 1024],
        };
        events.send_listen()?;
        // The acknowledgement is sent inside our send; it says whether the kernel took the subscription.
        let mut first = Vec::new();
        let drained = events.drain(&mut first);
        match first.iter().find_map(|e| match e {
            ProcEvent::Ack { err } => Some(*err),
            _ => None,
        }) {
            Some(0) => {}
            Some(err) => return Err(netlink_error("proc connector subscription", err as i32)),
            None if drained.overrun => {}
            None => {
                return Err(netlink_error(
                    "proc connector subscription (no acknowledgement)",
                    libc::EPROTO,
                ))
            }
        }
        Ok(events)
    }

    fn send_listen(&mut self) -> Result<()> {
        let mut msg = Vec::with_capacity(NLMSG_HDR + CN_MSG_HDR + 4);
        let total = (NLMSG_HDR + CN_MSG_HDR + 4) as u32;
        msg.extend_from_slice(&total.to_ne_bytes());
        msg.extend_from_slice(&NLMSG_DONE.to_ne_bytes());
        msg.extend_from_slice(&0u16.to_ne_bytes());
        msg.extend_from_slice(&0u32.to_ne_bytes());
        msg.extend_from_slice(&std::process::id().to_ne_bytes());
        msg.extend_from_slice(&CN_IDX_PROC.to_ne_bytes());
        msg.extend_from_slice(&CN_VAL_PROC.to_ne_bytes());
        msg.extend_from_slice(&0u32.to_ne_bytes()); // seq
        msg.extend_from_slice(&0u32.to_ne_bytes()); // ack
        msg.extend_from_slice(&4u16.to_ne_bytes()); // len
        msg.extend_from_slice(&0u16.to_ne_bytes()); // flags
        msg.extend_from_slice(&PROC_CN_MCAST_LISTEN.to_ne_bytes());
        // SAFETY: `msg` is a live buffer of the length given.
        let sent = unsafe { libc::send(self.fd.as_raw_fd(), msg.as_ptr().cast(), msg.len(), 0) };
        if sent < 0 {
            return Err(netlink_error("proc connector subscription", last_errno()));
        }
        Ok(())
    }

    /// Appends every queued event to `out` (never waits); bounded per call.
    pub fn drain(&mut self, out: &mut Vec<ProcEvent>) -> Drained {
        let mut drained = Drained::default();
        loop {
            if drained.datagrams >= MAX_DATAGRAMS_PER_DRAIN {
                drained.overrun = true;
                return drained;
            }
            // SAFETY: `buf` is a live, writable buffer of the length given.
            let n = unsafe {
                libc::recv(
                    self.fd.as_raw_fd(),
                    self.buf.as_mut_ptr().cast(),
                    self.buf.len(),
                    libc::MSG_DONTWAIT,
                )
            };
            if n < 0 {
                match last_errno() {
                    libc::EAGAIN | libc::EINTR => return drained,
                    // ENOBUFS: the kernel dropped events; anything else: the socket is unusable.
                    _ => {
                        drained.overrun = true;
                        return drained;
                    }
                }
            }
            drained.datagrams += 1;
            if parse_datagram(&self.buf[..n as usize], out).is_err() {
                drained.overrun = true;
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn datagram(what: u32, ack: u32, data: &[u8]) -> Vec<u8> {
        let mut event = Vec::new();
        event.extend_from_slice(&what.to_ne_bytes());
        event.extend_from_slice(&3u32.to_ne_bytes()); // cpu
        event.extend_from_slice(&123_456u64.to_ne_bytes());
        event.extend_from_slice(data);
        let mut v = Vec::new();
        let total = NLMSG_HDR + CN_MSG_HDR + event.len();
        v.extend_from_slice(&(total as u32).to_ne_bytes());
        v.extend_from_slice(&NLMSG_DONE.to_ne_bytes());
        v.extend_from_slice(&0u16.to_ne_bytes());
        v.extend_from_slice(&7u32.to_ne_bytes());
        v.extend_from_slice(&0u32.to_ne_bytes());
        v.extend_from_slice(&CN_IDX_PROC.to_ne_bytes());
        v.extend_from_slice(&CN_VAL_PROC.to_ne_bytes());
        v.extend_from_slice(&7u32.to_ne_bytes());
        v.extend_from_slice(&ack.to_ne_bytes());
        v.extend_from_slice(&(event.len() as u16).to_ne_bytes());
        v.extend_from_slice(&0u16.to_ne_bytes());
        v.extend_from_slice(&event);
        v
    }

    fn ints(values: &[i32]) -> Vec<u8> {
        values.iter().flat_map(|v| v.to_ne_bytes()).collect()
    }

    #[test]
    fn parses_each_kind() {
        let mut out = Vec::new();
        parse_datagram(
            &datagram(PROC_EVENT_FORK, 0, &ints(&[10, 10, 11, 11])),
            &mut out,
        )
        .unwrap();
        parse_datagram(&datagram(PROC_EVENT_EXEC, 0, &ints(&[11, 11])), &mut out).unwrap();
        let mut comm = ints(&[12, 11]);
        comm.extend_from_slice(b"worker\0\0\0\0\0\0\0\0\0\0");
        parse_datagram(&datagram(PROC_EVENT_COMM, 0, &comm), &mut out).unwrap();
        parse_datagram(
            &datagram(PROC_EVENT_EXIT, 0, &ints(&[11, 11, 0, 17, 10, 10])),
            &mut out,
        )
        .unwrap();
        parse_datagram(&datagram(PROC_EVENT_NONE, 1, &ints(&[1])), &mut out).unwrap();
        parse_datagram(&datagram(0x4, 0, &ints(&[11, 11, 0, 0])), &mut out).unwrap(); // uid: skipped
        assert_eq!(
            out,
            vec![
                ProcEvent::Fork {
                    child_pid: 11,
                    child_tgid: 11
                },
                ProcEvent::Exec { pid: 11, tgid: 11 },
                ProcEvent::Comm { pid: 12, tgid: 11 },
                ProcEvent::Exit { pid: 11, tgid: 11 },
                ProcEvent::Ack { err: 1 },
            ]
        );
    }

    #[test]
    fn refuses_what_is_not_a_proc_event() {
        let mut out = Vec::new();
        let mut other = datagram(PROC_EVENT_EXEC, 0, &ints(&[1, 1]));
        other[NLMSG_HDR] = 9; // another connector index
        assert!(parse_datagram(&other, &mut out).is_err());
        assert!(parse_datagram(&datagram(PROC_EVENT_EXEC, 0, &ints(&[1])), &mut out).is_err());
        assert!(out.is_empty());
    }

    #[test]
    fn hostile_bytes_never_panic() {
        let good = datagram(PROC_EVENT_FORK, 0, &ints(&[10, 10, 11, 11]));
        let mut out = Vec::new();
        for len in 0..good.len() {
            let _ = parse_datagram(&good[..len], &mut out);
        }
        for i in 0..good.len() {
            for v in [0u8, 1, 0x7f, 0xff] {
                let mut bad = good.clone();
                bad[i] = v;
                let _ = parse_datagram(&bad, &mut out);
            }
        }
    }

    /// The real kernel (root): a process started after the subscription is reported (fork, exec, exit).
    #[test]
    fn real_events_of_a_child() {
        let mut events = match ProcEvents::open() {
            Ok(events) => events,
            Err(e) if !nix::unistd::Uid::effective().is_root() && !breadcrumb::in_ci() => {
                eprintln!("skipping: {e}");
                return;
            }
            Err(e) => panic!("proc connector unavailable as root: {e}"),
        };
        let mut child = std::process::Command::new("true").spawn().unwrap();
        let pid = child.id() as i32;
        assert!(child.wait().unwrap().success());
        let mut out = Vec::new();
        let until = std::time::Instant::now() + std::time::Duration::from_secs(5);
        while !out.contains(&ProcEvent::Exit { pid, tgid: pid })
            && std::time::Instant::now() < until
        {
            assert!(!events.drain(&mut out).overrun, "events lost");
            std::thread::sleep(std::time::Duration::from_millis(10));
        }
        for wanted in [
            ProcEvent::Fork {
                child_pid: pid,
                child_tgid: pid,
            },
            ProcEvent::Exec { pid, tgid: pid },
            ProcEvent::Exit { pid, tgid: pid },
        ] {
            assert!(out.contains(&wanted), "{wanted:?} not in {out:?}");
        }
    }
}
