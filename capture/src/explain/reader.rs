//! The reader: one pass over the pasted lines, each read by structure (a log prefix, a task boundary, a
//! wrapped header, a line about the task, stack markers, a frame in one of the notations), keeping the task
//! being read and the tasks done.

use super::crash_bt::crash_frame;
use super::formats::{
    self, arm_from, bare_name, frame_text, header, is_stack_bottom, message, normalize_frame,
    proc_stack_pid, wrapped_module, Header,
};
use super::task::{Draft, Gap, Notation, Prefix, Style, MAX_TASKS, MAX_TOTAL_FRAMES};
use super::task_line::{self, contains};
use crate::explained_task::ExplainedTask;
use crate::parse::stack;
use crate::site;

#[derive(Default)]
pub(super) struct Reader {
    /// The prefix of the line being read.
    prefix: Prefix,
    /// The kernel timestamp (`[ 123.456789]`) of the line being read, when it has one.
    stamp: Option<f64>,
    /// The last line was a prefix alone (`[ 12.3] ` with its message wrapped onto the next line): the next
    /// line is its message, with its prefix.
    wrapped_prefix: Option<Prefix>,
    /// The last line ended where a mail client wrapped it ([`Wrapped`]): the next line, with no prefix of its
    /// own, is its rest.
    wrapped: Option<Wrapped>,
    pub(super) tasks: Vec<ExplainedTask>,
    draft: Option<Draft>,
    pub(super) dropped_tasks: usize,
    /// Frames kept so far, against [`MAX_TOTAL_FRAMES`].
    total_frames: usize,
    /// An oops just ended (`---[ end trace … ]---`): x86's `oops_end` prints the first oops's registers
    /// again (`exec_summary_regs`, arch/x86/kernel/dumpstack.c, "in case the oops scrolled away"), so the
    /// next `RIP:` is that summary, not another task's (round 12b). A task header clears it.
    exec_summary: bool,
    /// Inside lockdep's listing of held locks ([`Self::held_locks`]); `Some(true)` while a lock's line is
    /// still open (wrapped before its function).
    lock_listing: Option<bool>,
}

