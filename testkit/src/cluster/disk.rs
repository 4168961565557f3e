//! The collector's files in memory: what it wrote stays when it is killed, as on disk.

use std::cell::RefCell;
use std::io::Write;
use std::rc::Rc;

/// A file the collector writes: what was written stays when the collector is killed, as on
/// disk.
#[derive(Clone, Default)]
pub(super) struct SharedFile(pub(super) Rc<RefCell<Vec<u8>>>);

impl Write for SharedFile {
    fn write(&mut self, bytes: &[u8]) -> std::io::Result<usize> {
        self.0.borrow_mut().extend_from_slice(bytes);
        Ok(bytes.len())
    }

    fn flush(&mut self) -> std::io::Result<()> {
        Ok(())
    }
}

impl SharedFile {
    /// Cuts the file back to `len` bytes, as a resumed collector does.
    pub(super) fn truncate(&self, len: u64) {
        let mut bytes = self.0.borrow_mut();
        assert!(len <= bytes.len() as u64, "a saved length beyond what was written");
        bytes.truncate(len as usize);
    }

    pub(super) fn contents(&self) -> Vec<u8> {
        self.0.borrow().clone()
    }
}

/// What the collector leaves on disk: its three files and its last saved state.
#[derive(Default)]
pub(super) struct CollectorDisk {
    pub(super) csv: SharedFile,
    pub(super) intervals: SharedFile,
    pub(super) log: SharedFile,
    pub(super) state: Option<Vec<u8>>,
}
