//! Stack → one-line "site": where a blocked thread is, in words a person reads at a glance.
//!
//! Examples: `ioctl → nvidia_uvm: uvm_ioctl → uvm_api_alloc_semaphore_pool … mutex wait`,
//! `process exit → __fput → nvidia_uvm uvm_release … nv_kthread_q_flush`,
//! `page fault (filemap_fault)`, `ioctl → filesystem freeze (percpu_rwsem_wait)`,
//! `kernel thread kworker/12:9 (workqueue events: delayed_fput) → __fput → amdgpu amdgpu_driver_postclose_kms …
//! fence wait [GPU fence wait (amdgpu)]`.
//!
//! A site reads: who entered the kernel (a syscall, a page fault, process exit, a kernel thread), the driver
//! module it entered and the module where it waits when that is another one, the wait primitive (`… mutex
//! wait`), and in brackets the category a driver engineer names (`[RM API lock]`, `[GPU fence wait (amdgpu)]`,
//! `[FUSE daemon wait]`). The patterns are data ([`rules`], [`nvidia`]); this module only composes them.
//!
//! The stack decides; the syscall number is only a fallback. `/proc/<tid>/syscall` can be stale: a thread
//! killed while in futex() shows nr 202 while its stack is in `do_exit` → `__fput` → a driver's release
//! (see `tests/data/h200-nvidia-uvm-dstate.json`), and a kernel thread reads `0 0x0 …` there, which is no
//! syscall at all. Note that on current kernels `/proc/<tid>/stack` omits scheduler functions (`__sched`:
//! mutex/rwsem slow paths, `wait_for_completion`), so the top frame is usually the caller of the lock, not the
//! lock itself: such a site says "waits in <function> (lock or wait not visible in the stack)".
//!
//! NVIDIA: [`nvidia::nvidia_site`] names what a driver thread waits for ([`nvidia::NvidiaWait`]: RM API lock,
//! GPU lock, GSP RPC wait, UVM locks, pinning user pages, nvidia-modeset's global lock, …), shown in brackets
//! by [`classify`]; [`nvidia::nvidia_operation`] joins it with a decoded ioctl argument into the report's
//! sentence. [`frame_name::base_name`]: a function's name without its clone suffixes. [`mm_lock`]: whether a
//! thread waits for an address space's mmap lock, or holds it in a page fault. [`with_recorded_lock`]: a site
//! made precise by the kernel's own record of the lock waited for (the wait graph's blocker record).

mod entry;
pub mod frame_name;
mod recorded_lock;
pub use recorded_lock::with_recorded_lock;
#[cfg(test)]
mod gpu_source_tests;
pub mod layers;
pub mod mechanisms;
pub mod mm_lock;
pub mod nvidia;
pub mod rules;
#[cfg(test)]
mod tests;
mod waiter;

use crate::snapshot::StackFrame;
use entry::syscall_from_handlers;
pub use entry::{is_kernel_thread_stack, syscall_from_stack};
use frame_name::base_name;
use mm_lock::{fault_frame, lock_class, FAULT_LOCK_STEPS};
use rules::{GENERIC_MODULES, GPU_DRIVER_PREFIXES, SCHEDULER_FRAMES};
use waiter::{built_in_waiter, waiter};

fn has(frames: &[StackFrame], names: &[&str]) -> Option<usize> {
    frames
        .iter()
        .position(|f| names.contains(&base_name(&f.function)))
}

fn is_generic(module: &str) -> bool {
    GENERIC_MODULES.contains(&module)
}

/// Who entered the kernel: a system call (decoded from `/proc/<tid>/syscall`, or none) or a kernel thread.
#[derive(Debug, Clone, Copy)]
pub enum Origin<'a> {
    Syscall(Option<&'a str>),
    /// `comm` as `/proc/<tid>/stat` shows it (`kworker/u8:3+events_unbound` names its workqueue);
    /// `workqueue` from a hung-task dump's `Workqueue:` line.
    KernelThread {
        comm: &'a str,
        workqueue: Option<&'a str>,
    },
}

