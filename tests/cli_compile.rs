//! `tacos compile` as a user meets it: a directory, a table or JSON, `--check`, and
//! one-line refusals that leave nothing behind.

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

fn scratch(name: &str) -> PathBuf {
    let dir = std::env::temp_dir()
        .join(format!("tacos-cli-compile-{}", std::process::id()))
        .join(name);
    let _ = std::fs::remove_dir_all(&dir);
    std::fs::create_dir_all(&dir).unwrap();
    dir
}

/// Runs a command that must fail; returns its one-line error (clap may add a hint).
fn fails(args: &[&str]) -> String {
    let (ok, _, err) = tacos(args);
    assert!(!ok, "{args:?} should fail");
    assert!(!err.contains("panicked"), "{args:?} panicked: {err}");
    let lines: Vec<&str> = err.lines().filter(|l| !l.trim().is_empty()).collect();
    assert!(!lines.is_empty(), "{args:?} printed no error");
    lines[0].to_string()
}

#[test]
fn compile_writes_a_directory_that_checks_and_reports_it() {
    let root = scratch("ok");
    let out = root.join("algos");
    let out_s = out.to_str().unwrap();
    let args = [
        "compile",
        "torus:2x4",
        "--out",
        out_s,
        "--sizes",
        "1KiB..64KiB",
        "--collectives",
        "allreduce,allgather",
        "-k",
        "1,2",
        "--seeds",
        "1",
        "--json",
    ];
    let (ok, stdout, err) = tacos(&args);
    assert!(ok, "{err}");
    let v: serde_json::Value = serde_json::from_str(&stdout).unwrap();
    assert_eq!(v["written"], "created");
    let entries = v["manifest"]["entries"].as_array().unwrap();
    // Every entry's file exists, and nothing else but the manifest.
    let mut files: Vec<String> = entries
        .iter()
        .map(|e| e["file"].as_str().unwrap().to_string())
        .collect();
    files.push("manifest.json".into());
    files.sort();
    let mut present: Vec<String> = std::fs::read_dir(&out)
        .unwrap()
        .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
        .collect();
    present.sort();
    assert_eq!(present, files);
    // The same command again leaves the directory as it was.
    let (ok, stdout, _) = tacos(&args);
    assert!(ok);
    let v: serde_json::Value = serde_json::from_str(&stdout).unwrap();
    assert_eq!(v["written"], "unchanged");
    // The table names every band once per (collective, placement): 6 bands x 4.
    let (ok, table, err) = tacos(&args[..args.len() - 1]);
    assert!(ok, "{err}");
    let rows = table.lines().filter(|l| l.contains(".xml")).count();
    assert_eq!(rows, 6 * 4, "{table}");
    assert!(table.contains("allreduce, in place") && table.contains("vs best baseline"));

    let (ok, report, err) = tacos(&["compile", "--check", out_s]);
    assert!(ok, "{err}");
    assert!(report.contains("ok:"), "{report}");
    let first = out.join(entries[0]["file"].as_str().unwrap());
    let text = std::fs::read_to_string(&first).unwrap();
    std::fs::write(&first, text.replace("</algo>", "</algo>\n<!-- edited -->")).unwrap();
    let e = fails(&["compile", "--check", out_s]);
    assert!(e.contains("edited"), "{e}");
}

#[test]
fn bad_input_gets_one_line_and_leaves_nothing() {
    let root = scratch("bad");
    let out = root.join("algos");
    let out_s = out.to_str().unwrap();
    let base = ["compile", "torus:2x4", "--out", out_s];
    let with = |extra: &[&'static str]| -> Vec<&str> { [&base[..], extra].concat() };
    let e = fails(&with(&["--sizes", "64KiB..1KiB"]));
    assert!(e.contains("backwards"), "{e}");
    let e = fails(&with(&["--sizes", "1KiB-64KiB"]));
    assert!(e.contains("MIN..MAX"), "{e}");
    let e = fails(&with(&["--sizes", "1000..64KiB"]));
    assert!(e.contains("power of two"), "{e}");
    let e = fails(&with(&["--collectives", "broadcast"]));
    assert!(e.contains("root"), "{e}");
    let e = fails(&with(&["--collectives", "allscatter"]));
    assert!(e.contains("allscatter"), "{e}");
    let e = fails(&with(&["--proto", "fast"]));
    assert!(e.contains("auto, Simple, LL, LL128"), "{e}");
    let e = fails(&with(&[
        "--collectives",
        "alltoall",
        "--inplace",
        "inplace",
    ]));
    assert!(e.contains("cannot run in place"), "{e}");
    assert!(std::fs::read_dir(&root).unwrap().next().is_none());
    // A directory that is not ours is refused before any work, and kept.
    std::fs::create_dir_all(&out).unwrap();
    std::fs::write(out.join("keep.txt"), "mine").unwrap();
    let e = fails(&with(&["--sizes", "1KiB..2KiB"]));
    assert!(e.contains("--force"), "{e}");
    assert!(out.join("keep.txt").exists());
    let (ok, _, err) = tacos(&with(&["--sizes", "1KiB..2KiB", "--force", "--quiet"]));
    assert!(ok, "{err}");
    assert!(!out.join("keep.txt").exists());
    let e = fails(&["compile", "--check", root.to_str().unwrap()]);
    assert!(e.contains("not a tacos algorithm directory"), "{e}");
}
