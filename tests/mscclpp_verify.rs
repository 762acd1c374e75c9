//! The MSCCL++ plan verifier on hand-written plans whose correctness is worked out by
//! hand, and on corruptions of them, each refused naming the rank, threadblock and op.

use serde_json::{json, Value};
use std::process::Command;
use tacos::mscclpp::{verify, Plan, VerifyOptions};

fn chunk(t: &str, index: usize, size: usize) -> Value {
    json!({"type": t, "index": index, "size": size})
}

fn remote(id: usize, index: usize) -> Value {
    json!({"buffer_id": id, "index": index, "size": 1})
}

fn op(name: &str) -> Value {
    json!({"name": name})
}

fn chan(name: &str, ty: &str) -> Value {
    json!({"name": name, "channel_type": ty, "channel_ids": [0]})
}

fn data(name: &str, ty: Option<&str>, src: Vec<Value>, dst: Vec<Value>) -> Value {
    let mut o = json!({"name": name, "src_buff": src, "dst_buff": dst});
    if let Some(t) = ty {
        o["channel_type"] = json!(t);
    }
    o
}

/// A two-rank plan: rank r's threadblocks from `tbs(r)`, one channel of `ty` to the
/// peer, the peer's `remote` buffer reachable through it.
fn plan(
    collective: &str,
    counts: [usize; 3],
    ty: &str,
    remote: &str,
    tbs: impl Fn(usize) -> Vec<Vec<Value>>,
) -> Value {
    let gpus: Vec<Value> = (0..2)
        .map(|r| {
            let threadblocks: Vec<Value> = tbs(r)
                .into_iter()
                .enumerate()
                .map(|(k, ops)| {
                    json!({"id": k, "ops": ops,
                        "channels": [{"channel_type": ty, "channel_ids": [0]}],
                        "remote_buffer_refs": [{"access_channel_type": ty, "remote_buffer_ids": [0]}]})
                })
                .collect();
            json!({"id": r, "input_chunks": counts[0], "output_chunks": counts[1], "scratch_chunks": counts[2],
                "channels": [{"channel_type": ty, "connected_to": [1 - r]}],
                "remote_buffers": [{"rank": 1 - r, "type": remote, "access_channel_types": [ty]}],
                "semaphores": [{"init_value": 0}],
                "threadblocks": threadblocks})
        })
        .collect();
    json!({"name": "t", "collective": collective, "protocol": "Simple", "inplace": false, "gpus": gpus})
}

/// All-Gather: copy my chunk to my output slot, put it into the peer's; nop, signal;
/// wait, nop.
fn allgather() -> Value {
    plan("allgather", [1, 2, 0], "memory", "o", |r| {
        vec![vec![
            data("copy", None, vec![chunk("i", 0, 1)], vec![chunk("o", r, 1)]),
            data(
                "put",
                Some("memory"),
                vec![chunk("i", 0, 1)],
                vec![remote(0, r)],
            ),
            op("nop"),
            chan("signal", "memory"),
            chan("wait", "memory"),
            op("nop"),
        ]]
    })
}

/// All-Reduce: put my chunk into the peer's scratch; nop, signal; wait, nop; sum mine
/// and the peer's into my output.
fn allreduce() -> Value {
    plan("allreduce", [1, 1, 1], "memory", "s", |_| {
        vec![vec![
            data(
                "put",
                Some("memory"),
                vec![chunk("i", 0, 1)],
                vec![remote(0, 0)],
            ),
            op("nop"),
            chan("signal", "memory"),
            chan("wait", "memory"),
            op("nop"),
            data(
                "re",
                None,
                vec![chunk("i", 0, 1), chunk("s", 0, 1)],
                vec![chunk("o", 0, 1)],
            ),
        ]]
    })
}

fn check(v: &Value) -> Result<tacos::mscclpp::PlanReport, String> {
    let plan = Plan::from_json(&v.to_string(), "test.json").map_err(|e| e.to_string())?;
    verify(&plan, &VerifyOptions::default()).map_err(|e| e.to_string())
}

fn refused(v: &Value, parts: &[&str]) -> String {
    let e = check(v).expect_err("the corrupted plan verified");
    for p in parts {
        assert!(e.contains(p), "'{p}' missing from: {e}");
    }
    e
}

