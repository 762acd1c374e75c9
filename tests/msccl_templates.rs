//! The golden MSCCL XML files in `xml-templates/`: `tacos synth ... --xml` must regenerate
//! each byte for byte, and each must verify. `TACOS_BLESS=1 cargo test --test
//! msccl_templates` rewrites them after an intended change.

use std::path::PathBuf;
use std::process::Command;
use tacos::msccl::{read_program, verify, VerifyOptions};

/// (file, `tacos synth` arguments). One line per template.
#[rustfmt::skip]
const TEMPLATES: &[(&str, &str)] = &[
    ("allgather-ring4.xml", "ring:4 -c allgather -k 1 --size 1MiB --seeds 1 --instances 1"),
    ("allgather-mesh2x2.xml", "mesh:2x2 -c allgather -k 1 --size 1MiB --seeds 1 --instances 1"),
    ("allgather-ring4-k2-inplace.xml", "ring:4 -c allgather -k 2 --size 64KiB --placement in-place --seeds 1 --instances 1"),
    ("broadcast-ring4.xml", "ring:4 -c broadcast -k 2 --size 1MiB --seeds 1 --instances 1"),
    ("allreduce-ring4.xml", "ring:4 -c allreduce -k 2 --size 1MiB --seeds 1 --instances 1"),
    ("allreduce-mesh2x2.xml", "mesh:2x2 -c allreduce -k 2 --size 1MiB --placement out-of-place --seeds 1 --instances 1"),
];

#[test]
fn templates_are_regenerated_byte_for_byte_and_verify() {
    let root = PathBuf::from(env!("CARGO_MANIFEST_DIR"));
    let bless = std::env::var_os("TACOS_BLESS").is_some();
    let tmp = std::env::temp_dir().join(format!("tacos-templates-{}", std::process::id()));
    std::fs::create_dir_all(&tmp).unwrap();
    let readme = std::fs::read_to_string(root.join("xml-templates/README.md")).unwrap();
    for (file, args) in TEMPLATES {
        let out = tmp.join(file);
        let mut argv = vec!["synth"];
        argv.extend(args.split_whitespace());
        let status = Command::new(env!("CARGO_BIN_EXE_tacos"))
            .args(&argv)
            .arg("--xml")
            .arg(&out)
            .output()
            .unwrap();
        assert!(
            status.status.success(),
            "{args}: {}",
            String::from_utf8_lossy(&status.stderr)
        );
        let fresh = std::fs::read(&out).unwrap();
        let golden_path = root.join("xml-templates").join(file);
        if bless {
            std::fs::write(&golden_path, &fresh).unwrap();
        }
        let golden = std::fs::read(&golden_path)
            .unwrap_or_else(|e| panic!("{}: {e}", golden_path.display()));
        assert!(
            fresh == golden,
            "{file} differs from what `tacos synth {args}` writes now"
        );
        let program = read_program(&golden_path).unwrap();
        let report = verify(&program, &VerifyOptions::default());
        assert!(report.is_correct(), "{file}: {:?}", report.problems);
        assert!(
            readme.contains(file) && readme.contains(args),
            "the README does not show {file}"
        );
    }
}
