//! What the pipeline hands out, each made only by the step that checks it: a schedule the
//! checker passed ([`Checked`]), its lowered program ([`Lowered`]) and the program that
//! passed its target's loader rules and the verifier ([`Verified`]).

use super::*;

/// A schedule that passed `schedule::check` on its topology. Cheap to clone.
#[derive(Clone, Debug)]
pub struct Checked(Arc<CheckedParts>);

#[derive(Clone, Debug)]
struct CheckedParts {
    schedule: Schedule,
    report: CheckReport,
    all_reduce: Option<AllReduceTimes>,
    seed: Option<u64>,
    /// How the synthesizer planned its chunks' ways, where it did.
    plan: Option<TreeShape>,
    /// The baseline it is, where it is one.
    baseline: Option<Baseline>,
}

impl Checked {
    /// Checks a timed `schedule` (from a file, say) on `topo` with `schedule::check`.
    pub fn new(schedule: Schedule, topo: &Topology) -> Result<Checked> {
        let report = check(&schedule, topo);
        Checked::with(schedule, report, None, None, None)
    }

    /// Checks `baseline`'s schedule whose times are an order, not a promise (the simulator
    /// routes and times its sends) with `schedule::check_data_flow`; its report's time is
    /// then only the number of steps. [`baseline`] gives one timed by the simulator.
    pub fn order_only(baseline: Baseline, schedule: Schedule, topo: &Topology) -> Result<Checked> {
        let report = check_data_flow(&schedule, topo);
        Checked::with(schedule, report, None, None, None).map(|c| c.of(baseline))
    }

    /// The same schedule, as `baseline`'s.
    pub(super) fn of(self, baseline: Baseline) -> Checked {
        let mut parts = Arc::unwrap_or_clone(self.0);
        parts.baseline = Some(baseline);
        Checked(Arc::new(parts))
    }

    pub(super) fn with(
        schedule: Schedule,
        report: Result<CheckReport>,
        all_reduce: Option<AllReduceTimes>,
        seed: Option<u64>,
        plan: Option<TreeShape>,
    ) -> Result<Checked> {
        let report = report.map_err(|e| {
            e.context(format!(
                "the {} schedule failed the checker",
                schedule.collective.kind
            ))
        })?;
        Ok(Checked(Arc::new(CheckedParts {
            schedule,
            report,
            all_reduce,
            seed,
            plan,
            baseline: None,
        })))
    }

    pub fn schedule(&self) -> &Schedule {
        &self.0.schedule
    }

    /// What the checker found: the schedule's time and its transfers.
    pub fn report(&self) -> &CheckReport {
        &self.0.report
    }

    /// For a synthesized All-Reduce, how it was composed.
    pub fn all_reduce(&self) -> Option<&AllReduceTimes> {
        self.0.all_reduce.as_ref()
    }

    /// The synthesizer's seed; None for a schedule made otherwise.
    pub fn seed(&self) -> Option<u64> {
        self.0.seed
    }

    /// Whether the synthesizer planned its chunks' ways (`SynthOptions::planned`).
    pub fn planned(&self) -> bool {
        self.0.plan.is_some()
    }

    /// How the synthesizer grew its chunks' trees, where it planned them
    /// (`SynthOptions::shape`).
    pub fn plan(&self) -> Option<TreeShape> {
        self.0.plan
    }

    /// The baseline the schedule is, where it is one rather than synthesized.
    pub fn baseline(&self) -> Option<Baseline> {
        self.0.baseline
    }

    pub fn chunks_per_npu(&self) -> usize {
        self.0.schedule.collective.chunks_per_npu
    }
}

/// Synthesizes `request` with `k` chunks per NPU as `options` say, and checks the
/// schedule.
pub fn synthesize(
    topo: &Topology,
    request: &Request,
    k: usize,
    options: &SynthOptions,
) -> Result<Checked> {
    let collective = Collective::new(topo, request.spec(topo, k))?;
    let mut synthesis = synthesize_concurrent(topo, std::slice::from_ref(&collective), options)?;
    let schedule = synthesis.schedules.remove(0);
    let report = check(&schedule, topo);
    Checked::with(
        schedule,
        report,
        synthesis.all_reduce,
        Some(options.seed),
        options.planned.then_some(options.shape),
    )
}

/// Synthesizes `requests` together with `k` chunks per NPU and `seed`, as one matching so
/// that they share links without contention (groups running their collectives at the same
/// time), and checks each schedule alone and all of them together
/// (`schedule::check_concurrent`). One schedule per request, in order; a synthesis with an
/// All-Reduce gives each All-Reduce's schedule the composition's times.
pub fn concurrent(
    topo: &Topology,
    requests: &[Request],
    k: usize,
    seed: u64,
) -> Result<Vec<Checked>> {
    let collectives = requests
        .iter()
        .map(|r| Collective::new(topo, r.spec(topo, k)))
        .collect::<Result<Vec<_>>>()?;
    let synthesis = synthesize_concurrent(topo, &collectives, &SynthOptions::seeded(seed))?;
    let reports = check_concurrent(&synthesis.schedules, topo)
        .map_err(|e| e.context("the schedules synthesized together failed the checker"))?;
    synthesis
        .schedules
        .into_iter()
        .zip(reports)
        .map(|(schedule, report)| {
            let all_reduce = synthesis
                .all_reduce
                .clone()
                .filter(|_| schedule.collective.kind == CollectiveKind::AllReduce);
            Checked::with(schedule, Ok(report), all_reduce, Some(seed), None)
        })
        .collect()
}

