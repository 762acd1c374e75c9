//! Compares a compiled directory with a directory of hand-made MSCCL algorithm files,
//! band by band: for every power-of-two size inside each hand-made file's
//! minBytes..maxBytes, both programs are timed on the same topology model with
//! `msccl::simulate_program`, and a markdown table is printed.
//!
//! cargo run --release --example corpus_bands -- COMPILED_DIR HAND_MADE_DIR SPEC

use tacos::compile::{algorithm_dir, Manifest};
use tacos::msccl::{read_program, simulate_program};
use tacos::topology::{parse_spec, SpecDefaults};
use tacos::units::{format_size, ps_to_us};

fn main() -> anyhow::Result<()> {
    let args: Vec<String> = std::env::args().skip(1).collect();
    let [compiled, hand_made, spec] = args.as_slice() else {
        anyhow::bail!("usage: corpus_bands COMPILED_DIR HAND_MADE_DIR SPEC");
    };
    let topo = parse_spec(spec, &SpecDefaults::default())?;
    let manifest = Manifest::read(compiled.as_ref())?;
    let mut files: Vec<_> = std::fs::read_dir(hand_made)?
        .map(|e| e.map(|e| e.path()))
        .collect::<Result<_, _>>()?;
    files.retain(|p| p.extension().is_some_and(|e| e == "xml"));
    let mut rows = Vec::new();
    for path in files {
        let theirs = read_program(&path)?;
        let Some(kind) = theirs.collective_kind() else {
            continue;
        };
        let (lo, hi) = (
            theirs.min_bytes.unwrap_or(0),
            theirs.max_bytes.unwrap_or(u64::MAX),
        );
        let mut size = lo.max(1).next_power_of_two();
        while size <= hi {
            if let Some(entry) = manifest.select(kind, theirs.gpus.len(), theirs.inplace, size) {
                let ours = read_program(&algorithm_dir(compiled.as_ref()).join(&entry.file))?;
                let t_theirs = simulate_program(&topo, &theirs, size)?.time_ps;
                let t_ours = simulate_program(&topo, &ours, size)?.time_ps;
                let name = path.file_name().unwrap().to_string_lossy().into_owned();
                rows.push((
                    kind.name(),
                    size,
                    name,
                    theirs.proto,
                    t_theirs,
                    entry,
                    t_ours,
                ));
            }
            size *= 2;
        }
    }
    rows.sort_by_key(|r| (r.0, r.1));
    println!("| collective | size | hand-made file | proto | time (us) | tacos file | algorithm | time (us) | speedup |");
    println!("| --- | --- | --- | --- | ---: | --- | --- | ---: | ---: |");
    for (kind, size, name, proto, theirs, entry, ours) in rows {
        println!(
            "| {kind} | {} | {name} | {proto} | {:.2} | {} | {} | {:.2} | {:.2}x |",
            format_size(size),
            ps_to_us(theirs),
            entry.file,
            entry.algorithm,
            ps_to_us(ours),
            theirs as f64 / ours as f64
        );
    }
    Ok(())
}
