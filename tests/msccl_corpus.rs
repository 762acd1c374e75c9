//! Third-party MSCCL algorithm files (the MSCCL scheduler's NDv4 algorithms): each parses,
//! verifies as the collective it declares, and round-trips parse -> write -> parse.

use std::path::PathBuf;
use tacos::msccl::{parse_program, read_program, verify, write_program, VerifyOptions};

fn corpus() -> Vec<PathBuf> {
    let dir = PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../shared/corpus/msccl-xml");
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
    files
}

#[test]
fn every_corpus_file_parses_verifies_and_round_trips() {
    let files = corpus();
    assert!(files.len() >= 14, "corpus files found: {}", files.len());
    for path in files {
        let program = read_program(&path).unwrap_or_else(|e| panic!("{e}"));
        let report = verify(&program, &VerifyOptions::default());
        assert!(
            report.is_correct(),
            "{}: {:#?}",
            path.display(),
            report.problems
        );
        assert!(report.messages > 0);
        let text = write_program(&program);
        let again = parse_program(&text, "rewritten").unwrap_or_else(|e| panic!("{e}"));
        assert_eq!(again, program, "{} does not round-trip", path.display());
    }
}
