//! The C ABI: from C (bad input, the host path, ABI version 4's checks, the Vulkan engines on the
//! program's own device with nothing outside the library; compiled with the system's C compiler
//! against the committed header and the cdylib), and from Rust through the
//! same `extern "C"` functions (the same report as the Rust API for every shipped sample; a
//! capture written through it reads back).
#![allow(clippy::unwrap_used, clippy::expect_used, unsafe_code)]

use std::ffi::CStr;
use std::path::{Path, PathBuf};
use std::process::Command;

use dispatchscope_capi::*;
use dispatchscope_formats::sample::{Sample, Step};
use dispatchscope_formats::session::{CaptureFile, Opened, open};
use dispatchscope_formats::shipped::SAMPLES;

/// The folder cargo put this crate's cdylib in: `target/<profile>` when this package is tested
/// alone, `target/<profile>/deps` (beside this test) when it is built as another's dependency.
fn lib_dir() -> PathBuf {
    let exe = std::env::current_exe().unwrap();
    let deps = exe.parent().unwrap();
    [deps, deps.parent().unwrap()]
        .into_iter()
        .find(|d| d.join("libdispatchscope_capi.so").exists())
        .unwrap_or(deps)
        .to_path_buf()
}

fn message() -> String {
    // SAFETY: ds_last_error always returns a valid NUL-terminated string.
    unsafe { CStr::from_ptr(ds_last_error()) }
        .to_string_lossy()
        .into_owned()
}

fn ok(status: ds_status) {
    assert_eq!(status, ds_status::DS_OK, "{}", message());
}

fn required() -> bool {
    std::env::var("DISPATCHSCOPE_REQUIRE_VULKAN").is_ok_and(|v| v == "1")
}

/// How a C program is built and run.
#[derive(Default)]
struct Run {
    /// Linked with the Vulkan loader (`-lvulkan`; apt: libvulkan-dev): the program makes its own
    /// device, and exits 3 where there is none.
    vulkan: bool,
    /// Run with `PATH` naming one empty folder: nothing the program (or the library) could start
    /// by name is found.
    empty_path: bool,
}

/// Builds `tests/c/NAME.c` with the system's C compiler against the committed header and the
/// cdylib, runs it, and returns what it printed (it must exit 0).
fn run_c(name: &str) -> String {
    run_c_with(name, &Run::default()).expect("a program without Vulkan runs")
}

/// [`run_c`] as `how` says; `None` where a Vulkan program finds no device and Vulkan is not
/// required (`DISPATCHSCOPE_REQUIRE_VULKAN=1`, as in CI, fails instead).
fn run_c_with(name: &str, how: &Run) -> Option<String> {
    let dir = tempfile::tempdir().unwrap();
    let manifest = Path::new(env!("CARGO_MANIFEST_DIR"));
    let lib = lib_dir();
    assert!(
        lib.join("libdispatchscope_capi.so").exists(),
        "the cdylib is not in {}",
        lib.display()
    );
    let exe = dir.path().join(name);
    let cc = std::env::var("CC").unwrap_or_else(|_| "cc".into());
    let built = Command::new(&cc)
        .args(["-std=c11", "-Wall", "-Wextra", "-Werror", "-pthread", "-o"])
        .arg(&exe)
        .arg(manifest.join(format!("tests/c/{name}.c")))
        .arg("-I")
        .arg(manifest.join("include"))
        .arg("-L")
        .arg(&lib)
        .arg("-ldispatchscope_capi")
        .args(how.vulkan.then_some("-lvulkan"))
        .arg(format!("-Wl,-rpath,{}", lib.display()))
        .output()
        .unwrap_or_else(|e| panic!("the C compiler `{cc}` (apt: gcc) does not run: {e}"));
    assert!(
        built.status.success(),
        "{name}.c does not build:\n{}",
        String::from_utf8_lossy(&built.stderr)
    );
    // cargo's own LD_LIBRARY_PATH may name an older copy of the cdylib (`target/<profile>`), and it
    // overrides the rpath: name the one built for this test.
    let empty = tempfile::tempdir().unwrap();
    let mut cmd = Command::new(&exe);
    cmd.env("LD_LIBRARY_PATH", &lib);
    if how.empty_path {
        cmd.env("PATH", empty.path());
    }
    let run = cmd.output().unwrap();
    let out = String::from_utf8_lossy(&run.stdout).into_owned();
    if how.vulkan && run.status.code() == Some(3) {
        assert!(
            !required(),
            "DISPATCHSCOPE_REQUIRE_VULKAN=1, but {name} found no Vulkan device:\n{out}"
        );
        eprintln!("skipped: {out}");
        return None;
    }
    assert!(
        run.status.success(),
        "{name} failed:\n{out}{}",
        String::from_utf8_lossy(&run.stderr)
    );
    assert!(out.ends_with("0 failures\n"), "{out}");
    Some(out)
}

