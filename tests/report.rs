//! `tacos report`: the page is well-formed XHTML (read back with quick-xml) and what it
//! draws matches the figures it draws: the link loads the library's simulation gives, on
//! the page's one colour scale; the bound where the picture's own axis puts its time;
//! failed NPUs and links marked; a compiled set's band edges where its sizes lie.

use quick_xml::events::Event;
use quick_xml::Reader;
use std::path::{Path, PathBuf};
use std::process::Command;
use tacos::bounds::Bounds;
use tacos::collective::{Collective, CollectiveKind};
use tacos::compile::{compile, write_dir, CompileOptions, Manifest, Placements, SizeRange};
use tacos::schedule::check;
use tacos::sim::{simulate_schedule, SimReport};
use tacos::synth::{synthesize, SynthOptions};
use tacos::topology::{parse_spec, SpecDefaults, Topology};
use tacos::units::parse_size;
use tacos_cli::draw::scale::ColourScale;

/// One element of the page: its name, attributes, own text and children.
#[derive(Debug, Default)]
struct El {
    name: String,
    attrs: Vec<(String, String)>,
    text: String,
    children: Vec<El>,
}

impl El {
    fn attr(&self, key: &str) -> Option<&str> {
        self.attrs
            .iter()
            .find(|(k, _)| k == key)
            .map(|(_, v)| v.as_str())
    }

    fn num(&self, key: &str) -> f64 {
        self.attr(key).unwrap().parse().unwrap()
    }

    fn class(&self) -> &str {
        self.attr("class").unwrap_or("")
    }

    /// Every element below this one (and itself), depth first.
    fn all(&self) -> Vec<&El> {
        let mut out = vec![self];
        for c in &self.children {
            out.extend(c.all());
        }
        out
    }

    /// Elements below with this class.
    fn with_class(&self, class: &str) -> Vec<&El> {
        self.all()
            .into_iter()
            .filter(|e| e.class() == class)
            .collect()
    }

    /// The text of this element's `<title>` (its hover text).
    fn title(&self) -> &str {
        self.children
            .iter()
            .find(|c| c.name == "title")
            .map_or("", |t| t.text.as_str())
    }
}

/// Parses `text` as XML with quick-xml; panics where it is not well-formed.
fn parse(text: &str) -> El {
    let mut reader = Reader::from_str(text);
    let mut stack = vec![El::default()];
    let start = |s: &quick_xml::events::BytesStart| El {
        name: String::from_utf8(s.name().as_ref().to_vec()).unwrap(),
        attrs: s
            .attributes()
            .map(|a| {
                let a = a.unwrap();
                let key = String::from_utf8(a.key.as_ref().to_vec()).unwrap();
                let value = a
                    .normalized_value(quick_xml::XmlVersion::default())
                    .unwrap()
                    .into_owned();
                (key, value)
            })
            .collect(),
        ..El::default()
    };
    loop {
        match reader.read_event().unwrap() {
            Event::Start(s) => stack.push(start(&s)),
            Event::Empty(s) => {
                let e = start(&s);
                stack.last_mut().unwrap().children.push(e);
            }
            Event::End(end) => {
                let e = stack.pop().unwrap();
                assert_eq!(end.name().as_ref(), e.name.as_bytes(), "mismatched tags");
                stack.last_mut().unwrap().children.push(e);
            }
            Event::Text(t) => stack
                .last_mut()
                .unwrap()
                .text
                .push_str(std::str::from_utf8(&t).unwrap()),
            Event::GeneralRef(r) => {
                let c = match r.as_ref() {
                    b"amp" => '&',
                    b"lt" => '<',
                    b"gt" => '>',
                    b"quot" => '"',
                    b"apos" => '\'',
                    other => panic!("unknown entity {other:?}"),
                };
                stack.last_mut().unwrap().text.push(c);
            }
            Event::Eof => break,
            _ => {}
        }
    }
    assert_eq!(stack.len(), 1, "unclosed elements");
    let mut doc = stack.pop().unwrap();
    assert_eq!(doc.children.len(), 1, "one root element");
    doc.children.pop().unwrap()
}

