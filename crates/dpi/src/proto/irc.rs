//! IRC over TCP (RFC 1459, RFC 2812, IRCv3 capability negotiation and message tags).
//!
//! Why: IRC is still the control channel of many botnets, on any port (Ourmon's IRC report
//! exists for that reason), besides plain chat on 6660-6669.
//!
//! Rules. A packet is read as lines; every complete line (ending `\n`) must be an IRC message:
//! optional `@tags `, optional `:prefix `, a command (an upper-case name from the RFCs and
//! IRCv3, or three digits), at most 15 parameters separated by spaces, the last one may be a
//! `:trailing` one, at most 512 bytes without tags, no NUL or lone CR. Only the first line of a
//! packet may fail (a capture that starts mid-line, or the tail of a line cut by the previous
//! segment), and only if it is printable text. A packet with a line that is not IRC is `No`.
//! Then the flow is IRC when a line is decisive:
//! * anywhere: the registration `USER user mode unused :real name` (four parameters), a `NICK`
//!   line followed (in this or a later packet) by that `USER` or a server line, `CAP LS` /
//!   `CAP REQ` / `CAP END`, a server line `:server NNN target …` (a numeric reply with its
//!   target), `NOTICE AUTH :…` / `NOTICE * :…` from a server, or a line whose prefix is a full
//!   `nick!user@host` on a message command (`PRIVMSG`, `JOIN`, …: a session seen from its
//!   middle);
//! * on the IRC ports (194, 6660-6669) also any other valid client command with its
//!   parameters (`NICK x`, `JOIN #chan`, `PRIVMSG #chan :text`, `PING :x`), except the words
//!   other text protocols share (`PASS`, `QUIT`, `LIST`, `USER` without its four parameters)
//!   and commands without parameters (`VERSION`, `TIME`).
//!
//! Anything else valid but undecided (a lone `PASS`, `PING` off the IRC ports, a line cut by
//! the segment's end) waits for the next packets, up to [`MAX_UNSURE`] packets.
//!
//! Metadata: `meta.banner` holds the client's `NICK` line when seen (the nickname), else the
//! first `JOIN` (the channel), else the first IRC line of the flow.

use crate::ids::Proto;
use crate::types::{wire_string, Flow, Pkt, Verdict, L4};

/// Packets a flow may stay undecided (valid IRC lines, nothing decisive yet).
const MAX_UNSURE: u8 = 6;
/// Lines read per packet at most.
const MAX_LINES: usize = 32;
/// RFC 2812: 512 bytes with CR LF; IRCv3 tags may add up to 8191 bytes before.
const MAX_LINE: usize = 512;
const MAX_TAGS: usize = 8191;

/// `Scratch::irc.bits`: a client `NICK` line was seen.
const NICK_SEEN: u8 = 0x01;
/// `Scratch::irc.bits`: `meta.banner` holds a `NICK` or `JOIN` line (nothing better will come).
const BANNER_FINAL: u8 = 0x08;

/// Commands of RFC 1459/2812 and IRCv3 (`CAP`, `AUTHENTICATE`), upper case as clients send
/// them; the minimum parameter count of each.
const COMMANDS: &[(&[u8], usize)] = &[
    (b"PASS", 1),
    (b"NICK", 1),
    (b"USER", 4),
    (b"OPER", 2),
    (b"MODE", 1),
    (b"SERVICE", 6),
    (b"QUIT", 0),
    (b"SQUIT", 2),
    (b"JOIN", 1),
    (b"PART", 1),
    (b"TOPIC", 1),
    (b"NAMES", 0),
    (b"LIST", 0),
    (b"INVITE", 2),
    (b"KICK", 2),
    (b"PRIVMSG", 2),
    (b"NOTICE", 2),
    (b"MOTD", 0),
    (b"LUSERS", 0),
    (b"VERSION", 0),
    (b"STATS", 0),
    (b"LINKS", 0),
    (b"TIME", 0),
    (b"CONNECT", 2),
    (b"TRACE", 0),
    (b"ADMIN", 0),
    (b"INFO", 0),
    (b"SERVLIST", 0),
    (b"SQUERY", 2),
    (b"WHO", 0),
    (b"WHOIS", 1),
    (b"WHOWAS", 1),
    (b"KILL", 2),
    (b"PING", 1),
    (b"PONG", 1),
    (b"ERROR", 1),
    (b"AWAY", 0),
    (b"REHASH", 0),
    (b"DIE", 0),
    (b"RESTART", 0),
    (b"SUMMON", 1),
    (b"USERS", 0),
    (b"WALLOPS", 1),
    (b"USERHOST", 1),
    (b"ISON", 1),
    (b"CAP", 1),
    (b"AUTHENTICATE", 1),
];

