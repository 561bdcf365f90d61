//! The emulator-shaped host (`examples/emulator-host`, issue 27): built with CMake against the C
//! ABI's header and library, its modules assembled with spirv-as and linked with spirv-link against
//! the helper library this crate's `dispatchscope spirv-helper` writes, run for a few frames on a
//! Vulkan device it creates itself (lavapipe in CI) with the validation layer on, and with a `PATH`
//! of one empty folder: what a player's machine has, its GPU driver and nothing else (issue 40).
//!
//! What must hold, frame after frame: the bound pass (run 305's shapes) leaves what the host's CPU
//! computes; O7 refuses the misaligned member; the device-addressed pass's stores are in the host's
//! own pages before `ds_engine_complete`, and its escapes are exactly the predicted ones (the page
//! the guest made read-only on odd frames, the shared memfd region, left out by name); C2's
//! hand-off, not a SIGSEGV, drops the texture over the output; the validation layer says nothing.
//! The host checks each of these itself (`checks=ok`); this test reads its lines and checks the
//! counts again. And `dispatchscope attach` breaks on its O7 refusal, steps its own dispatches,
//! detaches, and the host runs on with every check passing.
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

/// Runs the host; `None` where Vulkan (or its validation layer) is absent and not required.
fn frames(exe: &Path, args: &[&str]) -> Option<String> {
    let out = host(exe)
        .args(["--validation"])
        .args(args)
        .output()
        .unwrap();
    let text = String::from_utf8_lossy(&out.stdout).into_owned();
    let err = String::from_utf8_lossy(&out.stderr);
    if out.status.code() == Some(3) {
        assert!(
            !required(),
            "DISPATCHSCOPE_REQUIRE_VULKAN=1, but the host cannot run: {err}"
        );
        eprintln!("skipped: {err}");
        return None;
    }
    assert!(
        out.status.success(),
        "emulator-host {args:?} failed ({}):\n{text}{err}",
        out.status
    );
    Some(text)
}

/// The `key=value` field of a frame line.
fn field<'a>(line: &'a str, key: &str) -> &'a str {
    line.split_whitespace()
        .find_map(|w| w.strip_prefix(&format!("{key}=")))
        .unwrap_or_else(|| panic!("no {key}= in {line}"))
}

fn frame_lines(text: &str) -> Vec<&str> {
    text.lines().filter(|l| l.starts_with("frame ")).collect()
}

/// `holder` is how the texture over the bound pass's written holder loses its trust: by O8's
/// write-back through the host (`host-write`), or, where the host imported the holder's own pages,
/// by the stores its masks show (`bound-store`).
fn check_frames(text: &str, n: usize, holder: &str) {
    let lines = frame_lines(text);
    assert_eq!(lines.len(), n, "{text}");
    for (i, line) in lines.iter().enumerate() {
        let odd = i % 2 == 1;
        assert!(line.starts_with(&format!("frame {i}: ")), "{line}");
        assert_eq!(field(line, "checks"), "ok", "{text}");
        assert_eq!(field(line, "dispatches"), "2", "{line}");
        assert_eq!(field(line, "refusals"), "1", "O7: {line}");
        // Four lanes: the shared load and store always escape; the read-only page's store on odd
        // frames only.
        let escapes = if odd { "12" } else { "8" };
        assert_eq!(field(line, "escapes"), escapes, "{line}");
        assert_eq!(field(line, "predicted"), escapes, "{line}");
        let dropped = field(line, "textures_dropped");
        let holder = format!("holder-tex:{holder}");
        for want in ["out-tex:hand-off", "cpu-tex:cpu-fault", holder.as_str()] {
            assert!(dropped.contains(want), "{want}: {line}");
        }
        assert!(
            !dropped.contains("bvh-tex") && !dropped.contains("idle-tex"),
            "{line}"
        );
        let hand_offs: u32 = field(line, "hand_offs").parse().unwrap();
        assert!(hand_offs >= if odd { 1 } else { 2 }, "{line}");
    }
    assert!(
        text.contains("left out by name: ") && text.contains("not-private"),
        "the shared region is left out by name:\n{text}"
    );
    assert!(text.contains("validation messages: 0\n"), "{text}");
    assert!(text.contains("\n0 failures\n"), "{text}");
}

#[test]
fn the_emulator_host_runs_its_own_passes_through_the_host_path() {
    let exe = build();
    let Some(text) = frames(&exe, &["--frames", "3"]) else {
        return;
    };
    check_frames(&text, 3, "host-write");
    assert!(text.contains("validation layer on"), "{text}");
    let Some(text) = frames(&exe, &["--frames", "2", "--instrumented"]) else {
        return;
    };
    check_frames(&text, 2, "host-write");
    assert!(
        text.contains("instrumented: 8 escapes in the device's log"),
        "{text}"
    );
    assert!(
        text.contains("instrumented: 12 escapes in the device's log"),
        "{text}"
    );
    // The helper's header form: the push block carries one 64-bit value for dispatchscope (the
    // header's address, words 30–31); the host fills words 16–29 with garbage.
    let Some(text) = frames(&exe, &["--frames", "2", "--header"]) else {
        return;
    };
    check_frames(&text, 2, "host-write");
    assert!(text.contains("header-form helper"), "{text}");
    // The holders imported zero-copy from the guest's own pages, left out of the completion.
    let Some(text) = frames(
        &exe,
        &["--frames", "2", "--import-holders", "--guest-mib", "32"],
    ) else {
        return;
    };
    check_frames(&text, 2, "bound-store");
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
