//! What an NVIDIA driver thread waits for: [`NvidiaWait`] from the frames that say, as a table
//! ([`NAMED`], then [`PRIMITIVES`]).
//!
//! The open modules name their lock functions (`rmapiLockAcquire`, `rmGpuLocksAcquire`); with the proprietary
//! modules the callers are `_nvNNNNNNrm`, but the OS-interface lock primitives keep their real names
//! (`os_acquire_rwlock_read/_write`, `os_acquire_semaphore`, `os_acquire_mutex`, `os_acquire_spinlock`), so
//! they are read before the "obfuscated frames" fallback.

use super::frame_name::base_name;
use super::rules::Pattern;
use crate::snapshot::StackFrame;

/// What an NVIDIA driver thread waits for, from the innermost frame that says (issue 18's categories).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum NvidiaWait {
    /// `os_acquire_rwlock_read/write` under `rmapiLockAcquire`.
    RmApiLock,
    /// `os_acquire_rwlock_read/write` under obfuscated callers (proprietary module): the RM API lock, with its
    /// mode.
    RmApiLockMode { write: bool },
    /// `os_acquire_semaphore`/`os_acquire_mutex` under `rmGpuLocksAcquire`.
    GpuLock,
    /// `os_acquire_semaphore`/`os_acquire_mutex` under obfuscated callers: an RM semaphore, usually the GPU lock.
    RmSemaphore,
    /// `os_acquire_spinlock`: an RM spinlock.
    RmSpinlock,
    /// `_kgspRpcRecvPoll` / `kgspRecvPoll_IMPL` under `_issueRpcAndWait`.
    GspRpc,
    /// `uvm_gpu_retain_by_uuid` (the UVM global lock).
    UvmGlobalLock,
    /// A page-tree mutex (`uvm_page_tree_*`).
    UvmPageTreeLock,
    /// The VA-space rwsem (`uvm_down_read/write`, `uvm_va_space_down_*`).
    UvmVaSpaceLock,
    /// Another UVM mutex or rwsem.
    UvmLock,
    /// `uvm_spin_loop`: waiting for the GPU to make progress.
    UvmGpuProgressSpin,
    /// `os_lock_user_pages` → `pin_user_pages` (a page fault while pinning).
    PinningUserPages { fault: bool },
    /// nvidia-modeset's PM semaphore.
    ModesetPmSemaphore,
    /// nvidia-modeset's global lock: `nvkms_ioctl_from_kapi*` (and the `_pmlock` variants) → `down`.
    ModesetGlobalLock,
    /// nvidia-modeset calling into the RM (`nvkms_call_rm`) with the nvkms lock held, where no inner frame
    /// names the RM's wait: the holder of the nvkms lock, not a waiter for it.
    ModesetRmCall,
    /// nvidia-modeset spinning on its pushbuffer / GPFIFO (`nvPushKickoff`, `nvWriteGpEntry`).
    ModesetPushbufferSpin,
    /// Round 18: `rm_init_adapter`, the RM's GPU bring-up on the first open (RmInitAdapter).
    AdapterInit,
    /// Proprietary module: `_nv…rm` frames that name nothing.
    ObfuscatedFrames,
}