fn scratch(name: &str) -> PathBuf {
    let dir = std::env::temp_dir()
        .join(format!("tacos-report-{}", std::process::id()))
        .join(name);
    let _ = std::fs::remove_dir_all(&dir);
    std::fs::create_dir_all(&dir).unwrap();
    dir
}

/// Runs `tacos report ARGS -o DIR/report.html` and returns the page's text.
fn report(dir: &Path, args: &[&str]) -> String {
    let out = dir.join("report.html");
    let run = Command::new(env!("CARGO_BIN_EXE_tacos"))
        .arg("report")
        .args(args)
        .args(["--quiet", "-o", out.to_str().unwrap()])
        .output()
        .unwrap();
    assert!(
        run.status.success(),
        "{}",
        String::from_utf8_lossy(&run.stderr)
    );
    std::fs::read_to_string(out).unwrap()
}

fn error_of(args: &[&str]) -> String {
    let run = Command::new(env!("CARGO_BIN_EXE_tacos"))
        .arg("report")
        .args(args)
        .output()
        .unwrap();
    assert!(!run.status.success());
    String::from_utf8_lossy(&run.stderr).into_owned()
}

fn topo(spec: &str) -> Topology {
    parse_spec(spec, &SpecDefaults::default()).unwrap()
}

/// The page's pictures, in order.
fn svgs(page: &El) -> Vec<&El> {
    page.all().into_iter().filter(|e| e.name == "svg").collect()
}

/// The panels of a load picture.
fn panels(svg: &El) -> Vec<&El> {
    svg.with_class("panel")
}

/// The busy time a link's hover text gives, microseconds.
fn busy_us(link: &El) -> f64 {
    let t = link.title();
    let after = &t[t.find("busy ").unwrap() + 5..];
    after[..after.find(' ').unwrap()].parse().unwrap()
}

/// The pixel the picture's own x axis gives `v`, from two of its ticks (linear between
/// them, or logarithmic), each tick's value read from its label by `value`.
fn tick_map(svg: &El, log: bool, value: impl Fn(&str) -> f64) -> impl Fn(f64) -> f64 {
    let ticks: Vec<(f64, f64)> = svg
        .with_class("tick-x")
        .iter()
        .map(|t| (value(&t.text), t.num("x")))
        .collect();
    assert!(ticks.len() >= 2, "an axis with ticks");
    let ((v0, x0), (v1, x1)) = (ticks[0], ticks[ticks.len() - 1]);
    let f = move |v: f64| if log { v.ln() } else { v };
    move |v| x0 + (f(v) - f(v0)) / (f(v1) - f(v0)) * (x1 - x0)
}

