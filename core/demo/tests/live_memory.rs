//! The debugger reads guest memory through the tap (`ToTarget::ReadMemory`): from the emulator's
//! own pages in host mode, on the game's thread, at once while the game is paused and at its next
//! dispatch while it runs; a page the process cannot read, a read too long and too many reads
//! pending are answered with a named error, and the game never crashes or waits for it.
//!
//! The target here is an engine in host mode over a "process" of two pages kept by the test (the
//! second one unreadable, as a page the emulator protected), driven by a thread that dispatches in
//! a loop, as an emulator's GPU thread does.

#![allow(
    clippy::unwrap_used,
    clippy::expect_used,
    reason = "tests: a failure is the test failing, with its message"
)]

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use dispatchscope_core::addr::ByteRange;
use dispatchscope_core::host::{HostError, HostMemory, RealMapping};
use dispatchscope_core::input::{DeviceLimits, DispatchInput, Event};
use dispatchscope_core::{CpuBackend, Engine};
use dispatchscope_live::protocol::{Breakpoints, MAX_MEMORY_READ, ToDebugger};
use dispatchscope_live::{LiveClient, Tap};

mod common;
use common::{T, serial};

const GUEST: u64 = 0x2_0000_0000;
const HOST: u64 = 0x7f00_0000_0000;
const PAGE: u64 = 0x1000;

/// Two pages of "emulator memory": the first readable, the second not.
struct Pages {
    bytes: Mutex<Vec<u8>>,
}

