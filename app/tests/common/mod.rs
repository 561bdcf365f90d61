//! What the GUI tests share: a kittest harness around the real [`GuiApp`], the window size and
//! fonts the app uses, so that every GUI test (and every image snapshot) sees the same frame.
//!
//! Each test crate links the app library (`dispatchscope::gui`) and includes this module with
//! `mod common;`.

use egui_kittest::Harness;

use dispatchscope::gui::GuiApp;

/// A harness that draws `app` in a 1280×800 window with the app's fonts.
#[allow(dead_code, reason = "each test crate uses part of this module")]
pub fn harness(app: GuiApp) -> Harness<'static, GuiApp> {
    Harness::builder()
        .with_size(egui::vec2(1280.0, 800.0))
        .with_context_setup(dispatchscope_views::style::install_fonts)
        .build_ui_state(|ui, app: &mut GuiApp| app.ui(ui), app)
}

/// Writes a capture that ends with its device lost to `path`: the ray-traversal sample run through
/// an engine and a `SessionWriter` (as the C ABI's capture writes), its three passes prepared
/// again and in flight at the loss, with a fault report of an address in an import and a wild
/// one. Returns the loss report.
#[allow(dead_code, reason = "each test crate uses part of this module")]
pub fn lost_capture(path: &std::path::Path) -> dispatchscope_core::report::DeviceLossReport {
    use dispatchscope_core::engine::DeviceFault;
    use dispatchscope_core::{CpuBackend, Engine};
    use dispatchscope_formats::sample::{Sample, Step};
    use dispatchscope_formats::session::{CAPTURE_FORMAT, CaptureMeta, DispatchRecord};
    use dispatchscope_formats::stream::SessionWriter;
    let text = dispatchscope_formats::shipped::sample_text("ray-traversal.json").expect("shipped");
    let sample = Sample::from_json(text).expect("a sample");
    let meta = CaptureMeta {
        format: CAPTURE_FORMAT.into(),
        sample_version: sample.version,
        title: "a lost device".into(),
        description: String::new(),
        provenance: sample.provenance.clone(),
        device: sample.device.clone(),
        programs: sample.programs.clone(),
    };
    let mut w = SessionWriter::create(path, &meta).expect("create");
    let mut engine = Engine::<CpuBackend>::cpu(sample.device.clone()).expect("engine");
    let mut loaded = false;
    for step in &sample.steps {
        match step {
            Step::Event(e) => {
                engine.apply(e).expect("event");
                w.event(e).expect("event");
            }
            Step::Dispatch(d) => {
                // Contents load before the first dispatch, as a replay loads them.
                for c in sample.contents.iter().filter(|_| !loaded) {
                    engine
                        .try_load_contents(c.address, &c.bytes)
                        .expect("contents");
                    w.contents(c).expect("contents");
                }
                loaded = true;
                let report = engine.dispatch(d).expect("dispatch");
                w.dispatch(&DispatchRecord {
                    input: (**d).clone(),
                    report: Some(report),
                })
                .expect("dispatch");
            }
        }
    }
    for d in sample.dispatches() {
        engine.prepare(d).expect("prepare");
    }
    let import = engine
        .mappings()
        .imports()
        .next()
        .expect("an import")
        .device_base;
    let fault = DeviceFault {
        description: "a page fault".into(),
        addresses: vec![
            (import + 0x48, "read".into()),
            (0x0000_7fff_0000_0000, "invalid pointer".into()),
        ],
    };
    let report = engine
        .device_lost("VK_ERROR_DEVICE_LOST", Some(&fault))
        .clone();
    w.device_lost(&report).expect("loss");
    w.finish().expect("finish");
    report
}
