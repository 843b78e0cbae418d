//! Newest-first pastes (`journalctl -r`, a log viewer sorted by time descending): each hung-task block is printed
//! bottom up — its registers and `</TASK>`, its frames outermost first, `<TASK>`, `Call Trace:`, the `task:`
//! line, and its `INFO: task …` header last. Such a block is found by its structure: a `Call Trace:` line after
//! a frame (or `<TASK>`) and before a task header or `Workqueue:` line, which no kernel prints in that order.
//! [`reversed_blocks`] finds each such block's lines (its frames back up from `Call Trace:` to the stack's
//! bottom and the lines printed after it, its header lines down to `INFO: task`), and [`reading_order`] gives
//! the paste's lines with those blocks turned back, so the reader reads them as the kernel printed them.
//! Lines of pastes before and after, in the usual order, stay as they are.
//!
//! One pass, and a bounded look-back: the line spans of the last [`LOOK_BACK`] lines; a line is read again
//! only around a `Call Trace:` line (its neighbours and the block's lines).

use std::collections::VecDeque;
use std::ops::Range;

use super::crash_bt::crash_frame;
use super::formats::{
    arm_from, frame_text, header, is_stack_bottom, message, normalize_frame, Header,
};
use super::task::{Prefix, MAX_TASKS};
use super::task_line::old_task_line;
use crate::site::frame_name::base_name;

/// How many lines back a reversed block's stack may reach from its `Call Trace:` line.
const LOOK_BACK: usize = 1024;

/// What a line is, for finding a reversed block's edges.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Kind {
    Blank,
    /// `<TASK>`, `<IRQ>` and their ends, except `</TASK>`.
    Marker,
    /// `</TASK>`: a stack's last line, so a reversed block's first.
    TaskEnd,
    /// A frame: a `?` guess, a stack's bottom (`ret_from_fork`, a syscall entry) or another.
    Frame {
        bottom: bool,
        guess: bool,
    },
    /// The registers the kernel prints under a user task's stack (`RIP: 0033:…`, `RAX: …`, `Code: …`).
    Register,
    CallTrace,
    Other,
}

fn kind(line: &str) -> Kind {
    let m = message(line).trim();
    if m.is_empty() {
        return Kind::Blank;
    }
    if m.starts_with("</TASK>") {
        return Kind::TaskEnd;
    }
    if ["<TASK>", "<IRQ>", "</IRQ>", "<NMI>", "</NMI>", "<EOI>"]
        .iter()
        .any(|t| m.starts_with(t))
    {
        return Kind::Marker;
    }
    if m.starts_with("Call Trace") || m.starts_with("Call trace") || m.starts_with("Backtrace") {
        return Kind::CallTrace;
    }
    const REGISTERS: &[&str] = &[
        "RIP:", "RSP:", "RAX:", "RDX:", "RBP:", "R10:", "R13:", "Code:", "pc :", "lr :", "sp :",
    ];
    if REGISTERS.iter().any(|r| m.starts_with(r)) {
        return Kind::Register;
    }
    let normalized = normalize_frame(m);
    let frame = frame_text(&normalized)
        .map(|(text, guess)| {
            (
                text.split(['+', ' ']).next().unwrap_or(text).to_string(),
                guess,
            )
        })
        .or_else(|| crash_frame(m).map(|f| (f.split(' ').next().unwrap_or("").to_string(), false)))
        .or_else(|| {
            arm_from(m).map(|(callee, _)| {
                (
                    callee.split(['+', ' ']).next().unwrap_or("").to_string(),
                    false,
                )
            })
        });
    match frame {
        Some((name, guess)) => Kind::Frame {
            bottom: is_stack_bottom(base_name(&name)),
            guess,
        },
        None => Kind::Other,
    }
}

/// The raw stack words old kernels print between the task line and `Call Trace:` (`ffff8804347f7c20
/// 0000000000000046 …`).
fn stack_words(m: &str) -> bool {
    let mut words = 0;
    for w in m.split_whitespace() {
        if !(w.len() == 8 || w.len() == 16) || !w.bytes().all(|b| b.is_ascii_hexdigit()) {
            return false;
        }
        words += 1;
    }
    words >= 2
}

