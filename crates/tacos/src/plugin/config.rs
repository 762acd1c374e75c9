//! The plugins' settings, read once from the environment into a plain struct: code that
//! drives the plugins without a process environment (tests, benchmarks) builds one by
//! hand or through [`Config::from_env`] with its own lookup.

use super::Log;
use crate::budget::{MemoryLimit, PLUGIN_MAX_MEMORY};
use crate::error::{echo, Error, Result};
use crate::gpu::GpuArch;
use crate::msccl::{Profile, Target};
use std::ffi::OsString;
use std::path::PathBuf;
use std::sync::Once;
use std::time::Duration;

/// GPU generation assumed when `TACOS_GPU_ARCH` is not set.
pub const DEFAULT_GPU: GpuArch = GpuArch::Hopper;

/// The share by which the scheduler's program must be predicted faster than NCCL's own
/// choice for a band to be served, when `TACOS_NCCL_MARGIN` is not set: `tacos
/// compile`'s default.
pub const DEFAULT_NCCL_MARGIN: f64 = 0.05;

/// The most transfers a candidate program may need for the scheduler to synthesize it,
/// when `TACOS_MAX_TRANSFERS` is not set: 2^17, which admits every K the scheduler tries
/// on 64 GPUs (All-Reduce with K = 16 needs 129,024) and K = 1 up to 256 GPUs, and keeps
/// the first call of a band to about a second per 2^17 transfers on one core.
pub const DEFAULT_MAX_TRANSFERS: u64 = 1 << 17;

/// How long a band's first call waits for another process compiling it, when
/// `TACOS_LOCK_WAIT_MS` is not set: 5 s, then it compiles the band itself.
pub const DEFAULT_LOCK_WAIT: Duration = Duration::from_secs(5);

/// The most `TACOS_LOCK_WAIT_MS` may say: 10 minutes.
const MAX_LOCK_WAIT_MS: u64 = 600_000;

/// The variable that sets [`Config::lock_wait`].
pub const LOCK_WAIT_ENV: &str = "TACOS_LOCK_WAIT_MS";

/// What both plugins read from the environment, parsed.
#[derive(Clone, Debug, PartialEq)]
pub struct Config {
    /// `TACOS_TOPOLOGY`: a topology spec or file, as the command line takes it.
    pub topology: Option<String>,
    /// `NCCL_TOPO_FILE`: NCCL's topology XML for one node.
    pub nccl_topo_file: Option<String>,
    /// `TACOS_NODES`: how many nodes the scheduler repeats `NCCL_TOPO_FILE` over (the
    /// tuner takes NCCL's node count).
    pub nodes: Option<usize>,
    /// `TACOS_NIC_GBPS`: GB/s per NIC.
    pub nic_gbps: Option<f64>,
    /// `TACOS_NVSWITCH_GBPS`: GB/s per GPU into its NVSwitch.
    pub nvswitch_gbps: Option<f64>,
    /// `TACOS_NVLINK_GBPS`: GB/s per NVLink (NCCL topology files only).
    pub nvlink_gbps: Option<f64>,
    /// `TACOS_GPU_ARCH`.
    pub gpu: Option<GpuArch>,
    /// `TACOS_TARGET`: the loader the scheduler compiles for and checks files against.
    pub target: Target,
    /// Where the scheduler caches algorithm sets: `TACOS_CACHE_DIR`, else
    /// `$XDG_CACHE_HOME/tacos`, else `$HOME/.cache/tacos`, else under the system's
    /// temporary directory.
    pub cache_dir: PathBuf,
    /// `TACOS_NCCL_MARGIN`: a band is served only where the scheduler's program is
    /// predicted faster than NCCL's own choice by this share (default
    /// [`DEFAULT_NCCL_MARGIN`]); `None` (`off`): every band gets a program.
    pub nccl_margin: Option<f64>,
    /// `TACOS_MAX_TRANSFERS`: candidates needing more transfers are not synthesized
    /// (default [`DEFAULT_MAX_TRANSFERS`]).
    pub max_transfers: u64,
    /// `TACOS_LOCK_WAIT_MS`: how long a band's first call waits for the lock of another
    /// process compiling the band before compiling it too (default [`DEFAULT_LOCK_WAIT`]).
    pub lock_wait: Duration,
    /// `NCCL_ALGO` or `NCCL_PROTO` is set: the user chose NCCL's algorithms.
    pub user_chose_algorithms: bool,
    /// Scheduler settings that did not parse and were replaced (`TACOS_NODES` ignored,
    /// `TACOS_TARGET`, `TACOS_NCCL_MARGIN`, `TACOS_MAX_TRANSFERS` and
    /// `TACOS_LOCK_WAIT_MS` their defaults), one message each.
    pub warnings: Vec<String>,
}

