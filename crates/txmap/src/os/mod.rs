//! Operating-system primitives: mappings and the fault signal handler. The
//! `unsafe` code that talks to the kernel lives here.
pub mod mem;
pub mod signal;
