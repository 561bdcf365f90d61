//! `dispatchscope disasm`, run as a user runs it: raw code one instruction a line as LLVM prints
//! it, a sample's program listed with its pcs and access counts, bad files exit 2 by name.

#![allow(
    clippy::unwrap_used,
    clippy::expect_used,
    reason = "tests: a panic is the test failing, with its message"
)]

use std::path::PathBuf;
use std::process::{Command, Output};

fn run(args: &[&str]) -> Output {
    Command::new(env!("CARGO_BIN_EXE_dispatchscope"))
        .args(args)
        .output()
        .expect("the binary runs")
}

fn sample(name: &str) -> String {
    PathBuf::from(env!("CARGO_MANIFEST_DIR"))
        .join("../samples")
        .join(name)
        .display()
        .to_string()
}

#[test]
fn raw_code_prints_one_instruction_a_line_as_llvm_does() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("code.bin");
    let words: [u32; 9] = [
        0xf410_0001,
        0xfa00_0010, // s_load_dwordx16 s[0:15], s[2:3], 0x10
        0xbf8c_0070, // s_waitcnt vmcnt(0) lgkmcnt(0)
        0x0600_02ff,
        0x0001_2345, // v_add_f32_e32 v0, 0x12345, v1
        0xf198_9f01,
        0x0001_0000, // image_bvh_intersect_ray v[0:3], v[0:15], s[4:7]
        0xffff_ffff, // not an instruction
        0x0600_02ff, // a literal cut off at the end
    ];
    let bytes: Vec<u8> = words.iter().flat_map(|w| w.to_le_bytes()).collect();
    std::fs::write(&path, bytes).unwrap();
    let o = run(&["disasm", "--raw", path.to_str().unwrap()]);
    assert_eq!(
        o.status.code(),
        Some(0),
        "{}",
        String::from_utf8_lossy(&o.stderr)
    );
    assert_eq!(
        String::from_utf8(o.stdout).unwrap(),
        "s_load_dwordx16 s[0:15], s[2:3], 0x10\n\
         s_waitcnt vmcnt(0) lgkmcnt(0)\n\
         v_add_f32_e32 v0, 0x12345, v1\n\
         image_bvh_intersect_ray v[0:3], v[0:15], s[4:7]\n\
         .long 0xffffffff\n\
         .long 0x060002ff\n"
    );
    let err = String::from_utf8(o.stderr).unwrap();
    assert!(
        err.contains("offset 0x1c") && err.contains("VOP2 instruction needs 8 bytes"),
        "{err}"
    );
}

#[test]
fn the_ray_traversal_program_holds_the_instructions_its_accesses_name() {
    let o = run(&[
        "disasm",
        &sample("ray-traversal.json"),
        "--program",
        "0x74005b854a00",
    ]);
    assert_eq!(
        o.status.code(),
        Some(0),
        "{}",
        String::from_utf8_lossy(&o.stderr)
    );
    let out = String::from_utf8(o.stdout).unwrap();
    assert!(
        out.starts_with("program 0x74005b854a00 (256 bytes)\n"),
        "{out}"
    );
    for (pc, mnemonic) in [
        ("0x74005b854a80", "buffer_load_dwordx4 "),
        ("0x74005b854a90", "s_load_dwordx16 "),
        ("0x74005b854aa0", "flat_store_dword "),
        ("0x74005b854ab0", "image_bvh_intersect_ray "),
        ("0x74005b854ac0", "buffer_load_dwordx2 "),
        ("0x74005b854ac8", "v_med3_u32 "),
        ("0x74005b854ad0", "flat_store_dword "),
        ("0x74005b854ad8", "scratch_load_dword "),
        ("0x74005b854ae0", "ds_read_b32 "),
        ("0x74005b854af0", "global_store_dwordx2 "),
    ] {
        let line = out
            .lines()
            .find(|l| l.trim_start().starts_with(pc))
            .unwrap_or_else(|| panic!("no line at {pc}:\n{out}"));
        assert!(line.contains(mnemonic), "{pc}: {line}");
        if pc != "0x74005b854ac8" {
            assert!(
                line.contains(" access"),
                "the access at {pc} is marked: {line}"
            );
        }
    }
    assert!(
        !out.contains(".long"),
        "the shipped program decodes whole:\n{out}"
    );
    // Without --program, all three programs.
    let all = String::from_utf8(run(&["disasm", &sample("ray-traversal.json")]).stdout).unwrap();
    assert_eq!(all.lines().filter(|l| l.starts_with("program ")).count(), 3);
}

#[test]
fn bad_files_exit_two_by_name() {
    let o = run(&["disasm", "--raw", "/nonexistent/code.bin"]);
    assert_eq!(o.status.code(), Some(2));
    assert!(String::from_utf8_lossy(&o.stderr).contains("/nonexistent/code.bin"));

    let dir = tempfile::tempdir().unwrap();
    let empty = dir.path().join("empty.bin");
    std::fs::write(&empty, b"").unwrap();
    let o = run(&["disasm", "--raw", empty.to_str().unwrap()]);
    assert_eq!(o.status.code(), Some(2));
    assert!(String::from_utf8_lossy(&o.stderr).contains("empty"));

    let o = run(&[
        "disasm",
        &sample("ray-traversal.json"),
        "--program",
        "0x1234",
    ]);
    assert_eq!(o.status.code(), Some(2));
    let err = String::from_utf8_lossy(&o.stderr).into_owned();
    assert!(
        err.contains("no program at 0x1234") && err.contains("0x74005b854a00"),
        "{err}"
    );

    let o = run(&["disasm", &sample("o7-alignment.json")]);
    assert_eq!(o.status.code(), Some(2));
    assert!(String::from_utf8_lossy(&o.stderr).contains("carries no program code"));

    let garbage = dir.path().join("garbage.json");
    std::fs::write(&garbage, b"{ not json").unwrap();
    let o = run(&["disasm", garbage.to_str().unwrap()]);
    assert_eq!(o.status.code(), Some(2));
}
