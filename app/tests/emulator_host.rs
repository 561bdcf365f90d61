//! The emulator-shaped host (`examples/emulator-host`, issues 27 and 40): built with CMake against
//! the C ABI's header and library, its modules assembled with spirv-as and linked with spirv-link
//! against the helper library this crate's `dispatchscope spirv-helper` writes, run for a few frames
//! on a Vulkan device it creates itself (lavapipe in CI) with the validation layer on, and with a
//! `PATH` of one empty folder: what a player's machine has, its GPU driver and nothing else.
//!
//! Its frames are an emulator's: hundreds of dispatches (device-addressed walks, bound passes of run
//! 305's shapes, a gather pass bound in place, O7 refusals) prepared one after another, recorded
//! into one command buffer, one submission a frame, two frames in flight, completed in order after
//! each frame's fence, while guest threads write guest memory beside the passes' words and guard
//! and release pages (their events that touch a dispatch in flight wait for it, M5).
//!
//! What must hold, frame after frame: every guest word is what the host's own reference computes
//! from the passes in the order prepared (chains within a submission included: a bound pass reading
//! what the one before it wrote, through `DS_CARRY_FROM_HOLDER`; a bound pass reading what a
//! device-addressed one wrote, through `DS_CARRY_FROM_GUEST`; device-addressed passes reading what
//! device-addressed and in-place passes wrote, through a barrier), and each guest thread's words
//! what it wrote; O7 refuses the misaligned member; the device-addressed passes' escapes are
//! exactly the predicted ones (the region the guest made read-only, the shared memfd region, left
//! out by name); C2's hand-off, not a SIGSEGV, drops the texture over their output; one submission
//! and one fence wait a frame; the validation layer says nothing. The host checks each of these
//! itself (`checks=ok`); this test reads its lines and checks the counts again. `--plain` runs the
//! same frames with no engine (the raw helper) and its words check too. `--lose-device` hangs the
//! device (lavapipe: a loop bound from a read that escaped; the fence wait times out) and the
//! engine's loss report names every dispatch in flight. And `dispatchscope attach` breaks on its
//! O7 refusal, steps its own dispatches, detaches, and the host runs on with every check passing.
//!
//! Where `DISPATCHSCOPE_REQUIRE_VULKAN=1` (CI), a machine with no Vulkan device or no validation
//! layer fails these tests.
#![allow(clippy::unwrap_used, clippy::expect_used)]

mod common;

use std::io::{BufRead, BufReader};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::sync::{OnceLock, mpsc};
use std::time::{Duration, Instant};

/// The guest address of the host's device-addressed program (`main.cpp`'s `DEVICE_PROGRAM`).
const DEVICE_PROGRAM: u64 = 0x7400_5b85_4a00;

fn repo() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("..")
}

fn required() -> bool {
    std::env::var("DISPATCHSCOPE_REQUIRE_VULKAN").is_ok_and(|v| v == "1")
}

/// `target/<profile>/deps`, where cargo puts the C ABI's cdylib (a dev-dependency of this crate).
fn capi_dir() -> PathBuf {
    let exe = std::env::current_exe().unwrap();
    let dir = exe.parent().unwrap().to_path_buf();
    assert!(
        dir.join("libdispatchscope_capi.so").exists(),
        "libdispatchscope_capi.so is not in {}",
        dir.display()
    );
    dir
}