impl NvidiaWait {
    /// "RM API lock", "GSP RPC wait", …
    pub fn label(self) -> &'static str {
        match self {
            NvidiaWait::RmApiLock => "RM API lock",
            NvidiaWait::RmApiLockMode { write: false } => "RM API lock (read)",
            NvidiaWait::RmApiLockMode { write: true } => "RM API lock (write)",
            NvidiaWait::GpuLock => "GPU lock",
            NvidiaWait::RmSemaphore => "RM semaphore / GPU lock",
            NvidiaWait::RmSpinlock => "RM spinlock",
            NvidiaWait::GspRpc => "GSP RPC wait",
            NvidiaWait::UvmGlobalLock => "UVM global lock",
            NvidiaWait::UvmPageTreeLock => "UVM page-tree lock",
            NvidiaWait::UvmVaSpaceLock => "UVM VA-space lock",
            NvidiaWait::UvmLock => "UVM lock",
            NvidiaWait::UvmGpuProgressSpin => "UVM GPU-progress spin",
            NvidiaWait::PinningUserPages { fault: true } => "pinning user pages (page fault)",
            NvidiaWait::PinningUserPages { fault: false } => "pinning user pages",
            NvidiaWait::ModesetPmSemaphore => "nvidia-modeset PM semaphore",
            NvidiaWait::ModesetGlobalLock => "nvidia-modeset global lock",
            NvidiaWait::ModesetRmCall => "nvidia-modeset RM call (holds the nvkms lock)",
            NvidiaWait::ModesetPushbufferSpin => "nvidia-modeset pushbuffer/GPFIFO spin",
            NvidiaWait::AdapterInit => "RM adapter init (rm_init_adapter: GPU bring-up)",
            NvidiaWait::ObfuscatedFrames => "obfuscated frames",
        }
    }

    /// The verb phrase for a sentence: "waits for a GSP RPC reply".
    pub fn phrase(self) -> &'static str {
        match self {
            NvidiaWait::RmApiLock => "waits for the RM API lock",
            NvidiaWait::RmApiLockMode { write: false } => "waits for the RM API lock (read)",
            NvidiaWait::RmApiLockMode { write: true } => "waits for the RM API lock (write)",
            NvidiaWait::GpuLock => "waits for the GPU lock",
            NvidiaWait::RmSemaphore => "waits for an RM semaphore (usually the GPU lock)",
            NvidiaWait::RmSpinlock => "spins on an RM spinlock",
            NvidiaWait::GspRpc => "waits for a GSP RPC reply",
            NvidiaWait::UvmGlobalLock => "waits for the UVM global lock",
            NvidiaWait::UvmPageTreeLock => "waits for a UVM page-tree lock",
            NvidiaWait::UvmVaSpaceLock => "waits for the UVM VA-space lock",
            NvidiaWait::UvmLock => "waits for a UVM lock",
            NvidiaWait::UvmGpuProgressSpin => "spins waiting for GPU progress",
            NvidiaWait::PinningUserPages { fault: true } => {
                "is pinning user pages (stuck in a page fault)"
            }
            NvidiaWait::PinningUserPages { fault: false } => "is pinning user pages",
            NvidiaWait::ModesetPmSemaphore => "waits for the nvidia-modeset PM semaphore",
            NvidiaWait::ModesetGlobalLock => "waits for the nvidia-modeset global lock",
            NvidiaWait::ModesetRmCall => {
                "waits in an RM call from nvidia-modeset (holding the nvkms lock)"
            }
            NvidiaWait::ModesetPushbufferSpin => {
                "spins on the nvidia-modeset pushbuffer (waits for GPFIFO space)"
            }
            NvidiaWait::AdapterInit => "is bringing the GPU up (rm_init_adapter, first open)",
            NvidiaWait::ObfuscatedFrames => "is in obfuscated driver frames",
        }
    }
}

/// A frame pattern (optionally only in one module) → what the thread waits for.
#[derive(Debug, Clone, Copy)]
pub struct NvidiaRule {
    pub pattern: Pattern,
    pub module: Option<&'static str>,
    pub wait: NvidiaWait,
}

const fn r(names: &'static [&'static str], wait: NvidiaWait) -> NvidiaRule {
    NvidiaRule {
        pattern: Pattern::Names(names),
        module: None,
        wait,
    }
}

