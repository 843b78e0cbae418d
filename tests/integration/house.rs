//! The house rules of the workspace, checked on its own source (issue 39): no module import circle inside
//! any crate and none between crates, no non-test function over [`MAX_FN_LINES`] lines, no Rust file over
//! [`MAX_FILE_LINES`] lines, and every library crate's root opens with a `//!` map of itself.
//!
//! The source is parsed with `syn` (not matched with patterns), so strings, comments and macros cannot fool
//! the counts:
//! - **A module** is a file or an inline `mod x { … }` that is not test-only (`#[cfg(test)]`).
//! - **An edge** A → B is a path written in A (a `use` tree, an expression, a type, or the tokens of a macro
//!   call) that starts at `crate::`, `super::`, `self::` or one of A's child modules and resolves to an item
//!   in module B ≠ A (the deepest module the path names). Parent → child edges count like any other: a parent
//!   that re-exports its child while the child reaches back into its parent is a circle. A `mod x;`
//!   declaration is not an edge.
//! - **A function** is an `fn` with a body (free, in an `impl`, or a trait default), outside test modules and
//!   without `#[test]`, in `src/`, `benches/` and `build.rs`; its length runs from the `fn` keyword to its
//!   closing brace (doc comments and attributes not counted).
//!
//! Each rule has a test on a made-up crate that breaks it, so none of the checks can pass by being blind.

use std::collections::{BTreeMap, BTreeSet};
use std::path::{Path, PathBuf};

use syn::visit::Visit;

/// The longest non-test function allowed, in lines.
const MAX_FN_LINES: usize = 100;
/// The longest Rust file allowed, in lines (tests included).
const MAX_FILE_LINES: usize = 900;

fn workspace_root() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .parent()
        .unwrap()
        .to_path_buf()
}

/// The workspace's member directories, read from the root Cargo.toml.
fn members(root: &Path) -> Vec<PathBuf> {
    let manifest = std::fs::read_to_string(root.join("Cargo.toml")).unwrap();
    let start = manifest.find("members = [").expect("workspace members");
    let list = &manifest[start + "members = [".len()..];
    let list = &list[..list.find(']').unwrap()];
    list.split(',')
        .map(|m| m.trim().trim_matches('"'))
        .filter(|m| !m.is_empty())
        .map(|m| root.join(m))
        .collect()
}

/// A module's path inside its crate (`[]` is the crate root).
type ModPath = Vec<String>;

/// One crate target (lib, bin, bench, build script): its modules and the edges between them.
#[derive(Default, Debug)]
struct CrateGraph {
    /// Every module of the target, with the file it lives in.
    modules: BTreeMap<ModPath, PathBuf>,
    /// Module → the modules it names.
    edges: BTreeMap<ModPath, BTreeSet<ModPath>>,
    /// Paths seen in each module, resolved once every module is known.
    raw_paths: Vec<(ModPath, Vec<String>)>,
}

/// What a house check found wrong, one line each.
#[derive(Default, Debug)]
struct Findings {
    lines: Vec<String>,
}

fn is_test_only(attrs: &[syn::Attribute]) -> bool {
    attrs.iter().any(|a| {
        if a.path().is_ident("test") {
            return true;
        }
        if !a.path().is_ident("cfg") {
            return false;
        }
        let syn::Meta::List(list) = &a.meta else {
            return false;
        };
        // `cfg(test)`, `cfg(all(test, …))`: any `test` ident not under `not(…)`.
        let text = list.tokens.to_string();
        text.split(|c: char| !c.is_alphanumeric() && c != '_')
            .any(|w| w == "test")
            && !text.contains("not")
    })
}

/// The file a `mod name;` declared in `file` (module `depth` deep) lives in.
fn child_file(file: &Path, name: &str, attrs: &[syn::Attribute]) -> Option<PathBuf> {
    let dir = file.parent()?;
    for a in attrs {
        if a.path().is_ident("path") {
            if let syn::Meta::NameValue(nv) = &a.meta {
                if let syn::Expr::Lit(syn::ExprLit {
                    lit: syn::Lit::Str(s),
                    ..
                }) = &nv.value
                {
                    return Some(dir.join(s.value()));
                }
            }
        }
    }
    let stem = file.file_stem()?.to_str()?;
    let base = if matches!(stem, "mod" | "lib" | "main")
        || file.ends_with("build.rs")
        || dir.ends_with("benches")
    {
        if matches!(stem, "mod" | "lib" | "main") {
            dir.to_path_buf()
        } else {
            dir.join(stem)
        }
    } else {
        dir.join(stem)
    };
    [
        base.join(format!("{name}.rs")),
        base.join(name).join("mod.rs"),
    ]
    .into_iter()
    .find(|p| p.is_file())
}