fn run(cmd: &mut Command, what: &str) {
    let out = cmd.output().unwrap_or_else(|e| {
        panic!("{what} does not run (the test command installs cmake, g++ and spirv-tools): {e}")
    });
    assert!(
        out.status.success(),
        "{what} failed:\n{}{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
}

/// Builds the host once per test process.
fn build() -> PathBuf {
    static EXE: OnceLock<PathBuf> = OnceLock::new();
    EXE.get_or_init(build_once).clone()
}

fn build_once() -> PathBuf {
    let build = std::env::temp_dir().join(format!(
        "dispatchscope-emulator-host-{}",
        std::process::id()
    ));
    run(
        Command::new("cmake")
            .arg("-S")
            .arg(repo().join("examples/emulator-host"))
            .arg("-B")
            .arg(&build)
            .arg(format!("-DDISPATCHSCOPE_LIB_DIR={}", capi_dir().display()))
            .arg(format!(
                "-DDISPATCHSCOPE_BIN={}",
                env!("CARGO_BIN_EXE_dispatchscope")
            ))
            .arg("-DCMAKE_BUILD_TYPE=Debug"),
        "cmake (configure)",
    );
    run(
        Command::new("cmake").arg("--build").arg(&build),
        "cmake --build",
    );
    build.join("emulator-host")
}

/// The host as a player's machine runs it (issue 40): the C ABI's library from `capi_dir`, and a
/// `PATH` of one empty folder, so that nothing the library could start by name (SPIRV-Tools'
/// `spirv-val` among them) is found; the host's modules were assembled and linked at build time.
fn host(exe: &Path) -> Command {
    static EMPTY: OnceLock<tempfile::TempDir> = OnceLock::new();
    let empty = EMPTY.get_or_init(|| tempfile::tempdir().unwrap());
    let mut cmd = Command::new(exe);
    cmd.env("LD_LIBRARY_PATH", capi_dir())
        .env("PATH", empty.path());
    cmd
}

/// Runs the host with the validation layer: its exit status and what it printed; `None` where
/// Vulkan (or its validation layer) is absent and not required.
fn host_run(exe: &Path, args: &[&str]) -> Option<(Option<i32>, String, String)> {
    let out = host(exe)
        .args(["--validation"])
        .args(args)
        .output()
        .unwrap();
    let text = String::from_utf8_lossy(&out.stdout).into_owned();
    let err = String::from_utf8_lossy(&out.stderr).into_owned();
    if out.status.code() == Some(3) {
        assert!(
            !required(),
            "DISPATCHSCOPE_REQUIRE_VULKAN=1, but the host cannot run: {err}"
        );
        eprintln!("skipped: {err}");
        return None;
    }
    Some((out.status.code(), text, err))
}

/// Runs the host, which must succeed; `None` where Vulkan is absent and not required.
fn frames(exe: &Path, args: &[&str]) -> Option<String> {
    let (status, text, err) = host_run(exe, args)?;
    assert!(
        status == Some(0),
        "emulator-host {args:?} failed ({status:?}):\n{text}{err}"
    );
    Some(text)
}

/// The `key=value` field of a frame or summary line.
fn field<'a>(line: &'a str, key: &str) -> &'a str {
    line.split_whitespace()
        .find_map(|w| w.strip_prefix(&format!("{key}=")))
        .unwrap_or_else(|| panic!("no {key}= in {line}"))
}

fn number(line: &str, key: &str) -> f64 {
    field(line, key)
        .parse()
        .unwrap_or_else(|e| panic!("{key}= in {line}: {e}"))
}

fn frame_lines(text: &str) -> Vec<&str> {
    text.lines().filter(|l| l.starts_with("frame ")).collect()
}

fn summary(text: &str) -> &str {
    text.lines()
        .find(|l| l.starts_with("summary: "))
        .unwrap_or_else(|| panic!("no summary line:\n{text}"))
}

/// What a frame of `per_frame` dispatches holds (units of ten: D D G B D G B R D B, as `main.cpp`'s
/// `PATTERN`): device-addressed, gather and bound passes, refusals, and the carries its chains take
/// (a gather pass one from guest memory; a unit's second bound pass two from the first's holders, its
/// third four).
#[derive(Debug, Default)]
struct Shape {
    device: usize,
    gather: usize,
    bound: usize,
    refused: usize,
    carries_guest: usize,
    carries_holder: usize,
}

fn shape(per_frame: usize) -> Shape {
    let mut s = Shape::default();
    for p in 0..per_frame {
        match p % 10 {
            0 | 1 | 4 | 8 => s.device += 1,
            2 | 5 => {
                s.gather += 1;
                s.carries_guest += 1;
            }
            3 => s.bound += 1,
            6 => {
                s.bound += 1;
                s.carries_holder += 2;
            }
            9 => {
                s.bound += 1;
                s.carries_holder += 4;
            }
            _ => s.refused += 1,
        }
    }
    s
}

/// Every frame line's counts for `per_frame` dispatches a frame, one submission each. `holder` is
/// how the texture over the bound pass's written holder loses its trust: by O8's write-back through
/// the host (`host-write`), or, where the host imported the holder's own pages, by the stores its
/// masks show (`bound-store`).
fn check_frames(text: &str, n: usize, holder: &str, per_frame: usize) {
    let lines = frame_lines(text);
    assert_eq!(lines.len(), n, "{text}");
    let s = shape(per_frame);
    for (i, line) in lines.iter().enumerate() {
        assert!(line.starts_with(&format!("frame {i}: ")), "{line}");
        assert_eq!(field(line, "checks"), "ok", "{text}");
        assert_eq!(field(line, "mismatches"), "0", "{line}");
        assert_eq!(
            field(line, "dispatches"),
            (per_frame - s.refused).to_string(),
            "{line}"
        );
        assert_eq!(field(line, "refusals"), s.refused.to_string(), "O7: {line}");
        // One submission a frame, its fence waited once.
        assert_eq!(field(line, "submissions"), "1", "{line}");
        assert_eq!(field(line, "fence_waits"), "1", "{line}");
        // Four lanes of each device-addressed pass: the shared load and store always escape; the
        // read-only region's store while the guest has it read-only.
        let escapes = number(line, "escapes") as usize;
        assert_eq!(field(line, "predicted"), field(line, "escapes"), "{line}");
        assert!((8 * s.device..=12 * s.device).contains(&escapes), "{line}");
        if holder == "host-write" {
            assert_eq!(
                field(line, "carries_guest"),
                s.carries_guest.to_string(),
                "{line}"
            );
            assert_eq!(
                field(line, "carries_holder"),
                s.carries_holder.to_string(),
                "{line}"
            );
        }
        let dropped = field(line, "textures_dropped");
        let holder = format!("holder-tex:{holder}");
        for want in ["out-tex:hand-off", "cpu-tex:cpu-fault", holder.as_str()] {
            assert!(dropped.contains(want), "{want}: {line}");
        }
        assert!(
            !dropped.contains("bvh-tex") && !dropped.contains("idle-tex"),
            "{line}"
        );
        assert!(number(line, "hand_offs") as usize >= s.device, "{line}");
        assert!(number(line, "checked_words") > 1e6, "{line}");
    }
    let sum = summary(text);
    assert_eq!(field(sum, "mismatches"), "0", "{sum}");
    assert_eq!(field(sum, "submissions_per_frame"), "1.00", "{sum}");
    assert!(number(sum, "fence_waits_per_frame") <= 1.0, "{sum}");
    assert!(
        text.contains("left out by name: ") && text.contains("not-private"),
        "the shared region is left out by name:\n{text}"
    );
    assert!(text.contains("validation messages: 0\n"), "{text}");
    assert!(text.contains("\n0 failures\n"), "{text}");
}

