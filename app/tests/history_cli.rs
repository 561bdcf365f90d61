//! `dispatchscope history`, run as a user runs it: text and JSON for a sample and its capture, the
//! same writes as the library finds; bad input exits 2 and names what was wrong.

#![allow(
    clippy::unwrap_used,
    clippy::expect_used,
    reason = "tests: a panic is the test failing, with its message"
)]

use std::path::PathBuf;
use std::process::{Command, Output};

use dispatchscope_analysis::history::{HISTORY_SCHEMA, History, WriteKind};
use dispatchscope_core::ByteRange;
use dispatchscope_formats::history::replay_sample;
use dispatchscope_formats::sample::Sample;

fn run(args: &[&str]) -> Output {
    Command::new(env!("CARGO_BIN_EXE_dispatchscope"))
        .args(args)
        .output()
        .expect("the binary runs")
}

fn sample_path(name: &str) -> String {
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

/// The first word a holder of `name` writes back, and the sample.
fn written_back(name: &str) -> (Sample, u64) {
    let sample = Sample::from_json(&std::fs::read_to_string(sample_path(name)).unwrap()).unwrap();
    let reports = sample.run().unwrap();
    let address = reports
        .iter()
        .flat_map(|r| &r.write_back)
        .flat_map(|w| &w.words)
        .find(|w| w.changed())
        .map(|w| w.address)
        .expect("the sample writes a word back");
    (sample, address)
}

#[test]
fn history_of_a_written_back_word_as_text_and_json_in_a_sample_and_its_capture() {
    let name = "l1-hazard.json";
    let (sample, address) = written_back(name);
    let want = replay_sample(&sample, ByteRange::new(address, address + 4)).unwrap();
    assert!(
        want.writes
            .iter()
            .any(|w| matches!(w.kind, WriteKind::WriteBack { .. })),
        "{want:?}"
    );
    let a = format!("{address:#x}");
    let o = run(&["history", &sample_path(name), &a]);
    assert!(o.status.success(), "{}", err(&o));
    let text = out(&o);
    assert!(text.contains("write-back (O8)"), "{text}");
    assert!(
        text.contains(&format!("{} writes", want.writes.len())),
        "{text}"
    );
    assert!(text.contains(&want.last.text()), "{text}");

    let dir = tempfile::tempdir().unwrap();
    let cap = dir.path().join("s.dscap");
    let o = run(&["convert", &sample_path(name), &cap.display().to_string()]);
    assert!(o.status.success(), "{}", err(&o));
    for file in [sample_path(name), cap.display().to_string()] {
        let o = run(&["history", &file, &a, "--json"]);
        assert!(o.status.success(), "{file}: {}", err(&o));
        let got: History = serde_json::from_slice(&o.stdout).unwrap();
        assert_eq!(got.schema, HISTORY_SCHEMA);
        assert_eq!(got.writes, want.writes, "{file}");
        assert_eq!(got.initial, want.initial, "{file}");
        assert_eq!(got.last, want.last, "{file}");
    }
    // One byte, in decimal.
    let o = run(&[
        "history",
        &sample_path(name),
        &address.to_string(),
        "--bytes",
        "1",
    ]);
    assert!(o.status.success(), "{}", err(&o));
    assert!(out(&o).contains("(1 bytes)"), "{}", out(&o));
}

#[test]
fn bad_input_exits_two_with_the_reason() {
    let (_, address) = written_back("l1-hazard.json");
    let a = format!("{address:#x}");
    let good = sample_path("l1-hazard.json");
    let dir = tempfile::tempdir().unwrap();
    let junk = dir.path().join("junk.bin");
    std::fs::write(&junk, b"\x00\x01 not a session").unwrap();
    let junk = junk.display().to_string();
    let cut = dir.path().join("cut.json");
    std::fs::write(&cut, b"{\"format\": \"dispatchscope.sample\", ").unwrap();
    let cut = cut.display().to_string();
    let cases: [(&[&str], &str); 7] = [
        (&["history", &good, "zz"], "is not a number"),
        (&["history", &good, "0x10"], "no reservation"),
        (
            &["history", &good, &a, "--bytes", "0"],
            "a history watches 1 to 64 bytes",
        ),
        (
            &["history", &good, &a, "--bytes", "65"],
            "a history watches 1 to 64 bytes",
        ),
        (
            &["history", &good, "0xffffffffffffffff"],
            "a history watches",
        ),
        (&["history", &junk, &a], "neither a dispatchscope sample"),
        (&["history", &cut, &a], "cut.json"),
    ];
    for (args, says) in cases {
        let o = run(args);
        assert_eq!(o.status.code(), Some(2), "{args:?}: {}", err(&o));
        assert!(err(&o).contains(says), "{args:?}: {}", err(&o));
        assert!(out(&o).is_empty(), "{args:?}");
    }
    let o = run(&["history", "/no/such/file.json", &a]);
    assert_eq!(o.status.code(), Some(2), "{}", err(&o));
}
