//! What keeps the host process safe: every exported function runs inside `guard`, which
//! turns errors and panics into a return code and a message readable with
//! `tacos_last_error` on the same thread.
//!
//! A caught panic is a bug; the guard prints one line for it on stderr, `tacos: WARN panic
//! at FILE:LINE: MESSAGE` (`on a worker thread` where the panic came from one). Rust's own panic message would go to the host's stderr too (and
//! once per worker thread that panics), so the first guarded call installs a panic hook
//! that writes nothing for panics under a guard: on a guarded thread, or on one of the
//! library's worker threads while a guard runs. Other panics go to the hook that was there
//! before.

use std::cell::{Cell, RefCell};
use std::ffi::{c_char, CStr, CString};
use std::io::Write;
use std::panic::{catch_unwind, AssertUnwindSafe};
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Once;

thread_local! {
    static LAST_ERROR: RefCell<CString> = RefCell::new(CString::default());
    /// Guards running on this thread (a guarded call may call another).
    static GUARDED: Cell<usize> = const { Cell::new(0) };
    /// Where the last panic under a guard on this thread happened.
    static PANIC_AT: RefCell<Option<String>> = const { RefCell::new(None) };
}

/// Guards running in the process, for panics on worker threads.
static ACTIVE: AtomicUsize = AtomicUsize::new(0);

/// Remembers `message` as this thread's last error.
pub fn set_last_error(message: &str) {
    let text = CString::new(message.replace('\0', " ")).unwrap_or_default();
    LAST_ERROR.with(|e| *e.borrow_mut() = text);
}

/// Installs, once, the hook that keeps guarded panics off stderr.
fn install_hook() {
    static HOOK: Once = Once::new();
    HOOK.call_once(|| {
        let previous = std::panic::take_hook();
        std::panic::set_hook(Box::new(move |info| {
            let here = GUARDED.try_with(Cell::get).unwrap_or(0) > 0;
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

/// Counts a guard as running, on this thread and in the process, until dropped.
struct Running;

impl Running {
    fn start() -> Running {
        GUARDED.with(|g| g.set(g.get() + 1));
        ACTIVE.fetch_add(1, Ordering::SeqCst);
        Running
    }
}

impl Drop for Running {
    fn drop(&mut self) {
        GUARDED.with(|g| g.set(g.get() - 1));
        ACTIVE.fetch_sub(1, Ordering::SeqCst);
    }
}

/// Runs `f`; on an error or a panic records the message and returns `on_failure`. A panic
/// also prints one `tacos: WARN` line on stderr.
pub fn guard<T>(on_failure: T, f: impl FnOnce() -> Result<T, String>) -> T {
    install_hook();
    PANIC_AT.with(|p| p.borrow_mut().take());
    let result = {
        let _running = Running::start();
        catch_unwind(AssertUnwindSafe(f))
    };
    match result {
        Ok(Ok(value)) => value,
        Ok(Err(message)) => {
            set_last_error(&message);
            on_failure
        }
        Err(panic) => {
            let what = panic
                .downcast_ref::<&str>()
                .map(|s| s.to_string())
                .or_else(|| panic.downcast_ref::<String>().cloned())
                .unwrap_or_else(|| "unknown panic".into());
            let at = PANIC_AT
                .with(|p| p.borrow_mut().take())
                .unwrap_or_else(|| "on a worker thread".into());
            let line = format!(
                "tacos: WARN panic {at}: {} (please report)\n",
                crate::error::echo(&what)
            );
            // One write of the whole line; a closed stderr is no reason to fail.
            let _ = std::io::stderr().write_all(line.as_bytes());
            set_last_error(&format!(
                "internal error (please report): {}",
                crate::error::echo(&what)
            ));
            on_failure
        }
    }
}

/// Reads a C string argument, naming it in the error when it is null or not UTF-8.
///
/// # Safety
/// `ptr` must be null or point to a NUL-terminated string that outlives the call.
pub unsafe fn c_str<'a>(ptr: *const c_char, name: &str) -> Result<&'a str, String> {
    if ptr.is_null() {
        return Err(format!("{name} is NULL"));
    }
    CStr::from_ptr(ptr)
        .to_str()
        .map_err(|_| format!("{name} is not valid UTF-8"))
}

/// This thread's last error message; empty when none. Valid until the next call into the
/// library on this thread.
#[no_mangle]
pub extern "C" fn tacos_last_error() -> *const c_char {
    LAST_ERROR.with(|e| e.borrow().as_ptr())
}

/// Hands a string to the caller, who frees it with `tacos_free_string`.
pub fn give_string(text: String) -> *mut c_char {
    CString::new(text.replace('\0', " "))
        .unwrap_or_default()
        .into_raw()
}

/// Frees a string the library returned. NULL is ignored.
///
/// # Safety
/// `text` must be NULL or a pointer the library returned and that was not freed yet.
#[no_mangle]
pub unsafe extern "C" fn tacos_free_string(text: *mut c_char) {
    if !text.is_null() {
        drop(CString::from_raw(text));
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn panics_and_errors_become_messages() {
        assert_eq!(guard(-1, || -> Result<i32, String> { panic!("boom") }), -1);
        let msg = unsafe { CStr::from_ptr(tacos_last_error()) }
            .to_str()
            .unwrap();
        assert!(msg.contains("boom"), "{msg}");
        assert_eq!(guard(-1, || Err("bad topology".into())), -1);
        let msg = unsafe { CStr::from_ptr(tacos_last_error()) }
            .to_str()
            .unwrap();
        assert_eq!(msg, "bad topology");
        assert_eq!(guard(-1, || Ok(7)), 7);
    }

    #[test]
    fn null_arguments_are_named() {
        assert_eq!(
            unsafe { c_str(std::ptr::null(), "topology") }.unwrap_err(),
            "topology is NULL"
        );
    }
}
