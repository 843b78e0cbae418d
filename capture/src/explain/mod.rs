//! `explain`: the tasks and stacks in text people paste — a dmesg/journal hung-task block (`INFO: task
//! NAME:PID blocked for more than N seconds.` and its `Call Trace:` with `?` frames, `<TASK>` markers,
//! timestamps and module lists), a sysrq-w/-t dump of many tasks, a soft-lockup trace, a bare
//! `/proc/<tid>/stack` copy, or the stacks of a wedge-capture report — each classified by the same
//! [`crate::site`] classifier as a live capture.
//!
//! Pure: [`explain`] takes bytes and returns tasks or a clear error; it never panics, reads at most
//! [`MAX_INPUT`] bytes and keeps at most [`MAX_TASKS`] tasks of at most [`MAX_TASK_FRAMES`] frames,
//! [`MAX_TOTAL_FRAMES`] in all (a 16 MiB input packed with frames: 0.7 s and 65 MiB peak RSS, release build).
//!
//! Map: [`formats`] reads one line of any notation (log prefixes, task headers, frame formats of every
//! unwinder and tool); [`clean`] turns the frames read into the task's stack as `/proc/<tid>/stack` would show
//! it (no `?` guesses, scheduler or wait-queue frames, function pointers, or an interrupt's frames); this
//! module keeps the reader's state and the public API. A frame that does not parse (a demangled C++ name with
//! spaces) is skipped and noted.

mod clean;
mod formats;

use serde::Serialize;

use formats::{
    arm_from, bare_name, crash_frame, frame_text, header, is_stack_bottom, message,
    normalize_frame, proc_stack_pid, wrapped_module, Header,
};

use crate::error::{Error, Result};
use crate::explained_task::ExplainedTask;
use crate::parse::stack;
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
/// Lines longer than this are not log lines: ignored.
const MAX_LINE: usize = 4096;

/// Every task of the input, in input order.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct Explained {
    pub tasks: Vec<ExplainedTask>,
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub notes: Vec<String>,
    /// The tasks linked by the kernel's "blocked on … likely owned by task …" lines (issue 36).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub wait_graph: Option<crate::wait_graph::WaitGraph>,
    /// NVIDIA Xid / NVSwitch SXid lines of the paste, each tied to its tasks by pid or name ([`crate::xid`]).
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub xids: Vec<crate::xid::paste::PastedXid>,
}

fn bad(why: impl Into<String>) -> Error {
    Error::Parse {
        what: "pasted kernel log",
        why: why.into(),
    }
}

/// A task being read: header fields and raw frames (with their `?` marks) until the next task starts.
#[derive(Default)]
struct Draft {
    task: String,
    pid: Option<i32>,
    ppid: Option<i32>,
    workqueue: Option<String>,
    wchan: Option<String>,
    /// (frame, was it a `?` guess)
    frames: Vec<(StackFrame, bool)>,
    /// The `RIP:`/`pc :` of a soft lockup: where the CPU spins, innermost.
    rip: Option<StackFrame>,
    skipped: Vec<String>,
    skipped_count: usize,
    too_many: bool,
    in_irq: bool,
    /// The last callee of a 32-bit arm `(A) from [<…>] (B)` line.
    arm_from: bool,
    header: bool,
    /// A wedge-capture report said so (`note: kernel thread: …` under the stack).
    kernel_thread: bool,
    /// The hung-task detector's "blocked on … likely owned by task …" line about this task.
    blocker: Option<String>,
    /// That line's `<writer>`/`<reader>` after the task's name.
    blocker_role: Option<String>,
    /// After `Call Trace:`: a bare function name (`down`, `ApplyModeSetConfig [nvidia_modeset]`) is a frame.
    in_trace: bool,
    /// The last frame read ends a stack (`ret_from_fork`, `entry_SYSCALL_64_after_hwframe`, `el0t_64_sync`):
    /// another frame (not a `?` guess) is another task's.
    bottom: bool,
    /// What came between the last frame and this line.
    gap: Gap,
    /// How the frames so far were written.
    notation: Option<Notation>,
    /// `</TASK>` closed the stack.
    ended: bool,
    /// The kernel timestamp of the last frame line.
    stamp: Option<f64>,
    /// A `?` alone on its line: the frame wrapped onto the next line is a guess.
    pending_guess: bool,
    /// crash's `bt -t`/`bt -T` (its `START: f at …` line): every text address found on the stack, stale ones
    /// included, so each frame is a guess.
    text_symbols: bool,
}

/// A break in the frames: a blank line, or a separator (a code fence, a line of dashes, a shell prompt). Only a
/// separator begins another task by itself.
#[derive(Default, Clone, Copy, PartialEq, Eq)]
enum Gap {
    #[default]
    None,
    Blank,
    Separator,
}

/// A frame notation and the kind of prefix a log tool put on the line (none, a timestamp, a syslog host and
/// `kernel: `…): one unwinder prints one notation and one log one prefix, so a block in another is another
/// paste.
#[derive(Clone, Copy, PartialEq, Eq)]
struct Notation {
    style: Style,
    prefix: Prefix,
}

/// The kind of prefix a log tool puts on a line (a mail's `> ` quote aside).
#[derive(Clone, Copy, PartialEq, Eq, Default)]
enum Prefix {
    #[default]
    None,
    /// `[ 123.456]`, `[Wed Sep 26 …]`, `<4>`.
    Timestamp,
    /// `Nov 19 01:03:26 host kernel: …`, journalctl.
    Syslog,
    /// An ISO time, a raw /dev/kmsg header, a level word.
    Other,
}

