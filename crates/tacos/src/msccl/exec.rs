//! Executes a program's control flow the way the executor does, without data: each
//! threadblock runs its steps in order; a step first waits for its dependency (the named
//! threadblock has signalled a step at or after the named one: only `hasdep` steps
//! signal), then receives the next message of its receive connection and sends on its send
//! connection. A (sender, receiver, channel) connection is a FIFO holding at most
//! `capacity` unreceived chunks (a larger message goes only into an empty connection,
//! streaming through). The verifier replays data along the trace; the timing turns its
//! messages into simulator messages.

use super::{step_name, Instr, Program, Proto};
use std::cmp::Reverse;
use std::collections::{BinaryHeap, HashMap, VecDeque};

/// Chunks a connection buffers before its sender waits, per protocol: the executor gives a
/// connection NCCL_STEPS (8) buffer slots; a Simple step of one chunk takes 4 of them
/// (MSCCL_CHUNKSTEPS), an LL or LL128 step one.
pub(crate) fn buffered_chunks(proto: Proto) -> usize {
    match proto {
        Proto::Simple => 2,
        Proto::LL | Proto::LL128 => 8,
    }
}

/// Global numbering of threadblocks and steps.
pub(crate) struct Index {
    /// (gpu, tb) of each global threadblock.
    pub tbs: Vec<(usize, usize)>,
    /// Global id of each GPU's threadblocks.
    pub tb_id: Vec<Vec<usize>>,
    /// First global step of each global threadblock; one more entry at the end.
    pub first_step: Vec<usize>,
    /// Global threadblock of each global step.
    step_tb: Vec<u32>,
}

impl Index {
    pub fn new(program: &Program) -> Index {
        let mut tbs = Vec::new();
        let mut tb_id = Vec::new();
        let mut first_step = vec![0];
        for (g, gpu) in program.gpus.iter().enumerate() {
            let mut ids = Vec::new();
            for (t, tb) in gpu.threadblocks.iter().enumerate() {
                ids.push(tbs.len());
                tbs.push((g, t));
                first_step.push(first_step.last().copied().unwrap_or(0) + tb.steps.len());
            }
            tb_id.push(ids);
        }
        let mut step_tb = Vec::with_capacity(first_step.last().copied().unwrap_or(0));
        for (t, w) in first_step.windows(2).enumerate() {
            step_tb.resize(w[1], t as u32);
        }
        Index {
            tbs,
            tb_id,
            first_step,
            step_tb,
        }
    }

    pub fn steps(&self) -> usize {
        *self.first_step.last().unwrap_or(&0)
    }

    /// (global tb, step index within it) of a global step.
    pub fn locate(&self, step: usize) -> (usize, usize) {
        let tb = self.step_tb[step] as usize;
        (tb, step - self.first_step[tb])
    }
}

/// A message: the step that sent it, the step that received it, its chunk count.
#[derive(Clone, Debug)]
pub(crate) struct Msg {
    pub from: usize,
    pub to: Option<usize>,
    pub count: u32,
}

/// What one execution did.
pub(crate) struct Trace {
    pub index: Index,
    /// Global steps in the order they ran.
    pub order: Vec<usize>,
    /// Per global step: the message it received.
    pub received: Vec<Option<usize>>,
    /// Per global step: the message it sent.
    pub sent: Vec<Option<usize>>,
    pub messages: Vec<Msg>,
    /// Per global step: the signalling step that released its dependency.
    pub released_by: Vec<Option<usize>>,
    /// Per global step: 1 + the longest chain of steps it waited on.
    pub depth: Vec<u32>,
    /// Threadblocks that never finished and why, when the run stopped short.
    pub deadlock: Option<String>,
    /// Receives that met a message of another size, and messages nobody received.
    pub fifo_problems: Vec<String>,
}

impl Trace {
    pub fn completed(&self) -> bool {
        self.deadlock.is_none()
    }
}

/// Problems that make a program impossible to execute at all: the loader-rule breaks
/// that leave connections impossible to form (missing or wrong peers, connections shared
/// by two threadblocks) and dependencies on missing steps.
pub(crate) fn structure_problems(program: &Program) -> Vec<String> {
    let mut out: Vec<String> = super::rules::execution_breaks(program)
        .into_iter()
        .map(|b| b.message)
        .collect();
    out.extend(missing_dependencies(program));
    out
}

