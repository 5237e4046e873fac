//! nDPI backend (`--dpi ndpi`, cargo feature `ndpi`): Debian's libndpi 4.2 through a small
//! hand-written FFI, so users get nDPI's full protocol list with sonde's flow engine.
//!
//! One detection module per shard (nDPI modules are not shared between threads); one nDPI flow
//! struct per flow on the DPI path, freed when the flow leaves it. nDPI wants the whole IP
//! packet, which the engine hands over beside the payload.

#![allow(unsafe_code)]

use crate::engine::FlowDpi;
use crate::ids::{self, Category, Proto};
use crate::{wire_string, Confidence};
use std::ffi::CStr;
use std::os::raw::{c_char, c_void};
use std::sync::OnceLock;

#[repr(C)]
#[derive(Clone, Copy, Debug, Default)]
struct NdpiProtocol {
    master: u16,
    app: u16,
    category: u32,
}

/// NDPI_PROTOCOL_BITMASK in libndpi 4.2: NDPI_NUM_BITS = 512 bits as u32 words.
const BITMASK_WORDS: usize = 512 / 32;
/// nDPI's highest protocol number in 4.2 is below this (names are registered up to it).
const MAX_PROTO_ID: u16 = 512;

#[link(name = "ndpi")]
extern "C" {
    fn ndpi_init_detection_module(prefs: u32) -> *mut c_void;
    fn ndpi_set_protocol_detection_bitmask2(m: *mut c_void, mask: *const u32);
    fn ndpi_finalize_initialization(m: *mut c_void);
    fn ndpi_exit_detection_module(m: *mut c_void);
    fn ndpi_detection_get_sizeof_ndpi_flow_struct() -> u32;
    fn ndpi_detection_process_packet(
        m: *mut c_void,
        flow: *mut c_void,
        packet: *const u8,
        len: u16,
        time_ms: u64,
    ) -> NdpiProtocol;
    fn ndpi_detection_giveup(
        m: *mut c_void,
        flow: *mut c_void,
        enable_guess: u8,
        was_guessed: *mut u8,
    ) -> NdpiProtocol;
    fn ndpi_extra_dissection_possible(m: *mut c_void, flow: *mut c_void) -> u8;
    fn ndpi_free_flow(flow: *mut c_void);
    fn ndpi_get_proto_name(m: *mut c_void, id: u16) -> *const c_char;
    fn ndpi_get_flow_name(flow: *mut c_void) -> *const c_char;
    fn ndpi_revision() -> *const c_char;
}

/// libndpi's version string, e.g. `4.2.0`.
pub fn version() -> String {
    // SAFETY: ndpi_revision returns a pointer to a static NUL-terminated string.
    unsafe { CStr::from_ptr(ndpi_revision()) }
        .to_string_lossy()
        .into_owned()
}

/// One nDPI detection module (one per shard).
pub struct Module {
    ptr: *mut c_void,
    flow_size: usize,
}

// SAFETY: a module is used by one thread at a time (its shard); it is only moved between
// threads before use, which nDPI allows.
unsafe impl Send for Module {}

impl Module {
    pub fn new() -> Result<Module, String> {
        // SAFETY: plain initialisation calls of libndpi's documented API, in its order; the
        // bitmask is a valid, fully initialised NDPI_PROTOCOL_BITMASK (all protocols on).
        unsafe {
            let ptr = ndpi_init_detection_module(0);
            if ptr.is_null() {
                return Err("nDPI: ndpi_init_detection_module failed".into());
            }
            let all = [u32::MAX; BITMASK_WORDS];
            ndpi_set_protocol_detection_bitmask2(ptr, all.as_ptr());
            ndpi_finalize_initialization(ptr);
            let flow_size = ndpi_detection_get_sizeof_ndpi_flow_struct() as usize;
            let m = Module { ptr, flow_size };
            register_names(&m);
            Ok(m)
        }
    }

    /// One payload packet of a flow; returns true when nDPI is done with it.
    pub fn inspect(&self, f: &mut FlowDpi, ip: &[u8], ts_ms: u64, max_packets: u8) -> bool {
        if f.ndpi.is_none() {
            match Flow::new(self.flow_size) {
                Some(fl) => f.ndpi = Some(fl),
                None => return true,
            }
        }
        let Some(flow) = f.ndpi.as_ref().map(|fl| fl.ptr) else {
            return true;
        };
        let len = ip.len().min(u16::MAX as usize) as u16;
        // SAFETY: module and flow are live nDPI objects owned by this shard; `ip` is valid for
        // `len` bytes for the duration of the call, and nDPI does not keep the pointer.
        let p = unsafe { ndpi_detection_process_packet(self.ptr, flow, ip.as_ptr(), len, ts_ms) };
        let detected = p.master != 0 || p.app != 0;
        if detected {
            set_label(f, p, Confidence::Dpi);
        }
        // SAFETY: as above.
        let more = detected && unsafe { ndpi_extra_dissection_possible(self.ptr, flow) } != 0;
        (detected && !more) || f.packets() >= max_packets
    }

