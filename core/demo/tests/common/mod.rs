//! What the live tests share: one target at a time (`serial`), the bound on every wait (`T`), a
//! loopback tap's config, and the demo target run in a thread of the test's process.

#![allow(dead_code, reason = "each test file uses part of it")]
#![allow(
    clippy::unwrap_used,
    clippy::expect_used,
    reason = "in a test, an unwrap is an assertion"
)]

use std::net::SocketAddr;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex, MutexGuard, mpsc};
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

use dispatchscope_demo::{Demo, DemoConfig};
use dispatchscope_live::{Tap, TapConfig, TapHandle};

pub static SERIAL: Mutex<()> = Mutex::new(());

pub fn serial() -> MutexGuard<'static, ()> {
    SERIAL
        .lock()
        .unwrap_or_else(std::sync::PoisonError::into_inner)
}

pub const T: Duration = Duration::from_secs(10);

/// A tap listening on an ephemeral loopback port, as `target_name`.
pub fn loopback(target_name: &str) -> TapConfig {
    TapConfig {
        target_name: target_name.into(),
        ..TapConfig::listening_on("127.0.0.1:0".parse().unwrap())
    }
}

/// The demo target in a thread of this process.
pub struct Target {
    pub addr: SocketAddr,
    pub handle: TapHandle,
    pub frames: Arc<AtomicU64>,
    pub stop: Arc<AtomicBool>,
    pub thread: Option<JoinHandle<()>>,
}

pub fn spawn_target(config: TapConfig, demo_config: DemoConfig, fps: f64) -> Target {
    let (tx, rx) = mpsc::channel();
    let frames = Arc::new(AtomicU64::new(0));
    let stop = Arc::new(AtomicBool::new(false));
    let thread = {
        let (frames, stop) = (Arc::clone(&frames), Arc::clone(&stop));
        std::thread::spawn(move || {
            let mut tap = Tap::listen(config).unwrap();
            tx.send((tap.local_addr().unwrap(), tap.handle())).unwrap();
            let mut demo = Demo::new(demo_config).unwrap();
            let frame_time = Duration::from_secs_f64(1.0 / fps);
            let mut next = Instant::now();
            while !stop.load(Ordering::Relaxed) {
                demo.frame(&mut tap).unwrap();
                frames.fetch_add(1, Ordering::Relaxed);
                next += frame_time;
                let now = Instant::now();
                if next > now {
                    std::thread::sleep(next - now);
                } else {
                    next = now;
                }
            }
        })
    };
    let (addr, handle) = rx.recv_timeout(T).unwrap();
    Target {
        addr,
        handle,
        frames,
        stop,
        thread: Some(thread),
    }
}

impl Target {
    pub fn addr(&self) -> String {
        self.addr.to_string()
    }

    /// Waits until the game has run `n` more frames; panics after `within`.
    pub fn runs(&self, n: u64, within: Duration) -> Duration {
        let t0 = Instant::now();
        let start = self.frames.load(Ordering::Relaxed);
        while self.frames.load(Ordering::Relaxed) < start + n {
            assert!(
                t0.elapsed() < within,
                "the target ran {} frames in {within:?}, not {n}",
                self.frames.load(Ordering::Relaxed) - start
            );
            std::thread::sleep(Duration::from_millis(2));
        }
        t0.elapsed()
    }

    /// Asserts that no frame completes for `d` (the game is paused).
    pub fn stays_paused(&self, d: Duration) {
        let start = self.frames.load(Ordering::Relaxed);
        std::thread::sleep(d);
        let after = self.frames.load(Ordering::Relaxed);
        assert!(
            after <= start + 1,
            "the target ran {} frames while paused",
            after - start
        );
    }
}

impl Drop for Target {
    fn drop(&mut self) {
        self.stop.store(true, Ordering::Relaxed);
        if let Some(t) = self.thread.take() {
            let _ = t.join();
        }
    }
}
