//! `tacos bench tuner`: how long the NCCL tuner plugin's init takes (everything it does
//! but reading the environment and logging: topology, profiles, every size band's
//! decision, through `plugin::tuner_for`), the most heap it holds at once while doing so
//! (counted by this binary's allocator: bytes allocated and not yet freed, above what was
//! held before), and what one getCollInfo's decision costs (`plugin::Tuning::steer` on an
//! NCCL-shaped cost table).

use super::bench::{best_of, print_json, BenchArgs};
use anyhow::{anyhow, Context as _};
use std::alloc::{GlobalAlloc, Layout, System};
use std::sync::atomic::{AtomicUsize, Ordering::Relaxed};
use std::time::{Duration, Instant};
use tacos::plugin::{tuner_for, Config, CostTable, Tuning};
use tacos::tuner::{Communicator, Tuner, TUNED};
use tacos_cli::report::TunerBenchRow;

/// Cluster sizes: ranks in nodes of 8, 8 .. 65,536.
const RANKS: [usize; 14] = [
    8, 16, 32, 64, 128, 256, 512, 1024, 2048, 4096, 8192, 16384, 32768, 65536,
];
const GPUS_PER_NODE: usize = 8;
/// The topologies: None is the plugin's generic cluster (no settings); a spec is
/// `TACOS_TOPOLOGY`, `{nodes}` replaced by the node count.
const TOPOLOGIES: [Option<&str>; 2] = [None, Some("preset:dgx-h100,nodes={nodes}")];
/// Ranks `--quick` stops at.
const QUICK_RANKS: usize = 4096;

/// Decisions timed per case, over every tuned collective and size band.
const LOOKUPS: usize = 1_000_000;

/// The system allocator, counting the bytes held and the most held since the last reset.
struct Counting;

static HELD: AtomicUsize = AtomicUsize::new(0);
static PEAK: AtomicUsize = AtomicUsize::new(0);

// SAFETY: every call is passed to the system allocator unchanged; only counters are added.
unsafe impl GlobalAlloc for Counting {
    unsafe fn alloc(&self, layout: Layout) -> *mut u8 {
        // SAFETY: the caller's layout, as `GlobalAlloc::alloc` requires it, passed on unchanged.
        let p = unsafe { System.alloc(layout) };
        if !p.is_null() {
            let held = HELD.fetch_add(layout.size(), Relaxed) + layout.size();
            PEAK.fetch_max(held, Relaxed);
        }
        p
    }

    unsafe fn dealloc(&self, ptr: *mut u8, layout: Layout) {
        // SAFETY: `ptr` came from this allocator, that is from `System`, with `layout`.
        unsafe { System.dealloc(ptr, layout) };
        HELD.fetch_sub(layout.size(), Relaxed);
    }

    unsafe fn realloc(&self, ptr: *mut u8, layout: Layout, new_size: usize) -> *mut u8 {
        // SAFETY: `ptr` came from `System` with `layout`, and the caller's `new_size` is valid for it.
        let p = unsafe { System.realloc(ptr, layout, new_size) };
        if !p.is_null() {
            HELD.fetch_sub(layout.size(), Relaxed);
            let held = HELD.fetch_add(new_size, Relaxed) + new_size;
            PEAK.fetch_max(held, Relaxed);
        }
        p
    }
}

#[global_allocator]
static ALLOCATOR: Counting = Counting;

/// Runs `f`, returning its result and the most heap it held at once above what was held
/// before, in bytes.
fn peak_heap<T>(f: impl FnOnce() -> T) -> (T, usize) {
    let before = HELD.load(Relaxed);
    PEAK.store(before, Relaxed);
    let out = f();
    (out, PEAK.load(Relaxed) - before)
}

pub fn run(args: &BenchArgs) -> anyhow::Result<()> {
    let mut rows = Vec::new();
    if !args.json {
        println!(
            "{:<26} {:>6} {:>6} {:>15} {:>15} {:>10} {:>12}",
            "topology",
            "ranks",
            "nodes",
            "init cold (ms)",
            "init best (ms)",
            "heap (MB)",
            "lookup (ns)"
        );
    }
    let mut first_summary = None;
    for spec in TOPOLOGIES {
        for ranks in RANKS {
            let nodes = ranks / GPUS_PER_NODE;
            let spec = spec.map(|s| s.replace("{nodes}", &nodes.to_string()));
            let label = spec.clone().unwrap_or_else(|| "generic".into());
            if args.filter.as_deref().is_some_and(|f| !label.contains(f)) {
                continue;
            }
            if args.quick && ranks > QUICK_RANKS {
                continue;
            }
            let config = Config {
                topology: spec,
                ..Config::default()
            };
            let comm = Communicator {
                ranks,
                nodes,
                constants: None,
            };
            let init = || tuner_for(&config, &comm, None);
            let started = Instant::now();
            let (tuner, heap) = peak_heap(init);
            let cold = started.elapsed();
            let tuner = tuner.with_context(|| format!("{label}, {ranks} ranks"))?;
            let (best, _) = best_of(Duration::from_millis(300), || Ok(init()?))?;
            first_summary.get_or_insert_with(|| (tuner.description().to_string(), tuner.summary()));
            let lookup_ns = time_lookups(tuner)?;
            let (cold_ms, best_ms) = (cold.as_secs_f64() * 1e3, best.as_secs_f64() * 1e3);
            let heap_mb = heap as f64 / 1e6;
            if args.json {
                rows.push(TunerBenchRow {
                    topology: label,
                    ranks,
                    nodes,
                    init_cold_ms: cold_ms,
                    init_best_ms: best_ms,
                    init_heap_mb: heap_mb,
                    lookup_ns,
                });
            } else {
                println!(
                    "{label:<26} {ranks:>6} {nodes:>6} {cold_ms:>15.2} {best_ms:>15.2} {heap_mb:>10.2} {lookup_ns:>12.1}"
                );
            }
        }
    }
    if args.json {
        print_json(args, "tuner", rows)?;
    } else if let Some((description, summary)) = first_summary {
        println!("\nheap: the most bytes init held at once (this binary's allocator counts them)");
        println!("\nchoices on {description}:");
        for line in summary {
            println!("  {line}");
        }
    }
    Ok(())
}

/// Nanoseconds per decision on an NCCL-shaped 7 x 3 cost table (a fresh copy each call),
/// as getCollInfo v3+ makes it.
fn time_lookups(tuner: Tuner) -> anyhow::Result<f64> {
    let tuning = Tuning {
        tuner: Some(tuner),
        user_chose_algorithms: false,
    };
    let mut nccl_table = [-1.0f32; 21];
    nccl_table[..6].fill(10.0);
    let started = Instant::now();
    for i in 0..LOOKUPS {
        let mut costs = nccl_table;
        let (kind, bytes) = (TUNED[i % TUNED.len()], 1u64 << (i % 40));
        let mut table = CostTable::new(&mut costs, 3).ok_or_else(|| anyhow!("a 7 x 3 table"))?;
        let channels = tuning.steer(kind, bytes, &mut table).map(|c| c.channels);
        std::hint::black_box((&costs, channels));
    }
    Ok(started.elapsed().as_secs_f64() * 1e9 / LOOKUPS as f64)
}
