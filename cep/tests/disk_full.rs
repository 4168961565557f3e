//! A full disk at the collector: `cep run` with `--out` on a 4 MiB tmpfs. The collector stops
//! with a clear cause, outputs.csv ends at a whole row, the saved state is kept for a resume,
//! and the launcher's verdict says "disk full". A full checkpoint store: the run's outputs
//! are whole, and its verdict and summary say the checkpoints failed. Needs root (it mounts
//! the tmpfs), as CI has.

mod common;

use common::cep;
use std::path::{Path, PathBuf};
use std::process::Command;

/// A tmpfs mounted for the test, unmounted when it ends.
struct Tmpfs(PathBuf);

impl Tmpfs {
    fn mount(at: &Path, size: &str) -> Tmpfs {
        std::fs::create_dir_all(at).unwrap();
        let mounted =
            Command::new("mount").args(["-t", "tmpfs", "-o", &format!("size={size}"), "tmpfs"]).arg(at).status();
        assert!(mounted.unwrap().success(), "cannot mount a tmpfs at {} (the test needs root)", at.display());
        Tmpfs(at.to_path_buf())
    }
}

impl Drop for Tmpfs {
    fn drop(&mut self) {
        let _ = Command::new("umount").arg("-l").arg(&self.0).status();
    }
}

/// Whether this process can mount (CI runs as root; a user's `cargo test` cannot, and says so).
fn can_mount() -> bool {
    let status = std::fs::read_to_string("/proc/self/status").unwrap();
    let root = status.lines().any(|line| line.starts_with("Uid:") && line.split_whitespace().nth(2) == Some("0"));
    if !root {
        eprintln!("skipped: mounting a tmpfs needs root");
    }
    root
}

#[test]
fn a_full_checkpoint_store_leaves_the_outputs_whole_and_says_the_checkpoints_failed() {
    if !can_mount() {
        return;
    }
    let dir = tempfile::tempdir().unwrap();
    // Room for the start's check, not for a part of a snapshot.
    let store = Tmpfs::mount(&dir.path().join("store"), "256k");
    let out = dir.path().join("run");
    let run = cep()
        .args(["run", "--workers", "2", "--rate", "200000", "--count", "600000", "--csv", "none", "--quiet"])
        .arg("--out")
        .arg(&out)
        .env("CEP_CHECKPOINT_DIR", &store.0)
        .output()
        .unwrap();
    let stdout = String::from_utf8_lossy(&run.stdout);
    let stderr = String::from_utf8_lossy(&run.stderr);
    assert!(run.status.success(), "{stdout}{stderr}");
    assert!(stdout.starts_with("OK: 600,000 ticks, 0 lost, complete;"), "{stdout}");
    assert!(
        stdout.contains("checkpoint") && stdout.contains("failed (") && stdout.contains("No space left"),
        "{stdout}"
    );
    let summary: serde_json::Value =
        serde_json::from_str(&std::fs::read_to_string(out.join("summary.json")).unwrap()).unwrap();
    let checkpoints = &summary["checkpoints"];
    assert!(checkpoints["failed"].as_u64().unwrap() >= 1, "{checkpoints}");
    assert_eq!(checkpoints["completed"], 0, "{checkpoints}");
    assert!(checkpoints["last_failure"].as_str().unwrap().contains("was not stored"), "{checkpoints}");
}

#[test]
fn a_full_disk_leaves_whole_rows_the_saved_state_and_a_verdict_that_says_disk_full() {
    if !can_mount() {
        return;
    }
    let dir = tempfile::tempdir().unwrap();
    let disk = Tmpfs::mount(&dir.path().join("small"), "4m");
    let out = disk.0.join("run");
    let run = cep()
        .args(["run", "--workers", "2", "--rate", "200000", "--count", "400000", "--csv", "all", "--quiet"])
        .arg("--out")
        .arg(&out)
        .output()
        .unwrap();
    let stderr = String::from_utf8_lossy(&run.stderr);
    let stdout = String::from_utf8_lossy(&run.stdout);
    assert!(!run.status.success(), "the run succeeded on a full disk: {stderr}");
    // The verdict, and the collector's own line: which file, how much room.
    assert!(stdout.starts_with("FAILED: disk full: the collector cannot write its results in"), "{stdout}");
    assert!(stderr.contains("No space left on device") && stderr.contains("bytes free on its file system"), "{stderr}");
    let csv = std::fs::read(out.join("outputs.csv")).unwrap();
    assert!(csv.len() > 1_000_000, "the disk filled up with rows: {} bytes", csv.len());
    assert_eq!(csv.last(), Some(&b'\n'), "outputs.csv ends in a cut row");
    let text = String::from_utf8(csv).unwrap();
    let fields = text.lines().next().unwrap().split(',').count();
    assert!(text.lines().all(|line| line.split(',').count() == fields), "a row with missing fields");
    assert!(out.join("collector.state").exists(), "the saved state is kept for a resume");
    assert!(!out.join("collector.state.tmp").exists(), "a half-written state is left");
}
