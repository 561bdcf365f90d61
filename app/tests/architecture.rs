//! The architecture invariants that a compiler does not check, checked over the sources of every
//! crate of the workspace (ARCHITECTURE.md states them):
//!
//! - no import circle between the files of one crate: an edge runs from a file to every module it
//!   names by `crate::…` or `super::…` (or, from a parent, by a child's name); a file naming the
//!   module it is declared in (its ancestor) is the module tree, not an edge, so a phase of the
//!   engine may be an `impl Engine` block in a file of its own;
//! - `unsafe` only in `dispatchscope-vk` and at the C ABI (`dispatchscope-capi`), and outside them
//!   only in `ChunkTable::slot_at`;
//! - every Rust path (`Engine::dispatch`) and every file (`engine/after.rs`) ARCHITECTURE.md gives
//!   in backticks exists in the tree;
//! - the engine (`dispatchscope-core`) and the analysis above it (`dispatchscope-analysis`) open
//!   no file or socket and start no thread.
//!
//! The crates' own dependencies (views on no file or socket crate, the engine on no UI or Vulkan
//! crate) are `.ci/test.sh`'s `cargo tree` checks.

#![allow(
    clippy::unwrap_used,
    clippy::expect_used,
    reason = "tests: a panic is the test failing, with its message"
)]

use std::collections::{BTreeMap, BTreeSet};
use std::path::{Path, PathBuf};

/// Every crate's source folder, relative to the workspace root.
const CRATES: &[&str] = &[
    "core/engine/src",
    "core/analysis/src",
    "core/formats/src",
    "core/live/src",
    "core/vk/src",
    "core/demo/src",
    "core/rdna/src",
    "core/capi/src",
    "views/src",
    "app/src",
];

fn root() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("..")
}

fn rust_files(dir: &Path, out: &mut Vec<PathBuf>) {
    for e in std::fs::read_dir(dir).unwrap() {
        let p = e.unwrap().path();
        if p.is_dir() {
            rust_files(&p, out);
        } else if p.extension().is_some_and(|x| x == "rs") {
            out.push(p);
        }
    }
}

/// `a/b.rs` and `a/b/mod.rs` → `["a", "b"]`; `lib.rs` and `main.rs` → `[]`.
fn module_of(src: &Path, file: &Path) -> Vec<String> {
    let rel = file.strip_prefix(src).unwrap().with_extension("");
    let mut parts: Vec<String> = rel
        .components()
        .map(|c| c.as_os_str().to_string_lossy().into_owned())
        .collect();
    if matches!(
        parts.last().map(String::as_str),
        Some("mod" | "lib" | "main")
    ) {
        parts.pop();
    }
    parts
}

/// The code of a file without comments and without its unit tests (`#[cfg(test)]` to the end:
/// a file's tests come last), so that doc links and test imports make no edges.
fn code_of(text: &str) -> String {
    let text = match text.find("#[cfg(test)]") {
        Some(i) => &text[..i],
        None => text,
    };
    text.lines()
        .map(|l| match l.find("//") {
            Some(i) if !l[..i].contains('"') => &l[..i],
            _ => l,
        })
        .collect::<Vec<_>>()
        .join("\n")
}

/// The paths that follow `prefix` (`crate::`, `super::`) in `code`, as segments.
fn paths_after<'a>(code: &'a str, prefix: &str) -> Vec<Vec<&'a str>> {
    let mut out = Vec::new();
    let mut rest = code;
    while let Some(i) = rest.find(prefix) {
        let before = rest[..i].chars().next_back();
        rest = &rest[i + prefix.len()..];
        if before.is_some_and(|c| c.is_alphanumeric() || c == '_' || c == ':') {
            continue;
        }
        let end = rest
            .find(|c: char| !(c.is_alphanumeric() || c == '_' || c == ':'))
            .unwrap_or(rest.len());
        out.push(rest[..end].split("::").filter(|s| !s.is_empty()).collect());
    }
    out
}

type Graph = BTreeMap<Vec<String>, BTreeSet<Vec<String>>>;

