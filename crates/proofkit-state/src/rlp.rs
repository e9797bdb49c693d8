//! Recursive Length Prefix encoding (Ethereum Yellow Paper, appendix B): the small subset the trie
//! needs (byte strings, lists, big-endian integers) and a decoder for proof verification.
#![deny(unsafe_code)]

use thiserror::Error;

/// A malformed RLP item.
#[derive(Debug, Error, PartialEq, Eq)]
pub enum RlpError {
    #[error("rlp: input too short")]
    Short,
    #[error("rlp: trailing bytes after the item")]
    Trailing,
    #[error("rlp: non-canonical encoding")]
    NonCanonical,
    #[error("rlp: expected a list")]
    ExpectedList,
    #[error("rlp: expected a string")]
    ExpectedString,
}

fn push_len(out: &mut Vec<u8>, short_base: u8, long_base: u8, len: usize) {
    if len <= 55 {
        out.push(short_base + len as u8);
    } else {
        let be = (len as u64).to_be_bytes();
        let skip = be.iter().take_while(|&&b| b == 0).count();
        out.push(long_base + (8 - skip) as u8);
        out.extend_from_slice(&be[skip..]);
    }
}

/// Appends the RLP encoding of the byte string `s`.
pub fn encode_bytes(out: &mut Vec<u8>, s: &[u8]) {
    if s.len() == 1 && s[0] < 0x80 {
        out.push(s[0]);
    } else {
        encode_string_header(out, s.len());
        out.extend_from_slice(s);
    }
}

/// Appends the header of a byte string of `len` bytes (for strings other than a single byte
/// below 0x80, which is its own encoding).
pub fn encode_string_header(out: &mut Vec<u8>, len: usize) {
    push_len(out, 0x80, 0xb7, len);
}

/// Appends a list header for a payload of `len` bytes.
pub fn encode_list_header(out: &mut Vec<u8>, len: usize) {
    push_len(out, 0xc0, 0xf7, len);
}

/// The length of a string item of `len` bytes whose first byte is `first` (when `len == 1`).
pub fn bytes_len(s: &[u8]) -> usize {
    if s.len() == 1 && s[0] < 0x80 {
        1
    } else {
        header_len(s.len()) + s.len()
    }
}

/// The size of a header for a payload of `len` bytes.
pub fn header_len(len: usize) -> usize {
    if len <= 55 {
        1
    } else {
        1 + (8 - (len as u64).leading_zeros() as usize / 8)
    }
}

/// Big-endian bytes with leading zeros removed (the RLP form of an integer; zero is empty).
pub fn trim(be: &[u8]) -> &[u8] {
    let skip = be.iter().take_while(|&&b| b == 0).count();
    &be[skip..]
}

/// A decoded item: a string's bytes or a list's payload.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Item<'a> {
    String(&'a [u8]),
    List(&'a [u8]),
}

/// Decodes the first item of `buf`, returning it and the rest of the buffer.
pub fn decode(buf: &[u8]) -> Result<(Item<'_>, &[u8]), RlpError> {
    let &b = buf.first().ok_or(RlpError::Short)?;
    let (is_list, off, len) = match b {
        0x00..=0x7f => return Ok((Item::String(&buf[..1]), &buf[1..])),
        0x80..=0xb7 => (false, 1, (b - 0x80) as usize),
        0xb8..=0xbf => {
            let n = (b - 0xb7) as usize;
            (false, 1 + n, long_len(buf, n)?)
        }
        0xc0..=0xf7 => (true, 1, (b - 0xc0) as usize),
        _ => {
            let n = (b - 0xf7) as usize;
            (true, 1 + n, long_len(buf, n)?)
        }
    };
    let end = off.checked_add(len).ok_or(RlpError::Short)?;
    if buf.len() < end {
        return Err(RlpError::Short);
    }
    let payload = &buf[off..end];
    if !is_list && len == 1 && off == 1 && payload[0] < 0x80 {
        return Err(RlpError::NonCanonical);
    }
    let item = if is_list {
        Item::List(payload)
    } else {
        Item::String(payload)
    };
    Ok((item, &buf[end..]))
}

fn long_len(buf: &[u8], n: usize) -> Result<usize, RlpError> {
    if n > 8 || buf.len() < 1 + n {
        return Err(RlpError::Short);
    }
    let bytes = &buf[1..1 + n];
    if bytes[0] == 0 {
        return Err(RlpError::NonCanonical);
    }
    let len = bytes.iter().fold(0u64, |a, &b| (a << 8) | b as u64) as usize;
    if len <= 55 {
        return Err(RlpError::NonCanonical);
    }
    Ok(len)
}

/// Decodes `buf` as exactly one list and returns its items.
pub fn decode_list(buf: &[u8]) -> Result<Vec<Item<'_>>, RlpError> {
    let (item, rest) = decode(buf)?;
    if !rest.is_empty() {
        return Err(RlpError::Trailing);
    }
    let Item::List(mut payload) = item else {
        return Err(RlpError::ExpectedList);
    };
    let mut items = Vec::new();
    while !payload.is_empty() {
        let (it, rest) = decode(payload)?;
        items.push(it);
        payload = rest;
    }
    Ok(items)
}

/// The raw encoding of the first item of `buf` (an embedded node inside a list).
pub fn raw_item(buf: &[u8]) -> Result<&[u8], RlpError> {
    let (_, rest) = decode(buf)?;
    Ok(&buf[..buf.len() - rest.len()])
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn strings_and_lists_round_trip() {
        for len in [0usize, 1, 2, 55, 56, 255, 256, 70000] {
            for first in [0u8, 0x7f, 0x80] {
                let mut s = vec![7u8; len];
                if len > 0 {
                    s[0] = first;
                }
                let mut out = Vec::new();
                encode_bytes(&mut out, &s);
                assert_eq!(out.len(), bytes_len(&s));
                let (item, rest) = decode(&out).unwrap();
                assert!(rest.is_empty());
                assert_eq!(item, Item::String(&s));
            }
        }
        let mut out = Vec::new();
        encode_list_header(&mut out, 60);
        assert_eq!(out.len(), header_len(60));
        out.extend_from_slice(&[0x01; 60]);
        assert_eq!(decode_list(&out).unwrap().len(), 60);
    }

    #[test]
    fn bad_input_is_an_error() {
        assert_eq!(decode(&[]), Err(RlpError::Short));
        assert_eq!(decode(&[0x82, 1]), Err(RlpError::Short));
        assert_eq!(decode(&[0x81, 0x05]), Err(RlpError::NonCanonical));
        assert_eq!(
            decode(&[0xb8, 0x05, 1, 2, 3, 4, 5]),
            Err(RlpError::NonCanonical)
        );
        assert_eq!(decode_list(&[0xc1, 0x01, 0x02]), Err(RlpError::Trailing));
        assert_eq!(decode_list(&[0x01]), Err(RlpError::ExpectedList));
    }
}