    /// The flow leaves the DPI path: nDPI's guess if it found nothing, and the server name it
    /// read (SNI, Host, DNS query). Frees the nDPI flow.
    pub fn finish(&self, f: &mut FlowDpi) {
        let Some(flow) = f.ndpi.take() else { return };
        if !f.l7.proto.is_known() && !f.l7.app.is_known() {
            let mut guessed = 0u8;
            // SAFETY: live module and flow, valid out pointer.
            let p = unsafe { ndpi_detection_giveup(self.ptr, flow.ptr, 1, &mut guessed) };
            set_label(
                f,
                p,
                if guessed != 0 {
                    Confidence::Port
                } else {
                    Confidence::Dpi
                },
            );
        }
        // SAFETY: returns a pointer into the flow struct (a NUL-terminated char array), valid
        // while the flow lives; it is copied before the flow is freed below.
        let name = unsafe { ndpi_get_flow_name(flow.ptr) };
        if !name.is_null() {
            // SAFETY: see above.
            let bytes = unsafe { CStr::from_ptr(name) }.to_bytes();
            if !bytes.is_empty() && f.meta.server_name.is_none() {
                f.meta.server_name = Some(wire_string(bytes));
            }
        }
        drop(flow);
    }
}

impl Drop for Module {
    fn drop(&mut self) {
        // SAFETY: created by ndpi_init_detection_module, freed once; no flow of it is in use
        // (flows are freed on their own and do not reference the module).
        unsafe { ndpi_exit_detection_module(self.ptr) }
    }
}

/// An nDPI flow struct (zeroed on allocation, as nDPI requires).
pub struct Flow {
    ptr: *mut c_void,
}

// SAFETY: owned by one flow of one shard; moved only with its engine.
unsafe impl Send for Flow {}

impl Flow {
    fn new(size: usize) -> Option<Flow> {
        // SAFETY: calloc returns zeroed memory or null; nDPI frees flows with free() through
        // ndpi_free_flow (its default allocator), which matches calloc.
        let ptr = unsafe { libc::calloc(1, size) };
        (!ptr.is_null()).then_some(Flow { ptr })
    }
}

impl Drop for Flow {
    fn drop(&mut self) {
        // SAFETY: allocated in Flow::new, freed exactly once here.
        unsafe { ndpi_free_flow(self.ptr) }
    }
}

impl std::fmt::Debug for Flow {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("ndpi::Flow")
    }
}

fn set_label(f: &mut FlowDpi, p: NdpiProtocol, confidence: Confidence) {
    // nDPI reports a lone protocol as (0, id) or (id, id); sonde's L7 keeps protocol and app.
    let (proto, app) = match (p.master, p.app) {
        (0, a) => (a, 0),
        (m, a) if m == a => (m, 0),
        (m, a) => (m, a),
    };
    f.l7.proto = Proto(proto);
    f.l7.app = Proto(app);
    f.l7.category = category(p.category);
    f.l7.confidence = confidence;
}

/// nDPI 4.2's category numbers: 0..=19 in sonde's order, then 5 custom ones, then music,
/// video, shopping.
fn category(n: u32) -> Category {
    use Category::*;
    match n {
        0..=19 => ids::ALL_CATEGORIES[n as usize],
        25 => Music,
        26 => Video,
        27 => Shopping,
        _ => Unspecified,
    }
}

/// Makes every nDPI protocol name known to [`Proto::name`] (once per process).
fn register_names(m: &Module) {
    static DONE: OnceLock<()> = OnceLock::new();
    DONE.get_or_init(|| {
        let mut names = Vec::new();
        for id in 1..MAX_PROTO_ID {
            // SAFETY: returns a static name for known ids (or a placeholder), NUL-terminated.
            let p = unsafe { ndpi_get_proto_name(m.ptr, id) };
            if p.is_null() {
                continue;
            }
            // SAFETY: see above.
            let name = unsafe { CStr::from_ptr(p) }.to_string_lossy().into_owned();
            if !name.is_empty() && name != "Unknown" {
                names.push((id, name));
            }
        }
        ids::register_extra_names(names);
    });
}
