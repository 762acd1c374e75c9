//! Compares a compiled directory with a directory of hand-made MSCCL algorithm files,
//! band by band: for every power-of-two size inside each hand-made file's
//! minBytes..maxBytes, the hand-made program and what the compiled set serves there (its
//! program, or NCCL's own choice where the band is left to NCCL) are priced by the same
//! executor cost model (`tacos::cost`, the topology's GPU generation), and a markdown table
//! is printed with NCCL's choice beside them.
//!
//! cargo run --release --example corpus_bands -- COMPILED_DIR HAND_MADE_DIR SPEC

use tacos::compile::{algorithm_dir, Manifest};
use tacos::cost::{Executor, NcclPricer};
use tacos::msccl::read_program;
use tacos::topology::{parse_spec, SpecDefaults};
use tacos::units::{format_size, ps_to_us};

fn main() -> anyhow::Result<()> {
    let args: Vec<String> = std::env::args().skip(1).collect();
    let [compiled, hand_made, spec] = args.as_slice() else {
        anyhow::bail!("usage: corpus_bands COMPILED_DIR HAND_MADE_DIR SPEC");
    };
    let topo = parse_spec(spec, &SpecDefaults::default())?;
    let executor = Executor::for_topology(&topo, None, None)?;
    let manifest = Manifest::read(compiled.as_ref())?;
    let mut files: Vec<_> = std::fs::read_dir(hand_made)?
        .map(|e| e.map(|e| e.path()))
        .collect::<Result<_, _>>()?;
    files.retain(|p| p.extension().is_some_and(|e| e == "xml"));
    files.sort();
    let mut rows = Vec::new();
    for path in files {
        let theirs = read_program(&path)?;
        let Some(kind) = theirs.collective_kind() else {
            continue;
        };
        let nccl = NcclPricer::new(
            &topo,
            kind,
            executor.domain_size,
            executor.gpu,
            executor.model.clone(),
        )
        .ok();
        let (lo, hi) = (
            theirs.min_bytes.unwrap_or(0),
            theirs.max_bytes.unwrap_or(u64::MAX),
        );
        let mut size = lo.max(1).next_power_of_two();
        while size <= hi {
            let t_theirs = ps_to_us(executor.simulate_program(&topo, &theirs, size)?.time_ps);
            let nccl_price = match &nccl {
                Some(p) => Some(p.price(size, None, None)?),
                None => None,
            };
            let served = match manifest.select(kind, theirs.gpus.len(), theirs.inplace, size) {
                Some(entry) => {
                    let ours = read_program(&algorithm_dir(compiled.as_ref()).join(&entry.file))?;
                    let t = ps_to_us(executor.simulate_program(&topo, &ours, size)?.time_ps);
                    Some((entry.algorithm.to_string(), t))
                }
                None => nccl_price.map(|p| {
                    let name = format!("NCCL {}/{}", p.algorithm, p.protocol);
                    (name, p.time_us)
                }),
            };
            if let Some((ours, t_ours)) = served {
                let name = path.file_name().unwrap().to_string_lossy().into_owned();
                let nccl = nccl_price.map_or("-".to_string(), |p| {
                    format!("{}/{} {:.2}", p.algorithm, p.protocol, p.time_us)
                });
                rows.push((
                    kind.name(),
                    size,
                    name,
                    theirs.proto,
                    t_theirs,
                    ours,
                    t_ours,
                    nccl,
                ));
            }
            size *= 2;
        }
    }
    rows.sort_by(|a, b| (a.0, a.1).cmp(&(b.0, b.1)));
    println!("| collective | size | hand-made file | proto | time (us) | served | time (us) | speedup | NCCL's choice (us) |");
    println!("| --- | --- | --- | --- | ---: | --- | ---: | ---: | --- |");
    for (kind, size, name, proto, theirs, ours, t_ours, nccl) in rows {
        println!(
            "| {kind} | {} | {name} | {proto} | {theirs:.2} | {ours} | {t_ours:.2} | {:.2}x | {nccl} |",
            format_size(size),
            theirs / t_ours
        );
    }
    Ok(())
}
