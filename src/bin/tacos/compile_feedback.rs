//! `tacos compile --feedback`: the nccl-tests runs `measure-plan` prints, with the compiled
//! set and without it, compared band by band; the bands ours lost go back to NCCL and the
//! directory is rewritten whole with the measurements in its manifest.

use super::compile::band_label;
use anyhow::Context;
use std::path::{Path, PathBuf};
use tacos::compile::{
    algorithm_dir, apply_feedback, legacy_xml_files, read_results, read_set, short_size, write_dir,
    BandFeedback, Feedback, Outcome, Results, Written,
};
use tacos::msccl::Profile;
use tacos::topology::Topology;
use tacos_cli::report::{CompileFeedbackReport, FeedbackBand, FeedbackFile, SCHEMA_VERSION};

pub fn run(
    results: &[PathBuf],
    dir: &Path,
    topology: Option<&Topology>,
    json: bool,
) -> anyhow::Result<()> {
    let set = read_set(dir, topology)?;
    let read = results
        .iter()
        .map(|file| read_results(file, &set.manifest))
        .collect::<tacos::Result<Vec<Results>>>()?;
    let feedback = apply_feedback(&set, &read)?;
    // The older fork loads a list of at most a few files: checked before anything is written.
    let xml_files = match feedback.set.manifest.options.target.profile {
        Profile::MscclLegacy => Some(
            legacy_xml_files(&feedback.set, &algorithm_dir(dir))
                .context("the set as the measurements leave it")?,
        ),
        _ => None,
    };
    let written = write_dir(&feedback.set, dir, false)?;
    let written = match written {
        Written::AlreadyThere => "unchanged",
        Written::Created | Written::Replaced => "replaced",
    };
    if json {
        let report = CompileFeedbackReport {
            schema_version: SCHEMA_VERSION,
            command: "compile-feedback",
            dir: dir.display().to_string(),
            msccl_algo_dir: algorithm_dir(dir).display().to_string(),
            msccl_xml_files: xml_files,
            written,
            results: read
                .iter()
                .map(|r| FeedbackFile {
                    file: r.file.clone(),
                    run: r.run,
                    tables: r.tables.len(),
                })
                .collect(),
            bands: feedback.bands.iter().map(FeedbackBand::new).collect(),
            files: feedback.set.files.iter().map(|f| f.name.clone()).collect(),
            notes: feedback.notes.clone(),
        };
        println!("{}", serde_json::to_string_pretty(&report)?);
        return Ok(());
    }
    print_table(dir, &feedback, written, xml_files.as_deref());
    Ok(())
}

fn print_table(dir: &Path, feedback: &Feedback, written: &str, xml_files: Option<&str>) {
    let count =
        |want: fn(&Outcome) -> bool| feedback.bands.iter().filter(|b| want(&b.outcome)).count();
    println!(
        "{written} {}: {} served bands, {} returned to NCCL (ours measured slower), {} kept, {} not measured; {} files left",
        dir.display(),
        feedback.bands.len(),
        count(|o| matches!(o, Outcome::Returned(_))),
        count(|o| matches!(o, Outcome::Kept)),
        count(|o| matches!(o, Outcome::Unmeasured)),
        feedback.set.files.len()
    );
    let returned = feedback.set.manifest.returned_to_nccl.len();
    if returned > count(|o| matches!(o, Outcome::Returned(_))) {
        println!("{returned} band(s) returned to NCCL by measurements in all (the manifest's returned_to_nccl)");
    }
    for note in &feedback.notes {
        println!("note: {note}");
    }
    let mut group = None;
    for band in &feedback.bands {
        if group != Some((band.collective, band.in_place)) {
            group = Some((band.collective, band.in_place));
            let placement = if band.in_place {
                "in place"
            } else {
                "out of place"
            };
            println!("\n{}, {placement}", band.collective);
            println!(
                "  {:<12} {:<36} {:>21}  {:>8} {:>21}  {:>9}  outcome",
                "band", "file", "predicted ours/NCCL", "at", "measured ours/NCCL", "ours/pred"
            );
        }
        println!("  {}", row(band));
    }
    match xml_files {
        Some("") => println!("\nno file left for the older msccl to load: every band is NCCL's"),
        Some(files) => println!("\npoint the older msccl at the files: MSCCL_XML_FILES={files}"),
        None => println!(
            "\npoint the executor at the algorithm files: MSCCL_ALGO_DIR={}",
            algorithm_dir(dir).display()
        ),
    }
}

/// One band's line: the prediction, the measured size where ours fared worst against
/// NCCL, ours measured over predicted at the predicted size, and the outcome.
fn row(band: &BandFeedback) -> String {
    let p = &band.prediction;
    let predicted = match &p.nccl {
        Some(n) => format!("{:.3}/{:.3}", p.time_us, n.time_us),
        None => format!("{:.3}/-", p.time_us),
    };
    let measured = match band.outcome {
        Outcome::Unmeasured => &[][..],
        _ => &p.measured[..],
    };
    let worst = measured
        .iter()
        .max_by(|a, b| (a.ours_us / a.nccl_us).total_cmp(&(b.ours_us / b.nccl_us)));
    let (at, figures) = match worst {
        Some(m) => (
            short_size(m.size_bytes),
            format!("{:.3}/{:.3}", m.ours_us, m.nccl_us),
        ),
        None => ("-".into(), "-".into()),
    };
    let against_prediction = measured
        .iter()
        .find(|m| m.size_bytes == p.size_bytes)
        .map_or("-".into(), |m| format!("{:.2}", m.ours_us / p.time_us));
    let outcome = match (&band.outcome, worst) {
        (Outcome::Returned(why), _) => format!("returned to NCCL: {why}"),
        (Outcome::Kept, Some(m)) => {
            format!("kept: ours {:.2}x as fast at worst", m.nccl_us / m.ours_us)
        }
        (Outcome::Kept, None) | (Outcome::Unmeasured, _) => "not measured: kept".into(),
    };
    format!(
        "{:<12} {:<36} {:>21}  {:>8} {:>21}  {:>9}  {outcome}",
        band_label(band.min_bytes, band.max_bytes),
        band.file,
        predicted,
        at,
        figures,
        against_prediction
    )
}
