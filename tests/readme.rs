//! The README's and the guides' examples work when pasted, and the command table in
//! docs/commands.md is what `--help` says.

mod common;

use common::tacos;
use std::collections::{BTreeMap, BTreeSet};
use std::path::Path;

/// The fenced block of `language` that follows the first line of `doc` containing `marker`.
fn block_after(doc: &str, marker: &str, language: &str) -> String {
    let text = read(doc);
    let after = &text[text.find(marker).expect("the marker is in the document")..];
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
    let json = block_after("docs/topologies.md", "The JSON form", "json");
    let dir = Path::new(env!("CARGO_TARGET_TMPDIR")).join("readme");
    std::fs::create_dir_all(&dir).unwrap();
    let file = dir.join("example.json");
    std::fs::write(&file, json).unwrap();
    let file = file.to_str().unwrap();
    let (ok, out, err) = tacos(&["topo", "show", file, "--json"]);
    assert!(ok, "tacos topo show refuses the guide's example: {err}");
    let v: serde_json::Value = serde_json::from_str(&out).unwrap();
    assert_eq!(v["npus"], 4, "{v}");
    // Connected both ways: a collective over every NPU is accepted and synthesized.
    let (ok, _, err) = tacos(&["synth", file, "-c", "allreduce", "-s", "1MiB"]);
    assert!(ok, "the guide's example cannot run an All-Reduce: {err}");
}

/// The guides in docs/ whose examples run (deploy.md has its own test).
const GUIDES: [&str; 11] = [
    "docs/commands.md",
    "docs/synthesis.md",
    "docs/topologies.md",
    "docs/msccl.md",
    "docs/mscclpp.md",
    "docs/compile.md",
    "docs/plugins.md",
    "docs/cost-model.md",
    "docs/pictures.md",
    "docs/limits.md",
    "docs/performance.md",
];

/// A file of the repository, by its path from the root.
fn read(doc: &str) -> String {
    std::fs::read_to_string(Path::new(env!("CARGO_MANIFEST_DIR")).join(doc))
        .unwrap_or_else(|e| panic!("{doc} is not readable: {e}"))
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
    assert!(open.is_none(), "a document has an unclosed fence");
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
/// - other non-blank lines of a shell block are skipped and returned when they are not
///   the tool (`cargo test`, which this test is part of; `cargo build`) or launch a job
///   on a GPU cluster (`NAME=value` environment lines, lines continuing a line that ends
///   in `\`, programs run as `./NAME` such as `./all_reduce_perf`); any other line fails
///   the test, so a mistyped command is not skipped in silence.
///
/// Examples run in order in one scratch directory, so a line may read a file an earlier
/// line writes.
fn examples(text: &str) -> (Vec<Example>, Vec<String>) {
    let (mut run, mut skipped) = (Vec::new(), Vec::new());
    for (tag, lines) in fenced_blocks(text) {
        let shell = matches!(tag.as_str(), "sh" | "bash" | "shell" | "console");
        for (i, line) in lines.iter().enumerate() {
            let transcript = line.strip_prefix("$ ").filter(|_| !shell);
            let command = if shell {
                Some(line.as_str())
            } else {
                transcript
            };
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
                    let continued = i > 0 && lines[i - 1].trim_end().ends_with('\\');
                    assert!(
                        continued
                            || is_cargo(line)
                            || is_environment(line)
                            || line.starts_with("./"),
                        "README shell line that this test neither runs nor knows to skip: {line}"
                    );
                    skipped.push(line.clone())
                }
                None => {}
            }
        }
    }
    (run, skipped)
}

/// `cargo test` or `cargo build`: cargo itself, not the tool.
fn is_cargo(line: &str) -> bool {
    ["cargo test", "cargo build"]
        .iter()
        .any(|c| line.starts_with(c))
}

/// A line starting with an environment assignment, `NAME=value` (a plugin job's setting).
fn is_environment(line: &str) -> bool {
    line.split_once('=').is_some_and(|(name, _)| {
        !name.is_empty()
            && name
                .chars()
                .all(|c| c.is_ascii_uppercase() || c.is_ascii_digit() || c == '_')
    })
}

