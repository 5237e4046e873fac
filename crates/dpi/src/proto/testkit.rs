//! What the detectors' tests share: packets from hex and capture text, packets of a test flow
//! ([`Ends`]), feeding a conversation the way the engine does ([`feed`]), and one never-panics
//! routine ([`Fuzz`]) so every detector is shaken the same way.

pub(crate) use crate::types::L4;
use crate::types::{Flow, Pkt, Verdict};

/// A detector's entry point (the `run` of [`super::Detector`]).
pub(crate) type Detect = fn(&Pkt<'_>, &mut Flow) -> Verdict;

/// A conversation: (sent by the client, payload) per packet.
pub(crate) type Conv = Vec<(bool, Vec<u8>)>;

/// Bytes from a hex string (as tshark prints payloads); whitespace is ignored.
pub(crate) fn hex(s: &str) -> Vec<u8> {
    let s: Vec<u8> = s.bytes().filter(|b| !b.is_ascii_whitespace()).collect();
    s.chunks(2)
        .map(|d| u8::from_str_radix(std::str::from_utf8(d).unwrap(), 16).unwrap())
        .collect()
}

/// A conversation from `testdata/*.txt`: one packet a line, `c`/`s` (direction) then the
/// payload in hex.
pub(crate) fn packets(text: &str) -> Conv {
    text.lines()
        .filter_map(|l| l.split_once(' '))
        .map(|(d, h)| (d == "c", hex(h)))
        .collect()
}

/// Transport and ports of a test flow; its packets come from [`Ends::pkt`].
#[derive(Clone, Copy, Debug)]
pub(crate) struct Ends {
    pub l4: L4,
    pub client_port: u16,
    pub server_port: u16,
}

pub(crate) const fn ends(l4: L4, client_port: u16, server_port: u16) -> Ends {
    Ends {
        l4,
        client_port,
        server_port,
    }
}

pub(crate) const fn tcp(client_port: u16, server_port: u16) -> Ends {
    ends(L4::Tcp, client_port, server_port)
}

pub(crate) const fn udp(client_port: u16, server_port: u16) -> Ends {
    ends(L4::Udp, client_port, server_port)
}

impl Ends {
    /// A packet of this flow: `index` payload packets came before it.
    pub(crate) fn pkt(self, payload: &[u8], from_client: bool, index: u8) -> Pkt<'_> {
        Pkt {
            payload,
            l4: self.l4,
            from_client,
            client_port: self.client_port,
            server_port: self.server_port,
            index,
            // One millisecond apart.
            ts_ns: 1_700_000_000_000_000_000 + index as u64 * 1_000_000,
        }
    }
}

/// Feeds `conv` to one detector the way the engine does once only it is left: packet `i` has
/// index `i`, and it stops after `No` or `Is { done: true }`. Returns the verdicts.
pub(crate) fn feed(
    detect: Detect,
    e: Ends,
    f: &mut Flow,
    conv: &[(bool, Vec<u8>)],
) -> Vec<Verdict> {
    let mut out = Vec::new();
    for (i, (c, p)) in conv.iter().enumerate() {
        let v = detect(&e.pkt(p, *c, i as u8), f);
        out.push(v);
        match v {
            Verdict::No | Verdict::Is { done: true, .. } => break,
            // As the engine does: the owner sees its own label on later packets.
            Verdict::Is { proto, .. } => f.l7.proto = proto,
            Verdict::Unsure => {}
        }
    }
    out
}

/// xorshift64: the tests' random bytes, the same on every run.
pub(crate) struct Rng(u64);

impl Rng {
    pub(crate) fn new(seed: u64) -> Rng {
        Rng(seed.max(1))
    }

    pub(crate) fn next(&mut self) -> u64 {
        self.0 ^= self.0 << 13;
        self.0 ^= self.0 >> 7;
        self.0 ^= self.0 << 17;
        self.0
    }

    /// A number in `0..n` (0 when `n` is 0).
    pub(crate) fn below(&mut self, n: usize) -> usize {
        if n == 0 {
            0
        } else {
            (self.next() % n as u64) as usize
        }
    }

    pub(crate) fn bytes(&mut self, n: usize) -> Vec<u8> {
        (0..n).map(|_| self.next() as u8).collect()
    }
}

/// Packet sequences (direction, index) a cut or generated payload is also fed in, alone in a
/// fresh flow: first or later packet, from either side.
const ALONE: [(bool, u8); 6] = [
    (true, 0),
    (false, 0),
    (true, 1),
    (false, 1),
    (true, 5),
    (false, 9),
];

