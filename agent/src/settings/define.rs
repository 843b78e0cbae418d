//! `define_settings!`: one definition per setting becomes everything that carries it.
//!
//! A group of settings is written once, as fields with a doc comment (the `--help` text), `#[arg]` (the
//! flag; `#[arg(skip)]` for a config-only setting), optional `#[serde]` (how the config file writes the
//! value), the field name (the config key; the flag is the same name with dashes), the type and the
//! default (`= EXPR`; none means "off unless given"). From that the macro makes:
//! - the options struct: every field an `Option`, read by clap (flags) and by serde (config file), and
//!   printed by serde (`agent --check-config`, whose output is therefore a config file);
//! - the resolved struct: the concrete values every later layer uses;
//! - `overlaid` (later source wins, field by field), `resolve` (defaults for what is unset), the way back
//!   from resolved to options, the config keys, and the defaults `--help` shows.

macro_rules! define_settings {
    (
        $(#[$struct_meta:meta])*
        pub struct $options:ident => $resolved:ident {
            $(
                $(#[$field_meta:meta])*
                $field:ident : $ty:ty $(= $default:expr)? ,
            )*
        }
    ) => {
        $(#[$struct_meta])*
        #[derive(Debug, Clone, Default, PartialEq, clap::Args, serde::Deserialize, serde::Serialize)]
        pub struct $options {
            $(
                $(#[$field_meta])*
                #[serde(default)]
                pub $field: Option<$ty>,
            )*
        }

        /// The resolved settings of this group: a value for every field.
        #[derive(Debug, Clone, PartialEq)]
        pub struct $resolved {
            $( pub $field: define_settings!(@resolved_type $ty $(, $default)?), )*
        }

        impl $options {
            /// The config-file keys of this group, in definition order.
            pub const KEYS: &'static [&'static str] = &[$(stringify!($field)),*];

            /// `over`'s settings where it has them, ours elsewhere (the later source wins).
            pub fn overlaid(self, over: Self) -> Self {
                Self { $( $field: over.$field.or(self.$field), )* }
            }

            /// Every setting left unset takes its default.
            pub fn resolve(self) -> $resolved {
                $resolved { $( $field: define_settings!(@pick self.$field $(, $default)?), )* }
            }

            /// `(config key, default as --help shows it)` for every setting with a default that has a
            /// text worth showing.
            pub fn help_defaults() -> Vec<(&'static str, String)> {
                let mut out = Vec::new();
                $( define_settings!(@help out, $field, $ty $(, $default)?); )*
                out
            }
        }

        impl From<&$resolved> for $options {
            fn from(settings: &$resolved) -> Self {
                Self { $( $field: define_settings!(@back settings.$field.clone() $(, $default)?), )* }
            }
        }
    };
    (@resolved_type $ty:ty) => { Option<$ty> };
    (@resolved_type $ty:ty, $default:expr) => { $ty };
    (@pick $value:expr) => { $value };
    (@pick $value:expr, $default:expr) => { $value.unwrap_or_else(|| $default) };
    (@back $value:expr) => { $value };
    (@back $value:expr, $default:expr) => { Some($value) };
    (@help $out:ident, $field:ident, $ty:ty) => {};
    (@help $out:ident, $field:ident, $ty:ty, $default:expr) => {
        if let Some(text) = <$ty as $crate::settings::values::HelpText>::help_text(&$default) {
            $out.push((stringify!($field), text));
        }
    };
}

pub(crate) use define_settings;
