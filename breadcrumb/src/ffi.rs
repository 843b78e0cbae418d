//! The C ABI (`include/wedge_breadcrumb.h`): one process-global writer, for C programs, Go through
//! cgo, and the CUDA injection library. No function unwinds across the boundary: every body runs
//! under `catch_unwind` and reports failure through its return value.

use std::ffi::{c_char, c_int, CStr};
use std::os::unix::ffi::OsStrExt;
use std::panic::{catch_unwind, AssertUnwindSafe};
use std::sync::OnceLock;

use crate::format::{Args, DEFAULT_SLOT_COUNT, LABEL_CAPACITY, STATUS_CAPACITY};
use crate::writer::{Token, Writer};

static GLOBAL: OnceLock<Writer> = OnceLock::new();

/// The process-global writer, if one was opened (Rust code linked into the same process may use
/// it too).
pub fn global_writer() -> Option<&'static Writer> {
    GLOBAL.get()
}

fn install(make: impl FnOnce() -> Result<Option<Writer>, crate::Error>) -> c_int {
    if GLOBAL.get().is_some() {
        return 1;
    }
    match make() {
        Ok(Some(writer)) => {
            // Lost a race with another opener: keep theirs, ours is dropped (and its file stays).
            if GLOBAL.set(writer).is_err() {
                return 1;
            }
            0
        }
        Ok(None) => 2,
        Err(_) => -1,
    }
}

/// Opens the process-global ring at `path`. Returns 0 on success, 1 if a ring is already open
/// (unchanged), -1 on error (bad path, cannot create).
///
/// # Safety
/// `path` must be NULL or a NUL-terminated string.
#[no_mangle]
pub unsafe extern "C" fn wedge_breadcrumb_open(path: *const c_char) -> c_int {
    if path.is_null() {
        return -1;
    }
    // SAFETY: the caller promises a NUL-terminated string; it is only read here.
    let path = unsafe { CStr::from_ptr(path) };
    let path = std::path::PathBuf::from(std::ffi::OsStr::from_bytes(path.to_bytes()));
    catch_unwind(AssertUnwindSafe(|| {
        install(|| Writer::create(&path, DEFAULT_SLOT_COUNT).map(Some))
    }))
    .unwrap_or(-1)
}

/// Opens the process-global ring from `WEDGE_CAPTURE_RING` / `WEDGE_CAPTURE_RING_DIR`. Returns 0
/// on success, 1 if already open, 2 if neither variable is set, -1 on error.
#[no_mangle]
pub extern "C" fn wedge_breadcrumb_open_from_env() -> c_int {
    catch_unwind(AssertUnwindSafe(|| install(Writer::from_env))).unwrap_or(-1)
}

/// 1 if the process-global ring is open, else 0.
#[no_mangle]
pub extern "C" fn wedge_breadcrumb_is_open() -> c_int {
    c_int::from(GLOBAL.get().is_some())
}

/// Records that driver call `call` (a stable call id) is about to be made. `args` and `label` may
/// be NULL; the label is cut to 40 bytes (and to its valid UTF-8 prefix). Returns the token for
/// `wedge_breadcrumb_exit`, or `WB_TOKEN_NONE` (UINT64_MAX) when no ring is open.
///
/// # Safety
/// `args` must be NULL or point to a valid `wb_args`; `label` NULL or NUL-terminated.
#[no_mangle]
pub unsafe extern "C" fn wedge_breadcrumb_enter(
    call: u16,
    args: *const Args,
    label: *const c_char,
) -> u64 {
    let Some(writer) = GLOBAL.get() else {
        return Token::NONE.to_raw();
    };
    let args = if args.is_null() {
        Args::default()
    } else {
        // SAFETY: the caller promises a non-NULL `args` is valid for reads; `Args` is `Copy` and
        // `repr(C)`, so reading it by value is a plain copy of the caller's struct.
        unsafe { *args }
    };
    let label: &[u8] = if label.is_null() {
        &[]
    } else {
        // SAFETY: `label` is NUL-terminated; strnlen reads at most LABEL_CAPACITY bytes of it.
        let len = unsafe { libc::strnlen(label, LABEL_CAPACITY) };
        // SAFETY: the first `len` bytes were just scanned and are readable.
        let bytes = unsafe { std::slice::from_raw_parts(label.cast::<u8>(), len) };
        valid_utf8_prefix(bytes)
    };
    catch_unwind(AssertUnwindSafe(|| {
        writer.enter_raw(call, &args, label).to_raw()
    }))
    .unwrap_or(Token::NONE.to_raw())
}

/// Records that the call of `token` returned `result`. A `WB_TOKEN_NONE` token is ignored.
#[no_mangle]
pub extern "C" fn wedge_breadcrumb_exit(token: u64, result: i64) {
    if let Some(writer) = GLOBAL.get() {
        let _ = catch_unwind(AssertUnwindSafe(|| {
            writer.exit(Token::from_raw(token), result)
        }));
    }
}

/// Stores a fail-soft status message in the ring header (code 0). Returns 0, or -1 if no ring.
///
/// # Safety
/// `message` must be NULL (clears the status) or NUL-terminated.
#[no_mangle]
pub unsafe extern "C" fn wedge_breadcrumb_set_status(message: *const c_char) -> c_int {
    // SAFETY: forwarded caller contract.
    unsafe { wedge_breadcrumb_set_status_code(0, message) }
}

/// Stores a fail-soft status code and message in the ring header. Returns 0, or -1 if no ring.
///
/// # Safety
/// `message` must be NULL (clears the status) or NUL-terminated.
#[no_mangle]
pub unsafe extern "C" fn wedge_breadcrumb_set_status_code(
    code: i32,
    message: *const c_char,
) -> c_int {
    let Some(writer) = GLOBAL.get() else {
        return -1;
    };
    let bytes: &[u8] = if message.is_null() {
        &[]
    } else {
        // SAFETY: NUL-terminated per the contract; at most STATUS_CAPACITY bytes are read.
        let len = unsafe { libc::strnlen(message, STATUS_CAPACITY) };
        // SAFETY: those `len` bytes were just scanned.
        unsafe { std::slice::from_raw_parts(message.cast::<u8>(), len) }
    };
    let text = std::str::from_utf8(valid_utf8_prefix(bytes)).unwrap_or("");
    catch_unwind(AssertUnwindSafe(|| writer.set_status(code, text)))
        .map(|_| 0)
        .unwrap_or(-1)
}

fn valid_utf8_prefix(bytes: &[u8]) -> &[u8] {
    match std::str::from_utf8(bytes) {
        Ok(_) => bytes,
        Err(err) => &bytes[..err.valid_up_to()],
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn utf8_prefix_stops_before_a_broken_char() {
        assert_eq!(valid_utf8_prefix(b"abc"), b"abc");
        assert_eq!(valid_utf8_prefix(b"ab\xc3"), b"ab");
        assert_eq!(valid_utf8_prefix(b"\xff"), b"");
    }
}
