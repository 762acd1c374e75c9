//! Every number that enters through a topology spec, a topology JSON file, an NCCL topology
//! XML, a size or an NPU list is checked against its documented range before use: inputs
//! that once panicked, aborted on an allocation or saturated now end in a typed error that
//! names the input. Expected counts are worked out by hand from the shapes.

mod common;

use common::tacos;
use tacos::collective::{Collective, CollectiveKind};
use tacos::topology::nccl_xml::{parse as parse_nccl, NcclImportOptions};
use tacos::topology::{file, parse_spec, SpecDefaults, MAX_LINKS, MAX_NPUS};
use tacos::units::MAX_SIZE_BYTES;
use tacos::Error;

fn spec_error(spec: &str) -> Error {
    match parse_spec(spec, &SpecDefaults::default()) {
        Ok(t) => panic!("{spec} built {} NPUs", t.npus()),
        Err(e) => e,
    }
}

fn json_error(text: &str) -> Error {
    match file::parse(text, "t.json", &SpecDefaults::default()) {
        Ok(_) => panic!("{text} should be refused"),
        Err(e) => e,
    }
}

/// (what, value) of a `Limit` whose limit is the one for `what`.
fn limit(e: Error) -> (&'static str, u64) {
    match e {
        Error::Limit {
            what, value, limit, ..
        } => {
            let expected = match what {
                "NPUs" => MAX_NPUS,
                "links" => MAX_LINKS,
                other => panic!("limit on {other}"),
            };
            assert_eq!(limit, expected as u64, "{what}");
            (what, value)
        }
        other => panic!("not a Limit: {other:?}"),
    }
}

/// (input, value, allowed) of an `Invalid`.
fn invalid(e: Error) -> (String, String, String) {
    match e {
        Error::Invalid {
            input,
            value,
            allowed,
        } => (input, value, allowed),
        other => panic!("not Invalid: {other:?}"),
    }
}

