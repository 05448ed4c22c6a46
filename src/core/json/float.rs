//! A JSON number's text to the nearest `f64` (ties to even), as `str::parse` reads it, in a
//! few hundred bytes of wasm instead of the standard library's 18 KB (its Eisel-Lemire table
//! alone is 10 KB): the npm package's main entry parses floats with this, native builds with
//! `str::parse` (a test compares the two).
//!
//! Most numbers take Clinger's fast path: at most 15 significant digits and a power of ten
//! up to 10^22 are both exact in an `f64`, so one multiplication or division rounds once,
//! correctly. The others start from a guess a few units in the last place off (the first 19
//! digits times a power of ten in floating point) and move it one step at a time, comparing
//! the decimal value exactly, as big integers, with the midpoints between neighbouring
//! doubles (Clinger's algorithm R).

use std::cmp::Ordering;

/// Significant digits kept: a midpoint between two doubles has at most 767, so digits past
/// 800 can only tell which side of one the value lies on, and one nonzero digit in their
/// place keeps that side.
const MAX_DIGITS: usize = 800;

/// `text` (a JSON number, which the reader checked) as the nearest `f64`; `None` when its
/// magnitude rounds past `f64::MAX`.
pub(crate) fn parse(text: &str) -> Option<f64> {
    let bytes = text.as_bytes();
    let negative = bytes.first() == Some(&b'-');
    let mut digits: Vec<u8> = Vec::new();
    let mut exp: i64 = 0; // value = digits × 10^exp
    let mut truncated = false;
    let mut at = usize::from(negative);
    let mut fraction = false;
    while at < bytes.len() {
        match bytes[at] {
            b'.' => fraction = true,
            d @ b'0'..=b'9' => {
                if digits.is_empty() && d == b'0' {
                    exp -= i64::from(fraction);
                } else if digits.len() < MAX_DIGITS {
                    digits.push(d - b'0');
                    exp -= i64::from(fraction);
                } else {
                    truncated |= d != b'0';
                    exp += i64::from(!fraction);
                }
            }
            _ => break,
        }
        at += 1;
    }
    if at < bytes.len() {
        // `e` or `E`, a sign, digits; an exponent past any double's saturates.
        at += 1;
        let minus = bytes.get(at) == Some(&b'-');
        at += usize::from(matches!(bytes.get(at), Some(b'+' | b'-')));
        let mut e: i64 = 0;
        for &d in &bytes[at..] {
            e = (e * 10 + i64::from(d - b'0')).min(1 << 40);
        }
        exp += if minus { -e } else { e };
    }
    if truncated {
        digits.push(1);
        exp -= 1;
    }
    while digits.last() == Some(&0) {
        digits.pop();
        exp += 1;
    }
    let magnitude = parse_positive(&digits, exp)?;
    Some(if negative { -magnitude } else { magnitude })
}

/// The value `digits × 10^exp` (no leading or trailing zero digit) as the nearest double.
fn parse_positive(digits: &[u8], exp: i64) -> Option<f64> {
    if digits.is_empty() {
        return Some(0.0);
    }
    // The value lies in [10^(scale-1), 10^scale).
    let scale = digits.len() as i64 + exp;
    if scale > 310 {
        return None;
    }
    if scale < -323 {
        return Some(0.0); // below 10^-324, under half the smallest subnormal
    }
    let leading = digits.len().min(19);
    let head = digits[..leading]
        .iter()
        .fold(0u64, |n, &d| n * 10 + u64::from(d));
    if digits.len() <= 15 && (-22..=22).contains(&exp) {
        let (h, p) = (head as f64, POW10[exp.unsigned_abs() as usize]);
        return Some(if exp < 0 { h / p } else { h * p });
    }
    // A guess a few ulps off, in two factors so that neither overflows nor goes subnormal.
    let rest = (exp + (digits.len() - leading) as i64) as i32;
    let half = rest / 2;
    let guess = head as f64 * 10f64.powi(half) * 10f64.powi(rest - half);
    let mut b = if guess.is_finite() { guess } else { f64::MAX };
    let value = Big::from_digits(digits);
    loop {
        // Above the midpoint with the next double up: go up (past f64::MAX, overflow).
        let here = Split::of(b);
        let up = here.next_up();
        match compare(&value, exp, &here.midpoint(&up)) {
            Ordering::Greater => {
                if up.is_infinite() {
                    return None;
                }
                b = up.to_f64();
                continue;
            }
            Ordering::Equal => {
                return if up.is_infinite() {
                    None
                } else {
                    Some(even(b, up.to_f64()))
                }
            }
            Ordering::Less => {}
        }
        if b == 0.0 {
            return Some(0.0);
        }
        let down = here.next_down();
        match compare(&value, exp, &down.midpoint(&here)) {
            Ordering::Less => b = down.to_f64(),
            Ordering::Equal => return Some(even(down.to_f64(), b)),
            Ordering::Greater => return Some(b),
        }
    }
}