/// "kernel thread kworker/12:9 (workqueue events: delayed_fput)".
fn kernel_thread_words(comm: &str, workqueue: Option<&str>, frames: &[StackFrame]) -> String {
    // Since 4.18 a kworker's comm carries its workqueue: `+` while it runs one, `-` for the last one.
    let (name, from_comm) = match comm.strip_prefix("kworker/") {
        Some(rest) => match rest.find(['+', '-']) {
            Some(i) => (&comm[..8 + i], Some(&rest[i + 1..])),
            None => (comm, None),
        },
        None => (comm, None),
    };
    // A workqueue's rescuer runs its work when no worker can be created: init_rescuer (kernel/workqueue.c)
    // names that thread after the queue (`"%s", wq->name` before 6.9, `kworker/R-%s` since, read above).
    let rescuer_queue = (from_comm.is_none()
        && !comm.starts_with("kworker/")
        && has(frames, &["rescuer_thread"]).is_some())
    .then_some(comm);
    let queue = workqueue
        .map(|q| q.split_whitespace().next().unwrap_or(q))
        .or(from_comm)
        .or(rescuer_queue)
        .filter(|q| !q.is_empty());
    // The `Workqueue:` line's function is the worker's current_func (print_worker_info): the work item run,
    // where the frame above process_one_work may be a callee it tail-called (round 9: nouveau's
    // nv50_disp_atomic_commit_work → nv50_disp_atomic_commit_tail).
    let work = workqueue
        .and_then(|q| q.split_whitespace().nth(1))
        .or_else(|| {
            has(frames, &["process_one_work"])
                .filter(|&i| i > 0)
                .map(|i| base_name(&frames[i - 1].function))
        });
    let mut s = if name.is_empty() {
        "kernel thread".to_string()
    } else {
        format!("kernel thread {name}")
    };
    match (queue, work) {
        (Some(q), Some(w)) => s.push_str(&format!(" (workqueue {q}: {w})")),
        (Some(q), None) => s.push_str(&format!(" (workqueue {q})")),
        (None, Some(w)) => s.push_str(&format!(" (work {w})")),
        // A paste without its task line (round 14: kswapd under an XFS shrinker): `kthread()` runs the
        // thread's `threadfn(data)` (kernel/kthread.c), so the frame it called is the thread's main function
        // (kswapd, kjournald2, xfsaild, nfsd) and says which thread it is. The generic trampolines say nothing.
        (None, None) if name.is_empty() => {
            if let Some(f) = has(frames, &["kthread"])
                .filter(|&i| i > 0)
                .map(|i| base_name(&frames[i - 1].function))
                .filter(|f| !matches!(*f, "irq_thread" | "kthread_worker_fn" | "smpboot_thread_fn"))
            {
                s.push_str(&format!(" (thread {f})"));
            }
        }
        (None, None) => {}
    }
    s
}

