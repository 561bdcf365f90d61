//! Addresses and byte ranges.
//!
//! Every range in dispatchscope is half-open: `start..end` holds the bytes `start <= b < end`.
//! Addresses serialise as `"0x…"` strings so that JSON keeps 64-bit values exact and readable.
//! Nothing here knows about rules; it is arithmetic only.

use std::fmt;

use serde::{Deserialize, Serialize};

/// A half-open range of bytes, `start..end`, in guest or device address space.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize, Deserialize)]
pub struct ByteRange {
    /// First byte in the range.
    #[serde(with = "hex")]
    pub start: u64,
    /// One past the last byte in the range.
    #[serde(with = "hex")]
    pub end: u64,
}

impl ByteRange {
    /// The range `start..end`. `end < start` is clamped to an empty range at `start`.
    pub fn new(start: u64, end: u64) -> Self {
        Self {
            start,
            end: end.max(start),
        }
    }

    /// The range of `size_bytes` bytes from `start`, or `None` if it would pass `u64::MAX`.
    pub fn from_base_size(start: u64, size_bytes: u64) -> Option<Self> {
        start.checked_add(size_bytes).map(|end| Self { start, end })
    }

    /// Number of bytes in the range.
    pub fn size_bytes(&self) -> u64 {
        // A range read from a file may have its ends the wrong way round: it holds no byte.
        self.end.saturating_sub(self.start)
    }

    /// Whether the range holds no byte.
    pub fn is_empty(&self) -> bool {
        self.end <= self.start
    }

    /// Whether `addr` lies in the range.
    pub fn contains(&self, addr: u64) -> bool {
        self.start <= addr && addr < self.end
    }

    /// Whether `other` lies wholly inside this range.
    pub fn contains_range(&self, other: &ByteRange) -> bool {
        self.start <= other.start && other.end <= self.end
    }

    /// The bytes both ranges hold, if any.
    pub fn intersection(&self, other: &ByteRange) -> Option<ByteRange> {
        let start = self.start.max(other.start);
        let end = self.end.min(other.end);
        (start < end).then_some(ByteRange { start, end })
    }

    /// Whether the two ranges share at least one byte.
    pub fn overlaps(&self, other: &ByteRange) -> bool {
        self.intersection(other).is_some()
    }
}

impl fmt::Display for ByteRange {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{:#x}..{:#x}", self.start, self.end)
    }
}

/// Formats a value as `0x…`, the way reports and the CLI print addresses.
pub fn hex(value: u64) -> String {
    format!("{value:#x}")
}

/// Parses `0x…` (hex) or plain decimal, as samples and CLI flags write numbers.
pub fn parse_u64(text: &str) -> Option<u64> {
    let t = text.trim();
    if t.contains('_') {
        return parse_u64(&t.replace('_', ""));
    }
    if let Some(h) = t.strip_prefix("0x").or_else(|| t.strip_prefix("0X")) {
        u64::from_str_radix(h, 16).ok()
    } else {
        t.parse().ok()
    }
}

/// serde helpers: a `u64` as a `"0x…"` string; reading also accepts a JSON number or a decimal
/// string.
pub mod hex {
    use serde::{Deserializer, Serializer, de};

    /// Writes `value` as `"0x…"`, formatted straight into the serializer's output (no `String` per
    /// address), for a human-readable format (JSON); a binary one (the live protocol's
    /// MessagePack) gets the number itself, which [`deserialize`] reads back as well.
    pub fn serialize<S: Serializer>(value: &u64, s: S) -> Result<S::Ok, S::Error> {
        if s.is_human_readable() {
            s.collect_str(&format_args!("{value:#x}"))
        } else {
            s.serialize_u64(*value)
        }
    }

    /// Reads `"0x…"`, a decimal string, or a JSON number, straight from the deserializer (no
    /// buffering through an untagged enum: a report holds thousands of these).
    pub fn deserialize<'de, D: Deserializer<'de>>(d: D) -> Result<u64, D::Error> {
        d.deserialize_any(HexVisitor)
    }

    struct HexVisitor;

    impl de::Visitor<'_> for HexVisitor {
        type Value = u64;

        fn expecting(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
            f.write_str("a \"0x…\" or decimal number")
        }

        fn visit_u64<E: de::Error>(self, v: u64) -> Result<u64, E> {
            Ok(v)
        }

        fn visit_i64<E: de::Error>(self, v: i64) -> Result<u64, E> {
            u64::try_from(v).map_err(|_| E::invalid_value(de::Unexpected::Signed(v), &self))
        }

