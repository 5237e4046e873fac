//! SMTP, POP3 and IMAP detectors (not written yet).

use crate::engine::FlowDpi;
use crate::{Pkt, Verdict};

pub fn detect_smtp(_p: &Pkt<'_>, _f: &mut FlowDpi) -> Verdict {
    Verdict::No
}

pub fn detect_pop3(_p: &Pkt<'_>, _f: &mut FlowDpi) -> Verdict {
    Verdict::No
}

pub fn detect_imap(_p: &Pkt<'_>, _f: &mut FlowDpi) -> Verdict {
    Verdict::No
}
