//! Build script. The Rust types of the plugin ABIs (`src/ffi/abi.rs`) are generated from the
//! headers in `include/` with bindgen. The generated file is committed, so a default build
//! needs no libclang; with `--features bindgen` the build regenerates it into OUT_DIR, and
//! the test `ffi::abi_bindings_are_current` fails if the committed copy differs.
//! `TACOS_UPDATE_BINDINGS=1 cargo build --features bindgen` rewrites the committed copy.
//!
//! The project's own API (`include/tacos.h`) is written by hand on both sides: the Rust
//! (`src/ffi/api.rs`) says in doc comments what each field means. With `--features bindgen`
//! the header is also run through bindgen into OUT_DIR/tacos_h.rs, and the tests in
//! `ffi::layout_tests::generated` compare every struct field by field (name, type, offset, size,
//! alignment) and every function's signature with the hand-written Rust.

fn main() {
    println!("cargo:rerun-if-changed=include");
    println!("cargo:rerun-if-changed=build.rs");
    println!("cargo:rerun-if-env-changed=TACOS_UPDATE_BINDINGS");
    #[cfg(feature = "bindgen")]
    {
        generate_bindings();
        generate_api_bindings();
    }
}

#[cfg(feature = "bindgen")]
fn generate_bindings() {
    let out = std::path::PathBuf::from(std::env::var("OUT_DIR").expect("cargo sets OUT_DIR"));
    let bindings = bindgen::Builder::default()
        .header("include/plugin_abi.h")
        .allowlist_type("ncclTuner_v[0-9]+_t")
        .allowlist_type("mscclSchedulerInterface")
        .allowlist_type("mscclSchedulerParam")
        .allowlist_type("mscclLoadAlgo_t|mscclUnloadAlgo_t")
        .allowlist_var("NCCL_.*")
        .allowlist_type(
            "ncclResult_t|ncclFunc_t|mscclFunc_t|ncclRedOp_t|ncclDataType_t|ncclDebugLogLevel",
        )
        .default_enum_style(bindgen::EnumVariation::Consts)
        .prepend_enum_name(false)
        .layout_tests(true)
        .generate()
        .expect("bindgen reads include/plugin_abi.h");
    let generated = out.join("abi.rs");
    bindings
        .write_to_file(&generated)
        .expect("bindgen writes OUT_DIR/abi.rs");
    if std::env::var_os("TACOS_UPDATE_BINDINGS").is_some() {
        std::fs::copy(&generated, "src/ffi/abi.rs").expect("src/ffi/abi.rs is writable");
    }
}

/// The C API as bindgen reads include/tacos.h, for the tests to compare with the
/// hand-written Rust; never committed. Two files: the structs (`tacos_h_types.rs`), and the
/// functions (`tacos_h_functions.rs`) with the structs left out, so that the test module
/// that includes them names the Rust mirrors in their place and each signature can be
/// compared with the Rust function's.
#[cfg(feature = "bindgen")]
fn generate_api_bindings() {
    let out = std::path::PathBuf::from(std::env::var("OUT_DIR").expect("cargo sets OUT_DIR"));
    let header = || bindgen::Builder::default().header("include/tacos.h");
    header()
        .allowlist_type("tacos_.*")
        .layout_tests(true)
        .generate()
        .expect("bindgen reads include/tacos.h")
        .write_to_file(out.join("tacos_h_types.rs"))
        .expect("bindgen writes OUT_DIR/tacos_h_types.rs");
    header()
        .allowlist_function("tacos_.*")
        .blocklist_type("tacos_.*")
        .generate()
        .expect("bindgen reads include/tacos.h")
        .write_to_file(out.join("tacos_h_functions.rs"))
        .expect("bindgen writes OUT_DIR/tacos_h_functions.rs");
}
