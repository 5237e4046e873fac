//! File names for captures. The alert's type and entity may have come off the wire (a host
//! name, a script's own type): only ASCII letters, digits, `-`, `_` and single dots survive,
//! the rest becomes `_`, so a name is never a path (`/`, `..`), hidden, or full of control
//! characters, and it stays short.

/// The most bytes a sanitised part keeps.
const MAX_PART: usize = 64;

/// `text` as one safe file name part (never empty, never starting with a dot).
pub fn sanitise(text: &str) -> String {
    let mut out = String::with_capacity(text.len().min(MAX_PART));
    for c in text.chars() {
        if out.len() >= MAX_PART {
            break;
        }
        let keep = c.is_ascii_alphanumeric() || c == '-' || c == '_' || c == '.';
        let c = if !keep || (c == '.' && (out.is_empty() || out.ends_with('.'))) {
            '_'
        } else {
            c
        };
        out.push(c);
    }
    if out.is_empty() {
        out.push_str("unknown");
    }
    out
}

/// `alert-17-ddos-10.0.0.5` (without the extension).
pub fn file_stem(id: u64, kind: &str, entity: &str) -> String {
    format!("alert-{id}-{}-{}", sanitise(kind), sanitise(entity))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn addresses_and_types_stay_readable() {
        assert_eq!(file_stem(17, "ddos", "10.0.0.5"), "alert-17-ddos-10.0.0.5");
        assert_eq!(
            file_stem(3, "scan.port", "2001:db8::1"),
            "alert-3-scan.port-2001_db8__1"
        );
    }

    #[test]
    fn attacker_data_never_makes_a_path() {
        for hostile in [
            "../../etc/passwd",
            "/etc/shadow",
            "..",
            ".",
            ".hidden",
            "a/../b",
            "x\u{0}y",
            "line\nbreak\r\t",
            "\u{1b}[31mred",
            "名前.example",
            "a\\b",
            "",
            "...",
        ] {
            let s = sanitise(hostile);
            assert!(!s.is_empty());
            assert!(
                !s.contains('/') && !s.contains('\\'),
                "{hostile:?} -> {s:?}"
            );
            assert!(!s.contains(".."), "{hostile:?} -> {s:?}");
            assert!(!s.starts_with('.'), "{hostile:?} -> {s:?}");
            assert!(
                s.chars()
                    .all(|c| c.is_ascii_alphanumeric() || "-_.".contains(c)),
                "{hostile:?} -> {s:?}"
            );
        }
        assert_eq!(sanitise("../../etc/passwd"), "_._.__etc_passwd");
    }

    #[test]
    fn long_names_are_cut() {
        let s = sanitise(&"a".repeat(1000));
        assert_eq!(s.len(), MAX_PART);
    }
}
