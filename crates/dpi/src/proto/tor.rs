//! Tor's link handshake, recognised from the TLS ClientHello's server name (tls.rs calls
//! [`is_tor_sni`] and sets the application, as nDPI names it: `91.163/TLS.Tor`).
//!
//! Why: Tor relays listen on any port (9001, 443, …) and the handshake is ordinary TLS; the
//! one visible trait is the made-up server name. A Tor client names a random host
//! `www.` + 4..=25 base32 characters (`a`-`z`, `2`-`7`) + `.com` (tor's `tor_tls_new`,
//! `crypto_random_hostname(4, 25, "www.", ".com")`); its certificates use the same shape with
//! `.net`.
//!
//! Rule: the SNI is exactly `www.<label>.com` or `www.<label>.net`, the label 8..=25 characters,
//! all lower-case letters or the digits `2`-`7` (base32 never has `0`, `1`, `8`, `9`), and
//! random-looking: at least two separate runs of digits, or a digit and a run of four
//! consonant letters (not `aeiou`). Shorter labels are not judged (too few characters to tell a
//! random one from a word).
//!
//! Cost and risk: a few comparisons on one string per TLS flow. About 67% of Tor's 8-character
//! labels and more than 95% of those of 16 or more pass (measured on random base32 strings);
//! names of 4..=7 characters are missed. False positives are real names of that exact shape
//! with two digit groups or a digit next to four consonants (`www.4x4offroad.com`,
//! `www.js7rtfyg.net`); dictionary words without digits never match.
//!
//! Against nDPI: in tor.pcap one Tor client (one JA3) opens 7 connections; nDPI names 3 of
//! them `TLS.Tor`, this rule 5 (also `www.ct7ctrgb6cr7.com` and `www.6gyip7tqim7sieb.com`,
//! which nDPI leaves `TLS`); both miss the 6- and 7-character names (`www.t3i3ru.com`,
//! `www.jmts2id.com`).

/// The label of `www.<label>.com|net`, or `None`.
fn label(sni: &str) -> Option<&[u8]> {
    let rest = sni.strip_prefix("www.")?;
    let l = rest
        .strip_suffix(".com")
        .or_else(|| rest.strip_suffix(".net"))?;
    Some(l.as_bytes())
}

/// True when `sni` has the shape of a Tor client's random server name (see the module docs).
pub(crate) fn is_tor_sni(sni: &str) -> bool {
    let Some(l) = label(sni) else {
        return false;
    };
    if !(8..=25).contains(&l.len())
        || !l
            .iter()
            .all(|c| c.is_ascii_lowercase() || (b'2'..=b'7').contains(c))
    {
        return false;
    }
    let mut digit_runs = 0;
    let mut consonants = 0;
    let mut longest = 0;
    let mut prev_digit = false;
    for &c in l {
        let digit = c.is_ascii_digit();
        if digit && !prev_digit {
            digit_runs += 1;
        }
        prev_digit = digit;
        consonants = if !digit && !b"aeiou".contains(&c) {
            consonants + 1
        } else {
            0
        };
        longest = longest.max(consonants);
    }
    digit_runs >= 2 || (digit_runs >= 1 && longest >= 4)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn tor_names() {
        // tor.pcap (nDPI: TLS.Tor): the SNIs and certificate names of its Tor flows.
        for n in [
            "www.q4cyamnc6mtokjurvdclt.com",
            "www.gfu7hbxpfp.com",
            "www.e6r5p57kbafwrxj3plz.com",
            "www.gg562izcxdvqdk.com",
            "www.fcsyvnlemwxv5p.net",
            "www.g6ghvisevf3ibuu5.net",
        ] {
            assert!(is_tor_sni(n), "{n}");
        }
    }

    #[test]
    fn ordinary_names() {
        for n in [
            "www.google.com",
            "www.stackoverflow.com",
            "www.knightsbridge.com", // six consonants, no digit
            "www.web2print.com",     // one digit, short consonant runs
            "www.w3schools.com",     // 7 characters: not judged
            "www.top10news.com",     // `1` and `0` are not base32
            "www.mp3skull.com",      // one digit, `sk` then a vowel
            "mail.q4cyamnc6mtokjurvdclt.com",
            "www.q4cyamnc6mtokjurvdclt.org",
            "www.a.q4cyamnc6mtokjurvdclt.com",
            "www.Q4CYAMNC6MTOKJURVDCLT.com",
            "www.q4cyamnc6mtokjurvdcltq4cyamnc6.com", // too long
            "www..com",
            "",
        ] {
            assert!(!is_tor_sni(n), "{n}");
        }
    }
}
