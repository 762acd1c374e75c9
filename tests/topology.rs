//! Builders, presets, transforms, the JSON format and the spec parser, against counts
//! worked out by hand.

use tacos::error::FileFormat;
use tacos::topology::{file, parse_spec, SpecDefaults, Topology};

fn spec(s: &str) -> Topology {
    parse_spec(s, &SpecDefaults::default()).unwrap_or_else(|e| panic!("{s}: {e}"))
}

fn spec_err(s: &str) -> String {
    match parse_spec(s, &SpecDefaults::default()) {
        Ok(_) => panic!("{s} should be rejected"),
        Err(e) => e.to_string(),
    }
}

/// (NPUs, directed links, out-degree range, in-degree range).
fn shape(t: &Topology) -> (usize, usize, (usize, usize), (usize, usize)) {
    let s = t.stats();
    (s.npus, s.links, s.out_degree, s.in_degree)
}

#[test]
fn builders_have_the_hand_counted_shapes() {
    // Rings: n links each way; a unidirectional ring has one out and one in link each.
    assert_eq!(shape(&spec("ring:8")), (8, 16, (2, 2), (2, 2)));
    assert_eq!(shape(&spec("uniring:8")), (8, 8, (1, 1), (1, 1)));
    // A ring of two is one link each way.
    assert_eq!(shape(&spec("ring:2")), (2, 2, (1, 1), (1, 1)));
    // Fully connected: n(n-1).
    assert_eq!(shape(&spec("fc:8")), (8, 56, (7, 7), (7, 7)));
    // Switch unwound with d=2: 2 links out of each NPU.
    assert_eq!(shape(&spec("switch:8,d=2")), (8, 16, (2, 2), (2, 2)));
    // 4x4 mesh: 2 rows-or-columns directions x 4 lines x 3 edges x 2 directions.
    assert_eq!(shape(&spec("mesh:4x4")), (16, 48, (2, 4), (2, 4)));
    assert_eq!(shape(&spec("torus:8x8")), (64, 256, (4, 4), (4, 4)));
    // 4x4x4 mesh: 3 directions x 16 lines x 3 edges x 2.
    assert_eq!(shape(&spec("mesh:4x4x4")), (64, 288, (3, 6), (3, 6)));
    assert_eq!(shape(&spec("torus:4x4x4")), (64, 384, (6, 6), (6, 6)));
    // A torus dimension of 2 is a single link each way: degree 1 + 2.
    assert_eq!(shape(&spec("torus:2x4")), (8, 24, (3, 3), (3, 3)));
    assert_eq!(shape(&spec("hypercube:4")), (16, 64, (4, 4), (4, 4)));
    // Dragonfly 4x5: 5 groups of 4 fully connected (5 x 12) plus 10 group pairs x 2
    // directions; every NPU carries exactly one of its group's 4 global links.
    assert_eq!(shape(&spec("dragonfly:4x5")), (20, 80, (4, 4), (4, 4)));
    // 3D-RFS 2x4x8: ring of 2 (1 link) + fc of 4 (3) + switch of 8 unwound fully (7).
    assert_eq!(shape(&spec("rfs:2x4x8,d=7")), (64, 704, (11, 11), (11, 11)));
    assert_eq!(
        shape(&spec("multi:R2xF4xS8,d=7")),
        (64, 704, (11, 11), (11, 11))
    );
}

#[test]
fn switch_unwinding_splits_bandwidth_over_degree() {
    let t = spec("switch:8,d=2,bw=50");
    assert!(t
        .links()
        .iter()
        .all(|l| (l.bandwidth_gbps - 25.0).abs() < 1e-12));
    // NPU i links to i+1 and i+2 mod 8.
    assert!(t.link_between(6, 7).is_some() && t.link_between(6, 0).is_some());
    assert!(t.link_between(6, 1).is_none() && t.link_between(7, 6).is_none());
}

#[test]
fn per_dimension_bandwidth_and_latency_apply_to_their_dimension() {
    let t = spec("rfs:2x4x8,bw=200:100:50,lat=0.1:0.2:0.3,d=7");
    // NPU 0's neighbours: 1 in the ring (stride 1), 2 in the fc group (stride 2),
    // 8 in the switch (stride 8).
    let l = |a, b| t.link(t.link_between(a, b).unwrap()).clone();
    assert_eq!((l(0, 1).bandwidth_gbps, l(0, 1).latency_us), (200.0, 0.1));
    assert_eq!((l(0, 2).bandwidth_gbps, l(0, 2).latency_us), (100.0, 0.2));
    assert!((l(0, 8).bandwidth_gbps - 50.0 / 7.0).abs() < 1e-12);
    assert_eq!(l(0, 8).latency_us, 0.3);
    let hetero = spec("multi:L8xL8,bw=100:25");
    assert_eq!(
        hetero
            .link(hetero.link_between(0, 1).unwrap())
            .bandwidth_gbps,
        100.0
    );
    assert_eq!(
        hetero
            .link(hetero.link_between(0, 8).unwrap())
            .bandwidth_gbps,
        25.0
    );
}