/// A checked schedule lowered to a program and timed, not yet verified: it cannot be
/// written until [`Lowered::verify`] makes it a [`Verified`].
#[derive(Clone, Debug)]
pub struct Lowered {
    checked: Checked,
    program: Program,
    timer: ProgramTimer,
    time_ps: Picos,
}

impl Lowered {
    pub fn program(&self) -> &Program {
        &self.program
    }

    /// The program's simulated time at the schedule's size.
    pub fn time_ps(&self) -> Picos {
        self.time_ps
    }

    /// Times the program at other sizes.
    pub fn timer(&self) -> &ProgramTimer {
        &self.timer
    }

    /// The same program with its time at the schedule's size priced another way (the
    /// executor cost model's).
    pub fn retimed(self, time_ps: Picos) -> Lowered {
        Lowered { time_ps, ..self }
    }

    pub fn checked(&self) -> &Checked {
        &self.checked
    }

    /// The program, once it keeps to `target`'s loader rules and `msccl::verify` finds it
    /// computes its collective.
    pub fn verify(self, target: &Target) -> std::result::Result<Verified, Refusal> {
        let options = VerifyOptions {
            target: target.clone(),
            ..VerifyOptions::default()
        };
        let report = msccl::verify(&self.program, &options);
        if let Some(broken) = report.rule_breaks.first() {
            return Err(Refusal {
                failed_verification: false,
                reason: format!("target {target} would refuse the program: {broken}"),
            });
        }
        if !report.computes() {
            let first = report
                .problems
                .first()
                .map_or_else(|| "unlisted problems".to_string(), |p| p.to_string());
            return Err(Refusal {
                failed_verification: true,
                reason: format!("the lowered program failed verification (please report): {first}"),
            });
        }
        Ok(Verified(self))
    }
}

/// Why a lowered program may not be emitted.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Refusal {
    /// The verifier found the program wrong (rather than the loader refusing it).
    pub failed_verification: bool,
    pub reason: String,
}

impl From<Refusal> for Error {
    fn from(r: Refusal) -> Error {
        Error::msccl(r.reason)
    }
}

/// Lowers `checked` with `lowering` and times the program at the schedule's size, rank r
/// on the collective's r-th NPU.
pub fn lower(topo: &Topology, checked: &Checked, lowering: &LowerOptions) -> Result<Lowered> {
    let schedule = checked.schedule();
    let named;
    let kind = schedule.collective.kind;
    let name = match (checked.baseline(), checked.seed()) {
        (Some(baseline), _) => Some(format!("tacos-{kind}-{baseline}")),
        (None, Some(seed)) => {
            let way = match checked.plan() {
                None => 's',
                Some(TreeShape::Balanced) => 'p',
                Some(TreeShape::Shallow) => 't',
                Some(TreeShape::OneWay) => 'w',
            };
            let k = schedule.collective.chunks_per_npu;
            Some(format!("tacos-{kind}-k{k}-{way}{seed}"))
        }
        (None, None) => None,
    };
    let lowering = match (&lowering.name, name) {
        (None, Some(name)) => {
            named = LowerOptions {
                name: Some(name),
                ..lowering.clone()
            };
            &named
        }
        _ => lowering,
    };
    let program = msccl::lower(schedule, topo, lowering)?;
    #[cfg(feature = "test-hooks")]
    let program = test_hooks::corrupted(program);
    let timer = ProgramTimer::new(topo, &program, &schedule.collective.npus)?;
    let time_ps = timer
        .simulate(topo, schedule.collective.size_bytes)?
        .time_ps;
    Ok(Lowered {
        checked: checked.clone(),
        program,
        timer,
        time_ps,
    })
}

/// A program that passed the schedule checker, its target's loader rules and the XML
/// verifier; only [`Lowered::verify`] makes one.
#[derive(Clone, Debug)]
pub struct Verified(Lowered);

impl Verified {
    pub fn program(&self) -> &Program {
        &self.0.program
    }

    pub fn schedule(&self) -> &Schedule {
        self.0.checked.schedule()
    }

    pub fn checked(&self) -> &Checked {
        &self.0.checked
    }

    /// The program's simulated time at the schedule's size.
    pub fn time_ps(&self) -> Picos {
        self.0.time_ps
    }

    pub fn timer(&self) -> &ProgramTimer {
        &self.0.timer
    }

    pub fn chunks_per_npu(&self) -> usize {
        self.0.checked.chunks_per_npu()
    }

    /// The synthesizer's seed; None for a program of a baseline's schedule.
    pub fn seed(&self) -> Option<u64> {
        self.0.checked.seed()
    }

    /// The program as MSCCL XML.
    pub fn xml(&self) -> String {
        msccl::write_program(&self.0.program)
    }

    /// The same program for the message sizes `min_bytes..=max_bytes`, once `target`'s
    /// loader rules still hold (the range changes what the loader reads, not what the
    /// program computes).
    pub fn with_size_range(
        mut self,
        min_bytes: u64,
        max_bytes: u64,
        target: &Target,
    ) -> Result<Verified> {
        self.0.program.min_bytes = Some(min_bytes);
        self.0.program.max_bytes = Some(max_bytes);
        match msccl::rules::check(&self.0.program, target).first() {
            Some(broken) => Err(Error::Invalid {
                input: "message size range".into(),
                value: format!("{min_bytes}..={max_bytes}"),
                allowed: format!("a range target {target} loads the program for ({broken})"),
            }),
            None => Ok(self),
        }
    }
}
