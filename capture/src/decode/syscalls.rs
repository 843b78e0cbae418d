//! Syscall number → name, per architecture. The tables are data (`capture/data/syscalls-*.tsv`),
//! generated from the kernel UAPI headers by `capture/data/gen/gen_syscalls.py`; each file's header names
//! its source and version. Which arguments of a syscall are file descriptors is data too
//! (`capture/data/syscall-fd-args.tsv`, by name: the same on every architecture).

use std::collections::HashMap;
use std::sync::OnceLock;

use super::arch::Arch;
use super::table::Table;

const X86_64_TSV: Table = Table::new(include_str!("../../data/syscalls-x86_64.tsv"), "nr");
const AARCH64_TSV: Table = Table::new(include_str!("../../data/syscalls-aarch64.tsv"), "nr");

struct Syscalls {
    by_nr: HashMap<i64, &'static str>,
    by_name: HashMap<&'static str, i64>,
}

fn load(tsv: Table) -> Syscalls {
    let mut by_nr = HashMap::new();
    let mut by_name = HashMap::new();
    for cols in tsv.rows(2) {
        if let Ok(nr) = cols[0].trim().parse::<i64>() {
            by_nr.insert(nr, cols[1].trim());
            by_name.insert(cols[1].trim(), nr);
        }
    }
    Syscalls { by_nr, by_name }
}

fn table(arch: Arch) -> &'static Syscalls {
    static X86_64: OnceLock<Syscalls> = OnceLock::new();
    static AARCH64: OnceLock<Syscalls> = OnceLock::new();
    match arch {
        Arch::X86_64 => X86_64.get_or_init(|| load(X86_64_TSV)),
        Arch::Aarch64 => AARCH64.get_or_init(|| load(AARCH64_TSV)),
    }
}

/// The syscall's name, or None for numbers the table does not know (including -1).
pub fn name(arch: Arch, nr: i64) -> Option<&'static str> {
    table(arch).by_nr.get(&nr).copied()
}

/// The syscall's number on `arch`, or None where the architecture lacks it (aarch64 has no `poll`).
pub fn number(arch: Arch, name: &str) -> Option<i64> {
    table(arch).by_name.get(name).copied()
}

const FD_ARGS_TSV: Table = Table::new(include_str!("../../data/syscall-fd-args.tsv"), "name");

/// The indexes of the arguments of syscall `name` that are file descriptors (empty for other syscalls).
pub fn fd_args(name: &str) -> &'static [usize] {
    static TABLE: OnceLock<HashMap<&'static str, Vec<usize>>> = OnceLock::new();
    let table = TABLE.get_or_init(|| {
        FD_ARGS_TSV
            .rows(2)
            .map(|cols| {
                let (name, args) = (cols[0], cols[1]);
                let args = args
                    .split(',')
                    .filter_map(|a| a.trim().parse().ok())
                    .filter(|&a: &usize| a < 6)
                    .collect();
                (name.trim(), args)
            })
            .collect()
    });
    table.get(name).map(Vec::as_slice).unwrap_or(&[])
}

/// Number of entries (for tests and `--help` style summaries).
pub fn count(arch: Arch) -> usize {
    table(arch).by_nr.len()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn known_numbers_from_the_reference() {
        // Rows from procfs-facts.md §1 (both columns).
        let rows: &[(&str, Option<i64>, Option<i64>)] = &[
            ("read", Some(0), Some(63)),
            ("write", Some(1), Some(64)),
            ("poll", Some(7), None),
            ("mmap", Some(9), Some(222)),
            ("mprotect", Some(10), Some(226)),
            ("ioctl", Some(16), Some(29)),
            ("futex", Some(202), Some(98)),
            ("clock_nanosleep", Some(230), Some(115)),
            ("epoll_wait", Some(232), None),
            ("openat", Some(257), Some(56)),
            ("epoll_pwait", Some(281), Some(22)),
            ("process_vm_readv", Some(310), Some(270)),
            ("io_uring_enter", Some(426), Some(426)),
            ("futex_waitv", Some(449), Some(449)),
        ];
        for (name_, x86, arm) in rows {
            assert_eq!(number(Arch::X86_64, name_), *x86, "x86_64 {name_}");
            assert_eq!(number(Arch::Aarch64, name_), *arm, "aarch64 {name_}");
        }
        assert_eq!(name(Arch::Aarch64, 29), Some("ioctl"));
        assert_eq!(name(Arch::X86_64, -1), None);
    }

    #[test]
    fn fd_arguments_are_known_for_every_fd_taking_syscall_on_both_architectures() {
        assert_eq!(fd_args("write"), &[0]);
        assert_eq!(fd_args("mmap"), &[4]);
        assert_eq!(fd_args("copy_file_range"), &[0, 2]);
        assert!(fd_args("futex").is_empty() && fd_args("poll").is_empty());
        for name_ in [
            "read",
            "write",
            "pread64",
            "pwrite64",
            "readv",
            "writev",
            "fsync",
            "fdatasync",
            "sync_file_range",
            "fallocate",
            "ftruncate",
            "mmap",
            "ioctl",
            "epoll_pwait",
        ] {
            assert!(!fd_args(name_).is_empty(), "{name_}");
            assert!(
                number(Arch::X86_64, name_).is_some(),
                "x86_64 lacks {name_}"
            );
            assert!(
                number(Arch::Aarch64, name_).is_some(),
                "aarch64 lacks {name_}"
            );
        }
    }

    #[test]
    fn tables_are_complete() {
        // x86_64: 0..=334 and 424..=469; aarch64 (generic): 0..=243, 260..=294, 424..=469.
        assert_eq!(count(Arch::X86_64), 335 + 46);
        assert_eq!(count(Arch::Aarch64), 244 + 35 + 46);
        for nr in (0..=334).chain(424..=469) {
            assert!(name(Arch::X86_64, nr).is_some(), "x86_64 {nr}");
        }
        assert_eq!(name(Arch::X86_64, 462), Some("mseal"));
        assert_eq!(name(Arch::Aarch64, 435), Some("clone3"));
        assert_eq!(name(Arch::Aarch64, 79), Some("newfstatat"));
    }
}
