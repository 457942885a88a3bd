//! Kernel sources embedded in the binary, compiled by NVRTC to CUBIN for the device's exact
//! architecture, cached on disk, and loaded as modules.
//!
//! CUBIN rather than PTX: PTX written by an NVRTC newer than the driver does not load, while
//! machine code for the exact architecture loads on any driver that supports the device.
//! The cache file is named by (kernel file, architecture, NVRTC version, hash of the sources
//! and options), so a changed kernel, tuning or compiler never reuses a stale binary. The
//! cache directory is `$GPUSORT_KERNEL_CACHE` (read into [`Tuning`]), else
//! `$XDG_CACHE_HOME/gpusort`, else `~/.cache/gpusort`; a cache that cannot be written only
//! costs a compile. Every file is compiled with the `-D` options [`Tuning::defines`] gives
//! it.

use std::borrow::Cow;
use std::ffi::{c_char, c_void, CString};
use std::path::{Path, PathBuf};

use cudarc::driver::result;
use cudarc::driver::sys;
use cudarc::nvrtc::sys as nvrtc;

use crate::cuda::error::{CudaError, CudaResult};
use crate::cuda::faults::{self, OpenFault};
use crate::cuda::memory::device::Device;
use crate::cuda::tuning::Tuning;

/// One `.cu` file of `kernels/`.
#[derive(Debug, Clone, Copy)]
pub struct KernelFile {
    /// File name, e.g. `onesweep.cu`.
    pub name: &'static str,
    /// Its text.
    pub source: &'static str,
    /// The `extern "C"` kernels its launcher loads: [`Module::kernel`] refuses any other
    /// name, and CI checks that each is in the compiled CUBIN
    /// (`every_kernel_compiles_for_sm80_and_sm90`), so an entry point renamed or removed
    /// in the source fails without a GPU.
    pub entry_points: &'static [&'static str],
}

/// The entry points of `merge.cuh`'s `MERGE_ENTRY_POINTS(prefix, ..)` for each prefix,
/// then the other names.
macro_rules! with_merge_entry_points {
    ([$($prefix:literal),*], [$($other:literal),* $(,)?]) => {
        &[
            $(
                concat!($prefix, "_block_sort"),
                concat!($prefix, "_find_dirty"),
                concat!($prefix, "_merge_tiles"),
                concat!($prefix, "_copy_back"),
                concat!($prefix, "_tile_radius"),
                concat!($prefix, "_place"),
            )*
            $($other),*
        ]
    };
}

/// Headers the kernel files may include (`#include "common.cuh"`).
pub(super) const HEADERS: &[(&str, &str)] = &[
    ("common.cuh", include_str!("../../kernels/common.cuh")),
    ("merge.cuh", include_str!("../../kernels/merge.cuh")),
    ("fields.cuh", include_str!("../../kernels/fields.cuh")),
    ("window.cuh", include_str!("../../kernels/window.cuh")),
    (
        "segment_tile.cuh",
        include_str!("../../kernels/segment_tile.cuh"),
    ),
];

/// The OneSweep radix sort kernels.
pub(super) const ONESWEEP: KernelFile = KernelFile {
    name: "onesweep.cu",
    source: include_str!("../../kernels/onesweep.cu"),
    entry_points: &[
        "onesweep_histogram_u32",
        "onesweep_histogram_u64",
        "onesweep_pass_u32_keys",
        "onesweep_pass_u32_pairs",
        "onesweep_pass_u32_rowids",
        "onesweep_pass_u64_keys",
        "onesweep_pass_u64_pairs",
        "onesweep_pass_u64_rowids",
        "onesweep_gather_u64",
    ],
};

/// Key encoding from raw Arrow buffers.
pub(super) const ENCODE: KernelFile = KernelFile {
    name: "encode.cu",
    source: include_str!("../../kernels/encode.cu"),
    entry_points: &[
        "encode_field_stats",
        "encode_pack_field",
        "encode_partition_ids",
    ],
};

/// Ties of long byte-like keys ordered after the sort.
pub(super) const REFINE: KernelFile = KernelFile {
    name: "refine.cu",
    source: include_str!("../../kernels/refine.cu"),
    entry_points: &[
        "refine_iota",
        "refine_heads_init",
        "refine_mark_field",
        "refine_first_flags",
        "refine_block_sums",
        "refine_scan_tiles",
        "refine_compact",
        "refine_step_keys",
        "refine_gather_perm",
        "refine_scatter_perm",
        "refine_step_heads",
        "refine_next_flags",
    ],
};

