//! Panics caught inside the library, kept off the host's stderr.
//!
//! The library runs inside other people's processes (the C API, the plugins and their
//! background threads). A caught panic is a bug, reported by whoever catches it as one
//! line (`tacos: WARN panic at FILE:LINE: MESSAGE`); Rust's own panic message would go to
//! the host's stderr as well (and once per worker thread that panics), so the first
//! [`catch`] installs a panic hook that writes nothing for panics under a catch: on a
//! catching thread, or on one of the library's worker threads while a catch runs. Other
//! panics go to the hook that was there before.
//!
//! ```
//! assert_eq!(tacos::panics::catch(|| 6 * 7), Ok(42));
//! let caught = tacos::panics::catch(|| -> u32 { panic!("a bug") }).unwrap_err();
//! assert!(caught.starts_with("panic at") && caught.contains("a bug"));
//! ```

use std::cell::{Cell, RefCell};
use std::panic::{catch_unwind, AssertUnwindSafe};
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Once;

thread_local! {
    /// Catches running on this thread (a caught call may make another).
    static CATCHING: Cell<usize> = const { Cell::new(0) };
    /// Where the last panic under a catch on this thread happened.
    static PANIC_AT: RefCell<Option<String>> = const { RefCell::new(None) };
}

/// Catches running in the process, for panics on worker threads.
static ACTIVE: AtomicUsize = AtomicUsize::new(0);

/// Installs, once, the hook that keeps caught panics off stderr.
fn install_hook() {
    static HOOK: Once = Once::new();
    HOOK.call_once(|| {
        let previous = std::panic::take_hook();
        std::panic::set_hook(Box::new(move |info| {
            let here = CATCHING.try_with(Cell::get).unwrap_or(0) > 0;
            let worker = rayon::current_thread_index().is_some();
            if here {
                let at = info
                    .location()
                    .map(|l| format!("at {}:{}", l.file(), l.line()));
                let _ = PANIC_AT.try_with(|p| *p.borrow_mut() = at);
            } else if !(worker && ACTIVE.load(Ordering::SeqCst) > 0) {
                previous(info);
            }
        }));
    });
}

/// Counts a catch as running, on this thread and in the process, until dropped.
struct Running;

impl Running {
    fn start() -> Running {
        CATCHING.with(|g| g.set(g.get() + 1));
        ACTIVE.fetch_add(1, Ordering::SeqCst);
        Running
    }
}

impl Drop for Running {
    fn drop(&mut self) {
        CATCHING.with(|g| g.set(g.get() - 1));
        ACTIVE.fetch_sub(1, Ordering::SeqCst);
    }
}

/// Runs `f`; a panic comes back as `Err("panic at FILE:LINE: MESSAGE")` (`on a worker
/// thread` where it came from one), its message echoed safely, and nothing is written.
pub fn catch<T>(f: impl FnOnce() -> T) -> Result<T, String> {
    install_hook();
    PANIC_AT.with(|p| p.borrow_mut().take());
    let result = {
        let _running = Running::start();
        catch_unwind(AssertUnwindSafe(f))
    };
    result.map_err(|panic| {
        let what = panic
            .downcast_ref::<&str>()
            .map(|s| s.to_string())
            .or_else(|| panic.downcast_ref::<String>().cloned())
            .unwrap_or_else(|| "unknown panic".into());
        let at = PANIC_AT
            .with(|p| p.borrow_mut().take())
            .unwrap_or_else(|| "on a worker thread".into());
        format!("panic {at}: {}", crate::error::echo(&what))
    })
}

#[cfg(test)]
mod tests {
    use super::catch;

    #[test]
    fn a_caught_panic_comes_back_with_its_place_and_message_echoed() {
        assert_eq!(catch(|| 7), Ok(7));
        let e = catch(|| -> u8 { panic!("bad \u{1b}[31m input") }).unwrap_err();
        // The place is the file as the workspace names it, from the workspace root.
        assert!(
            e.starts_with("panic at ") && e.contains("src/panics.rs:"),
            "{e}"
        );
        assert!(e.ends_with("bad \\u{1b}[31m input"), "{e}");
        // A panic on a worker thread of the pool, while a catch runs.
        let e = catch(|| rayon::join(|| panic!("on a worker"), || ())).unwrap_err();
        assert!(e.contains("on a worker"), "{e}");
    }
}