/// The labels of transcript lines whose figures are wall-clock times, which differ from
/// run to run and machine to machine.
const WALL_CLOCK: [&str; 1] = ["synthesis time"];

/// A report line's label: the text before its first run of two spaces.
fn label(line: &str) -> &str {
    line.split("  ").next().unwrap_or("").trim()
}

#[test]
fn every_fenced_readme_example_runs() {
    // The README's two commands, its transcript and its tour at the least: an extraction
    // that finds nothing must not pass as "every example ran".
    run_examples("README.md", &read("README.md"), 8);
}

/// Every guide's examples, and the README short enough to read through: the reference
/// lives in the guides, each of which the README links to.
#[test]
fn every_guide_example_runs_and_the_readme_links_every_guide() {
    let readme = read("README.md");
    assert!(readme.lines().count() <= 300, "README.md is over 300 lines");
    for guide in GUIDES {
        assert!(
            readme.contains(&format!("]({guide})")),
            "README.md does not link {guide}"
        );
        run_examples(guide, &read(guide), 0);
    }
}

/// The deployment guide's commands, up to the steps that need GPUs (its `text` blocks).
#[test]
fn every_deployment_guide_command_runs() {
    run_examples("docs/deploy.md", &read("docs/deploy.md"), 5);
}

/// Runs `doc`'s examples (`examples`' rule) in a scratch directory of their own; at least
/// `least` must be found.
fn run_examples(doc: &str, text: &str, least: usize) {
    let (run, skipped) = examples(text);
    assert!(
        run.len() >= least,
        "only {} {doc} examples found",
        run.len()
    );
    let dir = Path::new(env!("CARGO_TARGET_TMPDIR"))
        .join(format!("examples-{}", doc.replace(['/', '.'], "-")));
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
            "{doc} example failed: {}\n{}",
            ex.line,
            String::from_utf8_lossy(&out.stderr)
        );
        // A transcript shows what the command prints, figure for figure, but for the
        // wall-clock lines, whose labels alone must match.
        let as_compared = |line: &str| match WALL_CLOCK.contains(&label(line)) {
            true => label(line).to_string(),
            false => line.trim_end().to_string(),
        };
        let printed: Vec<String> = stdout.lines().map(as_compared).collect();
        let shown: Vec<String> = ex.shown.iter().map(|l| as_compared(l)).collect();
        if !shown.is_empty() {
            assert_eq!(
                printed, shown,
                "{doc} transcript of `{}` shows other lines than it prints:\n{stdout}",
                ex.line
            );
        }
    }
    println!(
        "ran {} {doc} examples, skipped {} lines: {skipped:?}",
        run.len(),
        skipped.len()
    );
}

/// The flags `tacos COMMAND --help` lists: each long flag, and short flag -> long flag.
fn help_flags(command: &[&str]) -> (BTreeSet<String>, BTreeMap<String, String>) {
    let mut args = command.to_vec();
    args.push("--help");
    let (ok, out, err) = tacos(&args);
    assert!(ok, "tacos {} --help fails: {err}", command.join(" "));
    let (mut long, mut short) = (BTreeSet::new(), BTreeMap::new());
    for line in out.lines().map(str::trim_start) {
        let (s, rest) = match line.strip_prefix('-').filter(|r| !r.starts_with('-')) {
            Some(r) if r.as_bytes().get(1) == Some(&b',') => (Some(&r[..1]), r[2..].trim_start()),
            _ => (None, line),
        };
        let Some(flag) = rest.strip_prefix("--") else {
            continue;
        };
        let flag = format!("--{}", flag.split([' ', '=']).next().unwrap());
        if let Some(s) = s {
            short.insert(format!("-{s}"), flag.clone());
        }
        long.insert(flag);
    }
    (long, short)
}

/// The backticked spans of a table cell, with the table's `\|` escapes undone.
fn spans(cell: &str) -> Vec<String> {
    cell.split('`')
        .skip(1)
        .step_by(2)
        .map(|s| s.replace("\\|", "|"))
        .collect()
}

/// The flags a command span shows: `--long` and `-s` words, brackets and parentheses
/// around them ignored.
fn span_flags(span: &str) -> Vec<String> {
    span.split_whitespace()
        .map(|w| w.trim_matches(['[', ']', '(', ')', '|']))
        .filter(|w| w.starts_with('-') && w.len() > 1)
        .map(|w| w.trim_end_matches("...").to_string())
        .collect()
}

