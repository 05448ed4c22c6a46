//! `memcmp` for the module, eight bytes at a time.
//!
//! Every `==` on strings and slices (hash map keys, run and message ids) ends in `memcmp`, and
//! on wasm32 the standard library's is compiler-builtins' byte-at-a-time loop. This one
//! replaces it (the builtin is a weak symbol): the same result, a word per step.

/// Compares `n` bytes at `a` and `b`: negative, zero or positive as `a`'s first differing byte
/// is below, equal to or above `b`'s.
///
/// # Safety
/// `a` and `b` are valid for reads of `n` bytes (the C contract).
#[no_mangle]
pub unsafe extern "C" fn memcmp(a: *const u8, b: *const u8, n: usize) -> i32 {
    let mut i = 0;
    while i + 8 <= n {
        // SAFETY: `i + 8 <= n`, inside both ranges.
        let (x, y) = unsafe {
            (
                a.add(i).cast::<u64>().read_unaligned(),
                b.add(i).cast::<u64>().read_unaligned(),
            )
        };
        if x != y {
            // The lowest differing byte of a little-endian word is the first in memory.
            let shift = (x ^ y).trailing_zeros() & !7;
            return i32::from((x >> shift) as u8) - i32::from((y >> shift) as u8);
        }
        i += 8;
    }
    while i < n {
        // SAFETY: `i < n`.
        let (x, y) = unsafe { (*a.add(i), *b.add(i)) };
        if x != y {
            return i32::from(x) - i32::from(y);
        }
        i += 1;
    }
    0
}

#[cfg(test)]
mod tests {
    use wasm_bindgen_test::wasm_bindgen_test;

    use super::memcmp;

    /// The first differing bytes' difference, read one byte at a time.
    fn model(a: &[u8], b: &[u8]) -> i32 {
        for (x, y) in a.iter().zip(b) {
            if x != y {
                return i32::from(*x) - i32::from(*y);
            }
        }
        0
    }

    #[wasm_bindgen_test]
    fn the_first_differing_byte_decides_as_unsigned_wherever_it_falls() {
        let base: Vec<u8> = (0..64u32).map(|i| (i * 37 + 11) as u8).collect();
        for start in 0..8 {
            for n in 0..40 {
                let a = &base[start..start + n];
                assert_eq!(unsafe { memcmp(a.as_ptr(), a.as_ptr(), n) }, 0);
                for at in 0..n {
                    for delta in [1u8, 0x80, 0xff] {
                        let mut other = a.to_vec();
                        other[at] = other[at].wrapping_add(delta);
                        // A later difference must not change the answer.
                        if at + 1 < n {
                            other[n - 1] ^= 0x55;
                        }
                        let got = unsafe { memcmp(a.as_ptr(), other.as_ptr(), n) };
                        assert_eq!(got, model(a, &other), "n {n}, at {at}, +{delta}");
                    }
                }
            }
        }
    }
}