/// The never-panics test of a detector: real conversations cut at every byte, mutated (bit
/// flips, random bytes) and with random tails, plus generated payloads, over every `ends`
/// and starting state. It passes when nothing panics and `check` holds after every call.
pub(crate) struct Fuzz {
    ends: Vec<Ends>,
    starts: Vec<Flow>,
    flows: Vec<Conv>,
    payloads: Vec<Vec<u8>>,
    cut_step: usize,
    mutations: usize,
    check: fn(&Flow),
}

impl Fuzz {
    pub(crate) fn new(ends: &[Ends]) -> Fuzz {
        Fuzz {
            ends: ends.to_vec(),
            starts: vec![Flow::default()],
            flows: Vec::new(),
            payloads: Vec::new(),
            cut_step: 1,
            mutations: 16,
            check: |_| {},
        }
    }

    /// Real payloads, each a one-packet conversation from the client.
    pub(crate) fn seeds(mut self, seeds: impl IntoIterator<Item = Vec<u8>>) -> Fuzz {
        self.flows
            .extend(seeds.into_iter().map(|s| vec![(true, s)]));
        self
    }

    /// A real conversation: each packet is cut after the real ones before it.
    pub(crate) fn flow(mut self, conv: Conv) -> Fuzz {
        self.flows.push(conv);
        self
    }

    /// Generated payloads (e.g. a valid header with a random body), fed whole.
    pub(crate) fn payloads(mut self, payloads: impl IntoIterator<Item = Vec<u8>>) -> Fuzz {
        self.payloads.extend(payloads);
        self
    }

    /// Also start from `f` (a label or per-protocol state set), besides a fresh flow.
    pub(crate) fn start(mut self, f: Flow) -> Fuzz {
        self.starts.push(f);
        self
    }

    /// Cut the real packets every `n` bytes only (for costly detectors, e.g. decryption).
    pub(crate) fn cut_step(mut self, n: usize) -> Fuzz {
        self.cut_step = n.max(1);
        self
    }

    /// Mutated copies (and random tails) per real conversation (default 16).
    pub(crate) fn mutations(mut self, n: usize) -> Fuzz {
        self.mutations = n;
        self
    }

    /// Checked after every call (e.g. a buffer's cap).
    pub(crate) fn check(mut self, check: fn(&Flow)) -> Fuzz {
        self.check = check;
        self
    }

    pub(crate) fn run(self, detect: Detect) {
        let call = |f: &mut Flow, e: Ends, d: &[u8], c: bool, i: usize| {
            let _ = detect(&e.pkt(d, c, i.min(255) as u8), f);
            (self.check)(f);
        };
        let alone = |d: &[u8]| {
            for &e in &self.ends {
                for start in &self.starts {
                    for (c, i) in ALONE {
                        call(&mut start.clone(), e, d, c, i.into());
                    }
                }
            }
        };
        let mut rng = Rng::new(0x9e37_79b9_7f4a_7c15);
        for conv in &self.flows {
            // Every prefix of every packet, after the real packets before it, then the rest of
            // the packet as the next segment; and alone.
            for (k, (c, b)) in conv.iter().enumerate() {
                let cuts = (0..=b.len()).step_by(self.cut_step).chain([b.len()]);
                for cut in cuts {
                    for &e in &self.ends {
                        for start in &self.starts {
                            let mut f = start.clone();
                            for (i, (c, b)) in conv[..k].iter().enumerate() {
                                call(&mut f, e, b, *c, i);
                            }
                            call(&mut f, e, &b[..cut], *c, k);
                            call(&mut f, e, &b[cut..], *c, k + 1);
                        }
                    }
                    alone(&b[..cut]);
                }
            }
            // Mutated copies: a few bits flipped, or a few bytes replaced (lengths included).
            for round in 0..self.mutations {
                let mut m = conv.clone();
                for (_, b) in &mut m {
                    for _ in 0..=rng.below(7) {
                        let at = rng.below(b.len());
                        if let Some(x) = b.get_mut(at) {
                            *x = if round % 2 == 0 {
                                *x ^ (1 << rng.below(8))
                            } else {
                                rng.next() as u8
                            };
                        }
                    }
                }
                for &e in &self.ends {
                    for start in &self.starts {
                        let mut f = start.clone();
                        for (i, (c, b)) in m.iter().enumerate() {
                            call(&mut f, e, b, *c, i);
                        }
                    }
                }
            }
            // Random tails: a real start, then random bytes of a random length.
            for (_, b) in conv {
                for _ in 0..self.mutations {
                    let keep = rng.below(b.len() + 1);
                    let mut t = b[..keep].to_vec();
                    let n = rng.below(b.len() - keep + 64);
                    t.extend(rng.bytes(n));
                    alone(&t);
                }
            }
        }
        for p in &self.payloads {
            for &e in &self.ends {
                for start in &self.starts {
                    let mut f = start.clone();
                    for i in 0..4 {
                        call(&mut f, e, p, i % 2 == 0, i);
                    }
                }
            }
            alone(p);
        }
    }
}
