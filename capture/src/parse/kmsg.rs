//! `/dev/kmsg` records: `pri,seq,usec,flags[,…];message` then optional ` KEY=value` continuation
//! lines; pure parser, wedge-signature flags and the window selection. [`crate::kmsg`] reads the device.

use serde::{Deserialize, Serialize};

use super::err;
use crate::error::Result;

/// One kernel log record.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct KmsgRecord {
    /// Sequence number (gaps mean lost records).
    pub seq: u64,
    /// Log level 0 (emerg) … 7 (debug).
    pub level: u8,
    pub facility: u8,
    /// Microseconds since boot (the printk clock, CLOCK_MONOTONIC-like).
    pub usec: u64,
    /// The message text (the first line of the record; escapes as the kernel wrote them).
    pub message: String,
    /// Why the line matters, when it matches a known wedge signature (e.g. `nvrm`, `xid`, `hung-task`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub flag: Option<String>,
}

/// Parse one `/dev/kmsg` record (pure).
pub fn parse_record(bytes: &[u8]) -> Result<KmsgRecord> {
    let semi = bytes
        .iter()
        .position(|&b| b == b';')
        .ok_or_else(|| err("kmsg record", "no ';' after the prefix"))?;
    let prefix = std::str::from_utf8(&bytes[..semi])
        .map_err(|_| err("kmsg record", "prefix is not text"))?;
    let mut fields = prefix.split(',');
    let mut number = |what: &str| -> Result<u64> {
        fields
            .next()
            .ok_or_else(|| err("kmsg record", format!("missing {what}")))?
            .trim()
            .parse::<u64>()
            .map_err(|_| err("kmsg record", format!("bad {what}")))
    };
    let pri = number("priority")?;
    let seq = number("sequence number")?;
    let usec = number("timestamp")?;
    let rest = &bytes[semi + 1..];
    // The message ends at the first newline; continuation lines (" KEY=value") follow it.
    let end = rest.iter().position(|&b| b == b'\n').unwrap_or(rest.len());
    let message = String::from_utf8_lossy(&rest[..end]).into_owned();
    let flag = classify(&message).map(str::to_string);
    Ok(KmsgRecord {
        seq,
        level: (pri & 7) as u8,
        facility: (pri >> 3).min(255) as u8,
        usec,
        message,
        flag,
    })
}

/// Known wedge signatures in kernel messages.
pub fn classify(message: &str) -> Option<&'static str> {
    if message.contains("fallen off the bus") {
        Some("gpu-off-bus")
    } else if message.contains("NVRM: Xid") || message.contains("Xid (") {
        Some("xid")
    } else if message.contains("blocked for more than") {
        Some("hung-task")
    } else if message.contains("NVRM") {
        Some("nvrm")
    } else if message.contains("nvidia-uvm") || message.contains("nvidia_uvm") {
        Some("nvidia-uvm")
    } else {
        None
    }
}

/// Messages that end the kernel's own boot: init runs after them. Every line at or before one is a boot line.
const BOOT_END_MARKERS: &[&str] = &[
    "Run /sbin/init as init process",
    "Run /init as init process",
    "Run /usr/lib/systemd/systemd as init process",
    "Freeing unused kernel image",
    "Freeing unused kernel memory",
    "Write protecting the kernel read-only data",
];

/// Prefixes of messages only the booting kernel (or a device being set up) prints: firmware tables, interrupt
/// routing, bus enumeration, CPU bring-up, memory map. They name numbers in brackets (`IOAPIC[0]`,
/// `pci 0000:00:1f.0: [8086:a323]`) that look like pids, but no process.
const BOOT_PREFIXES: &[&str] = &[
    "Linux version",
    "Command line:",
    "Kernel command line:",
    "BIOS",
    "e820",
    "DMI:",
    "ACPI",
    "IOAPIC",
    "ioapic",
    "APIC",
    "x2apic",
    "LAPIC",
    "pci ",
    "pci_bus",
    "PCI",
    "pcieport",
    "smpboot",
    "smp:",
    "x86/",
    "tsc:",
    "clocksource",
    "Memory:",
    "Zone ranges",
    "NUMA",
    "SRAT",
    "percpu:",
    "rcu:",
    "Booting ",
    "CPU",
    "mem auto-init",
    "Dentry cache",
    "Inode-cache",
    "Mount-cache",
    "random:",
    "microcode",
    "iommu",
    "DMAR",
    "AMD-Vi",
    "software IO TLB",
];

/// The printk time (µs since boot) of the last boot message among `(usec, message)` lines, when the kernel's
/// own boot is in them.
pub fn boot_end_usec<'a>(lines: impl IntoIterator<Item = (u64, &'a str)>) -> Option<u64> {
    lines
        .into_iter()
        .filter(|(_, m)| BOOT_END_MARKERS.iter().any(|b| m.contains(b)))
        .map(|(us, _)| us)
        .max()
}

/// A line of the kernel's boot or of device bring-up: printed at or before `boot_end` (when known), or one
/// of the messages only boot and device setup print. Never "another process".
pub fn is_boot_line(usec: u64, message: &str, boot_end: Option<u64>) -> bool {
    boot_end.is_some_and(|end| usec <= end)
        || BOOT_PREFIXES
            .iter()
            .any(|p| message.trim_start().starts_with(p))
}

