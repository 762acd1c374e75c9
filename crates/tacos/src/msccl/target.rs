//! The loaders an algorithm file is written for, and what each one takes.
//!
//! Three real loaders read MSCCL XML, each with its own limits and dialect
//! (`../shared/reference/msccl-xml.md`): the MSCCL executor as it builds by default and
//! RCCL (64 steps per threadblock, 64 threadblocks per GPU in RCCL), the executor rebuilt
//! with `MSCCL_MAX_NUM_STEPS=256`, and the older microsoft/msccl fork (`reduce_scatter`
//! spelling, no gather or scatter, only `inplace` read). A [`Target`] is one of them with
//! its [`Limits`], optionally tightened or loosened by explicit overrides; lowering keeps to
//! it, and the verifier's loader-rules check reports what a file breaks of it.

use super::Limits;
use crate::collective::CollectiveKind;
use crate::error::{Error, Result};
use std::fmt;
use std::str::FromStr;

/// A loader profile.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Hash)]
pub enum Profile {
    /// The MSCCL executor as it builds by default, and RCCL: the smallest of their limits.
    #[default]
    Executor,
    /// The MSCCL executor rebuilt with `MSCCL_MAX_NUM_STEPS=256`.
    Executor256,
    /// The older microsoft/msccl fork.
    MscclLegacy,
}

impl Profile {
    pub const ALL: [Profile; 3] = [
        Profile::Executor,
        Profile::Executor256,
        Profile::MscclLegacy,
    ];

    /// The name `--target` and `TACOS_TARGET` take.
    pub fn name(self) -> &'static str {
        match self {
            Profile::Executor => "executor",
            Profile::Executor256 => "executor-256",
            Profile::MscclLegacy => "msccl-legacy",
        }
    }

    /// The loader's limits.
    pub fn limits(self) -> Limits {
        let executor = Limits {
            max_steps_per_tb: 64,
            max_tbs_per_channel: 32,
            max_channels: 32,
            max_tbs: 64,
            max_dep_tb: i8::MAX as usize,
            max_offset: i16::MAX as i64,
            max_count: 71,
            max_elements_per_rank: 4095,
            max_gpus: 1024,
        };
        match self {
            Profile::Executor => executor,
            Profile::Executor256 => Limits {
                max_steps_per_tb: 256,
                max_tbs: 1024,
                ..executor
            },
            // The older fork's parser keeps 4,095 elements per rank as the executor's does.
            Profile::MscclLegacy => Limits {
                max_steps_per_tb: 256,
                max_tbs: 216,
                ..executor
            },
        }
    }
}

impl FromStr for Profile {
    type Err = Error;

    fn from_str(s: &str) -> Result<Profile> {
        Profile::ALL
            .into_iter()
            .find(|p| p.name() == s)
            .ok_or_else(|| Error::Unknown {
                what: "target",
                given: s.into(),
                known: Profile::ALL.map(|p| p.name()).to_vec(),
            })
    }
}

impl fmt::Display for Profile {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.name())
    }
}

/// Explicit limits that replace a profile's (`--max-steps N`...).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct LimitOverrides {
    pub max_steps_per_tb: Option<usize>,
    pub max_tbs: Option<usize>,
    pub max_elements_per_rank: Option<usize>,
    pub max_channels: Option<usize>,
}

/// The loader a file is written for: a profile and the limits it keeps to.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct Target {
    pub profile: Profile,
    pub limits: Limits,
}

impl Target {
    /// The profile with its own limits.
    pub fn new(profile: Profile) -> Target {
        Target {
            profile,
            limits: profile.limits(),
        }
    }

