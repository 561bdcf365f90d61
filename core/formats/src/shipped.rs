//! The samples shipped in `samples/`, built into the crate: the app's File ▸ Built-in samples, and
//! one test per sample in every crate that checks them ([`shipped_sample_tests!`](crate::shipped_sample_tests)).

include!(concat!(env!("OUT_DIR"), "/shipped.rs"));

/// The shipped sample named `file` (`"run305-overlap.json"`), as JSON text.
pub fn sample_text(file: &str) -> Option<&'static str> {
    SAMPLES.iter().find(|(n, _)| *n == file).map(|(_, t)| *t)
}

/// The names of the shipped samples, sorted.
pub fn names() -> impl Iterator<Item = &'static str> {
    SAMPLES.iter().map(|(n, _)| *n)
}
