//! How setting values are written: in the config file (serde `with` modules), in `--help` ([`HelpText`]),
//! and the value types that only settings have ([`LogFormat`]).

use std::net::SocketAddr;
use std::path::PathBuf;
use std::time::Duration;

use serde::{Deserialize, Serialize};

use crate::duration::format_duration;

/// How log lines look on stderr.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, Serialize, Deserialize, clap::ValueEnum)]
#[serde(rename_all = "lowercase")]
pub enum LogFormat {
    /// `journal` when stderr is connected to the journal (JOURNAL_STREAM is set), else `plain`.
    #[default]
    Auto,
    /// `wedge-capture agent: warning: …`
    Plain,
    /// `<4>warning: …`: the syslog priority prefix journald understands.
    Journal,
    /// One JSON object per line: ts, level, msg and event fields.
    Json,
}

/// A default as `--help` shows it after the flag's text; `None` for values whose flag already says it
/// (switches) or that have nothing to show (empty lists). `kind`: the type as the docs table names it.
pub trait HelpText {
    fn help_text(&self) -> Option<String>;
    fn kind() -> String;
}

impl HelpText for Duration {
    fn help_text(&self) -> Option<String> {
        Some(format_duration(*self))
    }
    fn kind() -> String {
        "duration".into()
    }
}

impl HelpText for PathBuf {
    fn help_text(&self) -> Option<String> {
        Some(self.display().to_string())
    }
    fn kind() -> String {
        "path".into()
    }
}

/// Values whose default is shown as they print (`Display`), with the docs' name of their type.
macro_rules! help_text_as_displayed {
    ($($ty:ty => $kind:literal),* $(,)?) => {$(
        impl HelpText for $ty {
            fn help_text(&self) -> Option<String> {
                Some(self.to_string())
            }
            fn kind() -> String {
                $kind.into()
            }
        }
    )*};
}

help_text_as_displayed!(String => "string", u32 => "integer", usize => "integer", SocketAddr => "`IP:PORT`");

impl HelpText for bool {
    fn help_text(&self) -> Option<String> {
        None
    }
    fn kind() -> String {
        "bool".into()
    }
}

impl HelpText for LogFormat {
    fn help_text(&self) -> Option<String> {
        None
    }
    fn kind() -> String {
        use clap::ValueEnum;
        LogFormat::value_variants()
            .iter()
            .filter_map(|v| v.to_possible_value())
            .map(|v| format!("`{}`", v.get_name()))
            .collect::<Vec<_>>()
            .join(", ")
    }
}

impl<T: HelpText> HelpText for Vec<T> {
    fn help_text(&self) -> Option<String> {
        None
    }
    fn kind() -> String {
        format!("list of {}s", T::kind())
    }
}

/// A setting without a default (off unless given).
impl<T: HelpText> HelpText for Option<T> {
    fn help_text(&self) -> Option<String> {
        None
    }
    fn kind() -> String {
        T::kind()
    }
}

/// A duration: seconds as a number, or text such as "30s", "250ms", "10m"; printed as seconds.
pub mod duration {
    use std::time::Duration;

    use serde::Deserialize;

    #[derive(Deserialize)]
    #[serde(untagged)]
    enum Written {
        Seconds(f64),
        Text(String),
    }

    pub fn serialize<S: serde::Serializer>(
        value: &Option<Duration>,
        s: S,
    ) -> Result<S::Ok, S::Error> {
        match value {
            Some(d) => s.serialize_f64(d.as_secs_f64()),
            None => s.serialize_none(),
        }
    }

    pub fn deserialize<'de, D: serde::Deserializer<'de>>(
        d: D,
    ) -> Result<Option<Duration>, D::Error> {
        let parsed = match Option::<Written>::deserialize(d)? {
            None => return Ok(None),
            Some(Written::Seconds(s)) => crate::duration::parse_duration(&s.to_string()),
            Some(Written::Text(t)) => crate::duration::parse_duration(&t),
        };
        parsed.map(Some).map_err(serde::de::Error::custom)
    }
}

/// One path or a list of paths; printed as a list.
pub mod paths {
    use std::path::PathBuf;

    use serde::{Deserialize, Serialize};

    #[derive(Deserialize)]
    #[serde(untagged)]
    enum Written {
        One(PathBuf),
        Many(Vec<PathBuf>),
    }

    pub fn serialize<S: serde::Serializer>(
        value: &Option<Vec<PathBuf>>,
        s: S,
    ) -> Result<S::Ok, S::Error> {
        value.serialize(s)
    }

    pub fn deserialize<'de, D: serde::Deserializer<'de>>(
        d: D,
    ) -> Result<Option<Vec<PathBuf>>, D::Error> {
        Ok(Option::<Written>::deserialize(d)?.map(|w| match w {
            Written::One(p) => vec![p],
            Written::Many(v) => v,
        }))
    }
}

/// `IP:PORT` as text.
pub mod socket_addr {
    use std::net::SocketAddr;

    use serde::Deserialize;

    pub fn serialize<S: serde::Serializer>(
        value: &Option<SocketAddr>,
        s: S,
    ) -> Result<S::Ok, S::Error> {
        match value {
            Some(addr) => s.serialize_str(&addr.to_string()),
            None => s.serialize_none(),
        }
    }

    pub fn deserialize<'de, D: serde::Deserializer<'de>>(
        d: D,
    ) -> Result<Option<SocketAddr>, D::Error> {
        Option::<String>::deserialize(d)?
            .map(|text| {
                text.parse::<SocketAddr>().map_err(|e| {
                    serde::de::Error::custom(format!("{e} (give IP:PORT, e.g. 127.0.0.1:9464)"))
                })
            })
            .transpose()
    }
}
