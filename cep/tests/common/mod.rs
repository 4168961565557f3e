//! What the `cep` integration tests share: the binary under test, and a guard that kills a
//! process left running when a test fails half-way.
#![allow(dead_code)]

use std::process::{Child, Command};

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