/// A line of a block's head as the kernel prints it above `Call Trace:` (below it, newest first): the task
/// header lines, its workqueue, the raw stack words of old kernels, the taint and the hint to silence the
/// detector. `Some(true)` for the `INFO: task` line, which is printed first and so read last.
fn header_tail(line: &str) -> Option<bool> {
    let m = message(line).trim();
    if m.starts_with("INFO: task") && matches!(header(m), Some(Header::Task { .. })) {
        return Some(true);
    }
    let tail = m.is_empty()
        || stack_words(m)
        || matches!(header(m), Some(Header::Task { .. }))
        || old_task_line(m).is_some()
        || m.starts_with("Workqueue:")
        || m.contains("hung_task_timeout_secs")
        || m.starts_with("Tainted:")
        || m.starts_with("Not tainted")
        || m.starts_with("CPU:")
        || m.starts_with("Hardware name:");
    tail.then_some(false)
}

/// The line after a reversed `Call Trace:` (and an old kernel's raw stack words): a task header or its
/// workqueue (the kernel prints them above).
fn opens_head(line: &str) -> bool {
    let m = message(line).trim();
    matches!(header(m), Some(Header::Task { .. }))
        || old_task_line(m).is_some()
        || m.starts_with("Workqueue:")
}

/// Round 13: a line a mail client or terminal wrapped off the line above, in a log whose lines carry a prefix
/// (`Jan 22 08:07:58 host kernel: …`): no prefix of its own (`[amdgpu]`, `than 120 seconds.`, `246 ppid: 2
/// flags:0x00004000`) after a line with one, at most three lines down. `before`: the lines above, nearest
/// first. A newest-first block is turned back by such logical lines, each line kept with its wrapped rest.
fn wraps<'a>(line: &str, before: impl Iterator<Item = &'a str>) -> bool {
    let prefixed = |l: &str| Prefix::of(l, message(l)) != Prefix::None;
    if line.trim().is_empty() || prefixed(line) {
        return false;
    }
    for above in before.take(3) {
        if above.trim().is_empty() {
            return false;
        }
        if prefixed(above) {
            return true;
        }
    }
    false
}

/// The first line of the reversed block whose `Call Trace:` is the last span of `recent`: back over its
/// frames to the stack's bottom, then over what the kernel prints under a stack (guesses, registers) up to
/// its `</TASK>`. A line's wrapped rest goes with it.
fn block_start(text: &str, recent: &VecDeque<Range<usize>>) -> usize {
    // The `Call Trace:` line (blank lines and an old kernel's stack words were read after it).
    let trace = recent
        .iter()
        .rposition(|r| kind(&text[r.clone()]) == Kind::CallTrace)
        .unwrap_or(0);
    let mut start = recent.get(trace).map_or(0, |r| r.start);
    // One paste's lines carry one prefix (a journal's, a quote's, none): a line with another is a paste
    // above, even when the block was cut before its bottom (round 14: a newest-first block cut short after a
    // syzkaller report that ends in a stack's bottom).
    let prefix_of = |line: &str| Prefix::of(line, message(line));
    let block_prefix = recent.get(trace).map(|r| prefix_of(&text[r.clone()]));
    let mut below_bottom = false;
    for (i, span) in recent.iter().enumerate().take(trace).rev() {
        let line = &text[span.clone()];
        let above = recent.range(..i).rev().map(|r| &text[r.clone()]);
        if wraps(line, above) {
            // Its line above decides; taken with it.
            continue;
        }
        if !line.trim().is_empty() && block_prefix.is_some_and(|p| p != prefix_of(line)) {
            break;
        }
        let k = kind(line);
        let take = match k {
            Kind::Blank => true,
            Kind::Frame { bottom: true, .. } => {
                below_bottom = true;
                true
            }
            Kind::Marker | Kind::Frame { .. } if !below_bottom => true,
            Kind::Frame { guess: true, .. } | Kind::Register if below_bottom => true,
            // The newest line of a block that reached its bottom; before that, the end of a paste above.
            Kind::TaskEnd if below_bottom => {
                start = span.start;
                break;
            }
            _ => false,
        };
        if !take {
            break;
        }
        start = span.start;
    }
    start
}

