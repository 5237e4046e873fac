//! History on local disk: the flow history (every expired flow, with queries) in a data
//! directory that needs no server. See [`store`] for the layout and its guarantees.

pub mod codec;
pub mod hostcache;
pub mod query;
pub mod series;
pub mod store;
pub mod totals;
