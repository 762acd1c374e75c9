//! Root inference: which GPU a rooted collective's file treats as its root, when neither
//! the caller nor the file says. Apart from the verifier's run because it may re-check the
//! program once per candidate root.

use super::{check_layouts, Problems};
use crate::collective::CollectiveKind;
use crate::msccl::exec::Trace;
use crate::msccl::{Gpu, Instr, Program};

/// The root of a rooted collective: the only GPU that sends but never receives
/// (Broadcast, Scatter) or receives but never sends (Reduce, Gather); failing that, the
/// first GPU for which the program checks out (as when a Reduce is a Reduce-Scatter then a
/// Gather, and the root sends too).
pub(super) fn infer_root(program: &Program, kind: CollectiveKind, trace: &Trace) -> Option<usize> {
    if program.gpus.len() == 1 {
        return Some(0);
    }
    let does = |g: &Gpu, f: fn(Instr) -> bool| {
        g.threadblocks
            .iter()
            .any(|tb| tb.steps.iter().any(|s| f(s.instr)))
    };
    let roots: Vec<usize> = program
        .gpus
        .iter()
        .enumerate()
        .filter(|(_, g)| {
            let (sends, receives) = (does(g, Instr::sends), does(g, Instr::receives));
            match kind {
                CollectiveKind::Broadcast | CollectiveKind::Scatter => sends && !receives,
                _ => receives && !sends,
            }
        })
        .map(|(r, _)| r)
        .collect();
    if let [root] = roots[..] {
        return Some(root);
    }
    (0..program.gpus.len()).find(|&root| {
        let mut trial = Problems::default();
        check_layouts(program, kind, Some(root), trace, &mut trial);
        trial.list.is_empty() && trial.unlisted == 0
    })
}
