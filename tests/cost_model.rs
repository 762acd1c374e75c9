//! The executor cost model on hand-worked cases: NCCL's Ring priced on a star, the
//! topology as an MSCCL program sees it, and the built-in profiles' figures.

use tacos::collective::CollectiveKind;
use tacos::cost::model::{Efficiency, HopCosts};
use tacos::cost::{ExecModel, Executor, NcclPricer, ProtocolModel};
use tacos::gpu::{Algorithm, GpuArch, Protocol};
use tacos::topology::{parse_spec, SpecDefaults};

/// Round figures to work by hand: launch 10 us, half of line rate, 4 channels; Simple
/// 2 us a step and 1000 GB/s a channel, LL 0.5 us and 1000 GB/s.
fn model(simple_channel_gbps: f64) -> ExecModel {
    let protocol = |step: f64, channel_gbps: f64| ProtocolModel {
        step_us: HopCosts {
            nvlink: step,
            net: 10.0 * step,
        },
        channel_gbps,
    };
    ExecModel {
        arch: "hopper".into(),
        source: "hand-worked".into(),
        launch_us: 10.0,
        efficiency: Efficiency {
            nvlink: 0.5,
            net: 0.5,
        },
        channels: 4,
        ll: protocol(0.5, 1000.0),
        ll128: protocol(1.0, 1000.0),
        simple: protocol(2.0, simple_channel_gbps),
        nccl: "2.26".into(),
        nvls: None,
        error: None,
    }
}

fn close(a: f64, b: f64) -> bool {
    (a - b).abs() <= 1e-6 * b.abs().max(1.0)
}

/// Ring All-Reduce of 8 GPUs through one switch, 100 GB/s ports, 1 us a route: the
/// bidirectional ring's two passes send 2 x 7/8 = 1.75 bytes per byte out of every port,
/// over a chain of 2 x 7 = 14 dependent steps, each a route of 1 us plus a step.
#[test]
fn ring_all_reduce_on_a_star_matches_the_hand_worked_time() {
    let topo = parse_spec("switch:8,bw=100,lat=1", &SpecDefaults::default()).unwrap();
    let bytes = 1_000_000u64;
    let price = |m: ExecModel, protocol| {
        let pricer =
            NcclPricer::new(&topo, CollectiveKind::AllReduce, 8, GpuArch::Hopper, m).unwrap();
        pricer
            .price(bytes, Some(Algorithm::Ring), Some(protocol))
            .unwrap()
    };
    // Simple: 10 launch + 14 x 1 route + 14 x 2 steps + 1e6 x 1.75 / (0.5 x 100 GB/s).
    let simple = price(model(1000.0), Protocol::Simple);
    assert!(close(simple.time_us, 52.0 + 35.0), "{}", simple.time_us);
    assert!(!simple.nccl_choice || simple.protocol == Protocol::Simple);
    // Channels cap the GPU below its port: 4 x 10 GB/s = 40 < 50.
    let capped = price(model(10.0), Protocol::Simple);
    assert!(
        close(capped.time_us, 52.0 + 1.75e6 / 40e3),
        "{}",
        capped.time_us
    );
    // LL: 14 x 0.5 us steps, and every data byte is two on the wire.
    let ll = price(model(1000.0), Protocol::Ll);
    assert!(
        close(ll.time_us, 10.0 + 14.0 + 7.0 + 70.0),
        "{}",
        ll.time_us
    );
}

/// NCCL's own pick for tiny sizes is a low-latency protocol and for huge ones Simple, and
/// the price says which it priced.
#[test]
fn nccl_picks_by_size_and_says_so() {
    let topo = parse_spec("preset:dgx-h100,nodes=1", &SpecDefaults::default()).unwrap();
    let pricer = NcclPricer::new(
        &topo,
        CollectiveKind::AllReduce,
        8,
        GpuArch::Hopper,
        ExecModel::builtin(GpuArch::Hopper),
    )
    .unwrap();
    let small = pricer.price(1024, Some(Algorithm::Ring), None).unwrap();
    let large = pricer.price(1 << 30, Some(Algorithm::Ring), None).unwrap();
    assert_eq!(small.protocol, Protocol::Ll);
    assert_eq!(large.protocol, Protocol::Simple);
    assert!(small.nccl_choice && large.nccl_choice);
    let forced = pricer.price(1 << 30, None, Some(Protocol::Ll)).unwrap();
    assert!(!forced.nccl_choice && forced.time_us > large.time_us);
    // Tree runs All-Reduce only.
    let gather = NcclPricer::new(
        &topo,
        CollectiveKind::AllGather,
        8,
        GpuArch::Hopper,
        ExecModel::builtin(GpuArch::Hopper),
    )
    .unwrap();
    let e = gather
        .price(1 << 20, Some(Algorithm::Tree), None)
        .unwrap_err();
    assert!(e.to_string().contains("allreduce only"), "{e}");
    let e = NcclPricer::new(
        &topo,
        CollectiveKind::AllToAll,
        8,
        GpuArch::Hopper,
        ExecModel::builtin(GpuArch::Hopper),
    )
    .err()
    .unwrap();
    assert!(e.to_string().contains("no built-in alltoall"), "{e}");
}

