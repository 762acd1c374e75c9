//! Symbolic chunk contents: which ranks' input chunks a chunk sums.

use std::fmt;
use std::rc::Rc;

/// Rank r's input chunk c, one contribution to a chunk's contents.
pub(super) type Term = (u32, u32);

/// What a chunk holds: nothing known (never written in this launch), or the sum of
/// input chunks (one term for a plain copy), terms sorted.
#[derive(Clone, Debug, PartialEq, Eq)]
pub(super) enum Value {
    Unset,
    Sum(Rc<[Term]>),
}

impl Value {
    /// Rank `rank`'s input chunk `chunk`, as the launch finds it.
    pub fn input(rank: usize, chunk: usize) -> Value {
        Value::Sum(Rc::from([(rank as u32, chunk as u32)]))
    }

    /// The sum of `terms` (sorted, distinct).
    pub fn sum(terms: Vec<Term>) -> Value {
        Value::Sum(Rc::from(terms))
    }

    /// `self + other`; the term both hold when a contribution would be added twice.
    pub fn add(&self, other: &Value) -> Result<Value, Term> {
        let (Value::Sum(a), Value::Sum(b)) = (self, other) else {
            return Ok(Value::Unset);
        };
        let mut out = Vec::with_capacity(a.len() + b.len());
        let (mut i, mut j) = (0, 0);
        while i < a.len() && j < b.len() {
            match a[i].cmp(&b[j]) {
                std::cmp::Ordering::Less => {
                    out.push(a[i]);
                    i += 1;
                }
                std::cmp::Ordering::Greater => {
                    out.push(b[j]);
                    j += 1;
                }
                std::cmp::Ordering::Equal => return Err(a[i]),
            }
        }
        out.extend_from_slice(&a[i..]);
        out.extend_from_slice(&b[j..]);
        Ok(Value::Sum(Rc::from(out)))
    }
}

impl fmt::Display for Value {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Value::Unset => f.write_str("nothing written in this launch"),
            Value::Sum(terms) if terms.len() == 1 => {
                write!(f, "rank {}'s input chunk {}", terms[0].0, terms[0].1)
            }
            Value::Sum(terms) => {
                f.write_str("the sum of ")?;
                for (k, (r, c)) in terms.iter().enumerate() {
                    if k > 0 {
                        f.write_str(" + ")?;
                    }
                    write!(f, "rank {r}'s input chunk {c}")?;
                }
                Ok(())
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_sum_keeps_terms_sorted_and_refuses_a_term_twice() {
        let a = Value::input(1, 0);
        let b = Value::input(0, 0);
        let ab = a.add(&b).unwrap();
        assert_eq!(ab, Value::sum(vec![(0, 0), (1, 0)]));
        assert_eq!(ab.add(&Value::input(1, 0)), Err((1, 0)));
        assert_eq!(Value::Unset.add(&a), Ok(Value::Unset));
    }
}
