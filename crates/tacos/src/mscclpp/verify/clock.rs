//! Happens-before by vector clocks over threadblocks, and each chunk's access history.
//!
//! A threadblock's threads are ordered only by its `nop`s (and barriers), so its clock
//! entry counts them: an access is tagged with the count at the time, and an observer
//! whose clock holds a larger count for that threadblock is ordered after it. Each clock
//! has two halves: the data view (writes whose values are visible: signal/wait,
//! semaphores, barriers) and the execution view (accesses known to have finished, which
//! relaxed signals also carry: enough to overwrite what a peer has read, not to read
//! what it wrote).

/// A vector clock: `2 x threadblocks` counts, data view then execution view.
#[derive(Clone, Debug)]
pub(super) struct Clock(Box<[u8]>);

impl Clock {
    pub fn new(threadblocks: usize) -> Clock {
        Clock(vec![0; 2 * threadblocks].into_boxed_slice())
    }

    fn half(&self) -> usize {
        self.0.len() / 2
    }

    /// Nops of threadblock `tb` whose preceding writes this clock sees.
    pub fn data(&self, tb: usize) -> u8 {
        self.0[tb]
    }

    /// Nops of threadblock `tb` whose preceding accesses this clock knows finished.
    pub fn exec(&self, tb: usize) -> u8 {
        self.0[self.half() + tb]
    }

    /// Joins `other` in: both halves, or only the execution view for relaxed ordering.
    pub fn join(&mut self, other: &Clock, relaxed: bool) {
        let from = if relaxed { self.half() } else { 0 };
        for (a, b) in self.0[from..].iter_mut().zip(&other.0[from..]) {
            *a = (*a).max(*b);
        }
    }

    /// Threadblock `tb` passed one more nop.
    pub fn tick(&mut self, tb: usize) {
        let h = self.half();
        self.0[tb] = self.0[tb].saturating_add(1);
        self.0[h + tb] = self.0[h + tb].saturating_add(1);
    }
}

/// The part of a chunk an access covers: `[lo, hi) / den` (a threadblock group's member
/// covers its slice of the operation's range; every other access the whole chunk).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(super) struct Span {
    pub lo: u32,
    pub hi: u32,
    pub den: u32,
}

impl Span {
    pub const WHOLE: Span = Span {
        lo: 0,
        hi: 1,
        den: 1,
    };

    /// The part of chunk `k` of a `size`-chunk range that slice `j` of `n` covers (the
    /// executor splits each range evenly between a group's members); `None` if none.
    pub fn slice(size: usize, k: usize, j: usize, n: usize) -> Option<Span> {
        let lo = (size * j).saturating_sub(k * n).min(n);
        let hi = (size * (j + 1)).saturating_sub(k * n).min(n);
        (lo < hi).then_some(Span {
            lo: lo as u32,
            hi: hi as u32,
            den: n as u32,
        })
    }

    fn overlaps(&self, o: &Span) -> bool {
        let (a, b) = (u64::from(self.den), u64::from(o.den));
        u64::from(self.lo) * b < u64::from(o.hi) * a && u64::from(o.lo) * a < u64::from(self.hi) * b
    }

    /// Whether `parts` together cover all of `self`.
    fn covered_by(&self, parts: &[Span]) -> bool {
        let den: u64 = parts
            .iter()
            .fold(u64::from(self.den), |l, p| lcm(l, u64::from(p.den)));
        let scale = |x: u32, d: u32| u64::from(x) * (den / u64::from(d));
        let mut intervals: Vec<(u64, u64)> = parts
            .iter()
            .map(|p| (scale(p.lo, p.den), scale(p.hi, p.den)))
            .collect();
        intervals.sort_unstable();
        let (mut at, end) = (scale(self.lo, self.den), scale(self.hi, self.den));
        for (lo, hi) in intervals {
            if lo > at {
                break;
            }
            at = at.max(hi);
        }
        at >= end
    }
}

fn lcm(a: u64, b: u64) -> u64 {
    let (mut x, mut y) = (a, b);
    while y != 0 {
        (x, y) = (y, x % y);
    }
    a / x * b
}

