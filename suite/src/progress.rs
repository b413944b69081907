//! The live progress of `certify`: one line per component, redrawn in place on a
//! terminal; one line per step otherwise (CI logs, pipes).

use std::io::Write as _;
use std::sync::Mutex;
use std::time::Instant;

/// Shows what each component is doing.
pub struct Board {
    started: Instant,
    interactive: bool,
    state: Mutex<BoardState>,
}

#[derive(Default)]
struct BoardState {
    /// The latest line of each component, in the order they first spoke.
    lines: Vec<(String, String)>,
    /// How many lines the last redraw wrote.
    drawn: usize,
}

impl Board {
    /// A board on stderr; `interactive` redraws one line per component in place.
    pub fn new(interactive: bool) -> Self {
        Board {
            started: Instant::now(),
            interactive,
            state: Mutex::new(BoardState::default()),
        }
    }

    /// Takes a step: `component` is empty for the run as a whole.
    pub fn hear(&self, component: &str, line: &str) {
        let elapsed = self.started.elapsed().as_secs_f64();
        let stamped = format!("[{elapsed:>5.1}s] {line}");
        let mut stderr = std::io::stderr().lock();
        if !self.interactive {
            let _ = writeln!(stderr, "{stamped}");
            return;
        }
        let mut state = self.state.lock().unwrap_or_else(|e| e.into_inner());
        let key = if component.is_empty() {
            "(run)"
        } else {
            component
        };
        match state.lines.iter_mut().find(|(name, _)| name == key) {
            Some((_, last)) => *last = stamped,
            None => state.lines.push((key.to_string(), stamped)),
        }
        let mut out = String::new();
        if state.drawn > 0 {
            out.push_str(&format!("\x1b[{}A", state.drawn));
        }
        for (_, last) in &state.lines {
            out.push_str("\r\x1b[2K");
            out.push_str(last);
            out.push('\n');
        }
        state.drawn = state.lines.len();
        let _ = stderr.write_all(out.as_bytes());
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_component_keeps_its_own_line() {
        let board = Board::new(true);
        board.hear("redis", "redis: provisioning");
        board.hear("nats", "nats: provisioning");
        board.hear("redis", "redis: [1/3] publish.delivery PASS (12 ms)");
        let state = board.state.lock().unwrap();
        let lines: Vec<&str> = state.lines.iter().map(|(n, _)| n.as_str()).collect();
        assert_eq!(lines, ["redis", "nats"]);
        assert!(state.lines[0].1.ends_with("publish.delivery PASS (12 ms)"));
        assert_eq!(state.drawn, 2);
    }
}
