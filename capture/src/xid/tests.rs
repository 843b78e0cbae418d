//! Every printed shape of an Xid/SXid line, each from a public source named above it (lines retyped, with the
//! fields that matter kept as printed).

use super::paste::{markdown, scan, tie};
use super::*;

fn xid(line: &str) -> XidEvent {
    parse_xid_line(line.as_bytes()).unwrap_or_else(|| panic!("no Xid in {line:?}"))
}

/// https://github.com/NVIDIA/NVSentinel/issues/155 (comment): the current shape without pid or name.
#[test]
fn fallen_off_the_bus_without_pid() {
    let e = xid("NVRM: Xid (PCI:0000:44:00): 79, GPU has fallen off the bus.");
    assert_eq!(e.kind, XidKind::Xid);
    assert_eq!((e.xid, e.device.as_str()), (79, "0000:44:00"));
    assert_eq!((e.pid, e.name.as_deref()), (None, None));
    assert_eq!(e.detail, "GPU has fallen off the bus.");
    assert_eq!(e.meaning.as_deref(), Some("GPU has fallen off the bus"));
    assert!(e.action.as_deref().unwrap().contains("reboot the node"));
    assert_eq!(e.summary(), "Xid 79 (GPU has fallen off the bus)");
}

/// https://github.com/leptonai/gpud/pull/46 (dmesg --ctime): `pid='<unknown>', name=<unknown>` and a `dmesg -T`
/// prefix (a wall time, no printk time); then a real pid and name.
#[test]
fn unknown_pid_and_name_and_ctime_prefix() {
    let e = xid("[Fri Aug 30 11:43:09 2024] NVRM: Xid (PCI:0000:cb:00): 13, pid='<unknown>', name=<unknown>, Graphics SM Warp Exception on (GPC 7, TPC 7, SM 0): Illegal Instruction Parameter");
    assert_eq!((e.xid, e.device.as_str()), (13, "0000:cb:00"));
    assert_eq!(
        (e.pid, e.name.as_deref(), e.kernel_time_us),
        (None, None, None)
    );
    assert!(
        e.detail.starts_with("Graphics SM Warp Exception on (GPC 7"),
        "{}",
        e.detail
    );
    let e = xid("[Fri Aug 30 11:43:14 2024] NVRM: Xid (PCI:0000:cb:00): 109, pid=1797828, name=pt_main_thread, Ch 00000008, errorString CTX SWITCH TIMEOUT, Info 0x58005");
    assert_eq!(
        (e.xid, e.pid, e.name.as_deref()),
        (109, Some(1_797_828), Some("pt_main_thread"))
    );
    assert_eq!(
        e.detail,
        "Ch 00000008, errorString CTX SWITCH TIMEOUT, Info 0x58005"
    );
}

/// https://github.com/NVIDIA/open-gpu-kernel-modules/issues/1150 (journalctl -k, `kernel:` prefix): pid and name,
/// an Xid 45 that names the Xid before it.
#[test]
fn journal_prefix_pid_and_name() {
    let e = xid("kernel: NVRM: Xid (PCI:0000:dc:00): 45, pid=1818990, name=python3, Ch 00000001 caused by previous Xid 149");
    assert_eq!(
        (e.xid, e.pid, e.name.as_deref()),
        (45, Some(1_818_990), Some("python3"))
    );
    assert_eq!(e.detail, "Ch 00000001 caused by previous Xid 149");
    // https://github.com/NixOS/nixpkgs/issues/539036: a full journal line, a name starting with a dot.
    let e = xid("Jul 06 20:02:59 gaming kernel: NVRM: Xid (PCI:0000:01:00): 13, pid=1773, name=.gala-wrapped, Graphics Exception: channel 0x00000005, Class 0000c997, Offset 00000000, Data");
    assert_eq!(
        (e.pid, e.name.as_deref()),
        (Some(1773), Some(".gala-wrapped"))
    );
}