/// What an empty environment gives.
impl Default for Config {
    fn default() -> Config {
        Config::from_env(|_| None).expect("an empty environment is a valid configuration")
    }
}

impl Config {
    /// Reads the settings through `lookup` (`std::env::var_os` in the plugins); a value
    /// that is empty or all blanks counts as unset (the cache variables: only empty).
    /// Settings that shape the cluster (`TACOS_GPU_ARCH`, `TACOS_*_GBPS`) are errors
    /// naming the variable when they do not parse; the scheduler's `TACOS_NODES`,
    /// `TACOS_TARGET`, `TACOS_NCCL_MARGIN` and `TACOS_MAX_TRANSFERS` are replaced and
    /// reported in `warnings`, since its default target's files load everywhere and a
    /// node count can be inferred.
    pub fn from_env(lookup: impl Fn(&str) -> Option<OsString>) -> Result<Config> {
        let text = |name: &str| lookup(name).and_then(|v| v.into_string().ok());
        let get = |name: &str| text(name).filter(|v| !v.trim().is_empty());
        let gbps = |name: &str| -> Result<Option<f64>> {
            get(name)
                .map(|v| match v.trim().parse::<f64>() {
                    Ok(x) if x.is_finite() && x > 0.0 => Ok(x),
                    _ => Err(Error::Invalid {
                        input: name.into(),
                        value: v,
                        allowed: "a positive number of GB/s".into(),
                    }),
                })
                .transpose()
        };
        let gpu = get("TACOS_GPU_ARCH")
            .map(|v| {
                v.parse::<GpuArch>().map_err(|_| Error::Invalid {
                    input: "TACOS_GPU_ARCH".into(),
                    value: v,
                    allowed: GpuArch::ALLOWED.into(),
                })
            })
            .transpose()?;
        let (nic_gbps, nvswitch_gbps, nvlink_gbps) = (
            gbps("TACOS_NIC_GBPS")?,
            gbps("TACOS_NVSWITCH_GBPS")?,
            gbps("TACOS_NVLINK_GBPS")?,
        );
        let mut warnings = Vec::new();
        let target = match get("TACOS_TARGET") {
            None => Target::default(),
            Some(value) => match value.trim().parse::<Profile>() {
                Ok(profile) => Target::new(profile),
                Err(e) => {
                    warnings.push(format!(
                        "TACOS_TARGET: {e}; compiling for the default target, {}",
                        Profile::default()
                    ));
                    Target::default()
                }
            },
        };
        let nodes = get("TACOS_NODES").and_then(|v| match v.trim().parse::<usize>() {
            Ok(n) if n >= 1 => Some(n),
            _ => {
                warnings.push(format!(
                    "TACOS_NODES='{}' must be a whole number >= 1; ignoring it",
                    echo(&v)
                ));
                None
            }
        });
        let nccl_margin = match get("TACOS_NCCL_MARGIN") {
            None => Some(DEFAULT_NCCL_MARGIN),
            Some(v) if v.trim().eq_ignore_ascii_case("off") => None,
            Some(v) => match v.trim().parse::<f64>() {
                Ok(m) if m.is_finite() && (0.0..10.0).contains(&m) => Some(m),
                _ => {
                    warnings.push(format!(
                        "TACOS_NCCL_MARGIN='{}' must be a share from 0 to 10 (0.05: 5%) or off; using {DEFAULT_NCCL_MARGIN}",
                        echo(&v)
                    ));
                    Some(DEFAULT_NCCL_MARGIN)
                }
            },
        };
        let max_transfers = match get("TACOS_MAX_TRANSFERS") {
            None => DEFAULT_MAX_TRANSFERS,
            Some(v) => match v.trim().parse::<u64>() {
                Ok(n) if n >= 1 => n,
                _ => {
                    warnings.push(format!(
                        "TACOS_MAX_TRANSFERS='{}' must be a whole number >= 1; using {DEFAULT_MAX_TRANSFERS}",
                        echo(&v)
                    ));
                    DEFAULT_MAX_TRANSFERS
                }
            },
        };
        let lock_wait = match get(LOCK_WAIT_ENV) {
            None => DEFAULT_LOCK_WAIT,
            Some(v) => match v.trim().parse::<u64>() {
                Ok(ms) if ms <= MAX_LOCK_WAIT_MS => Duration::from_millis(ms),
                _ => {
                    warnings.push(format!(
                        "{LOCK_WAIT_ENV}='{}' must be a whole number of milliseconds from 0 to {MAX_LOCK_WAIT_MS}; using {}",
                        echo(&v),
                        DEFAULT_LOCK_WAIT.as_millis()
                    ));
                    DEFAULT_LOCK_WAIT
                }
            },
        };
        let dir = |name: &str| lookup(name).filter(|v| !v.is_empty()).map(PathBuf::from);
        let cache_dir = dir("TACOS_CACHE_DIR")
            .or_else(|| dir("XDG_CACHE_HOME").map(|d| d.join("tacos")))
            .or_else(|| dir("HOME").map(|d| d.join(".cache").join("tacos")))
            .unwrap_or_else(|| std::env::temp_dir().join("tacos-cache"));
        Ok(Config {
            topology: get("TACOS_TOPOLOGY"),
            nccl_topo_file: get("NCCL_TOPO_FILE"),
            nodes,
            nic_gbps,
            nvswitch_gbps,
            nvlink_gbps,
            gpu,
            target,
            cache_dir,
            nccl_margin,
            max_transfers,
            lock_wait,
            user_chose_algorithms: get("NCCL_ALGO").is_some() || get("NCCL_PROTO").is_some(),
            warnings,
        })
    }

