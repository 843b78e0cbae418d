//! An old kernel's task line (`comm  D ffff…  0  PID  PPID 0x…`), a `ps` row, a task line a mail client cut short, and
//! the substring search the reader asks of every line ([`find`]): each answered without a pass or an
//! allocation for the lines (frames, mostly) that cannot be one.

/// Where `needle` first occurs in `hay`: `str::find` without the two-way searcher it builds on every call, a
/// cost that dominates on the short lines of a paste read one by one (a plain scan of a line's few dozen bytes
/// is cheaper; so it is than a `memchr` per candidate byte, measured). A match begins at a char boundary: a
/// needle's first byte never continues a UTF-8 character.
pub(super) fn find(hay: &str, needle: &str) -> Option<usize> {
    let (h, n) = (hay.as_bytes(), needle.as_bytes());
    let Some((&first, rest)) = n.split_first() else {
        return Some(0);
    };
    let last_start = h.len().checked_sub(n.len())?;
    (0..=last_start)
        .find(|&i| h[i] == first && h[i + 1..i + n.len()].iter().zip(rest).all(|(a, b)| a == b))
}

/// Whether `hay` contains `needle` ([`find`]).
pub(super) fn contains(hay: &str, needle: &str) -> bool {
    find(hay, needle).is_some()
}

/// An old kernel's task line (before 4.14 after `INFO: task`, and sysrq-w/-t of any age): `comm  D ffff…  0
/// PID  PPID 0x…`, also with the free-stack count glued to the state (`D12312`, `%c%5lu` overflowing), a comm
/// with spaces, or an old `(NOTLB)` tail. → (comm, pid, ppid).
pub(super) fn old_task_line(rest: &str) -> Option<(String, i32, i32)> {
    // The flags come last: a line whose last word is none (a frame) is answered without splitting it.
    if !is_task_flags(rest.split_whitespace().next_back()?) {
        return None;
    }
    let tokens: Vec<&str> = rest.split_whitespace().collect();
    old_task_fields(&tokens)
}

/// The last word of an old task line: its flags (`0x00004004`), or an old kernel's `(NOTLB)`/`(L-TLB)`.
fn is_task_flags(tail: &str) -> bool {
    (tail.starts_with("0x") && tail.len() > 2 && tail[2..].bytes().all(|b| b.is_ascii_hexdigit()))
        || tail == "(NOTLB)"
        || tail == "(L-TLB)"
}

/// [`old_task_line`] of the line's words.
fn old_task_fields(tokens: &[&str]) -> Option<(String, i32, i32)> {
    let n = tokens.len();
    if n < 4 || !is_task_flags(tokens[n - 1]) {
        return None;
    }
    let (pid, ppid) = (
        tokens[n - 3].parse::<i32>().ok()?,
        tokens[n - 2].parse::<i32>().ok()?,
    );
    // The state: one of the letters the kernel prints, alone or with the stack count glued on.
    let state = |t: &str| {
        let mut b = t.bytes();
        b.next().is_some_and(|c| b"RSDTtXZIPKWNx".contains(&c)) && b.all(|c| c.is_ascii_digit())
    };
    let at = (1..n - 3).find(|&i| state(tokens[i]))?;
    // Between the state and the pid: at most a pc/task address and the free-stack count.
    if n - 3 - at > 3 {
        return None;
    }
    Some((tokens[..at].join(" "), pid, ppid))
}

/// A task line a mail client cut short: `INFO: task` or `task:NAME` without the rest of the header, an old
/// kernel's task line ([`old_task_line`]) without its flags, or its ppid and flags (`fusermount  D  0 639694` /
/// `1274 0x00004004`); crash's `PID: … COMMAND:` without the command.
pub(super) fn task_line_head(msg: &str) -> bool {
    let m = msg.trim();
    if m == "INFO: task"
        || (m.starts_with("task:") && !m.contains(" state:"))
        || (m.starts_with("PID: ") && m.ends_with("COMMAND:"))
    {
        return true;
    }
    // An old task line cut before its flags (`… PID PPID`) or before its ppid (`… PID`): it ends in a number.
    let ends_in_number = m
        .split_whitespace()
        .next_back()
        .is_some_and(|last| last.parse::<i32>().is_ok());
    if !ends_in_number {
        return false;
    }
    let mut tokens: Vec<&str> = m.split_whitespace().collect();
    tokens.push("0x0");
    if old_task_fields(&tokens).is_some() {
        return true;
    }
    tokens.insert(tokens.len() - 1, "0");
    old_task_fields(&tokens).is_some()
}

/// A `ps` row in its default columns with STAT (`ps x`, `ps -o pid,tty,stat,time,command`): `  1015 ?  D
/// 0:04 [md2_raid1]`, printed above the task's `/proc/<pid>/stack` (procps: PID, TTY, STAT — a state letter
/// then its `<NLsl+` marks — TIME, COMMAND; a kernel thread's command is its comm in brackets). → (comm, pid).
/// Each test is on one word, so a frame line fails at its first.
pub(super) fn ps_row(msg: &str) -> Option<(String, i32)> {
    let mut words = msg.split_whitespace();
    let pid: i32 = words.next()?.parse().ok().filter(|&p| p > 0)?;
    let tty = words.next()?;
    let tty_ok = tty == "?" || tty.starts_with("pts/") || tty.starts_with("tty");
    let stat = words.next()?;
    let state_ok = stat.starts_with(['D', 'R', 'S', 'T', 't', 'Z', 'I', 'W', 'X'])
        && stat[1..].bytes().all(|b| b"<NLsl+".contains(&b));
    let time = words.next()?;
    let time_ok = time.split(':').count() >= 2
        && time
            .split([':', '-'])
            .all(|p| !p.is_empty() && p.bytes().all(|b| b.is_ascii_digit()));
    let command = words.next()?;
    let comm = command
        .strip_prefix('[')
        .and_then(|c| c.strip_suffix(']'))
        .unwrap_or(command);
    (tty_ok && state_ok && time_ok && !comm.is_empty()).then(|| (comm.to_string(), pid))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn find_agrees_with_str_find() {
        let hays = [
            "",
            "a",
            " from ",
            "x) from [<80776938>] (schedule+0x50/0xa8)",
            "fromfrom from",
            "kernel:kernel: kernel: x",
            "caf\u{e9} from \u{2192} x",
            "\u{e9}kernel: \u{e9} /proc/1/stack 0x1 \u{2192}x",
            "\u{2192}\u{2192}x0x0x kernel:  kernel: ",
        ];
        let needles = [
            "",
            " from ",
            "kernel: ",
            ") from [<",
            "+0x",
            " \u{2192} ",
            "x",
            "\u{2192}",
            "/proc/",
            "0x",
            "\u{2192}x",
            "\u{e9} ",
        ];
        for h in hays {
            for n in needles {
                assert_eq!(find(h, n), h.find(n), "{h:?} {n:?}");
            }
        }
    }

    #[test]
    fn old_task_lines_and_their_heads() {
        let line = "fusermount      D    0 639694   1274 0x00004004";
        assert_eq!(
            old_task_line(line),
            Some(("fusermount".to_string(), 639694, 1274))
        );
        assert!(old_task_line(" __mutex_lock.constprop.0+0x284/0x5f0").is_none());
        assert!(task_line_head("fusermount      D    0 639694"));
        assert!(task_line_head("fusermount      D    0 639694   1274"));
        assert!(!task_line_head(line));
        assert!(!task_line_head("schedule+0x50/0xa8"));
        assert!(!task_line_head(
            "[<0>] drm_sched_entity_flush+0x1/0x2 [gpu_sched]"
        ));
    }
}