fn import_graph(src: &Path) -> Graph {
    let mut files = Vec::new();
    rust_files(src, &mut files);
    let modules: BTreeMap<Vec<String>, PathBuf> = files
        .iter()
        .map(|f| (module_of(src, f), f.clone()))
        .collect();
    // The longest prefix of `path` that is a module of the crate.
    let resolve = |path: &[String]| -> Option<Vec<String>> {
        (1..=path.len())
            .rev()
            .map(|k| path[..k].to_vec())
            .find(|m| modules.contains_key(m))
    };
    let mut graph = Graph::new();
    for (m, file) in &modules {
        let code = code_of(&std::fs::read_to_string(file).unwrap());
        let mut to = BTreeSet::new();
        for p in paths_after(&code, "crate::") {
            let p: Vec<String> = p.iter().map(|s| (*s).to_owned()).collect();
            to.extend(resolve(&p));
        }
        let parent: Vec<String> = m[..m.len().saturating_sub(1)].to_vec();
        for p in paths_after(&code, "super::") {
            let mut full = parent.clone();
            full.extend(p.iter().map(|s| (*s).to_owned()));
            to.extend(resolve(&full));
        }
        // A parent naming its child (`route::route(…)`, `use mapping::MappingState`).
        for (child, _) in modules.range(m.clone()..) {
            if child.len() == m.len() + 1 && child.starts_with(m) {
                let name = child.last().unwrap();
                if !paths_after(&code, &format!("{name}::")).is_empty() {
                    to.insert(child.clone());
                }
            }
        }
        // The module tree is not an edge: a file naming itself or one of its ancestors.
        to.retain(|t| !m.starts_with(t));
        graph.insert(m.clone(), to);
    }
    graph
}

/// Every circle in `graph`, each as the modules along it.
fn circles(graph: &Graph) -> Vec<Vec<String>> {
    fn visit(
        g: &Graph,
        m: &Vec<String>,
        state: &mut BTreeMap<Vec<String>, u8>,
        stack: &mut Vec<Vec<String>>,
        found: &mut Vec<Vec<String>>,
    ) {
        state.insert(m.clone(), 1);
        stack.push(m.clone());
        for t in g.get(m).into_iter().flatten() {
            match state.get(t) {
                Some(1) => {
                    let at = stack.iter().position(|s| s == t).unwrap();
                    let mut c: Vec<String> = stack[at..].iter().map(|s| name(s)).collect();
                    c.push(name(t));
                    found.push(c);
                }
                Some(_) => {}
                None => visit(g, t, state, stack, found),
            }
        }
        stack.pop();
        state.insert(m.clone(), 2);
    }
    fn name(m: &[String]) -> String {
        if m.is_empty() {
            "crate".into()
        } else {
            m.join("::")
        }
    }
    let mut state = BTreeMap::new();
    let mut found = Vec::new();
    for m in graph.keys() {
        if !state.contains_key(m) {
            visit(graph, m, &mut state, &mut Vec::new(), &mut found);
        }
    }
    found
}

#[test]
fn no_import_circle_between_the_files_of_a_crate() {
    let mut all = Vec::new();
    for src in CRATES {
        let graph = import_graph(&root().join(src));
        assert!(!graph.is_empty(), "{src}: no modules found");
        for c in circles(&graph) {
            all.push(format!("{src}: {}", c.join(" → ")));
        }
    }
    assert!(all.is_empty(), "import circles:\n{}", all.join("\n"));
}

#[test]
fn the_checker_finds_a_circle() {
    let dir = tempfile::tempdir().unwrap();
    let w = |f: &str, t: &str| std::fs::write(dir.path().join(f), t).unwrap();
    w("lib.rs", "mod a;\nmod b;\nmod c;\n");
    w(
        "a.rs",
        "use crate::b::B;\n// crate::c::C in a comment makes no edge\n",
    );
    w("b.rs", "pub struct B;\nfn f() { crate::a::g() }\n");
    w("c.rs", "#[cfg(test)]\nmod tests { use crate::a::A; }\n");
    let found = circles(&import_graph(dir.path()));
    assert_eq!(found, vec![vec!["a", "b", "a"]]);
}

