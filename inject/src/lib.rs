//! inject — breadcrumbs for unmodified CUDA programs, by two paths (docs/inject.md):
//!
//! - **driver-API interposition** (the default of `run --inject`): libwedge_inject.so in `LD_PRELOAD` wraps
//!   every libcuda function the program reaches ([`interpose`]); the ring is `<pid>-<starttime>.driver.ring`.
//! - **CUPTI** (`run --inject=cupti`): the rest of this file. Measured on an H100: while the process runs a
//!   long UVM operation, other processes' NVML calls (nvidia-smi, DCGM) stall for seconds.
//!
//! The CUDA driver loads the library named by `CUDA_INJECTION64_PATH` during `cuInit` and calls its
//! exported [`InitializeInjection`]. That opens the breadcrumb ring (`WEDGE_CAPTURE_RING`, or a
//! `<pid>-<starttime>.cupti.ring` file in `WEDGE_CAPTURE_RING_DIR`), loads libcupti
//! (`WEDGE_CAPTURE_CUPTI`, else the loader's search path) and subscribes to driver-API callbacks;
//! every driver call then gets an enter record before it runs and an exit record with its
//! `CUresult` after. Everything fails soft: whatever goes wrong, the program runs on, and the reason
//! is written once to stderr and into the ring header's status. docs/inject.md is the manual.
//!
//! Map:
//! - [`cupti`]: the hand-written `dlopen` binding of the four CUPTI calls used, `CUpti_CallbackData`.
//! - [`calls`]: CUPTI name → ring call id, quiet getters, params struct → [`breadcrumb::Args`],
//!   the per-callback-id classification cache.
//! - [`error`]: [`InjectError`], one variant per fail-soft reason, with its status code.
//! - [`interpose`]: the driver-API interposer (generated wrappers, the interposed `dlsym`).
//! - this file: the CUPTI entry points and callback (the hot path), the ring both paths open.

pub mod calls;
pub mod cupti;
pub mod error;
pub mod interpose;

use std::ffi::{c_int, c_void};
use std::panic::{catch_unwind, AssertUnwindSafe};
use std::path::PathBuf;
use std::sync::atomic::{AtomicBool, AtomicI32, Ordering};
use std::sync::{Mutex, OnceLock};

use breadcrumb::identity::ProcessIdentity;
use breadcrumb::writer::{ENV_RING, ENV_RING_DIR, ENV_RING_SLOTS};
use breadcrumb::{Token, Writer};

pub use error::InjectError;

use calls::ClassCache;
use cupti::{CallbackData, Cupti, CUPTI_API_ENTER, CUPTI_API_EXIT, CUPTI_CB_DOMAIN_DRIVER_API};

/// Environment variable: the libcupti to load (a path); unset means the loader's search path.
pub const ENV_CUPTI: &str = "WEDGE_CAPTURE_CUPTI";
/// Environment variable: `1` records the quiet getters too ([`calls::QUIET_PREFIXES`]).
pub const ENV_RECORD_ALL: &str = "WEDGE_CAPTURE_INJECT_ALL";
/// Environment variable: `0` subscribes to CUPTI but writes no records (overhead measurement).
pub const ENV_RECORD: &str = "WEDGE_CAPTURE_INJECT_RECORD";

/// The state [`wedge_inject_state`] reports.
pub const STATE_NOT_INITIALIZED: c_int = 0;
/// Subscribed to driver-API callbacks and writing the ring.
pub const STATE_ACTIVE: c_int = 1;
/// Initialization failed softly; the program runs uninstrumented.
pub const STATE_INACTIVE: c_int = 2;

static WRITER: OnceLock<Writer> = OnceLock::new();
static CACHE: ClassCache = ClassCache::new();
static RECORD_ALL: AtomicBool = AtomicBool::new(false);
static RECORD: AtomicBool = AtomicBool::new(true);
static STATE: AtomicI32 = AtomicI32::new(STATE_NOT_INITIALIZED);
static INIT: Mutex<bool> = Mutex::new(false);

