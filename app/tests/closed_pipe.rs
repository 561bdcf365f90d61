//! Every subcommand run with its standard output a pipe whose reader closed before it wrote
//! (`dispatchscope … | head` at its extreme): it ends without a panic, with the exit status it
//! has when its output is read (0 for all but `diff`, whose 0 or 1 is the comparison's), and
//! nothing on stderr about the pipe.

#![allow(
    clippy::unwrap_used,
    clippy::expect_used,
    reason = "tests: a panic is the test failing, with its message"
)]

use std::io::{BufRead, BufReader};
use std::path::PathBuf;
use std::process::{Child, Command, Output, Stdio};

fn bin() -> Command {
    Command::new(env!("CARGO_BIN_EXE_dispatchscope"))
}

fn sample(name: &str) -> String {
    PathBuf::from(env!("CARGO_MANIFEST_DIR"))
        .join("../samples")
        .join(name)
        .display()
        .to_string()
}

/// Runs `args` with stdout a pipe whose reading end is already closed.
fn closed(args: &[&str]) -> Output {
    let (reader, writer) = std::io::pipe().unwrap();
    drop(reader);
    let child = bin()
        .args(args)
        .stdin(Stdio::null())
        .stdout(writer)
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    child.wait_with_output().unwrap()
}

/// Checks that `args` ends quietly on the closed pipe, with the status it has when read whole
/// (`read`: that status, when the subcommand's run cannot be repeated, as a demo's port).
fn check_with(args: &[&str], read: Option<i32>) {
    let read = read.unwrap_or_else(|| bin().args(args).output().unwrap().status.code().unwrap());
    let o = closed(args);
    let err = String::from_utf8_lossy(&o.stderr);
    assert!(!err.contains("panicked"), "{args:?} panicked: {err}");
    assert!(
        !err.contains("Broken pipe"),
        "{args:?} named the pipe: {err}"
    );
    assert!(!err.contains("closed it"), "{args:?} named the pipe: {err}");
    assert_eq!(o.status.code(), Some(read), "{args:?}: {err}");
}

fn check(args: &[&str]) {
    check_with(args, None);
}

#[test]
fn every_file_subcommand_ends_quietly_on_a_closed_pipe() {
    let dir = tempfile::tempdir().unwrap();
    let path = |name: &str| dir.path().join(name).display().to_string();
    let (ray, o7) = (sample("ray-traversal.json"), sample("o7-alignment.json"));
    let capture = path("ray.dscap");
    check(&["convert", &ray, &capture]);
    check(&["explain", &ray]);
    check(&["explain", &ray, "--json"]);
    check(&["explain", &capture, "--dispatch", "0"]);
    check(&["generate", &path("g.json"), "--dispatches", "2"]);
    check(&["export", &ray, "--trace", &path("trace.json")]);
    check(&["diff", &ray, &ray]);
    check(&["diff", &o7, &ray]);
    check(&["diff", &o7, "--min-storage-buffer-offset-alignment", "4"]);
    check(&["diff", &ray, &capture, "--json"]);
    check(&["history", &o7, "0x740000000"]);
    check(&["history", &o7, "0x740000000", "--json"]);
    check(&["disasm", &ray]);
    std::fs::write(path("code.bin"), [0u8; 16]).unwrap();
    check(&["disasm", "--raw", &path("code.bin")]);
    check(&["spirv-helper", "-o", &path("helper.spv")]);
    // On a machine without Vulkan both fail the same way read or not: no panic either way.
    check(&["verify", &ray]);
    check(&[
        "pass",
        "--resolution",
        "32x32",
        "--frames",
        "1",
        "-o",
        &path("p.dscap"),
    ]);
}

/// `demo` on a port the system chooses, and the address it prints.
fn spawn_demo() -> (Child, String) {
    let mut demo = bin()
        .args([
            "demo",
            "--listen",
            "127.0.0.1:0",
            "--frames",
            "100000",
            "--fps",
            "60",
        ])
        .stdout(Stdio::piped())
        .stderr(Stdio::null())
        .spawn()
        .unwrap();
    let mut out = BufReader::new(demo.stdout.take().unwrap());
    let mut first = String::new();
    out.read_line(&mut first).unwrap();
    let addr = first
        .split("listening on ")
        .nth(1)
        .and_then(|r| r.split_whitespace().next())
        .unwrap_or_else(|| panic!("no address in {first:?}"))
        .to_owned();
    // Its stdout is read on, so that the demo itself is not the one whose pipe closes.
    std::thread::spawn(move || std::io::copy(&mut out, &mut std::io::sink()));
    (demo, addr)
}

#[test]
fn the_live_subcommands_end_quietly_on_a_closed_pipe() {
    check(&[
        "demo",
        "--listen",
        "127.0.0.1:0",
        "--frames",
        "3",
        "--fps",
        "0",
    ]);
    let (mut demo, addr) = spawn_demo();
    let dir = tempfile::tempdir().unwrap();
    let out = dir.path().join("live.dscap").display().to_string();
    check_with(&["attach", &addr, "--steps", "2", "--wait", "30"], Some(0));
    check_with(
        &["attach", &addr, "--steps", "1", "--json", "--wait", "30"],
        Some(0),
    );
    check_with(
        &["record", &addr, "-o", &out, "--dispatches", "64"],
        Some(0),
    );
    let _ = demo.kill();
    let _ = demo.wait();
}