/// https://github.com/Bumblebee-Project/Bumblebee/issues/677: dmesg `[ sec.usec]` prefixes, no pid; Xid 32, 31.
#[test]
fn dmesg_time_prefix() {
    let e = xid("[24128.828315] NVRM: Xid (PCI:0000:01:00): 32, Channel ID 00000000 intr 00004000");
    assert_eq!((e.xid, e.kernel_time_us), (32, Some(24_128_828_315)));
    assert_eq!(e.detail, "Channel ID 00000000 intr 00004000");
    let e = xid("[24128.834365] NVRM: Xid (PCI:0000:01:00): 31, Ch 00000003, engmask 00000101, intr 10000000");
    assert_eq!(e.xid, 31);
    assert_eq!(e.meaning.as_deref(), Some("GPU memory page fault"));
}

/// https://pastebin.com/gn6mYmM4 and https://pastebin.com/NGng33SB: old drivers print no `PCI:`, syslog and
/// dmesg prefixes together.
#[test]
fn old_drivers_without_pci_prefix() {
    let e = xid("May 6 00:38:27 alex kernel: [ 4909.922970] NVRM: Xid (0000:01:00): 13, 0005 00000000 0000502d 00000104 00000000 00000100");
    assert_eq!((e.xid, e.device.as_str()), (13, "0000:01:00"));
    assert_eq!(e.kernel_time_us, Some(4_909_922_970));
    assert_eq!(e.pid, None);
    let e = xid("Nov 22 18:29:55 hostname kernel: [ 966.503025] NVRM: Xid (0000:01:00): 31, Ch 0000000b, engmask 00000120, intr 10000000");
    assert_eq!((e.xid, e.kernel_time_us), (31, Some(966_503_025)));
}

/// https://gist.github.com/kohsuke/84ce815d0a8ad85ecaf6: Xid 69 and 62 of one episode.
#[test]
fn class_error_and_micro_controller_halt() {
    let e = xid("Dec 23 23:30:56 rescue kernel: [ 179.438803] NVRM: Xid (PCI:0000:01:00): 69, Class Error: ChId 0005, Class 0000a097, Offset 00000d9c, Data ffffffff, ErrorCode 0000000c");
    assert_eq!(e.xid, 69);
    let e = xid("Dec 23 23:32:27 rescue kernel: [ 270.439207] NVRM: Xid (PCI:0000:01:00): 62, 0096(1c54) 00000000 00000000");
    assert_eq!(
        (e.xid, e.detail.as_str()),
        (62, "0096(1c54) 00000000 00000000")
    );
}

/// https://github.com/leptonai/gpud/pull/1174 (kmsg input): an ECC Xid with pid and name; NVLink Xid 149 with its
/// severity and link; https://github.com/leptonai/gpud/pull/1160: a non-fatal NVLink Xid 144.
#[test]
fn ecc_and_nvlink_xids() {
    let e = xid("NVRM: Xid (PCI:0000:9b:00): 94, pid=1234, name=python3, Contained ECC error");
    assert_eq!(
        (e.xid, e.pid, e.detail.as_str()),
        (94, Some(1234), "Contained ECC error")
    );
    let e = xid("NVRM: Xid (PCI:0000:00:00): 149, NETIR_LINK_EVT Fatal XC0 i0 Link 00 (0x025001c6 0x00000000 0x00000000 0x00000000 0x00000000 0x00000000)");
    assert_eq!(
        (e.xid, e.severity.as_deref(), e.link),
        (149, Some("Fatal"), Some(0))
    );
    let e = xid("NVRM: Xid (PCI:0000:01:00): 144, SAW_MVB Nonfatal XC0 i0 Link 0 (0x00000001 0x00000008 0x00000000 0x00000000 0x00000000 0x00000000)");
    assert_eq!((e.severity.as_deref(), e.link), (Some("Nonfatal"), Some(0)));
    let e = xid("NVRM: Xid (PCI:0019:01:00): 149, NETIR Fatal XC0 i0 Link -1 (0x000fe406 0x00000000 0x00000000 0x00000000 0x00000000 0x00000000)");
    assert_eq!((e.device.as_str(), e.link), ("0019:01:00", None));
}

