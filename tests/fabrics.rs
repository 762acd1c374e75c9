//! Fabrics as the builders and presets make them: switch vertices for `switch:N`, the
//! switch dimensions of compositions, leaf-spine (`clos:`) and the real-machine presets,
//! each counted, measured and routed against hand-worked figures; the paper's unwinding
//! still reachable with `d=`; bad options refused naming the option.

use tacos::bounds::Bounds;
use tacos::collective::{Collective, CollectiveKind};
use tacos::schedule::check;
use tacos::sim::{simulate_messages, simulate_schedule, Message};
use tacos::synth::{synthesize, SynthOptions};
use tacos::topology::spec::{plan_spec, SpecPlan};
use tacos::topology::{parse_spec, SpecDefaults, Topology};
use tacos::tuner::Cluster;

fn spec(s: &str) -> Topology {
    parse_spec(s, &SpecDefaults::default()).unwrap_or_else(|e| panic!("{s}: {e}"))
}

fn spec_err(s: &str) -> String {
    match parse_spec(s, &SpecDefaults::default()) {
        Ok(_) => panic!("{s} was accepted"),
        Err(e) => e.to_string(),
    }
}

/// (NPUs, switches, links).
fn counts(t: &Topology) -> (usize, usize, usize) {
    (t.npus(), t.switches().len(), t.links().len())
}

/// The switch named `name`.
fn switch(t: &Topology, name: &str) -> usize {
    t.switches()
        .find(|&s| t.switch_name(s) == Some(name))
        .unwrap_or_else(|| panic!("{} has no switch '{name}'", t.name()))
}

/// (bandwidth, latency) of the link from `a` to `b`.
fn link(t: &Topology, a: usize, b: usize) -> (f64, f64) {
    let l = t.link(
        t.link_between(a, b)
            .unwrap_or_else(|| panic!("no link {a} -> {b}")),
    );
    (l.bandwidth_gbps, l.latency_us)
}

/// The vertices a route from `a` to `b` visits, first and last included.
fn path(t: &Topology, a: usize, b: usize) -> Option<Vec<usize>> {
    let route = t.route(a, b)?;
    let mut at = vec![a];
    at.extend(route.iter().map(|&l| t.link(l).dst));
    Some(at)
}

/// (bandwidth, summed latency) of the route from `a` to `b`.
fn route_figures(t: &Topology, a: usize, b: usize) -> (f64, f64) {
    let l = t.route_link(t.route(a, b).unwrap());
    (l.bandwidth_gbps, (l.latency_us * 1e6).round() / 1e6)
}

#[test]
fn switch_n_is_one_switch_vertex_with_full_ports() {
    let t = spec("switch:8");
    assert_eq!(counts(&t), (8, 1, 16));
    assert_eq!(t.switch_name(8), Some("switch"));
    for npu in 0..8 {
        // The default 50 GB/s, and 0.5 us a transfer split over the two hops.
        assert_eq!(link(&t, npu, 8), (50.0, 0.25));
        assert_eq!(link(&t, 8, npu), (50.0, 0.25));
    }
    assert_eq!(path(&t, 2, 5), Some(vec![2, 8, 5]));
    assert_eq!(route_figures(&t, 2, 5), (50.0, 0.5));
    // star:N gives each link the latency; the same fabric with lat halved.
    assert_eq!(spec("star:8,lat=0.25"), t);
}

#[test]
fn switch_with_d_is_the_papers_unwinding() {
    // d = 7: every ordered pair, 50/7 GB/s and 0.5 us: 56 links, no switch.
    let t = spec("switch:8,d=7");
    assert_eq!(counts(&t), (8, 0, 56));
    for a in 0..8 {
        for b in (0..8).filter(|&b| b != a) {
            assert_eq!(link(&t, a, b), (50.0 / 7.0, 0.5));
        }
    }
    let star = spec("switch:8");
    assert_eq!(star.unwind(None).unwrap(), t);
    assert_eq!(star.unwind(Some(7)).unwrap(), t);
    // d = 2: i -> i+1, i+2 mod 8 at 25 GB/s.
    let two = spec("switch:8,d=2");
    assert_eq!(counts(&two), (8, 0, 16));
    assert_eq!(link(&two, 7, 1), (25.0, 0.5));
    assert_eq!(two.link_between(0, 3), None);
    assert_eq!(star.unwind(Some(2)).unwrap(), two);
}

