//! Log-line timestamps that are not the kernel's seconds: `dmesg -T`'s ctime dates (`[Wed Jun 14 18:03:48
//! 2017]`), told apart as their own prefix kind and read as stamps (seconds since 1970) so one log's lines can
//! be compared; and the kernel's own seconds (`[ 5036.077593]`) beside them ([`kernel_stamp`]).

/// `Wed Jun 14 …`: a ctime date's weekday and the space after it.
pub(super) fn is_ctime_day(s: &str) -> bool {
    const DAYS: [&str; 7] = ["Mon ", "Tue ", "Wed ", "Thu ", "Fri ", "Sat ", "Sun "];
    DAYS.iter().any(|d| s.starts_with(d))
}

/// `dmesg -T`'s `Wed Jun 14 18:03:48 2017` in seconds since 1970 (UTC as printed), so one log's stamps can be
/// compared (they only go forward) and another log's told apart.
pub(super) fn ctime_seconds(s: &str) -> Option<f64> {
    const MONTHS: [&str; 12] = [
        "Jan", "Feb", "Mar", "Apr", "May", "Jun", "Jul", "Aug", "Sep", "Oct", "Nov", "Dec",
    ];
    if !is_ctime_day(s) {
        return None;
    }
    let mut w = s[4..].split_whitespace();
    let name = w.next()?;
    let month = MONTHS.iter().position(|m| *m == name)? as i64 + 1;
    let day: i64 = w.next()?.parse().ok()?;
    let mut hms = w.next()?.split(':').map(|p| p.parse::<i64>().ok());
    let (h, m, sec) = (hms.next()??, hms.next()??, hms.next()??);
    let year: i64 = w.next()?.parse().ok()?;
    // A date no clock prints is no stamp (and keeps the arithmetic below far from overflow on hostile input).
    let plausible = (1..=31).contains(&day)
        && (0..24).contains(&h)
        && (0..60).contains(&m)
        && (0..=60).contains(&sec)
        && (1970..=9999).contains(&year);
    if !plausible {
        return None;
    }
    // Days from civil (Howard Hinnant's algorithm): March-based years make leap days the year's last.
    let y = if month <= 2 { year - 1 } else { year };
    let era = y.div_euclid(400);
    let yoe = y - era * 400;
    let mp = (month + 9) % 12;
    let doy = (153 * mp + 2) / 5 + day - 1;
    let doe = yoe * 365 + yoe / 4 - yoe / 100 + doy;
    let days = era * 146_097 + doe - 719_468;
    Some((days * 86_400 + h * 3_600 + m * 60 + sec) as f64)
}

/// The kernel's timestamp in a line's prefix (`[ 5036.077593]`, `kernel: [163245.663663]`, `dmesg -T`'s
/// `[Wed Jun 14 18:03:48 2017]`), in seconds.
pub(super) fn kernel_stamp(raw: &str) -> Option<f64> {
    let open = raw.find('[')?;
    if open > 64 {
        return None;
    }
    let rest = &raw[open + 1..];
    let close = rest.find(']')?;
    let inner = rest[..close].trim();
    if let Some(t) = ctime_seconds(inner) {
        return Some(t);
    }
    let (secs, frac) = inner.split_once('.')?;
    let digits = |s: &str| !s.is_empty() && s.bytes().all(|b| b.is_ascii_digit());
    (digits(secs) && digits(frac)).then(|| inner.parse().ok())?
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_ctime_date_no_clock_prints_is_no_stamp() {
        assert_eq!(
            ctime_seconds("Wed Jun 14 18:03:48 2017"),
            Some(1_497_463_428.0)
        );
        // Fields a fuzzer finds: each would overflow the day count or is no time of day.
        for bad in [
            "Wed Jun 14 18:03:48 9223372036854775807",
            "Wed Jun 9223372036854775807 18:03:48 2017",
            "Wed Jun 14 9223372036854775807:03:48 2017",
            "Wed Jun 14 18:9223372036854775807:48 2017",
            "Wed Jun 14 18:03:-9223372036854775808 2017",
            "Wed Jun 0 18:03:48 2017",
            "Wed Jun 14 24:00:00 2017",
        ] {
            assert_eq!(ctime_seconds(bad), None, "{bad}");
        }
    }
}
