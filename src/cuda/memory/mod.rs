//! Memory of the CUDA backend: the device context, stream and buffers; pinned chunked
//! transfers; reused host memory for gathered windows; idle permutation vectors.

pub(super) mod device;
pub(super) mod host_memory;
pub(super) mod idle_vectors;
pub(super) mod transfer;
