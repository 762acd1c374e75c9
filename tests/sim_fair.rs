//! Max-min fair sharing of link bandwidth (`Sharing::Fair`) against hand-worked figures,
//! next to the serial model's on the same messages.
//!
//! Most cases run on `star:8,bw=50,lat=0.5`: a route between two NPUs is two 0.5 us hops
//! (alpha = 1 us) at 50 GB/s, so a 1 MB message moves alone in 20 us.

mod common;

use common::tacos;
use tacos::baselines::Baseline;
use tacos::collective::{CollectiveKind, CollectiveSpec};
use tacos::error::Error;
use tacos::sim::{
    simulate_messages, simulate_messages_with, simulate_schedule_with, Message, Sharing, SimResult,
    MAX_CONCURRENT_FLOWS,
};
use tacos::topology::{file, parse_spec, SpecDefaults, Topology};

const US: u64 = 1_000_000;
/// 1 MB: 20 us alone on a 50 GB/s link.
const S: f64 = 1e6;

fn spec(s: &str) -> Topology {
    parse_spec(s, &SpecDefaults::default()).unwrap()
}

fn star8() -> Topology {
    spec("star:8,bw=50,lat=0.5")
}

fn message(src: usize, dst: usize, bytes: f64, deps: Vec<usize>) -> Message {
    Message {
        src,
        dst,
        bytes,
        deps,
    }
}

fn fair(topo: &Topology, messages: &[Message]) -> SimResult {
    simulate_messages_with(topo, messages, Sharing::Fair).unwrap()
}

fn ends(r: &SimResult) -> Vec<u64> {
    r.messages.iter().map(|m| m.end_ps).collect()
}

/// The link from `src` to `dst` (vertex ids).
fn link(topo: &Topology, src: usize, dst: usize) -> usize {
    topo.link_between(src, dst).unwrap()
}

#[test]
fn two_flows_into_one_port_share_it_where_serial_queues_them() {
    let t = star8();
    let m = [message(0, 2, S, vec![]), message(1, 2, S, vec![])];
    // Fair: alpha, then 2 MB through one 50 GB/s port, both done together.
    assert_eq!(ends(&fair(&t, &m)), [41 * US, 41 * US]);
    // Serial: alpha + S/B, then the second takes its turn.
    assert_eq!(
        ends(&simulate_messages(&t, &m).unwrap()),
        [21 * US, 42 * US]
    );
}

#[test]
fn three_flows_out_of_one_port_get_a_third_each() {
    let t = star8();
    let m = [
        message(0, 1, S, vec![]),
        message(0, 2, S, vec![]),
        message(0, 3, S, vec![]),
    ];
    let r = fair(&t, &m);
    // Each at 50/3 GB/s: 60 us after alpha.
    assert_eq!(ends(&r), [61 * US; 3]);
    assert!(r.messages.iter().all(|m| m.start_ps == 0));
    // The shared port carried 3 MB and was busy throughout; each down port 1 MB.
    let up = link(&t, 0, 8);
    assert_eq!((r.link_busy_ps[up], r.link_bytes[up]), (61 * US, 3.0 * S));
    for dst in 1..4 {
        let down = link(&t, 8, dst);
        assert_eq!((r.link_busy_ps[down], r.link_bytes[down]), (61 * US, S));
    }
    let idle = link(&t, 8, 5);
    assert_eq!((r.link_busy_ps[idle], r.link_bytes[idle]), (0, 0.0));
}

#[test]
fn max_min_gives_the_bottlenecked_flow_its_bottleneck_and_the_other_the_rest() {
    // 0 -> 1 crosses 0->s (50 GB/s) and s->1 (10 GB/s); 0 -> 2 crosses 0->s and s->2
    // (50 GB/s). No latency.
    let t = file::parse(
        r#"{"npus": 3, "switches": ["s"], "links": [
            {"src": 0, "dst": "s", "bidirectional": true, "bandwidth_gbps": 50, "latency_us": 0},
            {"src": 1, "dst": "s", "bidirectional": true, "bandwidth_gbps": 10, "latency_us": 0},
            {"src": 2, "dst": "s", "bidirectional": true, "bandwidth_gbps": 50, "latency_us": 0}
        ]}"#,
        "t.json",
        &SpecDefaults::default(),
    )
    .unwrap();
    // s->1 fixes the first flow at 10 GB/s; 0->s has 40 left for the second.
    let r = fair(
        &t,
        &[message(0, 1, S, vec![]), message(0, 2, 4.0 * S, vec![])],
    );
    // 1 MB at 10 GB/s: 100 us; 4 MB at 40 GB/s: 100 us.
    assert_eq!(ends(&r), [100 * US, 100 * US]);
    // With 5 MB, the second has 1 MB left at 100 us, then the whole 50 GB/s: 20 us more.
    let r = fair(
        &t,
        &[message(0, 1, S, vec![]), message(0, 2, 5.0 * S, vec![])],
    );
    assert_eq!(ends(&r), [100 * US, 120 * US]);
}

