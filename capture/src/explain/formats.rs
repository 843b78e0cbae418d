//! The line formats people paste: log prefixes (journal, syslog, Markdown quotes, ISO times, raw /dev/kmsg),
//! task headers, and the frame notations of every unwinder and tool (`/proc/<tid>/stack`, hung-task dumps of
//! any kernel since 2.6, 32-bit arm `from` lines old and new, crash `bt`, drgn, syzbot's symbolized frames).
//! Each function takes one line and answers; the reader in [`super`] keeps the state.

use std::borrow::Cow;

use super::task_line::{contains, find};
use super::tool_formats;
// The kernel's timestamp in a line's prefix moved to stamp.rs with the other stamps (round 17: the house limit).

/// A `[ 123.456789]`, `[Wed Sep 26 00:30:18 2018]` or `[ T123]` prefix: not an address (`[<…>]`); also an
/// Android kernel log's `[   79.822894 / 05-03 18:11:50.340]` (uptime / wall clock, round 7).
fn strip_timestamp(s: &str) -> &str {
    let t = s.trim_start();
    let Some(rest) = t.strip_prefix('[') else {
        return s;
    };
    if rest.starts_with('<') {
        return s;
    }
    match rest.find(']') {
        // crash's stack address (`[ffffc90000a3fd88] schedule at …`) is no time.
        Some(end) if end >= 8 && rest[..end].bytes().all(|b| b.is_ascii_hexdigit()) => s,
        // A module tag a mail wrapped onto a line of its own (`[i915]`, `[raid1]`): one word, not a caller
        // id (`[T123456]`).
        Some(end) if is_module_word(&rest[..end]) => s,
        Some(end)
            if end <= 40
                && rest[..end].bytes().any(|b| b.is_ascii_digit())
                && rest[..end]
                    .bytes()
                    .all(|b| b.is_ascii_alphanumeric() || b" .:+-<>/".contains(&b)) =>
        {
            &rest[end + 1..]
        }
        _ => s,
    }
}

/// A module's name as a tag holds it (`i915`, `raid1`), not a printk caller id (`T123`, `C2`) or whole seconds.
fn is_module_word(w: &str) -> bool {
    let caller_id = w
        .strip_prefix(['T', 'C'])
        .is_some_and(|n| !n.is_empty() && n.bytes().all(|b| b.is_ascii_digit()));
    w.starts_with(|c: char| c.is_ascii_alphabetic())
        && w.bytes().all(|b| b.is_ascii_alphanumeric())
        && !caller_id
}

/// Where another printk broke into this line (`… [<ffffffff81579899>] sched[1043267.444164] serial8250: too
/// much work for irq4`, the rest `ule_preempt_disabled+0x9/0x10` on the next line without a prefix): the
/// byte offset of the intruding `[seconds.micros]` stamp, glued to a word it cut in two.
pub(super) fn intruding_stamp(line: &str) -> Option<usize> {
    let mut from = 1;
    while let Some(i) = line.get(from..)?.find('[').map(|i| i + from) {
        // Glued to a word it cut (`sched[…`), or to a name or prefix cut at its separator: a comm
        // (`INFO: task jbd2/[…`), a syslog prefix (`host kernel:[…`).
        let glued = line[..i]
            .ends_with(|c: char| c.is_ascii_alphanumeric() || matches!(c, '_' | '/' | ':' | '-'));
        let stamp = line[i + 1..]
            .split_once(']')
            .map(|(inner, _)| inner.trim_start());
        let is_time = stamp.is_some_and(|t| {
            t.split_once('.').is_some_and(|(a, b)| {
                !a.is_empty()
                    && !b.is_empty()
                    && a.bytes().all(|c| c.is_ascii_digit())
                    && b.bytes().all(|c| c.is_ascii_digit())
            })
        });
        if glued && is_time {
            return Some(i);
        }
        from = i + 1;
    }
    None
}

/// Whether the head of a line an intruding stamp cut ([`intruding_stamp`]), when the next line does not
/// continue it, is a line to read on its own: a whole frame (`…+0x9/0x10`, an arm `(fn) from` pair). Else it
/// is a fragment of another copy of the log (a serial console and its syslog copy interleaved mid-line:
/// `INFO: task jbd2/[34315.188943]  __rq_qos_throttle+0x23/0x30`, `A[34315.219259]  kjournald2+0xab/0x270`),
/// whose words would read as a header or a frame.
pub(super) fn head_reads_alone(head: &str) -> bool {
    let m = message(head).trim();
    m.contains("+0x") || (m.ends_with(')') && m.contains(" from "))
}