/// Payload columns gathered in sorted order.
pub(super) const GATHER: KernelFile = KernelFile {
    name: "gather.cu",
    source: include_str!("../../kernels/gather.cu"),
    entry_points: &[
        "gather_w1",
        "gather_w2",
        "gather_w4",
        "gather_w8",
        "gather_w16",
        "gather_w32",
        "gather_bits",
        "gather_views",
        "scan_view_bytes",
        "copy_view_bytes",
        "view_lengths",
        "add_stretch_bases",
        "view_bytes_end_to_end",
        "gather_peer_w1",
        "gather_peer_w2",
        "gather_peer_w4",
        "gather_peer_w8",
        "gather_peer_w16",
        "gather_peer_w32",
        "gather_peer_bits",
    ],
};

/// Narrowed uploads put back to full width on the device.
pub(super) const NARROW: KernelFile = KernelFile {
    name: "narrow.cu",
    source: include_str!("../../kernels/narrow.cu"),
    entry_points: &["widen_4_8", "widen_4_16", "widen_8_16"],
};

/// Window functions over a run's sorted rows.
pub(super) const WINDOW: KernelFile = KernelFile {
    name: "window.cu",
    source: include_str!("../../kernels/window.cu"),
    entry_points: &[
        "window_distinct_w1",
        "window_distinct_w2",
        "window_distinct_w4",
        "window_distinct_w8",
        "window_distinct_w16",
        "window_mark_rows",
        "window_load_flags",
        "window_load_count",
        "window_load_i8",
        "window_load_i16",
        "window_load_i32",
        "window_load_i64",
        "window_load_u8",
        "window_load_u16",
        "window_load_u32",
        "window_load_u64",
        "window_load_d128",
        "window_scan_reduce_u32",
        "window_scan_tiles_u32",
        "window_scan_apply_u32",
        "window_scan_reduce_u64",
        "window_scan_tiles_u64",
        "window_scan_apply_u64",
        "window_scan_reduce_u128",
        "window_scan_tiles_u128",
        "window_scan_apply_u128",
        "window_starts",
        "window_ranking",
        "window_frame_u64",
        "window_frame_u128",
        "window_average_d128",
        "window_load_float_i8",
        "window_load_float_i16",
        "window_load_float_i32",
        "window_load_float_i64",
        "window_load_float_u8",
        "window_load_float_u16",
        "window_load_float_u32",
        "window_load_float_u64",
        "window_load_float_f32",
        "window_load_float_f64",
        "window_scan_reduce_dd",
        "window_scan_tiles_dd",
        "window_scan_apply_dd",
        "window_frame_dd",
        "window_range_bound_w1",
        "window_range_bound_w2",
        "window_range_bound_w4",
        "window_range_bound_w8",
    ],
};

/// Window functions that pick one row's value (`lag` .. `nth_value`, `min`, `max`).
pub(super) const WINDOW_VALUES: KernelFile = KernelFile {
    name: "window_values.cu",
    source: include_str!("../../kernels/window_values.cu"),
    entry_points: &[
        "window_value_w1",
        "window_value_w2",
        "window_value_w4",
        "window_value_w8",
        "window_value_w16",
        "window_key_i8",
        "window_key_i16",
        "window_key_i32",
        "window_key_i64",
        "window_key_u8",
        "window_key_u16",
        "window_key_u32",
        "window_key_u64",
        "window_key_f32",
        "window_key_f64",
        "window_key_d128",
        "window_unkey_i8",
        "window_unkey_i16",
        "window_unkey_i32",
        "window_unkey_i64",
        "window_unkey_u8",
        "window_unkey_u16",
        "window_unkey_u32",
        "window_unkey_u64",
        "window_unkey_f32",
        "window_unkey_f64",
        "window_unkey_d128",
        "window_sparse_u64",
        "window_sparse_u128",
        "window_segments_u64",
        "window_segments_u128",
        "window_scan_reduce_seg_u64",
        "window_scan_tiles_seg_u64",
        "window_scan_apply_seg_u64",
        "window_scan_reduce_seg_u128",
        "window_scan_tiles_seg_u128",
        "window_scan_apply_seg_u128",
        "window_extreme_u64",
        "window_extreme_u128",
    ],
};

