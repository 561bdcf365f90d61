//! Real demo messages, collected once through a live client, then fed to a live session again and
//! again with new dispatch numbers: how the tests and the memory bench put hundreds of thousands
//! (or ten million) dispatches through the window's live path (a link made by `LiveLink::fed`: its
//! intake thread, the store, the rows; `LiveLink::drain` into `Session::push_batch`) without a
//! socket or a game that fast.
//!
//! A tool of the tests and benches, kept in the library so that each links it once; the binary
//! never uses it.

use std::time::{Duration, Instant};

use anyhow::{Context as _, bail};

use dispatchscope_live::{ClientOptions, Incoming, LiveClient, ToDebugger};

use crate::gui::{LiveLink, Session};

/// What a live session receives: the messages up to its first dispatch (the snapshot the store
/// starts on), then dispatches to repeat.
pub struct Feed {
    /// The snapshot and everything before the first dispatch after it, in order.
    pub start: Vec<ToDebugger>,
    /// Dispatch messages, in the order the target sent them.
    pub dispatches: Vec<ToDebugger>,
}

impl Feed {
    /// Collects `n` dispatches (at least one) from the target at `addr` (with a snapshot first),
    /// for at most 60 s; a target that goes, or sends too few in time, is an error.
    pub fn collect(addr: &str, n: usize) -> anyhow::Result<Feed> {
        let options = ClientOptions {
            snapshot: true,
            ..ClientOptions::default()
        };
        let client = LiveClient::connect_with(addr, &options)
            .with_context(|| format!("attach to the demo at {addr}"))?;
        let mut start = Vec::new();
        let mut dispatches = Vec::new();
        let mut seen_snapshot = false;
        let deadline = Instant::now() + Duration::from_secs(60);
        while dispatches.len() < n.max(1) {
            if Instant::now() >= deadline {
                bail!(
                    "the demo sent {} dispatches in 60 s, not {n}",
                    dispatches.len()
                );
            }
            match client.recv_timeout(Duration::from_millis(200)) {
                Some(Incoming::Message(m)) => match m {
                    ToDebugger::Snapshot(_) => {
                        seen_snapshot = true;
                        start.push(m);
                    }
                    ToDebugger::Dispatch { .. } if seen_snapshot => dispatches.push(m),
                    ToDebugger::Dispatch { .. } => {}
                    // Sent once, before the first dispatch naming the program: kept to replay.
                    ToDebugger::Program { .. } => start.push(m),
                    _ if seen_snapshot && dispatches.is_empty() => start.push(m),
                    _ => {}
                },
                Some(Incoming::Disconnected { reason, .. }) => bail!("the demo went: {reason}"),
                None => {}
            }
        }
        let _ = client.detach(Duration::from_millis(200));
        Ok(Feed { start, dispatches })
    }

    /// The `i`th dispatch of the session: a collected one, renumbered `first + i`; `None` when
    /// the feed has no dispatch (`collect` always keeps one).
    pub fn dispatch(&self, first: u64, i: u64) -> Option<ToDebugger> {
        let n = self.dispatches.len() as u64;
        let mut m = self.dispatches.get(i.checked_rem(n)? as usize)?.clone();
        if let ToDebugger::Dispatch { index, report, .. } = &mut m {
            *index = first + i;
            report.index = first + i;
        }
        Some(m)
    }

    /// The target's number of the first collected dispatch.
    pub fn first_index(&self) -> u64 {
        match self.dispatches.first() {
            Some(ToDebugger::Dispatch { index, .. }) => *index,
            _ => 0,
        }
    }
}

/// Sends `m` to a fed link's intake (`LiveLink::fed`), waiting while its channel is full.
pub fn send(tx: &std::sync::mpsc::SyncSender<Incoming>, m: ToDebugger) -> anyhow::Result<()> {
    tx.send(Incoming::Message(m))
        .context("the link's intake ended")
}

/// Drains `link` into `session` (as the window does each frame) until the intake has received
/// `n` dispatches in all and the session holds every one, for at most 60 s.
pub fn drain_until(link: &mut LiveLink, session: &mut Session, n: u64) -> anyhow::Result<()> {
    let deadline = Instant::now() + Duration::from_secs(60);
    loop {
        link.drain(session);
        if link.received() >= n && session.rows.len() as u64 >= n {
            return Ok(());
        }
        if Instant::now() >= deadline {
            bail!(
                "the intake received {} dispatches in 60 s, not {n} (the session holds {})",
                link.received(),
                session.rows.len()
            );
        }
        std::thread::sleep(Duration::from_millis(1));
    }
}
