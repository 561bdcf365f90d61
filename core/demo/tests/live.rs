//! Live debugging over real sockets on 127.0.0.1 (ephemeral ports): the demo target runs in a thread
//! of this process (or, to be killed, in a child process), and the debugger is a [`LiveClient`] or a
//! raw socket speaking the framing by hand. Every wait is bounded.
//!
//! The tests take one lock, so that one target at a time runs and the thread and memory counts of
//! the attach/detach test see only their own threads.

#![allow(
    clippy::unwrap_used,
    clippy::expect_used,
    reason = "tests: a failure is the test failing, with its message"
)]

use std::collections::BTreeSet;
use std::io::{BufRead, BufReader, Write};
use std::net::{SocketAddr, TcpListener, TcpStream};
use std::sync::Arc;
use std::sync::atomic::AtomicBool;
use std::time::{Duration, Instant};

use dispatchscope_core::memory::GuestMemory;
use dispatchscope_core::report::{DispatchReport, EscapeClass, Mode};
use dispatchscope_core::rules::Rule;
use dispatchscope_demo::{Demo, DemoConfig};
use dispatchscope_formats::session::CaptureFile;
use dispatchscope_live::protocol::{
    Breakpoints, FrameReader, MAX_FRAME_BYTES, PauseReason, RefusalReason, ResumeReason,
    ToDebugger, VERSION, encode_frame,
};
use dispatchscope_live::snapshot::snapshot_of;
use dispatchscope_live::wire::Decoder;
use dispatchscope_live::{
    CaptureRecorder, ClientError, ClientOptions, Incoming, LiveClient, RecordOptions, Tap,
    TapConfig, TapError, record,
};

mod common;
use common::{T, serial, spawn_target};

fn loopback() -> TapConfig {
    common::loopback("test target")
}

fn fast_faults() -> DemoConfig {
    DemoConfig {
        refusal_every: 10,
        escape_every: 10,
        ..DemoConfig::default()
    }
}

fn is_paused(m: &ToDebugger) -> bool {
    matches!(m, ToDebugger::Paused { .. })
}

fn dispatches(seen: &[ToDebugger]) -> Vec<(u64, &DispatchReport)> {
    seen.iter()
        .filter_map(|m| match m {
            ToDebugger::Dispatch { index, report, .. } => Some((*index, &**report)),
            _ => None,
        })
        .collect()
}

// --- raw sockets --------------------------------------------------------------------------------

struct Raw {
    stream: TcpStream,
    reader: FrameReader,
    decoder: Decoder,
    pending: std::collections::VecDeque<ToDebugger>,
}

impl Raw {
    fn connect(addr: SocketAddr) -> Self {
        let stream = TcpStream::connect_timeout(&addr, T).unwrap();
        stream
            .set_read_timeout(Some(Duration::from_millis(50)))
            .unwrap();
        Self {
            stream,
            reader: FrameReader::new(MAX_FRAME_BYTES),
            decoder: Decoder::new(),
            pending: std::collections::VecDeque::new(),
        }
    }

    fn send_bytes(&mut self, bytes: &[u8]) {
        self.stream.write_all(bytes).unwrap();
    }

    fn send(&mut self, v: &serde_json::Value) {
        let f = encode_frame(v, MAX_FRAME_BYTES).unwrap();
        self.send_bytes(&f);
    }

    /// The next message, or None when the target closed the connection.
    fn next(&mut self, within: Duration) -> Option<ToDebugger> {
        let deadline = Instant::now() + within;
        loop {
            if let Some(m) = self.pending.pop_front() {
                return Some(m);
            }
            match self.reader.read_frame(&mut self.stream) {
                Ok(Some(p)) => {
                    let mut out = Vec::new();
                    self.decoder.decode(&p, &mut out).unwrap();
                    self.pending.extend(out);
                }
                Ok(None) => assert!(
                    Instant::now() < deadline,
                    "nothing from the target within {within:?}"
                ),
                Err(_) => return None,
            }
        }
    }

    /// Reads until the target's refusal and the close that follows it.
    fn refusal(&mut self) -> (RefusalReason, String) {
        let mut refused = None;
        while let Some(m) = self.next(T) {
            if let ToDebugger::Refused { reason, message } = m {
                refused = Some((reason, message));
            }
        }
        refused.expect("a refusal before the close")
    }

    fn hello(version: u32, token: Option<&str>) -> serde_json::Value {
        serde_json::json!({"type": "hello", "protocol": "dispatchscope.live", "version": version, "token": token, "client": "raw test"})
    }
}

// --- tests --------------------------------------------------------------------------------------

#[test]
fn attach_pause_and_step_three_consecutive_dispatches() {
    let _g = serial();
    let t = spawn_target(loopback(), DemoConfig::default(), 200.0);
    t.runs(3, T);
    let c = LiveClient::connect(&t.addr(), None, T).unwrap();
    assert_eq!(c.target().target, "test target");
    assert_eq!(c.target().version, VERSION);
    c.pause().unwrap();
    let mut seen = Vec::new();
    let ToDebugger::Paused {
        next_dispatch: first,
        why,
        upcoming,
    } = c.wait_for(T, &mut seen, is_paused).unwrap()
    else {
        unreachable!()
    };
    assert_eq!(why, PauseReason::Requested);
    let upcoming = upcoming.expect("a pause before a dispatch carries the dispatch about to run");
    t.stays_paused(Duration::from_millis(300));
    let mut indices = Vec::new();
    for i in 0..3 {
        c.step(1).unwrap();
        let mut seen = Vec::new();
        let ToDebugger::Paused {
            next_dispatch, why, ..
        } = c.wait_for(T, &mut seen, is_paused).unwrap()
        else {
            unreachable!()
        };
        assert_eq!(why, PauseReason::Step { n: 1 });
        let d = dispatches(&seen);
        assert_eq!(
            d.len(),
            1,
            "one step, one dispatch: {:?}",
            seen.iter().map(ToDebugger::kind).collect::<Vec<_>>()
        );
        let (index, report) = d[0];
        assert_eq!(report.index, index);
        assert_eq!(
            next_dispatch,
            index + 1,
            "it pauses before the next dispatch"
        );
        if i == 0 {
            assert_eq!(
                report.program, upcoming.program,
                "the dispatch that ran is the one the pause announced"
            );
        }
        assert!(seen.iter().any(|m| matches!(
            m,
            ToDebugger::Resumed {
                why: ResumeReason::Step { n: 1 },
                ..
            }
        )));
        indices.push(index);
    }
    assert_eq!(
        indices,
        vec![first, first + 1, first + 2],
        "three consecutive dispatches"
    );
    c.detach(T).unwrap();
    t.runs(10, T);
}

