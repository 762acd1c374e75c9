//! NCCL topology XML import: full dumps with NVLinks and NICs, and the partial files cloud
//! images ship, whose missing figures come from options with a warning.

mod common;

use std::path::Path;
use tacos::topology::nccl_xml::{parse, read, NcclImportOptions};
use tacos::topology::{parse_spec_with_warnings, SpecDefaults};
use tacos::Error;

/// Four sm80 GPUs, each with 12 NVLinks into NVSwitches (2 per switch over 6 switches, as
/// NCCL dumps them), and two 200 Gb/s NICs shared by GPU pairs.
fn nvswitch_dump() -> String {
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
            "<pci busid=\"ffff:0{i}:00.0\" class=\"0x060400\"><pci busid=\"{bus}\" class=\"0x030200\" link_speed=\"16.0 GT/s PCIe\" link_width=\"16\"><gpu dev=\"{i}\" sm=\"80\" rank=\"{i}\">{links}</gpu></pci>{nic}</pci>"
        ));
    }
    format!("<system version=\"1\"><cpu numaid=\"0\">{gpus}</cpu></system>")
}

#[test]
fn nvswitch_dumps_import_as_unwound_switches_with_their_nics() {
    let options = NcclImportOptions {
        nodes: 2,
        ..Default::default()
    };
    let imported = parse(&nvswitch_dump(), "dump.xml", &options).unwrap();
    assert!(imported.warnings.is_empty(), "{:?}", imported.warnings);
    let t = &imported.topology;
    assert_eq!(t.npus(), 8);
    // 12 NVLinks x 25 GB/s = 300 GB/s per GPU over 3 peers.
    let bw = |a, b| t.link(t.link_between(a, b).unwrap()).bandwidth_gbps;
    assert_eq!(bw(0, 1), 100.0);
    // Two 25 GB/s NICs (200000 Mb/s) under the bridges of GPUs 0 and 2, each shared by two
    // GPUs: 12.5 GB/s per GPU, and with 2 nodes each GPU reaches its twin only.
    assert_eq!(bw(0, 4), 12.5);
    assert_eq!(bw(1, 5), 12.5);
    assert!(t.link_between(0, 5).is_none());
    assert_eq!(imported.gpu_busids[3], "0000:4c:00.0");
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
    assert_eq!(pcie.topology.npus(), 8);
    assert_eq!(pcie.warnings.len(), 1);
    assert!(pcie.warnings[0].contains("no NVLinks") && pcie.warnings[0].contains("nvswitch="));
    // 16 GT/s x 16 lanes, 128b/130b: 31.5 GB/s per GPU over 7 peers.
    let l = pcie
        .topology
        .link(pcie.topology.link_between(0, 1).unwrap());
    assert!((l.bandwidth_gbps - 16.0 * 16.0 * 128.0 / 130.0 / 8.0 / 7.0).abs() < 1e-9);

    let spec = format!("nccl:{path},nodes=2,nvswitch=300,nic=25");
    let (t, warnings) = parse_spec_with_warnings(&spec, &SpecDefaults::default()).unwrap();
    assert_eq!(t.npus(), 16);
    assert!(
        warnings.iter().any(|w| w.contains("nvswitch= option")),
        "{warnings:?}"
    );
    // NDv4: one NIC per GPU, so every GPU keeps a whole 25 GB/s rail.
    assert_eq!(t.link(t.link_between(0, 8).unwrap()).bandwidth_gbps, 25.0);

    // NDv2: one NIC for eight GPUs.
    let (t, warnings) = parse_spec_with_warnings(
        &format!("nccl:{}/ndv2-topo.xml,nodes=2", corpus.display()),
        &SpecDefaults::default(),
    )
    .unwrap();
    assert!(
        warnings.iter().any(|w| w.contains("NIC speeds missing")),
        "{warnings:?}"
    );
    assert_eq!(
        t.link(t.link_between(3, 11).unwrap()).bandwidth_gbps,
        25.0 / 8.0
    );
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
