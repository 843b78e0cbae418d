//! crash(8)'s `bt` frame lines ([`crash_frame`]): `#N [stack address] function at address [module]`, with or
//! without the index (or its `#`), a 32-bit arm vmcore's `(function) from` form, drgn and drgn-tools' shapes.

use super::formats::{bare_name, is_module_token};
use super::task_line::contains;
use super::tool_formats;

/// crash's `bt` (`#6 [ffffc90035ff7d18] kfd_ioctl_alloc_memory_of_gpu at ffffffffa062c9b5 [amdgpu]`), drgn-tools
/// (`# 6 [ff54a3e3b02ef788] wait_func [mlx5_core] at 0xffffffffc0611c94 drivers/…/cmd.c:1158:7`) and drgn
/// (`#6  wait_func (drivers/…/cmd.c:1158:7)`) → `wait_func [mlx5_core]`.
pub(super) fn crash_frame(msg: &str) -> Option<String> {
    if let Some((name, image)) = tool_formats::numbered_kernel_frame(msg) {
        return match image {
            _ if !bare_name(name) => None,
            "" | "<kernel>" => Some(name.to_string()),
            m if is_module_token(&format!("[{m}]")) => Some(format!("{name} [{m}]")),
            _ => None,
        };
    }
    let rest = match msg.strip_prefix('#') {
        Some(rest) => {
            let (n, rest) = rest.trim_start().split_once(char::is_whitespace)?;
            n.parse::<u32>().ok()?;
            rest
        }
        // crash's `bt` as some tools and mails print it, without the frame index:
        // `[ffffc90035ff7d18] kfd_ioctl_alloc_memory_of_gpu at ffffffffa062c9b5 [amdgpu]`; round 15: or with an
        // index that lost its `#` (a grep or awk over `foreach bt`: ` 0 [ffffb656ce1abc28] __schedule at …`).
        None => {
            let msg = unmarked_index(msg).unwrap_or(msg);
            let inner = msg.strip_prefix('[')?.split_once(']')?.0;
            let hex = inner.len() >= 8 && inner.bytes().all(|b| b.is_ascii_hexdigit());
            if !hex || !contains(msg, " at ") {
                return None;
            }
            msg
        }
    };
    let mut rest = rest.trim_start();
    let addressed = rest.starts_with('[');
    if addressed {
        rest = rest.split_once("] ")?.1.trim_start();
    }
    if addressed {
        // crash's `bt` of a 32-bit arm vmcore: `#3 [<c013c570>] (wait_rcu_gp) from [<c014407c>]`, the function
        // in parentheses as the arm unwinder prints it (a module's with its tag: `(fn [mod])`), the caller's
        // return address after `from` (cut off at the end of a mail line: `(worker_thread) from`).
        if let Some(inner) = rest.strip_prefix('(') {
            let (inner, after) = inner.split_once(')')?;
            let after = after.trim();
            if !(after.is_empty() || after.starts_with("from")) {
                return None;
            }
            let mut tokens = inner.split_whitespace();
            let function = tokens.next()?;
            if !bare_name(function) {
                return None;
            }
            return Some(match tokens.find(|t| is_module_token(t)) {
                Some(m) => format!("{function} {m}"),
                None => function.to_string(),
            });
        }
    }
    let mut tokens = rest.split_whitespace();
    let function = tokens.next()?;
    let next = tokens.next();
    // Without the stack address, only drgn's shapes: `func (file:line)`, `func+0x…`, `func [module] at`.
    let framed = addressed
        || contains(function, "+0x")
        || next.is_some_and(|t| t.starts_with('(') || t == "at" || is_module_token(t));
    if !framed || !bare_name(function.split('+').next().unwrap_or(function)) {
        return None;
    }
    let module = rest.split_whitespace().skip(1).find(|t| is_module_token(t));
    Some(match module {
        Some(m) => format!("{function} {m}"),
        None => function.to_string(),
    })
}

/// Round 15: a crash `bt` frame index without its `#` (` 0 [ffff…] __schedule at …`, `10 [ffff…] kthread at …`):
/// the rest from the stack address on, when a number is followed by `[`.
fn unmarked_index(msg: &str) -> Option<&str> {
    let (n, rest) = msg.split_once(char::is_whitespace)?;
    n.parse::<u32>().ok()?;
    let rest = rest.trim_start();
    rest.starts_with('[').then_some(rest)
}

#[cfg(test)]
mod tests {
    use super::crash_frame;

    #[test]
    fn a_frame_index_without_its_hash_is_a_crash_frame() {
        assert_eq!(
            crash_frame("5 [ffffb656ce1abe70] nvme_stop_ctrl at ffffffffc0144900 [nvme_core]")
                .as_deref(),
            Some("nvme_stop_ctrl [nvme_core]")
        );
        assert_eq!(
            crash_frame("10 [ffffb656ce1abf50] ret_from_fork at ffffffff8c000255").as_deref(),
            Some("ret_from_fork")
        );
        // A number then words is no frame (a count in a sentence, a pid list).
        assert_eq!(crash_frame("3 tasks at ffffffff81000000"), None);
        assert_eq!(crash_frame("12 [not an address] x at y"), None);
    }
}