#[test]
fn step_n_runs_n_dispatches_and_events_come_between() {
    let _g = serial();
    let t = spawn_target(loopback(), DemoConfig::default(), 200.0);
    let c = LiveClient::connect(&t.addr(), None, T).unwrap();
    c.pause().unwrap();
    let mut seen = Vec::new();
    let ToDebugger::Paused {
        next_dispatch: first,
        ..
    } = c.wait_for(T, &mut seen, is_paused).unwrap()
    else {
        unreachable!()
    };
    c.step(12).unwrap();
    let mut seen = Vec::new();
    let ToDebugger::Paused {
        next_dispatch, why, ..
    } = c.wait_for(T, &mut seen, is_paused).unwrap()
    else {
        unreachable!()
    };
    assert_eq!(why, PauseReason::Step { n: 12 });
    let idx: Vec<u64> = dispatches(&seen).iter().map(|d| d.0).collect();
    assert_eq!(idx, (first..first + 12).collect::<Vec<_>>());
    assert_eq!(next_dispatch, first + 12);
    assert!(
        seen.iter().any(|m| matches!(m, ToDebugger::Event { .. })),
        "12 dispatches span frames, so events come between"
    );
    drop(c);
    t.runs(5, T);
}

#[test]
fn break_on_next_refusal_stops_after_a_refusing_dispatch() {
    let _g = serial();
    let t = spawn_target(loopback(), fast_faults(), 200.0);
    let c = LiveClient::connect(&t.addr(), None, T).unwrap();
    c.set_breakpoints(&Breakpoints {
        refusal: true,
        ..Breakpoints::default()
    })
    .unwrap();
    let mut rules_seen = BTreeSet::new();
    for _ in 0..2 {
        let mut seen = Vec::new();
        let ToDebugger::Paused {
            next_dispatch,
            why,
            upcoming,
        } = c.wait_for(T, &mut seen, is_paused).unwrap()
        else {
            unreachable!()
        };
        let PauseReason::Refusal { dispatch, rules } = why else {
            panic!("paused for {why:?}")
        };
        assert_eq!(
            next_dispatch,
            dispatch + 1,
            "it stops after the refusing dispatch, before the next"
        );
        assert!(upcoming.is_none(), "the next dispatch is not made yet");
        let d = dispatches(&seen);
        let (index, report) = *d.last().unwrap();
        assert_eq!(
            index, dispatch,
            "the last report before the pause is the refusing dispatch"
        );
        assert_eq!(report.mode, Mode::Refused);
        assert!(!report.refusals.is_empty());
        assert!(
            d[..d.len() - 1]
                .iter()
                .all(|(_, r)| r.mode != Mode::Refused),
            "it stopped at the first refusal"
        );
        rules_seen.extend(rules);
        t.stays_paused(Duration::from_millis(200));
        c.resume().unwrap();
    }
    assert!(
        rules_seen.contains(&Rule::O7) && rules_seen.contains(&Rule::W2),
        "the demo alternates O7 and W2 refusals: {rules_seen:?}"
    );
    c.detach(T).unwrap();
    t.runs(5, T);
}

#[test]
fn other_breakpoints_stop_where_documented() {
    let _g = serial();
    let t = spawn_target(loopback(), fast_faults(), 200.0);
    let c = LiveClient::connect(&t.addr(), None, T).unwrap();
    let mut seen = Vec::new();
    // Escape: after the dispatch that escaped.
    c.set_breakpoints(&Breakpoints {
        escape: true,
        ..Breakpoints::default()
    })
    .unwrap();
    let ToDebugger::Paused {
        next_dispatch, why, ..
    } = c.wait_for(T, &mut seen, is_paused).unwrap()
    else {
        unreachable!()
    };
    let PauseReason::Escape { dispatch, escapes } = why else {
        panic!("{why:?}")
    };
    assert_eq!(next_dispatch, dispatch + 1);
    let (_, r) = *dispatches(&seen).last().unwrap();
    assert_eq!((r.index, r.escapes.len()), (dispatch, escapes));
    assert!(
        r.escapes
            .iter()
            .any(|e| e.class == EscapeClass::NoReservation)
    );
    // Nth dispatch: before it.
    let nth = next_dispatch + 7;
    c.set_breakpoints(&Breakpoints {
        dispatch: Some(nth),
        ..Breakpoints::default()
    })
    .unwrap();
    c.resume().unwrap();
    seen.clear();
    let ToDebugger::Paused {
        next_dispatch,
        why,
        upcoming,
    } = c.wait_for(T, &mut seen, is_paused).unwrap()
    else {
        unreachable!()
    };
    assert_eq!(
        (next_dispatch, why),
        (nth, PauseReason::Nth { dispatch: nth })
    );
    assert!(upcoming.is_some());
    assert_eq!(dispatches(&seen).last().unwrap().0, nth - 1);
    // Program: before a dispatch of it.
    c.set_breakpoints(&Breakpoints {
        programs: vec![dispatchscope_demo::SHADE],
        ..Breakpoints::default()
    })
    .unwrap();
    c.resume().unwrap();
    let ToDebugger::Paused { why, upcoming, .. } = c.wait_for(T, &mut seen, is_paused).unwrap()
    else {
        unreachable!()
    };
    assert_eq!(
        why,
        PauseReason::Program {
            program: dispatchscope_demo::SHADE
        }
    );
    assert_eq!(upcoming.unwrap().program, dispatchscope_demo::SHADE);
    // Every dispatch: before the very next one.
    c.set_breakpoints(&Breakpoints {
        every_dispatch: true,
        ..Breakpoints::default()
    })
    .unwrap();
    c.resume().unwrap();
    let ToDebugger::Paused { why, .. } = c.wait_for(T, &mut seen, is_paused).unwrap() else {
        unreachable!()
    };
    assert_eq!(why, PauseReason::EveryDispatch);
    // A lookup of more than 0 probes: after the first device-addressed dispatch.
    c.set_breakpoints(&Breakpoints {
        probes_over: Some(0),
        ..Breakpoints::default()
    })
    .unwrap();
    c.resume().unwrap();
    seen.clear();
    let ToDebugger::Paused { why, .. } = c.wait_for(T, &mut seen, is_paused).unwrap() else {
        unreachable!()
    };
    let PauseReason::Probes {
        dispatch,
        access,
        probes,
        more_than,
    } = why
    else {
        panic!("{why:?}")
    };
    assert_eq!(more_than, 0);
    let (_, r) = *dispatches(&seen).last().unwrap();
    assert_eq!(r.index, dispatch);
    assert_eq!(r.mode, Mode::DeviceAddressed);
    assert!(
        r.accesses[access]
            .lookups
            .iter()
            .any(|l| l.probes.len() == probes)
    );
    c.detach(T).unwrap();
    t.runs(5, T);
}

