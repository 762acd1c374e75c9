//! The layers of the workspace's code: each module may use only the modules below it, so
//! the modules form no cycle and a change low down never has to know what sits above it
//! (`docs/architecture.md`, "Who may use whom"). Read from the source: every `crate::module`
//! a module's code names (comments aside) must be one listed before it in its crate's
//! layers. The command line's library (`tacos_cli`) sits above the whole `tacos` library, so
//! its modules may name any `tacos::` path; the library never names `tacos_cli` (Cargo
//! refuses a cycle between packages, and the check below says so in words).

use std::path::{Path, PathBuf};

/// The library's modules (`crates/tacos/src`), lowest first: a module may use only those
/// before it.
const LIBRARY: &[&str] = &[
    // The ground: no domain type.
    "error",
    "units",
    "fsio",
    "xmltree",
    "hugepages",
    "prefetch",
    "panics",
    "budget",
    // The network and what moves over it.
    "topology",
    "collective",
    "schedule",
    // What makes, times and bounds schedules.
    "sim",
    "bounds",
    "synth",
    "baselines",
    "msccl",
    // Pricing on GPUs and the second backend: the words both models speak, NCCL's own
    // model, the executor's.
    "gpu",
    "tuner",
    "cost",
    "mscclpp",
    // The one path to what is emitted, and its users.
    "pipeline",
    "compile",
    "plugin",
    "ffi",
];

/// The command line's library (`src/`, the binary's own modules in `src/bin/` aside), lowest
/// first: the reports, then the pictures drawn from them.
const CLI: &[&str] = &["report", "draw"];

/// The modules `code` names as `crate::module` (or in a `crate::{...}` group), comments
/// left out.
fn named_modules(code: &str) -> Vec<String> {
    named_under(code, "crate::")
}

/// The names `code` reaches through `prefix` (a path such as `crate::`, or a crate's name
/// and `::`), one per use, comments left out; `x::{a, b}` names `a` and `b`.
fn named_under(code: &str, prefix: &str) -> Vec<String> {
    let mut out = Vec::new();
    for line in code.lines() {
        let line = line.split("//").next().unwrap_or("");
        let mut rest = line;
        while let Some(at) = rest.find(prefix) {
            // Part of a longer name (`my_tacos_cli::`): not this path.
            let joined = rest[..at]
                .chars()
                .next_back()
                .is_some_and(|c| c.is_alphanumeric() || c == '_');
            rest = &rest[at + prefix.len()..];
            if joined {
                continue;
            }
            if let Some(group) = rest.strip_prefix('{') {
                let inner = group.split('}').next().unwrap_or("");
                for item in inner.split(',') {
                    let name: String = item
                        .trim()
                        .chars()
                        .take_while(|c| c.is_ascii_lowercase() || *c == '_')
                        .collect();
                    if !name.is_empty() {
                        out.push(name);
                    }
                }
            } else {
                let name: String = rest
                    .chars()
                    .take_while(|c| c.is_ascii_lowercase() || *c == '_')
                    .collect();
                if !name.is_empty() {
                    out.push(name);
                }
            }
        }
    }
    out
}

/// Each import of `code` (in `module`, of the crate whose modules are `layers`) that runs
/// back up the layers, or names a module its crate does not have, as a sentence.
fn back_imports(layers: &[&str], file: &str, module: &str, code: &str) -> Vec<String> {
    let rank = |m: &str| layers.iter().position(|&l| l == m);
    let Some(own) = rank(module) else {
        return vec![format!(
            "{file}: module `{module}` is in no layer: add it to tests/layers.rs and docs/architecture.md"
        )];
    };
    named_modules(code)
        .into_iter()
        .filter(|used| used != module)
        .filter_map(|used| match rank(&used) {
            Some(r) if r < own => None,
            Some(_) => Some(format!(
                "{file}: `{module}` uses `crate::{used}`, which sits above it"
            )),
            // Every lowercase `crate::` name in this code base is a module: one outside
            // the layers is one that moved to another crate (or a new module).
            None => Some(format!(
                "{file}: `{module}` uses `crate::{used}`, which is no module of this crate"
            )),
        })
        .collect()
}

fn rust_files(dir: &Path, out: &mut Vec<PathBuf>) {
    for entry in std::fs::read_dir(dir).unwrap() {
        let path = entry.unwrap().path();
        if path.is_dir() {
            rust_files(&path, out);
        } else if path.extension().is_some_and(|e| e == "rs") {
            out.push(path);
        }
    }
}

