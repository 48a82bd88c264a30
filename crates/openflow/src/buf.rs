//! Bounds-checked big-endian cursor ([`Reader`]) and append helpers ([`Writer`]) that every
//! codec module uses. A short read returns the reader's own [`OfError`] (the "bad length"
//! code of whatever structure is being parsed), never a panic. Runs on the decoding thread.

use crate::error::OfError;

/// A cursor over a byte slice; every read is checked.
#[derive(Debug, Clone)]
pub struct Reader<'a> {
    buf: &'a [u8],
    pos: usize,
    err: OfError,
}

impl<'a> Reader<'a> {
    /// Reads `buf`; short reads fail with `err`.
    pub fn new(buf: &'a [u8], err: OfError) -> Self {
        Self { buf, pos: 0, err }
    }

    /// The error returned on short reads.
    pub fn err(&self) -> OfError {
        self.err
    }

    /// Bytes not yet read.
    pub fn remaining(&self) -> usize {
        self.buf.len().saturating_sub(self.pos)
    }

    /// Whether everything has been read.
    pub fn is_empty(&self) -> bool {
        self.remaining() == 0
    }

    /// Takes the next `n` bytes.
    pub fn bytes(&mut self, n: usize) -> Result<&'a [u8], OfError> {
        let end = self.pos.checked_add(n).ok_or(self.err)?;
        let s = self.buf.get(self.pos..end).ok_or(self.err)?;
        self.pos = end;
        Ok(s)
    }

    /// Takes everything left.
    pub fn rest(&mut self) -> &'a [u8] {
        let s = self.buf.get(self.pos..).unwrap_or(&[]);
        self.pos = self.buf.len();
        s
    }

    /// Skips `n` bytes (padding).
    pub fn skip(&mut self, n: usize) -> Result<(), OfError> {
        self.bytes(n).map(|_| ())
    }

    /// Takes the next `n` bytes as a reader of its own that fails with `err`.
    /// A structure that overruns its container fails with `err` too.
    pub fn sub(&mut self, n: usize, err: OfError) -> Result<Reader<'a>, OfError> {
        Ok(Reader::new(self.bytes(n).map_err(|_| err)?, err))
    }

    /// Looks at the next `n` bytes without consuming them.
    pub fn peek(&self, n: usize) -> Result<&'a [u8], OfError> {
        let end = self.pos.checked_add(n).ok_or(self.err)?;
        self.buf.get(self.pos..end).ok_or(self.err)
    }

    /// Looks at the next big-endian u16 without consuming it.
    pub fn peek_u16(&self) -> Result<u16, OfError> {
        let b = self.peek(2)?;
        Ok(u16::from_be_bytes([b[0], b[1]]))
    }

    /// Fixed-size array.
    pub fn array<const N: usize>(&mut self) -> Result<[u8; N], OfError> {
        let mut a = [0u8; N];
        a.copy_from_slice(self.bytes(N)?);
        Ok(a)
    }

    pub fn u8(&mut self) -> Result<u8, OfError> {
        Ok(self.array::<1>()?[0])
    }

    pub fn u16(&mut self) -> Result<u16, OfError> {
        Ok(u16::from_be_bytes(self.array()?))
    }

    pub fn u32(&mut self) -> Result<u32, OfError> {
        Ok(u32::from_be_bytes(self.array()?))
    }

    pub fn u64(&mut self) -> Result<u64, OfError> {
        Ok(u64::from_be_bytes(self.array()?))
    }

    /// A NUL-padded fixed-width string field (lossy UTF-8, up to the first NUL).
    pub fn string(&mut self, n: usize) -> Result<String, OfError> {
        let b = self.bytes(n)?;
        let end = b.iter().position(|&c| c == 0).unwrap_or(b.len());
        Ok(String::from_utf8_lossy(&b[..end]).into_owned())
    }
}

/// Append helpers on `Vec<u8>`.
pub trait Writer {
    fn put_u8(&mut self, v: u8);
    fn put_u16(&mut self, v: u16);
    fn put_u32(&mut self, v: u32);
    fn put_u64(&mut self, v: u64);
    /// `n` zero bytes.
    fn pad(&mut self, n: usize);
    /// Zero bytes until the length since `start` is a multiple of 8.
    fn pad8_from(&mut self, start: usize);
    /// A string NUL-padded (and truncated so that a NUL remains) to `n` bytes.
    fn put_string(&mut self, s: &str, n: usize);
    /// Overwrites a big-endian u16 at `pos` (used to patch lengths); no-op if out of range.
    fn set_u16(&mut self, pos: usize, v: u16);
}

impl Writer for Vec<u8> {
    fn put_u8(&mut self, v: u8) {
        self.push(v);
    }
    fn put_u16(&mut self, v: u16) {
        self.extend_from_slice(&v.to_be_bytes());
    }
    fn put_u32(&mut self, v: u32) {
        self.extend_from_slice(&v.to_be_bytes());
    }
    fn put_u64(&mut self, v: u64) {
        self.extend_from_slice(&v.to_be_bytes());
    }
    fn pad(&mut self, n: usize) {
        self.resize(self.len() + n, 0);
    }
    fn pad8_from(&mut self, start: usize) {
        let len = self.len().saturating_sub(start);
        self.pad((8 - len % 8) % 8);
    }
    fn put_string(&mut self, s: &str, n: usize) {
        let b = s.as_bytes();
        let mut take = b.len().min(n.saturating_sub(1));
        while !s.is_char_boundary(take) {
            take -= 1;
        }
        self.extend_from_slice(&b[..take]);
        self.pad(n - take);
    }
    fn set_u16(&mut self, pos: usize, v: u16) {
        if let Some(s) = self.get_mut(pos..pos + 2) {
            s.copy_from_slice(&v.to_be_bytes());
        }
    }
}

/// Length since `start` as a u16 (saturating; callers check overall size separately).
pub fn len_u16(buf: &[u8], start: usize) -> u16 {
    u16::try_from(buf.len().saturating_sub(start)).unwrap_or(u16::MAX)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::error::errors;

    #[test]
    fn short_reads_fail_with_the_given_error() {
        let mut r = Reader::new(&[1, 2, 3], errors::BAD_MATCH_BAD_LEN);
        assert_eq!(r.u16(), Ok(0x0102));
        assert_eq!(r.u16(), Err(errors::BAD_MATCH_BAD_LEN));
        assert_eq!(r.u8(), Ok(3));
        assert!(r.is_empty());
        assert_eq!(r.bytes(usize::MAX), Err(errors::BAD_MATCH_BAD_LEN));
    }

    #[test]
    fn strings_are_nul_padded_and_truncated() {
        let mut v = Vec::new();
        v.put_string("abcdef", 4);
        assert_eq!(v, b"abc\0");
        let mut r = Reader::new(&v, errors::BAD_REQUEST_BAD_LEN);
        assert_eq!(r.string(4).unwrap(), "abc");
    }
}
