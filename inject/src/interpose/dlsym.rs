//! `dlsym`, interposed: how programs that `dlopen` libcuda (the CUDA runtime, PyTorch, cudarc, NCCL, Triton)
//! reach the wrappers.
//!
//! The exported `dlsym` is a few instructions of assembly that leave every lookup alone except a name starting
//! with `cu` in a handle other than `RTLD_NEXT`: everything else is a tail jump to the real `dlsym`, so the
//! real one sees the *program's* return address. That matters: `dlsym(RTLD_NEXT, …)` searches the objects
//! after its caller, and an interposer that calls the real `dlsym` from its own code makes every `RTLD_NEXT`
//! lookup of the process relative to the interposer instead (a wrapper library then finds itself and
//! recurses). A `cu…` lookup goes to [`dlsym_cu`]: the real lookup, then the result's wrapper if it is a libcuda
//! function the table covers ([`super::wrappers::wrap_lookup`]).
//!
//! The real `dlsym` is [`super::next_dlsym`]'s.

use std::ffi::{c_char, c_void, CStr};

use super::next_dlsym::{real_dlsym, resolve_real_dlsym, REAL_DLSYM};
use super::wrappers::wrap_lookup;

/// A `cu…` lookup in a handle other than `RTLD_NEXT`: the real result, or its wrapper.
extern "C" fn dlsym_cu(handle: *mut c_void, name: *const c_char) -> *mut c_void {
    // SAFETY: the arguments are the program's own, passed on unchanged; for handles other than RTLD_NEXT
    // the result does not depend on who calls.
    let found = unsafe { real_dlsym(handle, name) };
    if found.is_null() {
        return found;
    }
    // SAFETY: `name` is non-NULL (checked before the jump here) and NUL-terminated (dlsym's contract).
    let name = unsafe { CStr::from_ptr(name) };
    std::panic::catch_unwind(|| wrap_lookup(found, name)).unwrap_or(found)
}

/// The interposed `dlsym`.
///
/// # Safety
/// As `dlsym(3)`.
#[cfg(target_arch = "x86_64")]
#[unsafe(naked)]
#[no_mangle]
pub unsafe extern "C" fn dlsym(handle: *mut c_void, name: *const c_char) -> *mut c_void {
    core::arch::naked_asm!(
        "mov rax, qword ptr [rip + {real}]",
        "test rax, rax",
        "jz 2f",
        "1:",
        "cmp rdi, -1", // RTLD_NEXT: the caller's own lookup, untouched
        "je 3f",
        "test rsi, rsi",
        "jz 3f",
        "cmp byte ptr [rsi], 0x63", // 'c'
        "jne 3f",
        "cmp byte ptr [rsi + 1], 0x75", // 'u'
        "jne 3f",
        "jmp {cu}",
        "3:",
        "jmp rax",
        "2:",
        // Not resolved yet (another constructor came first): resolve, keeping the arguments.
        "push rdi",
        "push rsi",
        "sub rsp, 8",
        "call {resolve}",
        "add rsp, 8",
        "pop rsi",
        "pop rdi",
        "test rax, rax",
        "jnz 1b",
        "xor eax, eax",
        "ret",
        real = sym REAL_DLSYM,
        cu = sym dlsym_cu,
        resolve = sym resolve_real_dlsym,
    )
}

/// The interposed `dlsym` (aarch64: x16/x17 are the intra-call scratch registers).
///
/// # Safety
/// As `dlsym(3)`.
#[cfg(target_arch = "aarch64")]
#[unsafe(naked)]
#[no_mangle]
pub unsafe extern "C" fn dlsym(handle: *mut c_void, name: *const c_char) -> *mut c_void {
    core::arch::naked_asm!(
        "adrp x16, {real}",
        "ldr x16, [x16, :lo12:{real}]",
        "cbz x16, 2f",
        "1:",
        "cmn x0, #1", // RTLD_NEXT
        "b.eq 3f",
        "cbz x1, 3f",
        "ldrb w17, [x1]",
        "cmp w17, #0x63",
        "b.ne 3f",
        "ldrb w17, [x1, #1]",
        "cmp w17, #0x75",
        "b.ne 3f",
        "b {cu}",
        "3:",
        "br x16",
        "2:",
        "stp x29, x30, [sp, #-32]!",
        "mov x29, sp",
        "stp x0, x1, [sp, #16]",
        "bl {resolve}",
        "mov x16, x0",
        "ldp x0, x1, [sp, #16]",
        "ldp x29, x30, [sp], #32",
        "cbnz x16, 1b",
        "mov x0, #0",
        "ret",
        real = sym REAL_DLSYM,
        cu = sym dlsym_cu,
        resolve = sym resolve_real_dlsym,
    )
}
