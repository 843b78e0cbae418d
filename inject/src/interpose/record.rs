//! The records: [`enter`] before each wrapped call and [`exit`] after it, into the ring
//! `<pid>-<starttime>.driver.ring` created at the first recorded call; the calls handed out unwrapped
//! ([`PassThrough`], named in the ring's status); the exit summary (`WEDGE_CAPTURE_INJECT_STATS=1`).

use std::ffi::{c_void, CStr};
use std::panic::{catch_unwind, AssertUnwindSafe};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Mutex, OnceLock};

use breadcrumb::format::LABEL_CAPACITY;
use breadcrumb::{Token, Writer};

use super::kernels;
use super::table::{CUresult, NAMES};
use crate::calls::{self, ClassCache};

/// The ring file suffix of this path: `<pid>-<starttime>.driver.ring`.
pub const RING_SUFFIX: &str = "driver";
/// Ring status code: libcuda functions the program looked up that pass through unrecorded.
pub const STATUS_PASSED_THROUGH: i32 = 7;
/// Environment variable: `1` prints the interposer's counts on stderr at exit.
pub const ENV_STATS: &str = "WEDGE_CAPTURE_INJECT_STATS";

static CLASSES: ClassCache = ClassCache::new();
static WRITER: OnceLock<Option<Writer>> = OnceLock::new();
static SETTINGS: OnceLock<Settings> = OnceLock::new();
static WRAPPED_LOOKUPS: AtomicU64 = AtomicU64::new(0);
static PASSED: Mutex<PassThrough> = Mutex::new(PassThrough {
    lookups: 0,
    names: Vec::new(),
});

struct Settings {
    record_all: bool,
    record: bool,
}

fn settings() -> &'static Settings {
    SETTINGS.get_or_init(|| {
        if crate::env_flag(ENV_STATS) == Some(true) {
            // SAFETY: registering a function with no preconditions to run at exit.
            unsafe { libc::atexit(print_stats) };
        }
        Settings {
            record_all: crate::env_flag(crate::ENV_RECORD_ALL) == Some(true),
            record: crate::env_flag(crate::ENV_RECORD) != Some(false),
        }
    })
}

/// Lookups of libcuda functions that were handed out unwrapped.
#[derive(Debug, Default)]
pub struct PassThrough {
    pub lookups: u64,
    /// The distinct names, first 16.
    pub names: Vec<String>,
}

/// A lookup was handed out wrapped (counted for the exit summary).
pub(super) fn note_wrapped() {
    WRAPPED_LOOKUPS.fetch_add(1, Ordering::Relaxed);
}

/// A lookup of `name` was handed out unwrapped.
pub(super) fn note_pass_through(name: &CStr) {
    let mut passed = PASSED.lock().unwrap_or_else(|e| e.into_inner());
    passed.lookups += 1;
    let name = name.to_string_lossy();
    if passed.names.len() < 16 && !passed.names.iter().any(|n| *n == name) {
        passed.names.push(name.into_owned());
        if let Some(Some(writer)) = WRITER.get() {
            set_pass_through_status(writer, &passed);
        }
    }
}

fn set_pass_through_status(writer: &Writer, passed: &PassThrough) {
    if passed.names.is_empty() {
        return;
    }
    writer.set_status(
        STATUS_PASSED_THROUGH,
        &format!(
            "driver-API interposition: calls of {} libcuda function(s) not recorded (not in the wrapper table): {}",
            passed.names.len(),
            passed.names.join(", ")
        ),
    );
}

/// What the interposer did so far (tests, the exit summary).
pub fn pass_through() -> PassThrough {
    let passed = PASSED.lock().unwrap_or_else(|e| e.into_inner());
    PassThrough {
        lookups: passed.lookups,
        names: passed.names.clone(),
    }
}

fn writer() -> Option<&'static Writer> {
    WRITER
        .get_or_init(|| match crate::open_ring(RING_SUFFIX) {
            Ok(Some(writer)) => {
                set_pass_through_status(&writer, &PASSED.lock().unwrap_or_else(|e| e.into_inner()));
                Some(writer)
            }
            Ok(None) => {
                crate::say_disabled(&crate::InjectError::NoRing);
                None
            }
            Err(err) => {
                crate::say_disabled(&err);
                None
            }
        })
        .as_ref()
}

/// Before the real call: the enter record (or [`Token::NONE`] for a quiet getter, or without a ring).
///
/// # Safety
/// `params` must be NULL or point to the parameters of table entry `index`, laid out as a `repr(C)` struct in
/// declaration order (what each generated wrapper builds).
#[inline]
pub unsafe fn enter(index: usize, params: *const c_void) -> Token {
    let settings = settings();
    let class = CLASSES.get(
        index as u32,
        || NAMES[index].to_str().unwrap_or(""),
        settings.record_all,
    );
    if !class.record || !settings.record {
        return Token::NONE;
    }
    let Some(writer) = writer() else {
        return Token::NONE;
    };
    catch_unwind(AssertUnwindSafe(|| {
        // SAFETY: `params` is NULL or the wrapper's `repr(C)` struct of the parameters of the function
        // `index` names, which is the layout `classify` chose the decoder for.
        let args = unsafe { calls::decode(class.decoder, params) };
        let mut kernel = [0u8; LABEL_CAPACITY];
        let kernel_len = if class.decoder.is_launch() {
            kernels::name(args.ptr, &mut kernel)
        } else {
            0
        };
        let label = calls::label_of(class, NAMES[index].to_bytes(), &kernel[..kernel_len]);
        writer.enter_raw(class.call_id, &args, label.as_bytes())
    }))
    .unwrap_or(Token::NONE)
}

/// After the real call: the exit record with its `CUresult`.
#[inline]
pub fn exit(token: Token, result: CUresult) {
    if token.index().is_none() {
        return;
    }
    if let Some(Some(writer)) = WRITER.get() {
        let _ = catch_unwind(AssertUnwindSafe(|| writer.exit(token, i64::from(result))));
    }
}

extern "C" fn print_stats() {
    let passed = pass_through();
    let message = format!(
        "wedge-capture inject: driver-API interposition: {} lookups wrapped, {} passed through{}{}\n",
        WRAPPED_LOOKUPS.load(Ordering::Relaxed),
        passed.lookups,
        if passed.names.is_empty() { "" } else { ": " },
        passed.names.join(", ")
    );
    // SAFETY: writing a valid buffer to fd 2; a failed write is ignored.
    unsafe { libc::write(2, message.as_ptr().cast(), message.len()) };
}
