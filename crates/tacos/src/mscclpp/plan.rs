//! The MSCCL++ execution plan as its executor reads it (the schema of MSCCL++ 0.8 and
//! later): a JSON document with one entry per GPU, each holding its chunk counts, its
//! channels, the peer buffers it touches and its threadblocks' operations.
//!
//! Fields keep the executor's spelling so `serde` reads and writes the file as is. Fields
//! the executor does not read (`reduce_op`, the DSL's extras) are ignored on reading.

use crate::error::{FileFormat, FileProblem, Result};
use serde::{Deserialize, Serialize};
use std::fmt;

/// Operations per threadblock, pipeline bodies included: the one limit the executor checks.
pub const MAX_OPS_PER_THREADBLOCK: usize = 64;
/// Channels of one type a threadblock may list (unchecked by the executor: past it, memory
/// is overwritten).
pub const MAX_CHANNELS_PER_THREADBLOCK: usize = 16;
/// Channel ids one operation may name.
pub const MAX_CHANNELS_PER_OP: usize = 8;
/// Source or destination entries of one operation.
pub const MAX_BUFFS_PER_OP: usize = 10;
/// Remote buffers of one access type a threadblock may list.
pub const MAX_REMOTE_BUFFERS_PER_THREADBLOCK: usize = 16;
/// Semaphore ids one operation may name.
pub const MAX_SEMAPHORES_PER_OP: usize = 16;
/// Barrier ids (a device-global array).
pub const MAX_BARRIERS: usize = 16;
/// Threads of a threadblock: the kernel is built for at most 1,024.
pub const MAX_THREADS_PER_BLOCK: u32 = 1024;
/// The largest plan file read (a 64-GPU plan tacos writes is some 20 MB).
pub const MAX_PLAN_FILE_BYTES: u64 = 512 << 20;

/// A whole plan: what the executor's `ExecutionPlan` reads.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct Plan {
    /// Caches the executor's contexts: unique per plan.
    pub name: String,
    /// `allreduce`, `allgather`, `reducescatter`, `broadcast`, `alltoall`...
    pub collective: String,
    /// `Simple` or `LL` (packets).
    pub protocol: String,
    pub inplace: bool,
    #[serde(default)]
    pub reuse_resources: bool,
    #[serde(default = "default_threads")]
    pub num_threads_per_block: u32,
    #[serde(default)]
    pub use_double_scratch_buffer: bool,
    #[serde(default = "default_alignment")]
    pub buffer_alignment: u64,
    #[serde(default)]
    pub min_message_size: u64,
    #[serde(default = "default_max_message")]
    pub max_message_size: u64,
    pub gpus: Vec<Gpu>,
}

fn default_threads() -> u32 {
    MAX_THREADS_PER_BLOCK
}

fn default_alignment() -> u64 {
    16
}

fn default_max_message() -> u64 {
    u64::MAX
}

/// One GPU's part of the plan (entry `id` of `gpus`).
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct Gpu {
    pub id: usize,
    pub input_chunks: usize,
    pub output_chunks: usize,
    pub scratch_chunks: usize,
    pub threadblocks: Vec<Threadblock>,
    pub channels: Vec<Channel>,
    pub remote_buffers: Vec<RemoteBuffer>,
    #[serde(default)]
    pub semaphores: Vec<Semaphore>,
}

/// Which buffer a chunk range lies in.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize, Deserialize)]
pub enum BufferType {
    #[serde(rename = "i")]
    Input,
    #[serde(rename = "o")]
    Output,
    #[serde(rename = "s")]
    Scratch,
}

impl fmt::Display for BufferType {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            BufferType::Input => "input",
            BufferType::Output => "output",
            BufferType::Scratch => "scratch",
        })
    }
}

/// How a GPU reaches a peer: its memory over NVLink, a proxy over the network, or the
/// NVSwitch's multicast address.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum ChannelType {
    Memory,
    Port,
    Switch,
    None,
}

impl fmt::Display for ChannelType {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            ChannelType::Memory => "memory",
            ChannelType::Port => "port",
            ChannelType::Switch => "switch",
            ChannelType::None => "none",
        })
    }
}

/// A GPU-level channel entry: memory and port entries list peers (one channel each, a
/// repeated peer is another channel); a switch entry is one NVLS group per rank group.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct Channel {
    pub channel_type: ChannelType,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub connected_to: Option<Vec<usize>>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub buffer_type: Option<BufferType>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub rank_groups: Option<Vec<RankGroup>>,
}

/// The ranks of one NVLS group and the chunks of the buffer it binds.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct RankGroup {
    pub size: usize,
    pub ranks: Vec<usize>,
}

/// A peer buffer this GPU touches, reached through the listed channel types.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct RemoteBuffer {
    pub rank: usize,
    #[serde(rename = "type")]
    pub buffer_type: BufferType,
    pub access_channel_types: Vec<ChannelType>,
}

/// An intra-GPU counting semaphore shared by threadblocks.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct Semaphore {
    pub init_value: u32,
}

/// One threadblock: its channels (indices into the GPU's channels of each type), the
/// remote buffers it names, and its operations in program order.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct Threadblock {
    pub id: usize,
    pub ops: Vec<Operation>,
    pub channels: Vec<ThreadblockChannels>,
    #[serde(default)]
    pub remote_buffer_refs: Vec<RemoteBufferRefs>,
}

/// The GPU-level channels of one type a threadblock uses; an operation's `channel_ids`
/// index this list.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct ThreadblockChannels {
    pub channel_type: ChannelType,
    pub channel_ids: Vec<usize>,
}

