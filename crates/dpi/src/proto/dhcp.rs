//! dhcp detector (not written yet).

use crate::engine::FlowDpi;
use crate::{Pkt, Verdict};

pub fn detect(_p: &Pkt<'_>, _f: &mut FlowDpi) -> Verdict {
    Verdict::No
}
