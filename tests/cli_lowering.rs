//! `tacos synth --xml` keeps to the target: a K whose program does not fit is refused
//! naming the limit, with a smaller K that does fit (checked by lowering it); `-k auto`
//! passes over K whose program does not fit.

mod common;

use common::tacos;
use tacos::msccl::{limits, read_program, Limits, Profile};

fn scratch(name: &str) -> std::path::PathBuf {
    let dir = std::env::temp_dir().join(format!("tacos-cli-lowering-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    dir.join(name)
}

/// The loader limits of a file written by `tacos synth --xml` that it breaks.
fn broken(path: &std::path::Path, limits: &Limits) -> Vec<String> {
    let program = read_program(path).unwrap_or_else(|e| panic!("{}: {e}", path.display()));
    limits::check(&program, limits)
        .into_iter()
        .map(|v| v.message)
        .collect()
}

#[test]
fn a_k_that_does_not_fit_is_refused_with_the_largest_k_that_does() {
    // mesh:8x8 All-to-All K=4: every rank sends 252 chunks and relays more over 4 links;
    // spread thin enough for 64 steps per threadblock, a GPU has more than 64 threadblocks.
    let xml = scratch("a2a.xml");
    // A directory left by an earlier run with the same process id may hold one.
    let _ = std::fs::remove_file(&xml);
    let path = xml.display().to_string();
    let base = ["synth", "mesh:8x8", "-c", "alltoall", "--xml", &path];
    let (ok, _, err) = tacos(&[&base[..], &["-k", "4"]].concat());
    assert!(!ok, "K=4 should not fit");
    assert!(
        err.contains("-k 4 does not fit") && err.contains("the executor takes 64"),
        "{err}"
    );
    assert!(err.contains("executor-256"), "{err}");
    assert!(!xml.exists(), "nothing is written for a refused K");
    let suggested: String = err
        .split("(-k ")
        .nth(1)
        .and_then(|rest| rest.split(')').next())
        .unwrap_or_else(|| panic!("no K suggested: {err}"))
        .to_string();
    let k: usize = suggested.parse().unwrap();
    assert!((1..4).contains(&k), "{err}");
    // It is the largest: every K between it and 4 is refused too, whatever its seeds.
    for larger in k + 1..4 {
        let (ok, _, _) = tacos(&[&base[..], &["-k", &larger.to_string()]].concat());
        assert!(!ok, "-k {larger} fits, above the {k} suggested: {err}");
    }
    // The suggestion works, and fits the executor's limits.
    let (ok, _, err) = tacos(&[&base[..], &["-k", &suggested]].concat());
    assert!(ok, "-k {suggested}: {err}");
    assert_eq!(
        broken(&xml, &Profile::Executor.limits()),
        Vec::<String>::new()
    );
    // The executor rebuilt for 256 steps takes K = 4.
    let (ok, _, err) = tacos(&[&base[..], &["-k", "4", "--target", "executor-256"]].concat());
    assert!(ok, "{err}");
    assert_eq!(
        broken(&xml, &Profile::Executor256.limits()),
        Vec::<String>::new()
    );
    assert!(!broken(&xml, &Profile::Executor.limits()).is_empty());
}

#[test]
fn auto_passes_over_a_k_whose_program_does_not_fit() {
    // ring:8 All-Gather, 1 GiB: K=8 simulates fastest, but with 10 steps and 8
    // threadblocks per GPU its 56 receives per rank cannot be spread (each channel adds
    // threadblocks); K=1 (7 receives and 7 sends per rank) fits.
    let xml = scratch("ring.xml");
    let path = xml.display().to_string();
    let args = [
        "synth",
        "ring:8",
        "-c",
        "allgather",
        "-k",
        "auto",
        "--xml",
        &path,
        "--json",
        "--max-steps",
        "10",
        "--max-tbs",
        "8",
        // Synthesized programs only: the Ring baseline's fits and is faster.
        "--no-baselines",
        // The free matching only: one-way trees take K=2 in the optimal 7 steps, faster
        // than any K=8, and fit.
        "--no-plan",
    ];
    let (ok, out, err) = tacos(&args);
    assert!(ok, "{err}");
    let report: serde_json::Value = serde_json::from_str(&out).unwrap();
    let trials = report["chunk_trials"].as_array().unwrap();
    let k_of = |t: &serde_json::Value| t["chunks_per_npu"].as_u64().unwrap();
    // K=8's schedule is the fastest, but it gives no program within the limits: refused,
    // with no program time.
    let fastest_schedule = trials
        .iter()
        .min_by(|a, b| {
            let t = |v: &serde_json::Value| v["schedule_time_us"].as_f64().unwrap();
            t(a).total_cmp(&t(b))
        })
        .unwrap();
    assert_eq!(fastest_schedule["fits_target"], false, "{trials:?}");
    assert!(fastest_schedule["simulated_time_us"].is_null());
    // The one kept fits, and is the fastest program of those that do.
    let kept = report["collective"]["chunks_per_npu"].as_u64().unwrap();
    assert_ne!(k_of(fastest_schedule), kept);
    let fitting: Vec<&serde_json::Value> =
        trials.iter().filter(|t| t["fits_target"] == true).collect();
    let fastest_fit = fitting
        .iter()
        .min_by(|a, b| {
            let t = |v: &serde_json::Value| v["simulated_time_us"].as_f64().unwrap();
            t(a).total_cmp(&t(b))
        })
        .unwrap();
    assert_eq!(k_of(fastest_fit), kept, "{trials:?}");
    assert_eq!(report["program_time_us"], fastest_fit["simulated_time_us"]);
    let limits = Limits {
        max_steps_per_tb: 10,
        max_tbs: 8,
        ..Limits::default()
    };
    assert_eq!(broken(&xml, &limits), Vec::<String>::new());
}
