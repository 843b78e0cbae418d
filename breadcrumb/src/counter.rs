//! The CPU counter a version-2 ring stamps records with, and its calibration to `CLOCK_MONOTONIC`.
//!
//! `clock_gettime(CLOCK_MONOTONIC)` through the vDSO reads the same hardware counter and then
//! scales it; on a KVM guest that costs ~30 ns, more than the whole rest of a record. A v2 writer
//! stores the raw counter instead and puts the calibration in the ring header (a `(counter,
//! CLOCK_MONOTONIC ns)` pair taken together, and the counter's frequency), so readers convert;
//! everything downstream still sees `CLOCK_MONOTONIC` nanoseconds.
//!
//! The counter is used only where it is one machine-wide, constant-rate clock that the kernel
//! itself keeps `CLOCK_MONOTONIC` on:
//! - x86_64: `rdtsc`, when the TSC is invariant (cpuid `0x80000007` EDX bit 8), the kernel's
//!   clocksource is `tsc` (it found the TSCs synchronised and stable), and this process may execute
//!   `rdtsc` (`prctl(PR_GET_TSC)`). Its frequency is measured against `CLOCK_MONOTONIC`.
//! - aarch64: `CNTVCT_EL0` (the generic timer's virtual count, readable at EL0 on Linux), when the
//!   clocksource is `arch_sys_counter`; its frequency is `CNTFRQ_EL0`.
//!
//! Anywhere else the writer falls back to `CLOCK_MONOTONIC` timestamps (counter kind 0).

use crate::identity;

/// Header `counter_kind`: slot times are nanoseconds of the header's `clock_id` (no counter).
pub const COUNTER_NONE: u32 = 0;
/// Header `counter_kind`: slot times are x86_64 TSC ticks (`rdtsc`).
pub const COUNTER_X86_TSC: u32 = 1;
/// Header `counter_kind`: slot times are aarch64 `CNTVCT_EL0` ticks.
pub const COUNTER_ARM_CNTVCT: u32 = 2;

/// Where the kernel names its clocksource (this crate's one `/sys` path, read once per ring).
pub const CLOCKSOURCE_PATH: &str =
    "/sys/devices/system/clocksource/clocksource0/current_clocksource";

/// How long the x86_64 writer measures the TSC against `CLOCK_MONOTONIC` at ring creation. The
/// writer refines the pair later (see `Writer`), so this only has to be good for the first second.
#[cfg(target_arch = "x86_64")]
const CALIBRATION_NS: u64 = 2_000_000;

/// The counter kinds a reader converts, with their names.
pub fn counter_name(kind: u32) -> Option<&'static str> {
    match kind {
        COUNTER_NONE => Some("none"),
        COUNTER_X86_TSC => Some("x86_64 TSC (rdtsc)"),
        COUNTER_ARM_CNTVCT => Some("aarch64 CNTVCT_EL0"),
        _ => None,
    }
}

/// The counter a writer stamps records with, once it has decided it may.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Counter {
    /// `COUNTER_X86_TSC` or `COUNTER_ARM_CNTVCT`.
    pub kind: u32,
    /// Ticks per second.
    pub hz: u64,
    /// A counter value read together with `monotonic_ns`.
    pub counter_at: u64,
    /// `CLOCK_MONOTONIC` at `counter_at`.
    pub monotonic_ns: u64,
}

/// The raw counter now. Only meaningful where [`detect`] returned a counter.
#[inline(always)]
pub fn read() -> u64 {
    #[cfg(target_arch = "x86_64")]
    {
        // SAFETY: rdtsc has no memory effects; `detect` made sure this process may execute it.
        unsafe { core::arch::x86_64::_rdtsc() }
    }
    #[cfg(target_arch = "aarch64")]
    {
        let ticks: u64;
        // SAFETY: reads the virtual count register, which Linux makes readable at EL0; no memory
        // is touched and no flags change.
        unsafe {
            core::arch::asm!("mrs {}, cntvct_el0", out(reg) ticks, options(nomem, nostack, preserves_flags))
        };
        ticks
    }
    #[cfg(not(any(target_arch = "x86_64", target_arch = "aarch64")))]
    {
        identity::monotonic_ns()
    }
}

/// A `(counter, CLOCK_MONOTONIC)` pair read as close together as this machine allows: the clock
/// read bracketed by two counter reads, the tightest of a few tries, the counter at its middle.
pub fn pair() -> (u64, u64) {
    let mut best = (u64::MAX, 0u64, 0u64);
    for _ in 0..5 {
        let before = read();
        let ns = identity::monotonic_ns();
        let after = read();
        let width = after.wrapping_sub(before);
        if width < best.0 {
            best = (width, before.wrapping_add(width / 2), ns);
        }
    }
    (best.1, best.2)
}

