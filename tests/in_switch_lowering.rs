//! Lowering schedules that reduce or multicast inside a switch (`Transfer::in_switch`):
//! MSCCL XML refuses them naming the transfer; an MSCCL++ plan carries them on switch
//! channels (a sum followed by its multicast is one `glres`, a multicast alone a
//! `gstore`), and the plan verifier (written apart from the lowering) runs the plan to the
//! collective's result. The schedules are built by hand, their data flow checked by
//! `schedule::check_data_flow`.

use tacos::collective::{CollectiveKind, CollectiveSpec};
use tacos::cost::Executor;
use tacos::mscclpp::plan::{ChannelType, Operation, Plan};
use tacos::mscclpp::{lower, nvls, verify, PlanOptions, PlanTimer, VerifyOptions};
use tacos::schedule::{check_data_flow, Op, Schedule, Transfer};
use tacos::topology::{parse_spec, SpecDefaults, Topology};

const SIZE: u64 = 1 << 30;

/// One HGX H100 node: 8 GPUs on one NVSwitch, which reduces.
fn hgx() -> Topology {
    let topo = parse_spec("preset:hgx-h100", &SpecDefaults::default()).unwrap();
    assert_eq!(topo.npus(), 8);
    assert_eq!(topo.reducing_switches().len(), 1);
    topo
}

fn spec(kind: CollectiveKind, topo: &Topology) -> CollectiveSpec {
    CollectiveSpec {
        kind,
        root: None,
        npus: (0..topo.npus()).collect(),
        chunks_per_npu: 1,
        size_bytes: SIZE,
    }
}

/// The time one GPU's link to the NVSwitch takes to carry `chunks` chunks of `bytes`.
fn link_ps(topo: &Topology, bytes: f64, chunks: u64) -> u64 {
    let sw = topo.reducing_switches()[0];
    let up = topo.link_between(0, sw).expect("GPU 0 is on the NVSwitch");
    chunks * topo.link(up).transfer_ps(bytes)
}

/// An eighth of the buffer, and the time a GPU's link to the switch takes to carry 7 of
/// them: one phase of the in-switch All-Reduce, in which every GPU's link carries 7 chunks
/// one way (its share of the 7 other sums up; the 7 other results down).
fn chunk_and_phase(topo: &Topology) -> (f64, u64) {
    let bytes = SIZE as f64 / topo.npus() as f64;
    (bytes, link_ps(topo, bytes, topo.npus() as u64 - 1))
}

/// Chunk c summed into GPU c from every other GPU over [0, end), inside the switch or
/// not.
fn sums(p: usize, end: u64, in_switch: bool) -> Vec<Transfer> {
    (0..p)
        .flat_map(|c| (0..p).filter(move |&s| s != c).map(move |s| (c, s)))
        .map(|(c, s)| {
            let t = Transfer::new(c, s, c, 0, end, Op::Reduce);
            if in_switch {
                t.switched()
            } else {
                t
            }
        })
        .collect()
}

/// Chunk c multicast inside the switch from GPU `c` to the other GPUs over [start, end).
fn multicasts(p: usize, start: u64, end: u64) -> Vec<Transfer> {
    (0..p)
        .flat_map(|c| {
            (0..p)
                .filter(move |&d| d != c)
                .map(move |d| Transfer::new(c, c, d, start, end, Op::Copy).switched())
        })
        .collect()
}

/// The in-switch All-Reduce on one HGX H100 node: chunk c (an eighth of the buffer) is
/// summed into GPU c from the other 7 as one sum inside the switch, then multicast from c
/// to the other 7, each in one phase ([`chunk_and_phase`]).
fn in_switch_all_reduce(topo: &Topology) -> Schedule {
    let p = topo.npus();
    let (bytes, phase) = chunk_and_phase(topo);
    let mut transfers = sums(p, phase, true);
    transfers.extend(multicasts(p, phase, 2 * phase));
    checked(topo, CollectiveKind::AllReduce, bytes, transfers)
}

