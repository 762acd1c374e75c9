//! The executor cost model's constants: one profile per GPU generation, a JSON file in
//! `profiles/` compiled in, or a user's own (`--profile F`, `TACOS_PROFILE`), fitted to
//! their cluster by `tacos calibrate`.

use crate::error::{echo, FileFormat, FileProblem, Result};
use crate::fsio;
use crate::gpu::{GpuArch, Protocol};
use crate::tuner::nccl_tuning::NcclVersion;
use serde::{Deserialize, Serialize};
use std::path::Path;

/// What one protocol costs on top of the wire.
#[derive(Clone, Copy, Debug, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct ProtocolModel {
    /// Paid per step of a chain of dependent steps (a send the next GPU waits for): the
    /// synchronisation of one slice, within an NVLink domain and across the network, us.
    pub step_us: HopCosts,
    /// Most one channel (one thread block) moves, GB/s of wire bytes.
    pub channel_gbps: f64,
}

/// A figure for a hop within an NVLink domain and one across the network.
#[derive(Clone, Copy, Debug, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct HopCosts {
    pub nvlink: f64,
    pub net: f64,
}

/// The executor cost model of one GPU generation (or one calibrated cluster).
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct ExecModel {
    /// The GPU generation the figures are for.
    pub arch: String,
    /// Where the figures come from.
    #[serde(default)]
    pub source: String,
    /// Paid once per collective: kernel launch and the host's synchronisation, us.
    pub launch_us: f64,
    /// Share of a link's line rate that carries wire bytes (protocol lines included):
    /// NVLink (and NVSwitch ports), and network links (NICs, rail and spine switches).
    pub efficiency: Efficiency,
    /// Channels (thread blocks per peer connection) NCCL runs at large sizes.
    pub channels: u32,
    pub ll: ProtocolModel,
    pub ll128: ProtocolModel,
    pub simple: ProtocolModel,
    /// The NCCL version the profile prices (its band of tuning models), e.g. `2.26.2`.
    #[serde(default = "default_nccl")]
    pub nccl: String,
    /// NVLink SHARP's figures; absent: the GPU generation's built-in ones.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub nvls: Option<NvlsModel>,
    /// The fit's measured error; absent: [`FitError::UNKNOWN`].
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub error: Option<FitError>,
}

/// The NCCL version of a profile that names none (those written before profiles did).
fn default_nccl() -> String {
    "2.26".to_string()
}

impl FitError {
    /// What a profile that records no error is taken to have: the calibration set's
    /// tolerance (30% below 1 MiB, 15% from it).
    pub const UNKNOWN: FitError = FitError {
        below_1mib: 0.30,
        from_1mib: 0.15,
    };
}

/// What NVLink SHARP costs: the NVSwitch reduces and multicasts at its own rate.
#[derive(Clone, Copy, Debug, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct NvlsModel {
    /// Most collective bytes a GPU's NVLS All-Reduce moves per second through the switch's
    /// reduction (algorithm bandwidth), GB/s.
    pub gbps: f64,
    /// Paid once per NVLS collective on top of the launch: the switch's round trip and the
    /// chunks in flight before the first result, us.
    pub step_us: f64,
}

/// The fit's own measured error: the median |predicted - measured| / measured of the
/// tables it was fitted to, below 1 MiB and from 1 MiB up. `compile` and the scheduler
/// plugin serve a program only where its predicted gain over NCCL exceeds it.
#[derive(Clone, Copy, Debug, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct FitError {
    pub below_1mib: f64,
    pub from_1mib: f64,
}

impl FitError {
    /// The error at `bytes`.
    pub fn at(&self, bytes: u64) -> f64 {
        if bytes < 1 << 20 {
            self.below_1mib
        } else {
            self.from_1mib
        }
    }
}

/// Share of line rate, per kind of link.
#[derive(Clone, Copy, Debug, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Efficiency {
    pub nvlink: f64,
    pub net: f64,
}

/// Wire bytes per data byte of a protocol: LL stores 8-byte lines of 4 data bytes and a
/// flag, LL128 128-byte lines of 120 data bytes and an 8-byte flag; Simple sends data only.
pub fn wire_factor(protocol: Protocol) -> f64 {
    match protocol {
        Protocol::Ll => 2.0,
        Protocol::Ll128 => 128.0 / 120.0,
        Protocol::Simple => 1.0,
    }
}

/// Data bytes of the smallest unit a protocol moves (a line): a step moves at least one.
pub fn line_data_bytes(protocol: Protocol) -> u64 {
    match protocol {
        Protocol::Ll => 8,
        Protocol::Ll128 => 120,
        Protocol::Simple => 1,
    }
}

