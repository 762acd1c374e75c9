//! `tacos synth --xml` and `tacos verify` as a user runs them.

use std::path::PathBuf;
use std::process::Command;

fn tacos(args: &[&str]) -> (bool, String, String) {
    let out = Command::new(env!("CARGO_BIN_EXE_tacos"))
        .args(args)
        .output()
        .expect("the tacos binary runs");
    (
        out.status.success(),
        String::from_utf8_lossy(&out.stdout).into_owned(),
        String::from_utf8_lossy(&out.stderr).into_owned(),
    )
}

fn scratch(name: &str) -> String {
    let dir = std::env::temp_dir().join(format!("tacos-msccl-cli-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    dir.join(name).display().to_string()
}

fn json(out: &str) -> serde_json::Value {
    serde_json::from_str(out).unwrap_or_else(|e| panic!("{e}: {out}"))
}

#[test]
fn synth_writes_xml_that_verifies_and_times_like_the_schedule() {
    let xml = scratch("torus.xml");
    let (ok, out, err) = tacos(&[
        "synth",
        "torus:4x4",
        "-c",
        "allgather",
        "-k",
        "2",
        "--size",
        "64MiB",
        "--xml",
        &xml,
        "--json",
    ]);
    assert!(ok, "{err}");
    let synth = json(&out);
    assert_eq!(synth["xml_file"], xml.as_str());
    let (ok, out, err) = tacos(&["verify", &xml, "torus:4x4", "--size", "64MiB", "--json"]);
    assert!(ok, "{err}");
    let v = json(&out);
    assert_eq!(v["correct"], true);
    assert_eq!(v["collective"], "allgather");
    assert_eq!(v["gpus"], 16);
    assert_eq!(v["layouts_checked"], serde_json::json!(["out of place"]));
    let (synth_us, xml_us) = (
        synth["collective_time_us"].as_f64().unwrap(),
        v["time_us"].as_f64().unwrap(),
    );
    assert!(
        xml_us <= 1.05 * synth_us && xml_us > 0.0,
        "xml {xml_us} us, schedule {synth_us} us"
    );
    // Text output says the same.
    let (ok, out, _) = tacos(&["verify", &xml]);
    assert!(ok);
    assert!(out.contains("correct: no deadlock, no race"), "{out}");
}

#[test]
fn verify_fails_with_one_line_naming_the_file_and_the_problem() {
    let xml = scratch("ring.xml");
    let (ok, _, err) = tacos(&["synth", "ring:4", "-c", "allgather", "--xml", &xml]);
    assert!(ok, "{err}");
    // As another collective it is wrong.
    let (ok, out, err) = tacos(&["verify", &xml, "--collective", "broadcast", "--root", "0"]);
    assert!(!ok);
    assert!(out.contains("problem"), "{out}");
    let first = err.lines().next().unwrap_or("");
    assert!(
        first.starts_with("error: ")
            && first.contains("ring.xml")
            && first.contains("not a correct broadcast program"),
        "{err}"
    );
    // A step pointed at the wrong slot.
    let text = std::fs::read_to_string(&xml).unwrap();
    let broken = scratch("broken.xml");
    std::fs::write(
        &broken,
        text.replacen(
            "type=\"r\" srcbuf=\"i\" srcoff=\"0\" dstbuf=\"o\" dstoff=\"3\"",
            "type=\"r\" srcbuf=\"i\" srcoff=\"0\" dstbuf=\"o\" dstoff=\"2\"",
            1,
        ),
    )
    .unwrap();
    let (ok, out, err) = tacos(&["verify", &broken, "--json"]);
    assert!(!ok && err.contains("broken.xml"), "{err}");
    assert_eq!(json(&out)["correct"], false);
    // Malformed XML: the file, line and column.
    let bad = scratch("bad.xml");
    std::fs::write(&bad, "<algo>\n  <gpu id=\"0\">\n</algo>\n").unwrap();
    let (ok, _, err) = tacos(&["verify", &bad]);
    assert!(!ok && err.contains("bad.xml:3:"), "{err}");
    assert!(!err.contains("panicked"));
    // Timing needs a size, and a topology with as many NPUs as the program has GPUs.
    let (ok, _, err) = tacos(&["verify", &xml, "ring:4"]);
    assert!(!ok && err.contains("--size"), "{err}");
    let (ok, _, err) = tacos(&["verify", &xml, "ring:8", "--size", "1MiB"]);
    assert!(
        !ok && err.contains("4 GPUs") && err.contains("8 NPUs"),
        "{err}"
    );
}

#[test]
fn third_party_files_verify_and_time_on_their_machine() {
    let file =
        PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../shared/corpus/msccl-xml/ndv4/r48ll.xml");
    let (ok, out, err) = tacos(&[
        "verify",
        file.to_str().unwrap(),
        "preset:ndv4",
        "--size",
        "1MiB",
        "--json",
    ]);
    assert!(ok, "{err}");
    let v = json(&out);
    assert_eq!(v["collective"], "allreduce");
    assert_eq!(v["layouts_checked"], serde_json::json!(["in place"]));
    assert!(v["time_us"].as_f64().unwrap() > 0.0);
}

#[test]
fn lowering_options_reach_the_file() {
    let xml = scratch("options.xml");
    let (ok, _, err) = tacos(&[
        "synth",
        "mesh:2x2",
        "-c",
        "broadcast",
        "--xml",
        &xml,
        "--proto",
        "LL128",
        "--instances",
        "2",
        "--placement",
        "out-of-place",
        "--min-bytes",
        "1KiB",
        "--max-bytes",
        "1MiB",
    ]);
    assert!(ok, "{err}");
    let text = std::fs::read_to_string(&xml).unwrap();
    let head = text.lines().next().unwrap();
    for want in [
        "proto=\"LL128\"",
        "nchannels=\"2\"",
        "inplace=\"0\"",
        "outofplace=\"1\"",
        "minBytes=\"1024\"",
        "maxBytes=\"1048576\"",
    ] {
        assert!(head.contains(want), "{want} missing: {head}");
    }
    let (ok, _, err) = tacos(&["verify", &xml]);
    assert!(ok, "{err}");
    let (ok, _, err) = tacos(&["synth", "mesh:2x2", "--proto", "LL"]);
    assert!(!ok && err.contains("--xml"), "{err}");
}