/// The message of a log line: without what log viewers and bug trackers put before it — a journal/syslog
/// prefix (`… kernel: `), a Markdown quote (`> `), an ISO-8601 time (`2025-01-16T17:24:58.365Z`), a level word
/// before a timestamp (`err [129398.233826]`), a raw `/dev/kmsg` header (`6,339,5140900,-;`), printk levels
/// (`<4>`) and `[…]` timestamps, in any order and combination.
pub(super) fn message(line: &str) -> &str {
    let mut s = line.trim_end_matches('\r');
    if let Some(i) = find(s, "kernel: ") {
        s = &s[i + "kernel: ".len()..];
    }
    let mut diff_stripped = false;
    for _ in 0..8 {
        let before = s.len();
        if !diff_stripped {
            if let Some(rest) = strip_diff_mark(s) {
                s = rest;
                // Round 23: `- +# [ 12.3] …`, a Markdown list item (`- `) whose text is a patch's added line:
                // the list's mark, then the diff's own.
                diff_stripped = !(rest.starts_with(' ') && strip_diff_mark(rest).is_some());
            }
        }
        let quoted = strip_quote(s);
        if quoted.len() != s.len() {
            // A quoted line has marks of its own: `- >   > +# …` (a list item quoting a diff).
            diff_stripped = false;
        }
        s = quoted;
        s = strip_comment_mark(s);
        s = tool_formats::strip_node_facility_level(s);
        s = strip_emphasis(s);
        // Round 19: a web page's `<pre>` where the kernel's text starts (before or after a log prefix).
        s = super::markup::html_tags(s).unwrap_or(s);
        s = strip_iso_time(s);
        s = strip_syslog_date(s);
        s = strip_kmsg_header(s);
        s = strip_printk_level(s);
        s = strip_level_word(s);
        s = tool_formats::strip_harness_labels(s);
        s = tool_formats::strip_gutter_number(s);
        s = strip_timestamp(s);
        s = tool_formats::strip_level_facility(s);
        if s.len() == before {
            break;
        }
    }
    s
}

/// The `+`/`-` of a line quoted from a diff (a patch's commit message, a review): the mark and then what a log
/// line starts with (blank, `[`, `<`, or a header word). Said once per line: `--` stays (a separator).
fn strip_diff_mark(s: &str) -> Option<&str> {
    let t = s.trim_start();
    let rest = t.strip_prefix('+').or_else(|| t.strip_prefix('-'))?;
    let next = rest.chars().next()?;
    let log_like = next.is_whitespace()
        || next == '['
        || next == '<'
        || strip_comment_mark(rest) != rest
        || rest.starts_with("INFO: task")
        || rest.starts_with("task:");
    log_like.then_some(rest)
}

/// A Markdown emphasis mark a mail or tracker put around a log line (`*[ 12.3] INFO: task …*`).
fn strip_emphasis(s: &str) -> &str {
    let t = s.trim_start();
    match t.strip_prefix('*').or_else(|| t.strip_prefix('_')) {
        Some(rest) if rest.starts_with('[') || rest.starts_with("INFO") => rest,
        _ => s,
    }
}

/// round 9: the `#` of a log kept as comment lines (drm/ci's xfails and flakes files, shell scripts, CI
/// expectations: `# INFO: task …`, `#  __schedule+0x495/0xd20`, a `#` alone for a blank line). Only `#` then
/// blank or end: crash's `#0 [ffff…]`, `#12 …` and drgn's `# 0 [ffff…]` frame indices stay.
fn strip_comment_mark(s: &str) -> &str {
    let t = s.trim_start();
    match t.strip_prefix('#') {
        Some(rest)
            if rest.is_empty()
                || (rest.starts_with(char::is_whitespace)
                    && !rest.trim_start().starts_with(|c: char| c.is_ascii_digit())) =>
        {
            rest
        }
        _ => s,
    }
}

/// `> ` of a quoted reply (GitHub, mailing lists).
fn strip_quote(s: &str) -> &str {
    let t = s.trim_start();
    t.strip_prefix('>').unwrap_or(s)
}

/// `2025-01-16T17:24:58.365Z ` or `2025-01-16 17:24:58,123 ` (log shippers, Kubernetes, CI logs).
fn strip_iso_time(s: &str) -> &str {
    let t = s.trim_start();
    let b = t.as_bytes();
    let digits =
        |r: std::ops::Range<usize>| r.clone().all(|i| b.get(i).is_some_and(u8::is_ascii_digit));
    let date = digits(0..4)
        && b.get(4) == Some(&b'-')
        && digits(5..7)
        && b.get(7) == Some(&b'-')
        && digits(8..10);
    if !date {
        return s;
    }
    let mut rest = &t[10..];
    let time_follows = |r: &str| {
        let r = r.as_bytes();
        r.len() >= 9 && r[0].is_ascii_digit() && r[1].is_ascii_digit() && r[2] == b':'
    };
    if let Some(r) = rest
        .strip_prefix('T')
        .or_else(|| rest.strip_prefix(' ').filter(|r| time_follows(r)))
    {
        rest = r;
    } else if !rest.starts_with(char::is_whitespace) {
        return s;
    }
    let end = rest.find(char::is_whitespace).unwrap_or(rest.len());
    &rest[end..]
}