/// The physical range of each constant: what a profile may hold.
pub const LAUNCH_US_MAX: f64 = 1000.0;
pub const STEP_US_MAX: f64 = 1000.0;
pub const CHANNEL_GBPS_MAX: f64 = 10_000.0;
/// The least channel rate and link efficiency a profile may hold: far below anything
/// measured (the fit keeps to 0.5 GB/s and 0.3), high enough that no time of the largest
/// collective leaves the range of a figure (a denormal rate priced 1 GiB at infinity).
pub const CHANNEL_GBPS_MIN: f64 = 0.01;
pub const EFFICIENCY_MIN: f64 = 0.01;
pub const CHANNELS_MAX: u32 = 64;

impl ExecModel {
    /// The built-in profile of a GPU generation.
    pub fn builtin(arch: GpuArch) -> ExecModel {
        let text = match arch {
            GpuArch::Volta => include_str!("profiles/volta.json"),
            GpuArch::Ampere => include_str!("profiles/ampere.json"),
            GpuArch::Hopper => include_str!("profiles/hopper.json"),
            GpuArch::Blackwell => include_str!("profiles/blackwell.json"),
        };
        // A test parses and validates every built-in profile.
        ExecModel::parse(text, arch.name()).expect("built-in profiles are valid")
    }

    /// A profile from JSON text; `origin` names it in errors.
    pub fn parse(text: &str, origin: &str) -> Result<ExecModel> {
        let model: ExecModel =
            fsio::parse_json(text, origin).map_err(|p| p.of(FileFormat::Cost))?;
        model.validate(origin)?;
        Ok(model)
    }

    /// Reads a profile file.
    pub fn load(path: &Path) -> Result<ExecModel> {
        let text = fsio::read_text(path, "a cost profile", 1 << 20)?;
        ExecModel::parse(&text, &path.display().to_string())
    }

    /// The profile to use: the file `path` if given, else the one `TACOS_PROFILE` names,
    /// else the built-in one of `arch`.
    pub fn resolve(path: Option<&Path>, arch: GpuArch) -> Result<ExecModel> {
        if let Some(path) = path {
            return ExecModel::load(path);
        }
        match std::env::var_os("TACOS_PROFILE") {
            Some(p) if !p.is_empty() => ExecModel::load(Path::new(&p))
                .map_err(|e| e.context(format!("TACOS_PROFILE={}", echo(&p.to_string_lossy())))),
            _ => Ok(ExecModel::builtin(arch)),
        }
    }

    /// The protocol's figures.
    pub fn protocol(&self, protocol: Protocol) -> &ProtocolModel {
        match protocol {
            Protocol::Ll => &self.ll,
            Protocol::Ll128 => &self.ll128,
            Protocol::Simple => &self.simple,
        }
    }

    pub fn protocol_mut(&mut self, protocol: Protocol) -> &mut ProtocolModel {
        match protocol {
            Protocol::Ll => &mut self.ll,
            Protocol::Ll128 => &mut self.ll128,
            Protocol::Simple => &mut self.simple,
        }
    }

    /// The band of NCCL versions the profile prices.
    pub fn nccl_version(&self) -> NcclVersion {
        NcclVersion::parse(&self.nccl).unwrap_or(NcclVersion::V2_24)
    }

    /// NVLink SHARP's figures: the profile's, else the built-in ones of its generation
    /// (none before Hopper).
    pub fn nvls(&self) -> Option<NvlsModel> {
        self.nvls.or_else(|| {
            let arch: GpuArch = self.arch.parse().ok()?;
            ExecModel::builtin(arch).nvls
        })
    }

    /// The fit's measured error at `bytes` (the calibration set's tolerance where the
    /// profile records none).
    pub fn error_at(&self, bytes: u64) -> f64 {
        self.error.unwrap_or(FitError::UNKNOWN).at(bytes)
    }

    /// Most `channels` channels of `protocol` move together, GB/s of wire bytes.
    pub fn channels_gbps(&self, protocol: Protocol, channels: u32) -> f64 {
        self.protocol(protocol).channel_gbps * channels.clamp(1, self.channels) as f64
    }

