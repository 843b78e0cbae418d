//! What `run --inject` adds to the command's environment (docs/inject.md, "Finding the libraries"):
//! - the default path, driver-API interposition: `LD_PRELOAD` with libwedge_inject.so in front of what
//!   the user had there;
//! - `--inject=cupti`: `CUDA_INJECTION64_PATH` (the same library) and `WEDGE_CAPTURE_CUPTI` (the
//!   libcupti it loads), found without the user's help where possible.
//!
//! The search is pure over an [`InjectSearch`] (tests give it fake directory trees);
//! [`InjectSearch::from_env`] fills it from this process's environment and executable. Nothing here
//! touches the watched program. The one optional risky step, asking `python3` where the `nvidia`
//! wheels live, runs in a child with a deadline and only when every static place came up empty.

use std::ffi::OsString;
use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

/// Environment variable the CUDA driver reads in `cuInit`: the injection library to load.
pub const ENV_INJECTION_PATH: &str = "CUDA_INJECTION64_PATH";
/// Environment variable the injection library reads: the libcupti to load.
pub const ENV_CUPTI: &str = "WEDGE_CAPTURE_CUPTI";
/// Environment variable: the injection library to use instead of searching.
pub const ENV_INJECT_LIB: &str = "WEDGE_CAPTURE_INJECT_LIB";
/// File name of the injection library.
pub const INJECT_LIB_NAME: &str = "libwedge_inject.so";
/// The loader's preload list (the driver-API path).
pub const ENV_PRELOAD: &str = "LD_PRELOAD";

/// Which breadcrumb path `--inject` uses.
#[derive(Debug, Clone, Copy, PartialEq, Eq, clap::ValueEnum)]
pub enum InjectMode {
    /// Driver-API interposition (LD_PRELOAD): the default; does not stall other processes.
    Driver,
    /// CUPTI callbacks (CUDA_INJECTION64_PATH): measured to stall other processes' NVML calls for seconds
    /// while the program runs a long UVM operation.
    Cupti,
}

impl InjectMode {
    /// The line `doctor` and `run` print for this path.
    pub fn describe(self) -> &'static str {
        match self {
            InjectMode::Driver => "breadcrumbs by driver-API interposition (LD_PRELOAD)",
            InjectMode::Cupti => CUPTI_COST,
        }
    }
}

/// The measured cost of the CUPTI path, stated wherever it is chosen (docs/inject.md, "Why not CUPTI").
pub const CUPTI_COST: &str =
    "breadcrumbs by CUPTI: NVML clients may stall during long UVM operations";

/// Why `--inject` cannot be honoured.
#[derive(Debug)]
pub enum InjectEnvError {
    /// A path the user named does not exist (flag or variable).
    Missing { what: &'static str, path: PathBuf },
    /// libwedge_inject.so is in none of the places searched.
    LibraryNotFound { looked: Vec<PathBuf> },
    /// No libcupti in any of the places searched.
    CuptiNotFound { looked: Vec<PathBuf> },
    /// The library's path has a space or a colon, which `LD_PRELOAD` cannot carry.
    Unpreloadable { path: PathBuf },
}

impl std::fmt::Display for InjectEnvError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let list = |looked: &[PathBuf]| {
            looked
                .iter()
                .map(|p| p.display().to_string())
                .collect::<Vec<_>>()
                .join(", ")
        };
        match self {
            InjectEnvError::Missing { what, path } => {
                write!(f, "{what} {} does not exist", path.display())
            }
            InjectEnvError::LibraryNotFound { looked } => write!(
                f,
                "{INJECT_LIB_NAME} not found (looked in {}); install it next to wedge-capture or in \
                 ../lib, or set {ENV_INJECT_LIB}",
                list(looked)
            ),
            InjectEnvError::Unpreloadable { path } => write!(
                f,
                "{} cannot be preloaded: LD_PRELOAD splits paths at spaces and colons; install it \
                 elsewhere or set {ENV_INJECT_LIB}",
                path.display()
            ),
            InjectEnvError::CuptiNotFound { looked } => write!(
                f,
                "libcupti not found (looked in {}); pass --cupti PATH, set CUDA_HOME, or install \
                 the nvidia-cuda-cupti Python package",
                list(looked)
            ),
        }
    }
}