#[test]
fn a_debugger_killed_while_the_target_is_paused_lets_it_resume() {
    let _g = serial();
    let t = spawn_target(loopback(), DemoConfig::default(), 200.0);
    // Dropped without a detach: the socket closes and the target runs on at once.
    let c = LiveClient::connect(&t.addr(), None, T).unwrap();
    c.set_breakpoints(&Breakpoints {
        every_dispatch: true,
        ..Breakpoints::default()
    })
    .unwrap();
    c.pause().unwrap();
    c.wait_for(T, &mut Vec::new(), is_paused).unwrap();
    t.stays_paused(Duration::from_millis(1500)); // the heartbeat keeps it paused past the pause timeout
    drop(c);
    let took = t.runs(5, Duration::from_secs(1));
    assert!(
        t.handle
            .take_notices()
            .iter()
            .any(|n| n.contains("closed the connection"))
    );
    eprintln!("resumed 5 frames {took:?} after the debugger's socket closed");

    // Silent: connected, paused, then nothing; it resumes after the pause timeout and forgets the
    // debugger's breakpoints.
    let mut raw = Raw::connect(t.addr);
    assert!(matches!(raw.next(T), Some(ToDebugger::Hello(_))));
    raw.send(&Raw::hello(VERSION, None));
    assert!(matches!(raw.next(T), Some(ToDebugger::Attached { .. })));
    let bp =
        serde_json::json!({"type": "set-breakpoints", "breakpoints": {"every_dispatch": true}});
    raw.send(&bp);
    raw.send(&serde_json::json!({"type": "pause"}));
    while !matches!(raw.next(T), Some(ToDebugger::Paused { .. })) {}
    let paused_at = Instant::now();
    let resumed = loop {
        match raw.next(T) {
            Some(ToDebugger::Resumed {
                why: ResumeReason::Silent { silent_ms },
                ..
            }) => break silent_ms,
            Some(_) => {}
            None => panic!("closed before resuming"),
        }
    };
    let waited = paused_at.elapsed();
    assert!(
        resumed >= 1000 && waited < Duration::from_millis(1500),
        "resumed after {waited:?} ({resumed} ms of silence)"
    );
    t.runs(20, Duration::from_secs(2)); // and no breakpoint stops it again
    assert!(
        t.handle
            .take_notices()
            .iter()
            .any(|n| n.contains("said nothing"))
    );
}

/// Not a test on its own: the child process of `a_killed_target_leaves_the_client_what_it_received`.
#[test]
fn child_target_process() {
    if std::env::var("DS_LIVE_CHILD").as_deref() != Ok("1") {
        return;
    }
    let mut tap = Tap::listen(loopback()).unwrap();
    println!("LISTENING {}", tap.local_addr().unwrap());
    std::io::stdout().flush().unwrap();
    let mut demo = Demo::new(DemoConfig::default()).unwrap();
    let stop = AtomicBool::new(false);
    let options = dispatchscope_demo::RunOptions {
        frames: Some(60 * 200),
        fps: Some(200.0),
    };
    dispatchscope_demo::run(&mut demo, &mut tap, options, &stop, |_| {}).unwrap();
}

#[test]
fn a_killed_target_leaves_the_client_what_it_received() {
    let _g = serial();
    struct KillOnDrop(std::process::Child);
    impl Drop for KillOnDrop {
        fn drop(&mut self) {
            let _ = self.0.kill();
            let _ = self.0.wait();
        }
    }
    let mut child = std::process::Command::new(std::env::current_exe().unwrap())
        .args([
            "child_target_process",
            "--exact",
            "--nocapture",
            "--test-threads",
            "1",
        ])
        .env("DS_LIVE_CHILD", "1")
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::null())
        .spawn()
        .unwrap();
    let mut lines = BufReader::new(child.stdout.take().unwrap()).lines();
    let mut child = KillOnDrop(child);
    let addr = loop {
        let line = lines.next().expect("the child prints its address").unwrap();
        // The harness writes "test child_target_process ... " before the test's own output.
        if let Some((_, a)) = line.split_once("LISTENING ") {
            break a.trim().to_owned();
        }
    };
    let c = LiveClient::connect(&addr, None, T).unwrap();
    let mut got = Vec::new();
    let deadline = Instant::now() + T;
    while dispatches(&got).len() < 20 {
        assert!(Instant::now() < deadline);
        if let Some(Incoming::Message(m)) = c.recv_timeout(Duration::from_millis(100)) {
            got.push(m);
        }
    }
    child.0.kill().unwrap();
    child.0.wait().unwrap();
    let mut disconnect = None;
    let deadline = Instant::now() + Duration::from_secs(2);
    while disconnect.is_none() && Instant::now() < deadline {
        match c.recv_timeout(Duration::from_millis(100)) {
            Some(Incoming::Message(m)) => got.push(m),
            Some(Incoming::Disconnected { reason, clean }) => disconnect = Some((reason, clean)),
            None => {}
        }
    }
    let (reason, clean) = disconnect.expect("the client reports the disconnect");
    assert!(!clean, "{reason}");
    assert!(!c.is_connected());
    let d = dispatches(&got);
    assert!(d.len() >= 20);
    assert!(
        d.windows(2).all(|w| w[1].0 == w[0].0 + 1),
        "what was received is kept, in order"
    );
    assert!(matches!(c.pause(), Err(ClientError::Disconnected { .. })));
}

fn our_threads() -> usize {
    std::fs::read_dir("/proc/self/task")
        .unwrap()
        .filter_map(|e| std::fs::read_to_string(e.ok()?.path().join("comm")).ok())
        .filter(|name| name.starts_with("ds-"))
        .count()
}

fn vm_rss_kib() -> u64 {
    let status = std::fs::read_to_string("/proc/self/status").unwrap();
    let line = status.lines().find(|l| l.starts_with("VmRSS:")).unwrap();
    line.split_whitespace().nth(1).unwrap().parse().unwrap()
}