/// https://github.com/NVIDIA/nvtrust/issues/124: NVSwitch SXid lines (a dmesg prefix, the switch's name, a PCI
/// function), their three printed forms (data, severity and link, engine).
#[test]
fn nvswitch_sxids() {
    let e = xid("[   38.178720] nvidia-nvswitch3: SXid (PCI:0000:04:00.0): 22013, Non-fatal, Link 44 Minion Link DLREQ interrupt");
    assert_eq!(e.kind, XidKind::Sxid);
    assert_eq!((e.xid, e.device.as_str()), (22013, "0000:04:00.0"));
    assert_eq!(e.switch.as_deref(), Some("nvidia-nvswitch3"));
    assert_eq!(
        (e.severity.as_deref(), e.link),
        (Some("Non-fatal"), Some(44))
    );
    assert_eq!(e.kernel_time_us, Some(38_178_720));
    assert_eq!(e.label(), "SXid 22013");
    assert_eq!((e.meaning.as_deref(), e.pid), (None, None));
    let e = xid("[   38.175561] nvidia-nvswitch3: SXid (PCI:0000:04:00.0): 22013, Data {0x0000002b, 0x0000002b, 0x00000000, 0x0000002b, 0x80005302, 0x00000000, 0x00000000, 0x00000000, 0x00000000}");
    assert!(e.detail.starts_with("Data {0x0000002b"));
    assert_eq!(metric_label(&e), "sxid");
    // https://github.com/leptonai/gpud/pull/338: a `dmesg -x` level column and an ISO time.
    let e = xid("kern  :err   : 2025-01-25T10:34:54,859532+00:00 nvidia-nvswitch1: SXid (PCI:0000:84:00.0): 12028, Data {0x000001c0, 0x00bd5c8a}");
    assert_eq!(
        (e.xid, e.switch.as_deref()),
        (12028, Some("nvidia-nvswitch1"))
    );
}

/// Raw /dev/kmsg records (`pri,seq,usec,flags;`), and printk level prefixes.
#[test]
fn kmsg_and_level_prefixes() {
    let e = xid("4,1234,5678901,-;NVRM: Xid (PCI:0000:01:00): 79, pid=977, name=python3, GPU has fallen off the bus.");
    assert_eq!((e.kernel_time_us, e.pid), (Some(5_678_901), Some(977)));
    let e = xid("6,1234,5678,-,caller=T12;NVRM: Xid (PCI:0000:3b:00): 48, pid=4242, name=trainer, An uncorrectable double bit error (DBE) has been detected on GPU in the framebuffer at partition 6, subpartition 0.");
    assert_eq!(
        (e.xid, e.kernel_time_us, e.name.as_deref()),
        (48, Some(5678), Some("trainer"))
    );
    let e = xid("<4>[  12.500000] NVRM: Xid (PCI:0000:3b:00): 119, pid='N/A', Timeout waiting for RPC from GSP");
    assert_eq!(
        (e.xid, e.pid, e.kernel_time_us),
        (119, None, Some(12_500_000))
    );
    assert_eq!(e.detail, "Timeout waiting for RPC from GSP");
}

#[test]
fn lines_that_are_no_xid_are_none_never_a_panic() {
    for line in [
        "",
        "NVRM: GPU at PCI:0000:01:00: GPU-abc",
        "NVRM: The NVIDIA GPU 0000:b3:00.0",
        "NVRM: Xid",
        "NVRM: Xid (",
        "NVRM: Xid (PCI:0000:01:00)",
        "NVRM: Xid (PCI:0000:01:00): ",
        "NVRM: Xid (PCI:0000:01:00): x, 1",
        "NVRM: Xid (PCI:0000:01:00): 99999999999, overflow",
        "NVRM: Xid (PCI:zz:00): 79, not a device",
        "NVRM: Xid (): 79, empty device",
        "python: I saw Xid (PCI:0000:01:00): 79 once",
        "SXid",
        "[ 1.2] SXid (",
        "6,1,2,-;",
        "\u{feff}\u{202e}NVRM: Xid",
    ] {
        assert_eq!(parse_xid_line(line.as_bytes()), None, "{line:?}");
    }
    assert_eq!(parse_xid_line(&[0xff, 0xfe, b'X', b'i', b'd']), None);
    let long = format!("NVRM: Xid (PCI:0000:01:00): 79, {}", "x".repeat(5000));
    assert_eq!(parse_xid_line(long.as_bytes()), None);
    // Fields stay bounded.
    let e = xid(&format!(
        "NVRM: Xid (PCI:0000:01:00): 13, pid=5, name={}, {}",
        "n".repeat(200),
        "d".repeat(1000)
    ));
    assert_eq!(e.name.unwrap().len(), MAX_FIELD);
    assert_eq!(e.detail.len(), MAX_DETAIL);
}

