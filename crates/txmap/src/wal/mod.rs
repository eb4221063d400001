//! The write-ahead log: on-disk format, the writer with group commit, and the
//! scanner used by recovery and `txmap check`.
pub mod format;
pub mod log;
pub mod scan;
pub mod shared;