/// The hand-built schedule of `kind` on `topo`, its data flow checked: every chunk reaches
/// where the collective needs it, sums complete.
fn checked(
    topo: &Topology,
    kind: CollectiveKind,
    bytes: f64,
    transfers: Vec<Transfer>,
) -> Schedule {
    let schedule = Schedule::new("preset:hgx-h100", spec(kind, topo), bytes, transfers);
    if let Err(e) = check_data_flow(&schedule, topo) {
        panic!("the hand-built {kind} is not one: {e}");
    }
    schedule
}

fn ops<'a>(plan: &'a Plan, name: &'a str) -> impl Iterator<Item = (usize, &'a Operation)> + 'a {
    plan.gpus.iter().flat_map(move |g| {
        g.threadblocks
            .iter()
            .flat_map(|tb| &tb.ops)
            .filter(move |o| o.name == name)
            .map(move |o| (g.id, o))
    })
}

fn verified(plan: &Plan) {
    let options = VerifyOptions {
        size: Some(SIZE),
        root: None,
    };
    if let Err(e) = verify(plan, &options) {
        panic!("{}: {e}", plan.name);
    }
}

#[test]
fn an_in_switch_all_reduce_lowers_to_one_glres_per_gpu_and_verifies() {
    let topo = hgx();
    let schedule = in_switch_all_reduce(&topo);
    let plan = lower(&schedule, &topo, &PlanOptions::default()).unwrap();
    // Nothing moves between GPUs but through the switch: one glres per GPU, on its own
    // chunk, over all 8 GPUs' input (in place); no put, no gstore.
    let glres: Vec<(usize, &Operation)> = ops(&plan, "glres").collect();
    assert_eq!(glres.len(), 8);
    for (rank, op) in glres {
        let src = &op.src_buff.as_ref().unwrap()[0];
        assert_eq!((src.index, src.size), (rank, 1), "rank {rank}");
        assert!(src.switch_channel_id.is_some());
    }
    assert_eq!(ops(&plan, "put").count() + ops(&plan, "gstore").count(), 0);
    for g in &plan.gpus {
        let switch: Vec<_> = g
            .channels
            .iter()
            .filter(|c| c.channel_type == ChannelType::Switch)
            .collect();
        assert_eq!(switch.len(), 1, "rank {}", g.id);
        assert_eq!(
            switch[0].rank_groups.as_ref().unwrap()[0].ranks,
            (0..8).collect::<Vec<_>>()
        );
    }
    // The verifier runs it: every wait matched, no race, every output chunk the sum of
    // all 8 inputs.
    verified(&plan);
    // A rank that sets up the NVLS group twice, where its peers do once, would hang the
    // executor's collective setup: the verifier refuses it though no operation uses it.
    let mut twice = plan.clone();
    let channels = &mut twice.gpus[3].channels;
    let switch = channels
        .iter()
        .find(|c| c.channel_type == ChannelType::Switch)
        .unwrap()
        .clone();
    channels.push(switch);
    let e = verify(&twice, &VerifyOptions::default())
        .unwrap_err()
        .to_string();
    assert!(
        e.contains("not set up alike") && e.contains("rank 3"),
        "{e}"
    );
}

#[test]
fn the_lowered_in_switch_all_reduce_prices_as_the_hand_written_nvls_plan() {
    // A second implementation of the same algorithm: `mscclpp::nvls` writes one glres per
    // GPU on its share with meets (signal and wait to every peer) around it. The lowering
    // orders the same glres by the lanes' signals and semaphores instead. Under the
    // executor model only the data legs through the switch take time, and both plans move
    // the same ones, so their prices agree within 2% (the dependencies differ only in
    // which control operations the legs wait behind).
    let topo = hgx();
    let executor = Executor::for_topology(&topo, None, None).unwrap();
    let schedule = in_switch_all_reduce(&topo);
    for instances in [1, 4] {
        let options = PlanOptions {
            instances,
            ..PlanOptions::default()
        };
        let plan = lower(&schedule, &topo, &options).unwrap();
        verified(&plan);
        let ours = PlanTimer::new(&plan)
            .unwrap()
            .time_ps(&executor, &topo, SIZE)
            .unwrap() as f64;
        let hand = nvls::all_reduce(8, instances, SIZE, "nvls").unwrap();
        let theirs = PlanTimer::new(&hand)
            .unwrap()
            .time_ps(&executor, &topo, SIZE)
            .unwrap() as f64;
        let ratio = ours / theirs;
        assert!(
            (0.98..=1.02).contains(&ratio),
            "{instances} instance(s): lowered {} us, nvls {} us",
            ours / 1e6,
            theirs / 1e6
        );
    }
}

