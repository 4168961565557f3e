//! The MessagePack subset the hot frames use, read and written by hand: per-event decoding is
//! where the pipeline spends its time, and a marker `match` over a byte slice is several
//! times cheaper than a generic reader. Readers accept every standard encoding of a value
//! (any integer width, f32 or f64, any string and array header); writers pick the shortest.

/// A decoding failure: what was expected, and where.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct DecodeError {
    /// What the reader wanted to find (a type or a field).
    pub expected: &'static str,
    /// Byte offset in the frame where it failed.
    pub at: usize,
}

impl std::fmt::Display for DecodeError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "expected {} at byte {}", self.expected, self.at)
    }
}

/// A cursor over one frame.
pub struct Reader<'a> {
    buf: &'a [u8],
    pos: usize,
}

impl<'a> Reader<'a> {
    /// A cursor at the start of `buf`.
    pub fn new(buf: &'a [u8]) -> Self {
        Reader { buf, pos: 0 }
    }

    /// A cursor starting at `pos` (offsets stay relative to the whole frame).
    pub fn at(buf: &'a [u8], pos: usize) -> Self {
        Reader { buf, pos }
    }

    /// Byte offset of the next value in the frame.
    pub fn position(&self) -> usize {
        self.pos
    }

    /// Bytes left after the cursor.
    pub fn remaining(&self) -> usize {
        self.buf.len() - self.pos
    }

    #[inline]
    fn fail<T>(&self, expected: &'static str) -> Result<T, DecodeError> {
        Err(DecodeError { expected, at: self.pos })
    }

    #[inline]
    fn take<const N: usize>(&mut self, expected: &'static str) -> Result<[u8; N], DecodeError> {
        match self.buf.get(self.pos..self.pos + N) {
            Some(bytes) => {
                self.pos += N;
                Ok(bytes.try_into().expect("slice of length N"))
            }
            None => self.fail(expected),
        }
    }

    #[inline]
    fn marker(&mut self, expected: &'static str) -> Result<u8, DecodeError> {
        let [marker] = self.take::<1>(expected)?;
        Ok(marker)
    }

    /// A non-negative integer of any width.
    #[inline]
    pub fn uint(&mut self) -> Result<u64, DecodeError> {
        const WHAT: &str = "an unsigned integer";
        let marker = self.marker(WHAT)?;
        let value = match marker {
            0x00..=0x7f => marker as u64,
            0xcc => self.take::<1>(WHAT)?[0] as u64,
            0xcd => u16::from_be_bytes(self.take(WHAT)?) as u64,
            0xce => u32::from_be_bytes(self.take(WHAT)?) as u64,
            0xcf => u64::from_be_bytes(self.take(WHAT)?),
            0xd0 => i8::from_be_bytes(self.take(WHAT)?) as i64 as u64,
            0xd1 => i16::from_be_bytes(self.take(WHAT)?) as i64 as u64,
            0xd2 => i32::from_be_bytes(self.take(WHAT)?) as i64 as u64,
            0xd3 => i64::from_be_bytes(self.take(WHAT)?) as u64,
            _ => {
                self.pos -= 1;
                return self.fail(WHAT);
            }
        };
        // Signed encodings are fine as long as the value is not negative.
        if (0xd0..=0xd3).contains(&marker) && (value as i64) < 0 {
            self.pos -= 1;
            return self.fail(WHAT);
        }
        Ok(value)
    }

    /// A signed integer of any width that fits an `i64`.
    #[inline]
    pub fn int(&mut self) -> Result<i64, DecodeError> {
        const WHAT: &str = "an integer";
        let marker = self.marker(WHAT)?;
        let value = match marker {
            0x00..=0x7f => marker as i64,
            0xe0..=0xff => marker as i8 as i64,
            0xcc => self.take::<1>(WHAT)?[0] as i64,
            0xcd => u16::from_be_bytes(self.take(WHAT)?) as i64,
            0xce => u32::from_be_bytes(self.take(WHAT)?) as i64,
            0xcf => match i64::try_from(u64::from_be_bytes(self.take(WHAT)?)) {
                Ok(value) => value,
                Err(_) => {
                    self.pos -= 9;
                    return self.fail(WHAT);
                }
            },
            0xd0 => i8::from_be_bytes(self.take(WHAT)?) as i64,
            0xd1 => i16::from_be_bytes(self.take(WHAT)?) as i64,
            0xd2 => i32::from_be_bytes(self.take(WHAT)?) as i64,
            0xd3 => i64::from_be_bytes(self.take(WHAT)?),
            _ => {
                self.pos -= 1;
                return self.fail(WHAT);
            }
        };
        Ok(value)
    }