/// What to keep from the log.
#[derive(Debug, Clone, Copy)]
pub struct KmsgWindow {
    /// Keep records at or after this printk time (µs since boot).
    pub since_usec: u64,
    /// At most this many records of the window (the newest are kept).
    pub max_recent: usize,
    /// At most this many flagged records from before the window (the newest are kept).
    pub max_flagged_before: usize,
}

/// Select what to keep from parsed records (pure; used by [`crate::kmsg::read_around`]).
pub fn select(
    records: impl IntoIterator<Item = KmsgRecord>,
    window: &KmsgWindow,
) -> Vec<KmsgRecord> {
    let mut before_flagged: std::collections::VecDeque<KmsgRecord> = Default::default();
    let mut recent: std::collections::VecDeque<KmsgRecord> = Default::default();
    for record in records {
        if record.usec >= window.since_usec {
            recent.push_back(record);
            if recent.len() > window.max_recent {
                let dropped = recent.pop_front();
                // A flagged line pushed out of the window still matters.
                if let Some(dropped) = dropped.filter(|r| r.flag.is_some()) {
                    before_flagged.push_back(dropped);
                }
            }
        } else if record.flag.is_some() {
            before_flagged.push_back(record);
        }
        while before_flagged.len() > window.max_flagged_before {
            before_flagged.pop_front();
        }
    }
    before_flagged.into_iter().chain(recent).collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn parses_a_record_with_continuation_lines() {
        let rec = parse_record(
            b"4,1234,5678901,-;NVRM: Xid (PCI:0000:01:00): 79, GPU has fallen off the bus.\n SUBSYSTEM=pci\n DEVICE=+pci:0000:01:00.0\n",
        )
        .unwrap();
        assert_eq!(rec.level, 4);
        assert_eq!(rec.facility, 0);
        assert_eq!(rec.seq, 1234);
        assert_eq!(rec.usec, 5_678_901);
        assert_eq!(
            rec.message,
            "NVRM: Xid (PCI:0000:01:00): 79, GPU has fallen off the bus."
        );
        assert_eq!(rec.flag.as_deref(), Some("gpu-off-bus"));
    }

    #[test]
    fn parses_extra_prefix_fields_and_facility() {
        let rec = parse_record(b"30,7,100,c,caller=T12;systemd[1]: started\n").unwrap();
        assert_eq!(rec.level, 6);
        assert_eq!(rec.facility, 3);
        assert_eq!(rec.message, "systemd[1]: started");
        assert_eq!(rec.flag, None);
    }

    #[test]
    fn flags_known_signatures() {
        assert_eq!(
            classify("INFO: task python:1234 blocked for more than 120 seconds."),
            Some("hung-task")
        );
        assert_eq!(
            classify("NVRM: GPU at PCI:0000:01:00: GPU-abc"),
            Some("nvrm")
        );
        assert_eq!(
            classify("NVRM: Xid (PCI:0000:01:00): 31, pid=1"),
            Some("xid")
        );
        assert_eq!(classify("usb 1-1: new device"), None);
    }

    #[test]
    fn rejects_garbage_without_panicking() {
        for bad in [
            &b""[..],
            b"no semicolon",
            b"a,b,c;x",
            b"1,2;short",
            b"\xff\xfe;x",
            b"1,2,99999999999999999999999;x",
        ] {
            assert!(parse_record(bad).is_err(), "{bad:?}");
        }
        // Invalid UTF-8 in the message is kept lossily.
        let rec = parse_record(b"6,1,2,-;bad \xff byte").unwrap();
        assert!(rec.message.starts_with("bad "));
    }

    #[test]
    fn boot_lines_by_time_and_by_message() {
        let lines = [
            (
                10,
                "IOAPIC[0]: apic_id 0, version 32, address 0xfec00000, GSI 0-23",
            ),
            (1_500_000, "Run /sbin/init as init process"),
            (2_000_000, "systemd[1]: Started Journal Service."),
        ];
        let end = boot_end_usec(lines.iter().copied());
        assert_eq!(end, Some(1_500_000));
        assert!(is_boot_line(10, lines[0].1, end));
        assert!(!is_boot_line(2_000_000, lines[2].1, end));
        // Without the marker in the window, the message tells.
        assert!(is_boot_line(
            90_000_000,
            "pci 0000:00:1f.0: [8086:a323] type 00 class 0x0c0500",
            None
        ));
        assert!(!is_boot_line(
            90_000_000,
            "INFO: task python3:4242 blocked for more than 120 seconds.",
            None
        ));
    }

    fn rec(seq: u64, usec: u64, msg: &str) -> KmsgRecord {
        parse_record(format!("6,{seq},{usec},-;{msg}").as_bytes()).unwrap()
    }

    #[test]
    fn keeps_the_window_and_flagged_lines_before_it() {
        let records = vec![
            rec(1, 10, "boot"),
            rec(2, 20, "NVRM: loading"),
            rec(3, 30, "noise"),
            rec(4, 100, "in window a"),
            rec(5, 110, "in window b"),
            rec(6, 120, "in window c"),
        ];
        let kept = select(
            records,
            &KmsgWindow {
                since_usec: 100,
                max_recent: 2,
                max_flagged_before: 10,
            },
        );
        let seqs: Vec<u64> = kept.iter().map(|r| r.seq).collect();
        assert_eq!(seqs, vec![2, 5, 6]);
    }
}