/// `Aug 26 00:03:33 ` of a syslog line whose host and tag a console interleave cut off, before the kernel's
/// `[seconds]` stamp: taken only when the stamp follows.
fn strip_syslog_date(s: &str) -> &str {
    const MONTHS: [&str; 12] = [
        "Jan", "Feb", "Mar", "Apr", "May", "Jun", "Jul", "Aug", "Sep", "Oct", "Nov", "Dec",
    ];
    let t = s.trim_start();
    let Some(month) = t.get(..3).filter(|m| MONTHS.contains(m)) else {
        return s;
    };
    let mut fields = t[month.len()..].split_whitespace();
    let day = fields
        .next()
        .is_some_and(|d| d.len() <= 2 && d.bytes().all(|b| b.is_ascii_digit()));
    let time = fields
        .next()
        .filter(|h| h.len() == 8 && h.bytes().filter(|&b| b == b':').count() == 2);
    match time {
        Some(h) if day => {
            let rest = &t[t.find(h).map_or(t.len(), |i| i + h.len())..];
            if rest.trim_start().starts_with('[') {
                rest
            } else {
                s
            }
        }
        _ => s,
    }
}

/// `/dev/kmsg` as read raw: `LEVEL,SEQ,USEC,FLAGS[,…];message`.
fn strip_kmsg_header(s: &str) -> &str {
    let t = s.trim_start();
    let Some(semi) = t.find(';').filter(|&i| i <= 64) else {
        return s;
    };
    let fields: Vec<&str> = t[..semi].split(',').collect();
    let numeric = |f: &str| !f.is_empty() && f.bytes().all(|b| b.is_ascii_digit());
    if fields.len() >= 4 && numeric(fields[0]) && numeric(fields[1]) && numeric(fields[2]) {
        &t[semi + 1..]
    } else {
        s
    }
}

/// `<4>` (printk level as `dmesg -r` and serial consoles print it).
fn strip_printk_level(s: &str) -> &str {
    let t = s.trim_start();
    if let Some(rest) = t.strip_prefix('<') {
        if let Some(end) = rest.find('>').filter(|&e| (1..=2).contains(&e)) {
            if rest[..end].bytes().all(|b| b.is_ascii_digit()) {
                return &rest[end + 1..];
            }
        }
    }
    s
}

/// `err [129398.233826] …`, `warning [ …`: a log viewer's level column before the kernel timestamp.
fn strip_level_word(s: &str) -> &str {
    const LEVELS: &[&str] = &[
        "emerg", "alert", "crit", "err", "error", "warn", "warning", "notice", "info", "debug",
    ];
    let t = s.trim_start();
    let Some((word, rest)) = t.split_once(char::is_whitespace) else {
        return s;
    };
    let word = word.trim_end_matches(':');
    let level = LEVELS.iter().any(|l| word.eq_ignore_ascii_case(l))
        || word
            .strip_prefix("kern.")
            .is_some_and(|l| LEVELS.contains(&l));
    if level && rest.trim_start().starts_with('[') {
        rest
    } else {
        s
    }
}

pub(super) fn number_after(s: &str, key: &str) -> Option<i32> {
    let i = s.find(key)?;
    s[i + key.len()..]
        .trim_start()
        .split(|c: char| !c.is_ascii_digit())
        .next()?
        .parse()
        .ok()
}

/// `NAME:PID` (the name may itself contain `:`).
fn name_pid(s: &str) -> (String, Option<i32>) {
    match s.rsplit_once(':') {
        Some((name, pid)) => match pid.trim().parse() {
            Ok(pid) => (name.to_string(), Some(pid)),
            Err(_) => (s.to_string(), None),
        },
        None => (s.to_string(), None),
    }
}

/// A line that starts a task: (comm, pid, ppid, wchan, continues the current task's header).
pub(super) enum Header {
    Task {
        name: String,
        pid: Option<i32>,
        ppid: Option<i32>,
        wchan: Option<String>,
    },
    /// "INFO: task X:N blocked on a semaphore likely last held by …" (kernels with
    /// CONFIG_DETECT_HUNG_TASK_BLOCKER): the kernel's own word on who blocks the task just reported.
    /// `role`: the blocked task's `<writer>`/`<reader>` for an rw-semaphore.
    Blocker {
        pid: Option<i32>,
        words: String,
        role: Option<String>,
    },
}

