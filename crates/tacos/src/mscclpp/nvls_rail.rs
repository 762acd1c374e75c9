//! All-Reduce over several nodes whose NVSwitches reduce (NVLS), joined by one NIC per
//! GPU on rails (GPU g of every node shares rail g): each node's switch sums the node's
//! data, GPU g of each node exchanges its share of those node sums with its rail peers,
//! and each node's switch multicasts the finished sums back to its GPUs.
//!
//! Rank `n·P + g` is GPU g of node n. The buffer is P shares, GPU g's share split into T
//! pieces (one per threadblock) of N sub-chunks (one per node): chunk `(g·T + t)·N + m`.
//! Threadblock t of GPU (n, g):
//! 1. meets its node peers (every GPU of the node has started the launch, so its input is
//!    there), then has the switch reduce piece t over the node (`glres`: the node sum
//!    lands on every GPU of the node, the executor having no reduction without the store);
//! 2. reduce-scatters the piece over its rail: sends sub-chunk m of its node sum to node
//!    m's GPU g (`pws`, into that GPU's scratch), waits for its rail peers' sub-chunk n,
//!    and sums them (`re`) into its scratch;
//! 3. all-gathers over the rail: sends that final sub-chunk to its rail peers' scratch,
//!    waits for theirs, and has the switch store all N final sub-chunks to every GPU of
//!    the node (`gstore`); then meets its node peers so no GPU returns before every share
//!    has been stored to it.
//!
//! Per GPU its NIC carries 2(N-1)/N of its share each way, as a ring over the rail would.
//! With a stagger d, threadblock t starts its switch reduction only once t-d's is done (an
//! intra-GPU semaphore), so pieces' rail exchanges overlap later pieces' reductions.
//!
//! Buffers: in place only, as the one-node plan (`nvls`): a switch channel binds one
//! buffer, which both the reduction reads and the multicast writes. Port channels write
//! only into the peers' scratch, which the executor sizes from the plan and addresses at
//! offset 0 on every rank, so no rank's buffer placement matters across nodes; a
//! received sub-chunk is read only after its signal (a port put with signal delivers the
//! data before the signal), and a source is overwritten only after the peer has answered,
//! so no flush is needed.

use super::nvls::{in_place_all_reduce, meet, node_channels, node_tb_channels, switch_range};
use super::plan::{
    Buff, BufferType, Channel, ChannelType, Gpu, Operation, Plan, RemoteBuffer, RemoteBufferRefs,
    Semaphore, Threadblock, ThreadblockChannels, MAX_BUFFS_PER_OP, MAX_CHANNELS_PER_OP,
    MAX_CHANNELS_PER_THREADBLOCK, MAX_OPS_PER_THREADBLOCK,
};
use crate::error::{Error, Result};

/// The machine and the plan's split of the work.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Shape {
    pub nodes: usize,
    pub gpus_per_node: usize,
    /// Threadblocks per GPU, each with its own piece of every share.
    pub instances: usize,
    /// 0, or d: threadblock t's switch reduction waits for threadblock t-d's.
    pub stagger: usize,
}

/// Message sizes at or past this do not fit the executor's 32-bit byte offsets.
const MAX_SIZE_BYTES: u64 = 1 << 32;