/// Collects a module's paths and child modules, and the long functions of its file.
struct ModuleWalker<'g> {
    graph: &'g mut CrateGraph,
    module: ModPath,
    file: PathBuf,
    long_fns: &'g mut Vec<String>,
}

impl ModuleWalker<'_> {
    fn record(&mut self, segments: Vec<String>) {
        if segments.len() > 1
            || segments
                .first()
                .is_some_and(|s| s != "crate" && s != "self" && s != "super")
        {
            self.graph.raw_paths.push((self.module.clone(), segments));
        }
    }

    fn use_tree(&mut self, prefix: &mut Vec<String>, tree: &syn::UseTree) {
        match tree {
            syn::UseTree::Path(p) => {
                prefix.push(p.ident.to_string());
                self.use_tree(prefix, &p.tree);
                prefix.pop();
            }
            syn::UseTree::Name(n) => {
                let mut full = prefix.clone();
                if n.ident != "self" {
                    full.push(n.ident.to_string());
                }
                self.record(full);
            }
            syn::UseTree::Rename(r) => {
                let mut full = prefix.clone();
                if r.ident != "self" {
                    full.push(r.ident.to_string());
                }
                self.record(full);
            }
            syn::UseTree::Glob(_) => self.record(prefix.clone()),
            syn::UseTree::Group(g) => {
                for t in &g.items {
                    self.use_tree(prefix, t);
                }
            }
        }
    }

    fn function(&mut self, attrs: &[syn::Attribute], sig: &syn::Signature, block: &syn::Block) {
        // Test helpers shared through `#[path]` (a bench using tests/common) are test code.
        if is_test_only(attrs) || self.file.components().any(|c| c.as_os_str() == "tests") {
            return;
        }
        let start = sig.fn_token.span.start().line;
        let end = block.brace_token.span.close().end().line;
        let lines = end + 1 - start;
        if lines > MAX_FN_LINES {
            self.long_fns.push(format!(
                "{}:{start}: fn {} is {lines} lines (at most {MAX_FN_LINES})",
                self.file.display(),
                sig.ident
            ));
        }
    }
}

impl<'ast> Visit<'ast> for ModuleWalker<'_> {
    fn visit_item_mod(&mut self, m: &'ast syn::ItemMod) {
        if is_test_only(&m.attrs) {
            return;
        }
        let mut child = self.module.clone();
        child.push(m.ident.to_string());
        match &m.content {
            Some((_, items)) => {
                self.graph.modules.insert(child.clone(), self.file.clone());
                let parent = std::mem::replace(&mut self.module, child);
                for item in items {
                    self.visit_item(item);
                }
                self.module = parent;
            }
            None => {
                if let Some(file) = child_file(&self.file, &m.ident.to_string(), &m.attrs) {
                    walk_file(self.graph, child, &file, self.long_fns);
                }
            }
        }
    }

    fn visit_item_use(&mut self, u: &'ast syn::ItemUse) {
        if !is_test_only(&u.attrs) {
            self.use_tree(&mut Vec::new(), &u.tree);
        }
    }

    fn visit_item_fn(&mut self, f: &'ast syn::ItemFn) {
        if is_test_only(&f.attrs) {
            return;
        }
        self.function(&f.attrs, &f.sig, &f.block);
        syn::visit::visit_item_fn(self, f);
    }

    fn visit_impl_item_fn(&mut self, f: &'ast syn::ImplItemFn) {
        if is_test_only(&f.attrs) {
            return;
        }
        self.function(&f.attrs, &f.sig, &f.block);
        syn::visit::visit_impl_item_fn(self, f);
    }

    fn visit_trait_item_fn(&mut self, f: &'ast syn::TraitItemFn) {
        if let Some(block) = &f.default {
            self.function(&f.attrs, &f.sig, block);
        }
        syn::visit::visit_trait_item_fn(self, f);
    }

    fn visit_item_impl(&mut self, i: &'ast syn::ItemImpl) {
        if !is_test_only(&i.attrs) {
            syn::visit::visit_item_impl(self, i);
        }
    }

    fn visit_path(&mut self, p: &'ast syn::Path) {
        // One segment is a value or a type in scope (a local named like a child module is not the module);
        // a module is reached by a longer path or through a `use`.
        if p.leading_colon.is_none() && p.segments.len() > 1 {
            self.record(p.segments.iter().map(|s| s.ident.to_string()).collect());
        }
        syn::visit::visit_path(self, p);
    }

    fn visit_macro(&mut self, m: &'ast syn::Macro) {
        // Macro arguments are tokens, not syntax: find `crate::a::b`-shaped runs in them.
        let mut run: Vec<String> = Vec::new();
        let mut after_colons = false;
        let mut pending_colon = false;
        let flush = |run: &mut Vec<String>, this: &mut Self| {
            if run.len() > 1 {
                this.record(std::mem::take(run));
            }
            run.clear();
        };
        fn tokens(ts: proc_macro2::TokenStream, out: &mut Vec<proc_macro2::TokenTree>) {
            for t in ts {
                if let proc_macro2::TokenTree::Group(g) = &t {
                    out.push(proc_macro2::TokenTree::Punct(proc_macro2::Punct::new(
                        ',',
                        proc_macro2::Spacing::Alone,
                    )));
                    tokens(g.stream(), out);
                    out.push(proc_macro2::TokenTree::Punct(proc_macro2::Punct::new(
                        ',',
                        proc_macro2::Spacing::Alone,
                    )));
                } else {
                    out.push(t);
                }
            }
        }
        let mut flat = Vec::new();
        tokens(m.tokens.clone(), &mut flat);
        for t in flat {
            match t {
                proc_macro2::TokenTree::Ident(i) => {
                    if !after_colons {
                        flush(&mut run, self);
                    }
                    after_colons = false;
                    run.push(i.to_string());
                }
                proc_macro2::TokenTree::Punct(p) if p.as_char() == ':' => {
                    if pending_colon {
                        after_colons = true;
                        pending_colon = false;
                    } else {
                        pending_colon = true;
                    }
                }
                _ => {
                    pending_colon = false;
                    after_colons = false;
                    flush(&mut run, self);
                }
            }
        }
        flush(&mut run, self);
    }
}