/// The byte ranges (whole lines, without the last line's `\n`) of the paste's newest-first hung-task blocks,
/// in order; at most [`MAX_TASKS`].
pub(super) fn reversed_blocks(text: &str) -> Vec<Range<usize>> {
    let mut blocks: Vec<Range<usize>> = Vec::new();
    let mut recent: VecDeque<Range<usize>> = VecDeque::new();
    // A `Call Trace:` after a frame, waiting for its next line; then a confirmed block's head being read.
    let mut pending = false;
    let mut head: Option<Range<usize>> = None;
    // The head's next logical line (a line and its wrapped rest, joined), judged once it is whole.
    let mut next: Option<(Range<usize>, String)> = None;
    // The head's `INFO: task` line was read: the block ends after that line's wrapped rest.
    let mut info_read = false;
    let mut at = 0;
    for line in text.split('\n') {
        let span = at..at + line.len();
        at = span.end + 1;
        let mut in_head = false;
        if let Some(block) = head.as_mut() {
            in_head = true;
            if wraps(line, recent.iter().rev().map(|r| &text[r.clone()])) {
                match next.as_mut() {
                    Some((r, joined)) => {
                        r.end = span.end;
                        joined.push(' ');
                        joined.push_str(line.trim());
                    }
                    None => block.end = span.end,
                }
            } else {
                // The logical line before this one is whole: part of the head, or past it.
                let goes_on = match next.take() {
                    None => !info_read,
                    Some(_) if info_read => false,
                    Some((r, joined)) => header_tail(&joined).is_some_and(|info| {
                        block.end = r.end;
                        info_read = info;
                        true
                    }),
                };
                if goes_on {
                    next = Some((span.clone(), line.to_string()));
                } else {
                    blocks.extend(head.take());
                    info_read = false;
                    in_head = false;
                }
            }
        }
        if in_head {
            // Read as part of the head (or judged with the next line).
        } else if pending && !line.trim().is_empty() && !stack_words(message(line).trim()) {
            pending = false;
            if opens_head(line) && blocks.len() < MAX_TASKS {
                let start = block_start(text, &recent);
                if blocks.last().is_none_or(|b| b.end < start) {
                    head = Some(start..span.end);
                    info_read = header_tail(line) == Some(true);
                }
            }
        }
        // Cheap test first: most lines are no `Call Trace:`.
        if line.contains("Call Trace") || line.contains("Call trace") || line.contains("Backtrace")
        {
            let after_frame = recent
                .iter()
                .rev()
                .find(|r| !text[(*r).clone()].trim().is_empty());
            pending = kind(line) == Kind::CallTrace
                && after_frame.is_some_and(|r| {
                    matches!(kind(&text[r.clone()]), Kind::Frame { .. } | Kind::Marker)
                });
        }
        if recent.len() == LOOK_BACK {
            recent.pop_front();
        }
        recent.push_back(span);
    }
    if let (Some(block), Some((r, joined))) = (head.as_mut(), next) {
        if !info_read && header_tail(&joined).is_some() {
            block.end = r.end;
        }
    }
    blocks.extend(head);
    blocks
}

