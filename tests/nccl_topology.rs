//! NCCL topology XML import: full dumps with NVLinks and NICs, and the partial files cloud
//! images ship, whose missing figures come from options with a warning.

mod common;

use std::path::Path;
use tacos::topology::nccl_xml::{parse, read, NcclImportOptions};
use tacos::topology::{parse_spec_with_warnings, SpecDefaults, Topology};
use tacos::Error;

/// Four sm80 GPUs, each with 12 NVLinks into NVSwitches (2 per switch over 6 switches, as
/// NCCL dumps them), and two 200 Gb/s NICs shared by GPU pairs.
fn nvswitch_dump() -> String {
    nvswitch_dump_of("80")
}

/// `nvswitch_dump` with GPUs of compute capability `sm`.
fn nvswitch_dump_of(sm: &str) -> String {
    let mut gpus = String::new();
    for (i, bus) in [
        "0000:07:00.0",
        "0000:0b:00.0",
        "0000:48:00.0",
        "0000:4c:00.0",
    ]
    .iter()
    .enumerate()
    {
        let links: String = (0..6)
            .map(|s| format!("<nvlink target=\"0000:c{s}:00.0\" count=\"2\" tclass=\"0x068000\"/>"))
            .collect();
        let nic = if i % 2 == 0 {
            format!(
                "<pci busid=\"0000:0{i}:01.0\" class=\"0x020700\"><nic><net name=\"mlx5_{i}\" speed=\"200000\"/></nic></pci>"
            )
        } else {
            String::new()
        };
        gpus.push_str(&format!(
            "<pci busid=\"ffff:0{i}:00.0\" class=\"0x060400\"><pci busid=\"{bus}\" class=\"0x030200\" link_speed=\"16.0 GT/s PCIe\" link_width=\"16\"><gpu dev=\"{i}\" sm=\"{sm}\" rank=\"{i}\">{links}</gpu></pci>{nic}</pci>"
        ));
    }
    format!("<system version=\"1\"><cpu numaid=\"0\">{gpus}</cpu></system>")
}

/// The bandwidth and latency of the route from `a` to `b`, `None` where there is none.
fn route(t: &Topology, a: usize, b: usize) -> Option<(f64, f64)> {
    let link = t.route_link(t.route(a, b)?);
    Some((link.bandwidth_gbps, link.latency_us))
}

/// The bandwidths of the links entering GPU `npu`, smallest first.
fn ports_in(t: &Topology, npu: usize) -> Vec<f64> {
    let mut bw: Vec<f64> = t
        .in_links(npu)
        .iter()
        .map(|&l| t.link(l).bandwidth_gbps)
        .collect();
    bw.sort_by(f64::total_cmp);
    bw
}

#[test]
fn nvswitch_dumps_import_as_switch_vertices_with_rails() {
    let options = NcclImportOptions {
        nodes: 2,
        ..Default::default()
    };
    let imported = parse(&nvswitch_dump(), "dump.xml", &options).unwrap();
    assert!(imported.warnings.is_empty(), "{:?}", imported.warnings);
    let t = &imported.topology;
    assert_eq!(t.npus(), 8);
    // One NVSwitch vertex per node (the six NVSwitch devices are one fabric), then one
    // rail per NIC in use.
    let names: Vec<&str> = t.switches().filter_map(|s| t.switch_name(s)).collect();
    assert_eq!(
        names,
        ["node0.nvswitch", "node1.nvswitch", "rail0", "rail1"]
    );
    // 12 NVLinks x 25 GB/s (sm80) = 300 GB/s up and down, half the 0.7 us on each hop;
    // the direct route inside the node is the NVSwitch's, not the rail's (2 us).
    assert_eq!(route(t, 0, 1), Some((300.0, 0.7)));
    assert_eq!(route(t, 0, 3), Some((300.0, 0.7)));
    assert!(t.link_between(0, 1).is_none());
    // NIC A (GPU 0's bridge) serves GPUs 0 and 3; GPU 1's bridge has none, so it takes
    // the less used of the two, NIC B, which GPU 2's bridge holds. Each GPU gets half of
    // 200000 Mb/s = 25 GB/s on the rail of its NIC; a rail joins that NIC of both nodes.
    for gpu in 0..8 {
        assert_eq!(ports_in(t, gpu), [12.5, 300.0], "GPU {gpu}");
    }
    assert_eq!(route(t, 0, 4), Some((12.5, 2.0)));
    assert_eq!(route(t, 3, 4), Some((12.5, 2.0)));
    assert_eq!(route(t, 1, 6), Some((12.5, 2.0)));
    // GPU 1 of node 1 is on the other rail: only a relay reaches it.
    assert_eq!(route(t, 0, 5), None);
    assert_eq!(imported.gpu_busids[3], "0000:4c:00.0");
    // The topology records the NICs themselves for NCCL's search: two of 25 GB/s a node.
    let nics = t.nics().unwrap();
    assert_eq!((nics.count, nics.gbps, nics.sharp), (2, 25.0, false));
    // A NIC NCCL's dump marks `coll="1"` reduces in the network (SHARP): CollNet may run.
    let sharp = nvswitch_dump().replacen("speed=\"200000\"", "speed=\"200000\" coll=\"1\"", 1);
    let with_sharp = parse(&sharp, "dump.xml", &options).unwrap().topology;
    assert!(with_sharp.nics().unwrap().sharp);
    // One node has no network, so no NICs in use.
    let one = parse(&nvswitch_dump(), "dump.xml", &NcclImportOptions::default()).unwrap();
    assert_eq!(one.topology.nics(), None);
}