fn walk_file(graph: &mut CrateGraph, module: ModPath, file: &Path, long_fns: &mut Vec<String>) {
    let text = std::fs::read_to_string(file).unwrap_or_else(|e| panic!("{}: {e}", file.display()));
    let parsed = syn::parse_file(&text).unwrap_or_else(|e| panic!("{}: {e}", file.display()));
    graph.modules.insert(module.clone(), file.to_path_buf());
    let mut walker = ModuleWalker {
        graph,
        module,
        file: file.to_path_buf(),
        long_fns,
    };
    for item in &parsed.items {
        walker.visit_item(item);
    }
}

impl CrateGraph {
    /// Resolves the recorded paths into module edges.
    fn resolve(&mut self) {
        for (from, segments) in std::mem::take(&mut self.raw_paths) {
            let mut base: ModPath;
            let mut rest = segments.as_slice();
            match rest.first().map(String::as_str) {
                Some("crate") => {
                    base = Vec::new();
                    rest = &rest[1..];
                }
                Some("self") => {
                    base = from.clone();
                    rest = &rest[1..];
                }
                Some("super") => {
                    base = from.clone();
                    while rest.first().map(String::as_str) == Some("super") {
                        base.pop();
                        rest = &rest[1..];
                    }
                }
                Some(first) => {
                    let mut child = from.clone();
                    child.push(first.to_string());
                    if !self.modules.contains_key(&child) {
                        continue;
                    }
                    base = from.clone();
                }
                None => continue,
            }
            for seg in rest {
                let mut deeper = base.clone();
                deeper.push(seg.clone());
                if self.modules.contains_key(&deeper) {
                    base = deeper;
                } else {
                    break;
                }
            }
            if base != from {
                self.edges.entry(from.clone()).or_default().insert(base);
            }
        }
    }

