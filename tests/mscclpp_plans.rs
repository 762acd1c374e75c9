//! Plans lowered from synthesized schedules and baselines, each run by the plan verifier
//! (`mscclpp::verify`, written apart from the lowering): channel pairing, every wait
//! matched, no deadlock, no race and the collective's result, at the size the plan names.

use tacos::baselines::Baseline;
use tacos::collective::{Collective, CollectiveKind};
use tacos::gpu::GpuArch;
use tacos::mscclpp::plan::{ChannelType, MAX_OPS_PER_THREADBLOCK};
use tacos::mscclpp::{lower, verify, Plan, PlanOptions, VerifyOptions};
use tacos::pipeline::{synthesize, Request};
use tacos::schedule::Schedule;
use tacos::synth::SynthOptions;
use tacos::topology::{parse_spec, SpecDefaults, Topology};

const KINDS: [CollectiveKind; 5] = [
    CollectiveKind::AllGather,
    CollectiveKind::ReduceScatter,
    CollectiveKind::AllReduce,
    CollectiveKind::Broadcast,
    CollectiveKind::AllToAll,
];

fn topology(spec: &str) -> Topology {
    parse_spec(spec, &SpecDefaults::default()).unwrap()
}

fn synthesized(topo: &Topology, kind: CollectiveKind, k: usize, size: u64) -> Schedule {
    let request = Request::new(kind, size);
    synthesize(topo, &request, k, &SynthOptions::seeded(0))
        .unwrap()
        .schedule()
        .clone()
}

/// Verifies `plan` at the size it accepts, as the executor checks it.
fn verified(plan: &Plan, what: &str) {
    let options = VerifyOptions {
        size: Some(plan.min_message_size),
        root: None,
    };
    if let Err(e) = verify(plan, &options) {
        panic!("{what}: {e}");
    }
}

#[test]
fn plans_of_the_shims_collectives_verify_on_every_named_machine() {
    // The machines the issue names, both placements, K = 1 and 2.
    for spec in [
        "preset:dgx-h100,nodes=1",
        "preset:dgx-h100,nodes=2",
        "preset:dgx-a100,nodes=2",
        "preset:ndv4",
        "torus:4x4",
        "ring:8",
    ] {
        let topo = topology(spec);
        for kind in KINDS {
            for k in [1, 2] {
                let schedule = synthesized(&topo, kind, k, 1 << 24);
                for in_place in [false, true] {
                    let options = PlanOptions {
                        in_place: Some(in_place),
                        ..PlanOptions::default()
                    };
                    let what = format!("{spec} {kind} K={k} in place {in_place}");
                    let plan =
                        lower(&schedule, &topo, &options).unwrap_or_else(|e| panic!("{what}: {e}"));
                    assert_eq!(plan.inplace, in_place, "{what}");
                    verified(&plan, &what);
                }
            }
        }
    }
}

#[test]
fn baselines_lower_to_plans_that_verify() {
    let topo = topology("ring:6");
    for (baseline, kind) in [
        (Baseline::Ring, CollectiveKind::AllReduce),
        (Baseline::Ring, CollectiveKind::AllGather),
        (Baseline::Direct, CollectiveKind::AllToAll),
        (Baseline::Direct, CollectiveKind::ReduceScatter),
    ] {
        let spec = Request::new(kind, 6 << 20).spec(&topo, 1);
        let schedule = baseline.schedule(&topo, &spec).unwrap();
        let plan = lower(&schedule, &topo, &PlanOptions::default()).unwrap();
        verified(&plan, &format!("{} {kind}", baseline.name()));
    }
}

#[test]
fn nodes_talk_over_memory_channels_inside_and_port_channels_across() {
    // Two DGX-A100 nodes: NVLink inside a node, NICs between them.
    let topo = topology("preset:dgx-a100,nodes=2");
    let schedule = synthesized(&topo, CollectiveKind::AllGather, 1, 1 << 24);
    let plan = lower(&schedule, &topo, &PlanOptions::default()).unwrap();
    for gpu in &plan.gpus {
        for channel in &gpu.channels {
            let peers = channel.connected_to.as_deref().unwrap_or_default();
            for &peer in peers {
                let same_node = peer / 8 == gpu.id / 8;
                let expected = if same_node {
                    ChannelType::Memory
                } else {
                    ChannelType::Port
                };
                assert_eq!(channel.channel_type, expected, "rank {} to {peer}", gpu.id);
            }
        }
    }
    assert!(plan.gpus.iter().any(|g| g
        .channels
        .iter()
        .any(|c| c.channel_type == ChannelType::Port)));
}

#[test]
fn every_threadblock_keeps_within_the_executors_64_operations() {
    // A ring All-Reduce with K = 8 moves 2 x 7 x 8 chunks each way between neighbours:
    // far past 64 operations for one threadblock, so the lanes must split.
    let topo = topology("ring:8");
    let schedule = synthesized(&topo, CollectiveKind::AllReduce, 8, 1 << 26);
    let plan = lower(&schedule, &topo, &PlanOptions::default()).unwrap();
    let most = plan
        .gpus
        .iter()
        .flat_map(|g| &g.threadblocks)
        .map(|tb| tb.ops.len())
        .max()
        .unwrap();
    assert!(most <= MAX_OPS_PER_THREADBLOCK, "{most}");
    assert!(plan.gpus[0].threadblocks.len() > 2);
    verified(&plan, "ring:8 allreduce K=8");
}