/// On a star, a GPU's port carries the protocol's wire bytes at half the line rate, no
/// faster than the threadblocks sending over it, and a step's latency shared among them;
/// the switch's own links add no step.
#[test]
fn a_program_sees_each_link_at_its_executor_rate() {
    let topo = parse_spec("switch:8,bw=100,lat=1", &SpecDefaults::default()).unwrap();
    let executor = Executor {
        model: model(20.0),
        domain_size: 8,
        gpu: GpuArch::Hopper,
    };
    let mut senders = vec![1u32; topo.links().len()];
    let port = topo.out_links(0).next().unwrap();
    senders[port] = 2;
    let priced = executor.priced(&topo, Protocol::Simple, &senders).unwrap();
    let (line, seen) = (topo.link(port), priced.link(port));
    // min(100 x 0.5, 2 x 20) = 40 GB/s; 2 us a step over 2 threadblocks.
    assert!(close(seen.bandwidth_gbps, 40.0), "{}", seen.bandwidth_gbps);
    assert!(close(seen.latency_us, line.latency_us + 1.0));
    // LL halves the data rate: min(50, 1 x 1000) / 2.
    let ll = executor.priced(&topo, Protocol::Ll, &senders).unwrap();
    let other = topo.out_links(1).next().unwrap();
    assert!(close(ll.link(other).bandwidth_gbps, 25.0));
    let down = topo.out_links(8).next().unwrap();
    assert!(topo.is_switch(topo.link(down).src));
    assert!(close(
        priced.link(down).latency_us,
        topo.link(down).latency_us
    ));
}

/// The built-in profiles against every table of the calibration set (the measured
/// nccl-tests tables in tests/data/nccl-tests/, transcribed from
/// ../shared/reference/measured-training.md), each priced as NCCL picks on its machine:
/// the median error within 15% from 1 MiB up and within 30% below, per table.
#[test]
fn builtin_profiles_predict_the_calibration_set() {
    use tacos::cost::fit::{assess, relative_error, Table, SMALL_BYTES};
    use tacos::cost::nccltests::{read_file, ReadOptions};
    let dir = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/data/nccl-tests");
    for (file, spec, arch) in [
        (
            "h100-ring-allreduce.txt",
            "preset:dgx-h100,nodes=1",
            GpuArch::Hopper,
        ),
        (
            "h100-nvls-allreduce.txt",
            "preset:dgx-h100,nodes=1",
            GpuArch::Hopper,
        ),
        (
            "h100-2node-allreduce.txt",
            "preset:dgx-h100,nodes=2",
            GpuArch::Hopper,
        ),
        (
            "a100-allreduce.txt",
            "preset:dgx-a100,nodes=1",
            GpuArch::Ampere,
        ),
        (
            "a100-2node-allreduce.txt",
            "preset:dgx-a100,nodes=2",
            GpuArch::Ampere,
        ),
        ("v100-dgx1-allreduce.txt", "preset:dgx1", GpuArch::Volta),
    ] {
        let measured = read_file(&dir.join(file), &ReadOptions::default()).unwrap();
        assert_eq!(measured.len(), 1, "{file}");
        let m = &measured[0];
        let topo = parse_spec(spec, &SpecDefaults::default()).unwrap();
        let model = ExecModel::builtin(arch);
        let pricer = NcclPricer::new(&topo, m.collective, 8, arch, model.clone()).unwrap();
        let table = Table {
            name: file.into(),
            pricer: &pricer,
            algorithm: m.algorithm,
            protocol: m.protocol,
            points: m.points.clone(),
        };
        let fit = &assess(&[table], &model).unwrap()[0];
        for (small, allowed) in [(true, 0.30), (false, 0.15)] {
            let mut errors: Vec<f64> = fit
                .points
                .iter()
                .filter(|p| (p.0 < SMALL_BYTES) == small)
                .map(|&(_, measured, predicted)| relative_error(measured, predicted))
                .collect();
            if errors.is_empty() {
                continue;
            }
            errors.sort_by(f64::total_cmp);
            let median = errors[errors.len() / 2];
            assert!(
                median <= allowed,
                "{file}: median error {:.1}% {} 1 MiB, more than {:.0}%",
                100.0 * median,
                if small { "below" } else { "from" },
                100.0 * allowed
            );
        }
    }
}

