//! Classic BPF programs compiled by libpcap and run by an interpreter of our own.
//!
//! libpcap compiles the tcpdump expression; this module runs the resulting instructions with
//! exactly the semantics of libpcap's userland `bpf_filter()` (bpf_filter.c, which tcpdump -r
//! uses through `pcap_offline_filter`), so a count of matches equals the packets that
//! `tcpdump -r FILE 'EXPR'` prints (`--count`).
//!
//! Why not `pcap::BpfProgram::filter`: it passes the captured length as the wire length too,
//! which changes `less`, `greater` and `len` on captures truncated by a snaplen, and it costs an
//! FFI call per packet. Here the caller passes both lengths, as tcpdump does, and the hot loop
//! stays in Rust.
//!
//! Programs are checked once when built (libpcap's `bpf_validate` rules, plus: every opcode
//! must be one the interpreter knows), and the interpreter still checks every index at run
//! time, so no program and no packet can make it panic: anything off the rails ends the
//! program with 0, no match.

use sonde_wire::LinkType;

/// One classic BPF instruction, as in `struct bpf_insn`.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
struct Insn {
    code: u16,
    jt: u8,
    jf: u8,
    k: u32,
}

/// Scratch memory words (`BPF_MEMWORDS`).
const MEMWORDS: usize = 16;

/// The opcodes libpcap's interpreter knows (class | size | mode, or class | op | source).
/// Any other code makes libpcap abort(); we refuse it when building a program.
mod op {
    pub const LD_W_ABS: u16 = 0x20;
    pub const LD_H_ABS: u16 = 0x28;
    pub const LD_B_ABS: u16 = 0x30;
    pub const LD_W_IND: u16 = 0x40;
    pub const LD_H_IND: u16 = 0x48;
    pub const LD_B_IND: u16 = 0x50;
    pub const LD_W_LEN: u16 = 0x80;
    pub const LD_IMM: u16 = 0x00;
    pub const LD_MEM: u16 = 0x60;
    pub const LDX_W_LEN: u16 = 0x81;
    pub const LDX_IMM: u16 = 0x01;
    pub const LDX_MEM: u16 = 0x61;
    pub const LDX_MSH_B: u16 = 0xb1;
    pub const ST: u16 = 0x02;
    pub const STX: u16 = 0x03;

    pub const ADD_K: u16 = 0x04;
    pub const SUB_K: u16 = 0x14;
    pub const MUL_K: u16 = 0x24;
    pub const DIV_K: u16 = 0x34;
    pub const OR_K: u16 = 0x44;
    pub const AND_K: u16 = 0x54;
    pub const LSH_K: u16 = 0x64;
    pub const RSH_K: u16 = 0x74;
    pub const NEG: u16 = 0x84;
    pub const MOD_K: u16 = 0x94;
    pub const XOR_K: u16 = 0xa4;
    pub const ADD_X: u16 = 0x0c;
    pub const SUB_X: u16 = 0x1c;
    pub const MUL_X: u16 = 0x2c;
    pub const DIV_X: u16 = 0x3c;
    pub const OR_X: u16 = 0x4c;
    pub const AND_X: u16 = 0x5c;
    pub const LSH_X: u16 = 0x6c;
    pub const RSH_X: u16 = 0x7c;
    pub const MOD_X: u16 = 0x9c;
    pub const XOR_X: u16 = 0xac;

    pub const JA: u16 = 0x05;
    pub const JEQ_K: u16 = 0x15;
    pub const JGT_K: u16 = 0x25;
    pub const JGE_K: u16 = 0x35;
    pub const JSET_K: u16 = 0x45;
    pub const JEQ_X: u16 = 0x1d;
    pub const JGT_X: u16 = 0x2d;
    pub const JGE_X: u16 = 0x3d;
    pub const JSET_X: u16 = 0x4d;

    pub const RET_K: u16 = 0x06;
    pub const RET_A: u16 = 0x16;

    pub const TAX: u16 = 0x07;
    pub const TXA: u16 = 0x87;

    /// Instruction class (low three bits).
    pub const fn class(code: u16) -> u16 {
        code & 0x07
    }
    pub const CLASS_RET: u16 = 0x06;
}

/// A classic BPF program compiled by libpcap for one link type.
#[derive(Clone, Debug)]
pub struct Program {
    insns: Vec<Insn>,
}

impl Program {
    /// Compiles `expr` (tcpdump syntax) for `link` with libpcap (optimised, as tcpdump does);
    /// the error is libpcap's own message, e.g. "syntax error".
    pub fn compile(expr: &str, link: LinkType) -> Result<Program, String> {
        let dead = pcap::Capture::dead(pcap::Linktype(dlt(link))).map_err(pcap_message)?;
        let compiled = dead.compile(expr, true).map_err(pcap_message)?;
        // The pcap crate keeps `bpf_insn`'s fields private but prints them as "code jt jf k".
        let insns = compiled
            .get_instructions()
            .iter()
            .map(|insn| parse_insn(&insn.to_string()))
            .collect::<Result<Vec<_>, _>>()?;
        Program::from_insns(insns)
    }