#[test]
fn bad_input_from_c_is_a_status_and_a_message() {
    let out = run_c("bad_input");
    assert!(out.contains("destroy again: status 2"), "{out}");
}

/// The host path from C: real pages, struct events, prepare and complete, and its misuse.
#[test]
fn the_host_path_from_c() {
    let out = run_c("host_path");
    assert!(out.contains("ok complete run 305"), "{out}");
    assert!(
        out.contains("ok the shared pages are refused by name"),
        "{out}"
    );
    assert!(
        out.contains("ok the lazy run is left out, naming the callback"),
        "{out}"
    );
}

/// Nothing but what the device wrote, from C (issue 39): a guest thread's increments between and
/// beside the device's words survive 10^4 dispatches (by `write_runs` and by `write`); M5's
/// `DS_WAIT`; a refused write-back word is `DS_HOST_CALLBACK` and named in the report; a write
/// without bytes stays one.
#[test]
fn nothing_but_what_the_device_wrote_from_c() {
    let out = run_c("integrity");
    assert!(
        out.contains("ok no increment lost and every device word in place: write_runs"),
        "{out}"
    );
    assert!(
        out.contains("ok no increment lost and every device word in place: write:"),
        "{out}"
    );
    assert!(
        out.contains("ok release while prepared: status 14"),
        "{out}"
    );
}

/// ABI version 4 from C (issue 39): a wrong `size` in `ds_limits`, `ds_dispatch`, `ds_slot` and
/// `ds_vulkan_device` is `DS_ABI_MISMATCH`; unknown flag bits and non-zero reserved fields are
/// `DS_BAD_INPUT`; a write callback calling back into its own engine gets `DS_ORDER` and the
/// outer call finishes; two threads' report pointers each stay valid while the other calls.
#[test]
fn abi_version_4_from_c() {
    let out = run_c("abi_v4");
    for line in [
        "ok create host with a ds_limits of size 8",
        "ok prepare a ds_dispatch of size 4",
        "ok prepare with slots[1] of another size",
        "ok create vulkan with a short ds_vulkan_device",
        "ok an event with unknown flag bits",
        "ok an event with reserved 7",
        "ok ds_engine_apply from inside the write callback is DS_ORDER",
        "ok complete run 305 (its write callback calls back)",
        "ok each thread's report pointer holds its report",
    ] {
        assert!(out.contains(line), "{line:?} is missing:\n{out}");
    }
}

/// Nothing outside the library at run time (issue 40): on a player's machine an emulator has its
/// GPU driver and nothing else. From C, with `PATH` naming one empty folder and `execve` refused
/// by the program's own seccomp filter, an engine is made on the program's own Vulkan device
/// (`ds_engine_create_vulkan_host`, which ran spirv-val before and failed there: "failed to spawn
/// executable"), a bound and a device-addressed dispatch go prepare and complete over its own
/// pages, and `ds_engine_create_vulkan`'s replay runs a dispatch's accesses on the device.
#[test]
fn the_vulkan_engines_run_from_c_with_nothing_outside_the_library() {
    let how = Run {
        vulkan: true,
        empty_path: true,
    };
    let Some(out) = run_c_with("vulkan_host", &how) else {
        return;
    };
    for line in [
        "ok PATH finds no SPIRV-Tools executable",
        "ok execve is refused",
        "ok create vulkan host: status 0",
        "ok the write-back word is in the program's page",
        "ok the report says device-addressed",
        "ok create vulkan: status 0",
        "ok the replay's store is in guest memory",
    ] {
        assert!(out.contains(line), "{line:?} is missing:\n{out}");
    }
}