/// The paste's lines in the order to read them: the blocks of [`reversed_blocks`] turned back, every other
/// line as it is.
pub(super) fn reading_order<'a>(
    text: &'a str,
    blocks: &'a [Range<usize>],
) -> impl Iterator<Item = &'a str> + 'a {
    // Pieces: (range, turned back). Between two blocks, the lines after the first's `\n` up to the second's.
    let mut pieces: Vec<(Range<usize>, bool)> = Vec::with_capacity(2 * blocks.len() + 1);
    let mut from = 0;
    for b in blocks {
        if b.start > from {
            pieces.push((from..b.start - 1, false));
        }
        pieces.push((b.clone(), true));
        from = b.end + 1;
    }
    if from <= text.len() {
        pieces.push((from..text.len(), false));
    }
    pieces.into_iter().flat_map(move |(range, back)| {
        let piece = &text[range];
        let lines: Box<dyn Iterator<Item = &'a str>> = if back {
            Box::new(turned_back(piece).into_iter())
        } else {
            Box::new(piece.split('\n'))
        };
        lines
    })
}

/// A block's lines newest last: by logical lines (a line and its wrapped rest, [`wraps`]), each in its order.
fn turned_back(piece: &str) -> Vec<&str> {
    let lines: Vec<&str> = piece.split('\n').collect();
    let mut out = Vec::with_capacity(lines.len());
    let mut end = lines.len();
    for i in (0..lines.len()).rev() {
        if i > 0 && wraps(lines[i], lines[..i].iter().rev().copied()) {
            continue;
        }
        out.extend_from_slice(&lines[i..end]);
        end = i;
    }
    out
}

#[cfg(test)]
mod tests {
    use super::super::explain;

    /// A hung-task block as the kernel prints it, then as `journalctl -r` shows it.
    const FORWARD: &str = "\
Dec 07 18:00:01 host kernel: INFO: task kworker/u8:0:8 blocked for more than 368 seconds.
Dec 07 18:00:01 host kernel:       Not tainted 5.19.5-arch1-1 #1
Dec 07 18:00:01 host kernel: \"echo 0 > /proc/sys/kernel/hung_task_timeout_secs\" disables this message.
Dec 07 18:00:01 host kernel: task:kworker/u8:0    state:D stack:    0 pid:    8 ppid:     2 flags:0x00004000
Dec 07 18:00:01 host kernel: Workqueue: writeback wb_workfn (flush-8:0)
Dec 07 18:00:01 host kernel: Call Trace:
Dec 07 18:00:01 host kernel:  <TASK>
Dec 07 18:00:01 host kernel:  __schedule+0x356/0x11a0
Dec 07 18:00:01 host kernel:  ? wb_over_bg_thresh+0x26c/0x2a0
Dec 07 18:00:01 host kernel:  schedule+0x5e/0xd0
Dec 07 18:00:01 host kernel:  inode_sleep_on_writeback+0xbe/0xd0
Dec 07 18:00:01 host kernel:  wb_writeback+0x11f/0x2f0
Dec 07 18:00:01 host kernel:  wb_workfn+0x2c9/0x520
Dec 07 18:00:01 host kernel:  process_one_work+0x1c7/0x380
Dec 07 18:00:01 host kernel:  worker_thread+0x51/0x390
Dec 07 18:00:01 host kernel:  kthread+0xde/0x110
Dec 07 18:00:01 host kernel:  ? kthread_complete_and_exit+0x20/0x20
Dec 07 18:00:01 host kernel:  ret_from_fork+0x22/0x30
Dec 07 18:00:01 host kernel:  </TASK>";

    /// A user task's block: registers under its stack.
    const USER: &str = "\
[  605.192986] INFO: task sudo:1622 blocked for more than 120 seconds.
[  605.192987]       Tainted: G        W  OE     5.18.0-kali2-amd64 #1
[  605.192987] \"echo 0 > /proc/sys/kernel/hung_task_timeout_secs\" disables this message.
[  605.192988] task:sudo            state:D stack:    0 pid: 1622 ppid:  1500 flags:0x00000000
[  605.192989] Call Trace:
[  605.192989]  <TASK>
[  605.192990]  __schedule+0x30c/0x9e0
[  605.192991]  schedule+0x4e/0xb0
[  605.192991]  schedule_preempt_disabled+0x14/0x20
[  605.192992]  __mutex_lock.constprop.0+0x2b8/0x460
[  605.192993]  rtnetlink_rcv_msg+0xf7/0x380
[  605.192994]  netlink_rcv_skb+0x51/0xf0
[  605.192995]  netlink_unicast+0x23a/0x360
[  605.192996]  netlink_sendmsg+0x24f/0x4b0
[  605.192997]  __sys_sendto+0xf0/0x160
[  605.192998]  __x64_sys_sendto+0x20/0x30
[  605.192999]  do_syscall_64+0x3b/0xc0
[  605.193000]  entry_SYSCALL_64_after_hwframe+0x44/0xae
[  605.193001] RIP: 0033:0x7fa1293c55c6
[  605.193002] RSP: 002b:00007ffd71649d98 EFLAGS: 00000246 ORIG_RAX: 000000000000002c
[  605.193003] RAX: ffffffffffffffda RBX: 000000001a0e6553 RCX: 00007fa1293c55c6
[  605.193004]  </TASK>";

