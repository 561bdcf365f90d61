//! Memory events between dispatches (M4, M5, D824, D720): a release or decommit waits for a
//! dispatch still reading the mapping and drops the mapping before the host memory goes; a commit
//! or reprotection revisits left-out pieces; every effect is said in the event's report.

use super::{Engine, EngineError};
use crate::backend::Backend;
use crate::input::{Event, HostProtection};
use crate::memory::{GuestMemory, MemoryChange};
use crate::report::{EventReport, When};

impl<B: Backend> Engine<B> {
    /// Applies one memory event between dispatches. While a dispatch is prepared (host mode: the
    /// emulator's own device may be running it), an event that releases, decommits or reprotects
    /// memory it can reach is refused with [`EngineError::Waits`] naming it (M5), and the
    /// dispatch's report lists it; every other event applies at once.
    pub fn apply(&mut self, event: &Event) -> Result<&EventReport, EngineError> {
        puffin::profile_function!();
        self.wait_for_prepared(event)?;
        let when = When {
            event: self.next_event,
            before_dispatch: self.next_dispatch,
        };
        let generation = self.memory.generation();
        let mut effects = Vec::new();
        let mut waited_for = None;
        let going = match event {
            Event::Release { base } => Some((self.memory.reservation(*base)?.range, true)),
            Event::Decommit { range } => {
                self.memory.check_range(*range)?;
                Some((*range, false))
            }
            _ => None,
        };
        let mut dropped = Vec::new();
        if let Some((range, released)) = going
            && self.mappings.overlaps(range)
        {
            // M5: a release waits for any dispatch still reading the mapping.
            if let Some(d) = self.in_flight.take() {
                waited_for = Some(d);
                effects.push(format!(
                    "M5: waited for dispatch {d}'s fence before the host memory of {range} went"
                ));
            }
            // M4: drop the mapping before the host memory goes.
            dropped = self
                .mappings
                .drop_over(&mut self.backend, range, when, released)?;
            for p in &dropped {
                effects.push(format!(
                    "M4: dropped the mapping of {} before its host memory went",
                    p.guest
                ));
            }
        }
        let change = self.memory.apply(event)?;
        if let Some((range, released)) = going {
            self.mappings.after_host_memory_gone(
                &self.memory,
                &mut self.backend,
                &dropped,
                range,
                released,
            )?;
        }
        self.page_events.record(event, when);
        if let Event::Guard { range } = event
            && self.memory.host().is_some()
        {
            self.guards_raised.push(*range);
            // Applied under a device-addressed dispatch in flight (its stores pass a guard by on
            // this device): said, with what tells the write-watch.
            if let Some(d) = self.flights.newest_device_addressed()
                && let Some(reached) = self.mappings.first_reachable(*range)
            {
                effects.push(format!(
                    "M5: dispatch {d} in flight may store through {reached}; this device's stores land past a write-watch guard, so the guard applies now and C1's marks hand the stores off at dispatch {d}'s complete (C2)"
                ));
            }
        }
        if self.mappings.mapped_generation().is_some() {
            for range in &change.revisit {
                for (r, reason) in
                    self.mappings
                        .requalify(&self.memory, &mut self.backend, *range)?
                {
                    effects.push(format!(
                        "M3: dropped the mapping of {r}: {} since this {} event; M3 keeps only committed, private, read-write pieces the guest may write, and the mapping follows the page's state",
                        reason.phrase(),
                        event.name()
                    ));
                }
            }
            for range in &change.revisit {
                for r in self.mappings.revisit(
                    &self.memory,
                    &mut self.backend,
                    *range,
                    self.next_dispatch,
                )? {
                    effects.push(format!(
                        "M5 (D968): mapped {r}, now committed, private and read-write"
                    ));
                }
            }
        }
        describe_change(&change, &self.memory, &mut effects);
        if matches!(event, Event::Retire)
            && let Some(d) = self.in_flight.take()
        {
            effects.push(format!("dispatch {d} retired: its fence has signalled"));
        }
        let generation_moved = self.memory.generation() != generation;
        if generation_moved {
            effects.push(format!(
                "M4: the readable runs changed; generation {} → {}: the next device-addressed dispatch maps again",
                generation,
                self.memory.generation()
            ));
        }
        self.next_event += 1;
        self.pending.push(EventReport {
            index: when.event,
            event: event.clone(),
            generation_moved,
            waited_for,
            effects,
        });
        let last = self.pending.len() - 1;
        Ok(&self.pending[last])
    }
}

