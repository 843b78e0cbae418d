//! A kernel function's name as the site tables know it: without the compiler's clone suffixes (a leaf every
//! part of `site` and its readers use).

/// `uvm_release.isra.0` → `uvm_release`; `foo.part.0.constprop.0` → `foo`.
pub fn base_name(function: &str) -> &str {
    // A demangled C++ name (`DisplayPort::ConnectorImpl::rawTrain(...)`) has no compiler suffix to strip.
    if function.contains('(') {
        return function;
    }
    function.split('.').next().unwrap_or(function)
}
