//! Prefix tracking for an IP field, as OVS's classifier does for `nw_src` and `nw_dst`: a binary
//! trie of the prefixes the rules match on. One walk along a packet's address tells which prefix
//! lengths some rule could match and how many leading bits that answer depends on, so a subtable
//! whose prefix length no rule can match is skipped, and the megaflow built from the lookup keeps
//! only those leading bits instead of the subtable's whole prefix. Without it, a security group
//! with source prefixes of every length makes each source address a megaflow of its own.

/// Bits of an address: IPv4 sits in the first 32 of the key's 128.
pub const ADDRESS_BITS: usize = 128;

#[derive(Clone, Debug, Default)]
struct Node {
    children: [Option<u32>; 2],
    /// A rule's prefix ends at this node.
    prefix_ends: bool,
}

/// The prefixes of one IP field over every rule.
#[derive(Clone, Debug)]
pub struct PrefixTrie {
    nodes: Vec<Node>,
}

/// What one walk found for one address.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct PrefixWalk {
    /// Bit `n` (0-128) set when a rule's prefix of length `n` contains the address.
    lengths: [u64; 3],
    /// Leading bits of the address the answer depends on: any address that agrees with it on
    /// them gets the same `lengths`.
    pub needed_bits: usize,
}

impl PrefixWalk {
    /// True when some rule's prefix of `len` bits contains the address.
    #[inline]
    pub fn has_length(&self, len: usize) -> bool {
        self.lengths[len / 64] >> (len % 64) & 1 == 1
    }

    /// Leading bits a subtable of prefix length `len` depends on, whether it is skipped or not:
    /// below the divergence the node at depth `len` decides; past it, the divergence does.
    #[inline]
    pub fn bits_for(&self, len: usize) -> usize {
        len.min(self.needed_bits)
    }
}

#[inline]
fn bit(address: &[u8; 16], i: usize) -> usize {
    usize::from(address[i / 8] >> (7 - i % 8) & 1)
}

impl Default for PrefixTrie {
    fn default() -> Self {
        PrefixTrie { nodes: vec![Node::default()] }
    }
}

impl PrefixTrie {
    /// Adds the first `len` bits of `address` as a rule's prefix.
    pub fn insert(&mut self, address: &[u8; 16], len: usize) {
        let mut at = 0usize;
        for i in 0..len.min(ADDRESS_BITS) {
            let b = bit(address, i);
            at = match self.nodes[at].children[b] {
                Some(next) => next as usize,
                None => {
                    self.nodes.push(Node::default());
                    let next = self.nodes.len() - 1;
                    self.nodes[at].children[b] = Some(next as u32);
                    next
                }
            };
        }
        self.nodes[at].prefix_ends = true;
    }

    /// Walks `address` down the trie.
    #[inline]
    pub fn walk(&self, address: &[u8; 16]) -> PrefixWalk {
        let mut lengths = [0u64; 3];
        let mut at = 0usize;
        let mut depth = 0usize;
        loop {
            let node = &self.nodes[at];
            if node.prefix_ends {
                lengths[depth / 64] |= 1 << (depth % 64);
            }
            if depth == ADDRESS_BITS {
                return PrefixWalk { lengths, needed_bits: ADDRESS_BITS };
            }
            match node.children[bit(address, depth)] {
                Some(next) => {
                    at = next as usize;
                    depth += 1;
                }
                // Bit `depth` left the trie: the first `depth + 1` bits decide.
                None => return PrefixWalk { lengths, needed_bits: depth + 1 },
            }
        }
    }
}

/// The length of `mask` when it is a contiguous prefix (ones then zeros), else `None`.
pub fn prefix_len(mask: &[u8; 16]) -> Option<usize> {
    let ones = mask.iter().map(|b| b.count_ones() as usize).sum::<usize>();
    (*mask == prefix_mask(ones)).then_some(ones)
}

/// The mask of the first `len` bits.
pub fn prefix_mask(len: usize) -> [u8; 16] {
    let mut m = [0u8; 16];
    for (i, byte) in m.iter_mut().enumerate() {
        let covered = len.saturating_sub(i * 8).min(8);
        *byte = if covered == 0 { 0 } else { 0xff << (8 - covered) };
    }
    m
}

#[cfg(test)]
mod tests {
    use super::*;

    fn v4(a: [u8; 4]) -> [u8; 16] {
        let mut x = [0u8; 16];
        x[..4].copy_from_slice(&a);
        x
    }

    #[test]
    fn finds_the_lengths_that_contain_an_address() {
        let mut t = PrefixTrie::default();
        t.insert(&v4([10, 0, 0, 0]), 8);
        t.insert(&v4([10, 1, 0, 0]), 16);
        t.insert(&v4([172, 16, 0, 0]), 12);
        let w = t.walk(&v4([10, 1, 2, 3]));
        assert!(w.has_length(8) && w.has_length(16) && !w.has_length(12));
        // 10.1.x.x runs off the trie after 16 bits: the 17th bit decides.
        assert_eq!(w.needed_bits, 17);
        assert_eq!(w.bits_for(8), 8);
        assert_eq!(w.bits_for(24), 17);
        // 192.x: off the trie at the first bit (10 and 172 start 0 and 1; 192 starts 1, 172
        // continues 0 at bit 1, 192 has 1).
        let w = t.walk(&v4([192, 168, 0, 1]));
        assert!(!w.has_length(8) && !w.has_length(12) && !w.has_length(16));
        assert_eq!(w.needed_bits, 2);
    }

    #[test]
    fn an_empty_prefix_matches_everything_and_needs_nothing_more() {
        let mut t = PrefixTrie::default();
        t.insert(&[0; 16], 0);
        let w = t.walk(&v4([1, 2, 3, 4]));
        assert!(w.has_length(0));
        assert_eq!(w.needed_bits, 1);
        assert_eq!(w.bits_for(0), 0);
    }

    #[test]
    fn recognises_prefix_masks() {
        assert_eq!(prefix_len(&prefix_mask(0)), Some(0));
        assert_eq!(prefix_len(&prefix_mask(13)), Some(13));
        assert_eq!(prefix_len(&prefix_mask(128)), Some(128));
        let mut m = prefix_mask(8);
        m[3] = 1;
        assert_eq!(prefix_len(&m), None);
    }
}