/// What one timestamp costs on this machine, measured: the counter read and the vDSO
/// `clock_gettime(CLOCK_MONOTONIC)` (ns per read, the best of a few rounds). A VM can make the
/// counter slow (TSC scaling, or a hypervisor that traps `rdtsc`), so the writer measures rather
/// than assumes which is cheaper ([`choose`]).
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct ReadCosts {
    pub counter_ns: f64,
    pub monotonic_ns: f64,
}

/// Reads per measured round, and rounds: ~3 × 256 × (counter + clock) reads, tens of µs once per ring.
const COST_READS: u32 = 256;
const COST_ROUNDS: usize = 3;

/// Measures [`ReadCosts`] now (only meaningful where [`detect`] returned a counter).
pub fn measure_read_costs() -> ReadCosts {
    let per_read = |read: &dyn Fn() -> u64| -> f64 {
        (0..COST_ROUNDS)
            .map(|_| {
                let start = identity::monotonic_ns();
                let mut sink = 0u64;
                for _ in 0..COST_READS {
                    sink = sink.wrapping_add(std::hint::black_box(read()));
                }
                std::hint::black_box(sink);
                identity::monotonic_ns().saturating_sub(start) as f64 / f64::from(COST_READS)
            })
            .fold(f64::INFINITY, f64::min)
    };
    ReadCosts {
        counter_ns: per_read(&read),
        monotonic_ns: per_read(&identity::monotonic_ns),
    }
}

/// The counter if it is usable here and its read is not dearer than `CLOCK_MONOTONIC`'s (both
/// keep the ring's resolution promise, docs/breadcrumb-ring.md); `None` means stamp with
/// `clock_gettime(CLOCK_MONOTONIC)`. Also returns the measured costs (None without a counter).
pub fn choose() -> (Option<Counter>, Option<ReadCosts>) {
    let Some(counter) = detect() else {
        return (None, None);
    };
    let costs = measure_read_costs();
    let chosen = (costs.counter_ns <= costs.monotonic_ns).then_some(counter);
    (chosen, Some(costs))
}

/// The counter this process may use, calibrated, or `None` (use `CLOCK_MONOTONIC`).
pub fn detect() -> Option<Counter> {
    let clocksource = std::fs::read(CLOCKSOURCE_PATH).ok()?;
    detect_for(clocksource.trim_ascii())
}

#[cfg(target_arch = "x86_64")]
fn detect_for(clocksource: &[u8]) -> Option<Counter> {
    if clocksource != b"tsc" || !tsc_is_invariant() || !tsc_allowed() {
        return None;
    }
    let (c0, m0) = pair();
    let mut now = (c0, m0);
    while now.1.saturating_sub(m0) < CALIBRATION_NS {
        std::hint::spin_loop();
        now = pair();
    }
    let (c1, m1) = now;
    let hz = ticks_per_second(c1.wrapping_sub(c0), m1 - m0)?;
    Some(Counter {
        kind: COUNTER_X86_TSC,
        hz,
        counter_at: c1,
        monotonic_ns: m1,
    })
}

#[cfg(target_arch = "aarch64")]
fn detect_for(clocksource: &[u8]) -> Option<Counter> {
    if clocksource != b"arch_sys_counter" {
        return None;
    }
    let hz: u64;
    // SAFETY: reads the counter-frequency register (readable at EL0); no memory touched.
    unsafe {
        core::arch::asm!("mrs {}, cntfrq_el0", out(reg) hz, options(nomem, nostack, preserves_flags))
    };
    if hz == 0 {
        return None;
    }
    let (counter_at, monotonic_ns) = pair();
    Some(Counter {
        kind: COUNTER_ARM_CNTVCT,
        hz,
        counter_at,
        monotonic_ns,
    })
}

#[cfg(not(any(target_arch = "x86_64", target_arch = "aarch64")))]
fn detect_for(_clocksource: &[u8]) -> Option<Counter> {
    None
}

/// `ticks` per `ns` nanoseconds as ticks per second, if both are non-zero.
pub fn ticks_per_second(ticks: u64, ns: u64) -> Option<u64> {
    if ticks == 0 || ns == 0 {
        return None;
    }
    u64::try_from(u128::from(ticks) * 1_000_000_000 / u128::from(ns))
        .ok()
        .filter(|&hz| hz > 0)
}

/// Converts a counter value to `CLOCK_MONOTONIC` ns through the line of slope `hz` ticks per second
/// through `(anchor_counter, anchor_ns)`; saturates at 0 and `u64::MAX`, never panics (the inputs
/// come from a hostile file).
pub fn to_monotonic_ns(counter: u64, anchor_counter: u64, anchor_ns: u64, hz: u64) -> u64 {
    if hz == 0 {
        return anchor_ns;
    }
    let delta = i128::from(counter) - i128::from(anchor_counter);
    let ns = i128::from(anchor_ns) + delta * 1_000_000_000 / i128::from(hz);
    ns.clamp(0, i128::from(u64::MAX)) as u64
}

