//! Filter-sets (Ourmon §2.2): named lists of labelled tcpdump expressions, each counting the
//! packets and bytes it matches; a set is one chart, an expression one line of it.
//!
//! Why two ways to evaluate: running N interpreted BPF programs per packet costs N times the
//! interpreter. Expressions made of host/net/port/proto primitives ([`Native`]) depend only on a
//! flow's key and direction, so a shard evaluates them once when a flow is created and keeps the
//! answers as bits in the flow ([`FLOW_CACHED_MAX`] of them); a packet then costs one load of
//! those bits. Packets whose shape could make libpcap answer differently ([`plain_shape`] is
//! false: VLAN tags, tunnels, fragments, IPv6 extension headers, non-IP, malformed) and the
//! expressions outside the native subset go through libpcap's program, run by [`crate::bpf`]
//! with the frame's wire length, exactly as `tcpdump -r FILE EXPR` does. Every expression is
//! compiled by libpcap at start, so a bad one is refused before any packet is read.
//!
//! Bytes are frame lengths on the wire (tcpdump's `len`), so non-IP frames count too.

use crate::bpf::Program;
use crate::filter_expr::{plain_shape, Fields, Native};
use sonde_wire::{Decoded, LinkType};
use std::fmt;
use std::sync::Arc;

/// Expressions over all sets together (a mask bit each, one bit kept for [`USE_FLOW_BITS`]).
pub const MAX_EXPRESSIONS: usize = 127;
/// Native expressions whose answers a flow keeps (the width of the flow's mask).
pub const FLOW_CACHED_MAX: usize = 32;
/// In a packet's mask: add the flow's cached bits to it.
pub const USE_FLOW_BITS: u128 = 1 << 127;

/// A set as given on the command line: `NAME=LABEL:EXPR;LABEL:EXPR;…`.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct FilterSetSpec {
    pub name: String,
    pub lines: Vec<(String, String)>,
}

/// Why a filter-set was refused: the text names the set, the label and what is wrong.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct FilterSetError(pub String);

impl fmt::Display for FilterSetError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.0)
    }
}

impl std::error::Error for FilterSetError {}

fn is_name(s: &str) -> bool {
    !s.is_empty()
        && s.len() <= 64
        && s.bytes()
            .all(|b| b.is_ascii_alphanumeric() || b == b'_' || b == b'-' || b == b'.')
}

impl FilterSetSpec {
    /// Parses `NAME=LABEL:EXPR;LABEL:EXPR;…` (names and labels: letters, digits, `_ - .`).
    pub fn parse(text: &str) -> Result<FilterSetSpec, FilterSetError> {
        let err = |what: String| FilterSetError(format!("--filter-set '{text}': {what}"));
        let (name, rest) = text.split_once('=').ok_or_else(|| {
            err("expected NAME=LABEL:EXPR;LABEL:EXPR… (e.g. 'web=http:tcp port 80;tls:tcp port 443')".into())
        })?;
        let name = name.trim();
        if !is_name(name) {
            return Err(err(format!(
                "set name '{name}': use 1 to 64 letters, digits, '_', '-' or '.'"
            )));
        }
        let mut lines: Vec<(String, String)> = Vec::new();
        for part in rest.split(';') {
            if part.trim().is_empty() {
                continue;
            }
            let (label, expr) = part.split_once(':').ok_or_else(|| {
                err(format!(
                    "'{}' has no label: write LABEL:EXPR, e.g. 'http:tcp port 80'",
                    part.trim()
                ))
            })?;
            let (label, expr) = (label.trim(), expr.trim());
            if !is_name(label) {
                return Err(err(format!(
                    "label '{label}': use 1 to 64 letters, digits, '_', '-' or '.'"
                )));
            }
            if expr.is_empty() {
                return Err(err(format!("label '{label}' has an empty expression")));
            }
            if lines.iter().any(|(l, _)| l == label) {
                return Err(err(format!("label '{label}' is given twice")));
            }
            lines.push((label.to_string(), expr.to_string()));
        }
        if lines.is_empty() {
            return Err(err("the set has no expression".into()));
        }
        Ok(FilterSetSpec {
            name: name.to_string(),
            lines,
        })
    }
}