/// Fails on any back import in the crate whose source is `dir` (its modules `layers`; the
/// binary's `bin/` left out), or if fewer than `at_least` module files were read.
fn assert_layered(dir: &str, layers: &[&str], at_least: usize) {
    let src = Path::new(env!("CARGO_MANIFEST_DIR")).join(dir);
    let mut files = Vec::new();
    rust_files(&src, &mut files);
    files.sort();
    let mut found = Vec::new();
    let mut modules = 0;
    for path in &files {
        let relative = path.strip_prefix(&src).unwrap();
        let first = relative.components().next().unwrap().as_os_str();
        let module = first.to_str().unwrap().trim_end_matches(".rs");
        // The crate root sits above every module; the binary is a crate of its own.
        if module == "lib" || module == "bin" {
            continue;
        }
        modules += 1;
        let code = std::fs::read_to_string(path).unwrap();
        found.extend(back_imports(
            layers,
            &relative.display().to_string(),
            module,
            &code,
        ));
    }
    assert!(
        modules >= at_least,
        "only {modules} files read under {src:?}"
    );
    assert!(
        found.is_empty(),
        "imports that run back up:\n{}",
        found.join("\n")
    );
}

#[test]
fn no_library_module_uses_one_above_it() {
    assert_layered("crates/tacos/src", LIBRARY, 50);
}

#[test]
fn no_command_line_module_uses_one_above_it() {
    assert_layered("src", CLI, 5);
}

/// The library is the ground the command line stands on: none of its code names the
/// command line's crate, and its manifest does not depend on it.
#[test]
fn the_library_never_names_the_command_line() {
    let root = Path::new(env!("CARGO_MANIFEST_DIR"));
    let mut files = Vec::new();
    rust_files(&root.join("crates/tacos/src"), &mut files);
    for path in &files {
        let code = std::fs::read_to_string(path).unwrap();
        let named = named_under(&code, "tacos_cli::");
        assert!(named.is_empty(), "{path:?} names tacos_cli::{named:?}");
    }
    let manifest = std::fs::read_to_string(root.join("crates/tacos/Cargo.toml")).unwrap();
    assert!(!manifest.contains("tacos-cli"), "crates/tacos/Cargo.toml");
}

/// The check catches the imports that made the modules one cycle before they were
/// layered (each as it was written), and passes what the layers allow.
#[test]
fn the_check_catches_the_back_imports_there_were() {
    let back = [
        (
            "error.rs",
            "error",
            "use crate::msccl::limits::Violation;",
            1,
        ),
        (
            "error.rs",
            "error",
            "use crate::topology::{format_npus, NpuId};",
            1,
        ),
        ("units.rs", "units", "use crate::topology::MAX_NPUS;", 1),
        (
            "budget.rs",
            "budget",
            "use crate::synth::{port_shape, PortShape};",
            1,
        ),
        // The pictures live in the command line's crate now: the library has no `draw`.
        (
            "sim/heatmap.rs",
            "sim",
            "use crate::draw::topology::{loads_svg, LoadPanel};",
            1,
        ),
        (
            "budget.rs",
            "budget",
            "use crate::{collective::CollectiveSpec, topology::Topology};",
            2,
        ),
        // Nor `report`, which used `compile`, `pipeline`, `synth` and `tuner`.
        ("ffi/api.rs", "ffi", "use crate::report::TopologyInfo;", 1),
    ];
    for (file, module, line, imports) in back {
        assert_eq!(
            back_imports(LIBRARY, file, module, line).len(),
            imports,
            "{line}"
        );
    }
    let allowed = [
        (
            "topology/limits.rs",
            "topology",
            "use crate::budget::{mul, MemoryLimit};",
        ),
        (
            "sim/mod.rs",
            "sim",
            "// crate::draw draws what this module measures",
        ),
    ];
    for (file, module, line) in allowed {
        assert!(
            back_imports(LIBRARY, file, module, line).is_empty(),
            "{line}"
        );
    }
    assert_eq!(back_imports(LIBRARY, "new.rs", "new", "").len(), 1);

    // In the command line's crate: pictures are drawn from reports, not the other way, and
    // the library below is always in reach.
    let plots = "use crate::report::LinkLoadReport;\nuse tacos::sim::bus_factor;";
    assert!(back_imports(CLI, "draw/plots.rs", "draw", plots).is_empty());
    let back = "use crate::draw::scale::TickFormat;";
    assert_eq!(back_imports(CLI, "report.rs", "report", back).len(), 1);
    assert_eq!(
        named_under("use tacos_cli::report;", "tacos_cli::").len(),
        1
    );
    assert!(named_under("use my_tacos_cli::report;", "tacos_cli::").is_empty());
}
