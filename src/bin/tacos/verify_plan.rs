//! `tacos verify` for an MSCCL++ execution plan (a JSON file whose top level has `gpus`).

use super::verify::VerifyArgs;
use serde::Serialize;
use std::path::Path;
use tacos::mscclpp::plan::MAX_PLAN_FILE_BYTES;
use tacos::mscclpp::{verify, Plan, PlanReport, VerifyOptions};

/// The text of `path` when it is a JSON object with a `gpus` key (an MSCCL++ plan); `None`
/// for anything else (MSCCL XML), left to the XML reader.
pub fn plan_text(path: &Path) -> Option<String> {
    let text = tacos::fsio::read_text(path, "a plan", MAX_PLAN_FILE_BYTES).ok()?;
    if !text.trim_start().starts_with('{') {
        return None;
    }
    let value: serde_json::Value = serde_json::from_str(&text).ok()?;
    value.get("gpus").is_some().then_some(text)
}

/// What `--json` prints for a plan.
#[derive(Serialize)]
struct PlanJson {
    command: &'static str,
    file: String,
    format: &'static str,
    /// The file could not be read as a plan.
    load_error: Option<String>,
    /// The plan was read but is wrong (the first problem found).
    error: Option<String>,
    report: Option<PlanReport>,
    correct: bool,
}

/// Verifies the plan in `text`: exits 3 when it cannot be read as a plan, 1 when it is
/// wrong, 2 for options that do not apply to plans.
pub fn run(args: &VerifyArgs, text: &str) -> anyhow::Result<()> {
    let file = args.file.display().to_string();
    let mut out = PlanJson {
        command: "verify",
        file: file.clone(),
        format: "mscclpp-plan",
        load_error: None,
        error: None,
        report: None,
        correct: false,
    };
    let emit = |out: &PlanJson| -> anyhow::Result<()> {
        if args.json {
            println!("{}", serde_json::to_string_pretty(out)?);
        }
        Ok(())
    };
    if args.spec.is_some() || args.collective.is_some() {
        let e = format!(
            "{file} is an MSCCL++ plan: timing it on a topology (SPEC) and --collective apply to MSCCL XML only; --size checks the plan's message size rules"
        );
        out.error = Some(e.clone());
        emit(&out)?;
        super::verify::exit_with(super::verify::USAGE, &e);
    }
    let plan = match Plan::from_json(text, &file) {
        Ok(p) => p,
        Err(e) => {
            out.load_error = Some(e.to_string());
            emit(&out)?;
            super::verify::exit_with(super::verify::CANNOT_LOAD, &e.to_string());
        }
    };
    let options = VerifyOptions {
        size: args.size,
        root: args.root,
    };
    match verify(&plan, &options) {
        Ok(report) => {
            if !args.json {
                println!("{}", summary(&file, &report));
            }
            out.correct = true;
            out.report = Some(report);
            emit(&out)
        }
        Err(e) => {
            out.error = Some(e.to_string());
            emit(&out)?;
            Err(super::Reported(format!("{file}: {e}")).into())
        }
    }
}

/// The one-paragraph summary of a verified plan.
fn summary(file: &str, r: &PlanReport) -> String {
    let root = r.root.map_or(String::new(), |x| format!(" from rank {x}"));
    format!(
        "{file}: MSCCL++ plan '{}', {}{root} ({}, {}) over {} ranks: {} threadblocks, {} ops (at most {} in one threadblock), {} signals per launch, up to {} scratch chunks per rank; verified: every wait matched, no deadlock, no race, result correct",
        r.name,
        r.collective,
        r.protocol,
        if r.inplace { "in place" } else { "out of place" },
        r.ranks,
        r.threadblocks,
        r.ops,
        r.max_ops_per_threadblock,
        r.signals,
        r.max_scratch_chunks
    )
}