#[test]
fn the_emulator_host_runs_its_frames_through_the_host_path() {
    let exe = build();
    // Its defaults: 200 dispatches a frame, 2 frames in flight, 4 guest threads.
    let Some(text) = frames(&exe, &["--frames", "4"]) else {
        return;
    };
    check_frames(&text, 4, "host-write", 200);
    assert!(text.contains("validation layer on"), "{text}");
    let sum = summary(&text);
    for (key, want) in [
        ("dispatches_per_frame", "200"),
        ("frames_in_flight", "2"),
        ("guest_threads", "4"),
    ] {
        assert_eq!(field(sum, key), want, "{sum}");
    }
    let Some(text) = frames(
        &exe,
        &[
            "--frames",
            "2",
            "--instrumented",
            "--dispatches-per-frame",
            "30",
        ],
    ) else {
        return;
    };
    check_frames(&text, 2, "host-write", 30);
    // The lean instrumented library: every escape counted by its site (lanes 0–3: the shared
    // region's load and store, and the read-only region's store while it is locked), each
    // escaping lane's first in the device's log.
    assert!(
        text.contains("instrumented: 8 escapes counted by site (5: 0, 6: 4, 8: 4), 4 lanes' first")
            || text.contains(
                "instrumented: 12 escapes counted by site (5: 4, 6: 4, 8: 4), 4 lanes' first"
            ),
        "{text}"
    );
    // The helper's header form: the push block carries one 64-bit value for dispatchscope (the
    // header's address, words 30–31); the host fills words 16–29 with garbage.
    let Some(text) = frames(
        &exe,
        &["--frames", "2", "--header", "--dispatches-per-frame", "30"],
    ) else {
        return;
    };
    check_frames(&text, 2, "host-write", 30);
    assert!(text.contains("header-form helper"), "{text}");
    // The bound sets imported zero-copy from the guest's own pages (DS_SLOT_IN_PLACE), left out of
    // the completion: no carry from a holder, a barrier is enough.
    let Some(text) = frames(
        &exe,
        &[
            "--frames",
            "2",
            "--import-holders",
            "--guest-mib",
            "32",
            "--dispatches-per-frame",
            "30",
        ],
    ) else {
        return;
    };
    check_frames(&text, 2, "bound-store", 30);
    for line in frame_lines(&text) {
        assert_eq!(field(line, "carries_holder"), "0", "{line}");
    }
}

