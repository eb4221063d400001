//! Read-only inspection (filled in below).
