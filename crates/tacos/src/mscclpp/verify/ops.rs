//! The data operations: which chunks each reads and writes, and the values it writes.

use super::clock::{Access, Conflict, Seen, Span, Wrote};
use super::exec::Run;
use super::memory::Place;
use super::site::Site;
use super::structure::target;
use super::value::Value;
use crate::error::{Error, Result};
use crate::mscclpp::plan::{Buff, ChannelType};

/// A contiguous run of chunks one reference covers in one allocation.
#[derive(Clone, Copy)]
struct Region {
    start: Place,
    len: usize,
}

/// LL packet operations, not modelled yet.
const PACKET_OPS: [&str; 9] = [
    "cpkt",
    "upkt",
    "ppkt",
    "rppkt",
    "repkt",
    "respkt",
    "recpkt",
    "recspkt",
    "gstorepkt",
];

/// How a reference must address its buffer.
#[derive(Clone, Copy, PartialEq)]
enum Addr {
    Local,
    Remote,
    Switch,
}

fn addr(b: &Buff) -> Addr {
    if b.buffer_type.is_some() {
        Addr::Local
    } else if b.buffer_id.is_some() {
        Addr::Remote
    } else {
        Addr::Switch
    }
}

impl<'a> Run<'a> {
    /// Executes a data operation of threadblock `t`.
    pub(super) fn data(&mut self, t: usize, site: Site<'a>) -> Result<()> {
        let op = site.step.op;
        let at = |what: String| site.error(what);
        let name = op.name.as_str();
        if PACKET_OPS.contains(&name) {
            return Err(at(
                "LL packet operations are not yet verified by tacos (the plan was not checked)"
                    .into(),
            ));
        }
        let srcs = op.src_buff.as_deref().unwrap_or_default();
        let dsts = op.dst_buff.as_deref().unwrap_or_default();
        let expect = |list: &[Buff], which: &str, pattern: &[Addr], rest: Option<Addr>| {
            for (i, b) in list.iter().enumerate() {
                let want = pattern.get(i).copied().or(rest);
                match want {
                    None => {
                        return Err(at(format!(
                            "{} {which} entries: this operation takes {}",
                            list.len(),
                            pattern.len()
                        )))
                    }
                    Some(w) if w != addr(b) => {
                        let word = |a: Addr| match a {
                            Addr::Local => "a local buffer (type)",
                            Addr::Remote => "a remote buffer (buffer_id)",
                            Addr::Switch => "a switch channel (switch_channel_id)",
                        };
                        return Err(at(format!(
                            "{which}[{i}] must be {}, not {}",
                            word(w),
                            word(addr(b))
                        )));
                    }
                    _ => {}
                }
            }
            Ok(())
        };
        let same_sizes = |list: &[&Buff]| -> Result<usize> {
            let n = list[0].size;
            if let Some(b) = list.iter().find(|b| b.size != n) {
                return Err(at(format!(
                    "ranges of {n} and {} chunks: every range of this operation covers the first's size",
                    b.size
                )));
            }
            Ok(n)
        };
        let ty = op.channel_type.unwrap_or(ChannelType::None);
        match name {
            "copy" => {
                expect(srcs, "src_buff", &[Addr::Local], None)?;
                expect(dsts, "dst_buff", &[Addr::Local], None)?;
                same_sizes(&[&srcs[0], &dsts[0]])?;
                let v = self.read(t, site, &srcs[0])?;
                self.write(t, site, &dsts[0], &v)?;
            }
            "put" | "pws" | "pwsf" => {
                expect(srcs, "src_buff", &[], Some(Addr::Local))?;
                expect(dsts, "dst_buff", &[], Some(Addr::Remote))?;
                if srcs.len() != dsts.len() {
                    return Err(at(format!(
                        "{} sources for {} destinations: a put copies src[i] to dst[i]",
                        srcs.len(),
                        dsts.len()
                    )));
                }
                match ty {
                    ChannelType::Memory if name != "put" => {
                        return Err(at(format!(
                            "{name} over a memory channel: the executor drops its signal (put, nop, signal does it)"
                        )))
                    }
                    ChannelType::Memory => {
                        if let Some(b) = srcs.iter().find(|b| b.buffer_type != srcs[0].buffer_type) {
                            return Err(at(format!(
                                "sources in the {} and {} buffers: a memory put reads every source from src[0]'s buffer",
                                srcs[0].buffer_type.map_or(String::new(), |x| x.to_string()),
                                b.buffer_type.map_or(String::new(), |x| x.to_string())
                            )));
                        }
                    }
                    ChannelType::Port => self.port_targets(t, site, dsts)?,
                    other => return Err(at(format!("a put over channel type {other}"))),
                }
                for (s, d) in srcs.iter().zip(dsts) {
                    same_sizes(&[s, d])?;
                    let v = self.read(t, site, s)?;
                    self.write(t, site, d, &v)?;
                }
                if name != "put" {
                    self.signal(t, op, false, true)?;
                }
            }
            "get" => {
                if ty != ChannelType::Memory {
                    return Err(at(format!("get over a {ty} channel: memory channels only")));
                }
                expect(srcs, "src_buff", &[], Some(Addr::Remote))?;
                expect(dsts, "dst_buff", &[], Some(Addr::Local))?;
                if srcs.len() != dsts.len() {
                    return Err(at("as many sources as destinations needed".into()));
                }
                for (s, d) in srcs.iter().zip(dsts) {
                    if s.index != d.index {
                        return Err(at(format!(
                            "gets chunk {} into chunk {}: the executor swaps a get's local and remote offsets, so it is correct only with equal indices",
                            s.index, d.index
                        )));
                    }
                    same_sizes(&[s, d])?;
                    let v = self.read(t, site, s)?;
                    self.write(t, site, d, &v)?;
                }
            }
            "re" | "res" | "rre" | "rres" => {
                let extra = if name.starts_with("rr") {
                    Addr::Remote
                } else {
                    Addr::Local
                };
                expect(srcs, "src_buff", &[Addr::Local], Some(extra))?;
                let send = name.ends_with('s');
                expect(
                    dsts,
                    "dst_buff",
                    &[Addr::Local],
                    send.then_some(Addr::Remote),
                )?;
                let remote = extra == Addr::Remote || dsts.len() > 1;
                if remote && ty != ChannelType::Memory {
                    return Err(at(format!(
                        "a reduction reaching peers over a {ty} channel: memory channels only"
                    )));
                }
                let all: Vec<&Buff> = srcs.iter().chain(dsts).collect();
                same_sizes(&all)?;
                let mut sum = self.read(t, site, &srcs[0])?;
                for s in &srcs[1..] {
                    let more = self.read(t, site, s)?;
                    for (j, (a, b)) in sum.iter_mut().zip(&more).enumerate() {
                        *a = a.add(b).map_err(|(r, c)| {
                            at(format!(
                                "adds rank {r}'s input chunk {c} twice (chunk {} of the range)",
                                j
                            ))
                        })?;
                    }
                }
                for d in dsts {
                    self.write(t, site, d, &sum)?;
                }
            }
            "glres" => {
                expect(srcs, "src_buff", &[Addr::Switch], None)?;
                expect(dsts, "dst_buff", &[Addr::Switch], None)?;
                same_sizes(&[&srcs[0], &dsts[0]])?;
                let members = self.regions(t, &srcs[0]).map_err(at)?;
                let mut sum: Option<Vec<Value>> = None;
                for r in members {
                    let v = self.read_region(t, site, r)?;
                    sum = Some(match sum {
                        None => v,
                        Some(mut acc) => {
                            for (a, b) in acc.iter_mut().zip(&v) {
                                *a = a.add(b).map_err(|(r, c)| {
                                    at(format!("adds rank {r}'s input chunk {c} twice"))
                                })?;
                            }
                            acc
                        }
                    });
                }
                self.write(t, site, &dsts[0], &sum.unwrap_or_default())?;
            }
            "gstore" => {
                expect(srcs, "src_buff", &[Addr::Local], None)?;
                expect(dsts, "dst_buff", &[Addr::Switch], None)?;
                same_sizes(&[&srcs[0], &dsts[0]])?;
                let v = self.read(t, site, &srcs[0])?;
                self.write(t, site, &dsts[0], &v)?;
            }
            other => return Err(at(format!("'{other}' is not modelled"))),
        }
        Ok(())
    }