/// A task header that names only the task.
fn named(name: String, pid: Option<i32>) -> Header {
    Header::Task {
        name,
        pid,
        ppid: None,
        wchan: None,
    }
}

pub(super) fn header(msg: &str) -> Option<Header> {
    let m = msg.trim();
    if let Some(rest) = m.strip_prefix("INFO: task ") {
        // A mail client wrapped the line before `blocked`: `INFO: task kworker/u16:3:1234` alone.
        let Some((who, what)) = rest.split_once(" blocked") else {
            let (name, pid) = name_pid(rest.trim());
            return pid.map(|pid| named(name, Some(pid)));
        };
        // `3:1:2248454 <writer>`: the role in brackets is not part of the name (`CPU 6/KVM:11091` is a name).
        // `A:1 is blocked on a mutex likely owned by task B:2.` (6.14+ mutexes).
        let who = who.strip_suffix(" is").unwrap_or(who);
        let (who, role) = match who.rsplit_once(" <") {
            Some((name, role)) if role.ends_with('>') => (name, role.strip_suffix('>')),
            _ => (who, None),
        };
        if what.starts_with(" on ") {
            return Some(Header::Blocker {
                pid: name_pid(who).1,
                words: format!("blocked{}", what.trim_end()),
                role: role.map(str::to_string),
            });
        }
        let (name, pid) = name_pid(who);
        return Some(named(name, pid));
    }
    if let Some(rest) = m.strip_prefix("task:") {
        let (name, fields) = rest.split_once(" state:")?;
        return Some(Header::Task {
            name: name.trim().to_string(),
            pid: number_after(fields, " pid:"),
            ppid: number_after(fields, "ppid:"),
            wchan: None,
        });
    }
    if contains(m, "soft lockup - CPU#") {
        let open = m.rfind('[')?;
        let who = m[open + 1..].strip_suffix(']')?;
        let (name, pid) = name_pid(who);
        return Some(named(name, pid));
    }
    // A stack dump: "CPU: 8 UID: 0 PID: 1185 Comm: nv_queue Tainted: …"; crash's `bt`: "PID: 64451  TASK: …
    // COMMAND: \"osu_gather\"".
    if m.starts_with("CPU: ") && m.contains(" Comm: ") {
        let name = m.split(" Comm: ").nth(1)?.split_whitespace().next()?;
        return Some(named(name.to_string(), number_after(m, " PID:")));
    }
    if m.starts_with("PID: ") && contains(m, "COMMAND: ") {
        let name = m
            .split("COMMAND: ")
            .nth(1)?
            .trim()
            .trim_matches(['"', '\u{201c}', '\u{201d}']);
        return Some(named(name.to_string(), number_after(m, "PID:")));
    }
    // A `ps` row above the task's `/proc/<pid>/stack` (a paste of `ps -p N; cat /proc/N/stack`).
    if let Some((name, pid)) = super::task_line::ps_row(m) {
        return Some(named(name, Some(pid)));
    }
    // A wedge-capture report: "thread TID COMM state S wchan W".
    if let Some(rest) = m.strip_prefix("thread ") {
        let (tid, rest) = rest.split_once(' ')?;
        let tid: i32 = tid.parse().ok()?;
        let (comm, rest) = rest.rsplit_once(" state ")?;
        let wchan = rest
            .split_once(" wchan ")
            .map(|(_, w)| w.split_whitespace().next().unwrap_or("-"))
            .filter(|w| *w != "-" && *w != "0")
            .map(str::to_string);
        return Some(Header::Task {
            name: comm.to_string(),
            pid: Some(tid),
            ppid: None,
            wchan,
        });
    }
    None
}

/// A `Workqueue:` line's queue and work function, as the kernel prints them (`events_highpri dm_irq_work_func
/// [amdgpu]`); a decoder's raw address and arrow (`events_power_efficient 0x8380ab0c -> reg_check_chans_work`)
/// leave the name.
pub(super) fn workqueue(q: &str) -> String {
    let q = q.trim();
    let Some((queue, work)) = q.split_once(char::is_whitespace) else {
        return q.to_string();
    };
    let work = work.trim();
    let decoded = work
        .split_once(" -> ")
        .filter(|(addr, _)| addr.trim().starts_with("0x"))
        .map(|(_, name)| name.trim());
    match decoded {
        Some(name) => format!("{queue} {name}"),
        None => q.to_string(),
    }
}

