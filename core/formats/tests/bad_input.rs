//! Bad input never panics: every truncation of every shipped sample and of its capture, and
//! thousands of random byte flips, give a named error or the valid prefix.

#![allow(
    clippy::unwrap_used,
    clippy::expect_used,
    reason = "tests: a panic is the test failing, with its message"
)]

use std::path::PathBuf;

use dispatchscope_formats::capture::CaptureReader;
use dispatchscope_formats::sample::{Sample, Step};
use dispatchscope_formats::session::{CaptureFile, write_capture};
use proptest::prelude::*;

fn samples() -> Vec<(String, String)> {
    let dir = PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../../samples");
    let mut v: Vec<(String, String)> = std::fs::read_dir(&dir)
        .unwrap()
        .map(|e| e.unwrap().path())
        .filter(|p| {
            p.extension().is_some_and(|e| e == "json")
                && !p.to_string_lossy().ends_with(".schema.json")
        })
        .map(|p| {
            (
                p.file_name().unwrap().to_string_lossy().into_owned(),
                std::fs::read_to_string(&p).unwrap(),
            )
        })
        .collect();
    v.sort();
    v
}

fn capture_bytes(sample: &Sample) -> Vec<u8> {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("s.dscap");
    let reports = sample.run().unwrap();
    write_capture(sample, Some(&reports), &path).unwrap();
    std::fs::read(&path).unwrap()
}

/// Opens capture bytes; on success, the steps must be a prefix of `original`'s, and running them
/// must not panic.
fn open_capture(bytes: Vec<u8>, original: Option<&Sample>) {
    let Ok(reader) = CaptureReader::from_bytes(bytes) else {
        return;
    };
    let Ok(mut file) = CaptureFile::from_reader("mem".into(), reader) else {
        return;
    };
    let Ok((sample, _)) = file.to_sample() else {
        return;
    };
    if let Some(o) = original {
        assert!(sample.steps.len() <= o.steps.len());
        assert_eq!(
            sample.steps[..],
            o.steps[..sample.steps.len()],
            "a capture cut short keeps a prefix of its steps"
        );
    }
    let _ = sample.run();
}

fn open_sample(text: &str) {
    if let Ok(s) = Sample::from_json(text) {
        let _ = s.run();
    }
}

#[test]
fn every_truncation_of_every_sample_is_an_error_not_a_panic() {
    for (name, text) in samples() {
        let bytes = text.as_bytes();
        // Every cut inside the document (whitespace after the last brace may still parse).
        let last = text.rfind('}').unwrap();
        for cut in 0..=last {
            let t = String::from_utf8_lossy(&bytes[..cut]);
            assert!(Sample::from_json(&t).is_err(), "{name} cut at {cut} parsed");
        }
    }
}

#[test]
fn every_truncation_of_every_capture_opens_a_prefix_or_errs() {
    for (name, text) in samples() {
        let sample = Sample::from_json(&text).unwrap();
        let bytes = capture_bytes(&sample);
        // Every cut for small captures; a dense sweep for the large one.
        let step = if bytes.len() <= 16 << 10 {
            1
        } else {
            (bytes.len() / 4000).max(1)
        };
        for cut in (0..bytes.len()).step_by(step).chain([bytes.len()]) {
            open_capture(bytes[..cut].to_vec(), Some(&sample));
        }
        // The full capture gives the sample back.
        let reader = CaptureReader::from_bytes(bytes).unwrap();
        let (back, reports) = CaptureFile::from_reader(name.clone(), reader)
            .unwrap()
            .to_sample()
            .unwrap();
        assert_eq!(back, sample, "{name}: capture round trip");
        assert_eq!(
            reports.len(),
            sample
                .steps
                .iter()
                .filter(|s| matches!(s, Step::Dispatch(_)))
                .count()
        );
    }
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 5000, ..ProptestConfig::default() })]

    #[test]
    fn byte_flips_in_samples_never_panic(which in 0usize..64, flips in prop::collection::vec((any::<prop::sample::Index>(), any::<u8>()), 1..4)) {
        let all = samples();
        let (_, text) = &all[which % all.len()];
        let mut bytes = text.as_bytes().to_vec();
        for (i, b) in flips {
            let i = i.index(bytes.len());
            bytes[i] ^= b | 1;
        }
        open_sample(&String::from_utf8_lossy(&bytes));
    }

    #[test]
    fn byte_flips_in_captures_never_panic(which in 0usize..64, flips in prop::collection::vec((any::<prop::sample::Index>(), any::<u8>()), 1..4)) {
        thread_local! {
            static CAPTURES: Vec<Vec<u8>> = samples().iter().map(|(_, t)| capture_bytes(&Sample::from_json(t).unwrap())).collect();
        }
        let mut bytes = CAPTURES.with(|c| c[which % c.len()].clone());
        for (i, b) in flips {
            let i = i.index(bytes.len());
            bytes[i] ^= b | 1;
        }
        open_capture(bytes, None);
    }
}

