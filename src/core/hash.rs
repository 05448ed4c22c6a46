//! The hasher of the projection's maps (message, tool and run ids, seen event ids).
//!
//! In the browser (wasm32) the maps use FxHash, the multiply-rotate hash of rustc, finished by
//! MurmurHash3's mixer so that ids differing only in their later bytes find different buckets
//! ([`FxHasher::finish`]): the keys come from the page's own server, and SipHash (std's
//! default, built against flooding) was a good part of the per-event cost of the wasm
//! `Projector` (tests/js/src/projector.bench.ts).
//! Natively, where the companion projects what providers print, the maps keep std's
//! randomized SipHash.

use std::hash::Hasher;

/// FxHash: one multiply and rotate per 8 bytes. Not flooding-resistant.
#[derive(Clone, Copy, Default)]
pub struct FxHasher(u64);

const K: u64 = 0x517c_c1b7_2722_0a95;

/// The first eight bytes of `b`, little-endian.
#[inline]
fn word(b: &[u8]) -> u64 {
    u64::from_le_bytes(b[..8].try_into().expect("8 bytes"))
}

/// The first four bytes of `b`, little-endian.
#[inline]
fn half(b: &[u8]) -> u64 {
    u64::from(u32::from_le_bytes(b[..4].try_into().expect("4 bytes")))
}

impl FxHasher {
    #[inline]
    fn add(&mut self, word: u64) {
        self.0 = (self.0.rotate_left(5) ^ word).wrapping_mul(K);
    }
}

impl Hasher for FxHasher {
    #[inline]
    fn write(&mut self, bytes: &[u8]) {
        let mut chunks = bytes.chunks_exact(8);
        for c in &mut chunks {
            self.add(u64::from_le_bytes(c.try_into().expect("8 bytes")));
        }
        let n = chunks.remainder().len();
        if n > 0 {
            // The part word's bytes from loads that may overlap what was hashed already (no
            // copy into a buffer: on wasm32 that is a `memory.copy`, which costs a call), and
            // the length in the top byte (always 0 in a part word): "a" and "a\0" differ.
            let part = match bytes.len() {
                8.. => word(&bytes[bytes.len() - 8..]) >> (8 * (8 - n)),
                4.. => half(bytes) | half(&bytes[n - 4..]) << (8 * (n - 4)),
                _ => {
                    let byte = |i: usize| u64::from(bytes[i]) << (8 * i);
                    byte(0) | byte(n / 2) | byte(n - 1)
                }
            };
            self.add(part | (n as u64) << 56);
        }
    }

    #[inline]
    fn write_u8(&mut self, n: u8) {
        self.add(u64::from(n));
    }

    #[inline]
    fn write_u64(&mut self, n: u64) {
        self.add(n);
    }

    #[inline]
    fn write_u128(&mut self, n: u128) {
        self.add(n as u64);
        self.add((n >> 64) as u64);
    }

    #[inline]
    fn write_usize(&mut self, n: usize) {
        self.add(n as u64);
    }

    /// The state through MurmurHash3's finalizer (`fmix64`), so that every bit of it depends
    /// on every bit of the key. A multiply mixes only upward, and a short key's later bytes
    /// (`msg_1` and `msg_2` differ in their fifth) reach only the state's high bits, while
    /// hashbrown picks a key's bucket by the low bits and its tag by the 7 above bit 25 (on
    /// wasm32, where `usize` is 32 bits). Without it 4,096 such ids shared 32 buckets, and
    /// every lookup walked a long probe.
    #[inline]
    fn finish(&self) -> u64 {
        let mut h = self.0;
        h ^= h >> 33;
        h = h.wrapping_mul(0xff51_afd7_ed55_8ccd);
        h ^= h >> 33;
        h = h.wrapping_mul(0xc4ce_b9fe_1a85_ec53);
        h ^ (h >> 33)
    }
}