/// Of two neighbouring doubles, the one with an even mantissa.
fn even(a: f64, b: f64) -> f64 {
    if a.to_bits() & 1 == 0 {
        a
    } else {
        b
    }
}

const POW10: [f64; 23] = [
    1e0, 1e1, 1e2, 1e3, 1e4, 1e5, 1e6, 1e7, 1e8, 1e9, 1e10, 1e11, 1e12, 1e13, 1e14, 1e15, 1e16,
    1e17, 1e18, 1e19, 1e20, 1e21, 1e22,
];

/// A non-negative double as `m × 2^e`, exactly; 2^1024 (the step past `f64::MAX`) included.
#[derive(Clone, Copy)]
struct Split {
    m: u64,
    e: i64,
}

impl Split {
    fn of(f: f64) -> Split {
        let bits = f.to_bits();
        let field = (bits >> 52) as i64;
        let fraction = bits & ((1 << 52) - 1);
        match field {
            0 => Split {
                m: fraction,
                e: -1074,
            },
            _ => Split {
                m: fraction | 1 << 52,
                e: field - 1075,
            },
        }
    }

    fn is_infinite(&self) -> bool {
        self.e > 971
    }

    fn to_f64(self) -> f64 {
        f64::from_bits(match self.m >> 52 {
            0 => self.m,
            _ => ((self.e + 1075) as u64) << 52 | (self.m & ((1 << 52) - 1)),
        })
    }

    fn next_up(self) -> Split {
        let f = self.to_f64();
        if f == f64::MAX {
            return Split { m: 1 << 52, e: 972 };
        }
        Split::of(f64::from_bits(f.to_bits() + 1))
    }

    fn next_down(self) -> Split {
        Split::of(f64::from_bits(self.to_f64().to_bits() - 1))
    }

    /// The point halfway between this double and `other`, as `(m, e)`: `m × 2^e`.
    fn midpoint(&self, other: &Split) -> (Big, i64) {
        let e = self.e.min(other.e);
        let mut sum = Big::from_u64(self.m);
        sum.shl((self.e - e) as usize);
        let mut high = Big::from_u64(other.m);
        high.shl((other.e - e) as usize);
        sum.add(&high);
        (sum, e - 1)
    }
}

/// `digits × 10^exp` against `m × 2^e`, exactly.
fn compare(digits: &Big, exp: i64, &(ref m, e): &(Big, i64)) -> Ordering {
    let mut left = digits.clone();
    let mut right = m.clone();
    // 10^exp = 5^exp × 2^exp: the fives go to the side whose exponent is positive.
    if exp >= 0 {
        left.mul_pow5(exp as usize);
    } else {
        right.mul_pow5(exp.unsigned_abs() as usize);
    }
    let twos = exp - e;
    if twos >= 0 {
        left.shl(twos as usize);
    } else {
        right.shl(twos.unsigned_abs() as usize);
    }
    left.cmp(&right)
}

/// An unsigned big integer, 32-bit limbs, least significant first, no high zero limb.
#[derive(Clone, PartialEq, Eq)]
struct Big(Vec<u32>);

impl Big {
    fn from_u64(n: u64) -> Big {
        let mut b = Big(vec![n as u32, (n >> 32) as u32]);
        b.trim();
        b
    }

    fn from_digits(digits: &[u8]) -> Big {
        let mut b = Big(Vec::with_capacity(digits.len() / 9 + 1));
        for chunk in digits.chunks(9) {
            let n = chunk.iter().fold(0u32, |n, &d| n * 10 + u32::from(d));
            b.mul_add(10u32.pow(chunk.len() as u32), n);
        }
        b
    }

    fn trim(&mut self) {
        while self.0.last() == Some(&0) {
            self.0.pop();
        }
    }

