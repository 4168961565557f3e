//! I/O errors as users read them.

/// An I/O error's text without the `(os error N)` tail: `No such file or directory`.
pub fn plain(error: &std::io::Error) -> String {
    let text = error.to_string();
    match text.find(" (os error") {
        Some(at) => text[..at].to_string(),
        None => text,
    }
}

#[cfg(test)]
mod tests {
    #[test]
    fn drops_the_os_error_number() {
        let error = std::io::Error::from_raw_os_error(2);
        assert_eq!(super::plain(&error), "No such file or directory");
    }
}
