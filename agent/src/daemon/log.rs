//! The agent's log: one line per event on stderr, in a form journald understands (`<N>` syslog
//! priority prefixes, parsed by journald with SyslogLevelPrefix=yes, the default), as plain text for a
//! terminal, or as one JSON object per line for log shippers.
//!
//! Much of what is logged comes from others: comms, cgroup paths, ring file names. Every line goes through
//! [`escape`] (the message and every string of the JSON fields alike), so no control character (ESC, a
//! newline that forges a second line, a bidi override) reaches a terminal or the journal, and one value
//! reads the same in the plain and the JSON form.
//!
//! What a container controls (processes it forks that match the selection, ring files it writes, wedges it
//! causes) must not fill the journal: such lines go through a [`Limiter`], keyed by cause, so a call site
//! stays one line (`self.limiter.event(&self.logger, "target", Level::Info, …)`). Per minute, each cause
//! writes at most [`LINES_PER_CAUSE_PER_MINUTE`] lines and all causes together at most
//! [`LIMITED_LINES_PER_MINUTE`]; what is left out is counted and summed up in **one** line when the minute
//! ends: at most `LIMITED_LINES_PER_MINUTE + 1` lines a minute, whatever a container does.

use std::borrow::Cow;
use std::collections::BTreeMap;
use std::io::Write;
use std::time::{Duration, Instant};

use crate::settings::LogFormat;

/// The workspace's one escaper for terminals and log lines (`capture::escape`): `\n`, `\r`, `\t`, `\e` (ESC),
/// `\xNN` for other C0 controls and DEL, `\u{NNNN}` for C1 controls and Unicode format characters.
pub use capture::escape::controls as escape;
#[cfg(test)]
use capture::escape::needs_escape;

/// Every string inside `value` (keys too) through [`escape`].
fn escape_json(value: serde_json::Value) -> serde_json::Value {
    use serde_json::Value;
    match value {
        Value::String(s) => match escape(&s) {
            Cow::Borrowed(_) => Value::String(s),
            Cow::Owned(escaped) => Value::String(escaped),
        },
        Value::Array(items) => Value::Array(items.into_iter().map(escape_json).collect()),
        Value::Object(map) => Value::Object(
            map.into_iter()
                .map(|(k, v)| (escape(&k).into_owned(), escape_json(v)))
                .collect(),
        ),
        other => other,
    }
}

/// syslog priorities used.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Level {
    Error = 3,
    Warning = 4,
    Notice = 5,
    Info = 6,
}

impl Level {
    fn name(self) -> &'static str {
        match self {
            Level::Error => "error",
            Level::Warning => "warning",
            Level::Notice => "notice",
            Level::Info => "info",
        }
    }
}

/// Writes log lines to stderr.
#[derive(Debug, Clone, Copy)]
pub struct Logger {
    format: LogFormat,
}

impl Logger {
    /// `Auto` becomes `Journal` when stderr is the journal (systemd sets JOURNAL_STREAM), else `Plain`.
    pub fn new(format: LogFormat) -> Logger {
        let format = match format {
            LogFormat::Auto if std::env::var_os("JOURNAL_STREAM").is_some() => LogFormat::Journal,
            LogFormat::Auto => LogFormat::Plain,
            other => other,
        };
        Logger { format }
    }

    /// One event: `message` plus optional structured fields (shown in JSON; in text only the message).
    pub fn event(&self, level: Level, message: &str, fields: serde_json::Value) {
        let line = self.render(level, message, fields);
        // One write per line, so lines from this process never interleave.
        let _ = std::io::stderr().lock().write_all(line.as_bytes());
    }

    pub fn log(&self, level: Level, message: &str) {
        self.event(level, message, serde_json::Value::Null);
    }

    pub fn info(&self, message: &str) {
        self.log(Level::Info, message);
    }

    pub fn notice(&self, message: &str) {
        self.log(Level::Notice, message);
    }

    pub fn warning(&self, message: &str) {
        self.log(Level::Warning, message);
    }

    pub fn error(&self, message: &str) {
        self.log(Level::Error, message);
    }