impl<B: Backend> Engine<B> {
    /// M5 for the emulator's own dispatches: the prepared dispatch's reach (its holders, and every
    /// mapped piece for a device-addressed one) against what `event` would release, decommit,
    /// remap (set-backing) or reprotect lower (a protect or host-protect short of read-write, a
    /// guard). A commit, an unguard, a protection raised, a CPU write, a copy or a target takes
    /// nothing from the device and never waits.
    fn wait_for_prepared(&mut self, event: &Event) -> Result<(), EngineError> {
        if self.flights.is_empty() {
            return Ok(());
        }
        let range = match event {
            Event::Release { base } => match self.memory.reservation(*base) {
                Ok(r) => r.range,
                Err(_) => return Ok(()),
            },
            // Lowering what the pages allow waits; raising it (an unguard, a protect back to
            // read-write) takes nothing from the device and applies at once.
            Event::Protect {
                range,
                readable,
                writable,
            } if !(*readable && *writable) => *range,
            Event::HostProtect { range, protection }
                if *protection != HostProtection::ReadWrite =>
            {
                *range
            }
            Event::Decommit { range }
            | Event::SetBacking { range, .. }
            | Event::Guard { range } => *range,
            _ => return Ok(()),
        };
        // Every dispatch in flight; the newest that reaches the bytes is the one to complete
        // (completes go in order, so the older ones complete with it). A device-addressed one
        // reaches every mapped piece and every import still held for it. A guard alone takes
        // nothing from a device whose stores land past it (C1 hands them off at complete):
        // there only the holders' bytes wait, as every event's do.
        let mappings = &self.mappings;
        let guard_passes =
            matches!(event, Event::Guard { .. }) && self.backend.device_stores_pass_guards();
        let Some((f, reached)) = self.flights.reached_by(range, |r| {
            if guard_passes {
                None
            } else {
                mappings.first_reachable(r)
            }
        }) else {
            return Ok(());
        };
        let dispatch = f.index;
        let mode = if f.mapped {
            "device-addressed: it reaches every mapped piece"
        } else {
            "bound: it reaches its holders"
        };
        if let Some(f) = self.flights.get_mut(dispatch)
            && f.host_path.waited.len() < WAITED_LISTED
        {
            f.host_path.waited.push(crate::report::WaitedEvent {
                event: event.name().to_owned(),
                range,
                reached,
            });
        }
        Err(EngineError::Waits(Box::new(super::WaitsFor {
            dispatch,
            mode,
            event: event.name(),
            range,
            reached,
        })))
    }
}

/// Events a dispatch in flight made wait that its report lists (an emulator that retries a
/// refused event in a loop would otherwise grow the list without end).
const WAITED_LISTED: usize = 256;

/// What of a page's state an event set, for [`PageEvents`].
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(super) enum Aspect {
    /// The guest view (reserve, protect).
    View,
    /// The host protection (reserve, protect, host-protect).
    Protection,
    /// Private or shared (reserve, set-backing).
    Backing,
    /// Committed or not (reserve, commit, decommit).
    Commit,
}

/// The last event that set each aspect of each page's state, so that an escape into a page left out
/// (M3) can name the event that made it so ("as event 3 (protect) before dispatch 1 left it").
#[derive(Debug, Default)]
pub(super) struct PageEvents {
    view: EventRanges,
    protection: EventRanges,
    backing: EventRanges,
    commit: EventRanges,
}

impl PageEvents {
    /// Notes what `event`, applied at `when`, set.
    fn record(&mut self, event: &Event, when: When) {
        let name = event.name();
        match event {
            Event::Reserve { range, .. } => {
                for m in [
                    &mut self.view,
                    &mut self.protection,
                    &mut self.backing,
                    &mut self.commit,
                ] {
                    m.set(*range, when, name);
                }
            }
            Event::Protect { range, .. } => {
                self.view.set(*range, when, name);
                self.protection.set(*range, when, name);
            }
            Event::HostProtect { range, .. } => self.protection.set(*range, when, name),
            Event::SetBacking { range, .. } => self.backing.set(*range, when, name),
            Event::Commit { range } | Event::Decommit { range } => {
                self.commit.set(*range, when, name);
            }
            _ => {}
        }
    }

    /// The last event that set `aspect` of the page at `addr`.
    pub(super) fn at(&self, aspect: Aspect, addr: u64) -> Option<(When, &'static str)> {
        match aspect {
            Aspect::View => &self.view,
            Aspect::Protection => &self.protection,
            Aspect::Backing => &self.backing,
            Aspect::Commit => &self.commit,
        }
        .at(addr)
    }
}

/// Disjoint ranges, each with the event that last set it. Setting a range is O(log n) plus the
/// ranges it covers.
#[derive(Debug, Default)]
struct EventRanges {
    /// Start → (end, when, event name); disjoint.
    by_start: std::collections::BTreeMap<u64, (u64, When, &'static str)>,
}

impl EventRanges {
    /// `range` was last set by the event `name` at `when`.
    fn set(&mut self, range: crate::addr::ByteRange, when: When, name: &'static str) {
        if range.is_empty() {
            return;
        }
        // Cut the range that holds its start, then drop or trim everything it covers.
        if let Some((&s, &(e, w, n))) = self.by_start.range(..range.start).next_back()
            && e > range.start
        {
            self.by_start.insert(s, (range.start, w, n));
            if e > range.end {
                self.by_start.insert(range.end, (e, w, n));
            }
        }
        let covered: Vec<u64> = self
            .by_start
            .range(range.start..range.end)
            .map(|(&s, _)| s)
            .collect();
        for s in covered {
            if let Some((e, w, n)) = self.by_start.remove(&s)
                && e > range.end
            {
                self.by_start.insert(range.end, (e, w, n));
            }
        }
        self.by_start.insert(range.start, (range.end, when, name));
    }

    fn at(&self, addr: u64) -> Option<(When, &'static str)> {
        self.by_start
            .range(..=addr)
            .next_back()
            .filter(|(_, (e, _, _))| *e > addr)
            .map(|(_, &(_, w, n))| (w, n))
    }
}

/// The write-watch's and the targets' part of an event's effects.
fn describe_change(change: &MemoryChange, memory: &GuestMemory, effects: &mut Vec<String>) {
    for r in &change.noted_written {
        effects.push(format!("D824: the write-watch noted {r} written"));
    }
    for id in &change.distrusted {
        let name = memory
            .targets()
            .find(|t| t.id == *id)
            .map(|t| t.name.clone())
            .unwrap_or_default();
        effects.push(format!("D720: protected target {id} {name} lost its trust"));
    }
}