/// Parquet data pages of fixed-width and byte-array columns, and their Snappy compression.
pub(super) const PARQUET_PAGES: KernelFile = KernelFile {
    name: "parquet_pages.cu",
    source: include_str!("../../kernels/parquet_pages.cu"),
    entry_points: &[
        "plain_page_bodies",
        "delta_page_values",
        "dict_chunk_runs",
        "dict_page_values",
        "page_extremes",
        "snappy_compress",
        "snappy_place",
    ],
};

/// The dictionaries of column chunks (fixed-width values or byte arrays), for `RLE_DICTIONARY` pages.
pub(super) const PARQUET_DICTIONARY: KernelFile = KernelFile {
    name: "parquet_dictionary.cu",
    source: include_str!("../../kernels/parquet_dictionary.cu"),
    entry_points: &[
        "dict_insert",
        "dict_first",
        "dict_count",
        "dict_scan",
        "dict_entries",
        "dict_ids",
    ],
};

/// The merge sort for nearly sorted keys, and the sortedness probe.
pub(super) const LOCALITY: KernelFile = KernelFile {
    name: "locality_sort.cu",
    source: include_str!("../../kernels/locality_sort.cu"),
    entry_points: with_merge_entry_points!(
        ["locality_u32", "locality_u64"],
        [
            "merge_scan_tiles",
            "locality_probe_u32",
            "locality_probe_u64",
            "locality_window_u32",
            "locality_window_u64",
            "locality_window_check_u32",
            "locality_window_check_u64",
        ]
    ),
};

/// The merge sort within known segments.
pub(super) const SEGMENTED: KernelFile = KernelFile {
    name: "segmented_sort.cu",
    source: include_str!("../../kernels/segmented_sort.cu"),
    entry_points: with_merge_entry_points!(
        ["segmented"],
        [
            "merge_scan_tiles",
            "segment_starts_u8",
            "segment_starts_u16",
            "segment_ids",
            "segment_tile_bounds",
            "segment_tiles_u32",
            "segment_tiles_u64",
            "segment_ranks_u32",
            "segment_ranks_u64",
            "segment_key_u32",
            "segment_word",
        ]
    ),
};

/// Segment tiles larger than the merge tile, one block per SM.
pub(super) const SEGMENT_TILES_LARGE: KernelFile = KernelFile {
    name: "segment_tiles_large.cu",
    source: include_str!("../../kernels/segment_tiles_large.cu"),
    entry_points: &[
        "segment_tile_windows",
        "segment_tiles_large_u32",
        "segment_tiles_large_u64",
    ],
};

/// The steps of one sort spread over several devices by key ranges.
pub(super) const SPREAD: KernelFile = KernelFile {
    name: "spread.cu",
    source: include_str!("../../kernels/spread.cu"),
    entry_points: &[
        "spread_sample",
        "spread_classify",
        "spread_row_ids",
        "spread_gather_u32",
    ],
};

/// Every kernel file (compile checks, cache paths).
pub(crate) const ALL_KERNELS: &[KernelFile] = &[
    ONESWEEP,
    ENCODE,
    REFINE,
    GATHER,
    NARROW,
    WINDOW,
    WINDOW_VALUES,
    PARQUET_PAGES,
    PARQUET_DICTIONARY,
    LOCALITY,
    SEGMENTED,
    SEGMENT_TILES_LARGE,
    SPREAD,
];

