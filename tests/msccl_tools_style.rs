//! Programs written by hand in msccl-tools' style (no `outofplace`, `minBytes`, `maxBytes`
//! or `root`), one per collective on 2 or 3 GPUs: each loads with a warning per inferred
//! attribute, verifies as its collective, breaks only the executor's required-attribute
//! rule (and the loaders' spellings), and written back loads everywhere it can.

use tacos::collective::CollectiveKind;
use tacos::msccl::rules::{self, Rule};
use tacos::msccl::{parse_program, verify, write_program, Profile, Target, VerifyOptions};

/// One step line in msccl-tools' attribute order.
macro_rules! step {
    ($s:literal, $t:literal, $sb:literal, $so:literal, $db:literal, $do:literal) => {
        step!($s, $t, $sb, $so, $db, $do, -1, -1, 0)
    };
    ($s:literal, $t:literal, $sb:literal, $so:literal, $db:literal, $do:literal, $depid:literal, $deps:literal, $hasdep:literal) => {
        concat!(
            "      <step s=\"",
            $s,
            "\" type=\"",
            $t,
            "\" srcbuf=\"",
            $sb,
            "\" srcoff=\"",
            $so,
            "\" dstbuf=\"",
            $db,
            "\" dstoff=\"",
            $do,
            "\" cnt=\"1\" depid=\"",
            $depid,
            "\" deps=\"",
            $deps,
            "\" hasdep=\"",
            $hasdep,
            "\"/>\n"
        )
    };
}

/// A 3-GPU ring: GPU g copies its chunk to o[g], sends it to g+1, forwards the chunk of
/// g-1 (received into o[g-1]) and receives the chunk of g-2 = g+1 into o[g+1].
const ALL_GATHER: &str = concat!(
    "<algo name=\"ring\" proto=\"Simple\" nchannels=\"1\" nchunksperloop=\"3\" ngpus=\"3\" coll=\"allgather\" inplace=\"0\">\n",
    "  <gpu id=\"0\" i_chunks=\"1\" o_chunks=\"3\" s_chunks=\"0\">\n",
    "    <tb id=\"0\" send=\"1\" recv=\"2\" chan=\"0\">\n",
    step!(0, "cpy", "i", 0, "o", 0),
    step!(1, "s", "o", 0, "o", 0),
    step!(2, "rcs", "o", 2, "o", 2),
    step!(3, "r", "o", 1, "o", 1),
    "    </tb>\n  </gpu>\n",
    "  <gpu id=\"1\" i_chunks=\"1\" o_chunks=\"3\" s_chunks=\"0\">\n",
    "    <tb id=\"0\" send=\"2\" recv=\"0\" chan=\"0\">\n",
    step!(0, "cpy", "i", 0, "o", 1),
    step!(1, "s", "o", 1, "o", 1),
    step!(2, "rcs", "o", 0, "o", 0),
    step!(3, "r", "o", 2, "o", 2),
    "    </tb>\n  </gpu>\n",
    "  <gpu id=\"2\" i_chunks=\"1\" o_chunks=\"3\" s_chunks=\"0\">\n",
    "    <tb id=\"0\" send=\"0\" recv=\"1\" chan=\"0\">\n",
    step!(0, "cpy", "i", 0, "o", 2),
    step!(1, "s", "o", 2, "o", 2),
    step!(2, "rcs", "o", 1, "o", 1),
    step!(3, "r", "o", 0, "o", 0),
    "    </tb>\n  </gpu>\n",
    "</algo>\n"
);

/// 2 GPUs: GPU g sends the other's chunk i[1-g] and adds the other's i[g] to its own into
/// o[0]. `COLL` is replaced by either spelling.
const REDUCE_SCATTER: &str = concat!(
    "<algo name=\"pair\" proto=\"LL\" nchannels=\"1\" nchunksperloop=\"2\" ngpus=\"2\" coll=\"COLL\" inplace=\"0\">\n",
    "  <gpu id=\"0\" i_chunks=\"2\" o_chunks=\"1\" s_chunks=\"0\">\n",
    "    <tb id=\"0\" send=\"1\" recv=\"1\" chan=\"0\">\n",
    step!(0, "s", "i", 1, "o", 0),
    step!(1, "rrc", "i", 0, "o", 0),
    "    </tb>\n  </gpu>\n",
    "  <gpu id=\"1\" i_chunks=\"2\" o_chunks=\"1\" s_chunks=\"0\">\n",
    "    <tb id=\"0\" send=\"0\" recv=\"0\" chan=\"0\">\n",
    step!(0, "s", "i", 0, "o", 0),
    step!(1, "rrc", "i", 1, "o", 0),
    "    </tb>\n  </gpu>\n",
    "</algo>\n"
);

