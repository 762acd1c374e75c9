//! The executor's message-size rules: one chunk size must fit every buffer of every rank.

use super::Collective;
use crate::error::{Error, Result};
use crate::mscclpp::plan::Plan;

/// Without a size: the chunk counts admit one chunk size (output = P x input for
/// All-Gather, and so on). With a size: every rule the executor applies to it.
pub(super) fn check(plan: &Plan, collective: Collective, size: Option<u64>) -> Result<()> {
    let p = plan.gpus.len();
    for gpu in &plan.gpus {
        let (i, o) = (gpu.input_chunks, gpu.output_chunks);
        let (want_in, want_out) = collective.chunk_ratio(p);
        // i / o must equal want_in / want_out.
        if i * want_out != o * want_in {
            return Err(Error::plan(format!(
                "rank {}: {i} input and {o} output chunks, but a {} over {p} ranks moves {want_in} input byte(s) per {want_out} output byte(s): no chunk size fits both buffers",
                gpu.id,
                collective.name()
            )));
        }
        if collective == Collective::AllToAll && i % p != 0 {
            return Err(Error::plan(format!(
                "rank {}: {i} input chunks, not a multiple of the {p} ranks an alltoall sends to",
                gpu.id
            )));
        }
    }
    if let Some(m) = size {
        message(plan, collective, m)?;
    }
    Ok(())
}

/// The executor's `checkMessageSize` and chunk rules for a message of `m` bytes (the
/// output size for All-Gather, else the input size).
fn message(plan: &Plan, collective: Collective, m: u64) -> Result<()> {
    let p = plan.gpus.len() as u64;
    let a = plan.buffer_alignment;
    let refuse = |rule: String| Err(Error::plan(format!("message size {m} B: {rule}")));
    let (inb, outb) = match collective {
        Collective::AllGather | Collective::ReduceScatter if m % p != 0 => {
            return refuse(format!(
                "not a multiple of the {p} ranks (each rank's {} is a {p}th of it)",
                if collective == Collective::AllGather {
                    "input"
                } else {
                    "output"
                }
            ))
        }
        Collective::AllGather => (m / p, m),
        Collective::ReduceScatter => (m, m / p),
        _ => (m, m),
    };
    if m < plan.min_message_size || m > plan.max_message_size {
        return refuse(format!(
            "outside the plan's range [min_message_size {}, max_message_size {}]",
            plan.min_message_size, plan.max_message_size
        ));
    }
    for (what, bytes) in [("input", inb), ("output", outb)] {
        if bytes % a != 0 {
            return refuse(format!(
                "the {what} size {bytes} B is not a multiple of buffer_alignment {a}"
            ));
        }
    }
    for gpu in &plan.gpus {
        let (i, o) = (gpu.input_chunks as u64, gpu.output_chunks as u64);
        for (what, bytes, n) in [("input", inb, i), ("output", outb, o)] {
            if (bytes / a) % n != 0 {
                return refuse(format!(
                    "rank {}: the {what} size {bytes} B is {} units of buffer_alignment {a}, not divisible by its {n} {what}_chunks",
                    gpu.id,
                    bytes / a
                ));
            }
        }
        if inb / i != outb / o {
            return refuse(format!(
                "rank {}: input chunks of {} B but output chunks of {} B; the executor needs one chunk size",
                gpu.id,
                inb / i,
                outb / o
            ));
        }
    }
    Ok(())
}
