//! `define_settings!`: one definition per setting becomes everything that carries it.
//!
//! A group of settings is written once, as fields with a doc comment (the `--help` text and the docs
//! table's meaning), `#[arg]` (the flag; `#[arg(skip)]` for a config-only setting), optional `#[serde]`
//! (how the config file writes the value), the field name (the config key; the flag is the same name with
//! dashes), the type, the default (`= EXPR`; none means "off unless given") and, after `=>`, what a reload
//! (SIGHUP) does with it ([`Reload`]: `Live` or `Restart`; the grammar requires one, so a setting cannot be
//! added without saying). From that the macro makes:
//! - the options struct: every field an `Option`, read by clap (flags) and by serde (config file), and
//!   printed by serde (`agent --check-config`, whose output is therefore a config file);
//! - the resolved struct: the concrete values every later layer uses;
//! - `overlaid` (later source wins, field by field), `resolve` (defaults for what is unset), the way back
//!   from resolved to options, the config keys, the defaults `--help` shows, the [`Definition`]s (the
//!   docs table and the example config are checked against them);
//! - `restart_changes` and `reloaded`: the reload's lists, from each definition's [`Reload`].

/// What a reload (SIGHUP) does with a setting.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Reload {
    /// The reload applies the new value.
    Live,
    /// The value shapes something built once at the start (the capture path, the metrics endpoint): a
    /// reload keeps the current value and says that a restart is needed to change it.
    Restart,
}

impl Reload {
    /// As the docs table writes it.
    pub fn word(self) -> &'static str {
        match self {
            Reload::Live => "live",
            Reload::Restart => "restart",
        }
    }
}

/// One setting as defined: what the docs table and the example config are checked against.
#[derive(Debug, Clone, Copy)]
pub struct Definition {
    /// The config key (the flag is the same name with dashes, where there is one).
    pub key: &'static str,
    /// The doc comment's lines (the `--help` text).
    pub help: &'static [&'static str],
    /// Whether it has a default (`= EXPR`); without, it is off unless given.
    pub has_default: bool,
    pub reload: Reload,
    /// The value type's name as the docs say it.
    pub kind: fn() -> String,
}

macro_rules! define_settings {
    (@doc [$($lines:literal),*]) => { &[$($lines),*] };
    (@doc [$($lines:literal),*] #[doc = $line:literal] $($rest:tt)*) => {
        define_settings!(@doc [$($lines,)* $line] $($rest)*)
    };
    (@doc [$($lines:literal),*] #[$($other:tt)*] $($rest:tt)*) => {
        define_settings!(@doc [$($lines),*] $($rest)*)
    };
    (@resolved_type $ty:ty) => { Option<$ty> };
    (@resolved_type $ty:ty, $default:expr) => { $ty };
    (@kind $ty:ty) => { <Option<$ty> as $crate::settings::values::HelpText>::kind };
    (@kind $ty:ty, $default:expr) => { <$ty as $crate::settings::values::HelpText>::kind };
    (@pick $value:expr) => { $value };
    (@pick $value:expr, $default:expr) => { $value.unwrap_or_else(|| $default) };
    (@back $value:expr) => { $value };
    (@back $value:expr, $default:expr) => { Some($value) };
    (@has_default) => { false };
    (@has_default $default:expr) => { true };
    (@help $out:ident, $field:ident, $ty:ty) => {};
    (@help $out:ident, $field:ident, $ty:ty, $default:expr) => {
        if let Some(text) = <$ty as $crate::settings::values::HelpText>::help_text(&$default) {
            $out.push((stringify!($field), text));
        }
    };
    (@kept Live, $old:expr, $new:expr) => { $new };
    (@kept Restart, $old:expr, $new:expr) => { $old.clone() };
    (@needs_restart Live) => { false };
    (@needs_restart Restart) => { true };
    (
        $(#[$struct_meta:meta])*
        pub struct $options:ident => $resolved:ident {
            $(
                $(#[$($field_attr:tt)*])*
                $field:ident : $ty:ty $(= $default:expr)? => $reload:ident,
            )*
        }
    ) => {
        $(#[$struct_meta])*
        #[derive(Debug, Clone, Default, PartialEq, clap::Args, serde::Deserialize, serde::Serialize)]
        pub struct $options {
            $(
                $(#[$($field_attr)*])*
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

            /// Every setting of this group as defined, in definition order.
            pub const DEFINITIONS: &'static [$crate::settings::define::Definition] = &[$(
                $crate::settings::define::Definition {
                    key: stringify!($field),
                    help: define_settings!(@doc [] $(#[$($field_attr)*])*),
                    has_default: define_settings!(@has_default $($default)?),
                    reload: $crate::settings::define::Reload::$reload,
                    kind: define_settings!(@kind $ty $(, $default)?),
                },
            )*];

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

        impl $resolved {
            /// The config keys of the settings a reload cannot change ([`Reload::Restart`]) whose value
            /// differs in `new`.
            ///
            /// [`Reload::Restart`]: $crate::settings::define::Reload::Restart
            pub fn restart_changes(&self, new: &Self) -> Vec<&'static str> {
                let mut changed = Vec::new();
                $(
                    if define_settings!(@needs_restart $reload) && self.$field != new.$field {
                        changed.push(stringify!($field));
                    }
                )*
                changed
            }

            /// `new`, keeping the current value of every setting a reload cannot change.
            pub fn reloaded(&self, new: Self) -> Self {
                Self { $( $field: define_settings!(@kept $reload, self.$field, new.$field), )* }
            }
        }

        impl From<&$resolved> for $options {
            fn from(settings: &$resolved) -> Self {
                Self { $( $field: define_settings!(@back settings.$field.clone() $(, $default)?), )* }
            }
        }
    };
}

pub(crate) use define_settings;