impl std::error::Error for InjectEnvError {}

/// Everything the search looks at. [`InjectSearch::from_env`] for real use; tests build one over
/// a temporary directory.
#[derive(Debug, Clone, Default)]
pub struct InjectSearch {
    /// The running wedge-capture executable (its directory and `../lib` hold the library).
    pub executable: Option<PathBuf>,
    /// `WEDGE_CAPTURE_INJECT_LIB`.
    pub inject_lib: Option<PathBuf>,
    /// `WEDGE_CAPTURE_CUPTI` already in the environment (the user's choice, kept).
    pub cupti_env: Option<PathBuf>,
    /// `CUDA_HOME`, `CUDA_PATH`: toolkit roots tried first.
    pub cuda_homes: Vec<PathBuf>,
    /// Directories whose `cuda` and `cuda-<version>` children are toolkits (`/usr/local`).
    pub toolkit_parents: Vec<PathBuf>,
    /// Python `site-packages`/`dist-packages` directories to look for the nvidia wheels in.
    pub site_dirs: Vec<PathBuf>,
    /// System library directories (a distribution's libcupti package).
    pub system_lib_dirs: Vec<PathBuf>,
    /// Ask `python3` for `nvidia.__path__` (in a child, with this deadline) when all else failed.
    pub python_probe: Option<Duration>,
    /// `LD_PRELOAD` already in the environment (kept, after the injection library).
    pub ld_preload: Option<OsString>,
}

impl InjectSearch {
    /// The search for this process: its executable, environment, `/usr/local` toolkits, the
    /// site-packages of the active virtualenv/conda env, of the `python3` on `PATH`, the user's and
    /// the system's, and a 5 s `python3` probe as the last resort.
    pub fn from_env() -> InjectSearch {
        let var = |name: &str| std::env::var_os(name).filter(|v| !v.is_empty());
        let mut prefixes: Vec<PathBuf> = Vec::new();
        for name in ["VIRTUAL_ENV", "CONDA_PREFIX"] {
            if let Some(prefix) = var(name) {
                prefixes.push(PathBuf::from(prefix));
            }
        }
        if let Some(python) =
            var("PATH").and_then(|path| crate::tools::find_executable_in(&path, "python3"))
        {
            // <prefix>/bin/python3 → <prefix>; also through a symlink to the real interpreter.
            for exe in [Some(python.clone()), std::fs::canonicalize(&python).ok()]
                .into_iter()
                .flatten()
            {
                if let Some(prefix) = exe.parent().and_then(Path::parent) {
                    prefixes.push(prefix.to_path_buf());
                }
            }
        }
        if let Some(home) = var("HOME") {
            prefixes.push(PathBuf::from(home).join(".local"));
        }
        prefixes.extend(["/usr/local", "/usr"].map(PathBuf::from));
        let mut site_dirs = Vec::new();
        for prefix in &prefixes {
            for dir in python_site_dirs(prefix) {
                if !site_dirs.contains(&dir) {
                    site_dirs.push(dir);
                }
            }
        }
        InjectSearch {
            executable: std::env::current_exe().ok(),
            inject_lib: var(ENV_INJECT_LIB).map(PathBuf::from),
            cupti_env: var(ENV_CUPTI).map(PathBuf::from),
            cuda_homes: ["CUDA_HOME", "CUDA_PATH"]
                .iter()
                .filter_map(|name| var(name).map(PathBuf::from))
                .collect(),
            toolkit_parents: vec![PathBuf::from("/usr/local")],
            site_dirs,
            system_lib_dirs: [
                "/usr/lib/x86_64-linux-gnu",
                "/usr/lib/aarch64-linux-gnu",
                "/usr/lib64",
                "/usr/lib",
            ]
            .map(PathBuf::from)
            .to_vec(),
            python_probe: Some(Duration::from_secs(5)),
            ld_preload: var(ENV_PRELOAD),
        }
    }
}

