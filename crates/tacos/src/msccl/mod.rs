//! MSCCL algorithm programs: the XML that the MSCCL executor, RCCL's MSCCL and the MSCCL
//! scheduler load.
//!
//! A [`Program`] is the XML as data: per GPU, threadblocks that each talk to at most one
//! send peer and one receive peer on one channel and run their steps in order. [`lower()`]
//! turns a [`crate::schedule::Schedule`] into one, [`xml`] writes and parses the text,
//! [`verify()`] executes a program symbolically and checks it computes its collective, and
//! [`timing`] times it with the simulator's alpha-beta rules. [`limits`] holds the
//! executor's hard limits, which the lowering respects; [`rules`] lists every rule of a
//! [`Target`]'s loader a program breaks, limits included. [`footprint`] estimates what
//! executing a program costs, so that verifying or timing a hostile one is refused before
//! it allocates.
//!
//! ```
//! use tacos::collective::CollectiveKind;
//! use tacos::msccl::{lower, verify, LowerOptions, VerifyOptions};
//! use tacos::pipeline::{synthesize, Request};
//! use tacos::synth::SynthOptions;
//! use tacos::topology::{parse_spec, SpecDefaults};
//!
//! let ring = parse_spec("ring:4", &SpecDefaults::default()).unwrap();
//! let request = Request::new(CollectiveKind::AllGather, 1 << 20);
//! let checked = synthesize(&ring, &request, 1, &SynthOptions::seeded(0)).unwrap();
//! let program = lower(checked.schedule(), &ring, &LowerOptions::default()).unwrap();
//! assert_eq!(program.gpus.len(), 4);
//! assert!(verify(&program, &VerifyOptions::default()).problems.is_empty());
//! ```

pub mod footprint;
pub mod layout;
pub mod limits;
pub mod lower;
pub mod rules;
pub mod target;
pub mod timing;
pub mod verify;
pub mod xml;

mod exec;

pub use layout::Layout;
pub use limits::Limits;
pub use lower::{lower, LowerOptions};
pub use rules::{Element, Rule, RuleBreak};
pub use target::{LimitOverrides, Profile, Target};
pub use timing::{simulate_program, simulate_program_on, ProgramTimer};
pub use verify::{verify, Problem, ProblemKind, VerifyOptions, VerifyReport};
pub use xml::{parse_program, read_program, write_program};

use crate::collective::CollectiveKind;
use crate::error::{Error, Result};
use serde::Serialize;
use std::fmt;
use std::str::FromStr;

/// Attributes the model does not know, kept in file order so a file round-trips.
pub type ExtraAttrs = Vec<(String, String)>;

/// The executor's transfer protocol.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum Proto {
    Simple,
    LL,
    LL128,
}

impl Proto {
    pub fn name(self) -> &'static str {
        match self {
            Proto::Simple => "Simple",
            Proto::LL => "LL",
            Proto::LL128 => "LL128",
        }
    }

    /// The protocol for an algorithm tuned for `size_bytes`: LL's low latency pays off
    /// below 512 KiB, Simple's bandwidth above. LL128 is left to users who ask for it,
    /// since NCCL enables it only on some platforms.
    pub fn for_size(size_bytes: u64) -> Proto {
        if size_bytes <= 512 << 10 {
            Proto::LL
        } else {
            Proto::Simple
        }
    }
}

impl FromStr for Proto {
    type Err = Error;

    fn from_str(s: &str) -> Result<Proto> {
        match s {
            "Simple" => Ok(Proto::Simple),
            "LL" => Ok(Proto::LL),
            "LL128" => Ok(Proto::LL128),
            _ => Err(Error::Unknown {
                what: "protocol",
                given: s.into(),
                known: vec!["Simple", "LL", "LL128"],
            }),
        }
    }
}

/// Which buffer a step reads or writes.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum Buf {
    Input,
    Output,
    Scratch,
}

impl Buf {
    pub fn code(self) -> &'static str {
        match self {
            Buf::Input => "i",
            Buf::Output => "o",
            Buf::Scratch => "s",
        }
    }

    pub fn from_code(s: &str) -> Option<Buf> {
        match s {
            "i" => Some(Buf::Input),
            "o" => Some(Buf::Output),
            "s" => Some(Buf::Scratch),
            _ => None,
        }
    }
}