    /// A port put's destinations: one channel per destination, toward its owner.
    fn port_targets(&self, t: usize, site: Site<'a>, dsts: &[Buff]) -> Result<()> {
        let op = site.step.op;
        let ids = op.channel_ids.as_deref().unwrap_or_default();
        if ids.len() != dsts.len() {
            return Err(site.error(format!(
                "{} channel ids for {} destinations: a port put sends dst[i] over channel i",
                ids.len(),
                dsts.len()
            )));
        }
        for (&c, d) in ids.iter().zip(dsts) {
            let end = self.end(t, ChannelType::Port, c);
            let peer = self.tables.peers[end.rank][end.kind][end.index];
            let rank = self.tbs[t].rank;
            let (owner, what, _) = target(self.plan, self.tables, &self.tbs[t].lists, rank, op, d)
                .map_err(|e| site.error(e))?;
            if owner != peer {
                return Err(site.error(format!(
                    "writes {what} over port channel {c}, which leads to rank {peer}"
                )));
            }
        }
        Ok(())
    }

    /// The regions a reference covers: one, or one per member of a switch channel's group.
    fn regions(&self, t: usize, b: &Buff) -> std::result::Result<Vec<Region>, String> {
        let tb = &self.tbs[t];
        let rank = tb.rank;
        let op = self.site(t).step.op;
        let place = |owner: usize, ty| {
            let first = self.memory.place(owner, rank, ty, b.index);
            let last = self
                .memory
                .place(owner, rank, ty, b.index + b.size.max(1) - 1);
            match (first, last) {
                (Some(p), Some(_)) => Ok(Region {
                    start: p,
                    len: b.size,
                }),
                _ => Err(format!(
                    "chunks {} to {} of rank {owner}'s {ty} buffer lie outside its allocation as rank {rank} addresses it",
                    b.index,
                    b.index + b.size - 1
                )),
            }
        };
        if let Some(ty) = b.buffer_type {
            return Ok(vec![place(rank, ty)?]);
        }
        if b.buffer_id.is_some() {
            let (owner, _, _) = target(self.plan, self.tables, &tb.lists, rank, op, b)?;
            let k = super::structure::kind(op.channel_type.unwrap_or(ChannelType::None))
                .unwrap_or_default();
            let g = tb.lists.remote[k][b.buffer_id.unwrap_or_default()];
            let ty = self.plan.gpus[rank].remote_buffers[g].buffer_type;
            return Ok(vec![place(owner, ty)?]);
        }
        let g = tb.lists.channels[2][b.switch_channel_id.unwrap_or_default()];
        let group = &self.tables.switches[rank][g];
        group
            .ranks
            .iter()
            .map(|&m| place(m, group.buffer))
            .collect()
    }