fn ops(v: &mut Value, rank: usize, tb: usize) -> &mut Vec<Value> {
    v["gpus"][rank]["threadblocks"][tb]["ops"]
        .as_array_mut()
        .unwrap()
}

#[test]
fn hand_written_plans_verify() {
    let r = check(&allgather()).unwrap();
    assert_eq!(
        (r.ranks, r.threadblocks, r.ops, r.signals, r.waits),
        (2, 2, 12, 2, 2)
    );
    let r = check(&allreduce()).unwrap();
    assert_eq!(
        (r.signals, r.max_ops_per_threadblock, r.max_scratch_chunks),
        (2, 6, 1)
    );
}

#[test]
fn two_threadblocks_ordered_by_a_semaphore_verify_and_not_without_it() {
    // Threadblock 0 stages my chunk in scratch and releases; threadblock 1 acquires,
    // then copies it to my output and puts it into the peer's.
    let sem = |name: &str| json!({"name": name, "semaphore_ids": [0]});
    let v = plan("allgather", [1, 2, 1], "memory", "o", |r| {
        vec![
            vec![
                data("copy", None, vec![chunk("i", 0, 1)], vec![chunk("s", 0, 1)]),
                op("nop"),
                sem("sem_release"),
            ],
            vec![
                sem("sem_acquire"),
                op("nop"),
                data("copy", None, vec![chunk("s", 0, 1)], vec![chunk("o", r, 1)]),
                data(
                    "put",
                    Some("memory"),
                    vec![chunk("s", 0, 1)],
                    vec![remote(0, r)],
                ),
                op("nop"),
                chan("signal", "memory"),
                chan("wait", "memory"),
                op("nop"),
            ],
        ]
    });
    check(&v).unwrap();
    // Without the acquire's nop, threadblock 1 reads the scratch chunk unordered.
    let mut racy = v.clone();
    ops(&mut racy, 0, 1).remove(1);
    refused(
        &racy,
        &[
            "race",
            "rank 0, threadblock 1, op 1 (copy)",
            "rank 0, threadblock 0, op 0 (copy)",
        ],
    );
    // Without the release, the acquire never passes.
    let mut stuck = v;
    ops(&mut stuck, 1, 0).remove(2);
    refused(
        &stuck,
        &["deadlock", "rank 1, threadblock 1, op 0 (sem_acquire)"],
    );
}

#[test]
fn a_port_channel_plan_with_put_and_signal_verifies() {
    // pws: the data, then the signal, in order through the proxy: no nop needed.
    let v = plan("allgather", [1, 2, 0], "port", "o", |r| {
        vec![vec![
            data("copy", None, vec![chunk("i", 0, 1)], vec![chunk("o", r, 1)]),
            {
                let mut o = data(
                    "pws",
                    Some("port"),
                    vec![chunk("i", 0, 1)],
                    vec![remote(0, r)],
                );
                o["channel_ids"] = json!([0]);
                o
            },
            chan("wait", "port"),
            op("nop"),
        ]]
    });
    let r = check(&v).unwrap();
    assert_eq!(r.signals, 2);
    // Over a memory channel the executor drops a pws's signal: refused by name.
    let mut v = allgather();
    ops(&mut v, 0, 0)[1]["name"] = json!("pws");
    refused(
        &v,
        &["rank 0, threadblock 0, op 1 (pws)", "drops its signal"],
    );
}

#[test]
fn a_dropped_signal_is_a_deadlock_naming_the_wait() {
    let mut v = allgather();
    ops(&mut v, 0, 0).remove(3);
    refused(
        &v,
        &[
            "deadlock",
            "rank 1, threadblock 0, op 4 (wait)",
            "from rank 0",
        ],
    );
}

#[test]
fn a_chunk_index_out_of_range_is_refused() {
    let mut v = allgather();
    ops(&mut v, 0, 0)[1]["dst_buff"][0]["index"] = json!(2);
    refused(
        &v,
        &[
            "rank 0, threadblock 0, op 1 (put)",
            "dst_buff[0]",
            "rank 1's output buffer, which has 2",
        ],
    );
}