/// Commands that other text protocols use too (FTP, POP3): never decisive alone.
const SHARED: &[&[u8]] = &[b"PASS", b"QUIT", b"LIST", b"USER", b"HELP"];

/// Commands a `nick!user@host` prefix comes with when a server relays a user's message.
const RELAYED: &[&[u8]] = &[
    b"PRIVMSG", b"NOTICE", b"JOIN", b"PART", b"QUIT", b"NICK", b"MODE", b"KICK", b"TOPIC",
    b"INVITE",
];

fn is_irc_port(port: u16) -> bool {
    port == 194 || (6660..=6669).contains(&port)
}

/// RFC 2812 nickname, with the longer lengths today's servers allow: a letter or special
/// first, then letters, digits, specials and `-`.
fn is_nick(n: &[u8]) -> bool {
    let special = |c: u8| {
        matches!(
            c,
            b'[' | b']' | b'\\' | b'`' | b'_' | b'^' | b'{' | b'|' | b'}'
        )
    };
    match n.split_first() {
        Some((&c, rest)) if (c.is_ascii_alphabetic() || special(c)) && n.len() <= 32 => rest
            .iter()
            .all(|&c| c.is_ascii_alphanumeric() || special(c) || c == b'-'),
        _ => false,
    }
}

/// `#chan`, `&chan`, `+chan`, `!chan` (no space, comma, BEL or colon), at most 50 bytes.
fn is_channel(c: &[u8]) -> bool {
    matches!(c.first(), Some(b'#' | b'&' | b'+' | b'!'))
        && (2..=50).contains(&c.len())
        && c.iter()
            .all(|&b| b > b' ' && b != b',' && b != 0x07 && b != b':')
}

/// A server name or host: letters, digits, `.`, `-`, `:` (IPv6), `/` (cloaks), `_`.
fn is_host(h: &[u8]) -> bool {
    !h.is_empty()
        && h.len() <= 255
        && h.iter()
            .all(|&c| c.is_ascii_alphanumeric() || matches!(c, b'.' | b'-' | b':' | b'/' | b'_'))
}

/// What a prefix says about its sender.
#[derive(Clone, Copy, PartialEq, Eq)]
enum Prefix {
    None,
    /// A server name (or a bare nick).
    Server,
    /// `nick!user@host`.
    User,
}

fn prefix_kind(p: &[u8]) -> Option<Prefix> {
    if let Some(bang) = p.iter().position(|&c| c == b'!') {
        let (nick, rest) = (&p[..bang], &p[bang + 1..]);
        let at = rest.iter().position(|&c| c == b'@')?;
        let (user, host) = (&rest[..at], &rest[at + 1..]);
        let user_ok = !user.is_empty()
            && user.len() <= 64
            && user.iter().all(|&c| c > b' ' && c != b'@' && c < 0x7f);
        return (is_nick(nick) && user_ok && is_host(host)).then_some(Prefix::User);
    }
    // A server name, or a nick (optionally `nick@host`).
    let name = p.split(|&c| c == b'@').next().unwrap_or(p);
    (is_host(name) || is_nick(name)).then_some(Prefix::Server)
}

/// One parsed line.
struct Line<'a> {
    prefix: Prefix,
    /// The command word or the three digits.
    cmd: &'a [u8],
    numeric: bool,
    /// Middle parameters, then the trailing one (without its colon) if any.
    params: [&'a [u8]; 15],
    n: usize,
    trailing: bool,
}

impl<'a> Line<'a> {
    fn param(&self, i: usize) -> &'a [u8] {
        if i < self.n {
            self.params[i]
        } else {
            &[]
        }
    }
}