#[test]
fn two_hundred_attach_detach_cycles_grow_neither_threads_nor_memory() {
    let _g = serial();
    let t = spawn_target(loopback(), DemoConfig::default(), 200.0);
    let cycle = |i: usize| {
        let c = LiveClient::connect(&t.addr(), None, T).unwrap();
        if i.is_multiple_of(4) {
            c.pause().unwrap();
            c.wait_for(T, &mut Vec::new(), is_paused).unwrap();
            c.step(1).unwrap();
        }
        c.detach(T).unwrap();
    };
    for i in 0..20 {
        cycle(i);
    }
    std::thread::sleep(Duration::from_millis(400));
    let (threads0, rss0) = (our_threads(), vm_rss_kib());
    let t0 = Instant::now();
    for i in 0..200 {
        cycle(i);
    }
    let took = t0.elapsed();
    std::thread::sleep(Duration::from_millis(400));
    // Sessions end and are joined; one extra connection lets the accept thread join the last.
    drop(LiveClient::connect(&t.addr(), None, T).unwrap());
    std::thread::sleep(Duration::from_millis(400));
    let (threads1, rss1) = (our_threads(), vm_rss_kib());
    eprintln!(
        "200 cycles in {took:?}; ds- threads {threads0} → {threads1}; VmRSS {rss0} → {rss1} KiB"
    );
    assert!(
        threads1 <= threads0,
        "threads grew: {threads0} → {threads1}"
    );
    assert!(
        rss1 < rss0 + 8 * 1024,
        "VmRSS grew by {} KiB",
        rss1.saturating_sub(rss0)
    );
    t.runs(5, T);
}

#[test]
fn bad_frames_versions_and_tokens_are_refused_and_the_target_keeps_running() {
    let _g = serial();
    let t = spawn_target(
        TapConfig {
            token: Some("s3cret".into()),
            ..loopback()
        },
        DemoConfig::default(),
        200.0,
    );
    let check = |mut raw: Raw, send: &dyn Fn(&mut Raw), want: RefusalReason, says: &[&str]| {
        assert!(matches!(raw.next(T), Some(ToDebugger::Hello(h)) if h.token_required));
        send(&mut raw);
        let (reason, message) = raw.refusal();
        assert_eq!(reason, want, "{message}");
        for s in says {
            assert!(message.contains(s), "{message:?} does not say {s:?}");
        }
        t.runs(3, T);
    };
    // A malformed frame.
    check(
        Raw::connect(t.addr),
        &|r| {
            r.send_bytes(&[
                9, 0, 0, 0, b'{', b'n', b'o', b't', b' ', b'j', b's', b'o', b'n',
            ])
        },
        RefusalReason::Malformed,
        &["malformed"],
    );
    // An oversize frame: refused on its header, before any payload.
    check(
        Raw::connect(t.addr),
        &|r| r.send_bytes(&u32::MAX.to_le_bytes()),
        RefusalReason::Oversize,
        &["4294967295", "65536"],
    );
    // A wrong version: a version 1 debugger is refused by name, and so is a future one.
    check(
        Raw::connect(t.addr),
        &|r| r.send(&Raw::hello(1, Some("s3cret"))),
        RefusalReason::Version,
        &[
            "the debugger speaks version 1",
            &format!("version {VERSION}"),
        ],
    );
    check(
        Raw::connect(t.addr),
        &|r| r.send(&Raw::hello(99, Some("s3cret"))),
        RefusalReason::Version,
        &["version 99", &format!("version {VERSION}")],
    );
    // A wrong token, and none.
    check(
        Raw::connect(t.addr),
        &|r| r.send(&Raw::hello(VERSION, Some("guess"))),
        RefusalReason::Token,
        &["wrong token"],
    );
    let e = LiveClient::connect(&t.addr(), None, T).unwrap_err();
    assert!(
        matches!(
            e,
            ClientError::Refused {
                reason: RefusalReason::Token,
                ..
            }
        ),
        "{e}"
    );
    // Not a hello first.
    check(
        Raw::connect(t.addr),
        &|r| r.send(&serde_json::json!({"type": "pause"})),
        RefusalReason::NotHello,
        &["hello"],
    );
    // A bad frame after the handshake ends the session, and the game runs on.
    let mut raw = Raw::connect(t.addr);
    assert!(matches!(raw.next(T), Some(ToDebugger::Hello(_))));
    raw.send(&Raw::hello(VERSION, Some("s3cret")));
    assert!(matches!(raw.next(T), Some(ToDebugger::Attached { .. })));
    raw.send(&serde_json::json!({"type": "pause"}));
    raw.send(&serde_json::json!({"type": "jump", "to": 3}));
    let (reason, message) = raw.refusal();
    assert_eq!(reason, RefusalReason::Malformed, "{message}");
    t.runs(10, T);
    // The log names each refusal, and a proper debugger still attaches.
    let notices = t.handle.take_notices().join("\n");
    for s in [
        "malformed",
        "larger than",
        "version 99",
        "wrong token",
        "gave none",
        "must be a hello",
        "jump",
    ] {
        let s = if s == "larger than" { "longer than" } else { s };
        assert!(
            notices.contains(s),
            "the target's log does not mention {s:?}:\n{notices}"
        );
    }
    let c = LiveClient::connect(&t.addr(), Some("s3cret"), T).unwrap();
    // One debugger at a time: a second is refused as busy, and the first keeps its session.
    let e = LiveClient::connect(&t.addr(), Some("s3cret"), T).unwrap_err();
    assert!(
        matches!(
            e,
            ClientError::Refused {
                reason: RefusalReason::Busy,
                ..
            }
        ),
        "{e}"
    );
    c.pause().unwrap();
    c.wait_for(T, &mut Vec::new(), is_paused).unwrap();
    c.detach(T).unwrap();
    t.runs(3, T);
}

#[test]
fn bad_dispatches_and_events_are_reported_not_fatal() {
    let _g = serial();
    let mut tap = Tap::listen(loopback()).unwrap();
    let c = LiveClient::connect(&tap.local_addr().unwrap().to_string(), None, T).unwrap();
    let mut engine = dispatchscope_core::Engine::cpu(dispatchscope_demo::demo_limits()).unwrap();
    let bad_event = dispatchscope_core::Event::Release { base: 0x1234_0000 };
    assert!(tap.apply(&mut engine, &bad_event).is_err());
    let bad = dispatchscope_core::DispatchInput {
        program: 0xdead_0000,
        slots: vec![dispatchscope_core::Slot::new(0, 0x1000, 0, false)],
        ..Default::default()
    };
    assert!(tap.dispatch(&mut engine, &bad).is_err());
    let mut seen = Vec::new();
    let failed = c
        .wait_for(T, &mut seen, |m| {
            matches!(m, ToDebugger::DispatchFailed { .. })
        })
        .unwrap();
    let ToDebugger::DispatchFailed {
        index,
        program,
        message,
        kind,
    } = failed
    else {
        unreachable!()
    };
    assert_eq!((index, program), (0, 0xdead_0000));
    assert_eq!(kind, Some(dispatchscope_core::FailureKind::BadInput));
    assert!(message.contains("size 0"), "{message}");
    assert!(seen.iter().any(|m| matches!(m, ToDebugger::EventFailed { message, .. } if message.contains("0x12340000"))), "{seen:?}");
    drop(c);
    drop(tap);
}

