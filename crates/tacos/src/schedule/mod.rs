//! `Schedule`: an algorithm as data. Every transfer moves one chunk from one NPU to
//! another over a time interval, copying or reducing. Synthesized algorithms and
//! baselines both produce one; the checker, the simulator and the MSCCL lowering take one.

mod check;
pub(crate) mod in_flight;
mod in_switch;
pub mod memory;
pub(crate) mod spool;
pub mod stream;

pub use check::{check, check_concurrent, check_data_flow, check_stream, CheckReport};
pub use in_switch::{shared_links, GroupKey};

use crate::collective::{ChunkId, CollectiveSpec};
use crate::error::{Error, FileFormat, FileProblem, Result};
use crate::fsio::parse_json;
use crate::topology::{Link, LinkId, NpuId, Topology};
use crate::units::{Picos, PICOS_PER_US};
use serde::{Deserialize, Serialize};
use std::io::Write;
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
///
/// The chunk and the NPUs are held in 32 bits, making a record 32 bytes rather than 48: a
/// 64x64 mesh All-Gather holds 16.8 million of them. They fit: NPU ids are below
/// `topology::MAX_NPUS` and chunk ids below a collective's chunk count, which
/// `Collective::new` holds to at most 2^31. So they are set through [`Transfer::new`] and
/// read through [`Transfer::chunk`], [`Transfer::src`] and [`Transfer::dst`]; a schedule
/// file naming a larger one is refused with the field's name.
///
/// ```
/// use tacos::schedule::{Op, Transfer};
///
/// let t = Transfer::new(5, 0, 1, 0, 1_000, Op::Copy);
/// assert_eq!((t.chunk(), t.src(), t.dst()), (5, 0, 1));
/// ```
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Transfer {
    // Declared in the order a schedule file writes them.
    chunk: u32,
    src: u32,
    dst: u32,
    pub start_ps: Picos,
    pub end_ps: Picos,
    pub op: Op,
    /// The transfer is part of one operation inside a reducing switch on its route
    /// (`Topology::reduces`: NVLS), with every in-switch transfer of the same chunk that
    /// starts when it does and
    /// - for a copy, leaves the same NPU: one multicast, whose sender's links up to the
    ///   switch carry the chunk once for all its destinations;
    /// - for a reduction, reaches the same NPU: one sum inside the switch, whose links
    ///   down to that NPU carry the sum once for all its sources.
    ///
    /// Its contents are those of a plain copy or reduction; only the links it holds differ.
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub in_switch: bool,
}

// The 64x64 mesh All-Gather's 16.8 million transfers are nearly all of its memory.
const _: () = assert!(std::mem::size_of::<Transfer>() == 32);
// Every NPU id and chunk id fits a transfer's 32-bit fields.
const _: () = assert!(crate::topology::MAX_NPUS <= u32::MAX as usize);
const _: () = assert!(crate::collective::MAX_CHUNKS <= u32::MAX as usize);

impl Transfer {
    /// Chunk `chunk` copied or reduced (`op`) from NPU `src` to NPU `dst` during
    /// [start_ps, end_ps).
    ///
    /// # Panics
    /// If an id passes `u32::MAX`, which no NPU of a topology (at most
    /// `topology::MAX_NPUS`) nor chunk of a collective (at most `collective::MAX_CHUNKS`)
    /// does.
    #[inline]
    pub fn new(
        chunk: ChunkId,
        src: NpuId,
        dst: NpuId,
        start_ps: Picos,
        end_ps: Picos,
        op: Op,
    ) -> Transfer {
        Transfer {
            chunk: id32(chunk, "chunk"),
            src: id32(src, "NPU"),
            dst: id32(dst, "NPU"),
            start_ps,
            end_ps,
            op,
            in_switch: false,
        }
    }

    /// The same transfer as part of an operation inside a reducing switch
    /// ([`Transfer::in_switch`]).
    ///
    /// ```
    /// use tacos::schedule::{Op, Transfer};
    /// let multicast = [1, 2, 3].map(|dst| Transfer::new(0, 0, dst, 0, 1_000, Op::Copy).switched());
    /// assert!(multicast.iter().all(|t| t.in_switch));
    /// ```
    #[inline]
    pub fn switched(self) -> Transfer {
        Transfer {
            in_switch: true,
            ..self
        }
    }

    /// The chunk moved.
    #[inline]
    pub fn chunk(&self) -> ChunkId {
        self.chunk as ChunkId
    }

    /// The NPU sending.
    #[inline]
    pub fn src(&self) -> NpuId {
        self.src as NpuId
    }

    /// The NPU receiving.
    #[inline]
    pub fn dst(&self) -> NpuId {
        self.dst as NpuId
    }

    /// Carries chunk `chunk` instead (panics as `new` does).
    #[inline]
    pub fn set_chunk(&mut self, chunk: ChunkId) {
        self.chunk = id32(chunk, "chunk");
    }