    /// A program from raw `(code, jt, jf, k)` instructions, checked as a compiled one is: for
    /// the fuzzer, which hands the interpreter programs libpcap would never write.
    pub fn from_raw(insns: &[(u16, u8, u8, u32)]) -> Result<Program, String> {
        Program::from_insns(
            insns
                .iter()
                .map(|&(code, jt, jf, k)| Insn { code, jt, jf, k })
                .collect(),
        )
    }

    /// Builds a program from instructions, refusing what libpcap's `bpf_validate` refuses and
    /// any opcode the interpreter does not know.
    fn from_insns(insns: Vec<Insn>) -> Result<Program, String> {
        validate(&insns)?;
        Ok(Program { insns })
    }

    /// The instructions as `(code, jt, jf, k)`, e.g. to attach them to a socket.
    pub fn instructions(&self) -> impl Iterator<Item = (u16, u8, u8, u32)> + '_ {
        self.insns.iter().map(|i| (i.code, i.jt, i.jf, i.k))
    }

    /// Runs the program over a frame of which `pkt` was captured and `wire_len` bytes were on
    /// the wire (what tcpdump passes as caplen and len). True when it returns non-zero.
    #[inline]
    pub fn matches(&self, pkt: &[u8], wire_len: u32) -> bool {
        run(&self.insns, pkt, wire_len) != 0
    }

    /// Number of instructions (for tests and for deciding what is cheap).
    pub fn len(&self) -> usize {
        self.insns.len()
    }

    /// Never true for a built program (it ends with a return); here for API symmetry.
    pub fn is_empty(&self) -> bool {
        self.insns.is_empty()
    }
}

/// The DLT value libpcap compiles for, which is not always the file's LINKTYPE value:
/// libpcap maps LINKTYPE_RAW (101) to the platform's DLT_RAW when it reads a file, and
/// refuses to compile for 101 ("unknown data link type").
fn dlt(link: LinkType) -> i32 {
    link.to_dlt() as i32
}

/// libpcap's message without the pcap crate's "libpcap error: " prefix.
fn pcap_message(e: pcap::Error) -> String {
    match e {
        pcap::Error::PcapError(msg) => msg,
        other => other.to_string(),
    }
}

fn parse_insn(text: &str) -> Result<Insn, String> {
    let bad = || format!("unexpected BPF instruction text {text:?}");
    let mut fields = text.split_ascii_whitespace();
    let mut next = || fields.next().ok_or_else(bad);
    let insn = Insn {
        code: next()?.parse().map_err(|_| bad())?,
        jt: next()?.parse().map_err(|_| bad())?,
        jf: next()?.parse().map_err(|_| bad())?,
        k: next()?.parse().map_err(|_| bad())?,
    };
    if fields.next().is_some() {
        return Err(bad());
    }
    Ok(insn)
}

/// libpcap's `bpf_validate` (userland): memory words in range, no division or modulo by a
/// constant 0, jump targets inside the program, last instruction a return. Backward `ja` is
/// allowed, as libpcap allows it: `protochain` loops with it.
fn validate(insns: &[Insn]) -> Result<(), String> {
    use op::*;
    let len = insns.len();
    if len == 0 {
        return Err("empty BPF program".into());
    }
    let in_program = |target: u64| target < len as u64;
    for (i, insn) in insns.iter().enumerate() {
        let bad = |why: &str| Err(format!("invalid BPF instruction {i} ({insn:?}): {why}"));
        let k = insn.k;
        match insn.code {
            LD_MEM | LDX_MEM | ST | STX if k as usize >= MEMWORDS => {
                return bad("scratch memory index out of range")
            }
            DIV_K | MOD_K if k == 0 => return bad("division by constant 0"),
            JA => {
                // libpcap adds in u32, so a negative offset wraps to an earlier instruction.
                let target = (i as u32).wrapping_add(1).wrapping_add(k);
                if !in_program(u64::from(target)) {
                    return bad("jump out of the program");
                }
            }
            JEQ_K | JGT_K | JGE_K | JSET_K | JEQ_X | JGT_X | JGE_X | JSET_X => {
                let from = i as u64 + 1;
                if !in_program(from + u64::from(insn.jt)) || !in_program(from + u64::from(insn.jf))
                {
                    return bad("jump out of the program");
                }
            }
            LD_W_ABS | LD_H_ABS | LD_B_ABS | LD_W_IND | LD_H_IND | LD_B_IND | LD_W_LEN | LD_IMM
            | LD_MEM | LDX_W_LEN | LDX_IMM | LDX_MEM | LDX_MSH_B | ST | STX | ADD_K | SUB_K
            | MUL_K | DIV_K | OR_K | AND_K | LSH_K | RSH_K | NEG | MOD_K | XOR_K | ADD_X
            | SUB_X | MUL_X | DIV_X | OR_X | AND_X | LSH_X | RSH_X | MOD_X | XOR_X | RET_K
            | RET_A | TAX | TXA => {}
            _ => return bad("unknown opcode"),
        }
    }
    if class(insns[len - 1].code) != CLASS_RET {
        return Err("BPF program does not end with a return".into());
    }
    Ok(())
}