/// Names the wait from the innermost frames: the outermost frame of the run of wait primitives at the top
/// (`folio_wait_bit_common` under `__folio_lock` is a page-lock wait), a well-known waiter, or — when the top
/// frame is an operation because the stack omits the scheduler's lock functions — "waits in <function>".
fn wait_kind(frames: &[StackFrame], wchan: Option<&str>) -> Option<String> {
    let Some(first) = frames.first() else {
        let w = wchan?;
        return Some(match (rules::wait_words(w), rules::lock_taken_by(w)) {
            (Some(words), _) => words.to_string(),
            (None, Some(t)) => format!("{} on {}", t.wait, t.lock),
            (None, None) => mm_words(w).unwrap_or_else(|| w.to_string()),
        });
    };
    let mut words = None;
    // A page's bit wait in the run: PG_locked or PG_writeback, told by its caller (round 27).
    let mut page_bit = false;
    // The first frame past the primitives: the function that called them, and may say which lock.
    let mut taker = None;
    let mut above_name = None;
    for f in frames {
        let name = base_name(&f.function);
        if let Some(wd) = rules::wait_words_in_run(name, words, above_name.replace(name)) {
            page_bit |= rules::is_page_bit_wait(name);
            // Round 15: a generic bit wait's action (`rpc_wait_bit_killable`) says whose bit it is.
            if !rules::is_generic_bit_wait(name) || words.is_none_or(|w| w == "I/O wait") {
                words = Some(wd);
            }
        } else if !SCHEDULER_FRAMES.contains(&name) && !rules::never_sleeps(name) {
            // With the primitive's words, the lock of that kind; without (the primitives omitted), the first.
            taker = match words {
                Some(w) if is_lock_words(w) => rules::lock_taken_with(name, w),
                // The bit a caller that locks or reads pages waits on is PG_locked (do_read_cache_page).
                Some("I/O wait") if page_bit => rules::lock_taken_with(name, "page lock wait"),
                _ => rules::lock_taken_by(name),
            }
            .map(|t| (t, name));
            break;
        }
    }
    if let Some(words) = words {
        return Some(match taker {
            Some((t, name)) if is_lock_words(words) => {
                format!("{words} on {} in {name}", t.lock)
            }
            Some((t, name)) if page_bit && words == "I/O wait" && t.wait == "page lock wait" => {
                format!("{} on {} in {name}", t.wait, t.lock)
            }
            // Round 31: a taker row that says which primitive its function calls (`cm_destroy_id`'s
            // completion) names what the wait is on when the paste shows that primitive too, as the
            // `/proc` form (which leaves the primitive out) does.
            Some((t, name)) if t.wait == words => format!("{words} on {} in {name}", t.lock),
            _ => words.to_string(),
        });
    }
    // Register reads on top are the body of the polling loop under them (round 12b): that loop is the wait.
    let top = frames
        .iter()
        .map(|f| base_name(&f.function))
        .find(|n| !rules::is_register_access(n))
        .unwrap_or_else(|| base_name(&first.function));
    // The top frame takes a known lock: the lock's slow path is what `/proc/<tid>/stack` left out.
    if let Some((t, name)) = taker {
        return Some(format!("{} on {} in {name}", t.wait, t.lock));
    }
    if let Some(s) = mm_words(top).or_else(|| nvidia::uvm_spin_words(frames)) {
        return Some(s);
    }
    let opaque = top.starts_with("0x") || (top.starts_with("_nv") && top.ends_with("rm"));
    // A frame a rule names (nvWriteGpEntry, _kgspRpcRecvPoll, request_wait_answer) is the wait itself.
    let named = nvidia::names_a_wait(top)
        || rules::CATEGORY_RULES.iter().any(|r| r.pattern.matches(top))
        || mechanisms::MECHANISMS.iter().any(|m| m.frames.matches(top));
    if opaque || named || rules::names_a_wait(top) {
        return Some(top.to_string());
    }
    if rules::is_reclaim_loop(top) {
        return Some(format!(
            "memory reclaim in {top} (the allocating task frees memory itself: on CPU, or throttled)"
        ));
    }
    Some(format!(
        "waits in {top} (lock or wait not visible in the stack)"
    ))
}

/// Wait words of a sleeping lock (a lock taker's lock can be named after them).
fn is_lock_words(words: &str) -> bool {
    ["mutex", "rwsem", "semaphore"]
        .iter()
        .any(|w| words.contains(w))
}

fn mm_words(top: &str) -> Option<String> {
    match top {
        t if FAULT_LOCK_STEPS.contains(&t) => Some(format!("{top} (waits for mmap_lock)")),
        "do_mprotect_pkey" | "vm_mmap_pgoff" | "__vm_munmap" | "do_madvise" | "vm_munmap" => {
            Some(format!("{top} (waits for mmap_lock)"))
        }
        "__vma_start_write" | "vma_start_write" => {
            Some(format!("{top} (waits for a page fault to leave the VMA)"))
        }
        _ => None,
    }
}

/// The GPU driver among the frames: the innermost frame of a driver module that is not a framework (DRM core,
/// TTM, the scheduler), or a built-in driver known by its function prefix.
fn gpu_driver(frames: &[StackFrame]) -> Option<&str> {
    frames
        .iter()
        .find_map(|f| f.module.as_deref().filter(|m| !is_generic(m)))
        .or_else(|| {
            frames.iter().find_map(|f| {
                let n = base_name(&f.function);
                GPU_DRIVER_PREFIXES
                    .iter()
                    .find(|(p, _)| n.starts_with(p))
                    .map(|(_, d)| *d)
            })
        })
}

