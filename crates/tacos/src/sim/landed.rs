//! The streamed simulation's one table that grows with the collective: a simulated time
//! per (NPU, chunk), in 4 bytes where it can be (6.4 GB on a 200x200 mesh, not 12.8).
//!
//! Every simulated time is a sum of transfer durations (a transfer starts at 0 or when an
//! earlier one ends), so each is a multiple of the durations' greatest common divisor.
//! The table counts that quantum: recomputed as durations come, the counts scaled up when
//! it shrinks, and 8 bytes a count from the first count past 2^32 (durations sharing no
//! large divisor, over a long time), admitted against the memory limit then.

use crate::budget::MemoryLimit;
use crate::error::Result;
use crate::hugepages;
use crate::prefetch;
use crate::units::Picos;

pub(super) struct LandedTimes {
    /// Picoseconds per count; 0 until the first duration.
    quantum: Picos,
    counts: Counts,
    /// The largest count stored, to know when scaling would pass 4 bytes.
    most: u64,
}

enum Counts {
    Narrow(Vec<u32>),
    Wide(Vec<u64>),
}

impl LandedTimes {
    /// `len` times, all 0.
    pub fn new(len: usize) -> LandedTimes {
        LandedTimes {
            quantum: 0,
            counts: Counts::Narrow(hugepages::table(0, len)),
            most: 0,
        }
    }

    pub fn get(&self, i: usize) -> Picos {
        let count = match &self.counts {
            Counts::Narrow(c) => u64::from(c[i]),
            Counts::Wide(c) => c[i],
        };
        count * self.quantum
    }

    /// Asks the cache for time `i`.
    pub fn prefetch(&self, i: usize) {
        match &self.counts {
            Counts::Narrow(c) => {
                if let Some(n) = c.get(i) {
                    prefetch::line(n);
                }
            }
            Counts::Wide(c) => {
                if let Some(n) = c.get(i) {
                    prefetch::line(n);
                }
            }
        }
    }

    /// Makes the quantum divide `duration` (at least 1), before a time made with it is
    /// stored.
    pub fn admit_duration(&mut self, duration: Picos, doing: &dyn Fn() -> String) -> Result<()> {
        if self.quantum == 0 {
            self.quantum = duration;
            return Ok(());
        }
        if duration % self.quantum == 0 {
            return Ok(());
        }
        let finer = gcd(self.quantum, duration);
        let factor = self.quantum / finer;
        // Counts are times over the quantum, and times fit 64 bits: so do the new counts.
        let most = self.most * factor;
        if most > u64::from(u32::MAX) {
            self.widen(doing)?;
        }
        match &mut self.counts {
            Counts::Narrow(c) => c.iter_mut().for_each(|n| *n *= factor as u32),
            Counts::Wide(c) => c.iter_mut().for_each(|n| *n *= factor),
        }
        self.quantum = finer;
        self.most = most;
        Ok(())
    }

    /// Raises time `i` to `time` (a multiple of the quantum) where it is earlier.
    pub fn raise(&mut self, i: usize, time: Picos, doing: &dyn Fn() -> String) -> Result<()> {
        let count = time.checked_div(self.quantum).unwrap_or(0);
        if count > u64::from(u32::MAX) {
            self.widen(doing)?;
        }
        match &mut self.counts {
            Counts::Narrow(c) => c[i] = c[i].max(count as u32),
            Counts::Wide(c) => c[i] = c[i].max(count),
        }
        self.most = self.most.max(count);
        Ok(())
    }

    /// 8 bytes a count from now on.
    fn widen(&mut self, doing: &dyn Fn() -> String) -> Result<()> {
        let Counts::Narrow(narrow) = &self.counts else {
            return Ok(());
        };
        // Both tables are held while the counts move.
        let bytes = (narrow.len() as u64).saturating_mul(8 + 4);
        MemoryLimit::default().admit(bytes, || {
            format!(
                "{}, whose times pass 2^32 of their {} ps quantum (8 bytes per NPU and chunk)",
                doing(),
                self.quantum
            )
        })?;
        let mut wide = hugepages::table(0u64, narrow.len());
        for (w, &n) in wide.iter_mut().zip(narrow) {
            *w = u64::from(n);
        }
        self.counts = Counts::Wide(wide);
        Ok(())
    }
}

fn gcd(mut a: u64, mut b: u64) -> u64 {
    while b != 0 {
        (a, b) = (b, a % b);
    }
    a
}

#[cfg(test)]
mod tests {
    use super::*;

    fn nothing() -> String {
        String::new()
    }

    #[test]
    fn times_survive_a_finer_quantum_and_a_wider_count() {
        let mut t = LandedTimes::new(3);
        t.admit_duration(600, &nothing).unwrap();
        t.raise(0, 1800, &nothing).unwrap();
        t.raise(0, 1200, &nothing).unwrap();
        assert_eq!((t.get(0), t.get(1)), (1800, 0));
        // 600 and 250 share 50: every time is counted in fifties now.
        t.admit_duration(250, &nothing).unwrap();
        t.raise(1, 1800 + 250, &nothing).unwrap();
        assert_eq!((t.get(0), t.get(1), t.quantum), (1800, 2050, 50));
        assert!(matches!(t.counts, Counts::Narrow(_)));
        // 2^32 + 1 quanta of 50 ps need 8 bytes.
        let far = (u64::from(u32::MAX) + 2) * 50;
        t.raise(2, far, &nothing).unwrap();
        assert!(matches!(t.counts, Counts::Wide(_)));
        assert_eq!((t.get(0), t.get(1), t.get(2)), (1800, 2050, far));
        // A quantum of 1 ps then scales the wide counts.
        t.admit_duration(7, &nothing).unwrap();
        assert_eq!((t.get(0), t.get(1), t.get(2)), (1800, 2050, far));
    }

    #[test]
    fn scaling_past_4_bytes_widens_first() {
        let mut t = LandedTimes::new(1);
        t.admit_duration(1 << 20, &nothing).unwrap();
        t.raise(0, 1 << 40, &nothing).unwrap();
        assert!(matches!(t.counts, Counts::Narrow(_)));
        // Quantum 1: 2^40 counts.
        t.admit_duration(3, &nothing).unwrap();
        assert!(matches!(t.counts, Counts::Wide(_)));
        assert_eq!(t.get(0), 1 << 40);
    }
}
