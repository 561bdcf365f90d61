//! A lost device on disk and on the wire: the DEVICE_LOSS record ([`DEVICE_LOSS`], kind 0x0a) of a
//! capture, whose payload is the engine's [`DeviceLossReport`] as JSON (its `schema` field,
//! [`LOSS_SCHEMA`], names the layout), and the same bytes a live target sends as message kind 7
//! (`dispatchscope_live::wire::MSG_DEVICE_LOSS`), so that a live store writes what came unchanged.
//!
//! A capture holds at most one loss that counts: the engine makes one report a session (a second
//! `Engine::device_lost` returns the first), and a reader keeps the last DEVICE_LOSS record should
//! a joined file hold more. A reader older than the record skips it, as every session reader skips
//! record kinds it does not know (`crate::session`'s rule). This module never runs an engine.

use dispatchscope_core::report::{DeviceLossReport, LOSS_SCHEMA};
use thiserror::Error;

use crate::capture::RecordKind;

/// A DEVICE_LOSS record: the engine's loss report (`Engine::device_lost`) as JSON, written once a
/// session, when the emulator's fence reported the device lost.
pub const DEVICE_LOSS: RecordKind = RecordKind(0x0a);

/// Why a DEVICE_LOSS payload is not a loss report.
#[derive(Debug, Error)]
pub enum LossError {
    /// Not the JSON of a loss report.
    #[error("not a device-loss report: {0}")]
    Json(#[from] serde_json::Error),
    /// A report of another layout.
    #[error("a device-loss report of schema {found:?}; this build reads {LOSS_SCHEMA:?}")]
    Schema {
        /// The schema it names.
        found: String,
    },
    /// The report could not be encoded (a bug: every field serializes).
    #[error("the device-loss report cannot be encoded: {0}")]
    Encode(String),
}

/// The payload of a DEVICE_LOSS record (and of the wire's message kind 7): `report` as JSON.
pub fn encode(report: &DeviceLossReport) -> Result<Vec<u8>, LossError> {
    serde_json::to_vec(report).map_err(|e| LossError::Encode(e.to_string()))
}

/// Reads a DEVICE_LOSS payload; a report of another schema is refused by name.
pub fn decode(bytes: &[u8]) -> Result<DeviceLossReport, LossError> {
    let report: DeviceLossReport = serde_json::from_slice(bytes)?;
    if report.schema != LOSS_SCHEMA {
        return Err(LossError::Schema {
            found: report.schema,
        });
    }
    Ok(report)
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used, reason = "tests")]

    use super::*;
    use dispatchscope_core::addr::ByteRange;
    use dispatchscope_core::report::{
        EscapeClass, FaultAddress, FaultLands, FaultReport, LostDispatch, Mode, ProgramHistory,
    };
    use dispatchscope_core::rules::Rule;

    fn report() -> DeviceLossReport {
        DeviceLossReport {
            schema: LOSS_SCHEMA.to_owned(),
            status: "VK_ERROR_DEVICE_LOST".into(),
            next_dispatch: 9,
            in_flight: vec![LostDispatch {
                index: 7,
                program: 0x4000_0000,
                label: "ray".into(),
                mode: Mode::DeviceAddressed,
                history: ProgramHistory {
                    runs: 3,
                    escapes: vec![(EscapeClass::LeftOut, 2)],
                    refusals: vec![(Rule::O7, 1)],
                    last_escape: Some("escaped".into()),
                    last_dispatch: Some(5),
                    ..ProgramHistory::default()
                },
                ..LostDispatch::default()
            }],
            fault: Some(FaultReport {
                description: "page fault".into(),
                addresses: vec![
                    FaultAddress {
                        address: 0x1234,
                        kind: "read".into(),
                        lands: FaultLands::Unknown {
                            nearest_below: Some((ByteRange::new(0x1000, 0x1100), 0x134)),
                        },
                    },
                    FaultAddress {
                        address: 0x9000,
                        kind: "write".into(),
                        lands: FaultLands::Table { offset: 0x40 },
                    },
                ],
            }),
            completed: 8,
            findings: vec!["a finding".into()],
        }
    }

    #[test]
    fn a_loss_report_round_trips_and_a_bad_one_is_named() {
        let r = report();
        assert_eq!(decode(&encode(&r).unwrap()).unwrap(), r);
        let mut other = r.clone();
        other.schema = "dispatchscope.device-loss/9".into();
        let e = decode(&encode(&other).unwrap()).unwrap_err();
        assert!(matches!(e, LossError::Schema { .. }), "{e}");
        assert!(e.to_string().contains("device-loss/9"), "{e}");
        for bad in [&b""[..], b"{", b"[]", b"{\"schema\":1}", b"\xff\xfe"] {
            let e = decode(bad).unwrap_err();
            assert!(matches!(e, LossError::Json(_)), "{e}");
        }
    }
}