#[test]
fn a_mesh_is_drawn_with_the_loads_the_simulation_gives_on_one_scale() {
    let dir = scratch("mesh");
    // One chunk, one seed and no planned ways, as the library's synthesis below.
    let args = [
        "mesh:3x3",
        "-c",
        "allgather",
        "-s",
        "900KB",
        "-k",
        "1",
        "--seeds",
        "1",
        "--no-plan",
    ];
    let text = report(&dir, &args);
    // Self-contained: nothing run, nothing fetched.
    assert!(text.starts_with("<?xml") && !text.contains("<script"));
    assert!(!text.contains("href") && !text.contains(" src="));
    let page = parse(&text);
    assert_eq!(page.name, "html");
    let loads = svgs(&page)[0];
    // tacos, ring, ring-uni, direct, hierarchical (rhd needs a power of two).
    let panels = panels(loads);
    assert_eq!(panels.len(), 5);
    // The tacos panel's links carry what the library's own synthesis and simulation of
    // this collective put on them.
    let t = topo("mesh:3x3");
    let spec = tacos::collective::CollectiveSpec {
        kind: CollectiveKind::AllGather,
        root: None,
        npus: (0..9).collect(),
        chunks_per_npu: 1,
        size_bytes: 900_000,
    };
    let collective = Collective::new(&t, spec.clone()).unwrap();
    let schedule = synthesize(&t, &collective, &SynthOptions::seeded(0)).unwrap();
    check(&schedule, &t).unwrap();
    let sim = SimReport::new(&t, &spec, &simulate_schedule(&t, &schedule).unwrap());
    let tacos_links = panels[0].with_class("link");
    assert_eq!(tacos_links.len(), t.links().len());
    for (drawn, load) in tacos_links.iter().zip(&sim.links) {
        assert_eq!(
            drawn.attr("data-link").unwrap(),
            format!("{}-{}", load.src, load.dst)
        );
        assert!((busy_us(drawn) - load.busy_ps as f64 / 1e6).abs() < 1e-3);
    }
    // One scale: it ends at the busiest link of any panel, and every link's colour is
    // the scale's colour for its busy time.
    let all: Vec<&El> = panels.iter().flat_map(|p| p.with_class("link")).collect();
    let busiest = all.iter().map(|l| busy_us(l)).fold(0.0, f64::max);
    assert!(busiest > 0.0);
    let scale = ColourScale::shared(panels.iter().map(|p| {
        let links = p.with_class("link");
        links.iter().map(|l| busy_us(l)).fold(0.0, f64::max)
    }));
    let channels = |c: &str| -> Vec<i64> {
        (0..3)
            .map(|i| i64::from_str_radix(&c[1 + 2 * i..3 + 2 * i], 16).unwrap())
            .collect()
    };
    for l in &all {
        let (drawn, expected) = (l.attr("stroke").unwrap(), scale.colour(busy_us(l)));
        // Hover texts round to the nanosecond: at most one step of a channel apart.
        let off = channels(drawn)
            .iter()
            .zip(channels(&expected))
            .map(|(a, b)| (a - b).abs())
            .max()
            .unwrap();
        assert!(off <= 1, "{drawn} vs {expected} for {}", l.title());
    }
    let top: Vec<&&El> = all.iter().filter(|l| busy_us(l) == busiest).collect();
    assert!(top.iter().all(|l| l.attr("stroke") == Some("#fde725")));
    // The same inputs give the same bytes.
    assert_eq!(text, report(&dir, &args));
}

#[test]
fn a_torus_with_failures_marks_failed_npus_and_links() {
    let dir = scratch("torus");
    let text = report(
        &dir,
        &[
            "torus:4x4",
            "--fail-npus",
            "5",
            "--fail-links",
            "0-1",
            "-c",
            "allgather",
            "-s",
            "1MB",
        ],
    );
    let page = parse(&text);
    let panels = panels(svgs(&page)[0]);
    assert!(!panels.is_empty());
    for p in panels {
        let failed: Vec<&str> = p
            .with_class("failed-npu")
            .iter()
            .map(|c| c.attr("data-npu").unwrap())
            .collect();
        assert_eq!(failed, ["5"]);
        assert!(p
            .with_class("npu")
            .iter()
            .all(|c| c.attr("data-npu") != Some("5")));
        // NPU 5's four neighbours both ways, and 0 <-> 1.
        let mut cut: Vec<&str> = p
            .with_class("failed-link")
            .iter()
            .map(|l| l.title())
            .collect();
        cut.sort_unstable();
        assert_eq!(cut.len(), 10, "{cut:?}");
        assert!(cut.contains(&"NPU 0 -> NPU 1: failed") && cut.contains(&"NPU 5 -> NPU 9: failed"));
        // 64 links, less 10.
        assert_eq!(p.with_class("link").len(), 54);
    }
}

