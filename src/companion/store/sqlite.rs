//! The SQLite store (being written).

/// The embedded SQLite store (being written).
pub struct SqliteStore;