    /// The process environment.
    pub fn from_process() -> Result<Config> {
        Config::from_env(|name| std::env::var_os(name))
    }

    /// The GPU generation: `gpu`, else [`DEFAULT_GPU`].
    pub fn gpu(&self) -> GpuArch {
        self.gpu.unwrap_or(DEFAULT_GPU)
    }
}

/// Holds everything this process's plugins compute to `TACOS_MAX_MEMORY` where it is
/// set, else to the plugins' own limit ([`MemoryLimit::plugin`]), which is far below
/// the command line's: they share the host with a training job; either within what the
/// host's limits leave ([`MemoryLimit::system`]). Done once per process
/// (both plugins' `init` call it); a value that is not a size gets one warning through
/// `log` and the plugins' limit.
pub fn set_memory_limit(log: &dyn Log) {
    static SET: Once = Once::new();
    SET.call_once(|| {
        let limit = MemoryLimit::from_env().unwrap_or_else(|e| {
            log.warn(&format!(
                "{e}; using the plugins' limit of {} GiB",
                PLUGIN_MAX_MEMORY >> 30
            ));
            None
        });
        MemoryLimit::within_system(Some(limit.unwrap_or_else(MemoryLimit::plugin)))
            .set_process_default();
    });
}

#[cfg(test)]
pub(super) mod tests {
    use super::*;
    use std::collections::HashMap;

    /// A configuration from these variables alone.
    pub fn config(vars: &[(&str, &str)]) -> Result<Config> {
        let map: HashMap<&str, &str> = vars.iter().copied().collect();
        Config::from_env(|k| map.get(k).map(OsString::from))
    }

    #[test]
    fn bad_values_are_named() {
        for (name, value) in [("TACOS_NIC_GBPS", "fast"), ("TACOS_GPU_ARCH", "kepler")] {
            match config(&[(name, value)]) {
                Err(Error::Invalid {
                    input, value: v, ..
                }) => assert_eq!((input.as_str(), v.as_str()), (name, value)),
                other => panic!("{name}={value}: {other:?}"),
            }
        }
        assert_eq!(
            config(&[("TACOS_TOPOLOGY", " ")]).unwrap(),
            Config::default()
        );
        assert!(
            config(&[("NCCL_PROTO", "^LL128")])
                .unwrap()
                .user_chose_algorithms
        );
    }

