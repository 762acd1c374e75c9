//! Networks whose links differ in speed: the matcher holds a slow link back from a chunk
//! that is about to come over fast links, but not when the fast links are the bottleneck
//! (`Matcher::fast_backlog`), so every link carries what it can.

use tacos::collective::{Collective, CollectiveKind};
use tacos::pipeline::{self, Request};
use tacos::schedule::check;
use tacos::sim::simulate_schedule;
use tacos::topology::{parse_spec, SpecDefaults};

const GIB: u64 = 1 << 30;

/// multi:U4xF4,bw=100:25: a one-way ring of four at 100 GB/s crossed with four fully
/// connected at 25 GB/s. Each NPU takes in 15/16 GiB over 100 + 3 x 25 GB/s: 5,752 us at
/// the least, which needs 3/7 of what it takes in to come over its slow links. The fast
/// ring alone could bring it in 10,066 us. The default search comes within 7% of the
/// bound, its slow links busy most of the time (a third of it when they were held back
/// for chunks queued on the fast ring).
#[test]
fn a_ring_crossed_with_slow_links_uses_both() {
    let t = parse_spec("multi:U4xF4,bw=100:25", &SpecDefaults::default()).unwrap();
    let request = Request::new(CollectiveKind::AllGather, GIB);
    let options = pipeline::Options::searching(&t, &request, 0);
    let kept = pipeline::schedule(&t, &request, &options).unwrap().kept;
    let schedule = kept.schedule();
    check(schedule, &t).unwrap();
    let sim = simulate_schedule(&t, schedule).unwrap();
    let bound_us = 15.0 / 16.0 * GIB as f64 / (175.0 * 1e3);
    let time_us = sim.time_ps as f64 / 1e6;
    assert!(
        time_us <= bound_us / 0.93,
        "{time_us} us against {bound_us} us"
    );
    let collective = Collective::new(&t, schedule.collective.clone()).unwrap();
    assert_eq!(collective.kind(), CollectiveKind::AllGather);
    // The slow links join NPUs of different rings (ids 4 apart or more).
    let (mut busy, mut slow) = (0u64, 0u64);
    for (l, &link_busy) in t.links().iter().zip(&sim.link_busy_ps) {
        if l.src / 4 != l.dst / 4 {
            busy += link_busy;
            slow += 1;
        }
    }
    assert_eq!(slow, 48);
    let utilization = busy as f64 / (slow * sim.time_ps) as f64;
    assert!(utilization > 0.8, "slow links {utilization:.2} busy");
}

/// Dragonflies' All-Gather of 1 GiB: the cut bound (max-flow, `bounds`) is met within 5%
/// only by trees shallow enough to pipeline in few chunks, each chunk entering each group
/// once over its global link and spreading there as a star (`TreeShape::Shallow`), or
/// with a K between the powers of two that divides the global links' share evenly; the
/// default search tries both.
#[test]
fn dragonflies_come_within_five_percent_of_their_cut() {
    for spec in ["dragonfly:4x5,bw=400:200", "dragonfly:4x9,bw=400:200"] {
        let t = parse_spec(spec, &SpecDefaults::default()).unwrap();
        let request = Request::new(CollectiveKind::AllGather, GIB);
        let options = pipeline::Options::searching(&t, &request, 0);
        let found = pipeline::schedule(&t, &request, &options).unwrap();
        let schedule = found.kept.schedule();
        check(schedule, &t).unwrap();
        let time_ps = simulate_schedule(&t, schedule).unwrap().time_ps;
        let collective = Collective::new(&t, schedule.collective.clone()).unwrap();
        let cut_ps = tacos::bounds::cut_bound(&t, &collective).unwrap().time_ps;
        let efficiency = cut_ps as f64 / time_ps as f64;
        assert!(
            efficiency >= 0.95,
            "{spec}: {efficiency:.3} of the cut bound"
        );
    }
}