impl Prefix {
    fn of(raw: &str, msg: &str) -> Prefix {
        let raw = raw.trim_end_matches('\r');
        let cut = raw.len().saturating_sub(msg.len());
        let prefix = raw.get(..cut).unwrap_or("").trim_start_matches(|c: char| {
            c.is_whitespace() || c == '>' || c == '+' || c == '-' || c == '*'
        });
        if prefix.trim().is_empty() {
            Prefix::None
        } else if prefix.contains("kernel:") || prefix.contains("kernel[") {
            Prefix::Syslog
        } else if prefix.starts_with('[') || prefix.starts_with('<') {
            Prefix::Timestamp
        } else {
            Prefix::Other
        }
    }
}

#[derive(Clone, Copy, PartialEq, Eq)]
enum Style {
    /// `[<0>] f+0x1/0x2` (`/proc/<tid>/stack`) or `[<ffffffff…>] f+0x1/0x2` (dmesg before 4.x).
    Addressed,
    /// ` f+0x1/0x2` (dmesg since 4.x, syzbot).
    Bare,
    /// crash's `bt`, drgn.
    Crash,
    /// 32-bit arm `(A) from (B)`.
    ArmFrom,
}

impl Draft {
    fn push(&mut self, frame: StackFrame, guess: bool) {
        if self.in_irq {
            return;
        }
        // A guess says where the stack ends only in a stack of guesses (an unwinder without frame pointers).
        if !guess || self.frames.iter().all(|(_, g)| *g) {
            self.bottom = is_stack_bottom(site::base_name(&frame.function));
        }
        if self.frames.len() == MAX_TASK_FRAMES {
            self.too_many = true;
            return;
        }
        self.frames.push((frame, guess));
    }

    fn skip(&mut self, line: &str) {
        self.skipped_count += 1;
        if self.skipped.len() < 4 {
            self.skipped.push(line.chars().take(120).collect());
        }
    }

