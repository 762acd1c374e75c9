//! What is asked for and how the search is set: the request, K (chunks per NPU) and its
//! default search, the seeds, and the options every front end shares.

use super::*;
use crate::synth::goes_round;

/// The K values an automatic choice tries first; the search then tries K between them
/// beside the fastest (`trials::refine`).
pub const AUTO_CHUNKS: [usize; 4] = [1, 2, 4, 8];

/// The K values a command's default search ([`default_chunks`]) may try: those of
/// [`AUTO_CHUNKS`] and, where the search's budget leaves room (small problems), 16, which
/// pipelines a ring's or a slow dimension's chunks finer.
pub const SEARCH_CHUNKS: [usize; 5] = [1, 2, 4, 8, 16];

/// K, the chunks each NPU's share is split into: more chunks pipeline better over
/// multi-hop paths, but every chunk pays each link's latency, so the best K depends on the
/// size and is found by trying.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub enum Chunks {
    Fixed(usize),
    /// Each of [`AUTO_CHUNKS`] and K between them beside the fastest, the fastest kept.
    #[default]
    Auto,
    /// Each of [`SEARCH_CHUNKS`] up to this K (1 at least) and K between them beside the
    /// fastest, the fastest kept: the search
    /// [`default_chunks`] sizes to the problem.
    UpTo(usize),
}

impl Chunks {
    pub(super) fn candidates(self) -> Vec<usize> {
        match self {
            Chunks::Fixed(k) => vec![k],
            Chunks::Auto => AUTO_CHUNKS.to_vec(),
            Chunks::UpTo(most) => SEARCH_CHUNKS
                .into_iter()
                .filter(|&k| k == 1 || k <= most)
                .collect(),
        }
    }

    /// The one K tried, where only one is.
    pub fn only(self) -> Option<usize> {
        match self.candidates().as_slice() {
            &[k] => Some(k),
            _ => None,
        }
    }
}

/// The K search a command makes unless told: the values of [`SEARCH_CHUNKS`] up to the
/// largest whose search, with the seeds [`default_seeds`] gives it, matches at most
/// [`DEFAULT_SEARCH_WORK`] chunk deliveries (NPUs^2 x K summed over every K and seed,
/// some 0.3 s of trials), so that small and mid-sized problems get the best K and a large
/// one is not synthesized fifteen times over: up to 16 to 64 NPUs, 8 to 128, K = 1 alone
/// from 512 NPUs on.
///
/// ```
/// use tacos::collective::CollectiveKind;
/// use tacos::pipeline::{default_chunks, Chunks, Request};
/// use tacos::topology::{parse_spec, SpecDefaults};
///
/// let request = Request::new(CollectiveKind::AllGather, 1 << 30);
/// let torus = parse_spec("torus:4x4", &SpecDefaults::default()).unwrap();
/// assert_eq!(default_chunks(&torus, &request), Chunks::UpTo(16));
/// let mesh = parse_spec("mesh:32x32", &SpecDefaults::default()).unwrap();
/// assert_eq!(default_chunks(&mesh, &request), Chunks::UpTo(1));
/// ```
pub fn default_chunks(topo: &Topology, request: &Request) -> Chunks {
    let squared = (participants(topo, request) as u64).pow(2);
    let mut most = 1;
    for (i, &k) in SEARCH_CHUNKS.iter().enumerate() {
        let seeds = seeds_for_work(squared.saturating_mul(k as u64)) as u64;
        let summed: u64 = SEARCH_CHUNKS[..=i].iter().map(|&k| k as u64).sum();
        if seeds.saturating_mul(squared).saturating_mul(summed) <= DEFAULT_SEARCH_WORK {
            most = k;
        }
    }
    Chunks::UpTo(most)
}

/// Chunk deliveries (NPUs^2 x K, summed over the trials) a default search may match.
pub const DEFAULT_SEARCH_WORK: u64 = 1 << 19;

/// What to synthesize: a collective of a size over some NPUs.
#[derive(Clone, Debug, PartialEq)]
pub struct Request {
    pub kind: CollectiveKind,
    /// The buffer every NPU ends with, in bytes (nccl-tests' convention).
    pub size_bytes: u64,
    /// The NPUs taking part, in rank order; by default every alive NPU.
    pub npus: Option<Vec<NpuId>>,
    /// The root of a rooted collective; by default the first NPU taking part.
    pub root: Option<NpuId>,
}

impl Request {
    /// `kind` of `size_bytes` over every alive NPU, rooted (if at all) at the first.
    pub fn new(kind: CollectiveKind, size_bytes: u64) -> Request {
        Request {
            kind,
            size_bytes,
            npus: None,
            root: None,
        }
    }