/// Chains within one submission, every word checked: three frames in flight, the read-only region
/// changed by a guest thread mid-run (its event waits for the device-addressed passes in flight,
/// then for a drain), and the same frames with no engine (`--plain`); with run 305's sets in mapped
/// memory (`--heap-sets`) each device-addressed pass after a bound one is `DS_WAIT` at its prepare,
/// and the frame submits, waits and completes before preparing it again.
#[test]
fn chained_dispatches_in_one_submission_leave_every_word_the_reference_computes() {
    let exe = build();
    let Some(text) = frames(
        &exe,
        &[
            "--frames",
            "10",
            "--frames-in-flight",
            "3",
            "--dispatches-per-frame",
            "30",
            "--lock-every",
            "4",
        ],
    ) else {
        return;
    };
    check_frames(&text, 10, "host-write", 30);
    let sum = summary(&text);
    assert!(number(sum, "waits") >= 1.0, "{sum}");
    assert!(number(sum, "drains") >= 1.0, "{sum}");
    // The guest made the region read-only mid-run: some frame's passes saw it so (their stores
    // there escaped: 12 a pass).
    let s = shape(30);
    assert!(
        frame_lines(&text)
            .iter()
            .any(|l| number(l, "escapes") as usize == 12 * s.device),
        "{text}"
    );
    // No engine: the host's own bindings, carries and write-back, the raw helper.
    let Some(text) = frames(&exe, &["--frames", "3", "--plain"]) else {
        return;
    };
    let sum = summary(&text);
    assert_eq!(field(sum, "mode"), "plain", "{sum}");
    assert_eq!(field(sum, "mismatches"), "0", "{sum}");
    assert_eq!(field(sum, "submissions_per_frame"), "1.00", "{sum}");
    for line in frame_lines(&text) {
        assert_eq!(field(line, "checks"), "ok", "{line}");
        assert_eq!(field(line, "refusals"), "0", "{line}");
    }
    assert!(text.contains("\n0 failures\n"), "{text}");
    // Copy holders over memory the device-addressed passes map: prepare says DS_WAIT, and the
    // frame splits its submission where it must.
    let Some(text) = frames(
        &exe,
        &[
            "--frames",
            "3",
            "--heap-sets",
            "--dispatches-per-frame",
            "30",
        ],
    ) else {
        return;
    };
    for line in frame_lines(&text) {
        assert_eq!(field(line, "checks"), "ok", "{line}");
        assert_eq!(field(line, "mismatches"), "0", "{line}");
        let submissions = number(line, "submissions");
        assert!(submissions > 1.0, "{line}");
        assert_eq!(number(line, "fence_waits"), submissions, "{line}");
        assert_eq!(field(line, "carries_holder"), "0", "{line}");
    }
    assert!(text.contains("prepare waited: "), "{text}");
    assert!(text.contains("\n0 failures\n"), "{text}");
}

/// `--resolution`: the frame's first device-addressed pass covers a screen (a lane a pixel, the
/// workgroups in rows of 8x8 tiles), every one of its words checked against the reference, and
/// timed between two timestamps; the same with the raw helper (`--plain`) and the instrumented
/// one, whose device log holds exactly the escapes predicted.
#[test]
fn the_screen_pass_covers_the_resolution_in_every_variant_and_is_timed() {
    let exe = build();
    for variant in ["--plain", "--header-less", "--instrumented"] {
        let mut args = vec![
            "--frames",
            "3",
            "--dispatches-per-frame",
            "20",
            "--resolution",
            "136x64",
        ];
        if variant != "--header-less" {
            args.push(variant);
        }
        let Some(text) = frames(&exe, &args) else {
            return;
        };
        let sum = summary(&text);
        assert_eq!(field(sum, "screen"), "136x64", "{sum}");
        let want = match variant {
            "--plain" => "raw",
            "--instrumented" => "instrumented",
            _ => "helper",
        };
        assert_eq!(field(sum, "screen_variant"), want, "{sum}");
        assert_eq!(field(sum, "mismatches"), "0", "{sum}");
        assert_eq!(number(sum, "screen_frames"), 2.0, "{sum}");
        assert!(number(sum, "screen_us_median") > 0.0, "{sum}");
        for line in frame_lines(&text) {
            assert_eq!(field(line, "checks"), "ok", "{line}");
            assert!(number(line, "screen_us") > 0.0, "{line}");
        }
        // 136x64 lanes' outputs are checked words: far more than the 128-lane passes leave.
        assert!(number(sum, "checked_words") > 3.0 * 136.0 * 64.0, "{sum}");
        assert!(text.contains("\n0 failures\n"), "{text}");
    }
    let Some((status, _, err)) = host_run(&exe, &["--frames", "1", "--resolution", "100x64"])
    else {
        return;
    };
    assert_eq!(status, Some(2), "{err}");
    assert!(err.contains("multiples of 8"), "{err}");
}

