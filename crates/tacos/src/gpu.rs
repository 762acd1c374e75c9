//! The words the NCCL model, the executor cost model and the plugins share: GPU
//! generations ([`GpuArch`]) and NCCL's own algorithms and protocols ([`Algorithm`],
//! [`Protocol`]), numbered as NCCL numbers them, with their names and parsing. Plain
//! vocabulary, below both models, so neither has to reach into the other for it.
//!
//! ```
//! use tacos::gpu::{Algorithm, GpuArch, Protocol};
//!
//! assert_eq!("sm_90".parse::<GpuArch>(), Ok(GpuArch::Hopper));
//! assert_eq!(Algorithm::from_name("NVLSTree"), Some(Algorithm::NvlsTree));
//! assert_eq!(Protocol::Ll128.to_string(), "LL128");
//! ```

use serde::Serialize;
use std::fmt;
use std::str::FromStr;

/// NCCL's built-in algorithms, numbered as NCCL numbers them (`NCCL_ALGO_*`).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum Algorithm {
    /// Double binary trees over the nodes, a chain within each node.
    Tree = 0,
    Ring = 1,
    /// In-network reduction (SHARP), every GPU of a node talking to its NIC's switch.
    CollnetDirect = 2,
    /// In-network reduction (SHARP) at the end of a chain through each node.
    CollnetChain = 3,
    /// NVLink SHARP: the NVSwitch reduces and multicasts (one node, or with SHARP).
    Nvls = 4,
    /// NVLS within each node, trees between nodes.
    NvlsTree = 5,
    /// Parallel aggregated trees: All-Gather and Reduce-Scatter with one GPU per node.
    Pat = 6,
}

/// NCCL's protocols, numbered as NCCL numbers them.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, Serialize)]
#[serde(rename_all = "lowercase")]
pub enum Protocol {
    /// 8-byte stores of 4 data bytes and a 4-byte flag: lowest latency, half the bandwidth.
    Ll = 0,
    /// 128-byte lines of 120 data bytes and an 8-byte flag.
    Ll128 = 1,
    /// Plain copies with a synchronization per chunk: full bandwidth, highest latency.
    Simple = 2,
}

impl Algorithm {
    /// NCCL's index of the algorithm (the cost table's row).
    pub fn index(self) -> usize {
        self as usize
    }

    /// Every algorithm, in NCCL's order.
    pub const ALL: [Algorithm; 7] = [
        Algorithm::Tree,
        Algorithm::Ring,
        Algorithm::CollnetDirect,
        Algorithm::CollnetChain,
        Algorithm::Nvls,
        Algorithm::NvlsTree,
        Algorithm::Pat,
    ];

    pub fn name(self) -> &'static str {
        match self {
            Algorithm::Tree => "tree",
            Algorithm::Ring => "ring",
            Algorithm::CollnetDirect => "collnet_direct",
            Algorithm::CollnetChain => "collnet_chain",
            Algorithm::Nvls => "nvls",
            Algorithm::NvlsTree => "nvls_tree",
            Algorithm::Pat => "pat",
        }
    }

    /// The algorithm NCCL calls `name` (`NCCL_ALGO` spells them `Ring`, `NVLSTree`,
    /// `CollnetDirect`; ours with underscores are taken too), case aside.
    pub fn from_name(name: &str) -> Option<Algorithm> {
        let key: String = name
            .chars()
            .filter(|c| *c != '_' && *c != '-')
            .collect::<String>()
            .to_ascii_lowercase();
        Algorithm::ALL
            .into_iter()
            .find(|a| a.name().replace('_', "") == key)
    }

    /// Whether the algorithm uses NVLink SHARP (the NVSwitch's reduction).
    pub fn uses_nvls(self) -> bool {
        matches!(self, Algorithm::Nvls | Algorithm::NvlsTree)
    }

    /// Whether the algorithm needs in-network reduction (SHARP) from the fabric.
    pub fn uses_collnet(self) -> bool {
        matches!(self, Algorithm::CollnetDirect | Algorithm::CollnetChain)
    }
}

impl Protocol {
    pub const ALL: [Protocol; 3] = [Protocol::Ll, Protocol::Ll128, Protocol::Simple];