#[test]
fn the_papers_3d_rfs_has_a_switch_per_line_of_its_switch_dimension() {
    let t = spec("rfs:2x4x8,bw=200:100:50");
    // Rings of 2: one pair each way on 32 lines (64 links); fully connected 4: 12 links
    // on 16 lines (192); the switch dimension: 8 lines, 8 switches, 16 links each (128).
    assert_eq!(counts(&t), (64, 8, 64 + 192 + 128));
    // Line 3 of the switch dimension: NPUs 3, 11, ..., 59 (stride 2 x 4 = 8).
    let s = switch(&t, "dim2-line3");
    let members: Vec<usize> = t.out_links(s).map(|l| t.link(l).dst).collect();
    assert_eq!(members, (0..8).map(|k| 3 + 8 * k).collect::<Vec<_>>());
    assert_eq!(link(&t, 11, s), (50.0, 0.25));
    assert_eq!(path(&t, 3, 59), Some(vec![3, s, 59]));
    // NPU 3 and NPU 4 share no dimension's line: no route through switches alone.
    assert_eq!(t.route(3, 4), None);
    // With d=, the switch dimension is unwound as before: 8 x 7 links on each of 8 lines.
    let unwound = spec("rfs:2x4x8,bw=200:100:50,d=7");
    assert_eq!(counts(&unwound), (64, 0, 64 + 192 + 448));
    assert_eq!(t.unwind(None).unwrap(), unwound);
}

#[test]
fn the_papers_2d_switch_has_a_switch_per_row_and_per_column() {
    let t = spec("multi:S8xS4,bw=300:25");
    // 4 rows of 8 and 8 columns of 4: 12 switches; every NPU a port on two switches.
    assert_eq!(counts(&t), (32, 12, 32 * 2 * 2));
    let (row1, col5) = (switch(&t, "dim0-line1"), switch(&t, "dim1-line5"));
    // NPU 13 is (5, 1): row 1, column 5.
    assert_eq!(link(&t, 13, row1), (300.0, 0.25));
    assert_eq!(link(&t, col5, 13), (25.0, 0.25));
    assert_eq!(path(&t, 13, 8), Some(vec![13, row1, 8]));
    assert_eq!(path(&t, 13, 29), Some(vec![13, col5, 29]));
    assert_eq!(
        spec("multi:S8xS4,bw=300:25,d=1").links().len(),
        32 + 32,
        "d=1 unwinds every switch dimension into one link per NPU"
    );
}

#[test]
fn clos_joins_leaves_through_spines_at_the_oversubscribed_rate() {
    let t = spec("clos:4x3,spine=2,oversub=2,bw=100,lat=1");
    // 12 NPUs; 3 leaves and 2 spines; 24 NPU links and 2 x 3 x 2 leaf-spine links.
    assert_eq!(counts(&t), (12, 5, 24 + 12));
    let (leaf1, spine0) = (switch(&t, "leaf1"), switch(&t, "spine0"));
    assert_eq!((leaf1, spine0), (13, 15));
    assert_eq!(link(&t, 5, leaf1), (100.0, 0.5));
    // A leaf sends 4 x 100 GB/s down; half of it up, over 2 spines: 100 GB/s a link.
    assert_eq!(link(&t, leaf1, spine0), (100.0, 0.5));
    assert_eq!(link(&t, spine0, leaf1), (100.0, 0.5));
    assert_eq!(path(&t, 4, 7), Some(vec![4, leaf1, 7]));
    assert_eq!(path(&t, 0, 5), Some(vec![0, 12, spine0, leaf1, 5]));
    assert_eq!(route_figures(&t, 0, 5), (100.0, 2.0));
    // Defaults: one spine, non-blocking: 4 x 50 GB/s up from each leaf.
    let t = spec("clos:4x2");
    assert_eq!(counts(&t), (8, 3, 16 + 4));
    assert_eq!(link(&t, 8, 10), (200.0, 0.25));
    // An oversubscription may be written R:1.
    assert_eq!(
        spec("clos:4x3,spine=2,oversub=2:1,bw=100,lat=1"),
        spec("clos:4x3,spine=2,oversub=2,bw=100,lat=1")
    );
}