#[test]
fn a_debugger_of_another_version_names_the_mismatch_too() {
    let _g = serial();
    // A fake target of version 1 (its hello as version 1 wrote it, with a field we do not know).
    let listener = TcpListener::bind("127.0.0.1:0").unwrap();
    let addr = listener.local_addr().unwrap();
    let fake = std::thread::spawn(move || {
        let (mut s, _) = listener.accept().unwrap();
        let hello = serde_json::json!({"type": "hello", "protocol": "dispatchscope.live", "version": 1, "target": "old", "pid": 1, "token_required": false, "new_field": [1, 2]});
        s.write_all(&encode_frame(&hello, MAX_FRAME_BYTES).unwrap())
            .unwrap();
        s.set_read_timeout(Some(T)).unwrap();
        let mut r = FrameReader::new(MAX_FRAME_BYTES);
        let payload = r.read_frame(&mut s).unwrap().unwrap();
        let v: serde_json::Value = serde_json::from_slice(&payload).unwrap();
        v["version"].as_u64()
    });
    let e = LiveClient::connect(&addr.to_string(), None, T).unwrap_err();
    let text = e.to_string();
    assert!(matches!(e, ClientError::Version { .. }), "{text}");
    assert!(
        text.contains("speaks dispatchscope.live version 1")
            && text.contains(&format!("this debugger speaks version {VERSION}")),
        "{text}"
    );
    assert_eq!(
        fake.join().unwrap(),
        Some(u64::from(VERSION)),
        "the debugger still said its version, so the target can name it too"
    );
}

#[test]
fn a_slow_debugger_never_makes_the_game_wait_and_sees_the_drops() {
    let _g = serial();
    let t = spawn_target(
        TapConfig {
            queue_capacity: 16,
            ..loopback()
        },
        DemoConfig::default(),
        400.0,
    );
    let mut raw = Raw::connect(t.addr);
    assert!(matches!(raw.next(T), Some(ToDebugger::Hello(_))));
    raw.send(&Raw::hello(VERSION, None));
    assert!(matches!(raw.next(T), Some(ToDebugger::Attached { .. })));
    // Read nothing for a while (the socket buffers fill), pinging so as not to be silent.
    let t0 = Instant::now();
    while t0.elapsed() < Duration::from_secs(2) {
        raw.send(&serde_json::json!({"type": "ping"}));
        std::thread::sleep(Duration::from_millis(100));
    }
    let ran = t.runs(100, Duration::from_secs(2));
    assert!(t.handle.figures().dropped > 0, "{:?}", t.handle.figures());
    // Now read: a stats message counts the drops, and dispatch indices have gaps.
    let mut dropped = 0;
    let mut last: Option<u64> = None;
    let mut gaps = 0;
    let t1 = Instant::now();
    // Version 2's frames are small, so the socket buffers hold seconds of dispatches sent before
    // the drops began: read through them (bounded).
    while t1.elapsed() < Duration::from_secs(15) && (dropped == 0 || gaps == 0) {
        match raw.next(T) {
            Some(ToDebugger::Stats(s)) => dropped = dropped.max(s.dropped),
            Some(ToDebugger::Dispatch { index, .. }) => {
                gaps += u64::from(last.is_some_and(|l| index != l + 1));
                last = Some(index);
            }
            Some(_) => {}
            None => panic!("closed"),
        }
    }
    eprintln!(
        "100 frames in {ran:?} with a debugger that read nothing; it then saw {dropped} drops and {gaps} gaps"
    );
    assert!(dropped > 0 && gaps > 0);
}

#[test]
fn listening_beyond_loopback_requires_a_token() {
    let _g = serial();
    let e = Tap::listen(TapConfig::listening_on("0.0.0.0:0".parse().unwrap()))
        .err()
        .expect("refused");
    assert!(matches!(e, TapError::TokenRequired { .. }), "{e}");
    assert!(e.to_string().contains("token"));
    let tap = Tap::listen(TapConfig {
        token: Some("t".into()),
        ..TapConfig::listening_on("0.0.0.0:0".parse().unwrap())
    })
    .unwrap();
    let port = tap.local_addr().unwrap().port();
    let c = LiveClient::connect(&format!("127.0.0.1:{port}"), Some("t"), T).unwrap();
    drop(c);
    drop(tap);
}

#[test]
fn record_writes_a_capture_that_opens_explains_and_replays() {
    let _g = serial();
    let t = spawn_target(loopback(), fast_faults(), 200.0);
    t.runs(40, T); // start mid-game: the snapshot carries memory as it stands
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("live.dscap");
    let stop = AtomicBool::new(false);
    let options = RecordOptions {
        dispatches: Some(120),
        batch: 32,
        ..RecordOptions::default()
    };
    let summary = record(&t.addr(), None, &path, &options, &stop, |_| {}).unwrap();
    assert_eq!(summary.dispatches, 120);
    assert_eq!(summary.missing, 0, "stepping in batches drops nothing");
    assert!(
        summary.snapshot_events > 0 && summary.contents > 0 && summary.events > 0,
        "{summary:?}"
    );
    t.runs(10, T); // the recorder detached: the game runs on

    let mut file = CaptureFile::open(&path).unwrap();
    assert!(file.torn().is_none());
    assert_eq!(file.n_dispatches(), 120);
    let first = file.dispatch(0).unwrap();
    assert_eq!(first.report.unwrap().index, summary.first_dispatch.unwrap());
    let (sample, recorded) = file.to_sample().unwrap();
    let replayed = sample.run().unwrap();
    assert_eq!(replayed.len(), 120);
    for (r, rec) in replayed.iter().zip(&recorded) {
        let rec = rec.as_ref().unwrap();
        assert_eq!(
            (r.program, r.mode, r.escapes.len(), r.refusals.len()),
            (rec.program, rec.mode, rec.escapes.len(), rec.refusals.len()),
            "dispatch {}",
            rec.index
        );
    }
    assert!(recorded.iter().flatten().any(|r| r.mode == Mode::Refused));
}

