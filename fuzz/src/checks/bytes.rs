//! A total reader over fuzz input: past the end every read yields zero, so any byte string is a scenario.

pub struct Bytes<'a> {
    data: &'a [u8],
}

impl<'a> Bytes<'a> {
    pub fn new(data: &'a [u8]) -> Bytes<'a> {
        Bytes { data }
    }

    pub fn is_empty(&self) -> bool {
        self.data.is_empty()
    }

    pub fn u8(&mut self) -> u8 {
        match self.data.split_first() {
            Some((b, rest)) => {
                self.data = rest;
                *b
            }
            None => 0,
        }
    }

    pub fn u16(&mut self) -> u16 {
        u16::from(self.u8()) << 8 | u16::from(self.u8())
    }

    /// An index below `n` (`n` > 0).
    pub fn below(&mut self, n: usize) -> usize {
        usize::from(self.u8()) % n
    }

    /// Splits off the last `n` bytes (or all of them, if fewer remain) as a reader of their own.
    pub fn split_tail(&mut self, n: usize) -> Bytes<'a> {
        let at = self.data.len().saturating_sub(n);
        let (head, tail) = self.data.split_at(at);
        self.data = head;
        Bytes { data: tail }
    }

    pub fn len(&self) -> usize {
        self.data.len()
    }
}