#[test]
fn compare_heat_map_draws_the_same_failures() {
    let dir = scratch("heatmap");
    let svg = dir.join("load.svg");
    let run = Command::new(env!("CARGO_BIN_EXE_tacos"))
        .args([
            "compare",
            "mesh:3x3",
            "--fail-npus",
            "4",
            "-s",
            "90KB",
            "--quiet",
        ])
        .args(["--heatmap", svg.to_str().unwrap()])
        .output()
        .unwrap();
    assert!(
        run.status.success(),
        "{}",
        String::from_utf8_lossy(&run.stderr)
    );
    let svg = parse(&std::fs::read_to_string(svg).unwrap());
    let panels = panels(&svg);
    assert!(!panels.is_empty());
    for p in panels {
        // The centre of a 3x3 mesh: four neighbours, both ways.
        assert_eq!(p.with_class("failed-link").len(), 8);
        assert_eq!(p.with_class("failed-npu").len(), 1);
        assert_eq!(p.with_class("link").len(), 24 - 8);
    }
}

#[test]
fn a_fabric_has_its_switches_above_and_the_bound_on_the_timeline() {
    let dir = scratch("fabric");
    let spec = "preset:dgx-a100,nodes=2";
    let text = report(&dir, &[spec, "-c", "allreduce", "-s", "64KiB"]);
    let page = parse(&text);
    let pictures = svgs(&page);
    let panel = panels(pictures[0])[0];
    let npu_y = panel.with_class("npu")[0].num("cy");
    let switches = panel.with_class("switch");
    assert_eq!(switches.len(), 10);
    assert!(switches.iter().all(|s| s.num("y") < npu_y));
    // The bound line sits at the best bound's time on the timeline's own axis.
    let t = topo(spec);
    let collective = Collective::new(
        &t,
        tacos::collective::CollectiveSpec {
            kind: CollectiveKind::AllReduce,
            root: None,
            npus: (0..16).collect(),
            chunks_per_npu: 1,
            size_bytes: 64 << 10,
        },
    )
    .unwrap();
    let bound_us = Bounds::new(&t, &collective).best_ps() as f64 / 1e6;
    let gantt = pictures[1];
    let bound = gantt.with_class("bound");
    assert_eq!(bound.len(), 1);
    let x = tick_map(gantt, false, |s| s.parse().unwrap())(bound_us);
    assert!(
        (bound[0].num("x1") - x).abs() < 0.02,
        "{} vs {x}",
        bound[0].num("x1")
    );
    // All-Reduce's bars are coloured by phase, both phases there.
    let fills: std::collections::BTreeSet<&str> = gantt
        .with_class("held")
        .iter()
        .map(|b| b.attr("fill").unwrap())
        .collect();
    assert_eq!(fills.len(), 2);
}

#[test]
fn a_compiled_set_is_drawn_band_by_band() {
    let dir = scratch("compiled");
    let set_dir = dir.join("set");
    let options = CompileOptions {
        collectives: vec![CollectiveKind::AllReduce, CollectiveKind::AllGather],
        sizes: SizeRange::new(1 << 10, 1 << 20).unwrap(),
        placements: Placements::OutOfPlace,
        seeds: 1,
        chunk_candidates: vec![1, 2],
        ..CompileOptions::default()
    };
    let set = compile(&topo("torus:2x4"), &options, &|_| {}).unwrap();
    write_dir(&set, &set_dir, false).unwrap();
    let manifest = Manifest::read(&set_dir).unwrap();
    let page = parse(&report(&dir, &["--compiled", set_dir.to_str().unwrap()]));
    let charts = svgs(&page);
    assert_eq!(charts.len(), 2);
    for (chart, kind) in charts
        .iter()
        .zip([CollectiveKind::AllReduce, CollectiveKind::AllGather])
    {
        let entries: Vec<_> = manifest
            .entries
            .iter()
            .filter(|e| e.collective == kind)
            .collect();
        let bands: usize = entries.iter().map(|e| e.bands.len()).sum();
        // One marker per file, where its first band begins on the chart's log axis.
        let map = tick_map(chart, true, |s| {
            parse_size(&s.replace(' ', "")).unwrap() as f64
        });
        let markers = chart.with_class("marker");
        assert_eq!(markers.len(), entries.len());
        for (m, e) in markers.iter().zip(&entries) {
            let x = map(e.bands[0].size_bytes as f64);
            assert!((m.num("x1") - x).abs() < 0.02, "{} vs {x}", m.num("x1"));
        }
        // The served curve and the bound have a point per band.
        let series = chart.with_class("series");
        assert!(series
            .iter()
            .all(|s| s.attr("d").unwrap().matches(['M', 'L']).count() == bands));
        assert_eq!(series.first().unwrap().title(), "served");
        assert_eq!(series.last().unwrap().title(), "bound");
    }
    // The table: a row per file, after the header.
    let rows: Vec<&El> = page.all().into_iter().filter(|e| e.name == "tr").collect();
    assert_eq!(rows.len(), manifest.entries.len() + 1);
    assert_eq!(rows[1].children[0].text, manifest.entries[0].file);
}