/// round 9: the rest of a wrapped `Workqueue:` line: a work function alone, with its `[module]` or not
/// (`nv50_disp_atomic_commit_work [nouveau]`), never a frame (no `+0x`) nor a marker (`Call Trace:`).
pub(super) fn wrapped_work_function(line: &str) -> bool {
    let (name, rest) = line.split_once(' ').unwrap_or((line, ""));
    let rest = rest.trim();
    let ident = !name.is_empty()
        && name
            .chars()
            .all(|c| c.is_ascii_alphanumeric() || c == '_' || c == '.');
    let module = rest.is_empty() || (rest.starts_with('[') && rest.ends_with(']'));
    ident && module && !name.ends_with(':')
}

/// Drops the trailing ` (T)`/` (P)` marks of arm64 traces and a `[<addr>]` prefix; says whether the frame was
/// a `?` guess.
pub(super) fn frame_text(msg: &str) -> Option<(&str, bool)> {
    let mut s = msg.trim();
    if s.starts_with("[<") {
        s = s[s.find(']')? + 1..].trim_start();
    } else if let Some(rest) = s.strip_prefix("[]") {
        // The address lost in rendering: a web page or mail client took `<ffffffff81234567>` for a tag.
        s = rest.trim_start();
    } else if let Some(rest) = split_address_rest(s) {
        // The address split after `[<` by a web page (`[<` alone on the line above).
        s = rest;
    } else if let Some(rest) = powerpc_frame(s) {
        s = rest;
    }
    let guess = match s.strip_prefix("? ") {
        Some(rest) => {
            s = rest.trim_start();
            true
        }
        None => false,
    };
    // powerpc marks its first frame ` (unreliable)`: the link register it was read from may be stale.
    for mark in [" (T)", " (P)", " (C)", " (unreliable)"] {
        s = s.strip_suffix(mark).unwrap_or(s);
    }
    let looks = contains(s, "+0x") || msg.trim_start().starts_with("[<");
    (looks && !s.is_empty()).then_some((s, guess))
}

/// A powerpc frame: show_stack (arch/powerpc/kernel/process.c) prints `[SP] [NIP] function+off/size`, the
/// stack pointer and the return address in brackets without `<>` → what follows the two addresses.
fn powerpc_frame(s: &str) -> Option<&str> {
    let mut rest = s;
    for _ in 0..2 {
        let (address, after) = rest.strip_prefix('[')?.split_once(']')?;
        let hex = address.len() >= 8 && address.bytes().all(|b| b.is_ascii_hexdigit());
        if !hex {
            return None;
        }
        rest = after.trim_start();
    }
    (!rest.is_empty()).then_some(rest)
}

/// The rest of a frame whose `[<` a renderer left on the line above: `ffffffff810ee40c>] f+0x2fc/0x330` → what
/// follows the address.
fn split_address_rest(s: &str) -> Option<&str> {
    let (address, rest) = s.split_once(">]")?;
    let hex = address.len() >= 8 && address.bytes().all(|b| b.is_ascii_hexdigit());
    hex.then(|| rest.trim_start())
}

pub(super) fn is_module_token(t: &str) -> bool {
    t.len() > 2
        && t.starts_with('[')
        && t.ends_with(']')
        && t[1..t.len() - 1]
            .bytes()
            .all(|b| b.is_ascii_alphanumeric() || b == b'_' || b == b'-')
}

