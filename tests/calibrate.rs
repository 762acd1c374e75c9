//! `tacos calibrate`: the nccl-tests reader on real and hand-made output, bad input named
//! by file and line, the fit on the calibration set, and a round trip from a known profile.

mod common;

use std::path::{Path, PathBuf};
use tacos::collective::CollectiveKind;
use tacos::cost::nccltests::{self, Measured, ReadOptions};
use tacos::tuner::{Algorithm, Protocol};

fn fixture(name: &str) -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("tests/data/nccl-tests")
        .join(name)
}

fn read(name: &str, options: ReadOptions) -> tacos::Result<Vec<Measured>> {
    nccltests::read_file(&fixture(name), &options)
}

fn read_one(name: &str, options: ReadOptions) -> Measured {
    let mut tables = read(name, options).unwrap();
    assert_eq!(tables.len(), 1, "{name}: {tables:?}");
    tables.remove(0)
}

fn error(name: &str, options: ReadOptions) -> String {
    read(name, options).unwrap_err().to_string()
}

/// The calibration set's rows, from the page the fixtures were written from, where it is
/// there: (size, time).
fn published(title: &str) -> Option<Vec<(u64, f64)>> {
    let path =
        Path::new(env!("CARGO_MANIFEST_DIR")).join("../shared/reference/measured-training.md");
    let text = std::fs::read_to_string(path).ok()?;
    let section = text.split("\n## ").find(|s| s.starts_with(title))?;
    Some(
        section
            .lines()
            .filter_map(|l| {
                let cells: Vec<&str> = l.split('|').map(str::trim).collect();
                Some((cells.get(1)?.parse().ok()?, cells.get(2)?.parse().ok()?))
            })
            .collect(),
    )
}

#[test]
fn the_calibration_tables_read_as_published() {
    let h100 = read_one("h100-ring-allreduce.txt", ReadOptions::default());
    assert_eq!(h100.collective, CollectiveKind::AllReduce);
    assert_eq!(h100.ranks, 8);
    assert_eq!(h100.hosts, 1);
    assert_eq!(h100.algorithm, Some(Algorithm::Ring), "NCCL_ALGO=RING");
    assert_eq!(h100.protocol, None);
    assert_eq!(h100.gpu.as_deref(), Some("NVIDIA H100 80GB HBM3"));
    assert_eq!(
        (h100.data_type.as_str(), h100.redop.as_str()),
        ("float", "sum")
    );
    // 8 B to 8 GiB, doubling: 31 sizes.
    assert_eq!(h100.points.len(), 31);
    assert_eq!(h100.points[0].bytes, 8);
    assert_eq!(h100.points[30].bytes, 8 << 30);
    assert_eq!(h100.points[16].time_us, 69.21);

    let a100 = read_one("a100-allreduce.txt", ReadOptions::default());
    assert_eq!(
        a100.collective,
        CollectiveKind::AllReduce,
        "named by mpirun's command"
    );
    assert_eq!((a100.ranks, a100.algorithm), (8, None));
    assert_eq!(a100.points.len(), 30);

    for (table, title) in [(&h100, "8x H100"), (&a100, "8x A100")] {
        let Some(rows) = published(title) else {
            continue;
        };
        let read: Vec<(u64, f64)> = table.points.iter().map(|o| (o.bytes, o.time_us)).collect();
        assert_eq!(read, rows, "{title}");
    }
}

#[test]
fn one_process_of_eight_gpus_reads_either_column_past_nccl_log_lines() {
    let out = read_one("g8-allgather.txt", ReadOptions::default());
    assert_eq!(out.collective, CollectiveKind::AllGather);
    assert_eq!(out.ranks, 8);
    assert_eq!(out.protocol, Some(Protocol::Ll128), "from NCCL's log");
    assert_eq!(out.algorithm, None);
    assert!(!out.in_place);
    let times: Vec<f64> = out.points.iter().map(|o| o.time_us).collect();
    assert_eq!(times, [20.5, 21.0, 22.5, 26.0, 31.0, 48.0]);
    let inplace = read_one(
        "g8-allgather.txt",
        ReadOptions {
            in_place: true,
            ..ReadOptions::default()
        },
    );
    assert!(inplace.in_place);
    let times: Vec<f64> = inplace.points.iter().map(|o| o.time_us).collect();
    assert_eq!(times, [20.1, 20.8, 22.0, 25.5, 30.0, 47.0]);
}

