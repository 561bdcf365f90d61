//! O8 in host mode against a plain model (issue 39): for random write masks over holders of many
//! pages (dense stretches, single words, whole pages skipped, more runs than one batch holds), the
//! emulator receives exactly the words the mask marks, each once, and nothing between them; no
//! guest byte is read to write them back but the listed words' old values; and the pages noted
//! written are exactly the pages a written word lies on.

#![allow(clippy::unwrap_used, reason = "tests")]

use std::collections::BTreeSet;
use std::sync::{Arc, Mutex};

use dispatchscope_core::addr::ByteRange;
use dispatchscope_core::engine::{DeviceRun, HolderRun, RanOn};
use dispatchscope_core::host::{HostError, HostMemory, RealMapping};
use dispatchscope_core::input::{Backing, DeviceLimits, DispatchInput, Event, Slot};
use dispatchscope_core::{CpuBackend, Engine};
use proptest::prelude::*;

const GUEST: u64 = 0x10_0000_0000;
const HOST: u64 = 0x7000_0000_0000;
const PAGE: u64 = 0x1000;

/// The emulator's memory as a plain array, every call recorded.
#[derive(Default)]
struct Recorder {
    bytes: Mutex<Vec<u8>>,
    writes: Mutex<Vec<ByteRange>>,
    reads: Mutex<u64>,
}

impl HostMemory for Recorder {
    fn name(&self) -> String {
        "recorder".into()
    }
    fn read(&self, host_addr: u64, out: &mut [u8]) -> Result<(), HostError> {
        *self.reads.lock().unwrap() += out.len() as u64;
        let b = self.bytes.lock().unwrap();
        let at = (host_addr - HOST) as usize;
        out.copy_from_slice(&b[at..at + out.len()]);
        Ok(())
    }
    fn write(&self, host_addr: u64, bytes: &[u8]) -> Result<(), HostError> {
        let at = (host_addr - HOST) as usize;
        self.bytes.lock().unwrap()[at..at + bytes.len()].copy_from_slice(bytes);
        self.writes
            .lock()
            .unwrap()
            .push(ByteRange::new(host_addr, host_addr + bytes.len() as u64));
        Ok(())
    }
    fn commit(&self, _: u64, _: u64) -> Result<(), HostError> {
        Ok(())
    }
    fn release_guards(&self, _: u64, _: u64) -> Result<(), HostError> {
        Ok(())
    }
    fn hand_off(&self, _: ByteRange, _: u64) -> Result<(), HostError> {
        Ok(())
    }
    fn real_mappings(&self, _: u64, _: u64) -> Option<Vec<RealMapping>> {
        None
    }
}

/// A mask over `words` words from `spans`: each (start, length) marks that many words written.
fn mask_of(words: usize, spans: &[(usize, usize)]) -> Vec<bool> {
    let mut m = vec![false; words];
    for &(s, n) in spans {
        for w in m.iter_mut().skip(s % words).take(n) {
            *w = true;
        }
    }
    m
}