/// The NVLS + rail All-Reduce plan of `shape` for exactly `size_bytes`.
///
/// ```
/// use tacos::mscclpp::nvls_rail::{all_reduce, Shape};
/// use tacos::mscclpp::{verify, VerifyOptions};
/// let shape = Shape { nodes: 2, gpus_per_node: 8, instances: 2, stagger: 1 };
/// let plan = all_reduce(&shape, 1 << 24, "nvls-rail").unwrap();
/// let at = VerifyOptions { size: Some(1 << 24), root: None };
/// assert_eq!(verify(&plan, &at).unwrap().ranks, 16);
/// ```
pub fn all_reduce(shape: &Shape, size_bytes: u64, name: &str) -> Result<Plan> {
    let Shape {
        nodes,
        gpus_per_node,
        instances,
        stagger,
    } = *shape;
    admit(shape, size_bytes)?;
    let (p, t_count, n_count) = (gpus_per_node, instances, nodes);
    let chunks = p * t_count * n_count;
    // Semaphore t orders threadblock t's reduction before threadblock t+d's.
    let semaphores = if stagger > 0 {
        t_count.saturating_sub(stagger)
    } else {
        0
    };
    let gpus = (0..n_count * p)
        .map(|rank| {
            let (node, g) = (rank / p, rank % p);
            let members: Vec<usize> = (0..p).map(|h| node * p + h).collect();
            let rail: Vec<usize> = (0..n_count)
                .filter(|&m| m != node)
                .map(|m| m * p + g)
                .collect();
            let mut channels = node_channels(rank, &members, t_count, chunks);
            channels.push(Channel {
                channel_type: ChannelType::Port,
                connected_to: Some(rail.repeat(t_count)),
                buffer_type: None,
                rank_groups: None,
            });
            let threadblocks = (0..t_count)
                .map(|t| {
                    let mut tb_channels = node_tb_channels(t, p - 1);
                    tb_channels.push(ThreadblockChannels {
                        channel_type: ChannelType::Port,
                        channel_ids: (t * (n_count - 1)..(t + 1) * (n_count - 1)).collect(),
                    });
                    Threadblock {
                        id: t,
                        ops: threadblock_ops(shape, node, g, t),
                        channels: tb_channels,
                        remote_buffer_refs: vec![RemoteBufferRefs {
                            access_channel_type: ChannelType::Port,
                            remote_buffer_ids: (0..n_count - 1).collect(),
                        }],
                    }
                })
                .collect();
            Gpu {
                id: rank,
                input_chunks: chunks,
                output_chunks: chunks,
                scratch_chunks: 2 * t_count * n_count,
                threadblocks,
                channels,
                remote_buffers: rail
                    .iter()
                    .map(|&peer| RemoteBuffer {
                        rank: peer,
                        buffer_type: BufferType::Scratch,
                        access_channel_types: vec![ChannelType::Port],
                    })
                    .collect(),
                semaphores: vec![Semaphore { init_value: 0 }; semaphores],
            }
        })
        .collect();
    let plan = in_place_all_reduce(name, size_bytes, gpus);
    let ops = plan.gpus[0].threadblocks[0].ops.len();
    if ops > MAX_OPS_PER_THREADBLOCK {
        return Err(Error::plan(format!(
            "an NVLS + rail All-Reduce of {gpus_per_node} GPUs a node needs {ops} operations per threadblock, over the executor's {MAX_OPS_PER_THREADBLOCK}"
        )));
    }
    Ok(plan)
}

/// Refuses a shape or size the executor cannot run, naming the limit.
fn admit(shape: &Shape, size_bytes: u64) -> Result<()> {
    let Shape {
        nodes,
        gpus_per_node,
        instances,
        ..
    } = *shape;
    let refuse = |why: String| {
        Err(Error::plan(format!(
            "an NVLS + rail All-Reduce of {nodes} nodes x {gpus_per_node} GPUs in {instances} instances: {why}"
        )))
    };
    if nodes < 2 || gpus_per_node < 2 || instances == 0 {
        return refuse("it needs at least 2 nodes, 2 GPUs a node and 1 instance".into());
    }
    if nodes - 1 > MAX_CHANNELS_PER_OP {
        return refuse(format!(
            "a put with signal names a port channel to each of the {} rail peers, over the executor's {MAX_CHANNELS_PER_OP} channels per operation",
            nodes - 1
        ));
    }
    if nodes > MAX_BUFFS_PER_OP {
        return refuse(format!(
            "the rail sum reads {nodes} ranges, over the executor's {MAX_BUFFS_PER_OP} sources per operation"
        ));
    }
    if gpus_per_node - 1 > MAX_CHANNELS_PER_THREADBLOCK {
        return refuse(format!(
            "a threadblock meets its {} node peers over memory channels, over the executor's {MAX_CHANNELS_PER_THREADBLOCK} per threadblock",
            gpus_per_node - 1
        ));
    }
    let unit = 16 * (nodes * gpus_per_node * instances) as u64;
    if size_bytes == 0 || size_bytes % unit != 0 {
        return refuse(format!(
            "the size must be a positive multiple of {unit} bytes (16-byte chunks of {} a GPU), not {size_bytes}",
            unit / 16
        ));
    }
    if size_bytes >= MAX_SIZE_BYTES {
        return refuse(format!(
            "{size_bytes} bytes: the executor keeps byte offsets in 32 bits, so a buffer must stay under 4 GiB"
        ));
    }
    Ok(())
}