impl Reader {
    pub(super) fn finish_draft(&mut self) {
        if let Some(d) = self.draft.take() {
            if !d.header && d.frames.is_empty() && d.rip.is_none() {
                return;
            }
            if self.tasks.len() == MAX_TASKS || self.total_frames >= MAX_TOTAL_FRAMES {
                self.dropped_tasks += 1;
                return;
            }
            let mut d = d;
            let other = super::kthread_split::split_off_user_stack(&mut d);
            self.total_frames += d.frames.len();
            self.tasks.push(d.finish());
            if let Some(o) = other {
                self.draft = Some(o);
                self.finish_draft();
            }
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
        let Some((comm, pid, ppid)) = task_line::old_task_line(rest) else {
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
        let bottom_again = is_stack_bottom(site::frame_name::base_name(function));
        // A `?` guess after a stack's last frame is a stale slot under it (`? kthread_create_on_node` under
        // `ret_from_fork`), unless the stack was closed (`</TASK>`) or the notation changed.
        // One log's timestamps only go forward, and one stack prints within moments.
        let other_log = |d: &Draft| match (d.stamp, self.stamp) {
            (Some(last), Some(now)) => now < last || now - last > 10.0,
            _ => false,
        };
        // Where a stack starts: the scheduler, a wait primitive, or a function that takes a lock.
        let name = site::frame_name::base_name(function);
        // Asked only when the prefix or the time changed (a scan of the tables).
        let top_like = || {
            site::rules::SCHEDULER_FRAMES.contains(&name)
                || site::rules::wait_words(name).is_some()
                || site::rules::lock_taken_by(name).is_some()
        };
        let other_prefix = |d: &Draft| d.notation.is_some_and(|n| n.prefix != notation.prefix);
        // Round 24: printk's time stamp (`printk.time`, CONFIG_PRINTK_TIME) is one setting for a host, so one
        // host's syslog (`… kernel: [ 12.3] …`) carries it on every kernel line or on none: syslog frames
        // without one, then a stack's top with one, is another host's paste (a syslog excerpt cut in its stack,
        // then another host's header-less stack). Only syslog: a viewer's own prefixes vary line by line.
        let syslog = |p: Prefix| p == Prefix::Syslog;
        let stamp_appeared = |d: &Draft| {
            d.stamp.is_none()
                && self.stamp.is_some()
                && syslog(notation.prefix)
                && d.notation.is_some_and(|n| syslog(n.prefix))
        };
        // The context switch below frames that are not: another stack's top ([`formats::is_switch_point`]).
        let switch_below = |d: &Draft| {
            !guess
                && !d.in_irq
                && formats::is_switch_point(name)
                // A bare address above the switch is the unwinder's (`site::past_switch_artifacts`).
                && d.frames
                    .iter()
                    .rev()
                    .find(|(f, g)| !g && !f.function.starts_with("0x"))
                    .is_some_and(|(f, _)| {
                        let above = site::frame_name::base_name(&f.function);
                        // Round 11: the scheduler under a "scheduling while atomic" printer is the same
                        // stack (`site::rules::is_sleep_in_atomic_report`).
                        !formats::is_switch_point(above)
                            && !site::rules::is_sleep_in_atomic_report(above)
                    })
        };
        // Round 16: a syscall's implementation is called only by the syscall entry, so a wait or lock under it
        // is another stack's top (a stack cut at `do_sys_open`, then a header-less one pasted after it).
        let under_syscall = |d: &Draft| {
            !guess
                && d.frames
                    .iter()
                    .rev()
                    .find(|(_, g)| !g)
                    .is_some_and(|(f, _)| {
                        is_syscall_level(site::frame_name::base_name(&f.function))
                    })
                && top_like()
        };
        let split = self.draft.as_ref().is_some_and(|d| {
            !bottom_again
                && !d.frames.is_empty()
                && (d.ended
                    || under_syscall(d)
                    || d.another_dmesg_run(self.stamp, notation)
                    || ((other_log(d) || other_prefix(d) || stamp_appeared(d)) && top_like())
                    || d.notation.is_some_and(|n| n.style != notation.style)
                    || switch_below(d)
                    // A separator ends a paste: even a `?` guess after it is the next one's.
                    || d.gap == Gap::Separator
                    || (!guess && d.bottom))
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
        // A `?` guess says little about the paste it is in (a stale slot, or the first line of the next
        // paste): the notation is the real frames' (a next paste then splits at its first real frame).
        if !guess || d.notation.is_none() {
            d.notation = Some(notation);
        }
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

    /// One line of the paste, read by structure: its log prefix, then a task boundary (a task header, a
    /// `cat /proc/N/stack`, a separator), the rest of a wrapped header, a line about the task (its
    /// workqueue, its registers), stack markers, and what is left is a frame.
    pub(super) fn line(&mut self, raw: &str) {
        let msg = message(raw);
        let wrapped = self.wrapped.take();
        let Some(trimmed) = self.read_prefix(raw, msg) else {
            return;
        };
        if let Some(w) = wrapped.filter(|_| Prefix::of(raw, msg) == Prefix::None) {
            if self.wrapped_rest(w, trimmed) {
                return;
            }
        }
        self.message(trimmed);
    }

    /// A line's message (its prefix read), by structure.
    fn message(&mut self, trimmed: &str) {
        if self.held_locks(trimmed) {
            return;
        }
        if trimmed.starts_with("---[ end trace") {
            self.exec_summary = true;
        }
        if self.task_boundary(trimmed) {
            self.exec_summary = trimmed.starts_with("---[ end trace");
            return;
        }
        if self.header_continuation(trimmed) {
            return;
        }
        if self.task_context(trimmed) {
            return;
        }
        if let Some(rest) = self.markers(trimmed) {
            if !self.chain_line(rest) {
                self.frame_line(&normalize_frame(rest));
            }
        }
    }

    /// Lockdep's listing of held locks (kernel/locking/lockdep.c: `debug_show_all_locks` after a hung-task
    /// report, `lockdep_print_held_locks`): `N lock(s) held by comm/pid:`, then per lock `#N: addr (name){…},
    /// at: func+0x…/0x…`, the function that took the lock — no frame of a stack. Round 13: a mail client wrapped
    /// such lines (`#0: ffff88810e364fe0` / `(&adev->notifier_lock){+.+.}-{3:3}, at:` /
    /// `amdgpu_mn_invalidate_gfx+0x34/0xa0 [amdgpu]`) and the `at:` functions read alone made a stack of their
    /// own. The listing's lines, and a wrapped one's rest up to its function, are read as no frames; any other
    /// line ends the listing.
    fn held_locks(&mut self, trimmed: &str) -> bool {
        let starts = trimmed.ends_with(':')
            && (trimmed.starts_with("Showing all locks held")
                || contains(trimmed, " lock held by ")
                || contains(trimmed, " locks held by "));
        if starts {
            if let Some(d) = self.draft.as_mut().filter(|d| !d.frames.is_empty()) {
                d.ended = true;
            }
            self.lock_listing = Some(false);
            return true;
        }
        let Some(open) = self.lock_listing else {
            return false;
        };
        let lock = trimmed
            .strip_prefix('#')
            .and_then(|r| r.split_once(':'))
            .is_some_and(|(n, _)| !n.is_empty() && n.bytes().all(|b| b.is_ascii_digit()));
        if lock || (open && header(trimmed).is_none()) {
            // Open until the lock's function (`at: f+0x…`) is read.
            self.lock_listing = Some(!contains(trimmed, "+0x"));
            return true;
        }
        self.lock_listing = None;
        false
    }

    /// The rest of a line a mail client wrapped at a space: a frame's function after its address alone
    /// (`[<ffffffffc018631e>]` / `amdgpu_driver_postclose_kms+0x3e/0xb0 [amdgpu]`), a `Workqueue:` line's work
    /// function after its queue, a task line's last fields (`fusermount  D  0 639694` / `1274 0x00004004`), a
    /// 32-bit arm frame's caller (`(schedule) from [<8015c138>]` / `(io_schedule+0x14/0x3c)`), a module tag's
    /// build id (`… [kvmgt` / `9e409fa2…]`). Read with the line's prefix ([`Self::read_prefix`] kept it).
    fn wrapped_rest(&mut self, wrapped: Wrapped, rest: &str) -> bool {
        match wrapped {
            Wrapped::Address { address, guess } => {
                let mark = if guess { "? " } else { "" };
                let joined = format!("[<{address}>] {mark}{rest}");
                self.frame_line(&normalize_frame(&joined));
                true
            }
            // `wb_workfn (flush-8:1-fuseblk)`: the work function and what the kernel adds after it.
            Wrapped::Workqueue if rest.split_whitespace().next().is_some_and(bare_name) => {
                if let Some(q) = self.draft.as_mut().and_then(|d| d.workqueue.as_mut()) {
                    q.push(' ');
                    q.push_str(rest);
                }
                true
            }
            Wrapped::Workqueue => false,
            Wrapped::WorkqueueLabel => self.task_context(&format!("Workqueue: {rest}")),
            Wrapped::Head(head) => {
                let joined = format!("{head} {rest}");
                self.task_boundary(&joined) || self.old_task_line(&joined)
            }
            // A crash `bt` line is a frame of its own, never a rest; an arm callee alone continues only with
            // its `from`.
            Wrapped::Frame(head)
                if !rest.starts_with('#')
                    && (head.contains(" from ")
                        || !head.ends_with(')')
                        || rest.starts_with("from")) =>
            {
                self.message(&format!("{head} {rest}"));
                true
            }
            Wrapped::Frame(_) => false,
        }
    }

    /// A line a mail client cut short ([`Wrapped`]): kept for the next line, its rest.
    fn wrapped_head(&mut self, rest: &str) -> bool {
        let wrapped = if rest.len() > super::task::MAX_LINE {
            return false;
        } else if formats::frame_head(rest) || self.arm_callee_cut(rest) {
            Wrapped::Frame(rest.to_string())
        } else if let Some((address, guess)) = formats::address_alone(rest) {
            Wrapped::Address {
                address: address.to_string(),
                guess,
            }
        } else if task_line::task_line_head(rest) && task_line::old_task_line(rest).is_none() {
            Wrapped::Head(rest.to_string())
        } else {
            return false;
        };
        self.wrapped = Some(wrapped);
        self.wrapped_prefix = Some(self.prefix);
        true
    }

    /// A 32-bit arm `from` line (5.x, no addresses) a mail client cut after `from`: `schedule_preempt_disabled
    /// from` / `__mutex_lock.constprop.0+0x248/0x514`, in a stack already read in that notation (a name and
    /// `from` alone say nothing otherwise).
    fn arm_callee_cut(&self, rest: &str) -> bool {
        let in_arm_stack = self
            .draft
            .as_ref()
            .is_some_and(|d| d.arm_from && d.notation.is_some_and(|n| n.style == Style::ArmFrom));
        in_arm_stack
            && rest
                .trim()
                .strip_suffix(" from")
                .is_some_and(|callee| bare_name(callee.trim_end()))
    }

    /// A call chain on one line ([`formats::arrow_chain`]): its frames, innermost first, in a notation of
    /// their own.
    fn chain_line(&mut self, rest: &str) -> bool {
        let Some(links) = formats::arrow_chain(rest) else {
            return false;
        };
        for link in links {
            self.before_frame(self.notation(Style::Bare), false, link);
            let d = self.draft();
            match stack::frame(link.as_bytes()) {
                Ok(f) => d.push(f, false),
                Err(_) => d.skip(link),
            }
        }
        true
    }

    /// The line's log prefix (kept for the notation); None for a blank line (a gap) or a prefix alone.
    fn read_prefix<'a>(&mut self, raw: &str, msg: &'a str) -> Option<&'a str> {
        let prefix = Prefix::of(raw, msg);
        self.stamp = super::stamp::kernel_stamp(raw);
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
                self.gap(Gap::Blank);
                return None;
            }
        }
        Some(trimmed)
    }

    /// A line that begins a task or ends one: `cat /proc/N/stack`, a separator, a task header, or the
    /// hung-task detector's blocker line about a task.
    fn task_boundary(&mut self, trimmed: &str) -> bool {
        if let Some(pid) = proc_stack_pid(trimmed) {
            self.start(String::new(), Some(pid), None, None);
            return true;
        }
        if is_separator(trimmed) {
            self.gap(Gap::Separator);
            return true;
        }
        match header(trimmed) {
            Some(Header::Task {
                name,
                pid,
                ppid,
                wchan,
            }) => self.start(name, pid, ppid, wchan),
            Some(Header::Blocker { pid, words, role }) => self.blocker(pid, &words, role),
            None => return false,
        }
        true
    }

    /// The hung-task detector's "blocked on … owned by …" line: the task it names, being read or read.
    fn blocker(&mut self, pid: Option<i32>, words: &str, role: Option<String>) {
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
            t.blocked_on = crate::wait_graph::explain::parse_blocker(&words, role.as_deref());
            t.notes
                .push(format!("the kernel's hung-task detector: {words}"));
        }
    }