    /// The profile with some limits replaced; a limit of 0 is an error naming it.
    pub fn with_overrides(profile: Profile, overrides: &LimitOverrides) -> Result<Target> {
        let mut limits = profile.limits();
        let fields = [
            (
                "max-steps",
                overrides.max_steps_per_tb,
                &mut limits.max_steps_per_tb,
            ),
            ("max-tbs", overrides.max_tbs, &mut limits.max_tbs),
            (
                "max-elements",
                overrides.max_elements_per_rank,
                &mut limits.max_elements_per_rank,
            ),
            (
                "max-channels",
                overrides.max_channels,
                &mut limits.max_channels,
            ),
        ];
        for (name, value, field) in fields {
            match value {
                Some(0) => {
                    return Err(Error::Invalid {
                        input: format!("--{name}"),
                        value: "0".into(),
                        allowed: "at least 1 (a limit)".into(),
                    })
                }
                Some(v) => *field = v,
                None => {}
            }
        }
        Ok(Target { profile, limits })
    }

    /// The `coll` attribute this loader reads for `kind`, or `None` when it has no such
    /// collective.
    pub fn coll_name(&self, kind: CollectiveKind) -> Option<&'static str> {
        match (self.profile, kind) {
            (Profile::MscclLegacy, CollectiveKind::ReduceScatter) => Some("reduce_scatter"),
            (Profile::MscclLegacy, CollectiveKind::Gather | CollectiveKind::Scatter) => None,
            (_, kind) => Some(kind.name()),
        }
    }

    /// Whether the loader requires `outofplace`, `minBytes` and `maxBytes` on `<algo>`
    /// (the older fork reads only `inplace` and makes the size range optional).
    pub fn requires_placement_and_range(&self) -> bool {
        self.profile != Profile::MscclLegacy
    }
}

impl fmt::Display for Target {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.profile.name())?;
        if self.limits != self.profile.limits() {
            let l = &self.limits;
            write!(
                f,
                " (max {} steps per threadblock, {} threadblocks per GPU, {} elements per rank, {} channels)",
                l.max_steps_per_tb, l.max_tbs, l.max_elements_per_rank, l.max_channels
            )?;
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn profiles_carry_the_loaders_limits() {
        // ../shared/reference/msccl-xml.md: the executor's default build and RCCL take 64
        // steps per threadblock, RCCL 64 threadblocks per GPU, the parser 4,095 elements.
        let executor = Target::default();
        assert_eq!(executor.profile, Profile::Executor);
        assert_eq!(executor.limits.max_steps_per_tb, 64);
        assert_eq!(executor.limits.max_tbs, 64);
        assert_eq!(executor.limits.max_elements_per_rank, 4095);
        assert_eq!(Profile::Executor256.limits().max_steps_per_tb, 256);
        for p in Profile::ALL {
            assert_eq!(p.name().parse::<Profile>().unwrap(), p);
        }
        let err = "executor-512".parse::<Profile>().unwrap_err().to_string();
        assert!(
            err.contains("executor-256") && err.contains("msccl-legacy"),
            "{err}"
        );
    }

    #[test]
    fn overrides_replace_limits_and_refuse_zero() {
        let overrides = LimitOverrides {
            max_steps_per_tb: Some(100),
            ..LimitOverrides::default()
        };
        let t = Target::with_overrides(Profile::Executor, &overrides).unwrap();
        assert_eq!(t.limits.max_steps_per_tb, 100);
        assert_eq!(t.limits.max_tbs, 64);
        assert!(t.to_string().contains("100 steps"));
        let zero = LimitOverrides {
            max_tbs: Some(0),
            ..LimitOverrides::default()
        };
        match Target::with_overrides(Profile::Executor, &zero) {
            Err(Error::Invalid {
                input,
                value,
                allowed,
            }) => {
                assert_eq!((input.as_str(), value.as_str()), ("--max-tbs", "0"));
                assert!(allowed.starts_with("at least 1"), "{allowed}");
            }
            other => panic!("{other:?}"),
        }
    }

    #[test]
    fn the_legacy_fork_spells_reduce_scatter_and_lacks_gather() {
        let legacy = Target::new(Profile::MscclLegacy);
        assert_eq!(
            legacy.coll_name(CollectiveKind::ReduceScatter),
            Some("reduce_scatter")
        );
        assert_eq!(legacy.coll_name(CollectiveKind::Gather), None);
        assert!(!legacy.requires_placement_and_range());
        assert_eq!(
            Target::default().coll_name(CollectiveKind::ReduceScatter),
            Some("reducescatter")
        );
    }
}