/// The environment `run --inject` adds to the command. [`InjectMode::Driver`]: `LD_PRELOAD` = the
/// injection library (absolute), then the user's own preloads. [`InjectMode::Cupti`]:
/// `CUDA_INJECTION64_PATH` and `WEDGE_CAPTURE_CUPTI` (absolute paths); `explicit_cupti` is
/// `--cupti PATH` (a file, or a directory holding libcupti). No `LD_LIBRARY_PATH` is needed: libcupti
/// is opened by absolute path.
pub fn injection_env(
    mode: InjectMode,
    explicit_cupti: Option<&Path>,
) -> Result<Vec<(String, OsString)>, InjectEnvError> {
    resolve(&InjectSearch::from_env(), mode, explicit_cupti)
}

/// [`injection_env`] over an explicit search.
pub fn resolve(
    search: &InjectSearch,
    mode: InjectMode,
    explicit_cupti: Option<&Path>,
) -> Result<Vec<(String, OsString)>, InjectEnvError> {
    let library = absolute(&find_injection_library(search)?);
    match mode {
        InjectMode::Driver => {
            // The loader splits LD_PRELOAD at spaces and colons: such a path cannot be preloaded.
            let text = library.to_string_lossy();
            if text.contains([' ', ':']) {
                return Err(InjectEnvError::Unpreloadable { path: library });
            }
            let mut preload = OsString::from(library.as_os_str());
            if let Some(existing) = search.ld_preload.as_ref().filter(|v| !v.is_empty()) {
                preload.push(" ");
                preload.push(existing);
            }
            Ok(vec![(ENV_PRELOAD.to_string(), preload)])
        }
        InjectMode::Cupti => {
            let cupti = find_cupti(search, explicit_cupti)?;
            Ok(vec![
                (ENV_INJECTION_PATH.to_string(), library.into()),
                (ENV_CUPTI.to_string(), absolute(&cupti).into()),
            ])
        }
    }
}

/// libwedge_inject.so: `WEDGE_CAPTURE_INJECT_LIB`, else next to the executable, in `../lib`, or
/// in `../lib/wedge-capture`.
pub fn find_injection_library(search: &InjectSearch) -> Result<PathBuf, InjectEnvError> {
    if let Some(path) = &search.inject_lib {
        return if path.is_file() {
            Ok(path.clone())
        } else {
            Err(InjectEnvError::Missing {
                what: ENV_INJECT_LIB,
                path: path.clone(),
            })
        };
    }
    let mut looked = Vec::new();
    if let Some(dir) = search.executable.as_deref().and_then(Path::parent) {
        // current_exe is the resolved path, so its lexical parent is the install prefix.
        let prefix = dir.parent().unwrap_or(dir);
        for candidate in [
            dir.to_path_buf(),
            prefix.join("lib"),
            prefix.join("lib/wedge-capture"),
        ] {
            let file = candidate.join(INJECT_LIB_NAME);
            if file.is_file() {
                return Ok(file);
            }
            looked.push(candidate);
        }
    }
    Err(InjectEnvError::LibraryNotFound { looked })
}

