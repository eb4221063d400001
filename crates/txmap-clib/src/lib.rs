//! libtxmap.so and libtxmap.a: the C API of [`txmap_capi`], whose exported
//! (`#[unsafe(no_mangle)]`) functions these libraries export. build.rs gives
//! the shared library its SONAME.

pub use txmap_capi::*;