/// The host loses its device on purpose: on lavapipe a pass whose loop bound comes from a read
/// that escaped keeps the device busy, and the frame's fence wait times out after 2 s; the host
/// calls `ds_engine_device_lost` and prints the loss report, which must name every dispatch in
/// flight (two frames of them), the hung one device-addressed, with its program and history.
#[test]
fn the_host_that_loses_its_device_names_every_dispatch_in_flight() {
    let exe = build();
    let Some((status, text, err)) = host_run(
        &exe,
        &[
            "--frames",
            "6",
            "--lose-device",
            "--instrumented",
            "--dispatches-per-frame",
            "40",
        ],
    ) else {
        return;
    };
    assert_eq!(status, Some(4), "the device is lost: status 4\n{text}{err}");
    let lost: Vec<&str> = text.lines().filter(|l| l.starts_with("lost: ")).collect();
    assert!(
        lost.iter()
            .any(|l| l.contains("VK_TIMEOUT") || l.contains("VK_ERROR_DEVICE_LOST")),
        "{text}"
    );
    let in_flight_line = lost
        .iter()
        .find(|l| l.contains(" dispatches in flight"))
        .unwrap_or_else(|| panic!("{text}"));
    let n: usize = in_flight_line
        .trim_start_matches("lost: ")
        .split_whitespace()
        .next()
        .unwrap()
        .parse()
        .unwrap();
    let hung: u64 = lost
        .iter()
        .find_map(|l| l.split(" is dispatch ").nth(1))
        .and_then(|r| r.split_whitespace().next())
        .unwrap_or_else(|| panic!("no hung dispatch named:\n{text}"))
        .parse()
        .unwrap();
    let json = text
        .split("loss report:\n")
        .nth(1)
        .and_then(|r| r.split("\nend of loss report").next())
        .unwrap_or_else(|| panic!("no loss report:\n{text}"));
    let report: serde_json::Value = serde_json::from_str(json).unwrap();
    assert_eq!(report["schema"], "dispatchscope.device-loss/1", "{json}");
    let in_flight = report["in_flight"].as_array().unwrap();
    // Two frames of 40 and the hang pass.
    assert_eq!(in_flight.len(), n, "{json}");
    assert_eq!(n, 81, "{text}");
    let indexes: Vec<u64> = in_flight
        .iter()
        .map(|d| d["index"].as_u64().unwrap())
        .collect();
    assert!(
        indexes.windows(2).all(|w| w[1] == w[0] + 1),
        "every dispatch in flight, in order: {indexes:?}"
    );
    for d in in_flight {
        for key in ["index", "mode", "program", "history"] {
            assert!(d.get(key).is_some(), "{key} of {d}");
        }
        // The struct form carries no label: the report leaves it out.
        assert!(d["label"].is_null() || d["label"].is_string(), "{d}");
    }
    let hang = in_flight
        .iter()
        .find(|d| d["index"].as_u64() == Some(hung))
        .unwrap_or_else(|| panic!("dispatch {hung} is not in the report"));
    assert_eq!(hang["mode"], "device-addressed", "{hang}");
    assert_eq!(hang["program"], "0x74000bad0000", "{hang}");
    assert_eq!(hang["history"]["runs"], 0, "{hang}");
    // The walks that ran before: their program's history has its escapes (instrumented).
    let walk = in_flight
        .iter()
        .find(|d| d["program"] == "0x74005b854a00")
        .unwrap_or_else(|| panic!("no device-addressed walk in flight: {json}"));
    assert!(walk["history"]["runs"].as_u64().unwrap() > 0, "{walk}");
    let findings: Vec<&str> = report["findings"]
        .as_array()
        .unwrap()
        .iter()
        .filter_map(|f| f.as_str())
        .collect();
    assert!(
        findings
            .iter()
            .any(|f| f.contains(&format!("dispatch {hung} "))),
        "{findings:?}"
    );
    assert!(
        findings.iter().any(|f| f.contains("escaped")),
        "{findings:?}"
    );
    // The host exits without touching the device again (no summary); the layer said nothing.
    assert!(
        !text.lines().any(|l| l.starts_with("validation: ")),
        "{text}"
    );
}

/// A running host and the lines it prints, read on a thread so the test never blocks on it.
struct Running {
    child: Child,
    lines: mpsc::Receiver<String>,
}

impl Running {
    fn lines_within(&mut self, within: Duration) -> Vec<String> {
        let end = Instant::now() + within;
        let mut got = Vec::new();
        while let Some(left) = end.checked_duration_since(Instant::now()) {
            match self.lines.recv_timeout(left) {
                Ok(line) => got.push(line),
                Err(_) => break,
            }
        }
        got
    }
}

