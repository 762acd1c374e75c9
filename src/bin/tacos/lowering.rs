//! `--xml` and its options: the MSCCL program `pipeline::program` lowers and verifies.

use super::{at_least_one, TargetArgs};
use anyhow::Context;
use clap::{Args, ValueEnum};
use std::path::PathBuf;
use tacos::fsio::write_atomic;
use tacos::msccl::{LowerOptions, Program, Proto};
use tacos::pipeline::Verified;

/// Where input and output live, as the program expects them.
#[derive(Clone, Copy, Debug, PartialEq, Eq, ValueEnum)]
pub enum Placement {
    /// Input and output are one buffer
    InPlace,
    /// Separate input and output buffers
    OutOfPlace,
}

#[derive(Debug, Args)]
pub struct LowerArgs {
    /// Also lower the algorithm to MSCCL algorithm XML and write it to this file
    #[arg(long, value_name = "FILE")]
    pub xml: Option<PathBuf>,
    /// MSCCL protocol: Simple, LL or LL128 (default: LL up to 512 KiB, else Simple)
    #[arg(long, value_parser = proto, requires = "xml")]
    pub proto: Option<Proto>,
    /// Copies of the algorithm on separate channels, each moving part of every chunk
    /// [default: 1, or with the executor cost model (no --alpha-beta) as many as the
    /// busiest link needs to move data at its rate where that is faster, as `tacos
    /// compile` does]
    #[arg(long, value_parser = at_least_one, requires = "xml")]
    pub instances: Option<usize>,
    /// Buffer placement the program (--xml) or plan (--plan) is for (default: in place for
    /// allreduce, broadcast and reduce, out of place otherwise)
    #[arg(long, value_enum)]
    pub placement: Option<Placement>,
    /// Smallest message in bytes the executor picks the algorithm for (default: the size)
    #[arg(long, value_parser = super::size, requires = "xml")]
    pub min_bytes: Option<u64>,
    /// Largest message in bytes the executor picks the algorithm for (default: twice the
    /// size, less one byte)
    #[arg(long, value_parser = super::size, requires = "xml")]
    pub max_bytes: Option<u64>,
    /// The loader the XML is for: the lowering keeps to its limits
    #[command(flatten)]
    pub target: TargetArgs,
}

fn proto(s: &str) -> Result<Proto, String> {
    s.parse().map_err(|e: tacos::Error| e.to_string())
}

impl LowerArgs {
    /// The lowering options, when XML is asked for.
    pub fn options(&self) -> anyhow::Result<Option<LowerOptions>> {
        if self.xml.is_none() {
            return Ok(None);
        }
        Ok(Some(LowerOptions {
            in_place: self.in_place(),
            instances: self.instances.unwrap_or(1),
            proto: self.proto,
            min_bytes: self.min_bytes,
            max_bytes: self.max_bytes,
            target: self.target.target()?,
            ..LowerOptions::default()
        }))
    }

    /// Whether `--placement` asks for in place, where it is given.
    pub fn in_place(&self) -> Option<bool> {
        self.placement.map(|p| p == Placement::InPlace)
    }

    /// Writes the verified program to the `--xml` file, if one is given; returns its path.
    pub fn write(&self, verified: &Verified) -> anyhow::Result<Option<&PathBuf>> {
        let Some(path) = &self.xml else {
            return Ok(None);
        };
        write_atomic(path, verified.xml().as_bytes()).context("cannot write the MSCCL XML")?;
        Ok(Some(path))
    }
}

/// One line describing a written program.
pub fn describe(program: &Program) -> String {
    let tbs: usize = program.gpus.iter().map(|g| g.threadblocks.len()).sum();
    format!(
        "{} GPUs, {} channel{}, {tbs} threadblocks, {} steps, {}, {}",
        program.gpus.len(),
        program.nchannels,
        if program.nchannels == 1 { "" } else { "s" },
        program.steps(),
        program.proto,
        if program.inplace {
            "in place"
        } else {
            "out of place"
        }
    )
}