    /// The access of threadblock `t` to chunk `k` of region `r`; `None` when its slice
    /// of a threadblock group's range leaves that chunk out.
    fn access(&self, t: usize, r: &Region, k: usize) -> Option<Access> {
        let tb = &self.tbs[t];
        let op = self.site(t).step.op;
        let span = match &op.tbg_info {
            Some(g) => Span::slice(r.len, k, g.tb_id, g.tbg_size)?,
            None => Span::WHOLE,
        };
        Some(Access {
            tb: t as u32,
            tag: tb.clock.data(t),
            step: tb.pc as u16,
            span,
        })
    }

    fn read(&mut self, t: usize, site: Site<'a>, b: &Buff) -> Result<Vec<Value>> {
        let regions = self.regions(t, b).map_err(|e| site.error(e))?;
        let mut out = Vec::new();
        for r in regions {
            out.extend(self.read_region(t, site, r)?);
        }
        Ok(out)
    }

    fn read_region(&mut self, t: usize, site: Site<'a>, r: Region) -> Result<Vec<Value>> {
        let clock = self.tbs[t].clock.clone();
        let mut out = Vec::with_capacity(r.len);
        for j in 0..r.len {
            let p = Place {
                chunk: r.start.chunk + j,
                ..r.start
            };
            let Some(a) = self.access(t, &r, j) else {
                out.push(Value::Unset);
                continue;
            };
            let cell = self.memory.cell(p);
            match cell.history.read(a, &clock) {
                Ok(Seen::Last) => out.push(cell.value.clone()),
                Ok(Seen::Before) => out.push(cell.before_group.clone().unwrap_or(Value::Unset)),
                Err(c) => return Err(self.conflict(site, "reads", p, c)),
            }
        }
        Ok(out)
    }

    /// Writes `values` to every region `b` covers (each member of a switch group).
    fn write(&mut self, t: usize, site: Site<'a>, b: &Buff, values: &[Value]) -> Result<()> {
        let regions = self.regions(t, b).map_err(|e| site.error(e))?;
        let clock = self.tbs[t].clock.clone();
        for r in regions {
            for j in 0..r.len {
                let p = Place {
                    chunk: r.start.chunk + j,
                    ..r.start
                };
                let Some(a) = self.access(t, &r, j) else {
                    continue;
                };
                let cell = self.memory.cell(p);
                let value = values.get(j).cloned().unwrap_or(Value::Unset);
                match cell.history.write(a, &clock) {
                    Ok(Wrote::Whole) => cell.before_group = None,
                    Ok(Wrote::FirstPart) => {
                        cell.before_group = Some(std::mem::replace(&mut cell.value, Value::Unset))
                    }
                    Ok(Wrote::Part) => {}
                    Err(c) => return Err(self.conflict(site, "writes", p, c)),
                }
                cell.value = value;
            }
        }
        Ok(())
    }

    fn conflict(&self, site: Site<'a>, verb: &str, p: Place, c: Conflict) -> Error {
        let chunk = self.memory.describe(p);
        site.placed(match c {
            Conflict::Race { other, read } => {
                let them = self.site_of(&other);
                let hint = if them.rank == site.rank && them.tb == site.tb {
                    "a nop between them is missing"
                } else {
                    "no signal/wait, semaphore or barrier, with nops around it, orders them"
                };
                format!(
                    "race: {site} {verb} {chunk}, which {them} {} unordered ({hint})",
                    if read { "read" } else { "wrote" }
                )
            }
            Conflict::Partial { written } => format!(
                "race: {site} {verb} {chunk} while it is written in parts by a threadblock group, only {written} part(s) written so far"
            ),
        })
    }
}