/// The GPU-level remote buffers a threadblock reaches through one channel type; an
/// operation's `buffer_id` indexes this list.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct RemoteBufferRefs {
    pub access_channel_type: ChannelType,
    pub remote_buffer_ids: Vec<usize>,
}

/// A chunk range an operation reads or writes: local (`type`), a remote buffer
/// (`buffer_id`) or a switch channel (`switch_channel_id`); `size` chunks from `index`.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct Buff {
    #[serde(rename = "type", default, skip_serializing_if = "Option::is_none")]
    pub buffer_type: Option<BufferType>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub buffer_id: Option<usize>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub switch_channel_id: Option<usize>,
    pub index: usize,
    pub size: usize,
}

impl Buff {
    /// `size` chunks of this GPU's `buffer` from `index`.
    pub fn local(buffer: BufferType, index: usize, size: usize) -> Buff {
        Buff {
            buffer_type: Some(buffer),
            buffer_id: None,
            switch_channel_id: None,
            index,
            size,
        }
    }

    /// `size` chunks from `index` of the threadblock's remote buffer `id`.
    pub fn remote(id: usize, index: usize, size: usize) -> Buff {
        Buff {
            buffer_type: None,
            buffer_id: Some(id),
            switch_channel_id: None,
            index,
            size,
        }
    }

    /// `size` chunks from `index` of the buffer the threadblock's switch channel `id`
    /// binds, on every GPU of its group.
    pub fn switch(id: usize, index: usize, size: usize) -> Buff {
        Buff {
            buffer_type: None,
            buffer_id: None,
            switch_channel_id: Some(id),
            index,
            size,
        }
    }
}

/// A threadblock group: the threadblock takes slice `tb_id` of `tbg_size` of every range.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct TbgInfo {
    pub tb_id: usize,
    pub tbg_size: usize,
}

/// A pipeline's loop: its body runs over `num_chunks` chunks `unit_size` bytes at a time.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct IterContext {
    pub unit_size: u64,
    pub num_chunks: usize,
}

/// One operation, as the executor reads it; which fields matter depends on `name`.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
pub struct Operation {
    pub name: String,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub channel_type: Option<ChannelType>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub channel_ids: Option<Vec<usize>>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub src_buff: Option<Vec<Buff>>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub dst_buff: Option<Vec<Buff>>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub tbg_info: Option<TbgInfo>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub barrier_id: Option<usize>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub num_threadblocks: Option<usize>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub semaphore_ids: Option<Vec<usize>>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub iter_context: Option<IterContext>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub ops: Option<Vec<Operation>>,
}

impl Operation {
    /// An operation with its name alone (`nop`).
    pub fn named(name: &str) -> Operation {
        Operation {
            name: name.into(),
            ..Operation::default()
        }
    }

    /// Operations it counts for against the 64 per threadblock: itself, or a pipeline's
    /// body (flattened into the threadblock's list by the executor).
    pub fn flat_count(&self) -> usize {
        match &self.ops {
            Some(body) if self.name == "pipeline" => body.iter().map(Operation::flat_count).sum(),
            _ => 1,
        }
    }
}

impl Plan {
    /// Reads a plan from JSON text; `source` names the file in errors. A plan in the
    /// schema before MSCCL++ 0.8 (`i_cids`, `o_cids`) is refused as such, not misread.
    ///
    /// ```
    /// use tacos::mscclpp::Plan;
    /// let old = r#"{"name":"x","collective":"allreduce","gpus":[{"id":0,"i_cids":[]}]}"#;
    /// let e = Plan::from_json(old, "old.json").unwrap_err().to_string();
    /// assert!(e.contains("before MSCCL++ 0.8"), "{e}");
    /// ```
    pub fn from_json(text: &str, source: &str) -> Result<Plan> {
        let value: serde_json::Value = serde_json::from_str(text)
            .map_err(|e| FileProblem::new(source, format!("not JSON: {e}")).of(FileFormat::Plan))?;
        if let Some(key) = legacy_key(&value) {
            return Err(FileProblem::new(source, format!(
                "a plan in the schema before MSCCL++ 0.8 (it has '{key}'); the executors since 0.8 read only the schema of the new DSL (input_chunks, output_chunks, threadblocks with ops): regenerate it with a current mscclpp DSL"
            )).of(FileFormat::Plan));
        }
        serde_path_to_error::deserialize(value).map_err(|e| {
            FileProblem::new(source, e.inner().to_string())
                .field(format!("at {}", e.path()))
                .of(FileFormat::Plan)
        })
    }

    /// Reads the plan file at `path` (at most [`MAX_PLAN_FILE_BYTES`]), as [`Plan::from_json`].
    pub fn read(path: &std::path::Path) -> Result<Plan> {
        let text = crate::fsio::read_text(path, "plan", MAX_PLAN_FILE_BYTES)?;
        Plan::from_json(&text, &path.display().to_string())
    }

    /// The plan as the JSON text written to files (indented, a line feed at the end).
    pub fn to_json(&self) -> String {
        let mut text = serde_json::to_string_pretty(self).unwrap_or_default();
        text.push('\n');
        text
    }
}

/// A key that only the schema before MSCCL++ 0.8 has, if `value` holds one.
fn legacy_key(value: &serde_json::Value) -> Option<&'static str> {
    const LEGACY: [&str; 4] = ["i_cids", "o_cids", "ctype", "srcs"];
    match value {
        serde_json::Value::Object(map) => LEGACY
            .into_iter()
            .find(|k| map.contains_key(*k))
            .or_else(|| map.values().find_map(legacy_key)),
        serde_json::Value::Array(items) => items.iter().find_map(legacy_key),
        _ => None,
    }
}
