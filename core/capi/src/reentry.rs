//! Which engines the calling thread is inside, and in which of their host callbacks, so that a
//! callback calling back into its own engine is `DS_ORDER` by name instead of a wait on the lock
//! its own thread holds (a deadlock). It is bookkeeping of this thread's calls only: it never
//! blocks, never touches an engine, and says nothing of other threads (a call from another thread
//! waits for the lock, as it should).

use std::cell::RefCell;
use std::marker::PhantomData;

use crate::ffi::{Failure, ds_status};

/// One engine call in progress on this thread.
struct Inside {
    engine: u64,
    /// The exported function, `ds_engine_complete`.
    call: &'static str,
    /// The host callback this call is in now, if any: `write`, `commit`.
    callback: Option<&'static str>,
}

thread_local! {
    /// The engine calls this thread is inside, outermost first. It grows past one only through
    /// a callback that calls another engine.
    static INSIDE: RefCell<Vec<Inside>> = const { RefCell::new(Vec::new()) };
}

/// The calling thread is inside a call on an engine until this is dropped (on return or unwind).
pub(crate) struct Entered {
    /// Dropped on the thread that entered.
    _not_send: PhantomData<*const ()>,
}

impl Drop for Entered {
    fn drop(&mut self) {
        // A thread being torn down may have dropped its list already; there is nothing to undo.
        let _ = INSIDE.try_with(|inside| inside.borrow_mut().pop());
    }
}

/// Notes that the calling thread enters `call` on `engine`, or refuses the call with `DS_ORDER`
/// when the thread is inside that engine already (a callback calling back into its engine).
pub(crate) fn enter(engine: u64, call: &'static str) -> Result<Entered, Failure> {
    INSIDE.with(|inside| {
        let mut inside = inside.borrow_mut();
        if let Some(outer) = inside.iter().find(|i| i.engine == engine) {
            let within = match outer.callback {
                Some(callback) => format!("its own {callback} callback ({})", outer.call),
                None => format!("its own call {}", outer.call),
            };
            return Err(Failure::new(
                ds_status::DS_ORDER,
                format!(
                    "{call} was called on engine {engine:#x} from inside {within}; a callback \
                     may not call back into its engine"
                ),
            ));
        }
        inside.push(Inside {
            engine,
            call,
            callback: None,
        });
        Ok(Entered {
            _not_send: PhantomData,
        })
    })
}

/// Runs `f`, a call of the host's `callback`, noting it on the innermost engine call of this
/// thread (the one whose engine makes the call), so that a call back is refused by name.
pub(crate) fn in_callback<R>(callback: &'static str, f: impl FnOnce() -> R) -> R {
    let set = |value: Option<&'static str>| {
        INSIDE.with(|inside| {
            let mut inside = inside.borrow_mut();
            let previous = inside.last().and_then(|i| i.callback);
            if let Some(innermost) = inside.last_mut() {
                innermost.callback = value;
            }
            previous
        })
    };
    let previous = set(Some(callback));
    let result = f();
    set(previous);
    result
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]
    use super::*;

    #[test]
    fn an_engine_entered_twice_on_one_thread_is_an_order_failure_naming_both_calls() {
        let outer = enter(7, "ds_engine_complete").unwrap();
        let message = in_callback("write", || {
            let other = enter(8, "ds_engine_apply");
            assert!(other.is_ok(), "another engine is allowed");
            drop(other);
            enter(7, "ds_engine_apply").err().unwrap()
        });
        assert_eq!(message.status, ds_status::DS_ORDER);
        assert_eq!(
            message.message,
            "ds_engine_apply was called on engine 0x7 from inside its own write callback \
             (ds_engine_complete); a callback may not call back into its engine"
        );
        drop(outer);
        assert!(
            enter(7, "ds_engine_apply").is_ok(),
            "left, it may be entered again"
        );
    }

    #[test]
    fn another_thread_is_not_inside() {
        let _outer = enter(9, "ds_engine_prepare").unwrap();
        let other = std::thread::spawn(|| enter(9, "ds_engine_apply").is_ok());
        assert!(other.join().unwrap());
    }
}
