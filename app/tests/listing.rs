//! The guest program beside its accesses (issue 17): `explain` prints the instruction beside each
//! escape; the shipped ray-traversal sample carries a program whose instruction at every access's
//! pc is the kind of memory instruction the access says; and the window's Program panel shows the
//! selected escape's line highlighted, a click on a line's escape marker selects that escape, and
//! Ctrl+L hides and shows the panel.

#![allow(missing_docs, reason = "tests")]
#![allow(clippy::unwrap_used, clippy::expect_used, reason = "tests")]

mod common;

use dispatchscope::gui;
use std::path::PathBuf;
use std::process::Command;

use common::harness;
use dispatchscope_core::AccessKind;
use dispatchscope_core::input::Op;
use dispatchscope_formats::sample::{Sample, Step};
use dispatchscope_views::Tab;
use egui::{Key, Modifiers};
use egui_kittest::kittest::Queryable;
use gui::{GuiApp, Settings};

fn sample_path(name: &str) -> String {
    PathBuf::from(env!("CARGO_MANIFEST_DIR"))
        .join("../samples")
        .join(name)
        .display()
        .to_string()
}

fn ray_traversal() -> Sample {
    Sample::from_json(&std::fs::read_to_string(sample_path("ray-traversal.json")).unwrap()).unwrap()
}

/// The instruction at `pc` in the sample's programs, as the decoder prints it.
fn instruction_at(s: &Sample, pc: u64) -> dispatchscope_rdna::Instruction {
    let p = s
        .programs
        .iter()
        .find(|p| pc >= p.address && pc - p.address < p.code.len() as u64)
        .unwrap_or_else(|| panic!("no program holds pc {pc:#x}"));
    dispatchscope_rdna::decode_one(&p.code[(pc - p.address) as usize..], pc)
}

#[test]
fn explain_shows_the_instruction_beside_each_escape() {
    let o = Command::new(env!("CARGO_BIN_EXE_dispatchscope"))
        .args(["explain", &sample_path("ray-traversal.json")])
        .output()
        .unwrap();
    assert_eq!(
        o.status.code(),
        Some(0),
        "{}",
        String::from_utf8_lossy(&o.stderr)
    );
    let text = String::from_utf8(o.stdout).unwrap();
    let lines: Vec<&str> = text.lines().collect();
    let escapes: Vec<usize> = (0..lines.len())
        .filter(|&i| lines[i].trim_start().starts_with("ESCAPE"))
        .collect();
    assert!(!escapes.is_empty(), "ray traversal escapes:\n{text}");
    let s = ray_traversal();
    for i in escapes {
        let at = lines[i].find("pc 0x").unwrap() + 3;
        let pc_text: String = lines[i][at..]
            .chars()
            .take_while(|c| c.is_ascii_hexdigit() || *c == 'x')
            .collect();
        let pc = u64::from_str_radix(pc_text.trim_start_matches("0x"), 16).unwrap();
        let inst = instruction_at(&s, pc);
        assert!(inst.is_ok(), "{pc:#x}: {:?}", inst.kind);
        let want = format!("at {pc:#x}: {}", inst.text);
        assert_eq!(
            lines.get(i + 1).map(|l| l.trim()),
            Some(want.as_str()),
            "the line after the escape at line {i}:\n{text}"
        );
    }
    // The ray intersection's escape names the instruction in full.
    assert!(
        text.contains("at 0x74005b854ab0: image_bvh_intersect_ray v[12:15], v[16:31], s[20:23]"),
        "{text}"
    );
}

#[test]
fn explain_json_carries_no_instruction_lines() {
    let o = Command::new(env!("CARGO_BIN_EXE_dispatchscope"))
        .args(["explain", &sample_path("ray-traversal.json"), "--json"])
        .output()
        .unwrap();
    assert_eq!(o.status.code(), Some(0));
    let text = String::from_utf8(o.stdout).unwrap();
    let _: serde_json::Value = serde_json::from_str(&text).unwrap();
    assert!(!text.contains("image_bvh_intersect_ray"));
}