#[test]
fn an_mpi_run_counts_every_process_ranks_and_hosts() {
    let out = read_one("mpi-2host-reducescatter.txt", ReadOptions::default());
    assert_eq!(out.collective, CollectiveKind::ReduceScatter);
    assert_eq!((out.ranks, out.hosts), (16, 2));
    assert_eq!(out.algorithm, Some(Algorithm::Ring), "-x NCCL_ALGO=Ring");
    // Per-iteration columns and time stamps do not move the time columns.
    let sizes: Vec<(u64, f64)> = out.points.iter().map(|o| (o.bytes, o.time_us)).collect();
    assert_eq!(
        sizes,
        [
            (65536, 60.1),
            (262144, 75.3),
            (1048576, 120.4),
            (4194304, 310.2)
        ]
    );
    let inplace = ReadOptions {
        in_place: true,
        ..ReadOptions::default()
    };
    let times: Vec<f64> = read_one("mpi-2host-reducescatter.txt", inplace)
        .points
        .iter()
        .map(|o| o.time_us)
        .collect();
    assert_eq!(times, [61.0, 74.9, 119.8, 305.5]);
}

#[test]
fn threads_and_cut_device_lines_still_count_every_rank() {
    // -t 4 -g 8: 32 ranks, of which nccl-tests printed 20 device lines.
    let out = read_one("threads-32ranks.txt", ReadOptions::default());
    assert_eq!(out.ranks, 32);
    assert_eq!(out.collective, CollectiveKind::AllReduce);
    // An old version's columns: no root, `error` for `#wrong`.
    let times: Vec<f64> = out.points.iter().map(|o| o.time_us).collect();
    assert_eq!(times, [95.2, 130.5, 190.8]);
}

#[test]
fn the_collective_comes_from_c_where_the_output_does_not_name_it() {
    let e = error("unnamed.txt", ReadOptions::default());
    assert!(e.contains("unnamed.txt:5:") && e.contains("pass -c"), "{e}");
    let with_c = ReadOptions {
        collective: Some(CollectiveKind::AllReduce),
        ..ReadOptions::default()
    };
    let out = read_one("unnamed.txt", with_c);
    assert_eq!(out.collective, CollectiveKind::AllReduce);
    // No device lines: one process of nThread x nGpus.
    assert_eq!(out.ranks, 8);
    assert!(
        out.notes.iter().any(|n| n.contains("one process")),
        "{:?}",
        out.notes
    );
}

#[test]
fn mixed_collectives_need_c_which_picks_one() {
    let e = error("bad-mixed.txt", ReadOptions::default());
    assert!(
        e.contains("bad-mixed.txt: mixed collectives")
            && e.contains("allreduce (line 2)")
            && e.contains("allgather (line 23)"),
        "{e}"
    );
    let gather = ReadOptions {
        collective: Some(CollectiveKind::AllGather),
        ..ReadOptions::default()
    };
    let out = read_one("bad-mixed.txt", gather);
    assert_eq!(out.collective, CollectiveKind::AllGather);
    assert_eq!(out.points[0].time_us, 19.0);
    let broadcast = ReadOptions {
        collective: Some(CollectiveKind::Broadcast),
        ..ReadOptions::default()
    };
    let e = error("bad-mixed.txt", broadcast);
    assert!(e.contains("no broadcast table"), "{e}");
}

#[test]
fn bad_files_are_named_with_the_line_and_field() {
    let e = error("bad-no-table.txt", ReadOptions::default());
    assert!(e.contains("bad-no-table.txt: no nccl-tests table"), "{e}");
    let e = error("bad-garbage.txt", ReadOptions::default());
    assert!(
        e.contains("bad-garbage.txt:19: field size: 'Segmentation'"),
        "{e}"
    );
    let inplace = ReadOptions {
        in_place: true,
        ..ReadOptions::default()
    };
    let e = error("h100-ring-allreduce.txt", inplace);
    assert!(
        e.contains("h100-ring-allreduce.txt:20:") && e.contains("out-of-place columns only"),
        "{e}"
    );
    let bad_time = "$ all_reduce_perf -g 2\n# nThread 1 nGpus 2\n#  size  count  type  redop  root  time  algbw  busbw  #wrong\n  1024  256  float  sum  -1  -nan  0.0  0.0  0\n";
    let e = nccltests::parse(bad_time, "t.txt", &ReadOptions::default())
        .unwrap_err()
        .to_string();
    assert!(
        e.contains("t.txt:4: field time (out-of-place): '-nan'"),
        "{e}"
    );
    let short = "$ all_reduce_perf -g 2\n# nThread 1 nGpus 2\n#  size  count  type  redop  root  time  algbw  busbw  #wrong\n  1024  256  float\n";
    let e = nccltests::parse(short, "t.txt", &ReadOptions::default())
        .unwrap_err()
        .to_string();
    assert!(e.contains("t.txt:4: the row has 3 fields"), "{e}");
    let other = "$ sendrecv_perf -g 2\n# nThread 1 nGpus 2\n#  size  count  type  redop  root  time\n  1024  256  float  sum  -1  5.0\n";
    let e = nccltests::parse(other, "t.txt", &ReadOptions::default())
        .unwrap_err()
        .to_string();
    assert!(
        e.contains("t.txt:1: sendrecv_perf is not a collective"),
        "{e}"
    );
}
