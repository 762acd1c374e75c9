//! What the transfer stream (`schedule::stream`) costs and saves on synthesized mesh
//! collectives (All-Gather unless a collective is named; K = 1, 1 GiB, seed 0): the
//! stream's bytes a transfer against the JSON schedule file's and the 32-byte records,
//! and the time `check` takes on the schedule in memory against `check_stream` reading
//! the stream file (combining collectives: as reduction trees), with its throughput.
//!
//! cargo run --release --example stream_check -- 32 64
//! cargo run --release --example stream_check -- allreduce 32 64

use std::time::Instant;
use tacos::collective::{Collective, CollectiveKind};
use tacos::schedule::stream::{self, StreamHeader, StreamWriter};
use tacos::schedule::{check, check_stream, Network};
use tacos::synth::{synthesize, SynthOptions};
use tacos::topology::{parse_spec, SpecDefaults};

fn main() -> tacos::Result<()> {
    let mut kind = CollectiveKind::AllGather;
    let mut sides = Vec::new();
    for arg in std::env::args().skip(1) {
        match arg.parse::<usize>() {
            Ok(side) => sides.push(side),
            Err(_) => kind = arg.parse()?,
        }
    }
    let dir = std::env::temp_dir().join(format!("tacos-stream-check-{}", std::process::id()));
    std::fs::create_dir_all(&dir).map_err(|e| tacos::Error::io(&dir, e))?;
    println!("| {kind} | transfers | stream B/transfer | JSON B/transfer | write s | check s | check_stream s | check_stream M transfers/s |");
    println!("|---|---|---|---|---|---|---|---|");
    for side in sides {
        let spec = format!("mesh:{side}x{side}");
        let topo = parse_spec(&spec, &SpecDefaults::default())?;
        let collective =
            Collective::over_all(&topo, kind, kind.has_root().then_some(0), 1, 1 << 30)?;
        let schedule = synthesize(&topo, &collective, &SynthOptions::default())?;
        let header = StreamHeader::new(
            spec.clone(),
            collective.spec().clone(),
            schedule.chunk_bytes,
            Some(Network::of(&topo)),
        );
        let path = dir.join(format!("{spec}.tts"));
        let clock = Instant::now();
        tacos::fsio::write_atomic_with(&path, |w| {
            let mut s = StreamWriter::new(w, &header)?;
            for t in &schedule.transfers {
                s.push(t)?;
            }
            s.finish().map(|_| ())
        })?;
        let write_s = clock.elapsed().as_secs_f64();
        let file_bytes = std::fs::metadata(&path)
            .map_err(|e| tacos::Error::io(&path, e))?
            .len();
        let header_bytes = serde_json::to_vec(&header).expect("a header is JSON").len() as u64
            + stream::STREAM_FORMAT.len() as u64
            + 2;
        let mut json = CountingWriter(0);
        schedule
            .write_json(&mut json)
            .map_err(|e| tacos::Error::io("JSON", e))?;
        let n = schedule.transfers.len() as f64;
        let clock = Instant::now();
        let held = check(&schedule, &topo)?;
        let check_s = clock.elapsed().as_secs_f64();
        let clock = Instant::now();
        let streamed = check_stream(stream::open(&path)?, &topo)?;
        let stream_s = clock.elapsed().as_secs_f64();
        assert_eq!(held, streamed, "the two checkers disagree");
        println!(
            "| {spec} | {} | {:.2} | {:.1} | {write_s:.2} | {check_s:.2} | {stream_s:.2} | {:.1} |",
            schedule.transfers.len(),
            (file_bytes - header_bytes) as f64 / n,
            json.0 as f64 / n,
            n / stream_s / 1e6,
        );
        std::fs::remove_file(&path).map_err(|e| tacos::Error::io(&path, e))?;
    }
    std::fs::remove_dir_all(&dir).map_err(|e| tacos::Error::io(&dir, e))
}

/// Counts what is written (the JSON schedule's size without keeping it).
struct CountingWriter(u64);

impl std::io::Write for CountingWriter {
    fn write(&mut self, buf: &[u8]) -> std::io::Result<usize> {
        self.0 += buf.len() as u64;
        Ok(buf.len())
    }

    fn flush(&mut self) -> std::io::Result<()> {
        Ok(())
    }
}