/// Named driver functions, read innermost first: the first frame that matches wins (a page fault inside
/// `os_lock_user_pages` is pinning; `rmapiLockAcquire` above a GSP RPC is not reached).
pub const NAMED: &[NvidiaRule] = &[
    r(
        &["os_lock_user_pages", "nv_lock_user_pages"],
        NvidiaWait::PinningUserPages { fault: false },
    ),
    r(
        &[
            "_kgspRpcRecvPoll",
            "kgspRecvPoll_IMPL",
            "_issueRpcAndWait",
            "_kgspRpcRecvPoll_IMPL",
            // Round 18 (src/nvidia/src/kernel/gpu/nvlink/kernel_nvlink.c): CPU-RM forwards NVLink controls to
            // GSP-RM with `knvlinkExecGspRmRpc`; `knvlinkSyncLinkMasksAndVbiosInfo` ("synchronize the link
            // masks … between CPU and GSP-RMs") calls it, inlined or cut from a dump.
            "knvlinkExecGspRmRpc",
            "knvlinkSyncLinkMasksAndVbiosInfo_IMPL",
        ],
        NvidiaWait::GspRpc,
    ),
    r(&["uvm_spin_loop"], NvidiaWait::UvmGpuProgressSpin),
    r(&["uvm_gpu_retain_by_uuid"], NvidiaWait::UvmGlobalLock),
    r(&["rmapiLockAcquire"], NvidiaWait::RmApiLock),
    r(
        &[
            "rmGpuLocksAcquire",
            "_rmGpuLocksAcquire",
            "rmGpuGroupLockAcquire",
            "rmDeviceGpuLocksAcquire",
        ],
        NvidiaWait::GpuLock,
    ),
    r(
        &[
            "uvm_down_read",
            "uvm_down_write",
            "uvm_va_space_down_read",
            "uvm_va_space_down_write",
            "uvm_va_space_down_read_rm",
        ],
        NvidiaWait::UvmVaSpaceLock,
    ),
    NvidiaRule {
        pattern: Pattern::Prefix("uvm_page_tree_"),
        module: None,
        wait: NvidiaWait::UvmPageTreeLock,
    },
    r(
        &[
            "uvm_mutex_lock",
            "uvm_mutex_lock_no_tracking",
            "uvm_down",
            "uvm_down_read_trylock",
        ],
        NvidiaWait::UvmLock,
    ),
    r(
        &["nvWriteGpEntry", "nvPushKickoff", "nvPushWaitForNotifier"],
        NvidiaWait::ModesetPushbufferSpin,
    ),
    NvidiaRule {
        pattern: Pattern::Prefix("nvkms_ioctl_from_kapi"),
        module: None,
        wait: NvidiaWait::ModesetGlobalLock,
    },
    r(
        &["nvkms_ioctl_common", "nvkms_ioctl", "nvkms_unlocked_ioctl"],
        NvidiaWait::ModesetGlobalLock,
    ),
    // GPU drivers from source (kernel-open/nvidia-modeset/nvidia-modeset-linux.c): the other entries that take
    // nvkms_lock (down/down_interruptible) around core NVKMS — open and close (the file's and the kapi's),
    // the kthread queue's timers, the backlight hooks, the procfs read, suspend and resume; a waiter or a
    // holder as for the ioctl ([`nvkms_entry_wait`]).
    r(
        &[
            "nvkms_open_common",
            "nvkms_open_from_kapi",
            "nvkms_open",
            "nvkms_close_pm_locked",
            "nvkms_close_pm_unlocked",
            "nvkms_close_from_kapi",
            "nvkms_close_popen",
            "nvkms_kthread_q_callback",
            "nvkms_update_backlight_status",
            "nvkms_get_backlight_brightness",
            "nv_procfs_read_nvkms_proc",
            "nvkms_suspend",
            "nvkms_resume",
        ],
        NvidiaWait::ModesetGlobalLock,
    ),
    // GPU drivers from source (kernel-open/nvidia-modeset/nvidia-modeset-linux.c): nvkms_call_rm runs an RM
    // operation through nvidia.ko's rm_ops with nvkms_lock held (every core NVKMS call runs under it); the
    // RM's own wait, when a frame inner to it names one, is what it waits for.
    r(
        &["nvkms_call_rm", "nvkms_open_gpu", "nvkms_close_gpu"],
        NvidiaWait::ModesetRmCall,
    ),
    // Round 18, GPU drivers from source (kernel-open/nvidia/nv.c `nv_open_device` → `nv_start_device` →
    // `rm_init_adapter`; src/nvidia/arch/nvalloc/unix/src/osinit.c `RmInitAdapter`): the first open of a GPU
    // brings it up under the RM locks (on GSP GPUs `kgspInitRm` boots the firmware and waits for it). The
    // proprietary module's frames inside it are `_nv…rm`; the exported entry says the operation. A named wait
    // inner to it (`rmapiLockAcquire`, a GSP RPC) is matched first.
    r(
        &["rm_init_adapter", "RmInitAdapter"],
        NvidiaWait::AdapterInit,
    ),
];