#[test]
fn a_plan_needing_more_resident_threadblocks_than_allowed_is_refused_naming_the_limit() {
    let topo = topology("ring:8");
    let schedule = synthesized(&topo, CollectiveKind::AllReduce, 8, 1 << 26);
    let options = PlanOptions {
        max_threadblocks: 2,
        ..PlanOptions::default()
    };
    let e = lower(&schedule, &topo, &options).unwrap_err().to_string();
    assert!(e.contains("threadblocks") && e.contains("2 allowed"), "{e}");
}

#[test]
fn a_size_the_executors_16_byte_units_do_not_divide_is_refused() {
    // 1 MiB over 5 GPUs' chunks: not whole 16-byte units per chunk.
    let topo = topology("ring:5");
    let collective = Collective::new(
        &topo,
        Request::new(CollectiveKind::AllGather, 1 << 20).spec(&topo, 1),
    )
    .unwrap();
    let schedule = Baseline::RingUni
        .schedule(&topo, collective.spec())
        .unwrap();
    let e = lower(&schedule, &topo, &PlanOptions::default())
        .unwrap_err()
        .to_string();
    assert!(
        e.contains("16-byte") && e.contains("multiple of 80 bytes"),
        "{e}"
    );
}

#[test]
fn collectives_without_uniform_chunks_are_refused_by_name() {
    let topo = topology("ring:4");
    let schedule = synthesized(&topo, CollectiveKind::Gather, 1, 1 << 20);
    let e = lower(&schedule, &topo, &PlanOptions::default())
        .unwrap_err()
        .to_string();
    assert!(e.contains("gather has no MSCCL++ plan"), "{e}");
}

#[test]
fn instances_split_every_chunk_on_threadblocks_of_their_own_and_verify() {
    let topo = topology("preset:dgx-h100,nodes=2");
    for kind in [CollectiveKind::AllReduce, CollectiveKind::AllGather] {
        let schedule = synthesized(&topo, kind, 1, 1 << 24);
        let one = lower(&schedule, &topo, &PlanOptions::default()).unwrap();
        for n in [2, 4] {
            let options = PlanOptions {
                instances: n,
                ..PlanOptions::default()
            };
            let plan = lower(&schedule, &topo, &options).unwrap();
            for (a, b) in one.gpus.iter().zip(&plan.gpus) {
                assert_eq!(b.input_chunks, a.input_chunks * n);
                assert_eq!(b.threadblocks.len(), a.threadblocks.len() * n);
            }
            verified(&plan, &format!("{kind} in {n} instances"));
        }
    }
}

#[test]
fn the_executor_model_times_a_plan_no_faster_than_its_busiest_link_allows() {
    // A ring All-Gather of 64 MiB on 4 GPUs: each GPU receives 48 MiB over its two
    // incoming links, so no plan beats 24 MiB over one link at the model's rate; more
    // threadblocks per link (instances) move a link closer to that rate.
    let topo = topology("ring:4");
    let executor = tacos::cost::Executor::for_topology(&topo, None, None).unwrap();
    let schedule = synthesized(&topo, CollectiveKind::AllGather, 1, 1 << 26);
    let time = |n: usize| {
        let options = PlanOptions {
            instances: n,
            ..PlanOptions::default()
        };
        let plan = lower(&schedule, &topo, &options).unwrap();
        let timer = tacos::mscclpp::PlanTimer::new(&plan).unwrap();
        timer.time_ps(&executor, &topo, 1 << 26).unwrap() as f64 / 1e6
    };
    let link = &topo.links()[0];
    let rate = link.bandwidth_gbps * executor.model.efficiency.nvlink * 1e3; // bytes per us
    let bound_us = (24u64 << 20) as f64 / rate;
    let (one, four) = (time(1), time(4));
    assert!(
        one >= bound_us && four >= bound_us,
        "{one} {four} {bound_us}"
    );
    assert!(four < one, "{four} {one}");
}

#[test]
fn an_all_reduce_inside_the_nvswitch_is_timed_as_nvls_is_measured() {
    // One DGX H100 node, 1 GiB: NCCL's NVLS All-Reduce measured 4,024 us (nccl-tests'
    // H100 NVLS table the Hopper profile is fitted to). The plan's legs through the switch
    // move what NVLS moves, so under that model it takes about as long: not faster than the
    // hardware did, and within a fifth above it (its meets and its pieces' pipeline fill).
    let topo = topology("preset:dgx-h100,nodes=1");
    let executor = tacos::cost::Executor::for_topology(&topo, None, None).unwrap();
    let mut best = f64::MAX;
    for t in [1, 2, 4, 8] {
        let plan = tacos::mscclpp::nvls::all_reduce(8, t, 1 << 30, "nvls").unwrap();
        verified(&plan, &format!("nvls {t}"));
        let timer = tacos::mscclpp::PlanTimer::new(&plan).unwrap();
        let us = timer.time_ps(&executor, &topo, 1 << 30).unwrap() as f64 / 1e6;
        best = best.min(us);
    }
    assert!((4024.0 * 0.95..=4024.0 * 1.2).contains(&best), "{best}");
}

