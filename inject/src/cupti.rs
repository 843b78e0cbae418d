//! The few CUPTI entry points the injection library needs, bound by hand through `dlopen`/`dlsym`
//! so that a missing or unloadable libcupti is an error value, never a link failure or a panic.
//!
//! Layouts and numbers follow the CUDA 12/13 headers (`cupti_callbacks.h`, `cupti_result.h`); they
//! have been stable since CUPTI 4.1 (the last field, `correlationId`, was added then).

use std::ffi::{c_char, c_int, c_void, CStr, CString};
use std::os::unix::ffi::OsStrExt;
use std::path::{Path, PathBuf};

use crate::error::InjectError;

/// `CUptiResult`.
pub type CuptiResult = c_int;
/// `CUPTI_SUCCESS`.
pub const CUPTI_SUCCESS: CuptiResult = 0;
/// `CUPTI_ERROR_MULTIPLE_SUBSCRIBERS_NOT_SUPPORTED`: another tool (a profiler, a debugger, the
/// program's own CUPTI use) already holds the one callback subscription.
pub const CUPTI_ERROR_MULTIPLE_SUBSCRIBERS_NOT_SUPPORTED: CuptiResult = 39;

/// `CUpti_CallbackDomain`: `CUPTI_CB_DOMAIN_DRIVER_API`.
pub const CUPTI_CB_DOMAIN_DRIVER_API: u32 = 1;
/// `CUpti_ApiCallbackSite`: `CUPTI_API_ENTER`.
pub const CUPTI_API_ENTER: u32 = 0;
/// `CUpti_ApiCallbackSite`: `CUPTI_API_EXIT`.
pub const CUPTI_API_EXIT: u32 = 1;

/// `CUpti_CallbackData`, what a driver- or runtime-API callback receives as `cbdata`.
#[repr(C)]
#[derive(Debug)]
pub struct CallbackData {
    /// `CUpti_ApiCallbackSite` (an enum: `int`-sized).
    pub callback_site: u32,
    /// The API function's name, a global constant string.
    pub function_name: *const c_char,
    /// Points to the function's `<name>_params` struct (generated_cuda_meta.h).
    pub function_params: *const c_void,
    /// Points to the `CUresult` at exit; not valid at entry.
    pub function_return_value: *mut c_void,
    /// The kernel name for launch callbacks, else unspecified (may be NULL).
    pub symbol_name: *const c_char,
    /// `CUcontext`.
    pub context: *mut c_void,
    pub context_uid: u32,
    /// A 64-bit slot shared by the entry and exit callbacks of one call.
    pub correlation_data: *mut u64,
    pub correlation_id: u32,
}

/// `CUpti_CallbackFunc`.
pub type CallbackFunc =
    unsafe extern "C" fn(userdata: *mut c_void, domain: u32, cbid: u32, cbdata: *const c_void);

type SubscribeFn =
    unsafe extern "C" fn(*mut *mut c_void, Option<CallbackFunc>, *mut c_void) -> CuptiResult;
type EnableDomainFn = unsafe extern "C" fn(u32, *mut c_void, u32) -> CuptiResult;
type GetResultStringFn = unsafe extern "C" fn(CuptiResult, *mut *const c_char) -> CuptiResult;
type GetVersionFn = unsafe extern "C" fn(*mut u32) -> CuptiResult;

/// Names tried, in order, when no path is given: the development symlink, then the sonames of
/// CUDA 13 and 12 (a runtime-only install has no unversioned name).
pub const DEFAULT_LIBRARY_NAMES: &[&str] = &["libcupti.so", "libcupti.so.13", "libcupti.so.12"];

/// A loaded libcupti. The library is never unloaded: once subscribed, CUPTI calls back into us
/// for the rest of the process.
pub struct Cupti {
    /// What was passed to `dlopen` (a path or a bare name resolved by the loader).
    pub loaded_from: PathBuf,
    subscribe: SubscribeFn,
    enable_domain: EnableDomainFn,
    get_result_string: Option<GetResultStringFn>,
    get_version: Option<GetVersionFn>,
}

