//! Memory of the CUDA backend: the device context, stream and buffers; the device memory
//! budget and the queue for the device; pinned chunked transfers; a second stream for copies that overlap kernels; lanes (streams of their own) for independent jobs; reused host memory for
//! gathered windows, and downloads into it; idle permutation vectors.

pub(super) mod budget;
pub(super) mod device;
pub(super) mod download;
pub(super) mod host_memory;
pub(super) mod idle_vectors;
pub(super) mod lanes;
pub(super) mod side_stream;
pub(super) mod transfer;