/// Parses one line (without its LF; a final CR is dropped).
fn parse(l: &[u8]) -> Option<Line<'_>> {
    let mut l = l.strip_suffix(b"\r").unwrap_or(l);
    if l.iter().any(|&c| c == 0 || c == b'\r' || c == b'\n') {
        return None;
    }
    if let Some(rest) = l.strip_prefix(b"@") {
        let sp = rest.iter().position(|&c| c == b' ')?;
        if sp == 0 || sp > MAX_TAGS {
            return None;
        }
        l = &rest[sp + 1..];
    }
    if l.len() > MAX_LINE - 2 {
        return None;
    }
    let mut prefix = Prefix::None;
    if let Some(rest) = l.strip_prefix(b":") {
        let sp = rest.iter().position(|&c| c == b' ')?;
        prefix = prefix_kind(&rest[..sp])?;
        l = &rest[sp + 1..];
    }
    let end = l.iter().position(|&c| c == b' ').unwrap_or(l.len());
    let cmd = &l[..end];
    let numeric = cmd.len() == 3 && cmd.iter().all(u8::is_ascii_digit);
    if !numeric && !COMMANDS.iter().any(|(c, _)| *c == cmd) {
        return None;
    }
    let mut line = Line {
        prefix,
        cmd,
        numeric,
        params: [&[]; 15],
        n: 0,
        trailing: false,
    };
    let mut rest = &l[end..];
    while !rest.is_empty() {
        // One space before each parameter (RFC 2812); no empty middle parameters.
        rest = rest.strip_prefix(b" ")?;
        if line.n == 15 {
            return None;
        }
        if let Some(t) = rest.strip_prefix(b":") {
            line.params[line.n] = t;
            line.n += 1;
            line.trailing = true;
            break;
        }
        let e = rest.iter().position(|&c| c == b' ').unwrap_or(rest.len());
        if e == 0 {
            return None;
        }
        line.params[line.n] = &rest[..e];
        line.n += 1;
        rest = &rest[e..];
    }
    if !numeric {
        let min = COMMANDS
            .iter()
            .find(|(c, _)| *c == cmd)
            .map_or(0, |(_, m)| *m);
        // `USER` with fewer parameters is FTP's or POP3's; other commands need theirs.
        if line.n < min && cmd != b"USER" {
            return None;
        }
    }
    if !params_ok(&line) {
        return None;
    }
    Some(line)
}

/// Per-command checks of the parameters that have a fixed shape.
fn params_ok(l: &Line<'_>) -> bool {
    let p0 = l.param(0);
    if l.numeric {
        // `:server NNN target …`: the target is a nick or `*`.
        return l.n >= 1 && (p0 == b"*" || is_nick(p0));
    }
    match l.cmd {
        b"NICK" => is_nick(p0),
        b"JOIN" => p0 == b"0" || p0.split(|&c| c == b',').all(is_channel),
        b"PART" => p0.split(|&c| c == b',').all(is_channel),
        // `INVITE nick #chan`, `KICK #chan nick` (SIP's `INVITE sip:… SIP/2.0` is not).
        b"INVITE" => is_nick(p0) && is_channel(l.param(1)),
        b"KICK" => p0.split(|&c| c == b',').all(is_channel) && is_nick(l.param(1)),
        b"PRIVMSG" | b"NOTICE" => {
            // Target: channel(s), nick(s), `nick@server`, `$mask`, `*`, or `AUTH`; the text is
            // the trailing parameter.
            let target_ok = p0.split(|&c| c == b',').all(|t| {
                is_channel(t)
                    || is_nick(t.split(|&c| c == b'@').next().unwrap_or(t))
                    || t == b"*"
                    || (t.first() == Some(&b'$') && t.len() > 1)
            });
            target_ok && l.n == 2
        }
        b"CAP" => {
            // Client: `CAP LS [302]`, `CAP REQ :caps`, `CAP END`, `CAP LIST`; server:
            // `CAP nick|* LS|ACK|NAK|… :caps`.
            let sub = |s: &[u8]| {
                matches!(
                    s,
                    b"LS" | b"REQ" | b"END" | b"LIST" | b"ACK" | b"NAK" | b"NEW" | b"DEL"
                )
            };
            sub(p0) || ((p0 == b"*" || is_nick(p0)) && sub(l.param(1)))
        }
        _ => true,
    }
}

