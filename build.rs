//! Build script. The Rust types of the plugin ABIs (`src/ffi/abi.rs`) are generated from the
//! headers in `include/` with bindgen. The generated file is committed, so a default build
//! needs no libclang; with `--features bindgen` the build regenerates it into OUT_DIR, and
//! the test `ffi::abi_bindings_are_current` fails if the committed copy differs.
//! `TACOS_UPDATE_BINDINGS=1 cargo build --features bindgen` rewrites the committed copy.

fn main() {
    println!("cargo:rerun-if-changed=include");
    println!("cargo:rerun-if-changed=build.rs");
    println!("cargo:rerun-if-env-changed=TACOS_UPDATE_BINDINGS");
    #[cfg(feature = "bindgen")]
    generate_bindings();
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
