//! A task as `explain` reads it: the bounds and the draft that collects a task's
//! header fields and frames (with how they were written) until the next task starts, then cleans and
//! classifies it.

use super::clean;
use super::formats::is_stack_bottom;
use crate::explained_task::ExplainedTask;
use crate::site;
use crate::snapshot::StackFrame;

/// The most bytes read: far more than any dmesg ring (a few MiB at most).
pub const MAX_INPUT: usize = 16 << 20;
/// The most tasks kept (a sysrq-t dump of a busy host has thousands).
pub const MAX_TASKS: usize = 20_000;
/// The most frames kept per task (the kernel prints at most 64 per stack; IRQ and task stacks together more).
pub const MAX_TASK_FRAMES: usize = 256;
/// The most frames kept over all tasks (a few MiB), whatever the input packs into 16 MiB.
pub const MAX_TOTAL_FRAMES: usize = 200_000;
/// The frames a draft makes room for at its first: most stacks fit.
const TYPICAL_STACK_FRAMES: usize = 48;
/// Lines longer than this are not log lines: ignored.
pub(super) const MAX_LINE: usize = 4096;

/// A task being read: header fields and raw frames (with their `?` marks) until the next task starts.
#[derive(Default)]
pub(super) struct Draft {
    pub(super) task: String,
    pub(super) pid: Option<i32>,
    pub(super) ppid: Option<i32>,
    pub(super) workqueue: Option<String>,
    pub(super) wchan: Option<String>,
    /// (frame, was it a `?` guess)
    pub(super) frames: Vec<(StackFrame, bool)>,
    /// The `RIP:`/`pc :` of a soft lockup: where the CPU spins, innermost.
    pub(super) rip: Option<StackFrame>,
    pub(super) skipped: Vec<String>,
    pub(super) skipped_count: usize,
    pub(super) too_many: bool,
    pub(super) in_irq: bool,
    /// The last callee of a 32-bit arm `(A) from [<…>] (B)` line.
    pub(super) arm_from: bool,
    pub(super) header: bool,
    /// A wedge-capture report said so (`note: kernel thread: …` under the stack).
    pub(super) kernel_thread: bool,
    /// The hung-task detector's "blocked on … likely owned by task …" line about this task.
    pub(super) blocker: Option<String>,
    /// That line's `<writer>`/`<reader>` after the task's name.
    pub(super) blocker_role: Option<String>,
    /// After `Call Trace:`: a bare function name (`down`, `ApplyModeSetConfig [nvidia_modeset]`) is a frame.
    pub(super) in_trace: bool,
    /// The last frame read ends a stack (`ret_from_fork`, `entry_SYSCALL_64_after_hwframe`, `el0t_64_sync`):
    /// another frame (not a `?` guess) is another task's.
    pub(super) bottom: bool,
    /// What came between the last frame and this line.
    pub(super) gap: Gap,
    /// How the frames so far were written.
    pub(super) notation: Option<Notation>,
    /// `</TASK>` closed the stack.
    pub(super) ended: bool,
    /// The kernel timestamp of the last frame line.
    pub(super) stamp: Option<f64>,
    /// A `?` alone on its line: the frame wrapped onto the next line is a guess.
    pub(super) pending_guess: bool,
    /// crash's `bt -t`/`bt -T` (its `START: f at …` line): every text address found on the stack, stale ones
    /// included, so each frame is a guess.
    pub(super) text_symbols: bool,
}

/// A break in the frames: a blank line, or a separator (a code fence, a line of dashes, a shell prompt). Only a
/// separator begins another task by itself.
#[derive(Default, Clone, Copy, PartialEq, Eq)]
pub(super) enum Gap {
    #[default]
    None,
    Blank,
    Separator,
}

/// A frame notation and the kind of prefix a log tool put on the line (none, a timestamp, a syslog host and
/// `kernel: `…): one unwinder prints one notation and one log one prefix, so a block in another is another
/// paste.
#[derive(Clone, Copy, PartialEq, Eq)]
pub(super) struct Notation {
    pub(super) style: Style,
    pub(super) prefix: Prefix,
}