    fn mul_add(&mut self, factor: u32, add: u32) {
        let mut carry = u64::from(add);
        for limb in &mut self.0 {
            let n = u64::from(*limb) * u64::from(factor) + carry;
            *limb = n as u32;
            carry = n >> 32;
        }
        if carry > 0 {
            self.0.push(carry as u32);
        }
    }

    fn mul_pow5(&mut self, mut k: usize) {
        while k > 0 {
            let step = k.min(13); // 5^13 < 2^32
            self.mul_add(5u32.pow(step as u32), 0);
            k -= step;
        }
    }

    fn shl(&mut self, bits: usize) {
        if self.0.is_empty() {
            return;
        }
        let (limbs, bits) = (bits / 32, bits % 32);
        if bits > 0 {
            let mut carry = 0;
            for limb in &mut self.0 {
                let n = *limb;
                *limb = n << bits | carry;
                carry = n >> (32 - bits);
            }
            if carry > 0 {
                self.0.push(carry);
            }
        }
        self.0.splice(0..0, std::iter::repeat_n(0, limbs));
    }

    fn add(&mut self, other: &Big) {
        if self.0.len() < other.0.len() {
            self.0.resize(other.0.len(), 0);
        }
        let mut carry = 0u64;
        for (i, limb) in self.0.iter_mut().enumerate() {
            let n = u64::from(*limb) + u64::from(other.0.get(i).copied().unwrap_or(0)) + carry;
            *limb = n as u32;
            carry = n >> 32;
        }
        if carry > 0 {
            self.0.push(carry as u32);
        }
    }
}

impl PartialOrd for Big {
    fn partial_cmp(&self, other: &Big) -> Option<Ordering> {
        Some(self.cmp(other))
    }
}

impl Ord for Big {
    fn cmp(&self, other: &Big) -> Ordering {
        self.0
            .len()
            .cmp(&other.0.len())
            .then_with(|| self.0.iter().rev().cmp(other.0.iter().rev()))
    }
}

#[cfg(test)]
mod tests {
    use wasm_bindgen_test::wasm_bindgen_test;

    use super::parse;

    /// The standard library's reading (the native builds'), `None` where a JSON reader
    /// refuses the number as out of range.
    fn std_parse(text: &str) -> Option<f64> {
        text.parse::<f64>().ok().filter(|f| f.is_finite())
    }

    fn check(text: &str) {
        let ours = parse(text).map(f64::to_bits);
        let theirs = std_parse(text).map(f64::to_bits);
        assert_eq!(
            ours,
            theirs,
            "{text}: {:?} against {:?}",
            parse(text),
            std_parse(text)
        );
    }

    /// A small deterministic generator (xorshift), so a failure names its input.
    struct Rng(u64);

    impl Rng {
        fn next(&mut self) -> u64 {
            self.0 ^= self.0 << 13;
            self.0 ^= self.0 >> 7;
            self.0 ^= self.0 << 17;
            self.0
        }

        fn below(&mut self, n: u64) -> u64 {
            self.next() % n
        }

        fn digits(&mut self, n: usize) -> String {
            (0..n)
                .map(|_| char::from(b'0' + self.below(10) as u8))
                .collect()
        }
    }

    #[wasm_bindgen_test(unsupported = test)]
    fn plain_numbers_read_as_the_standard_library_reads_them() {
        for text in [
            "0", "-0", "0.0", "-0.0", "1", "-1", "0.1", "0.2", "0.3", "1.5", "2.5e-3", "1e22",
            "1e23", "9007199254740993", "9007199254740992.5", "123456789012345678901234567890",
            "1.7976931348623157e308", "1.7976931348623158e308", "1.7976931348623159e308",
            "1e309", "-1e309", "2.2250738585072014e-308", "2.2250738585072011e-308",
            "4.9406564584124654e-324", "2.4703282292062328e-324", "2.4703282292062327e-324",
            "2.4703282292062329e-324", "1e-324", "1e-400", "1e-99999999999999999999",
            "1e99999999999999999999", "0e99999", "0.000000000000000000000000000001e30",
            "1E+2", "1e-0", "12.34E-1", "0.1e1", "3.141592653589793238462643383279",
            "0.0001", "1.000000000000000111022302462515654042363166809082031250",
            "1.000000000000000111022302462515654042363166809082031251",
            "1.000000000000000111022302462515654042363166809082031249",
            "8.98846567431158e307", "179769313486231580793728971405303415079934132710037826936173778980444968292764750946649017977587207096330286416692887910946555547851940402630657488671505820681908902000708383676273854845817711531764475730270069855571366959622842914819860834936475292719074168444365510704342711559699508093042880177904174497791.9999",
        ] {
            check(text);
        }
    }