impl std::fmt::Debug for Cupti {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Cupti")
            .field("loaded_from", &self.loaded_from)
            .finish()
    }
}

/// A callback subscription (`CUpti_SubscriberHandle`).
#[derive(Debug, Clone, Copy)]
pub struct Subscriber(*mut c_void);

impl Cupti {
    /// Loads libcupti from `path`, or, when `None`, by the names in [`DEFAULT_LIBRARY_NAMES`]
    /// through the normal loader search path.
    pub fn load(path: Option<&Path>) -> Result<Cupti, InjectError> {
        match path {
            Some(path) => {
                let handle = dlopen(path.as_os_str().as_bytes()).map_err(|reason| {
                    InjectError::CuptiNotLoadable {
                        tried: path.display().to_string(),
                        reason,
                    }
                })?;
                Self::bind(handle, path.to_path_buf())
            }
            None => {
                let mut reasons = Vec::new();
                for name in DEFAULT_LIBRARY_NAMES {
                    match dlopen(name.as_bytes()) {
                        Ok(handle) => return Self::bind(handle, PathBuf::from(name)),
                        Err(reason) => reasons.push(reason),
                    }
                }
                Err(InjectError::CuptiNotLoadable {
                    tried: DEFAULT_LIBRARY_NAMES.join(", "),
                    reason: reasons.last().cloned().unwrap_or_default(),
                })
            }
        }
    }

    fn bind(handle: *mut c_void, loaded_from: PathBuf) -> Result<Cupti, InjectError> {
        let subscribe = dlsym(handle, c"cuptiSubscribe").ok_or(InjectError::CuptiSymbol {
            symbol: "cuptiSubscribe",
        })?;
        let enable_domain =
            dlsym(handle, c"cuptiEnableDomain").ok_or(InjectError::CuptiSymbol {
                symbol: "cuptiEnableDomain",
            })?;
        let get_result_string = dlsym(handle, c"cuptiGetResultString");
        let get_version = dlsym(handle, c"cuptiGetVersion");
        // SAFETY: each pointer was returned by dlsym for the named CUPTI symbol, whose C signature
        // (cupti_callbacks.h, cupti_result.h, cupti_version.h) is the function type it becomes.
        unsafe {
            Ok(Cupti {
                loaded_from,
                subscribe: std::mem::transmute::<*mut c_void, SubscribeFn>(subscribe),
                enable_domain: std::mem::transmute::<*mut c_void, EnableDomainFn>(enable_domain),
                get_result_string: get_result_string
                    .map(|p| std::mem::transmute::<*mut c_void, GetResultStringFn>(p)),
                get_version: get_version
                    .map(|p| std::mem::transmute::<*mut c_void, GetVersionFn>(p)),
            })
        }
    }

    /// `cuptiGetVersion`: the CUPTI API version, if the symbol exists and answers.
    pub fn version(&self) -> Option<u32> {
        let get_version = self.get_version?;
        let mut version = 0u32;
        // SAFETY: `version` is a valid out-pointer for the duration of the call.
        let result = unsafe { get_version(&mut version) };
        (result == CUPTI_SUCCESS).then_some(version)
    }

    /// `cuptiGetResultString` with the numeric code, e.g. "CUPTI_ERROR_NOT_INITIALIZED (15)".
    pub fn describe(&self, result: CuptiResult) -> String {
        let mut text: *const c_char = std::ptr::null();
        let name = match self.get_result_string {
            // SAFETY: `text` is a valid out-pointer; CUPTI stores a pointer to a static string.
            Some(get) if unsafe { get(result, &mut text) } == CUPTI_SUCCESS && !text.is_null() => {
                // SAFETY: CUPTI returned a NUL-terminated static string.
                unsafe { CStr::from_ptr(text) }
                    .to_string_lossy()
                    .into_owned()
            }
            _ => "CUPTI error".to_string(),
        };
        format!("{name} ({result})")
    }

