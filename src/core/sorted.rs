//! A map and a set kept as one sorted `Vec`, for the client's small ordered collections
//! (commands in flight, sessions awaiting `caught_up`, pending approvals, the pieces of one
//! event).
//!
//! They hold a handful of entries, mostly added in order, and each `BTreeMap` instantiation
//! costs the wasm package a few KB of node-balancing code; a binary search over a `Vec` is
//! as fast at these sizes and nearly free in code.

use std::borrow::Borrow;
use std::cmp::Ordering;

/// Sorts `v` by `compare`, not stably, as `slice::sort_unstable_by`, which native builds call.
/// The wasm sorts with a heapsort: a few hundred bytes per element type, where each of the
/// standard library's sorts is 2-3 KB (three were 11 KB of the main entry), and what it
/// sorts here are short lists (a checkpoint's turns and runs, a turn's open tools).
pub fn sort_unstable_by<T>(v: &mut [T], mut compare: impl FnMut(&T, &T) -> Ordering) {
    if cfg!(not(target_arch = "wasm32")) {
        return v.sort_unstable_by(compare);
    }
    heapsort(v, &mut compare);
}

/// `sort_unstable_by` for a type's own order.
pub fn sort_unstable<T: Ord>(v: &mut [T]) {
    sort_unstable_by(v, T::cmp);
}

fn heapsort<T>(v: &mut [T], compare: &mut impl FnMut(&T, &T) -> Ordering) {
    let mut sift_down = |v: &mut [T], mut root: usize| loop {
        let mut child = 2 * root + 1;
        if child >= v.len() {
            return;
        }
        if child + 1 < v.len() && compare(&v[child], &v[child + 1]) == Ordering::Less {
            child += 1;
        }
        if compare(&v[root], &v[child]) != Ordering::Less {
            return;
        }
        v.swap(root, child);
        root = child;
    };
    for root in (0..v.len() / 2).rev() {
        sift_down(v, root);
    }
    for end in (1..v.len()).rev() {
        v.swap(0, end);
        sift_down(&mut v[..end], 0);
    }
}

/// A map ordered by key.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct SortedMap<K, V>(Vec<(K, V)>);

impl<K, V> Default for SortedMap<K, V> {
    fn default() -> Self {
        SortedMap(Vec::new())
    }
}

impl<K: Ord, V> SortedMap<K, V> {
    pub fn new() -> Self {
        SortedMap::default()
    }

    fn find<Q: Ord + ?Sized>(&self, key: &Q) -> Result<usize, usize>
    where
        K: Borrow<Q>,
    {
        self.0.binary_search_by(|(k, _)| k.borrow().cmp(key))
    }

    /// Inserts or replaces; returns the value replaced.
    pub fn insert(&mut self, key: K, value: V) -> Option<V> {
        match self.find(&key) {
            Ok(i) => Some(std::mem::replace(&mut self.0[i].1, value)),
            Err(i) => {
                self.0.insert(i, (key, value));
                None
            }
        }
    }

    pub fn remove<Q: Ord + ?Sized>(&mut self, key: &Q) -> Option<V>
    where
        K: Borrow<Q>,
    {
        self.find(key).ok().map(|i| self.0.remove(i).1)
    }

    pub fn contains_key<Q: Ord + ?Sized>(&self, key: &Q) -> bool
    where
        K: Borrow<Q>,
    {
        self.find(key).is_ok()
    }

    pub fn len(&self) -> usize {
        self.0.len()
    }

    pub fn is_empty(&self) -> bool {
        self.0.is_empty()
    }

    pub fn clear(&mut self) {
        self.0.clear();
    }

    /// In key order.
    pub fn iter(&self) -> impl Iterator<Item = (&K, &V)> + '_ {
        self.0.iter().map(|(k, v)| (k, v))
    }

    /// In key order.
    pub fn values(&self) -> impl Iterator<Item = &V> + '_ {
        self.0.iter().map(|(_, v)| v)
    }

    /// In key order.
    pub fn into_values(self) -> impl Iterator<Item = V> {
        self.0.into_iter().map(|(_, v)| v)
    }
}

/// A set ordered by value.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct SortedSet<T>(SortedMap<T, ()>);

impl<T> Default for SortedSet<T> {
    fn default() -> Self {
        SortedSet(SortedMap::default())
    }
}

impl<T: Ord> SortedSet<T> {
    pub fn new() -> Self {
        SortedSet::default()
    }

    /// Whether it was not there.
    pub fn insert(&mut self, value: T) -> bool {
        self.0.insert(value, ()).is_none()
    }

    /// Whether it was there.
    pub fn remove<Q: Ord + ?Sized>(&mut self, value: &Q) -> bool
    where
        T: Borrow<Q>,
    {
        self.0.remove(value).is_some()
    }

    pub fn len(&self) -> usize {
        self.0.len()
    }

    pub fn is_empty(&self) -> bool {
        self.0.is_empty()
    }

    pub fn clear(&mut self) {
        self.0.clear();
    }

    /// In order.
    pub fn iter(&self) -> impl Iterator<Item = &T> + '_ {
        self.0.iter().map(|(k, _)| k)
    }
}

impl<T: Ord> FromIterator<T> for SortedSet<T> {
    fn from_iter<I: IntoIterator<Item = T>>(iter: I) -> Self {
        let mut v: Vec<(T, ())> = iter.into_iter().map(|t| (t, ())).collect();
        sort_unstable_by(&mut v, |a, b| a.0.cmp(&b.0));
        v.dedup_by(|a, b| a.0 == b.0);
        SortedSet(SortedMap(v))
    }
}

#[cfg(test)]
mod tests {
    use std::collections::BTreeMap;

    use proptest::prelude::*;
    use wasm_bindgen_test::wasm_bindgen_test;

    use super::*;

    proptest! {
        /// The wasm's heapsort orders as the standard library's sort (a key and its place
        /// in the input, so that equal keys are told apart where they land).
        #[wasm_bindgen_test(unsupported = test)]
        fn the_heapsort_orders_as_the_standard_sort(keys in prop::collection::vec(0u8..16, 0..200)) {
            let mut ours: Vec<(u8, usize)> = keys.iter().copied().zip(0..).collect();
            let mut theirs = ours.clone();
            heapsort(&mut ours, &mut |a: &(u8, usize), b: &(u8, usize)| a.0.cmp(&b.0));
            theirs.sort_by_key(|&(k, _)| k);
            prop_assert!(ours.iter().map(|p| p.0).eq(theirs.iter().map(|p| p.0)));
            ours.sort_unstable();
            theirs.sort_unstable();
            prop_assert_eq!(ours, theirs);
        }

        #[wasm_bindgen_test(unsupported = test)]
        fn behaves_as_a_btree_map(ops in prop::collection::vec((0u8..3, 0u8..24, any::<u16>()), 0..200)) {
            let mut ours = SortedMap::new();
            let mut model = BTreeMap::new();
            for (op, key, value) in ops {
                match op {
                    0 => prop_assert_eq!(ours.insert(key, value), model.insert(key, value)),
                    1 => prop_assert_eq!(ours.remove(&key), model.remove(&key)),
                    _ => prop_assert_eq!(ours.contains_key(&key), model.contains_key(&key)),
                }
                prop_assert_eq!(ours.len(), model.len());
                prop_assert!(ours.iter().eq(model.iter()));
            }
            let set: SortedSet<u8> = model.keys().rev().chain(model.keys()).copied().collect();
            prop_assert!(set.iter().eq(model.keys()));
        }
    }
}
