//! Writes fuzzing seeds into a folder: every shipped sample as JSON (`DIR/sample_json/`) and as a
//! capture (`DIR/capture/`), for the cargo-fuzz targets in `core/fuzz`.
//!
//! `cargo run -p dispatchscope-formats --example fuzz_seeds -- /tmp/corpus`

use dispatchscope_formats::sample::Sample;
use dispatchscope_formats::session::write_capture;
use dispatchscope_formats::shipped;

fn main() -> Result<(), Box<dyn std::error::Error>> {
    let dir = std::path::PathBuf::from(
        std::env::args()
            .nth(1)
            .ok_or("usage: fuzz_seeds DIR (the corpus folder)")?,
    );
    let (json_dir, capture_dir) = (dir.join("sample_json"), dir.join("capture"));
    std::fs::create_dir_all(&json_dir)?;
    std::fs::create_dir_all(&capture_dir)?;
    for name in shipped::names() {
        let text = shipped::sample_text(name).ok_or("a shipped sample without text")?;
        let stem = name.trim_end_matches(".json");
        std::fs::write(json_dir.join(name), text)?;
        let sample = Sample::from_json(text)?;
        let reports = sample.run()?;
        write_capture(
            &sample,
            Some(&reports),
            &capture_dir.join(format!("{stem}.dscap")),
        )?;
    }
    Ok(())
}
