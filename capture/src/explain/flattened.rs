//! A console log whose newlines a paste lost (round 16: an Android panic dump, `[ 2052.053714][ T1668]
//! __switch_to+0x25c/0x41c [ 2052.053716][ T1668] __schedule+0x6a0/0xaac …` on one line): each printk record
//! starts with its timestamp and caller id (`[secs][ Tpid]`/`[ Ccpu]`, CONFIG_PRINTK_CALLER), so a line holding
//! several is split at them and each record read as the line the console printed.

/// The records of a line that holds two or more `[secs][ Tn]` records, in order, with any text before the
/// first (the rest of a record a hard wrap cut) as a piece of its own; None for a line of one record or none.
/// One pass over the line's `[`s, each looked at for a bounded length.
pub(super) fn records(line: &str) -> Option<Vec<&str>> {
    let mut starts = Vec::new();
    let mut from = 0;
    while let Some(i) = line.get(from..)?.find('[').map(|i| i + from) {
        if let Some(len) = record_prefix(&line[i..]) {
            starts.push(i);
            from = i + len;
        } else {
            from = i + 1;
        }
    }
    if starts.len() < 2 {
        return None;
    }
    let mut pieces = Vec::with_capacity(starts.len() + 1);
    if !line[..starts[0]].trim().is_empty() {
        pieces.push(line[..starts[0]].trim_end());
    }
    for (n, &s) in starts.iter().enumerate() {
        let end = starts.get(n + 1).copied().unwrap_or(line.len());
        pieces.push(line[s..end].trim_end());
    }
    Some(pieces)
}

/// The length of a `[ 2052.053714][ T1668]` record prefix at the start of `s`: a `[seconds.micros]` stamp, then
/// at once a caller id (`T` and a pid, or `C` and a CPU).
fn record_prefix(s: &str) -> Option<usize> {
    let stamp_end = s.get(..24.min(s.len()))?.find(']')?;
    let secs = s[1..stamp_end].trim_start();
    let (whole, frac) = secs.split_once('.')?;
    let digits = |t: &str| !t.is_empty() && t.bytes().all(|b| b.is_ascii_digit());
    if !digits(whole) || !digits(frac) {
        return None;
    }
    let rest = s[stamp_end + 1..].strip_prefix('[')?;
    let caller_end = rest.get(..12.min(rest.len()))?.find(']')?;
    let caller = rest[..caller_end].trim_start();
    let id = caller.strip_prefix(['T', 'C'])?;
    digits(id).then_some(stamp_end + 2 + caller_end + 1)
}

#[cfg(test)]
mod tests {
    use super::records;

    #[test]
    fn a_line_of_several_records_is_split_at_each_stamp_and_caller_id() {
        let line =
            "[ 2052.053713][ T1668] Call trace: [ 2052.053714][ T1668] __switch_to+0x25c/0x41c";
        assert_eq!(
            records(line).unwrap(),
            [
                "[ 2052.053713][ T1668] Call trace:",
                "[ 2052.053714][ T1668] __switch_to+0x25c/0x41c"
            ]
        );
        // A wrapped record's rest before the first stamp is a piece of its own.
        let wrapped = "tomic_flush+0x3c/0x7c [exynos_drm] [ 1.5][ T1] a [ 1.6][ C7] b";
        assert_eq!(
            records(wrapped).unwrap(),
            [
                "tomic_flush+0x3c/0x7c [exynos_drm]",
                "[ 1.5][ T1] a",
                "[ 1.6][ C7] b"
            ]
        );
    }

    #[test]
    fn one_record_or_stamps_without_caller_ids_are_left_alone() {
        assert!(records("[ 2052.053713][ T1668] Call trace:").is_none());
        assert!(records("[ 1.5] a [ 1.6] b").is_none());
        assert!(records("[<0>] x+0x1/0x2 [ 1.5][T1]").is_none());
    }
}
