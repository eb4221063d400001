//! Gives libtxmap.so its SONAME: `libtxmap.so.<major>` (libtxmap.so.0 while
//! the version is 0.x), so programs linked against it keep loading any later
//! release with the same major version that scripts/install.sh installs.

fn main() {
    let major = std::env::var("CARGO_PKG_VERSION_MAJOR").unwrap_or_else(|_| "0".into());
    println!("cargo:rustc-cdylib-link-arg=-Wl,-soname,libtxmap.so.{major}");
    println!("cargo:rerun-if-changed=build.rs");
}