/// A Hopper node's NVSwitch sums and multicasts inside itself (NVLS); an A100 node's does
/// not, nor do rails.
#[test]
fn hopper_nvswitches_import_as_reducing_switches() {
    let options = NcclImportOptions {
        nodes: 2,
        ..Default::default()
    };
    let reducing = |sm: &str| {
        let t = parse(&nvswitch_dump_of(sm), "dump.xml", &options)
            .unwrap()
            .topology;
        let names: Vec<String> = t
            .reducing_switches()
            .iter()
            .map(|&s| t.switch_name(s).unwrap().to_string())
            .collect();
        names
    };
    assert_eq!(reducing("90"), ["node0.nvswitch", "node1.nvswitch"]);
    assert!(reducing("80").is_empty());
}

#[test]
fn direct_nvlinks_keep_their_counts() {
    // Three sm70 GPUs: 0-1 with two NVLinks, 1-2 with one, 0-2 none.
    let gpu = |bus: &str, dev: usize, links: &[(&str, u32)]| {
        let l: String = links
            .iter()
            .map(|(t, c)| format!("<nvlink target=\"{t}\" count=\"{c}\"/>"))
            .collect();
        format!(
            "<pci busid=\"{bus}\" class=\"0x030200\"><gpu dev=\"{dev}\" sm=\"70\">{l}</gpu></pci>"
        )
    };
    let xml = format!(
        "<system version=\"1\"><cpu numaid=\"0\">{}{}{}</cpu></system>",
        gpu("0000:01:00.0", 0, &[("0000:02:00.0", 2)]),
        gpu(
            "0000:02:00.0",
            1,
            &[("0000:01:00.0", 2), ("0000:03:00.0", 1)]
        ),
        gpu("0000:03:00.0", 2, &[("0000:02:00.0", 1)]),
    );
    let t = parse(&xml, "v100.xml", &NcclImportOptions::default())
        .unwrap()
        .topology;
    let bw = |a, b| t.link(t.link_between(a, b).unwrap()).bandwidth_gbps;
    assert_eq!((bw(0, 1), bw(1, 0), bw(1, 2)), (50.0, 50.0, 25.0));
    assert!(t.link_between(0, 2).is_none());
}

#[test]
fn partial_cloud_files_import_with_warnings_naming_the_options() {
    let Some(corpus) = common::corpus("nccl-topo") else {
        return;
    };
    let path = corpus.join("ndv4-topo.xml").display().to_string();
    let pcie = read(path.as_ref(), &NcclImportOptions::default()).unwrap();
    let t = &pcie.topology;
    assert_eq!(t.npus(), 8);
    assert_eq!(pcie.warnings.len(), 1);
    assert!(pcie.warnings[0].contains("no NVLinks") && pcie.warnings[0].contains("nvswitch="));
    // The file's eight GPUs at 16 GT/s x 16 lanes, 128b/130b: 31.5 GB/s each into one
    // PCIe switch vertex, which every GPU-to-GPU route crosses.
    let pcie_gbps = 16.0 * 16.0 * 128.0 / 130.0 / 8.0;
    assert_eq!(t.switch_name(8), Some("node0.pcie"));
    assert_eq!(t.vertices(), 9);
    for gpu in 0..8 {
        assert_eq!(ports_in(t, gpu), [pcie_gbps], "GPU {gpu}");
    }
    assert_eq!(route(t, 0, 7), Some((pcie_gbps, 1.0)));
}