    /// The same transfer `by` picoseconds later.
    #[inline]
    pub fn delayed(self, by: Picos) -> Transfer {
        Transfer {
            start_ps: self.start_ps + by,
            end_ps: self.end_ps + by,
            ..self
        }
    }
}

/// `v` as a transfer's 32-bit id; `what` names it in the panic.
#[inline]
fn id32(v: usize, what: &str) -> u32 {
    u32::try_from(v).unwrap_or_else(|_| panic!("{what} {v} passes a transfer's 32 bits"))
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
    /// The network itself, where the writer recorded it (`tacos synth --out` does), so the
    /// schedule can be simulated on exactly the links it was made for; files written
    /// before it was recorded lack it and still read.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub network: Option<Network>,
    pub transfers: Vec<Transfer>,
}

/// A topology as a schedule file records it: every directed link with its figures, and
/// the failed NPUs (a spec string alone loses the defaults, the failures and whatever a
/// file named by a relative path held).
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Network {
    pub npus: usize,
    /// Switch vertices `npus..npus + switches.len()`, by name (none for NPUs only).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub switches: Vec<String>,
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub failed: Vec<NpuId>,
    pub links: Vec<Link>,
    /// The switches that reduce inside themselves (`Topology::reduces`), by name.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub reducing_switches: Vec<String>,
}

impl Network {
    /// The record of `topo`.
    pub fn of(topo: &Topology) -> Network {
        Network {
            npus: topo.npus(),
            switches: topo
                .switches()
                .filter_map(|v| topo.switch_name(v).map(str::to_string))
                .collect(),
            failed: topo.failed().to_vec(),
            links: topo.links().to_vec(),
            reducing_switches: topo
                .reducing_switches()
                .iter()
                .filter_map(|&v| topo.switch_name(v).map(str::to_string))
                .collect(),
        }
    }

    /// The topology again, named `name`; `origin` (the file) prefixes errors.
    pub fn topology(&self, name: &str, origin: &str) -> Result<Topology> {
        let in_file = |e: Error| e.context(format!("{origin}: network"));
        let reducing = self
            .reducing_switches
            .iter()
            .map(|r| match self.switches.iter().position(|s| s == r) {
                Some(i) => Ok(self.npus + i),
                None => Err(in_file(Error::Invalid {
                    input: "reducing_switches".into(),
                    value: r.clone(),
                    allowed: "a switch the network lists".into(),
                })),
            })
            .collect::<Result<Vec<_>>>()?;
        let topo =
            Topology::with_switches(name, self.npus, self.switches.clone(), self.links.clone())
                .and_then(|t| t.with_reducing(&reducing))
                .map_err(in_file)?;
        if self.failed.is_empty() {
            Ok(topo)
        } else {
            topo.fail_npus(&self.failed).map_err(in_file)
        }
    }
}