/// Dependencies on steps that do not exist (the parser refuses them; a program built in
/// memory may have them).
pub(crate) fn missing_dependencies(program: &Program) -> Vec<String> {
    let mut out = Vec::new();
    for (g, gpu) in program.gpus.iter().enumerate() {
        for (t, tb) in gpu.threadblocks.iter().enumerate() {
            for (s, step) in tb.steps.iter().enumerate() {
                let Some(d) = step.dep else { continue };
                let len = gpu.threadblocks.get(d.tb).map(|x| x.steps.len());
                if len.map_or(true, |len| d.step >= len) {
                    out.push(format!(
                        "GPU {g} tb {t} step {s} depends on tb {} step {}, which does not exist",
                        d.tb, d.step
                    ));
                }
            }
        }
    }
    out
}

/// Why a threadblock stopped.
enum Wait {
    /// For another threadblock to make progress.
    On(usize, String),
    /// For something that will never come.
    Never(String),
}

struct Exec<'a> {
    program: &'a Program,
    index: Index,
    capacity: usize,
    /// Per global tb: next step, last signalled step.
    pc: Vec<usize>,
    signalled: Vec<Option<usize>>,
    /// Per global tb: its send and receive connections.
    send_conn: Vec<Option<usize>>,
    recv_conn: Vec<Option<usize>>,
    /// Per connection: (from gpu, to gpu, channel), sender and receiver tbs, queue.
    conns: Vec<(usize, usize, usize)>,
    sender: Vec<Option<usize>>,
    receiver: Vec<Option<usize>>,
    queue: Vec<VecDeque<usize>>,
    /// Per connection: chunks in its queue.
    queued_chunks: Vec<usize>,
    recv_waiter: Vec<Option<usize>>,
    send_waiter: Vec<Option<usize>>,
    /// Per global tb: threadblocks waiting for it to signal a step, by that step.
    signal_waiters: Vec<BinaryHeap<Reverse<(usize, usize)>>>,
    ready: VecDeque<usize>,
    queued: Vec<bool>,
    trace_order: Vec<usize>,
    received: Vec<Option<usize>>,
    sent: Vec<Option<usize>>,
    messages: Vec<Msg>,
    released_by: Vec<Option<usize>>,
    depth: Vec<u32>,
    fifo_problems: Vec<String>,
}

/// Runs `program` (which must have no structure problems) to completion or deadlock.
pub(crate) fn run(program: &Program, capacity: usize) -> Trace {
    let mut x = Exec::new(program, capacity.max(1));
    for t in 0..x.index.tbs.len() {
        x.wake(t);
    }
    while let Some(t) = x.ready.pop_front() {
        x.queued[t] = false;
        x.advance(t);
    }
    x.finish()
}

impl<'a> Exec<'a> {
    fn new(program: &'a Program, capacity: usize) -> Exec<'a> {
        let index = Index::new(program);
        let ntb = index.tbs.len();
        let mut conn_of: HashMap<(usize, usize, usize), usize> = HashMap::new();
        let mut conns = Vec::new();
        let mut sender = Vec::new();
        let mut receiver = Vec::new();
        let mut send_conn = vec![None; ntb];
        let mut recv_conn = vec![None; ntb];
        for (id, &(g, t)) in index.tbs.iter().enumerate() {
            let tb = &program.gpus[g].threadblocks[t];
            let mut conn = |key| {
                *conn_of.entry(key).or_insert_with(|| {
                    conns.push(key);
                    conns.len() - 1
                })
            };
            let send = tb.send.map(|p| conn((g, p, tb.channel)));
            let recv = tb.recv.map(|p| conn((p, g, tb.channel)));
            sender.resize(conns.len(), None);
            receiver.resize(conns.len(), None);
            if let Some(c) = send {
                sender[c] = Some(id);
                send_conn[id] = Some(c);
            }
            if let Some(c) = recv {
                receiver[c] = Some(id);
                recv_conn[id] = Some(c);
            }
        }
        let nconn = conns.len();
        let steps = index.steps();
        Exec {
            program,
            capacity,
            pc: vec![0; ntb],
            signalled: vec![None; ntb],
            send_conn,
            recv_conn,
            conns,
            sender,
            receiver,
            queue: vec![VecDeque::new(); nconn],
            queued_chunks: vec![0; nconn],
            recv_waiter: vec![None; nconn],
            send_waiter: vec![None; nconn],
            signal_waiters: vec![BinaryHeap::new(); ntb],
            ready: VecDeque::new(),
            queued: vec![false; ntb],
            trace_order: Vec::with_capacity(steps),
            received: vec![None; steps],
            sent: vec![None; steps],
            messages: Vec::new(),
            released_by: vec![None; steps],
            depth: vec![0; steps],
            fifo_problems: Vec::new(),
            index,
        }
    }

    fn wake(&mut self, t: usize) {
        if !std::mem::replace(&mut self.queued[t], true) {
            self.ready.push_back(t);
        }
    }

    fn steps_of(&self, t: usize) -> &'a [super::Step] {
        let (g, tb) = self.index.tbs[t];
        &self.program.gpus[g].threadblocks[tb].steps
    }