/// 3 GPUs, all pairs: GPU g sends i[0] to both others; threadblock 0 adds the first
/// peer's chunk to i[0] into o[0], threadblock 1 (after it) adds the second's to o[0].
const ALL_REDUCE: &str = concat!(
    "<algo name=\"allpairs\" proto=\"LL\" nchannels=\"1\" nchunksperloop=\"1\" ngpus=\"3\" coll=\"allreduce\" inplace=\"0\">\n",
    "  <gpu id=\"0\" i_chunks=\"1\" o_chunks=\"1\" s_chunks=\"0\">\n",
    "    <tb id=\"0\" send=\"1\" recv=\"1\" chan=\"0\">\n",
    step!(0, "s", "i", 0, "o", 0),
    step!(1, "rrc", "i", 0, "o", 0, -1, -1, 1),
    "    </tb>\n",
    "    <tb id=\"1\" send=\"2\" recv=\"2\" chan=\"0\">\n",
    step!(0, "s", "i", 0, "o", 0),
    step!(1, "rrc", "o", 0, "o", 0, 0, 1, 0),
    "    </tb>\n  </gpu>\n",
    "  <gpu id=\"1\" i_chunks=\"1\" o_chunks=\"1\" s_chunks=\"0\">\n",
    "    <tb id=\"0\" send=\"0\" recv=\"0\" chan=\"0\">\n",
    step!(0, "s", "i", 0, "o", 0),
    step!(1, "rrc", "i", 0, "o", 0, -1, -1, 1),
    "    </tb>\n",
    "    <tb id=\"1\" send=\"2\" recv=\"2\" chan=\"0\">\n",
    step!(0, "s", "i", 0, "o", 0),
    step!(1, "rrc", "o", 0, "o", 0, 0, 1, 0),
    "    </tb>\n  </gpu>\n",
    "  <gpu id=\"2\" i_chunks=\"1\" o_chunks=\"1\" s_chunks=\"0\">\n",
    "    <tb id=\"0\" send=\"0\" recv=\"0\" chan=\"0\">\n",
    step!(0, "s", "i", 0, "o", 0),
    step!(1, "rrc", "i", 0, "o", 0, -1, -1, 1),
    "    </tb>\n",
    "    <tb id=\"1\" send=\"1\" recv=\"1\" chan=\"0\">\n",
    step!(0, "s", "i", 0, "o", 0),
    step!(1, "rrc", "o", 0, "o", 0, 0, 1, 0),
    "    </tb>\n  </gpu>\n",
    "</algo>\n"
);

/// Root 0 copies its chunk to its output and sends it to GPUs 1 and 2.
const BROADCAST: &str = concat!(
    "<algo name=\"star\" proto=\"Simple\" nchannels=\"1\" nchunksperloop=\"1\" ngpus=\"3\" coll=\"broadcast\" inplace=\"0\">\n",
    "  <gpu id=\"0\" i_chunks=\"1\" o_chunks=\"1\" s_chunks=\"0\">\n",
    "    <tb id=\"0\" send=\"1\" recv=\"-1\" chan=\"0\">\n",
    step!(0, "cpy", "i", 0, "o", 0),
    step!(1, "s", "i", 0, "o", 0),
    "    </tb>\n",
    "    <tb id=\"1\" send=\"2\" recv=\"-1\" chan=\"0\">\n",
    step!(0, "s", "i", 0, "o", 0),
    "    </tb>\n  </gpu>\n",
    "  <gpu id=\"1\" i_chunks=\"1\" o_chunks=\"1\" s_chunks=\"0\">\n",
    "    <tb id=\"0\" send=\"-1\" recv=\"0\" chan=\"0\">\n",
    step!(0, "r", "i", 0, "o", 0),
    "    </tb>\n  </gpu>\n",
    "  <gpu id=\"2\" i_chunks=\"1\" o_chunks=\"1\" s_chunks=\"0\">\n",
    "    <tb id=\"0\" send=\"-1\" recv=\"0\" chan=\"0\">\n",
    step!(0, "r", "i", 0, "o", 0),
    "    </tb>\n  </gpu>\n",
    "</algo>\n"
);