#[test]
fn unsafe_only_in_the_vulkan_crate_the_c_abi_and_the_tables_one_read() {
    let mut found = Vec::new();
    let allowed_crates = ["core/vk", "core/capi"];
    for src in CRATES
        .iter()
        .filter(|s| !allowed_crates.iter().any(|a| s.starts_with(a)))
    {
        let mut files = Vec::new();
        rust_files(&root().join(src), &mut files);
        for f in files {
            let code = code_of(&std::fs::read_to_string(&f).unwrap());
            let allowed = f.ends_with("core/engine/src/chunk_table.rs").then(|| {
                let start = code.find("fn slot_at(").unwrap();
                let end = start + code[start..].find("\n    }\n").unwrap();
                // The function's `#[allow(unsafe_code)]` stands just above it.
                (code[..start].rfind("#[allow(").unwrap(), end)
            });
            for (at, _) in code.match_indices("unsafe") {
                if !allowed.is_some_and(|(s, e)| (s..e).contains(&at)) {
                    let line = code[..at].lines().count();
                    found.push(format!("{}:{line}", f.display()));
                }
            }
        }
    }
    assert!(
        found.is_empty(),
        "unsafe outside dispatchscope-vk, dispatchscope-capi and ChunkTable::slot_at:\n{}",
        found.join("\n")
    );
}

#[test]
fn the_engine_and_the_analysis_open_no_file_or_socket_and_start_no_thread() {
    let mut files = Vec::new();
    rust_files(&root().join("core/engine/src"), &mut files);
    rust_files(&root().join("core/analysis/src"), &mut files);
    let mut found = Vec::new();
    for f in files {
        let code = code_of(&std::fs::read_to_string(&f).unwrap());
        for what in [
            "std::fs",
            "std::net",
            "std::thread",
            "std::process",
            "File::",
        ] {
            if code.contains(what) {
                found.push(format!("{}: {what}", f.display()));
            }
        }
    }
    assert!(
        found.is_empty(),
        "dispatchscope-core or dispatchscope-analysis does I/O or starts threads:\n{}",
        found.join("\n")
    );
}

/// The names ARCHITECTURE.md gives in backticks that a reader would look up: every path of Rust
/// names (`Engine::dispatch`, `vk::spirv::helper::emit_lookup`) and every file or folder
/// (`engine/after.rs`, `core/vk/tests/pass.rs`, `capture/`).
fn names_the_page_gives(page: &str) -> (Vec<String>, Vec<String>) {
    let is_ident = |s: &str| {
        let mut c = s.chars();
        c.next()
            .is_some_and(|f| f.is_ascii_alphabetic() || f == '_')
            && c.all(|x| x.is_ascii_alphanumeric() || x == '_')
    };
    let is_file = |s: &str| {
        let exts = [
            ".rs", ".json", ".c", ".h", ".cpp", ".toml", ".md", ".sh", ".spvasm", ".s", ".cu",
            ".txt",
        ];
        let tops = ["core/", "app/", "views/", "samples/", "examples/", ".ci/"];
        !s.contains(char::is_whitespace)
            && !s.contains(['*', '…', '<', '{', '"', '\''])
            && (exts.iter().any(|e| s.ends_with(e))
                || (s.ends_with('/') && s.len() > 1)
                || tops.iter().any(|t| s.starts_with(t)))
    };
    let mut paths = Vec::new();
    let mut files = Vec::new();
    for (i, span) in page.split('`').enumerate() {
        if i % 2 == 0 {
            continue;
        }
        // A call's arguments and a variant's fields are not part of the name.
        let name = span.split(['(', ' ']).next().unwrap_or("");
        if name.contains("::") && name.split("::").all(is_ident) {
            paths.push(name.to_owned());
        } else if is_file(span) {
            files.push(span.to_owned());
        }
    }
    (paths, files)
}

