//! In-switch operations: a schedule's in-switch transfers (`Transfer::in_switch`) grouped
//! into the switch-channel operations the executor runs.
//!
//! In-switch transfers of one chunk starting at one time are one operation: copies leaving
//! one rank a multicast, reductions reaching one rank a sum inside the switch. The executor
//! has a multicast store (`gstore`) and a sum whose result the switch stores to every
//! member at once (`glres`), but no sum alone (the DSL's `glre` is refused by its parser).
//! So a sum into rank g must be followed by a multicast of the same chunk from g to exactly
//! the sum's sources: the pair is one `glres` at g over them and g. A multicast of no such
//! pair is a `gstore`.

use crate::error::{Error, Result};
use crate::schedule::{Op, Schedule};
use crate::topology::Topology;
use std::collections::BTreeMap;

/// What the executor does for one in-switch operation.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(super) enum Action {
    /// `glres`: the switch sums the chunk over the members and stores the sum to them all.
    ReduceAndStore,
    /// `gstore`: the root's chunk stored to every member.
    Store,
}

/// One in-switch operation, at rank `root`.
#[derive(Clone, Debug)]
pub(super) struct SwitchOp {
    pub action: Action,
    pub chunk: usize,
    pub root: usize,
    /// The ranks the switch channel spans: the root and its peers, sorted.
    pub members: Vec<usize>,
    /// The sum's transfers (into the root), for `glres`; none for `gstore`.
    pub sums: Vec<usize>,
    /// The multicast's transfers (from the root).
    pub stores: Vec<usize>,
}

/// A transfer's part in an in-switch operation.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(super) enum Role {
    /// An ordinary transfer: a put and a signal.
    Plain,
    /// A source's share of operation `op`'s sum: it lends its chunk to the root's switch.
    Sum(usize),
    /// A member's share of operation `op`'s store.
    Store(usize),
}

/// The in-switch operations of a schedule and each transfer's role.
pub(super) struct SwitchOps {
    pub ops: Vec<SwitchOp>,
    pub roles: Vec<Role>,
}

impl SwitchOps {
    /// No transfer of the schedule is in-switch.
    pub fn is_empty(&self) -> bool {
        self.ops.is_empty()
    }
}

/// An in-switch operation's chunk, start and root rank (a sum's destination, a
/// multicast's source).
type Key = (usize, u64, usize);

