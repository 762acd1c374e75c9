//! What keeps the host process safe: every exported function runs inside `guard`, which
//! turns errors and panics into a return code and a message readable with
//! `tacos_last_error` on the same thread. A caught panic (`panics::catch`, which keeps
//! Rust's own message off the host's stderr) prints one line, `tacos: WARN panic at
//! FILE:LINE: MESSAGE`.

use std::cell::{Cell, RefCell};
use std::ffi::{c_char, c_int, CStr, CString};
use std::io::Write;

thread_local! {
    static LAST_ERROR: RefCell<CString> = RefCell::new(CString::default());
    static LAST_ERROR_CODE: Cell<c_int> = const { Cell::new(TACOS_OK) };
}

/// The codes `tacos_last_error_code` returns, one per kind of error (`Error::kind`), as
/// `include/tacos.h` defines them; new kinds take new numbers, never an old one's.
pub const ERROR_CODES: [(&str, c_int); 19] = [
    ("ok", TACOS_OK),
    ("invalid", 1),
    ("unknown", 2),
    ("limit", 3),
    ("target_limit", 4),
    ("spec", 5),
    ("topology", 6),
    ("disconnected", 7),
    ("collective", 8),
    ("schedule", 9),
    ("baseline", 10),
    ("synthesis", 11),
    ("msccl", 12),
    ("plan", 13),
    ("cost", 14),
    ("compile", 15),
    ("io", 16),
    ("internal", 17),
    // A kind this table does not know yet (Error is non_exhaustive).
    ("other", 18),
];

/// `tacos_last_error_code` where the last call succeeded or none failed.
const TACOS_OK: c_int = 0;

/// Why a call failed: its kind of error (`Error::kind`; `invalid` for an argument the C API
/// refuses itself) and the message.
#[derive(Debug)]
pub struct Failure {
    pub kind: &'static str,
    pub message: String,
}

impl From<String> for Failure {
    fn from(message: String) -> Failure {
        Failure {
            kind: "invalid",
            message,
        }
    }
}

impl From<&str> for Failure {
    fn from(message: &str) -> Failure {
        Failure::from(message.to_string())
    }
}

impl From<crate::Error> for Failure {
    fn from(e: crate::Error) -> Failure {
        Failure {
            kind: e.kind(),
            message: e.message(),
        }
    }
}

/// Remembers `message` as this thread's last error, of `kind`.
fn set_last_failure(kind: &str, message: &str) {
    let text = CString::new(message.replace('\0', " ")).unwrap_or_default();
    LAST_ERROR.with(|e| *e.borrow_mut() = text);
    let code = ERROR_CODES
        .iter()
        .find(|(k, _)| *k == kind)
        .or(ERROR_CODES.last())
        .map_or(TACOS_OK, |&(_, c)| c);
    LAST_ERROR_CODE.with(|c| c.set(code));
}

/// Remembers `message` as this thread's last error (an argument refused).
pub fn set_last_error(message: &str) {
    set_last_failure("invalid", message);
}