/// Root 0 adds GPU 1's chunk to its own into o[0], then GPU 2's to that.
const REDUCE: &str = concat!(
    "<algo name=\"star\" proto=\"LL\" nchannels=\"1\" nchunksperloop=\"1\" ngpus=\"3\" coll=\"reduce\" inplace=\"0\">\n",
    "  <gpu id=\"0\" i_chunks=\"1\" o_chunks=\"1\" s_chunks=\"0\">\n",
    "    <tb id=\"0\" send=\"-1\" recv=\"1\" chan=\"0\">\n",
    step!(0, "rrc", "i", 0, "o", 0, -1, -1, 1),
    "    </tb>\n",
    "    <tb id=\"1\" send=\"-1\" recv=\"2\" chan=\"0\">\n",
    step!(0, "rrc", "o", 0, "o", 0, 0, 0, 0),
    "    </tb>\n  </gpu>\n",
    "  <gpu id=\"1\" i_chunks=\"1\" o_chunks=\"1\" s_chunks=\"0\">\n",
    "    <tb id=\"0\" send=\"0\" recv=\"-1\" chan=\"0\">\n",
    step!(0, "s", "i", 0, "o", 0),
    "    </tb>\n  </gpu>\n",
    "  <gpu id=\"2\" i_chunks=\"1\" o_chunks=\"1\" s_chunks=\"0\">\n",
    "    <tb id=\"0\" send=\"0\" recv=\"-1\" chan=\"0\">\n",
    step!(0, "s", "i", 0, "o", 0),
    "    </tb>\n  </gpu>\n",
    "</algo>\n"
);

/// Root 0 copies its share to o[0] and receives GPU r's into o[r] (one chunk per share:
/// nchunksperloop counts one rank's share).
const GATHER: &str = concat!(
    "<algo name=\"star\" proto=\"Simple\" nchannels=\"1\" nchunksperloop=\"1\" ngpus=\"3\" coll=\"gather\" inplace=\"0\">\n",
    "  <gpu id=\"0\" i_chunks=\"1\" o_chunks=\"3\" s_chunks=\"0\">\n",
    "    <tb id=\"0\" send=\"-1\" recv=\"1\" chan=\"0\">\n",
    step!(0, "cpy", "i", 0, "o", 0),
    step!(1, "r", "i", 0, "o", 1),
    "    </tb>\n",
    "    <tb id=\"1\" send=\"-1\" recv=\"2\" chan=\"0\">\n",
    step!(0, "r", "i", 0, "o", 2),
    "    </tb>\n  </gpu>\n",
    "  <gpu id=\"1\" i_chunks=\"1\" o_chunks=\"3\" s_chunks=\"0\">\n",
    "    <tb id=\"0\" send=\"0\" recv=\"-1\" chan=\"0\">\n",
    step!(0, "s", "i", 0, "o", 0),
    "    </tb>\n  </gpu>\n",
    "  <gpu id=\"2\" i_chunks=\"1\" o_chunks=\"3\" s_chunks=\"0\">\n",
    "    <tb id=\"0\" send=\"0\" recv=\"-1\" chan=\"0\">\n",
    step!(0, "s", "i", 0, "o", 0),
    "    </tb>\n  </gpu>\n",
    "</algo>\n"
);

/// Root 0 copies i[0] to its output and sends i[r] to GPU r.
const SCATTER: &str = concat!(
    "<algo name=\"star\" proto=\"Simple\" nchannels=\"1\" nchunksperloop=\"1\" ngpus=\"3\" coll=\"scatter\" inplace=\"0\">\n",
    "  <gpu id=\"0\" i_chunks=\"3\" o_chunks=\"1\" s_chunks=\"0\">\n",
    "    <tb id=\"0\" send=\"1\" recv=\"-1\" chan=\"0\">\n",
    step!(0, "cpy", "i", 0, "o", 0),
    step!(1, "s", "i", 1, "o", 0),
    "    </tb>\n",
    "    <tb id=\"1\" send=\"2\" recv=\"-1\" chan=\"0\">\n",
    step!(0, "s", "i", 2, "o", 0),
    "    </tb>\n  </gpu>\n",
    "  <gpu id=\"1\" i_chunks=\"3\" o_chunks=\"1\" s_chunks=\"0\">\n",
    "    <tb id=\"0\" send=\"-1\" recv=\"0\" chan=\"0\">\n",
    step!(0, "r", "i", 0, "o", 0),
    "    </tb>\n  </gpu>\n",
    "  <gpu id=\"2\" i_chunks=\"3\" o_chunks=\"1\" s_chunks=\"0\">\n",
    "    <tb id=\"0\" send=\"-1\" recv=\"0\" chan=\"0\">\n",
    step!(0, "r", "i", 0, "o", 0),
    "    </tb>\n  </gpu>\n",
    "</algo>\n"
);

/// 2 GPUs: GPU g keeps i[g] (its chunk for itself) in o[g], sends i[1-g] and receives
/// the other's chunk for it into o[1-g].
const ALL_TO_ALL: &str = concat!(
    "<algo name=\"pair\" proto=\"LL128\" nchannels=\"1\" nchunksperloop=\"2\" ngpus=\"2\" coll=\"alltoall\" inplace=\"0\">\n",
    "  <gpu id=\"0\" i_chunks=\"2\" o_chunks=\"2\" s_chunks=\"0\">\n",
    "    <tb id=\"0\" send=\"1\" recv=\"1\" chan=\"0\">\n",
    step!(0, "cpy", "i", 0, "o", 0),
    step!(1, "s", "i", 1, "o", 0),
    step!(2, "r", "i", 0, "o", 1),
    "    </tb>\n  </gpu>\n",
    "  <gpu id=\"1\" i_chunks=\"2\" o_chunks=\"2\" s_chunks=\"0\">\n",
    "    <tb id=\"0\" send=\"0\" recv=\"0\" chan=\"0\">\n",
    step!(0, "cpy", "i", 1, "o", 1),
    step!(1, "s", "i", 0, "o", 0),
    step!(2, "r", "i", 0, "o", 0),
    "    </tb>\n  </gpu>\n",
    "</algo>\n"
);

