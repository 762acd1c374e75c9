//! Where a problem is: a rank, a threadblock and an operation, and the threadblock's
//! program as the executor runs it (a pipeline's body in place of the pipeline).

use crate::error::Error;
use crate::mscclpp::plan::{Operation, Threadblock};
use std::fmt;

/// An operation of a threadblock's program: `op` in the threadblock's list, and for a
/// pipeline's body, its index in the body.
#[derive(Clone, Copy, Debug)]
pub(super) struct Step<'a> {
    pub op: &'a Operation,
    pub index: usize,
    pub body: Option<usize>,
}

/// The threadblock's operations in execution order, a pipeline's body run once in its
/// place (the body over the whole range stands for every iteration over its parts).
pub(super) fn program(tb: &Threadblock) -> Vec<Step<'_>> {
    let mut steps = Vec::new();
    for (index, op) in tb.ops.iter().enumerate() {
        match (&op.ops, op.name.as_str()) {
            (Some(body), "pipeline") => steps.extend(body.iter().enumerate().map(|(b, op)| Step {
                op,
                index,
                body: Some(b),
            })),
            _ => steps.push(Step {
                op,
                index,
                body: None,
            }),
        }
    }
    steps
}

/// A rank, threadblock and operation, as errors name them.
#[derive(Clone, Copy, Debug)]
pub(super) struct Site<'a> {
    pub rank: usize,
    pub tb: usize,
    pub step: Step<'a>,
}

impl fmt::Display for Site<'_> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(
            f,
            "rank {}, threadblock {}, op {}",
            self.rank, self.tb, self.step.index
        )?;
        match self.step.body {
            Some(b) => write!(f, " (pipeline), body op {b} ({})", self.step.op.name),
            None => write!(f, " ({})", self.step.op.name),
        }
    }
}

impl Site<'_> {
    /// The plan's problem `what` at this operation, the message led by the place.
    pub(super) fn error(&self, what: impl fmt::Display) -> Error {
        self.placed(format!("{self}: {what}"))
    }

    /// The plan's problem at this operation, the message as given.
    pub(super) fn placed(&self, problem: String) -> Error {
        Error::Plan {
            rank: Some(self.rank),
            threadblock: Some(self.tb),
            op: Some(self.step.index),
            problem,
        }
    }
}