/// The kind of prefix a log tool puts on a line (a mail's `> ` quote aside).
#[derive(Clone, Copy, PartialEq, Eq, Default)]
pub(super) enum Prefix {
    #[default]
    None,
    /// `[ 123.456]`, `[Sep26 10:00]` (`dmesg -H`), `<4>`.
    Timestamp,
    /// `[Wed Sep 26 10:00:00 2018]`: `dmesg -T` prints every line's time so (ctime), where plain dmesg prints
    /// seconds: one log's lines carry one of the two, so a change is another paste (round 14: a header-less
    /// `dmesg -T` stack after a dmesg stack cut short).
    DateStamp,
    /// `Nov 19 01:03:26 host kernel: …`, journalctl.
    Syslog,
    /// An ISO time, a raw /dev/kmsg header, a level word.
    Other,
}

impl Prefix {
    pub(super) fn of(raw: &str, msg: &str) -> Prefix {
        let raw = raw.trim_end_matches('\r');
        let cut = raw.len().saturating_sub(msg.len());
        let prefix = raw.get(..cut).unwrap_or("").trim_start_matches(|c: char| {
            c.is_whitespace() || c == '>' || c == '+' || c == '-' || c == '*'
        });
        if prefix.trim().is_empty() {
            Prefix::None
        } else if super::task_line::contains(prefix, "kernel:")
            || super::task_line::contains(prefix, "kernel[")
        {
            Prefix::Syslog
        } else if prefix.starts_with('[') && super::stamp::is_ctime_day(&prefix[1..]) {
            Prefix::DateStamp
        } else if prefix.starts_with('[') || prefix.starts_with('<') {
            Prefix::Timestamp
        } else {
            Prefix::Other
        }
    }
}

#[derive(Clone, Copy, PartialEq, Eq)]
pub(super) enum Style {
    /// `[<ffffffff…>] f+0x1/0x2` (dmesg before 4.x).
    Addressed,
    /// `[<0>] f+0x1/0x2`: `/proc/<tid>/stack` since 4.x, its addresses zeroed: a bare copy after a dmesg
    /// stack cut short is another task.
    Zeroed,
    /// ` f+0x1/0x2` (dmesg since 4.x, syzbot).
    Bare,
    /// crash's `bt`, drgn.
    Crash,
    /// 32-bit arm `(A) from (B)`.
    ArmFrom,
}

impl Draft {
    /// Round 18: whether a frame line with this stamp and notation is another dmesg run's, whatever its first
    /// frame: uptime seconds and `dmesg -T` dates are two invocations' output (one dmesg prints one of them),
    /// and a `dmesg -T` date more than a day before the last one is another incident's log, not a printk or
    /// OCR glitch.
    pub(super) fn another_dmesg_run(&self, stamp: Option<f64>, now: Notation) -> bool {
        let Some(last) = self.notation else {
            return false;
        };
        let kinds = (last.prefix, now.prefix);
        if matches!(
            kinds,
            (Prefix::Timestamp, Prefix::DateStamp) | (Prefix::DateStamp, Prefix::Timestamp)
        ) {
            return true;
        }
        kinds == (Prefix::DateStamp, Prefix::DateStamp)
            && matches!((self.stamp, stamp), (Some(before), Some(t)) if t < before - 86_400.0)
    }

    pub(super) fn push(&mut self, frame: StackFrame, guess: bool) {
        if self.in_irq {
            return;
        }
        // A guess says where the stack ends only in a stack of guesses (an unwinder without frame pointers).
        if !guess || self.frames.iter().all(|(_, g)| *g) {
            self.bottom = ends_stack(site::frame_name::base_name(&frame.function));
        }
        if self.frames.len() == MAX_TASK_FRAMES {
            self.too_many = true;
            return;
        }
        if self.frames.is_empty() {
            // A stack is a few dozen frames: room for them at once, not regrown four times (one draft lives at
            // a time).
            self.frames.reserve(TYPICAL_STACK_FRAMES);
        }
        self.frames.push((frame, guess));
    }

    pub(super) fn skip(&mut self, line: &str) {
        self.skipped_count += 1;
        if self.skipped.len() < 4 {
            self.skipped.push(line.chars().take(120).collect());
        }
    }

