//! Build script: rebuilds when the C headers in `include/` change, since the C ABI in
//! `src/ffi/` must match them.

fn main() {
    println!("cargo:rerun-if-changed=include");
    println!("cargo:rerun-if-changed=build.rs");
}