/// Every name defined in the workspace's sources, every module file's and folder's name, and the
/// crates' names as the page shortens them (`vk::replay`, `formats::message`); and the sources'
/// code itself, where a path of another crate's names (`TextWrapMode::Extend`) is found as written.
fn names_defined() -> (BTreeSet<String>, String) {
    let mut names: BTreeSet<String> = [
        "dispatchscope_core",
        "dispatchscope_analysis",
        "dispatchscope_formats",
        "dispatchscope_live",
        "dispatchscope_vk",
        "dispatchscope_demo",
        "dispatchscope_rdna",
        "dispatchscope_capi",
        "dispatchscope_views",
        "dispatchscope",
        "core",
        "analysis",
        "formats",
        "live",
        "vk",
        "demo",
        "rdna",
        "capi",
        "views",
    ]
    .into_iter()
    .map(str::to_owned)
    .collect();
    let mut all_code = String::new();
    let mut files = Vec::new();
    for src in CRATES {
        let crate_dir = root().join(src).join("..");
        for dir in ["src", "tests", "benches", "examples"] {
            if crate_dir.join(dir).is_dir() {
                rust_files(&crate_dir.join(dir), &mut files);
            }
        }
    }
    for f in files {
        if let Some(stem) = f.file_stem() {
            names.insert(stem.to_string_lossy().into_owned());
        }
        if let Some(dir) = f.parent().and_then(Path::file_name) {
            names.insert(dir.to_string_lossy().into_owned());
        }
        // Unit tests included: the page names test helpers too.
        let text = std::fs::read_to_string(&f).unwrap();
        let code: String = text
            .lines()
            .map(|l| match l.find("//") {
                Some(i) if !l[..i].contains('"') => &l[..i],
                _ => l,
            })
            .collect::<Vec<_>>()
            .join("\n");
        all_code.push_str(&code);
        let words: Vec<&str> = code
            .split(|c: char| !(c.is_ascii_alphanumeric() || c == '_'))
            .filter(|w| !w.is_empty())
            .collect();
        // An item after its keyword.
        for pair in words.windows(2) {
            if matches!(
                pair[0],
                "fn" | "struct" | "enum" | "trait" | "type" | "const" | "static" | "mod" | "union"
            ) {
                names.insert(pair[1].to_owned());
            }
        }
        // A field or a variant: a name that starts a line, before `:`, `(`, `{`, `,` or `=`.
        for line in code.lines() {
            let t = line.trim_start().trim_start_matches("pub ");
            let end = t
                .find(|c: char| !(c.is_ascii_alphanumeric() || c == '_'))
                .unwrap_or(t.len());
            let (name, rest) = t.split_at(end);
            if !name.is_empty()
                && (rest.is_empty()
                    || [":", "(", "{", ",", "="]
                        .iter()
                        .any(|p| rest.trim_start().starts_with(p)))
            {
                names.insert(name.to_owned());
            }
        }
    }
    // The C and C++ of the examples and the C ABI's C tests (the page names their functions and
    // types too): a name before `(`, or after `struct` or `class`.
    let mut c_files = Vec::new();
    for dir in ["examples", "core/capi/tests/c"] {
        c_like_files(&root().join(dir), &mut c_files);
    }
    for f in c_files {
        let text = std::fs::read_to_string(&f).unwrap();
        all_code.push_str(&text);
        let mut rest = text.as_str();
        while let Some(i) = rest.find(|c: char| c.is_ascii_alphabetic() || c == '_') {
            rest = &rest[i..];
            let end = rest
                .find(|c: char| !(c.is_ascii_alphanumeric() || c == '_'))
                .unwrap_or(rest.len());
            let (name, after) = rest.split_at(end);
            if after.trim_start().starts_with('(') {
                names.insert(name.to_owned());
            }
            if matches!(name, "struct" | "class") {
                let next = after.trim_start();
                let n = next
                    .find(|c: char| !(c.is_ascii_alphanumeric() || c == '_'))
                    .unwrap_or(next.len());
                names.insert(next[..n].to_owned());
            }
            rest = after;
        }
    }
    (names, all_code)
}

/// Every C or C++ source and header under `dir`.
fn c_like_files(dir: &Path, out: &mut Vec<PathBuf>) {
    let Ok(entries) = std::fs::read_dir(dir) else {
        return;
    };
    for e in entries {
        let p = e.unwrap().path();
        if p.is_dir() {
            c_like_files(&p, out);
        } else if p
            .extension()
            .is_some_and(|x| ["c", "cpp", "h", "hpp"].iter().any(|e| x == *e))
        {
            out.push(p);
        }
    }
}

