//! NVIDIA Xid and NVSwitch SXid lines of the kernel log: a pure parser for every printed shape, the catalogue
//! of what each Xid means and what to do, and the tie of a paste's Xids to its tasks.
//!
//! Map: [`parse_xid_line`] reads one line (with or without a dmesg/journal/kmsg prefix) into an [`XidEvent`];
//! [`catalog`] is the Xid → meaning/action table (data in `catalog.tsv`, its source said there);
//! [`paste`] finds the Xids of a pasted log for `explain` and ties each to the paste's tasks by pid or name.
//!
//! Shapes read (each sample's origin is in the tests):
//! - `NVRM: Xid (PCI:0000:3b:00): 79, pid=1234, name=python, GPU has fallen off the bus.` (current drivers)
//! - `NVRM: Xid (PCI:0000:cb:00): 13, pid='<unknown>', name=<unknown>, Graphics Exception: …`
//! - `NVRM: Xid (PCI:0000:01:00): 32, Channel ID 00000000 intr 00004000` (no pid or name)
//! - `NVRM: Xid (0000:01:00): 13, 0005 00000000 …` (old drivers: no `PCI:`)
//! - `nvidia-nvswitch3: SXid (PCI:0000:04:00.0): 22013, Non-fatal, Link 44 Minion Link DLREQ interrupt`
//! - behind `[  123.456789] `, `<4>`, `6,1234,5678,-;` (raw /dev/kmsg), `Nov 19 01:03:26 host kernel: `,
//!   ISO times and `kern  :err   : ` (dmesg -x) prefixes.
//!
//! The parser never trusts the line: every field is bounded ([`MAX_FIELD`]), a number that does not fit is no
//! Xid, and what follows the number is kept as `detail` (escaped where rendered, never interpreted).

pub mod catalog;
pub mod paste;

use serde::{Deserialize, Serialize};

/// The longest field kept (device, process name, switch name); the detail is cut at [`MAX_DETAIL`].
pub const MAX_FIELD: usize = 64;
/// The longest detail kept (the text after the number, pid and name).
pub const MAX_DETAIL: usize = 240;

/// Which driver printed the line.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum XidKind {
    /// `NVRM: Xid`: the GPU driver.
    Xid,
    /// `nvidia-nvswitchN: SXid`: the NVSwitch driver.
    Sxid,
}

/// One Xid or SXid line.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct XidEvent {
    pub kind: XidKind,
    /// The Xid (or SXid) number.
    pub xid: u32,
    /// The PCI address as printed, without `PCI:` (`0000:3b:00`, `0000:04:00.0`).
    pub device: String,
    /// The process the driver named (`pid=`), when it printed one.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub pid: Option<i32>,
    /// The process name the driver printed (`name=`), when it printed a real one.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub name: Option<String>,
    /// The NVSwitch that printed an SXid (`nvidia-nvswitch3`).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub switch: Option<String>,
    /// An SXid's severity as printed (`Fatal`, `Non-fatal`), or an NVLink Xid's (`Fatal`, `Nonfatal`).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub severity: Option<String>,
    /// The NVLink link the line names (`Link 44`).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub link: Option<u32>,
    /// The printk time, µs since boot, when the line carried one (a kmsg header or a `[ sec.usec]` prefix).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub kernel_time_us: Option<u64>,
    /// What follows the number (and the pid and name), as printed, cut at [`MAX_DETAIL`].
    pub detail: String,
    /// The catalogue's meaning of the Xid (absent for SXids and unknown numbers).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub meaning: Option<String>,
    /// The catalogue's "what to do".
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub action: Option<String>,
}

impl XidEvent {
    /// `Xid 79` or `SXid 22013`.
    pub fn label(&self) -> String {
        match self.kind {
            XidKind::Xid => format!("Xid {}", self.xid),
            XidKind::Sxid => format!("SXid {}", self.xid),
        }
    }

    /// `Xid 79 (GPU has fallen off the bus)`, with the meaning when the catalogue has one.
    pub fn summary(&self) -> String {
        match &self.meaning {
            Some(m) => format!("{} ({m})", self.label()),
            None => self.label(),
        }
    }
}

/// One line of any log notation → its Xid or SXid, or None when the line is no Xid line (pure, never panics).
pub fn parse_xid_line(line: &[u8]) -> Option<XidEvent> {
    // A log line, not a file: a line longer than this is not one the driver printed.
    if line.len() > 4096 {
        return None;
    }
    let text = String::from_utf8_lossy(line);
    let text = text.trim_end_matches(['\n', '\r']);
    let (kmsg_us, text) = strip_kmsg_header(text);
    let (kind, at) = find_marker(text)?;
    let before = &text[..at];
    let rest = &text[at..];
    let rest = match kind {
        XidKind::Xid => rest.strip_prefix("Xid")?,
        XidKind::Sxid => rest.strip_prefix("SXid")?,
    };
    // ` (PCI:0000:3b:00): 79, …`
    let rest = rest.trim_start().strip_prefix('(')?;
    let close = rest.find(')')?;
    let device = rest[..close].trim();
    let device = device.strip_prefix("PCI:").unwrap_or(device);
    if device.is_empty()
        || device.len() > MAX_FIELD
        || !device
            .bytes()
            .all(|b| b.is_ascii_hexdigit() || b == b':' || b == b'.')
    {
        return None;
    }
    let rest = rest[close + 1..]
        .trim_start()
        .strip_prefix(':')?
        .trim_start();
    let digits = rest.bytes().take_while(u8::is_ascii_digit).count();
    if digits == 0 {
        return None;
    }
    let xid: u32 = rest[..digits].parse().ok()?;
    let mut rest = rest[digits..].trim_start();
    rest = rest.strip_prefix(',').unwrap_or(rest).trim_start();
    let mut pid = None;
    let mut name = None;
    if let Some(after) = rest.strip_prefix("pid=") {
        let (value, tail) = field(after);
        pid = value.parse::<i32>().ok().filter(|p| *p > 0);
        rest = tail;
        if let Some(after) = rest.strip_prefix("name=") {
            let (value, tail) = field(after);
            name = Some(value)
                .filter(|v| !v.is_empty() && !v.contains("unknown") && *v != "N/A")
                .map(|v| v.chars().take(MAX_FIELD).collect());
            rest = tail;
        }
    }
    let detail: String = rest.trim().chars().take(MAX_DETAIL).collect();
    let switch = match kind {
        XidKind::Sxid => switch_name(before),
        XidKind::Xid => None,
    };
    let (meaning, action) = match kind {
        XidKind::Xid => catalog::lookup(xid)
            .map(|e| (Some(e.meaning.to_string()), Some(e.action.to_string())))
            .unwrap_or_default(),
        XidKind::Sxid => (None, None),
    };
    Some(XidEvent {
        kind,
        xid,
        device: device.to_string(),
        pid,
        name,
        switch,
        severity: severity(&detail),
        link: link(&detail),
        kernel_time_us: kmsg_us.or_else(|| bracket_time_us(before)),
        detail,
        meaning,
        action,
    })
}