    /// `cuptiSubscribe(&subscriber, callback, userdata)`.
    pub fn subscribe(&self, callback: CallbackFunc) -> Result<Subscriber, CuptiResult> {
        let mut handle: *mut c_void = std::ptr::null_mut();
        // SAFETY: `handle` is a valid out-pointer; `callback` is an `extern "C"` function with the
        // `CUpti_CallbackFunc` signature that lives for the whole process (static code).
        let result = unsafe { (self.subscribe)(&mut handle, Some(callback), std::ptr::null_mut()) };
        if result == CUPTI_SUCCESS {
            Ok(Subscriber(handle))
        } else {
            Err(result)
        }
    }

    /// `cuptiEnableDomain(1, subscriber, domain)`.
    pub fn enable_domain(&self, subscriber: Subscriber, domain: u32) -> Result<(), CuptiResult> {
        // SAFETY: `subscriber` came from a successful `cuptiSubscribe` of this library.
        let result = unsafe { (self.enable_domain)(1, subscriber.0, domain) };
        if result == CUPTI_SUCCESS {
            Ok(())
        } else {
            Err(result)
        }
    }
}

fn dlopen(name: &[u8]) -> Result<*mut c_void, String> {
    let name = CString::new(name).map_err(|_| "path contains a NUL byte".to_string())?;
    // SAFETY: `name` is NUL-terminated; dlopen has no other precondition.
    let handle = unsafe { libc::dlopen(name.as_ptr(), libc::RTLD_NOW | libc::RTLD_LOCAL) };
    if handle.is_null() {
        Err(last_dl_error())
    } else {
        Ok(handle)
    }
}

fn dlsym(handle: *mut c_void, symbol: &CStr) -> Option<*mut c_void> {
    // SAFETY: `handle` is a live dlopen handle (never closed); `symbol` is NUL-terminated.
    let pointer = unsafe { libc::dlsym(handle, symbol.as_ptr()) };
    (!pointer.is_null()).then_some(pointer)
}

fn last_dl_error() -> String {
    // SAFETY: dlerror returns NULL or a NUL-terminated string valid until the next dl* call on
    // this thread; it is copied at once.
    let text = unsafe { libc::dlerror() };
    if text.is_null() {
        "unknown dlopen error".to_string()
    } else {
        // SAFETY: non-NULL dlerror result, NUL-terminated (see above).
        unsafe { CStr::from_ptr(text) }
            .to_string_lossy()
            .into_owned()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn callback_data_layout_matches_the_header() {
        // LP64: enum(4)+pad(4), 4 pointers, context pointer, u32+pad, pointer, u32+pad.
        assert_eq!(std::mem::offset_of!(CallbackData, function_name), 8);
        assert_eq!(std::mem::offset_of!(CallbackData, function_params), 16);
        assert_eq!(
            std::mem::offset_of!(CallbackData, function_return_value),
            24
        );
        assert_eq!(std::mem::offset_of!(CallbackData, symbol_name), 32);
        assert_eq!(std::mem::offset_of!(CallbackData, context), 40);
        assert_eq!(std::mem::offset_of!(CallbackData, context_uid), 48);
        assert_eq!(std::mem::offset_of!(CallbackData, correlation_data), 56);
        assert_eq!(std::mem::offset_of!(CallbackData, correlation_id), 64);
        assert_eq!(std::mem::size_of::<CallbackData>(), 72);
    }

    #[test]
    fn a_missing_library_is_an_error_not_a_panic() {
        let err = Cupti::load(Some(Path::new("/nonexistent/libcupti.so.99"))).unwrap_err();
        let text = err.to_string();
        assert!(text.contains("/nonexistent/libcupti.so.99"), "{text}");
    }

    #[test]
    fn a_library_without_cupti_symbols_is_refused() {
        // libc is loadable everywhere and has no cuptiSubscribe.
        let err = Cupti::load(Some(Path::new("libc.so.6"))).unwrap_err();
        assert!(
            matches!(
                err,
                InjectError::CuptiSymbol {
                    symbol: "cuptiSubscribe"
                }
            ),
            "{err}"
        );
    }
}
