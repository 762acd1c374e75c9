//! What keeping to the executor's 64 steps per threadblock costs, over the lowering sweep
//! (every collective on the topologies of tests/msccl_lower.rs's sweep, K = 1, 2, 4, 8, 16,
//! seed 0): each schedule is lowered for the executor rebuilt for 256 steps
//! (`executor-256`) and for the default `executor` target, and both programs are timed
//! with `msccl::simulate_program_on` at the schedule's size.
//!
//! cargo run --release --example lowering_sweep [-- --list]
//!
//! `--list` also prints one line per case that needed more threadblocks or channels, or
//! fewer chunks.

use tacos::collective::{Collective, CollectiveKind};
use tacos::msccl::{limits, lower, simulate_program_on, LowerOptions, Profile, Program, Target};
use tacos::schedule::Schedule;
use tacos::synth::{synthesize, SynthOptions};
use tacos::topology::{parse_spec, SpecDefaults, Topology};

/// The sweep's topologies: builders and presets up to 64 NPUs.
const SWEEP: &str = include_str!("../tests/lowering_sweep.txt");

const KS: [usize; 5] = [1, 2, 4, 8, 16];
const SIZE: u64 = 1 << 26;

/// The largest number of threadblocks one GPU of `p` has.
fn most_tbs(p: &Program) -> usize {
    p.gpus
        .iter()
        .map(|g| g.threadblocks.len())
        .max()
        .unwrap_or(0)
}

fn time(topo: &Topology, schedule: &Schedule, program: &Program) -> anyhow::Result<u64> {
    let spec = &schedule.collective;
    Ok(simulate_program_on(topo, program, spec.size_bytes, &spec.npus)?.time_ps)
}

fn main() -> anyhow::Result<()> {
    let list = std::env::args().any(|a| a == "--list");
    let wide = LowerOptions {
        target: Target::new(Profile::Executor256),
        ..LowerOptions::default()
    };
    let narrow = LowerOptions::default();
    let (mut cases, mut at_256, mut as_is, mut spread, mut refused) = (0, 0, 0, 0, 0);
    // Of those spread: on one channel still (one threadblock per connection).
    let mut one_channel = 0;
    let mut neither = 0;
    // (64-step time / 256-step time, case) for every schedule both lower.
    let mut ratios: Vec<(f64, String)> = Vec::new();
    for spec_text in sweep() {
        let topo = parse_spec(spec_text, &SpecDefaults::default())?;
        for kind in CollectiveKind::ALL {
            for k in KS {
                let case = format!("{spec_text} {kind} K={k}");
                let root = kind.has_root().then_some(0);
                let collective = Collective::over_all(&topo, kind, root, k, SIZE)?;
                let schedule = synthesize(&topo, &collective, &SynthOptions::seeded(0))?;
                cases += 1;
                let Ok(big) = lower(&schedule, &topo, &wide) else {
                    neither += lower(&schedule, &topo, &narrow).is_err() as usize;
                    continue;
                };
                at_256 += 1;
                if limits::check(&big, &narrow.target.limits).is_empty() {
                    as_is += 1;
                }
                let small = match lower(&schedule, &topo, &narrow) {
                    Ok(small) => small,
                    Err(e) => {
                        refused += 1;
                        if list {
                            println!("fewer K   {case}: {e}");
                        }
                        continue;
                    }
                };
                if !limits::check(&big, &narrow.target.limits).is_empty() {
                    spread += 1;
                    one_channel += (small.nchannels == 1) as usize;
                    if list {
                        println!(
                            "spread    {case}: {} channels, {} threadblocks per GPU at most (256 steps: {}, {})",
                            small.nchannels,
                            most_tbs(&small),
                            big.nchannels,
                            most_tbs(&big)
                        );
                    }
                }
                let ratio =
                    time(&topo, &schedule, &small)? as f64 / time(&topo, &schedule, &big)? as f64;
                ratios.push((ratio, case));
            }
        }
    }
    ratios.sort_by(|a, b| a.0.total_cmp(&b.0));
    let median = ratios[ratios.len() / 2].0;
    let (worst, worst_case) = ratios.last().expect("some cases lower");
    println!("cases (topology x collective x K, seed 0)          {cases}");
    println!("lower at 256 steps (executor-256)                  {at_256}");
    println!("  fit 64 steps as lowered for 256                  {as_is}");
    println!("  needed more threadblocks or channels for 64      {spread}");
    println!("    of which one channel, more threadblocks        {one_channel}");
    println!(
        "    of which more channels                         {}",
        spread - one_channel
    );
    println!("  do not fit 64 steps at that K (need fewer K)     {refused}");
    println!("refused at 256 steps and at 64                     {neither}");
    println!(
        "simulated time, 64-step program / 256-step program: median {median:.4}, worst {worst:.4} ({worst_case})"
    );
    let slower = ratios.iter().filter(|r| r.0 > 1.0 + 1e-9).count();
    println!(
        "  slower at 64 steps: {slower} of {}; over 1.05: {}",
        ratios.len(),
        ratios.iter().filter(|r| r.0 > 1.05).count()
    );
    Ok(())
}

/// The sweep's specs, without the file's comment lines.
fn sweep() -> impl Iterator<Item = &'static str> {
    SWEEP
        .lines()
        .filter(|l| !l.is_empty() && !l.starts_with('#'))
}