/// One H100 node runs NVLS for a 1 GiB All-Reduce, and its predicted bus bandwidth is
/// within 10% of the calibration set's NVLS table at 1 GiB (466.96 and 466.83 GB/s).
#[test]
fn one_h100_node_picks_nvls_within_ten_percent_of_its_table() {
    let topo = parse_spec("preset:dgx-h100,nodes=1", &SpecDefaults::default()).unwrap();
    let model = ExecModel::builtin(GpuArch::Hopper);
    let pricer =
        NcclPricer::new(&topo, CollectiveKind::AllReduce, 8, GpuArch::Hopper, model).unwrap();
    let bytes = 1u64 << 30;
    let price = pricer.price(bytes, None, None).unwrap();
    assert_eq!(
        (price.algorithm, price.nccl_choice),
        (Algorithm::Nvls, true)
    );
    let busbw = bytes as f64 / (price.time_us * 1e3) * 2.0 * 7.0 / 8.0;
    let measured = (466.96 + 466.83) / 2.0;
    assert!((busbw - measured).abs() <= 0.10 * measured, "{busbw} GB/s");
}

/// DGX-1 (V100, hybrid cube-mesh): NCCL's rings over every NVLink, a 1 GiB All-Reduce
/// within 15% of the calibration set's V100 point (135.5 GB/s bus bandwidth); one ring
/// alone would carry a sixth of that.
#[test]
fn dgx1_rings_carry_the_v100_point() {
    let topo = parse_spec("preset:dgx1", &SpecDefaults::default()).unwrap();
    let model = ExecModel::builtin(GpuArch::Volta);
    let pricer =
        NcclPricer::new(&topo, CollectiveKind::AllReduce, 8, GpuArch::Volta, model).unwrap();
    let bytes = 1u64 << 30;
    let price = pricer.price(bytes, None, None).unwrap();
    assert_eq!(price.algorithm, Algorithm::Ring);
    let busbw = bytes as f64 / (price.time_us * 1e3) * 2.0 * 7.0 / 8.0;
    assert!((busbw - 135.5).abs() <= 0.15 * 135.5, "{busbw} GB/s");
}

/// NCCL's All-Reduce of 8 GiB with `algorithm` and Simple on `spec` (nodes of `domain`
/// GPUs) under the hand-worked model: bus bandwidth, GB/s, as nccl-tests counts it.
fn all_reduce_busbw(spec: &str, domain: usize, arch: GpuArch, algorithm: Algorithm) -> f64 {
    let topo = parse_spec(spec, &SpecDefaults::default()).unwrap();
    let ranks = topo.npus() as f64;
    let pricer = NcclPricer::new(
        &topo,
        CollectiveKind::AllReduce,
        domain,
        arch,
        model(1000.0),
    )
    .unwrap();
    let bytes = 8u64 << 30;
    let price = pricer
        .price(bytes, Some(algorithm), Some(Protocol::Simple))
        .unwrap();
    bytes as f64 / (price.time_us * 1e3) * 2.0 * (ranks - 1.0) / ranks
}

/// The GB/s NCCL's search lays ring channels over on `spec`: channels x what each claims.
fn ring_channels_gbps(spec: &str, domain: usize, arch: GpuArch) -> f64 {
    let topo = parse_spec(spec, &SpecDefaults::default()).unwrap();
    let ring = tacos::cost::machine::of_topology(&topo, domain, arch)
        .graphs()
        .ring;
    f64::from(ring.channels) * ring.bw_inter
}