/// Replays `sample` through the C ABI's JSON functions and returns each dispatch's report JSON.
fn through_the_c_abi(sample: &Sample) -> Vec<serde_json::Value> {
    let limits = serde_json::to_vec(&sample.device).unwrap();
    let mut engine: ds_engine = 0;
    // SAFETY: valid pointers and lengths for the call.
    ok(unsafe { ds_engine_create_json(limits.as_ptr(), limits.len(), &mut engine) });
    let mut reports = Vec::new();
    let mut loaded = false;
    for step in &sample.steps {
        if !loaded && matches!(step, Step::Dispatch(_)) {
            for c in &sample.contents {
                // SAFETY: as above.
                ok(unsafe {
                    ds_engine_load_contents(engine, c.address, c.bytes.as_ptr(), c.bytes.len())
                });
            }
            loaded = true;
        }
        match step {
            Step::Event(e) => {
                let json = serde_json::to_vec(e).unwrap();
                // SAFETY: as above.
                ok(unsafe { ds_engine_apply_json(engine, json.as_ptr(), json.len()) });
            }
            Step::Dispatch(d) => {
                let json = serde_json::to_vec(&**d).unwrap();
                // SAFETY: as above.
                ok(unsafe { ds_engine_dispatch_json(engine, json.as_ptr(), json.len()) });
                let mut out = std::ptr::null();
                let mut len = 0;
                // SAFETY: as above.
                ok(unsafe { ds_engine_report_json(engine, &mut out, &mut len) });
                // SAFETY: valid until this thread's next ds_engine_report_json.
                let text = unsafe { CStr::from_ptr(out) }.to_str().unwrap();
                assert_eq!(text.len(), len);
                reports.push(serde_json::from_str(text).unwrap());
            }
        }
    }
    ok(ds_engine_destroy(engine));
    reports
}

#[test]
fn every_shipped_sample_reports_the_same_through_the_c_abi_as_through_rust() {
    for (name, text) in SAMPLES {
        let sample = Sample::from_json(text).unwrap();
        let rust: Vec<serde_json::Value> = sample
            .run()
            .unwrap()
            .iter()
            .map(|r| serde_json::to_value(r).unwrap())
            .collect();
        assert!(!rust.is_empty(), "{name} has no dispatch");
        assert_eq!(through_the_c_abi(&sample), rust, "{name}");
    }
}

#[test]
fn the_struct_form_plans_as_the_json_form_does() {
    let mut limits = std::mem::MaybeUninit::<ds_limits>::uninit();
    // SAFETY: valid out-pointer.
    ok(unsafe { ds_limits_default(limits.as_mut_ptr()) });
    // SAFETY: ds_limits_default filled it.
    let limits = unsafe { limits.assume_init() };
    let mut engine: ds_engine = 0;
    // SAFETY: valid pointers.
    ok(unsafe { ds_engine_create(&limits, &mut engine) });
    // Two written slots overlapping by 0x40 (O1: one holder), and a third read-only apart.
    let slot = |slot, base, size, flags| ds_slot {
        size: size_of::<ds_slot>() as u32,
        slot,
        flags,
        base,
        size_bytes: size,
        alias_of: DS_NO_ALIAS,
        format: DS_FORMAT_NONE,
        stride_bytes: 0,
        base_source: DS_BASE_DESCRIPTOR,
        base_word: 0,
    };
    let w = DS_SLOT_WRITTEN | DS_SLOT_RESOLVED;
    let slots = [
        slot(0, 0x10000, 0x100, w),
        slot(1, 0x100c0, 0x100, w),
        slot(2, 0x20000, 0x40, DS_SLOT_RESOLVED),
    ];
    let push = [7u32, 8];
    let d = ds_dispatch {
        size: size_of::<ds_dispatch>() as u32,
        program: 0x4000,
        kind: 0,
        reasons: 0,
        slots: slots.as_ptr(),
        n_slots: slots.len(),
        push: push.as_ptr(),
        n_push: push.len(),
    };
    // SAFETY: valid pointers and counts.
    ok(unsafe { ds_engine_dispatch(engine, &d) });
    let mut out = std::ptr::null();
    // SAFETY: valid out-pointer; null len is allowed.
    ok(unsafe { ds_engine_report_json(engine, &mut out, std::ptr::null_mut()) });
    // SAFETY: valid until this thread's next ds_engine_report_json.
    let from_struct: serde_json::Value =
        serde_json::from_str(unsafe { CStr::from_ptr(out) }.to_str().unwrap()).unwrap();
    let json = serde_json::json!({
        "program": "0x4000",
        "push": [7, 8],
        "slots": [
            {"slot": 0, "base": "0x10000", "size_bytes": "0x100", "written": true},
            {"slot": 1, "base": "0x100c0", "size_bytes": "0x100", "written": true},
            {"slot": 2, "base": "0x20000", "size_bytes": "0x40"},
        ],
    })
    .to_string();
    // SAFETY: valid pointer and length.
    ok(unsafe { ds_engine_dispatch_json(engine, json.as_ptr(), json.len()) });
    // SAFETY: as above.
    ok(unsafe { ds_engine_report_json(engine, &mut out, std::ptr::null_mut()) });
    // SAFETY: as above.
    let mut from_json: serde_json::Value =
        serde_json::from_str(unsafe { CStr::from_ptr(out) }.to_str().unwrap()).unwrap();
    // The second dispatch is the engine's second: only its number differs.
    from_json["index"] = from_struct["index"].clone();
    assert_eq!(from_struct, from_json);
    // O1: the two overlapping written slots are one set: slot 0 holds it, slot 1 at 0xc0 (O6).
    let sets = from_struct["sets"].as_array().unwrap();
    assert_eq!(sets.len(), 1, "{from_struct:#}");
    assert_eq!(sets[0]["members"][0]["slot"], 1, "{from_struct:#}");
    assert_eq!(sets[0]["members"][0]["offset"], "0xc0", "{from_struct:#}");
    let mut mode = ds_mode::DS_MODE_REFUSED;
    // SAFETY: valid out-pointer.
    ok(unsafe { ds_engine_report_mode(engine, &mut mode) });
    assert_eq!(mode, ds_mode::DS_MODE_BOUND);
    let mut refusals = 99;
    // SAFETY: valid out-pointer.
    ok(unsafe { ds_engine_report_refusals(engine, &mut refusals) });
    assert_eq!(refusals, 0);
    ok(ds_engine_destroy(engine));
}

