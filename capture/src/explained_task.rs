//! One task of a pasted kernel log as [`crate::explain`] found it, with what the hung-task detector said it was
//! blocked on: the vocabulary shared by `explain` (which finds the tasks) and [`crate::wait_graph::explain`]
//! (which links them into a wait graph). It lives below both so neither imports the other's home.

use serde::{Deserialize, Serialize};

use crate::snapshot::StackFrame;
use crate::wait_graph::{LockKind, Mode};

/// One task found in the input.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct ExplainedTask {
    /// The task's comm (`kworker/12:9`), or `(pasted stack)` for a bare stack.
    pub task: String,
    pub pid: Option<i32>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub ppid: Option<i32>,
    /// A kernel thread (ppid 2, a `Workqueue:` line, or a stack that starts in `kthread`).
    pub kernel_thread: bool,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub workqueue: Option<String>,
    /// From a wedge-capture report's `thread … wchan W` line.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub wchan: Option<String>,
    /// The cleaned stack, innermost frame first.
    pub stack: Vec<StackFrame>,
    pub site: Option<String>,
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub notes: Vec<String>,
    /// What the hung-task detector said the task was blocked on and who likely owns it.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub blocked_on: Option<KernelBlocker>,
}

/// What the hung-task detector said a task was blocked on.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct KernelBlocker {
    pub kind: LockKind,
    /// How the blocked task wanted an rw-semaphore (`<writer>` / `<reader>`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub mode: Option<Mode>,
    /// The owner the kernel names (`comm`, `pid`); none when "the owner is not found".
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub owner: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub owner_pid: Option<i32>,
    /// How the owner holds an rw-semaphore (`<reader>`: reader-owned, the owner its last reader).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub owner_mode: Option<Mode>,
}