/// Every file and folder of the tree under `dir`, relative to the root, with `/` between parts.
fn tree(dir: &Path, out: &mut Vec<String>) {
    for e in std::fs::read_dir(dir).unwrap() {
        let p = e.unwrap().path();
        let name = p.file_name().unwrap().to_string_lossy().into_owned();
        if name == "target" || name == ".git" {
            continue;
        }
        let rel = p
            .strip_prefix(root())
            .unwrap()
            .to_string_lossy()
            .replace('\\', "/");
        if p.is_dir() {
            out.push(format!("{rel}/"));
            tree(&p, out);
        } else {
            out.push(rel);
        }
    }
}

#[test]
fn every_name_architecture_md_gives_exists() {
    let page = std::fs::read_to_string(root().join("ARCHITECTURE.md")).unwrap();
    let (paths, files) = names_the_page_gives(&page);
    assert!(
        paths.len() > 100 && files.len() > 50,
        "the page's names were not found"
    );
    let (defined, code) = names_defined();
    let mut all = Vec::new();
    tree(&root(), &mut all);
    let root_dir = root().canonicalize().unwrap();
    let mut missing = Vec::new();
    for p in &paths {
        let gone: Vec<&str> = p.split("::").filter(|s| !defined.contains(*s)).collect();
        if !gone.is_empty() && !code.contains(p.as_str()) {
            missing.push(format!("`{p}`: no {}", gone.join(", ")));
        }
    }
    for f in &files {
        // As written from the root, or as the end of a path in the tree (the page names a file in
        // its crate's section by its path inside the crate: `engine/after.rs`, `tests/rules.rs`).
        let here = root_dir.join(f.trim_end_matches('/')).exists();
        let found = here || all.iter().any(|t| t == f || t.ends_with(&format!("/{f}")));
        if !found {
            missing.push(format!("`{f}`: no such file or folder"));
        }
    }
    assert!(
        missing.is_empty(),
        "ARCHITECTURE.md names what the tree does not have:\n{}",
        missing.join("\n")
    );
}

/// The names of the types a file's code defines (`struct`, `enum`, `union`, `type`).
fn types_defined(code: &str) -> BTreeSet<String> {
    let words: Vec<&str> = code
        .split(|c: char| !(c.is_ascii_alphanumeric() || c == '_'))
        .filter(|w| !w.is_empty())
        .collect();
    words
        .windows(2)
        .filter(|p| matches!(p[0], "struct" | "enum" | "union" | "type"))
        .map(|p| p[1].to_owned())
        .collect()
}

/// The self type of every `impl` block in `code` (`impl<T> Trait<T> for path::Name<T>` →
/// `Name`), with the line it starts on.
fn impl_self_types(code: &str) -> Vec<(String, usize)> {
    let mut out = Vec::new();
    for (at, _) in code.match_indices("impl") {
        let before = code[..at].chars().next_back();
        let after = code[at + 4..].chars().next();
        if before.is_some_and(|c| c.is_alphanumeric() || c == '_')
            || !after.is_some_and(|c| c.is_whitespace() || c == '<')
        {
            continue;
        }
        // The header runs to the block's `{` (or a `where`).
        let rest = &code[at + 4..];
        let end = rest.find('{').unwrap_or(rest.len());
        let mut header = &rest[..end];
        if let Some(w) = header.find(" where") {
            header = &header[..w];
        }
        // Skip the impl's own generics, `<…>`, counting nesting.
        let mut h = header.trim_start();
        if h.starts_with('<') {
            let mut depth = 0;
            let mut cut = h.len();
            for (i, c) in h.char_indices() {
                match c {
                    '<' => depth += 1,
                    '>' => {
                        depth -= 1;
                        if depth == 0 {
                            cut = i + 1;
                            break;
                        }
                    }
                    _ => {}
                }
            }
            h = &h[cut..];
        }
        let ty = match h.rfind(" for ") {
            Some(i) => &h[i + 5..],
            None => h,
        };
        // `path::Name<T>` → `Name`; `&'a Name` → `Name`.
        let ty = ty.trim().trim_start_matches('&').trim_start_matches("mut ");
        let ty = ty.split('<').next().unwrap_or("").trim();
        let name = ty.rsplit("::").next().unwrap_or("").trim();
        if !name.is_empty() && name.chars().all(|c| c.is_ascii_alphanumeric() || c == '_') {
            out.push((name.to_owned(), code[..at].lines().count()));
        }
    }
    out
}