/// A frame line in another notation, rewritten as `/proc/<tid>/stack` would print it: syzbot's source
/// locations (`schedule+0x164/0x360 kernel/sched/core.c:7322`) and inlined frames (`context_switch
/// kernel/sched/core.c:5504 [inline]`), and RHEL 5's module prefix (`:jbd2:kjournald2+0x9a/0x1ec`).
pub(super) fn normalize_frame(line: &str) -> Cow<'_, str> {
    let mut s = line.trim();
    let mut changed = false;
    // Any run of trailing locations and `[inline]` marks: some syzbot reports print an inlined frame's
    // location and then its caller's (`context_switch kernel/sched/core.c:4972 [inline] kernel/sched/core.c:6253`),
    // or a frame's location twice (`__schedule+0xa9a/0x4940 kernel/sched/core.c:6253 kernel/sched/core.c:6253`).
    loop {
        if let Some(rest) = s.strip_suffix(" [inline]") {
            s = rest.trim_end();
            changed = true;
            continue;
        }
        // A decoder's note of the callee inlined at that address (`addrconf_dad_work net/ipv6/addrconf.c:4160
        // -> rtnl_lock`, OpenWrt's decoded traces): the frame is the function it is written after.
        let arrow = if contains(s, " -> ") {
            s.rsplit_once(" -> ")
        } else {
            None
        };
        if let Some((head, callee)) = arrow {
            if bare_name(callee.trim()) && !head.trim().is_empty() {
                s = head.trim_end();
                changed = true;
                continue;
            }
        }
        match s.rsplit_once(char::is_whitespace) {
            Some((head, last))
                if (is_source_location(last) || is_cut_location(head, last))
                    && !head.trim().is_empty() =>
            {
                s = head.trim_end();
                changed = true;
            }
            _ => break,
        }
    }
    // scripts/decode_stacktrace.sh without offsets (LKP reports): `__schedule (kernel/sched/core.c:5318
    // kernel/sched/core.c:6675)`, `ret_from_fork_asm (??:?)` → the name (round 7).
    if let Some(head) = decoded_location_frame(s) {
        return Cow::Owned(head.to_string());
    }
    // A module frame, decoded: the module's name follows its locations, bare (`pkt_ioctl
    // (drivers/block/pktcdvd.c:2590) pktcdvd`, round 27): the frame with its module tag.
    if let Some((framed, module)) = s.rsplit_once(") ") {
        let named = !module.is_empty()
            && module
                .bytes()
                .all(|b| b.is_ascii_alphanumeric() || b == b'_' || b == b'-');
        if named {
            if let Some(head) = decoded_location_frame(&s[..=framed.len()]) {
                return Cow::Owned(format!("{head} [{module}]"));
            }
        }
    }
    // `[<ffffffff88582f6d>] :jbd2:jbd2_journal_commit_transaction+0x191/0x1068`
    let body_at = if s.starts_with("[<") {
        s.find(']').map_or(0, |i| i + 1)
    } else {
        0
    };
    let body = s[body_at..].trim_start();
    // The raw address again before the decoded name (`[<8082b5c8>] 0x8082b5c8 schedule`): the name is the
    // frame.
    if body_at > 0 {
        if let Some((addr, name)) = body.split_once(' ') {
            let raw = addr
                .strip_prefix("0x")
                .is_some_and(|h| !h.is_empty() && h.bytes().all(|b| b.is_ascii_hexdigit()));
            if raw && bare_name(name.trim()) {
                return Cow::Owned(format!("{} {}", &s[..body_at], name.trim()));
            }
        }
    }
    let guess = body.starts_with("? ");
    let mut body = body;
    while let Some(rest) = body.strip_prefix("? ") {
        body = rest;
    }
    if let Some(rest) = body.strip_prefix(':') {
        if let Some((module, function)) = rest.split_once(':') {
            if is_module_token(&format!("[{module}]")) && !function.is_empty() {
                let mark = if guess { "? " } else { "" };
                return Cow::Owned(format!("{} {mark}{function} [{module}]", &s[..body_at]));
            }
        }
    }
    if changed {
        Cow::Owned(s.to_string())
    } else {
        Cow::Borrowed(line)
    }
}

/// A frame `name (loc …)` as decode_stacktrace.sh prints it when the trace has no offsets to keep, each `loc`
/// a source location whose line may be unknown (`kernel/async.c:?`, `??:?`): its `name` (with a `? ` mark
/// when it has one). One pass over the line's words.
fn decoded_location_frame(s: &str) -> Option<&str> {
    let inner = s.strip_suffix(')')?;
    let (head, locs) = inner.split_once(" (")?;
    let name = head.strip_prefix("? ").unwrap_or(head);
    let located = |t: &str| {
        t.rsplit_once(':').is_some_and(|(file, line)| {
            let line_ok =
                line == "?" || (!line.is_empty() && line.bytes().all(|b| b.is_ascii_digit()));
            let file_ok = file == "??"
                || [".c", ".h", ".S", ".rs"]
                    .iter()
                    .any(|ext| file.ends_with(ext));
            line_ok && file_ok
        })
    };
    let mut words = locs.split_whitespace().peekable();
    let any = words.peek().is_some();
    (any && words.all(located) && bare_name(name) && !name.contains(' ')).then_some(head)
}

/// `kernel/sched/core.c:7322`, `fs/read_write.c:595:10`, `./include/linux/sched.h:12`.
fn is_source_location(t: &str) -> bool {
    let Some((file, line)) = t.split_once(':') else {
        return false;
    };
    let numbered = line
        .split(':')
        .all(|n| !n.is_empty() && n.bytes().all(|b| b.is_ascii_digit()));
    numbered
        && [".c", ".h", ".S", ".rs"]
            .iter()
            .any(|ext| file.ends_with(ext))
}

/// A source location the paste cut short after a frame's offsets (`__wait_rcu_gp+0x19d/0x1a0
/// home/u/linux/kernel`, the rest of the line lost): a path, after a `name+0x…/0x…` frame.
fn is_cut_location(head: &str, last: &str) -> bool {
    // The path first: most lines' last word (a frame, a module tag) is none.
    if !last.contains('/') || last.starts_with('[') || contains(last, "0x") {
        return false;
    }
    let frame = head.rsplit(char::is_whitespace).next().unwrap_or(head);
    frame
        .split_once("+0x")
        .is_some_and(|(name, off)| bare_name(name) && off.contains("/0x"))
}