/// The category in brackets: NVIDIA's first, then the table's (GPU fence, FUSE, NFS), then the mmap lock.
pub fn category(frames: &[StackFrame], wchan: Option<&str>) -> Option<String> {
    if let Some(nv) = nvidia::nvidia_site(frames) {
        return Some(nv.label().to_string());
    }
    let names: Vec<&str> = frames.iter().map(|f| base_name(&f.function)).collect();
    let with_driver = |label: &str| -> String {
        if !label.contains("{driver}") {
            return label.to_string();
        }
        match gpu_driver(frames) {
            Some(d) => label.replace("{driver}", d),
            None => label.replace(" ({driver})", ""),
        }
    };
    for (i, f) in frames.iter().enumerate() {
        let name = base_name(&f.function);
        if let Some(m) = mechanisms::at(&names, i) {
            return Some(with_driver(m.label));
        }
        if let Some(rule) = rules::CATEGORY_RULES
            .iter()
            .chain(rules::PAGE_CACHE_RULES)
            .find(|r| r.pattern.matches(name))
        {
            // The deepest informative wait (round 13): a mechanism further out that requires this very wait
            // under it says what the wait is for (an entity's teardown over a job's dependency fence).
            let over = (i + 1..frames.len()).find_map(|j| {
                mechanisms::at(&names, j).filter(|m| m.under.is_some_and(|u| u.matches(name)))
            });
            if let Some(m) = over {
                return Some(with_driver(m.label));
            }
            if !rule.label.contains("{driver}") {
                return Some(rule.label.to_string());
            }
            return Some(match gpu_driver(frames) {
                Some(d) => rule.label.replace("{driver}", d),
                None => rule.label.replace(" ({driver})", ""),
            });
        }
    }
    lock_class(frames, wchan).map(|c| format!("{c} wait"))
}

/// A driver path through the stack: the module the core kernel called first, its entry function and the
/// operation it called, and — when the wait happens in another module or further in — where.
struct DriverPath<'a> {
    module: &'a str,
    entry: &'a str,
    op: Option<&'a str>,
    /// Where the wait happens when it is outside the entry's run of frames: the modules called on the way in
    /// (`nv_peer_mem`, `ib_core`; empty when it is the entry module again) and the innermost module frame.
    waits_in: Option<(Vec<&'a str>, &'a str)>,
    /// The innermost frame of the entry's run: the function that called the wait when no other module did
    /// (`uvm_page_tree_get_ptes_async` under `mutex_lock`, `txg_wait_synced` under spl's `cv_wait`).
    run_innermost: &'a str,
}

fn driver_path(frames: &[StackFrame]) -> Option<DriverPath<'_>> {
    let module_of = |i: usize| frames[i].module.as_deref();
    // A helper module's thread trampoline (round 10: spl's `thread_generic_wrapper`, `taskq_thread`) is the
    // thread's way in, as `kthread` is: the path starts at the function it runs, when one is in the stack.
    let runs_code = |f: &StackFrame| !rules::is_module_thread_trampoline(base_name(&f.function));
    let has_inner = frames.iter().any(|f| f.module.is_some() && runs_code(f));
    let counts = |f: &StackFrame| !has_inner || runs_code(f);
    // The outermost driver frame (a framework module only when no driver module is there).
    let outer = frames
        .iter()
        .rposition(|f| counts(f) && f.module.as_deref().is_some_and(|m| !is_generic(m)))
        .or_else(|| frames.iter().rposition(|f| counts(f) && f.module.is_some()))?;
    let module = module_of(outer)?;
    let mut first = outer;
    while first > 0 && module_of(first - 1) == Some(module) {
        first -= 1;
    }
    let run = &frames[first..=outer];
    // Prefer a `*_ioctl` dispatcher that is not an `unlocked`/`_entry` wrapper (uvm_ioctl, nvidia_ioctl).
    let entry_idx = run
        .iter()
        .rposition(|f| {
            let n = base_name(&f.function);
            n.ends_with("_ioctl") && !n.contains("unlocked") && !n.ends_with("_entry")
        })
        .or_else(|| {
            run.iter().position(|f| {
                let n = base_name(&f.function);
                n.ends_with("_release") || n.ends_with("_fault") || n.ends_with("_mmap")
            })
        })
        .unwrap_or(run.len() - 1);
    let entry = base_name(&run[entry_idx].function);
    let op = (entry_idx > 0).then(|| base_name(&run[entry_idx - 1].function));
    Some(DriverPath {
        module,
        entry,
        op,
        waits_in: waits_in(&frames[..first], module),
        // The top frame is the wait itself: said after `…`, not twice; so is a wait primitive the module
        // owns at the run's inner end (FUSE's `fuse_simple_request`): its caller is the innermost step.
        run_innermost: if first == 0 {
            entry
        } else {
            run[..entry_idx]
                .iter()
                .map(|f| base_name(&f.function))
                .find(|n| rules::wait_words(n).is_none())
                .unwrap_or(entry)
        },
    })
}

