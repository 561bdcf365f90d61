//! Memory events between dispatches (M4, M5, D824, D720): a release or decommit waits for a
//! dispatch still reading the mapping and drops the mapping before the host memory goes; a commit
//! or reprotection revisits left-out pieces; every effect is said in the event's report.

use super::{Engine, EngineError};
use crate::backend::Backend;
use crate::input::Event;
use crate::memory::{GuestMemory, MemoryChange};
use crate::report::{EventReport, When};

impl<B: Backend> Engine<B> {
    /// Applies one memory event between dispatches.
    pub fn apply(&mut self, event: &Event) -> Result<&EventReport, EngineError> {
        puffin::profile_function!();
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
        if self.mappings.mapped_generation().is_some() {
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
