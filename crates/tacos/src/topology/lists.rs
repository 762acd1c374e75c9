//! NPU lists and link pairs as users write them (`0-7,16-23`, `3-4,8-12`).

use super::MAX_NPUS;
use crate::error::echo;
pub use crate::error::format_ranges as format_npus;

/// Parses a list of NPU ids such as `0-7,16-23` or `3,5,9`. Ids are below
/// `topology::MAX_NPUS` and the list names at most that many, both checked before a range
/// is expanded.
pub fn parse_npu_list(text: &str) -> Result<Vec<usize>, String> {
    let mut out = Vec::new();
    for part in text.split(',').map(str::trim).filter(|p| !p.is_empty()) {
        let parse = |s: &str| {
            match s.trim().parse::<usize>() {
            Ok(id) if id < MAX_NPUS => Ok(id),
            Ok(_) => Err(format!(
                "'{}' in NPU list '{}' names an NPU past the most a topology may have: ids run from 0 to {}",
                echo(part),
                echo(text),
                MAX_NPUS - 1
            )),
            Err(_) => Err(format!(
                "'{}' in NPU list '{}' is not an NPU id or range like 0-7",
                echo(part),
                echo(text)
            )),
        }
        };
        let (a, b) = match part.split_once('-') {
            Some((a, b)) => (parse(a)?, parse(b)?),
            None => {
                let id = parse(part)?;
                (id, id)
            }
        };
        if a > b {
            return Err(format!(
                "range '{}' in NPU list '{}' runs backwards",
                echo(part),
                echo(text)
            ));
        }
        if out.len() + (b - a + 1) > MAX_NPUS {
            return Err(format!(
                "NPU list '{}' names more than {MAX_NPUS} NPUs, the most a topology may have",
                echo(text)
            ));
        }
        out.extend(a..=b);
    }
    if out.is_empty() {
        return Err(format!("NPU list '{}' names no NPU", echo(text)));
    }
    Ok(out)
}

/// Parses pairs of NPU ids such as `3-4,8-12` (links between NPUs).
pub fn parse_link_pairs(text: &str) -> Result<Vec<(usize, usize)>, String> {
    let mut out = Vec::new();
    for part in text.split(',').map(str::trim).filter(|p| !p.is_empty()) {
        let pair = part.split_once('-').and_then(|(a, b)| {
            Some((
                a.trim().parse::<usize>().ok()?,
                b.trim().parse::<usize>().ok()?,
            ))
        });
        match pair {
            Some((a, b)) if a != b => out.push((a, b)),
            _ => {
                return Err(format!(
                    "'{}' in link list '{}' is not a pair of distinct NPU ids like 3-4",
                    echo(part),
                    echo(text)
                ))
            }
        }
    }
    if out.is_empty() {
        return Err(format!("link list '{}' names no link", echo(text)));
    }
    Ok(out)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn npu_lists_expand_ranges() {
        assert_eq!(parse_npu_list("0-2,7").unwrap(), vec![0, 1, 2, 7]);
        assert!(parse_npu_list("3-1").is_err());
        assert!(parse_npu_list("a").is_err());
        assert!(parse_npu_list("").is_err());
        // Checked before expanding: neither allocates.
        assert!(parse_npu_list("0-18446744073709551615").is_err());
        assert!(parse_npu_list("0-1000000000").is_err());
        let whole = format!("0-{}", MAX_NPUS - 1);
        assert_eq!(parse_npu_list(&whole).unwrap().len(), MAX_NPUS);
        assert!(parse_npu_list(&format!("{whole},0")).is_err());
    }

    #[test]
    fn link_pairs_parse_and_reject_non_pairs() {
        assert_eq!(
            parse_link_pairs("3-4, 8-12").unwrap(),
            vec![(3, 4), (8, 12)]
        );
        assert!(parse_link_pairs("3").is_err());
        assert!(parse_link_pairs("3-3").is_err());
        assert!(parse_link_pairs("3-4-5").is_err());
        assert!(parse_link_pairs("").is_err());
    }

    #[test]
    fn npu_lists_format_as_runs() {
        assert_eq!(format_npus(&[0, 1, 2, 3, 7, 9, 10]), "0-3,7,9-10");
        assert_eq!(format_npus(&[]), "");
    }
}
