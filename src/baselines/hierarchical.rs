//! Hierarchical (BlueConnect): on a topology composed of dimensions, Reduce-Scatter along
//! the first dimension, then along the second on the reduced share, and so on; All-Gather
//! goes back from the last dimension to the first. Each dimension's lines run a
//! unidirectional ring in coordinate order. The first dimension moves the most data, as
//! the composed builders put the fastest dimension first (3D-RFS: 200, 100, 50 GB/s).

use super::{span, Plan};
use crate::collective::{ChunkId, CollectiveKind, CollectiveSpec};
use crate::error::{Error, Result};
use crate::schedule::Op;
use crate::topology::{NpuId, Topology};

pub(super) fn plan(topo: &Topology, spec: &CollectiveSpec) -> Result<Plan> {
    let Some(dims) = topo.dimensions() else {
        return Err(Error::Baseline(
            "hierarchical needs a topology composed of dimensions (a builder such as mesh:4x4, torus:4x4x4, rfs:2x4x8, multi:R4xF4 or a preset)".into(),
        ));
    };
    let n: usize = dims.iter().product();
    if n != topo.npus() || spec.npus != (0..n).collect::<Vec<_>>() {
        return Err(Error::Baseline(format!(
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