#[test]
fn an_in_switch_all_gather_lowers_to_gstores_and_verifies() {
    // All-Gather on one HGX H100 node: each GPU multicasts its chunk to the other 7 in
    // one in-switch multicast (its link up carries the chunk once; each link down 7).
    let topo = hgx();
    let p = topo.npus();
    let (bytes, phase) = chunk_and_phase(&topo);
    let schedule = checked(
        &topo,
        CollectiveKind::AllGather,
        bytes,
        multicasts(p, 0, phase),
    );
    for in_place in [false, true] {
        let options = PlanOptions {
            in_place: Some(in_place),
            ..PlanOptions::default()
        };
        let plan = lower(&schedule, &topo, &options).unwrap();
        let stores: Vec<(usize, &Operation)> = ops(&plan, "gstore").collect();
        assert_eq!(stores.len(), 8, "in place: {in_place}");
        for (rank, op) in stores {
            let dst = &op.dst_buff.as_ref().unwrap()[0];
            assert_eq!(dst.index, rank, "rank {rank} stores its chunk to its place");
        }
        assert_eq!(ops(&plan, "put").count() + ops(&plan, "glres").count(), 0);
        verified(&plan);
    }
}

#[test]
fn an_all_reduce_out_of_place_reads_the_input_and_stores_to_the_output() {
    // Out of place the input is read-only: each glres reads the input through one switch
    // channel and stores the sum to the output through another.
    let topo = hgx();
    let schedule = in_switch_all_reduce(&topo);
    let options = PlanOptions {
        in_place: Some(false),
        ..PlanOptions::default()
    };
    let plan = lower(&schedule, &topo, &options).unwrap();
    for g in &plan.gpus {
        let bound: Vec<_> = g.channels.iter().filter_map(|c| c.buffer_type).collect();
        assert_eq!(bound.len(), 2, "rank {}: {bound:?}", g.id);
    }
    assert_eq!(ops(&plan, "glres").count(), 8);
    verified(&plan);
}

#[test]
fn sums_by_puts_then_multicasts_inside_the_switch_verify() {
    // All-Reduce as a direct Reduce-Scatter over memory channels (each GPU puts chunk c
    // to GPU c, which sums it) followed by an in-switch All-Gather (GPU c multicasts its
    // sum): puts and gstores in one plan, the gstore after every sum it stores.
    let topo = hgx();
    let p = topo.npus();
    let (bytes, phase) = chunk_and_phase(&topo);
    let mut transfers = sums(p, phase, false);
    transfers.extend(multicasts(p, phase, 2 * phase));
    let schedule = checked(&topo, CollectiveKind::AllReduce, bytes, transfers);
    let plan = lower(&schedule, &topo, &PlanOptions::default()).unwrap();
    assert_eq!(ops(&plan, "put").count(), 56);
    assert_eq!(ops(&plan, "gstore").count(), 8);
    verified(&plan);
}