    pub(super) fn finish(self) -> ExplainedTask {
        let (mut stack, interrupt_note) = clean::task_stack(self.frames);
        if let Some(rip) = self.rip {
            if stack.first().map(|f| &f.function) != Some(&rip.function) {
                stack.insert(0, rip);
            }
        }
        let mut notes: Vec<String> = interrupt_note.into_iter().collect();
        let blocked_on = self.blocker.as_deref().and_then(|b| {
            crate::wait_graph::explain::parse_blocker(b, self.blocker_role.as_deref())
        });
        if let Some(b) = &self.blocker {
            notes.push(format!("the kernel's hung-task detector: {b}"));
        }
        if self.skipped_count > 0 {
            notes.push(format!(
                "{} unparseable stack frame{} skipped: {}",
                self.skipped_count,
                if self.skipped_count == 1 { "" } else { "s" },
                self.skipped
                    .iter()
                    .map(|s| format!("`{}`", s.replace('`', "'")))
                    .collect::<Vec<_>>()
                    .join(", ")
            ));
        }
        if self.too_many {
            notes.push(format!(
                "more than {MAX_TASK_FRAMES} frames: the rest ignored"
            ));
        }
        if stack.is_empty() {
            notes.push("no stack in the input for this task".to_string());
        }
        let kernel_thread = self.kernel_thread
            || self.ppid == Some(2)
            || self.workqueue.is_some()
            || self.task.starts_with("kworker/")
            // pid 1 before it execs init runs kernel_init with the idle task's comm (`swapper/0`); its parent
            // is pid 0 (round 7).
            || (self.ppid == Some(0) && self.task.starts_with("swapper"))
            || site::is_kernel_thread_stack(&stack);
        let unnamed = self.task.is_empty();
        let task = if unnamed {
            "(pasted stack)".to_string()
        } else {
            self.task
        };
        let origin = if kernel_thread {
            site::Origin::KernelThread {
                comm: if unnamed { "" } else { &task },
                workqueue: self.workqueue.as_deref(),
            }
        } else {
            site::Origin::Syscall(None)
        };
        let mut site = if stack.is_empty() {
            None
        } else {
            site::classify_from(origin, &stack, self.wchan.as_deref())
        };
        // The hung-task detector's own word on the lock (6.14+) where the stack hid it (issue 38).
        if let (Some(s), Some(b)) = (&site, &blocked_on) {
            let kind = match b.kind {
                crate::wait_graph::LockKind::Mutex => Some("mutex"),
                crate::wait_graph::LockKind::Semaphore => Some("semaphore"),
                crate::wait_graph::LockKind::Rwsem => Some("rwsem"),
                _ => None,
            };
            if let Some(kind) = kind.filter(|_| s.contains("lock or wait not visible")) {
                let mode = b.mode.map(|m| match m {
                    crate::wait_graph::Mode::Read => "read",
                    crate::wait_graph::Mode::Write => "write",
                });
                let lock = b.kind.with_article();
                let owner = match (&b.owner, b.owner_pid) {
                    (Some(o), Some(pid)) => format!("{lock} owned by {o}:{pid}"),
                    (Some(o), None) => format!("{lock} owned by {o}"),
                    _ => format!("{lock} whose owner the kernel did not find"),
                };
                site = Some(site::with_recorded_lock(s, kind, mode, &owner));
            }
        }
        ExplainedTask {
            task,
            pid: self.pid,
            ppid: self.ppid,
            kernel_thread,
            workqueue: self.workqueue,
            wchan: self.wchan,
            stack,
            site,
            notes,
            blocked_on,
        }
    }
}

/// A frame nothing but a stack's bottom can follow: a bottom itself ([`is_stack_bottom`]), or `kthread`, whose
/// only caller is the architecture's thread start (`ret_from_fork`, `kernel_thread_helper`): a frame after it
/// (not a `?` guess, not a bottom) is another stack's, even when the bottom was cut off the paste.
fn ends_stack(name: &str) -> bool {
    is_stack_bottom(name) || name == "kthread"
}