/// One expression of a set.
#[derive(Clone, Debug)]
pub struct Expression {
    pub set: String,
    pub label: String,
    pub text: String,
    /// The native matcher, when the expression is in its subset.
    pub native: Option<Native>,
}

/// Every set, compiled; shared by all shards. Expressions are numbered for the counters:
/// those a flow caches first (indices below [`FilterSets::flow_cached`]), then the others;
/// [`FilterSets::order`] gives the order they were declared in.
#[derive(Debug)]
pub struct FilterSets {
    pub exprs: Vec<Expression>,
    /// Expression indices in declaration order, with the name of their set.
    pub order: Vec<usize>,
    /// Set names in declaration order.
    pub sets: Vec<String>,
    flow_cached: usize,
    /// Native expressions not cached (beyond [`FLOW_CACHED_MAX`]): bits evaluated per packet
    /// from its decoded fields.
    native_per_packet: u128,
    /// Expressions outside the native subset: libpcap's program for every packet.
    bpf_always: u128,
}

impl FilterSets {
    /// Compiles every expression with libpcap (for Ethernet, as a check of the syntax; other
    /// link types are compiled when met) and with the native matcher where it can.
    pub fn compile(specs: &[FilterSetSpec]) -> Result<FilterSets, FilterSetError> {
        let mut declared: Vec<Expression> = Vec::new();
        for (i, s) in specs.iter().enumerate() {
            if specs[..i].iter().any(|o| o.name == s.name) {
                return Err(FilterSetError(format!(
                    "--filter-set '{}' is declared twice: give each set its own name",
                    s.name
                )));
            }
            for (label, text) in &s.lines {
                Program::compile(text, LinkType::Ethernet).map_err(|e| {
                    FilterSetError(format!(
                        "--filter-set '{}', label '{label}': '{text}': {e}",
                        s.name
                    ))
                })?;
                declared.push(Expression {
                    set: s.name.clone(),
                    label: label.clone(),
                    text: text.clone(),
                    native: Native::parse(text),
                });
            }
        }
        if declared.len() > MAX_EXPRESSIONS {
            return Err(FilterSetError(format!(
                "--filter-set: {} expressions in all; at most {MAX_EXPRESSIONS} are supported",
                declared.len()
            )));
        }
        // Cached natives first, then the rest, keeping declaration order within each group.
        let mut numbered: Vec<usize> = Vec::new();
        let natives: Vec<usize> = (0..declared.len())
            .filter(|&i| declared[i].native.is_some())
            .collect();
        let cached: Vec<usize> = natives.iter().copied().take(FLOW_CACHED_MAX).collect();
        numbered.extend(&cached);
        numbered.extend((0..declared.len()).filter(|i| !cached.contains(i)));
        let mut order = vec![0; declared.len()];
        for (new, &old) in numbered.iter().enumerate() {
            order[old] = new;
        }
        let exprs: Vec<Expression> = numbered.iter().map(|&i| declared[i].clone()).collect();
        let flow_cached = cached.len();
        let mut native_per_packet = 0u128;
        let mut bpf_always = 0u128;
        for (i, e) in exprs.iter().enumerate().skip(flow_cached) {
            if e.native.is_some() {
                native_per_packet |= 1 << i;
            } else {
                bpf_always |= 1 << i;
            }
        }
        Ok(FilterSets {
            exprs,
            order,
            sets: specs.iter().map(|s| s.name.clone()).collect(),
            flow_cached,
            native_per_packet,
            bpf_always,
        })
    }

    pub fn len(&self) -> usize {
        self.exprs.len()
    }

