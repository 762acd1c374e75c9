//! The library's layers: each module may use only the modules below it, so the modules
//! form no cycle and a change low down never has to know what sits above it
//! (`docs/architecture.md`, "Layers"). Read from the source: every `crate::module` a
//! module's code names (comments aside) must be one listed before it here.

use std::path::{Path, PathBuf};

/// The library's modules, lowest first: a module may use only those before it.
const LAYERS: &[&str] = &[
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
    // Only the command line's.
    "report",
    "draw",
];

/// The modules `code` names as `crate::module` (or in a `crate::{...}` group), comments
/// left out.
fn named_modules(code: &str) -> Vec<String> {
    let mut out = Vec::new();
    for line in code.lines() {
        let line = line.split("//").next().unwrap_or("");
        let mut rest = line;
        while let Some(at) = rest.find("crate::") {
            rest = &rest[at + "crate::".len()..];
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

/// Each import of `code` (in `module`) that runs back up the layers, as a sentence.
fn back_imports(file: &str, module: &str, code: &str) -> Vec<String> {
    let rank = |m: &str| LAYERS.iter().position(|&l| l == m);
    let Some(own) = rank(module) else {
        return vec![format!(
            "{file}: module `{module}` is in no layer: add it to LAYERS and docs/architecture.md"
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
            // Not a module (a macro, a crate-level item): nothing to rank.
            None => None,
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

#[test]
fn no_module_uses_one_above_it() {
    let src = Path::new(env!("CARGO_MANIFEST_DIR")).join("crates/tacos/src");
    let mut files = Vec::new();
    rust_files(&src, &mut files);
    files.sort();
    let mut found = Vec::new();
    let mut modules = 0;
    for path in &files {
        let relative = path.strip_prefix(&src).unwrap();
        let first = relative.components().next().unwrap().as_os_str();
        let module = first.to_str().unwrap().trim_end_matches(".rs");
        // The crate root sits above every module.
        if module == "lib" {
            continue;
        }
        modules += 1;
        let code = std::fs::read_to_string(path).unwrap();
        found.extend(back_imports(&relative.display().to_string(), module, &code));
    }
    assert!(modules > 50, "only {modules} files read under {src:?}");
    assert!(
        found.is_empty(),
        "imports that run back up:\n{}",
        found.join("\n")
    );
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
    ];
    for (file, module, line, imports) in back {
        assert_eq!(back_imports(file, module, line).len(), imports, "{line}");
    }
    let allowed = [
        (
            "topology/limits.rs",
            "topology",
            "use crate::budget::{mul, MemoryLimit};",
        ),
        (
            "draw/plots.rs",
            "draw",
            "use crate::report::LinkLoadReport;",
        ),
        (
            "sim/mod.rs",
            "sim",
            "// crate::draw draws what this module measures",
        ),
    ];
    for (file, module, line) in allowed {
        assert!(back_imports(file, module, line).is_empty(), "{line}");
    }
    assert_eq!(back_imports("new.rs", "new", "").len(), 1);
}