/// Called by the CUDA driver inside `cuInit` when this library is named by `CUDA_INJECTION64_PATH`.
/// Returns 1 whatever happens (the program must run on); [`wedge_inject_state`] says whether
/// recording is active. Idempotent: a second call does nothing.
#[no_mangle]
#[allow(non_snake_case)]
pub extern "C" fn InitializeInjection() -> c_int {
    let _ = catch_unwind(|| {
        let mut done = INIT.lock().unwrap_or_else(|e| e.into_inner());
        if *done {
            return;
        }
        *done = true;
        let outcome = catch_unwind(initialize).unwrap_or(Err(InjectError::Panic));
        match outcome {
            Ok(()) => STATE.store(STATE_ACTIVE, Ordering::Release),
            Err(err) => {
                STATE.store(STATE_INACTIVE, Ordering::Release);
                report(&err);
            }
        }
    });
    1
}

/// 0: `InitializeInjection` not called yet; 1: recording; 2: inactive (the reason went to stderr
/// and the ring status).
#[no_mangle]
pub extern "C" fn wedge_inject_state() -> c_int {
    STATE.load(Ordering::Acquire)
}

fn initialize() -> Result<(), InjectError> {
    RECORD_ALL.store(env_flag(ENV_RECORD_ALL) == Some(true), Ordering::Relaxed);
    RECORD.store(env_flag(ENV_RECORD) != Some(false), Ordering::Relaxed);
    let writer = open_ring(CUPTI_RING_SUFFIX)?.ok_or(InjectError::NoRing)?;
    // The callback finds the ring through WRITER; a ring is opened at most once (INIT guards).
    let _ = WRITER.set(writer);
    let cupti_path = std::env::var_os(ENV_CUPTI)
        .filter(|p| !p.is_empty())
        .map(PathBuf::from);
    let cupti = Cupti::load(cupti_path.as_deref())?;
    let subscriber = cupti.subscribe(on_callback).map_err(|code| {
        let text = cupti.describe(code);
        if code == cupti::CUPTI_ERROR_MULTIPLE_SUBSCRIBERS_NOT_SUPPORTED {
            InjectError::OtherSubscriber(text)
        } else {
            InjectError::Subscribe(text)
        }
    })?;
    cupti
        .enable_domain(subscriber, CUPTI_CB_DOMAIN_DRIVER_API)
        .map_err(|code| InjectError::EnableDomain(cupti.describe(code)))?;
    // libcupti stays loaded for the life of the process (nothing ever dlcloses it).
    Ok(())
}

pub(crate) fn env_flag(name: &str) -> Option<bool> {
    match std::env::var(name).ok()?.trim() {
        "1" | "true" | "yes" | "on" => Some(true),
        "0" | "false" | "no" | "off" => Some(false),
        _ => None,
    }
}

/// The ring file suffix of the CUPTI path: `<pid>-<starttime>.cupti.ring`.
pub const CUPTI_RING_SUFFIX: &str = "cupti";

/// The ring: `WEDGE_CAPTURE_RING` (exact path) wins; in `WEDGE_CAPTURE_RING_DIR` the file is
/// `<pid>-<starttime>.<suffix>.ring` (`cupti` or `driver`), so a process that also writes its own breadcrumbs
/// (the breadcrumb C ABI's `<pid>-<starttime>.ring`) keeps both rings, and the name says which path wrote it.
pub(crate) fn open_ring(suffix: &str) -> Result<Option<Writer>, InjectError> {
    let slots = match std::env::var(ENV_RING_SLOTS) {
        Ok(text) => text.trim().parse::<u32>().map_err(|_| {
            breadcrumb::Error::Create(format!("{ENV_RING_SLOTS}={text:?} is not a number"))
        })?,
        Err(_) => breadcrumb::format::DEFAULT_SLOT_COUNT,
    };
    if let Some(path) = std::env::var_os(ENV_RING).filter(|p| !p.is_empty()) {
        return Ok(Some(Writer::create(PathBuf::from(path), slots)?));
    }
    if let Some(dir) = std::env::var_os(ENV_RING_DIR).filter(|p| !p.is_empty()) {
        let path =
            PathBuf::from(dir).join(ring_file_name_with(&ProcessIdentity::current(), suffix));
        return Ok(Some(Writer::create(path, slots)?));
    }
    Ok(None)
}

/// `<pid>-<starttime>.cupti.ring`.
pub fn ring_file_name(identity: &ProcessIdentity) -> String {
    ring_file_name_with(identity, CUPTI_RING_SUFFIX)
}