/// Every arrow up in the crate at `src`: a file whose `impl` block is of a type its parent module
/// defines (and it does not), as `file:line: impl Type (the parent's)`. A child that writes its
/// parent's `impl` reaches back into the parent's state: the parent's type is spread over files
/// that depend on each other both ways.
fn arrows_up(src: &Path) -> Vec<String> {
    let mut files = Vec::new();
    rust_files(src, &mut files);
    let modules: BTreeMap<Vec<String>, PathBuf> = files
        .iter()
        .map(|f| (module_of(src, f), f.clone()))
        .collect();
    let mut found = Vec::new();
    for (m, file) in &modules {
        let Some(parent) = m.len().checked_sub(1).map(|k| m[..k].to_vec()) else {
            continue;
        };
        if m.is_empty() {
            continue;
        }
        let Some(parent_file) = modules.get(&parent) else {
            continue;
        };
        let parent_types = types_defined(&code_of(&std::fs::read_to_string(parent_file).unwrap()));
        let code = code_of(&std::fs::read_to_string(file).unwrap());
        let own = types_defined(&code);
        for (ty, line) in impl_self_types(&code) {
            if parent_types.contains(&ty) && !own.contains(&ty) {
                found.push(format!(
                    "{}:{line}: impl {ty} (its parent's)",
                    file.display()
                ));
            }
        }
    }
    found
}

/// The crates whose child modules may write their parent's `impl`: the engine's phases are
/// `impl Engine` blocks in files of their own (ARCHITECTURE.md), and each names what it does.
const PARENT_IMPLS_ALLOWED: &[&str] = &["core/engine/src"];

/// Arrows up found elsewhere and not yet taken down, by file and type: each one here is a debt
/// (the Vulkan crate's `Context::from_host` in a child of `device.rs`); a new one fails the test.
const KNOWN_ARROWS_UP: &[&str] = &["core/vk/src/device/from_host.rs: impl Context"];

#[test]
fn no_child_module_writes_its_parents_impl() {
    let mut app = Vec::new();
    let mut new = Vec::new();
    for src in CRATES.iter().filter(|s| !PARENT_IMPLS_ALLOWED.contains(s)) {
        for found in arrows_up(&root().join(src)) {
            let known = KNOWN_ARROWS_UP.iter().any(|k| {
                let (file, ty) = k.split_once(": ").unwrap();
                found.contains(file) && found.contains(&format!("{ty} "))
            });
            if src.starts_with("app/") {
                app.push(found);
            } else if !known {
                new.push(found);
            }
        }
    }
    assert!(
        app.is_empty(),
        "the app's windows write their parent's impl (an arrow up; a window owns its state and \
         returns actions instead):\n{}",
        app.join("\n")
    );
    assert!(
        new.is_empty(),
        "child modules writing an impl of their parent's type (an arrow up):\n{}",
        new.join("\n")
    );
}

#[test]
fn the_checker_finds_an_arrow_up() {
    let dir = tempfile::tempdir().unwrap();
    let w = |f: &str, t: &str| {
        let p = dir.path().join(f);
        std::fs::create_dir_all(p.parent().unwrap()).unwrap();
        std::fs::write(p, t).unwrap();
    };
    w("lib.rs", "mod app;\n");
    w(
        "app/mod.rs",
        "mod window;\nmod panel;\npub struct App { n: u32 }\npub(crate) enum Mode { A }\n",
    );
    // An inherent impl of the parent's type, and a trait impl for it, are arrows up.
    w(
        "app/window.rs",
        "use super::App;\nimpl App {\n    fn draw(&mut self) {}\n}\nimpl<'a> From<&'a str> for super::Mode {\n    fn from(_: &str) -> Self { super::Mode::A }\n}\n",
    );
    // A child's own type, and a trait of the parent's implemented for it, are not.
    w(
        "app/panel.rs",
        "pub struct Panel;\nimpl Panel {}\nimpl std::fmt::Debug for Panel {\n    fn fmt(&self, _: &mut std::fmt::Formatter) -> std::fmt::Result { Ok(()) }\n}\n",
    );
    let found = arrows_up(dir.path());
    assert_eq!(found.len(), 2, "{found:?}");
    assert!(found[0].contains("impl App"), "{found:?}");
    assert!(found[1].contains("impl Mode"), "{found:?}");
}
