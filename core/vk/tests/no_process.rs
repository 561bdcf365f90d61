//! Nothing outside the library at run time (issue 40): an emulator on a player's machine has its
//! GPU driver and nothing else, so no engine call may run a process (SPIRV-Tools' `spirv-val`
//! among them: the modules the engine builds are validated by the tests instead,
//! `src/spirv/every_module_test.rs`).
//!
//! The test runs itself again as a child whose `PATH` names one empty folder and which refuses
//! itself `execve` (a seccomp filter: a process started by any path fails, and the child checks
//! that it does). There the Vulkan backend is made (the replay module built, its pipeline
//! created), every shipped sample runs through `Engine::dispatch` (prepare, the replay on the
//! device, complete) and agrees with the CPU reference, and host mode over the child's own pages
//! takes a device store into them.
//!
//! Where `DISPATCHSCOPE_REQUIRE_VULKAN=1` (CI), a machine with no Vulkan device fails it; elsewhere
//! it says why it skipped (the parent decides; where it can make the backend, the child must).

#![allow(
    clippy::unwrap_used,
    clippy::expect_used,
    unsafe_code,
    reason = "tests: a panic is the test failing; the child installs its own seccomp filter and maps its own pages"
)]

mod common;

use std::process::Command;
use std::sync::Arc;

use common::{Emulator, Pages, context, engine, quiet};
use dispatchscope_core::backend::CpuBackend;
use dispatchscope_core::input::{Backing, Op};
use dispatchscope_core::report::Mode;
use dispatchscope_formats::sample::Sample;
use dispatchscope_formats::shipped::SAMPLES;
use dispatchscope_vk::verify::compare;
use dispatchscope_vk::{Context, ContextOptions, VkError, VulkanBackend};

/// Set in the child.
const CHILD: &str = "DISPATCHSCOPE_NO_PROCESS_CHILD";

/// SPIRV-Tools' executables, none of which the child's `PATH` may find.
const TOOLS: [&str; 5] = [
    "spirv-val",
    "spirv-opt",
    "spirv-link",
    "spirv-as",
    "spirv-dis",
];

#[test]
fn the_vulkan_engine_runs_with_no_tools_on_path_and_no_exec() {
    if std::env::var_os(CHILD).is_some() {
        child();
        return;
    }
    // The parent decides whether Vulkan runs here; where it does, the child must run it too.
    if context().is_none() {
        return;
    }
    let empty = tempfile::tempdir().unwrap();
    let out = Command::new(std::env::current_exe().unwrap())
        .args([
            "--exact",
            "the_vulkan_engine_runs_with_no_tools_on_path_and_no_exec",
            "--nocapture",
        ])
        .env(CHILD, "1")
        .env("PATH", empty.path())
        .output()
        .unwrap();
    let text = String::from_utf8_lossy(&out.stdout);
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(out.status.success(), "the child failed:\n{text}{err}");
    let exec_refused = cfg!(any(target_arch = "x86_64", target_arch = "aarch64"));
    for line in [
        "CHILD: PATH finds no SPIRV-Tools executable",
        if exec_refused {
            "CHILD: execve is refused"
        } else {
            "CHILD: execve is not filtered on this architecture"
        },
        "CHILD: every shipped sample agrees",
        "CHILD: host mode took a device store",
    ] {
        assert!(text.contains(line), "{line:?} is missing:\n{text}{err}");
    }
}

/// The audit architecture seccomp sees for this build's system calls.
#[cfg(target_arch = "x86_64")]
const AUDIT_ARCH: u32 = 0xc000_003e;
#[cfg(target_arch = "aarch64")]
const AUDIT_ARCH: u32 = 0xc000_00b7;

