//! The one error type of the crate. Every variant is a reason the injection stays inactive while the
//! program runs on; [`InjectError::status_code`] is what goes into the ring header.

/// Why the injection library could not start recording.
#[derive(Debug, thiserror::Error)]
pub enum InjectError {
    #[error("no breadcrumb ring configured (set WEDGE_CAPTURE_RING or WEDGE_CAPTURE_RING_DIR)")]
    NoRing,
    #[error("cannot create the breadcrumb ring: {0}")]
    Ring(#[from] breadcrumb::Error),
    #[error("CUPTI library not loadable (tried {tried}): {reason}")]
    CuptiNotLoadable { tried: String, reason: String },
    #[error("the CUPTI library has no {symbol}")]
    CuptiSymbol { symbol: &'static str },
    #[error("cuptiSubscribe failed: {0}")]
    Subscribe(String),
    #[error("another CUPTI subscriber is active (a profiler or the program's own CUPTI use): {0}")]
    OtherSubscriber(String),
    #[error("cuptiEnableDomain(DRIVER_API) failed: {0}")]
    EnableDomain(String),
    #[error("internal error (panic) during initialization")]
    Panic,
}

impl InjectError {
    /// The ring header's status code for this reason (docs/inject.md, "Status codes").
    pub fn status_code(&self) -> i32 {
        match self {
            InjectError::NoRing | InjectError::Ring(_) => 0,
            InjectError::CuptiNotLoadable { .. } => 1,
            InjectError::CuptiSymbol { .. } => 2,
            InjectError::Subscribe(_) => 3,
            InjectError::OtherSubscriber(_) => 4,
            InjectError::EnableDomain(_) => 5,
            InjectError::Panic => 6,
        }
    }
}