    pub fn is_empty(&self) -> bool {
        self.exprs.is_empty()
    }

    /// How many expressions a flow caches (the low bits of a mask).
    pub fn flow_cached(&self) -> usize {
        self.flow_cached
    }

    /// Expressions that need libpcap's program for every packet.
    pub fn bpf_expressions(&self) -> usize {
        self.bpf_always.count_ones() as usize
    }

    /// The series key of expression `i`: `SET/LABEL`.
    pub fn key(&self, i: usize) -> String {
        format!("{}/{}", self.exprs[i].set, self.exprs[i].label)
    }
}

/// One thread's evaluator: the shared sets plus libpcap programs compiled per link type met.
pub struct FilterEval {
    sets: Arc<FilterSets>,
    programs: Vec<(LinkType, Vec<Option<Program>>)>,
}

impl FilterEval {
    pub fn new(sets: Arc<FilterSets>) -> FilterEval {
        FilterEval {
            sets,
            programs: Vec::new(),
        }
    }

    pub fn sets(&self) -> &FilterSets {
        &self.sets
    }

    /// The cached expressions' answers for one direction of a flow (bit i: expression i).
    #[inline]
    pub fn flow_mask(&self, f: &Fields) -> u32 {
        let mut m = 0u32;
        for (i, e) in self.sets.exprs[..self.sets.flow_cached].iter().enumerate() {
            if e.native.as_ref().is_some_and(|n| n.eval(f)) {
                m |= 1 << i;
            }
        }
        m
    }

    /// Every native expression's answer (cached ones included), for a flow record or a packet
    /// that has no flow entry.
    pub fn native_mask(&self, f: &Fields) -> u128 {
        let mut m = 0u128;
        for (i, e) in self.sets.exprs.iter().enumerate() {
            if e.native.as_ref().is_some_and(|n| n.eval(f)) {
                m |= 1 << i;
            }
        }
        m
    }

    /// A flow record's mask: the flow's cached answers, and the other native expressions
    /// evaluated on the record (libpcap's programs need a packet).
    pub fn record_mask(&self, cached: u32, f: &Fields) -> u128 {
        let mut m = cached as u128;
        if self.sets.native_per_packet != 0 {
            m |= self.native_mask(f) & self.sets.native_per_packet;
        }
        m
    }

    /// A decoded IP packet's mask: for a plain packet, the bits not cached by flows plus
    /// [`USE_FLOW_BITS`]; for any other, every expression through libpcap's program.
    #[inline]
    pub fn packet_mask(
        &mut self,
        link: LinkType,
        frame: &[u8],
        wire_len: u32,
        d: &Decoded,
    ) -> u128 {
        if !plain_shape(link, frame, d) {
            return self.bpf_mask(link, frame, wire_len, u128::MAX);
        }
        let mut m = USE_FLOW_BITS;
        if self.sets.native_per_packet != 0 {
            let f = Fields::from_decoded(d);
            m |= self.native_mask(&f) & self.sets.native_per_packet;
        }
        if self.sets.bpf_always != 0 {
            m |= self.bpf_mask(link, frame, wire_len, self.sets.bpf_always);
        }
        m
    }

    /// A frame that is not a decodable IP packet (non-IP, malformed): libpcap decides.
    pub fn frame_mask(&mut self, link: LinkType, frame: &[u8], wire_len: u32) -> u128 {
        self.bpf_mask(link, frame, wire_len, u128::MAX)
    }

