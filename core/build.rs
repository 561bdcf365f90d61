//! Generates one test per shipped sample (`samples/*.json`), so a new sample is a new test.

use std::fmt::Write;
use std::path::Path;

fn main() {
    let dir = Path::new(env!("CARGO_MANIFEST_DIR")).join("../samples");
    println!("cargo::rerun-if-changed={}", dir.display());
    let mut names: Vec<String> = std::fs::read_dir(&dir)
        .map(|rd| {
            rd.filter_map(|e| e.ok())
                .map(|e| e.file_name().to_string_lossy().into_owned())
                .filter(|n| n.ends_with(".json") && !n.ends_with(".schema.json"))
                .collect()
        })
        .unwrap_or_default();
    names.sort();
    let mut out = String::new();
    for n in &names {
        let ident: String = n
            .trim_end_matches(".json")
            .chars()
            .map(|c| {
                if c.is_ascii_alphanumeric() {
                    c.to_ascii_lowercase()
                } else {
                    '_'
                }
            })
            .collect();
        let _ = writeln!(
            out,
            "#[test]\nfn sample_{ident}() {{\n    check_sample({n:?});\n}}\n"
        );
    }
    let _ = writeln!(out, "const SAMPLE_NAMES: &[&str] = &{names:?};");
    let path = Path::new(&std::env::var("OUT_DIR").unwrap_or_default()).join("sample_tests.rs");
    let _ = std::fs::write(path, out);
}