    /// An error naming the first constant outside its physical range.
    pub fn validate(&self, origin: &str) -> Result<()> {
        let bad = |field: &str, value: String, allowed: &str| {
            Err(
                FileProblem::new(echo(origin), format!("{value} must be {allowed}"))
                    .field(field)
                    .of(FileFormat::Cost),
            )
        };
        if GpuArch::ALL.iter().all(|a| a.name() != self.arch) {
            return bad(
                "arch",
                format!("'{}'", echo(&self.arch)),
                "one of volta, ampere, hopper, blackwell",
            );
        }
        let range = |field: &str, v: f64, lo: f64, hi: f64, open_low: bool| {
            let ok = v.is_finite() && v <= hi && if open_low { v > lo } else { v >= lo };
            if ok {
                Ok(())
            } else {
                let low = if open_low { "above" } else { "at least" };
                bad(
                    field,
                    crate::topology::limits::figure(v),
                    &format!("{low} {lo} and at most {hi}"),
                )
            }
        };
        if NcclVersion::parse(&self.nccl).is_err() {
            return bad(
                "nccl",
                format!("'{}'", echo(&self.nccl)),
                NcclVersion::ALLOWED,
            );
        }
        range("launch_us", self.launch_us, 0.0, LAUNCH_US_MAX, false)?;
        if let Some(nvls) = &self.nvls {
            range(
                "nvls.gbps",
                nvls.gbps,
                CHANNEL_GBPS_MIN,
                CHANNEL_GBPS_MAX,
                false,
            )?;
            range("nvls.step_us", nvls.step_us, 0.0, STEP_US_MAX, false)?;
        }
        if let Some(error) = &self.error {
            range("error.below_1mib", error.below_1mib, 0.0, 10.0, false)?;
            range("error.from_1mib", error.from_1mib, 0.0, 10.0, false)?;
        }
        range(
            "efficiency.nvlink",
            self.efficiency.nvlink,
            EFFICIENCY_MIN,
            1.0,
            false,
        )?;
        range(
            "efficiency.net",
            self.efficiency.net,
            EFFICIENCY_MIN,
            1.0,
            false,
        )?;
        if !(1..=CHANNELS_MAX).contains(&self.channels) {
            return bad(
                "channels",
                self.channels.to_string(),
                &format!("from 1 to {CHANNELS_MAX}"),
            );
        }
        for p in Protocol::ALL {
            let name = p.name().to_ascii_lowercase();
            let m = self.protocol(p);
            range(
                &format!("{name}.step_us.nvlink"),
                m.step_us.nvlink,
                0.0,
                STEP_US_MAX,
                false,
            )?;
            range(
                &format!("{name}.step_us.net"),
                m.step_us.net,
                0.0,
                STEP_US_MAX,
                false,
            )?;
            range(
                &format!("{name}.channel_gbps"),
                m.channel_gbps,
                CHANNEL_GBPS_MIN,
                CHANNEL_GBPS_MAX,
                false,
            )?;
        }
        Ok(())
    }

    /// The profile as pretty JSON (what `tacos calibrate -o` writes).
    pub fn to_json(&self) -> String {
        serde_json::to_string_pretty(self).expect("a profile serializes") + "\n"
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::error::Error;

    #[test]
    fn builtin_profiles_parse_and_name_their_generation() {
        for arch in GpuArch::ALL {
            let m = ExecModel::builtin(arch);
            assert_eq!(m.arch, arch.name());
            // Round trip through the file format.
            assert_eq!(ExecModel::parse(&m.to_json(), "round trip").unwrap(), m);
        }
    }

    #[test]
    fn bad_profiles_name_the_field() {
        let good = ExecModel::builtin(GpuArch::Hopper).to_json();
        let unknown = good.replacen("\"launch_us\"", "\"lunch_us\"", 1);
        let e = ExecModel::parse(&unknown, "p.json")
            .unwrap_err()
            .to_string();
        assert!(e.contains("p.json:") && e.contains("lunch_us"), "{e}");
        let mut m = ExecModel::builtin(GpuArch::Hopper);
        m.efficiency.nvlink = 1.3;
        let field = |e: Error| match e {
            Error::File {
                format: FileFormat::Cost,
                problem,
            } => problem.field.unwrap_or_default(),
            other => panic!("not a profile's problem: {other}"),
        };
        let e = m.validate("p.json").unwrap_err();
        assert!(
            e.to_string().contains("efficiency.nvlink: 1.3 must be"),
            "{e}"
        );
        assert_eq!(field(e), "efficiency.nvlink");
        m = ExecModel::builtin(GpuArch::Hopper);
        m.ll128.channel_gbps = 0.0;
        assert_eq!(
            field(m.validate("p.json").unwrap_err()),
            "ll128.channel_gbps"
        );
        m = ExecModel::builtin(GpuArch::Hopper);
        m.simple.step_us.net = f64::NAN;
        assert!(m.validate("p.json").is_err());
    }
}
