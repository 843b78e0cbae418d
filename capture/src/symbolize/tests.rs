use super::elf_cost::*;
use super::named_file::*;
use super::*;
use std::os::unix::fs::MetadataExt;
use std::path::Path;

const LIMITS: ElfLimits = ElfLimits {
    max_file_bytes: 1 << 40,
    max_symbol_table_bytes: 1 << 40,
    budget_left: 1 << 40,
};

fn root(path: &Path) -> Root {
    Root::open(path).unwrap()
}

fn id_of(path: &Path) -> FileId {
    let meta = std::fs::metadata(path).unwrap();
    FileId {
        major: libc::major(meta.dev()),
        minor: libc::minor(meta.dev()),
        inode: meta.ino(),
    }
}

/// The test binary itself: an ELF file with symbols, found through `/` as the root.
#[test]
fn a_function_of_our_own_binary_is_named_with_its_offset() {
    let exe = std::fs::read_link("/proc/self/exe").unwrap();
    let exe = exe.to_str().unwrap();
    let maps = std::fs::read_to_string("/proc/self/maps").unwrap();
    let pc = a_function_of_our_own_binary_is_named_with_its_offset as *const () as usize as u64;
    let frame = crate::user_frame::locate(&maps, pc).unwrap();
    assert_eq!(frame.path.as_deref(), Some(exe));
    let mapped = crate::user_frame::file_ids(&maps, exe);
    let file = resolve(
        &root(Path::new("/")),
        exe,
        &mapped,
        &[frame.offset.unwrap()],
        &LIMITS,
    );
    assert_eq!(file.error, None);
    let symbol = file.symbols[0].1.as_deref().unwrap();
    assert!(
        symbol.contains("a_function_of_our_own_binary_is_named_with_its_offset"),
        "{symbol}"
    );
    // Demangled, as people read it: `capture::symbolize::tests::…`, not `_ZN7capture…E`.
    assert!(
        symbol.contains("symbolize::tests::") && !symbol.starts_with("_ZN"),
        "{symbol}"
    );
    assert!(file.build_id.as_deref().is_some_and(|id| id.len() >= 16));
    assert!(file.symbol_table_bytes.is_some_and(|b| b > 0));
    let resolution = Resolution {
        files: vec![file.clone()],
        sources: Vec::new(),
    };
    let mut text = serde_json::to_vec(&Answer::File(file)).unwrap();
    text.push(b'\n');
    let back = parse_resolution(&text).unwrap();
    assert_eq!(back, resolution);
    // A run cut at its deadline: the answers before the cut line are kept.
    let mut cut = text.clone();
    cut.extend_from_slice(br#"{"file": {"path": "/usr/lib/libtorch_cu"#);
    assert_eq!(parse_resolution(&cut).unwrap(), resolution);
    assert!(back.symbol(exe, frame.offset.unwrap()).is_some());
}

#[test]
fn unreadable_or_escaping_paths_say_why() {
    let any = [FileId {
        major: 0,
        minor: 0,
        inode: 1,
    }];
    let missing = resolve(
        &root(Path::new("/")),
        "/nonexistent/libfoo.so",
        &any,
        &[0x10],
        &LIMITS,
    );
    assert!(missing.error.unwrap().contains("cannot open"));
    // `..` cannot climb out of the root: `/../../etc/passwd` is the root's own /etc/passwd, and the maps
    // did not show it.
    let passwd = Path::new("/etc/passwd");
    let climbing = resolve(
        &root(Path::new("/")),
        "/../../etc/passwd",
        &any,
        &[0],
        &LIMITS,
    );
    assert!(
        climbing
            .error
            .unwrap()
            .contains("not the file the process maps"),
        "{passwd:?}"
    );
    let not_elf = resolve(
        &root(Path::new("/")),
        "/../etc/passwd",
        &[id_of(passwd)],
        &[0],
        &LIMITS,
    );
    assert!(not_elf.error.unwrap().contains("not an ELF file"));
    let relative = resolve(&root(Path::new("/")), "lib/libfoo.so", &any, &[0], &LIMITS);
    assert!(relative
        .error
        .unwrap()
        .contains("inside the process's root"));
    let relative = resolve(&root(Path::new("/")), "[vdso]", &any, &[0], &LIMITS);
    assert!(relative.error.is_some());
    assert!(parse_resolution(b"garbage").is_err());
}

/// A container's symlink to an absolute path, or `..` climbing out, stays inside the container's root.
#[test]
fn symlinks_and_dot_dots_resolve_inside_the_process_root_never_the_hosts() {
    let outside = tempfile::tempdir().unwrap();
    std::fs::write(outside.path().join("secret"), "host secret\n").unwrap();
    let dir = tempfile::tempdir().unwrap();
    std::fs::create_dir(dir.path().join("w")).unwrap();
    let secret = outside.path().join("secret");
    std::os::unix::fs::symlink(&secret, dir.path().join("w/train.py")).unwrap();
    // Inside the root, the symlink's target path does not exist: nothing is read.
    let line = read_source_line(&root(dir.path()), "/w/train.py", 1);
    assert_eq!(line.text, None, "{line:?}");
    let climbing = format!("/../../../../../..{}", secret.display());
    assert_eq!(read_source_line(&root(dir.path()), &climbing, 1).text, None);
    // The same file inside the root is read: the refusal above is the root, not the file.
    let inside = dir.path().join(secret.strip_prefix("/").unwrap());
    std::fs::create_dir_all(inside.parent().unwrap()).unwrap();
    std::fs::write(&inside, "container text\n").unwrap();
    let line = read_source_line(&root(dir.path()), "/w/train.py", 1);
    assert_eq!(line.text.as_deref(), Some("container text"));
    // A FIFO at a library's path is refused without blocking.
    let fifo = dir.path().join("w/lib.so");
    let c = std::ffi::CString::new(fifo.to_str().unwrap()).unwrap();
    // SAFETY: mkfifo with a NUL-terminated path.
    assert_eq!(unsafe { libc::mkfifo(c.as_ptr(), 0o600) }, 0);
    let refused = resolve(
        &root(dir.path()),
        "/w/lib.so",
        &[id_of(&fifo)],
        &[0],
        &LIMITS,
    );
    assert!(refused.error.unwrap().contains("not a regular file"));
}

/// A mapped file's path that now names another file (a symlink planted at `x.so (deleted)`, a file put
/// in its place) is refused before any byte of it is read.
#[test]
fn a_path_that_is_not_the_mapped_file_is_refused() {
    let exe = std::fs::read_link("/proc/self/exe").unwrap();
    let mapped = id_of(&exe);
    let dir = tempfile::tempdir().unwrap();
    // A symlink to the very file the maps show: still refused (the maps name files, never links).
    std::os::unix::fs::symlink(&exe, dir.path().join("x.so (deleted)")).unwrap();
    let linked = resolve(
        &root(dir.path()),
        "/x.so (deleted)",
        &[mapped],
        &[0],
        &LIMITS,
    );
    let why = linked.error.unwrap();
    assert!(why.contains("refused: a symbolic link"), "{why}");
    assert_eq!((linked.build_id, linked.symbols.len()), (None, 0));
    // A copy (another inode) of the mapped file at its path: not the file the process maps.
    std::fs::copy(&exe, dir.path().join("lib.so (deleted)")).unwrap();
    let copy = resolve(
        &root(dir.path()),
        "/lib.so (deleted)",
        &[mapped],
        &[0],
        &LIMITS,
    );
    let why = copy.error.unwrap();
    assert!(
        why.contains("refused: not the file the process maps")
            && why.contains(&mapped.to_string())
            && why.contains("the mapped file was deleted"),
        "{why}"
    );
    assert_eq!((copy.build_id, copy.symbols.len()), (None, 0));
    // No identity at all: nothing to check against, so nothing is read.
    let unknown = resolve(
        &root(Path::new("/")),
        exe.to_str().unwrap(),
        &[],
        &[0],
        &LIMITS,
    );
    assert!(unknown.error.unwrap().contains("no device and inode"));
    // The right identity: read.
    let read = resolve(
        &root(Path::new("/")),
        exe.to_str().unwrap(),
        &[mapped],
        &[0],
        &LIMITS,
    );
    assert_eq!(read.error, None);
}

#[test]
fn proc_sys_and_dev_are_refused_by_path_and_pseudo_filesystems_by_their_type() {
    for path in [
        "/proc/1/environ",
        "/proc/self/status",
        "/sys/kernel/notes",
        "/dev/null",
        "//proc/1/environ",
        "/./sys/x",
        "/usr/../proc/1/environ",
        "/../../../dev/shm/x",
    ] {
        let why = refused_path(path).unwrap_or_else(|| panic!("{path} accepted"));
        assert!(why.starts_with("refused: a path under /"), "{why}");
        let line = read_source_line(&root(Path::new("/")), path, 1);
        assert_eq!(line.text, None, "{path}");
        assert!(line.error.unwrap().starts_with("refused"), "{path}");
    }
    for path in [
        "/usr/lib/libc.so.6",
        "/w/proc/x",
        "/procfs/x",
        "/devices.py",
        "/",
    ] {
        assert_eq!(refused_path(path), None, "{path}");
    }
    // A symlink inside the root to /proc is followed for a source file (as the interpreter would), and
    // the opened file is refused for its filesystem.
    let dir = tempfile::tempdir().unwrap();
    std::os::unix::fs::symlink("/proc/self/status", dir.path().join("train.py")).unwrap();
    let line = read_source_line(
        &root(Path::new("/")),
        &format!("{}/train.py", dir.path().display()),
        1,
    );
    let why = line.error.unwrap();
    assert!(why.contains("the proc pseudo filesystem"), "{why}");
    assert_eq!(line.text, None);
    assert_eq!(pseudo_filesystem(0x9fa0), Some("proc"));
    assert_eq!(pseudo_filesystem(0x6265_6572), Some("sysfs"));
    assert_eq!(pseudo_filesystem(0xef53), None); // ext4
    assert_eq!(pseudo_filesystem(0x0102_1994), None); // tmpfs (/tmp, /dev/shm: /dev goes by its path)
}

#[test]
fn a_source_line_is_read_trimmed_or_says_why() {
    let dir = tempfile::tempdir().unwrap();
    std::fs::write(
        dir.path().join("train.py"),
        "import x\n    optimizer.step()  \n",
    )
    .unwrap();
    let line = read_source_line(&root(dir.path()), "/train.py", 2);
    assert_eq!(line.text.as_deref(), Some("optimizer.step()"));
    let past = read_source_line(&root(dir.path()), "/train.py", 9);
    assert!(past.text.is_none() && past.error.unwrap().contains("fewer lines"));
    assert!(read_source_line(&root(dir.path()), "train.py", 1)
        .error
        .is_some());
    // `..` stays inside the root: the root's own /train.py.
    assert_eq!(
        read_source_line(&root(dir.path()), "/../../train.py", 1)
            .text
            .as_deref(),
        Some("import x")
    );
    assert!(read_source_line(&root(dir.path()), "/missing.py", 1)
        .error
        .is_some());
    let resolution = Resolution {
        sources: vec![line],
        ..Resolution::default()
    };
    assert_eq!(resolution.source("/train.py", 2), Some("optimizer.step()"));
}

/// A minimal ELF image: header, `sections` (name, type, size) after a name table, 64- or 32-bit.
fn elf_image(wide: bool, big: bool, sections: &[(&str, u32, u64)]) -> Vec<u8> {
    let mut names = vec![0u8];
    let mut name_at = Vec::new();
    for (name, _, _) in sections {
        name_at.push(names.len() as u64);
        names.extend_from_slice(name.as_bytes());
        names.push(0);
    }
    let shstr_name = names.len() as u64;
    names.extend_from_slice(b".shstrtab\0");
    let (ehsize, entry) = if wide { (64usize, 64usize) } else { (52, 40) };
    let names_at = ehsize as u64;
    let shoff = (names_at + names.len() as u64 + 7) & !7;
    let shnum = sections.len() + 2;
    let mut out = vec![0u8; shoff as usize + shnum * entry];
    out[..4].copy_from_slice(b"\x7fELF");
    out[4] = if wide { 2 } else { 1 };
    out[5] = if big { 2 } else { 1 };
    let put = |out: &mut Vec<u8>, at: usize, value: u64, len: usize| {
        let bytes = value.to_le_bytes();
        for i in 0..len {
            out[at + i] = if big { bytes[len - 1 - i] } else { bytes[i] };
        }
    };
    if wide {
        put(&mut out, 40, shoff, 8);
        put(&mut out, 58, entry as u64, 2);
        put(&mut out, 60, shnum as u64, 2);
        put(&mut out, 62, (shnum - 1) as u64, 2);
    } else {
        put(&mut out, 32, shoff, 4);
        put(&mut out, 46, entry as u64, 2);
        put(&mut out, 48, shnum as u64, 2);
        put(&mut out, 50, (shnum - 1) as u64, 2);
    }
    out[names_at as usize..names_at as usize + names.len()].copy_from_slice(&names);
    let mut headers: Vec<(u64, u32, u64, u64)> = sections
        .iter()
        .zip(&name_at)
        .map(|((_, kind, size), name)| (*name, *kind, 0x10_0000u64, *size))
        .collect();
    headers.push((shstr_name, 3, names_at, names.len() as u64));
    for (i, (name, kind, offset, size)) in headers.into_iter().enumerate() {
        let at = shoff as usize + (i + 1) * entry;
        put(&mut out, at, name, 4);
        put(&mut out, at + 4, u64::from(kind), 4);
        if wide {
            put(&mut out, at + 24, offset, 8);
            put(&mut out, at + 32, size, 8);
        } else {
            put(&mut out, at + 16, offset, 4);
            put(&mut out, at + 20, size, 4);
        }
    }
    out
}

fn cost_of(image: &[u8]) -> std::result::Result<ElfCost, String> {
    elf_cost(&mut |offset, buf| {
        let start = usize::try_from(offset).unwrap_or(usize::MAX);
        let end = start.checked_add(buf.len()).filter(|&e| e <= image.len());
        match end {
            Some(end) => {
                buf.copy_from_slice(&image[start..end]);
                Ok(())
            }
            None => Err(std::io::ErrorKind::UnexpectedEof.into()),
        }
    })
}

#[test]
fn the_cost_of_an_elf_file_is_its_symbol_tables_read_from_the_section_headers() {
    for (wide, big) in [(true, false), (false, false), (true, true), (false, true)] {
        let image = elf_image(
            wide,
            big,
            &[
                (".text", 1, 0x5000),
                (".dynsym", SHT_DYNSYM, 0x1800),
                (".dynstr", 3, 0x900),
                (".symtab", SHT_SYMTAB, 0x30_0000),
                (".strtab", 3, 0x90_0000),
            ],
        );
        let cost = cost_of(&image).unwrap();
        assert_eq!(cost.symbol_table_bytes, 0x30_1800, "wide {wide} big {big}");
        assert_eq!(cost.sections, 7);
    }
    // The symbolizer finds `.symtab` by its name: a table typed PROGBITS under that name still counts, and
    // a table of type SYMTAB under another name too.
    let disguised = elf_image(
        true,
        false,
        &[(".symtab", 1, 48 << 20), (".x", SHT_SYMTAB, 1 << 20)],
    );
    assert_eq!(cost_of(&disguised).unwrap().symbol_table_bytes, 49 << 20);
    // Not ELF files, or cut ones, say so.
    assert!(cost_of(b"#!/bin/sh\n")
        .unwrap_err()
        .contains("not an ELF file"));
    assert!(cost_of(b"\x7fELF\x03\x01").is_err());
    let image = elf_image(true, false, &[(".symtab", SHT_SYMTAB, 24)]);
    assert!(cost_of(&image[..image.len() - 10]).is_err());
    // Extended numbering claiming more sections than any real file: refused, never walked.
    let mut huge = elf_image(true, false, &[(".symtab", SHT_SYMTAB, 24)]);
    huge[60..62].copy_from_slice(&[0, 0]);
    let shoff = u64::from_le_bytes(huge[40..48].try_into().unwrap()) as usize;
    huge[shoff + 32..shoff + 40].copy_from_slice(&(1u64 << 32).to_le_bytes());
    assert!(cost_of(&huge).unwrap_err().contains("sections"));
    // Nothing but a header: no section headers, no tables.
    let mut bare = elf_image(true, false, &[]);
    bare[40..48].copy_from_slice(&[0; 8]);
    assert_eq!(cost_of(&bare).unwrap().symbol_table_bytes, 0);
}

#[test]
fn an_elf_file_over_a_cap_is_refused_naming_its_size() {
    let exe = std::fs::read_link("/proc/self/exe").unwrap();
    let mapped = [id_of(&exe)];
    let path = exe.to_str().unwrap();
    let size = std::fs::metadata(&exe).unwrap().len();
    let small_file = ElfLimits {
        max_file_bytes: size - 1,
        ..LIMITS
    };
    let why = resolve(&root(Path::new("/")), path, &mapped, &[0], &small_file)
        .error
        .unwrap();
    assert!(
        why.contains("over the cap of") && why.contains(&format!("({size} bytes)")),
        "{why}"
    );
    let small_tables = ElfLimits {
        max_symbol_table_bytes: 1024,
        ..LIMITS
    };
    let why = resolve(&root(Path::new("/")), path, &mapped, &[0], &small_tables)
        .error
        .unwrap();
    assert!(
        why.contains("of symbol tables (.symtab, .dynsym), over the cap of 1 KiB"),
        "{why}"
    );
    let spent = ElfLimits {
        budget_left: 1024,
        ..LIMITS
    };
    let file = resolve(&root(Path::new("/")), path, &mapped, &[0], &spent);
    assert!(file.error.unwrap().contains("symbolizer budget"));
    assert_eq!((file.build_id, file.symbol_table_bytes), (None, None));
    assert_eq!(human_bytes(64 << 20), "64 MiB");
    assert_eq!(human_bytes(1536 << 20), "1.5 GiB");
    assert_eq!(human_bytes(300), "300 bytes");
}

#[test]
fn an_answer_is_bounded_like_any_word_of_the_target() {
    let long = "x".repeat(100_000);
    let answer = Answer::Source(SourceLine {
        path: "/w/train.py".into(),
        line: 1,
        text: Some(long.clone()),
        error: Some(long.clone()),
    });
    let file = Answer::File(ResolvedFile {
        path: "/lib.so".into(),
        build_id: Some(long.clone()),
        symbols: vec![(1, Some(long.clone()))],
        error: Some(long),
        symbol_table_bytes: None,
    });
    let mut text = serde_json::to_vec(&answer).unwrap();
    text.push(b'\n');
    text.extend(serde_json::to_vec(&file).unwrap());
    let parsed = parse_resolution(&text).unwrap();
    assert_eq!(
        parsed.sources[0].text.as_ref().unwrap().len(),
        MAX_SOURCE_LINE
    );
    assert_eq!(
        parsed.sources[0].error.as_ref().unwrap().len(),
        MAX_ANSWER_ERROR
    );
    assert_eq!(
        parsed.files[0].build_id.as_ref().unwrap().len(),
        MAX_BUILD_ID_HEX
    );
    assert!(parsed.files[0].symbols[0].1.as_ref().unwrap().len() <= MAX_SYMBOL + 4);
}