/// The modules between the entry and the innermost module frame (frameworks only where the wait is), outer
/// first, and the innermost module frame's function.
fn waits_in<'a>(inner: &'a [StackFrame], entry_module: &str) -> Option<(Vec<&'a str>, &'a str)> {
    // A wait primitive a helper module provides to another (spl's `cv_wait_common` to zfs, amdkcl's fence
    // wait to amdgpu) is said by the wait words after `…`: the path names the function that called it. A
    // module's own wait (jbd2's `jbd2_log_wait_commit`) stays named.
    let is_primitive = |f: &StackFrame| rules::wait_words(base_name(&f.function)).is_some();
    let helper_wait = |i: usize| {
        let f = &inner[i];
        rules::is_rpc_call_machinery(base_name(&f.function))
            || is_primitive(f)
                && inner[i + 1..]
                    .iter()
                    .filter(|g| !is_primitive(g))
                    .find_map(|g| g.module.as_deref())
                    .unwrap_or(entry_module)
                    != f.module.as_deref().unwrap_or_default()
    };
    let innermost = (0..inner.len()).find(|&i| inner[i].module.is_some() && !helper_wait(i))?;
    let inner = &inner[innermost..];
    // Outer first; frameworks only where the wait is. A module seen twice (zfs → spl → zfs → spl) is named
    // where it is last: the path ends in the module that waits, and the entry module is not repeated.
    let mut chain: Vec<&str> = Vec::new();
    for (i, f) in inner.iter().enumerate().rev() {
        let Some(m) = f.module.as_deref() else {
            continue;
        };
        if is_generic(m) && i != 0 {
            continue;
        }
        chain.retain(|&seen| seen != m);
        chain.push(m);
    }
    if chain.first() == Some(&entry_module) {
        chain.remove(0);
    }
    Some((chain, base_name(&inner[0].function)))
}

impl DriverPath<'_> {
    fn words(&self, origin: &str) -> String {
        let mut s = match self.op {
            Some(op) if op != self.entry => {
                format!("{origin} → {}: {} → {op}", self.module, self.entry)
            }
            _ => format!("{origin} → {}: {}", self.module, self.entry),
        };
        match &self.waits_in {
            Some((chain, f)) if !chain.is_empty() => {
                s.push_str(&format!(" → {}: {f}", chain.join(" → ")));
            }
            Some((_, f)) if Some(*f) != self.op => s.push_str(&format!(" → {f}")),
            Some(_) => {}
            None if Some(self.run_innermost) != self.op && self.run_innermost != self.entry => {
                s.push_str(&format!(" → {}", self.run_innermost));
            }
            None => {}
        }
        s
    }
}

fn is_fs_freeze(frames: &[StackFrame], wchan: Option<&str>) -> bool {
    let percpu = wchan == Some("percpu_rwsem_wait")
        || has(frames, &["percpu_rwsem_wait", "__percpu_down_read"]).is_some();
    // percpu_rwsem_wait also serves cgroup_threadgroup_rwsem and others; require the superblock
    // write-protection path (sb_start_write / mnt_want_write, often inlined into a vfs_* caller)
    // when there is a stack to look at.
    let fs_path = frames.iter().any(|f| {
        let n = base_name(&f.function);
        n.starts_with("mnt_want_write")
            || n.starts_with("__sb_start")
            || n.starts_with("sb_start")
            || n == "file_start_write"
            || n.starts_with("vfs_")
            || n == "do_truncate"
            || n == "do_sys_ftruncate"
            || n.starts_with("ioctl_")
            || n == "do_vfs_ioctl"
            // A write fault into a shared file mapping: sb_start_pagefault, often inlined.
            || n == "do_page_mkwrite"
            || n.ends_with("_page_mkwrite")
    });
    percpu && (fs_path || frames.is_empty())
}

/// One-line classification. `syscall` is the name decoded from `/proc/<tid>/syscall`, used only when
/// the stack does not say.
pub fn classify(
    frames: &[StackFrame],
    wchan: Option<&str>,
    syscall: Option<&str>,
) -> Option<String> {
    classify_from(Origin::Syscall(syscall), frames, wchan)
}

/// Whether a frame is a bare address: no symbol resolved it.
pub fn is_bare_address(function: &str) -> bool {
    function
        .strip_prefix("0x")
        .is_some_and(|h| !h.is_empty() && h.bytes().all(|c| c.is_ascii_hexdigit()))
}