/// libcupti: `--cupti` (a file or a directory), `WEDGE_CAPTURE_CUPTI`, the `CUDA_HOME`/`CUDA_PATH`
/// toolkits, `/usr/local/cuda` then `/usr/local/cuda-<version>` newest first, the nvidia Python
/// wheels (`nvidia/cuda_cupti/lib`, `nvidia/cu13/lib`, `nvidia/cu12/lib`), system library
/// directories, and last `python3`'s own answer.
pub fn find_cupti(
    search: &InjectSearch,
    explicit: Option<&Path>,
) -> Result<PathBuf, InjectEnvError> {
    for (what, given) in [
        ("--cupti", explicit),
        (ENV_CUPTI, search.cupti_env.as_deref()),
    ] {
        if let Some(path) = given {
            if path.is_file() {
                return Ok(path.to_path_buf());
            }
            if path.is_dir() {
                if let Some(found) = cupti_in(path) {
                    return Ok(found);
                }
            }
            return Err(InjectEnvError::Missing {
                what,
                path: path.to_path_buf(),
            });
        }
    }
    let mut dirs: Vec<PathBuf> = Vec::new();
    for home in &search.cuda_homes {
        dirs.extend(toolkit_lib_dirs(home));
    }
    for parent in &search.toolkit_parents {
        for toolkit in toolkits_newest_first(parent) {
            dirs.extend(toolkit_lib_dirs(&toolkit));
        }
    }
    for site in &search.site_dirs {
        dirs.extend(wheel_lib_dirs(site));
    }
    dirs.extend(search.system_lib_dirs.iter().cloned());
    for dir in &dirs {
        if let Some(found) = cupti_in(dir) {
            return Ok(found);
        }
    }
    if let Some(deadline) = search.python_probe {
        for nvidia in python_nvidia_dirs(deadline) {
            for dir in wheel_lib_dirs(nvidia.parent().unwrap_or(&nvidia)) {
                if let Some(found) = cupti_in(&dir) {
                    return Ok(found);
                }
                dirs.push(dir);
            }
        }
    }
    Err(InjectEnvError::CuptiNotFound { looked: dirs })
}

/// `extras/CUPTI/lib64`, `targets/<triple>/lib`, `lib64` of a toolkit root.
fn toolkit_lib_dirs(root: &Path) -> Vec<PathBuf> {
    let mut dirs = vec![root.join("extras/CUPTI/lib64")];
    let mut targets = read_dir_sorted(&root.join("targets"));
    // The host's own architecture first.
    targets.sort_by_key(|t| !t.to_string_lossy().contains(std::env::consts::ARCH));
    dirs.extend(targets.into_iter().map(|t| t.join("lib")));
    dirs.push(root.join("lib64"));
    dirs
}

/// `<parent>/cuda` first, then `<parent>/cuda-<major>.<minor>` newest first.
fn toolkits_newest_first(parent: &Path) -> Vec<PathBuf> {
    let mut versioned: Vec<((u32, u32), PathBuf)> = read_dir_sorted(parent)
        .into_iter()
        .filter_map(|path| {
            let name = path.file_name()?.to_str()?.to_string();
            let version = name.strip_prefix("cuda-")?;
            let mut parts = version.split('.').map(|p| p.parse::<u32>().ok());
            let major = parts.next().flatten()?;
            let minor = parts.next().flatten().unwrap_or(0);
            Some(((major, minor), path))
        })
        .collect();
    versioned.sort_by_key(|(version, _)| std::cmp::Reverse(*version));
    let mut toolkits = vec![parent.join("cuda")];
    toolkits.extend(versioned.into_iter().map(|(_, path)| path));
    toolkits
}

/// Where the nvidia wheels put libcupti under a site-packages directory.
fn wheel_lib_dirs(site: &Path) -> Vec<PathBuf> {
    [
        "nvidia/cuda_cupti/lib",
        "nvidia/cu13/lib",
        "nvidia/cu12/lib",
    ]
    .iter()
    .map(|rest| site.join(rest))
    .collect()
}

