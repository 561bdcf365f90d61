//! The C++ target (`examples/cpp-target`): built with CMake against the C ABI's header and
//! library, run on a Vulkan device it creates itself (lavapipe in CI), attached to with
//! `dispatchscope attach`, broken on a refusal, detached, and seen to keep running.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::io::{BufRead, BufReader};
use std::path::{Path, PathBuf};
use std::process::{Child, ChildStdout, Command, Stdio};
use std::sync::mpsc;
use std::time::{Duration, Instant};

fn repo() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("..")
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
        panic!("{what} does not run (the test command installs cmake and g++): {e}")
    });
    assert!(
        out.status.success(),
        "{what} failed:\n{}{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
}

/// Builds the target once per test process.
fn build() -> PathBuf {
    let build =
        std::env::temp_dir().join(format!("dispatchscope-cpp-target-{}", std::process::id()));
    run(
        Command::new("cmake")
            .arg("-S")
            .arg(repo().join("examples/cpp-target"))
            .arg("-B")
            .arg(&build)
            .arg(format!("-DDISPATCHSCOPE_LIB_DIR={}", capi_dir().display()))
            .arg("-DCMAKE_BUILD_TYPE=Debug"),
        "cmake (configure)",
    );
    run(
        Command::new("cmake").arg("--build").arg(&build),
        "cmake --build",
    );
    build.join("cpp-target")
}

/// A running target and the lines it prints, read on a thread so the test never blocks on it.
struct Target {
    child: Child,
    lines: mpsc::Receiver<String>,
}

impl Target {
    fn start(exe: &Path, extra: &[&str]) -> (Self, String) {
        // cargo's own LD_LIBRARY_PATH may name an older copy of the cdylib (`target/<profile>`),
        // and it overrides the rpath: name the one built for this test (as `c_abi.rs` does).
        let mut child = Command::new(exe)
            .env("LD_LIBRARY_PATH", capi_dir())
            .args(["--listen", "127.0.0.1:0"])
            .args(extra)
            .stdout(Stdio::piped())
            .stderr(Stdio::inherit())
            .spawn()
            .unwrap();
        let stdout: ChildStdout = child.stdout.take().unwrap();
        let (tx, lines) = mpsc::channel();
        std::thread::spawn(move || {
            for line in BufReader::new(stdout).lines().map_while(Result::ok) {
                if tx.send(line).is_err() {
                    break;
                }
            }
        });
        let mut t = Self { child, lines };
        let first = t
            .next_line(Duration::from_secs(60))
            .expect("the target says where it listens");
        let addr = first
            .strip_prefix("listening on ")
            .and_then(|r| r.split_whitespace().next())
            .unwrap_or_else(|| panic!("unexpected first line: {first}"))
            .to_owned();
        (t, addr)
    }

    fn next_line(&mut self, within: Duration) -> Option<String> {
        self.lines.recv_timeout(within).ok()
    }

    /// The number of the latest frame printed within `within`.
    fn latest_frame(&mut self, within: Duration) -> Option<u64> {
        let end = Instant::now() + within;
        let mut latest = None;
        while let Some(left) = end.checked_duration_since(Instant::now()) {
            match self.lines.recv_timeout(left) {
                Ok(line) => {
                    if let Some(n) = line
                        .strip_prefix("frame ")
                        .and_then(|r| r.split(':').next())
                        .and_then(|n| n.parse().ok())
                    {
                        latest = Some(n);
                    }
                }
                Err(_) => break,
            }
        }
        latest
    }
}

impl Drop for Target {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

fn attach_breaks_on_a_refusal_and_the_target_keeps_running(
    exe: &Path,
    extra: &[&str],
    device: &str,
) {
    let (mut target, addr) = Target::start(exe, extra);
    let before = target.latest_frame(Duration::from_millis(500));
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
    assert!(
        text.contains("O7"),
        "the breakpoint stops at the O7 refusal:\n{text}"
    );
    assert!(text.contains("refused"), "{text}");
    assert!(
        text.contains(device),
        "the reports name the device {device}:\n{text}"
    );
    // Detached: the target runs on, frame after frame.
    let after = target
        .latest_frame(Duration::from_secs(3))
        .expect("the target prints frames after the debugger detached");
    assert!(
        before.is_none_or(|b| after > b + 3),
        "frames after detach: {before:?} then {after}"
    );
    assert!(
        target.child.try_wait().unwrap().is_none(),
        "the target is still running"
    );
}

#[test]
fn the_cpp_target_on_its_own_vulkan_device_is_attached_to_and_keeps_running() {
    let exe = build();
    // The backend's reports name the Vulkan device ("vulkan: llvmpipe …" on lavapipe).
    attach_breaks_on_a_refusal_and_the_target_keeps_running(&exe, &[], "vulkan: ");
    attach_breaks_on_a_refusal_and_the_target_keeps_running(&exe, &["--cpu"], "cpu-reference");
}