    /// An unsigned integer that must fit in a `u32`.
    #[inline]
    pub fn u32(&mut self) -> Result<u32, DecodeError> {
        let start = self.pos;
        let value = self.uint()?;
        u32::try_from(value).map_err(|_| DecodeError { expected: "an integer below 2^32", at: start })
    }

    /// A float, f64 or f32.
    #[inline]
    pub fn float(&mut self) -> Result<f64, DecodeError> {
        const WHAT: &str = "a float";
        match self.marker(WHAT)? {
            0xcb => Ok(f64::from_be_bytes(self.take(WHAT)?)),
            0xca => Ok(f32::from_be_bytes(self.take(WHAT)?) as f64),
            _ => {
                self.pos -= 1;
                self.fail(WHAT)
            }
        }
    }

    /// A string's byte range in the frame (UTF-8 is checked by the caller, once).
    #[inline]
    pub fn str_range(&mut self) -> Result<std::ops::Range<usize>, DecodeError> {
        const WHAT: &str = "a string";
        let marker = self.marker(WHAT)?;
        let len = match marker {
            0xa0..=0xbf => (marker & 0x1f) as usize,
            0xd9 => self.take::<1>(WHAT)?[0] as usize,
            0xda => u16::from_be_bytes(self.take(WHAT)?) as usize,
            0xdb => u32::from_be_bytes(self.take(WHAT)?) as usize,
            _ => {
                self.pos -= 1;
                return self.fail(WHAT);
            }
        };
        if self.remaining() < len {
            return self.fail("a string within the frame");
        }
        let start = self.pos;
        self.pos += len;
        Ok(start..start + len)
    }

    /// Consumes a nil if one is next: whether it was.
    #[inline]
    pub fn nil(&mut self) -> bool {
        let nil = self.buf.get(self.pos) == Some(&0xc0);
        self.pos += nil as usize;
        nil
    }

    /// An array header: the number of elements.
    #[inline]
    pub fn array_len(&mut self) -> Result<u32, DecodeError> {
        const WHAT: &str = "an array";
        let marker = self.marker(WHAT)?;
        match marker {
            0x90..=0x9f => Ok((marker & 0x0f) as u32),
            0xdc => Ok(u16::from_be_bytes(self.take(WHAT)?) as u32),
            0xdd => Ok(u32::from_be_bytes(self.take(WHAT)?)),
            _ => {
                self.pos -= 1;
                self.fail(WHAT)
            }
        }
    }

    /// An array header with exactly `want` elements.
    #[inline]
    pub fn array_of(&mut self, want: u32, expected: &'static str) -> Result<(), DecodeError> {
        let start = self.pos;
        if self.array_len()? != want {
            return Err(DecodeError { expected, at: start });
        }
        Ok(())
    }
}

/// Appends the shortest encoding of a non-negative integer.
#[inline]
pub fn write_uint(buf: &mut Vec<u8>, value: u64) {
    if value < 0x80 {
        buf.push(value as u8);
    } else if value <= u8::MAX as u64 {
        buf.extend_from_slice(&[0xcc, value as u8]);
    } else if value <= u16::MAX as u64 {
        buf.push(0xcd);
        buf.extend_from_slice(&(value as u16).to_be_bytes());
    } else if value <= u32::MAX as u64 {
        buf.push(0xce);
        buf.extend_from_slice(&(value as u32).to_be_bytes());
    } else {
        buf.push(0xcf);
        buf.extend_from_slice(&value.to_be_bytes());
    }
}

/// Appends the shortest encoding of a signed integer (a non-negative one as [`write_uint`]).
#[inline]
pub fn write_int(buf: &mut Vec<u8>, value: i64) {
    if value >= 0 {
        write_uint(buf, value as u64);
    } else if value >= -32 {
        buf.push(value as i8 as u8);
    } else if value >= i8::MIN as i64 {
        buf.extend_from_slice(&[0xd0, value as i8 as u8]);
    } else if value >= i16::MIN as i64 {
        buf.push(0xd1);
        buf.extend_from_slice(&(value as i16).to_be_bytes());
    } else if value >= i32::MIN as i64 {
        buf.push(0xd2);
        buf.extend_from_slice(&(value as i32).to_be_bytes());
    } else {
        buf.push(0xd3);
        buf.extend_from_slice(&value.to_be_bytes());
    }
}