#[test]
fn on_several_h100_nodes_the_plan_search_prices_the_nvls_rail_plan_within_its_bounds() {
    // 2 and 4 DGX H100 nodes, 256 MiB: the search tries the NVLS + rail plan beside the
    // schedule's own and keeps the faster. Its price can beat neither bound: each node's
    // switch reduces the whole buffer as one node's NVLS plan does (and multicasts it
    // again), and each NIC carries 2(N-1)/N of its GPU's share of the buffer each way.
    let size = 1u64 << 28;
    let one = topology("preset:dgx-h100,nodes=1");
    let one_executor = tacos::cost::Executor::for_topology(&one, None, None).unwrap();
    let one_node_us = [1, 2, 4, 8]
        .iter()
        .map(|&t| {
            let plan = tacos::mscclpp::nvls::all_reduce(8, t, size, "nvls").unwrap();
            let timer = tacos::mscclpp::PlanTimer::new(&plan).unwrap();
            timer.time_ps(&one_executor, &one, size).unwrap() as f64 / 1e6
        })
        .fold(f64::MAX, f64::min);
    for nodes in [2, 4] {
        let topo = topology(&format!("preset:dgx-h100,nodes={nodes}"));
        let executor = tacos::cost::Executor::for_topology(&topo, None, None).unwrap();
        let nic = topo
            .links()
            .iter()
            .map(|l| l.bandwidth_gbps)
            .fold(f64::MAX, f64::min);
        let share = size as f64 / 8.0;
        let nic_us = 2.0 * (nodes - 1) as f64 / nodes as f64 * share
            / (nic * executor.model.efficiency.net * 1e3);
        let options = tacos::pipeline::Options {
            chunks: tacos::pipeline::Chunks::Fixed(1),
            executor: Some(executor),
            ..tacos::pipeline::Options::default()
        };
        let request = Request::new(CollectiveKind::AllReduce, size);
        let found =
            tacos::pipeline::plan(&topo, &request, &options, &PlanOptions::default()).unwrap();
        let kept = found.kept;
        let tried = kept.in_switch_tried.expect("the NVLS + rail plan applies");
        assert_eq!(tried.label, "NVLS + rail");
        assert_eq!(kept.in_switch, tried.time_ps < kept.schedule_plan_ps);
        let us = tried.time_ps as f64 / 1e6;
        assert!(
            us >= one_node_us && us >= nic_us,
            "{nodes} nodes: {us} us against {one_node_us} (one node's NVLS) and {nic_us} (NIC)"
        );
    }
}

#[test]
fn a_wait_naming_its_channel_twice_waits_for_two_signals_without_a_panic() {
    // Found by fuzzing the plan timer: a wait op listing channel 0 twice consumed two
    // signals where it had checked for one.
    let mut plan = tacos::mscclpp::nvls::all_reduce(2, 1, 1 << 20, "twice").unwrap();
    let wait = plan.gpus[0].threadblocks[0]
        .ops
        .iter_mut()
        .find(|o| o.name == "wait")
        .unwrap();
    wait.channel_ids = Some(vec![0, 0]);
    // Rank 1 signals once before its glres and once after: rank 0's doubled first wait
    // takes both, so its last wait has none left and waits forever, which is said, named.
    let e = tacos::mscclpp::PlanTimer::new(&plan)
        .unwrap_err()
        .to_string();
    assert!(
        e.contains("rank 0, threadblock 0") && e.contains("waits forever"),
        "{e}"
    );
}

/// Every threadblock of a plan must be resident at once, one per SM: a plan of 109 to 132
/// threadblocks a GPU runs on H100s (132 SMs) and is refused for A100s (108), naming both
/// figures.
#[test]
fn a_plan_holds_as_many_threadblocks_as_its_gpu_has_sms() {
    let topo = topology("preset:dgx-h100,nodes=2");
    let schedule = synthesized(&topo, CollectiveKind::AllReduce, 16, 1 << 30);
    let plan = lower(&schedule, &topo, &PlanOptions::for_gpu(GpuArch::Hopper)).unwrap();
    verified(&plan, "K = 16 on H100s");
    let most = plan
        .gpus
        .iter()
        .map(|g| g.threadblocks.len())
        .max()
        .unwrap();
    assert!((109..=132).contains(&most), "{most} threadblocks");
    let refused = lower(&schedule, &topo, &PlanOptions::for_gpu(GpuArch::Ampere))
        .unwrap_err()
        .to_string();
    assert!(
        refused.contains(&format!("{most} threadblocks")) && refused.contains("108"),
        "{refused}"
    );
}