#[test]
fn a_recorder_killed_mid_way_leaves_a_capture_that_opens() {
    let _g = serial();
    let t = spawn_target(loopback(), DemoConfig::default(), 200.0);
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("cut.dscap");
    let c = LiveClient::connect_with(
        &t.addr(),
        &ClientOptions {
            snapshot: true,
            ..ClientOptions::default()
        },
    )
    .unwrap();
    let mut rec = CaptureRecorder::new(&path, "cut short", Duration::from_secs(3600));
    let mut flushed = 0;
    let deadline = Instant::now() + T;
    while rec.summary().dispatches < 60 {
        assert!(Instant::now() < deadline);
        if let Some(Incoming::Message(m)) = c.recv_timeout(Duration::from_millis(100)) {
            rec.take(&m).unwrap();
            if rec.summary().dispatches == 30 && flushed == 0 {
                rec.flush().unwrap();
                flushed = 30;
            }
        }
    }
    // Killed: no finish, no index, no trailer.
    drop(rec);
    drop(c);
    let mut file = CaptureFile::open(&path).unwrap();
    assert!(
        file.n_dispatches() >= flushed,
        "{} dispatches after a flush of {flushed}",
        file.n_dispatches()
    );
    let (sample, _) = file.to_sample().unwrap();
    sample.run().unwrap();
}

#[test]
fn the_snapshot_rebuilds_guest_memory() {
    let _g = serial();
    let mut tap = Tap::detached();
    let mut demo = Demo::new(DemoConfig::default()).unwrap();
    for _ in 0..45 {
        demo.frame(&mut tap).unwrap();
    }
    let memory = demo.engine().memory();
    let (events, contents) = snapshot_of(memory);
    let mut rebuilt = GuestMemory::new(memory.page_bytes()).unwrap();
    for e in &events {
        rebuilt.apply(e).unwrap();
    }
    for c in &contents {
        rebuilt.write_bytes(c.address, &c.bytes).unwrap();
    }
    let a: Vec<_> = memory.reservations().cloned().collect();
    let b: Vec<_> = rebuilt.reservations().cloned().collect();
    assert_eq!(a, b, "reservations and every page state");
    let ta: Vec<_> = memory.targets().cloned().collect();
    let tb: Vec<_> = rebuilt.targets().cloned().collect();
    assert_eq!(ta, tb);
    assert_eq!(memory.deferred_copies(), rebuilt.deferred_copies());
    // Contents: the same bytes wherever either holds a page (an absent page reads as zeros).
    let pages: BTreeSet<u64> = memory
        .content_pages()
        .chain(rebuilt.content_pages())
        .map(|(a, _)| a)
        .collect();
    let page = memory.page_bytes() as usize;
    let differ: Vec<String> = pages
        .iter()
        .filter(|&&a| {
            let (mut x, mut y) = (vec![0u8; page], vec![0u8; page]);
            memory.read_bytes(a, &mut x).unwrap();
            rebuilt.read_bytes(a, &mut y).unwrap();
            x != y
        })
        .map(|a| format!("{a:#x}"))
        .collect();
    assert!(differ.is_empty(), "contents differ in pages {differ:?}");
}

#[test]
fn the_demo_shows_every_case_it_promises() {
    let _g = serial();
    let mut tap = Tap::detached();
    let mut demo = Demo::new(DemoConfig::default()).unwrap();
    let mut reports = Vec::new();
    let t0 = Instant::now();
    for _ in 0..120 {
        demo.frame_with(&mut tap, |_, r| reports.push(r.clone()))
            .unwrap();
    }
    let dt = t0.elapsed();
    eprintln!(
        "120 frames, {} dispatches in {dt:?} ({:.0} dispatches/s, detached)",
        reports.len(),
        reports.len() as f64 / dt.as_secs_f64()
    );
    let accesses: Vec<usize> = reports.iter().map(|r| r.accesses.len()).collect();
    assert!(
        accesses.iter().all(|&n| (8..=400).contains(&n)),
        "tens to hundreds of accesses: {accesses:?}"
    );
    let any = |f: &dyn Fn(&DispatchReport) -> bool| reports.iter().any(f);
    assert!(any(&|r| r.mode == Mode::Bound
        && r.sets
            .iter()
            .any(|s| s.members.len() == 1 && s.end > s.base + 0xe40f)
        && r.program == dispatchscope_demo::UPDATE_A));
    assert!(any(
        &|r| r.mode == Mode::Bound && r.program == dispatchscope_demo::UPDATE_B
    ));
    assert!(any(
        &|r| r.mode == Mode::DeviceAddressed && r.program == dispatchscope_demo::PRIMARY
    ));
    assert!(
        any(&|r| r.refusals.iter().any(|f| f.rule == Rule::O7)),
        "an O7 refusal"
    );
    assert!(
        any(&|r| r.refusals.iter().any(|f| f.rule == Rule::W2)),
        "a W2 refusal"
    );
    assert!(
        any(&|r| r
            .escapes
            .iter()
            .any(|e| e.class == EscapeClass::NoReservation)),
        "an escape"
    );
    let maps = |f: &dyn Fn(&dispatchscope_core::report::MappingReport) -> bool| {
        reports.iter().filter_map(|r| r.mappings.as_ref()).any(f)
    };
    assert!(
        maps(&|m| m.remapped && m.remaps_total > 2),
        "the generation moves and mappings are made again"
    );
    assert!(
        maps(&|m| m.pieces.iter().any(|p| p.by_revisit)),
        "a D968 revisit"
    );
    assert!(maps(&|m| !m.left_out.is_empty()), "a left-out piece (M3)");
    let events: Vec<_> = reports.iter().flat_map(|r| &r.events_before).collect();
    assert!(events.iter().any(|e| e.generation_moved));
    assert!(
        events.iter().any(|e| e.waited_for.is_some()),
        "a release that waits for the dispatch in flight (M5)"
    );
    assert!(
        events
            .iter()
            .any(|e| e.effects.iter().any(|x| x.contains("D968")))
    );
    assert!(
        events
            .iter()
            .any(|e| e.effects.iter().any(|x| x.starts_with("M4: dropped")))
    );
    assert!(any(&|r| !r.before.copies.is_empty()), "C3");
    assert!(any(&|r| !r.hand_off.targets_distrusted.is_empty()), "C2");
    assert!(any(&|r| r.accesses.iter().any(|a| matches!(
        a.route,
        dispatchscope_core::report::Route::Lds { .. }
    ))));
    assert!(any(&|r| r.accesses.iter().any(|a| matches!(
        a.route,
        dispatchscope_core::report::Route::Scratch { .. }
    ))));
    assert!(
        !any(&|r| !r.hazards.is_empty()),
        "no L1 hazard: no program met so far does both"
    );
}

// --- many dispatches in flight ------------------------------------------------------------------

/// Dispatches a round of [`in_flight_target`] prepares before it completes any.
const IN_FLIGHT: u64 = 64;

/// Where the in-flight target's buffers lie.
const FLIGHT_BASE: u64 = 0x2_0000_0000;