    /// NCCL's index of the protocol (the cost table's column).
    pub fn index(self) -> usize {
        self as usize
    }

    pub fn name(self) -> &'static str {
        match self {
            Protocol::Ll => "LL",
            Protocol::Ll128 => "LL128",
            Protocol::Simple => "Simple",
        }
    }
}

impl fmt::Display for Algorithm {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.name())
    }
}

impl fmt::Display for Protocol {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.name())
    }
}

/// GPU generation: selects the row of NCCL's bandwidth tables and the generic topology's
/// link speeds. Ordered oldest first.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord)]
pub enum GpuArch {
    Volta,
    Ampere,
    Hopper,
    Blackwell,
}

impl GpuArch {
    pub const ALL: [GpuArch; 4] = [
        GpuArch::Volta,
        GpuArch::Ampere,
        GpuArch::Hopper,
        GpuArch::Blackwell,
    ];

    /// What a GPU architecture is given as, for messages refusing another value.
    pub const ALLOWED: &'static str =
        "a GPU generation (volta, ampere, hopper, blackwell) or a compute capability such as 80 or sm_90";

    /// Row in NCCL's per-generation tables.
    pub fn index(self) -> usize {
        self as usize
    }

    pub fn name(self) -> &'static str {
        match self {
            GpuArch::Volta => "volta",
            GpuArch::Ampere => "ampere",
            GpuArch::Hopper => "hopper",
            GpuArch::Blackwell => "blackwell",
        }
    }

    /// NVLink bandwidth of one GPU into its NVSwitch, GB/s per direction (V100: 6 links,
    /// A100: 12, H100: 18 of 25 GB/s; B200: 18 of 50 GB/s).
    pub fn nvswitch_gbps(self) -> f64 {
        match self {
            GpuArch::Volta => 150.0,
            GpuArch::Ampere => 300.0,
            GpuArch::Hopper => 450.0,
            GpuArch::Blackwell => 900.0,
        }
    }

    /// Streaming multiprocessors of the generation's SXM part (V100 80, A100 108, H100
    /// and H200 132, B200 148): the most threadblocks of 1,024 threads the GPU holds
    /// resident at once, which an MSCCL++ plan needs of all its threadblocks.
    pub fn sms(self) -> usize {
        match self {
            GpuArch::Volta => 80,
            GpuArch::Ampere => 108,
            GpuArch::Hopper => 132,
            GpuArch::Blackwell => 148,
        }
    }

    /// NIC bandwidth per GPU in the usual system of the generation, GB/s (EDR 100 Gb/s,
    /// HDR 200, NDR 400, XDR 800).
    pub fn nic_gbps(self) -> f64 {
        match self {
            GpuArch::Volta => 12.5,
            GpuArch::Ampere => 25.0,
            GpuArch::Hopper => 50.0,
            GpuArch::Blackwell => 100.0,
        }
    }
}

impl fmt::Display for GpuArch {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.name())
    }
}

impl FromStr for GpuArch {
    type Err = String;

    /// A generation name (`ampere`) or compute capability (`80`, `sm_90`, `9.0`).
    fn from_str(s: &str) -> Result<Self, String> {
        let key = s.trim().to_ascii_lowercase();
        let digits: String = key.chars().filter(char::is_ascii_digit).collect();
        let by_name = GpuArch::ALL.into_iter().find(|g| g.name() == key);
        let by_capability = match digits.parse::<u32>() {
            Ok(70..=79) => Some(GpuArch::Volta),
            Ok(80..=89) => Some(GpuArch::Ampere),
            Ok(90..=99) => Some(GpuArch::Hopper),
            Ok(100..=129) => Some(GpuArch::Blackwell),
            _ => None,
        };
        by_name
            .or(by_capability)
            .ok_or_else(|| format!("'{s}' is not {}", GpuArch::ALLOWED))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn generations_parse_by_name_and_capability() {
        assert_eq!("Ampere".parse(), Ok(GpuArch::Ampere));
        assert_eq!("sm_90".parse(), Ok(GpuArch::Hopper));
        assert_eq!("8.0".parse(), Ok(GpuArch::Ampere));
        assert_eq!("100".parse(), Ok(GpuArch::Blackwell));
        assert!("pascal".parse::<GpuArch>().unwrap_err().contains("hopper"));
    }
}