/// Groups `schedule`'s in-switch transfers (`ranks_of[i]`: transfer i's source and
/// destination rank) into operations; an error names a transfer the executor cannot run
/// inside a switch of `topo`.
pub(super) fn group(
    schedule: &Schedule,
    ranks_of: &[(usize, usize)],
    topo: &Topology,
) -> Result<SwitchOps> {
    let transfers = &schedule.transfers;
    let mut roles = vec![Role::Plain; transfers.len()];
    let mut sums: BTreeMap<Key, Vec<usize>> = BTreeMap::new();
    let mut casts: BTreeMap<Key, Vec<usize>> = BTreeMap::new();
    for (i, t) in transfers.iter().enumerate().filter(|(_, t)| t.in_switch) {
        let (src, dst) = ranks_of[i];
        match t.op {
            Op::Reduce => sums.entry((t.chunk(), t.start_ps, dst)).or_default(),
            Op::Copy => casts.entry((t.chunk(), t.start_ps, src)).or_default(),
        }
        .push(i);
    }
    if sums.is_empty() && casts.is_empty() {
        return Ok(SwitchOps {
            ops: Vec::new(),
            roles,
        });
    }
    let peers = |list: &[usize], far: fn(&(usize, usize)) -> usize| -> Vec<usize> {
        let mut v: Vec<usize> = list.iter().map(|&i| far(&ranks_of[i])).collect();
        v.sort_unstable();
        v
    };
    let named = |i: usize| {
        let t = &transfers[i];
        format!(
            "transfer {i} (chunk {}, NPU {} to NPU {})",
            t.chunk(),
            t.src(),
            t.dst()
        )
    };
    let mut ops = Vec::new();
    // Arrivals of each summed chunk at each root: what may change it between its sum and
    // the multicast after.
    let mut arrivals: BTreeMap<(usize, usize), Vec<usize>> = BTreeMap::new();
    for (i, t) in transfers.iter().enumerate() {
        arrivals
            .entry((t.chunk(), ranks_of[i].1))
            .or_default()
            .push(i);
    }
    // In time order (then schedule order): a schedule's first lone sum is the one named.
    let mut in_order: Vec<(&Key, &Vec<usize>)> = sums.iter().collect();
    in_order.sort_by_key(|(&(_, start, _), list)| (start, list[0]));
    for (&(chunk, _, root), list) in in_order {
        let sources = peers(list, |&(s, _)| s);
        let end = list.iter().map(|&i| transfers[i].end_ps).max().unwrap_or(0);
        // The first multicast of the chunk from the root once the sum is in.
        let store = casts
            .range((chunk, end, root)..(chunk, u64::MAX, usize::MAX))
            .find(|(&(_, _, r), _)| r == root);
        let Some((&key, stores)) = store else {
            return Err(Error::plan(format!(
                "{} is part of an in-switch sum into rank {root} that no in-switch multicast of chunk {chunk} from rank {root} follows: the MSCCL++ executor reduces inside the switch only as `glres`, which stores the sum to every GPU it read from (its parser refuses a sum alone, `glre`)",
                named(list[0])
            )));
        };
        // The glres stores the sum when it is made: nothing may reach the root's chunk
        // between then and the multicast that carries it.
        let cast_start = key.1;
        let between = arrivals.get(&(chunk, root)).and_then(|a| {
            a.iter()
                .copied()
                .filter(|j| !list.contains(j))
                .find(|&j| (end..=cast_start).contains(&transfers[j].end_ps))
        });
        if let Some(j) = between {
            return Err(Error::plan(format!(
                "{} is part of an in-switch sum into rank {root}, but {} reaches rank {root} before the multicast of chunk {chunk} that follows it: the MSCCL++ executor reduces inside the switch only as `glres`, which stores the sum to the GPUs it read from as it makes it, so the multicast must carry that very sum (the in-switch sums of one chunk into one GPU start together, as one operation)",
                named(list[0]),
                named(j)
            )));
        }
        let destinations = peers(stores, |&(_, d)| d);
        if destinations != sources {
            return Err(Error::plan(format!(
                "{} is part of an in-switch sum into rank {root} from ranks {sources:?}, but the multicast of chunk {chunk} that follows it goes to ranks {destinations:?}: the MSCCL++ executor reduces inside the switch only as `glres`, which stores the sum to exactly the GPUs it read from",
                named(list[0])
            )));
        }
        let stores = casts.remove(&key).unwrap_or_default();
        record(
            &mut ops,
            &mut roles,
            SwitchOp {
                action: Action::ReduceAndStore,
                chunk,
                root,
                members: with_root(sources, root),
                sums: list.clone(),
                stores,
            },
        );
    }
    for ((chunk, _, root), stores) in casts {
        record(
            &mut ops,
            &mut roles,
            SwitchOp {
                action: Action::Store,
                chunk,
                root,
                members: with_root(peers(&stores, |&(_, d)| d), root),
                sums: Vec::new(),
                stores,
            },
        );
    }
    let npus = &schedule.collective.npus;
    for op in &ops {
        let joined = topo.reducing_switches().iter().any(|&w| {
            op.members.iter().all(|&m| {
                topo.link_between(npus[m], w).is_some() && topo.link_between(w, npus[m]).is_some()
            })
        });
        if !joined {
            let first = op.sums.first().or(op.stores.first()).copied().unwrap_or(0);
            return Err(Error::plan(format!(
                "{} is in-switch, but no reducing switch of {} joins the NPUs of ranks {:?} (a switch channel spans GPUs of one NVLS-capable switch)",
                named(first),
                topo.name(),
                op.members
            )));
        }
    }
    Ok(SwitchOps { ops, roles })
}

/// Adds `op` to `ops`, its transfers' roles to `roles`.
fn record(ops: &mut Vec<SwitchOp>, roles: &mut [Role], op: SwitchOp) {
    let k = ops.len();
    for &i in &op.sums {
        roles[i] = Role::Sum(k);
    }
    for &i in &op.stores {
        roles[i] = Role::Store(k);
    }
    ops.push(op);
}

fn with_root(mut ranks: Vec<usize>, root: usize) -> Vec<usize> {
    ranks.push(root);
    ranks.sort_unstable();
    ranks.dedup();
    ranks
}