/// Azure NDv4 by hand from the file: 8 GPUs (class 0x0302), two under each of four PCIe
/// bridges with two NICs (class 0x0207) each, so every GPU has a NIC of its own. Two
/// nodes with nvswitch=300 and nic=25: 16 GPUs, 2 NVSwitch vertices and 8 rails (one per
/// NIC), and every GPU has a 300 GB/s NVSwitch port and a 25 GB/s rail port.
#[test]
fn ndv4_imports_as_two_nvswitch_nodes_on_eight_rails() {
    let Some(corpus) = common::corpus("nccl-topo") else {
        return;
    };
    let spec = format!(
        "nccl:{},nodes=2,nvswitch=300,nic=25",
        corpus.join("ndv4-topo.xml").display()
    );
    let (t, warnings) = parse_spec_with_warnings(&spec, &SpecDefaults::default()).unwrap();
    assert!(
        warnings.iter().any(|w| w.contains("nvswitch= option")),
        "{warnings:?}"
    );
    assert_eq!(t.npus(), 16);
    assert_eq!(t.switches().len(), 10);
    let rails = t
        .switches()
        .filter(|&s| t.switch_name(s).unwrap().starts_with("rail"))
        .count();
    assert_eq!(rails, 8);
    for gpu in 0..16 {
        assert_eq!(ports_in(&t, gpu), [25.0, 300.0], "GPU {gpu}");
    }
    // Rank i of each node shares rail i (numbered by the first GPU using it); the other
    // node's other GPUs are a relay away.
    for gpu in 0..8 {
        assert_eq!(route(&t, gpu, gpu + 8), Some((25.0, 2.0)), "GPU {gpu}");
        assert_eq!(route(&t, gpu, (gpu + 1) % 8 + 8), None, "GPU {gpu}");
    }
    assert_eq!(route(&t, 0, 1), Some((300.0, 0.7)));
    let nics = t.nics().unwrap();
    assert_eq!((nics.count, nics.gbps), (8, 25.0));
}

#[test]
fn one_nic_for_a_whole_node_is_one_rail_shared_by_its_gpus() {
    let Some(corpus) = common::corpus("nccl-topo") else {
        return;
    };
    // NDv2: one NIC (no speed given) for eight GPUs.
    let (t, warnings) = parse_spec_with_warnings(
        &format!("nccl:{}/ndv2-topo.xml,nodes=2", corpus.display()),
        &SpecDefaults::default(),
    )
    .unwrap();
    assert!(
        warnings.iter().any(|w| w.contains("NIC speeds missing")),
        "{warnings:?}"
    );
    let names: Vec<&str> = t.switches().filter_map(|s| t.switch_name(s)).collect();
    assert_eq!(names, ["node0.pcie", "node1.pcie", "rail0"]);
    assert_eq!(route(&t, 3, 11), Some((25.0 / 8.0, 2.0)));
    assert_eq!(route(&t, 3, 12), Some((25.0 / 8.0, 2.0)));
    // NCCL's search sees the one NIC at its whole speed.
    let nics = t.nics().unwrap();
    assert_eq!((nics.count, nics.gbps), (1, 25.0));
}

#[test]
fn a_file_without_nics_gets_one_network_switch_and_says_so() {
    let xml = "<system version=\"1\"><cpu numaid=\"0\"><pci busid=\"0000:01:00.0\" class=\"0x030200\"/><pci busid=\"0000:02:00.0\" class=\"0x030200\"/></cpu></system>";
    let options = NcclImportOptions {
        nodes: 3,
        nic_gbps: Some(50.0),
        ..Default::default()
    };
    let imported = parse(xml, "bare.xml", &options).unwrap();
    assert!(
        imported
            .warnings
            .iter()
            .any(|w| w.contains("no rails can be told apart") && w.contains("50 GB/s")),
        "{:?}",
        imported.warnings
    );
    let t = &imported.topology;
    let network = t.vertices() - 1;
    assert_eq!(t.switch_name(network), Some("network"));
    // Any GPU reaches any GPU of another node through the one switch.
    assert_eq!(route(t, 0, 5), Some((50.0, 2.0)));
    assert_eq!(t.in_links(network).len(), 6);
    // No NICs to record: each GPU is taken to have its own.
    assert_eq!(t.nics(), None);
}

#[test]
fn bad_files_say_what_is_wrong() {
    let o = NcclImportOptions::default();
    let e = parse("<topology/>", "x.xml", &o).unwrap_err().to_string();
    assert!(e.contains("expected <system>"), "{e}");
    let e = parse("<system><cpu/></system>", "x.xml", &o)
        .unwrap_err()
        .to_string();
    assert!(e.contains("no GPU found"), "{e}");
    let e = parse(
        "<system>\n<pci busid=\"1\" class=\"0x0302\"><gpu sm=\"eighty\"/></pci></system>",
        "x.xml",
        &o,
    );
    match e {
        Err(Error::Invalid {
            input,
            value,
            allowed,
        }) => {
            // The <gpu> opens on line 2 at column 31 (1-based) of the text above.
            assert_eq!(input, "x.xml:2:31: <gpu> attribute sm");
            assert_eq!((value.as_str(), allowed.as_str()), ("eighty", "a number"));
        }
        other => panic!("{other:?}"),
    }
    let e = parse("<system><cpu>", "x.xml", &o).unwrap_err().to_string();
    assert!(e.contains("x.xml:1:"), "{e}");
    let missing = read("no-such.xml".as_ref(), &o).unwrap_err().to_string();
    assert!(missing.contains("no-such.xml"), "{missing}");
}