    #[test]
    fn scheduler_settings_that_do_not_parse_are_replaced_with_a_warning() {
        let c = config(&[("TACOS_NODES", "0"), ("TACOS_TARGET", "executor-512")]).unwrap();
        assert_eq!((c.nodes, &c.target), (None, &Target::default()));
        assert_eq!(c.warnings.len(), 2, "{:?}", c.warnings);
        assert!(c.warnings[0].contains("executor-512"), "{:?}", c.warnings);
        assert!(
            c.warnings[1].contains("TACOS_NODES='0'"),
            "{:?}",
            c.warnings
        );
        let c = config(&[("TACOS_NODES", " 4 "), ("TACOS_TARGET", "executor-256")]).unwrap();
        assert_eq!(c.nodes, Some(4));
        assert_eq!(c.target.profile, Profile::Executor256);
        assert!(c.warnings.is_empty());
    }

    #[test]
    fn the_nccl_margin_and_the_work_bound_parse_or_warn() {
        let c = Config::default();
        assert_eq!((c.nccl_margin, c.max_transfers), (Some(0.05), 1 << 17));
        let c = config(&[
            ("TACOS_NCCL_MARGIN", " OFF "),
            ("TACOS_MAX_TRANSFERS", "1000"),
        ])
        .unwrap();
        assert_eq!(
            (c.nccl_margin, c.max_transfers, c.warnings.len()),
            (None, 1000, 0)
        );
        let c = config(&[("TACOS_NCCL_MARGIN", "0.2")]).unwrap();
        assert_eq!(c.nccl_margin, Some(0.2));
        let c = config(&[("TACOS_NCCL_MARGIN", "-1"), ("TACOS_MAX_TRANSFERS", "0")]).unwrap();
        assert_eq!((c.nccl_margin, c.max_transfers), (Some(0.05), 1 << 17));
        assert_eq!(c.warnings.len(), 2, "{:?}", c.warnings);
        assert!(
            c.warnings[0].contains("TACOS_NCCL_MARGIN='-1'"),
            "{:?}",
            c.warnings
        );
        assert!(
            c.warnings[1].contains("TACOS_MAX_TRANSFERS='0'"),
            "{:?}",
            c.warnings
        );
    }

    #[test]
    fn the_lock_wait_is_bounded_and_a_bad_value_warns() {
        assert_eq!(Config::default().lock_wait, DEFAULT_LOCK_WAIT);
        let c = config(&[(LOCK_WAIT_ENV, " 250 ")]).unwrap();
        assert_eq!(
            (c.lock_wait, c.warnings.len()),
            (Duration::from_millis(250), 0)
        );
        for bad in ["-1", "soon", "600001", "18446744073709551616"] {
            let c = config(&[(LOCK_WAIT_ENV, bad)]).unwrap();
            assert_eq!(c.lock_wait, DEFAULT_LOCK_WAIT);
            assert!(
                c.warnings.len() == 1
                    && c.warnings[0].contains(&format!("TACOS_LOCK_WAIT_MS='{bad}'"))
                    && c.warnings[0].contains("from 0 to 600000"),
                "{:?}",
                c.warnings
            );
        }
    }

    #[test]
    fn the_cache_follows_the_xdg_order() {
        let c = |vars: &[(&str, &str)]| config(vars).unwrap().cache_dir;
        let all = [
            ("TACOS_CACHE_DIR", "/a"),
            ("XDG_CACHE_HOME", "/x"),
            ("HOME", "/h"),
        ];
        assert_eq!(c(&all), PathBuf::from("/a"));
        assert_eq!(c(&all[1..]), PathBuf::from("/x/tacos"));
        assert_eq!(c(&all[2..]), PathBuf::from("/h/.cache/tacos"));
        assert_eq!(
            c(&[("TACOS_CACHE_DIR", ""), all[2]]),
            PathBuf::from("/h/.cache/tacos")
        );
        assert_eq!(c(&[]), std::env::temp_dir().join("tacos-cache"));
    }
}
