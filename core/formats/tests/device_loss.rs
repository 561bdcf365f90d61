//! A capture that ends with the device lost: the ray-traversal sample run through an engine and a
//! [`SessionWriter`] (what the C ABI's `ds_engine_capture_begin` writes through), its three passes
//! prepared again and in flight when the device is lost, the fault addresses landing in an import,
//! in the chunk table and in nothing. The DEVICE_LOSS record reads back whole, a reader that knows
//! only the older kinds skips it, and its explanation matches the golden file
//! (`golden/device-loss.snap`).

#![allow(
    clippy::unwrap_used,
    clippy::expect_used,
    reason = "tests: a panic is the test failing, with its message"
)]

use dispatchscope_analysis::explain::explain_loss;
use dispatchscope_core::engine::DeviceFault;
use dispatchscope_core::report::FaultLands;
use dispatchscope_core::{CpuBackend, Engine};
use dispatchscope_formats::capture::CaptureReader;
use dispatchscope_formats::loss::DEVICE_LOSS;
use dispatchscope_formats::sample::{Sample, Step};
use dispatchscope_formats::session::{CAPTURE_FORMAT, CaptureFile, CaptureMeta, DispatchRecord};
use dispatchscope_formats::shipped::sample_text;
use dispatchscope_formats::stream::SessionWriter;

/// Writes the lost session to `path`; returns the loss report the engine made.
fn lost_session(path: &std::path::Path) -> dispatchscope_core::report::DeviceLossReport {
    let sample = Sample::from_json(sample_text("ray-traversal.json").unwrap()).unwrap();
    let meta = CaptureMeta {
        format: CAPTURE_FORMAT.into(),
        sample_version: sample.version,
        title: sample.title.clone(),
        description: sample.description.clone(),
        provenance: sample.provenance.clone(),
        device: sample.device.clone(),
        programs: sample.programs.clone(),
    };
    let mut w = SessionWriter::create(path, &meta).unwrap();
    let mut engine = Engine::<CpuBackend>::cpu(sample.device.clone()).unwrap();
    let mut loaded = false;
    for step in &sample.steps {
        match step {
            Step::Event(e) => {
                engine.apply(e).unwrap();
                w.event(e).unwrap();
            }
            Step::Dispatch(d) => {
                if !loaded {
                    for c in &sample.contents {
                        engine.try_load_contents(c.address, &c.bytes).unwrap();
                        w.contents(c).unwrap();
                    }
                    loaded = true;
                }
                let report = engine.dispatch(d).unwrap();
                w.dispatch(&DispatchRecord {
                    input: (**d).clone(),
                    report: Some(report),
                })
                .unwrap();
            }
        }
    }
    // The three passes again, prepared and in flight when the fence says the device is lost.
    let mut table = 0;
    for d in sample.dispatches() {
        let p = engine.prepare(d).unwrap();
        table = p.device.as_ref().map_or(table, |a| a.table_address);
    }
    let import = engine.mappings().imports().next().unwrap().device_base;
    let fault = DeviceFault {
        description: "a page fault in the shader's load".into(),
        addresses: vec![
            (import + 0x48, "read".into()),
            (table + 0x130, "read".into()),
            (0x0000_7fff_0000_0000, "invalid pointer".into()),
        ],
    };
    let report = engine
        .device_lost("VK_ERROR_DEVICE_LOST", Some(&fault))
        .clone();
    w.device_lost(&report).unwrap();
    w.finish().unwrap();
    report
}

#[test]
fn a_capture_keeps_the_loss_and_explains_it() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("lost.dscap");
    let report = lost_session(&path);
    assert_eq!(report.in_flight.len(), 3);
    let lands: Vec<&FaultLands> = report
        .fault
        .iter()
        .flat_map(|f| f.addresses.iter().map(|a| &a.lands))
        .collect();
    assert!(matches!(lands[0], FaultLands::Guest { .. }), "{lands:?}");
    assert!(matches!(lands[1], FaultLands::Table { .. }), "{lands:?}");
    assert!(matches!(lands[2], FaultLands::Unknown { .. }), "{lands:?}");

    let file = CaptureFile::open(&path).unwrap();
    assert_eq!(file.loss(), Some(&report), "the record reads back whole");
    assert_eq!(file.n_dispatches(), 3);
    // A reader of the older kinds skips it: the session reads as before.
    let mut file = CaptureFile::open(&path).unwrap();
    let (sample, reports) = file.to_sample().unwrap();
    assert_eq!(sample.dispatches().count(), 3);
    assert_eq!(reports.len(), 3);
    let reader = CaptureReader::open(&path).unwrap();
    assert_eq!(reader.len_of_kind(DEVICE_LOSS), 1);

    // `explain --json`'s document with the loss validates against the report schema.
    let schema: serde_json::Value = serde_json::from_str(
        &std::fs::read_to_string(
            std::path::Path::new(env!("CARGO_MANIFEST_DIR"))
                .join("../../samples/report.schema.json"),
        )
        .unwrap(),
    )
    .unwrap();
    let validator = jsonschema::validator_for(&schema).unwrap();
    let doc = serde_json::json!({
        "schema": dispatchscope_core::report::SCHEMA,
        "dispatches": reports.iter().flatten().collect::<Vec<_>>(),
        "device_loss": report,
    });
    let errors: Vec<String> = validator.iter_errors(&doc).map(|e| e.to_string()).collect();
    assert!(errors.is_empty(), "{errors:?}");

    let golden = explain_loss(&report);
    insta::with_settings!({ snapshot_path => "golden", prepend_module_to_snapshot => false, omit_expression => true }, {
        insta::assert_snapshot!("device-loss", golden);
    });
}

#[test]
fn a_bad_loss_record_is_a_named_error_at_open() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("bad.dscap");
    let sample = Sample::from_json(sample_text("ray-traversal.json").unwrap()).unwrap();
    let meta = CaptureMeta {
        format: CAPTURE_FORMAT.into(),
        sample_version: sample.version,
        title: "bad loss".into(),
        description: String::new(),
        provenance: sample.provenance.clone(),
        device: sample.device.clone(),
        programs: Vec::new(),
    };
    let mut w = dispatchscope_formats::capture::CaptureWriter::create(
        &path,
        &serde_json::to_vec(&meta).unwrap(),
    )
    .unwrap();
    w.append(
        DEVICE_LOSS,
        br#"{"schema":"dispatchscope.device-loss/7"}"#,
        false,
    )
    .unwrap();
    w.finish().unwrap();
    let e = CaptureFile::open(&path).err().expect("a bad loss record");
    let text = e.to_string();
    assert!(text.contains("record 0"), "{text}");
    assert!(text.contains("device-loss"), "{text}");
}