#[test]
fn the_metric_label_set_is_bounded() {
    assert_eq!(
        metric_label(&xid("NVRM: Xid (PCI:0000:01:00): 79, x")),
        "79"
    );
    assert_eq!(
        metric_label(&xid("NVRM: Xid (PCI:0000:01:00): 4000000, x")),
        "other"
    );
    let labels: std::collections::BTreeSet<String> = (0..100_000u32)
        .map(|n| metric_label(&xid(&format!("NVRM: Xid (PCI:0000:01:00): {n}, x"))))
        .collect();
    assert_eq!(labels.len(), catalog::entries().len() + 1, "{labels:?}");
}

/// `explain`'s view: Xids of a paste tied to its tasks by pid, else by name; text the paste chose stays inert.
#[test]
fn a_paste_ties_its_xids_to_its_tasks() {
    let text = "[  100.000000] NVRM: Xid (PCI:0000:3b:00): 79, pid=4242, name=python3, GPU has fallen off the bus.\n\
                INFO: task python3:4242 blocked for more than 120 seconds.\n\
                [  101.000000] NVRM: Xid (PCI:0000:3b:00): 13, pid='<unknown>', name=trainer, Graphics Exception\n\
                [  102.000000] NVRM: Xid (PCI:0000:3b:00): 45, pid=9, name=`evil`|x, Ch 00000001\n";
    let (mut xids, dropped) = scan(text);
    assert_eq!((xids.len(), dropped), (3, 0));
    assert_eq!(xids[1].line, 3);
    let tasks = [("python3", Some(4242)), ("trainer", Some(77))];
    tie(&mut xids, tasks.iter().map(|(n, p)| (*n, *p)));
    assert_eq!(xids[0].tasks[0].by, "pid");
    assert_eq!(xids[0].tasks[0].pid, Some(4242));
    assert_eq!(
        (xids[1].tasks[0].task.as_str(), xids[1].tasks[0].by),
        ("trainer", "name")
    );
    assert!(xids[2].tasks.is_empty());
    let md = markdown(&xids, 0);
    assert!(
        md.contains("`Xid 79` on `0000:3b:00`: GPU has fallen off the bus"),
        "{md}"
    );
    assert!(
        md.contains("the paste's task `python3` (pid 4242), by pid"),
        "{md}"
    );
    assert!(md.contains("What to do: reboot the node"), "{md}");
    let problems = crate::escape::inert_markdown_problems(&md, &["`evil`|x"]);
    assert!(problems.is_empty(), "{problems:?}\n{md}");
    let json = serde_json::to_value(&xids[0]).unwrap();
    assert_eq!(json["xid"], 79);
    assert_eq!(json["kind"], "xid");
    assert_eq!(json["tasks"][0]["task"], "python3");
    assert_eq!(json["meaning"], "GPU has fallen off the bus");
    // A flood is bounded.
    let flood = "NVRM: Xid (PCI:0000:3b:00): 45, x\n".repeat(paste::MAX_PASTE_XIDS + 7);
    let (xids, dropped) = scan(&flood);
    assert_eq!((xids.len(), dropped), (paste::MAX_PASTE_XIDS, 7));
    assert!(markdown(&xids, dropped).contains("7 more ignored"));
}

