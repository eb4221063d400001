//! Operating-system primitives: mappings, the fault signal handler, shared
//! memory and locks that survive their holder. The `unsafe` code that talks
//! to the kernel lives here.
pub mod lock;
pub mod mem;
pub mod shm;
pub mod signal;
pub mod writeback;
