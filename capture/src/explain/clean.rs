//! Cleaning a pasted stack so it classifies like `/proc/<tid>/stack`: what an unwinder prints that is not
//! where the task is.
//!
//! - `?` frames (guesses) go unless every frame is one (old kernels without frame pointers; crash's `bt -t`,
//!   which lists every text address found on the stack, is all guesses too): then the stack
//!   starts at its first wait primitive near the top, and the stale return addresses between the primitives
//!   of that wait go too.
//! - Scheduler frames, and wait-queue callbacks (`autoremove_wake_function`, `prepare_to_wait_event`), which
//!   are never where a task sleeps.
//! - A frame at offset 0 of its function (`kjournald2+0x0/0x1ec`): a function pointer left on the stack, never
//!   a return address (a return address follows a call instruction); in a stack of guesses also one at its
//!   end (`+0x44/0x44`).
//! - The interrupt's frames above an interrupt entry (`asm_sysvec_apic_timer_interrupt`, `el1h_64_irq`,
//!   `__irq_svc`): the task's own frames start below it.

use crate::site;
use crate::site::frame_name::base_name;
use crate::snapshot::StackFrame;

/// Wait-queue callbacks and helpers: stored on the stack as pointers or stale addresses, never the wait.
const WAIT_QUEUE_NOISE: &[&str] = &[
    "autoremove_wake_function",
    "default_wake_function",
    "woken_wake_function",
    "wake_bit_function",
    "var_wake_function",
    "wake_page_function",
    "prepare_to_wait",
    "prepare_to_wait_event",
    "prepare_to_wait_exclusive",
    "finish_wait",
    "add_wait_queue",
    "remove_wait_queue",
    "wake_up_q",
    "wake_up_bit",
    "wake_up_atomic_t",
    "__wake_up",
    "__wake_up_common",
    "__wake_up_common_lock",
    "bit_waitqueue",
];

/// Where an interrupt entered: the frames above it are the interrupt handler's.
fn interrupt_entry(name: &str) -> bool {
    name.starts_with("asm_sysvec_")
        || matches!(
            name,
            "asm_common_interrupt"
                | "common_interrupt"
                | "apic_timer_interrupt"
                | "ret_from_intr"
                | "el1h_64_irq"
                | "el1_irq"
                | "el1_interrupt"
                | "__irq_svc"
        )
}

/// How far down an interrupt entry may be for the frames above it to be the interrupt's.
const INTERRUPT_DEPTH: usize = 16;
/// How many stale frames may sit between two primitives of one wait in a stack of guesses.
const GUESS_GAP: usize = 4;

/// The task's stack, innermost first, from the frames as read (`(frame, was it a ? guess)`), and a note when
/// an interrupt's frames were dropped.
pub(super) fn task_stack(frames: Vec<(StackFrame, bool)>) -> (Vec<StackFrame>, Option<String>) {
    let all_guesses = frames.iter().all(|(_, guess)| *guess);
    // Bare addresses before the context switch are the unwinder's, not the task's (see
    // `site::past_switch_artifacts`).
    let plain: Vec<StackFrame> = frames.iter().map(|(f, _)| f.clone()).collect();
    let artifacts = plain.len() - site::past_switch_artifacts(&plain).len();
    let mut stack: Vec<StackFrame> = frames
        .into_iter()
        .skip(artifacts)
        .filter(|(_, guess)| all_guesses || !guess)
        .map(|(f, _)| f)
        // A stale slot of a guessed stack may also hold the end of a function (`txg_do_callbacks+0x44/0x44`):
        // a pointer to the next one. In a reliable stack that is a noreturn call's return address: kept.
        .filter(|f| f.size == 0 || (f.offset != 0 && !(all_guesses && f.offset == f.size)))
        .filter(|f| {
            let name = base_name(&f.function);
            !site::rules::SCHEDULER_FRAMES.contains(&name) && !WAIT_QUEUE_NOISE.contains(&name)
        })
        .collect();
    let mut note = None;
    if let Some(entry) = stack
        .iter()
        .take(INTERRUPT_DEPTH)
        .position(|f| interrupt_entry(base_name(&f.function)))
    {
        if entry + 1 < stack.len() {
            let entry_name = base_name(&stack[entry].function).to_string();
            stack.drain(..=entry);
            note = Some(format!(
                "{} interrupt frame{} above {entry_name} dropped: the task's frames start below it",
                entry,
                if entry == 1 { "" } else { "s" }
            ));
        }
    }
    if all_guesses && !stack.is_empty() {
        keep_the_wait_of_guesses(&mut stack);
        let guessed =
            "every frame is a `?` guess (an unwinder without frame pointers) or a text symbol of \
                       crash's `bt -t`: the stack and its site are a best reading";
        note = Some(match note {
            Some(n) => format!("{n}; {guessed}"),
            None => guessed.to_string(),
        });
    }
    (stack, note)
}

/// A stack of guesses only starts with stale return addresses and mixes more into its wait: begin at the
/// first wait primitive near the top and drop the non-primitives between primitives that are at most
/// [`GUESS_GAP`] frames apart. A primitive already in the run ends it: a wait does not call itself, so a
/// second return address into it is a stale slot of an earlier call, and the frames before it (the waiter:
/// `__ocfs2_cluster_lock` between two `wait_for_common`) are real.
fn keep_the_wait_of_guesses(stack: &mut Vec<StackFrame>) {
    // `kthread` waits only as a reliable stack's top (a thread never started, round 16): as a guess it is the
    // bottom every kernel thread's stack has.
    let is_wait = |f: &StackFrame| {
        let name = base_name(&f.function);
        name != "kthread" && site::rules::wait_words(name).is_some()
    };
    let Some(first) = stack.iter().take(12).position(is_wait) else {
        return;
    };
    stack.drain(..first);
    let mut last = 0;
    let mut seen = vec![base_name(&stack[0].function)];
    for (i, f) in stack.iter().enumerate().skip(1) {
        if i - last > GUESS_GAP + 1 {
            break;
        }
        if is_wait(f) {
            let name = base_name(&f.function);
            if seen.contains(&name) {
                break;
            }
            seen.push(name);
            last = i;
        }
    }
    let mut i = 0;
    stack.retain(|f| {
        let keep = i == 0 || i > last || is_wait(f);
        i += 1;
        keep
    });
}
