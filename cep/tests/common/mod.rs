//! What the `cep` integration tests share: the binary under test, and a guard that kills a
//! process left running when a test fails half-way.
#![allow(dead_code)]

use std::process::{Child, Command};
use std::time::{Duration, Instant};

/// `cep`, logging warnings only.
pub fn cep() -> Command {
    let mut command = Command::new(env!("CARGO_BIN_EXE_cep"));
    command.env("RUST_LOG", "warn");
    command
}

/// Kills the process if the test fails half-way.
pub struct Running(pub Child);

impl Drop for Running {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

/// The endpoints a router announced in `file` (`data=...`, `control=...`; it binds
/// kernel-chosen ports first).
pub fn announced(file: &std::path::Path) -> (String, String) {
    let deadline = Instant::now() + Duration::from_secs(30);
    loop {
        if let Ok(text) = std::fs::read_to_string(file) {
            let field = |key: &str| text.lines().find_map(|line| line.strip_prefix(key)).map(str::to_string);
            if let (Some(data), Some(control)) = (field("data="), field("control=")) {
                return (data, control);
            }
        }
        assert!(Instant::now() < deadline, "the router never announced its endpoints");
        std::thread::sleep(Duration::from_millis(5));
    }
}
