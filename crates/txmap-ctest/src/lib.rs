//! C API tests live in tests/.