/// Runs `f`; on an error or a panic records its kind and message and returns
/// `on_failure`. A panic also prints one `tacos: WARN` line on stderr.
pub fn guard<T>(on_failure: T, f: impl FnOnce() -> Result<T, Failure>) -> T {
    match crate::panics::catch(f) {
        Ok(Ok(value)) => value,
        Ok(Err(failure)) => {
            set_last_failure(failure.kind, &failure.message);
            on_failure
        }
        Err(panic) => {
            // One write of the whole line; a closed stderr is no reason to fail.
            let line = format!("tacos: WARN {panic} (please report)\n");
            let _ = std::io::stderr().write_all(line.as_bytes());
            set_last_failure(
                "internal",
                &format!("internal error (please report): {panic}"),
            );
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
    // SAFETY: not null (checked above), and the caller guarantees a NUL-terminated string
    // that outlives the borrow.
    unsafe { CStr::from_ptr(ptr) }
        .to_str()
        .map_err(|_| format!("{name} is not valid UTF-8"))
}

/// This thread's last error message; empty when none. Valid until the next call into the
/// library on this thread.
#[no_mangle]
pub extern "C" fn tacos_last_error() -> *const c_char {
    LAST_ERROR.with(|e| e.borrow().as_ptr())
}

/// The kind of this thread's last error as a code of [`ERROR_CODES`] (`TACOS_ERR_*` in
/// `include/tacos.h`); 0 when none.
#[no_mangle]
pub extern "C" fn tacos_last_error_code() -> c_int {
    LAST_ERROR_CODE.with(Cell::get)
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
        // SAFETY: the caller guarantees `text` came from `give_string` (`CString::into_raw`)
        // and was not freed yet, so ownership returns to the CString that made it.
        drop(unsafe { CString::from_raw(text) });
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn panics_and_errors_become_messages() {
        assert_eq!(guard(-1, || -> Result<i32, Failure> { panic!("boom") }), -1);
        // SAFETY: tacos_last_error returns this thread's NUL-terminated message, valid until
        // the next call into the library.
        let msg = unsafe { CStr::from_ptr(tacos_last_error()) }
            .to_str()
            .unwrap();
        assert!(msg.contains("boom"), "{msg}");
        assert_eq!(guard(-1, || Err("bad topology".into())), -1);
        // SAFETY: as above.
        let msg = unsafe { CStr::from_ptr(tacos_last_error()) }
            .to_str()
            .unwrap();
        assert_eq!(msg, "bad topology");
        assert_eq!(guard(-1, || Ok(7)), 7);
    }

    /// Every kind `Error::kind` gives has its own code, not `other`. The match names every
    /// variant, so a new one does not compile here until it has a sample below.
    #[test]
    fn every_kind_of_error_has_its_own_code() {
        use crate::error::{Error, FileFormat, FileProblem, LimitBreach, Npus};
        let breach = LimitBreach {
            limit_name: "steps_per_threadblock",
            gpu: None,
            tb: None,
            step: None,
            value: 2,
            limit: 1,
            message: "2 steps".into(),
        };
        let formats = [
            FileFormat::Topology,
            FileFormat::Msccl,
            FileFormat::Schedule,
            FileFormat::Cost,
            FileFormat::Compiled,
            FileFormat::Plan,
        ];
        let mut samples = vec![
            Error::Unknown {
                what: "collective",
                given: "x".into(),
                known: vec![],
            },
            Error::Invalid {
                input: "size".into(),
                value: "0".into(),
                allowed: "1 or more".into(),
            },
            Error::Limit {
                what: "NPUs",
                value: 2,
                limit: 1,
                context: "building".into(),
            },
            Error::TargetLimit {
                target: "executor".into(),
                violation: Box::new(breach),
                context: "lowering".into(),
            },
            Error::Topology("a rule".into()),
            Error::Disconnected {
                from: Npus::Npu(0),
                to: Npus::Npu(1),
            },
            Error::Collective {
                npu: None,
                problem: "a rule".into(),
            },
            Error::schedule("a rule"),
            Error::baseline("rhd", "a rule"),
            Error::Synthesis("a rule".into()),
            Error::msccl("a rule"),
            Error::plan("a rule"),
            Error::compile("a rule"),
            Error::io("f", std::io::Error::other("gone")),
        ];
        samples.extend(formats.map(|f| FileProblem::new("f", "bad").of(f)));
        for e in &samples {
            match e {
                Error::Unknown { .. }
                | Error::Invalid { .. }
                | Error::Limit { .. }
                | Error::TargetLimit { .. }
                | Error::File { .. }
                | Error::Topology(_)
                | Error::Disconnected { .. }
                | Error::Collective { .. }
                | Error::Schedule { .. }
                | Error::Baseline { .. }
                | Error::Synthesis(_)
                | Error::Msccl { .. }
                | Error::Plan { .. }
                | Error::Compile { .. }
                | Error::Context { .. }
                | Error::Io { .. } => {}
            }
            let kind = e.kind();
            let known = &ERROR_CODES[1..ERROR_CODES.len() - 1];
            assert!(known.iter().any(|&(k, _)| k == kind), "{kind} has no code");
        }
        for format in formats {
            match format {
                FileFormat::Topology
                | FileFormat::Msccl
                | FileFormat::Schedule
                | FileFormat::Cost
                | FileFormat::Compiled
                | FileFormat::Plan => {}
            }
        }
        // An error under a context has the kind of the cause.
        let wrapped = FileProblem::new("p.json", "bad").of(FileFormat::Plan);
        assert_eq!(Failure::from(wrapped.context("reading")).kind, "plan");
    }

    #[test]
    fn null_arguments_are_named() {
        // SAFETY: c_str takes NULL.
        let read = unsafe { c_str(std::ptr::null(), "topology") };
        assert_eq!(read.unwrap_err(), "topology is NULL");
    }
}
