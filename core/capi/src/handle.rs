//! Handles that C can hold without being able to crash us: numbers into a registry, with a
//! generation, instead of pointers. 0 is never a handle, and a destroyed handle's number is never
//! handed out again, so a double destroy or a use after destroy is a status.

use std::sync::{Arc, Mutex, MutexGuard, PoisonError};

use crate::ffi::{Failure, ds_status};

/// A registry of `T`s behind handles. Each entry has its own lock, so calls on different
/// entries run in parallel and the registry's lock is held only to find one.
pub(crate) struct Registry<T> {
    inner: Mutex<Slots<T>>,
}

struct Slots<T> {
    /// Index `i` holds the entry whose handle's low 32 bits are `i + 1`, and its generation.
    entries: Vec<(u32, Option<Arc<Mutex<T>>>)>,
    free: Vec<u32>,
}

impl<T> Registry<T> {
    pub const fn new() -> Self {
        Self {
            inner: Mutex::new(Slots {
                entries: Vec::new(),
                free: Vec::new(),
            }),
        }
    }

    fn slots(&self) -> MutexGuard<'_, Slots<T>> {
        // The registry's own lock guards only its vectors, which no panic leaves half-changed.
        self.inner.lock().unwrap_or_else(PoisonError::into_inner)
    }

    /// Registers `value`; the handle is never 0.
    pub fn insert(&self, value: T) -> u64 {
        let mut s = self.slots();
        let entry = Some(Arc::new(Mutex::new(value)));
        let index = match s.free.pop() {
            Some(i) => {
                let slot = &mut s.entries[i as usize];
                slot.0 = slot.0.wrapping_add(1);
                slot.1 = entry;
                i
            }
            None => {
                s.entries.push((1, entry));
                (s.entries.len() - 1) as u32
            }
        };
        let generation = s.entries[index as usize].0;
        (u64::from(generation) << 32) | u64::from(index + 1)
    }

    fn find(&self, handle: u64, what: &str) -> Result<(usize, Arc<Mutex<T>>), Failure> {
        let invalid = || {
            Failure::new(
                ds_status::DS_INVALID_HANDLE,
                if handle == 0 {
                    format!("{what} handle is 0 (the null handle)")
                } else {
                    format!("{what} handle {handle:#x} was never made or has been destroyed")
                },
            )
        };
        let index = (handle & 0xffff_ffff) as usize;
        let generation = (handle >> 32) as u32;
        let s = self.slots();
        let (g, entry) = index
            .checked_sub(1)
            .and_then(|i| s.entries.get(i).map(|e| (i, e)))
            .ok_or_else(invalid)?;
        match entry {
            (stored, Some(arc)) if *stored == generation => Ok((g, Arc::clone(arc))),
            _ => Err(invalid()),
        }
    }

    /// The entry of `handle`, shared with any call in flight on it.
    pub fn get(&self, handle: u64, what: &str) -> Result<Arc<Mutex<T>>, Failure> {
        self.find(handle, what).map(|(_, arc)| arc)
    }

    /// Removes `handle`'s entry. A call in flight on it keeps its `Arc` and finishes first.
    pub fn remove(&self, handle: u64, what: &str) -> Result<Arc<Mutex<T>>, Failure> {
        let (index, arc) = self.find(handle, what)?;
        let mut s = self.slots();
        s.entries[index].1 = None;
        // A generation that would wrap is retired rather than reused.
        if s.entries[index].0 != u32::MAX {
            s.free.push(index as u32);
        }
        Ok(arc)
    }
}

/// Locks an entry, refusing one that a caught panic left half-updated.
pub(crate) fn lock<'a, T>(entry: &'a Mutex<T>, what: &str) -> Result<MutexGuard<'a, T>, Failure> {
    entry.lock().map_err(|_| {
        Failure::new(
            ds_status::DS_PANICKED,
            format!(
                "this {what} panicked in an earlier call and may be half-updated; destroy it and \
                 make a new one"
            ),
        )
    })
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]
    use super::*;

    #[test]
    fn a_destroyed_handle_is_never_valid_again_even_when_its_slot_is_reused() {
        let r = Registry::new();
        let a = r.insert(1u32);
        assert!(r.remove(a, "x").is_ok());
        assert_eq!(
            r.remove(a, "x").err().map(|f| f.status),
            Some(ds_status::DS_INVALID_HANDLE)
        );
        let b = r.insert(2u32);
        assert_ne!(a, b, "the slot is reused with a new generation");
        assert!(r.get(a, "x").is_err());
        assert_eq!(*r.get(b, "x").unwrap().lock().unwrap(), 2);
        assert!(r.get(0, "x").is_err());
        assert!(r.get(0xdead_0000_0007, "x").is_err());
    }
}