/// The largest schedule file read, checked before reading.
pub const MAX_FILE_BYTES: u64 = 4 << 30;

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
            network: None,
            transfers,
        }
    }

    /// The time the last transfer ends (the collective time by the schedule's own clock).
    pub fn collective_time_ps(&self) -> Picos {
        self.transfers.iter().map(|t| t.end_ps).max().unwrap_or(0)
    }

    /// JSON text, one transfer (and one network link) per line so large files stay
    /// readable and diffable.
    pub fn to_json(&self) -> String {
        let mut out = Vec::with_capacity(80 * self.transfers.len() + 256);
        self.write_json_with(self.network.as_ref(), &mut out)
            .expect("writing to memory cannot fail");
        String::from_utf8(out).expect("JSON is UTF-8")
    }

    /// `to_json`'s text written to `out` as it is made: a large schedule's text is
    /// several times the size of its records.
    pub fn write_json(&self, out: &mut dyn Write) -> std::io::Result<()> {
        self.write_json_with(self.network.as_ref(), out)
    }

    /// As `write_json`, recording `topo` (which the schedule must have been made for) as
    /// its network, so a reader can rebuild it.
    pub fn write_json_recording(
        &self,
        topo: &Topology,
        out: &mut dyn Write,
    ) -> std::io::Result<()> {
        self.write_json_with(Some(&Network::of(topo)), out)
    }

    fn write_json_with(
        &self,
        network: Option<&Network>,
        out: &mut dyn Write,
    ) -> std::io::Result<()> {
        let head = serde_json::json!({
            "format": self.format,
            "topology": self.topology,
            "collective": self.collective,
            "chunk_bytes": self.chunk_bytes,
        });
        let head = serde_json::to_string_pretty(&head).map_err(std::io::Error::other)?;
        out.write_all(head.trim_end_matches(['\n', '}']).trim_end().as_bytes())?;
        if let Some(n) = network {
            write!(out, ",\n  \"network\": {{\"npus\": {}", n.npus)?;
            if !n.switches.is_empty() {
                out.write_all(b", \"switches\": ")?;
                serde_json::to_writer(&mut *out, &n.switches)?;
            }
            if !n.failed.is_empty() {
                out.write_all(b", \"failed\": ")?;
                serde_json::to_writer(&mut *out, &n.failed)?;
            }
            out.write_all(b", \"links\": [")?;
            write_lines(out, &n.links, "      ")?;
            out.write_all(b"\n  ]}")?;
        }
        out.write_all(b",\n  \"transfers\": [")?;
        write_lines(out, &self.transfers, "    ")?;
        out.write_all(b"\n  ]\n}\n")
    }

    /// Parses schedule JSON; `origin` names the text in errors.
    pub fn from_json(text: &str, origin: &str) -> Result<Schedule> {
        let schedule: Schedule =
            parse_json(text, origin).map_err(|p| p.of(FileFormat::Schedule))?;
        if schedule.format != SCHEDULE_FORMAT {
            return Err(FileProblem::wrong_tag(
                origin,
                "format",
                &schedule.format,
                SCHEDULE_FORMAT,
            )
            .of(FileFormat::Schedule));
        }
        Ok(schedule)
    }

    /// Reads a schedule file: JSON (at most `MAX_FILE_BYTES`), or a transfer stream
    /// (`stream`, told by its first line; only from a regular file, as a pipe cannot be
    /// looked into and read again) whose records fit the memory limit.
    pub fn read(path: &Path) -> Result<Schedule> {
        let regular = std::fs::metadata(path).is_ok_and(|m| m.is_file());
        if regular && stream::is_stream(path)? {
            return stream::open(path)?
                .into_schedule(|_| 0, || format!("reading {}", path.display()));
        }
        let text = crate::fsio::read_text(path, "a schedule file", MAX_FILE_BYTES)?;
        Schedule::from_json(&text, &path.display().to_string())
    }
}

/// The time `link` takes to carry `bytes`, as the synthesizer, the checker and the
/// simulator all count it: the link's alpha-beta time, at least one picosecond (a transfer
/// that takes no time could not be ordered after its own departure). An error, never a
/// saturated time, when it does not fit the picosecond clock.
pub fn link_time_ps(link: &Link, bytes: f64) -> Result<Picos> {
    match link.transfer_ps(bytes) {
        // What a float-to-integer conversion saturates to.
        Picos::MAX => Err(time_limit(
            format!(
                "a {bytes}-byte chunk on link {} -> {} ({} us, {} GB/s)",
                link.src,
                link.dst,
                figure(link.latency_us),
                figure(link.bandwidth_gbps)
            ),
            link.latency_us * PICOS_PER_US + bytes * 1000.0 / link.bandwidth_gbps,
        )),
        ps => Ok(ps.max(1)),
    }
}

/// The time a transfer over `route` (a direct link, or consecutive links through
/// switches) takes for `bytes`: `link_time_ps` of the route's cut-through link
/// (`Topology::route_link`).
pub fn route_time_ps(topo: &Topology, route: &[LinkId], bytes: f64) -> Result<Picos> {
    link_time_ps(&topo.route_link(route.iter().copied()), bytes)
}

/// A figure as a message shows it: plainly, or in scientific notation when it is huge
/// or tiny (a latency of 1e300 us is not printed as 301 digits).
fn figure(x: f64) -> String {
    if x == 0.0 || (1e-6..1e12).contains(&x.abs()) {
        format!("{x}")
    } else {
        format!("{x:e}")
    }
}

/// `t + d`, or an error naming `context()` when the sum passes the picosecond clock.
#[inline]
pub fn later(t: Picos, d: Picos, context: impl FnOnce() -> String) -> Result<Picos> {
    t.checked_add(d)
        .ok_or_else(|| time_limit(context(), t as f64 + d as f64))
}

/// The error for a time past the picosecond clock (2^64 ps, about 213 days): a saturated
/// time would be a wrong answer, so the figure is refused instead.
pub fn time_limit(context: String, would_be_ps: f64) -> Error {
    Error::Limit {
        what: "us of time",
        value: (would_be_ps / PICOS_PER_US) as u64,
        limit: (Picos::MAX as f64 / PICOS_PER_US) as u64,
        context,
    }
}

/// Writes `items` as a JSON array's elements, one per line after `indent`.
fn write_lines<T: Serialize>(
    out: &mut dyn Write,
    items: &[T],
    indent: &str,
) -> std::io::Result<()> {
    for (i, item) in items.iter().enumerate() {
        out.write_all(if i == 0 { b"\n" } else { b",\n" })?;
        out.write_all(indent.as_bytes())?;
        serde_json::to_writer(&mut *out, item)?;
    }
    Ok(())
}
