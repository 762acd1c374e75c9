//! `Schedule`: an algorithm as data. Every transfer moves one chunk from one NPU to
//! another over a time interval, copying or reducing. Synthesized algorithms and
//! baselines both produce one; the checker, the simulator and the MSCCL lowering take one.

mod check;

pub use check::{check, check_concurrent, check_data_flow, CheckReport};

use crate::collective::{ChunkId, CollectiveSpec};
use crate::error::{Error, Result};
use crate::fsio::parse_json;
use crate::topology::NpuId;
use crate::units::Picos;
use serde::{Deserialize, Serialize};
use std::path::Path;

/// What the destination does with an arriving chunk.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum Op {
    /// The chunk overwrites the destination's copy.
    Copy,
    /// The chunk is added to the destination's partial sum.
    Reduce,
}

/// One chunk moving from `src` to `dst` during [start_ps, end_ps).
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Transfer {
    pub chunk: ChunkId,
    pub src: NpuId,
    pub dst: NpuId,
    pub start_ps: Picos,
    pub end_ps: Picos,
    pub op: Op,
}

/// Format tag written into schedule files, so a wrong file is named as such.
pub const SCHEDULE_FORMAT: &str = "tacos-schedule/1";

/// A collective algorithm: the collective it performs, its chunk size and its transfers,
/// ordered by start time.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Schedule {
    pub format: String,
    /// The topology it was made for (its spec or name), for people reading the file.
    pub topology: String,
    pub collective: CollectiveSpec,
    pub chunk_bytes: f64,
    pub transfers: Vec<Transfer>,
}

impl Schedule {
    /// A schedule with its transfers sorted by (start, src, dst, chunk) (unique in a
    /// contention-free schedule; the unstable sort is deterministic all the same).
    pub fn new(
        topology: impl Into<String>,
        collective: CollectiveSpec,
        chunk_bytes: f64,
        mut transfers: Vec<Transfer>,
    ) -> Schedule {
        transfers.sort_unstable_by_key(|t| (t.start_ps, t.src, t.dst, t.chunk));
        Schedule {
            format: SCHEDULE_FORMAT.to_string(),
            topology: topology.into(),
            collective,
            chunk_bytes,
            transfers,
        }
    }

    /// The time the last transfer ends (the collective time by the schedule's own clock).
    pub fn collective_time_ps(&self) -> Picos {
        self.transfers.iter().map(|t| t.end_ps).max().unwrap_or(0)
    }

    /// JSON text, one transfer per line so large files stay readable and diffable.
    pub fn to_json(&self) -> String {
        let head = serde_json::json!({
            "format": self.format,
            "topology": self.topology,
            "collective": self.collective,
            "chunk_bytes": self.chunk_bytes,
        });
        let head = serde_json::to_string_pretty(&head).expect("schedule head serializes");
        let mut out = String::with_capacity(80 * self.transfers.len() + head.len());
        out.push_str(head.trim_end_matches(['\n', '}']).trim_end());
        out.push_str(",\n  \"transfers\": [");
        for (i, t) in self.transfers.iter().enumerate() {
            out.push_str(if i == 0 { "\n    " } else { ",\n    " });
            out.push_str(&serde_json::to_string(t).expect("transfer serializes"));
        }
        out.push_str("\n  ]\n}\n");
        out
    }

    /// Parses schedule JSON; `origin` names the text in errors.
    pub fn from_json(text: &str, origin: &str) -> Result<Schedule> {
        let schedule: Schedule = parse_json(text, origin).map_err(Error::Schedule)?;
        if schedule.format != SCHEDULE_FORMAT {
            return Err(Error::Schedule(format!(
                "{origin}: format is '{}', expected '{SCHEDULE_FORMAT}'",
                schedule.format
            )));
        }
        Ok(schedule)
    }

    /// Reads a schedule file.
    pub fn read(path: &Path) -> Result<Schedule> {
        let text = std::fs::read_to_string(path).map_err(|e| Error::io(path, e))?;
        Schedule::from_json(&text, &path.display().to_string())
    }
}