/// The sleeping task's own frames: a sleeping task's call chain starts at its context switch, so bare
/// addresses listed before the switch (`[<0>] 0xc000…` above `__switch_to` in a ppc64
/// `/proc/<pid>/stack`: the unwinder's first, unreliable slot) are no frame of the task and say nothing
/// of its wait. An address among or below the task's frames (unsymbolized driver code) is kept.
pub fn past_switch_artifacts(frames: &[StackFrame]) -> &[StackFrame] {
    let lead = frames
        .iter()
        .take_while(|f| is_bare_address(&f.function))
        .count();
    let switch_follows = frames
        .get(lead)
        .is_some_and(|f| SCHEDULER_FRAMES.contains(&base_name(&f.function)));
    if lead > 0 && switch_follows {
        &frames[lead..]
    } else {
        frames
    }
}

/// Round 11: a "scheduling while atomic" report's stack ([`rules::is_sleep_in_atomic_report`]) starts with
/// the printer's frames, then the scheduler's entry: the task's own frames start at the first wait primitive
/// below `__schedule_bug` (`wait_for_common`'s `schedule_timeout`), or right below it when none is named.
/// Round 12: a stack printed from an exception taken inside a wait ([`rules::is_exception_entry`]: an
/// SError in `schedule_timeout`'s timer setup, with a panic's printer above it) is the same: the task's wait
/// starts at the first wait primitive below the exception entry; with none near it, the interrupted code is
/// what the task was doing and the stack is kept.
fn past_printer_frames(frames: &[StackFrame]) -> &[StackFrame] {
    const PRINTER_DEPTH: usize = 8;
    const HANDLER_DEPTH: usize = 16;
    let first_wait = |below: &[StackFrame]| {
        below
            .iter()
            .take(PRINTER_DEPTH)
            .position(|f| rules::wait_words(base_name(&f.function)).is_some())
    };
    if let Some(bug) = frames
        .iter()
        .take(PRINTER_DEPTH)
        .position(|f| rules::is_sleep_in_atomic_report(base_name(&f.function)))
    {
        let below = &frames[bug + 1..];
        return &below[first_wait(below).unwrap_or(0)..];
    }
    let entry = frames
        .iter()
        .take(HANDLER_DEPTH)
        .position(|f| rules::is_exception_entry(base_name(&f.function)));
    match entry.map(|e| (e, first_wait(&frames[e + 1..]))) {
        Some((e, Some(wait))) => &frames[e + 1 + wait..],
        _ => frames,
    }
}

/// [`classify`] for a known origin: a kernel thread is classified from its stack only.
pub fn classify_from(
    origin: Origin<'_>,
    frames: &[StackFrame],
    wchan: Option<&str>,
) -> Option<String> {
    let frames = past_printer_frames(past_switch_artifacts(frames));
    // Built-in code (no `[module]` tag anywhere): the modules its frames would have named, from the layer
    // map (issue 38), name the driver path (round 7: a built-in i915 reads as a modular one) and the
    // category's driver; with no category, the layer it waits in is the category.
    let tagged = layers::tag_built_in(frames);
    let site = said_once(compose(origin, frames, tagged.as_deref(), wchan)?);
    let said = |c: &str| site.contains(c) || (c == "mmap_lock wait" && site.contains("mmap_lock"));
    let category = category(tagged.as_deref().unwrap_or(frames), wchan).or_else(|| {
        frames
            .iter()
            .all(|f| f.module.is_none())
            .then(|| layers::innermost(frames))
            .flatten()
            .map(|l| format!("{} ({})", l.name, l.dir))
    });
    Some(match category {
        Some(c) if !said(&c) => format!("{site} [{c}]"),
        _ => site,
    })
}

/// `read → uevent_show … mutex wait on the device's lock in uevent_show`: the lock taker is said once.
fn said_once(site: String) -> String {
    let Some(at) = site.rfind(" in ") else {
        return site;
    };
    let taker = &site[at + 4..];
    let before = &site[..at];
    let named = before.contains(&format!("{taker} … "))
        || before.contains(&format!(": {taker} "))
        || before.contains(&format!("→ {taker} "));
    if !taker.is_empty() && !taker.contains(' ') && named {
        before.to_string()
    } else {
        site
    }
}

