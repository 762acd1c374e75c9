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

/// One access to a chunk: by which threadblock (global index), at which of its nop
/// counts, at which step of its program; a threadblock-group slice and the range it was
/// part of (slices of equal ranges of one group do not overlap).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(super) struct Access {
    pub tb: u32,
    pub tag: u8,
    pub step: u16,
    /// `(tb_id, tbg_size)` of a threadblock-group operation.
    pub tbg: Option<(u16, u16)>,
    /// The operation's range `(index, size)` this chunk was part of.
    pub range: (u32, u32),
}

impl Access {
    fn same_op(&self, other: &Access) -> bool {
        self.tb == other.tb && self.step == other.step
    }

    /// Slices of two group members' equal ranges: disjoint bytes.
    fn disjoint(&self, other: &Access) -> bool {
        match (self.tbg, other.tbg) {
            (Some((a, n)), Some((b, m))) => n == m && a != b && self.range == other.range,
            _ => false,
        }
    }

    /// A member of the same group over the same range as `other`.
    fn fellow(&self, other: &Access) -> bool {
        match (self.tbg, other.tbg) {
            (Some((_, n)), Some((_, m))) => n == m && self.range == other.range,
            _ => false,
        }
    }
}

/// What a check found wrong with an access.
#[derive(Debug)]
pub(super) enum Conflict {
    /// Unordered with this earlier access (a write, or a read when `read` is set).
    Race { other: Access, read: bool },
    /// Reads a range only `written` of the `of` members of a group have written.
    Partial { written: usize, of: usize },
}

/// The accesses a new access must be ordered after: the last write (all members of a
/// threadblock group) and the reads since.
#[derive(Clone, Debug, Default)]
pub(super) struct History {
    writes: Vec<Access>,
    reads: Vec<Access>,
    /// While a group's write is incomplete: what its later members must be ordered after.
    before_group: Option<Box<(Vec<Access>, Vec<Access>)>>,
}

impl History {
    /// Members still missing from the last write's threadblock group, if any.
    fn incomplete(&self) -> Option<(usize, usize)> {
        let (_, n) = self.writes.first()?.tbg?;
        (self.writes.len() < n as usize).then_some((self.writes.len(), n as usize))
    }

    /// Records a read by `a` seen from `clock`, after checking it is ordered after the
    /// last write.
    pub fn read(&mut self, a: Access, clock: &Clock) -> Result<(), Conflict> {
        if let Some((written, of)) = self.incomplete() {
            let own_slice_done = self.writes.iter().any(|w| w.fellow(&a) && w.tbg == a.tbg);
            if !own_slice_done {
                return Err(Conflict::Partial { written, of });
            }
        }
        for w in &self.writes {
            if w.same_op(&a) || w.disjoint(&a) {
                continue;
            }
            if clock.data(w.tb as usize) <= w.tag {
                return Err(Conflict::Race {
                    other: *w,
                    read: false,
                });
            }
        }
        match self.reads.iter_mut().find(|r| r.tb == a.tb) {
            Some(r) => *r = a,
            None => self.reads.push(a),
        }
        Ok(())
    }

    /// Records a write by `a` seen from `clock`, after checking it is ordered after the
    /// last write and every read since (a fellow group member's write joins the group).
    pub fn write(&mut self, a: Access, clock: &Clock) -> Result<(), Conflict> {
        let joins = self.incomplete().is_some()
            && self.writes.iter().all(|w| w.fellow(&a) && w.tbg != a.tbg);
        let (writes, reads) = match (&self.before_group, joins) {
            (Some(before), true) => (&before.0, &before.1),
            _ => (&self.writes, &self.reads),
        };
        for w in writes {
            if w.same_op(&a) || w.disjoint(&a) {
                continue;
            }
            if clock.data(w.tb as usize) <= w.tag {
                return Err(Conflict::Race {
                    other: *w,
                    read: false,
                });
            }
        }
        for r in reads {
            if r.same_op(&a) || r.disjoint(&a) {
                continue;
            }
            if clock.exec(r.tb as usize) <= r.tag {
                return Err(Conflict::Race {
                    other: *r,
                    read: true,
                });
            }
        }
        if joins {
            self.writes.push(a);
            if self.incomplete().is_none() {
                self.before_group = None;
            }
        } else {
            let before = (
                std::mem::replace(&mut self.writes, vec![a]),
                std::mem::take(&mut self.reads),
            );
            self.before_group = self.incomplete().map(|_| Box::new(before));
        }
        Ok(())
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
            tbg: None,
            range: (0, 1),
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
        h.read(at(0, 1, 2), &c).unwrap();
        // Another threadblock that has not seen the nop: unordered.
        let other = Clock::new(2);
        assert!(h.read(at(1, 0, 0), &other).is_err());
        let mut seen = Clock::new(2);
        seen.join(&c, false);
        h.read(at(1, 0, 0), &seen).unwrap();
    }

    #[test]
    fn a_relaxed_join_orders_a_later_write_but_not_a_read() {
        let mut h = History::default();
        let mut writer = Clock::new(2);
        h.write(at(0, 0, 0), &writer).unwrap();
        writer.tick(0);
        let mut reader = Clock::new(2);
        reader.join(&writer, true);
        assert!(h.read(at(1, 0, 0), &reader).is_err());
        let mut h = History::default();
        h.read(at(0, 0, 0), &writer).unwrap_or(());
        let mut h2 = History::default();
        h2.read(at(0, 0, 0), &Clock::new(2)).unwrap();
        writer.tick(0);
        let mut overwriter = Clock::new(2);
        overwriter.join(&writer, true);
        h2.write(at(1, 0, 0), &overwriter).unwrap();
        let _ = h;
    }

    #[test]
    fn a_group_write_is_complete_only_when_every_member_wrote() {
        let member = |tb: u32, id: u16| Access {
            tbg: Some((id, 2)),
            ..at(tb, 0, 0)
        };
        let mut h = History::default();
        let mut c = Clock::new(3);
        h.write(member(0, 0), &c).unwrap();
        c.tick(0);
        assert!(matches!(
            h.read(at(2, 0, 0), &c),
            Err(Conflict::Partial { written: 1, of: 2 })
        ));
        h.write(member(1, 1), &c).unwrap();
        c.tick(1);
        h.read(at(2, 0, 0), &c).unwrap();
    }
}