        fn visit_str<E: de::Error>(self, s: &str) -> Result<u64, E> {
            super::parse_u64(s).ok_or_else(|| E::invalid_value(de::Unexpected::Str(s), &self))
        }
    }

    /// The same for `Option<u64>`.
    pub mod option {
        use serde::{Deserialize, Deserializer, Serializer};

        /// Writes `Some(v)` as `"0x…"` and `None` as `null`.
        pub fn serialize<S: Serializer>(value: &Option<u64>, s: S) -> Result<S::Ok, S::Error> {
            match value {
                Some(v) => super::serialize(v, s),
                None => s.serialize_none(),
            }
        }

        /// Reads `null` or a number as [`super::deserialize`] does.
        pub fn deserialize<'de, D: Deserializer<'de>>(d: D) -> Result<Option<u64>, D::Error> {
            #[derive(Deserialize)]
            struct W(#[serde(with = "super")] u64);
            Ok(Option::<W>::deserialize(d)?.map(|w| w.0))
        }
    }

    /// The same for `Vec<u64>`.
    pub mod vec {
        use serde::{Deserialize, Deserializer, Serialize, Serializer};

        #[derive(Serialize, Deserialize)]
        struct W(#[serde(with = "super")] u64);

        /// Writes each value as `"0x…"`.
        pub fn serialize<S: Serializer>(values: &[u64], s: S) -> Result<S::Ok, S::Error> {
            s.collect_seq(values.iter().map(|v| W(*v)))
        }

        /// Reads a list of numbers as [`super::deserialize`] does.
        pub fn deserialize<'de, D: Deserializer<'de>>(d: D) -> Result<Vec<u64>, D::Error> {
            Ok(Vec::<W>::deserialize(d)?.into_iter().map(|w| w.0).collect())
        }
    }
}

/// serde helper: bytes as a hex string (`"deadbeef"`), so samples stay readable in a diff.
pub mod bytes_hex {
    use serde::{Deserialize, Deserializer, Serializer, de};

    /// Writes bytes as lowercase hex.
    pub fn serialize<S: Serializer>(bytes: &[u8], s: S) -> Result<S::Ok, S::Error> {
        let mut text = String::with_capacity(bytes.len() * 2);
        for b in bytes {
            text.push_str(&format!("{b:02x}"));
        }
        s.serialize_str(&text)
    }

    /// Reads hex text; spaces are ignored.
    pub fn deserialize<'de, D: Deserializer<'de>>(d: D) -> Result<Vec<u8>, D::Error> {
        let text = String::deserialize(d)?;
        decode(&text).map_err(de::Error::custom)
    }

    /// Why text is not hex bytes.
    #[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
    pub enum HexBytesError {
        /// An odd number of digits (whitespace apart).
        #[error("hex bytes have an odd number of digits ({digits})")]
        OddDigits {
            /// The digits counted.
            digits: usize,
        },
        /// A pair of characters that is not a hex byte.
        #[error("byte {byte} of the hex bytes is not hex")]
        NotHex {
            /// The byte's position.
            byte: usize,
        },
    }

    /// Decodes hex text, ignoring whitespace.
    pub fn decode(text: &str) -> Result<Vec<u8>, HexBytesError> {
        let digits: Vec<u8> = text.bytes().filter(|b| !b.is_ascii_whitespace()).collect();
        if !digits.len().is_multiple_of(2) {
            return Err(HexBytesError::OddDigits {
                digits: digits.len(),
            });
        }
        digits
            .chunks(2)
            .enumerate()
            .map(|(i, pair)| {
                std::str::from_utf8(pair)
                    .ok()
                    .and_then(|p| u8::from_str_radix(p, 16).ok())
                    .ok_or(HexBytesError::NotHex { byte: i })
            })
            .collect()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn half_open_intersection() {
        let a = ByteRange::new(0, 0x20);
        let b = ByteRange::new(0x20, 0x40);
        assert!(!a.overlaps(&b), "touching ranges share no byte");
        let c = ByteRange::new(0x1f, 0x21);
        assert_eq!(a.intersection(&c), Some(ByteRange::new(0x1f, 0x20)));
    }

    #[test]
    fn parse_accepts_hex_and_decimal() {
        assert_eq!(parse_u64("0x100"), Some(256));
        assert_eq!(parse_u64("256"), Some(256));
        assert_eq!(parse_u64("0x4000_03e1"), Some(0x4000_03e1));
        assert_eq!(parse_u64("zz"), None);
        assert_eq!(parse_u64("_"), None);
    }

    #[derive(Debug, serde::Deserialize, PartialEq)]
    struct Hexes {
        #[serde(with = "hex")]
        a: u64,
        #[serde(with = "hex::option")]
        b: Option<u64>,
        #[serde(with = "hex::vec")]
        c: Vec<u64>,
    }

    #[test]
    fn hex_reads_strings_and_numbers_and_names_what_it_refuses() {
        let ok: Hexes =
            serde_json::from_str(r#"{"a": "0x10", "b": 17, "c": ["18", 19, "0x1_4"]}"#).unwrap();
        assert_eq!(
            ok,
            Hexes {
                a: 16,
                b: Some(17),
                c: vec![18, 19, 20]
            }
        );
        let none: Hexes = serde_json::from_str(r#"{"a": 0, "b": null, "c": []}"#).unwrap();
        assert_eq!(none.b, None);
        for (bad, says) in [
            (
                r#"{"a": "0xg", "b": null, "c": []}"#,
                r#"invalid value: string "0xg""#,
            ),
            (
                r#"{"a": -1, "b": null, "c": []}"#,
                "invalid value: integer `-1`",
            ),
            (
                r#"{"a": true, "b": null, "c": []}"#,
                "invalid type: boolean `true`",
            ),
            (
                r#"{"a": 1.5, "b": null, "c": []}"#,
                "invalid type: floating point `1.5`",
            ),
        ] {
            let e = serde_json::from_str::<Hexes>(bad).unwrap_err().to_string();
            assert!(e.contains(says), "{bad}: {e}");
            assert!(
                e.contains(r#"expected a "0x…" or decimal number"#),
                "{bad}: {e}"
            );
        }
    }
}