    fn global_tb(&self, t: usize, tb: usize) -> usize {
        let (g, _) = self.index.tbs[t];
        self.index.tb_id[g][tb]
    }

    /// Runs threadblock `t` until it finishes or blocks.
    fn advance(&mut self, t: usize) {
        let steps = self.steps_of(t);
        while self.pc[t] < steps.len() {
            let s = self.pc[t];
            let step = &steps[s];
            let gid = self.index.first_step[t] + s;
            let mut depth = if s > 0 { self.depth[gid - 1] } else { 0 };
            if let Some(dep) = step.dep {
                let u = self.global_tb(t, dep.tb);
                if self.signalled[u].map_or(true, |f| f < dep.step) {
                    self.signal_waiters[u].push(Reverse((dep.step, t)));
                    return;
                }
                let source = self.first_signal_at_or_after(u, dep.step);
                self.released_by[gid] = source;
                if let Some(src) = source {
                    depth = depth.max(self.depth[src]);
                }
            }
            if step.instr.receives() {
                let c = self.recv_conn[t].expect("checked: receiving tbs have a peer");
                if self.queue[c].is_empty() {
                    self.recv_waiter[c] = Some(t);
                    return;
                }
            }
            if step.instr.sends() {
                let c = self.send_conn[t].expect("checked: sending tbs have a peer");
                let count = step.count as usize;
                let held = self.queued_chunks[c];
                if held > 0 && held + count > self.capacity {
                    self.send_waiter[c] = Some(t);
                    return;
                }
            }
            if step.instr.receives() {
                let c = self.recv_conn[t].expect("checked above");
                let m = self.queue[c].pop_front().expect("checked above");
                self.queued_chunks[c] -= self.messages[m].count as usize;
                self.messages[m].to = Some(gid);
                self.received[gid] = Some(m);
                depth = depth.max(self.depth[self.messages[m].from]);
                if self.messages[m].count != step.count {
                    let (from, to) = (self.name(self.messages[m].from), self.name(gid));
                    self.fifo_problems.push(format!(
                        "{to} receives {} chunks but the message it gets, from {from}, carries {}",
                        step.count, self.messages[m].count
                    ));
                }
                if let Some(w) = self.send_waiter[c].take() {
                    self.wake(w);
                }
            }
            self.depth[gid] = depth + 1;
            if step.instr.sends() {
                let c = self.send_conn[t].expect("checked above");
                let m = self.messages.len();
                self.messages.push(Msg {
                    from: gid,
                    to: None,
                    count: step.count,
                });
                self.sent[gid] = Some(m);
                self.queue[c].push_back(m);
                self.queued_chunks[c] += step.count as usize;
                if let Some(w) = self.recv_waiter[c].take() {
                    self.wake(w);
                }
            }
            self.trace_order.push(gid);
            self.pc[t] += 1;
            if step.has_dep && step.instr != Instr::Nop {
                self.signalled[t] = Some(s);
                while let Some(&Reverse((goal, w))) = self.signal_waiters[t].peek() {
                    if goal > s {
                        break;
                    }
                    self.signal_waiters[t].pop();
                    self.wake(w);
                }
            }
        }
    }

    /// The global id of the first signalling step of `t` at or after `step`.
    fn first_signal_at_or_after(&self, t: usize, step: usize) -> Option<usize> {
        let steps = self.steps_of(t);
        (step..steps.len())
            .find(|&s| steps[s].has_dep && steps[s].instr != Instr::Nop)
            .map(|s| self.index.first_step[t] + s)
    }