/// A bound pass of run 305's shape, refused under O7 when `misaligned`.
fn flight_pass(misaligned: bool) -> dispatchscope_core::input::DispatchInput {
    use dispatchscope_core::input::{DispatchInput, Slot};
    DispatchInput {
        program: if misaligned {
            0x4000_0000_0200
        } else {
            0x4000_0000_0100
        },
        label: if misaligned { "misaligned" } else { "update" }.into(),
        slots: vec![
            Slot::new(0, FLIGHT_BASE + 0x1000, 0xe40f, true),
            Slot::new(
                1,
                FLIGHT_BASE + 0xf400 + if misaligned { 4 } else { 0 },
                0x20,
                true,
            ),
        ],
        ..DispatchInput::default()
    }
}

/// An emulator-shaped target on a thread: each round prepares [`IN_FLIGHT`] dispatches through
/// the tap (`before_prepare`, `Engine::prepare`, `after_prepare`), abandons the second, then
/// completes the rest in order (`Engine::complete`, `after_complete`). Dispatch 5 of a round is
/// refused (O7); dispatch 9's report carries an escape its device found (one the demo's CPU
/// reference made), as an emulator's instrumented pass's would. With `lose_in`, it waits for a
/// debugger, and in that round the device is lost after the prepares (63 in flight); the tap
/// stays up until `stop`. Returns the address and the thread.
fn in_flight_target(
    stop: Arc<AtomicBool>,
    rounds: Arc<std::sync::atomic::AtomicU64>,
    lose_in: Option<u64>,
) -> (SocketAddr, std::thread::JoinHandle<()>) {
    use dispatchscope_core::addr::ByteRange;
    use dispatchscope_core::engine::{DeviceFault, DeviceRun, RanOn};
    use dispatchscope_core::input::{Backing, DeviceLimits, Event};
    use dispatchscope_core::{CpuBackend, Engine};
    use std::sync::atomic::Ordering;
    let (tx, rx) = std::sync::mpsc::channel();
    let thread = std::thread::spawn(move || {
        let escape = {
            let mut demo = Demo::new(DemoConfig::default()).unwrap();
            let mut found = None;
            while found.is_none() {
                demo.frame_with(&mut Tap::detached(), |_, r| {
                    if found.is_none() {
                        found = r.escapes.first().cloned();
                    }
                })
                .unwrap();
            }
            found.unwrap()
        };
        let mut tap = Tap::listen(loopback()).unwrap();
        tx.send(tap.local_addr().unwrap()).unwrap();
        let mut engine = Engine::<CpuBackend>::cpu(DeviceLimits::default()).unwrap();
        tap.apply(
            &mut engine,
            &Event::Reserve {
                range: ByteRange::new(FLIGHT_BASE, FLIGHT_BASE + 0x40000),
                readable: true,
                writable: true,
                committed: true,
                backing: Backing::Private,
                host_base: None,
            },
        )
        .unwrap();
        let (bound, refused) = (flight_pass(false), flight_pass(true));
        let mut round = 0u64;
        while lose_in.is_some() && !tap.is_attached() && !stop.load(Ordering::Relaxed) {
            std::thread::sleep(Duration::from_millis(2));
        }
        while !stop.load(Ordering::Relaxed) {
            let mut flights = Vec::new();
            for k in 0..IN_FLIGHT {
                let input = if k == 5 { &refused } else { &bound };
                tap.before_prepare(&engine, input);
                let p = engine.prepare(input).unwrap();
                tap.after_prepare(&p);
                flights.push((p, input, k));
            }
            let (second, _, _) = flights.remove(1);
            engine.abandon(second.index).unwrap();
            tap.abandoned(second.index);
            if lose_in == Some(round) {
                let base = engine
                    .mappings()
                    .imports()
                    .next()
                    .map_or(0, |i| i.device_base);
                let fault = DeviceFault {
                    description: "the test's page fault".into(),
                    addresses: vec![(base + 0x40, "read".into()), (0xdead_0000, "write".into())],
                };
                let report = engine
                    .device_lost("VK_ERROR_DEVICE_LOST", Some(&fault))
                    .clone();
                tap.device_lost(&report);
                while !stop.load(Ordering::Relaxed) {
                    std::thread::sleep(Duration::from_millis(2));
                }
                break;
            }
            for (p, input, k) in flights {
                let index = p.index;
                let run = DeviceRun {
                    ran_on: Some("the test's device"),
                    ..DeviceRun::default()
                };
                let mut result = engine.complete(input, p, RanOn::Device(run));
                if k == 9
                    && let Ok(r) = &mut result
                {
                    r.escapes.push(escape.clone());
                }
                tap.after_complete(&engine, input, index, &mut result);
                result.unwrap();
            }
            round += 1;
            rounds.store(round, Ordering::Relaxed);
        }
    });
    (rx.recv_timeout(T).unwrap(), thread)
}

/// Every dispatch `seen` lists as prepared is completed or abandoned in `seen` by the end: none is
/// left in flight, none completes unprepared after the first prepare seen.
fn none_left_in_flight(seen: &[ToDebugger]) -> (usize, usize, usize) {
    let mut in_flight = BTreeSet::new();
    let (mut prepared, mut completed, mut abandoned) = (0, 0, 0);
    for m in seen {
        match m {
            ToDebugger::Prepared { index, .. } => {
                prepared += 1;
                assert!(in_flight.insert(*index), "{index} prepared twice");
            }
            ToDebugger::Dispatch { index, .. } => {
                completed += 1;
                assert!(
                    in_flight.remove(index) || prepared == 0,
                    "{index} completed, never prepared"
                );
                assert!(
                    in_flight.iter().all(|i| i > index),
                    "{index} completed before an older one: {in_flight:?}"
                );
            }
            ToDebugger::Abandoned { index } => {
                abandoned += 1;
                assert!(in_flight.remove(index), "{index} abandoned, never prepared");
            }
            _ => {}
        }
    }
    assert!(in_flight.is_empty(), "left in flight: {in_flight:?}");
    (prepared, completed, abandoned)
}