/// Flags of the topology arguments every topology-taking command shares: documented once,
/// in the `--fail-npus` row and the Topologies section, not in every command's row.
const SHARED_TOPOLOGY_FLAGS: [&str; 5] = [
    "--bandwidth",
    "--latency",
    "--fail-npus",
    "--fail-links",
    "--unwind",
];

/// The Commands table against `--help`. The rule: every flag a row shows for a command
/// exists in that command's `--help` (short flags through their long names); a command
/// whose rows contain no `...` claims to be listed completely, so every long flag its
/// `--help` has appears in its rows, except `--help`, the global `--max-memory` (its own
/// section, Resource limits) and the shared topology flags; the
/// row that starts with `...` lists the commands its flags work with, each of which must
/// have them, and (after "not") commands that must not.
#[test]
fn the_command_table_and_help_agree() {
    let section = read("docs/commands.md");
    // command path -> (flags shown, whether a row elides some with `...`)
    let mut shown: BTreeMap<Vec<String>, (BTreeSet<String>, bool)> = BTreeMap::new();
    let mut shared_rows = 0;
    for row in section.lines().filter(|l| l.starts_with("| `")) {
        let cells: Vec<&str> = row.split(" | ").collect();
        for span in spans(cells[0]) {
            if let Some(flags) = span.strip_prefix("... ") {
                shared_rows += 1;
                check_shared_row(&span_flags(flags), cells[1]);
                continue;
            }
            let words: Vec<&str> = span.split_whitespace().collect();
            assert_eq!(
                words[0], "tacos",
                "a command cell that is not a tacos command: {span}"
            );
            let depth = if words[1] == "topo" { 3 } else { 2 };
            let path: Vec<String> = words[1..depth].iter().map(|w| w.to_string()).collect();
            let entry = shown.entry(path).or_default();
            entry.0.extend(span_flags(&span));
            entry.1 |= span.contains("...");
        }
    }
    assert_eq!(shared_rows, 1, "one row lists the shared topology flags");
    assert!(
        shown.len() >= 10,
        "commands found in the table: {:?}",
        shown.keys()
    );
    for (path, (flags, elided)) in &shown {
        let path: Vec<&str> = path.iter().map(String::as_str).collect();
        let (long, short) = help_flags(&path);
        let mut in_readme = BTreeSet::new();
        for flag in flags {
            let long_name = short.get(flag).unwrap_or(flag);
            assert!(
                long.contains(long_name),
                "docs/commands.md shows {flag} for `tacos {}`, which its --help lacks ({long:?})",
                path.join(" ")
            );
            in_readme.insert(long_name.clone());
        }
        if !elided {
            let missing: Vec<&String> = long
                .iter()
                .filter(|f| !["--help", "--max-memory"].contains(&f.as_str()))
                .filter(|f| !SHARED_TOPOLOGY_FLAGS.contains(&f.as_str()))
                .filter(|f| !in_readme.contains(*f))
                .collect();
            assert!(
                missing.is_empty(),
                "docs/commands.md's row for `tacos {}` lists it completely (no `...`) but lacks {missing:?}",
                path.join(" ")
            );
        }
    }
}

/// The `... --fail-npus 7,9 --fail-links 3-4` row: the commands named before its first
/// parenthesis have the flags; those named after "not" do not.
fn check_shared_row(flags: &[String], description: &str) {
    let (with, rest) = description.split_once('(').expect("the row's (...) remark");
    let without = rest
        .split_once("not ")
        .map_or("", |(_, n)| n.split(')').next().unwrap());
    for (commands, has) in [(with, true), (without, false)] {
        let commands = spans(commands);
        assert!(!commands.is_empty(), "no commands named in: {description}");
        for command in commands {
            let path: Vec<&str> = command.split_whitespace().collect();
            let (long, _) = help_flags(&path);
            for flag in flags {
                assert_eq!(
                    long.contains(flag),
                    has,
                    "docs/commands.md says {flag} {} with `tacos {command}`",
                    if has { "works" } else { "does not work" }
                );
            }
        }
    }
}