/// (up, down) bandwidth of a GPU's port on a switch.
type Port = (f64, f64);

/// NVSwitch port and NIC of every GPU of a preset: its port on its node's NVSwitch, and on
/// its rail (None on one node).
fn ports(t: &Topology, gpus: usize) -> Vec<(Port, Option<Port>)> {
    (0..t.npus())
        .map(|g| {
            let nvswitch = switch(t, &format!("nvswitch-node{}", g / gpus));
            let port = |s| (link(t, g, s).0, link(t, s, g).0);
            let rail = t
                .switches()
                .find(|&s| t.switch_name(s) == Some(&format!("rail{}", g % gpus)));
            (port(nvswitch), rail.map(port))
        })
        .collect()
}

#[test]
fn single_node_presets_are_gpus_on_an_nvswitch() {
    // (preset, GPUs, GB/s per GPU per direction into the NVSwitch).
    for (name, gpus, port) in [
        ("dgx2", 16, 150.0),
        ("hgx-a100", 8, 300.0),
        ("hgx-h100", 8, 450.0),
        ("ndv4", 8, 300.0),
        ("dgx-a100,nodes=1", 8, 300.0),
        ("dgx-h100,nodes=1", 8, 450.0),
    ] {
        let t = spec(&format!("preset:{name}"));
        assert_eq!(counts(&t), (gpus, 1, 2 * gpus), "{name}");
        assert!(ports(&t, gpus).iter().all(|&p| p == ((port, port), None)));
        // GPU to GPU: 0.7 us, the whole port.
        assert_eq!(route_figures(&t, 0, gpus - 1), (port, 0.7), "{name}");
    }
}

#[test]
fn dgx1_is_the_hybrid_cube_mesh_without_switches() {
    let t = spec("preset:dgx1");
    // Four peers per GPU; NVLink counts 1+1+2+2 on every row: 6 x 25 = 150 GB/s out.
    assert_eq!(counts(&t), (8, 0, 32));
    for g in 0..8 {
        let out: f64 = t.out_links(g).map(|l| t.link(l).bandwidth_gbps).sum();
        assert_eq!(out, 150.0);
    }
    assert_eq!(link(&t, 0, 3), (50.0, 0.7));
    assert_eq!(link(&t, 0, 1), (25.0, 0.7));
    assert_eq!(t.link_between(0, 5), None);
    assert_eq!(spec("preset:dgx1,nvlink=20").link(0).bandwidth_gbps, 20.0);
}