    /// Every double's shortest text, and its exact decimal expansion, read back to itself;
    /// the exact midpoints between neighbours (ties, to the even one), and a hair on either
    /// side of them.
    #[wasm_bindgen_test(unsupported = test)]
    fn doubles_and_the_midpoints_between_them() {
        let mut rng = Rng(0x9e37_79b9_7f4a_7c15);
        for i in 0..1200 {
            let bits = match i % 4 {
                0 => rng.next() >> 1,
                1 => rng.below(1 << 53), // subnormals and the smallest normals
                2 => 0x7fe0_0000_0000_0000 | rng.below(1 << 52), // the largest
                _ => (rng.below(2046) + 1) << 52, // powers of two (uneven neighbours)
            };
            let f = f64::from_bits(bits);
            check(&format!("{f:e}"));
            check(&format!("{f}"));
            let exact = format!("{f:.1100e}");
            check(&exact);
            let up = f64::from_bits(bits + 1);
            if up.is_finite() {
                let mid = midpoint(&exact, &format!("{up:.1100e}"));
                check(&mid);
                let (digits, e) = mid.split_once('e').unwrap();
                check(&format!("{digits}00000000000000000001e{e}"));
                check(&format!("{}e{e}", below(digits)));
            }
        }
    }

    #[wasm_bindgen_test(unsupported = test)]
    fn random_decimals_long_and_short() {
        let mut rng = Rng(0x2545_f491_4f6c_dd1d);
        for i in 0..4000 {
            let n = match i % 3 {
                0 => 1 + rng.below(20) as usize,
                1 => 15 + rng.below(30) as usize,
                _ => 700 + rng.below(300) as usize,
            };
            let digits = rng.digits(n);
            let exp = rng.below(800) as i64 - 400 - n as i64 / 2;
            let point = rng.below(n as u64) as usize;
            let sign = if rng.below(2) == 0 { "" } else { "-" };
            check(&format!("{sign}{digits}e{exp}"));
            check(&format!("{sign}0.{digits}e{exp}"));
            check(&format!(
                "{sign}{}.{}e{exp}",
                &digits[..point + 1],
                &digits[point + 1..]
            ));
        }
    }

    /// The exact decimal halfway between two exact expansions `d.ddd…e±x` of the same
    /// exponent or one apart.
    fn midpoint(a: &str, b: &str) -> String {
        let (da, ea) = a.split_once('e').unwrap();
        let (db, eb) = b.split_once('e').unwrap();
        let (ea, eb): (i64, i64) = (ea.parse().unwrap(), eb.parse().unwrap());
        let top = ea.max(eb);
        // Both as digit strings aligned at 10^top, with one more leading place for the carry.
        let align = |d: &str, e: i64| -> Vec<u8> {
            let mut v = vec![0u8; (top - e) as usize + 1];
            v.extend(d.bytes().filter(u8::is_ascii_digit).map(|c| c - b'0'));
            v
        };
        let (mut x, mut y) = (align(da, ea), align(db, eb));
        let len = x.len().max(y.len()) + 1;
        x.resize(len, 0);
        y.resize(len, 0);
        let mut sum = vec![0u8; len];
        let mut carry = 0;
        for i in (0..len).rev() {
            let s = x[i] + y[i] + carry;
            sum[i] = s % 10;
            carry = s / 10;
        }
        let mut half = Vec::with_capacity(len);
        let mut rem = 0;
        for d in sum {
            let n = rem * 10 + d;
            half.push(n / 2);
            rem = n % 2;
        }
        // `half` holds digits from 10^(top+1) down: write them as 0.ddd × 10^(top+2).
        let text: String = half.iter().map(|d| char::from(b'0' + d)).collect();
        format!("0.{text}e{}", top + 2)
    }

    /// A decimal digit string minus one unit in its last place (the string has a nonzero
    /// digit), as digits of the same length.
    fn below(digits: &str) -> String {
        let mut v: Vec<u8> = digits.bytes().collect();
        for i in (0..v.len()).rev() {
            match v[i] {
                b'0' => v[i] = b'9',
                b'.' => continue,
                c => {
                    v[i] = c - 1;
                    break;
                }
            }
        }
        String::from_utf8(v).unwrap()
    }
}
