//! The committed C header is what cbindgen makes of this crate now.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::path::Path;

#[test]
fn the_committed_header_is_not_stale() {
    let dir = Path::new(env!("CARGO_MANIFEST_DIR"));
    let config = cbindgen::Config::from_file(dir.join("cbindgen.toml")).unwrap();
    let generated = cbindgen::Builder::new()
        .with_crate(dir)
        .with_config(config)
        .generate()
        .expect("cbindgen reads the crate");
    let mut bytes = Vec::new();
    generated.write(&mut bytes);
    let fresh = String::from_utf8(bytes).unwrap();
    let path = dir.join("include/dispatchscope.h");
    if std::env::var_os("UPDATE_HEADER").is_some() {
        std::fs::write(&path, &fresh).unwrap();
    }
    let committed = std::fs::read_to_string(&path).unwrap_or_default();
    assert!(
        committed == fresh,
        "core/capi/include/dispatchscope.h is stale; regenerate it with \
         UPDATE_HEADER=1 cargo test -p dispatchscope-capi --test header"
    );
}
