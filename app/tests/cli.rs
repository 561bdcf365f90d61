//! The command line, run as a user runs it: exit statuses, text, JSON, conversions.

#![allow(
    clippy::unwrap_used,
    clippy::expect_used,
    reason = "tests: a panic is the test failing, with its message"
)]

use std::path::{Path, PathBuf};
use std::process::{Command, Output};

mod common;

fn bin() -> Command {
    Command::new(env!("CARGO_BIN_EXE_dispatchscope"))
}

fn samples() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../samples")
}

fn run(args: &[&str]) -> Output {
    bin().args(args).output().expect("the binary runs")
}

fn text(o: &Output) -> String {
    String::from_utf8_lossy(&o.stdout).into_owned()
}

fn err(o: &Output) -> String {
    String::from_utf8_lossy(&o.stderr).into_owned()
}

fn sample(name: &str) -> String {
    samples().join(name).display().to_string()
}

#[test]
fn explain_every_shipped_sample_exits_zero() {
    for entry in std::fs::read_dir(samples()).unwrap() {
        let path = entry.unwrap().path();
        let name = path.file_name().unwrap().to_string_lossy().into_owned();
        if !name.ends_with(".json") || name.ends_with(".schema.json") {
            continue;
        }
        let o = run(&["explain", &path.display().to_string()]);
        assert!(o.status.success(), "{name}: {}", err(&o));
        assert!(text(&o).contains("dispatch 0"), "{name}");
    }
}

#[test]
fn refusals_are_findings_not_failures() {
    let o = run(&["explain", &sample("d961-page-buffer.json")]);
    assert_eq!(o.status.code(), Some(0));
    assert!(text(&o).contains("REFUSED O11 (D961)"));
}

#[test]
fn device_limit_flag_replans_without_editing_the_file() {
    let path = sample("o7-alignment.json");
    let o = run(&["explain", &path]);
    assert!(text(&o).contains("· bound ·"), "{}", text(&o));
    let o = run(&[
        "explain",
        &path,
        "--min-storage-buffer-offset-alignment",
        "256",
    ]);
    assert!(o.status.success());
    let t = text(&o);
    assert!(
        t.contains("· refused ·") && t.contains("REFUSED O7 (D953)"),
        "{t}"
    );
    assert!(
        t.contains("not a multiple of minStorageBufferOffsetAlignment 0x100"),
        "{t}"
    );
    let o = run(&[
        "explain",
        &path,
        "--min-storage-buffer-offset-alignment",
        "24",
    ]);
    assert_eq!(o.status.code(), Some(2), "24 is not a power of two");
}

#[test]
fn json_carries_the_schema_fields() {
    let o = run(&[
        "explain",
        &sample("run305-d951.json"),
        "--json",
        "--dispatch",
        "0",
    ]);
    assert!(o.status.success(), "{}", err(&o));
    let v: serde_json::Value = serde_json::from_slice(&o.stdout).unwrap();
    assert_eq!(v["schema"], "dispatchscope.report/1");
    let d = &v["dispatches"][0];
    assert_eq!(d["index"], 0);
    assert_eq!(d["program"], "0x74005b87e400");
    assert_eq!(d["mode"], "bound");
    assert_eq!(d["sets"][0]["holder"], 18);
    assert_eq!(d["sets"][0]["members"][0]["slot"], 20);
    assert_eq!(d["sets"][0]["members"][0]["offset"], "0x100000");
}

