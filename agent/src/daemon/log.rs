//! The agent's log: one line per event on stderr, in a form journald understands (`<N>` syslog
//! priority prefixes, parsed by journald with SyslogLevelPrefix=yes, the default), as plain text for a
//! terminal, or as one JSON object per line for log shippers.

use std::io::Write;

use super::config::LogFormat;

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

    pub fn format(&self) -> LogFormat {
        self.format
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
        let message = message.replace(['\n', '\r'], " ");
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
                object.insert("msg".into(), message.into());
                if let serde_json::Value::Object(extra) = fields {
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

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn one_line_per_event_in_every_format() {
        let fields = serde_json::json!({"incident": "/var/lib/x", "pid": 7});
        let journal = Logger::new(LogFormat::Journal);
        assert_eq!(
            journal.render(Level::Warning, "a\nb", fields.clone()),
            "<4>warning: a b\n"
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
}
