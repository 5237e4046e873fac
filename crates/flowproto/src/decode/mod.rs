//! Decoding flow-export datagrams (to be written).