#[test]
fn clusters_are_rail_optimized() {
    // (preset, nodes, NVSwitch port, NIC) per GPU per direction.
    for (name, nodes, port, nic) in [
        ("dgx-a100", 2, 300.0, 25.0),
        ("dgx-h100,nodes=4", 4, 450.0, 50.0),
        ("ndv4,nodes=2", 2, 300.0, 25.0),
        ("hgx-h100,nodes=3", 3, 450.0, 50.0),
        ("dgx2,nodes=2", 2, 150.0, 6.25),
    ] {
        let t = spec(&format!("preset:{name}"));
        let gpus = t.npus() / nodes;
        // A switch per node and per rail; every GPU a port on its NVSwitch and its rail.
        assert_eq!(
            counts(&t),
            (nodes * gpus, nodes + gpus, 4 * nodes * gpus),
            "{name}"
        );
        assert!(
            ports(&t, gpus)
                .iter()
                .all(|&p| p == ((port, port), Some((nic, nic)))),
            "{name}"
        );
    }
    // dgx-h100 on 2 nodes: GPUs 0-15, NVSwitches 16-17, rails 18-25.
    let t = spec("preset:dgx-h100,nodes=2");
    let (rail3, nvs0) = (switch(&t, "rail3"), switch(&t, "nvswitch-node0"));
    assert_eq!((nvs0, rail3), (16, 21));
    // GPU 3 of node 0 to GPU 3 of node 1: through rail 3, 1 us a NIC hop.
    assert_eq!(path(&t, 3, 11), Some(vec![3, rail3, 11]));
    assert_eq!(route_figures(&t, 3, 11), (50.0, 2.0));
    // To GPU 5 of node 1 no route through switches alone: a GPU must relay.
    assert_eq!(t.route(3, 13), None);
    // Inside node 0, through its NVSwitch.
    assert_eq!(path(&t, 3, 5), Some(vec![3, nvs0, 5]));
    assert_eq!(route_figures(&t, 3, 5), (450.0, 0.7));
}

#[test]
fn spines_join_the_rails_at_the_oversubscribed_rate() {
    let t = spec("preset:dgx-h100,nodes=4,spine=2,oversub=2");
    // 4 NVSwitches, 8 rails, 2 spines; 128 GPU links and 2 x 8 x 2 rail-spine links.
    assert_eq!(counts(&t), (32, 14, 128 + 32));
    let (rail3, rail5, spine0) = (
        switch(&t, "rail3"),
        switch(&t, "rail5"),
        switch(&t, "spine0"),
    );
    // A rail takes 4 NICs of 50 GB/s: 200 down, 100 up at 2:1, 50 to each spine.
    assert_eq!(link(&t, rail3, spine0), (50.0, 0.25));
    assert_eq!(link(&t, spine0, rail5), (50.0, 0.25));
    // GPU 3 of node 0 to GPU 5 of node 1: rail 3, a spine, rail 5: 1 + 0.25 + 0.25 + 1.
    // Either spine is as short; sources spread over them by id (3 mod 2: spine 1), GPU 2
    // of the same rail's other node takes spine 0.
    let spine1 = switch(&t, "spine1");
    assert_eq!(path(&t, 3, 13), Some(vec![3, rail3, spine1, rail5, 13]));
    assert_eq!(route_figures(&t, 3, 13), (50.0, 2.5));
    let rail2 = switch(&t, "rail2");
    assert_eq!(path(&t, 2, 13), Some(vec![2, rail2, spine0, rail5, 13]));
    // The same index stays on its rail.
    assert_eq!(path(&t, 3, 11), Some(vec![3, rail3, 11]));
    // Non-blocking with one spine: the rail's 200 GB/s in one link.
    let t = spec("preset:dgx-h100,nodes=4,spine=1");
    assert_eq!(link(&t, switch(&t, "rail0"), switch(&t, "spine0")).0, 200.0);
}

#[test]
fn part_of_a_node_and_other_link_speeds() {
    let t = spec("preset:dgx-a100,nodes=2,gpus=4");
    // GPU g of node n is NPU 4n + g: 2 NVSwitches, 4 rails.
    assert_eq!(counts(&t), (8, 6, 32));
    assert_eq!(path(&t, 1, 5), Some(vec![1, switch(&t, "rail1"), 5]));
    assert_eq!(
        t.switches()
            .filter(|&s| t.switch_name(s) == Some("rail4"))
            .count(),
        0
    );
    // One GPU per node: no NVSwitch, the rail only.
    let t = spec("preset:dgx-h100,nodes=3,gpus=1");
    assert_eq!(counts(&t), (3, 1, 6));
    let t = spec("preset:dgx-h100,nodes=2,nic=25,nvswitch=400");
    assert_eq!(ports(&t, 8)[0], ((400.0, 400.0), Some((25.0, 25.0))));
    let t = spec("preset:hgx-a100,nvlink=20");
    assert_eq!(ports(&t, 8)[0], ((240.0, 240.0), None));
}