/// Ring All-Gather of 8 shares of `S`: step s, NPU i forwards to i+1 what it got at s-1.
fn ring_all_gather(n: usize) -> Vec<Message> {
    let mut messages = Vec::new();
    for s in 0..n - 1 {
        for i in 0..n {
            let deps = if s == 0 {
                vec![]
            } else {
                vec![(s - 1) * n + (i + n - 1) % n]
            };
            messages.push(message(i, (i + 1) % n, S, deps));
        }
    }
    messages
}

#[test]
fn ring_all_gather_on_a_star_has_no_contention_so_fair_equals_serial() {
    let t = star8();
    let m = ring_all_gather(8);
    let f = fair(&t, &m);
    assert_eq!(f.time_ps, 7 * 21 * US);
    assert_eq!(f, simulate_messages(&t, &m).unwrap());
    // The ring baselines' schedules too, at 1 GiB (a share of 2^27 bytes moves in
    // 2684354560 ps at 50 GB/s), whatever their steps are.
    let spec = CollectiveSpec {
        kind: CollectiveKind::AllGather,
        root: None,
        npus: t.alive_npus(),
        chunks_per_npu: 1,
        size_bytes: 1 << 30,
    };
    let step = US + 2_684_354_560;
    let time = |b: Baseline, sharing| {
        let schedule = b.schedule(&t, &spec).unwrap();
        simulate_schedule_with(&t, &schedule, sharing)
            .unwrap()
            .time_ps
    };
    assert_eq!(time(Baseline::RingUni, Sharing::Serial), 7 * step);
    assert_eq!(time(Baseline::RingUni, Sharing::Fair), 7 * step);
    // The bidirectional ring sends half a share each way out of every port at each step:
    // serial pays alpha twice per step, fair once.
    assert_eq!(time(Baseline::Ring, Sharing::Serial), 7 * (step + US));
    assert_eq!(time(Baseline::Ring, Sharing::Fair), 7 * step);
}

#[test]
fn direct_all_gather_through_a_star_lands_everything_at_once_with_the_same_bandwidth_term() {
    let t = star8();
    let n = 8;
    let m: Vec<Message> = (1..n)
        .flat_map(|k| (0..n).map(move |i| message(i, (i + k) % n, S, vec![])))
        .collect();
    let f = fair(&t, &m);
    // 7 flows out of and into every port, each at B/7: every share lands at
    // alpha + 7 S/B.
    assert_eq!(ends(&f), vec![141 * US; m.len()]);
    // Serial pays alpha per share instead: 7 (alpha + S/B). Bandwidth terms equal.
    let serial = simulate_messages(&t, &m).unwrap();
    assert_eq!(serial.time_ps, 7 * 21 * US);
    assert_eq!(f.time_ps - US, serial.time_ps - 7 * US);
    // Every port busy and carrying 7 MB either way.
    for l in 0..t.links().len() {
        assert_eq!((f.link_busy_ps[l], f.link_bytes[l]), (141 * US, 7.0 * S));
        assert_eq!(serial.link_bytes[l], 7.0 * S);
    }
}

#[test]
fn a_dependent_message_waits_for_its_dependency_and_shares_only_once_it_moves() {
    let t = star8();
    // 0 -> 1 (1 MB); then 1 -> 2 (1 MB) once it arrived; 3 -> 2 (2 MB) from the start.
    let m = [
        message(0, 1, S, vec![]),
        message(1, 2, S, vec![0]),
        message(3, 2, 2.0 * S, vec![]),
    ];
    let r = fair(&t, &m);
    // Message 0 alone: 21 us. Message 1 starts then, moving bytes from 22 us.
    assert_eq!((r.messages[0].start_ps, r.messages[0].end_ps), (0, 21 * US));
    assert_eq!(r.messages[1].start_ps, 21 * US);
    // Message 2 moves alone from 1 us to 22 us (1.05 MB), then shares s->2 at 25 GB/s:
    // its 0.95 MB take 38 us, to 60 us. Message 1 has 0.05 MB left then, alone: 1 us.
    assert_eq!(r.messages[2].end_ps, 60 * US);
    assert_eq!(r.messages[1].end_ps, 61 * US);
    // s->2 was busy from 0 (message 2 started) to 61 us, and carried 3 MB.
    let down = link(&t, 8, 2);
    assert_eq!(
        (r.link_busy_ps[down], r.link_bytes[down]),
        (61 * US, 3.0 * S)
    );
}