/// Runs tacos with `args` and returns its stdout, checking that it succeeds.
fn tacos_ok(args: &[&str]) -> String {
    let run = Command::new(env!("CARGO_BIN_EXE_tacos"))
        .args(args)
        .output()
        .unwrap();
    assert!(
        run.status.success(),
        "{}",
        String::from_utf8_lossy(&run.stderr)
    );
    String::from_utf8(run.stdout).unwrap()
}

/// The time the page's table gives its first row, microseconds.
fn first_row_us(page: &El) -> f64 {
    let rows: Vec<&El> = page.all().into_iter().filter(|e| e.name == "tr").collect();
    rows[1].children[1].text.parse().unwrap()
}

#[test]
fn a_schedule_its_program_and_its_plan_are_timed_as_simulate_times_them() {
    let dir = scratch("files");
    let (json, xml, plan) = (
        dir.join("ar.json"),
        dir.join("ar.xml"),
        dir.join("ar.plan.json"),
    );
    let (json, xml, plan) = (
        json.to_str().unwrap(),
        xml.to_str().unwrap(),
        plan.to_str().unwrap(),
    );
    let spec = ["torus:2x4", "-c", "allreduce", "-s", "1MiB"];
    tacos_ok(
        &[
            &["synth", "-k", "2", "--quiet", "--out", json][..],
            &["--xml", xml, "--plan", plan],
            &spec[..],
        ]
        .concat(),
    );
    let simulated = |flag: &str, file: &str| -> f64 {
        let out = tacos_ok(&[&["simulate", flag, file, "--json"], &spec[..]].concat());
        let v: serde_json::Value = serde_json::from_str(&out).unwrap();
        v["time_us"].as_f64().unwrap()
    };
    let page = parse(&report(&dir, &["--schedule", json]));
    assert!((first_row_us(&page) - simulated("--schedule", json)).abs() < 1e-3);
    // Every transfer of a torus crosses one link: one bar each on the timeline.
    let schedule = tacos::schedule::Schedule::read(Path::new(json)).unwrap();
    assert_eq!(
        svgs(&page)[1].with_class("held").len(),
        schedule.transfers.len()
    );
    let page = parse(&report(&dir, &[&["--xml", xml], &spec[..]].concat()));
    assert!((first_row_us(&page) - simulated("--xml", xml)).abs() < 1e-3);
    // The program's messages are not exposed: its loads, no timeline.
    assert_eq!(svgs(&page).len(), 1);
    // The MSCCL++ plan, verified and timed by the executor cost model as simulate does.
    let page = parse(&report(&dir, &[&["--plan", plan], &spec[..]].concat()));
    assert!((first_row_us(&page) - simulated("--plan", plan)).abs() < 1e-3);
    assert_eq!(svgs(&page).len(), 1);
}

#[test]
fn mistakes_are_named_before_any_work() {
    let err = error_of(&["ring:4", "-o", "/nonexistent-tacos-dir/r.html"]);
    assert!(
        err.contains("cannot write the report") && err.contains("/nonexistent-tacos-dir"),
        "{err}"
    );
    let dir = scratch("errors");
    let out = dir.join("r.html");
    let err = error_of(&[
        "--compiled",
        dir.join("none").to_str().unwrap(),
        "-o",
        out.to_str().unwrap(),
    ]);
    assert!(err.contains("none"), "{err}");
    assert!(!out.exists());
}