/// `tagged`: the frames with the modules their built-in code would have named ([`layers::tag_built_in`]), for
/// the driver path.
fn compose(
    origin: Origin<'_>,
    frames: &[StackFrame],
    tagged: Option<&[StackFrame]>,
    wchan: Option<&str>,
) -> Option<String> {
    let wait = wait_kind(frames, wchan);
    let tail = |s: String| match &wait {
        Some(w) if !s.ends_with(w.as_str()) => format!("{s} … {w}"),
        _ => s,
    };
    let thread = match origin {
        Origin::KernelThread { comm, workqueue } => {
            Some(kernel_thread_words(comm, workqueue, frames))
        }
        Origin::Syscall(_) if is_kernel_thread_stack(frames) => {
            Some(kernel_thread_words("", None, frames))
        }
        Origin::Syscall(_) => None,
    };
    let entered: Option<String> = match (&thread, origin) {
        (Some(t), _) => Some(t.clone()),
        (None, Origin::Syscall(s)) => syscall_from_stack(frames)
            .or(s)
            .or_else(|| syscall_from_handlers(frames))
            .or_else(|| entry::deferred_close(frames))
            .map(str::to_string),
        (None, Origin::KernelThread { .. }) => None,
    };

    // 1. Exit path (or a kernel thread's delayed fput): trust the stack over a stale syscall number.
    let exiting = has(frames, &["do_exit", "do_group_exit"]).is_some();
    if exiting || (thread.is_some() && has(frames, &["__fput"]).is_some()) {
        let who = if exiting {
            "process exit".to_string()
        } else {
            thread.clone().unwrap_or_default()
        };
        return Some(tail(fput_words(&who, frames)));
    }

    // 2. Page fault.
    if let Some(fault) = fault_frame(frames) {
        return Some(fault_words(&frames[..fault], wchan, &tail));
    }

    // 3. A frozen filesystem.
    if is_fs_freeze(frames, wchan) {
        return Some(match entered {
            Some(s) => format!("{s} → filesystem freeze (percpu_rwsem_wait)"),
            None => "filesystem freeze (percpu_rwsem_wait)".to_string(),
        });
    }

    // 4. Inside a driver module.
    if let Some(path) = driver_path(tagged.unwrap_or(frames)) {
        let mut words = path.words(entered.as_deref().unwrap_or("kernel"));
        // Round 14: the waiter is said after the path only when it is inner to every frame the path names:
        // with jbd2's frames built in, `__jbd2_journal_force_commit` is outer to the path's
        // `jbd2: jbd2_log_wait_commit` (the layer map names both) and would read backwards after it.
        let innermost_named = frames.iter().position(|g| {
            let n = base_name(&g.function);
            words.split_whitespace().any(|w| w == n)
        });
        let inner_to_path = |f: &str| {
            let at = frames.iter().position(|g| base_name(&g.function) == f);
            match (at, innermost_named) {
                (Some(a), Some(n)) => a < n,
                _ => true,
            }
        };
        if let Some(f) = built_in_waiter(frames, tagged.is_some())
            .filter(|f| !words.contains(f) && inner_to_path(f))
        {
            words.push_str(&format!(" → {f}"));
        }
        return Some(tail(words));
    }

    // 5. Core kernel, or no stack at all (e.g. no CAP_SYS_ADMIN): syscall, the function that waits, the wait.
    let entered = match (entered, waiter(frames)) {
        (Some(s), Some(f)) => Some(format!("{s} → {f}")),
        (None, Some(f)) => Some(f.to_string()),
        (None, None) => rules::cut_in_the_wait(frames.iter().map(|f| base_name(&f.function)))
            .map(str::to_string),
        (s, None) => s,
    };
    match (entered, &wait) {
        (Some(s), Some(w)) => Some(format!("{s} … {w}")),
        (Some(s), None) => Some(s),
        (None, Some(w)) => Some(w.clone()),
        (None, None) => None,
    }
}

