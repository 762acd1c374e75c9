//! Units used across the project.
//!
//! Time is an integer number of picoseconds inside the synthesizer, the checker and the
//! simulator, so event order is exact and runs are reproducible. Users see microseconds,
//! GB/s (1e9 bytes per second) and byte sizes such as `1GiB` or `4MB`.

use crate::error::echo;

/// Integer time in picoseconds.
pub type Picos = u64;

/// Largest collective size: 1 TiB (2^40 bytes), more than any GPU holds, and far below
/// 2^63. Sizes past it are refused, never saturated: with link bandwidths of at least
/// `topology::MIN_BANDWIDTH_GBPS`, one transfer of this size stays below 2^60 ps (see
/// `topology::limits`), which leaves integer time room to add transfers up.
pub const MAX_SIZE_BYTES: u64 = 1 << 40;

/// What a size may be, as error messages say it.
pub const SIZE_ALLOWED: &str = "at least 1 byte and at most 1 TiB (2^40 bytes)";

/// Picoseconds in one microsecond.
pub const PICOS_PER_US: f64 = 1e6;

/// Converts microseconds to integer picoseconds, rounding to the nearest.
pub fn us_to_ps(us: f64) -> Picos {
    (us * PICOS_PER_US).round() as Picos
}

/// Converts integer picoseconds to microseconds.
pub fn ps_to_us(ps: Picos) -> f64 {
    ps as f64 / PICOS_PER_US
}

/// Time to move `bytes` over a link of `alpha_us` latency and `bandwidth_gbps` GB/s:
/// alpha + bytes / bandwidth, rounded up to the next picosecond and at least one, so no
/// sum of transfers ends below a lower bound computed on the exact figures and no transfer
/// takes no time. Within the ranges links and sizes are checked against
/// (`topology::limits`, `MAX_SIZE_BYTES`) the result is below 2^61; beyond them it
/// saturates, which is why those ranges are enforced.
pub fn alpha_beta_ps(alpha_us: f64, bandwidth_gbps: f64, bytes: f64) -> Picos {
    // 1 GB/s moves one byte per nanosecond: bytes * 1000 / GBps picoseconds.
    ((alpha_us * PICOS_PER_US + bytes * 1000.0 / bandwidth_gbps).ceil() as Picos).max(1)
}

/// Algorithm bandwidth in GB/s: the collective's size over its time (nccl-tests' convention).
pub fn algbw_gbps(size_bytes: u64, time_ps: Picos) -> f64 {
    if time_ps == 0 {
        return f64::INFINITY;
    }
    // bytes per picosecond * 1e12 = bytes/s; / 1e9 = GB/s.
    size_bytes as f64 * 1000.0 / time_ps as f64
}

/// Parses a byte size: a plain integer, or a number with one of the suffixes (any case)
/// KB, MB, GB, TB (powers of 1000), KiB, MiB, GiB, TiB (powers of 1024), or K, M, G, T
/// alone, read as nccl-tests reads them (`-e 8G` is 8 x 2^30): powers of 1024; from 1
/// byte to `MAX_SIZE_BYTES`.
///
/// ```
/// use tacos::units::parse_size;
///
/// assert_eq!(parse_size("1G"), parse_size("1GiB"));
/// assert_eq!(parse_size("4MB"), Ok(4_000_000));
/// assert!(parse_size("1 parsec").is_err());
/// ```
pub fn parse_size(text: &str) -> Result<u64, String> {
    let t = text.trim();
    let split = t
        .find(|c: char| !(c.is_ascii_digit() || c == '.'))
        .unwrap_or(t.len());
    let (num, unit) = t.split_at(split);
    let shown = echo(text);
    let value: f64 = num.parse().map_err(|_| {
        format!("size '{shown}' must be a number with an optional unit such as 1GiB, 4MB or 65536")
    })?;
    let mult: f64 = match unit.trim().to_ascii_lowercase().as_str() {
        "" | "b" => 1.0,
        "kb" => 1e3,
        "mb" => 1e6,
        "gb" => 1e9,
        "tb" => 1e12,
        "k" | "ki" | "kib" => 1024.0,
        "m" | "mi" | "mib" => 1024.0 * 1024.0,
        "g" | "gi" | "gib" => 1024.0 * 1024.0 * 1024.0,
        "t" | "ti" | "tib" => 1024.0f64.powi(4),
        other => {
            return Err(format!(
            "size '{shown}' has unknown unit '{}' (allowed: B; KB, MB, GB, TB for powers of 1000; KiB, MiB, GiB, TiB, or K, M, G, T as nccl-tests reads them, for powers of 1024)",
            echo(other)
        ))
        }
    };
    // Below 2^53 every whole number is exact in f64, so the checks below are exact too.
    let bytes = value * mult;
    if !(1.0..=MAX_SIZE_BYTES as f64).contains(&bytes) || bytes.fract() != 0.0 {
        return Err(format!(
            "size '{shown}' must be a whole number of bytes, {SIZE_ALLOWED}"
        ));
    }
    Ok(bytes as u64)
}

/// Formats a byte count the way people read it: `1 GiB`, `64 MiB`, `1000 B`.
pub fn format_size(bytes: u64) -> String {
    const UNITS: [(&str, u64); 4] = [
        ("TiB", 1 << 40),
        ("GiB", 1 << 30),
        ("MiB", 1 << 20),
        ("KiB", 1 << 10),
    ];
    for (name, unit) in UNITS {
        if bytes >= unit && bytes % unit == 0 {
            return format!("{} {name}", bytes / unit);
        }
    }
    for (name, unit) in UNITS {
        if bytes >= unit {
            return format!("{:.2} {name}", bytes as f64 / unit as f64);
        }
    }
    format!("{bytes} B")
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn sizes_parse_in_both_unit_families() {
        assert_eq!(parse_size("1GiB").unwrap(), 1 << 30);
        assert_eq!(parse_size("4MB").unwrap(), 4_000_000);
        assert_eq!(parse_size("1kib").unwrap(), 1024);
        assert_eq!(parse_size("65536").unwrap(), 65536);
        assert_eq!(parse_size("1.5KiB").unwrap(), 1536);
        // Bare K, M, G, T as nccl-tests reads them.
        assert_eq!(parse_size("8K").unwrap(), 8192);
        assert_eq!(parse_size("1g").unwrap(), 1 << 30);
        assert_eq!(parse_size("2M").unwrap(), 2 << 20);
        assert_eq!(parse_size("1KB").unwrap(), 1000);
        assert!(parse_size("0").is_err());
        assert!(parse_size("-1MB").is_err());
        assert!(parse_size("1.5B").is_err());
        assert!(parse_size("3 parsecs").is_err());
        // The largest size is taken; a byte more, and 2^64 and above, are refused rather
        // than saturated.
        assert_eq!(parse_size("1TiB").unwrap(), MAX_SIZE_BYTES);
        assert!(parse_size("1099511627777").is_err());
        assert!(parse_size("10000000000000000000").is_err());
        assert!(parse_size("18446744073709551616").is_err());
    }

    #[test]
    fn alpha_beta_matches_hand_computation() {
        // 64 MiB at 50 GB/s: 67108864 / 50e9 s = 1342.17728 us, plus 0.5 us.
        assert_eq!(
            alpha_beta_ps(0.5, 50.0, (64u64 << 20) as f64),
            1_342_677_280
        );
    }

    #[test]
    fn sizes_format_readably() {
        assert_eq!(format_size(1 << 30), "1 GiB");
        assert_eq!(format_size(1000), "1000 B");
        assert_eq!(format_size(1536), "1.50 KiB");
    }
}