#[test]
fn fair_sharing_is_deterministic() {
    // Uneven sizes and chains of dependencies, so rates change at many events.
    let t = spec("star:16,bw=50,lat=0.5");
    let m: Vec<Message> = (0..16)
        .flat_map(|i| {
            (1..6).map(move |k| {
                let deps = if k > 1 { vec![i * 5 + k - 2] } else { vec![] };
                message(
                    i,
                    (i + 2 * k - 1) % 16,
                    S * (1.0 + (i * k % 7) as f64 / 3.0),
                    deps,
                )
            })
        })
        .collect();
    let first = fair(&t, &m);
    let second = fair(&t, &m);
    assert_eq!(first, second);
    assert_eq!(format!("{first:?}"), format!("{second:?}"));
    // Sharing never beats a message moving alone at its narrowest link.
    for (msg, timing) in m.iter().zip(&first.messages) {
        assert!(timing.end_ps - timing.start_ps >= US + (msg.bytes / 0.05) as u64);
    }
}

#[test]
fn too_many_flows_at_once_are_refused_with_the_serial_hint() {
    let t = spec("star:257");
    let m: Vec<Message> = (0..257)
        .flat_map(|i| (0..257).map(move |j| (i, j)))
        .filter(|(i, j)| i != j)
        .map(|(i, j)| message(i, j, 1.0, vec![]))
        .collect();
    assert!(m.len() > MAX_CONCURRENT_FLOWS);
    let e = simulate_messages_with(&t, &m, Sharing::Fair).unwrap_err();
    assert!(matches!(e, Error::Limit { .. }), "{e}");
    assert!(e.to_string().contains("--sharing serial"), "{e}");
}

#[test]
fn sharing_names_parse_and_unknown_ones_list_the_known() {
    assert_eq!("fair".parse::<Sharing>().unwrap(), Sharing::Fair);
    assert_eq!("serial".parse::<Sharing>().unwrap(), Sharing::Serial);
    assert_eq!(Sharing::default(), Sharing::Serial);
    let e = "fiar".parse::<Sharing>().unwrap_err().to_string();
    assert!(
        e.contains("fiar") && e.contains("serial") && e.contains("fair"),
        "{e}"
    );
}

#[test]
fn simulate_and_compare_take_sharing_and_report_it() {
    let (ok, out, err) = tacos(&[
        "simulate",
        "star:8,bw=50,lat=0.5",
        "--baseline",
        "direct",
        "-s",
        "8MB",
        "--sharing",
        "fair",
        "--json",
    ]);
    assert!(ok, "{err}");
    let v: serde_json::Value = serde_json::from_str(&out).unwrap();
    assert_eq!(v["sharing"], "fair");
    // Direct All-Gather of 8 MB: 7 shares of 1 MB into each port at once, 141 us.
    assert_eq!(v["time_us"], 141.0);
    let (ok, out, err) = tacos(&[
        "simulate",
        "star:8,bw=50,lat=0.5",
        "--baseline",
        "direct",
        "-s",
        "8MB",
    ]);
    assert!(ok, "{err}");
    assert!(out.contains("sharing       serial"), "{out}");
    let (ok, out, err) = tacos(&[
        "compare",
        "star:8",
        "-s",
        "8MB",
        "--sharing",
        "fair",
        "--json",
    ]);
    assert!(ok, "{err}");
    let v: serde_json::Value = serde_json::from_str(&out).unwrap();
    assert_eq!(v["sharing"], "fair");
    let (ok, _, err) = tacos(&[
        "simulate",
        "star:8",
        "--baseline",
        "ring",
        "--sharing",
        "fiar",
    ]);
    assert!(
        !ok && err.contains("fiar") && err.contains("serial"),
        "{err}"
    );
}

