//! Progress for commands that may run past a second: a bar where the work can be
//! counted, a spinner where it cannot, drawn on stderr when stderr is a terminal. Where it
//! is not (a job's log), counted work is told as a line every [`LOG_EVERY`] instead, so a
//! long compile is not silent. Never with `--quiet` or `--json` (whose callers read
//! stdout).

use indicatif::{ProgressBar, ProgressStyle};
use std::io::{IsTerminal, Read};
use std::sync::Mutex;
use std::time::{Duration, Instant};

/// How often counted work is told as a line where no bar can be drawn; the first line
/// comes only after as long, so quick commands print nothing.
pub const LOG_EVERY: Duration = Duration::from_secs(10);

/// A progress display; it clears itself when dropped, so an early return or an error
/// leaves no bar behind.
pub struct ProgressHandle {
    bar: ProgressBar,
    /// Where stderr is no terminal and the work is counted: when the last line was told.
    lines: Option<Mutex<Instant>>,
}

impl ProgressHandle {
    /// A spinner labelled `label`, for work that cannot be counted; `hidden` is
    /// `quiet || json`.
    pub fn spinner(label: &str, hidden: bool) -> ProgressHandle {
        let bar = if shown(hidden) {
            let bar = ProgressBar::new_spinner();
            bar.set_style(style("{spinner} {msg} {elapsed}"));
            bar.enable_steady_tick(Duration::from_millis(100));
            bar
        } else {
            ProgressBar::hidden()
        };
        bar.set_message(label.to_string());
        ProgressHandle { bar, lines: None }
    }

    /// A bar counting `total` steps of work labelled `label`; `hidden` is `quiet || json`.
    pub fn bar(label: &str, total: u64, hidden: bool) -> ProgressHandle {
        let bar = if shown(hidden) {
            let bar = ProgressBar::new(total);
            bar.set_style(
                style("{msg:>10} [{bar:40}] {pos}/{len} {elapsed}").progress_chars("=> "),
            );
            bar
        } else {
            ProgressBar::hidden()
        };
        bar.set_length(total);
        bar.set_message(label.to_string());
        let lines =
            (!hidden && !std::io::stderr().is_terminal()).then(|| Mutex::new(Instant::now()));
        ProgressHandle { bar, lines }
    }

    /// Where lines stand in for the bar: one, once [`LOG_EVERY`] has passed since the last.
    fn tell(&self) {
        let Some(last) = &self.lines else { return };
        let mut last = last.lock().unwrap_or_else(|e| e.into_inner());
        if last.elapsed() < LOG_EVERY {
            return;
        }
        *last = Instant::now();
        eprintln!(
            "tacos: {} {}/{} after {:.0} s",
            self.bar.message(),
            self.bar.position(),
            self.bar.length().unwrap_or(0),
            self.bar.elapsed().as_secs_f64()
        );
    }

    /// A bar counting `total` bytes read, labelled `label`; `hidden` is `quiet || json`.
    pub fn bytes(label: &str, total: u64, hidden: bool) -> ProgressHandle {
        let handle = ProgressHandle::bar(label, total, hidden);
        handle.bar.set_style(
            style("{msg:>10} [{bar:40}] {bytes}/{total_bytes} {elapsed} (ETA {eta})")
                .progress_chars("=> "),
        );
        handle
    }

    /// `read`, advancing the bar by every byte read from it.
    pub fn wrap_read<R: Read>(&self, read: R) -> impl Read {
        self.bar.wrap_read(read)
    }

    /// Starts a new stage of `total` steps labelled `label`, counting from zero.
    pub fn stage(&self, label: &str, total: u64) {
        self.bar.set_length(total);
        self.bar.set_position(0);
        self.bar.set_message(label.to_string());
        self.tell();
    }

    /// Sets the steps done in the current stage.
    pub fn set(&self, done: u64) {
        self.bar.set_position(done);
        self.tell();
    }

    /// One more step done; `label` says what comes next.
    pub fn step(&self, label: &str) {
        self.bar.inc(1);
        self.bar.set_message(label.to_string());
        self.tell();
    }

    /// Prints `line` on stdout without tearing the display (a table printed row by row).
    pub fn println(&self, line: String) {
        self.bar.suspend(|| println!("{line}"));
    }

    /// Whether no bar is drawn (quiet, JSON, or stderr not a terminal).
    pub fn is_hidden(&self) -> bool {
        self.bar.is_hidden()
    }
}

impl Drop for ProgressHandle {
    fn drop(&mut self) {
        self.bar.finish_and_clear();
    }
}

/// Whether a display may be drawn.
fn shown(hidden: bool) -> bool {
    !hidden && std::io::stderr().is_terminal()
}

fn style(template: &str) -> ProgressStyle {
    ProgressStyle::with_template(template).expect("a valid progress template")
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn quiet_or_json_hides_every_kind_of_display() {
        // Whatever stderr is, hidden means nothing drawn, and counting still works.
        let bar = ProgressHandle::bar("work", 3, true);
        bar.step("next");
        bar.set(2);
        assert!(bar.is_hidden());
        assert!(ProgressHandle::spinner("work", true).is_hidden());
    }

    #[test]
    fn counted_work_is_told_once_a_period_where_no_bar_is_drawn() {
        let long_ago = Instant::now() - 2 * LOG_EVERY;
        let handle = ProgressHandle {
            bar: ProgressBar::hidden(),
            lines: Some(Mutex::new(long_ago)),
        };
        let last = || *handle.lines.as_ref().unwrap().lock().unwrap();
        handle.stage("candidates", 4);
        let told = last();
        assert!(told > long_ago, "a line is told after a quiet period");
        handle.set(1);
        handle.step("next");
        assert_eq!(last(), told, "no second line within the period");
        // A drawn bar or a hidden one tells no lines.
        let bar = ProgressHandle::bar("work", 3, true);
        assert!(bar.lines.is_none());
    }

    #[test]
    fn a_display_shows_only_on_a_terminal() {
        let on_terminal = std::io::stderr().is_terminal();
        assert_eq!(
            !ProgressHandle::spinner("work", false).is_hidden(),
            on_terminal
        );
        assert_eq!(
            !ProgressHandle::bar("work", 1, false).is_hidden(),
            on_terminal
        );
    }
}