    /// The line written for an event (pure, for tests).
    pub fn render(&self, level: Level, message: &str, fields: serde_json::Value) -> String {
        let message = escape(message);
        match self.format {
            LogFormat::Json => {
                let mut object = serde_json::Map::new();
                object.insert(
                    "ts".into(),
                    chrono::Utc::now()
                        .to_rfc3339_opts(chrono::SecondsFormat::Millis, true)
                        .into(),
                );
                object.insert("level".into(), level.name().into());
                object.insert("msg".into(), message.into_owned().into());
                if let serde_json::Value::Object(extra) = escape_json(fields) {
                    object.extend(extra);
                }
                format!("{}\n", serde_json::Value::Object(object))
            }
            LogFormat::Journal => match level {
                Level::Info | Level::Notice => format!("<{}>{message}\n", level as u8),
                _ => format!("<{}>{}: {message}\n", level as u8, level.name()),
            },
            LogFormat::Plain | LogFormat::Auto => match level {
                Level::Info | Level::Notice => format!("wedge-capture agent: {message}\n"),
                _ => format!("wedge-capture agent: {}: {message}\n", level.name()),
            },
        }
    }
}

/// Lines one container-controlled cause may write per minute; the rest are counted and summed up.
pub const LINES_PER_CAUSE_PER_MINUTE: u32 = 10;
/// Lines all container-controlled causes together may write per minute (plus one summary line).
pub const LIMITED_LINES_PER_MINUTE: u32 = 50;
/// The limiter's window.
pub const LIMIT_WINDOW: Duration = Duration::from_secs(60);

/// Lines written and left out for one cause in the current window.
#[derive(Debug, Default, Clone, Copy)]
struct CauseCount {
    written: u32,
    suppressed: u64,
}

/// A per-cause, per-minute limit on log lines a container can cause (see the module doc).
#[derive(Debug)]
pub struct Limiter {
    window: Duration,
    started: Instant,
    written: u32,
    causes: BTreeMap<&'static str, CauseCount>,
}

impl Default for Limiter {
    fn default() -> Self {
        Limiter::new(LIMIT_WINDOW)
    }
}

impl Limiter {
    pub fn new(window: Duration) -> Limiter {
        Limiter {
            window,
            started: Instant::now(),
            written: 0,
            causes: BTreeMap::new(),
        }
    }

    /// Write an event of `cause` through `logger`, unless the cause or all causes together used up this
    /// window's lines (then it is counted for the window's summary line).
    pub fn event(
        &mut self,
        logger: &Logger,
        cause: &'static str,
        level: Level,
        message: &str,
        fields: serde_json::Value,
    ) {
        self.flush(logger);
        if self.admit(cause, Instant::now()) {
            logger.event(level, message, fields);
        }
    }

    /// [`Limiter::event`] without structured fields.
    pub fn log(&mut self, logger: &Logger, cause: &'static str, level: Level, message: &str) {
        self.event(logger, cause, level, message, serde_json::Value::Null);
    }

    /// Whether a line of `cause` may be written at `now` (counted either way).
    pub fn admit(&mut self, cause: &'static str, now: Instant) -> bool {
        if now.saturating_duration_since(self.started) >= self.window {
            // The window's summary is written by `flush`; a caller that only admits drops it.
            let _ = self.summary(now);
        }
        let count = self.causes.entry(cause).or_default();
        if count.written < LINES_PER_CAUSE_PER_MINUTE && self.written < LIMITED_LINES_PER_MINUTE {
            count.written += 1;
            self.written += 1;
            true
        } else {
            count.suppressed += 1;
            false
        }
    }

    /// Once the window is over: its summary line when lines were left out (then a new window starts).
    /// Called by [`Limiter::event`] and by the loop after every scan, so the summary never waits for the
    /// next line.
    pub fn flush(&mut self, logger: &Logger) {
        if let Some((message, fields)) = self.summary(Instant::now()) {
            logger.event(Level::Notice, &message, fields);
        }
    }