/// A second, plain implementation of the fair model: every event recomputes max-min rates
/// by repeatedly fixing the flows of the link with the smallest equal share. Returns each
/// message's end.
fn reference_ends(topo: &Topology, messages: &[Message]) -> Vec<u64> {
    let n = messages.len();
    let routes: Vec<Vec<usize>> = messages
        .iter()
        .map(|m| topo.route(m.src, m.dst).unwrap())
        .collect();
    let flow_before: Vec<Option<usize>> = (0..n)
        .map(|m| {
            (0..m)
                .rev()
                .find(|&p| (messages[p].src, messages[p].dst) == (messages[m].src, messages[m].dst))
        })
        .collect();
    let mut issued = vec![false; n];
    let mut end: Vec<Option<u64>> = vec![None; n];
    let mut moving_from: Vec<Option<u64>> = vec![None; n];
    let mut left: Vec<f64> = messages.iter().map(|m| m.bytes).collect();
    let mut now = 0u64;
    loop {
        // Issue whatever may go, until nothing more does.
        while let Some(m) = (0..n).find(|&m| {
            !issued[m]
                && messages[m].deps.iter().all(|&d| end[d].is_some())
                && flow_before[m].iter().all(|&p| issued[p])
        }) {
            issued[m] = true;
            let latency: f64 = routes[m].iter().map(|&l| topo.link(l).latency_us).sum();
            moving_from[m] = Some(now + (latency * 1e6).ceil() as u64);
        }
        let moving: Vec<usize> = (0..n)
            .filter(|&m| end[m].is_none() && moving_from[m].is_some_and(|t| t <= now))
            .collect();
        // Max-min rates.
        let mut rate = vec![0.0; n];
        let mut capacity: Vec<f64> = topo
            .links()
            .iter()
            .map(|l| l.bandwidth_gbps / 1e3)
            .collect();
        let mut unfixed = moving.clone();
        while !unfixed.is_empty() {
            let mut count = vec![0usize; capacity.len()];
            for &m in &unfixed {
                for &l in &routes[m] {
                    count[l] += 1;
                }
            }
            let (bottleneck, share) = (0..capacity.len())
                .filter(|&l| count[l] > 0)
                .map(|l| (l, capacity[l] / count[l] as f64))
                .min_by(|a, b| a.1.total_cmp(&b.1))
                .unwrap();
            unfixed.retain(|&m| {
                if !routes[m].contains(&bottleneck) {
                    return true;
                }
                rate[m] = share;
                for &l in &routes[m] {
                    capacity[l] -= share;
                }
                false
            });
        }
        let finish: Vec<u64> = (0..n)
            .map(|m| match moving_from[m] {
                Some(t) if t > now => t,
                _ if left[m] == 0.0 => now,
                _ => now + ((left[m] / rate[m]).ceil() as u64).max(1),
            })
            .collect();
        let Some(t) = (0..n)
            .filter(|&m| end[m].is_none() && issued[m])
            .map(|m| finish[m])
            .min()
        else {
            break;
        };
        for &m in &moving {
            if finish[m] == t {
                end[m] = Some(t);
            } else {
                left[m] -= rate[m] * (t - now) as f64;
            }
        }
        now = t;
    }
    end.into_iter().map(Option::unwrap).collect()
}

#[test]
fn fair_sharing_agrees_with_a_plain_second_implementation_on_random_fabrics() {
    use rand::{Rng, SeedableRng};
    for seed in 0..12 {
        let t = common::random_fabric(seed, 7, 3, 4);
        let mut rng = rand_chacha::ChaCha8Rng::seed_from_u64(seed);
        let mut messages: Vec<Message> = Vec::new();
        while messages.len() < 40 {
            let (src, dst) = (rng.random_range(0..7), rng.random_range(0..7));
            if src == dst || t.route(src, dst).is_none() {
                continue;
            }
            let deps = match messages.len() {
                0 => vec![],
                k if rng.random_bool(0.5) => vec![rng.random_range(0..k)],
                _ => vec![],
            };
            let bytes = [0.0, 1e5, 1e6, 3.3e6][rng.random_range(0..4)];
            messages.push(message(src, dst, bytes, deps));
        }
        let ours = ends(&fair(&t, &messages));
        let plain = reference_ends(&t, &messages);
        for (m, (a, b)) in ours.iter().zip(&plain).enumerate() {
            // The two round floats differently: a picosecond per event at most.
            assert!(
                a.abs_diff(*b) <= 80,
                "seed {seed}, message {m}: {a} against {b}"
            );
        }
    }
}