    /// The rest of a task header a mail client wrapped: `ppid:2 flags:0x…`, `blocked for more than …`.
    fn header_continuation(&mut self, trimmed: &str) -> bool {
        let Some(d) = self
            .draft
            .as_mut()
            .filter(|d| d.header && d.frames.is_empty())
        else {
            return false;
        };
        let wrapped_fields = ["ppid:", "tgid:", "stack:", "pid:"];
        if wrapped_fields.iter().any(|f| trimmed.starts_with(f)) {
            let fields = format!(" {trimmed}");
            d.ppid = formats::number_after(&fields, "ppid:").or(d.ppid);
            d.pid = d.pid.or(formats::number_after(&fields, " pid:"));
            return true;
        }
        trimmed.starts_with("blocked for more than") || trimmed.starts_with("flags:0x")
    }

    /// A line the kernel prints about the task before its stack: its workqueue, its registers (`RIP:`, `pc :`).
    fn task_context(&mut self, trimmed: &str) -> bool {
        // round 9: a `Workqueue: <queue>` line a mail client wrapped before its work function
        // (`nv50_disp_atomic_commit_work [nouveau]` alone on the next line): the function completes it.
        if let Some(d) = self.draft.as_mut().filter(|d| d.frames.is_empty()) {
            if let Some(q) = d.workqueue.as_mut().filter(|q| !q.contains(' ')) {
                if formats::wrapped_work_function(trimmed) {
                    q.push(' ');
                    q.push_str(trimmed);
                    return true;
                }
            }
        }
        if trimmed == "Workqueue:" {
            // A mail client wrapped the line after its label: the queue and work function are the next line.
            self.wrapped = Some(Wrapped::WorkqueueLabel);
            self.wrapped_prefix = Some(self.prefix);
            return true;
        }
        if let Some(q) = trimmed.strip_prefix("Workqueue: ") {
            // The kernel prints it before the stack: after frames it begins another (header-less) task.
            if self.draft.as_ref().is_some_and(|d| !d.frames.is_empty()) {
                self.finish_draft();
            }
            self.draft().workqueue = Some(formats::workqueue(q));
            if !q.trim().contains(char::is_whitespace) {
                self.wrapped = Some(Wrapped::Workqueue);
                self.wrapped_prefix = Some(self.prefix);
            }
            return true;
        }
        let Some(rip) = trimmed
            .strip_prefix("RIP: 0010:")
            .or_else(|| trimmed.strip_prefix("pc : "))
        else {
            return false;
        };
        if std::mem::take(&mut self.exec_summary) && trimmed.starts_with("RIP: ") {
            return true;
        }
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
        true
    }