/// `<pid>-<starttime>.<suffix>.ring`.
pub fn ring_file_name_with(identity: &ProcessIdentity, suffix: &str) -> String {
    format!(
        "{}-{}.{suffix}.ring",
        identity.pid, identity.start_time_ticks
    )
}

/// Says on stderr why recording is off (once per path: each caller reports at most once).
pub(crate) fn say_disabled(err: &InjectError) {
    let message =
        format!("wedge-capture inject: breadcrumbs disabled, the program runs on: {err}\n");
    // SAFETY: writing a valid buffer to fd 2; a failed or short write is ignored (fail soft).
    unsafe { libc::write(2, message.as_ptr().cast(), message.len()) };
}

/// Says once, on stderr and in the ring header, why recording is off.
fn report(err: &InjectError) {
    say_disabled(err);
    if let Some(writer) = WRITER.get() {
        writer.set_status(err.status_code(), &err.to_string());
    }
}

/// The CUPTI callback: every driver API call, on the calling thread, at entry and at exit.
/// No allocation, no lock, no system call (the writer's record path is lock-free).
unsafe extern "C" fn on_callback(
    _userdata: *mut c_void,
    domain: u32,
    cbid: u32,
    cbdata: *const c_void,
) {
    if domain != CUPTI_CB_DOMAIN_DRIVER_API || cbdata.is_null() {
        return;
    }
    let _ = catch_unwind(AssertUnwindSafe(|| {
        // SAFETY: for the driver-API domain CUPTI passes a valid CUpti_CallbackData that lives
        // for the duration of the callback.
        let data = unsafe { &*cbdata.cast::<CallbackData>() };
        // SAFETY: (name closure) functionName is a global constant NUL-terminated string.
        let class = CACHE.get(
            cbid,
            || unsafe { cstr_static(data.function_name) },
            RECORD_ALL.load(Ordering::Relaxed),
        );
        if !class.record || !RECORD.load(Ordering::Relaxed) {
            return;
        }
        let Some(writer) = WRITER.get() else {
            return;
        };
        if data.callback_site == CUPTI_API_ENTER {
            // SAFETY: functionParams is the params struct of this function, whose layout the
            // decoder chosen by `classify` for its name reads.
            let args = unsafe { calls::decode(class.decoder, data.function_params) };
            // SAFETY: functionName and symbolName are NULL or NUL-terminated strings.
            let label = unsafe { calls::label(class, data.function_name, data.symbol_name) };
            let token = writer.enter_raw(class.call_id, &args, label.as_bytes());
            if !data.correlation_data.is_null() {
                // SAFETY: correlationData points to a u64 slot CUPTI keeps for this call.
                unsafe { data.correlation_data.write(stash(token)) };
            }
        } else if data.callback_site == CUPTI_API_EXIT && !data.correlation_data.is_null() {
            // SAFETY: the same slot the entry callback of this call wrote.
            let token = unstash(unsafe { data.correlation_data.read() });
            let result = if data.function_return_value.is_null() {
                0
            } else {
                // SAFETY: at exit, functionReturnValue points to the call's CUresult (an int).
                i64::from(unsafe { data.function_return_value.cast::<c_int>().read() })
            };
            writer.exit(token, result);
        }
    }));
}

/// A token as kept in CUPTI's correlation slot: complemented, so a slot never written by an entry
/// callback (zero: the exit of the `cuInit` that loaded us, or a call that began before the
/// subscription) reads back as [`Token::NONE`] and writes nothing.
#[inline]
pub fn stash(token: Token) -> u64 {
    !token.to_raw()
}

/// The inverse of [`stash`].
#[inline]
pub fn unstash(slot: u64) -> Token {
    Token::from_raw(!slot)
}

/// A `'static` str view of CUPTI's function name (global constant), empty if NULL or not UTF-8.
///
/// # Safety
/// `name` must be NULL or a NUL-terminated string that lives for the whole process.
unsafe fn cstr_static(name: *const std::ffi::c_char) -> &'static str {
    if name.is_null() {
        return "";
    }
    // SAFETY: per the contract.
    let bytes = unsafe { std::ffi::CStr::from_ptr(name) }.to_bytes();
    std::str::from_utf8(bytes).unwrap_or("")
}