/// The `USER user mode unused :realname` registration (RFC 2812; RFC 1459's `hostname
/// servername` in the middle).
fn is_registration(l: &Line<'_>) -> bool {
    l.cmd == b"USER" && l.prefix == Prefix::None && l.n == 4 && {
        let u = l.param(0);
        !u.is_empty() && u.len() <= 64 && !u.contains(&b'@')
    }
}

/// How much a valid line says.
#[derive(Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
enum Weight {
    /// Valid, but other protocols say it too (`PASS x`, `QUIT`).
    Shared,
    /// IRC, but only decisive on the IRC ports.
    Port,
    /// `NICK x`: decisive on the IRC ports, elsewhere once `USER` or a server line follows.
    Nick,
    /// Decisive anywhere.
    Strong,
}

fn weight(l: &Line<'_>) -> Weight {
    if l.numeric {
        return if l.prefix == Prefix::Server {
            Weight::Strong
        } else {
            Weight::Shared
        };
    }
    if is_registration(l) {
        return Weight::Strong;
    }
    if l.prefix == Prefix::User && RELAYED.contains(&l.cmd) {
        return Weight::Strong;
    }
    match l.cmd {
        b"CAP" => Weight::Strong,
        // `NOTICE AUTH :*** Looking up your hostname`, `:server NOTICE * :*** …`.
        b"NOTICE"
            if (l.param(0) == b"AUTH" || l.param(0) == b"*")
                && l.prefix != Prefix::User
                && l.trailing =>
        {
            Weight::Strong
        }
        b"NICK" if l.prefix == Prefix::None => Weight::Nick,
        c if SHARED.contains(&c) => Weight::Shared,
        // A lone word (`VERSION`, `TIME`, `INFO`) says too little.
        _ if l.n == 0 => Weight::Shared,
        _ if l.prefix == Prefix::None => Weight::Port,
        // A server-prefixed command other than the above (`:srv PING :x`).
        _ => Weight::Port,
    }
}

/// Keeps the most useful line in `meta.banner`: the `NICK` line, else the first `JOIN`, else
/// the first IRC line.
fn remember(f: &mut Flow, l: &Line<'_>, raw: &[u8]) {
    if f.scratch.irc.bits & BANNER_FINAL != 0 {
        return;
    }
    let raw = raw.strip_suffix(b"\r").unwrap_or(raw);
    let best = l.prefix == Prefix::None && matches!(l.cmd, b"NICK" | b"JOIN");
    if best {
        f.scratch.irc.bits |= BANNER_FINAL;
        f.meta.banner = Some(wire_string(raw));
    } else if f.meta.banner.is_none() {
        f.meta.banner = Some(wire_string(raw));
    }
}

/// Printable text (with tabs): what a line's tail cut from the previous segment may hold.
fn is_text(b: &[u8]) -> bool {
    b.iter()
        .all(|&c| (0x20..0x7f).contains(&c) || c == b'\t' || c == b'\r' || c >= 0x80)
}

/// Reads the complete lines of `b`; returns what is left (a line cut by the segment's end), or
/// `None` when a line is not IRC (`first`: no line read yet in this packet).
fn read_lines<'a>(b: &'a [u8], f: &mut Flow, st: &mut Seen, first: &mut bool) -> Option<&'a [u8]> {
    let mut b = b;
    while st.lines < MAX_LINES {
        let Some(nl) = b.iter().position(|&c| c == b'\n') else {
            break;
        };
        let raw = &b[..nl];
        b = &b[nl + 1..];
        st.lines += 1;
        let was_first = std::mem::replace(first, false);
        let Some(l) = parse(raw) else {
            // Only the first line may be the tail of a line we did not see.
            if was_first && is_text(raw) {
                continue;
            }
            return None;
        };
        let w = weight(&l);
        if l.prefix == Prefix::Server && w != Weight::Shared {
            st.server_line = true;
        }
        if l.cmd == b"NICK" && l.prefix == Prefix::None {
            f.scratch.irc.bits |= NICK_SEEN;
        }
        if w != Weight::Shared || f.l7.proto == Proto::IRC {
            remember(f, &l, raw);
        }
        st.best = st.best.max(Some(w));
    }
    Some(b)
}