    /// Stack markers at the start of the line (`<TASK>`, `<IRQ>`…, `Call Trace:`): what follows them, or None
    /// when nothing does.
    fn markers<'a>(&mut self, trimmed: &'a str) -> Option<&'a str> {
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
            return None;
        }
        (!rest.is_empty()).then_some(rest)
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
                    site::frame_name::base_name(&f.function)
                        == site::frame_name::base_name(callee_name)
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
        if self.wrapped_head(rest) {
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
            let notation = self.notation(frame_style(rest));
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
        // Round 23: a bare name continues a stack above its bottom frame only (below it: a mail's signature).
        let open = self.draft.as_ref().is_some_and(|d| d.in_trace && !d.bottom);
        if open && bare_name(rest) {
            self.bare_name_frame(rest);
        }
    }

    /// A function's name alone inside a trace: a frame, kept with its line's printk stamp as
    /// [`Self::before_frame`] keeps every other frame's (a stack of bare names has one too).
    fn bare_name_frame(&mut self, rest: &str) {
        if let Ok(f) = stack::frame(rest.as_bytes()) {
            let stamp = self.stamp;
            let d = self.draft();
            d.stamp = stamp.or(d.stamp);
            d.push(f, false);
        }
    }
}

/// How a line a mail client wrapped ended.
enum Wrapped {
    /// A frame's address alone (`[<ffffffffc018631e>]`, `[<…>] ?`): its function is on the next line.
    Address { address: String, guess: bool },
    /// `Workqueue: QUEUE` alone: the work function is on the next line.
    Workqueue,
    /// `Workqueue:` alone: the queue and work function are on the next line.
    WorkqueueLabel,
    /// A task line cut short ([`task_line::task_line_head`]): its last fields are on the next line.
    Head(String),
    /// A frame cut short ([`formats::frame_head`]): its caller or module tag ends on the next line.
    Frame(String),
}

/// The notation of a `/proc`-style frame line: with real addresses, with `/proc`'s zeroed ones, or bare.
fn frame_style(rest: &str) -> Style {
    let address = rest
        .trim_start()
        .strip_prefix("[<")
        .and_then(|a| a.split_once(">]"));
    match address {
        Some((a, _)) if !a.is_empty() && a.bytes().all(|b| b == b'0') => Style::Zeroed,
        Some(_) => Style::Addressed,
        None => Style::Bare,
    }
}

/// A line between pastes: a Markdown code fence, a rule of dashes or equals signs, a shell prompt.
/// A syscall's own frames (its table entry and its implementation, `do_sys_open`, `ksys_read`, `__x64_sys_chdir`),
/// which only the syscall entry calls.
fn is_syscall_level(name: &str) -> bool {
    [
        "__x64_sys_",
        "__ia32_sys_",
        "__arm64_sys_",
        "__do_sys_",
        "__se_sys_",
        "do_sys_",
        "ksys_",
    ]
    .iter()
    .any(|p| name.starts_with(p))
}

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