#[test]
fn a_missing_nop_after_a_wait_is_a_race() {
    let mut v = allreduce();
    ops(&mut v, 1, 0).remove(4);
    refused(
        &v,
        &[
            "race",
            "rank 1, threadblock 0, op 4 (re)",
            "rank 0, threadblock 0, op 0 (put)",
        ],
    );
}

#[test]
fn a_missing_nop_between_put_and_signal_is_a_race() {
    let mut v = allreduce();
    ops(&mut v, 0, 0).remove(1);
    refused(
        &v,
        &[
            "race",
            "rank 1, threadblock 0, op 5 (re)",
            "rank 0, threadblock 0, op 0 (put)",
        ],
    );
}

#[test]
fn copying_the_wrong_chunk_is_a_wrong_result() {
    let mut v = allreduce();
    ops(&mut v, 0, 0)[5] = data("copy", None, vec![chunk("s", 0, 1)], vec![chunk("o", 0, 1)]);
    refused(
        &v,
        &[
            "wrong result",
            "rank 0's output chunk 0 holds rank 1's input chunk 0",
            "the sum of rank 0's input chunk 0 + rank 1's input chunk 0",
        ],
    );
    // Adding one's own input twice is refused where it happens.
    let mut v = allreduce();
    ops(&mut v, 0, 0)[5]["src_buff"][1] = chunk("i", 0, 1);
    refused(&v, &["rank 0, threadblock 0, op 5 (re)", "twice"]);
}

#[test]
fn an_unwaited_signal_unbalances_the_channel() {
    let mut v = allgather();
    ops(&mut v, 0, 0).push(chan("signal", "memory"));
    refused(
        &v,
        &[
            "unbalanced memory channel",
            "rank 0's channel 0 signalled rank 1's channel 0 2 time(s)",
            "waited on it 1 time(s)",
        ],
    );
}

#[test]
fn asymmetric_connected_to_is_refused() {
    let mut v = allgather();
    v["gpus"][0]["channels"][0]["connected_to"] = json!([1, 1]);
    refused(
        &v,
        &[
            "not paired",
            "rank 0 lists rank 1 2 time(s)",
            "rank 1 lists rank 0 1 time(s)",
        ],
    );
}

#[test]
fn sixty_five_operations_in_one_threadblock_are_refused() {
    let mut v = allgather();
    let list = ops(&mut v, 1, 0);
    while list.len() < 65 {
        list.push(op("nop"));
    }
    refused(
        &v,
        &["rank 1, threadblock 0", "65 operations", "at most 64"],
    );
    // A pipeline's body counts.
    let mut v = allgather();
    let body: Vec<Value> = (0..59).map(|_| op("nop")).collect();
    ops(&mut v, 1, 0).push(json!({"name": "pipeline", "iter_context": {"unit_size": 1024, "num_chunks": 1}, "ops": body}));
    refused(&v, &["rank 1, threadblock 0", "65 operations"]);
}

#[test]
fn zero_input_chunks_are_refused_naming_the_field() {
    let mut v = allgather();
    v["gpus"][1]["input_chunks"] = json!(0);
    refused(&v, &["rank 1", "input_chunks is 0"]);
}

#[test]
fn a_size_the_chunk_count_does_not_divide_is_refused() {
    let mut v = allreduce();
    for r in 0..2 {
        v["gpus"][r]["input_chunks"] = json!(3);
        v["gpus"][r]["output_chunks"] = json!(3);
    }
    let plan = Plan::from_json(&v.to_string(), "t.json").unwrap();
    let with = |size| {
        verify(
            &plan,
            &VerifyOptions {
                size: Some(size),
                root: None,
            },
        )
    };
    let e = with(32).unwrap_err().to_string();
    assert!(e.contains("not divisible by its 3 input_chunks"), "{e}");
    let e = with(40).unwrap_err().to_string();
    assert!(e.contains("not a multiple of buffer_alignment 16"), "{e}");
    // 48 B divides: the size rules pass, and the result check finds chunks 1 and 2 unset.
    let e = with(48).unwrap_err().to_string();
    assert!(e.contains("rank 0's output chunk 1 holds nothing"), "{e}");
}

