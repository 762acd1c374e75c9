//! Atomic writes from several threads at once to one path.

use std::path::Path;
use tacos::fsio::write_atomic;

#[test]
fn threads_writing_one_path_never_collide() {
    let dir = Path::new(env!("CARGO_TARGET_TMPDIR")).join("fsio-threads");
    let _ = std::fs::remove_dir_all(&dir);
    std::fs::create_dir_all(&dir).unwrap();
    let path = dir.join("shared.bin");
    // Large enough that writes overlap; each thread's bytes are its own letter.
    let contents: Vec<Vec<u8>> = (0..8u8).map(|t| vec![b'a' + t; 1 << 20]).collect();
    std::thread::scope(|scope| {
        for content in &contents {
            let path = &path;
            scope.spawn(move || {
                for _ in 0..10 {
                    write_atomic(path, content).unwrap();
                }
            });
        }
    });
    let end = std::fs::read(&path).unwrap();
    assert!(
        contents.contains(&end),
        "the file is not one writer's whole contents ({} bytes)",
        end.len()
    );
    // Every temporary file was renamed into place: only the target is left.
    let left: Vec<_> = std::fs::read_dir(&dir)
        .unwrap()
        .map(|e| e.unwrap().file_name())
        .collect();
    assert_eq!(left, vec![std::ffi::OsString::from("shared.bin")]);
}

#[derive(serde::Deserialize, Debug)]
struct Pair {
    #[allow(dead_code)]
    a: u32,
}

#[test]
fn json_documents_end_where_they_end() {
    use tacos::fsio::parse_json;
    assert!(parse_json::<Pair>("{\"a\": 1}\n\n", "t.json").is_ok());
    // Anything after the document, even a second document, is refused where it starts.
    for (text, column) in [
        ("{\"a\": 1} x", 10),
        ("{\"a\": 1}{\"a\": 2}", 9),
        ("{\"a\": 1}\n]", 1),
    ] {
        let e = parse_json::<Pair>(text, "t.json").unwrap_err();
        let line = 1 + text.matches('\n').count();
        assert!(
            e.starts_with(&format!("t.json:{line}:{column}: trailing characters")),
            "{text}: {e}"
        );
    }
    // Errors inside still name the field.
    let e = parse_json::<Pair>("{\"a\": -1}", "t.json").unwrap_err();
    assert!(e.starts_with("t.json:1:8: a: invalid value"), "{e}");
}

#[test]
fn text_files_past_the_limit_are_refused_before_reading() {
    use tacos::fsio::read_text;
    let dir = Path::new(env!("CARGO_TARGET_TMPDIR")).join("fsio-read");
    std::fs::create_dir_all(&dir).unwrap();
    let path = dir.join("ten.txt");
    std::fs::write(&path, "0123456789").unwrap();
    assert_eq!(read_text(&path, "digits", 10).unwrap(), "0123456789");
    let e = read_text(&path, "digits", 9).unwrap_err().to_string();
    assert_eq!(
        e,
        format!(
            "{}: digits: 10 bytes, more than the 9 allowed",
            path.display()
        )
    );
    // A stream of unknown size is cut at the limit.
    let e = read_text(Path::new("/dev/zero"), "zeros", 1 << 20).unwrap_err();
    assert!(
        e.to_string()
            .contains("1048577 bytes, more than the 1048576 allowed"),
        "{e}"
    );
    let e = read_text(&dir.join("missing"), "digits", 9).unwrap_err();
    assert!(e.to_string().contains("missing"), "{e}");
}