    /// The collective with `k` chunks per NPU.
    pub fn spec(&self, topo: &Topology, k: usize) -> CollectiveSpec {
        let npus = self.npus.clone().unwrap_or_else(|| topo.alive_npus());
        let root = match (self.kind.has_root(), self.root) {
            (true, None) => npus.first().copied(),
            (_, root) => root,
        };
        CollectiveSpec {
            kind: self.kind,
            root,
            npus,
            chunks_per_npu: k,
            size_bytes: self.size_bytes,
        }
    }
}

/// How many seeds a search tries unless told: several where a synthesis is quick enough
/// that more go unnoticed (a single seed lands on a worse schedule than the C++ TACOS's
/// median in up to two of three seeds on small meshes and tori), one where each takes
/// long. The work grows with the chunk deliveries, NPUs^2 x K at the largest K tried: up
/// to 2^14 (64 NPUs at K = 4, a few ms a trial) 8 seeds, up to 2^16 (256 NPUs at K = 1,
/// some 40 ms) 4, up to 2^18 2, beyond that 1; on two cores each adds at most about
/// 0.1 s.
pub fn default_seeds(topo: &Topology, request: &Request, chunks: Chunks) -> usize {
    let npus = participants(topo, request) as u64;
    let k = chunks.candidates().into_iter().max().unwrap_or(1) as u64;
    seeds_for_work(npus.saturating_mul(npus).saturating_mul(k))
}

/// [`default_seeds`] for a matching of `work` chunk deliveries (NPUs^2 x K).
pub(super) fn seeds_for_work(work: u64) -> usize {
    match work {
        0..=0x4000 => 8,
        0x4001..=0x1_0000 => 4,
        0x1_0001..=0x4_0000 => 2,
        _ => 1,
    }
}

/// The NPUs taking part in `request`.
pub(super) fn participants(topo: &Topology, request: &Request) -> usize {
    request
        .npus
        .as_ref()
        .map_or_else(|| topo.alive_npus().len(), Vec::len)
}

/// How to search and what to emit.
#[derive(Clone, Debug, PartialEq)]
pub struct Options {
    pub chunks: Chunks,
    /// Seeds of the synthesizer's random choices, each tried with each K.
    pub seeds: Vec<u64>,
    /// Placement, protocol, size range and target of the program. Without a name the
    /// program is named `tacos-{collective}-k{K}-s{seed}` (`-p{seed}` planned, `-t{seed}`
    /// planned with shallow trees, `-w{seed}` with one-way trees),
    /// as `compile` names it.
    pub lowering: LowerOptions,
    /// The memory a trial may hold; trials run side by side only while their estimates
    /// fit it together. (The steps themselves, which take no options, also hold to the
    /// process's limit, `MemoryLimit::default()`, which this defaults to.)
    pub max_memory: MemoryLimit,
    /// Each trial synthesized replicated (`synth::Replicated`): one node matched, its
    /// transfers shifted onto every other.
    pub replicate: bool,
    /// Each K also tried with the chunks' ways planned (`SynthOptions::planned`, with the
    /// first seed) where planning applies ([`planning_applies`], not replicated), trees
    /// balanced, shallow and, round rings, one way (`SynthOptions::shape`): the fastest
    /// way is kept.
    pub planned: bool,
    /// How [`program`] times the programs it ranks and keeps: by the executor cost model
    /// where given (what `tacos simulate --xml` and `tacos verify` say of the same file),
    /// else by bare alpha-beta messages.
    pub executor: Option<Executor>,
    /// With `executor`: each program is also lowered on as many instances as its busiest
    /// link needs, the faster kept, as `compile` does ([`priced`]).
    pub fill_instances: bool,
    /// At each K, the baselines that define the collective are candidates too ([`baseline`],
    /// up to [`MAX_BASELINE_NPUS`]), so that what is kept is never slower than one of them.
    pub baselines: bool,
    /// With `baselines`, where switches reduce (`Topology::reduces`), the in-switch
    /// schedule is a candidate too (`Baseline::InSwitch`). [`program`] leaves it out
    /// whatever this says: MSCCL XML has no in-switch operation.
    pub in_switch: bool,
}

impl Options {
    /// What the synthesizer is told for a trial with `seed`, planned (trees grown so) or
    /// not.
    pub(super) fn synth(&self, seed: u64, plan: Option<TreeShape>) -> SynthOptions {
        SynthOptions {
            seed,
            replicate: self.replicate,
            planned: plan.is_some(),
            shape: plan.unwrap_or_default(),
        }
    }

    /// The (seed, plan) trials made at each K: every seed, then (where planning applies)
    /// planned with the first seed, balanced and, where the chunks go along trees, shallow
    /// and, where a dimension is a ring (`synth::goes_round`), one way round, so that ties
    /// go to the free matching.
    pub(super) fn ways(&self, topo: &Topology, request: &Request) -> Vec<(u64, Option<TreeShape>)> {
        let plans = self.planned && !self.replicate && planning_applies(topo, request);
        let first = self.seeds.first().copied().filter(|_| plans);
        // Chunks with one target each follow planned paths, of one shape.
        let trees = [TreeShape::Balanced, TreeShape::Shallow, TreeShape::OneWay];
        let shapes = match request.kind.one_target() {
            true => &trees[..1],
            false if plans && goes_round(topo) => &trees[..],
            false => &trees[..2],
        };
        let free = self.seeds.iter().map(|&seed| (seed, None));
        let planned = first
            .into_iter()
            .flat_map(|seed| shapes.iter().map(move |&shape| (seed, Some(shape))));
        free.chain(planned).collect()
    }