    /// The summary of what was left out so far, whatever the window's age (the agent is stopping).
    pub fn flush_now(&mut self, logger: &Logger) {
        let now = self.started + self.window;
        if let Some((message, fields)) = self.summary(now.max(Instant::now())) {
            logger.event(Level::Notice, &message, fields);
        }
    }

    /// The summary line of a window that ended by `now` (None while it runs, or when nothing was left
    /// out); starts the next window.
    pub fn summary(&mut self, now: Instant) -> Option<(String, serde_json::Value)> {
        let age = now.saturating_duration_since(self.started);
        if age < self.window {
            return None;
        }
        let causes = std::mem::take(&mut self.causes);
        self.started = now;
        self.written = 0;
        let suppressed: Vec<(&str, u64)> = causes
            .iter()
            .filter(|(_, c)| c.suppressed > 0)
            .map(|(cause, c)| (*cause, c.suppressed))
            .collect();
        if suppressed.is_empty() {
            return None;
        }
        let total: u64 = suppressed.iter().map(|(_, n)| n).sum();
        let list: Vec<String> = suppressed.iter().map(|(c, n)| format!("{c} {n}")).collect();
        let message = format!(
            "log rate limit: {total} lines left out in the last {:.0} s ({}); at most {} per cause and {} \
             in all per minute",
            age.as_secs_f64(),
            list.join(", "),
            LINES_PER_CAUSE_PER_MINUTE,
            LIMITED_LINES_PER_MINUTE
        );
        let by_cause: serde_json::Map<String, serde_json::Value> = suppressed
            .iter()
            .map(|(c, n)| (c.to_string(), (*n).into()))
            .collect();
        let fields = serde_json::json!({"event": "log-suppressed", "suppressed": total,
            "by_cause": by_cause, "window_s": age.as_secs_f64()});
        Some((message, fields))
    }
}

#[cfg(test)]
mod limiter_tests {
    use super::*;

