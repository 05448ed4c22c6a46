//! Timestamps as milliseconds since the Unix epoch, written as RFC 3339 in UTC.
//!
//! The core never reads a clock: a [`Timestamp`] is either parsed from a provider line or
//! handed in by the caller. Conversions are plain calendar arithmetic (Howard Hinnant's
//! days-from-civil), so they behave the same on wasm32 and native.

use std::fmt;

use serde::{Deserialize, Deserializer, Serialize, Serializer};

use super::quoted::Quoted;

/// A point in time, in whole milliseconds since 1970-01-01T00:00:00Z.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash, Default)]
pub struct Timestamp(i64);

impl Timestamp {
    /// The Unix epoch.
    pub const EPOCH: Timestamp = Timestamp(0);

    pub const fn from_unix_millis(ms: i64) -> Timestamp {
        Timestamp(ms)
    }

    pub const fn unix_millis(self) -> i64 {
        self.0
    }

    /// Parses RFC 3339 (`2026-11-29T21:31:08.329Z`, `…+02:00`); fractions past milliseconds
    /// are truncated. `None` when the text is not RFC 3339 or the date does not exist.
    pub fn parse_rfc3339(s: &str) -> Option<Timestamp> {
        let b = s.as_bytes();
        if b.len() < 20 {
            return None;
        }
        let num = |range: std::ops::Range<usize>| -> Option<i64> {
            let digits = b.get(range)?;
            if digits.is_empty() || !digits.iter().all(u8::is_ascii_digit) {
                return None;
            }
            Some(
                digits
                    .iter()
                    .fold(0i64, |n, d| n * 10 + i64::from(d - b'0')),
            )
        };
        let sep = |i: usize, c: &[u8]| b.get(i).is_some_and(|x| c.contains(x));
        if !(sep(4, b"-") && sep(7, b"-") && sep(10, b"Tt ") && sep(13, b":") && sep(16, b":")) {
            return None;
        }
        let (year, month, day) = (num(0..4)?, num(5..7)?, num(8..10)?);
        let (hour, minute, second) = (num(11..13)?, num(14..16)?, num(17..19)?);
        if !(1..=12).contains(&month)
            || day < 1
            || day > days_in_month(year, month)
            || hour > 23
            || minute > 59
            || second > 60
        {
            return None;
        }
        let mut i = 19;
        let mut millis = 0i64;
        if b[i] == b'.' {
            let start = i + 1;
            i = start;
            while i < b.len() && b[i].is_ascii_digit() {
                i += 1;
            }
            if i == start {
                return None;
            }
            let frac = &b[start..i.min(start + 3)];
            millis = frac.iter().fold(0i64, |n, d| n * 10 + i64::from(d - b'0'));
            millis *= 10i64.pow(3 - frac.len() as u32);
        }
        let offset_minutes = match b.get(i)? {
            b'Z' | b'z' if i + 1 == b.len() => 0,
            sign @ (b'+' | b'-') if b.len() == i + 6 && b[i + 3] == b':' => {
                let (oh, om) = (num(i + 1..i + 3)?, num(i + 4..i + 6)?);
                if oh > 23 || om > 59 {
                    return None;
                }
                let m = oh * 60 + om;
                if *sign == b'+' {
                    m
                } else {
                    -m
                }
            }
            _ => return None,
        };
        let days = days_from_civil(year, month, day);
        let secs = days * 86_400 + hour * 3_600 + minute * 60 + second - offset_minutes * 60;
        Some(Timestamp(secs * 1_000 + millis))
    }
}

impl fmt::Display for Timestamp {
    /// RFC 3339 in UTC with milliseconds: `2026-11-29T21:31:08.329Z`.
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let ms = self.0.rem_euclid(1_000);
        let secs = self.0.div_euclid(1_000);
        let (days, rem) = (secs.div_euclid(86_400), secs.rem_euclid(86_400));
        let (y, m, d) = civil_from_days(days);
        write!(
            f,
            "{y:04}-{m:02}-{d:02}T{:02}:{:02}:{:02}.{ms:03}Z",
            rem / 3_600,
            rem % 3_600 / 60,
            rem % 60
        )
    }
}

/// As its `Serialize` writes it (its `Display`, quoted), without `fmt` for the years
/// 0000–9999.
impl super::json::ToJson for Timestamp {
    fn write_json(&self, out: &mut String) {
        let ms = self.0.rem_euclid(1_000);
        let secs = self.0.div_euclid(1_000);
        let (days, rem) = (secs.div_euclid(86_400), secs.rem_euclid(86_400));
        let (y, m, d) = civil_from_days(days);
        if !(0..=9_999).contains(&y) {
            out.push('"');
            out.push_str(&self.to_string());
            out.push('"');
            return;
        }
        let (h, min, sec) = (rem / 3_600, rem % 3_600 / 60, rem % 60);
        let mut text = *b"\"0000-00-00T00:00:00.000Z\"";
        let mut put = |at: usize, n: i64, width: usize| {
            let mut n = n;
            for i in (at..at + width).rev() {
                text[i] = b'0' + (n % 10) as u8;
                n /= 10;
            }
        };
        put(1, y, 4);
        put(6, m, 2);
        put(9, d, 2);
        put(12, h, 2);
        put(15, min, 2);
        put(18, sec, 2);
        put(21, ms, 3);
        out.push_str(std::str::from_utf8(&text).unwrap_or_default());
    }
}