/// The source of a kernel file or header: embedded, or, for kernel tuning runs, read from
/// `dir/<name>` (`GPUSORT_KERNEL_DIR`) when the file exists there.
fn source_text(name: &str, embedded: &'static str, dir: Option<&Path>) -> Cow<'static, str> {
    dir.and_then(|dir| std::fs::read_to_string(dir.join(name)).ok())
        .map_or(Cow::Borrowed(embedded), |text| {
            log::warn!("gpusort: kernel source {name} taken from GPUSORT_KERNEL_DIR");
            Cow::Owned(text)
        })
}

/// The headers, as [`source_text`] finds them.
fn header_sources(dir: Option<&Path>) -> Vec<(&'static str, Cow<'static, str>)> {
    HEADERS
        .iter()
        .map(|(name, text)| (*name, source_text(name, text, dir)))
        .collect()
}

/// Whether the NVRTC library can be loaded here.
pub(super) fn is_nvrtc_present() -> bool {
    // SAFETY: only tries to dlopen the library; never panics.
    std::panic::catch_unwind(|| unsafe { nvrtc::is_culib_present() }).unwrap_or(false)
}

/// NVRTC's (major, minor) version.
pub(super) fn nvrtc_version() -> CudaResult<(i32, i32)> {
    if !is_nvrtc_present() {
        return Err(CudaError::LibraryMissing { library: "NVRTC" });
    }
    let (mut major, mut minor) = (0, 0);
    // SAFETY: two valid out-pointers.
    let code = unsafe { nvrtc::nvrtcVersion(&mut major, &mut minor) };
    if code != nvrtc::nvrtcResult::NVRTC_SUCCESS {
        return Err(CudaError::Compile {
            file: "-",
            arch: 0,
            log: format!("nvrtcVersion: {code:?}"),
        });
    }
    Ok((major, minor))
}

/// Compiles `file` to CUBIN for `sm_<arch>` with the `-D` options of `tuning`.
pub(super) fn compile_cubin(file: KernelFile, arch: u32, tuning: &Tuning) -> CudaResult<Vec<u8>> {
    if faults::take_open(OpenFault::Compile) {
        return Err(CudaError::Compile {
            file: file.name,
            arch,
            log: "injected by GPUSORT_INJECT_FAULT=compile".into(),
        });
    }
    let defines = tuning.defines(file.name);
    compile_with(file, arch, &defines, tuning.kernel_dir.as_deref())
}

/// Compiles `file` to CUBIN for `sm_<arch>` with `-D` `defines`, its sources embedded or
/// read from `dir`.
fn compile_with(
    file: KernelFile,
    arch: u32,
    defines: &[(String, String)],
    dir: Option<&Path>,
) -> CudaResult<Vec<u8>> {
    if !is_nvrtc_present() {
        return Err(CudaError::LibraryMissing { library: "NVRTC" });
    }
    let fail = |log: String| CudaError::Compile {
        file: file.name,
        arch,
        log,
    };
    let text = |s: &str| CString::new(s).map_err(|_| fail("a NUL byte in the source".into()));
    let source = text(&source_text(file.name, file.source, dir))?;
    let name = text(file.name)?;
    let headers = header_sources(dir);
    let header_texts = headers
        .iter()
        .map(|h| text(&h.1))
        .collect::<CudaResult<Vec<_>>>()?;
    let header_names = headers
        .iter()
        .map(|h| text(h.0))
        .collect::<CudaResult<Vec<_>>>()?;
    let mut options = vec![
        format!("--gpu-architecture=sm_{arch}"),
        "-std=c++17".to_string(),
    ];
    options.extend(defines.iter().map(|(k, v)| format!("-D{k}={v}")));
    let options = options
        .iter()
        .map(|o| text(o))
        .collect::<CudaResult<Vec<_>>>()?;
    let pointers = |v: &[CString]| v.iter().map(|s| s.as_ptr()).collect::<Vec<*const c_char>>();
    let mut program: nvrtc::nvrtcProgram = std::ptr::null_mut();
    // SAFETY: every pointer refers to a NUL-terminated string that outlives the call;
    // header arrays have `HEADERS.len()` entries each.
    let code = unsafe {
        nvrtc::nvrtcCreateProgram(
            &mut program,
            source.as_ptr(),
            name.as_ptr(),
            HEADERS.len() as i32,
            pointers(&header_texts).as_ptr(),
            pointers(&header_names).as_ptr(),
        )
    };
    if code != nvrtc::nvrtcResult::NVRTC_SUCCESS {
        return Err(fail(format!("nvrtcCreateProgram: {code:?}")));
    }
    // SAFETY: `program` was created above and is destroyed below, once.
    let compiled = unsafe {
        let code =
            nvrtc::nvrtcCompileProgram(program, options.len() as i32, pointers(&options).as_ptr());
        let outcome = if code == nvrtc::nvrtcResult::NVRTC_SUCCESS {
            program_cubin(program).ok_or_else(|| fail("NVRTC returned no CUBIN".into()))
        } else {
            Err(fail(format!("{code:?}\n{}", program_log(program))))
        };
        nvrtc::nvrtcDestroyProgram(&mut program);
        outcome
    };
    compiled
}

/// # Safety
/// `program` is a compiled NVRTC program.
unsafe fn program_cubin(program: nvrtc::nvrtcProgram) -> Option<Vec<u8>> {
    let mut size = 0usize;
    if unsafe { nvrtc::nvrtcGetCUBINSize(program, &mut size) } != nvrtc::nvrtcResult::NVRTC_SUCCESS
        || size == 0
    {
        return None;
    }
    let mut cubin = vec![0u8; size];
    let code = unsafe { nvrtc::nvrtcGetCUBIN(program, cubin.as_mut_ptr() as *mut c_char) };
    (code == nvrtc::nvrtcResult::NVRTC_SUCCESS).then_some(cubin)
}

/// # Safety
/// `program` is a live NVRTC program.
unsafe fn program_log(program: nvrtc::nvrtcProgram) -> String {
    let mut size = 0usize;
    if unsafe { nvrtc::nvrtcGetProgramLogSize(program, &mut size) }
        != nvrtc::nvrtcResult::NVRTC_SUCCESS
    {
        return String::new();
    }
    let mut log = vec![0u8; size.max(1)];
    unsafe { nvrtc::nvrtcGetProgramLog(program, log.as_mut_ptr() as *mut c_char) };
    String::from_utf8_lossy(&log)
        .trim_end_matches('\0')
        .trim()
        .to_string()
}

/// FNV-1a, 64 bits: a hash that is the same in every build (the cache key must be).
fn fnv1a(parts: &[&[u8]]) -> u64 {
    let mut hash = 0xcbf2_9ce4_8422_2325u64;
    for part in parts {
        for byte in part.iter().chain(&[0xff]) {
            hash ^= *byte as u64;
            hash = hash.wrapping_mul(0x0000_0100_0000_01b3);
        }
    }
    hash
}

fn cache_dir(tuning: &Tuning) -> Option<PathBuf> {
    let env = |k: &str| {
        std::env::var_os(k)
            .filter(|v| !v.is_empty())
            .map(PathBuf::from)
    };
    tuning
        .kernel_cache
        .clone()
        .filter(|p| !p.as_os_str().is_empty())
        .or_else(|| env("XDG_CACHE_HOME").map(|p| p.join("gpusort")))
        .or_else(|| env("HOME").map(|p| p.join(".cache").join("gpusort")))
}

/// The cache file of `file` compiled for `arch` with the options of `tuning` by this NVRTC.
fn cache_path(file: KernelFile, arch: u32, tuning: &Tuning) -> CudaResult<Option<PathBuf>> {
    let (major, minor) = nvrtc_version()?;
    let dir = tuning.kernel_dir.as_deref();
    let source = source_text(file.name, file.source, dir);
    let headers = header_sources(dir);
    let defines = tuning.defines(file.name);
    let mut parts: Vec<&[u8]> = vec![source.as_bytes()];
    for (name, text) in &headers {
        parts.extend([name.as_bytes(), text.as_bytes()]);
    }
    for (k, v) in &defines {
        parts.extend([k.as_bytes(), v.as_bytes()]);
    }
    let stem = file.name.trim_end_matches(".cu");
    let name = format!(
        "{stem}-sm{arch}-nvrtc{major}.{minor}-{:016x}.cubin",
        fnv1a(&parts)
    );
    Ok(cache_dir(tuning).map(|d| d.join(name)))
}

/// Loads `file` for `arch` with the options of `tuning`: its CUBIN from the disk cache,
/// or compiled and stored there. A cached CUBIN the driver refuses (a truncated or
/// corrupt file) is compiled again and replaced.
pub(super) fn load_module(file: KernelFile, arch: u32, tuning: &Tuning) -> CudaResult<Module> {
    let path = cache_path(file, arch, tuning)?;
    if let Some(path) = &path {
        if let Ok(cubin) = std::fs::read(path) {
            match Module::load(file, &cubin) {
                Ok(module) => return Ok(module),
                Err(error) => log::warn!(
                    "gpusort: cached kernel {} could not be loaded ({error}); compiling it again",
                    path.display()
                ),
            }
        }
    }
    let cubin = compile_cubin(file, arch, tuning)?;
    if let Some(path) = path {
        store_atomically(&path, &cubin);
    }
    Module::load(file, &cubin)
}

/// Where the cached CUBIN of `file` for `arch` with the options of `tuning` lies (tests of
/// the cache).
pub fn cached_kernel_path(file_name: &str, arch: u32, tuning: &Tuning) -> Option<PathBuf> {
    let file = ALL_KERNELS.iter().find(|f| f.name == file_name)?;
    cache_path(*file, arch, tuning).ok().flatten()
}

fn store_atomically(path: &PathBuf, bytes: &[u8]) {
    let Some(dir) = path.parent() else { return };
    let temp = path.with_extension(format!("tmp{}", std::process::id()));
    let stored = std::fs::create_dir_all(dir)
        .and_then(|_| std::fs::write(&temp, bytes))
        .and_then(|_| std::fs::rename(&temp, path));
    if let Err(e) = stored {
        let _ = std::fs::remove_file(&temp);
        log::debug!("gpusort: kernel cache {} not written: {e}", path.display());
    }
}

/// A loaded module; its functions live as long as it does.
#[derive(Debug)]
pub struct Module {
    handle: sys::CUmodule,
    file: KernelFile,
}

// SAFETY: module and function handles may be used from any thread of the context.
unsafe impl Send for Module {}
unsafe impl Sync for Module {}

/// A kernel entry point of a loaded [`Module`].
#[derive(Debug, Clone, Copy)]
pub struct Kernel {
    /// The raw function handle.
    pub function: sys::CUfunction,
    /// The entry point's name, for errors.
    pub name: &'static str,
}

// SAFETY: as for `Module`.
unsafe impl Send for Kernel {}
unsafe impl Sync for Kernel {}

impl Module {
    /// Loads CUBIN `image` of kernel file `file` into the current context.
    pub fn load(file: KernelFile, image: &[u8]) -> CudaResult<Self> {
        if faults::take_open(OpenFault::ModuleLoad) {
            return Err(CudaError::Driver {
                call: "cuModuleLoadData",
                code: sys::CUresult::CUDA_ERROR_INVALID_IMAGE,
            });
        }
        // SAFETY: `image` is a complete CUBIN produced by NVRTC; the driver copies it.
        let handle = unsafe { result::module::load_data(image.as_ptr() as *const _) }
            .map_err(|e| CudaError::driver("cuModuleLoadData", e))?;
        Ok(Self { handle, file })
    }

    /// The entry point `name`, one of the file's [`KernelFile::entry_points`].
    pub fn kernel(&self, name: &str) -> CudaResult<Kernel> {
        let file = self.file.name;
        let Some(&name) = self.file.entry_points.iter().find(|e| **e == name) else {
            return Err(CudaError::Unavailable(format!(
                "{name} is not among the entry points declared for {file} (src/cuda/module.rs)"
            )));
        };
        let c_name = CString::new(name).expect("kernel names have no NUL");
        // SAFETY: the module is loaded for the life of `self`.
        let function =
            unsafe { result::module::get_function(self.handle, c_name) }.map_err(|e| {
                log::error!("gpusort: {file} has no entry point {name}");
                CudaError::driver("cuModuleGetFunction", e)
            })?;
        Ok(Kernel { function, name })
    }
}

/// A kernel parameter: the address of its value.
pub(super) fn arg<T>(value: &mut T) -> *mut c_void {
    value as *mut T as *mut c_void
}

/// Launches `kernel` on the device's stream; `rows` only labels errors.
pub(super) fn launch(
    device: &Device,
    kernel: Kernel,
    grid: u32,
    block: u32,
    params: &mut [*mut c_void],
    rows: usize,
) -> CudaResult<()> {
    launch_shared(device, kernel, grid, block, 0, params, rows)
}

/// [`launch`] with `shared_bytes` of dynamic shared memory per block.
pub(super) fn launch_shared(
    device: &Device,
    kernel: Kernel,
    grid: u32,
    block: u32,
    shared_bytes: u32,
    params: &mut [*mut c_void],
    rows: usize,
) -> CudaResult<()> {
    // SAFETY: `params` matches the kernel's signature (each launcher builds it from the
    // `.cu` declaration, in order); every pointer argument is a live device buffer of at
    // least `rows` elements (or the fixed sizes of the look-back state), and input and
    // output buffers of one pass never alias.
    unsafe {
        result::launch_kernel(
            kernel.function,
            (grid, 1, 1),
            (block, 1, 1),
            shared_bytes,
            device.stream(),
            params,
        )
    }
    .map_err(|e| e.0)
    .and_then(|()| match injected_launch_failure(device) {
        true => Err(sys::CUresult::CUDA_ERROR_LAUNCH_FAILED),
        false => Ok(()),
    })
    .map_err(|code| CudaError::Launch {
        kernel: kernel.name,
        grid,
        block,
        rows,
        code,
    })
}

/// Whether the work holding `device` armed a launch failure (then taken).
fn injected_launch_failure(device: &Device) -> bool {
    faults::any_armed() && faults::take_launch_failure(device.budget.holder_faults())
}

#[cfg(test)]
mod tests {
    use super::*;

    /// CI installs NVRTC (see `.ci/run`) and sets `GPUSORT_REQUIRE_NVRTC=1`; elsewhere a
    /// machine without NVRTC skips this check.
    #[test]
    fn every_kernel_compiles_for_sm80_and_sm90() {
        if !is_nvrtc_present() {
            assert!(
                std::env::var("GPUSORT_REQUIRE_NVRTC").as_deref() != Ok("1"),
                "GPUSORT_REQUIRE_NVRTC=1 but NVRTC cannot be loaded (LD_LIBRARY_PATH?)"
            );
            eprintln!("skipped: NVRTC not installed");
            return;
        }
        // The kernels have no defaults of their own: each compiles only with every option
        // that `Tuning::defines` gives it.
        let tuning = Tuning::default();
        for file in ALL_KERNELS {
            for arch in [80, 90] {
                let cubin = compile_cubin(*file, arch, &tuning)
                    .unwrap_or_else(|e| panic!("{} for sm_{arch}: {e}", file.name));
                assert_eq!(
                    &cubin[..4],
                    b"\x7fELF",
                    "{} sm_{arch}: not a CUBIN",
                    file.name
                );
                for name in file.entry_points {
                    assert!(
                        has_symbol(&cubin, name),
                        "{} sm_{arch}: no entry point {name}",
                        file.name
                    );
                }
            }
        }
        // The Snappy kernel's other shapes (`GPUSORT_SNAPPY_SHAPE`) compile too.
        use crate::cuda::tuning::SnappyShape;
        for shape in [SnappyShape::GLOBAL, SnappyShape::STAGED_32K] {
            let tuning = Tuning {
                snappy: shape,
                ..Tuning::default()
            };
            let cubin = compile_cubin(PARQUET_PAGES, 90, &tuning)
                .unwrap_or_else(|e| panic!("parquet_pages.cu, Snappy {shape:?}: {e}"));
            assert!(has_symbol(&cubin, "snappy_compress"));
        }
    }

    /// No kernel file has defaults of its own for what `Tuning::defines` passes: without
    /// the options, each stops at its `#error`.
    #[test]
    fn no_kernel_compiles_without_its_options() {
        if !is_nvrtc_present() {
            eprintln!("skipped: NVRTC not installed");
            return;
        }
        for file in ALL_KERNELS {
            match compile_with(*file, 90, &[], None) {
                Err(CudaError::Compile { log, .. }) => assert!(
                    log.contains("src/cuda/tuning.rs"),
                    "{}: failed, but not at its #error: {log}",
                    file.name
                ),
                other => panic!(
                    "{} compiled without its -D options: {:?}",
                    file.name,
                    other.map(|cubin| cubin.len())
                ),
            }
        }
    }

    /// Whether the CUBIN's string table holds `name` as a whole symbol name (NUL before
    /// and after: section names such as `.text.<name>` have a dot before it).
    fn has_symbol(cubin: &[u8], name: &str) -> bool {
        let needle = [b"\0", name.as_bytes(), b"\0"].concat();
        cubin.windows(needle.len()).any(|w| w == needle)
    }

    #[test]
    fn symbol_search_matches_whole_names_only() {
        let table = b"\0.text.segment_tiles_u32\0segment_tiles_u64\0";
        assert!(has_symbol(table, "segment_tiles_u64"));
        assert!(!has_symbol(table, "segment_tiles_u32"));
        assert!(!has_symbol(table, "tiles_u64"));
    }

    #[test]
    fn cache_key_hash_is_stable_and_separates_parts() {
        assert_eq!(fnv1a(&[b"a"]), fnv1a(&[b"a"]));
        assert_ne!(fnv1a(&[b"ab", b"c"]), fnv1a(&[b"a", b"bc"]));
    }
}