    /// The circles: strongly connected components of more than one module (Tarjan).
    fn circles(&self) -> Vec<Vec<ModPath>> {
        struct State<'a> {
            graph: &'a CrateGraph,
            index: BTreeMap<&'a ModPath, usize>,
            low: BTreeMap<&'a ModPath, usize>,
            stack: Vec<&'a ModPath>,
            on_stack: BTreeSet<&'a ModPath>,
            next: usize,
            out: Vec<Vec<ModPath>>,
        }
        fn connect<'a>(s: &mut State<'a>, v: &'a ModPath) {
            s.index.insert(v, s.next);
            s.low.insert(v, s.next);
            s.next += 1;
            s.stack.push(v);
            s.on_stack.insert(v);
            let graph = s.graph;
            for w in graph.edges.get(v).into_iter().flatten() {
                if !s.index.contains_key(w) {
                    connect(s, w);
                    let lw = s.low[w];
                    let lv = s.low.get_mut(v).unwrap();
                    *lv = (*lv).min(lw);
                } else if s.on_stack.contains(w) {
                    let iw = s.index[w];
                    let lv = s.low.get_mut(v).unwrap();
                    *lv = (*lv).min(iw);
                }
            }
            if s.low[v] == s.index[v] {
                let mut component = Vec::new();
                while let Some(w) = s.stack.pop() {
                    s.on_stack.remove(w);
                    component.push(w.clone());
                    if w == v {
                        break;
                    }
                }
                if component.len() > 1 {
                    component.sort();
                    s.out.push(component);
                }
            }
        }
        let mut s = State {
            graph: self,
            index: BTreeMap::new(),
            low: BTreeMap::new(),
            stack: Vec::new(),
            on_stack: BTreeSet::new(),
            next: 0,
            out: Vec::new(),
        };
        for v in self.modules.keys() {
            if !s.index.contains_key(v) {
                connect(&mut s, v);
            }
        }
        s.out
    }
}

fn module_name(m: &ModPath) -> String {
    if m.is_empty() {
        "(crate root)".to_string()
    } else {
        m.join("::")
    }
}

/// The crate targets of one member: `src/lib.rs`, `src/main.rs`, `benches/*.rs`, `build.rs`.
fn targets(member: &Path) -> Vec<PathBuf> {
    let mut roots: Vec<PathBuf> = ["src/lib.rs", "src/main.rs", "build.rs"]
        .iter()
        .map(|p| member.join(p))
        .filter(|p| p.is_file())
        .collect();
    if let Ok(dir) = std::fs::read_dir(member.join("benches")) {
        let mut benches: Vec<PathBuf> = dir
            .flatten()
            .map(|e| e.path())
            .filter(|p| p.extension().is_some_and(|x| x == "rs"))
            .collect();
        benches.sort();
        roots.extend(benches);
    }
    if let Ok(dir) = std::fs::read_dir(member.join("src/bin")) {
        roots.extend(
            dir.flatten()
                .map(|e| e.path())
                .filter(|p| p.extension().is_some_and(|x| x == "rs")),
        );
    }
    roots
}

/// Every crate target of the members: import circles and long functions.
fn check_crates(members: &[PathBuf]) -> Findings {
    let mut findings = Findings::default();
    for member in members {
        for root in targets(member) {
            let mut graph = CrateGraph::default();
            let mut long_fns = Vec::new();
            walk_file(&mut graph, Vec::new(), &root, &mut long_fns);
            graph.resolve();
            for circle in graph.circles() {
                let names: Vec<String> = circle.iter().map(module_name).collect();
                findings.lines.push(format!(
                    "{}: import circle: {}",
                    root.display(),
                    names.join(" <-> ")
                ));
            }
            findings.lines.extend(long_fns);
        }
    }
    findings
}