// round 9 (issue 38, held-out GPU): what a UVM GPU-progress spin waits on. kernel-open/nvidia-uvm/uvm_tracker.c:
// `uvm_tracker_wait` (every entry of a tracker) and `uvm_tracker_wait_for_entry` /
// `uvm_tracker_wait_for_other_gpus` (through `wait_for_entry_with_spin`) loop on `UVM_SPIN_LOOP` until
// `uvm_tracker_is_entry_completed` → `uvm_channel_is_value_completed`: the channel's tracking semaphore, which
// the GPU writes when it has executed the pushed methods, reaches the entry's value; uvm_push.c's
// `uvm_push_wait` / `uvm_push_end_and_wait` wait so for the push just submitted. The outermost of them names
// whose work: the caller's own push, or a tracker of earlier pushes (a mapping's, a migration's).
const UVM_TRACKER_WAITS: &[&str] = &[
    "uvm_push_end_and_wait",
    "uvm_push_wait",
    "uvm_tracker_wait",
    "uvm_tracker_wait_for_entry",
    "uvm_tracker_wait_for_other_gpus",
    "wait_for_entry_with_spin",
];

/// The wait words of a `uvm_spin_loop` on top of a stack whose callers are UVM's tracker waits: the spin, on
/// the GPU work it polls for, in the outermost tracker wait ([`UVM_TRACKER_WAITS`]); None otherwise.
pub fn uvm_spin_words(frames: &[StackFrame]) -> Option<String> {
    let mut names = frames
        .iter()
        .map(|f| base_name(&f.function))
        .filter(|n| !super::rules::SCHEDULER_FRAMES.contains(n));
    if names.next()? != "uvm_spin_loop" {
        return None;
    }
    let caller = names
        .take_while(|n| UVM_TRACKER_WAITS.contains(n))
        .filter(|n| *n != "wait_for_entry_with_spin")
        .last()?;
    Some(format!(
        "uvm_spin_loop on a UVM channel's tracking semaphore (pushed GPU work) in {caller}"
    ))
}

/// The OS-interface lock primitives, read when no named function says more (the proprietary module).
pub const PRIMITIVES: &[NvidiaRule] = &[
    r(
        &["os_acquire_rwlock_read"],
        NvidiaWait::RmApiLockMode { write: false },
    ),
    r(
        &["os_acquire_rwlock_write"],
        NvidiaWait::RmApiLockMode { write: true },
    ),
    r(
        &["os_acquire_semaphore", "os_acquire_mutex"],
        NvidiaWait::RmSemaphore,
    ),
    r(&["os_acquire_spinlock"], NvidiaWait::RmSpinlock),
];

/// Whether a rule names this function: it is a wait (or a spin) itself, not an operation hiding one.
pub fn names_a_wait(function: &str) -> bool {
    NAMED
        .iter()
        .chain(PRIMITIVES)
        .any(|r| r.pattern.matches(function))
}

fn in_fault(frames: &[StackFrame]) -> bool {
    frames.iter().any(|f| {
        matches!(
            base_name(&f.function),
            "handle_mm_fault" | "__get_user_pages" | "filemap_fault" | "do_user_addr_fault"
        )
    })
}

fn first_match(frames: &[StackFrame], rules: &[NvidiaRule]) -> Option<(usize, NvidiaWait)> {
    frames.iter().enumerate().find_map(|(i, frame)| {
        let name = base_name(&frame.function);
        rules
            .iter()
            .find(|r| {
                r.pattern.matches(name)
                    && r.module.is_none_or(|m| frame.module.as_deref() == Some(m))
            })
            .and_then(|r| match r.wait {
                NvidiaWait::ModesetGlobalLock => nvkms_entry_wait(&frames[..i]),
                wait => Some(wait),
            })
            .map(|w| (i, w))
    })
}

