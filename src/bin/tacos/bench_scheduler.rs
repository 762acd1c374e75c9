//! `tacos bench scheduler`: what the MSCCL scheduler plugin costs a job (a
//! `plugin::Scheduler` on a configuration naming the cluster, as each GPU process runs
//! it). On a cold cache (a new, empty cache directory): how long the job's first call
//! takes to return (it compiles its size band, deterministically, and serves it or
//! leaves it to NCCL), then the first call of every other band (collective, placement,
//! size band): the slowest, and all together, which is what a prologue filling the cache
//! takes. On the warm cache: how long a new process's first call takes (the band's
//! record read), and its first call of a served band (the largest-size one, whose file
//! is the largest to hash).

use super::bench::{print_json, BenchArgs};
use std::time::{Duration, Instant};
use tacos::collective::CollectiveKind;
use tacos::compile::{short_size, CompileOptions};
use tacos::plugin::{Call, Config, Scheduler, Silent};
use tacos_cli::report::SchedulerBenchRow;

/// Clusters to time: (topology spec, GPUs).
const CASES: &[(&str, usize)] = &[
    ("preset:hgx-h100", 8),
    ("preset:dgx-a100,nodes=2", 16),
    ("preset:dgx-a100,nodes=4", 32),
    ("preset:dgx-a100,nodes=8", 64),
    ("preset:dgx-a100,nodes=128", 1024),
];

/// A call of `kind` moving `bytes` (the executor's measure) over `gpus` ranks, in
/// elements of 4 bytes.
fn call(kind: CollectiveKind, in_place: bool, gpus: usize, bytes: u64) -> Call {
    let per_rank = match kind {
        CollectiveKind::AllReduce => bytes,
        _ => bytes / gpus as u64,
    };
    Call {
        kind,
        ranks: gpus,
        in_place,
        bytes,
        count: (per_rank / 4).max(1) as usize,
    }
}

/// The job's first call: a 1 MiB All-Reduce in place.
fn first_call(gpus: usize) -> Call {
    call(CollectiveKind::AllReduce, true, gpus, 1 << 20)
}

/// A new process's first call for `gpus` ranks: how long it took and what it got.
fn first_call_of_a_job(config: &Config, gpus: usize) -> (Scheduler, Duration, String) {
    let started = Instant::now();
    let mut scheduler = Scheduler::new(Ok(config.clone()), Box::new(Silent));
    let served = scheduler.select(&first_call(gpus)).is_some();
    let took = started.elapsed();
    (scheduler, took, outcome(config, gpus, served))
}

/// `served`, or why not, from the first call's band record.
fn outcome(config: &Config, gpus: usize, served: bool) -> String {
    if served {
        return "served".into();
    }
    let fast = CompileOptions::fast();
    let bytes = first_call(gpus).bytes;
    let band = fast
        .sizes
        .bands(fast.band_octaves)
        .into_iter()
        .find(|b| (b.min_bytes..=b.max_bytes).contains(&bytes));
    let mut probe = Scheduler::new(Ok(config.clone()), Box::new(Silent));
    let record = probe.entry(gpus).zip(band).map(|(e, b)| {
        let name = format!("allreduce-inplace-{}.json", short_size(b.min_bytes));
        e.join("bands").join(name)
    });
    match record.and_then(|r| std::fs::read_to_string(r).ok()) {
        Some(text) if text.contains("\"left_to_nccl\"") => "NCCL".into(),
        _ => "fallback".into(),
    }
}

pub fn run(args: &BenchArgs) -> anyhow::Result<()> {
    let scratch =
        std::env::temp_dir().join(format!("tacos-bench-scheduler-{}", std::process::id()));
    if !args.json {
        println!(
            "{:<28} {:>5} {:>15} {:>9} {:>17} {:>14} {:>7} {:>15} {:>22}",
            "TACOS_TOPOLOGY",
            "GPUs",
            "cold 1st (ms)",
            "1st call",
            "slowest band (ms)",
            "all bands (s)",
            "served",
            "warm 1st (ms)",
            "warm 1st served (ms)"
        );
    }
    let fast = CompileOptions::fast();
    let bands = fast.sizes.bands(fast.band_octaves);
    let mut rows = Vec::new();
    for (i, &(spec, gpus)) in CASES.iter().enumerate() {
        if args.filter.as_deref().is_some_and(|f| !spec.contains(f)) {
            continue;
        }
        if args.quick && gpus > 16 {
            continue;
        }
        let config = Config {
            topology: Some(spec.to_string()),
            cache_dir: scratch.join(i.to_string()),
            ..Config::default()
        };
        let (mut cold_job, cold, first) = first_call_of_a_job(&config, gpus);
        // Every other band's first call in the same job.
        let (mut slowest, mut all, mut served, mut total) = (cold, cold, 0, 0);
        let mut last_served = None;
        for &kind in &fast.collectives {
            for in_place in fast.placements.flags(kind) {
                for band in &bands {
                    let call = call(kind, in_place, gpus, band.min_bytes);
                    let started = Instant::now();
                    let got = cold_job.select(&call);
                    let took = started.elapsed();
                    total += 1;
                    served += usize::from(got.is_some());
                    if got.is_some() {
                        last_served = Some(call);
                    }
                    if call != first_call(gpus) {
                        slowest = slowest.max(took);
                        all += took;
                    }
                }
            }
        }
        let (mut warm, mut warm_served) = (Duration::MAX, None);
        for _ in 0..5 {
            let (_, took, again) = first_call_of_a_job(&config, gpus);
            anyhow::ensure!(
                again == first,
                "{spec}: the warm cache gave {again}, the cold compile {first}"
            );
            warm = warm.min(took);
            if let Some(call) = &last_served {
                let started = Instant::now();
                let mut job = Scheduler::new(Ok(config.clone()), Box::new(Silent));
                anyhow::ensure!(
                    job.select(call).is_some(),
                    "{spec}: {call:?} not served warm"
                );
                let took = started.elapsed();
                warm_served = Some(warm_served.map_or(took, |w: Duration| w.min(took)));
            }
        }
        let ms = |d: Duration| d.as_secs_f64() * 1e3;
        if args.json {
            rows.push(SchedulerBenchRow {
                topology: spec.to_string(),
                gpus,
                cold_first_call_ms: ms(cold),
                first_call: first,
                slowest_band_ms: ms(slowest),
                all_bands_ms: ms(all),
                bands_served: served,
                bands: total,
                warm_first_call_ms: ms(warm),
                warm_first_served_ms: warm_served.map(ms),
            });
        } else {
            let warm_served = warm_served.map_or("-".into(), |d| format!("{:.2}", ms(d)));
            println!(
                "{spec:<28} {gpus:>5} {:>15.1} {first:>9} {:>17.1} {:>14.1} {:>7} {:>15.2} {warm_served:>22}",
                ms(cold),
                ms(slowest),
                all.as_secs_f64(),
                format!("{served}/{total}"),
                ms(warm)
            );
        }
    }
    let _ = std::fs::remove_dir_all(&scratch);
    print_json(args, "scheduler", rows)
}
