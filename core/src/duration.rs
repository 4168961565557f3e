//! Durations on the command line: `30s`, `500ms`, `2m`, `1h 5m`.

use std::time::Duration;

/// Parses a human duration such as `30s` or `500ms`; a bare number is seconds.
pub fn parse_duration(text: &str) -> Result<Duration, String> {
    let text = text.trim();
    if let Ok(seconds) = text.parse::<f64>() {
        if let Ok(duration) = Duration::try_from_secs_f64(seconds) {
            return Ok(duration);
        }
        return Err(format!("invalid duration `{text}`: must be a non-negative number of seconds, below 2^64"));
    }
    humantime::parse_duration(text)
        .map_err(|error| format!("invalid duration `{text}` ({error}); use e.g. 30s, 500ms, 2m"))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn parses_units_and_bare_seconds() {
        assert_eq!(parse_duration("30s").unwrap(), Duration::from_secs(30));
        assert_eq!(parse_duration("500ms").unwrap(), Duration::from_millis(500));
        assert_eq!(parse_duration("1.5").unwrap(), Duration::from_millis(1500));
        assert!(parse_duration("soon").is_err());
        assert!(parse_duration("-1").is_err());
        assert!(parse_duration("1e30").unwrap_err().contains("below 2^64"));
    }
}