#[test]
fn a_capture_begun_mid_session_replays_to_the_same_reports() {
    let sample = Sample::from_json(
        dispatchscope_formats::shipped::sample_text("run305-overlap.json").unwrap(),
    )
    .unwrap();
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("through-capi.dscap");
    let limits = serde_json::to_vec(&sample.device).unwrap();
    let mut engine: ds_engine = 0;
    // SAFETY: valid pointers.
    ok(unsafe { ds_engine_create_json(limits.as_ptr(), limits.len(), &mut engine) });
    for c in &sample.contents {
        // SAFETY: valid pointers.
        ok(unsafe { ds_engine_load_contents(engine, c.address, c.bytes.as_ptr(), c.bytes.len()) });
    }
    let c_path = std::ffi::CString::new(path.to_str().unwrap()).unwrap();
    let mut begun = false;
    let mut expected = Vec::new();
    for step in &sample.steps {
        // Begin after the first event, so the snapshot has something to rebuild.
        if !begun && matches!(step, Step::Dispatch(_)) {
            // SAFETY: valid strings.
            ok(unsafe { ds_engine_capture_begin(engine, c_path.as_ptr(), std::ptr::null()) });
            begun = true;
        }
        let json = match step {
            Step::Event(e) => serde_json::to_vec(e).unwrap(),
            Step::Dispatch(d) => serde_json::to_vec(&**d).unwrap(),
        };
        match step {
            // SAFETY: valid pointers.
            Step::Event(_) => {
                ok(unsafe { ds_engine_apply_json(engine, json.as_ptr(), json.len()) })
            }
            Step::Dispatch(_) => {
                // SAFETY: valid pointers.
                ok(unsafe { ds_engine_dispatch_json(engine, json.as_ptr(), json.len()) });
                let mut out = std::ptr::null();
                // SAFETY: valid out-pointer.
                ok(unsafe { ds_engine_report_json(engine, &mut out, std::ptr::null_mut()) });
                // SAFETY: valid until this thread's next ds_engine_report_json.
                let v: serde_json::Value =
                    serde_json::from_str(unsafe { CStr::from_ptr(out) }.to_str().unwrap()).unwrap();
                expected.push(v["mode"].clone());
            }
        }
    }
    ok(ds_engine_destroy(engine)); // ends the capture: its index written
    let Opened::Capture(mut file) = open(&path).unwrap() else {
        panic!("not a capture")
    };
    let file: &mut CaptureFile = &mut file;
    assert_eq!(file.n_dispatches(), expected.len());
    let (replayed, recorded) = file.to_sample().unwrap();
    let modes: Vec<serde_json::Value> = replayed
        .run()
        .unwrap()
        .iter()
        .map(|r| serde_json::to_value(r.mode).unwrap())
        .collect();
    assert_eq!(
        modes, expected,
        "the capture replays to the modes it recorded"
    );
    assert!(
        recorded.iter().all(Option::is_some),
        "every dispatch carries its report"
    );
}