/// Every GPU's port on its rail, nodes of `gpus` GPUs.
fn rail_ports(t: &Topology, gpus: usize) -> Vec<Port> {
    (0..t.npus())
        .map(|g| {
            let rail = switch(t, &format!("rail{}", g % gpus));
            (link(t, g, rail).0, link(t, rail, g).0)
        })
        .collect()
}

/// The GB/s each of the first `taken` GPUs of a node has to itself from its NICs, worked
/// out NIC by NIC: with N NICs for G GPUs (N a divisor or a multiple of G), NIC j sits
/// with GPUs j*G/N .. (j+1)*G/N - 1 (N <= G), or with GPU j / (N/G) (N > G); a NIC's
/// speed is split among the taken GPUs on it, a GPU's NICs add up, and its PCIe link caps
/// the sum. The least GPU's figure, and how many NICs have a taken GPU on them.
fn shares_by_hand(gpus: usize, nics: usize, taken: usize, nic: f64, pcie: f64) -> (f64, usize) {
    let on_nic = |j: usize| -> Vec<usize> {
        if nics <= gpus {
            let per = gpus / nics;
            (j * per..(j + 1) * per).collect()
        } else {
            vec![j / (nics / gpus)]
        }
    };
    let mut share = vec![0.0; taken];
    let mut used = 0;
    for j in 0..nics {
        let users: Vec<usize> = on_nic(j).into_iter().filter(|&g| g < taken).collect();
        if !users.is_empty() {
            used += 1;
        }
        for &g in &users {
            share[g] += nic / users.len() as f64;
        }
    }
    let least = share
        .iter()
        .map(|s| s.min(pcie))
        .fold(f64::INFINITY, f64::min);
    (least, used)
}

#[test]
fn gpus_share_or_split_their_nodes_nics() {
    // (preset, GPUs a node, NICs by default, GB/s a NIC, the GPUs' PCIe x16 line rate:
    // Gen3 15.75 on V100, Gen4 31.5 on A100, Gen5 63 on H100).
    for (name, gpus, default_nics, nic, pcie) in [
        ("dgx2", 16, 8, 12.5, 15.75),
        ("dgx-a100", 8, 8, 25.0, 31.5),
        ("dgx-h100", 8, 8, 50.0, 63.0),
    ] {
        let nic_counts = [1, 2, 4, 8, 16, 32]
            .into_iter()
            .filter(|&n| n % gpus == 0 || gpus % n == 0);
        for nics in nic_counts {
            for taken in 1..=gpus {
                let s = format!("preset:{name},nodes=2,gpus={taken},nics={nics}");
                let t = spec(&s);
                let (share, used) = shares_by_hand(gpus, nics, taken, nic, pcie);
                for (up, down) in rail_ports(&t, taken) {
                    assert!(
                        (up - share).abs() < 1e-9 && (down - share).abs() < 1e-9,
                        "{s}: {up} vs {share}"
                    );
                }
                let recorded = t.nics().unwrap_or_else(|| panic!("{s}: no NICs recorded"));
                assert_eq!((recorded.count, recorded.gbps), (used, nic), "{s}");
            }
        }
        // The default is the machine's: a whole node on its NICs as before.
        let t = spec(&format!("preset:{name},nodes=2"));
        let recorded = t.nics().unwrap();
        assert_eq!(
            (recorded.count, recorded.gbps),
            (default_nics, nic),
            "{name}"
        );
    }
    // DGX-2: a pair of GPUs to each EDR NIC, 6.25 GB/s a GPU; one GPU alone has its NIC's
    // 12.5; two GPUs of a node share the first NIC.
    assert_eq!(
        rail_ports(&spec("preset:dgx2,nodes=2"), 16)[5],
        (6.25, 6.25)
    );
    assert_eq!(
        rail_ports(&spec("preset:dgx2,nodes=2,gpus=1"), 1)[0],
        (12.5, 12.5)
    );
    assert_eq!(
        rail_ports(&spec("preset:dgx2,nodes=2,gpus=2"), 2)[1],
        (6.25, 6.25)
    );
    // Four NICs of 100 GB/s a GPU on H100: its PCIe Gen5 x16 link carries 63.
    let t = spec("preset:dgx-h100,nodes=2,nics=32,nic=100");
    assert_eq!(rail_ports(&t, 8)[0], (63.0, 63.0));
    assert_eq!(t.name(), "preset:dgx-h100,nodes=2,nics=32,nic=100");
    // Spines take the rails' shares; failed GPUs keep the record.
    let t = spec("preset:dgx2,nodes=4,spine=1");
    assert_eq!(t.nics().map(|n| n.count), Some(8));
    assert_eq!(
        link(&t, switch(&t, "rail0"), switch(&t, "spine0")).0,
        4.0 * 6.25
    );
    assert_eq!(t.fail_npus(&[3]).unwrap().nics(), t.nics());
    // One node has NICs too; other builders record none.
    assert_eq!(spec("preset:hgx-h100").nics().map(|n| n.count), Some(8));
    assert_eq!(spec("switch:8").nics(), None);
}