#[test]
fn json_npu_counts_past_the_limit_are_refused_before_allocating() {
    // 2^64-1 once overflowed `npus + 1`; 10^9 once allocated 8 GB per table.
    let text = |n: &str| format!(r#"{{"npus": {n}, "links": []}}"#);
    assert_eq!(
        limit(json_error(&text("18446744073709551615"))),
        ("NPUs", u64::MAX)
    );
    assert_eq!(
        limit(json_error(&text("1000000000"))),
        ("NPUs", 1_000_000_000)
    );
    let (input, value, _) = invalid(json_error(&text("0")));
    assert_eq!((input.as_str(), value.as_str()), ("t.json: npus", "0"));
}

#[test]
fn link_counts_are_estimated_from_the_spec_before_building() {
    // fc:N and switch:N,d=N-1 (unwound) have N(N-1) links: 100000 x 99999.
    assert_eq!(limit(spec_error("fc:100000")), ("links", 9_999_900_000));
    assert_eq!(
        limit(spec_error("switch:100000,d=99999")),
        ("links", 9_999_900_000)
    );
    // The count is exact at the limit: 5794 x 5793 = 33,564,642 > 2^25 = 33,554,432.
    assert_eq!(limit(spec_error("fc:5794")), ("links", 33_564_642));
    // A leaf-spine fabric: 80000 NPUs' ports (up and down) and 10000 leaves linked up
    // and down to each of 2000 spines.
    assert_eq!(
        limit(spec_error("clos:8x10000,spine=2000")),
        ("links", 2 * 80_000 + 2 * 10_000 * 2000)
    );
    // hypercube:21: 2^21 NPUs of 21 links each.
    assert_eq!(limit(spec_error("hypercube:21")), ("links", 21 << 21));
    // dragonfly:PxG: G P(P-1) local links and G(G-1) global ones; 4000 x 4000 NPUs
    // would fit the NPU limit (16e6 < 2^24), their links do not.
    assert_eq!(
        limit(spec_error("dragonfly:4000x4000")),
        ("links", 4000 * 4000 * 3999 + 4000 * 3999)
    );
}

#[test]
fn shapes_whose_product_overflows_are_refused_not_wrapped() {
    let huge = "18446744073709551615";
    assert_eq!(
        limit(spec_error(&format!("mesh:{huge}x{huge}"))),
        ("NPUs", u64::MAX)
    );
    assert_eq!(
        limit(spec_error(&format!("dragonfly:{huge}x2"))),
        ("NPUs", u64::MAX)
    );
}

#[test]
fn spec_bandwidths_and_latencies_must_be_physical() {
    for (spec, key) in [
        ("ring:4,bw=1e-12", "bw="),
        ("ring:4,bw=2e6", "bw="),
        ("ring:4,bw=inf", "bw="),
        ("ring:4,bw=NaN", "bw="),
        ("ring:4,lat=1e300", "lat="),
        ("mesh:2x2,lat=0:1e7", "lat="),
        ("nccl:x.xml,nic=1e-9", "nic="),
    ] {
        let (input, _, allowed) = invalid(spec_error(spec));
        assert_eq!(input, format!("{key} in '{spec}'"));
        assert!(allowed.contains("1000000"), "{spec}: {allowed}");
    }
    // The range's ends are taken.
    let t = parse_spec("ring:4,bw=0.001,lat=1000000", &SpecDefaults::default()).unwrap();
    assert_eq!(t.links()[0].bandwidth_gbps, 1e-3);
}

#[test]
fn bandwidths_a_builder_derives_are_checked_too() {
    // An unwound switch splits bw= over d links: 0.05 / 99 GB/s is below 0.001.
    let (input, _, _) = invalid(spec_error("switch:100,d=99,bw=0.05"));
    assert!(input.contains("bandwidth_gbps"), "{input}");
}

#[test]
fn defaults_out_of_range_are_refused_whatever_the_spec() {
    let tiny = SpecDefaults {
        bandwidth_gbps: 1e-9,
        latency_us: 0.5,
    };
    let (input, ..) = invalid(parse_spec("ring:4,bw=10", &tiny).unwrap_err());
    assert_eq!(input, "default link bandwidth");
}

#[test]
fn json_figures_must_be_physical() {
    let (input, value, _) = invalid(json_error(
        r#"{"npus": 2, "links": [{"src": 0, "dst": 1, "bandwidth_gbps": 1e-9}]}"#,
    ));
    assert_eq!(input, "t.json: links[0] (0->1) bandwidth_gbps");
    assert_eq!(value, "1e-9");
    let (input, ..) = invalid(json_error(
        r#"{"npus": 2, "latency_us": 1e300, "links": [{"src": 0, "dst": 1}]}"#,
    ));
    assert_eq!(input, "t.json: latency_us");
}

/// Two sm80 GPUs over PCIe with no NVLinks; `pci` attributes go on both.
fn two_gpus(pci: &str, nic: &str) -> String {
    let gpu = |bus: &str, dev: usize| {
        format!(
            "<pci busid=\"{bus}\" class=\"0x030200\" {pci}><gpu dev=\"{dev}\" sm=\"80\"/></pci>"
        )
    };
    format!(
        "<system version=\"1\"><cpu numaid=\"0\">{}{}{nic}</cpu></system>",
        gpu("0000:01:00.0", 0),
        gpu("0000:02:00.0", 1)
    )
}

fn nccl_error(xml: &str, nodes: usize) -> Error {
    let options = NcclImportOptions {
        nodes,
        ..Default::default()
    };
    match parse_nccl(xml, "x.xml", &options) {
        Ok(i) => panic!("imported {} NPUs", i.topology.npus()),
        Err(e) => e,
    }
}

#[test]
fn nccl_attributes_out_of_range_name_the_element() {
    for speed in ["1e-300", "1e300", "NaN"] {
        let xml = two_gpus(
            &format!("link_speed=\"{speed} GT/s\" link_width=\"16\""),
            "",
        );
        let (input, ..) = invalid(nccl_error(&xml, 1));
        assert!(
            input.starts_with("x.xml:1:") && input.contains("<pci> attribute link_speed"),
            "{input}"
        );
    }
    let nvlinks = two_gpus("", "").replace(
        "<gpu dev=\"0\" sm=\"80\"/>",
        "<gpu dev=\"0\" sm=\"80\"><nvlink target=\"0000:02:00.0\" count=\"4000000000\"/></gpu>",
    );
    let (input, value, _) = invalid(nccl_error(&nvlinks, 1));
    assert!(input.contains("<nvlink> attribute count"), "{input}");
    assert_eq!(value, "4000000000");
    let slow_nic = two_gpus(
        "",
        "<pci busid=\"0000:03:00.0\" class=\"0x020700\"><nic><net speed=\"1e-300\"/></nic></pci>",
    );
    let (input, ..) = invalid(nccl_error(&slow_nic, 2));
    assert!(input.contains("<net> attribute speed"), "{input}");
}

#[test]
fn nccl_nodes_are_checked_before_the_nodes_are_built() {
    // 2 GPUs per node on a PCIe switch vertex (2 x 2 links) and on the one network switch
    // (no NIC listed, 2 x 2 links): 8 links and 3 vertices a node, plus the network.
    let xml = two_gpus("", "");
    let options = NcclImportOptions {
        nodes: 1000,
        ..Default::default()
    };
    let t = parse_nccl(&xml, "x.xml", &options).unwrap().topology;
    assert_eq!((t.vertices(), t.links().len()), (3 * 1000 + 1, 8 * 1000));
    // 5,000,000 nodes: 15,000,001 vertices are allowed, 40,000,000 links are not.
    assert_eq!(limit(nccl_error(&xml, 5_000_000)), ("links", 40_000_000));
    assert_eq!(limit(nccl_error(&xml, 10_000_000)), ("NPUs", 20_000_000));
}

#[test]
fn collective_sizes_stop_at_one_tebibyte() {
    let t = parse_spec("ring:2", &SpecDefaults::default()).unwrap();
    let of = |size| Collective::over_all(&t, CollectiveKind::AllGather, None, 1, size);
    assert!(of(MAX_SIZE_BYTES).is_ok());
    for size in [MAX_SIZE_BYTES + 1, 1 << 63, u64::MAX] {
        let (input, value, _) = invalid(of(size).unwrap_err());
        assert_eq!((input.as_str(), value), ("size", size.to_string()));
    }
}

#[test]
fn echoed_spec_text_has_no_control_characters() {
    let e = spec_error("ring:4,bw=\u{1b}[31m").to_string();
    assert!(!e.contains('\u{1b}'), "{e}");
    let e = spec_error("ring:4\u{1b}]0;x\u{7},bw=1e-12").to_string();
    assert!(!e.contains('\u{1b}') && !e.contains('\u{7}'), "{e}");
}

/// The first line of what a failing command prints, checked to be no panic.
fn cli_error(args: &[&str]) -> String {
    let (ok, _, err) = tacos(args);
    assert!(!ok, "{args:?} should fail");
    assert!(!err.contains("panicked"), "{args:?} panicked: {err}");
    err.lines().next().unwrap_or_default().to_string()
}

#[test]
fn cli_numbers_out_of_range_name_their_flag() {
    let cases: &[(&[&str], &str)] = &[
        (&["synth", "-s", "10000000000000000000"], "--size"),
        (
            &[
                "simulate",
                "mesh:4x4",
                "--baseline",
                "ring",
                "-s",
                "10000000000000000000",
            ],
            "--size",
        ),
        (&["synth", "--npus", "0-1000000000"], "--npus"),
        (
            &["synth", "--fail-npus", "0-18446744073709551615"],
            "--fail-npus",
        ),
        (&["synth", "--bandwidth", "1e-12"], "--bandwidth"),
        (&["synth", "--latency", "1e300"], "--latency"),
        (&["topo", "show", "fc:100000"], "links"),
    ];
    for (args, named) in cases {
        let line = cli_error(args);
        assert!(line.contains(named), "{args:?}: {line}");
    }
}

#[test]
fn chunks_past_the_state_limit_are_refused_and_conditions_take_no_room() {
    // An All-to-All on 2,000 NPUs has 2000^2 chunks; tracked on 2,000 NPUs that is 8e9
    // (NPU, chunk) pairs, past the 2^31 allowed.
    let ring = |n: usize| parse_spec(&format!("ring:{n}"), &SpecDefaults::default()).unwrap();
    let t = ring(2000);
    match Collective::over_all(&t, CollectiveKind::AllToAll, None, 1, 1 << 30) {
        Err(Error::Limit { value, limit, .. }) => {
            assert_eq!((value, limit), (2000 * 2000 * 2000, 1 << 31))
        }
        other => panic!("{other:?}"),
    }
    // An All-Reduce over 20,000 NPUs (4e8 pairs) is built: listed, its conditions would
    // be 8e8 NPU ids; computed, each is the NPU list itself.
    let t = ring(20_000);
    let c = Collective::over_all(&t, CollectiveKind::AllReduce, None, 1, 1 << 30).unwrap();
    assert_eq!(c.chunk_count(), 20_000);
    assert!(std::ptr::eq(c.pre(19_999), c.npus()));
    assert!(std::ptr::eq(c.post(0), c.npus()));
}