/// Appends a float as a MessagePack float 64 (always 9 bytes: prices keep every bit).
#[inline]
pub fn write_f64(buf: &mut Vec<u8>, value: f64) {
    buf.push(0xcb);
    buf.extend_from_slice(&value.to_be_bytes());
}

/// Appends a string with the shortest header that holds its length.
#[inline]
pub fn write_str(buf: &mut Vec<u8>, text: &[u8]) {
    let len = text.len();
    if len < 32 {
        buf.push(0xa0 | len as u8);
    } else if len <= u8::MAX as usize {
        buf.extend_from_slice(&[0xd9, len as u8]);
    } else if len <= u16::MAX as usize {
        buf.push(0xda);
        buf.extend_from_slice(&(len as u16).to_be_bytes());
    } else {
        buf.push(0xdb);
        buf.extend_from_slice(&(len as u32).to_be_bytes());
    }
    buf.extend_from_slice(text);
}

/// Appends a nil.
#[inline]
pub fn write_nil(buf: &mut Vec<u8>) {
    buf.push(0xc0);
}

/// Appends a fixarray header (at most 15 elements).
#[inline]
pub fn write_fixarray(buf: &mut Vec<u8>, len: u8) {
    debug_assert!(len < 16);
    buf.push(0x90 | len);
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn agrees_with_rmp_both_ways() {
        for value in [0u64, 1, 127, 128, 255, 256, 65_535, 65_536, u32::MAX as u64, u32::MAX as u64 + 1, u64::MAX] {
            let mut ours = Vec::new();
            write_uint(&mut ours, value);
            let mut theirs = Vec::new();
            rmp::encode::write_uint(&mut theirs, value).unwrap();
            assert_eq!(ours, theirs, "{value}");
            assert_eq!(Reader::new(&theirs).uint().unwrap(), value);
        }
        for text in ["", "S0001", &"x".repeat(31), &"y".repeat(32), &"z".repeat(300), &"w".repeat(70_000)] {
            let mut ours = Vec::new();
            write_str(&mut ours, text.as_bytes());
            let mut theirs = Vec::new();
            rmp::encode::write_str(&mut theirs, text).unwrap();
            assert_eq!(ours, theirs);
            let range = Reader::new(&theirs).str_range().unwrap();
            assert_eq!(&theirs[range], text.as_bytes());
        }
        let mut signed = Vec::new();
        rmp::encode::write_sint(&mut signed, 300).unwrap();
        assert_eq!(Reader::new(&signed).uint().unwrap(), 300);
        let mut negative = Vec::new();
        rmp::encode::write_sint(&mut negative, -3).unwrap();
        assert!(Reader::new(&negative).uint().is_err());
        for value in [0i64, 5, -1, -32, -33, -128, -129, -32_768, -32_769, i32::MIN as i64 - 1, i64::MIN, i64::MAX, 300]
        {
            let mut ours = Vec::new();
            write_int(&mut ours, value);
            let mut theirs = Vec::new();
            rmp::encode::write_sint(&mut theirs, value).unwrap();
            assert_eq!(ours, theirs, "{value}");
            assert_eq!(Reader::new(&ours).int().unwrap(), value);
        }
        let mut too_big = Vec::new();
        write_uint(&mut too_big, u64::MAX);
        assert!(Reader::new(&too_big).int().is_err());
        let mut f32_bytes = Vec::new();
        rmp::encode::write_f32(&mut f32_bytes, 1.5).unwrap();
        assert_eq!(Reader::new(&f32_bytes).float().unwrap(), 1.5);
    }

    #[test]
    fn truncated_input_is_an_error_not_a_panic() {
        let mut bytes = Vec::new();
        write_uint(&mut bytes, u64::MAX);
        write_f64(&mut bytes, 2.5);
        write_str(&mut bytes, b"hello");
        for cut in 0..bytes.len() {
            let mut reader = Reader::new(&bytes[..cut]);
            let ok = reader.uint().is_ok() && reader.float().is_ok() && reader.str_range().is_ok();
            assert!(!ok, "cut at {cut} decoded");
        }
    }
}