#[test]
fn presets_match_the_machines() {
    let dgx1 = spec("preset:dgx1");
    // Every V100 has 6 NVLinks to 4 peers: 150 GB/s in and out.
    assert_eq!(shape(&dgx1), (8, 32, (4, 4), (4, 4)));
    for npu in 0..8 {
        let out: f64 = dgx1.links()[dgx1.out_links(npu)]
            .iter()
            .map(|l| l.bandwidth_gbps)
            .sum();
        assert_eq!(out, 150.0, "GPU {npu}");
    }
    assert_eq!(
        dgx1.link(dgx1.link_between(0, 3).unwrap()).bandwidth_gbps,
        50.0
    );
    assert!(dgx1.link_between(0, 5).is_none());
    // The NVSwitch presets unwound (the paper's model): each GPU linked to every peer.
    let unwound = |s| spec(s).unwind(None).unwrap();
    assert_eq!(
        shape(&unwound("preset:dgx2")),
        (16, 240, (15, 15), (15, 15))
    );
    // Two DGX A100 nodes: 2 x 56 NVSwitch links plus one rail link per GPU to its twin.
    let cluster = unwound("preset:dgx-a100");
    assert_eq!(shape(&cluster), (16, 128, (8, 8), (8, 8)));
    assert_eq!(
        cluster
            .link(cluster.link_between(3, 11).unwrap())
            .bandwidth_gbps,
        25.0
    );
    assert!(cluster.link_between(3, 12).is_none());
    let four = unwound("preset:dgx-h100,nodes=4");
    assert_eq!(four.npus(), 32);
    // Rails unwound among 4 nodes: 3 peers at 50/3 GB/s each.
    assert!(
        (four.link(four.link_between(0, 8).unwrap()).bandwidth_gbps - 50.0 / 3.0).abs() < 1e-12
    );
}

#[test]
fn failing_npus_and_links_removes_their_links() {
    let mesh = spec("mesh:4x4");
    // NPU 7 (x=3, y=1) has 3 neighbours, NPU 9 (x=1, y=2) has 4: 14 directed links go.
    let failed = mesh.fail_npus(&[7, 9]).unwrap();
    assert_eq!(failed.links().len(), 48 - 14);
    assert_eq!(failed.alive_npus().len(), 14);
    assert!(failed.is_failed(7) && !failed.is_failed(8));
    let cut = mesh.fail_links(&[(0, 1)]).unwrap();
    assert_eq!(cut.links().len(), 46);
    assert!(cut.link_between(1, 0).is_none());
    assert!(mesh
        .fail_links(&[(0, 5)])
        .unwrap_err()
        .to_string()
        .contains("'0-5' must be a pair of NPUs that a link joins"));
    assert!(mesh.fail_npus(&[16]).is_err());
}

#[test]
fn subset_renumbers_the_induced_topology() {
    let ring = spec("ring:8");
    let sub = ring.subset(&[2, 3, 4]).unwrap();
    // 2-3 and 3-4 survive, both directions.
    assert_eq!(shape(&sub), (3, 4, (1, 2), (1, 2)));
    assert!(sub.link_between(0, 1).is_some() && sub.link_between(0, 2).is_none());
    assert!(ring.subset(&[1, 1]).is_err());
}

#[test]
fn json_round_trips_every_builder() {
    for s in [
        "ring:5",
        "switch:8,d=3",
        "torus:4x4x4",
        "dragonfly:4x5,bw=400:200",
        "rfs:2x4x8,bw=200:100:50",
        "preset:dgx1",
        "preset:dgx-a100,nodes=3",
        "preset:dgx-h100,nodes=2,nics=4,sharp=yes",
    ] {
        let t = spec(s);
        let back = file::parse(&file::to_json(&t), "export", &SpecDefaults::default()).unwrap();
        assert_eq!(back, t, "{s}");
        assert_eq!(back.name(), t.name());
        // The NICs NCCL's search sees travel with the links.
        assert_eq!(back.nics(), t.nics(), "{s}");
    }
    let nics = spec("preset:dgx-h100,nodes=2,nics=4,sharp=yes")
        .nics()
        .unwrap();
    assert_eq!((nics.count, nics.gbps, nics.sharp), (4, 50.0, true));
    let none = r#"{"npus": 2, "links": [{"src": 0, "dst": 1}], "nics": {"count": 0, "gbps": 50}}"#;
    let err = file::parse(none, "t.json", &SpecDefaults::default()).unwrap_err();
    assert!(err.to_string().contains("t.json: nics.count"), "{err}");
    let failed = spec("mesh:4x4").fail_npus(&[5]).unwrap();
    let back = file::parse(&file::to_json(&failed), "export", &SpecDefaults::default()).unwrap();
    assert_eq!(back, failed);
}

