//! `dispatchscope diff`, run as a user runs it: exit statuses as diff(1) (0 the same, 1 different,
//! 2 bad input with a named error), the text, the JSON, and the what-if.

#![allow(
    clippy::unwrap_used,
    clippy::expect_used,
    reason = "tests: a panic is the test failing, with its message"
)]

use std::path::PathBuf;
use std::process::{Command, Output};

fn run(args: &[&str]) -> Output {
    Command::new(env!("CARGO_BIN_EXE_dispatchscope"))
        .args(args)
        .output()
        .expect("the binary runs")
}

fn sample(name: &str) -> String {
    PathBuf::from(env!("CARGO_MANIFEST_DIR"))
        .join("../samples")
        .join(name)
        .display()
        .to_string()
}

fn out(o: &Output) -> String {
    String::from_utf8_lossy(&o.stdout).into_owned()
}

fn err(o: &Output) -> String {
    String::from_utf8_lossy(&o.stderr).into_owned()
}

#[test]
fn a_sample_against_itself_is_the_same_exit_zero() {
    let s = sample("run305-overlap.json");
    let o = run(&["diff", &s, &s]);
    assert_eq!(o.status.code(), Some(0), "{}", err(&o));
    assert!(
        out(&o).contains("the same: no decision changed"),
        "{}",
        out(&o)
    );
}

#[test]
fn a_capture_against_its_sample_is_the_same_and_two_samples_differ() {
    let dir = tempfile::tempdir().unwrap();
    let cap = dir.path().join("o7.dscap");
    let s = sample("o7-alignment.json");
    let o = run(&["convert", &s, cap.to_str().unwrap()]);
    assert!(o.status.success(), "{}", err(&o));
    let o = run(&["diff", cap.to_str().unwrap(), &s]);
    assert_eq!(o.status.code(), Some(0), "{}{}", out(&o), err(&o));
    let o = run(&["diff", &s, &sample("run305-overlap.json")]);
    assert_eq!(o.status.code(), Some(1), "{}", err(&o));
}

#[test]
fn what_if_alignment_256_shows_the_o7_refusal_in_text_and_json() {
    let s = sample("o7-alignment.json");
    let o = run(&["diff", &s, "--min-storage-buffer-offset-alignment", "256"]);
    assert_eq!(o.status.code(), Some(1), "{}", err(&o));
    let t = out(&o);
    assert!(
        t.contains("limit min_storage_buffer_offset_alignment: 0x10 → 0x100"),
        "{t}"
    );
    assert!(t.contains("mode bound → refused"), "{t}");
    assert!(t.contains("refusal added: O7 (slot 1)"), "{t}");
    let o = run(&[
        "diff",
        &s,
        "--min-storage-buffer-offset-alignment",
        "256",
        "--json",
    ]);
    assert_eq!(o.status.code(), Some(1));
    let v: serde_json::Value = serde_json::from_str(&out(&o)).unwrap();
    assert_eq!(v["schema"], "dispatchscope.diff/1");
    assert_eq!(v["same"], false);
    let changes = v["diff"]["dispatches"][0]["changes"].as_array().unwrap();
    assert!(
        changes
            .iter()
            .any(|c| c["change"] == "refusal-added" && c["rule"] == "O7"),
        "{changes:?}"
    );
    // The same limit as recorded: nothing changes.
    let o = run(&["diff", &s, "--min-storage-buffer-offset-alignment", "16"]);
    assert_eq!(o.status.code(), Some(0), "{}", out(&o));
}

#[test]
fn what_if_probe_bound_replays_and_says_so() {
    let s = sample("ray-traversal.json");
    let o = run(&["diff", &s, "--probe-bound", "2"]);
    assert!(matches!(o.status.code(), Some(0 | 1)), "{}", err(&o));
    assert!(out(&o).contains("replayed whole"), "{}", out(&o));
}

#[test]
fn bad_input_exits_two_with_a_named_error() {
    let s = sample("o7-alignment.json");
    let dir = tempfile::tempdir().unwrap();
    let junk = dir.path().join("junk.bin");
    std::fs::write(&junk, b"\x00\x01not a session").unwrap();
    let cases: Vec<(Vec<String>, &str)> = vec![
        (
            vec!["diff".into(), "/nonexistent/a.json".into(), s.clone()],
            "/nonexistent/a.json",
        ),
        (
            vec!["diff".into(), s.clone(), junk.display().to_string()],
            "junk.bin",
        ),
        (vec!["diff".into(), s.clone()], "give two sessions"),
        (
            vec![
                "diff".into(),
                s.clone(),
                s.clone(),
                "--min-storage-buffer-offset-alignment".into(),
                "256".into(),
            ],
            "takes one file",
        ),
        (
            vec![
                "diff".into(),
                s.clone(),
                "--min-storage-buffer-offset-alignment".into(),
                "48".into(),
            ],
            "power of two",
        ),
        (
            vec!["diff".into(), s.clone(), "--probe-bound".into(), "0".into()],
            "describe no device",
        ),
    ];
    for (args, named) in cases {
        let args: Vec<&str> = args.iter().map(String::as_str).collect();
        let o = run(&args);
        assert_eq!(o.status.code(), Some(2), "{args:?}: {}", err(&o));
        assert!(err(&o).contains(named), "{args:?}: {}", err(&o));
        assert!(!err(&o).contains("panicked"), "{args:?}: {}", err(&o));
    }
}
