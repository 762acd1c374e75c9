//! The ranges every figure of a topology must lie in, checked where the figure enters
//! (a spec option, a JSON field, an NCCL XML attribute, a command-line flag, a builder's
//! argument) and again on every link a topology is built with, before anything is
//! allocated for it.
//!
//! The link ranges keep every time the crate computes in integer picoseconds (`Picos`,
//! a u64 of at most about 1.8e19) far from overflow: one transfer of the largest
//! collective, `units::MAX_SIZE_BYTES` = 2^40 bytes, over the slowest link takes
//! 2^40 x 1000 / 1e-3 = 2^40 x 1e6 < 2^40 x 2^20 = 2^60 ps, plus at most 1e6 us =
//! 1e12 ps < 2^40 ps of latency: under 2^61, an eighth of `u64::MAX`. Sums of many
//! transfers can still grow past it; those are checked where they are added.

use crate::budget::{mul, MemoryLimit};
use crate::error::{Error, Result};

/// Most NPUs a topology may have: 2^24 (16,777,216). Per-NPU tables (adjacency, chunk
/// holders) stay within a few hundred MB.
pub const MAX_NPUS: usize = 1 << 24;

/// Most directed links a topology may have: 2^25 (33,554,432), about 1.3 GB at 40 bytes
/// a link (the link and its entry in the incoming index). Builders and the NCCL import
/// count their links from the shape before building, so `fc:100000` is refused at once.
pub const MAX_LINKS: usize = 1 << 25;

/// Most links on a route between two NPUs through switches: 16, four times a three-tier
/// fat tree's six. A longer route is a mistake in the fabric (a chain of switches), and
/// the walks and hold lists of every transfer stay short.
pub const MAX_ROUTE_LINKS: usize = 16;

/// Most NICs a node may have (presets' `nics=`, topology files' `nics.count`).
pub const MAX_NICS: usize = 64;

/// Slowest link bandwidth, GB/s (1 MB/s: slower than 10 Mb Ethernet).
pub const MIN_BANDWIDTH_GBPS: f64 = 1e-3;

/// Fastest link bandwidth, GB/s (1 PB/s: far above any link built).
pub const MAX_BANDWIDTH_GBPS: f64 = 1e6;

/// Longest link latency, microseconds (one second).
pub const MAX_LATENCY_US: f64 = 1e6;

/// What a bandwidth may be, as error messages say it.
pub const BANDWIDTH_ALLOWED: &str = "a positive number of GB/s from 0.001 to 1000000";

/// What a latency may be, as error messages say it.
pub const LATENCY_ALLOWED: &str = "zero or a positive number of microseconds up to 1000000";

/// Whether `gbps` is a link bandwidth the crate takes.
pub fn bandwidth_in_range(gbps: f64) -> bool {
    (MIN_BANDWIDTH_GBPS..=MAX_BANDWIDTH_GBPS).contains(&gbps)
}

/// Whether `us` is a link latency the crate takes (NaN and infinities are not).
pub fn latency_in_range(us: f64) -> bool {
    (0.0..=MAX_LATENCY_US).contains(&us)
}

/// `gbps` if it is a bandwidth in range, else an error naming `input`.
pub fn check_bandwidth(input: &str, gbps: f64) -> Result<f64> {
    if bandwidth_in_range(gbps) {
        Ok(gbps)
    } else {
        Err(bandwidth_error(input.into(), gbps))
    }
}

/// `us` if it is a latency in range, else an error naming `input`.
pub fn check_latency(input: &str, us: f64) -> Result<f64> {
    if latency_in_range(us) {
        Ok(us)
    } else {
        Err(latency_error(input.into(), us))
    }
}

/// A figure as a message shows it: plain when of ordinary size, else in scientific
/// notation (Rust writes 1e-300 with 300 digits otherwise).
pub(crate) fn figure(x: f64) -> String {
    if x == 0.0 || (1e-4..1e9).contains(&x.abs()) {
        x.to_string()
    } else {
        format!("{x:e}")
    }
}

/// The error for a bandwidth out of range.
pub(crate) fn bandwidth_error(input: String, gbps: f64) -> Error {
    Error::Invalid {
        input,
        value: figure(gbps),
        allowed: BANDWIDTH_ALLOWED.into(),
    }
}

/// The error for a latency out of range.
pub(crate) fn latency_error(input: String, us: f64) -> Error {
    Error::Invalid {
        input,
        value: figure(us),
        allowed: LATENCY_ALLOWED.into(),
    }
}

/// `npus` as a count if at most `MAX_NPUS`, else a `Limit` error for `context`.
pub(crate) fn check_npus(npus: u128, context: impl FnOnce() -> String) -> Result<usize> {
    if npus <= MAX_NPUS as u128 {
        Ok(npus as usize)
    } else {
        Err(Error::Limit {
            what: "NPUs",
            value: u64::try_from(npus).unwrap_or(u64::MAX),
            limit: MAX_NPUS as u64,
            context: context(),
        })
    }
}

/// Bytes building a topology of `links` directed links holds at its peak: each link (32
/// bytes) in the builder's list and in the topology, with the sort order and the incoming
/// index beside them.
pub fn building_bytes(links: usize) -> u64 {
    mul(
        links as u64,
        2 * std::mem::size_of::<super::Link>() as u64 + 16,
    )
}

/// `links` as a count if at most `MAX_LINKS` and if building them fits the memory limit
/// (`budget::MemoryLimit`, [`building_bytes`]), else a `Limit` error for `context`: checked
/// before anything is built, so a spec too big for this machine, or for a plugin's far
/// lower limit, is refused at once rather than by the allocator.
pub(crate) fn check_links(links: u128, context: impl FnOnce() -> String) -> Result<usize> {
    if links > MAX_LINKS as u128 {
        return Err(Error::Limit {
            what: "links",
            value: u64::try_from(links).unwrap_or(u64::MAX),
            limit: MAX_LINKS as u64,
            context: context(),
        });
    }
    let links = links as usize;
    MemoryLimit::default().admit(building_bytes(links), || {
        format!("{}: building {links} links", context())
    })?;
    Ok(links)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::units::{alpha_beta_ps, MAX_SIZE_BYTES};

    #[test]
    fn the_slowest_transfer_of_the_largest_size_fits_with_margin() {
        let worst = alpha_beta_ps(MAX_LATENCY_US, MIN_BANDWIDTH_GBPS, MAX_SIZE_BYTES as f64);
        assert!(worst < 1 << 61, "{worst}");
    }

    #[test]
    fn ranges_refuse_non_finite_figures() {
        for bad in [f64::NAN, f64::INFINITY, -1.0, 0.0, 1e-4, 2e6] {
            assert!(check_bandwidth("bw", bad).is_err(), "{bad}");
        }
        for bad in [f64::NAN, f64::INFINITY, -1e-9, 1.5e6] {
            assert!(check_latency("lat", bad).is_err(), "{bad}");
        }
        assert_eq!(check_bandwidth("bw", 1e-3).unwrap(), 1e-3);
        assert_eq!(check_latency("lat", 0.0).unwrap(), 0.0);
    }

    #[test]
    fn figures_stay_short() {
        assert_eq!(figure(2e6), "2000000");
        assert_eq!(figure(0.05), "0.05");
        assert_eq!(figure(1e-300), "1e-300");
        assert_eq!(figure(f64::NAN), "NaN");
    }
}
