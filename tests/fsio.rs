//! Atomic writes: from several threads at once to one path, and to paths that are links,
//! FIFOs, devices or directories.

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
        assert_eq!(
            (e.line, e.column),
            (Some(1 + text.matches('\n').count()), Some(column))
        );
        let e = e.to_string();
        let line = 1 + text.matches('\n').count();
        assert!(
            e.starts_with(&format!("t.json:{line}:{column}: trailing characters")),
            "{text}: {e}"
        );
    }
    // Errors inside still name the field.
    let e = parse_json::<Pair>("{\"a\": -1}", "t.json").unwrap_err();
    assert_eq!(e.field.as_deref(), Some("a"));
    let e = e.to_string();
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

/// A scratch directory of the test's own, emptied first.
fn scratch(name: &str) -> std::path::PathBuf {
    let dir = Path::new(env!("CARGO_TARGET_TMPDIR")).join(name);
    let _ = std::fs::remove_dir_all(&dir);
    std::fs::create_dir_all(&dir).unwrap();
    dir
}

/// Every writer once renamed a temporary file onto its path: a symbolic link was
/// replaced by a file instead of its target written. The link is followed (a chain of
/// them, relative ones from their own folder, one that leads nowhere yet), and its
/// target replaced whole.
#[test]
fn a_symbolic_link_is_followed_and_its_target_written() {
    use std::os::unix::fs::symlink;
    let dir = scratch("fsio-symlink");
    std::fs::create_dir(dir.join("real")).unwrap();
    let target = dir.join("real/out.json");
    std::fs::write(&target, "old").unwrap();
    symlink("real/out.json", dir.join("first")).unwrap();
    symlink(dir.join("first"), dir.join("second")).unwrap();
    write_atomic(&dir.join("second"), b"new").unwrap();
    assert_eq!(std::fs::read(&target).unwrap(), b"new");
    for link in ["first", "second"] {
        let meta = std::fs::symlink_metadata(dir.join(link)).unwrap();
        assert!(meta.file_type().is_symlink(), "{link} is no longer a link");
    }
    let left: Vec<_> = std::fs::read_dir(dir.join("real")).unwrap().collect();
    assert_eq!(left.len(), 1, "{left:?}");
    symlink("real/later.json", dir.join("dangling")).unwrap();
    write_atomic(&dir.join("dangling"), b"made").unwrap();
    assert_eq!(std::fs::read(dir.join("real/later.json")).unwrap(), b"made");
    symlink("loop-b", dir.join("loop-a")).unwrap();
    symlink("loop-a", dir.join("loop-b")).unwrap();
    let e = write_atomic(&dir.join("loop-a"), b"x")
        .unwrap_err()
        .to_string();
    assert!(e.contains("symbolic links in a row"), "{e}");
}

/// A directory is an error naming it, and nothing is left in it.
#[test]
fn a_directory_is_an_error_not_a_target() {
    let dir = scratch("fsio-directory");
    let e = write_atomic(&dir, b"x").unwrap_err().to_string();
    assert!(e.contains("is a directory"), "{e}");
    assert_eq!(std::fs::read_dir(&dir).unwrap().count(), 0);
}

/// A FIFO is written into (what a reader at its other end gets), never replaced by a
/// file; a character device (`/dev/null`, which a rename run as root would have replaced
/// for the whole system) too.
#[test]
fn a_fifo_and_a_device_are_written_into_not_replaced() {
    use std::os::unix::fs::FileTypeExt;
    let dir = scratch("fsio-fifo");
    let fifo = dir.join("pipe");
    let made = std::process::Command::new("mkfifo")
        .arg(&fifo)
        .status()
        .expect("mkfifo runs");
    assert!(made.success());
    let reader = {
        let fifo = fifo.clone();
        std::thread::spawn(move || std::fs::read(fifo).unwrap())
    };
    write_atomic(&fifo, b"through the pipe").unwrap();
    assert_eq!(reader.join().unwrap(), b"through the pipe");
    let kind = std::fs::symlink_metadata(&fifo).unwrap().file_type();
    assert!(kind.is_fifo());
    assert_eq!(std::fs::read_dir(&dir).unwrap().count(), 1);
    write_atomic(Path::new("/dev/null"), b"gone").unwrap();
    let kind = std::fs::symlink_metadata("/dev/null").unwrap().file_type();
    assert!(kind.is_char_device(), "/dev/null is no longer a device");
}