    #[cold]
    fn bpf_mask(&mut self, link: LinkType, frame: &[u8], wire_len: u32, which: u128) -> u128 {
        let progs = match self.programs.iter().position(|(l, _)| *l == link) {
            Some(i) => &self.programs[i].1,
            None => {
                // An expression that cannot apply to this link type matches nothing there, as
                // in tcpdump.
                let compiled = self
                    .sets
                    .exprs
                    .iter()
                    .map(|e| Program::compile(&e.text, link).ok())
                    .collect();
                self.programs.push((link, compiled));
                &self.programs[self.programs.len() - 1].1
            }
        };
        let mut m = 0u128;
        for (i, p) in progs.iter().enumerate() {
            if which & (1 << i) != 0 && p.as_ref().is_some_and(|p| p.matches(frame, wire_len)) {
                m |= 1 << i;
            }
        }
        m
    }
}

/// Packets and bytes per expression (numbered as in [`FilterSets`]).
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct FilterCounts {
    pub packets: Vec<u64>,
    pub bytes: Vec<u64>,
}

impl FilterCounts {
    pub fn new(n: usize) -> FilterCounts {
        FilterCounts {
            packets: vec![0; n],
            bytes: vec![0; n],
        }
    }

    /// Counts `packets` packets of `bytes` bytes for every expression whose bit is set.
    #[inline]
    pub fn add(&mut self, mut mask: u128, packets: u64, bytes: u64) {
        mask &= !USE_FLOW_BITS;
        while mask != 0 {
            let i = mask.trailing_zeros() as usize;
            mask &= mask - 1;
            if let (Some(p), Some(b)) = (self.packets.get_mut(i), self.bytes.get_mut(i)) {
                *p += packets;
                *b += bytes;
            }
        }
    }

    pub fn merge(&mut self, o: &FilterCounts) {
        if self.packets.len() < o.packets.len() {
            self.packets.resize(o.packets.len(), 0);
            self.bytes.resize(o.bytes.len(), 0);
        }
        for (a, b) in self.packets.iter_mut().zip(&o.packets) {
            *a += b;
        }
        for (a, b) in self.bytes.iter_mut().zip(&o.bytes) {
            *a += b;
        }
    }

    pub fn is_zero(&self) -> bool {
        self.packets.iter().all(|&p| p == 0)
    }

    pub fn clear(&mut self) {
        self.packets.iter_mut().for_each(|p| *p = 0);
        self.bytes.iter_mut().for_each(|b| *b = 0);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn spec_parsing_and_errors() {
        let s = FilterSetSpec::parse("web=http:tcp port 80;tls:tcp port 443").unwrap();
        assert_eq!(s.name, "web");
        assert_eq!(
            s.lines,
            vec![
                ("http".to_string(), "tcp port 80".to_string()),
                ("tls".to_string(), "tcp port 443".to_string())
            ]
        );
        for (bad, says) in [
            ("web", "expected NAME=LABEL:EXPR"),
            ("=a:tcp", "set name ''"),
            ("web=tcp port 80", "has no label"),
            ("web=a:tcp;a:udp", "label 'a' is given twice"),
            ("web=a:", "empty expression"),
            ("w b=a:tcp", "set name 'w b'"),
            ("web=;", "no expression"),
        ] {
            let e = FilterSetSpec::parse(bad).unwrap_err().0;
            assert!(e.contains(says), "{bad}: {e}");
            assert!(e.starts_with("--filter-set '"), "{e}");
        }
    }

    #[test]
    fn bad_expression_names_set_label_and_libpcap_message() {
        let s = FilterSetSpec::parse("web=http:tcp prot 80").unwrap();
        let e = FilterSets::compile(&[s]).unwrap_err().0;
        assert!(e.contains("'web'") && e.contains("'http'"), "{e}");
        assert!(e.contains("tcp prot 80"), "{e}");
        assert!(e.contains("syntax error"), "{e}");
    }

    #[test]
    fn counts_add_bit_by_bit() {
        let mut c = FilterCounts::new(3);
        c.add(0b101 | USE_FLOW_BITS, 1, 60);
        c.add(0b100, 2, 100);
        assert_eq!(c.packets, vec![1, 0, 3]);
        assert_eq!(c.bytes, vec![60, 0, 160]);
    }
}