/// The dependency graph between workspace members (normal, build and dev dependencies): no circle.
fn check_crate_dependencies(root: &Path, members: &[PathBuf]) -> Findings {
    let mut findings = Findings::default();
    let mut names = BTreeMap::new();
    let mut deps: BTreeMap<String, BTreeSet<String>> = BTreeMap::new();
    let mut manifests = Vec::new();
    for member in members {
        let text = std::fs::read_to_string(member.join("Cargo.toml")).unwrap();
        let doc: toml_edit::DocumentMut = text.parse().unwrap();
        let name = doc["package"]["name"].as_str().unwrap().to_string();
        names.insert(member.clone(), name.clone());
        manifests.push((name, member.clone(), doc));
    }
    let workspace: toml_edit::DocumentMut = std::fs::read_to_string(root.join("Cargo.toml"))
        .unwrap()
        .parse()
        .unwrap();
    let member_names: BTreeSet<&String> = names.values().collect();
    for (name, member, doc) in &manifests {
        for table in ["dependencies", "dev-dependencies", "build-dependencies"] {
            let Some(t) = doc.get(table).and_then(|t| t.as_table_like()) else {
                continue;
            };
            for (key, value) in t.iter() {
                // `package = "…"` renames; a path dependency names its directory.
                let path = value
                    .get("path")
                    .and_then(|p| p.as_str())
                    .map(|p| member.join(p))
                    .or_else(|| {
                        let is_workspace =
                            value.get("workspace").and_then(|w| w.as_bool()) == Some(true);
                        is_workspace
                            .then(|| workspace["workspace"]["dependencies"].get(key))
                            .flatten()
                            .and_then(|d| d.get("path"))
                            .and_then(|p| p.as_str())
                            .map(|p| root.join(p))
                    });
                let target = match path {
                    Some(p) => std::fs::canonicalize(&p).ok().and_then(|p| {
                        names
                            .iter()
                            .find(|(m, _)| std::fs::canonicalize(m).ok() == Some(p.clone()))
                            .map(|(_, n)| n.clone())
                    }),
                    None => member_names
                        .contains(&key.to_string())
                        .then(|| key.to_string()),
                };
                if let Some(target) = target {
                    deps.entry(name.clone()).or_default().insert(target);
                }
            }
        }
    }
    let mut graph = CrateGraph::default();
    for name in names.values() {
        graph.modules.insert(vec![name.clone()], PathBuf::new());
    }
    for (from, tos) in &deps {
        for to in tos {
            graph
                .edges
                .entry(vec![from.clone()])
                .or_default()
                .insert(vec![to.clone()]);
        }
    }
    for circle in graph.circles() {
        let names: Vec<String> = circle.iter().map(module_name).collect();
        findings
            .lines
            .push(format!("crate dependency circle: {}", names.join(" <-> ")));
    }
    findings
}

/// Every Rust file git tracks (or would track) under `root`, and its line count.
fn long_files(root: &Path) -> Findings {
    let mut findings = Findings::default();
    let mut stack = vec![root.to_path_buf()];
    while let Some(dir) = stack.pop() {
        for entry in std::fs::read_dir(&dir).unwrap().flatten() {
            let path = entry.path();
            let name = entry.file_name();
            let name = name.to_string_lossy();
            if path.is_dir() {
                if !(name.starts_with('.')
                    || name == "target"
                    || name == "corpus"
                    || name == "artifacts")
                {
                    stack.push(path);
                }
            } else if name.ends_with(".rs") {
                let lines = std::fs::read_to_string(&path)
                    .map(|t| t.lines().count())
                    .unwrap_or(0);
                if lines > MAX_FILE_LINES {
                    findings.lines.push(format!(
                        "{}: {lines} lines (at most {MAX_FILE_LINES})",
                        path.display()
                    ));
                }
            }
        }
    }
    findings.lines.sort();
    findings
}

fn library_maps(members: &[PathBuf]) -> Findings {
    let mut findings = Findings::default();
    for member in members {
        let lib = member.join("src/lib.rs");
        if let Ok(text) = std::fs::read_to_string(&lib) {
            if !text.trim_start().starts_with("//!") {
                findings.lines.push(format!(
                    "{}: does not open with a `//!` map of the crate",
                    lib.display()
                ));
            }
        }
    }
    findings
}

fn assert_clean(what: &str, findings: Findings) {
    assert!(
        findings.lines.is_empty(),
        "{what}: {} finding(s):\n{}",
        findings.lines.len(),
        findings.lines.join("\n")
    );
}

#[test]
fn no_module_import_circle_and_no_function_over_100_lines_in_any_crate() {
    let root = workspace_root();
    assert_clean("crates", check_crates(&members(&root)));
}

#[test]
fn no_dependency_circle_between_the_workspace_crates() {
    let root = workspace_root();
    assert_clean(
        "crate dependencies",
        check_crate_dependencies(&root, &members(&root)),
    );
}

#[test]
fn no_rust_file_over_900_lines() {
    assert_clean("files", long_files(&workspace_root()));
}

#[test]
fn every_library_crate_opens_with_a_map_of_itself() {
    let root = workspace_root();
    assert_clean("crate maps", library_maps(&members(&root)));
}