#[test]
fn the_tuner_describes_presets_as_before() {
    // What the NCCL tuner prices large clusters from: nodes, GPUs per node, and per-pair
    // figures of the unwinding (450/7 GB/s inside a node, a NIC's 50 GB/s over 3 peers).
    let plan = plan_spec("preset:dgx-h100,nodes=4", &SpecDefaults::default()).unwrap();
    let SpecPlan::Composed { name, dims, .. } = plan else {
        panic!("a cluster preset is described by dimensions")
    };
    assert_eq!(name, "preset:dgx-h100,nodes=4");
    let c = Cluster::from_dims(&dims, 8).unwrap();
    assert_eq!((c.domains, c.size), (4, 8));
    assert_eq!(c.nvlink.bandwidth_gbps, 450.0 / 7.0);
    assert_eq!(c.rail.bandwidth_gbps, 50.0 / 3.0);
    assert_eq!((c.nvlink.latency_us, c.rail.latency_us), (0.7, 2.0));
    // With spines it is no such cluster: built.
    let plan = plan_spec("preset:dgx-h100,nodes=4,spine=2", &SpecDefaults::default());
    assert!(matches!(plan.unwrap(), SpecPlan::Built(..)));
}

/// 1 MB from each NPU to `(i + 1) % n` for n - 1 steps, each step after the last one's
/// arrival at its source: a Ring All-Gather's messages.
fn ring_all_gather(n: usize, bytes: f64) -> Vec<Message> {
    (0..n - 1)
        .flat_map(|s| {
            (0..n).map(move |i| Message {
                src: i,
                dst: (i + 1) % n,
                bytes,
                deps: if s == 0 {
                    vec![]
                } else {
                    vec![(s - 1) * n + (i + n - 1) % n]
                },
            })
        })
        .collect()
}

const US: u64 = 1_000_000;

#[test]
fn a_ring_through_the_switch_gets_the_whole_port() {
    // switch:8 at 50 GB/s and 0.5 us: 7 steps of alpha + 1 MB / 50 GB/s = 20.5 us.
    let t = spec("switch:8");
    let r = simulate_messages(&t, &ring_all_gather(8, 1e6)).unwrap();
    assert_eq!(r.time_ps, 7 * 20_500_000);
    // The ingress bound of the 8 MB All-Gather: 7 MB into a 50 GB/s port, 140 us.
    let ag = Collective::over_all(&t, CollectiveKind::AllGather, None, 1, 8_000_000).unwrap();
    assert_eq!(Bounds::new(&t, &ag).ingress_ps, 140 * US);
    // The unwound switch gives the ring's neighbour a seventh: 7 x (0.5 + 140) us.
    let u = spec("switch:8,d=7");
    let r = simulate_messages(&u, &ring_all_gather(8, 1e6)).unwrap();
    assert!(r.time_ps.abs_diff(7 * 140_500_000) < 10, "{}", r.time_ps);
}

