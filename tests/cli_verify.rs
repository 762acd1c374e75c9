//! `tacos verify` as a script meets it: exit 0 when the file loads in the target and is
//! correct, 1 when it loads but is wrong, 3 when it cannot be loaded (unreadable, not MSCCL
//! XML, or breaking the target's loader rules); with --json exactly one JSON object on
//! stdout whatever happens; inference warnings on stderr and in the JSON.

use std::path::PathBuf;
use std::process::Command;

/// Runs tacos: (exit code, stdout, stderr).
fn tacos(args: &[&str]) -> (i32, String, String) {
    let out = Command::new(env!("CARGO_BIN_EXE_tacos"))
        .args(args)
        .output()
        .expect("the tacos binary runs");
    let text = |b: &[u8]| String::from_utf8_lossy(b).into_owned();
    (
        out.status.code().expect("tacos exits, not killed"),
        text(&out.stdout),
        text(&out.stderr),
    )
}

fn scratch(name: &str, text: &str) -> String {
    let dir = std::env::temp_dir().join(format!("tacos-cli-verify-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let path = dir.join(name);
    std::fs::write(&path, text).unwrap();
    path.display().to_string()
}

/// The one JSON object stdout holds.
fn one_object(out: &str) -> serde_json::Value {
    let mut objects = serde_json::Deserializer::from_str(out).into_iter::<serde_json::Value>();
    let first = objects
        .next()
        .unwrap_or_else(|| panic!("no JSON in {out:?}"))
        .unwrap_or_else(|e| panic!("{e}: {out}"));
    assert!(objects.next().is_none(), "more than one JSON value: {out}");
    assert!(first.is_object(), "{out}");
    first
}

/// A 2-GPU All-Gather in msccl-tools' style: no outofplace, minBytes or maxBytes.
const PAIR: &str = r#"<algo name="pair" proto="Simple" nchannels="1" nchunksperloop="2" ngpus="2" coll="allgather" inplace="0">
  <gpu id="0" i_chunks="1" o_chunks="2" s_chunks="0">
    <tb id="0" send="1" recv="1" chan="0">
      <step s="0" type="s" srcbuf="i" srcoff="0" dstbuf="o" dstoff="0" cnt="1" depid="-1" deps="-1" hasdep="0"/>
      <step s="1" type="r" srcbuf="i" srcoff="0" dstbuf="o" dstoff="1" cnt="1" depid="-1" deps="-1" hasdep="0"/>
      <step s="2" type="cpy" srcbuf="i" srcoff="0" dstbuf="o" dstoff="0" cnt="1" depid="-1" deps="-1" hasdep="0"/>
    </tb>
  </gpu>
  <gpu id="1" i_chunks="1" o_chunks="2" s_chunks="0">
    <tb id="0" send="0" recv="0" chan="0">
      <step s="0" type="s" srcbuf="i" srcoff="0" dstbuf="o" dstoff="1" cnt="1" depid="-1" deps="-1" hasdep="0"/>
      <step s="1" type="r" srcbuf="i" srcoff="0" dstbuf="o" dstoff="0" cnt="1" depid="-1" deps="-1" hasdep="0"/>
      <step s="2" type="cpy" srcbuf="i" srcoff="0" dstbuf="o" dstoff="1" cnt="1" depid="-1" deps="-1" hasdep="0"/>
    </tb>
  </gpu>
</algo>
"#;

fn complete() -> String {
    PAIR.replace(
        "inplace=\"0\">",
        "inplace=\"0\" outofplace=\"1\" minBytes=\"0\" maxBytes=\"1048576\">",
    )
}

#[test]
fn a_file_that_loads_and_is_correct_exits_0() {
    let file = scratch("complete.xml", &complete());
    let (code, out, err) = tacos(&["verify", &file, "--json"]);
    assert_eq!(code, 0, "{err}");
    let v = one_object(&out);
    assert_eq!(
        (&v["loads"], &v["computes"], &v["correct"]),
        (&true.into(), &true.into(), &true.into())
    );
    assert_eq!(v["target"], "executor");
    assert_eq!(v["warnings"], serde_json::json!([]));
    assert!(err.is_empty(), "{err}");
}

#[test]
fn unreadable_and_non_xml_files_print_one_object_and_exit_3() {
    let missing = std::env::temp_dir()
        .join("tacos-no-such-dir")
        .join("x.xml")
        .display()
        .to_string();
    let dir = std::env::temp_dir().display().to_string();
    let text = scratch("manifest.json", "{\"files\": []}\n");
    let empty = scratch("empty.xml", "");
    let not_msccl = scratch("other.xml", "<graph version=\"1\"/>\n");
    for (file, says) in [
        (&missing, "No such file"),
        (&dir, ""),
        (&text, "no root element"),
        (&empty, "no root element"),
        (&not_msccl, "not <algo>"),
    ] {
        let (code, out, err) = tacos(&["verify", file, "--json"]);
        assert_eq!(code, 3, "{file}: {err}");
        let v = one_object(&out);
        assert_eq!(v["loads"], false, "{file}");
        assert_eq!(v["correct"], false);
        let error = v["load_error"].as_str().unwrap();
        assert!(
            error.contains(says) && error.contains(file.as_str()),
            "{file}: {error}"
        );
        assert!(
            err.starts_with("error: ") && err.lines().count() == 1,
            "{err}"
        );
        // Text output too exits 3.
        let (code, _, _) = tacos(&["verify", file]);
        assert_eq!(code, 3);
    }
}

#[test]
fn msccl_tools_files_warn_and_exit_3_for_the_executor_0_for_the_older_fork() {
    let file = scratch("tools.xml", PAIR);
    let (code, out, err) = tacos(&["verify", &file, "--json"]);
    assert_eq!(code, 3, "{err}");
    let v = one_object(&out);
    assert_eq!(v["loads"], false);
    assert_eq!(v["computes"], true);
    let breaks = v["rule_breaks"].as_array().unwrap();
    let rules: Vec<&str> = breaks.iter().map(|b| b["rule"].as_str().unwrap()).collect();
    assert_eq!(rules, ["required_attribute"; 3]);
    assert_eq!(
        breaks[0]["element"],
        serde_json::json!({"gpu": null, "tb": null, "step": null})
    );
    let warnings = v["warnings"].as_array().unwrap();
    assert_eq!(warnings.len(), 3);
    assert!(warnings[0]
        .as_str()
        .unwrap()
        .contains("tools.xml: no outofplace attribute"));
    for w in ["outofplace", "minBytes", "maxBytes"] {
        assert!(
            err.contains(&format!("warning: {file}: no {w} attribute")),
            "{err}"
        );
    }
    assert!(err.contains("does not load in executor"), "{err}");
    let (code, out, err) = tacos(&["verify", &file, "--target", "msccl-legacy"]);
    assert_eq!(code, 0, "{err}");
    assert!(out.contains("msccl-legacy: loads"), "{out}");
    assert!(err.contains("warning:"), "{err}");
}

#[test]
fn a_file_past_a_limit_exits_3_naming_the_element() {
    let file = scratch("steps.xml", &complete());
    let (code, out, err) = tacos(&["verify", &file, "--max-steps", "2", "--json"]);
    assert_eq!(code, 3, "{err}");
    let v = one_object(&out);
    assert_eq!(v["computes"], true);
    let b = &v["rule_breaks"][0];
    assert_eq!(b["rule"], "steps_per_threadblock");
    assert_eq!(
        b["element"],
        serde_json::json!({"gpu": 0, "tb": 0, "step": 2})
    );
    let (code, out, _) = tacos(&["verify", &file, "--max-steps", "2"]);
    assert_eq!(code, 3);
    assert!(
        out.contains("steps_per_threadblock at GPU 0 tb 0 step 2"),
        "{out}"
    );
}

#[test]
fn a_file_that_loads_but_is_wrong_exits_1() {
    let wrong = complete().replacen("dstoff=\"1\" cnt", "dstoff=\"0\" cnt", 1);
    let file = scratch("wrong.xml", &wrong);
    let (code, out, err) = tacos(&["verify", &file, "--json"]);
    assert_eq!(code, 1, "{err}");
    let v = one_object(&out);
    assert_eq!((&v["loads"], &v["computes"]), (&true.into(), &false.into()));
    assert!(!v["problems"].as_array().unwrap().is_empty());
    // Timing a file on a topology of another size is an error, still in one object.
    let good = scratch("good.xml", &complete());
    let (code, out, _) = tacos(&["verify", &good, "ring:4", "--size", "1MiB", "--json"]);
    assert_eq!(code, 1);
    let error = one_object(&out)["error"].as_str().unwrap().to_string();
    assert!(error.contains("4 NPUs"), "{error}");
}

#[test]
fn a_bad_target_is_a_usage_error() {
    let file = scratch("usage.xml", &complete());
    let (code, out, err) = tacos(&["verify", &file, "--max-tbs", "0", "--json"]);
    assert_eq!(code, 2, "{err}");
    assert!(one_object(&out)["error"]
        .as_str()
        .unwrap()
        .contains("--max-tbs: '0'"));
    let (code, _, err) = tacos(&["verify", &file, "--target", "executor-512"]);
    assert_eq!(code, 2);
    assert!(err.contains("executor-256"), "{err}");
}

#[test]
fn help_documents_the_exit_codes() {
    let (code, out, _) = tacos(&["verify", "--help"]);
    assert_eq!(code, 0);
    for want in [
        "Exit status",
        "0 when",
        "1 when",
        "2 for",
        "3 when",
        "--target",
    ] {
        assert!(out.contains(want), "{want}: {out}");
    }
}

#[test]
fn simulate_times_msccl_tools_files() {
    let file = scratch("simulate.xml", PAIR);
    let (code, out, err) = tacos(&["simulate", "ring:2", "--xml", &file, "--size", "1MiB"]);
    assert_eq!(code, 0, "{err}");
    assert!(out.contains("allgather"), "{out}");
    assert!(err.contains("no outofplace attribute"), "{err}");
}

#[test]
fn corpus_files_stripped_of_optional_attributes_load_in_the_older_fork() {
    let path =
        PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../shared/corpus/msccl-xml/ndv4/ap4ll.xml");
    let Ok(text) = std::fs::read_to_string(&path) else {
        println!("skipping: {} is absent", path.display());
        return;
    };
    let stripped = text.replacen(
        " outofplace=\"0\" minBytes=\"40960\" maxBytes=\"266239\"",
        "",
        1,
    );
    assert_ne!(stripped, text);
    let file = scratch("ap4ll.xml", &stripped);
    let (code, _, err) = tacos(&["verify", &file, "--target", "msccl-legacy"]);
    assert_eq!(code, 0, "{err}");
    let (code, _, _) = tacos(&["verify", &file]);
    assert_eq!(code, 3);
}