    fn newest_first(text: &str) -> String {
        text.lines().rev().collect::<Vec<_>>().join("\n")
    }

    fn sites(text: &str) -> Vec<(String, Option<String>, usize)> {
        explain(text.as_bytes())
            .unwrap()
            .tasks
            .into_iter()
            .map(|t| (t.task, t.site, t.stack.len()))
            .collect()
    }

    #[test]
    fn a_newest_first_block_reads_as_the_kernel_printed_it() {
        for block in [FORWARD, USER] {
            let forward = sites(block);
            assert_eq!(forward.len(), 1, "{forward:?}");
            assert_eq!(sites(&newest_first(block)), forward);
        }
    }

    #[test]
    fn newest_first_blocks_among_pastes_in_order_keep_every_task() {
        // journalctl -r of two blocks (the newer one first), between two pastes in the usual order.
        let reversed = newest_first(&format!("{USER}\n{FORWARD}"));
        let paste = format!("{FORWARD}\n{reversed}\n{USER}\n");
        let got = sites(&paste);
        let names: Vec<&str> = got.iter().map(|(n, _, _)| n.as_str()).collect();
        assert_eq!(
            names,
            ["kworker/u8:0", "kworker/u8:0", "sudo", "sudo"],
            "{got:?}"
        );
        assert_eq!(got[0], got[1]);
        assert_eq!(got[2], got[3]);
        assert!(
            got[0]
                .1
                .as_deref()
                .unwrap()
                .contains("inode writeback wait"),
            "{got:?}"
        );
        assert!(got[2].1.as_deref().unwrap().contains("RTNL"), "{got:?}");
    }

    #[test]
    fn an_old_kernels_block_newest_first_with_its_stack_words() {
        // tcmu-runner#299: `> `-quoted journal lines, newest first, the task line and raw stack words of a
        // 3.10 kernel between `Call Trace:` and `INFO: task`, the older block's last frame after it.
        let log = include_str!(
            "../../tests/data/traces/tcmu-runner-299-iscsi-trx-free-cmd-newest-first-journal-quoted.txt"
        );
        let body: String = log
            .lines()
            .filter(|l| !l.starts_with("# "))
            .map(|l| format!("{l}\n"))
            .collect();
        assert_eq!(super::reversed_blocks(&body).len(), 1);
        let e = explain(body.as_bytes()).unwrap();
        assert_eq!(e.tasks.len(), 1, "{:?}", e.tasks);
        let t = &e.tasks[0];
        assert_eq!(
            (t.task.as_str(), t.pid, t.ppid),
            ("iscsi_trx", Some(447348), Some(2))
        );
        let names: Vec<&str> = t.stack.iter().map(|f| f.function.as_str()).collect();
        assert_eq!(
            names,
            [
                "schedule_timeout",
                "wait_for_completion",
                "transport_generic_free_cmd"
            ]
        );
    }

    #[test]
    fn a_block_in_the_usual_order_is_not_turned() {
        assert!(super::reversed_blocks(FORWARD).is_empty());
        assert!(super::reversed_blocks(USER).is_empty());
        assert_eq!(super::reversed_blocks(&newest_first(FORWARD)).len(), 1);
    }
}
