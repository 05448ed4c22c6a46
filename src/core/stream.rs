//! stream (being written).
