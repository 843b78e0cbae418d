//! [`in_ci`]: the workspace's one answer to "is this run CI?". Here because this crate is the lowest one
//! every other crate (and every test binary) reaches: `capture` does not depend on anything else of ours.

/// CI is set (to anything but empty, `0` or `false`): tests that need root, a compiler, loop devices,
/// cgroups or BPF must run, and fail when they cannot set up, instead of skipping.
pub fn in_ci() -> bool {
    says_ci(std::env::var_os("CI").as_deref())
}

/// `CI`'s value (None: unset) means a CI run.
fn says_ci(value: Option<&std::ffi::OsStr>) -> bool {
    value.is_some_and(|v| !v.is_empty() && v != "0" && v != "false")
}

#[cfg(test)]
mod tests {
    use super::says_ci;
    use std::ffi::OsStr;

    #[test]
    fn ci_is_any_value_but_empty_0_or_false() {
        let says = |v: &str| says_ci(Some(OsStr::new(v)));
        assert!(says("true") && says("1") && says("yes"));
        assert!(!says("") && !says("0") && !says("false") && !says_ci(None));
    }
}