#[test]
fn a_gpu_takes_in_through_its_nvswitch_port_and_its_nic() {
    // dgx-h100 on 2 nodes, All-Gather of 16 MB: each GPU takes in 15 MB over 450 + 50
    // GB/s, 30 us.
    let t = spec("preset:dgx-h100,nodes=2");
    let ag = Collective::over_all(&t, CollectiveKind::AllGather, None, 1, 16_000_000).unwrap();
    assert_eq!(Bounds::new(&t, &ag).ingress_ps, 30 * US);
    // GPU 3 to its peer on node 1 while GPU 4 sends to GPU 3 through the NVSwitch: two
    // ports, no contention; 1 MB takes 2 + 20 us on the rail, 0.7 + 2.222 us on NVLink.
    let m = |src, dst| Message {
        src,
        dst,
        bytes: 1e6,
        deps: vec![],
    };
    let r = simulate_messages(&t, &[m(3, 11), m(4, 3)]).unwrap();
    let ends: Vec<u64> = r.messages.iter().map(|m| m.end_ps).collect();
    assert_eq!(ends[0], 22 * US);
    assert!(ends[1].abs_diff(2_922_222) < 2, "{ends:?}");
}

#[test]
fn bad_fabric_options_name_the_option_and_what_is_allowed() {
    let cases = [
        ("preset:dgx-h100,gpus=0", ["gpus=", "1 to 8"]),
        ("preset:dgx-h100,gpus=9", ["gpus=", "1 to 8"]),
        ("preset:dgx2,gpus=17", ["gpus=", "1 to 16"]),
        ("preset:dgx-h100,gpus=x", ["gpus=", "whole number"]),
        ("preset:dgx-h100,nodes=4,spine=0", ["spine=", ">= 1"]),
        (
            "preset:dgx-h100,nodes=4,spine=2,oversub=0",
            ["oversub=", "> 0"],
        ),
        (
            "preset:dgx-h100,nodes=4,spine=2,oversub=-2",
            ["oversub=", "> 0"],
        ),
        (
            "preset:dgx-h100,nodes=4,spine=2,oversub=fast",
            ["oversub=", "> 0"],
        ),
        (
            "preset:dgx-h100,nodes=4,spine=2,oversub=1:0",
            ["oversub=", "> 0"],
        ),
        ("preset:dgx-h100,nodes=4,oversub=2", ["oversub=", "spine="]),
        ("preset:dgx-h100,nodes=1,spine=2", ["spine=", "nodes=2"]),
        ("preset:dgx1,nodes=2", ["nodes=", "one node"]),
        ("preset:dgx1,gpus=4", ["gpus=", "nvlink="]),
        ("preset:dgx1,nics=8", ["nics=", "nvlink="]),
        (
            "preset:dgx-h100,nics=3",
            ["nics=", "divisor or a multiple of its 8 GPUs"],
        ),
        ("preset:dgx2,nics=12", ["nics=", "16 GPUs"]),
        ("preset:dgx-h100,nics=0", ["nics=", "from 1 to 64"]),
        ("preset:dgx-h100,nics=128", ["nics=", "from 1 to 64"]),
        ("preset:dgx-h100,nics=x", ["nics=", "whole number of NICs"]),
        ("preset:dgx-h100,nics=-8", ["nics=", "whole number of NICs"]),
        ("switch:8,nics=8", ["nics=", "bw="]),
        ("preset:dgx-h100,d=3", ["d=", "nodes="]),
        ("clos:4x2,spine=0", ["spine=", ">= 1"]),
        ("clos:4x2,oversub=nan", ["oversub=", "> 0"]),
        ("clos:4", ["clos:4", "PxL"]),
        ("clos:4x2,nodes=2", ["nodes=", "spine="]),
        ("clos:4x2,bw=1:2", ["bw=", "one value"]),
        ("ring:4,spine=2", ["spine=", "bw="]),
        // 2 x 0.05 GB/s down, / 100 / 1000 spines: 1e-6 GB/s a spine link.
        (
            "clos:2x2,spine=1000,oversub=100,bw=0.05",
            ["spine link", "0.001"],
        ),
    ];
    for (s, wanted) in cases {
        let e = spec_err(s);
        for w in wanted {
            assert!(e.contains(w), "{s}: '{w}' not in: {e}");
        }
    }
}

