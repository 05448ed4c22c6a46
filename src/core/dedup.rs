//! dedup (being written).