/// `explain` (the hook in `crate::explain`): a hung-task report with the Xid the driver printed for the same
/// process reads both, ties them, and shows the Xid section; a paste of Xid lines alone is no error.
#[test]
fn explain_reads_the_xids_of_a_paste_and_ties_them_to_its_tasks() {
    let log = "\
Nov 19 01:03:20 host kernel: NVRM: Xid (PCI:0000:3b:00): 79, pid=4242, name=python3, GPU has fallen off the bus.
Nov 19 01:03:26 host kernel: INFO: task python3:4242 blocked for more than 122 seconds.
Nov 19 01:03:26 host kernel: Call Trace:
Nov 19 01:03:26 host kernel:  <TASK>
Nov 19 01:03:26 host kernel:  __schedule+0x27c/0x6b0
Nov 19 01:03:26 host kernel:  schedule+0x33/0x110
Nov 19 01:03:26 host kernel:  rwsem_down_write_slowpath+0x27e/0x550
Nov 19 01:03:26 host kernel:  os_acquire_rwlock_write+0x3c/0x70 [nvidia]
Nov 19 01:03:26 host kernel:  rmapiLockAcquire+0x294/0x360 [nvidia]
Nov 19 01:03:26 host kernel:  nvidia_ioctl+0x5e4/0x8c0 [nvidia]
Nov 19 01:03:26 host kernel:  __x64_sys_ioctl+0x97/0xd0
Nov 19 01:03:26 host kernel:  </TASK>
";
    let e = crate::explain::explain(log.as_bytes()).unwrap();
    assert_eq!(e.tasks.len(), 1, "the Xid line is no task: {:?}", e.tasks);
    assert_eq!(e.xids.len(), 1);
    assert_eq!(e.xids[0].event.xid, 79);
    assert_eq!(e.xids[0].tasks[0].task, "python3");
    assert_eq!(e.xids[0].tasks[0].by, "pid");
    let md = crate::explain::markdown(&e);
    assert!(md.contains("## Xid and SXid lines"), "{md}");
    assert!(
        md.contains("the paste's task `python3` (pid 4242), by pid"),
        "{md}"
    );
    let json = serde_json::to_value(&e).unwrap();
    assert_eq!(json["xids"][0]["xid"], 79);
    assert_eq!(json["xids"][0]["tasks"][0]["pid"], 4242);

    let only = crate::explain::explain(
        b"[ 38.1] nvidia-nvswitch3: SXid (PCI:0000:04:00.0): 22013, Non-fatal, Link 44 Minion Link DLREQ interrupt\n",
    )
    .unwrap();
    assert!(only.tasks.is_empty());
    assert_eq!(only.xids[0].event.kind, XidKind::Sxid);
    // A paste of neither is still refused, and says what it looked for.
    let err = crate::explain::explain(b"hello\n").unwrap_err().to_string();
    assert!(err.contains("Xid"), "{err}");
}

mod properties {
    use super::*;
    use proptest::prelude::*;

    proptest! {
        /// Any bytes: an answer, never a panic.
        #[test]
        fn any_bytes_never_panic(bytes in proptest::collection::vec(any::<u8>(), 0..600)) {
            let _ = parse_xid_line(&bytes);
        }

        /// Whatever a log viewer puts before the driver's text, the fields come back as printed.
        #[test]
        fn any_prefix_keeps_the_fields(
            prefix in "[ -WYZ\\[\\]-~]{0,40}",
            xid in 0u32..1_000_000,
            pid in 1i32..4_194_304,
            name in "[a-z_.][a-z0-9_.-]{0,14}",
            detail in "[ -~]{0,80}",
        ) {
            let line = format!("{prefix} NVRM: Xid (PCI:0000:3b:00): {xid}, pid={pid}, name={name}, {detail}");
            let e = parse_xid_line(line.as_bytes()).unwrap();
            prop_assert_eq!(e.xid, xid);
            prop_assert_eq!(e.pid, Some(pid));
            prop_assert_eq!(e.name.as_deref(), Some(name.as_str()));
            prop_assert_eq!(e.device.as_str(), "0000:3b:00");
            prop_assert_eq!(e.detail.as_str(), detail.trim());
        }
    }
}
