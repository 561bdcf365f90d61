//! Fuzzes the RDNA2 decoder: any bytes decode to instructions that cover the input exactly, in
//! order, each either decoded or a `.long`/`.byte` line with a named reason; never a panic.
#![no_main]

use dispatchscope_rdna::{Kind, decode};
use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    let mut covered = 0usize;
    for inst in decode(data, 0x7400_0000_0000) {
        assert_eq!(inst.pc, 0x7400_0000_0000 + covered as u64);
        assert!(inst.len > 0);
        if let Kind::Unknown { reason } = &inst.kind {
            assert!(inst.text.starts_with(".long 0x") || inst.text.starts_with(".byte "));
            assert!(!reason.to_string().is_empty());
        }
        covered += usize::from(inst.len);
    }
    assert_eq!(covered, data.len());
});