/// The maps' hasher: FxHash in the browser, std's SipHash natively (see the module docs).
/// A native build for instruction counts that match the page's code sets
/// `RUSTFLAGS="--cfg agentwire_fxhash"` (`examples/project_loop.rs`); nothing else may.
#[cfg(any(target_arch = "wasm32", agentwire_fxhash))]
pub type Fast = std::hash::BuildHasherDefault<FxHasher>;
#[cfg(not(any(target_arch = "wasm32", agentwire_fxhash)))]
pub type Fast = std::collections::hash_map::RandomState;

pub type FastMap<K, V> = std::collections::HashMap<K, V, Fast>;
pub type FastSet<K> = std::collections::HashSet<K, Fast>;

#[cfg(test)]
mod tests {
    use std::hash::{BuildHasher, BuildHasherDefault, Hash};

    use wasm_bindgen_test::wasm_bindgen_test;

    use super::*;

    fn hash<T: Hash + ?Sized>(v: &T) -> u64 {
        BuildHasherDefault::<FxHasher>::default().hash_one(v)
    }

    /// The part word read by overlapping loads is the one a copy into a zeroed buffer makes,
    /// for every length and alignment.
    #[wasm_bindgen_test(unsupported = test)]
    fn the_last_part_word_is_the_bytes_and_the_length() {
        fn copied(bytes: &[u8]) -> u64 {
            let mut h = FxHasher::default();
            let mut chunks = bytes.chunks_exact(8);
            for c in &mut chunks {
                h.add(u64::from_le_bytes(c.try_into().unwrap()));
            }
            let rest = chunks.remainder();
            if !rest.is_empty() {
                let mut word = [0u8; 8];
                word[..rest.len()].copy_from_slice(rest);
                word[7] = rest.len() as u8;
                h.add(u64::from_le_bytes(word));
            }
            h.0
        }
        let text: Vec<u8> = (0..48u8).map(|i| i.wrapping_mul(37) ^ 0xa5).collect();
        for start in 0..8 {
            for len in 0..=40 {
                let bytes = &text[start..start + len];
                let mut h = FxHasher::default();
                h.write(bytes);
                assert_eq!(h.0, copied(bytes), "{len} bytes from {start}");
            }
        }
    }

    #[wasm_bindgen_test(unsupported = test)]
    fn fx_tells_keys_apart_and_is_stable() {
        // Ids that differ in their last byte, in a byte past a word, or only in length.
        let keys = [
            "msg_1",
            "msg_2",
            "msg_10",
            "toolu_12345678",
            "toolu_12345679",
            "",
            "a",
            "a\0",
        ];
        let hashes: FastSet<u64> = keys.iter().map(|k| hash(*k)).collect();
        assert_eq!(hashes.len(), keys.len());
        assert_eq!(hash("msg_1"), hash("msg_1"));
        assert_ne!(hash(&1u128), hash(&(1u128 << 64)));
    }

    /// hashbrown finds a key's bucket by the hash's low bits: those of ids that differ only
    /// in their later bytes (`msg_0` … `msg_4095`, `toolu_7_2`) must differ too, or the keys
    /// pile into a few buckets and every lookup walks a long probe (random hashes spread 4,096
    /// keys over ≈ 2,590 of 4,096 buckets).
    #[wasm_bindgen_test(unsupported = test)]
    fn ids_that_differ_in_later_bytes_spread_over_the_buckets() {
        let buckets = |keys: &[String]| -> usize {
            let low: FastSet<u64> = keys.iter().map(|k| hash(k.as_str()) & 4095).collect();
            low.len()
        };
        let messages: Vec<String> = (0..4096).map(|i| format!("msg_{i}")).collect();
        let tools: Vec<String> = (0..1024)
            .flat_map(|i| (0..4).map(move |j| format!("toolu_{i}_{j}")))
            .collect();
        for keys in [messages, tools] {
            let used = buckets(&keys);
            assert!(used > 2_000, "{} keys in {used} buckets", keys.len());
        }
    }
}
