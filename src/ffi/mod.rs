//! The C ABI (`include/tacos.h`). Every exported function catches panics, so none crosses
//! into the host process.

use std::ffi::c_char;

/// The library's version as a NUL-terminated string owned by the library.
#[no_mangle]
pub extern "C" fn tacos_version() -> *const c_char {
    const VERSION_C: &str = concat!(env!("CARGO_PKG_VERSION"), "\0");
    VERSION_C.as_ptr().cast()
}
