//! The files of `msccl/`, each against its manifest entry, the target's loader and the
//! verifier, and all of them against each other (two claiming one range): what the
//! executor would load. Apart from the walk of the directory, which only lists entries.

use super::{in_algorithms, CheckKind, CheckOptions, Problems};
use crate::compile::dir::{loader_problems, plain_name, read_regular};
use crate::compile::manifest::{sha256_hex, Manifest};
use crate::error::{Error, Result};
use crate::msccl::{parse_program, verify, Program, ProgramTimer, Target, VerifyOptions};
use crate::units::ps_to_us;
use std::path::Path;

/// What a file of `msccl/` claims to serve: the executor picks among files by these.
pub(super) struct Claim {
    file: String,
    /// Collective, ranks, in place, protocol.
    key: (String, usize, bool, &'static str),
    range: (u64, u64),
}

impl Claim {
    fn of(file: &str, program: &Program) -> Claim {
        Claim {
            file: file.to_string(),
            key: (
                program.collective.clone(),
                program.gpus.len(),
                program.inplace,
                program.proto.name(),
            ),
            // A file without a size range serves every size.
            range: (
                program.min_bytes.unwrap_or(0),
                program.max_bytes.unwrap_or(u64::MAX),
            ),
        }
    }
}

/// Checks every file the manifest lists against its entry, and with `verify_xml` its
/// program (what it declares, the target's loader rules, verification, predictions).
pub(super) fn check_listed(
    dir: &Path,
    manifest: &Manifest,
    target: &Target,
    options: &CheckOptions,
    present: &[String],
    claims: &mut Vec<Claim>,
    problems: &mut Problems,
) -> Result<()> {
    let verify_options = VerifyOptions {
        target: target.clone(),
        ..VerifyOptions::default()
    };
    for entry in &manifest.entries {
        let (path, shown) = in_algorithms(dir, &entry.file);
        let file = Some(shown.as_str());
        if !plain_name(&entry.file) {
            problems.add(
                CheckKind::Invalid,
                file,
                "a file name must be a plain name inside the directory".into(),
            );
            continue;
        }
        if !present.contains(&entry.file) {
            // An entry that is there but not a regular file is already reported.
            if std::fs::symlink_metadata(&path).is_err() {
                problems.add(CheckKind::Missing, file, "listed but absent".into());
            }
            continue;
        }
        let bytes = read_regular(&path).map_err(|e| Error::io(&path, e))?;
        if sha256_hex(&bytes) != entry.sha256 {
            problems.add(
                CheckKind::Edited,
                file,
                "its contents differ from what was compiled (SHA-256 mismatch)".into(),
            );
            continue;
        }
        if !options.verify_xml {
            continue;
        }
        let text = String::from_utf8_lossy(&bytes);
        let program = match parse_program(&text, &path.display().to_string()) {
            Ok(p) => p,
            Err(e) => {
                problems.add(CheckKind::NotAlgorithm, file, e.to_string());
                continue;
            }
        };
        claims.push(Claim::of(&shown, &program));
        let declared = (
            program.collective_kind(),
            program.inplace,
            program.min_bytes,
            program.max_bytes,
            program.gpus.len(),
        );
        let expected = (
            Some(entry.collective),
            entry.in_place,
            Some(entry.min_bytes),
            Some(entry.max_bytes),
            manifest.topology.npus,
        );
        if declared != expected {
            problems.add(
                CheckKind::Invalid,
                file,
                format!("the file declares (collective, in place, minBytes, maxBytes, GPUs) = {declared:?}, the manifest {expected:?}"),
            );
            continue;
        }
        let declared = (
            program.proto.name(),
            program.nchannels,
            program.nchunksperloop,
        );
        let recorded = (entry.proto.as_str(), entry.channels, entry.chunks_per_loop);
        if declared != recorded {
            problems.add(
                CheckKind::Invalid,
                file,
                format!("the file declares (proto, channels, chunks per loop) = {declared:?}, the manifest {recorded:?}"),
            );
            continue;
        }
        let refused = loader_problems(&program, target);
        if !refused.is_empty() {
            problems.add(
                CheckKind::Limits,
                file,
                format!("target {target} refuses it: {}", refused.join("; ")),
            );
            continue;
        }
        if let Some(p) = verify(&program, &verify_options).problems.first() {
            problems.add(CheckKind::Invalid, file, format!("fails verification: {p}"));
            continue;
        }
        if let Some(topo) = options.topology {
            for band in &entry.bands {
                let timed = ProgramTimer::new(topo, &program, &topo.alive_npus())
                    .and_then(|timer| {
                        let options = &manifest.options;
                        options.program_time_ps(topo, &program, &timer, band.size_bytes)
                    })
                    .map(ps_to_us);
                if timed.as_ref().ok() != Some(&band.time_us) {
                    let gives = match &timed {
                        Ok(us) => format!("timed again, it takes {us} us"),
                        Err(e) => format!("the program cannot be timed: {e}"),
                    };
                    problems.add(
                        CheckKind::Prediction,
                        file,
                        format!(
                            "at {} bytes the manifest predicts {} us; {gives}",
                            band.size_bytes, band.time_us
                        ),
                    );
                }
            }
        }
    }
    Ok(())
}

/// Regular files of `msccl/` that the manifest does not list: the executor would load
/// them too, so each is parsed and checked for the target like a listed one.
pub(super) fn check_unlisted(
    dir: &Path,
    manifest: &Manifest,
    target: &Target,
    present: &[String],
    claims: &mut Vec<Claim>,
    problems: &mut Problems,
) -> Result<()> {
    let listed = |name: &String| manifest.entries.iter().any(|e| &e.file == name);
    for name in present.iter().filter(|n| !listed(n)) {
        let (path, shown) = in_algorithms(dir, name);
        let file = Some(shown.as_str());
        let hidden = if name.starts_with('.') {
            " (hidden files are parsed too)"
        } else {
            ""
        };
        let bytes = read_regular(&path).map_err(|e| Error::io(&path, e))?;
        let text = String::from_utf8_lossy(&bytes);
        let program = match parse_program(&text, &shown) {
            Ok(p) => p,
            Err(e) => {
                problems.add(
                    CheckKind::NotAlgorithm,
                    file,
                    format!(
                        "not in the manifest, and the executor would fail to load it{hidden}: {e}"
                    ),
                );
                continue;
            }
        };
        problems.add(
            CheckKind::Extra,
            file,
            format!("not listed in the manifest; the executor would load it too{hidden}"),
        );
        let refused = loader_problems(&program, target);
        if !refused.is_empty() {
            problems.add(
                CheckKind::Limits,
                file,
                format!("target {target} refuses it: {}", refused.join("; ")),
            );
        }
        claims.push(Claim::of(&shown, &program));
    }
    Ok(())
}

/// Files that claim one (collective, ranks, placement, protocol) for overlapping sizes.
pub(super) fn conflicts(claims: &mut [Claim], problems: &mut Problems) {
    claims.sort_by(|a, b| (&a.key, a.range, &a.file).cmp(&(&b.key, b.range, &b.file)));
    for (i, later) in claims.iter().enumerate() {
        let earlier = claims[..i]
            .iter()
            .find(|c| c.key == later.key && c.range.1 >= later.range.0);
        if let Some(c) = earlier {
            let (coll, ranks, in_place, proto) = &later.key;
            let placement = if *in_place {
                "in place"
            } else {
                "out of place"
            };
            problems.add(
                CheckKind::Conflict,
                Some(&later.file),
                format!(
                    "claims {coll} on {ranks} ranks, {placement}, {proto} for {}..{} bytes, which {} already claims ({}..{})",
                    later.range.0,
                    later.range.1,
                    c.file,
                    c.range.0,
                    c.range.1
                ),
            );
        }
    }
}
