//! A time with its clocks ([`Timestamp`]): wall, monotonic (the ring's clock) and boottime.

use chrono::{DateTime, Utc};
use serde::{Deserialize, Serialize};

/// One instant on every clock that was read. A clock that was not read is None.
#[derive(Debug, Clone, PartialEq, Eq, Default, Serialize, Deserialize)]
#[serde(default)]
pub struct Timestamp {
    /// CLOCK_REALTIME, RFC 3339 in UTC. Jumps with NTP and settimeofday; for humans.
    pub wall: Option<DateTime<Utc>>,
    /// CLOCK_MONOTONIC in nanoseconds: the breadcrumb ring's clock; stops during suspend.
    pub monotonic_ns: Option<u64>,
    /// CLOCK_BOOTTIME in nanoseconds: like monotonic, but counts suspend.
    pub boottime_ns: Option<u64>,
}

impl Timestamp {
    /// Read all three clocks now.
    pub fn now() -> Timestamp {
        Timestamp {
            wall: Some(Utc::now()),
            monotonic_ns: clock_ns(nix::time::ClockId::CLOCK_MONOTONIC),
            boottime_ns: clock_ns(nix::time::ClockId::CLOCK_BOOTTIME),
        }
    }

    /// A past CLOCK_MONOTONIC time on this boot with its wall-clock and boot-time equivalents: each clock now
    /// minus the monotonic time elapsed since (exact to the nanosecond unless the host was suspended in
    /// between or the wall clock was stepped; the boot time from /proc/stat's `btime` plus the monotonic
    /// time gives the same within its one-second resolution). A time after now keeps only `monotonic_ns`.
    pub fn at_monotonic(ns: u64) -> Timestamp {
        let now = Timestamp::now();
        let Some(elapsed) = now.monotonic_ns.and_then(|now| now.checked_sub(ns)) else {
            return Timestamp::monotonic(ns);
        };
        Timestamp {
            wall: now.wall.and_then(|wall| {
                wall.checked_sub_signed(chrono::Duration::nanoseconds(i64::try_from(elapsed).ok()?))
            }),
            monotonic_ns: Some(ns),
            boottime_ns: now.boottime_ns.and_then(|b| b.checked_sub(elapsed)),
        }
    }

    /// Only a monotonic time (e.g. a ring record's).
    pub fn monotonic(ns: u64) -> Timestamp {
        Timestamp {
            monotonic_ns: Some(ns),
            ..Timestamp::default()
        }
    }
}

fn clock_ns(clock: nix::time::ClockId) -> Option<u64> {
    let ts = nix::time::clock_gettime(clock).ok()?;
    let secs = u64::try_from(ts.tv_sec()).ok()?;
    let nanos = u64::try_from(ts.tv_nsec()).ok()?;
    secs.checked_mul(1_000_000_000)?.checked_add(nanos)
}
