//! txmap's own registered operations (ids below `ops::FIRST_USER_OP`).

use crate::ops::Operation;

/// The built-in operation with id `id`, if there is one.
pub(crate) fn get(id: u32) -> Option<Operation> {
    let _ = id;
    None
}