#[test]
fn bad_input_exits_two_naming_the_file_and_place() {
    let dir = tempfile::tempdir().unwrap();
    let bad = dir.path().join("bad.json");
    std::fs::write(&bad, r#"{"format":"dispatchscope.sample","version":1,"title":"x","steps":[{"dispatch":{"program":"0x1","slots":[{"slot":0,"base":"0xzz","size_bytes":"0x10"}]}}]}"#).unwrap();
    let o = run(&["explain", &bad.display().to_string()]);
    assert_eq!(o.status.code(), Some(2));
    let e = err(&o);
    assert!(
        e.contains("bad.json") && e.contains("line 1") && e.contains("dispatch.slots[0].base"),
        "{e}"
    );

    let missing = dir.path().join("missing.json");
    let o = run(&["explain", &missing.display().to_string()]);
    assert_eq!(o.status.code(), Some(2));
    assert!(err(&o).contains("missing.json"));

    let o = run(&["explain", &sample("run305-overlap.json"), "--dispatch", "9"]);
    assert_eq!(o.status.code(), Some(2));
    assert!(err(&o).contains("has 2 dispatches"), "{}", err(&o));
}

fn convert(a: &Path, b: &Path) {
    let o = run(&[
        "convert",
        &a.display().to_string(),
        &b.display().to_string(),
    ]);
    assert!(o.status.success(), "{}", err(&o));
}

#[test]
fn convert_round_trips_and_captures_explain_the_same() {
    let dir = tempfile::tempdir().unwrap();
    let src = samples().join("ray-traversal.json");
    let cap = dir.path().join("rt.dscap");
    let back = dir.path().join("rt.json");
    convert(&src, &cap);
    convert(&cap, &back);
    let a: serde_json::Value =
        serde_json::from_str(&std::fs::read_to_string(&src).unwrap()).unwrap();
    let b: serde_json::Value =
        serde_json::from_str(&std::fs::read_to_string(&back).unwrap()).unwrap();
    let sa = dispatchscope_formats::sample::Sample::from_json(&a.to_string()).unwrap();
    let sb = dispatchscope_formats::sample::Sample::from_json(&b.to_string()).unwrap();
    assert_eq!(sa, sb, "sample → capture → sample loses nothing");

    let from_sample = text(&run(&[
        "explain",
        &src.display().to_string(),
        "--dispatch",
        "2",
    ]));
    let from_capture = text(&run(&[
        "explain",
        &cap.display().to_string(),
        "--dispatch",
        "2",
    ]));
    let body = |t: &str| t.lines().skip(1).collect::<Vec<_>>().join("\n");
    assert_eq!(
        body(&from_sample),
        body(&from_capture),
        "the recorded report explains the same"
    );
}

#[test]
fn a_capture_cut_short_still_explains_its_complete_dispatches() {
    let dir = tempfile::tempdir().unwrap();
    let cap = dir.path().join("g.dscap");
    convert(&samples().join("generations-revisits.json"), &cap);
    let bytes = std::fs::read(&cap).unwrap();
    let cut = dir.path().join("cut.dscap");
    std::fs::write(&cut, &bytes[..bytes.len() * 2 / 3]).unwrap();
    let o = run(&["explain", &cut.display().to_string()]);
    assert!(o.status.success(), "{}", err(&o));
    assert!(
        err(&o).contains("cut short"),
        "the torn tail is reported: {}",
        err(&o)
    );
    assert!(text(&o).contains("dispatch 0"));
}

#[test]
fn generate_writes_a_sample_that_explains() {
    let dir = tempfile::tempdir().unwrap();
    let out = dir.path().join("gen.json");
    let o = run(&[
        "generate",
        &out.display().to_string(),
        "--seed",
        "5",
        "--dispatches",
        "3",
    ]);
    assert!(o.status.success(), "{}", err(&o));
    let o = run(&["explain", &out.display().to_string()]);
    assert!(o.status.success(), "{}", err(&o));
    assert!(text(&o).contains("dispatch 2"));
}

/// `export --trace`: a Trace Event Format file (what ui.perfetto.dev opens): metadata, a frame
/// slice holding its dispatch slices, a counter pair per dispatch; from a sample and from a
/// capture, the same slices. Bad input exits 2 and names what was wrong.
#[test]
fn export_trace_writes_frames_dispatches_and_counters() {
    let dir = tempfile::tempdir().unwrap();
    let input = sample("generations-revisits.json");
    let n_dispatches = {
        let o = run(&["explain", &input, "--json"]);
        assert!(o.status.success(), "{}", err(&o));
        let doc: serde_json::Value = serde_json::from_slice(&o.stdout).unwrap();
        doc["dispatches"].as_array().unwrap().len()
    };
    let out = dir.path().join("trace.json");
    let o = run(&["export", "--trace", out.to_str().unwrap(), &input]);
    assert!(o.status.success(), "{}", err(&o));
    let doc: serde_json::Value =
        serde_json::from_str(&std::fs::read_to_string(&out).unwrap()).unwrap();
    let events = doc["traceEvents"].as_array().expect("traceEvents");
    let of = |ph: &str| events.iter().filter(|e| e["ph"] == ph).collect::<Vec<_>>();
    let slices = of("X");
    let dispatches: Vec<_> = slices.iter().filter(|e| e["cat"] != "frame").collect();
    let frames: Vec<_> = slices.iter().filter(|e| e["cat"] == "frame").collect();
    assert_eq!(dispatches.len(), n_dispatches);
    assert!(!frames.is_empty());
    // Every dispatch slice lies inside a frame slice of the same track, and the frames hold them all.
    for d in &dispatches {
        let (ts, dur) = (d["ts"].as_u64().unwrap(), d["dur"].as_u64().unwrap());
        assert!(dur > 0);
        assert!(
            frames.iter().any(|f| {
                let (fts, fdur) = (f["ts"].as_u64().unwrap(), f["dur"].as_u64().unwrap());
                f["tid"] == d["tid"] && fts <= ts && ts + dur <= fts + fdur
            }),
            "{d} lies in no frame"
        );
        assert!(d["args"]["program"].as_str().unwrap().starts_with("0x"));
    }
    let total: u64 = frames
        .iter()
        .map(|f| f["args"]["dispatches"].as_u64().unwrap())
        .sum();
    assert_eq!(total as usize, n_dispatches);
    let counters = of("C");
    assert_eq!(counters.len(), 2 * n_dispatches);
    for name in ["escapes", "refusals"] {
        assert!(
            counters
                .iter()
                .any(|c| c["name"] == name && c["args"][name].is_u64())
        );
    }
    assert!(of("M").iter().any(|m| m["name"] == "process_name"));

    // From a capture (its recorded reports, read one record at a time): the same dispatch slices.
    let cap = dir.path().join("s.dscap");
    let o = run(&["convert", &input, cap.to_str().unwrap()]);
    assert!(o.status.success(), "{}", err(&o));
    let out2 = dir.path().join("trace2.json");
    let o = run(&[
        "export",
        "--trace",
        out2.to_str().unwrap(),
        cap.to_str().unwrap(),
    ]);
    assert!(o.status.success(), "{}", err(&o));
    let doc2: serde_json::Value =
        serde_json::from_str(&std::fs::read_to_string(&out2).unwrap()).unwrap();
    let names = |d: &serde_json::Value| -> Vec<serde_json::Value> {
        d["traceEvents"]
            .as_array()
            .unwrap()
            .iter()
            .filter(|e| e["ph"] == "X")
            .cloned()
            .collect()
    };
    assert_eq!(names(&doc), names(&doc2));

    // Bad input: exit 2, the file and the reason named, no trace left behind.
    let bad = dir.path().join("bad.json");
    std::fs::write(&bad, b"not a session").unwrap();
    let out3 = dir.path().join("trace3.json");
    let o = run(&[
        "export",
        "--trace",
        out3.to_str().unwrap(),
        bad.to_str().unwrap(),
    ]);
    assert_eq!(o.status.code(), Some(2), "{}", err(&o));
    assert!(
        err(&o).contains("bad.json") && err(&o).contains("neither"),
        "{}",
        err(&o)
    );
    assert!(!out3.exists());
    let o = run(&["export", "--trace", "/nonexistent-dir/t.json", &input]);
    assert_eq!(o.status.code(), Some(2), "{}", err(&o));
    assert!(err(&o).contains("cannot write the trace"), "{}", err(&o));
    let o = run(&["export", &input]);
    assert_eq!(
        o.status.code(),
        Some(2),
        "a missing --trace is a usage error: {}",
        err(&o)
    );
}

#[test]
fn a_demo_rate_out_of_range_is_refused_by_name_before_any_window() {
    for bad in ["0", "10001", "many"] {
        let o = run(&["--demo-dispatches-per-frame", bad]);
        assert_eq!(o.status.code(), Some(2), "{bad}: {}", err(&o));
        assert!(
            err(&o).contains("--demo-dispatches-per-frame"),
            "{bad}: {}",
            err(&o)
        );
    }
}

#[test]
fn explain_prints_a_captures_loss_after_its_dispatches_and_json_carries_it() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("lost.dscap");
    let loss = common::lost_capture(&path);
    let p = path.display().to_string();
    let o = run(&["explain", &p]);
    assert!(o.status.success(), "{}", err(&o));
    let t = text(&o);
    let lost_at = t.find("device lost: VK_ERROR_DEVICE_LOST").expect(&t);
    assert!(
        t.find("dispatch 2 ·").unwrap() < lost_at,
        "after the dispatches"
    );
    for want in [
        "in flight, oldest first:",
        "dispatch 3 · program 0x74005b854a00 · device-addressed",
        "escapes (T4): 2 (no-reservation 2)",
        "the device's fault report: a page fault",
        "in no import and no buffer of the engine",
        "findings:",
    ] {
        assert!(t[lost_at..].contains(want), "{want:?} in {t}");
    }
    let o = run(&["explain", &p, "--json"]);
    assert!(o.status.success(), "{}", err(&o));
    let v: serde_json::Value = serde_json::from_slice(&o.stdout).unwrap();
    assert_eq!(v["device_loss"]["schema"], "dispatchscope.device-loss/1");
    assert_eq!(
        v["device_loss"]["in_flight"].as_array().unwrap().len(),
        loss.in_flight.len()
    );
    // A dispatch that was in flight has no record: asking for it prints the loss that names it.
    let o = run(&["explain", &p, "--dispatch", "4"]);
    assert!(o.status.success(), "{}", err(&o));
    assert!(err(&o).contains("dispatch 4 was in flight"), "{}", err(&o));
    assert!(text(&o).contains("device lost:"));
    // One recorded dispatch alone is that one alone.
    let o = run(&["explain", &p, "--dispatch", "1"]);
    assert!(!text(&o).contains("device lost"));
}