/// `lib/python3*/site-packages` and `dist-packages` under a prefix, plus Debian's
/// `lib/python3/dist-packages`.
fn python_site_dirs(prefix: &Path) -> Vec<PathBuf> {
    let mut dirs = Vec::new();
    for lib in ["lib", "lib64"] {
        for python in read_dir_sorted(&prefix.join(lib)).into_iter().rev() {
            let is_python3 = python
                .file_name()
                .and_then(|n| n.to_str())
                .is_some_and(|n| n.starts_with("python3"));
            if is_python3 {
                for kind in ["site-packages", "dist-packages"] {
                    let dir = python.join(kind);
                    if dir.is_dir() {
                        dirs.push(dir);
                    }
                }
            }
        }
    }
    dirs
}

/// The libcupti in `dir`: `libcupti.so`, else the highest `libcupti.so.<n>`.
fn cupti_in(dir: &Path) -> Option<PathBuf> {
    let plain = dir.join("libcupti.so");
    if plain.is_file() {
        return Some(plain);
    }
    let mut versioned: Vec<(Vec<u64>, PathBuf)> = read_dir_sorted(dir)
        .into_iter()
        .filter_map(|path| {
            let name = path.file_name()?.to_str()?.to_string();
            let version = name.strip_prefix("libcupti.so.")?;
            let key = version
                .split('.')
                .map(|p| p.parse::<u64>().ok())
                .collect::<Option<Vec<_>>>()?;
            path.is_file().then_some((key, path))
        })
        .collect();
    versioned.sort();
    versioned.pop().map(|(_, path)| path)
}

fn read_dir_sorted(dir: &Path) -> Vec<PathBuf> {
    let mut entries: Vec<PathBuf> = std::fs::read_dir(dir)
        .map(|it| it.flatten().take(10_000).map(|e| e.path()).collect())
        .unwrap_or_default();
    entries.sort();
    entries
}

fn absolute(path: &Path) -> PathBuf {
    std::fs::canonicalize(path).unwrap_or_else(|_| path.to_path_buf())
}