/// Threadblock `t` of GPU `g` of node `node`: see the module's steps.
fn threadblock_ops(shape: &Shape, node: usize, g: usize, t: usize) -> Vec<Operation> {
    let (p, tt, n) = (shape.gpus_per_node, shape.instances, shape.nodes);
    let piece = (g * tt + t) * n;
    // Scratch: what rail peer k sent of this piece, then the final sub-chunk of node k.
    let (received, finals) = (t * n, (tt + t) * n);
    let others: Vec<usize> = (0..n).filter(|&m| m != node).collect();
    let ports: Vec<usize> = (0..n - 1).collect();
    let nop = || Operation::named("nop");
    let semaphore = |name: &str, id: usize| Operation {
        name: name.into(),
        semaphore_ids: Some(vec![id]),
        ..Operation::default()
    };
    let to_rail = |sources: Vec<Buff>, slot: usize| Operation {
        name: "pws".into(),
        channel_type: Some(ChannelType::Port),
        channel_ids: Some(ports.clone()),
        src_buff: Some(sources),
        dst_buff: Some(ports.iter().map(|&j| Buff::remote(j, slot, 1)).collect()),
        ..Operation::default()
    };
    let from_rail = Operation {
        name: "wait".into(),
        channel_type: Some(ChannelType::Port),
        channel_ids: Some(ports.clone()),
        ..Operation::default()
    };
    let mut ops = Vec::new();
    meet(&mut ops, p - 1);
    let d = shape.stagger;
    if d > 0 && t >= d {
        ops.push(semaphore("sem_acquire", t - d));
    }
    ops.push(Operation {
        name: "glres".into(),
        channel_type: Some(ChannelType::Switch),
        src_buff: Some(vec![switch_range(piece, n)]),
        dst_buff: Some(vec![switch_range(piece, n)]),
        ..Operation::default()
    });
    ops.push(nop());
    if d > 0 && t + d < tt {
        ops.push(semaphore("sem_release", t));
    }
    let node_sums = others
        .iter()
        .map(|&m| Buff::local(BufferType::Input, piece + m, 1))
        .collect();
    ops.push(to_rail(node_sums, received + node));
    ops.push(from_rail.clone());
    ops.push(nop());
    let mut addends = vec![Buff::local(BufferType::Input, piece + node, 1)];
    addends.extend(
        others
            .iter()
            .map(|&k| Buff::local(BufferType::Scratch, received + k, 1)),
    );
    ops.push(Operation {
        name: "re".into(),
        src_buff: Some(addends),
        dst_buff: Some(vec![Buff::local(BufferType::Scratch, finals + node, 1)]),
        ..Operation::default()
    });
    ops.push(nop());
    let mine = vec![Buff::local(BufferType::Scratch, finals + node, 1); n - 1];
    ops.push(to_rail(mine, finals + node));
    ops.push(from_rail);
    ops.push(nop());
    ops.push(Operation {
        name: "gstore".into(),
        channel_type: Some(ChannelType::Switch),
        src_buff: Some(vec![Buff::local(BufferType::Scratch, finals, n)]),
        dst_buff: Some(vec![switch_range(piece, n)]),
        ..Operation::default()
    });
    ops.push(nop());
    meet(&mut ops, p - 1);
    ops
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::mscclpp::{verify, VerifyOptions};

    fn shape(nodes: usize, instances: usize, stagger: usize) -> Shape {
        Shape {
            nodes,
            gpus_per_node: 8,
            instances,
            stagger,
        }
    }

    fn checked(plan: &Plan, size: u64) -> Result<crate::mscclpp::PlanReport> {
        verify(
            plan,
            &VerifyOptions {
                size: Some(size),
                root: None,
            },
        )
    }

    #[test]
    fn every_gpu_ends_with_the_sum_of_all_nodes_on_2_and_4_nodes() {
        // The verifier runs the plan symbolically and checks every output chunk holds the
        // sum of every rank's input chunk, with no race, deadlock or unmatched signal.
        for nodes in [2, 4] {
            for instances in [1, 2, 4, 8] {
                for stagger in [0, 1, 2] {
                    let s = shape(nodes, instances, stagger);
                    let size = 16 * (nodes * 8 * instances) as u64 * 64;
                    let plan = all_reduce(&s, size, "rail").unwrap();
                    let report = checked(&plan, size).unwrap_or_else(|e| panic!("{s:?}: {e}"));
                    assert_eq!(report.ranks, nodes * 8);
                    // Per threadblock, two puts with signal to each rail peer and two
                    // waits on each; two meetings of the node.
                    let tbs = nodes * 8 * instances;
                    assert_eq!(report.signals, tbs * (2 * (nodes - 1) + 14));
                    assert_eq!(report.waits, report.signals);
                    assert!(report.max_ops_per_threadblock <= MAX_OPS_PER_THREADBLOCK);
                }
            }
        }
    }

    #[test]
    fn a_dropped_rail_signal_is_refused_naming_where() {
        let size = 16 * 16 * 2 * 64;
        let mut plan = all_reduce(&shape(2, 2, 1), size, "rail").unwrap();
        // Rank 9 (node 1, GPU 1), threadblock 1: its second put goes without its signal.
        let ops = &mut plan.gpus[9].threadblocks[1].ops;
        let second = ops.iter().rposition(|o| o.name == "pws").unwrap();
        ops[second].name = "put".into();
        let e = checked(&plan, size).unwrap_err().to_string();
        assert!(
            e.contains("rank 1, threadblock 1, op ") && e.contains("(wait)"),
            "{e}"
        );
    }

    #[test]
    fn a_rail_sum_missing_a_node_is_refused_as_a_wrong_result() {
        let size = 16 * 32 * 64;
        let mut plan = all_reduce(&shape(2, 1, 0), size, "rail").unwrap();
        let re = plan.gpus[3].threadblocks[0]
            .ops
            .iter_mut()
            .find(|o| o.name == "re")
            .unwrap();
        re.src_buff.as_mut().unwrap().pop();
        let e = checked(&plan, size).unwrap_err().to_string();
        assert!(e.contains("wrong result"), "{e}");
    }

    #[test]
    fn shapes_past_the_executor_limits_are_refused_naming_the_limit() {
        let e = all_reduce(&shape(10, 1, 0), 16 * 80, "x")
            .unwrap_err()
            .to_string();
        assert!(e.contains("8 channels per operation"), "{e}");
        let e = all_reduce(&shape(2, 1, 0), 1000, "x")
            .unwrap_err()
            .to_string();
        assert!(e.contains("multiple of 256 bytes"), "{e}");
        let e = all_reduce(&shape(2, 1, 0), 1 << 32, "x")
            .unwrap_err()
            .to_string();
        assert!(e.contains("under 4 GiB"), "{e}");
    }
}