/// `attach` to a target whose device was lost: the target never pauses again (nothing more is
/// prepared), so the loss report, which a debugger attaching later gets first, ends the wait and
/// is printed; `--json` carries it.
#[test]
fn attach_to_a_lost_target_prints_its_loss() {
    use dispatchscope_core::input::DeviceLimits;
    use dispatchscope_core::{CpuBackend, Engine};
    use dispatchscope_live::{Tap, TapConfig};
    let mut tap = Tap::listen(TapConfig::listening_on("127.0.0.1:0".parse().unwrap())).unwrap();
    let addr = tap.local_addr().unwrap().to_string();
    let mut engine = Engine::<CpuBackend>::cpu(DeviceLimits::default()).unwrap();
    let input = dispatchscope_core::input::DispatchInput {
        program: 0x4000_0000_0100,
        label: "the last pass".into(),
        ..Default::default()
    };
    tap.before_prepare(&engine, &input);
    let p = engine.prepare(&input).unwrap();
    tap.after_prepare(&p);
    let report = engine.device_lost("VK_ERROR_DEVICE_LOST", None).clone();
    tap.device_lost(&report);
    let o = run(&["attach", &addr, "--wait", "10"]);
    assert!(o.status.success(), "{}", err(&o));
    let t = text(&o);
    assert!(
        t.contains("the target's device was lost (VK_ERROR_DEVICE_LOST) with 1 in flight"),
        "{t}"
    );
    assert!(t.contains("device lost: VK_ERROR_DEVICE_LOST"), "{t}");
    assert!(
        t.contains("dispatch 0 · program 0x400000000100 · bound · the last pass"),
        "{t}"
    );
    let o = run(&["attach", &addr, "--wait", "10", "--json"]);
    assert!(o.status.success(), "{}", err(&o));
    let v: serde_json::Value = serde_json::from_slice(&o.stdout).unwrap();
    assert_eq!(v["device_loss"]["in_flight"][0]["index"], 0);
    drop(tap);
}
