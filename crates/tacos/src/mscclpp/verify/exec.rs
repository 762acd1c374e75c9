//! One launch of the plan, executed symbolically: every threadblock of every rank runs
//! its program in order, a scheduler interleaving them; waits, semaphore acquires and
//! barriers block until what they wait for happened. Data operations move symbolic
//! values and check, through the access histories, that each access is ordered after
//! the accesses it depends on.

use super::clock::{Access, Clock};
use super::memory::Memory;
use super::site::{program, Site, Step};
use super::structure::{kind, End, Tables, TbLists, PEER_TYPES};
use crate::error::{Error, Result};
use crate::mscclpp::plan::{ChannelType, Operation, Plan};
use std::collections::VecDeque;
use std::rc::Rc;

/// A signal's or release's view, handed to whoever consumes it.
#[derive(Clone)]
struct Token {
    clock: Rc<Clock>,
    /// Orders execution only (a relaxed signal or wait on a memory channel).
    relaxed: bool,
}

/// One threadblock as it runs.
pub(super) struct Tb<'a> {
    pub(super) rank: usize,
    local: usize,
    steps: Vec<Step<'a>>,
    pub(super) lists: TbLists,
    pub(super) pc: usize,
    pub(super) clock: Rc<Clock>,
    /// Views acquired by waits and acquires, visible to the block at its next nop.
    pending: Vec<Token>,
    /// What it waits for, while blocked.
    blocked: Option<String>,
}

/// One channel end: the signals its peer sent that nobody waited for yet.
#[derive(Default)]
struct EndState {
    inbound: VecDeque<Token>,
    received: usize,
    waited: usize,
    /// The last wait on it: (threadblock, its nop count then), to order the next.
    last_wait: Option<(usize, u8)>,
    waiters: Vec<usize>,
}

#[derive(Default)]
struct SemState {
    tokens: VecDeque<Option<Token>>,
    waiters: Vec<usize>,
}

#[derive(Default)]
struct BarrierState {
    arrived: Vec<usize>,
    expected: usize,
}

/// Counts of one launch.
#[derive(Default)]
pub(super) struct Counts {
    pub signals: usize,
    pub waits: usize,
    pub steps: usize,
}

/// Why a step did not finish.
enum Flow {
    Next,
    Blocked,
}

pub(super) struct Run<'a> {
    pub(super) plan: &'a Plan,
    pub(super) tables: &'a Tables,
    pub memory: Memory,
    pub(super) tbs: Vec<Tb<'a>>,
    ends: Vec<[Vec<EndState>; 2]>,
    sems: Vec<Vec<SemState>>,
    barriers: Vec<Vec<BarrierState>>,
    ready: VecDeque<usize>,
    pub counts: Counts,
}

fn fail(message: String) -> Error {
    Error::plan(message)
}

