//! `Topology::unwind`: every switch vertex replaced by the TACOS paper's unwinding, fixed
//! NPU-to-NPU links among the NPUs attached to it, so the paper's comparisons stay
//! reproducible and the parts that do not route through switches yet can run.

use super::builders::{unwound_degree, unwound_pairs};
use super::limits::check_links;
use super::{Link, NpuId, Topology};
use crate::error::{echo, Error, Result};
use std::collections::BTreeMap;

impl Topology {
    /// The same NPUs with every switch unwound with degree `d` (default: its NPUs - 1).
    /// The NPUs attached to a switch (a link up into it and one down from it) are taken in
    /// id order and joined by `compose`'s rule for a switch dimension: each links to its
    /// next d, the link from i to j carrying min(i's up, j's down bandwidth) / d with the
    /// latency of both hops. A pair already joined (a direct link, or a second switch)
    /// gets one link with the summed bandwidth and the lower latency. Switches joined to
    /// other switches (multi-level fabrics) are refused.
    pub fn unwind(&self, d: Option<usize>) -> Result<Topology> {
        if !self.has_switches() {
            return Ok(self.clone());
        }
        if d == Some(0) {
            return Err(Error::Invalid {
                input: "--unwind degree".into(),
                value: "0".into(),
                allowed: "at least 1 (links per NPU through each switch)".into(),
            });
        }
        // Counted before anything is built: a large switch unwinds into n (n - 1) links.
        let ports = self
            .switches()
            .map(|s| self.ports(s))
            .collect::<Result<Vec<_>>>()?;
        let degree = |n: usize| unwound_degree(n, d.unwrap_or(n.saturating_sub(1)));
        let count = ports
            .iter()
            .map(|p| p.len() as u128 * degree(p.len()) as u128)
            .sum::<u128>()
            + self.links().iter().filter(|l| self.joins_npus(l)).count() as u128;
        check_links(count, || format!("'{}' unwound", echo(self.name())))?;
        let mut merged: BTreeMap<(NpuId, NpuId), (f64, f64)> = BTreeMap::new();
        let mut add = |src: NpuId, dst: NpuId, bw: f64, lat: f64| {
            let e = merged.entry((src, dst)).or_insert((0.0, lat));
            *e = (e.0 + bw, e.1.min(lat));
        };
        for l in self.links().iter().filter(|l| self.joins_npus(l)) {
            add(l.src, l.dst, l.bandwidth_gbps, l.latency_us);
        }
        for ports in &ports {
            let n = ports.len();
            let d = degree(n);
            for (i, j) in unwound_pairs(n, d) {
                let (up, down) = (ports[i].1, ports[j].2);
                let bw = up.bandwidth_gbps.min(down.bandwidth_gbps) / d as f64;
                add(ports[i].0, ports[j].0, bw, up.latency_us + down.latency_us);
            }
        }
        let links = merged
            .into_iter()
            .map(|((src, dst), (bandwidth_gbps, latency_us))| Link {
                src,
                dst,
                bandwidth_gbps: bandwidth_gbps.min(super::MAX_BANDWIDTH_GBPS),
                latency_us,
            })
            .collect();
        let unwound = Topology::new(format!("{} (unwound)", self.name()), self.npus(), links)?;
        if self.failed().is_empty() {
            Ok(unwound)
        } else {
            unwound.fail_npus(self.failed())
        }
    }

    /// Whether `l` joins two NPUs (no switch at either end): unwinding keeps it.
    fn joins_npus(&self, l: &Link) -> bool {
        !self.is_switch(l.src) && !self.is_switch(l.dst)
    }

    /// The NPUs attached to switch `s`, in id order, with their link up into it and their
    /// link down from it; an error when `s` joins another switch or an NPU only one way.
    fn ports(&self, s: usize) -> Result<Vec<(NpuId, &Link, &Link)>> {
        let name = || echo(self.switch_name(s).unwrap_or_default());
        let ins = self.in_links(s).iter().map(|&l| self.link(l).src);
        let outs = self.out_links(s).map(|l| self.link(l).dst);
        if let Some(v) = ins.chain(outs).find(|&v| self.is_switch(v)) {
            return Err(Error::Topology(format!(
                "cannot unwind switch '{}': it is linked to switch '{}', and unwinding takes one level of switches (multi-level fabrics are not unwound yet)",
                name(),
                echo(self.switch_name(v).unwrap_or_default())
            )));
        }
        let mut up: BTreeMap<NpuId, &Link> = BTreeMap::new();
        for &l in self.in_links(s) {
            up.insert(self.link(l).src, self.link(l));
        }
        let mut ports = Vec::with_capacity(up.len());
        for l in self.out_links(s) {
            let down = self.link(l);
            match up.remove(&down.dst) {
                Some(up) => ports.push((down.dst, up, down)),
                None => return Err(one_way(&name(), down.dst, "down from it but none up")),
            }
        }
        if let Some(&npu) = up.keys().next() {
            return Err(one_way(&name(), npu, "up into it but none down"));
        }
        Ok(ports)
    }
}

/// An NPU linked to a switch in one direction only, which unwinding cannot pair.
fn one_way(switch: &str, npu: NpuId, how: &str) -> Error {
    Error::Topology(format!(
        "cannot unwind switch '{switch}': NPU {npu} has a link {how}"
    ))
}
