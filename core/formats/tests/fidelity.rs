//! Issue 13, at the sample format: the inputs the issue found accepted silently or panicking, as
//! sample text, each a named error (or a correct run).
#![allow(
    clippy::unwrap_used,
    clippy::expect_used,
    reason = "tests: a panic is the test failing, with its message"
)]

use dispatchscope_formats::sample::{Sample, SampleError};

/// The issue's wrapper around `steps`, with `device` fields.
fn sample(device: &str, contents: &str, steps: &str) -> String {
    format!(
        r#"{{"format":"dispatchscope.sample","version":1,"title":"t","device":{{{device}}},"contents":[{contents}],"steps":[{steps}]}}"#
    )
}

/// The issue's **R**: one readable, writable, committed page at 0x10000.
const R: &str = r#"{"event":"reserve","range":{"start":"0x10000","end":"0x11000"},"readable":true,"writable":true,"committed":true}"#;

fn run_error(text: &str) -> String {
    let s = Sample::from_json(text).unwrap();
    s.run().unwrap_err().to_string()
}

#[test]
fn sample_version_0_is_not_said_to_be_newer() {
    let text = sample("", "", R).replace(r#""version":1"#, r#""version":0"#);
    let err = Sample::from_json(&text).unwrap_err();
    assert!(matches!(err, SampleError::VersionZero), "{err}");
    assert!(!err.to_string().contains("newer"), "{err}");
}

#[test]
fn m1_contents_no_reservation_holds_are_a_named_error() {
    let dispatch = r#"{"dispatch":{"program":"0x1"}}"#;
    let text = sample(
        "",
        r#"{"address":"0x20000","bytes":"01020304"}"#,
        &format!("{R},{dispatch}"),
    );
    let err = run_error(&text);
    assert!(
        err.contains("contents 0") && err.contains("0x20000"),
        "{err}"
    );
    // Inside the reservation they load.
    let text = sample(
        "",
        r#"{"address":"0x10ffc","bytes":"01020304"}"#,
        &format!("{R},{dispatch}"),
    );
    assert!(Sample::from_json(&text).unwrap().run().is_ok());
}

#[test]
fn o7_an_alignment_of_0_3_or_0x1000_in_a_sample_is_a_named_error() {
    for a in ["0x0", "0x3", "0x1000"] {
        let text = sample(
            &format!(r#""min_storage_buffer_offset_alignment":"{a}""#),
            "",
            R,
        );
        let err = run_error(&text);
        assert!(
            err.contains("minStorageBufferOffsetAlignment"),
            "{a}: {err}"
        );
    }
}

#[test]
fn limits_that_used_to_abort_are_named_errors() {
    for device in [
        r#""host_page_bytes":"0x8000000000000000""#,
        r#""probe_bound":4294967295"#,
        r#""max_storage_buffer_range":"0xffffffffffffffff""#,
    ] {
        let err = run_error(&sample(device, "", R));
        assert!(err.contains("bad device limits"), "{device}: {err}");
    }
}

#[test]
fn m1_a_reservation_of_almost_all_of_the_address_space_runs() {
    let huge = r#"{"event":"reserve","range":{"start":"0x0","end":"0xfffffffffffff000"},"readable":false,"writable":true,"committed":true}"#;
    let dispatch = r#"{"dispatch":{"program":"0x1"}}"#;
    let text = sample("", "", &format!("{huge},{dispatch}"));
    assert_eq!(Sample::from_json(&text).unwrap().run().unwrap().len(), 1);
}