/// A partial node runs over its own GPUs' NICs. NCCL sees only the communicator's GPUs:
/// on 2 of an H100 node's 8 GPUs (a NIC of 50 GB/s each) it lays its channels over their
/// 2 NICs, each behind a PCIe Gen5 x16 link that NCCL counts as 48 GB/s, and the other 6
/// NICs stay idle; the executor's ring then moves each node's bytes over 2 NICs at the
/// model's network efficiency (0.5): 2 x 50 x 0.5 = 50 GB/s bus bandwidth. With 4 NICs a
/// node the first 2 GPUs share the first NIC: half of that.
#[test]
fn a_partial_node_runs_over_the_nics_of_its_own_gpus() {
    let h100 = |spec: &str| {
        (
            ring_channels_gbps(spec, 2, GpuArch::Hopper),
            all_reduce_busbw(spec, 2, GpuArch::Hopper, Algorithm::Ring),
        )
    };
    let within = |got: f64, want: f64| (got - want).abs() <= 0.01 * want;
    let (search, busbw) = h100("preset:dgx-h100,nodes=2,gpus=2");
    assert_eq!(search, 2.0 * 48.0);
    assert!(within(busbw, 2.0 * 50.0 * 0.5), "{busbw}");
    let (search, busbw) = h100("preset:dgx-h100,nodes=2,gpus=2,nics=4");
    assert_eq!(search, 48.0);
    assert!(within(busbw, 50.0 * 0.5), "{busbw}");
    // DGX-2 (V100): one GPU of a node has its EDR NIC to itself, 12.5 GB/s (no longer the
    // 6.25 of a GPU pair's share); NCCL's search counts it at its PCIe Gen3 x16 figure,
    // 12. Two NICs for that GPU add nothing past its PCIe link (15.75 GB/s at line rate).
    let v100 = |spec: &str| {
        (
            ring_channels_gbps(spec, 1, GpuArch::Volta),
            all_reduce_busbw(spec, 1, GpuArch::Volta, Algorithm::Ring),
        )
    };
    let (search, busbw) = v100("preset:dgx2,nodes=2,gpus=1");
    assert_eq!(search, 12.0);
    assert!(within(busbw, 12.5 * 0.5), "{busbw}");
    let (search, busbw) = v100("preset:dgx2,nodes=2,gpus=1,nics=32");
    assert_eq!(search, 12.0);
    assert!(within(busbw, 15.75 * 0.5), "{busbw}");
    // A whole DGX-2 node: 8 NICs of 12.5 GB/s shared by GPU pairs, a channel of 12 on
    // each. The hand-worked model runs 4 channels, which leave a node through 4 of its 8
    // NICs (not 4 of its 16 GPUs' halves of one): 4 x 12.5 x 0.5.
    let (search, busbw) = (
        ring_channels_gbps("preset:dgx2,nodes=2", 16, GpuArch::Volta),
        all_reduce_busbw("preset:dgx2,nodes=2", 16, GpuArch::Volta, Algorithm::Ring),
    );
    assert_eq!(search, 8.0 * 12.0);
    assert!(within(busbw, 4.0 * 12.5 * 0.5), "{busbw}");
}

/// NCCL's tree across nodes, worked by hand: a chain through each node's GPUs (every GPU
/// sends `2 (g-1)/g` bytes per byte into its port, up the chain and back down, over the
/// channels' chains starting at different GPUs) and trees of the nodes between their NICs
/// (a node's NICs carry each byte once each way on two nodes, twice beyond). Under the
/// hand-worked model (efficiency 0.5, 4 channels, so 4 of a node's NICs): the time per
/// byte is the slower of the two, and the bus bandwidth `2 (n-1)/n` over it.
#[test]
fn nccls_tree_across_nodes_is_a_chain_in_each_and_trees_between_their_nics() {
    // (spec, GPUs a node, nodes, NICs its channels reach x 50 GB/s): the port is 450.
    for (spec, g, nodes, nics) in [
        ("preset:dgx-h100,nodes=2", 8.0, 2.0, 4.0),
        ("preset:dgx-h100,nodes=2,gpus=2", 2.0, 2.0, 2.0),
        ("preset:dgx-h100,nodes=4,gpus=2", 2.0, 4.0, 2.0),
        ("preset:dgx-h100,nodes=2,gpus=4,nics=2", 4.0, 2.0, 1.0),
    ] {
        let chain: f64 = 2.0 * (g - 1.0) / g / (450.0 * 0.5);
        let across = if nodes > 2.0 { 2.0 } else { 1.0 } / (nics * 50.0 * 0.5);
        let ranks = g * nodes;
        let want = 2.0 * (ranks - 1.0) / ranks / chain.max(across);
        let got = all_reduce_busbw(spec, g as usize, GpuArch::Hopper, Algorithm::Tree);
        assert!((got - want).abs() <= 0.01 * want, "{spec}: {got} vs {want}");
    }
}