/// (name, text, collective, spelled the executor's way, known to the older fork).
fn programs() -> Vec<(&'static str, String, CollectiveKind, bool, bool)> {
    use CollectiveKind::*;
    vec![
        ("allgather", ALL_GATHER.into(), AllGather, true, true),
        (
            "reducescatter",
            REDUCE_SCATTER.replace("COLL", "reducescatter"),
            ReduceScatter,
            true,
            false,
        ),
        (
            "reduce_scatter",
            REDUCE_SCATTER.replace("COLL", "reduce_scatter"),
            ReduceScatter,
            false,
            true,
        ),
        ("allreduce", ALL_REDUCE.into(), AllReduce, true, true),
        ("broadcast", BROADCAST.into(), Broadcast, true, true),
        ("reduce", REDUCE.into(), Reduce, true, true),
        ("gather", GATHER.into(), Gather, true, false),
        ("scatter", SCATTER.into(), Scatter, true, false),
        ("alltoall", ALL_TO_ALL.into(), AllToAll, true, true),
    ]
}

#[test]
fn msccl_tools_style_programs_load_with_warnings_and_verify() {
    let (executor, legacy) = (Target::default(), Target::new(Profile::MscclLegacy));
    for (name, text, kind, executor_spelling, legacy_knows) in programs() {
        let p = parse_program(&text, name).unwrap_or_else(|e| panic!("{e}"));
        // inplace="0": outofplace is read as 1, the range as all the executor reads.
        let inferred: Vec<String> = p.inferred.iter().map(|i| i.to_string()).collect();
        assert_eq!(
            inferred,
            [
                "no outofplace attribute: read as outofplace=\"1\" (1 - inplace)",
                "no minBytes attribute: read as minBytes=\"0\" (the whole size range)",
                "no maxBytes attribute: read as maxBytes=\"9223372036854775807\" (the whole size range)",
            ],
            "{name}"
        );
        let report = verify(&p, &VerifyOptions::default());
        assert!(report.computes(), "{name}: {:#?}", report.problems);
        assert_eq!(report.collective, Some(kind));
        assert_eq!(report.in_place_checked, [false], "{name}");
        if kind.has_root() {
            assert_eq!(report.root, Some(0), "{name}");
        }
        let rules_of =
            |t: &Target, p| -> Vec<Rule> { rules::check(p, t).iter().map(|b| b.rule).collect() };
        let mut want = vec![Rule::RequiredAttribute; 3];
        if !executor_spelling {
            want.push(Rule::CollectiveName);
        }
        assert_eq!(rules_of(&executor, &p), want, "{name} on executor");
        let want: Vec<Rule> = if legacy_knows {
            vec![]
        } else {
            vec![Rule::CollectiveName]
        };
        assert_eq!(rules_of(&legacy, &p), want, "{name} on msccl-legacy");
        // Written back: every attribute present, nothing inferred, still correct.
        let written = write_program(&p);
        assert!(
            written.lines().next().unwrap().contains(
                "inplace=\"0\" outofplace=\"1\" minBytes=\"0\" maxBytes=\"9223372036854775807\""
            ),
            "{written}"
        );
        let again = parse_program(&written, name).unwrap();
        assert!(again.inferred.is_empty());
        assert!(verify(&again, &VerifyOptions::default()).computes());
        let left = rules_of(&executor, &again);
        assert_eq!(left.is_empty(), executor_spelling, "{name}: {left:?}");
    }
}

#[test]
fn an_in_place_file_reads_outofplace_as_0() {
    // The broadcast in place: the root's output is its input, so it copies nothing.
    let copy = step!(0, "cpy", "i", 0, "o", 0);
    let text = BROADCAST
        .replace("inplace=\"0\"", "inplace=\"1\"")
        .replace(copy, "")
        .replace("<step s=\"1\" type=\"s\"", "<step s=\"0\" type=\"s\"");
    let p = parse_program(&text, "in place").unwrap();
    assert!(p.inplace && !p.outofplace);
    assert_eq!(p.inferred[0].value, "0");
    let report = verify(&p, &VerifyOptions::default());
    assert!(report.computes(), "{:#?}", report.problems);
    assert_eq!(report.in_place_checked, [true]);
}