/// A call chain written on one line, innermost first, as people summarise a `/proc/<tid>/stack` or a
/// hung-task trace (`__down_common -> down -> nvkms_ioctl_from_kapi_try_pmlock+0x4a/0xa0 [nvidia_modeset]`,
/// `stack:  dup_mmap → dup_mm → copy_process`): its frames. Each link must be a frame (a name, with offsets
/// or a module tag or not); a decoder's `func file.c:N -> inlined_callee` is no chain (its head has a source
/// location) and stays one frame ([`normalize_frame`]).
pub(super) fn arrow_chain(msg: &str) -> Option<Vec<&str>> {
    // Most lines hold no arrow: answered without a pass over the links.
    let arrow = (msg.contains('>') && contains(msg, " -> "))
        || (msg.contains('\u{2192}') && contains(msg, " \u{2192} "));
    if !arrow {
        return None;
    }
    let s = msg.trim();
    let s = s
        .strip_prefix("stack:")
        .or_else(|| s.strip_prefix("Stack:"))
        .unwrap_or(s)
        .trim_start();
    let links: Vec<&str> = s
        .split(" -> ")
        .flat_map(|l| l.split(" \u{2192} "))
        .map(str::trim)
        .collect();
    let frame = |l: &str| {
        bare_name(l)
            || l.split_once("+0x").is_some_and(|(name, rest)| {
                bare_name(name) && {
                    let (off, module) = rest.split_once(' ').unwrap_or((rest, ""));
                    off.contains("/0x") && (module.is_empty() || is_module_token(module))
                }
            })
    };
    (links.len() >= 2 && links.iter().all(|l| frame(l))).then_some(links)
}

/// A function name alone (`down`, `ApplyModeSetConfig [nvidia_modeset]`), as some reports trim their traces.
pub(super) fn bare_name(msg: &str) -> bool {
    let (name, module) = match msg.split_once(' ') {
        Some((n, m)) => (n, Some(m.trim())),
        None => (msg, None),
    };
    let ident = name
        .bytes()
        .next()
        .is_some_and(|b| b.is_ascii_alphabetic() || b == b'_')
        && name
            .bytes()
            .all(|b| b.is_ascii_alphanumeric() || b == b'_' || b == b'.');
    // Round 13: a machine word in hex (`ffffffffffffff80`, a register's value a mail client wrapped off its
    // `R09:` line) spells an identifier too, and no function is named so.
    let word = name.len() >= 8 && name.bytes().all(|b| b.is_ascii_hexdigit());
    ident && !word && module.is_none_or(|m| m.starts_with('[') && m.ends_with(']'))
}

/// 32-bit arm: `[<807762c0>] (__schedule) from [<80776938>] (schedule+0x50/0xa8)`, and since 5.x without
/// addresses: `smb2_reconnect [cifs] from SMB2_open_init+0x58/0xb1c [cifs]`.
pub(super) fn arm_from(msg: &str) -> Option<(&str, &str)> {
    let s = msg.trim();
    let s = if s.starts_with("[<") {
        s[s.find(']')? + 1..].trim_start()
    } else {
        s
    };
    // Most lines hold no `from`: answered without a search for each shape.
    if !contains(s, " from ") {
        return None;
    }
    if let Some((callee, caller)) = s.split_once(") from [<") {
        let callee = callee.strip_prefix('(')?;
        // `] (caller)`, or without the space as older kernels printed it: `[<bf0b7480>](cv_wait_common+…)`.
        let caller = caller[caller.find(']')? + 1..]
            .trim_start()
            .strip_prefix('(')?
            .strip_suffix(')')?;
        return Some((callee, caller));
    }
    let (callee, caller) = s.split_once(" from ")?;
    let name = callee.split_whitespace().next()?;
    (bare_name(callee) && !name.contains("+0x") && caller.contains("+0x"))
        .then_some((callee, caller.trim()))
}

/// A module tag alone on its line (`[nvidia]`): a mail client or terminal wrapped it off the frame above.
pub(super) fn wrapped_module(msg: &str) -> Option<&str> {
    let t = msg.trim();
    (is_module_token(t) && !t[1..t.len() - 1].bytes().all(|b| b.is_ascii_digit()))
        .then(|| &t[1..t.len() - 1])
}

