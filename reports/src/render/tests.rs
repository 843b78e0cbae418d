//! Unit tests of the renderer; the golden, hostile and property tests are in reports/tests/.

use capture::ThreadSnapshot;

use super::*;
use crate::text::{bytes, cell, code, code_cell, duration, fenced_line};
use crate::verdict::verdict;
use crate::verdict::where_blocked;

#[test]
fn units() {
    assert_eq!(bytes(48), "48 B");
    assert_eq!(bytes(64 << 20), "64 MiB");
    assert_eq!(bytes(1536), "1.5 KiB");
    assert_eq!(duration(312_000_000_000), "312 s");
    assert_eq!(duration(300_000_000), "0.3 s");
    assert_eq!(duration(3_900_000_000_000), "1 h 05 min");
}

#[test]
fn hostile_text_cannot_break_out() {
    assert_eq!(fenced_line("a```b"), "a'''b");
    assert_eq!(cell("<b>|x"), "&lt;b&gt;\\|x");
    assert_eq!(code("a`b\nc"), "``a`b\\nc``");
}

#[test]
fn control_characters_are_escaped_everywhere_text_is_inlined() {
    let comm = "x\x1b]0;pwned\x07y\u{9b}2J\nz";
    // The workspace's one written-out form (capture::escape), the same as in the agent's log.
    assert_eq!(
        capture::escape::controls(comm),
        "x\\e]0;pwned\\x07y\\u{009b}2J\\nz"
    );
    assert_eq!(capture::escape::controls("tab\tok"), "tab\\tok");
    for rendered in [code(comm), cell(comm), fenced_line(comm), code_cell(comm)] {
        assert!(!rendered.chars().any(|c| c.is_control()), "{rendered:?}");
        assert!(
            rendered.contains("\\e]0;pwned") || rendered.contains("\\e\\]0;pwned"),
            "{rendered:?}"
        );
    }
    let mut incident = Incident {
        verdict: format!("thread 1 `{comm}` is in D"),
        ..Incident::default()
    };
    incident.process.comm = comm.into();
    incident.host.hostname = comm.into();
    let md = markdown(&incident);
    assert!(
        !md.chars().any(|c| c.is_control() && c != '\n'),
        "a control character reached report.md"
    );
}

#[test]
fn the_verdict_names_the_decoded_nvidia_operation() {
    let t: ThreadSnapshot = serde_json::from_value(serde_json::json!({
        "tid": 7, "comm": "w", "state": "D", "wchan": null, "syscall": null, "stack": [], "site": null,
        "ioctl": {"fd": 5, "fd_target": "/dev/nvidiactl", "request": "0xc020462a", "dir": "read|write",
            "type": 70, "nr": 42, "size": 32, "name": "NV_ESC_RM_CONTROL", "driver": "nvidia-rm",
            "argument": {"pointer": "0x1000", "structure": "NVOS54_PARAMETERS", "bytes_read": 32,
                "operation": "RM control NV2080_CTRL_CMD_GPU_GET_INFO_V2 waits for a GSP RPC reply"}}
    }))
    .unwrap();
    assert_eq!(
        where_blocked(&t),
        " in ioctl `NV_ESC_RM_CONTROL` on `/dev/nvidiactl` (RM control NV2080_CTRL_CMD_GPU_GET_INFO_V2 waits for a GSP RPC reply)"
    );
}

#[test]
fn empty_incident_renders() {
    let md = markdown(&Incident::default());
    assert!(md.starts_with("**Verdict:** pid 0: no thread snapshot captured"));
}

#[test]
fn the_verdict_line_escapes_html_outside_its_code_spans() {
    let t: ThreadSnapshot = serde_json::from_value(serde_json::json!({
        "tid": 7, "comm": "<img src=x onerror=alert(1)>", "state": "D", "wchan": null, "syscall": null,
        "stack": [], "site": null,
        "ioctl": {"fd": 5, "fd_target": "/dev/<script>x</script>", "request": "0x1", "dir": "none",
            "type": 0, "nr": 1, "size": 0, "name": null, "driver": null}
    }))
    .unwrap();
    let mut incident = Incident::default();
    incident.wedged_threads.push(crate::model::WedgedThread {
        tid: 7,
        comm: t.comm.clone(),
        at_detection: Some(t),
        ..Default::default()
    });
    let v = verdict(&incident);
    assert!(v.contains("/dev/<script>x</script>"), "{v}");
    let md = markdown(&incident);
    let line = md.lines().next().unwrap();
    assert!(
        line.contains("`<img src=x onerror=alert(1)>`")
            && line.contains("on `/dev/<script>x</script>`"),
        "{line}"
    );
}
