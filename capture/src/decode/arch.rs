//! The two architectures wedge-capture decodes: x86_64 (test machines) and aarch64 (the GB10 target).

use std::fmt;
use std::str::FromStr;

use crate::error::{Error, Result};

/// A syscall ABI. `/proc/<tid>/syscall` numbers belong to the task's own ABI; snapshots recorded on
/// another machine are decoded with `--arch`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Arch {
    X86_64,
    Aarch64,
}

impl Arch {
    /// The architecture this binary was built for.
    pub fn host() -> Arch {
        #[cfg(target_arch = "aarch64")]
        {
            Arch::Aarch64
        }
        #[cfg(not(target_arch = "aarch64"))]
        {
            Arch::X86_64
        }
    }

    pub fn as_str(self) -> &'static str {
        match self {
            Arch::X86_64 => "x86_64",
            Arch::Aarch64 => "aarch64",
        }
    }
}

impl fmt::Display for Arch {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

impl FromStr for Arch {
    type Err = Error;

    fn from_str(s: &str) -> Result<Arch> {
        match s.to_ascii_lowercase().as_str() {
            "x86_64" | "x86-64" | "amd64" => Ok(Arch::X86_64),
            "aarch64" | "arm64" => Ok(Arch::Aarch64),
            other => Err(Error::Parse {
                what: "architecture",
                why: format!("{other:?} is not one of x86_64, aarch64"),
            }),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn parses_aliases_and_rejects_others() {
        assert_eq!("arm64".parse::<Arch>().unwrap(), Arch::Aarch64);
        assert_eq!("x86_64".parse::<Arch>().unwrap(), Arch::X86_64);
        assert!("riscv64".parse::<Arch>().is_err());
        assert_eq!(Arch::Aarch64.to_string(), "aarch64");
    }

    #[test]
    fn host_matches_target() {
        assert_eq!(Arch::host().as_str(), std::env::consts::ARCH);
    }
}
