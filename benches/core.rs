//! Core benchmarks (being written).
fn main() {}