#[test]
fn every_access_of_ray_traversal_names_its_kind_of_instruction() {
    let s = ray_traversal();
    let mut seen = std::collections::BTreeSet::new();
    let mut n = 0;
    for step in &s.steps {
        let Step::Dispatch(d) = step else { continue };
        for a in &d.accesses {
            let inst = instruction_at(&s, a.pc);
            assert!(inst.is_ok(), "{:#x}: {}", a.pc, inst.text);
            let mnemonic = inst.text.split(' ').next().unwrap().to_owned();
            let prefix = match a.kind {
                AccessKind::Scalar => "s_load_",
                AccessKind::RayIntersection => "image_bvh",
                AccessKind::UntypedBuffer => "buffer_",
                AccessKind::Lds => "ds_",
                AccessKind::Scratch => "scratch_",
                AccessKind::Flat => "flat_",
                AccessKind::Global => "global_",
                other => panic!("an access kind the sample should not hold: {other:?}"),
            };
            assert!(
                mnemonic.starts_with(prefix),
                "{:#x}: a {:?} access at `{}`",
                a.pc,
                a.kind,
                inst.text
            );
            let stores = mnemonic.contains("store");
            assert_eq!(
                stores,
                a.op == Op::Store,
                "{:#x}: {:?} at `{}`",
                a.pc,
                a.op,
                inst.text
            );
            seen.insert(mnemonic);
            n += 1;
        }
    }
    assert!(n > 0);
    for m in [
        "s_load_dwordx16",
        "image_bvh_intersect_ray",
        "buffer_load_dwordx2",
        "ds_read_b32",
        "scratch_load_dword",
        "flat_store_dword",
    ] {
        assert!(seen.contains(m), "no access at a `{m}`: {seen:?}");
    }
}

fn ray_app() -> GuiApp {
    let mut app = GuiApp::new(Settings::default());
    app.open_embedded("ray-traversal.json");
    assert!(app.shared.error.is_none(), "{:?}", app.shared.error);
    app.listing.open = true;
    app
}

#[test]
fn selecting_an_escape_shows_its_instruction_highlighted() {
    let mut app = ray_app();
    let r = app
        .shared
        .session
        .as_ref()
        .unwrap()
        .reports
        .in_memory_reports()[0]
        .clone();
    let e = r.escapes[0].clone();
    app.shared.settings.tab = Tab::Accesses;
    app.shared.sel.access = Some(e.access);
    let mut h = harness(app);
    h.run();
    let want = format!("at {:#x}: {}", e.pc, {
        let s = ray_traversal();
        instruction_at(&s, e.pc).text
    });
    assert_eq!(
        h.state().listing.panel.highlighted().map(|(pc, _)| pc),
        Some(e.pc)
    );
    h.get_by_label(&want);
    assert!(want.contains("image_bvh_intersect_ray"), "{want}");
    // Another access moves the listing to its line.
    let other = r.accesses.iter().find(|a| a.pc != e.pc).unwrap().clone();
    h.state_mut().shared.sel.access = Some(other.index);
    h.run();
    assert_eq!(
        h.state().listing.panel.highlighted().map(|(pc, _)| pc),
        Some(other.pc)
    );
}

#[test]
fn a_click_on_an_escape_marker_selects_the_escape() {
    let mut app = ray_app();
    let r = app
        .shared
        .session
        .as_ref()
        .unwrap()
        .reports
        .in_memory_reports()[0]
        .clone();
    let e = r.escapes[0].clone();
    let first = r.accesses.iter().find(|a| a.pc != e.pc).unwrap().clone();
    app.shared.sel.access = Some(first.index);
    app.shared.settings.tab = Tab::Bindings;
    let mut h = harness(app);
    h.run();
    // The markers in listing order (by pc): the one on the escape's line.
    let n = r.escapes.iter().filter(|x| x.pc == e.pc).count();
    let mut pcs: Vec<u64> = r
        .escapes
        .iter()
        .filter(|x| r.escapes.iter().filter(|y| y.pc == x.pc).count() == n)
        .map(|x| x.pc)
        .collect();
    pcs.sort_unstable();
    pcs.dedup();
    let nth = pcs.iter().position(|&pc| pc == e.pc).unwrap();
    let label = format!("{n} esc");
    let markers: Vec<_> = h.query_all_by_label(&label).collect();
    assert_eq!(markers.len(), pcs.len());
    markers[nth].click();
    h.run();
    assert_eq!(h.state().shared.sel.access, Some(e.access));
    assert_eq!(h.state().shared.settings.tab, Tab::Accesses);
    assert_eq!(
        h.state().listing.panel.highlighted().map(|(pc, _)| pc),
        Some(e.pc)
    );
}

#[test]
fn ctrl_l_hides_and_shows_the_program_panel() {
    let mut app = ray_app();
    app.listing.open = false;
    let mut h = harness(app);
    h.run();
    assert!(h.query_by_label("Program").is_none());
    h.key_press_modifiers(Modifiers::COMMAND, Key::L);
    h.run();
    assert!(h.state().listing.open);
    assert!(h.query_by_label("Program").is_some());
    h.key_press_modifiers(Modifiers::COMMAND, Key::L);
    h.run();
    assert!(!h.state().listing.open);
    assert!(h.query_by_label("Program").is_none());
    h.key_press_modifiers(Modifiers::COMMAND, Key::L);
    h.run();
    assert!(h.state().listing.open);
    assert!(h.query_by_label("Program").is_some());
}