/// Where `Xid (` or `SXid (` starts: an Xid only after `NVRM: ` (or at the start), an SXid after the switch's
/// `nvidia-nvswitchN: ` (or at the start).
fn find_marker(text: &str) -> Option<(XidKind, usize)> {
    if let Some(at) = text.find("SXid") {
        let ok = text[at + 4..].trim_start().starts_with('(');
        if ok {
            return Some((XidKind::Sxid, at));
        }
    }
    let mut from = 0;
    while let Some(found) = text[from..].find("Xid") {
        let at = from + found;
        let before = text[..at].trim_end();
        let after = text[at + 3..].trim_start();
        if after.starts_with('(') && (before.ends_with("NVRM:") || before.is_empty()) {
            return Some((XidKind::Xid, at));
        }
        from = at + 3;
    }
    None
}

/// One `key=value` value: up to the next `, ` (quotes around it dropped), and what follows.
fn field(after: &str) -> (&str, &str) {
    let end = after.find(", ").unwrap_or(after.len());
    let value = after[..end].trim().trim_matches('\'').trim_matches('"');
    let tail = after[end..].strip_prefix(", ").unwrap_or(&after[end..]);
    (value, tail.trim_start())
}

/// `6,1234,5678901,-;message` → (Some(5678901), "message"); other lines unchanged.
fn strip_kmsg_header(text: &str) -> (Option<u64>, &str) {
    let Some(semi) = text.find(';') else {
        return (None, text);
    };
    let head = &text[..semi];
    let mut fields = head.split(',');
    let numbers: Vec<Option<u64>> = fields
        .by_ref()
        .take(3)
        .map(|f| f.trim().parse().ok())
        .collect();
    match numbers.as_slice() {
        [Some(_), Some(_), Some(us)] if head.len() < 64 => (Some(*us), &text[semi + 1..]),
        _ => (None, text),
    }
}

/// The last `[ sec.usec]` before the marker (dmesg's printk time) in µs; `[Fri Aug 30 …]` (dmesg -T) is no time.
fn bracket_time_us(before: &str) -> Option<u64> {
    let open = before.rfind('[')?;
    let close = open + before[open..].find(']')?;
    let inside = before[open + 1..close].trim();
    let (secs, frac) = inside.split_once('.')?;
    let secs: u64 = secs.parse().ok()?;
    if frac.is_empty() || frac.len() > 9 || !frac.bytes().all(|b| b.is_ascii_digit()) {
        return None;
    }
    let mut micros = frac.to_string();
    micros.truncate(6);
    while micros.len() < 6 {
        micros.push('0');
    }
    secs.checked_mul(1_000_000)?
        .checked_add(micros.parse::<u64>().ok()?)
}

/// `nvidia-nvswitch3` from `… nvidia-nvswitch3: ` before the SXid.
fn switch_name(before: &str) -> Option<String> {
    let word = before.trim_end().strip_suffix(':')?;
    let word = word.rsplit(char::is_whitespace).next()?;
    (word.starts_with("nvidia-nvswitch") && word.len() <= MAX_FIELD).then(|| word.to_string())
}

/// `Fatal`, `Non-fatal`, `Nonfatal` as a word of the detail.
fn severity(detail: &str) -> Option<String> {
    detail
        .split(|c: char| c == ',' || c.is_whitespace())
        .find(|w| matches!(*w, "Fatal" | "Non-fatal" | "Nonfatal"))
        .map(str::to_string)
}

/// The number after `Link ` (`Link 44`, `Link 00`); `Link -1` names none.
fn link(detail: &str) -> Option<u32> {
    let at = detail.find("Link ")?;
    let digits: String = detail[at + 5..]
        .chars()
        .take_while(char::is_ascii_digit)
        .collect();
    digits.parse().ok()
}

/// The metric label of an Xid: its number when the catalogue knows it (a bounded set), `other` otherwise,
/// `sxid` for every NVSwitch SXid.
pub fn metric_label(event: &XidEvent) -> String {
    match event.kind {
        XidKind::Sxid => "sxid".to_string(),
        XidKind::Xid if catalog::lookup(event.xid).is_some() => event.xid.to_string(),
        XidKind::Xid => "other".to_string(),
    }
}

#[cfg(test)]
mod tests;
