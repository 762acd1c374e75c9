//! Hierarchical (BlueConnect): on a topology composed of dimensions, Reduce-Scatter along
//! the first dimension, then along the second on the reduced share, and so on; All-Gather
//! goes back from the last dimension to the first. Each dimension's lines run a
//! unidirectional ring in coordinate order. The first dimension moves the most data, as
//! the composed builders put the fastest dimension first (3D-RFS: 200, 100, 50 GB/s).

use super::{span, Plan};
use crate::collective::{ChunkId, CollectiveKind, CollectiveSpec};
use crate::error::{echo, Error, Result};
use crate::schedule::Op;
use crate::topology::{NpuId, Topology};

pub(super) fn plan(topo: &Topology, spec: &CollectiveSpec) -> Result<Plan> {
    let levels;
    let dims = match topo.dimensions() {
        Some(dims) => dims,
        None if topo.has_switches() => {
            levels = switch_levels(topo).ok_or_else(|| {
                Error::baseline("hierarchical", format!(
                    "hierarchical needs a topology composed of dimensions, and the switches of '{}' do not join its NPUs in the lines of a grid (NPU ids with the first dimension fastest, each line within one switch's NPUs)",
                    echo(topo.name())
                ))
            })?;
            &levels
        }
        None => {
            return Err(Error::baseline(
                "hierarchical",
                "hierarchical needs a topology composed of dimensions (a builder such as mesh:4x4, torus:4x4x4, rfs:2x4x8, multi:R4xF4 or a preset)",
            ))
        }
    };
    let n: usize = dims.iter().product();
    if n != topo.npus() || spec.npus != (0..n).collect::<Vec<_>>() {
        return Err(Error::baseline("hierarchical", format!(
            "hierarchical runs on every NPU of a {} topology in id order; this collective has {} NPUs on a topology of {}",
            dims.iter().map(|d| d.to_string()).collect::<Vec<_>>().join("x"),
            spec.npus.len(),
            topo.npus()
        )));
    }
    let grid = Grid::new(dims, spec.chunks_per_npu);
    let mut plan = Plan::default();
    let mut step = 0;
    if matches!(
        spec.kind,
        CollectiveKind::ReduceScatter | CollectiveKind::AllReduce
    ) {
        for (j, &size) in dims.iter().enumerate() {
            for line in grid.lines(j) {
                let segment = |q: usize| grid.segment(j, line[0], q);
                plan.ring_pass(step, &line, &segment, true, Op::Reduce);
            }
            step += size - 1;
        }
    }
    if matches!(
        spec.kind,
        CollectiveKind::AllGather | CollectiveKind::AllReduce
    ) {
        for (j, &size) in dims.iter().enumerate().rev() {
            for line in grid.lines(j) {
                let segment = |q: usize| grid.segment(j, line[0], q);
                plan.ring_pass(step, &line, &segment, true, Op::Copy);
            }
            step += size - 1;
        }
    }
    Ok(plan)
}

/// The levels of a fabric built without recorded dimensions, read from its switches:
/// each switch's group is the NPUs it has a link with. Dimension 0 is the longest run
/// 0, 1, 2, ... of NPU ids that one group holds, dimension j the longest run 0, s, 2s, ...
/// (s the product of the sizes before it), each cut to divide the NPU count; every line
/// of the grid so formed must lie within one group (its sends go through that switch).
/// A star is one dimension; nodes on a node switch joined by rail switches are two.
fn switch_levels(topo: &Topology) -> Option<Vec<usize>> {
    let n = topo.npus();
    let groups: Vec<Vec<NpuId>> = topo
        .switches()
        .map(|s| {
            let mut group: Vec<NpuId> = topo
                .out_links(s)
                .map(|l| topo.link(l).dst)
                .chain(topo.in_links(s).iter().map(|&l| topo.link(l).src))
                .filter(|&v| !topo.is_switch(v))
                .collect();
            group.sort_unstable();
            group.dedup();
            group
        })
        .collect();
    let holds = |g: &[NpuId], v: NpuId| g.binary_search(&v).is_ok();
    let mut dims = Vec::new();
    let mut stride = 1;
    while stride < n {
        let run = groups
            .iter()
            .map(|g| {
                (0..)
                    .take_while(|&q| q * stride < n && holds(g, q * stride))
                    .count()
            })
            .max()?;
        let size = (2..=run).rev().find(|&d| n % (stride * d) == 0)?;
        dims.push(size);
        stride *= size;
    }
    let mut groups_of: Vec<Vec<usize>> = vec![Vec::new(); n];
    for (i, g) in groups.iter().enumerate() {
        for &v in g {
            groups_of[v].push(i);
        }
    }
    let grid = Grid::new(&dims, 1);
    let in_one_group = |line: &[NpuId]| {
        groups_of[line[0]]
            .iter()
            .any(|&i| line.iter().all(|&v| holds(&groups[i], v)))
    };
    (0..dims.len())
        .all(|j| grid.lines(j).iter().all(|line| in_one_group(line)))
        .then_some(dims)
}

/// NPU ids as coordinates: id = sum of coordinate x stride, the first dimension fastest.
struct Grid<'a> {
    dims: &'a [usize],
    stride: Vec<usize>,
    k: usize,
}

impl<'a> Grid<'a> {
    fn new(dims: &'a [usize], k: usize) -> Grid<'a> {
        let stride = dims
            .iter()
            .scan(1, |s, &d| {
                let this = *s;
                *s *= d;
                Some(this)
            })
            .collect();
        Grid { dims, stride, k }
    }

    fn coord(&self, npu: NpuId, j: usize) -> usize {
        npu / self.stride[j] % self.dims[j]
    }

    /// Every line along dimension `j`: its NPUs in coordinate order.
    fn lines(&self, j: usize) -> Vec<Vec<NpuId>> {
        let n: usize = self.dims.iter().product();
        (0..n)
            .filter(|&base| self.coord(base, j) == 0)
            .map(|base| {
                (0..self.dims[j])
                    .map(|q| base + q * self.stride[j])
                    .collect()
            })
            .collect()
    }

    /// The chunks member `q` of the line through `base` along dimension `j` is responsible
    /// for in that phase: those of every owner that agrees with the line on dimensions
    /// before `j` and has coordinate `q` in `j` (any coordinates after `j`).
    fn segment(&self, j: usize, base: NpuId, q: usize) -> Vec<ChunkId> {
        let low = base % self.stride[j];
        let high_count: usize = self.dims[j + 1..].iter().product();
        let block = self.stride[j] * self.dims[j];
        (0..high_count)
            .flat_map(|h| span((h * block + q * self.stride[j] + low) * self.k, self.k))
            .collect()
    }
}
