//! `tacos check`: check a schedule file, held (`tacos synth --out`) or streamed (`tacos
//! synth --stream`), on the topology it was made for: every transfer over a link or a
//! route through switches for exactly its time, no link carrying two chunks at once,
//! every postcondition met. A stream is read once, in the memory its NPUs and chunks need
//! rather than its transfers, so a file of any length can be checked again where it is
//! used.

use crate::progress::ProgressHandle;
use crate::simulate::schedule_topology;
use crate::TopologyArgs;
use anyhow::Context;
use clap::Args;
use serde::Serialize;
use std::fs::File;
use std::io::{BufReader, Read};
use std::path::{Path, PathBuf};
use tacos::schedule::stream::{self, StreamReader};
use tacos::schedule::{check, check_stream, CheckReport, Schedule};
use tacos::units::ps_to_us;

#[derive(Debug, Args)]
pub struct CheckArgs {
    /// Schedule file: JSON from `tacos synth --out`, or a transfer stream from `tacos synth
    /// --stream`
    #[arg(value_name = "FILE")]
    pub file: PathBuf,
    #[command(flatten)]
    pub topology: TopologyArgs,
    /// Print one JSON object instead of text
    #[arg(long)]
    pub json: bool,
    /// Print nothing but errors (no progress display)
    #[arg(long)]
    pub quiet: bool,
}

/// What `--json` prints.
#[derive(Serialize)]
struct CheckJson {
    file: String,
    /// `stream` or `schedule`.
    form: &'static str,
    /// The topology the file was made for, as it names it.
    made_for: String,
    /// What it was checked on.
    checked_on: String,
    collective: String,
    npus: usize,
    chunks_per_npu: usize,
    transfers: usize,
    collective_time_us: f64,
}

/// A transfer stream opened for reading, with a progress bar of the bytes read headed
/// `label`.
pub(super) fn open_stream(
    path: &Path,
    label: &str,
    hidden: bool,
) -> anyhow::Result<(StreamReader<BufReader<impl Read>>, ProgressHandle)> {
    let file = path.display().to_string();
    let opened = File::open(path).with_context(|| format!("reading {file}"))?;
    let bytes = opened
        .metadata()
        .with_context(|| format!("reading {file}"))?
        .len();
    let progress = ProgressHandle::bytes(label, bytes, hidden);
    let reader = StreamReader::new(BufReader::new(progress.wrap_read(opened)), &file)?;
    Ok((reader, progress))
}

/// Succeeds only when the schedule is correct on its topology.
pub fn run(args: CheckArgs) -> anyhow::Result<()> {
    let file = args.file.display().to_string();
    let hidden = args.quiet || args.json;
    // The topology a schedule is checked on: SPEC, else the network it records.
    let on_topology =
        |made_for: &str, network| schedule_topology(&args.topology, made_for, network, &file);
    let (form, made_for, spec, checked_on, report) = if stream::is_stream(&args.file)? {
        let (reader, _progress) = open_stream(&args.file, "checking", hidden)?;
        let header = reader.header().clone();
        let (topo, used) = on_topology(&header.topology, header.network.as_ref())?;
        let report = check_stream(reader, &topo).with_context(|| format!("{file} on {used}"))?;
        ("stream", header.topology, header.collective, used, report)
    } else {
        let _progress = ProgressHandle::spinner("checking", hidden);
        let schedule = Schedule::read(&args.file)?;
        let (topo, used) = on_topology(&schedule.topology, schedule.network.as_ref())?;
        let report = check(&schedule, &topo).with_context(|| format!("{file} on {used}"))?;
        (
            "schedule",
            schedule.topology,
            schedule.collective,
            used,
            report,
        )
    };
    let CheckReport {
        collective_time_ps,
        transfers,
    } = report;
    if args.json {
        let json = CheckJson {
            file,
            form,
            made_for,
            checked_on,
            collective: spec.kind.to_string(),
            npus: spec.npus.len(),
            chunks_per_npu: spec.chunks_per_npu,
            transfers,
            collective_time_us: ps_to_us(collective_time_ps),
        };
        println!("{}", serde_json::to_string_pretty(&json)?);
    } else {
        println!("file                 {file} ({form})");
        println!("checked on           {checked_on} (made for {made_for})");
        println!(
            "collective           {} over {} NPUs, K={}",
            spec.kind,
            spec.npus.len(),
            spec.chunks_per_npu
        );
        println!("transfers            {transfers}");
        println!(
            "collective time      {:.3} us",
            ps_to_us(collective_time_ps)
        );
        println!("result               correct");
    }
    Ok(())
}