impl Serialize for Timestamp {
    fn serialize<S: Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        s.collect_str(self)
    }
}

impl<'de> Deserialize<'de> for Timestamp {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Timestamp, D::Error> {
        let s = <std::borrow::Cow<'de, str>>::deserialize(d)?;
        Timestamp::parse_rfc3339(&s).ok_or_else(|| {
            serde::de::Error::custom(format!("invalid RFC 3339 timestamp {}", Quoted(&s)))
        })
    }
}

impl<'a> super::json::FromJson<'a> for Timestamp {
    fn read(r: &mut super::json::Reader<'a>) -> Result<Timestamp, super::json::JsonError> {
        let s = r.string()?;
        Timestamp::parse_rfc3339(&s)
            .ok_or_else(|| r.error(format_args!("invalid RFC 3339 timestamp {}", Quoted(&s))))
    }
}

fn is_leap(y: i64) -> bool {
    y % 4 == 0 && (y % 100 != 0 || y % 400 == 0)
}

fn days_in_month(y: i64, m: i64) -> i64 {
    match m {
        2 if is_leap(y) => 29,
        2 => 28,
        4 | 6 | 9 | 11 => 30,
        _ => 31,
    }
}

fn days_from_civil(y: i64, m: i64, d: i64) -> i64 {
    let y = if m <= 2 { y - 1 } else { y };
    let era = y.div_euclid(400);
    let yoe = y - era * 400;
    let mp = (m + 9) % 12;
    let doy = (153 * mp + 2) / 5 + d - 1;
    let doe = yoe * 365 + yoe / 4 - yoe / 100 + doy;
    era * 146_097 + doe - 719_468
}

fn civil_from_days(z: i64) -> (i64, i64, i64) {
    let z = z + 719_468;
    let era = z.div_euclid(146_097);
    let doe = z - era * 146_097;
    let yoe = (doe - doe / 1_460 + doe / 36_524 - doe / 146_096) / 365;
    let doy = doe - (365 * yoe + yoe / 4 - yoe / 100);
    let mp = (5 * doy + 2) / 153;
    let d = doy - (153 * mp + 2) / 5 + 1;
    let m = if mp < 10 { mp + 3 } else { mp - 9 };
    (
        if m <= 2 {
            yoe + era * 400 + 1
        } else {
            yoe + era * 400
        },
        m,
        d,
    )
}

#[cfg(test)]
mod tests {
    use wasm_bindgen_test::wasm_bindgen_test;

    use super::*;
    use proptest::prelude::*;

    #[wasm_bindgen_test(unsupported = test)]
    fn parses_and_prints_utc() {
        let t = Timestamp::parse_rfc3339("2026-11-29T21:31:08.329Z").unwrap();
        assert_eq!(t.to_string(), "2026-11-29T21:31:08.329Z");
        let off = Timestamp::parse_rfc3339("2026-11-29T23:31:08.329123+02:00").unwrap();
        assert_eq!(off, t);
        for same in ["2026-11-29t21:31:08.329z", "2026-11-29 16:01:08.329-05:30"] {
            assert_eq!(Timestamp::parse_rfc3339(same), Some(t), "{same}");
        }
        assert_eq!(Timestamp::EPOCH.to_string(), "1970-01-01T00:00:00.000Z");
        assert_eq!(
            Timestamp::from_unix_millis(1767036061199).to_string(),
            "2025-12-29T19:21:01.199Z"
        );
    }

    #[wasm_bindgen_test(unsupported = test)]
    fn rejects_what_is_not_rfc3339() {
        for bad in [
            "<TIMESTAMP>",
            "2026-02-30T00:00:00Z",
            "2026-11-29T21:31:08",
            "2026-11-29T25:00:00Z",
            "",
            "2026-11-29T21:31:08.Z",
            "20a6-11-29T21:31:08Z",
            "2026-1/-29T21:31:08Z",
            "2026-11-29T21:31:0:8Z",
            "2026-11-29T21:31:0\u{e9}Z",
            "2026-11-29T21:31:08+0a:00",
            "2026-11-29T21:31:08+02:0",
            "2026-11-29T21:31:08+24:00",
            "2026/11/29T21:31:08Z",
        ] {
            assert_eq!(Timestamp::parse_rfc3339(bad), None, "{bad}");
        }
    }

    proptest! {
        #[wasm_bindgen_test(unsupported = test)]
        fn display_round_trips(ms in -62_135_596_800_000i64..253_402_300_799_999i64) {
            let t = Timestamp::from_unix_millis(ms);
            prop_assert_eq!(Timestamp::parse_rfc3339(&t.to_string()), Some(t));
        }
    }
}