#[test]
fn an_nccl_file_without_options_is_one_node() {
    let dir = Path::new(env!("CARGO_TARGET_TMPDIR")).join("nccl-no-options");
    std::fs::create_dir_all(&dir).unwrap();
    let file = dir.join("dump.xml");
    std::fs::write(&file, nvswitch_dump()).unwrap();
    let spec = |tail: &str| {
        parse_spec_with_warnings(
            &format!("nccl:{}{tail}", file.display()),
            &SpecDefaults::default(),
        )
        .unwrap_or_else(|e| panic!("nccl:...{tail}: {e}"))
    };
    let (bare, warnings) = spec("");
    let (one_node, _) = spec(",nodes=1");
    assert!(warnings.is_empty(), "{warnings:?}");
    // The file's four GPUs and nothing else: no second node.
    assert_eq!(bare.npus(), 4);
    assert_eq!(bare, one_node);
    // The bare path, ending in .xml, reads the same.
    let (path_only, _) =
        parse_spec_with_warnings(&file.display().to_string(), &SpecDefaults::default()).unwrap();
    assert_eq!(path_only, one_node);
}

/// Files whose GPUs contradict each other were imported as if they did not: two GPUs with
/// one bus id, an NVLink to a GPU the file does not have (dropped without a word). Each
/// is refused, naming the element by line and column.
#[test]
fn inconsistent_files_are_refused_naming_the_element() {
    let o = NcclImportOptions::default();
    let gpu = |bus: &str, dev: usize, links: &str| {
        format!("<pci busid=\"{bus}\" class=\"0x030200\"><gpu dev=\"{dev}\" sm=\"80\">{links}</gpu></pci>\n")
    };
    let file = |gpus: &[String]| {
        format!(
            "<system version=\"1\">\n<cpu numaid=\"0\">\n{}</cpu></system>",
            gpus.concat()
        )
    };
    let link = |target: &str, tclass: Option<&str>| match tclass {
        Some(c) => format!("<nvlink target=\"{target}\" count=\"2\" tclass=\"{c}\"/>"),
        None => format!("<nvlink target=\"{target}\" count=\"2\"/>"),
    };
    for (xml, wanted) in [
        (
            file(&[gpu("0000:01:00.0", 0, ""), gpu("0000:01:00.0", 1, "")]),
            "x.xml:4:1: GPU <pci busid=\"0000:01:00.0\"> has the bus id of the GPU at x.xml:3:1",
        ),
        (
            file(&[gpu("0000:01:00.0", 0, ""), gpu("0000:02:00.0", 0, "")]),
            "x.xml:4:1: GPU <gpu dev=\"0\"> has the device number of the GPU at x.xml:3:1",
        ),
        (
            file(&[
                gpu("0000:01:00.0", 0, &link("0000:09:00.0", Some("0x030200"))),
                gpu("0000:02:00.0", 1, ""),
            ]),
            "<nvlink target=\"0000:09:00.0\"> of the GPU at x.xml:3:1 is a GPU by its tclass, but the file lists no GPU",
        ),
        (
            file(&[
                gpu("0000:01:00.0", 0, &link("0000:09:00.0", None)),
                gpu("0000:02:00.0", 1, ""),
            ]),
            "names a bus id the file lists nowhere",
        ),
        (
            file(&[
                gpu("0000:01:00.0", 0, &link("0000:01:00.0", None)),
                gpu("0000:02:00.0", 1, ""),
            ]),
            "leads back to its own GPU",
        ),
    ] {
        let e = parse(&xml, "x.xml", &o).unwrap_err().to_string();
        assert!(e.contains(wanted), "{e}\n{xml}");
    }
    // NVLinks to an NVSwitch or a CPU said by their class, or to a listed device, are kept
    // or passed over as before.
    let fine = file(&[
        gpu(
            "0000:01:00.0",
            0,
            &(link("0000:c0:00.0", Some("0x068000")) + &link("0000:02:00.0", None)),
        ),
        gpu("0000:02:00.0", 1, &link("0000:01:00.0", None)),
    ]);
    parse(&fine, "x.xml", &o).unwrap();
}
