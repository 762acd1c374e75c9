//! The README's examples work when pasted.

mod common;

use common::tacos;
use std::path::Path;

/// The fenced block of `language` that follows the first line containing `marker`.
fn block_after(marker: &str, language: &str) -> String {
    let readme = readme();
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

fn readme() -> String {
    std::fs::read_to_string(Path::new(env!("CARGO_MANIFEST_DIR")).join("README.md"))
        .expect("README.md is readable")
}

/// The README's fenced blocks: (language tag, lines).
fn fenced_blocks(readme: &str) -> Vec<(String, Vec<String>)> {
    let mut blocks = Vec::new();
    let mut open: Option<(String, Vec<String>)> = None;
    for line in readme.lines() {
        match (line.strip_prefix("```"), open.take()) {
            (Some(_), Some(block)) => blocks.push(block),
            (Some(tag), None) => open = Some((tag.trim().to_string(), Vec::new())),
            (None, Some((tag, mut lines))) => {
                lines.push(line.to_string());
                open = Some((tag, lines));
            }
            (None, None) => {}
        }
    }
    assert!(open.is_none(), "README.md has an unclosed fence");
    blocks
}

/// The prefixes that run the tool, as a README line writes them.
const TOOL_PREFIXES: [&str; 2] = ["tacos ", "cargo run --release -- "];

/// One README example: the tool's arguments, and for a transcript the lines it shows.
struct Example {
    line: String,
    args: Vec<String>,
    shown: Vec<String>,
}

/// The arguments after a tool prefix, split on blanks, a trailing `# comment` dropped;
/// quotes are refused (no README example needs them, and a splitter that ignored them
/// would run something else than a shell does).
fn tool_args(line: &str) -> Option<Vec<String>> {
    let rest = TOOL_PREFIXES.iter().find_map(|p| line.strip_prefix(p))?;
    let rest = rest.split(" #").next().unwrap();
    assert!(
        !rest.contains(['"', '\'', '\\', '$', '`']),
        "README example with shell quoting or expansion, which this test does not run: {line}"
    );
    Some(rest.split_whitespace().map(String::from).collect())
}

/// The rule for which README lines run:
/// - in a block tagged `sh`, `bash`, `shell` or `console`, every line starting with
///   `tacos ` or `cargo run --release -- ` runs, with the built binary;
/// - in any other block, a line `$ tacos ...` or `$ cargo run --release -- ...` is a
///   transcript: it runs too, and the lines after it (up to the next `$`) are what it
///   prints, whose labels must match;
/// - every other non-blank line of a shell block is skipped and returned: it is not the
///   tool (`cargo test`, which this test is part of) or it launches a job on a GPU
///   cluster (`NAME=value` environment lines, their `\` continuations,
///   `./all_reduce_perf`).
///
/// Examples run in order in one scratch directory, so a line may read a file an earlier
/// line writes.
fn examples(readme: &str) -> (Vec<Example>, Vec<String>) {
    let (mut run, mut skipped) = (Vec::new(), Vec::new());
    for (tag, lines) in fenced_blocks(readme) {
        let shell = matches!(tag.as_str(), "sh" | "bash" | "shell" | "console");
        for (i, line) in lines.iter().enumerate() {
            let transcript = line.strip_prefix("$ ").filter(|_| !shell);
            let command = if shell { Some(line.as_str()) } else { transcript };
            match command.and_then(tool_args) {
                Some(args) => {
                    let shown = match transcript {
                        Some(_) => lines[i + 1..]
                            .iter()
                            .take_while(|l| !l.starts_with("$ "))
                            .cloned()
                            .collect(),
                        None => Vec::new(),
                    };
                    run.push(Example {
                        line: line.clone(),
                        args,
                        shown,
                    });
                }
                None if shell && !line.trim().is_empty() && !line.starts_with('#') => {
                    skipped.push(line.clone())
                }
                None => {}
            }
        }
    }
    (run, skipped)
}

/// A report line's label: the text before its first run of two spaces.
fn label(line: &str) -> &str {
    line.split("  ").next().unwrap_or("").trim()
}

#[test]
fn every_fenced_readme_example_runs() {
    let (run, skipped) = examples(&readme());
    // The README's two commands and its transcript at the least: an extraction that
    // finds nothing must not pass as "every example ran".
    assert!(run.len() >= 2, "only {} README examples found", run.len());
    let dir = Path::new(env!("CARGO_TARGET_TMPDIR")).join("readme-examples");
    let _ = std::fs::remove_dir_all(&dir);
    std::fs::create_dir_all(&dir).unwrap();
    for ex in &run {
        let out = std::process::Command::new(env!("CARGO_BIN_EXE_tacos"))
            .args(&ex.args)
            .current_dir(&dir)
            .output()
            .expect("the tacos binary runs");
        let stdout = String::from_utf8_lossy(&out.stdout);
        assert!(
            out.status.success(),
            "README example failed: {}\n{}",
            ex.line,
            String::from_utf8_lossy(&out.stderr)
        );
        let printed: Vec<&str> = stdout.lines().map(label).collect();
        let shown: Vec<&str> = ex.shown.iter().map(|l| label(l)).collect();
        if !shown.is_empty() {
            assert_eq!(
                printed, shown,
                "README transcript of `{}` shows other lines than it prints:\n{stdout}",
                ex.line
            );
        }
    }
    println!(
        "ran {} README examples, skipped {} lines: {skipped:?}",
        run.len(),
        skipped.len()
    );
}
