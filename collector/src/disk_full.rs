//! A full disk at the collector: what it appends to (outputs.csv, intervals.csv) is cut back
//! to its last whole line, the half-written state file goes (the last whole one stays, for a
//! resume), and the error says which file and how much room is left.

use crate::error::CollectorError;
use std::fs::OpenOptions;
use std::io::{Read, Seek, SeekFrom};
use std::path::{Path, PathBuf};

/// The files the collector appends rows to, in the results folder.
const LINE_FILES: [&str; 2] = ["outputs.csv", "intervals.csv"];

/// After a write to `path` in results folder `out` failed for want of space (`source`): every
/// line file ends at its last whole line, and the error to report.
pub(crate) fn after_a_full_disk(out: &Path, path: PathBuf, source: std::io::Error) -> CollectorError {
    for name in LINE_FILES {
        let file = out.join(name);
        if let Err(error) = cut_to_whole_lines(&file) {
            tracing::warn!(file = %file.display(), %error, "could not cut the file back to its last whole line");
        }
    }
    // A state half written is not the state: the one before it stays, whole.
    let _ = std::fs::remove_file(out.join(crate::driver::STATE_FILE).with_extension("state.tmp"));
    CollectorError::DiskFull { path, source, free: free_bytes(out), out: out.to_path_buf() }
}

/// Cuts the file at `path` (if there is one) back to its last line end: a row that a full
/// disk cut in two goes. Returns the bytes cut off.
pub(crate) fn cut_to_whole_lines(path: &Path) -> std::io::Result<u64> {
    let mut file = match OpenOptions::new().read(true).write(true).open(path) {
        Ok(file) => file,
        Err(error) if error.kind() == std::io::ErrorKind::NotFound => return Ok(0),
        Err(error) => return Err(error),
    };
    let len = file.metadata()?.len();
    // Back from the end, a block at a time, to the last line end.
    let mut end = len;
    let mut block = vec![0u8; 64 * 1024];
    while end > 0 {
        let start = end.saturating_sub(block.len() as u64);
        let chunk = &mut block[..(end - start) as usize];
        file.seek(SeekFrom::Start(start))?;
        file.read_exact(chunk)?;
        if let Some(at) = chunk.iter().rposition(|&byte| byte == b'\n') {
            let whole = start + at as u64 + 1;
            file.set_len(whole)?;
            return Ok(len - whole);
        }
        end = start;
    }
    file.set_len(0)?;
    Ok(len)
}

/// Bytes free to an unprivileged writer on the file system holding `path` (0 if unknown).
fn free_bytes(path: &Path) -> u64 {
    nix::sys::statvfs::statvfs(path)
        .map(|stats| stats.blocks_available().saturating_mul(stats.fragment_size()))
        .unwrap_or(0)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_row_cut_in_two_goes_and_whole_rows_stay() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("outputs.csv");
        std::fs::write(&path, "rule,symbol\nperc,S1\nvolatility,S10").unwrap();
        assert_eq!(cut_to_whole_lines(&path).unwrap(), "volatility,S10".len() as u64);
        assert_eq!(std::fs::read_to_string(&path).unwrap(), "rule,symbol\nperc,S1\n");
        assert_eq!(cut_to_whole_lines(&path).unwrap(), 0, "whole already");
        // A cut row longer than a block, and a file with no line end at all.
        let long = format!("rule\n{}", "x".repeat(200_000));
        std::fs::write(&path, &long).unwrap();
        assert_eq!(cut_to_whole_lines(&path).unwrap(), 200_000);
        std::fs::write(&path, "no line end").unwrap();
        cut_to_whole_lines(&path).unwrap();
        assert_eq!(std::fs::read(&path).unwrap(), b"");
        assert_eq!(cut_to_whole_lines(&dir.path().join("absent.csv")).unwrap(), 0);
    }
}