/// One access to (part of) a chunk: by which threadblock (global index), at which of its
/// nop counts, at which step of its program.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(super) struct Access {
    pub tb: u32,
    pub tag: u8,
    pub step: u16,
    pub span: Span,
}

impl Access {
    fn same_op(&self, other: &Access) -> bool {
        self.tb == other.tb && self.step == other.step
    }

    /// Whether `self`, seen from `clock`, must be ordered after `other` and is not.
    fn unordered_after(&self, other: &Access, clock: &Clock, read: bool) -> bool {
        if self.same_op(other) || !self.span.overlaps(&other.span) {
            return false;
        }
        let seen = if read {
            clock.exec(other.tb as usize)
        } else {
            clock.data(other.tb as usize)
        };
        seen <= other.tag
    }
}

/// Which write a read sees.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(super) enum Seen {
    Last,
    /// The contents before the partial writes under way (none covers the reader's part).
    Before,
}

/// Whether a write covers its chunk, starts covering it in parts, or adds a part.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(super) enum Wrote {
    Whole,
    /// The first part: the contents before stay readable in the other parts.
    FirstPart,
    Part,
}

/// What a check found wrong with an access.
#[derive(Debug)]
pub(super) enum Conflict {
    /// Unordered with this earlier access (a write, or a read when `read` is set).
    Race { other: Access, read: bool },
    /// Reads a chunk part of which is written by the partial writes under way.
    Partial { written: usize },
}

/// The accesses a new access must be ordered after: the last writes (the parts of a
/// group's write, or one whole write) and the reads since.
#[derive(Clone, Debug, Default)]
pub(super) struct History {
    writes: Vec<Access>,
    reads: Vec<Access>,
    /// While the parts written do not cover the chunk: the accesses before them.
    before: Option<Box<(Vec<Access>, Vec<Access>)>>,
}

impl History {
    fn complete(&self) -> bool {
        self.before.is_none()
    }

    /// Records a read by `a` seen from `clock`, after checking it is ordered after the
    /// writes it reads.
    pub fn read(&mut self, a: Access, clock: &Clock) -> Result<Seen, Conflict> {
        let mut seen = Seen::Last;
        let mut writes = &self.writes;
        if let Some(before) = &self.before {
            let parts: Vec<Span> = self.writes.iter().map(|w| w.span).collect();
            if !a.span.covered_by(&parts) {
                if self.writes.iter().any(|w| w.span.overlaps(&a.span)) {
                    return Err(Conflict::Partial {
                        written: self.writes.len(),
                    });
                }
                seen = Seen::Before;
                writes = &before.0;
            }
        }
        if let Some(w) = writes.iter().find(|w| a.unordered_after(w, clock, false)) {
            return Err(Conflict::Race {
                other: *w,
                read: false,
            });
        }
        match self
            .reads
            .iter_mut()
            .find(|r| r.tb == a.tb && r.span == a.span)
        {
            Some(r) => *r = a,
            None => self.reads.push(a),
        }
        Ok(seen)
    }