fn check(pages: u64, mask: &[bool]) {
    let bytes = pages * PAGE;
    let host = Arc::new(Recorder::default());
    host.bytes
        .lock()
        .unwrap()
        .resize((bytes + 2 * PAGE) as usize, 0xee);
    let mut e = Engine::with_host(
        DeviceLimits::default(),
        CpuBackend::new(),
        Arc::clone(&host) as Arc<dyn HostMemory>,
    )
    .unwrap();
    e.apply(&Event::Reserve {
        range: ByteRange::new(GUEST, GUEST + bytes + 2 * PAGE),
        readable: true,
        writable: true,
        committed: true,
        backing: Backing::Private,
        host_base: Some(HOST),
    })
    .unwrap();
    let input = DispatchInput {
        program: 0x4000,
        slots: vec![Slot::new(0, GUEST + PAGE, bytes, true)],
        ..DispatchInput::default()
    };
    let mut data = vec![0u8; bytes as usize];
    let mut masks = vec![0u8; bytes as usize];
    for (w, &set) in mask.iter().enumerate() {
        data[4 * w..4 * w + 4].copy_from_slice(&(w as u32 ^ 0x5a5a_0000).to_le_bytes());
        if set {
            masks[4 * w + 3] = 0x80;
        }
    }
    let p = e.prepare(&input).unwrap();
    let r = e
        .complete(
            &input,
            p,
            RanOn::Device(DeviceRun {
                holders: vec![HolderRun {
                    slot: 0,
                    data: &data,
                    masks: &masks,
                }],
                ..DeviceRun::default()
            }),
        )
        .unwrap();
    assert!(r.host_path.failures.is_empty());
    // Exactly the marked words were written, each once, nothing else.
    let mut written = vec![0u32; mask.len()];
    for w in host.writes.lock().unwrap().iter() {
        assert!(w.start % 4 == 0 && w.size_bytes() % 4 == 0, "{w}");
        let first = ((w.start - HOST - PAGE) / 4) as usize;
        for k in first..first + (w.size_bytes() / 4) as usize {
            assert!(mask[k], "word {k} is not the device's, but was written");
            written[k] += 1;
        }
    }
    for (k, &set) in mask.iter().enumerate() {
        assert_eq!(written[k], u32::from(set), "word {k}");
    }
    let b = host.bytes.lock().unwrap();
    for (k, &set) in mask.iter().enumerate() {
        let at = (PAGE + 4 * k as u64) as usize;
        let got = u32::from_le_bytes([b[at], b[at + 1], b[at + 2], b[at + 3]]);
        let want = if set {
            k as u32 ^ 0x5a5a_0000
        } else {
            0xeeee_eeee
        };
        assert_eq!(got, want, "word {k}");
    }
    // Nothing read but the listed words' old values.
    let listed = r.write_back.first().map_or(0, |w| w.words.len());
    assert_eq!(*host.reads.lock().unwrap(), 4 * listed as u64);
    // The pages noted are exactly those a written word lies on.
    let want: BTreeSet<u64> = mask
        .iter()
        .enumerate()
        .filter(|&(_, &s)| s)
        .map(|(k, _)| (GUEST + PAGE + 4 * k as u64) & !(PAGE - 1))
        .collect();
    let got: BTreeSet<u64> = r
        .hand_off
        .pages_noted_written
        .iter()
        .flat_map(|p| (p.start..p.end).step_by(PAGE as usize))
        .collect();
    assert_eq!(got, want);
    let n = mask.iter().filter(|&&s| s).count();
    assert_eq!(r.counts.words_written_back, n);
}

#[test]
fn every_other_word_over_many_batches_and_skipped_pages() {
    // 12 pages: every other word of pages 0–4 (5 × 512 runs, more than one batch), page 5–7 not at
    // all, page 8 whole, page 9 one word, pages 10–11 every word but the last.
    let words = 12 * 1024;
    let mut mask = vec![false; words];
    for w in (0..5 * 1024).step_by(2) {
        mask[w] = true;
    }
    for m in mask.iter_mut().take(9 * 1024).skip(8 * 1024) {
        *m = true;
    }
    mask[9 * 1024 + 77] = true;
    for m in mask.iter_mut().take(words - 1).skip(10 * 1024) {
        *m = true;
    }
    check(12, &mask);
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(64))]
    #[test]
    fn o8_writes_exactly_the_marked_words(
        pages in 1u64..10,
        spans in prop::collection::vec((0usize..10 * 1024, 1usize..2500), 0..12),
        every_other in any::<bool>(),
    ) {
        let words = (pages * PAGE / 4) as usize;
        let mut mask = mask_of(words, &spans);
        if every_other {
            for w in (0..words).step_by(2) {
                mask[w] = !mask[w];
            }
        }
        check(pages, &mask);
    }
}
