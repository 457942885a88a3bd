//! Byte slices (the value buffers of a column's arrays) read as their concatenation, a
//! range at a time: the fills of the staging buffers walk them (`upload_bytes`, and the
//! narrowed uploads of `narrow.rs`).

/// Byte slices read as one run of bytes.
pub(super) struct Parts<'a> {
    parts: &'a [&'a [u8]],
    /// Where each part begins, then the total.
    starts: Vec<usize>,
}

impl<'a> Parts<'a> {
    pub(super) fn new(parts: &'a [&'a [u8]]) -> Self {
        let mut starts = Vec::with_capacity(parts.len() + 1);
        let mut total = 0;
        for part in parts {
            starts.push(total);
            total += part.len();
        }
        starts.push(total);
        Self { parts, starts }
    }

    /// Bytes of all the parts.
    pub(super) fn len(&self) -> usize {
        self.starts[self.parts.len()]
    }

    /// Hands `take(piece, at)` the pieces of bytes `from .. from + len` in order (`at`:
    /// the piece's offset from `from`; each piece within one part) until `take` returns
    /// `false`. Returns the bytes handed over (fewer than `len` past the end), or `None`
    /// when `take` stopped.
    pub(super) fn walk(
        &self,
        from: usize,
        len: usize,
        mut take: impl FnMut(&[u8], usize) -> bool,
    ) -> Option<usize> {
        let end = from + len;
        let mut at = from;
        let mut part = self.starts.partition_point(|&s| s <= at).saturating_sub(1);
        while at < end && part < self.parts.len() {
            let within = at - self.starts[part];
            let piece = (self.parts[part].len() - within).min(end - at);
            if !take(&self.parts[part][within..within + piece], at - from) {
                return None;
            }
            at += piece;
            part += 1;
        }
        Some(at - from)
    }

    /// Fills `out` with bytes `start ..` (zeros past the end).
    pub(super) fn copy_into(&self, start: usize, out: &mut [u8]) {
        let copied = self
            .walk(start, out.len(), |piece, at| {
                out[at..at + piece.len()].copy_from_slice(piece);
                true
            })
            .unwrap_or(0);
        out[copied..].fill(0);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn copy_into_crosses_parts_and_pads() {
        let parts: [&[u8]; 4] = [&[1, 2, 3], &[], &[4, 5], &[6]];
        let parts = Parts::new(&parts);
        let mut out = [9u8; 8];
        parts.copy_into(0, &mut out);
        assert_eq!(out, [1, 2, 3, 4, 5, 6, 0, 0]);
        let mut out = [9u8; 3];
        parts.copy_into(2, &mut out);
        assert_eq!(out, [3, 4, 5]);
        let mut out = [9u8; 2];
        parts.copy_into(5, &mut out);
        assert_eq!(out, [6, 0]);
    }
}