    /// Records a write by `a` seen from `clock`, after checking it is ordered after the
    /// last writes and every read since.
    pub fn write(&mut self, a: Access, clock: &Clock) -> Result<Wrote, Conflict> {
        let before = self.before.as_deref();
        let writes = self.writes.iter().chain(before.iter().flat_map(|b| &b.0));
        if let Some(w) = writes
            .into_iter()
            .find(|w| a.unordered_after(w, clock, false))
        {
            return Err(Conflict::Race {
                other: *w,
                read: false,
            });
        }
        let reads = self.reads.iter().chain(before.iter().flat_map(|b| &b.1));
        if let Some(r) = reads
            .into_iter()
            .find(|r| a.unordered_after(r, clock, true))
        {
            return Err(Conflict::Race {
                other: *r,
                read: true,
            });
        }
        if a.span == Span::WHOLE {
            self.writes = vec![a];
            self.reads.clear();
            self.before = None;
            return Ok(Wrote::Whole);
        }
        if self.complete() {
            let before = (
                std::mem::replace(&mut self.writes, vec![a]),
                std::mem::take(&mut self.reads),
            );
            self.before = Some(Box::new(before));
            return Ok(Wrote::FirstPart);
        }
        self.writes.push(a);
        let parts: Vec<Span> = self.writes.iter().map(|w| w.span).collect();
        if Span::WHOLE.covered_by(&parts) {
            self.before = None;
        }
        Ok(Wrote::Part)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn at(tb: u32, tag: u8, step: u16) -> Access {
        Access {
            tb,
            tag,
            step,
            span: Span::WHOLE,
        }
    }

    #[test]
    fn a_read_is_ordered_after_a_write_only_past_the_writers_next_nop() {
        let mut h = History::default();
        let mut c = Clock::new(2);
        h.write(at(0, 0, 0), &c).unwrap();
        // The same threadblock, no nop between: unordered.
        assert!(matches!(
            h.read(at(0, 0, 1), &c),
            Err(Conflict::Race { .. })
        ));
        c.tick(0);
        assert_eq!(h.read(at(0, 1, 2), &c).unwrap(), Seen::Last);
        // Another threadblock that has not seen the nop: unordered.
        let other = Clock::new(2);
        assert!(h.read(at(1, 0, 0), &other).is_err());
        let mut seen = Clock::new(2);
        seen.join(&c, false);
        h.read(at(1, 0, 0), &seen).unwrap();
    }

    #[test]
    fn a_relaxed_join_orders_a_later_write_but_not_a_read() {
        // Threadblock 0 writes, passes a nop; threadblock 1 joins its view relaxed.
        let mut written = History::default();
        let mut first = Clock::new(2);
        written.write(at(0, 0, 0), &first).unwrap();
        first.tick(0);
        let mut relaxed = Clock::new(2);
        relaxed.join(&first, true);
        assert!(written.read(at(1, 0, 0), &relaxed).is_err());
        // Threadblock 0 reads, passes a nop; a relaxed view may overwrite.
        let mut read = History::default();
        read.read(at(0, 0, 0), &Clock::new(2)).unwrap();
        read.write(at(1, 0, 0), &relaxed).unwrap();
    }

    #[test]
    fn a_group_write_is_complete_only_when_every_member_wrote() {
        let member = |tb: u32, j: usize| Access {
            span: Span::slice(1, 0, j, 2).unwrap(),
            ..at(tb, 0, 0)
        };
        let mut h = History::default();
        let mut c = Clock::new(3);
        assert_eq!(h.write(member(0, 0), &c).unwrap(), Wrote::FirstPart);
        c.tick(0);
        // Member 1 reads its own half, not written yet: the contents before the group.
        assert_eq!(h.read(member(1, 1), &c).unwrap(), Seen::Before);
        assert!(matches!(
            h.read(at(2, 0, 0), &c),
            Err(Conflict::Partial { written: 1 })
        ));
        assert_eq!(h.write(member(1, 1), &c).unwrap(), Wrote::Part);
        c.tick(1);
        assert_eq!(h.read(at(2, 0, 0), &c).unwrap(), Seen::Last);
    }

    #[test]
    fn slices_of_a_range_split_its_chunks_evenly() {
        // Two members over one chunk: halves. Over two chunks: one chunk each.
        assert_eq!(
            Span::slice(1, 0, 1, 2),
            Some(Span {
                lo: 1,
                hi: 2,
                den: 2
            })
        );
        assert_eq!(Span::slice(2, 0, 1, 2), None);
        assert_eq!(
            Span::slice(2, 1, 1, 2),
            Some(Span {
                lo: 0,
                hi: 2,
                den: 2
            })
        );
        // Three members over two chunks: the middle one straddles.
        assert_eq!(
            Span::slice(2, 0, 1, 3),
            Some(Span {
                lo: 2,
                hi: 3,
                den: 3
            })
        );
        assert_eq!(
            Span::slice(2, 1, 1, 3),
            Some(Span {
                lo: 0,
                hi: 1,
                den: 3
            })
        );
        let halves = [
            Span {
                lo: 0,
                hi: 1,
                den: 2,
            },
            Span {
                lo: 2,
                hi: 4,
                den: 4,
            },
        ];
        assert!(Span::WHOLE.covered_by(&halves));
        assert!(!Span::WHOLE.covered_by(&halves[..1]));
    }
}