/// `python3 -c 'import nvidia; print(*nvidia.__path__)'` in a child killed after `deadline`
/// (importing can be slow on a network filesystem; it never runs inside the watched program).
fn python_nvidia_dirs(deadline: Duration) -> Vec<PathBuf> {
    use std::io::Read;
    use std::process::{Command, Stdio};
    let Ok(mut child) = Command::new("python3")
        .args(["-c", "import nvidia\nfor p in nvidia.__path__: print(p)"])
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::null())
        .spawn()
    else {
        return Vec::new();
    };
    let started = Instant::now();
    loop {
        match child.try_wait() {
            Ok(Some(status)) if status.success() => break,
            Ok(Some(_)) | Err(_) => return Vec::new(),
            Ok(None) if started.elapsed() >= deadline => {
                let _ = child.kill();
                let _ = child.wait();
                return Vec::new();
            }
            Ok(None) => std::thread::sleep(Duration::from_millis(20)),
        }
    }
    let mut out = String::new();
    if let Some(stdout) = child.stdout.take() {
        let _ = stdout.take(64 * 1024).read_to_string(&mut out);
    }
    out.lines()
        .map(str::trim)
        .filter(|line| !line.is_empty())
        .map(PathBuf::from)
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    fn touch(path: &Path) {
        std::fs::create_dir_all(path.parent().unwrap()).unwrap();
        std::fs::write(path, b"").unwrap();
    }

    /// A search over `root` only, with the executable at root/opt/wc/bin/wedge-capture.
    fn search(root: &Path) -> InjectSearch {
        InjectSearch {
            executable: Some(root.join("opt/wc/bin/wedge-capture")),
            toolkit_parents: vec![root.join("usr/local")],
            system_lib_dirs: vec![root.join("usr/lib/x86_64-linux-gnu")],
            ..InjectSearch::default()
        }
    }

    fn value<'a>(env: &'a [(String, OsString)], key: &str) -> &'a Path {
        Path::new(&env.iter().find(|(k, _)| k == key).expect(key).1)
    }

    #[test]
    fn finds_the_library_next_to_the_executable_then_in_lib() {
        let dir = tempfile::tempdir().unwrap();
        let root = dir.path();
        let s = search(root);
        let err = find_injection_library(&s).unwrap_err();
        assert!(
            err.to_string().contains("libwedge_inject.so not found"),
            "{err}"
        );
        touch(&root.join("opt/wc/lib/libwedge_inject.so"));
        assert_eq!(
            find_injection_library(&s).unwrap(),
            root.join("opt/wc/lib/libwedge_inject.so")
        );
        touch(&root.join("opt/wc/bin/libwedge_inject.so"));
        assert_eq!(
            find_injection_library(&s).unwrap(),
            root.join("opt/wc/bin/libwedge_inject.so")
        );
        let mut named = s.clone();
        named.inject_lib = Some(root.join("nowhere.so"));
        assert!(matches!(
            find_injection_library(&named),
            Err(InjectEnvError::Missing { .. })
        ));
    }

    #[test]
    fn an_explicit_cupti_wins_and_must_exist() {
        let dir = tempfile::tempdir().unwrap();
        let root = dir.path();
        let s = search(root);
        touch(&root.join("usr/local/cuda/extras/CUPTI/lib64/libcupti.so"));
        touch(&root.join("mine/libcupti.so.12"));
        assert_eq!(
            find_cupti(&s, Some(&root.join("mine/libcupti.so.12"))).unwrap(),
            root.join("mine/libcupti.so.12")
        );
        // A directory works too.
        assert_eq!(
            find_cupti(&s, Some(&root.join("mine"))).unwrap(),
            root.join("mine/libcupti.so.12")
        );
        let err = find_cupti(&s, Some(&root.join("missing.so"))).unwrap_err();
        assert!(err.to_string().starts_with("--cupti"), "{err}");
        // The environment variable is the user's choice too.
        let mut env = s.clone();
        env.cupti_env = Some(root.join("mine/libcupti.so.12"));
        assert_eq!(
            find_cupti(&env, None).unwrap(),
            root.join("mine/libcupti.so.12")
        );
    }

    #[test]
    fn cuda_home_then_the_newest_toolkit() {
        let dir = tempfile::tempdir().unwrap();
        let root = dir.path();
        let mut s = search(root);
        touch(&root.join("usr/local/cuda-12.4/extras/CUPTI/lib64/libcupti.so.12"));
        touch(&root.join("usr/local/cuda-13.0/targets/x86_64-linux/lib/libcupti.so.13"));
        touch(&root.join("usr/local/cuda-13.0/targets/x86_64-linux/lib/libcupti.so.2025.3.1"));
        touch(&root.join("usr/local/cuda-9.2/extras/CUPTI/lib64/libcupti.so"));
        let found = find_cupti(&s, None).unwrap();
        assert_eq!(
            found,
            root.join("usr/local/cuda-13.0/targets/x86_64-linux/lib/libcupti.so.2025.3.1"),
            "13.0 sorts above 9.2 and 12.4; the highest versioned file in a directory"
        );
        touch(&root.join("usr/local/cuda/targets/x86_64-linux/lib/libcupti.so"));
        assert_eq!(
            find_cupti(&s, None).unwrap(),
            root.join("usr/local/cuda/targets/x86_64-linux/lib/libcupti.so"),
            "the cuda symlink (the admin's default) comes first"
        );
        touch(&root.join("toolkit/extras/CUPTI/lib64/libcupti.so"));
        s.cuda_homes = vec![root.join("toolkit")];
        assert_eq!(
            find_cupti(&s, None).unwrap(),
            root.join("toolkit/extras/CUPTI/lib64/libcupti.so")
        );
    }

    #[test]
    fn the_nvidia_python_wheels() {
        let dir = tempfile::tempdir().unwrap();
        let root = dir.path();
        let mut s = search(root);
        let site = root.join("venv/lib/python3.12/site-packages");
        touch(&site.join("nvidia/cu13/lib/libcupti.so.13"));
        touch(&site.join("nvidia/cu13/lib/libcublas.so.13"));
        s.site_dirs = python_site_dirs(&root.join("venv"));
        assert_eq!(s.site_dirs, vec![site.clone()]);
        assert_eq!(
            find_cupti(&s, None).unwrap(),
            site.join("nvidia/cu13/lib/libcupti.so.13")
        );
        touch(&site.join("nvidia/cuda_cupti/lib/libcupti.so.12"));
        assert_eq!(
            find_cupti(&s, None).unwrap(),
            site.join("nvidia/cuda_cupti/lib/libcupti.so.12")
        );
    }

    #[test]
    fn nothing_found_names_every_place() {
        let dir = tempfile::tempdir().unwrap();
        let root = dir.path();
        let mut s = search(root);
        s.cuda_homes = vec![root.join("toolkit")];
        // Not libraries: a static archive and a lookalike.
        touch(&root.join("toolkit/extras/CUPTI/lib64/libcupti_static.a"));
        touch(&root.join("toolkit/extras/CUPTI/lib64/libcupti.so.x"));
        let err = find_cupti(&s, None).unwrap_err();
        let text = err.to_string();
        assert!(text.contains("toolkit/extras/CUPTI/lib64"), "{text}");
        assert!(text.contains("usr/local/cuda/extras/CUPTI/lib64"), "{text}");
        assert!(text.contains("--cupti"), "{text}");
    }

    #[test]
    fn resolve_gives_both_variables_as_absolute_paths() {
        let dir = tempfile::tempdir().unwrap();
        let root = dir.path();
        let s = search(root);
        touch(&root.join("opt/wc/lib/libwedge_inject.so"));
        touch(&root.join("usr/lib/x86_64-linux-gnu/libcupti.so.12"));
        let env = resolve(&s, InjectMode::Cupti, None).unwrap();
        assert_eq!(env.len(), 2);
        let root = std::fs::canonicalize(root).unwrap();
        assert_eq!(
            value(&env, ENV_INJECTION_PATH),
            root.join("opt/wc/lib/libwedge_inject.so")
        );
        assert_eq!(
            value(&env, ENV_CUPTI),
            root.join("usr/lib/x86_64-linux-gnu/libcupti.so.12")
        );
    }

    #[test]
    fn the_driver_path_preloads_the_library_before_the_users_preloads() {
        let dir = tempfile::tempdir().unwrap();
        let root = dir.path();
        let mut s = search(root);
        touch(&root.join("opt/wc/lib/libwedge_inject.so"));
        let library = std::fs::canonicalize(root.join("opt/wc/lib/libwedge_inject.so")).unwrap();
        // No libcupti anywhere: the driver path does not need one.
        let env = resolve(&s, InjectMode::Driver, None).unwrap();
        assert_eq!(env.len(), 1);
        assert_eq!(value(&env, ENV_PRELOAD), library);
        s.ld_preload = Some(OsString::from("/opt/other/libfoo.so"));
        let env = resolve(&s, InjectMode::Driver, None).unwrap();
        assert_eq!(
            value(&env, ENV_PRELOAD),
            Path::new(&format!("{} /opt/other/libfoo.so", library.display()))
        );
        assert!(
            resolve(&s, InjectMode::Cupti, None).is_err(),
            "CUPTI still needs libcupti"
        );
    }

    #[test]
    fn a_path_ld_preload_cannot_carry_is_refused() {
        let dir = tempfile::tempdir().unwrap();
        let root = dir.path();
        let mut s = search(root);
        let odd = root.join("with space/libwedge_inject.so");
        touch(&odd);
        s.inject_lib = Some(odd);
        let err = resolve(&s, InjectMode::Driver, None).unwrap_err();
        assert!(err.to_string().contains("cannot be preloaded"), "{err}");
    }
}