/// `N` big-endian bytes at `base + add` of the captured bytes, or `None` when they are not all
/// there. The offset is computed without wrapping: libpcap checks `X + k` for overflow too.
#[inline(always)]
fn bytes<const N: usize>(pkt: &[u8], base: u32, add: u32) -> Option<&[u8; N]> {
    let off = (base as usize).checked_add(add as usize)?;
    pkt.get(off..)?.first_chunk::<N>()
}

/// libpcap's `pcap_filter`: the program's return value (0 = drop).
fn run(insns: &[Insn], pkt: &[u8], wire_len: u32) -> u32 {
    use op::*;
    let mut a: u32 = 0;
    let mut x: u32 = 0;
    let mut mem = [0u32; MEMWORDS];
    let mut pc: usize = 0;
    // libpcap emits backward jumps only for `protochain`, whose loop reads one header per pass
    // at an offset that depends only on the previous one. More passes than captured bytes means
    // an offset came round again, where libpcap itself would spin forever: stop with no match.
    let mut back_jumps_left = pkt.len();

    // `?`-style exits: a load outside the captured bytes, a bad index or opcode returns 0.
    macro_rules! load {
        ($n:literal, $base:expr, $add:expr) => {
            match bytes::<$n>(pkt, $base, $add) {
                Some(b) => b,
                None => return 0,
            }
        };
    }
    macro_rules! mem {
        ($k:expr) => {
            match mem.get_mut($k as usize) {
                Some(m) => m,
                None => return 0,
            }
        };
    }

    loop {
        let Some(&Insn { code, jt, jf, k }) = insns.get(pc) else {
            return 0;
        };
        pc += 1;
        match code {
            RET_K => return k,
            RET_A => return a,

            LD_W_ABS => a = u32::from_be_bytes(*load!(4, k, 0)),
            LD_H_ABS => a = u32::from(u16::from_be_bytes(*load!(2, k, 0))),
            LD_B_ABS => a = u32::from(load!(1, k, 0)[0]),
            LD_W_IND => a = u32::from_be_bytes(*load!(4, x, k)),
            LD_H_IND => a = u32::from(u16::from_be_bytes(*load!(2, x, k))),
            LD_B_IND => a = u32::from(load!(1, x, k)[0]),
            LD_W_LEN => a = wire_len,
            LDX_W_LEN => x = wire_len,
            LD_IMM => a = k,
            LDX_IMM => x = k,
            LD_MEM => a = *mem!(k),
            LDX_MEM => x = *mem!(k),
            // IPv4 header length: 4 * (low nibble of the byte at k).
            LDX_MSH_B => x = u32::from(load!(1, k, 0)[0] & 0x0f) << 2,
            ST => *mem!(k) = a,
            STX => *mem!(k) = x,

            ADD_K => a = a.wrapping_add(k),
            SUB_K => a = a.wrapping_sub(k),
            MUL_K => a = a.wrapping_mul(k),
            // A constant 0 is refused when building (libpcap's interpreter would trap).
            DIV_K => match a.checked_div(k) {
                Some(q) => a = q,
                None => return 0,
            },
            MOD_K => match a.checked_rem(k) {
                Some(r) => a = r,
                None => return 0,
            },
            AND_K => a &= k,
            OR_K => a |= k,
            XOR_K => a ^= k,
            // libpcap shifts by a constant with the C operator, which x86-64 masks to 5 bits
            // (libpcap's compiler refuses constants above 31 anyway).
            LSH_K => a = a.wrapping_shl(k),
            RSH_K => a = a.wrapping_shr(k),
            NEG => a = a.wrapping_neg(),
            ADD_X => a = a.wrapping_add(x),
            SUB_X => a = a.wrapping_sub(x),
            MUL_X => a = a.wrapping_mul(x),
            // Division or modulo by a zero X ends the program with 0.
            DIV_X => match a.checked_div(x) {
                Some(q) => a = q,
                None => return 0,
            },
            MOD_X => match a.checked_rem(x) {
                Some(r) => a = r,
                None => return 0,
            },
            AND_X => a &= x,
            OR_X => a |= x,
            XOR_X => a ^= x,
            // libpcap checks a shift by X: 32 or more shifts every bit out.
            LSH_X => a = a.checked_shl(x).unwrap_or(0),
            RSH_X => a = a.checked_shr(x).unwrap_or(0),

            JA => {
                // Sign-extended, as libpcap does, for protochain's backward jumps.
                let off = k as i32;
                if off < 0 {
                    if back_jumps_left == 0 {
                        return 0;
                    }
                    back_jumps_left -= 1;
                }
                // A target before 0 wraps to a huge index, which `get` above refuses.
                pc = pc.wrapping_add_signed(off as isize);
            }
            JEQ_K => pc += usize::from(if a == k { jt } else { jf }),
            JGT_K => pc += usize::from(if a > k { jt } else { jf }),
            JGE_K => pc += usize::from(if a >= k { jt } else { jf }),
            JSET_K => pc += usize::from(if a & k != 0 { jt } else { jf }),
            JEQ_X => pc += usize::from(if a == x { jt } else { jf }),
            JGT_X => pc += usize::from(if a > x { jt } else { jf }),
            JGE_X => pc += usize::from(if a >= x { jt } else { jf }),
            JSET_X => pc += usize::from(if a & x != 0 { jt } else { jf }),

            TAX => x = a,
            TXA => a = x,

            // libpcap aborts; refused when building.
            _ => return 0,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::op::*;
    use super::*;
    use std::collections::HashMap;
    use std::path::{Path, PathBuf};

    fn insn(code: u16, jt: u8, jf: u8, k: u32) -> Insn {
        Insn { code, jt, jf, k }
    }

    /// A statement (no jump offsets).
    fn s(code: u16, k: u32) -> Insn {
        insn(code, 0, 0, k)
    }

    fn program(insns: &[Insn]) -> Program {
        Program::from_insns(insns.to_vec()).expect("valid program")
    }

    /// The program's return value (what `matches` compares with 0).
    fn ret(insns: &[Insn], pkt: &[u8], wire_len: u32) -> u32 {
        run(&program(insns).insns, pkt, wire_len)
    }

    /// Bytes 0, 1, 2, ... 63.
    fn counting() -> Vec<u8> {
        (0..64).collect()
    }

    #[test]
    fn bpf_absolute_loads_are_big_endian_and_bounded() {
        let pkt = counting();
        let load = |code, k| ret(&[s(code, k), s(RET_A, 0)], &pkt, 64);
        assert_eq!(load(LD_W_ABS, 60), 0x3c3d_3e3f);
        assert_eq!(load(LD_H_ABS, 62), 0x3e3f);
        assert_eq!(load(LD_B_ABS, 63), 0x3f);
        // Bytes past the captured data end the program with 0.
        assert_eq!(load(LD_W_ABS, 61), 0);
        assert_eq!(load(LD_H_ABS, 63), 0);
        assert_eq!(load(LD_B_ABS, 64), 0);
        assert_eq!(load(LD_W_ABS, u32::MAX), 0);
        assert_eq!(load(LD_W_ABS, u32::MAX - 2), 0);
        // A failed load returns 0 even where the program would have accepted.
        let p = program(&[s(LD_B_ABS, 64), s(RET_K, 1)]);
        assert!(!p.matches(&pkt, 64));
        assert!(
            !p.matches(&pkt, 1500),
            "the wire length does not make bytes captured"
        );
        assert!(p.matches(&[0; 65], 65));
        assert!(!p.matches(&[], 0));
    }

    #[test]
    fn bpf_indirect_loads_add_x_without_wrapping() {
        let pkt = counting();
        let load = |code, x, k| ret(&[s(LDX_IMM, x), s(code, k), s(RET_A, 0)], &pkt, 64);
        assert_eq!(load(LD_W_IND, 2, 1), 0x0304_0506);
        assert_eq!(load(LD_H_IND, 60, 2), 0x3e3f);
        assert_eq!(load(LD_B_IND, 63, 0), 0x3f);
        assert_eq!(load(LD_W_IND, 30, 31), 0);
        assert_eq!(load(LD_H_IND, 0, 63), 0);
        assert_eq!(load(LD_B_IND, 64, 0), 0);
        // X + k overflowing u32 must not wrap round to a valid offset (libpcap checks it too).
        for code in [LD_W_IND, LD_H_IND, LD_B_IND] {
            for (x, k) in [(u32::MAX, 1), (1, u32::MAX), (0x8000_0000, 0x8000_0000)] {
                let p = program(&[s(LDX_IMM, x), s(code, k), s(RET_K, 1)]);
                assert!(!p.matches(&pkt, 64), "code {code:#x} x {x:#x} k {k:#x}");
            }
        }
    }

    #[test]
    fn bpf_len_loads_the_wire_length() {
        let pkt = counting();
        assert_eq!(ret(&[s(LD_W_LEN, 0), s(RET_A, 0)], &pkt, 1500), 1500);
        let p = [s(LDX_W_LEN, 0), s(TXA, 0), s(RET_A, 0)];
        assert_eq!(ret(&p, &pkt, 9000), 9000);
    }

    #[test]
    fn bpf_msh_loads_four_times_the_low_nibble() {
        let mut pkt = counting();
        pkt[14] = 0x46;
        assert_eq!(
            ret(&[s(LDX_MSH_B, 14), s(TXA, 0), s(RET_A, 0)], &pkt, 64),
            24
        );
        let p = program(&[s(LDX_MSH_B, 64), s(RET_K, 1)]);
        assert!(!p.matches(&pkt, 64));
    }

    #[test]
    fn bpf_immediates_scratch_memory_and_register_moves() {
        let pkt = counting();
        let p = [
            s(LD_IMM, 7),
            s(ST, 3),
            s(LDX_IMM, 9),
            s(STX, 15),
            s(LD_MEM, 15), // A = 9
            s(TAX, 0),     // X = 9
            s(LD_IMM, 100),
            s(TXA, 0),     // A = 9
            s(LDX_MEM, 3), // X = 7
            s(SUB_X, 0),   // A = 2
            s(RET_A, 0),
        ];
        assert_eq!(ret(&p, &pkt, 64), 2);
        // Scratch memory starts at 0 on every run.
        assert_eq!(ret(&[s(LD_MEM, 0), s(RET_A, 0)], &pkt, 64), 0);
    }

    #[test]
    fn bpf_alu_operations() {
        // (K opcode, X opcode, A, operand, result)
        let cases: &[(u16, u16, u32, u32, u32)] = &[
            (ADD_K, ADD_X, u32::MAX, 2, 1),
            (SUB_K, SUB_X, 1, 2, u32::MAX),
            (MUL_K, MUL_X, 0x8000_0001, 2, 2),
            (DIV_K, DIV_X, 17, 5, 3),
            (MOD_K, MOD_X, 17, 5, 2),
            (AND_K, AND_X, 0xf0f0, 0xff00, 0xf000),
            (OR_K, OR_X, 0xf0f0, 0xff00, 0xfff0),
            (XOR_K, XOR_X, 0xf0f0, 0xff00, 0x0ff0),
            (LSH_K, LSH_X, 0x8000_0001, 4, 0x10),
            (RSH_K, RSH_X, 0x8000_0001, 4, 0x0800_0000),
            (LSH_K, LSH_X, 1, 31, 0x8000_0000),
            (RSH_K, RSH_X, 0x8000_0000, 31, 1),
        ];
        let pkt = counting();
        for &(kop, xop, a, operand, want) in cases {
            let by_k = [s(LD_IMM, a), s(kop, operand), s(RET_A, 0)];
            assert_eq!(ret(&by_k, &pkt, 64), want, "{kop:#x} {a:#x} {operand:#x}");
            let by_x = [s(LD_IMM, a), s(LDX_IMM, operand), s(xop, 0), s(RET_A, 0)];
            assert_eq!(ret(&by_x, &pkt, 64), want, "{xop:#x} {a:#x} {operand:#x}");
        }
        assert_eq!(
            ret(&[s(LD_IMM, 5), s(NEG, 0), s(RET_A, 0)], &pkt, 64),
            5u32.wrapping_neg()
        );
        assert_eq!(ret(&[s(LD_IMM, 0), s(NEG, 0), s(RET_A, 0)], &pkt, 64), 0);
    }

    #[test]
    fn bpf_shifts_of_32_or_more_behave_as_libpcap() {
        // libpcap 1.10 checks a shift by X (>= 32 gives 0) but shifts by k with C's `<<`,
        // which x86-64 masks to 5 bits (checked against the system libpcap's bpf_filter).
        let pkt = counting();
        for x in [32, 33, u32::MAX] {
            let lsh = [s(LD_IMM, 1), s(LDX_IMM, x), s(LSH_X, 0), s(RET_A, 0)];
            assert_eq!(ret(&lsh, &pkt, 64), 0);
            let rsh = [
                s(LD_IMM, 0x8000_0000),
                s(LDX_IMM, x),
                s(RSH_X, 0),
                s(RET_A, 0),
            ];
            assert_eq!(ret(&rsh, &pkt, 64), 0);
        }
        assert_eq!(ret(&[s(LD_IMM, 1), s(LSH_K, 32), s(RET_A, 0)], &pkt, 64), 1);
        assert_eq!(ret(&[s(LD_IMM, 1), s(LSH_K, 33), s(RET_A, 0)], &pkt, 64), 2);
        let rsh = [s(LD_IMM, 0x8000_0000), s(RSH_K, 33), s(RET_A, 0)];
        assert_eq!(ret(&rsh, &pkt, 64), 0x4000_0000);
    }

    #[test]
    fn bpf_division_by_zero_returns_no_match() {
        let pkt = counting();
        for op in [DIV_X, MOD_X] {
            let p = program(&[s(LD_IMM, 7), s(LDX_IMM, 0), s(op, 0), s(RET_K, 1)]);
            assert!(!p.matches(&pkt, 64));
            let p = program(&[s(LD_IMM, 7), s(LDX_IMM, 1), s(op, 0), s(RET_K, 1)]);
            assert!(p.matches(&pkt, 64));
        }
        // A constant divisor of 0 is refused up front, as libpcap's validator does.
        for op in [DIV_K, MOD_K] {
            assert!(Program::from_insns(vec![s(op, 0), s(RET_K, 1)]).is_err());
            // And the interpreter stays safe if such a program gets through anyway.
            assert_eq!(run(&[s(op, 0), s(RET_K, 1)], &pkt, 64), 0);
        }
    }

    #[test]
    fn bpf_conditional_jumps() {
        let pkt = counting();
        // (opcode, A, operand, taken)
        let cases: &[(u16, u32, u32, bool)] = &[
            (JEQ_K, 5, 5, true),
            (JEQ_K, 5, 6, false),
            (JGT_K, 6, 5, true),
            (JGT_K, 5, 5, false),
            (JGE_K, 5, 5, true),
            (JGE_K, 4, 5, false),
            (JSET_K, 0b0110, 0b0100, true),
            (JSET_K, 0b0110, 0b1001, false),
            (JGT_K, u32::MAX, 0x7fff_ffff, true), // unsigned comparison
        ];
        for &(op, a, operand, taken) in cases {
            let want = if taken { 10 } else { 20 };
            let by_k = [
                s(LD_IMM, a),
                insn(op, 1, 0, operand),
                s(RET_K, 20),
                s(RET_K, 10),
            ];
            assert_eq!(ret(&by_k, &pkt, 64), want, "{op:#x} {a} {operand}");
            let by_x = [
                s(LD_IMM, a),
                s(LDX_IMM, operand),
                insn(op | 0x08, 1, 0, 0),
                s(RET_K, 20),
                s(RET_K, 10),
            ];
            assert_eq!(ret(&by_x, &pkt, 64), want, "{:#x} {a} {operand}", op | 0x08);
        }
    }

    #[test]
    fn bpf_unconditional_jumps_forward_and_back() {
        let pkt = counting();
        let p = [s(JA, 1), s(RET_K, 0), s(RET_K, 7)];
        assert_eq!(ret(&p, &pkt, 64), 7);
        // A = 0; loop: A += 1; if A == 5 return A; jump back (as protochain does).
        let count_to_five = [
            s(LD_IMM, 0),
            s(ADD_K, 1),
            insn(JEQ_K, 1, 0, 5),
            s(JA, (-3i32) as u32),
            s(RET_A, 0),
        ];
        assert_eq!(ret(&count_to_five, &pkt, 64), 5);
        // A loop that never ends (libpcap would spin) stops with no match.
        let spin = program(&[s(JA, u32::MAX), s(RET_K, 1)]);
        assert!(!spin.matches(&pkt, 64));
        assert!(!spin.matches(&[], 0));
    }

    #[test]
    fn bpf_returns() {
        let pkt = counting();
        assert!(program(&[s(RET_K, 262_144)]).matches(&pkt, 64));
        assert!(!program(&[s(RET_K, 0)]).matches(&pkt, 64));
        assert!(program(&[s(RET_K, 0x8000_0000)]).matches(&pkt, 64));
        assert!(program(&[s(LD_B_ABS, 1), s(RET_A, 0)]).matches(&pkt, 64));
        assert!(!program(&[s(LD_B_ABS, 0), s(RET_A, 0)]).matches(&pkt, 64));
        assert_eq!(ret(&[s(LD_H_ABS, 0), s(RET_A, 0)], &pkt, 64), 0x0001);
    }

    #[test]
    fn bpf_validation_follows_libpcap() {
        let bad: &[&[Insn]] = &[
            &[],
            &[s(LD_IMM, 1)],                       // does not end with a return
            &[s(LD_MEM, 16), s(RET_K, 1)],         // scratch index out of range
            &[s(ST, 16), s(RET_K, 1)],             //
            &[s(LDX_MEM, u32::MAX), s(RET_K, 1)],  //
            &[s(STX, 16), s(RET_K, 1)],            //
            &[s(JA, 1), s(RET_K, 1)],              // jump past the end
            &[s(JA, (-2i32) as u32), s(RET_K, 1)], // jump before the start
            &[insn(JEQ_K, 1, 0, 0), s(RET_K, 1)],  //
            &[insn(JSET_X, 0, 1, 0), s(RET_K, 1)], //
            &[s(0x21, 0), s(RET_K, 1)],            // ldx [k]: libpcap's validator lets it
            &[s(0x0e, 0), s(RET_K, 1)],            // through, its interpreter aborts
            &[s(0xff, 0), s(RET_K, 1)],            //
            &[s(0x100 | LD_IMM, 0), s(RET_K, 1)],  // bits above the 8 of a real opcode
        ];
        for insns in bad {
            assert!(Program::from_insns(insns.to_vec()).is_err(), "{insns:?}");
        }
        let good = program(&[insn(JEQ_K, 1, 0, 0), s(RET_K, 0), s(RET_K, 1)]);
        assert_eq!(good.len(), 3);
        assert!(!good.is_empty());
    }

    #[test]
    fn bpf_unchecked_programs_never_panic() {
        // Programs that skipped validation: every fault ends the run with 0.
        let pkt = counting();
        let faulty: &[&[Insn]] = &[
            &[],
            &[s(LD_IMM, 1)],
            &[s(LD_MEM, 16), s(RET_K, 1)],
            &[s(ST, u32::MAX), s(RET_K, 1)],
            &[s(JA, 5), s(RET_K, 1)],
            &[s(JA, (-5i32) as u32), s(RET_K, 1)],
            &[insn(JEQ_K, 255, 255, 0), s(RET_K, 1)],
            &[s(0xff, 0), s(RET_K, 1)],
        ];
        for insns in faulty {
            assert_eq!(run(insns, &pkt, 64), 0, "{insns:?}");
        }
    }

    #[test]
    fn bpf_less_and_greater_use_the_wire_length() {
        let snapped = [0u8; 60];
        let greater = Program::compile("greater 1000", LinkType::Ethernet).unwrap();
        assert!(greater.matches(&snapped, 1500));
        assert!(!greater.matches(&snapped, 60));
        let less = Program::compile("less 100", LinkType::Ethernet).unwrap();
        assert!(!less.matches(&snapped, 1500));
        assert!(less.matches(&snapped, 60));
        let len = Program::compile("len = 1514", LinkType::Ethernet).unwrap();
        assert!(len.matches(&snapped, 1514));
    }

    #[test]
    fn bpf_compile_errors_carry_libpcaps_message() {
        let err = Program::compile("tcp port", LinkType::Ethernet).unwrap_err();
        assert!(err.contains("syntax error"), "{err}");
        assert!(!err.starts_with("libpcap error"), "{err}");
        let err = Program::compile("host 999.1.1.1", LinkType::Ethernet).unwrap_err();
        assert!(err.contains("999.1.1.1"), "{err}");
        let err = Program::compile("vlan", LinkType::LinuxSll).unwrap_err();
        assert!(err.contains("VLAN"), "{err}");
        assert!(
            Program::compile("tcp port 80", LinkType::Ethernet)
                .unwrap()
                .len()
                > 5
        );
        // The empty expression accepts everything, as in tcpdump.
        let all = Program::compile("", LinkType::Raw).unwrap();
        assert!(all.matches(&[], 0));
    }

    #[test]
    fn bpf_compiles_for_every_supported_link_type() {
        use LinkType::*;
        for link in [
            Null, Ethernet, Raw, RawIpv4, RawIpv6, Loop, LinuxSll, LinuxSll2,
        ] {
            for expr in ["ip or ip6", "tcp port 80", "udp"] {
                let p = Program::compile(expr, link);
                assert!(p.is_ok(), "{expr:?} on {link:?}: {p:?}");
            }
        }
        // Raw IP: the IPv4 header starts at byte 0 (protocol at 9).
        let mut ipv4_tcp = [0u8; 40];
        ipv4_tcp[0] = 0x45;
        ipv4_tcp[9] = 6;
        let tcp = Program::compile("tcp", Raw).unwrap();
        assert!(tcp.matches(&ipv4_tcp, 40));
        ipv4_tcp[9] = 17;
        assert!(!tcp.matches(&ipv4_tcp, 40));
        assert!(Program::compile("ip", Unknown(65000)).is_err());
    }

    const EXPRESSIONS: &[&str] = &[
        "tcp",
        "udp",
        "icmp",
        "ip6",
        "arp",
        "tcp port 80",
        "port 53",
        "udp port 53 or udp port 5353",
        "host 192.168.1.1",
        "net 10.0.0.0/8",
        "src net 192.168.0.0/16 and not dst port 443",
        "tcp[tcpflags] & (tcp-syn|tcp-ack) == tcp-syn",
        "ip[6:2] & 0x1fff != 0",
        "less 100",
        "greater 1000",
        "vlan",
        "vlan and tcp",
        "ether broadcast",
        "ether host ff:ff:ff:ff:ff:ff",
        "icmp[icmptype] == icmp-echo",
        "ip6 and tcp",
        "portrange 1000-2000",
        "ip proto 47",
        "mpls",
        "pppoes",
        "tcp[((tcp[12:1] & 0xf0) >> 2):4] = 0x47455420",
        "udp[8:2] = 0x1234",
        "ip[0] & 0xf != 5",
        "not ip and not ip6",
        "(tcp or udp) and (port 80 or port 443)",
        // Backward jumps, scratch memory, X shifts and modulo by a packet byte.
        "ip protochain 6",
        "ip6 protochain 17",
        "(ip[2:2] << ip[1]) != 0 or (ip[2:2] >> (ip[9] & 0x3f)) > 3",
        "ip and ip[2:2] % (ip[8] & 3) = 1",
        "len - 14 > ip[2:2] * 2",
    ];

    /// Expressions that real traffic certainly matches, so the comparison is not vacuous.
    const COMMON: &[&str] = &["tcp", "udp", "port 53"];

    type Compiled = Vec<Option<(Program, pcap::BpfProgram)>>;

    /// Both compilations of every expression for one link type; `None` where libpcap refuses
    /// the expression for that link type.
    fn compile_all(link: LinkType) -> Compiled {
        EXPRESSIONS
            .iter()
            .map(|expr| {
                let dead = pcap::Capture::dead(pcap::Linktype(dlt(link))).ok()?;
                let theirs = dead.compile(expr, true).ok()?;
                let ours = Program::compile(expr, link)
                    .unwrap_or_else(|e| panic!("{expr:?} on {link:?}: libpcap compiles, we: {e}"));
                assert_eq!(ours.len(), theirs.get_instructions().len(), "{expr:?}");
                Some((ours, theirs))
            })
            .collect()
    }

    #[test]
    fn bpf_matches_libpcap_on_the_corpus() {
        let dir = Path::new(concat!(
            env!("CARGO_MANIFEST_DIR"),
            "/../../../shared/corpus/ndpi"
        ));
        if !dir.is_dir() {
            eprintln!("skipping: no corpus at {}", dir.display());
            return;
        }
        let mut files: Vec<PathBuf> = std::fs::read_dir(dir)
            .unwrap()
            .filter_map(|e| Some(e.ok()?.path()))
            .filter(|p| {
                let ext = p.extension().and_then(|e| e.to_str()).unwrap_or("");
                matches!(ext, "pcap" | "pcapng" | "cap")
            })
            .collect();
        files.sort();

        let mut compiled: HashMap<u32, Compiled> = HashMap::new();
        let mut matched = vec![0u64; EXPRESSIONS.len()];
        let (mut frames, mut evaluations, mut files_read) = (0u64, 0u64, 0u64);
        for path in &files {
            let mut src = match crate::FileSource::open(path) {
                Ok(src) => src,
                Err(e) => {
                    eprintln!("skipping {}: {e}", path.display());
                    continue;
                }
            };
            files_read += 1;
            let mut frame_no = 0u64;
            loop {
                let (link, frame) = match src.next_frame() {
                    Ok(Some(next)) => next,
                    Ok(None) => break,
                    Err(e) => {
                        eprintln!("stopping {} early: {e}", path.display());
                        break;
                    }
                };
                let data = frame.data;
                frames += 1;
                frame_no += 1;
                // Also a snaplen-like cut somewhere in the frame, to exercise failed loads.
                let cut = &data[..(frames as usize * 7919) % (data.len() + 1)];
                let progs = compiled
                    .entry(link.to_linktype())
                    .or_insert_with(|| compile_all(link));
                for (i, prog) in progs.iter().enumerate() {
                    let Some((ours, theirs)) = prog else { continue };
                    let got = ours.matches(data, data.len() as u32);
                    assert_eq!(
                        got,
                        theirs.filter(data),
                        "{:?} on frame {} of {}",
                        EXPRESSIONS[i],
                        frame_no,
                        path.display()
                    );
                    assert_eq!(
                        ours.matches(cut, cut.len() as u32),
                        theirs.filter(cut),
                        "{:?} on frame {} of {} cut to {} bytes",
                        EXPRESSIONS[i],
                        frame_no,
                        path.display(),
                        cut.len()
                    );
                    matched[i] += u64::from(got);
                    evaluations += 2;
                }
            }
        }
        eprintln!(
            "checked {frames} frames from {files_read} files, {evaluations} evaluations \
             (full and cut frames) against libpcap, link types {:?}",
            compiled.keys().collect::<Vec<_>>()
        );
        for (expr, n) in EXPRESSIONS.iter().zip(&matched) {
            eprintln!("  {n:>8} matches  {expr}");
        }
        assert!(frames > 0, "no frames read from {}", dir.display());
        for common in COMMON {
            let i = EXPRESSIONS.iter().position(|e| e == common).unwrap();
            assert!(matched[i] > 0, "{common:?} never matched");
        }
    }
}