/// A step's instruction (the XML `type`).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum Instr {
    /// `s`: send src to the send peer.
    Send,
    /// `r`: receive from the receive peer into dst.
    Recv,
    /// `rcs`: receive, write dst, send the received data on.
    RecvCopySend,
    /// `rrs`: receive, add src, send the sum on (nothing written locally).
    RecvReduceSend,
    /// `rrc`: receive, add src, write the sum to dst.
    RecvReduceCopy,
    /// `rrcs`: receive, add src, write the sum to dst and send it on.
    RecvReduceCopySend,
    /// `cpy`: local copy of src to dst.
    Copy,
    /// `re`: local reduction of src into dst.
    Reduce,
    /// `nop`: no data; carries a dependency for the next step.
    Nop,
}

impl Instr {
    pub const ALL: [Instr; 9] = [
        Instr::Send,
        Instr::Recv,
        Instr::RecvCopySend,
        Instr::RecvReduceSend,
        Instr::RecvReduceCopy,
        Instr::RecvReduceCopySend,
        Instr::Copy,
        Instr::Reduce,
        Instr::Nop,
    ];

    pub fn code(self) -> &'static str {
        match self {
            Instr::Send => "s",
            Instr::Recv => "r",
            Instr::RecvCopySend => "rcs",
            Instr::RecvReduceSend => "rrs",
            Instr::RecvReduceCopy => "rrc",
            Instr::RecvReduceCopySend => "rrcs",
            Instr::Copy => "cpy",
            Instr::Reduce => "re",
            Instr::Nop => "nop",
        }
    }

    pub fn from_code(s: &str) -> Option<Instr> {
        Instr::ALL.into_iter().find(|i| i.code() == s)
    }

    /// Whether the step sends to the threadblock's send peer.
    pub fn sends(self) -> bool {
        matches!(
            self,
            Instr::Send | Instr::RecvCopySend | Instr::RecvReduceSend | Instr::RecvReduceCopySend
        )
    }

    /// Whether the step receives from the threadblock's receive peer.
    pub fn receives(self) -> bool {
        matches!(
            self,
            Instr::Recv
                | Instr::RecvCopySend
                | Instr::RecvReduceSend
                | Instr::RecvReduceCopy
                | Instr::RecvReduceCopySend
        )
    }

    /// Whether the step reads its src buffer.
    pub fn reads_src(self) -> bool {
        matches!(
            self,
            Instr::Send
                | Instr::RecvReduceSend
                | Instr::RecvReduceCopy
                | Instr::RecvReduceCopySend
                | Instr::Copy
                | Instr::Reduce
        )
    }

    /// Whether the step writes its dst buffer.
    pub fn writes_dst(self) -> bool {
        matches!(
            self,
            Instr::Recv
                | Instr::RecvCopySend
                | Instr::RecvReduceCopy
                | Instr::RecvReduceCopySend
                | Instr::Copy
                | Instr::Reduce
        )
    }

    /// Whether the step adds data together.
    pub fn reduces(self) -> bool {
        matches!(
            self,
            Instr::RecvReduceSend
                | Instr::RecvReduceCopy
                | Instr::RecvReduceCopySend
                | Instr::Reduce
        )
    }
}

/// A step waits until step `step` of threadblock `tb` on the same GPU has finished.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub struct Dep {
    pub tb: usize,
    pub step: usize,
}

/// One step of a threadblock. Offsets and counts are in chunks of the buffer.
#[derive(Clone, Debug, PartialEq)]
pub struct Step {
    pub instr: Instr,
    pub src_buf: Buf,
    pub src_off: i64,
    pub dst_buf: Buf,
    pub dst_off: i64,
    /// Chunks moved (`cnt`).
    pub count: u32,
    pub dep: Option<Dep>,
    /// Another step waits on this one (`hasdep`): the executor signals only such steps.
    pub has_dep: bool,
    pub extra: ExtraAttrs,
}

impl Step {
    /// A step with no dependency and no extra attributes.
    pub fn new(instr: Instr, src: (Buf, i64), dst: (Buf, i64), count: u32) -> Step {
        Step {
            instr,
            src_buf: src.0,
            src_off: src.1,
            dst_buf: dst.0,
            dst_off: dst.1,
            count,
            dep: None,
            has_dep: false,
            extra: Vec::new(),
        }
    }