/// The pid of a `cat /proc/N/stack` (or `/proc/N/task/M/stack`, the thread's) command line, or of a `==>
/// /proc/N/stack <==` heading of `tail`/`head`: the paste's only word on whose stack follows.
pub(super) fn proc_stack_pid(msg: &str) -> Option<i32> {
    let at = find(msg, "/proc/")?;
    let path = msg[at + "/proc/".len()..].split_whitespace().next()?;
    let path = path.trim_end_matches(['\'', '"', ';', ')']);
    let parts: Vec<&str> = path.split('/').collect();
    let pid = match parts.as_slice() {
        [pid, "stack"] => pid,
        [_, "task", tid, "stack"] => tid,
        _ => return None,
    };
    pid.parse().ok().filter(|&p: &i32| p > 0)
}

/// Frames that end a stack: where a task entered the kernel (a system call's entry, a kernel thread's
/// start). A frame read after one (not a `?` guess) begins another task.
pub(super) fn is_stack_bottom(name: &str) -> bool {
    matches!(
        name,
        "ret_from_fork"
            | "ret_from_fork_asm"
            | "kernel_thread_helper"
            | "ret_from_kernel_thread"
            | "entry_SYSCALL_64_after_hwframe"
            | "entry_SYSCALL_64_after_swapgs"
            | "entry_SYSCALL_64_fastpath"
            | "entry_SYSCALL_64"
            | "entry_SYSENTER_32"
            | "entry_INT80_32"
            | "entry_SYSENTER_compat_after_hwframe"
            | "entry_SYSCALL_compat_after_hwframe"
            | "system_call_fastpath"
            | "system_call_fast_compare_end"
            | "tracesys"
            | "el0t_64_sync"
            | "el0t_32_sync"
            | "el0_sync"
            | "el0_svc_naked"
            | "ret_fast_syscall"
            | "ret_to_user"
            | "work_pending"
            | "__sys_trace_return"
            | "secondary_start_kernel"
            | "start_kernel"
            // The end marker of a /proc/<tid>/stack before 4.x.
            | "0xffffffffffffffff"
    )
}

/// A frame's address with nothing after it (`[<ffffffffc018631e>]`, `[<…>] ?`): the rest wrapped onto the next
/// line. → (the address, a `?` guess).
pub(super) fn address_alone(msg: &str) -> Option<(&str, bool)> {
    let (address, after) = msg.trim().strip_prefix("[<")?.split_once(">]")?;
    let after = after.trim();
    let hex = !address.is_empty() && address.bytes().all(|b| b.is_ascii_hexdigit());
    (hex && (after.is_empty() || after == "?")).then_some((address, after == "?"))
}

/// A frame a mail client cut short (not crash's `#N` line, whose `from` may end a line): a 32-bit arm
/// `(callee) from [<addr>]` or `(callee) from` without the caller, a module tag opened and not closed (`… [kvmgt`,
/// its build id on the next line).
pub(super) fn frame_head(msg: &str) -> bool {
    let m = msg.trim();
    if m.starts_with('#') {
        return false;
    }
    let hex = |h: &str| !h.is_empty() && h.bytes().all(|b| b.is_ascii_hexdigit());
    // Each shape checked by its end first: most lines (whole frames) end in none of them.
    let arm = m.ends_with(") from")
        || (m.ends_with(">]")
            && m.rsplit_once(") from [<")
                .is_some_and(|(_, a)| a.strip_suffix(">]").is_some_and(hex)));
    // `[<7f4ba618>] (fuse_writepages` / `[fuse]) from …`; `[<807762c0>] (__schedule)` / `from [<…>] (…)`.
    let arm_open = m.starts_with("[<")
        && contains(m, "] (")
        && (m.matches('(').count() > m.matches(')').count()
            || (m.ends_with(')') && !contains(m, " from ")));
    let open_tag = m
        .rsplit_once(' ')
        .is_some_and(|(_, last)| last.len() > 1 && last.starts_with('[') && !last.contains(']'))
        && contains(m, "+0x");
    arm || arm_open || open_tag
}

/// Frames of the context switch itself (`__switch_to`, `__schedule`, `schedule`, `schedule_preempt_disabled`…):
/// a sleeping task's innermost frames, above every frame of what it waits in. One read (not a `?` guess) after a
/// frame that is none of them is the top of another stack: a paste that lost its header and prefix after one
/// cut short (`… __alloc_pages+0x25c/0x2dc` then `schedule_preempt_disabled+0x14/0x20`).
pub(super) fn is_switch_point(name: &str) -> bool {
    matches!(
        name,
        "__switch_to"
            | "__switch_to_asm"
            | "context_switch"
            | "finish_task_switch"
            | "__schedule"
            | "__schedule_loop"
            | "schedule"
            | "schedule_idle"
            | "schedule_preempt_disabled"
            | "preempt_schedule_common"
            | "_cond_resched"
            | "__cond_resched"
    )
}