impl HostMemory for Pages {
    fn name(&self) -> String {
        "the test's pages".into()
    }
    fn read(&self, host_addr: u64, out: &mut [u8]) -> Result<(), HostError> {
        let at = host_addr.wrapping_sub(HOST);
        if at + out.len() as u64 > PAGE {
            return Err(HostError::new(
                "read",
                host_addr,
                out.len() as u64,
                "the page is PROT_NONE",
            ));
        }
        let b = self.bytes.lock().unwrap();
        out.copy_from_slice(&b[at as usize..at as usize + out.len()]);
        Ok(())
    }
    fn write(&self, host_addr: u64, bytes: &[u8]) -> Result<(), HostError> {
        let at = (host_addr - HOST) as usize;
        self.bytes.lock().unwrap()[at..at + bytes.len()].copy_from_slice(bytes);
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

struct Game {
    pages: Arc<Pages>,
    stop: Arc<AtomicBool>,
    thread: Option<std::thread::JoinHandle<()>>,
    addr: String,
}

impl Drop for Game {
    fn drop(&mut self) {
        self.stop.store(true, Ordering::Relaxed);
        if let Some(t) = self.thread.take() {
            t.join().unwrap();
        }
    }
}

/// A host-mode engine over [`Pages`], dispatching in a loop on its own thread through a tap.
fn game() -> Game {
    let mut bytes = vec![0u8; 2 * PAGE as usize];
    for (i, b) in bytes.iter_mut().enumerate() {
        *b = (i * 7 + 3) as u8;
    }
    let pages = Arc::new(Pages {
        bytes: Mutex::new(bytes),
    });
    let stop = Arc::new(AtomicBool::new(false));
    let (tx, rx) = std::sync::mpsc::channel();
    let thread = {
        let (pages, stop) = (Arc::clone(&pages), Arc::clone(&stop));
        std::thread::spawn(move || {
            let host: Arc<dyn HostMemory> = pages;
            let mut engine =
                Engine::with_host(DeviceLimits::default(), CpuBackend::default(), host).unwrap();
            let mut tap = Tap::listen(common::loopback("memory test target")).unwrap();
            tap.apply(
                &mut engine,
                &Event::Reserve {
                    range: ByteRange::new(GUEST, GUEST + 2 * PAGE),
                    readable: true,
                    writable: true,
                    committed: true,
                    backing: Default::default(),
                    host_base: Some(HOST),
                },
            )
            .unwrap();
            tx.send(tap.local_addr().unwrap().to_string()).unwrap();
            let input = DispatchInput::default();
            while !stop.load(Ordering::Relaxed) {
                tap.dispatch(&mut engine, &input).unwrap();
                std::thread::sleep(Duration::from_millis(2));
            }
        })
    };
    let addr = rx.recv_timeout(T).unwrap();
    Game {
        pages,
        stop,
        thread: Some(thread),
        addr,
    }
}

fn answer(c: &LiveClient, seen: &mut Vec<ToDebugger>, want: u64) -> ToDebugger {
    c.wait_for(
        T,
        seen,
        |m| matches!(m, ToDebugger::Memory { id, .. } if *id == want),
    )
    .unwrap()
}

#[test]
fn a_debugger_reads_the_emulators_own_pages_running_and_paused_and_errors_are_named() {
    let _g = serial();
    let g = game();
    let c = LiveClient::connect(&g.addr, None, T).unwrap();
    let mut seen = Vec::new();

    // Running: answered at the next dispatch, from the emulator's page as it is now.
    g.pages.lock_write(0x40, &[0xde, 0xad, 0xbe, 0xef]);
    c.read_memory(1, GUEST + 0x3e, 8).unwrap();
    let ToDebugger::Memory {
        contents: Some(got),
        error: None,
        ..
    } = answer(&c, &mut seen, 1)
    else {
        panic!("read 1 failed")
    };
    assert_eq!(got.address, GUEST + 0x3e);
    let mut want = g.pages.bytes.lock().unwrap()[0x3e..0x46].to_vec();
    assert_eq!(&want[2..6], &[0xde, 0xad, 0xbe, 0xef]);
    assert_eq!(got.bytes, want);

    // Paused: the game's thread answers while it waits, and stays paused.
    c.set_breakpoints(&Breakpoints {
        every_dispatch: true,
        ..Breakpoints::default()
    })
    .unwrap();
    c.wait_for(T, &mut seen, |m| matches!(m, ToDebugger::Paused { .. }))
        .unwrap();
    g.pages.lock_write(0x100, &[1, 2, 3, 4]);
    c.read_memory(2, GUEST + 0x100, 4).unwrap();
    let ToDebugger::Memory {
        contents: Some(got),
        ..
    } = answer(&c, &mut seen, 2)
    else {
        panic!("read 2 failed")
    };
    assert_eq!(got.bytes, [1, 2, 3, 4]);
    want.clear();

    // A page the process cannot read: a named error, and the game lives on.
    c.read_memory(3, GUEST + PAGE - 4, 8).unwrap();
    let ToDebugger::Memory {
        contents: None,
        error: Some(e),
        ..
    } = answer(&c, &mut seen, 3)
    else {
        panic!("read 3 did not fail")
    };
    assert!(
        e.contains("PROT_NONE") && e.contains("8 bytes at 0x200000ffc"),
        "{e}"
    );

    // Too long: refused by the server thread without the game's.
    c.read_memory(4, GUEST, MAX_MEMORY_READ + 1).unwrap();
    let ToDebugger::Memory { error: Some(e), .. } = answer(&c, &mut seen, 4) else {
        panic!("read 4 was not refused")
    };
    assert!(e.contains("longer than"), "{e}");
    assert!(
        !seen.iter().any(|m| matches!(m, ToDebugger::Resumed { .. })),
        "the reads resumed the game"
    );

    // The game runs on after the debugger detaches.
    c.set_breakpoints(&Breakpoints::default()).unwrap();
    c.resume().unwrap();
    c.wait_for(T, &mut seen, |m| matches!(m, ToDebugger::Resumed { .. }))
        .unwrap();
}

impl Pages {
    fn lock_write(&self, at: usize, bytes: &[u8]) {
        self.bytes.lock().unwrap()[at..at + bytes.len()].copy_from_slice(bytes);
    }
}