    fn finish(self) -> ExplainedTask {
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

struct Reader {
    /// The prefix of the line being read.
    prefix: Prefix,
    /// The kernel timestamp (`[ 123.456789]`) of the line being read, when it has one.
    stamp: Option<f64>,
    /// The last line was a prefix alone (`[ 12.3] ` with its message wrapped onto the next line): the next
    /// line is its message, with its prefix.
    wrapped_prefix: Option<Prefix>,
    tasks: Vec<ExplainedTask>,
    draft: Option<Draft>,
    dropped_tasks: usize,
    /// Frames kept so far, against [`MAX_TOTAL_FRAMES`].
    total_frames: usize,
}

impl Reader {
    fn finish_draft(&mut self) {
        if let Some(d) = self.draft.take() {
            if !d.header && d.frames.is_empty() && d.rip.is_none() {
                return;
            }
            if self.tasks.len() == MAX_TASKS || self.total_frames >= MAX_TOTAL_FRAMES {
                self.dropped_tasks += 1;
                return;
            }
            self.total_frames += d.frames.len();
            self.tasks.push(d.finish());
        }
    }

    fn draft(&mut self) -> &mut Draft {
        self.draft.get_or_insert_with(Draft::default)
    }

    fn start(&mut self, name: String, pid: Option<i32>, ppid: Option<i32>, wchan: Option<String>) {
        // `task:` after `INFO: task` is the same task's second header line.
        if let Some(d) = &mut self.draft {
            let same = (d.pid == pid && pid.is_some()) || (pid.is_none() && d.task == name);
            if d.header && d.frames.is_empty() && same {
                d.ppid = ppid.or(d.ppid);
                return;
            }
        }
        self.finish_draft();
        self.draft = Some(Draft {
            task: name,
            pid,
            ppid,
            wchan,
            header: true,
            ..Draft::default()
        });
    }

    /// Before 4.14 the line after `INFO: task` read `comm  D ffff…  0  PID  PPID 0x…` (and sysrq-w/-t print it
    /// for every task): its ppid tells a kernel thread (2).
    fn old_task_line(&mut self, rest: &str) -> bool {
        let Some((comm, pid, ppid)) = formats::old_task_line(rest) else {
            return false;
        };
        match &mut self.draft {
            Some(d) if d.header && d.frames.is_empty() && d.pid == Some(pid) => d.ppid = Some(ppid),
            _ => self.start(comm, Some(pid), Some(ppid), None),
        }
        true
    }

    /// Before a frame (not a guess) of `notation`: a frame after the end of a stack, after a separator, or in
    /// another notation (one unwinder prints one notation) begins a task of its own (pastes put one after
    /// another). A blank line alone does not: some pastes double-space their frames.
    fn before_frame(&mut self, notation: Notation, guess: bool, function: &str) {
        // A bottom under a bottom (`ret_from_fork_asm` under `ret_from_fork`) is the same stack's end: a task's
        // innermost frame never is one.
        let bottom_again = is_stack_bottom(site::base_name(function));
        // A `?` guess after a stack's last frame is a stale slot under it (`? kthread_create_on_node` under
        // `ret_from_fork`), unless the stack was closed (`</TASK>`) or the notation changed.
        // One log's timestamps only go forward, and one stack prints within moments.
        let other_log = |d: &Draft| match (d.stamp, self.stamp) {
            (Some(last), Some(now)) => now < last || now - last > 10.0,
            _ => false,
        };
        // Where a stack starts: the scheduler, a wait primitive, or a function that takes a lock.
        let name = site::base_name(function);
        // Asked only when the prefix or the time changed (a scan of the tables).
        let top_like = || {
            site::rules::SCHEDULER_FRAMES.contains(&name)
                || site::rules::wait_words(name).is_some()
                || site::rules::lock_taken_by(name).is_some()
        };
        let other_prefix = |d: &Draft| d.notation.is_some_and(|n| n.prefix != notation.prefix);
        let split = self.draft.as_ref().is_some_and(|d| {
            !bottom_again
                && !d.frames.is_empty()
                && (d.ended
                    || ((other_log(d) || other_prefix(d)) && top_like())
                    || d.notation.is_some_and(|n| n.style != notation.style)
                    || (!guess && (d.bottom || d.gap == Gap::Separator)))
        });
        if split {
            self.finish_draft();
            self.draft = Some(Draft {
                in_trace: true,
                ..Draft::default()
            });
        }
        let stamp = self.stamp;
        let d = self.draft();
        d.gap = Gap::None;
        d.notation = Some(notation);
        d.stamp = stamp.or(d.stamp);
    }

    fn notation(&self, style: Style) -> Notation {
        Notation {
            style,
            prefix: self.prefix,
        }
    }

    /// A blank line or a separator after some frames.
    fn gap(&mut self, gap: Gap) {
        if let Some(d) = self.draft.as_mut().filter(|d| !d.frames.is_empty()) {
            if gap == Gap::Separator || d.gap == Gap::None {
                d.gap = gap;
            }
        }
    }

    fn line(&mut self, raw: &str) {
        let msg = message(raw);
        let prefix = Prefix::of(raw, msg);
        self.stamp = formats::kernel_stamp(raw);
        let trimmed = msg.trim();
        self.prefix = match self.wrapped_prefix.take() {
            Some(p) if prefix == Prefix::None => p,
            _ => prefix,
        };
        if trimmed.is_empty() || trimmed == "?" {
            if prefix != Prefix::None {
                self.wrapped_prefix = Some(prefix);
            }
            if trimmed.is_empty() {
                return self.gap(Gap::Blank);
            }
        }
        if let Some(pid) = proc_stack_pid(trimmed) {
            return self.start(String::new(), Some(pid), None, None);
        }
        if is_separator(trimmed) {
            return self.gap(Gap::Separator);
        }
        match header(trimmed) {
            Some(Header::Task {
                name,
                pid,
                ppid,
                wchan,
            }) => return self.start(name, pid, ppid, wchan),
            Some(Header::Blocker { pid, words, role }) => {
                let words: String = words.chars().take(200).collect();
                if let Some(d) = self
                    .draft
                    .as_mut()
                    .filter(|d| pid.is_none() || d.pid == pid)
                {
                    d.blocker = Some(words);
                    d.blocker_role = role;
                } else if let Some(t) = self
                    .tasks
                    .iter_mut()
                    .rev()
                    .find(|t| pid.is_some() && t.pid == pid && t.blocked_on.is_none())
                {
                    // The task's stack ended before the line came.
                    t.blocked_on =
                        crate::wait_graph::explain::parse_blocker(&words, role.as_deref());
                    t.notes
                        .push(format!("the kernel's hung-task detector: {words}"));
                }
                return;
            }
            None => {}
        }
        // The rest of a task header a mail client wrapped: `ppid:2 flags:0x…`, `blocked for more than …`.
        if let Some(d) = self
            .draft
            .as_mut()
            .filter(|d| d.header && d.frames.is_empty())
        {
            let wrapped_fields = ["ppid:", "tgid:", "stack:", "pid:"];
            if wrapped_fields.iter().any(|f| trimmed.starts_with(f)) {
                let fields = format!(" {trimmed}");
                d.ppid = formats::number_after(&fields, "ppid:").or(d.ppid);
                d.pid = d.pid.or(formats::number_after(&fields, " pid:"));
                return;
            }
            if trimmed.starts_with("blocked for more than") || trimmed.starts_with("flags:0x") {
                return;
            }
        }
        if let Some(q) = trimmed.strip_prefix("Workqueue: ") {
            // The kernel prints it before the stack: after frames it begins another (header-less) task.
            if self.draft.as_ref().is_some_and(|d| !d.frames.is_empty()) {
                self.finish_draft();
            }
            self.draft().workqueue = Some(q.trim().to_string());
            return;
        }
        if let Some(rip) = trimmed
            .strip_prefix("RIP: 0010:")
            .or_else(|| trimmed.strip_prefix("pc : "))
        {
            if let Ok(f) = stack::frame(normalize_frame(rip).trim().as_bytes()) {
                // Registers come before the stack: after frames they are another task's.
                if self.draft.as_ref().is_some_and(|d| !d.frames.is_empty()) {
                    self.finish_draft();
                }
                let d = self.draft();
                if d.frames.is_empty() {
                    d.rip = Some(f);
                }
            }
            return;
        }
        let mut rest = trimmed;
        loop {
            let marker = [
                "<TASK>", "</TASK>", "<IRQ>", "</IRQ>", "<NMI>", "</NMI>", "<EOI>",
            ]
            .into_iter()
            .find(|m| rest.starts_with(m));
            let Some(marker) = marker else { break };
            match marker {
                "<IRQ>" | "<NMI>" => self.draft().in_irq = true,
                "</IRQ>" | "</NMI>" | "<EOI>" => self.draft().in_irq = false,
                "</TASK>" => {
                    if let Some(d) = self.draft.as_mut().filter(|d| !d.frames.is_empty()) {
                        d.ended = true;
                    }
                }
                _ => {}
            }
            rest = rest[marker.len()..].trim_start();
        }
        if rest.starts_with("Call Trace")
            || rest.starts_with("Call trace")
            || rest.starts_with("Backtrace")
        {
            // A second `Call Trace:` after frames: a header-less task of its own.
            if self.draft.as_ref().is_some_and(|d| !d.frames.is_empty()) {
                self.finish_draft();
            }
            self.draft().in_trace = true;
            return;
        }
        if rest.is_empty() {
            return;
        }
        self.frame_line(&normalize_frame(rest));
    }

    /// A line inside a task that is no header or marker: a frame in one of the notations, a report's note,
    /// or an old kernel's task line.
    fn frame_line(&mut self, rest: &str) {
        if let Some(module) = wrapped_module(rest) {
            if let Some((last, _)) = self.draft.as_mut().and_then(|d| d.frames.last_mut()) {
                if last.module.is_none() {
                    last.module = Some(module.to_string());
                }
                return;
            }
        }
        if let Some((callee, caller)) = arm_from(rest) {
            let callee_name = callee.split(['+', ' ']).next().unwrap_or(callee);
            let continues = self.draft.as_ref().is_some_and(|d| {
                d.frames.last().is_some_and(|(f, _)| {
                    site::base_name(&f.function) == site::base_name(callee_name)
                })
            });
            if !continues {
                // Each `from` line's callee is the line above's caller: one that is not starts another stack.
                let broken = self.draft.as_ref().is_some_and(|d| {
                    d.arm_from && d.notation.is_some_and(|n| n.style == Style::ArmFrom)
                });
                if broken {
                    self.finish_draft();
                    self.draft = Some(Draft {
                        in_trace: true,
                        ..Draft::default()
                    });
                }
                self.before_frame(self.notation(Style::ArmFrom), false, callee_name);
            }
            let d = self.draft();
            if !d.arm_from {
                d.arm_from = true;
                match stack::frame(callee.as_bytes()) {
                    Ok(f) => d.push(f, false),
                    Err(_) => d.skip(callee),
                }
            }
            match stack::frame(caller.as_bytes()) {
                Ok(f) => d.push(f, false),
                Err(_) => d.skip(caller),
            }
            return;
        }
        if let Some(note) = rest.strip_prefix("note: ") {
            // process.rs notes a kernel thread under its stack; the report prints the note.
            if note.starts_with("kernel thread:") {
                self.draft().kernel_thread = true;
            }
            return;
        }
        if self.old_task_line(rest) {
            return;
        }
        if rest.trim_start().starts_with("START: ") && rest.contains(" at ") {
            self.draft().text_symbols = true;
            return;
        }
        if let Some(text) = crash_frame(rest) {
            let name = text.split(['+', ' ']).next().unwrap_or(&text).to_string();
            let guess = self.draft().text_symbols;
            self.before_frame(self.notation(Style::Crash), guess, &name);
            let d = self.draft();
            match stack::frame(text.as_bytes()) {
                Ok(f) => d.push(f, guess),
                Err(_) => d.skip(&text),
            }
            return;
        }
        if rest.trim() == "?" {
            self.draft().pending_guess = true;
            return;
        }
        if let Some((text, guess)) = frame_text(rest) {
            let guess = guess || std::mem::take(&mut self.draft().pending_guess);
            let notation = self.notation(if rest.trim_start().starts_with("[<") {
                Style::Addressed
            } else {
                Style::Bare
            });
            self.before_frame(
                notation,
                guess,
                text.split(['+', ' ']).next().unwrap_or(text),
            );
            let d = self.draft();
            match stack::frame(text.as_bytes()) {
                Ok(f) => d.push(f, guess),
                Err(_) => d.skip(text),
            }
            return;
        }
        let in_trace = self.draft.as_ref().is_some_and(|d| d.in_trace);
        if in_trace && bare_name(rest) {
            if let Ok(f) = stack::frame(rest.as_bytes()) {
                self.draft().push(f, false);
            }
        }
    }
}

/// A line between pastes: a Markdown code fence, a rule of dashes or equals signs, a shell prompt.
fn is_separator(line: &str) -> bool {
    let t = line.trim();
    t.starts_with("```")
        || t.starts_with("~~~")
        || (t.len() >= 3 && t.bytes().all(|b| b"-=*.".contains(&b)))
        // An elision: the paste left frames out, so what follows is not known to continue them.
        || t == "\u{2026}"
        || t == "[...]"
        || t.eq_ignore_ascii_case("<snip>")
        || t.eq_ignore_ascii_case("[snip]")
        || t.starts_with("$ ")
        || (t.starts_with("# ") && !t[2..].starts_with(|c: char| c.is_ascii_digit()))
        || (t.contains('@') && (t.contains("$ ") || t.contains("# ")) && !t.contains("+0x"))
}

/// Text that is not a log: NUL bytes or mostly control characters.
fn looks_binary(input: &[u8]) -> bool {
    let sample = &input[..input.len().min(64 << 10)];
    let control = sample
        .iter()
        .filter(|&&b| b == 0 || (b < 0x20 && !b"\t\n\r\x0c\x1b".contains(&b)))
        .count();
    sample.contains(&0) || control * 100 > sample.len()
}

/// Every task in a pasted kernel log or stack, cleaned and classified.
pub fn explain(input: &[u8]) -> Result<Explained> {
    if input.len() > MAX_INPUT {
        return Err(bad(format!(
            "{} bytes is more than the {} MiB a kernel log can hold",
            input.len(),
            MAX_INPUT >> 20
        )));
    }
    if looks_binary(input) {
        return Err(bad(
            "binary data, not text: expected a kernel log (dmesg, journalctl -k) or a /proc/<tid>/stack copy",
        ));
    }
    let text = String::from_utf8_lossy(input);
    let mut reader = Reader {
        prefix: Prefix::None,
        stamp: None,
        wrapped_prefix: None,
        tasks: Vec::new(),
        draft: None,
        dropped_tasks: 0,
        total_frames: 0,
    };
    let mut long_lines = 0usize;
    for line in text.split('\n') {
        if line.len() > MAX_LINE {
            long_lines += 1;
            continue;
        }
        reader.line(line);
    }
    reader.finish_draft();
    let (mut xids, more_xids) = crate::xid::paste::scan(&text);
    if reader.tasks.is_empty() && xids.is_empty() {
        return Err(bad(
            "no task, stack or Xid found: expected a hung-task report (\"INFO: task NAME:PID blocked for more than N seconds.\" and its Call Trace), a sysrq-w/-t dump, a soft-lockup trace, a /proc/<tid>/stack copy or NVRM Xid lines",
        ));
    }
    crate::xid::paste::tie(
        &mut xids,
        reader.tasks.iter().map(|t| (t.task.as_str(), t.pid)),
    );
    let mut notes = Vec::new();
    if more_xids > 0 {
        notes.push(format!(
            "more than {} Xid lines: {more_xids} more ignored",
            crate::xid::paste::MAX_PASTE_XIDS
        ));
    }
    if reader.dropped_tasks > 0 {
        notes.push(format!(
            "more than {MAX_TASKS} tasks or {MAX_TOTAL_FRAMES} frames: {} more tasks ignored",
            reader.dropped_tasks
        ));
    }
    if long_lines > 0 {
        notes.push(format!(
            "{long_lines} lines longer than {MAX_LINE} bytes ignored"
        ));
    }
    let wait_graph = crate::wait_graph::explain::from_explained(&reader.tasks);
    Ok(Explained {
        tasks: reader.tasks,
        notes,
        wait_graph,
        xids,
    })
}

/// Markdown: per task its name, pid, site and cleaned stack. Everything the pasted text chose (task names, sites
/// naming them, frames, notes quoting lines) is inert: names and sites are code spans ([`crate::escape::code`]),
/// the stack is an indented code block of lines with their controls written out, notes are escaped prose.
pub fn markdown(e: &Explained) -> String {
    use crate::escape;
    use std::fmt::Write;
    let mut out = String::new();
    for t in &e.tasks {
        let pid = t.pid.map(|p| format!(" (pid {p})")).unwrap_or_default();
        let kind = if t.kernel_thread {
            " — kernel thread"
        } else {
            ""
        };
        let _ = writeln!(out, "## {}{pid}{kind}\n", escape::code(&t.task));
        match &t.site {
            Some(s) => {
                let _ = writeln!(out, "site: {}\n", escape::code(s));
            }
            None => out.push_str("site: unknown\n\n"),
        }
        if !t.stack.is_empty() {
            for line in crate::render::stack_text(&t.stack).lines() {
                let _ = writeln!(out, "    {}", escape::controls(line));
            }
            out.push('\n');
        }
        for n in &t.notes {
            let _ = writeln!(out, "note: {}\n", escape::inline(n));
        }
    }
    out.push_str(&crate::xid::paste::markdown(&e.xids, 0));
    for n in &e.notes {
        let _ = writeln!(out, "note: {}\n", escape::inline(n));
    }
    if let Some(g) = &e.wait_graph {
        out.push_str("## Wait graph\n\n");
        out.push_str(&crate::wait_graph::render::markdown(g, &|_| None));
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn hung_task_block_with_journal_prefix_and_guesses() {
        let log = "\
Nov 19 01:03:26 host kernel: INFO: task nv_open_q:1014 blocked for more than 122 seconds.
Nov 19 01:03:26 host kernel:       Tainted: P           OE      6.8.0-49-generic #49-Ubuntu
Nov 19 01:03:26 host kernel: task:nv_open_q       state:D stack:0     pid:1014  tgid:1014  ppid:2      flags:0x00004000
Nov 19 01:03:26 host kernel: Call Trace:
Nov 19 01:03:26 host kernel:  <TASK>
Nov 19 01:03:26 host kernel:  __schedule+0x27c/0x6b0
Nov 19 01:03:26 host kernel:  schedule+0x33/0x110
Nov 19 01:03:26 host kernel:  rwsem_down_write_slowpath+0x27e/0x550
Nov 19 01:03:26 host kernel:  down_write+0x5c/0x80
Nov 19 01:03:26 host kernel:  os_acquire_rwlock_write+0x3c/0x70 [nvidia]
Nov 19 01:03:26 host kernel:  ? down+0x36/0x80
Nov 19 01:03:26 host kernel:  rmapiLockAcquire+0x294/0x360 [nvidia]
Nov 19 01:03:26 host kernel:  kthread+0xf2/0x120
Nov 19 01:03:26 host kernel:  ret_from_fork+0x47/0x70
Nov 19 01:03:26 host kernel:  </TASK>
";
        let e = explain(log.as_bytes()).unwrap();
        assert_eq!(e.tasks.len(), 1);
        let t = &e.tasks[0];
        assert_eq!(
            (t.task.as_str(), t.pid, t.ppid),
            ("nv_open_q", Some(1014), Some(2))
        );
        assert!(t.kernel_thread);
        assert_eq!(t.stack[0].function, "rwsem_down_write_slowpath");
        assert!(t.stack.iter().all(|f| f.function != "down"));
        let site = t.site.as_deref().unwrap();
        assert!(site.starts_with("kernel thread nv_open_q"), "{site}");
        assert!(site.ends_with("[RM API lock]"), "{site}");
    }

    #[test]
    fn bare_proc_stack_and_arm32_from_lines() {
        let e = explain(b"[<0>] os_acquire_rwlock_read+0x30/0x40 [nvidia]\n[<0>] _nv012345rm+0x10/0x20 [nvidia]\n[<0>] nvidia_ioctl+0x5e4/0x8c0 [nvidia]\n[<0>] __x64_sys_ioctl+0x97/0xd0\n").unwrap();
        assert_eq!(e.tasks[0].task, "(pasted stack)");
        assert!(e.tasks[0]
            .site
            .as_deref()
            .unwrap()
            .ends_with("[RM API lock (read)]"));
        let arm = "[ 5036.077593] [<8079ef70>] (__schedule) from [<8079f5d8>] (schedule+0x50/0xa8)\n[ 5036.077611] [<8079f5d8>] (schedule) from [<807a26d8>] (rwsem_down_read_failed+0x10c/0x15c)\n[ 5036.077629] [<807a26d8>] (rwsem_down_read_failed) from [<807a1d6c>] (down_read+0x5c/0x60)\n[ 5036.077645] [<807a1d6c>] (down_read) from [<807a5418>] (do_page_fault+0xfc/0x3a4)\n";
        let e = explain(arm.as_bytes()).unwrap();
        let names: Vec<_> = e.tasks[0]
            .stack
            .iter()
            .map(|f| f.function.as_str())
            .collect();
        assert_eq!(
            names,
            ["rwsem_down_read_failed", "down_read", "do_page_fault"]
        );
    }

    #[test]
    fn raw_kmsg_and_viewer_prefixes_are_not_the_message() {
        let log = "6,1201,5140900,-;INFO: task kworker/3:1:77 blocked for more than 122 seconds.\n\
                   4,1202,5140901,-,caller=T77; <TASK>\n\
                   > 2025-01-16T17:24:58.365Z  mutex_lock+0x1f/0x2f\n\
                   warning [129398.234297] proc_cgroup_show+0x4e/0x2a0\n\
                   <4>[  12.5] autoremove_wake_function+0x0/0x40\n\
                   kern.err: [  12.6] seq_read_iter+0x11d/0x4b0\n";
        let e = explain(log.as_bytes()).unwrap();
        let t = &e.tasks[0];
        assert_eq!((t.task.as_str(), t.pid), ("kworker/3:1", Some(77)));
        let names: Vec<_> = t.stack.iter().map(|f| f.function.as_str()).collect();
        // The wake callback at offset 0 is a pointer on the stack, not a frame.
        assert_eq!(names, ["mutex_lock", "proc_cgroup_show", "seq_read_iter"]);
        assert!(
            t.site
                .as_deref()
                .unwrap()
                .contains("proc_cgroup_show … mutex wait"),
            "{:?}",
            t.site
        );
    }

    #[test]
    fn names_with_spaces_and_the_kernels_blocker_line() {
        let log = "INFO: task CPU 6/KVM:11091 blocked for more than 120 seconds.\n\
                   Call Trace:\n mutex_lock+0x1f/0x2f\n intel_vgpu_emulate_mmio_read+0x4e/0x2a0 [i915]\n\
                   INFO: task CPU 6/KVM:11091 is blocked on a mutex likely owned by task qemu:42.\n";
        let e = explain(log.as_bytes()).unwrap();
        let t = &e.tasks[0];
        assert_eq!((t.task.as_str(), t.pid), ("CPU 6/KVM", Some(11091)));
        assert_eq!(e.tasks.len(), 1);
        assert!(
            t.notes
                .iter()
                .any(|n| n.contains("blocked on a mutex likely owned by task qemu:42")),
            "{:?}",
            t.notes
        );
    }

    #[test]
    fn interrupt_frames_above_the_entry_are_not_the_task() {
        let e = explain(b"[<0>] irqentry_exit+0x34/0x640\n[<0>] sysvec_apic_timer_interrupt+0x57/0xc0\n[<0>] asm_sysvec_apic_timer_interrupt+0x1b/0x20\n[<0>] hmm_range_fault+0x3c/0xb0\n[<0>] amdgpu_hmm_range_get_pages+0x104/0x200 [amdgpu]\n").unwrap();
        let t = &e.tasks[0];
        assert_eq!(t.stack[0].function, "hmm_range_fault");
        assert!(
            t.notes
                .iter()
                .any(|n| n.contains("2 interrupt frames above asm_sysvec_apic_timer_interrupt")),
            "{:?}",
            t.notes
        );
    }

    #[test]
    fn hostile_input_is_a_clear_error() {
        assert!(explain(b"").is_err());
        assert!(explain(b"hello world\nnothing here\n").is_err());
        assert!(explain(&[0u8, 1, 2, 3, 0xff, 0x80]).is_err());
        let huge = vec![b'a'; MAX_INPUT + 1];
        assert!(explain(&huge).is_err());
        // Truncated in the middle of a frame: what is there is kept.
        let e = explain(b"INFO: task a:1 blocked for more than 120 seconds.\nCall Trace:\n mutex_lock+0x1f/0x2f\n do_last+0x28f/0x1").unwrap();
        assert_eq!(e.tasks[0].stack[0].function, "mutex_lock");
        let e = explain(b"INFO: task a:1 blocked for more than 120 seconds.\nCall Trace:\n mutex_lock+0x1f/0x2f\n do_last+0x28f/0x").unwrap();
        assert_eq!(e.tasks[0].stack.len(), 1, "{:?}", e.tasks[0]);
        assert!(
            e.tasks[0].notes[0].contains("unparseable"),
            "{:?}",
            e.tasks[0].notes
        );
        // Many tasks and frames stay bounded.
        let many =
            "INFO: task a:1 blocked for more than 120 seconds.\n f+0x1/0x2\n".repeat(MAX_TASKS + 5);
        let e = explain(many.as_bytes()).unwrap();
        assert_eq!(e.tasks.len(), MAX_TASKS);
        assert!(!e.notes.is_empty());
        let deep = format!(
            "INFO: task a:1 blocked for more than 1 seconds.\n{}",
            " f+0x1/0x2\n".repeat(1000)
        );
        let e = explain(deep.as_bytes()).unwrap();
        assert_eq!(e.tasks[0].stack.len(), MAX_TASK_FRAMES);
    }
    /// Issue 35: a pasted log names its tasks, and its tasks name themselves: every task name, the site naming a
    /// kernel thread, the kernel's blocker line and an unparseable frame quoting one, are inert in the Markdown,
    /// headings included.
    #[test]
    fn hostile_task_names_are_inert_in_the_markdown() {
        use crate::escape::{inert_markdown_problems, HOSTILE_NAMES};
        let mut log = String::new();
        for (i, name) in HOSTILE_NAMES.iter().enumerate() {
            let name = name.replace('\n', " ");
            let pid = 100 + i;
            log.push_str(&format!(
                "INFO: task {name}:{pid} blocked for more than 122 seconds.\n\
                 task:{name} state:D stack:0 pid:{pid} tgid:{pid} ppid:2 flags:0x00004000\n\
                 Call Trace:\n\
                 schedule+0x33/0x110\n\
                 rwsem_down_write_slowpath+0x27e/0x550\n\
                 {name}+0x1/0x2\n\
                 kthread+0xf2/0x120\n\
                 INFO: task {name}:{pid} is blocked on a mutex likely owned by task {name}:{}.\n",
                pid + 1
            ));
        }
        // A thread name with a line break comes from a wedge-capture report's own line (escaped there as `\n`).
        log.push_str("thread 7 line\\nbreak state D wchan rwsem_down_write_slowpath\n[<0>] rwsem_down_write_slowpath+0x1/0x2\n");
        let e = explain(log.as_bytes()).unwrap();
        let md = markdown(&e);
        let names: Vec<&str> = HOSTILE_NAMES
            .iter()
            .copied()
            .filter(|n| !n.contains('\n'))
            .collect();
        let problems = inert_markdown_problems(&md, &names);
        assert!(problems.is_empty(), "{problems:#?}\n{md}");
        assert!(md.contains("## `line\\nbreak` (pid 7)"), "{md}");
        assert!(md.contains("## ``a`b`` (pid 101)"), "{md}");
        // Every heading is one code span and a pid: no markup of the name's own.
        for heading in md
            .lines()
            .filter(|l| l.starts_with("## ") && *l != "## Wait graph")
        {
            let spans = crate::escape::code_spans(heading);
            assert_eq!(spans.len(), 1, "{heading}");
            assert_eq!(spans[0].start, 3, "{heading}");
        }
    }
}

/// Issue 38, family 4: the paste shapes read by structure (each shape alone; together in
/// `tests/traces.rs`).
#[cfg(test)]
mod shapes {
    use super::*;

    fn names(t: &ExplainedTask) -> Vec<&str> {
        t.stack.iter().map(|f| f.function.as_str()).collect()
    }

    /// crash's `bt -t` (a `START:` line) lists every text address on the stack, stale ones too: its frames are
    /// guesses, so the stale one between the rwsem's slow path and `down_read` goes; a plain `bt` keeps it.
    #[test]
    fn crash_bt_t_text_symbols_are_guesses() {
        let frames = " [ffffc9000000fd00] __schedule at ffffffff81000010\n [ffffc9000000fd40] schedule at ffffffff81000020\n [ffffc9000000fd58] rwsem_down_read_slowpath at ffffffff81000030\n [ffffc9000000fd80] filemap_map_pages at ffffffff81000040\n [ffffc9000000fda0] down_read at ffffffff81000050\n [ffffc9000000fdb8] xfs_ilock at ffffffffc0000060 [xfs]\n [ffffc9000000fdd8] xfs_file_buffered_read at ffffffffc0000070 [xfs]\n";
        let header = "PID: 77     TASK: ffff8881a2b3c000  CPU: 1   COMMAND: \"cat\"\n";
        let with_t = format!("{header}      START: __schedule at ffffffff81000010\n{frames}");
        let t = &explain(with_t.as_bytes()).unwrap().tasks[0];
        assert_eq!(
            names(t),
            [
                "rwsem_down_read_slowpath",
                "down_read",
                "xfs_ilock",
                "xfs_file_buffered_read"
            ]
        );
        assert!(
            t.notes.iter().any(|n| n.contains("`bt -t`")),
            "{:?}",
            t.notes
        );
        let plain = format!("{header}{frames}");
        let t = &explain(plain.as_bytes()).unwrap().tasks[0];
        assert!(names(t).contains(&"filemap_map_pages"), "{:?}", names(t));
    }

    #[test]
    fn crash_bt_without_frame_indices() {
        let e = explain(b"PID: 4242   TASK: ffff8881a2b3c000  CPU: 3   COMMAND: \"kworker/3:1\"\n [ffffc90000a3fd88] __schedule at ffffffff81a0b3e6\n [ffffc90000a3fe10] schedule at ffffffff81a0b8a4\n [ffffc90000a3fe28] schedule_timeout at ffffffff81a10f1e\n [ffffc90000a3fea0] wait_for_completion at ffffffff81a0c5d2\n [ffffc90000a3fef0] nvme_dev_disable at ffffffffc01a2b3c [nvme]\n [ffffc90000a3ff10] kthread at ffffffff810c4d11\n").unwrap();
        let t = &e.tasks[0];
        assert_eq!((t.task.as_str(), t.pid), ("kworker/3:1", Some(4242)));
        assert_eq!(
            names(t),
            [
                "schedule_timeout",
                "wait_for_completion",
                "nvme_dev_disable",
                "kthread"
            ]
        );
        assert_eq!(t.stack[2].module.as_deref(), Some("nvme"));
    }

    #[test]
    fn diff_and_quote_marks_are_not_the_line() {
        let log = "+INFO: task dd:77 blocked for more than 122 seconds.\n\
                   +[  12.1] Call Trace:\n\
                   +  schedule+0x29/0x70\n\
                   +  io_schedule+0x12/0x40\n\
                   -  folio_wait_bit_common+0x1/0x2\n\
                   > + folio_wait_writeback+0x1/0x2\n";
        let e = explain(log.as_bytes()).unwrap();
        assert_eq!(e.tasks.len(), 1, "{:?}", e.tasks);
        let t = &e.tasks[0];
        assert_eq!((t.task.as_str(), t.pid), ("dd", Some(77)));
        assert_eq!(
            names(t),
            [
                "io_schedule",
                "folio_wait_bit_common",
                "folio_wait_writeback"
            ]
        );
    }

    #[test]
    fn old_sysrq_w_task_lines_with_the_stack_count_glued_to_the_state() {
        let log =
            "SysRq : Show Blocked State\n  task                        PC stack   pid father\n\
                   kworker/u16:2   D12312  1234      2 0x00000000\n\
                   [<ffffffff8160b039>] schedule+0x29/0x70\n\
                   [<ffffffff81608d65>] jbd2_log_wait_commit+0xc5/0x140 [jbd2]\n\
                   FwgThread OpFor D    0 15341  15184 0x000040a0\n\
                   [<ffffffff81608d65>] jbd2_log_wait_commit+0xc5/0x140 [jbd2]\n";
        let e = explain(log.as_bytes()).unwrap();
        let got: Vec<_> = e
            .tasks
            .iter()
            .map(|t| (t.task.as_str(), t.pid, t.ppid))
            .collect();
        assert_eq!(
            got,
            [
                ("kworker/u16:2", Some(1234), Some(2)),
                ("FwgThread OpFor", Some(15341), Some(15184))
            ]
        );
    }

    #[test]
    fn mail_wrapped_headers_and_module_tags() {
        let log = "> [ 2 17 16:44:02 2026 <    0.000000>] INFO: task kworker/10:3:7194 \n\
                   > blocked for more than 122 seconds.\n\
                   > [ 2 17 16:44:02 2026 <    0.001597>] task:kworker/10:3    state:D \n\
                   > stack:0     pid:7194  tgid:7194  ppid:2      flags:0x00004000\n\
                   > Call Trace:\n\
                   >  dma_fence_default_wait+0x13d/0x210\n\
                   >  ? \n\
                   > __pfx_dma_fence_default_wait_cb+0x10/0x10\n\
                   >  svm_range_validate_and_map+0xf7c/0x19c0\n\
                   > [amdgpu]\n";
        let e = explain(log.as_bytes()).unwrap();
        assert_eq!(e.tasks.len(), 1, "{:?}", e.tasks);
        let t = &e.tasks[0];
        assert_eq!(
            (t.task.as_str(), t.pid, t.ppid),
            ("kworker/10:3", Some(7194), Some(2))
        );
        assert_eq!(
            names(t),
            ["dma_fence_default_wait", "svm_range_validate_and_map"]
        );
        assert_eq!(t.stack[1].module.as_deref(), Some("amdgpu"));
    }

    #[test]
    fn cat_proc_stack_names_the_pid_and_pastes_stay_apart() {
        let log = "root@host:~# cat /proc/4121/stack\n\
                   [<0>] rpc_wait_bit_killable+0x1e/0xa0 [sunrpc]\n\
                   [<0>] nfs4_proc_getattr+0x1/0x2 [nfsv4]\n\
                   [<0>] __x64_sys_newstat+0x1/0x2\n\
                   $ sudo cat /proc/88/task/90/stack\n\
                   [<0>] ceph_mdsc_do_request+0x1/0x2 [ceph]\n\
                   [<0>] do_syscall_64+0x1/0x2\n\
                   [<0>] entry_SYSCALL_64_after_hwframe+0x1/0x2\n\
                   [<0>] request_wait_answer+0x1/0x2 [fuse]\n\
                   [<0>] fuse_simple_request+0x1/0x2 [fuse]\n\
                   \n\
                   \u{20} io_schedule+0x1/0x2\n\
                   \u{20} nbd_queue_rq+0x1/0x2 [nbd]\n";
        let e = explain(log.as_bytes()).unwrap();
        let got: Vec<_> = e
            .tasks
            .iter()
            .map(|t| (t.pid, t.stack[0].function.as_str()))
            .collect();
        assert_eq!(
            got,
            [
                (Some(4121), "rpc_wait_bit_killable"),
                (Some(90), "ceph_mdsc_do_request"),
                // After the end of a stack (the syscall entry): another task.
                (None, "request_wait_answer"),
                // Another notation: another paste.
                (None, "io_schedule"),
            ]
        );
    }
}

/// Issue 38: the hung-task detector's blocker line names the lock a pasted stack hid.
#[cfg(test)]
mod kernel_word {
    use super::*;

    #[test]
    fn the_detectors_blocker_line_names_the_hidden_lock() {
        let log = "INFO: task kworker/3:1:77 blocked for more than 122 seconds.\n\
                   Call Trace:\n xfs_reflink_end_atomic_cow+0x133/0x200 [xfs]\n xfs_dio_write_end_io+0x117/0x320 [xfs]\n\
                   INFO: task kworker/3:1:77 <writer> blocked on an rw-semaphore likely owned by task fio:2308404 <writer>\n";
        let e = explain(log.as_bytes()).unwrap();
        let site = e.tasks[0].site.as_deref().unwrap();
        assert!(
            site.contains("rwsem wait (write) on an rw-semaphore owned by fio:2308404 (kernel record) in xfs_reflink_end_atomic_cow"),
            "{site}"
        );
    }
}