#[cfg(target_arch = "x86_64")]
#[allow(unused_unsafe)] // `__cpuid` is safe since Rust 1.87; the crate builds with 1.80 too.
fn tsc_is_invariant() -> bool {
    // SAFETY: cpuid is available on every x86_64 CPU and only reads identification registers.
    let max_extended = unsafe { core::arch::x86_64::__cpuid(0x8000_0000) }.eax;
    if max_extended < 0x8000_0007 {
        return false;
    }
    // SAFETY: as above; the leaf exists (checked against the maximum extended leaf).
    let power = unsafe { core::arch::x86_64::__cpuid(0x8000_0007) };
    power.edx & (1 << 8) != 0
}

#[cfg(target_arch = "x86_64")]
fn tsc_allowed() -> bool {
    let mut state: libc::c_int = 0;
    // SAFETY: PR_GET_TSC writes one int through the pointer, which points to `state`.
    let rc = unsafe { libc::prctl(libc::PR_GET_TSC, &mut state as *mut libc::c_int) };
    rc == 0 && state == libc::PR_TSC_ENABLE
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn conversion_is_the_line_through_the_anchor() {
        let hz = 2_000_000_000;
        assert_eq!(to_monotonic_ns(1_000, 1_000, 5_000, hz), 5_000);
        assert_eq!(to_monotonic_ns(3_000, 1_000, 5_000, hz), 6_000);
        assert_eq!(to_monotonic_ns(0, 1_000, 5_000, hz), 4_500);
        assert_eq!(to_monotonic_ns(0, u64::MAX, 5, 1), 0, "saturates below");
        assert_eq!(
            to_monotonic_ns(u64::MAX, 0, u64::MAX, 1),
            u64::MAX,
            "saturates above"
        );
        assert_eq!(to_monotonic_ns(7, 1, 9, 0), 9, "no frequency: the anchor");
        assert_eq!(ticks_per_second(3_000_000, 1_000_000), Some(3_000_000_000));
        assert_eq!(ticks_per_second(0, 1), None);
        assert_eq!(ticks_per_second(1, 0), None);
    }

    #[test]
    fn the_choice_follows_the_measured_costs() {
        let (chosen, costs) = choose();
        match (detect(), costs) {
            (None, _) => assert!(chosen.is_none() && costs.is_none()),
            (Some(_), None) => panic!("a usable counter, yet no costs measured"),
            (Some(_), Some(costs)) => {
                assert!(costs.counter_ns > 0.0 && costs.counter_ns.is_finite());
                assert!(costs.monotonic_ns > 0.0 && costs.monotonic_ns.is_finite());
                // The decision is the comparison of what was measured (the same call's numbers).
                assert_eq!(chosen.is_some(), costs.counter_ns <= costs.monotonic_ns);
            }
        }
    }

    #[test]
    fn counter_names() {
        assert_eq!(counter_name(COUNTER_NONE), Some("none"));
        assert!(counter_name(COUNTER_X86_TSC).is_some());
        assert!(counter_name(COUNTER_ARM_CNTVCT).is_some());
        assert_eq!(counter_name(9), None);
    }

    /// On this machine (x86_64 KVM guest, clocksource tsc, invariant TSC) the counter must be
    /// chosen and agree with CLOCK_MONOTONIC; elsewhere, whatever `detect` says must be consistent.
    #[test]
    fn detected_counter_tracks_the_monotonic_clock() {
        let clocksource = std::fs::read(CLOCKSOURCE_PATH).unwrap_or_default();
        let Some(counter) = detect() else {
            #[cfg(target_arch = "x86_64")]
            assert!(
                clocksource.trim_ascii() != b"tsc" || !tsc_is_invariant() || !tsc_allowed(),
                "tsc clocksource, invariant and allowed, yet no counter"
            );
            #[cfg(target_arch = "aarch64")]
            assert_ne!(
                clocksource.trim_ascii(),
                b"arch_sys_counter",
                "arch_sys_counter clocksource, yet no counter"
            );
            let _ = clocksource;
            return;
        };
        assert!(counter.hz >= 1_000_000, "{} Hz", counter.hz);
        std::thread::sleep(std::time::Duration::from_millis(50));
        let (c, m) = pair();
        let converted = to_monotonic_ns(c, counter.counter_at, counter.monotonic_ns, counter.hz);
        let error = converted.abs_diff(m);
        // 50 ms after a 2 ms calibration: well under 0.1 % (50 µs).
        assert!(
            error < 50_000,
            "converted {converted} vs monotonic {m}: {error} ns off"
        );
    }
}
