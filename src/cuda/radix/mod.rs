//! The radix sort: OneSweep (`onesweep.rs`, launcher of `kernels/onesweep.cu`).

pub(super) mod onesweep;
