//! The write-ahead log: on-disk format, the writer with group commit, and the
//! scanner used by recovery and `txmap check`.
pub mod archive;
pub mod format;
pub mod log;
pub mod scan;
pub mod shared;

/// The log file that belongs to a region file.
pub fn log_path(path: &std::path::Path) -> std::path::PathBuf {
    let mut s = path.as_os_str().to_owned();
    s.push("-log");
    std::path::PathBuf::from(s)
}