impl Drop for Running {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// Starts the host listening on an ephemeral port, running until killed, with `args`; its
/// address, or `None` where Vulkan is absent and not required.
///
/// The host runs its frames as at its defaults, many dispatches in flight: the tap sends each
/// report to the session that saw its prepare (live protocol 4).
fn listening(args: &[&str]) -> Option<(Running, String)> {
    let exe = build();
    let mut child = host(&exe)
        .args(["--listen", "127.0.0.1:0", "--frames", "0"])
        .args(args)
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    let stdout = child.stdout.take().unwrap();
    let (tx, lines) = mpsc::channel();
    std::thread::spawn(move || {
        for line in BufReader::new(stdout).lines().map_while(Result::ok) {
            if tx.send(line).is_err() {
                break;
            }
        }
    });
    let mut host = Running { child, lines };
    // The loader may speak first (through the host's messenger); the host says where it listens.
    let end = Instant::now() + Duration::from_secs(60);
    let first = std::iter::from_fn(|| {
        let left = end.checked_duration_since(Instant::now())?;
        host.lines.recv_timeout(left).ok()
    })
    .find(|l| l.starts_with("listening on "));
    let Some(first) = first else {
        let status = host.child.wait().unwrap();
        let mut err = String::new();
        if let Some(mut e) = host.child.stderr.take() {
            use std::io::Read as _;
            let _ = e.read_to_string(&mut err);
        }
        assert!(
            status.code() == Some(3) && !required(),
            "the host did not start ({status}): {err}"
        );
        eprintln!("skipped: {err}");
        return None;
    };
    let addr = first
        .strip_prefix("listening on ")
        .and_then(|r| r.split_whitespace().next())
        .unwrap_or_else(|| panic!("unexpected first line: {first}"))
        .to_owned();
    Some((host, addr))
}

#[test]
fn a_debugger_breaks_on_the_hosts_refusal_steps_and_detaches_and_the_host_runs_on() {
    // Instrumented, so that the escapes of its device-addressed pass are known to the engine (the
    // section complete decodes): the escape breakpoint stops there.
    let Some((mut host, addr)) = listening(&["--instrumented"]) else {
        return;
    };
    let out = Command::new(env!("CARGO_BIN_EXE_dispatchscope"))
        .args([
            "attach",
            &addr,
            "--break-on",
            "refusal",
            "--steps",
            "3",
            "--wait",
            "30",
        ])
        .output()
        .unwrap();
    let text = String::from_utf8_lossy(&out.stdout);
    assert!(
        out.status.success(),
        "attach failed:\n{text}{}",
        String::from_utf8_lossy(&out.stderr)
    );
    for want in [
        "program 0x400003d88400",
        "refused by O7",
        "program 0x74005b854a00",
        "device-addressed",
        "not private (M3)",
        "vulkan: ",
    ] {
        assert!(text.contains(want), "{want}:\n{text}");
    }
    // Again, to its next escape: the device-addressed pass (its stores to the shared region).
    let out = Command::new(env!("CARGO_BIN_EXE_dispatchscope"))
        .args(["attach", &addr, "--break-on", "escape", "--wait", "30"])
        .output()
        .unwrap();
    let text = String::from_utf8_lossy(&out.stdout);
    assert!(
        out.status.success(),
        "attach --break-on escape failed:\n{text}{}",
        String::from_utf8_lossy(&out.stderr)
    );
    assert!(text.contains("program 0x74005b854a00"), "{text}");
    // Detached: the host runs on, frame after frame, every check passing.
    let after: Vec<String> = host
        .lines_within(Duration::from_secs(3))
        .into_iter()
        .filter(|l| l.starts_with("frame "))
        .collect();
    assert!(after.len() > 3, "frames after detach: {after:?}");
    for line in &after {
        assert_eq!(field(line, "checks"), "ok", "{line}");
    }
    assert!(host.child.try_wait().unwrap().is_none(), "the host runs on");
}

/// Waits up to `within` for `child` to exit.
fn exits_within(child: &mut Child, within: Duration) -> Option<std::process::ExitStatus> {
    let end = Instant::now() + within;
    while Instant::now() < end {
        if let Some(status) = child.try_wait().unwrap() {
            return Some(status);
        }
        std::thread::sleep(Duration::from_millis(50));
    }
    None
}

/// `dispatchscope record` attached to the host, and the capture it writes.
fn recorder(addr: &str, dir: &Path) -> (Child, PathBuf) {
    let out = dir.join("host.dscap");
    let child = Command::new(env!("CARGO_BIN_EXE_dispatchscope"))
        .arg("record")
        .arg(addr)
        .arg("-o")
        .arg(&out)
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    (child, out)
}

/// The dispatches `explain --json` reads from a capture (every record whole, or it fails).
fn explained(capture: &Path) -> usize {
    let out = Command::new(env!("CARGO_BIN_EXE_dispatchscope"))
        .arg("explain")
        .arg(capture)
        .arg("--json")
        .output()
        .unwrap();
    assert!(
        out.status.success(),
        "explain {} failed: {}",
        capture.display(),
        String::from_utf8_lossy(&out.stderr)
    );
    let v: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
    v.get("dispatches")
        .and_then(|d| d.as_array())
        .map_or(0, Vec::len)
}

#[test]
fn killing_the_host_mid_frame_keeps_every_complete_record_and_the_recorder_exits() {
    let Some((mut host, addr)) = listening(&["--instrumented"]) else {
        return;
    };
    let dir = tempfile::tempdir().unwrap();
    let (mut rec, capture) = recorder(&addr, dir.path());
    // Frames go by with the recorder attached; then the host dies mid-frame, as a crash would.
    let frames = host
        .lines_within(Duration::from_secs(3))
        .into_iter()
        .filter(|l| l.starts_with("frame "))
        .count();
    assert!(frames > 0, "no frame ran with the recorder attached");
    host.child.kill().unwrap();
    host.child.wait().unwrap();
    let status = exits_within(&mut rec, Duration::from_secs(20));
    assert!(
        status.is_some(),
        "the recorder is stuck after the host died"
    );
    let n = explained(&capture);
    assert!(n >= 3, "the capture holds {n} dispatches");
}

#[test]
fn killing_the_debugger_mid_stream_leaves_the_host_running_and_a_capture_that_opens() {
    let Some((mut host, addr)) = listening(&[]) else {
        return;
    };
    let dir = tempfile::tempdir().unwrap();
    let (mut rec, capture) = recorder(&addr, dir.path());
    host.lines_within(Duration::from_secs(2));
    rec.kill().unwrap();
    rec.wait().unwrap();
    // The host runs on, every check passing, and the capture holds what was flushed.
    let after: Vec<String> = host
        .lines_within(Duration::from_secs(3))
        .into_iter()
        .filter(|l| l.starts_with("frame "))
        .collect();
    assert!(after.len() > 3, "frames after the debugger died: {after:?}");
    for line in &after {
        assert_eq!(field(line, "checks"), "ok", "{line}");
    }
    explained(&capture);
    // A new debugger attaches and steps.
    let out = Command::new(env!("CARGO_BIN_EXE_dispatchscope"))
        .args(["attach", &addr, "--steps", "2", "--wait", "30"])
        .output()
        .unwrap();
    assert!(
        out.status.success(),
        "a second attach failed: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    assert!(host.child.try_wait().unwrap().is_none(), "the host runs on");
}

/// The window attached to the host (the app's own code, in a kittest harness): the device-addressed
/// pass's instrumented section names its escapes by site, and the listing shows the guest's RDNA2
/// instruction at each escaping site's pc (the code the host handed over with
/// `ds_engine_add_program`); the bound pass's bindings, the table, the hand-off and write-back are
/// in their tabs.
#[test]
fn the_window_attached_shows_the_hosts_escapes_with_the_instruction_at_each_pc() {
    use dispatchscope::gui::{GuiApp, Settings};
    use dispatchscope_views::{Action, Tab};
    use egui_kittest::kittest::Queryable;
    let Some((_host, addr)) = listening(&["--instrumented"]) else {
        return;
    };
    let mut h = common::harness(GuiApp::new(Settings::default()));
    h.run();
    let ctx = h.ctx.clone();
    assert!(
        h.state_mut().attach(&ctx, &addr, None),
        "{:?}",
        h.state().shared.error
    );
    let deadline = Instant::now() + Duration::from_secs(30);
    let device = |a: &GuiApp| {
        let s = a.shared.session.as_ref()?;
        let rows: Vec<u64> = s.rows.iter().map(|r| r.program).collect();
        (0..rows.len()).rev().find(|&p| rows[p] == DEVICE_PROGRAM)
    };
    let pos = loop {
        h.step();
        if let Some(p) = device(h.state()) {
            break p;
        }
        assert!(
            Instant::now() < deadline,
            "no instrumented dispatch of the host arrived"
        );
        std::thread::sleep(Duration::from_millis(20));
    };
    h.state_mut().apply(Action::SelectDispatch(pos));
    let deadline = Instant::now() + Duration::from_secs(10);
    let report = loop {
        h.step();
        if let Some(r) = h
            .state()
            .shared
            .session
            .as_ref()
            .and_then(|s| s.reports.get(pos))
        {
            break r.clone();
        }
        assert!(Instant::now() < deadline, "the selected dispatch's report");
    };
    let section = report.instrumented.clone().unwrap();
    assert!(!section.escapes.is_empty(), "the host's escapes");
    // Site 6, the shared region's load, escapes every frame: the listing at its pc shows it.
    let pc = section
        .escapes
        .iter()
        .find(|e| e.site == 6)
        .map(|e| e.pc)
        .expect("site 6 escaped");
    let sel = h.state().shared.sel.clone();
    h.state_mut().listing.show_pc(pc, &sel);
    h.run_steps(4);
    assert!(
        h.query_all_by_label_contains("global_load_dword v28, v[26:27], off")
            .next()
            .is_some(),
        "the listing shows the instruction at the escaping site's pc {pc:#x}"
    );
    h.state_mut().apply(Action::ShowTab(Tab::Pass));
    h.run_steps(3);
    assert!(
        h.query_all_by_label_contains(&format!("{pc:#x}"))
            .next()
            .is_some(),
        "the Pass tab names the pc"
    );
    // The chunk table the pass looked up (T1–T3).
    // The table comes from the checkpoint that follows the dispatch on the wire, which may be
    // stored a few frames after its row (on a loaded machine, later still): the window reads it
    // when it arrives.
    h.state_mut().apply(Action::ShowTab(Tab::ChunkTable));
    let deadline = Instant::now() + Duration::from_secs(10);
    while h
        .query_all_by_label_contains("0x9e3779b97f4a7c15")
        .next()
        .is_none()
        && Instant::now() < deadline
    {
        h.step();
        std::thread::sleep(Duration::from_millis(20));
    }
    assert!(
        h.query_all_by_label_contains("0x9e3779b97f4a7c15")
            .next()
            .is_some(),
        "the Chunk table tab shows the table's multiplier"
    );
    // The After tab: the marked chunk handed off (C1, C2) and the pages it noted written.
    h.state_mut().apply(Action::ShowTab(Tab::After));
    h.run_steps(3);
    for want in ["Marked chunks (C1)", "Pages noted written (C2, D824)"] {
        assert!(
            h.query_all_by_label_contains(want).next().is_some(),
            "the After tab shows {want}"
        );
    }
    // The bound pass (run 305's shapes): its bindings, and its write-back (O8).
    let bound = {
        let s = h.state().shared.session.as_ref().unwrap();
        let rows: Vec<u64> = s.rows.iter().map(|r| r.program).collect();
        (0..rows.len())
            .rev()
            .find(|&p| rows[p] == 0x4000_03e1_9200)
            .expect("a bound dispatch")
    };
    h.state_mut().apply(Action::SelectDispatch(bound));
    h.state_mut().apply(Action::ShowTab(Tab::Bindings));
    for _ in 0..50 {
        h.step();
        if h.query_all_by_label_contains("0xe400").next().is_some() {
            break;
        }
        std::thread::sleep(Duration::from_millis(20));
    }
    assert!(
        h.query_all_by_label_contains("0xe400").next().is_some(),
        "the Bindings tab shows slot 1 bound 0xe400 into its holder"
    );
    h.state_mut().apply(Action::ShowTab(Tab::After));
    h.run_steps(3);
    assert!(
        h.query_all_by_label_contains("Write-back (O8)")
            .next()
            .is_some(),
        "the After tab shows the bound pass's write-back"
    );
}

/// The real binary's window under Xvfb, attached to the host with `--attach`: it draws the live
/// session (many colours, not a blank frame) and keeps running; the screenshot is kept in
/// `target/tmp/` for a person to look at.
#[test]
fn the_real_window_attaches_to_the_host_under_xvfb() {
    let xvfb_there = Command::new("Xvfb").arg("-help").output().is_ok();
    if !xvfb_there {
        assert!(
            !required(),
            "Xvfb is missing (the test command installs it)"
        );
        return;
    }
    let Some((_host, addr)) = listening(&["--instrumented"]) else {
        return;
    };
    let display = format!(":{}", 200 + std::process::id() % 500);
    let mut xvfb = Command::new("Xvfb")
        .args([&display, "-screen", "0", "1600x1000x24", "-nolisten", "tcp"])
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .spawn()
        .unwrap();
    std::thread::sleep(Duration::from_millis(800));
    let config = tempfile::tempdir().unwrap();
    let mut window = Command::new(env!("CARGO_BIN_EXE_dispatchscope"))
        .args(["--attach", &addr])
        .env("DISPLAY", &display)
        .env("HOME", config.path())
        .env("XDG_CONFIG_HOME", config.path())
        .env("XDG_DATA_HOME", config.path())
        .stdout(Stdio::null())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    // Cargo's folder for test files (`target/tmp`, wherever the target folder is).
    let shot = Path::new(env!("CARGO_TARGET_TMPDIR")).join("emulator-host-window.png");
    std::fs::create_dir_all(shot.parent().unwrap()).unwrap();
    let mut colours = 0u64;
    let deadline = Instant::now() + Duration::from_secs(60);
    while Instant::now() < deadline && colours <= 64 {
        std::thread::sleep(Duration::from_millis(500));
        assert!(
            window.try_wait().unwrap().is_none(),
            "the window exited early"
        );
        let taken = Command::new("import")
            .args(["-display", &display, "-window", "root"])
            .arg(&shot)
            .status()
            .is_ok_and(|s| s.success());
        if !taken {
            continue;
        }
        colours = Command::new("convert")
            .arg(&shot)
            .args(["-format", "%k", "info:"])
            .output()
            .ok()
            .and_then(|o| String::from_utf8_lossy(&o.stdout).trim().parse().ok())
            .unwrap_or(0);
    }
    // SIGTERM, as a user's closing it: the window removes its live recording's files (a kill
    // would leave them in the temporary folder).
    let _ = Command::new("kill")
        .args(["-TERM", &window.id().to_string()])
        .status();
    let closed = Instant::now() + Duration::from_secs(10);
    while window.try_wait().unwrap().is_none() && Instant::now() < closed {
        std::thread::sleep(Duration::from_millis(50));
    }
    let _ = window.kill();
    let _ = window.wait();
    let _ = xvfb.kill();
    let _ = xvfb.wait();
    assert!(
        colours > 64,
        "the attached window drew {colours} colours ({})",
        shot.display()
    );
    eprintln!(
        "the attached window: {colours} colours in {}",
        shot.display()
    );
}
