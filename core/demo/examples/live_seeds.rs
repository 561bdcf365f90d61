//! Writes seeds for the `live_frame` fuzz target (`core/fuzz`): the frames a real demo target
//! sends a debugger, as they came over loopback (each a 4-byte length and its payload), one file
//! a frame, plus a few runs of consecutive frames, so that the fuzzer starts from the protocol's
//! real hello, snapshot, mapping states, dispatches and events instead of from nothing.
//!
//! Run: `cargo run -p dispatchscope-demo --example live_seeds -- OUT_DIR [FRAMES]` (the
//! default is 64 frames), then
//! `cargo +nightly fuzz run -O --fuzz-dir core/fuzz live_frame OUT_DIR`.

#![allow(clippy::print_stdout, reason = "an example's report")]

use std::io::Write;
use std::net::TcpStream;
use std::path::PathBuf;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::{Duration, Instant};

use dispatchscope_demo::{Demo, DemoConfig};
use dispatchscope_live::protocol::{
    DebuggerHello, FrameReader, MAX_COMMAND_FRAME_BYTES, MAX_FRAME_BYTES, ToTarget, write_frame,
};
use dispatchscope_live::wire::{BINARY_MAGIC, FLAG_LZ4};
use dispatchscope_live::{Tap, TapConfig};

fn main() -> Result<(), Box<dyn std::error::Error>> {
    let mut args = std::env::args().skip(1);
    let out = PathBuf::from(args.next().ok_or("usage: live_seeds OUT_DIR [FRAMES]")?);
    let frames: usize = match args.next() {
        Some(n) => n.parse()?,
        None => 64,
    };
    std::fs::create_dir_all(&out)?;

    // The demo target, as `dispatchscope demo` runs it, in a thread of this process.
    let stop = Arc::new(AtomicBool::new(false));
    let (tx, rx) = std::sync::mpsc::channel();
    let game = {
        let stop = Arc::clone(&stop);
        std::thread::spawn(move || -> Result<(), String> {
            let config = TapConfig::listening_on(([127, 0, 0, 1], 0).into());
            let mut tap = Tap::listen(config).map_err(|e| e.to_string())?;
            tx.send(tap.local_addr().ok_or("the tap has no address")?)
                .map_err(|e| e.to_string())?;
            let mut demo = Demo::new(DemoConfig::default()).map_err(|e| e.to_string())?;
            while !stop.load(Ordering::Relaxed) {
                demo.frame(&mut tap).map_err(|e| e.to_string())?;
                std::thread::sleep(Duration::from_millis(16));
            }
            Ok(())
        })
    };
    let addr = rx.recv_timeout(Duration::from_secs(10))?;

    let mut stream = TcpStream::connect_timeout(&addr, Duration::from_secs(5))?;
    stream.set_read_timeout(Some(Duration::from_millis(50)))?;
    let mut reader = FrameReader::new(MAX_FRAME_BYTES);
    let mut got: Vec<Vec<u8>> = Vec::new();
    let deadline = Instant::now() + Duration::from_secs(60);
    while got.len() < frames && Instant::now() < deadline {
        if let Some(payload) = reader.read_frame(&mut stream)? {
            if got.is_empty() {
                // The target's hello came: answer it, asking for a snapshot too.
                let hello = DebuggerHello::new("live_seeds", None, true);
                write_frame(
                    &mut stream,
                    &ToTarget::Hello(hello),
                    MAX_COMMAND_FRAME_BYTES,
                )?;
            }
            let mut frame = u32::try_from(payload.len())?.to_le_bytes().to_vec();
            frame.extend_from_slice(&payload);
            got.push(frame);
        }
    }
    stop.store(true, Ordering::Relaxed);
    drop(stream);
    game.join().map_err(|_| "the demo's thread panicked")??;

    let mut bytes = 0;
    for (i, f) in got.iter().enumerate() {
        std::fs::File::create(out.join(format!("frame-{i:04}")))?.write_all(f)?;
        bytes += f.len();
    }
    // Each binary frame again with its body lz4 compressed, as a target sends to a debugger that
    // is not on loopback (`dispatchscope_live::wire`'s layout: magic, flags bit 0, count, then the
    // body's length and one lz4 block).
    for (i, f) in got.iter().enumerate() {
        let payload = &f[4..];
        if payload.len() < 6 || payload[0] != BINARY_MAGIC || payload[1] & FLAG_LZ4 != 0 {
            continue;
        }
        let body = &payload[6..];
        let mut z = vec![BINARY_MAGIC, payload[1] | FLAG_LZ4];
        z.extend_from_slice(&payload[2..6]);
        z.extend_from_slice(&u32::try_from(body.len())?.to_le_bytes());
        z.extend_from_slice(&lz4_flex::block::compress(body));
        let mut frame = u32::try_from(z.len())?.to_le_bytes().to_vec();
        frame.extend_from_slice(&z);
        std::fs::File::create(out.join(format!("lz4-{i:04}")))?.write_all(&frame)?;
    }
    // Runs of consecutive frames: a dispatch that names a mapping state sent in an earlier frame.
    for (i, run) in got.chunks(8).enumerate() {
        std::fs::File::create(out.join(format!("run-{i:04}")))?.write_all(&run.concat())?;
    }
    println!(
        "{} frames ({bytes} bytes) from the demo at {addr} written to {}",
        got.len(),
        out.display()
    );
    Ok(())
}