impl<'a> Run<'a> {
    pub fn new(plan: &'a Plan, tables: &'a Tables, memory: Memory) -> Run<'a> {
        let total: usize = plan.gpus.iter().map(|g| g.threadblocks.len()).sum();
        let mut tbs = Vec::with_capacity(total);
        for (rank, gpu) in plan.gpus.iter().enumerate() {
            for (local, tb) in gpu.threadblocks.iter().enumerate() {
                tbs.push(Tb {
                    rank,
                    local,
                    steps: program(tb),
                    lists: TbLists::new(tb),
                    pc: 0,
                    clock: Rc::new(Clock::new(total)),
                    pending: Vec::new(),
                    blocked: None,
                });
            }
        }
        let ends = tables
            .peers
            .iter()
            .map(|p| {
                [
                    p[0].iter().map(|_| EndState::default()).collect(),
                    p[1].iter().map(|_| EndState::default()).collect(),
                ]
            })
            .collect();
        let sems = plan
            .gpus
            .iter()
            .map(|g| {
                g.semaphores
                    .iter()
                    .map(|s| SemState {
                        tokens: (0..s.init_value).map(|_| None).collect(),
                        waiters: Vec::new(),
                    })
                    .collect()
            })
            .collect();
        let barriers = plan
            .gpus
            .iter()
            .map(|_| {
                (0..crate::mscclpp::plan::MAX_BARRIERS)
                    .map(|_| BarrierState::default())
                    .collect()
            })
            .collect();
        Run {
            plan,
            tables,
            memory,
            ready: (0..tbs.len()).collect(),
            tbs,
            ends,
            sems,
            barriers,
            counts: Counts::default(),
        }
    }

    pub(super) fn site(&self, t: usize) -> Site<'a> {
        let tb = &self.tbs[t];
        Site {
            rank: tb.rank,
            tb: tb.local,
            step: tb.steps[tb.pc],
        }
    }

    pub(super) fn site_of(&self, a: &Access) -> Site<'a> {
        let tb = &self.tbs[a.tb as usize];
        Site {
            rank: tb.rank,
            tb: tb.local,
            step: tb.steps[a.step as usize],
        }
    }

    /// Runs every threadblock to its end; a deadlock if some cannot get there.
    pub fn run(&mut self) -> Result<()> {
        while let Some(t) = self.ready.pop_front() {
            while self.tbs[t].pc < self.tbs[t].steps.len() {
                match self.step(t)? {
                    Flow::Next => {
                        self.tbs[t].pc += 1;
                        self.counts.steps += 1;
                    }
                    Flow::Blocked => break,
                }
            }
        }
        let stuck: Vec<String> = (0..self.tbs.len())
            .filter(|&t| self.tbs[t].pc < self.tbs[t].steps.len())
            .map(|t| {
                format!(
                    "{} waits for {}",
                    self.site(t),
                    self.tbs[t].blocked.as_deref().unwrap_or("something")
                )
            })
            .collect();
        if !stuck.is_empty() {
            let shown = stuck.len().min(8);
            let more = if stuck.len() > shown {
                format!("; and {} more threadblock(s)", stuck.len() - shown)
            } else {
                String::new()
            };
            return Err(fail(format!(
                "deadlock: {} threadblock(s) can never finish: {}{more}",
                stuck.len(),
                stuck[..shown].join("; ")
            )));
        }
        self.balance()
    }

    /// Counters persist across launches: every signal must be waited for in the launch
    /// that sent it, and every semaphore must end where it started.
    fn balance(&self) -> Result<()> {
        for (rank, per_kind) in self.ends.iter().enumerate() {
            for (k, ends) in per_kind.iter().enumerate() {
                for (index, e) in ends.iter().enumerate() {
                    if e.received != e.waited {
                        let from = self.tables.peer_end(End {
                            rank,
                            kind: k,
                            index,
                        });
                        return Err(fail(format!(
                            "unbalanced {} channel: rank {}'s channel {} signalled rank {rank}'s channel {index} {} time(s), but rank {rank} waited on it {} time(s) in one launch; the counters persist, so the next launch would pass a wait early",
                            PEER_TYPES[k], from.rank, from.index, e.received, e.waited
                        )));
                    }
                }
            }
        }
        for (rank, sems) in self.sems.iter().enumerate() {
            for (s, sem) in sems.iter().enumerate() {
                let init = self.plan.gpus[rank].semaphores[s].init_value as usize;
                if sem.tokens.len() != init {
                    return Err(fail(format!(
                        "unbalanced semaphore: rank {rank}'s semaphore {s} starts at {init} and ends the launch at {}; it persists, so the next launch would start wrong",
                        sem.tokens.len()
                    )));
                }
            }
        }
        Ok(())
    }

    fn wake(&mut self, waiters: Vec<usize>) {
        for t in waiters {
            self.tbs[t].blocked = None;
            self.ready.push_back(t);
        }
    }

    fn block(&mut self, t: usize, what: String) -> Flow {
        self.tbs[t].blocked = Some(what);
        Flow::Blocked
    }

    /// The block-wide sync: acquired views become visible, and this block's accesses so
    /// far are ordered before everything after.
    fn nop(&mut self, t: usize) {
        let tb = &mut self.tbs[t];
        let clock = Rc::make_mut(&mut tb.clock);
        for token in tb.pending.drain(..) {
            clock.join(&token.clock, token.relaxed);
        }
        clock.tick(t);
    }

    fn step(&mut self, t: usize) -> Result<Flow> {
        let site = self.site(t);
        let op = site.step.op;
        match op.name.as_str() {
            "nop" => self.nop(t),
            "flush" => {}
            "barrier" => return Ok(self.barrier(t, op)),
            "signal" | "rlxsignal" => self.signal(t, op, op.name == "rlxsignal", false)?,
            "wait" | "rlxwait" => return self.wait(t, op),
            "sem_release" => {
                let token = Token {
                    clock: self.tbs[t].clock.clone(),
                    relaxed: false,
                };
                let rank = site.rank;
                for &s in op.semaphore_ids.as_deref().unwrap_or_default() {
                    let sem = &mut self.sems[rank][s];
                    sem.tokens.push_back(Some(token.clone()));
                    let w = std::mem::take(&mut sem.waiters);
                    self.wake(w);
                }
            }
            "sem_acquire" => {
                let rank = site.rank;
                let ids = op.semaphore_ids.as_deref().unwrap_or_default();
                if let Some(&s) = ids.iter().find(|&&s| self.sems[rank][s].tokens.is_empty()) {
                    self.sems[rank][s].waiters.push(t);
                    return Ok(self.block(t, format!("a release of semaphore {s}")));
                }
                for &s in ids {
                    if let Some(Some(token)) = self.sems[rank][s].tokens.pop_front() {
                        self.tbs[t].pending.push(token);
                    }
                }
            }
            _ => self.data(t, site)?,
        }
        Ok(Flow::Next)
    }

    fn barrier(&mut self, t: usize, op: &Operation) -> Flow {
        self.nop(t);
        let rank = self.tbs[t].rank;
        let id = op.barrier_id.unwrap_or_default();
        let n = op.num_threadblocks.unwrap_or_default();
        let b = &mut self.barriers[rank][id];
        if b.arrived.is_empty() {
            b.expected = n;
        }
        b.arrived.push(t);
        if b.arrived.len() < b.expected {
            let what = format!(
                "barrier {id} ({} of {n} threadblocks there)",
                b.arrived.len()
            );
            return self.block(t, what);
        }
        let arrived = std::mem::take(&mut b.arrived);
        let mut all = Clock::new(self.tbs.len());
        for &m in &arrived {
            all.join(&self.tbs[m].clock, false);
        }
        for &m in &arrived {
            let clock = Rc::make_mut(&mut self.tbs[m].clock);
            clock.join(&all, false);
            clock.tick(m);
            if m != t {
                // Released from its barrier: it continues after it.
                self.tbs[m].pc += 1;
                self.counts.steps += 1;
                self.tbs[m].blocked = None;
                self.ready.push_back(m);
            }
        }
        Flow::Next
    }

    /// The GPU-level channel end a threadblock's local channel `c` of `ty` names.
    pub(super) fn end(&self, t: usize, ty: ChannelType, c: usize) -> End {
        let k = kind(ty).unwrap_or_default();
        End {
            rank: self.tbs[t].rank,
            kind: k,
            index: self.tbs[t].lists.channels[k][c],
        }
    }

    /// Signals each of the operation's channels (`channels` overrides the op's list for
    /// a put with signal); `with_data` counts this epoch's writes in, as a port put with
    /// signal does (data then signal, in order through the proxy).
    pub(super) fn signal(
        &mut self,
        t: usize,
        op: &Operation,
        relaxed: bool,
        with_data: bool,
    ) -> Result<()> {
        let ty = op.channel_type.unwrap_or(ChannelType::None);
        let clock = if with_data {
            let mut c = (*self.tbs[t].clock).clone();
            c.tick(t);
            Rc::new(c)
        } else {
            self.tbs[t].clock.clone()
        };
        let token = Token {
            clock,
            relaxed: relaxed && ty == ChannelType::Memory,
        };
        for &c in op.channel_ids.as_deref().unwrap_or_default() {
            let peer = self.tables.peer_end(self.end(t, ty, c));
            let e = &mut self.ends[peer.rank][peer.kind][peer.index];
            e.inbound.push_back(token.clone());
            e.received += 1;
            self.counts.signals += 1;
            let w = std::mem::take(&mut e.waiters);
            self.wake(w);
        }
        Ok(())
    }

    fn wait(&mut self, t: usize, op: &Operation) -> Result<Flow> {
        let ty = op.channel_type.unwrap_or(ChannelType::None);
        let relaxed = op.name == "rlxwait" && ty == ChannelType::Memory;
        let ids = op.channel_ids.as_deref().unwrap_or_default();
        for &c in ids {
            let end = self.end(t, ty, c);
            if self.ends[end.rank][end.kind][end.index].inbound.is_empty() {
                let from = self.tables.peer_end(end);
                self.ends[end.rank][end.kind][end.index].waiters.push(t);
                return Ok(self.block(
                    t,
                    format!(
                        "a signal on its {ty} channel {} from rank {} (its channel {})",
                        end.index, from.rank, from.index
                    ),
                ));
            }
        }
        let tag = self.tbs[t].clock.data(t);
        for &c in ids {
            let end = self.end(t, ty, c);
            let e = &mut self.ends[end.rank][end.kind][end.index];
            if let Some((other, other_tag)) = e.last_wait {
                if other != t && self.tbs[t].clock.exec(other) <= other_tag {
                    let first = &self.tbs[other];
                    return Err(fail(format!(
                        "{}: waits on rank {}'s {ty} channel {} as threadblock {} also does, with no order between their waits: which signal each consumes depends on timing",
                        self.site(t),
                        end.rank,
                        end.index,
                        first.local
                    )));
                }
            }
            let e = &mut self.ends[end.rank][end.kind][end.index];
            e.last_wait = Some((t, tag));
            e.waited += 1;
            self.counts.waits += 1;
            if let Some(mut token) = e.inbound.pop_front() {
                token.relaxed |= relaxed;
                self.tbs[t].pending.push(token);
            }
        }
        Ok(Flow::Next)
    }
}
