//! The README's examples work when pasted.

mod common;

use common::tacos;
use std::path::Path;

/// The fenced block of `language` that follows the first line containing `marker`.
fn block_after(marker: &str, language: &str) -> String {
    let readme = std::fs::read_to_string(Path::new(env!("CARGO_MANIFEST_DIR")).join("README.md"))
        .expect("README.md is readable");
    let after = &readme[readme.find(marker).expect("the marker is in README.md")..];
    let fence = format!("```{language}\n");
    let start = after
        .find(&fence)
        .expect("a fenced block follows the marker")
        + fence.len();
    let len = after[start..].find("```").expect("the block is closed");
    after[start..start + len].to_string()
}

#[test]
fn the_json_topology_example_loads_and_is_connected() {
    let json = block_after("The JSON form", "json");
    let dir = Path::new(env!("CARGO_TARGET_TMPDIR")).join("readme");
    std::fs::create_dir_all(&dir).unwrap();
    let file = dir.join("example.json");
    std::fs::write(&file, json).unwrap();
    let file = file.to_str().unwrap();
    let (ok, out, err) = tacos(&["topo", "show", file, "--json"]);
    assert!(ok, "tacos topo show refuses the README's example: {err}");
    let v: serde_json::Value = serde_json::from_str(&out).unwrap();
    assert_eq!(v["npus"], 4, "{v}");
    // Connected both ways: a collective over every NPU is accepted and synthesized.
    let (ok, _, err) = tacos(&["synth", file, "-c", "allreduce", "-s", "1MiB"]);
    assert!(ok, "the README's example cannot run an All-Reduce: {err}");
}