#[test]
fn chunk_counts_that_admit_no_chunk_size_are_refused() {
    let mut v = allgather();
    v["gpus"][0]["output_chunks"] = json!(3);
    refused(&v, &["rank 0", "no chunk size fits"]);
}

#[test]
fn a_plan_before_mscclpp_0_8_is_refused_by_schema() {
    let old = json!({"name": "x", "collective": "allreduce", "gpus": [{"id": 0, "i_cids": []}]});
    let e = Plan::from_json(&old.to_string(), "old.json")
        .unwrap_err()
        .to_string();
    assert!(e.contains("before MSCCL++ 0.8"), "{e}");
}

#[test]
fn get_with_different_indices_and_unknown_operations_are_refused() {
    let mut v = allgather();
    ops(&mut v, 0, 0)[0] = json!({"name": "glre"});
    refused(
        &v,
        &[
            "rank 0, threadblock 0, op 0 (glre)",
            "not an operation the executor knows",
        ],
    );
    let v = plan("allgather", [1, 2, 0], "memory", "i", |r| {
        vec![vec![
            data("copy", None, vec![chunk("i", 0, 1)], vec![chunk("o", r, 1)]),
            op("nop"),
            chan("signal", "memory"),
            chan("wait", "memory"),
            op("nop"),
            data(
                "get",
                Some("memory"),
                vec![remote(0, 0)],
                vec![chunk("o", 1 - r, 1)],
            ),
            op("nop"),
            chan("signal", "memory"),
            chan("wait", "memory"),
        ]]
    });
    // A get from the peer's input chunk 0 into output chunk 1 - r: the indices differ
    // on rank 0, and the executor swaps a get's offsets, so it is refused there.
    refused(&v, &["rank 0, threadblock 0, op 5 (get)", "swaps"]);
}

#[test]
fn tacos_verify_takes_a_plan_file() {
    let dir = std::env::temp_dir().join(format!("tacos-mscclpp-verify-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let good = dir.join("ag.json");
    std::fs::write(&good, allgather().to_string()).unwrap();
    let out = Command::new(env!("CARGO_BIN_EXE_tacos"))
        .arg("verify")
        .arg(&good)
        .output()
        .unwrap();
    let text = String::from_utf8_lossy(&out.stdout);
    assert!(
        out.status.success(),
        "{text} {}",
        String::from_utf8_lossy(&out.stderr)
    );
    assert!(
        text.contains("allgather")
            && text.contains("verified: every wait matched, no deadlock, no race, result correct"),
        "{text}"
    );
    let mut v = allgather();
    ops(&mut v, 0, 0).remove(3);
    let bad = dir.join("bad.json");
    std::fs::write(&bad, v.to_string()).unwrap();
    let out = Command::new(env!("CARGO_BIN_EXE_tacos"))
        .args(["verify", "--json"])
        .arg(&bad)
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(1));
    let report: Value = serde_json::from_slice(&out.stdout).unwrap();
    assert_eq!(report["correct"], json!(false));
    assert!(report["error"]
        .as_str()
        .unwrap()
        .contains("rank 1, threadblock 0, op 4 (wait)"));
    std::fs::remove_dir_all(&dir).ok();
}

/// Plans MSCCL++ ships (its test plans), from a directory named by
/// `TACOS_MSCCLPP_PLANS`: the Simple-protocol allreduce plans verify.
#[test]
fn mscclpp_committed_plans_verify_where_given() {
    let Ok(dir) = std::env::var("TACOS_MSCCLPP_PLANS") else {
        eprintln!("skipped: TACOS_MSCCLPP_PLANS is not set");
        return;
    };
    for name in [
        "allreduce.json",
        "reduce.json",
        "reduce_nvls.json",
        "reduce_nvls_pipeline.json",
    ] {
        let path = std::path::Path::new(&dir).join(name);
        let Ok(text) = std::fs::read_to_string(&path) else {
            continue;
        };
        let plan = Plan::from_json(&text, name).unwrap();
        verify(&plan, &VerifyOptions::default()).unwrap_or_else(|e| panic!("{name}: {e}"));
    }
}
