//! The headless recorder: [`record`] asks a target for a snapshot, then makes it run in steps of
//! [`RecordOptions::batch`] dispatches, asking for the next step as soon as one ends, so no message
//! is ever dropped: the game runs at most one batch ahead of the recorder, and waits only when the
//! recorder is that far behind. It writes through a [`LiveStore`], so that a disk budget
//! ([`RecordOptions::disk_budget`]) rolls and deletes its files as the window's recording does.

use std::path::Path;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::Duration;

use crate::client::{ClientError, ClientOptions, Incoming, LiveClient};
use crate::protocol::{ResumeReason, ToDebugger};
use crate::record::{RecordError, RecordSummary};
use crate::store::{LiveStore, StoreError, StoreOptions};

/// How [`record`] records.
#[derive(Clone, Debug)]
pub struct RecordOptions {
    /// Stop after this many dispatches; `None` records until the target goes or `stop` is set.
    pub dispatches: Option<u64>,
    /// Dispatches per step.
    pub batch: u64,
    /// Flush at least this often.
    pub flush_every: Duration,
    /// How long to wait for the target at any one point.
    pub timeout: Duration,
    /// The most disk the recording may take: past it the oldest of its files go
    /// ([`crate::store`]'s disk budget); `None` writes one file.
    pub disk_budget: Option<u64>,
}

impl Default for RecordOptions {
    fn default() -> Self {
        Self {
            dispatches: None,
            batch: 64,
            flush_every: Duration::from_millis(500),
            timeout: Duration::from_secs(10),
            disk_budget: None,
        }
    }
}

/// Records the target at `addr` to `dest` (see the module docs) until `options.dispatches` were
/// recorded, `stop` is set, or the target goes; then finishes the capture and detaches, leaving
/// the target running. `progress` is called after each batch.
pub fn record(
    addr: &str,
    token: Option<&str>,
    dest: &Path,
    options: &RecordOptions,
    stop: &AtomicBool,
    mut progress: impl FnMut(&RecordSummary),
) -> Result<RecordSummary, RecordError> {
    let client = LiveClient::connect_with(
        addr,
        &ClientOptions {
            token: token.map(str::to_owned),
            timeout: options.timeout,
            client_name: "dispatchscope record".into(),
            snapshot: true,
            // Recording writes each dispatch's bytes as they came.
            keep_received: true,
            ..ClientOptions::default()
        },
    )?;
    let title = format!("live recording of {} at {addr}", client.target().target);
    let mut rec = LiveStore::create(
        dest,
        &title,
        &StoreOptions {
            window: 0,
            flush_every: options.flush_every,
            keep_rows: false,
            disk_budget: options.disk_budget,
        },
    );
    client.pause()?;
    let want = options.dispatches;
    let batch = options.batch.max(1);
    let mut outstanding = false;
    let mut ended: Option<String> = None;
    loop {
        // A step ends with `Paused`, after the state its last dispatch left: stopping before it
        // would end the file on a dispatch whose checkpoint never came.
        if !outstanding
            && (want.is_some_and(|n| rec.summary().dispatches >= n) || stop.load(Ordering::Relaxed))
        {
            break;
        }
        let item = match client.receiver().recv_timeout(options.timeout) {
            Ok(item) => item,
            Err(_) => {
                return Err(ClientError::Timeout {
                    what: format!("{addr}: recording"),
                    ms: options.timeout.as_millis(),
                }
                .into());
            }
        };
        let message = match item {
            Incoming::Message(m) => m,
            Incoming::Disconnected { reason, .. } => {
                ended = Some(reason);
                break;
            }
        };
        rec.take_ref(&message).map_err(from_store)?;
        match &message {
            ToDebugger::Paused { .. } => {
                outstanding = false;
                let left = want.map_or(batch, |n| {
                    n.saturating_sub(rec.summary().dispatches).min(batch)
                });
                if left > 0 && !stop.load(Ordering::Relaxed) {
                    client.step(left)?;
                    outstanding = true;
                }
                progress(rec.summary());
            }
            // A lost device prepares nothing more: the target never pauses again, and the
            // recording (its DEVICE_LOSS record written) is complete.
            ToDebugger::DeviceLost(_) => break,
            ToDebugger::Resumed {
                why: ResumeReason::Silent { .. },
                ..
            } => {
                // We were too slow to answer: pause again (a gap, if any, is counted).
                client.pause()?;
                outstanding = true;
            }
            _ => {}
        }
    }
    let summary = rec.finish().map_err(from_store)?;
    progress(&summary);
    if ended.is_none() {
        let _ = client.detach(Duration::from_secs(2));
    }
    Ok(summary)
}

/// A store's error as a recording's: the recorder's own unwrapped.
fn from_store(e: StoreError) -> RecordError {
    match e {
        StoreError::Record(r) => r,
        other => RecordError::Segment(other.to_string()),
    }
}