/// What a thread in an nvkms entry (`nvkms_ioctl_common`, `nvkms_ioctl_from_kapi*`) waits for, from the frames
/// inner to it (kernel-open/nvidia-modeset/nvidia-modeset-linux.c): the kapi entries take `nvkms_pm_lock` for
/// read (`down_read`), then `nvkms_ioctl_common` takes `nvkms_lock` (`down`/`down_interruptible`) and runs
/// the request under it. Only lock primitives inner to the entry (or none: `/proc` omits `__down`) make it a
/// waiter; any other frame (`nvKmsIoctl` → `nvkms_call_rm` → the RM) means it holds the nvkms lock and waits
/// in there, named by those frames.
fn nvkms_entry_wait(inner: &[StackFrame]) -> Option<NvidiaWait> {
    let mut pm_lock = false;
    for f in inner {
        let name = base_name(&f.function);
        if super::rules::SCHEDULER_FRAMES.contains(&name) {
            continue;
        }
        match super::rules::wait_words(name) {
            Some(w) if w.starts_with("rwsem wait") => pm_lock = true,
            Some("semaphore wait" | "sleep") => {}
            Some(w) if w.starts_with("frozen") => pm_lock = true,
            _ => return None,
        }
    }
    Some(if pm_lock {
        NvidiaWait::ModesetPmSemaphore
    } else {
        NvidiaWait::ModesetGlobalLock
    })
}

/// The NVIDIA category of a stack: named functions first (innermost wins), then the lock primitives, then
/// nvidia-modeset's PM lock names; stacks with only `_nv…rm` frames of the proprietary module are "obfuscated
/// frames".
pub fn nvidia_site(frames: &[StackFrame]) -> Option<NvidiaWait> {
    // A context rule (nvidia-modeset's RM call) yields to an OS lock primitive inner to it.
    let named = match (first_match(frames, NAMED), first_match(frames, PRIMITIVES)) {
        (Some((n, NvidiaWait::ModesetRmCall)), Some((p, prim))) if p < n => Some(prim),
        (Some((_, wait)), _) => Some(wait),
        (None, prim) => prim.map(|(_, w)| w),
    };
    if let Some(wait) = named {
        return Some(match wait {
            NvidiaWait::PinningUserPages { .. } => NvidiaWait::PinningUserPages {
                fault: in_fault(frames),
            },
            other => other,
        });
    }
    // nvkms_pm_lock's own helpers (nvkms_read_lock_pm_lock, nvkms_write_lock_pm_lock, …) when not inlined: a
    // function that merely has `_pm_` in its name (nvkms_close_pm_locked) runs with the lock held.
    let pm = frames.iter().any(|f| {
        let n = base_name(&f.function);
        f.module.as_deref() == Some("nvidia_modeset")
            && (n.contains("lock_pm_lock") || n.contains("PmLock"))
    });
    if pm {
        return Some(NvidiaWait::ModesetPmSemaphore);
    }
    let obfuscated = frames.iter().any(|f| {
        let n = base_name(&f.function);
        f.module.as_deref() == Some("nvidia") && n.starts_with("_nv") && n.ends_with("rm")
    });
    // Only when the wait is in NVIDIA's own frames: nvidia → nv_peer_mem → ib_core waits in ib_core.
    let waits_in_nvidia = frames
        .iter()
        .find_map(|f| f.module.as_deref())
        .is_some_and(|m| m.starts_with("nvidia"));
    (obfuscated && waits_in_nvidia).then_some(NvidiaWait::ObfuscatedFrames)
}

/// The operation sentence for a decoded argument and its stack, e.g. "RM control
/// NV2080_CTRL_CMD_GPU_GET_INFO_V2 waits for a GSP RPC reply (takes the API lock read-only + GPU lock)".
pub fn nvidia_operation(
    frames: &[StackFrame],
    argument: &crate::decode::nvidia::IoctlArgument,
) -> Option<String> {
    let op = argument.operation_name()?;
    let wait = nvidia_site(frames)
        .map(|w| format!(" {}", w.phrase()))
        .unwrap_or_default();
    let locks = argument
        .locks
        .as_ref()
        .map(|l| format!(" ({l})"))
        .unwrap_or_default();
    Some(format!("{op}{wait}{locks}"))
}