/// Refuses this process `execve` and `execveat` with `EPERM` from now on (a seccomp filter, after
/// `PR_SET_NO_NEW_PRIVS`), so no process can be started from it by any path; a system call of
/// another architecture kills it.
#[cfg(any(target_arch = "x86_64", target_arch = "aarch64"))]
fn forbid_exec() {
    const LD_W_ABS: u16 = (libc::BPF_LD | libc::BPF_W | libc::BPF_ABS) as u16;
    const JEQ_K: u16 = (libc::BPF_JMP | libc::BPF_JEQ | libc::BPF_K) as u16;
    const RET_K: u16 = (libc::BPF_RET | libc::BPF_K) as u16;
    // `struct seccomp_data`: `nr` at byte 0, `arch` at byte 4.
    let stmt = |code, k| libc::sock_filter {
        code,
        jt: 0,
        jf: 0,
        k,
    };
    let jump = |k, jt, jf| libc::sock_filter {
        code: JEQ_K,
        jt,
        jf,
        k,
    };
    let mut filter = [
        stmt(LD_W_ABS, 4),
        jump(AUDIT_ARCH, 1, 0),
        stmt(RET_K, libc::SECCOMP_RET_KILL_PROCESS),
        stmt(LD_W_ABS, 0),
        jump(libc::SYS_execve as u32, 2, 0),
        jump(libc::SYS_execveat as u32, 1, 0),
        stmt(RET_K, libc::SECCOMP_RET_ALLOW),
        stmt(RET_K, libc::SECCOMP_RET_ERRNO | libc::EPERM as u32),
    ];
    let prog = libc::sock_fprog {
        len: filter.len() as u16,
        filter: filter.as_mut_ptr(),
    };
    // SAFETY: plain prctl calls; the filter program is valid for the call (the kernel copies it).
    unsafe {
        assert_eq!(libc::prctl(libc::PR_SET_NO_NEW_PRIVS, 1, 0, 0, 0), 0);
        assert_eq!(
            libc::prctl(
                libc::PR_SET_SECCOMP,
                libc::SECCOMP_MODE_FILTER,
                &prog as *const libc::sock_fprog,
            ),
            0,
            "seccomp: {}",
            std::io::Error::last_os_error()
        );
    }
}

fn child() {
    let path = std::env::var_os("PATH").unwrap_or_default();
    for dir in std::env::split_paths(&path) {
        for tool in TOOLS {
            assert!(!dir.join(tool).exists(), "{} holds {tool}", dir.display());
        }
    }
    println!("CHILD: PATH finds no SPIRV-Tools executable");
    #[cfg(any(target_arch = "x86_64", target_arch = "aarch64"))]
    {
        forbid_exec();
        let refused = Command::new("/bin/sh").arg("-c").arg("true").status();
        assert_eq!(
            refused.as_ref().map_err(std::io::Error::raw_os_error).err(),
            Some(Some(libc::EPERM)),
            "{refused:?}"
        );
        println!("CHILD: execve is refused");
    }
    #[cfg(not(any(target_arch = "x86_64", target_arch = "aarch64")))]
    println!("CHILD: execve is not filtered on this architecture");
    // Made here, after the filter: the context builds the replay module and its pipeline. Any
    // failure fails the test (the parent made one, so Vulkan runs here).
    let ctx = match Context::new(&ContextOptions {
        validation: true,
        stage_table: false,
    }) {
        Err(VkError::NoValidationLayer) if !common::required() => {
            Context::new(&ContextOptions::default())
        }
        other => other,
    }
    .unwrap_or_else(|e| panic!("the engine cannot be made with no tools and no exec: {e}"));
    for (name, text) in SAMPLES {
        let sample = Sample::from_json(text).unwrap();
        let vk = VulkanBackend::on(Arc::clone(&ctx)).unwrap();
        let c = compare(&sample, CpuBackend::new(), vk).unwrap_or_else(|e| panic!("{name}: {e}"));
        assert!(
            c.differences.is_empty(),
            "{name}: {}",
            c.differences.join("\n")
        );
    }
    println!("CHILD: every shipped sample agrees");
    // Host mode: the engine imports the child's own pages and the replay stores into one.
    let pages = Pages::map(false, 0x10000);
    let emu = Arc::new(Emulator::default());
    let mut e = engine(&ctx, &emu);
    let guest = 0x20_0000_0000;
    e.apply(&common::reserve_at(guest, &pages, Backing::Private))
        .unwrap();
    let input = common::device_dispatch(
        "no process",
        vec![common::access_at(Op::Store, guest + 0x1230, 0xdead_beef)],
    );
    let r = e.dispatch(&input).unwrap();
    assert_eq!(r.mode, Mode::DeviceAddressed);
    assert_eq!(pages.word(0x1230), 0xdead_beef);
    drop(e);
    println!("CHILD: host mode took a device store");
    quiet(&ctx);
}