/// What the lines of one packet showed.
#[derive(Default)]
struct Seen {
    best: Option<Weight>,
    server_line: bool,
    lines: usize,
}

pub fn detect(p: &Pkt<'_>, f: &mut Flow) -> Verdict {
    if p.l4 != L4::Tcp {
        return Verdict::No;
    }
    let owner = f.l7.proto == Proto::IRC;
    let dir = usize::from(!p.from_client);
    let mut st = Seen::default();
    let mut first = true;
    // The line the previous segment of this direction ended in, completed by this one.
    let mut head = std::mem::take(&mut f.scratch.irc.cut[dir]);
    let mut b = p.payload;
    if !head.is_empty() {
        let n = b
            .iter()
            .position(|&c| c == b'\n')
            .map_or(b.len(), |i| i + 1);
        head.extend_from_slice(&b[..n]);
        b = &b[n..];
    }
    let tail = match read_lines(&head, f, &mut st, &mut first) {
        Some(t) if !t.is_empty() => Some(t),
        Some(_) => read_lines(b, f, &mut st, &mut first),
        None => None,
    };
    let Some(tail) = tail else {
        f.scratch.irc.cut = Default::default();
        return if owner {
            Proto::IRC.is(true)
        } else {
            Verdict::No
        };
    };
    // What is left is a line cut by the segment's end: printable text, not too long.
    let cut_ok = tail.len() <= MAX_LINE + MAX_TAGS && is_text(tail);
    if cut_ok && st.lines < MAX_LINES {
        f.scratch.irc.cut[dir] = tail.to_vec();
    }
    let final_banner = f.scratch.irc.bits & BANNER_FINAL != 0;
    if owner {
        return Proto::IRC.is(final_banner);
    }
    if !cut_ok {
        f.scratch.irc.cut = Default::default();
        return Verdict::No;
    }
    let on_port = is_irc_port(p.server_port) || is_irc_port(p.client_port);
    let decided = match st.best {
        Some(Weight::Strong) => true,
        Some(Weight::Nick | Weight::Port) => on_port,
        _ => false,
    } || (st.server_line && f.scratch.irc.bits & NICK_SEEN != 0);
    if decided {
        return Proto::IRC.is(final_banner);
    }
    if p.index + 1 >= MAX_UNSURE {
        f.scratch.irc.cut = Default::default();
        return Verdict::No;
    }
    Verdict::Unsure
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::proto::testkit::*;

    const IRC: Ends = tcp(51234, 6667);
    const ODD: Ends = tcp(51234, 4444);

    fn conv(lines: &[(bool, &str)]) -> Conv {
        lines
            .iter()
            .map(|(c, s)| (*c, s.as_bytes().to_vec()))
            .collect()
    }

    fn run(e: Ends, c: &Conv) -> (Vec<Verdict>, Flow) {
        let mut f = Flow::default();
        (feed(detect, e, &mut f, c), f)
    }

    fn is_irc(v: &[Verdict]) -> bool {
        v.iter()
            .any(|v| matches!(v, Verdict::Is { proto, .. } if *proto == Proto::IRC))
    }

    // A session as irssi and an ircd (ngircd) speak it, written from RFC 2812's examples.
    fn registration() -> Conv {
        conv(&[
            (true, "CAP LS 302\r\nNICK alice\r\nUSER alice 0 * :Alice Liddell\r\n"),
            (
                false,
                ":irc.example.net NOTICE * :*** Looking up your hostname...\r\n",
            ),
            (
                false,
                ":irc.example.net 001 alice :Welcome to the Internet Relay Network alice!alice@localhost\r\n:irc.example.net 002 alice :Your host is irc.example.net\r\n",
            ),
            (true, "JOIN #rust\r\n"),
        ])
    }

    #[test]
    fn registration_on_any_port() {
        for e in [IRC, ODD] {
            let (v, f) = run(e, &registration());
            assert_eq!(v[0], Proto::IRC.is(true), "{e:?}");
            assert_eq!(f.meta.banner.as_deref(), Some("NICK alice"));
        }
        // RFC 1459 registration without CAP, split in two segments mid-line.
        let c = conv(&[
            (true, "NICK bob\r\nUSER bob bobhost irc.ex"),
            (true, "ample.net :Bob\r\n"),
        ]);
        let (v, f) = run(ODD, &c);
        assert_eq!(v, [Verdict::Unsure, Proto::IRC.is(true)]);
        assert_eq!(f.meta.banner.as_deref(), Some("NICK bob"));
    }

    #[test]
    fn ngircd_session() {
        // Python's `irc` client (jaraco, 20.x) against ngircd 26.1 on 127.0.0.1:16667 (not an
        // IRC port), recorded with tcpdump: NICK, USER, the welcome numerics, JOIN, PRIVMSG,
        // the server relaying the JOIN, QUIT, ERROR.
        let c = packets(include_str!("testdata/irc_ngircd.txt"));
        let e = tcp(45000, 16667);
        let (v, f) = run(e, &c);
        assert_eq!(v, [Verdict::Unsure, Proto::IRC.is(true)]);
        assert_eq!(f.meta.banner.as_deref(), Some("NICK alice"));
        // Every server packet alone decides (numerics, a relayed `nick!user@host` line, a
        // NOTICE to the nick then ERROR is not enough: no numeric, no relay, no AUTH).
        let alone: Vec<bool> = c
            .iter()
            .map(|(client, b)| is_irc(&run(e, &vec![(*client, b.clone())]).0))
            .collect();
        assert_eq!(
            alone,
            [false, true, true, false, false, true, false, false, false]
        );
        // On the IRC port, the other lines decide too (not `QUIT`, which FTP and POP3 share).
        let alone: Vec<bool> = c
            .iter()
            .map(|(client, b)| is_irc(&run(IRC, &vec![(*client, b.clone())]).0))
            .collect();
        assert_eq!(
            alone,
            [true, true, true, true, true, true, false, true, false]
        );
    }

    #[test]
    fn server_side_first() {
        // The capture starts with the server's lines (old servers: `NOTICE AUTH`).
        for first in [
            "NOTICE AUTH :*** Looking up your hostname...\r\n",
            ":irc.example.net 375 alice :- irc.example.net Message of the day -\r\n:irc.example.net 372 alice :- hello\r\n:irc.example.net 376 alice :End of MOTD command\r\n",
            ":irc.example.net 005 alice CHANTYPES=# NICKLEN=30 :are supported by this server\r\n",
        ] {
            let c = conv(&[(false, first)]);
            let (v, f) = run(ODD, &c);
            assert_eq!(v, [Proto::IRC.is(false)], "{first}");
            assert!(f.meta.banner.is_some());
        }
    }

    #[test]
    fn mid_session() {
        // A server relaying channel traffic, the first line cut by the capture's start.
        let c = conv(&[(
            false,
            "lo everyone\r\n:carol!~carol@host-1.example.org PRIVMSG #rust :hi all\r\n:dave!dave@10.0.0.7 JOIN #rust\r\nPING :irc.example.net\r\n",
        )]);
        let (v, _) = run(ODD, &c);
        assert_eq!(v, [Proto::IRC.is(false)]);
        // A client mid-session: decisive on the IRC ports only.
        let c = conv(&[(true, "PRIVMSG #rust :hello\r\n"), (true, "JOIN #c,#d\r\n")]);
        assert!(is_irc(&run(IRC, &c).0));
        let (v, f) = run(ODD, &c);
        assert_eq!(v, [Verdict::Unsure, Verdict::Unsure]);
        assert!(f.meta.banner.is_some());
        // An IRCv3 tagged line.
        let c = conv(&[(
            false,
            "@time=2024-01-01T00:00:00.000Z :eve!eve@example.org PRIVMSG #x :hey\r\n",
        )]);
        assert!(is_irc(&run(ODD, &c).0));
    }

    #[test]
    fn nick_then_server_line() {
        let c = conv(&[
            (true, "NICK zed\r\n"),
            (false, ":irc.example.net PING :12345\r\n"),
        ]);
        let (v, _) = run(ODD, &c);
        assert_eq!(v, [Verdict::Unsure, Proto::IRC.is(true)]);
        let (v, _) = run(IRC, &c);
        assert_eq!(v, [Proto::IRC.is(true)]);
    }

    #[test]
    fn not_irc() {
        for (e, lines) in [
            // FTP and POP3 share USER/PASS/QUIT/LIST.
            (
                IRC,
                vec![
                    (true, "USER anonymous\r\n"),
                    (true, "PASS guest@\r\n"),
                    (true, "LIST\r\n"),
                    (true, "QUIT\r\n"),
                ],
            ),
            (
                ODD,
                vec![(true, "USER anonymous\r\n"), (true, "PASS guest@\r\n")],
            ),
            // FTP and SMTP servers.
            (IRC, vec![(false, "220 ProFTPD Server ready.\r\n")]),
            (IRC, vec![(false, "220 mail.example.com ESMTP Postfix\r\n")]),
            // HTTP/1 request and response, on the IRC port too.
            (IRC, vec![(true, "GET / HTTP/1.1\r\nHost: x\r\n\r\n")]),
            (
                IRC,
                vec![(false, "HTTP/1.1 200 OK\r\nContent-Length: 0\r\n\r\n")],
            ),
            // SSH banner, SIP, lower-case commands, a notice to a bad target.
            (IRC, vec![(true, "SSH-2.0-OpenSSH_9.6\r\n")]),
            (
                IRC,
                vec![(true, "INVITE sip:bob@example.com SIP/2.0\r\nVia: x\r\n")],
            ),
            (IRC, vec![(true, "nick alice\r\n")]),
            (IRC, vec![(true, "INVITE sip:bob@example.com SIP/2.0\r\n")]),
            (IRC, vec![(true, "VERSION\r\n"), (true, "TIME\r\n")]),
            (IRC, vec![(true, "NOTICE ,, :x\r\n")]),
            // Binary.
            (
                IRC,
                vec![(true, "\x16\x03\x01\x00\x05\x01\x00\x00\x01\x03\x03\n")],
            ),
        ] {
            let c = conv(&lines);
            let (v, _) = run(e, &c);
            assert!(!is_irc(&v), "{lines:?}: {v:?}");
        }
        // A lone NICK off the IRC ports is not enough, nor is a PING.
        let c = conv(&[(true, "NICK alice\r\n"), (true, "PING :x\r\n")]);
        assert!(!is_irc(&run(ODD, &c).0));
        // Truncated: no full line.
        let (v, _) = run(ODD, &conv(&[(true, "NICK ali")]));
        assert_eq!(v, [Verdict::Unsure]);
        // A TLS ClientHello on 6697 (IRC over TLS belongs to the TLS detector).
        let tls = hex("16030100a8010000a403035cef9e29f7");
        let mut f = Flow::default();
        assert_eq!(
            detect(&tcp(5000, 6697).pkt(&tls, true, 0), &mut f),
            Verdict::No
        );
    }

    #[test]
    fn never_panics() {
        let mut rng = Rng::new(0x1357_9bdf);
        let printable: Vec<Vec<u8>> = (0..2000)
            .map(|n| {
                let mut v: Vec<u8> = (0..n % 120).map(|_| 0x20 + rng.below(95) as u8).collect();
                v.extend_from_slice(b"\r\n");
                v
            })
            .collect();
        Fuzz::new(&[IRC, ODD])
            .payloads(printable)
            .flow(registration())
            .flow(packets(include_str!("testdata/irc_ngircd.txt")))
            .seeds([
                b":irc.example.net 001 alice :Welcome\r\n".to_vec(),
                b"@a=b :n!u@h PRIVMSG #c :x\r\n".to_vec(),
            ])
            .check(|f| assert!(f.meta.banner.as_ref().is_none_or(|b| b.len() <= 4 * 256)))
            .run(detect);
    }
}
