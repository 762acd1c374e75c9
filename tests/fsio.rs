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
