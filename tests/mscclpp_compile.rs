//! `tacos compile --format mscclpp`: a plan set for the MSCCL++ NCCL shim, every plan it
//! keeps verified at its size by the plan verifier, each kept only where its predicted time
//! beats NCCL's under the same model, one placement; `compile --check` re-checks the set.

mod common;

use common::tacos;
use tacos::compile::plans::{PlanManifest, PLAN_MANIFEST};
use tacos::mscclpp::{verify, Plan, VerifyOptions};

#[test]
fn a_plan_set_holds_verified_plans_only_where_faster_than_nccl() {
    let dir = std::env::temp_dir().join(format!("tacos-plan-set-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    let out = dir.to_str().unwrap();
    let (ok, stdout, stderr) = tacos(&[
        "compile",
        "preset:dgx-a100,nodes=2",
        "--format",
        "mscclpp",
        "--collectives",
        "allreduce,allgather",
        "--sizes",
        "1MiB..256MiB",
        "--seeds",
        "1",
        "--quiet",
        "--out",
        out,
    ]);
    assert!(ok, "{stderr}");
    assert!(stdout.contains("register"), "{stdout}");
    let plans = dir.join("mscclpp");
    let text = std::fs::read_to_string(plans.join(PLAN_MANIFEST)).unwrap();
    let manifest: PlanManifest = serde_json::from_str(&text).unwrap();
    // 1, 2, 4, ... 256 MiB: nine sizes of each collective.
    assert_eq!(manifest.entries.len(), 18);
    assert_eq!((manifest.world_size, manifest.ranks_per_node), (16, 8));
    let mut kept = 0;
    for e in &manifest.entries {
        match &e.file {
            Some(file) => {
                kept += 1;
                let (time, nccl) = (e.time_us.unwrap(), e.nccl_time_us.unwrap());
                assert!(time < nccl, "{file}: {time} us kept against NCCL's {nccl}");
                let path = plans.join(file);
                let plan = Plan::from_json(&std::fs::read_to_string(&path).unwrap(), file).unwrap();
                assert_eq!(plan.inplace, manifest.in_place);
                assert_eq!(
                    (plan.min_message_size, plan.max_message_size),
                    (e.size_bytes, e.size_bytes)
                );
                let at = VerifyOptions {
                    size: Some(e.size_bytes),
                    root: None,
                };
                verify(&plan, &at).unwrap_or_else(|err| panic!("{file}: {err}"));
            }
            None => assert!(e.left_to_nccl.is_some(), "{e:?}"),
        }
    }
    assert!(kept > 0, "{text}");
    // The registration names exactly the plans kept.
    let register = std::fs::read_to_string(plans.join("register.py")).unwrap();
    for e in &manifest.entries {
        if let Some(file) = &e.file {
            assert!(register.contains(&format!("\"{file}\"")), "{file}");
        }
    }
    let files = std::fs::read_dir(&plans).unwrap().count();
    assert_eq!(files, kept + 2, "plans, plans.json and register.py only");
    // `compile --check` finds the set whole, then names an edited plan and a stray file.
    let (ok, stdout, stderr) = tacos(&["compile", "--check", out]);
    assert!(ok, "{stdout}{stderr}");
    let edited = manifest
        .entries
        .iter()
        .find_map(|e| e.file.clone())
        .unwrap();
    let path = plans.join(&edited);
    let text = std::fs::read_to_string(&path).unwrap();
    let mut plan = Plan::from_json(&text, &edited).unwrap();
    plan.max_message_size *= 2;
    std::fs::write(&path, plan.to_json()).unwrap();
    std::fs::write(plans.join("stray.json"), "{}").unwrap();
    let (ok, stdout, _) = tacos(&["compile", "--check", out]);
    assert!(!ok, "{stdout}");
    assert!(
        stdout.contains(&format!("{edited}: claims sizes")),
        "{stdout}"
    );
    assert!(stdout.contains("stray.json: not in the record"), "{stdout}");
    let _ = std::fs::remove_dir_all(&dir);
}

#[test]
fn a_plan_set_of_both_placements_or_of_all_to_all_is_refused() {
    let (ok, _, stderr) = tacos(&[
        "compile",
        "ring:4",
        "--format",
        "mscclpp",
        "--inplace",
        "both",
        "--out",
        "/nonexistent/x",
    ]);
    assert!(
        !ok && stderr.contains("one placement") || stderr.contains("holds one"),
        "{stderr}"
    );
    let (ok, _, stderr) = tacos(&[
        "compile",
        "ring:4",
        "--format",
        "mscclpp",
        "--collectives",
        "alltoall",
        "--out",
        "/nonexistent/x",
    ]);
    assert!(!ok && stderr.contains("serves only"), "{stderr}");
}

#[test]
fn synth_writes_a_plan_of_the_placement_asked_and_refuses_a_placement_for_nothing() {
    let dir = std::env::temp_dir().join(format!("tacos-plan-placement-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let file = dir.join("ar.json");
    let path = file.to_str().unwrap();
    let args = [
        "synth",
        "ring:4",
        "-c",
        "allreduce",
        "-s",
        "1MiB",
        "--placement",
    ];
    let (ok, _, stderr) = tacos(&[&args[..], &["out-of-place", "--plan", path]].concat());
    assert!(ok, "{stderr}");
    let plan = Plan::from_json(&std::fs::read_to_string(&file).unwrap(), path).unwrap();
    assert!(!plan.inplace);
    let at = VerifyOptions {
        size: Some(1 << 20),
        root: None,
    };
    verify(&plan, &at).unwrap();
    let (ok, _, stderr) = tacos(&[&args[..], &["in-place"]].concat());
    assert!(!ok && stderr.contains("--xml or --plan"), "{stderr}");
    let _ = std::fs::remove_dir_all(&dir);
}