    /// A `nop` carrying one dependency.
    pub fn nop(dep: Dep) -> Step {
        Step {
            dep: Some(dep),
            ..Step::new(Instr::Nop, (Buf::Input, -1), (Buf::Output, -1), 0)
        }
    }
}

/// A threadblock: its peers, its channel and its steps in order. Its id is its index in
/// `Gpu::threadblocks`.
#[derive(Clone, Debug, PartialEq)]
pub struct Threadblock {
    pub send: Option<usize>,
    pub recv: Option<usize>,
    pub channel: usize,
    pub steps: Vec<Step>,
    pub extra: ExtraAttrs,
}

/// One GPU (rank): its buffer sizes in chunks and its threadblocks, indexed by id.
#[derive(Clone, Debug, PartialEq)]
pub struct Gpu {
    pub input_chunks: usize,
    pub output_chunks: usize,
    pub scratch_chunks: usize,
    pub threadblocks: Vec<Threadblock>,
    pub extra: ExtraAttrs,
}

/// An MSCCL algorithm. GPUs are indexed by rank.
#[derive(Clone, Debug, PartialEq)]
pub struct Program {
    pub name: String,
    /// The `coll` attribute as written (see [`Program::collective_kind`]).
    pub collective: String,
    /// The root rank of a rooted collective (the `root` attribute: loaders ignore it,
    /// checkers need it).
    pub root: Option<usize>,
    pub proto: Proto,
    pub nchannels: usize,
    pub nchunksperloop: usize,
    pub inplace: bool,
    pub outofplace: bool,
    /// Smallest and largest message the executor picks the algorithm for; `None` stands
    /// for the whole range (0 and [`WHOLE_RANGE_MAX_BYTES`]), which the writer writes out.
    /// The parser always sets them, inferring the whole range when a file lacks them.
    pub min_bytes: Option<u64>,
    pub max_bytes: Option<u64>,
    pub gpus: Vec<Gpu>,
    pub extra: ExtraAttrs,
    /// `<algo>` attributes the file lacked and what was read in their place, for warnings
    /// and the loader rules (a target may require them); never written.
    pub inferred: Vec<Inferred>,
    /// Loader rules broken by the text the program was parsed from where the model cannot
    /// show it (an XML declaration, single-quoted values, more than 16 attributes on an
    /// element): found by the parser, reported by [`rules::check`]; a program written back
    /// out no longer breaks them.
    pub syntax_breaks: Vec<RuleBreak>,
}

/// The largest `maxBytes` the executor reads (it stores it as int64): the top of the whole
/// size range, written for a program that names none.
pub const WHOLE_RANGE_MAX_BYTES: u64 = i64::MAX as u64;

/// An `<algo>` attribute a file lacked, and the value the parser used in its place
/// (msccl-tools writes neither `outofplace` nor `minBytes`/`maxBytes`).
#[derive(Clone, Debug, PartialEq, Eq, Serialize)]
pub struct Inferred {
    pub attribute: &'static str,
    pub value: String,
    /// How the value was chosen.
    pub reason: &'static str,
}

impl fmt::Display for Inferred {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(
            f,
            "no {} attribute: read as {}=\"{}\" ({})",
            self.attribute, self.attribute, self.value, self.reason
        )
    }
}

impl Program {
    /// The collective `coll` names, if it is one of ours (`reduce_scatter` is the older
    /// executor's spelling of `reducescatter`).
    pub fn collective_kind(&self) -> Option<CollectiveKind> {
        match self.collective.as_str() {
            "reduce_scatter" => Some(CollectiveKind::ReduceScatter),
            name => CollectiveKind::ALL.into_iter().find(|k| k.name() == name),
        }
    }

    /// Number of steps over every threadblock.
    pub fn steps(&self) -> usize {
        self.gpus
            .iter()
            .flat_map(|g| &g.threadblocks)
            .map(|t| t.steps.len())
            .sum()
    }
}

/// Names a step in messages: "GPU 1 tb 2 step 5 (rcs)".
pub(crate) fn step_name(program: &Program, gpu: usize, tb: usize, step: usize) -> String {
    let instr = program.gpus[gpu].threadblocks[tb].steps[step].instr;
    format!("GPU {gpu} tb {tb} step {step} ({})", instr.code())
}

impl fmt::Display for Proto {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.name())
    }
}