#[test]
fn with_64_dispatches_in_flight_break_step_and_detach_work_and_the_target_never_deadlocks() {
    use std::sync::atomic::{AtomicU64, Ordering};
    let _g = serial();
    let stop = Arc::new(AtomicBool::new(false));
    let rounds = Arc::new(AtomicU64::new(0));
    let (addr, thread) = in_flight_target(Arc::clone(&stop), Arc::clone(&rounds), None);
    let c = LiveClient::connect(&addr.to_string(), None, T).unwrap();
    // Break on a refusal: dispatch 5 of a round, while 58 later ones are in flight.
    c.set_breakpoints(&Breakpoints {
        refusal: true,
        ..Breakpoints::default()
    })
    .unwrap();
    let mut seen = Vec::new();
    let ToDebugger::Paused { why, upcoming, .. } = c.wait_for(T, &mut seen, is_paused).unwrap()
    else {
        unreachable!()
    };
    let PauseReason::Refusal { dispatch, rules } = why else {
        panic!("paused for {why:?}")
    };
    assert_eq!(rules, vec![Rule::O7]);
    assert!(upcoming.is_none());
    let (_, report) = *dispatches(&seen).last().unwrap();
    assert_eq!(
        report.index, dispatch,
        "the refusing dispatch's report came last"
    );
    assert_eq!(report.mode, Mode::Refused);
    // The dispatches prepared after it are in flight: listed, not completed.
    let prepared_later: Vec<u64> = seen
        .iter()
        .filter_map(|m| match m {
            ToDebugger::Prepared { index, .. } if *index > dispatch => Some(*index),
            _ => None,
        })
        .collect();
    assert!(
        prepared_later.len() as u64 >= IN_FLIGHT - 8,
        "in flight after {dispatch}: {prepared_later:?}"
    );
    assert!(
        seen.iter()
            .any(|m| matches!(m, ToDebugger::Abandoned { .. }))
    );
    let paused_at = rounds.load(Ordering::Relaxed);
    std::thread::sleep(Duration::from_millis(200));
    assert_eq!(
        rounds.load(Ordering::Relaxed),
        paused_at,
        "paused in complete"
    );
    // Break on an escape instead: dispatch 9 of the round, in flight while the game paused.
    c.set_breakpoints(&Breakpoints {
        escape: true,
        ..Breakpoints::default()
    })
    .unwrap();
    c.resume().unwrap();
    let mut seen = Vec::new();
    let ToDebugger::Paused { why, .. } = c.wait_for(T, &mut seen, is_paused).unwrap() else {
        unreachable!()
    };
    let PauseReason::Escape { dispatch: e, .. } = why else {
        panic!("paused for {why:?}")
    };
    assert_eq!(e, dispatch + 4, "the escaping dispatch of the same round");
    // Step 1 with no breakpoint: the rest of the round completes (no pause inside complete), and
    // the game pauses before its next prepare.
    c.set_breakpoints(&Breakpoints::default()).unwrap();
    c.step(1).unwrap();
    let mut seen = Vec::new();
    let ToDebugger::Paused {
        next_dispatch, why, ..
    } = c.wait_for(T, &mut seen, is_paused).unwrap()
    else {
        unreachable!()
    };
    assert_eq!(why, PauseReason::Step { n: 1 });
    let d = dispatches(&seen);
    assert_eq!(d.first().unwrap().0, e + 1);
    assert_eq!(
        next_dispatch,
        d.last().unwrap().0 + 1,
        "every dispatch in flight completed before the pause"
    );
    // Step 3 from a pause before a prepare: a whole round runs (its reports come at its
    // completes), none is left in flight, and it pauses before the next round.
    c.step(3).unwrap();
    let mut seen = Vec::new();
    let ToDebugger::Paused {
        next_dispatch: after,
        why,
        ..
    } = c.wait_for(T, &mut seen, is_paused).unwrap()
    else {
        unreachable!()
    };
    assert_eq!(why, PauseReason::Step { n: 3 });
    assert_eq!(after, next_dispatch + IN_FLIGHT);
    let (prepared, completed, abandoned) = none_left_in_flight(&seen);
    assert_eq!((prepared, completed, abandoned), (64, 63, 1));
    // Detach while paused: the game runs on, rounds of 64 in flight and all.
    let rounds_then = rounds.load(Ordering::Relaxed);
    c.detach(T).unwrap();
    let t0 = Instant::now();
    while rounds.load(Ordering::Relaxed) < rounds_then + 5 {
        assert!(
            t0.elapsed() < T,
            "the target did not run on after the detach"
        );
        std::thread::sleep(Duration::from_millis(5));
    }
    // A debugger attached mid-round gets only the dispatches it saw prepared, each once.
    let c = LiveClient::connect(&addr.to_string(), None, T).unwrap();
    let mut seen = Vec::new();
    while dispatches(&seen).len() < 300 {
        match c.recv_timeout(T) {
            Some(Incoming::Message(m)) => seen.push(m),
            other => panic!("{other:?}"),
        }
    }
    let first_prepared = seen
        .iter()
        .find_map(|m| match m {
            ToDebugger::Prepared { index, .. } => Some(*index),
            _ => None,
        })
        .unwrap();
    assert!(
        dispatches(&seen).iter().all(|(i, _)| *i >= first_prepared),
        "a dispatch whose prepare this debugger did not see was sent"
    );
    drop(c);
    stop.store(true, Ordering::Relaxed);
    thread.join().unwrap();
}

#[test]
fn a_lost_device_reaches_the_debugger_and_its_recording_with_every_dispatch_in_flight() {
    use std::sync::atomic::AtomicU64;
    let _g = serial();
    let stop = Arc::new(AtomicBool::new(false));
    // Lose the device in the third round, with 63 dispatches in flight; the recorder attaches
    // first (it pauses the target at once, and steps it 50 dispatches at a time).
    let (addr, thread) = in_flight_target(Arc::clone(&stop), Arc::new(AtomicU64::new(0)), Some(2));
    let dir = std::env::temp_dir().join(format!("ds-loss-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let path = dir.join("lost.dscap");
    let summary = record(
        &addr.to_string(),
        None,
        &path,
        &RecordOptions {
            batch: 50,
            ..RecordOptions::default()
        },
        &AtomicBool::new(false),
        |_| {},
    )
    .unwrap();
    assert!(summary.device_lost, "{summary:?}");
    let c = CaptureFile::open(&path).unwrap();
    let loss = c.loss().expect("the capture keeps the loss");
    assert_eq!(loss.status, "VK_ERROR_DEVICE_LOST");
    assert_eq!(loss.in_flight.len() as u64, IN_FLIGHT - 1);
    let fault = loss.fault.as_ref().unwrap();
    assert_eq!(fault.addresses.len(), 2);
    assert!(matches!(
        fault.addresses[1].lands,
        dispatchscope_core::report::FaultLands::Unknown { .. }
    ));
    assert_eq!(c.n_dispatches() as u64, 2 * (IN_FLIGHT - 1));
    // A debugger that attaches after the loss learns it first thing.
    let late = LiveClient::connect(&addr.to_string(), None, T).unwrap();
    let Some(Incoming::Message(ToDebugger::DeviceLost(again))) = late.recv_timeout(T) else {
        panic!("no loss for a debugger attached after it")
    };
    assert_eq!(&*again, loss);
    drop(late);
    stop.store(true, std::sync::atomic::Ordering::Relaxed);
    thread.join().unwrap();
    let _ = std::fs::remove_dir_all(&dir);
}