#[test]
fn the_ring_crosses_nodes_on_rails_not_through_the_spine() {
    // On a rail-optimized cluster with a spine every GPU reaches every other through
    // switches; a ring hop through the spine would share its few links with every other
    // crossing. The ring keeps to one switch a hop (NVSwitch or rail), as NCCL's does.
    let t = spec("preset:dgx-h100,nodes=4,spine=2,oversub=2");
    let order = tacos::baselines::ring_order(&t, &t.alive_npus());
    assert_eq!(order.len(), 32);
    for (a, b) in order.iter().zip(order.iter().cycle().skip(1)) {
        let route = t.route(*a, *b).unwrap();
        assert_eq!(
            route.len(),
            2,
            "{a} -> {b} goes through {} links",
            route.len()
        );
    }
    // So it runs at the NICs' speed: each direction moves half of 31/32 GiB over one
    // 50 GB/s NIC at each crossing, 10.4 ms, plus latencies.
    let c = Collective::over_all(&t, CollectiveKind::AllGather, None, 1, 1 << 30).unwrap();
    let ring = tacos::baselines::Baseline::Ring
        .schedule(&t, c.spec())
        .unwrap();
    let time = tacos::sim::simulate_schedule(&t, &ring).unwrap().time_ps as f64;
    let nic_bound = (1u64 << 29) as f64 * 31.0 / 32.0 * 1000.0 / 50.0;
    assert!(
        time >= nic_bound && time <= 1.1 * nic_bound,
        "{time} ps vs {nic_bound} ps"
    );
}

/// A leaf-spine fabric of 4 leaves of 8 NPUs and 4 spines: every route between leaves is
/// as short through any spine, and a leaf's NPUs spread over them evenly (two each), as
/// ECMP spreads flows, so an All-to-All's pieces between leaves share all the uplinks.
/// Each leaf sends 8 x 24 pieces of 1/32 GiB over 4 uplinks of 50 GB/s at least: 32,212
/// us, which one chunk per piece on planned paths comes within 15% of (0.89; through one
/// spine it took four times as long).
#[test]
fn leaves_spread_over_the_spines() {
    let t = spec("clos:8x4,spine=4,oversub=2");
    let spines: Vec<usize> = (0..4).map(|k| switch(&t, &format!("spine{k}"))).collect();
    for leaf in 0..4 {
        let mut through = [0usize; 4];
        for npu in 8 * leaf..8 * leaf + 8 {
            let to = (npu + 8) % 32;
            let route = path(&t, npu, to).unwrap();
            assert_eq!(route.len(), 5, "{route:?}");
            let k = spines.iter().position(|&s| s == route[2]).unwrap();
            through[k] += 1;
        }
        assert_eq!(through, [2, 2, 2, 2], "leaf {leaf}");
    }
    let c = Collective::over_all(&t, CollectiveKind::AllToAll, None, 1, 1 << 30).unwrap();
    let paths = SynthOptions {
        planned: true,
        ..SynthOptions::seeded(0)
    };
    let s = synthesize(&t, &c, &paths).unwrap();
    check(&s, &t).unwrap();
    let time_us = simulate_schedule(&t, &s).unwrap().time_ps as f64 / 1e6;
    let bound_us = (8 * 24) as f64 * (1u64 << 30) as f64 / 32.0 / (4.0 * 50.0 * 1e3);
    assert!(
        time_us <= bound_us / 0.85,
        "{time_us} us against {bound_us} us"
    );
}