/// tests/gpu holds one documented script per run and only the recordings a test reads: every script and every
/// recording is named in tests/gpu/README.md, and every recording is read by a test (its directory name
/// appears in a test source).
#[test]
fn every_gpu_script_is_documented_and_every_recording_is_read_by_a_test() {
    let root = workspace_root();
    let gpu = root.join("tests/gpu");
    let readme = std::fs::read_to_string(gpu.join("README.md")).unwrap();
    let mut test_sources = String::new();
    for dir in [
        "tests/integration",
        "capture/tests",
        "reports/tests",
        "breadcrumb/tests",
    ] {
        for entry in std::fs::read_dir(root.join(dir))
            .into_iter()
            .flatten()
            .flatten()
        {
            if entry.path().extension().is_some_and(|e| e == "rs") {
                test_sources += &std::fs::read_to_string(entry.path()).unwrap_or_default();
            }
        }
    }
    let mut problems = Vec::new();
    for entry in std::fs::read_dir(&gpu).unwrap().flatten() {
        let name = entry.file_name().to_string_lossy().into_owned();
        if name.ends_with(".sh") && !readme.contains(&format!("`{name}`")) {
            problems.push(format!("tests/gpu/{name}: not in tests/gpu/README.md"));
        }
    }
    for entry in std::fs::read_dir(gpu.join("recordings")).unwrap().flatten() {
        let name = entry.file_name().to_string_lossy().into_owned();
        if !readme.contains(&name) {
            problems.push(format!("recording {name}: not in tests/gpu/README.md"));
        }
        if !test_sources.contains(&name) {
            problems.push(format!("recording {name}: no test reads it"));
        }
    }
    assert!(problems.is_empty(), "{}", problems.join("\n"));
}

/// A made-up crate breaking each rule once: every check must see its break (none is blind).
#[test]
fn the_house_checks_catch_a_circle_a_long_function_a_long_file_and_a_missing_map() {
    let dir = tempfile::tempdir().unwrap();
    let member = dir.path().join("bad");
    std::fs::create_dir_all(member.join("src/store")).unwrap();
    std::fs::write(
        member.join("Cargo.toml"),
        "[package]\nname = \"bad\"\n[dev-dependencies]\ngood = { path = \"../good\" }\n",
    )
    .unwrap();
    let long_body = "    let _ = 1;\n".repeat(MAX_FN_LINES);
    std::fs::write(
        member.join("src/lib.rs"),
        format!(
            "mod store;\nmod bundle;\npub use store::Store;\nfn long() {{\n{long_body}}}\n\
             #[cfg(test)]\nmod tests {{ fn long_test() {{\n{long_body}}} }}\n"
        ),
    )
    .unwrap();
    // store/mod.rs ↔ bundle.rs through a macro and a type path; store/layout.rs reaches its parent.
    std::fs::write(
        member.join("src/store/mod.rs"),
        "mod layout;\npub struct Store;\nfn f() { println!(\"{:?}\", crate::bundle::X); }\n",
    )
    .unwrap();
    std::fs::write(
        member.join("src/store/layout.rs"),
        "pub const N: usize = 1;\n",
    )
    .unwrap();
    std::fs::write(
        member.join("src/bundle.rs"),
        "pub const X: u8 = 0;\nfn g(_: super::store::Store) {}\n",
    )
    .unwrap();
    let good = dir.path().join("good");
    std::fs::create_dir_all(good.join("src")).unwrap();
    std::fs::write(
        good.join("Cargo.toml"),
        "[package]\nname = \"good\"\n[dependencies]\nbad = { path = \"../bad\" }\n",
    )
    .unwrap();
    std::fs::write(
        good.join("src/lib.rs"),
        format!("//! good\n{}", "// line\n".repeat(MAX_FILE_LINES + 1)),
    )
    .unwrap();
    std::fs::write(
        dir.path().join("Cargo.toml"),
        "[workspace]\nmembers = [\"bad\", \"good\"]\n",
    )
    .unwrap();

    let members = members(dir.path());
    let crates = check_crates(&members).lines.join("\n");
    assert!(
        crates.contains("import circle: bundle <-> store"),
        "{crates}"
    );
    assert!(crates.contains("fn long is"), "{crates}");
    assert!(
        !crates.contains("long_test"),
        "a test function is not held to the limit: {crates}"
    );
    assert!(
        !crates.contains("layout"),
        "a child nobody names back is no circle: {crates}"
    );
    let deps = check_crate_dependencies(dir.path(), &members)
        .lines
        .join("\n");
    assert!(
        deps.contains("crate dependency circle: bad <-> good"),
        "{deps}"
    );
    let files = long_files(dir.path()).lines.join("\n");
    assert!(
        files.contains("good/src/lib.rs") && !files.contains("bad/src"),
        "{files}"
    );
    let maps = library_maps(&members).lines.join("\n");
    assert!(
        maps.contains("bad/src/lib.rs") && !maps.contains("good"),
        "{maps}"
    );
}