/// A file names the switches that reduce (NVLS); export keeps the H100 preset's two.
#[test]
fn reducing_switches_in_files() {
    let h100 = spec("preset:dgx-h100,nodes=2");
    let back = file::parse(&file::to_json(&h100), "export", &SpecDefaults::default()).unwrap();
    assert_eq!(back.reducing_switches(), h100.reducing_switches());
    assert_eq!(back.reducing_switches().len(), 2);
    let star = |reducing: &str| {
        format!(
            r#"{{"npus": 2, "switches": ["nvs0"], "reducing_switches": [{reducing}], "links": [
                {{"src": 0, "dst": "nvs0", "bidirectional": true}},
                {{"src": 1, "dst": "nvs0", "bidirectional": true}}]}}"#
        )
    };
    let t = file::parse(&star(r#""nvs0""#), "t.json", &SpecDefaults::default()).unwrap();
    assert!(t.reduces(2) && !t.reduces(0));
    let err = file::parse(&star(r#""nvs1""#), "t.json", &SpecDefaults::default()).unwrap_err();
    assert!(err.to_string().contains("reducing_switches[0]"), "{err}");
}

#[test]
fn json_defaults_and_bidirectional_links() {
    let text = r#"{
        "npus": 3,
        "latency_us": 1.0,
        "links": [
            {"src": 0, "dst": 1, "bidirectional": true},
            {"src": 1, "dst": 2, "bandwidth_gbps": 100}
        ]
    }"#;
    let defaults = SpecDefaults {
        bandwidth_gbps: 10.0,
        latency_us: 0.5,
    };
    let t = file::parse(text, "t.json", &defaults).unwrap();
    assert_eq!(t.links().len(), 3);
    let l = |a, b| t.link(t.link_between(a, b).unwrap()).clone();
    assert_eq!((l(1, 0).bandwidth_gbps, l(1, 0).latency_us), (10.0, 1.0));
    assert_eq!((l(1, 2).bandwidth_gbps, l(1, 2).latency_us), (100.0, 1.0));
}

#[test]
fn malformed_json_names_file_line_and_field() {
    let d = SpecDefaults::default();
    let err = |text: &str| file::parse(text, "t.json", &d).unwrap_err().to_string();
    // Where the problem is, as fields a program can read.
    let in_file = |text: &str| match file::parse(text, "t.json", &d).unwrap_err() {
        tacos::Error::File {
            format: FileFormat::Topology,
            problem,
        } => *problem,
        other => panic!("not a topology file's problem: {other}"),
    };
    let p = in_file("{\n  \"npus\": 2,\n  \"links\": [{\"src\": 0, \"dst\": 1, \"bandwidth_gbps\": \"fast\"}]\n}");
    assert_eq!(
        (p.file.as_str(), p.line, p.field.as_deref()),
        ("t.json", Some(3), Some("links[0].bandwidth_gbps")),
        "{p}"
    );
    let e = err(r#"{"npus": 2, "links": [{"src": 0, "dst": 1, "bandwith_gbps": 5}]}"#);
    assert!(e.contains("unknown field `bandwith_gbps`"), "{e}");
    let e = err(r#"{"npus": 2, "links": [{"src": 0, "dst": 2}]}"#);
    assert!(
        e.contains("t.json: links[0] (0->2) NPU: '2' must be an NPU of the topology, 0..1"),
        "{e}"
    );
    let e = err(r#"{"npus": 2, "links": [{"src": 0, "dst": 1, "bandwidth_gbps": 0}]}"#);
    assert!(
        e.contains("links[0] (0->1) bandwidth_gbps: '0' must be a positive number of GB/s"),
        "{e}"
    );
    let p = in_file(
        r#"{"npus": 2, "links": [{"src": 0, "dst": 1, "bidirectional": true}, {"src": 1, "dst": 0}]}"#,
    );
    assert_eq!(p.field.as_deref(), Some("links[1]"), "{p}");
    assert!(
        p.problem.contains("repeats the link 1->0 of links[0]"),
        "{p}"
    );
    let e = err(r#"{"npus": 2, "links": [}"#);
    assert!(e.starts_with("topology spec: t.json:1:"), "{e}");
}

#[test]
fn bad_specs_say_what_is_allowed() {
    assert!(spec_err("blob:4").contains("unknown builder 'blob'"));
    assert!(spec_err("ring:0").contains("whole number >= 1"));
    assert!(spec_err("ring:-3").contains("whole number >= 1"));
    assert!(spec_err("mesh:4").contains("2D (AxB) or 3D"));
    assert!(spec_err("ring:4,bw=-2").contains("positive numbers"));
    assert!(spec_err("ring:4,lat=x").contains("non-negative"));
    assert!(spec_err("ring:4,d=2").contains("'d=' must be one of those that apply here: bw=, lat="));
    assert!(spec_err("ring:4,colour=red").contains("unknown option"));
    assert!(
        spec_err("rfs:2x4x8,bw=1:2").contains("'1:2' must be one value, or one per dimension (3")
    );
    assert!(spec_err("preset:dgx9").contains("unknown preset"));
    assert!(spec_err("preset:dgx1,nodes=2").contains("one node"));
    assert!(spec_err("multi:Q4xR2").contains("must be a letter"));
    assert!(spec_err("missing-file.json").contains("missing-file.json"));
}