/// A stream of a few hundred bytes whose header's network claims 16,777,215 NPUs (four
/// of them in the collective) once had `report` simulate and draw all of them: past
/// 11 GB and minutes. A picture has a size limit of its own, said before anything is
/// measured; the same for a topology given on the command line.
#[test]
fn a_network_too_large_to_draw_is_refused_naming_the_limit() {
    use tacos::schedule::stream::{StreamHeader, StreamWriter};
    use tacos::schedule::Network;
    let dir = scratch("huge-network");
    let ring = topo("ring:4");
    let collective =
        Collective::over_all(&ring, CollectiveKind::AllGather, None, 1, 1 << 20).unwrap();
    let schedule = synthesize(&ring, &collective, &SynthOptions::default()).unwrap();
    let network = Network {
        npus: (1 << 24) - 1,
        switches: Vec::new(),
        failed: Vec::new(),
        links: ring.links().to_vec(),
        reducing_switches: Vec::new(),
    };
    let header = StreamHeader::new(
        "ring:4",
        collective.spec().clone(),
        schedule.chunk_bytes,
        Some(network),
    );
    let path = dir.join("huge.tts");
    let file = std::fs::File::create(&path).unwrap();
    let mut writer = StreamWriter::new(std::io::BufWriter::new(file), &header).unwrap();
    for t in &schedule.transfers {
        writer.push(t).unwrap();
    }
    writer.finish().unwrap();
    assert!(std::fs::metadata(&path).unwrap().len() < 1024);
    let out = dir.join("huge.html");
    let e = error_of(&[
        "--schedule",
        path.to_str().unwrap(),
        "-o",
        out.to_str().unwrap(),
    ]);
    assert!(
        e.contains("16777215 vertices to draw, more than the 4096 allowed"),
        "{e}"
    );
    assert!(!out.exists());
    let e = error_of(&["mesh:65x65", "-o", out.to_str().unwrap()]);
    assert!(e.contains("4225 vertices to draw"), "{e}");
}

/// The page says what would run on GPUs: the algorithm as a program and NCCL's own
/// choice, both by the executor cost model, NCCL's at the figure `simulate --baseline
/// nccl` gives; an abstract torus gets no NCCL figure, `--alpha-beta` no sentence.
#[test]
fn the_page_prices_the_program_and_nccls_choice_on_gpus() {
    let dir = scratch("on-gpus");
    let args = [
        "preset:dgx1",
        "-c",
        "allgather",
        "-s",
        "1MiB",
        "-k",
        "1",
        "--seeds",
        "1",
    ];
    let page = report(&dir, &args);
    let sentence = page
        .split("On GPUs (executor cost model, volta built-in profile): ")
        .nth(1)
        .unwrap_or_else(|| panic!("no sentence on GPUs"));
    let sentence = sentence.split('<').next().unwrap();
    let nccl = Command::new(env!("CARGO_BIN_EXE_tacos"))
        .args(["simulate", "preset:dgx1", "-c", "allgather", "-s", "1MiB"])
        .args(["--baseline", "nccl", "--json"])
        .output()
        .unwrap();
    let nccl: serde_json::Value = serde_json::from_slice(&nccl.stdout).unwrap();
    let nccl_us = format!("{:.3} us", nccl["time_us"].as_f64().unwrap());
    assert!(sentence.contains(&nccl_us), "{sentence} lacks {nccl_us}");
    assert!(
        sentence.contains("faster") || sentence.contains("slower"),
        "{sentence}"
    );
    let torus = report(
        &dir,
        &["torus:4x4", "-c", "allgather", "-s", "1MiB", "-k", "1"],
    );
    assert!(torus.contains("On GPUs (") && !torus.contains("own choice"));
    let bare = report(&dir, &[&args[..], &["--alpha-beta"]].concat());
    assert!(!bare.contains("On GPUs ("));
}