    fn name(&self, gid: usize) -> String {
        let (t, s) = self.index.locate(gid);
        let (g, tb) = self.index.tbs[t];
        step_name(self.program, g, tb, s)
    }

    fn finish(mut self) -> Trace {
        let deadlock = self.describe_deadlock();
        for (c, q) in self.queue.iter().enumerate() {
            if !q.is_empty() && deadlock.is_none() {
                let (from, to, ch) = self.conns[c];
                self.fifo_problems.push(format!(
                    "GPU {from} sends {} more message(s) to GPU {to} on channel {ch} than GPU {to} receives",
                    q.len()
                ));
            }
        }
        Trace {
            index: self.index,
            order: self.trace_order,
            received: self.received,
            sent: self.sent,
            messages: self.messages,
            released_by: self.released_by,
            depth: self.depth,
            deadlock,
            fifo_problems: self.fifo_problems,
        }
    }

    fn wait_of(&self, t: usize) -> Wait {
        let steps = self.steps_of(t);
        let s = self.pc[t];
        let step = &steps[s];
        let (g, _) = self.index.tbs[t];
        if let Some(dep) = step.dep {
            let u = self.global_tb(t, dep.tb);
            if self.signalled[u].map_or(true, |f| f < dep.step) {
                let target = format!("GPU {g} tb {} step {}", dep.tb, dep.step);
                let later = self.first_signal_at_or_after(u, dep.step.max(self.pc[u]));
                return match later {
                    Some(_) => Wait::On(u, format!("waits for {target}")),
                    None => Wait::Never(format!(
                        "waits for {target}, which never signals (no step at or after it with hasdep=1 is left)"
                    )),
                };
            }
        }
        if step.instr.receives() {
            let c = self.recv_conn[t].expect("receiving threadblocks have a peer");
            if self.queue[c].is_empty() {
                let (from, _, ch) = self.conns[c];
                let what = format!("waits for a message from GPU {from} on channel {ch}");
                return match self.sender[c] {
                    None => Wait::Never(format!("{what}, but no threadblock there sends to it")),
                    Some(u) if self.pc[u] >= self.steps_of(u).len() => Wait::Never(format!(
                        "{what}, but GPU {from} tb {} has finished sending",
                        self.index.tbs[u].1
                    )),
                    Some(u) => Wait::On(u, what),
                };
            }
        }
        let Some(c) = self.send_conn[t].filter(|_| step.instr.sends()) else {
            return Wait::Never("is ready but was never run".into());
        };
        let (_, to, ch) = self.conns[c];
        let what = format!("waits for GPU {to} to take its earlier messages on channel {ch}");
        match self.receiver[c] {
            None => Wait::Never(format!("{what}, but no threadblock there receives them")),
            Some(u) if self.pc[u] >= self.steps_of(u).len() => Wait::Never(format!(
                "{what}, but GPU {to} tb {} has finished receiving",
                self.index.tbs[u].1
            )),
            Some(u) => Wait::On(u, what),
        }
    }

    /// Follows the waits of stuck threadblocks to a cycle, or to a wait that never ends.
    fn describe_deadlock(&self) -> Option<String> {
        let stuck: Vec<usize> = (0..self.index.tbs.len())
            .filter(|&t| self.pc[t] < self.steps_of(t).len())
            .collect();
        let &start = stuck.first()?;
        let mut path: Vec<(usize, String)> = Vec::new();
        let mut seen: HashMap<usize, usize> = HashMap::new();
        let mut t = start;
        let (links, end) = loop {
            if let Some(&i) = seen.get(&t) {
                break (&path[i..], "and so round the cycle".to_string());
            }
            seen.insert(t, path.len());
            let (g, tb) = self.index.tbs[t];
            let here = step_name(self.program, g, tb, self.pc[t]);
            match self.wait_of(t) {
                Wait::On(u, why) => {
                    path.push((t, format!("{here} {why}")));
                    t = u;
                }
                Wait::Never(why) => {
                    path.push((t, format!("{here} {why}")));
                    break (&path[..], "so it can never go on".to_string());
                }
            }
        };
        let chain: Vec<&str> = links.iter().map(|(_, s)| s.as_str()).collect();
        Some(format!(
            "{} threadblock(s) never finish: {}; {end}",
            stuck.len(),
            chain.join("; ")
        ))
    }
}