/// The CPU reference, but its device fails every dispatch with what `fails` makes.
struct Failing {
    cpu: dispatchscope_core::CpuBackend,
    fails: fn() -> dispatchscope_core::backend::BackendError,
}

impl dispatchscope_core::Backend for Failing {
    fn name(&self) -> String {
        "failing".into()
    }
    fn import(
        &mut self,
        piece: dispatchscope_core::ByteRange,
        memory: &dispatchscope_core::GuestMemory,
    ) -> Result<u64, dispatchscope_core::backend::BackendError> {
        self.cpu.import(piece, memory)
    }
    fn release(
        &mut self,
        device_base: u64,
    ) -> Result<(), dispatchscope_core::backend::BackendError> {
        self.cpu.release(device_base)
    }
    fn place_table(
        &mut self,
        table: &dispatchscope_core::chunk_table::ChunkTable,
        budget_bytes: u64,
    ) -> Result<
        (u64, dispatchscope_core::report::Placement),
        dispatchscope_core::backend::BackendError,
    > {
        self.cpu.place_table(table, budget_bytes)
    }
    fn calls(&self) -> u64 {
        self.cpu.calls()
    }
    fn execute(
        &mut self,
        _job: &dispatchscope_core::exec::Job<'_>,
        _table: Option<&dispatchscope_core::chunk_table::ChunkTable>,
        _memory: &mut dispatchscope_core::GuestMemory,
    ) -> Result<dispatchscope_core::exec::Outcome, dispatchscope_core::backend::BackendError> {
        Err((self.fails)())
    }
}

/// A replay whose device fails is not bad input: the sample's error keeps the device's kind (a
/// lost device apart from exhausted memory), which the command line's exit status and words use.
#[test]
fn a_failing_device_is_not_bad_input() {
    use dispatchscope_core::FailureKind;
    use dispatchscope_core::backend::BackendError;
    let (_, text) = samples()
        .into_iter()
        .find(|(n, _)| n == "run305-overlap.json")
        .unwrap();
    let sample = Sample::from_json(&text).unwrap();
    for (fails, kind) in [
        (
            (|| BackendError::DeviceLost {
                call: "vkQueueSubmit".into(),
            }) as fn() -> BackendError,
            FailureKind::DeviceLost,
        ),
        (
            || BackendError::OutOfMemory {
                what: "vkAllocateMemory answered VK_ERROR_OUT_OF_DEVICE_MEMORY".into(),
            },
            FailureKind::OutOfMemory,
        ),
        (
            || BackendError::Execute("VK_ERROR_UNKNOWN".into()),
            FailureKind::Device,
        ),
    ] {
        let backend = Failing {
            cpu: dispatchscope_core::CpuBackend::new(),
            fails,
        };
        let e = sample.run_on(sample.device.clone(), backend).unwrap_err();
        assert_eq!(e.kind(), kind, "{e}");
    }
    let broken = Sample::from_json("{").unwrap_err();
    assert_eq!(broken.kind(), FailureKind::BadInput);
}