    #[test]
    fn each_cause_and_all_causes_are_capped_per_window_and_summed_up_once() {
        let t0 = Instant::now();
        let mut limiter = Limiter::new(Duration::from_secs(60));
        limiter.started = t0;
        let admitted = (0..1000)
            .filter(|_| limiter.admit("target", t0 + Duration::from_secs(1)))
            .count();
        assert_eq!(admitted, LINES_PER_CAUSE_PER_MINUTE as usize);
        // Many causes: all of them together stop at the overall cap.
        let causes: [&'static str; 8] = ["a", "b", "c", "d", "e", "f", "g", "h"];
        let mut more = 0;
        for cause in causes {
            more += (0..100)
                .filter(|_| limiter.admit(cause, t0 + Duration::from_secs(2)))
                .count();
        }
        assert_eq!(
            admitted + more,
            LIMITED_LINES_PER_MINUTE as usize,
            "overall cap"
        );
        assert!(limiter.summary(t0 + Duration::from_secs(59)).is_none());
        let (message, fields) = limiter.summary(t0 + Duration::from_secs(60)).unwrap();
        assert!(message.starts_with("log rate limit: "), "{message}");
        assert!(message.contains("target 990"), "{message}");
        assert_eq!(fields["by_cause"]["target"], 990);
        // A new window: lines pass again, and a quiet window has no summary.
        assert!(limiter.admit("target", t0 + Duration::from_secs(61)));
        assert!(limiter.summary(t0 + Duration::from_secs(121)).is_none());
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn one_line_per_event_in_every_format() {
        let fields = serde_json::json!({"incident": "/var/lib/x", "pid": 7});
        let journal = Logger::new(LogFormat::Journal);
        assert_eq!(
            journal.render(Level::Warning, "a\nb", fields.clone()),
            "<4>warning: a\\nb\n"
        );
        assert_eq!(
            journal.render(Level::Notice, "wedge", fields.clone()),
            "<5>wedge\n"
        );
        let plain = Logger::new(LogFormat::Plain);
        assert_eq!(
            plain.render(Level::Error, "boom", fields.clone()),
            "wedge-capture agent: error: boom\n"
        );
        let json = Logger::new(LogFormat::Json);
        let line = json.render(Level::Notice, "incident", fields);
        assert_eq!(line.matches('\n').count(), 1);
        let value: serde_json::Value = serde_json::from_str(&line).unwrap();
        assert_eq!(value["level"], "notice");
        assert_eq!(value["incident"], "/var/lib/x");
        assert_eq!(value["pid"], 7);
    }

    #[test]
    fn hostile_comms_and_paths_give_one_line_in_every_format() {
        use std::os::unix::ffi::OsStrExt;
        // What a container controls: its comm (NUL included, from a recorded tree), a ring path with invalid
        // UTF-8 and a newline, markup that means nothing in a journal and is kept as it is.
        let path = std::path::Path::new(std::ffi::OsStr::from_bytes(b"/run/r/bad\xff\n<2>x.ring"));
        let message = format!(
            "watching pid 7 comm <img src=x onerror=alert(1)>|`x`\0\x1b[2J ring {}",
            path.display()
        );
        for format in [LogFormat::Plain, LogFormat::Journal, LogFormat::Json] {
            let line = Logger::new(format).render(Level::Warning, &message, serde_json::json!({}));
            assert_eq!(line.matches('\n').count(), 1, "{line:?}");
            assert!(line.ends_with('\n') && !line.contains('\0') && !line.contains('\x1b'));
            let shown = match format {
                LogFormat::Json => serde_json::from_str::<serde_json::Value>(&line).unwrap()["msg"]
                    .as_str()
                    .unwrap()
                    .to_string(),
                _ => line,
            };
            assert!(
                shown.contains("<img src=x onerror=alert(1)>|`x`\\x00\\e[2J"),
                "{shown:?}"
            );
            assert!(shown.contains("bad\u{fffd}\\n<2>x.ring"), "{shown:?}");
        }
    }

    #[test]
    fn untrusted_text_is_escaped_the_same_way_in_plain_and_json() {
        // A comm with ESC (a terminal colour), a cgroup path with a newline forging a second line, a ring
        // file name with a bidi override and a NUL-free C1 control.
        let comm = "py\x1b[31mthon";
        let cgroup = "/kubepods/pod1\n<3>error: forged";
        let ring = "evil\u{202e}gnir.txt\u{85}\x7f\x01\t\r";
        let message = format!("watching pid 7: comm {comm} in {cgroup}, ring {ring}");
        let mut fields = serde_json::json!({"event": "target", "why": message.clone(),
            "nested": [{"comm": comm}]});
        fields[cgroup] = 1.into();
        let expected = "watching pid 7: comm py\\e[31mthon in /kubepods/pod1\\n<3>error: forged, \
                        ring evil\\u{202e}gnir.txt\\u{0085}\\x7f\\x01\\t\\r";
        assert_eq!(escape(&message), expected);
        for format in [LogFormat::Plain, LogFormat::Journal] {
            let line = Logger::new(format).render(Level::Info, &message, fields.clone());
            assert!(line.ends_with(&format!("{expected}\n")), "{line:?}");
            assert_eq!(line.matches('\n').count(), 1, "{line:?}");
            assert!(
                !line.chars().any(|c| c != '\n' && needs_escape(c)),
                "{line:?}"
            );
        }
        let line = Logger::new(LogFormat::Json).render(Level::Info, &message, fields);
        assert_eq!(line.matches('\n').count(), 1, "{line:?}");
        // Valid JSON whose values decode to exactly the plain text, not to the raw bytes.
        let value: serde_json::Value = serde_json::from_str(&line).unwrap();
        assert_eq!(value["msg"], expected);
        assert_eq!(value["why"], expected);
        assert_eq!(value["nested"][0]["comm"], "py\\e[31mthon");
        assert_eq!(value["/kubepods/pod1\\n<3>error: forged"], 1);
        assert!(
            !line.contains('\x1b') && !line.contains("\\u001b"),
            "{line}"
        );
        // Ordinary text, regexes and paths included, is left alone.
        assert!(matches!(
            escape("comm /^python\\d+$/ in /a/b c"),
            Cow::Borrowed(_)
        ));
        assert_eq!(escape("naïve 日本"), "naïve 日本");
    }
}