/// "process exit → __fput → nvidia_uvm uvm_release": the driver's teardown function, not the framework's
/// (`drm_release` → `amdgpu_driver_postclose_kms`).
fn fput_words(who: &str, frames: &[StackFrame]) -> String {
    // The last close of a file, or the flush of each close (`filp_close` → `nfs_file_flush`).
    let Some(fput) = has(
        frames,
        &["__fput", "____fput", "fput", "filp_close", "filp_flush"],
    ) else {
        return mmu_notifier_words(who, frames);
    };
    let via = if base_name(&frames[fput].function).starts_with("filp_") {
        "close"
    } else {
        "__fput"
    };
    let above = &frames[..fput];
    let driver = |f: &&StackFrame| f.module.as_deref().is_some_and(|m| !is_generic(m));
    let teardown = |n: &str| {
        n.ends_with("release")
            || n.ends_with("_flush")
            || n.contains("postclose")
            || n.ends_with("_close")
            || n.ends_with("_fini")
    };
    let release = above
        .iter()
        .rev()
        .filter(driver)
        .find(|f| teardown(base_name(&f.function)))
        .or_else(|| above.iter().rev().find(driver))
        .or_else(|| {
            // Built-in drivers: the outermost frame past the framework's release that a GPU driver owns.
            above.iter().rev().find(|f| {
                let n = base_name(&f.function);
                GPU_DRIVER_PREFIXES.iter().any(|(p, _)| n.starts_with(p))
            })
        })
        .or_else(|| above.iter().rev().find(|f| f.module.is_some()))
        // Round 14b: `__fput` → `dput` is the file's last dentry reference dropped (fs/file_table.c): the
        // dentry's kill evicts the inode, so the function that called the wait says what the close waits for
        // (`evict` for the inode's writeback), not `dput`.
        .or_else(|| {
            let last = above.last().filter(|f| base_name(&f.function) == "dput")?;
            let w = waiter(frames)?;
            above
                .iter()
                .find(|f| base_name(&f.function) == w)
                .or(Some(last))
        })
        .or_else(|| above.last());
    match release {
        Some(f) => match &f.module {
            Some(m) => format!("{who} → {via} → {m} {}", base_name(&f.function)),
            None => format!("{who} → {via} → {}", base_name(&f.function)),
        },
        None => format!("{who} → {via}"),
    }
}

/// Round 13: an exit also enters drivers through its address space's teardown. `exit_mmap` calls
/// `mmu_notifier_release` (mm/mmu_notifier.c: `__mmu_notifier_release` runs each subscriber's `release` and,
/// through `mn_itree_release`, each interval notifier's `invalidate`), so a driver's notifier is where the exit
/// waits — amdgpu's userptr `amdgpu_mn_invalidate_gfx` for the BO's fences, KFD's
/// `kfd_process_notifier_release` for its work: "process exit → mmu notifier release → amdgpu
/// amdgpu_mn_invalidate_gfx", the driver's outermost frame.
fn mmu_notifier_words(who: &str, frames: &[StackFrame]) -> String {
    let Some(release) = has(frames, &["__mmu_notifier_release", "mmu_notifier_release"]) else {
        return who.to_string();
    };
    let driver = frames[..release]
        .iter()
        .rev()
        .find_map(|f| Some((f.module.as_deref().filter(|m| !is_generic(m))?, f)));
    match driver {
        Some((m, f)) => format!(
            "{who} → mmu notifier release → {m} {}",
            base_name(&f.function)
        ),
        None => format!("{who} → mmu notifier release"),
    }
}

fn fault_words(
    above: &[StackFrame],
    wchan: Option<&str>,
    tail: &dyn Fn(String) -> String,
) -> String {
    if is_fs_freeze(above, wchan) {
        return "page fault → filesystem freeze (percpu_rwsem_wait)".to_string();
    }
    // A fault handler in a module that calls a wait primitive from further in (round 29: squashfs_readpage
    // → squashfs_read_data, which waits for its buffer's read) names that innermost step, as a syscall's
    // path does; a module frame on top is itself the waiter, said after `…`.
    if let Some(path) = driver_path(above) {
        let mut s = format!("page fault → {}: {}", path.module, path.entry);
        if path.run_innermost != path.entry {
            s.push_str(&format!(" → {}", path.run_innermost));
        }
        return tail(s);
    }
    // The innermost fault handler that is not part of the generic fault path.
    const GENERIC: &[&str] = &[
        "__do_fault",
        "do_fault",
        "do_read_fault",
        "do_shared_fault",
        "do_cow_fault",
        "handle_mm_fault",
        "__handle_mm_fault",
        "do_user_addr_fault",
        "exc_page_fault",
        "asm_exc_page_fault",
        "do_page_fault",
        "__do_page_fault",
        "do_translation_fault",
        "handle_pte_fault",
    ];
    let handler = above
        .iter()
        .map(|f| base_name(&f.function))
        .find(|n| (n.ends_with("_fault") || n.ends_with("page_mkwrite")) && !GENERIC.contains(n));
    match handler {
        Some(h) => tail(format!("page fault ({h})")),
        None => tail("page fault".to_string()),
    }
}
