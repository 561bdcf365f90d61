//! dispatchscope-formats: sessions on disk.
//!
//! A session is the memory events and dispatches an emulator ran, in order. It is kept either as a
//! sample ([`sample`], JSON a person can read and write) or as a capture ([`capture`]'s crash-safe,
//! indexed record container, with [`session`]'s records in it); [`session::open`] reads either, and
//! [`generate`] writes random valid sessions of any size for tests, benches and fuzzing.
//!
//! Replaying a session runs it on a [`dispatchscope_core::Engine`]; nothing here plans or decides.

mod bytes;
pub mod capture;
pub mod checkpoint;
mod codes;
pub mod columns;
pub mod generate;
pub mod history;
pub mod instrumented;
pub mod legacy;
pub mod loss;
pub mod message;
pub mod packed;
pub mod sample;
pub mod session;
pub mod shipped;
pub mod stream;
pub mod versions;
pub mod what_if;
