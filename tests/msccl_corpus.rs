//! Third-party MSCCL algorithm files (the MSCCL scheduler's NDv4 algorithms), as shipped and
//! in msccl-tools' style (without `outofplace`, `minBytes` and `maxBytes`): each loads in the
//! default target (the second with a warning per inferred attribute, and a loader-rule break
//! per missing attribute until written back), verifies as the collective it declares, and
//! round-trips parse -> write -> parse.

mod common;

use std::path::PathBuf;
use tacos::msccl::rules::{self, Rule};
use tacos::msccl::{parse_program, read_program, verify, write_program, Profile, Program};
use tacos::msccl::{Target, VerifyOptions, WHOLE_RANGE_MAX_BYTES};

/// The corpus files, or `None` (with one printed line) when the corpus is not beside the
/// checkout.
fn corpus() -> Option<Vec<PathBuf>> {
    let dir = common::corpus("msccl-xml")?;
    let mut files = Vec::new();
    let mut dirs = vec![dir];
    while let Some(d) = dirs.pop() {
        for entry in std::fs::read_dir(&d).unwrap_or_else(|e| panic!("{}: {e}", d.display())) {
            let path = entry.expect("a directory entry").path();
            if path.is_dir() {
                dirs.push(path);
            } else if path.extension().is_some_and(|e| e == "xml") {
                files.push(path);
            }
        }
    }
    files.sort();
    assert!(files.len() >= 14, "corpus files found: {}", files.len());
    Some(files)
}

/// The text without the `<algo>` attributes msccl-tools never writes.
fn msccl_tools_style(text: &str) -> String {
    let mut out = text.to_string();
    for attr in ["outofplace", "minBytes", "maxBytes"] {
        let key = format!(" {attr}=\"");
        let start = out.find(&key).unwrap_or_else(|| panic!("no {attr}"));
        let end = start + key.len() + out[start + key.len()..].find('"').unwrap() + 1;
        out.replace_range(start..end, "");
    }
    out
}

fn assert_verifies(program: &Program, what: &str) {
    let report = verify(program, &VerifyOptions::default());
    assert!(report.computes(), "{what}: {:#?}", report.problems);
    assert!(report.messages > 0, "{what}");
}

#[test]
fn every_corpus_file_as_shipped_loads_verifies_and_round_trips() {
    let Some(files) = corpus() else { return };
    for path in files {
        let what = path.display().to_string();
        let program = read_program(&path).unwrap_or_else(|e| panic!("{e}"));
        assert!(
            program.inferred.is_empty(),
            "{what}: {:?}",
            program.inferred
        );
        let breaks = rules::check(&program, &Target::default());
        assert!(breaks.is_empty(), "{what}: {breaks:#?}");
        assert_verifies(&program, &what);
        let text = write_program(&program);
        let again = parse_program(&text, "rewritten").unwrap_or_else(|e| panic!("{e}"));
        assert_eq!(again, program, "{what} does not round-trip");
    }
}

#[test]
fn every_corpus_file_in_msccl_tools_style_loads_with_warnings_and_verifies() {
    let Some(files) = corpus() else { return };
    for path in files {
        let what = path.display().to_string();
        let shipped = std::fs::read_to_string(&path).unwrap();
        let stripped = msccl_tools_style(&shipped);
        let program = parse_program(&stripped, &what).unwrap_or_else(|e| panic!("{e}"));
        // outofplace is 1 - inplace, the range the whole of what the executor reads.
        let inferred: Vec<(&str, String)> = program
            .inferred
            .iter()
            .map(|i| (i.attribute, i.value.clone()))
            .collect();
        let outofplace = if program.inplace { "0" } else { "1" };
        assert_eq!(
            inferred,
            [
                ("outofplace", outofplace.to_string()),
                ("minBytes", "0".to_string()),
                ("maxBytes", i64::MAX.to_string()),
            ],
            "{what}"
        );
        assert_eq!(program.outofplace, !program.inplace);
        assert_eq!(
            (program.min_bytes, program.max_bytes),
            (Some(0), Some(WHOLE_RANGE_MAX_BYTES))
        );
        assert!(program.inferred[0]
            .to_string()
            .contains("no outofplace attribute"));
        assert_verifies(&program, &what);
        // The executor requires the three; the older fork does not.
        let missing: Vec<Rule> = rules::check(&program, &Target::default())
            .iter()
            .map(|b| b.rule)
            .collect();
        assert_eq!(missing, [Rule::RequiredAttribute; 3], "{what}");
        let legacy = rules::check(&program, &Target::new(Profile::MscclLegacy));
        assert!(
            legacy.iter().all(|b| b.rule != Rule::RequiredAttribute),
            "{what}: {legacy:#?}"
        );
        // Written back, the file has all of them and loads in the executor.
        let text = write_program(&program);
        let again = parse_program(&text, "rewritten").unwrap_or_else(|e| panic!("{e}"));
        assert!(again.inferred.is_empty(), "{what}");
        assert!(
            rules::check(&again, &Target::default()).is_empty(),
            "{what}"
        );
        assert_verifies(&again, &what);
    }
}
