//! The emulator-shaped host (`examples/emulator-host`, issue 27): built with CMake against the C
//! ABI's header and library, its modules assembled with spirv-as and linked with spirv-link against
//! the helper library this crate's `dispatchscope spirv-helper` writes, run for a few frames on a
//! Vulkan device it creates itself (lavapipe in CI) with the validation layer on.
//!
//! What must hold, frame after frame: the bound pass (run 305's shapes) leaves what the host's CPU
//! computes; O7 refuses the misaligned member; the device-addressed pass's stores are in the host's
//! own pages before `ds_engine_complete`, and its escapes are exactly the predicted ones (the page
//! the guest made read-only on odd frames, the shared memfd region, left out by name); C2's
//! hand-off, not a SIGSEGV, drops the texture over the output; the validation layer says nothing.
//! The host checks each of these itself (`checks=ok`); this test reads its lines and checks the
//! counts again.
//!
//! Where `DISPATCHSCOPE_REQUIRE_VULKAN=1` (CI), a machine with no Vulkan device or no validation
//! layer fails this test.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::path::{Path, PathBuf};
use std::process::Command;

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

fn build() -> PathBuf {
    let build =
        std::env::temp_dir().join(format!("dispatchscope-emulator-host-{}", std::process::id()));
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

/// Runs the host; `None` where Vulkan (or its validation layer) is absent and not required.
fn frames(exe: &Path, args: &[&str]) -> Option<String> {
    let out = Command::new(exe)
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

fn check_frames(text: &str, n: usize) {
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
        for want in ["out-tex:hand-off", "cpu-tex:cpu-fault", "holder-tex:host-write"] {
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
    check_frames(&text, 3);
    assert!(text.contains("validation layer on"), "{text}");
    let Some(text) = frames(&exe, &["--frames", "2", "--instrumented"]) else {
        return;
    };
    check_frames(&text, 2);
    assert!(text.contains("instrumented: 8 escapes in the device's log"), "{text}");
    assert!(text.contains("instrumented: 12 escapes in the device's log"), "{text}");
}