#[test]
fn partial_sums_in_different_places_are_gathered_before_the_switch_sums_them() {
    // Chunk c: GPU c+2 first adds its share into GPU c+1 by a put; then the switch sums
    // chunk c into GPU c from the six others but c+2, and multicasts it back to them;
    // GPU c sends it on to c+2 by a put. Out of place GPU c+1's partial sum lies in its
    // output, the others' in their input, and a switch channel reads one place on every
    // GPU: the lowering copies the others' to their output first. In place, all lie in
    // the input already.
    let topo = hgx();
    let p = topo.npus();
    let (bytes, t) = chunk_and_phase(&topo);
    let mut transfers = Vec::new();
    for c in 0..p {
        let (next, skip) = ((c + 1) % p, (c + 2) % p);
        transfers.push(Transfer::new(c, skip, next, 0, t, Op::Reduce));
        for s in (0..p).filter(|&s| s != c && s != skip) {
            transfers.push(Transfer::new(c, s, c, t, 2 * t, Op::Reduce).switched());
            transfers.push(Transfer::new(c, c, s, 2 * t, 3 * t, Op::Copy).switched());
        }
        transfers.push(Transfer::new(c, c, skip, 2 * t, 3 * t, Op::Copy));
    }
    let schedule = checked(&topo, CollectiveKind::AllReduce, bytes, transfers);
    for in_place in [true, false] {
        let options = PlanOptions {
            in_place: Some(in_place),
            ..PlanOptions::default()
        };
        let plan = lower(&schedule, &topo, &options).unwrap();
        assert_eq!(ops(&plan, "glres").count(), 8, "in place: {in_place}");
        // Out of place, six of a chunk's seven partial sums are copied to the output. In
        // place, the put into GPU c+2 lands in scratch (its place for chunk c held its own
        // share, which it sent away) and is copied home.
        let copies = if in_place { 8 } else { 8 * 6 };
        assert_eq!(ops(&plan, "copy").count(), copies, "in place: {in_place}");
        verified(&plan);
    }
}

#[test]
fn a_lone_in_switch_sum_is_refused_naming_it() {
    // Reduce-Scatter by in-switch sums alone: chunk c summed into GPU c, never multicast
    // back. The executor has no in-switch sum without its multicast store (`glre`).
    let topo = hgx();
    let (bytes, phase) = chunk_and_phase(&topo);
    let transfers = sums(topo.npus(), phase, true);
    let schedule = checked(&topo, CollectiveKind::ReduceScatter, bytes, transfers);
    let first = &schedule.transfers[0];
    let e = lower(&schedule, &topo, &PlanOptions::default())
        .unwrap_err()
        .to_string();
    let named = format!(
        "transfer 0 (chunk {}, NPU {} to NPU {})",
        first.chunk(),
        first.src(),
        first.dst()
    );
    assert!(e.contains(&named), "{e}");
    assert!(e.contains("glre"), "{e}");
}

#[test]
fn in_switch_sums_one_after_another_are_refused_naming_the_one_between() {
    // Chunk c summed into GPU c inside the switch from one source at a time, then
    // multicast back: each sum is its own operation, and the glres that would carry the
    // first stores a partial sum, as the second reaches GPU c before the multicast.
    let topo = hgx();
    let p = topo.npus();
    let (bytes, t) = chunk_and_phase(&topo);
    let mut transfers = Vec::new();
    for c in 0..p {
        let sources = (0..p).filter(|&s| s != c);
        for (k, s) in sources.enumerate() {
            let start = k as u64 * t;
            transfers.push(Transfer::new(c, s, c, start, start + t, Op::Reduce).switched());
        }
    }
    transfers.extend(multicasts(p, p as u64 * t, (p as u64 + 1) * t));
    let schedule = checked(&topo, CollectiveKind::AllReduce, bytes, transfers);
    let e = lower(&schedule, &topo, &PlanOptions::default())
        .unwrap_err()
        .to_string();
    // The first sum is chunk 1's from GPU 0; chunk 1's next, from GPU 2, comes between.
    assert!(
        e.contains("(chunk 1, NPU 0 to NPU 1)")
            && e.contains("(chunk 1, NPU 2 to NPU 1) reaches rank 1"),
        "{e}"
    );
}

#[test]
fn msccl_xml_refuses_an_in_switch_schedule_naming_the_transfer() {
    let topo = hgx();
    let schedule = in_switch_all_reduce(&topo);
    let options = tacos::msccl::LowerOptions::default();
    let first = &schedule.transfers[0];
    let named = format!(
        "transfer 0 (chunk {}, NPU {} to NPU {})",
        first.chunk(),
        first.src(),
        first.dst()
    );
    for e in [
        tacos::msccl::lower(&schedule, &topo, &options).unwrap_err(),
        tacos::msccl::lower::check_shape(&schedule, &topo, &options).unwrap_err(),
    ] {
        let e = e.to_string();
        assert!(e.contains(&named), "{e}");
        assert!(e.contains("MSCCL XML has no operation"), "{e}");
        assert!(e.contains("--format mscclpp"), "{e}");
    }
}