    /// The baselines tried at `k` beside the synthesized trials: none where K is fixed,
    /// which asks for the synthesizer's schedule at that K.
    pub(super) fn baselines(&self, topo: &Topology, request: &Request, k: usize) -> Vec<Baseline> {
        match self.baselines && !matches!(self.chunks, Chunks::Fixed(_)) {
            true => baselines::tried(request.kind, participants(topo, request), k)
                .into_iter()
                .filter(|b| b.runs_on(topo) && (self.in_switch || b.writes_xml()))
                .collect(),
            false => Vec::new(),
        }
    }

    /// The search `tacos synth` makes for `request` unless told: K searched as
    /// [`default_chunks`] sizes it, [`default_seeds`] seeds from `first_seed`, everything
    /// else [`Options::default`].
    ///
    /// ```
    /// use tacos::collective::CollectiveKind;
    /// use tacos::pipeline::{self, Options, Request};
    /// use tacos::topology::{parse_spec, SpecDefaults};
    ///
    /// let ring = parse_spec("ring:8", &SpecDefaults::default()).unwrap();
    /// let request = Request::new(CollectiveKind::AllGather, 1 << 30);
    /// let options = Options::searching(&ring, &request, 0);
    /// assert_eq!(options.seeds.len(), 8);
    /// let found = pipeline::schedule(&ring, &request, &options).unwrap();
    /// tacos::schedule::check(found.kept.schedule(), &ring).unwrap();
    /// ```
    pub fn searching(topo: &Topology, request: &Request, first_seed: u64) -> Options {
        let chunks = default_chunks(topo, request);
        let seeds = default_seeds(topo, request, chunks) as u64;
        Options {
            chunks,
            seeds: (first_seed..first_seed.saturating_add(seeds)).collect(),
            ..Options::default()
        }
    }

    /// Whether `schedule` ranks its candidates by simulation: one candidate leaves nothing
    /// to rank, and simulating it can take longer than synthesizing it (a 64x64 mesh).
    pub(super) fn ranks_candidates(&self, topo: &Topology, request: &Request) -> bool {
        self.chunks.candidates().len() > 1
            || self.seeds.len() > 1
            || !self.baselines(topo, request, 1).is_empty()
    }
}

impl Default for Options {
    fn default() -> Self {
        Options {
            chunks: Chunks::Auto,
            seeds: vec![0],
            lowering: LowerOptions::default(),
            max_memory: MemoryLimit::default(),
            replicate: false,
            planned: true,
            executor: None,
            fill_instances: false,
            baselines: true,
            in_switch: true,
        }
    }
}

/// Most NPUs a trial with planned trees is made for: a tree per chunk holds a link per NPU
/// (8 bytes with its subtree's size), NPUs^2 x K in all, and the search stays within the
/// time `default_seeds` budgets.
pub const MAX_TREE_NPUS: usize = 512;

/// Whether a synthesis of `request` may plan its chunks' ways (`SynthOptions::planned`):
/// paths for a collective whose chunks have one target each (All-to-All, Gather,
/// Scatter), trees for one whose chunks are copied or reduced along trees (All-Gather,
/// Reduce-Scatter, All-Reduce, Broadcast, Reduce) over every alive NPU, at most
/// [`MAX_TREE_NPUS`] of them (synthesized held and not replicated: the search's
/// `Options` say).
///
/// ```
/// use tacos::collective::CollectiveKind;
/// use tacos::pipeline::{planning_applies, Request};
/// use tacos::topology::{parse_spec, SpecDefaults};
///
/// let ring = parse_spec("ring:8", &SpecDefaults::default()).unwrap();
/// assert!(planning_applies(&ring, &Request::new(CollectiveKind::AllReduce, 1 << 20)));
/// let some = Request {
///     npus: Some(vec![0, 2, 4]),
///     ..Request::new(CollectiveKind::AllGather, 1 << 20)
/// };
/// assert!(!planning_applies(&ring, &some));
/// ```
pub fn planning_applies(topo: &Topology, request: &Request) -> bool {
    use CollectiveKind::*;
    let alive = topo.alive_npus();
    let every_npu = request.npus.as_ref().map_or(true, |n| n == &alive);
    match request.kind {
        AllToAll | Gather | Scatter => true,
        AllGather | ReduceScatter | AllReduce | Broadcast | Reduce => {
            every_npu && alive.len() <= MAX_TREE_NPUS
        }
    }
}
