//! A sort job's memory: its default limit, a share of the memory this process may use (the
//! machine's RAM, or its cgroup's limit when lower), so an input larger than memory spills
//! instead of being killed for running out; and how many partitions its Parquet scan may
//! read at once within that limit.

/// The share of usable memory a job may hold by default. The rest is for the allocator's
/// free pages and what other processes need.
pub const DEFAULT_MEMORY_SHARE: f64 = 0.5;

/// Host memory the CUDA backend holds outside the pool for the life of the process: the
/// CUDA context and its loaded kernels, and the two 32 MiB staging buffers. Measured on the
/// H100 hosts (docs/performance.md, session 22): SF5 `lineitem` under a 1 GiB limit peaked
/// at 0.99 GiB on the CPU backend and 1.22 to 1.26 GiB on the CUDA backend with 320 MiB set
/// aside for it, so it holds about half a GiB.
pub const CUDA_HOST_BYTES: usize = 512 << 20;

/// The device gather's idle page-locked regions, kept for reuse outside the pool, may hold
/// this share of the limit (`gpusort sort` sets `GPUSORT_HOST_IDLE_BYTES` so).
pub const IDLE_REGIONS_SHARE: usize = 16;

/// The bytes idle gather regions may keep under memory limit `limit`.
pub fn idle_regions_bytes(limit: usize) -> usize {
    limit / IDLE_REGIONS_SHARE
}

/// Limits below this are *small*: the 20 % over the limit that a job's peak may reach
/// does not cover what the process holds beside its pool, so the pool leaves out
/// [`PROCESS_FLOOR_BYTES`] (`gpusort sort` also has its allocator purge sooner, below
/// 8 GiB: its `process_memory.rs`). From 4 GiB up the 20 % covers it (SF10 `lineitem`
/// under 4 GiB peaked at 4.20 GiB on the CUDA backend, docs/performance.md, session 29);
/// before that change, SF1 under 1 GiB on the CPU backend peaked at 1.19 to 1.37 GiB, and
/// under 200 MiB at 0.8 to 0.9 GiB (session 31).
pub const SMALL_LIMIT: usize = 4 << 30;

/// Resident memory the process holds whatever its job: the program's own pages, the
/// runtime's threads, the scan's and the writer's bookkeeping. A job sorting 1 000 rows on
/// the CPU backend peaked at 88 MiB (docs/performance.md, session 31).
pub const PROCESS_FLOOR_BYTES: usize = 96 << 20;

/// The smallest limit a job's peak was seen to stay within (plus 20 %) under: SF1
/// `lineitem` peaked at 0.39 to 0.45 GiB under 400 MiB, and at 0.41 to 0.56 GiB under
/// 200 MiB (docs/performance.md, session 31). Below it the process's own memory, the
/// writer's row group being encoded and the allocator's pages are a larger share than the
/// 20 % allows.
pub const SMALLEST_HELD_LIMIT: usize = 400 << 20;

/// Whether `limit` is [small](SMALL_LIMIT).
pub fn is_small_limit(limit: usize) -> bool {
    limit < SMALL_LIMIT
}

/// The memory pool of a job under `limit`: less what the CUDA backend holds outside the
/// pool when it is in use on `devices` GPUs ([`CUDA_HOST_BYTES`] for each, and
/// [`idle_regions_bytes`] once: the devices share them), and under a [small](SMALL_LIMIT)
/// limit less the [process's floor](PROCESS_FLOOR_BYTES) too, so that the process as a
/// whole stays near the limit; never under half of it.
pub fn pool_bytes(limit: usize, devices: usize) -> usize {
    let mut outside = 0;
    if devices > 0 {
        outside += devices * CUDA_HOST_BYTES + idle_regions_bytes(limit);
    }
    if is_small_limit(limit) {
        outside += PROCESS_FLOOR_BYTES;
    }
    limit.saturating_sub(outside).max(limit / 2)
}

/// The Parquet scan may hold this share of the limit: each scan partition fetches a whole
/// row group's column chunks before it decodes them.
pub const SCAN_SHARE: usize = 4;

/// One scan partition holds about this many times its row group's compressed bytes: the
/// fetched column chunks, and the pages and batch being decoded from them.
pub const SCAN_BYTES_PER_ROW_GROUP_BYTE: f64 = 1.5;

/// The bytes one scan partition holds while it reads row groups of at most
/// `max_row_group_bytes` compressed bytes.
pub fn scan_partition_bytes(max_row_group_bytes: u64) -> usize {
    (max_row_group_bytes as f64 * SCAN_BYTES_PER_ROW_GROUP_BYTE) as usize
}

/// The bytes counted in the pool for `partitions` scan partitions reading row groups of at
/// most `max_row_group_bytes` compressed bytes: [`scan_partition_bytes`] each, but no more
/// than [`SCAN_SHARE`] of the limit (one row group larger than that is read all the same).
pub fn scan_bytes(limit: Option<usize>, max_row_group_bytes: u64, partitions: usize) -> usize {
    let bytes = partitions * scan_partition_bytes(max_row_group_bytes);
    limit.map_or(bytes, |limit| bytes.min(limit / SCAN_SHARE))
}

/// Scan partitions for `cores` cores under memory limit `limit`, reading row groups of at
/// most `max_row_group_bytes` compressed bytes: as many as the cores, but no more than
/// [`SCAN_SHARE`] of the limit holds (at least one).
pub fn scan_partitions(
    limit: Option<usize>,
    max_row_group_bytes: Option<u64>,
    cores: usize,
) -> usize {
    let cores = cores.max(1);
    match (limit, max_row_group_bytes) {
        (Some(limit), Some(bytes)) if bytes > 0 => {
            (limit / SCAN_SHARE / scan_partition_bytes(bytes).max(1)).clamp(1, cores)
        }
        _ => cores,
    }
}

/// Rows per batch where memory allows: on 16 cores, batches of 64 Ki rows instead of
/// DataFusion's 8 Ki cut `gpusort sort` of 100 M rows × 3 columns from 2.9 to 2.0 s, and of
/// SF10 `lineitem` from 7.2 to 5.8 s (docs/performance.md, session 23): each batch costs a
/// hand-over from the scan to the sort, from the sort to the writer, and a job per column
/// for the encoders, whatever its rows.
pub const LARGE_BATCH_ROWS: usize = 64 * 1024;

/// DataFusion's default rows per batch.
pub const DEFAULT_BATCH_ROWS: usize = 8 * 1024;

/// Batches of one scan partition that may be in memory at once (decoded, in transit, being
/// sorted or written), for [`batch_rows`].
pub const BATCHES_PER_PARTITION: usize = 64;

/// Rows per batch for `partitions` scan partitions of rows of about `bytes_per_row` bytes
/// decoded, under memory limit `limit`: [`LARGE_BATCH_ROWS`] when [`SCAN_SHARE`] of the
/// limit holds [`BATCHES_PER_PARTITION`] such batches per partition (or there is no
/// limit), else fewer, down to [`DEFAULT_BATCH_ROWS`].
pub fn batch_rows(limit: Option<usize>, bytes_per_row: Option<u64>, partitions: usize) -> usize {
    match (limit, bytes_per_row) {
        (None, _) => LARGE_BATCH_ROWS,
        (Some(_), None) => DEFAULT_BATCH_ROWS,
        (Some(limit), Some(bytes_per_row)) => {
            let batch_bytes = limit / SCAN_SHARE / (partitions.max(1) * BATCHES_PER_PARTITION);
            (batch_bytes / (bytes_per_row as usize).max(1))
                .clamp(DEFAULT_BATCH_ROWS, LARGE_BATCH_ROWS)
        }
    }
}

/// [`DEFAULT_MEMORY_SHARE`] of the memory this process may use; `None` when it is unknown
/// (not Linux): then no limit.
pub fn default_memory_limit() -> Option<usize> {
    let ram = std::fs::read_to_string("/proc/meminfo")
        .ok()
        .and_then(|text| mem_total(&text));
    let cgroup = std::fs::read_to_string("/sys/fs/cgroup/memory.max")
        .ok()
        .and_then(|text| cgroup_limit(&text));
    let usable = match (ram, cgroup) {
        (Some(ram), Some(cgroup)) => ram.min(cgroup),
        (one, other) => one.or(other)?,
    };
    Some((usable as f64 * DEFAULT_MEMORY_SHARE) as usize)
}

/// The most resident memory this process has held so far (`VmHWM` of `/proc/self/status`),
/// in bytes; `None` where that cannot be read (not Linux).
pub fn peak_resident_bytes() -> Option<u64> {
    let status = std::fs::read_to_string("/proc/self/status").ok()?;
    kib_field(&status, "VmHWM:").map(|kib| kib as u64 * 1024)
}

/// The `Name:   N kB` line `name` of `/proc/meminfo` or `/proc/self/status`, in KiB.
fn kib_field(text: &str, name: &str) -> Option<usize> {
    let line = text.lines().find(|l| l.starts_with(name))?;
    line.split_whitespace().nth(1)?.parse().ok()
}

/// `MemTotal` of `/proc/meminfo`, in bytes.
fn mem_total(meminfo: &str) -> Option<usize> {
    kib_field(meminfo, "MemTotal:").map(|kib| kib * 1024)
}

/// A cgroup v2 `memory.max`: bytes, or `None` for `max` (no limit).
fn cgroup_limit(memory_max: &str) -> Option<usize> {
    memory_max.trim().parse().ok()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn usable_memory_from_meminfo_and_cgroup() {
        let meminfo = "MemTotal:       24576000 kB\nMemFree:         1000 kB\n";
        assert_eq!(mem_total(meminfo), Some(24_576_000 * 1024));
        assert_eq!(mem_total("nothing"), None);
        assert_eq!(cgroup_limit("8589934592\n"), Some(8 << 30));
        assert_eq!(cgroup_limit("max\n"), None);
    }

    #[test]
    fn peak_resident_memory_from_status() {
        let status = "VmPeak:\t  500 kB\nVmHWM:\t    1234 kB\nVmRSS:\t 1000 kB\n";
        assert_eq!(kib_field(status, "VmHWM:"), Some(1234));
        assert_eq!(kib_field(status, "Nothing:"), None);
        if cfg!(target_os = "linux") {
            assert!(peak_resident_bytes().unwrap() > 0);
        }
    }

    #[test]
    fn the_pool_leaves_room_for_what_the_process_holds_outside_it() {
        // From 4 GiB up, the CPU backend's pool is the limit.
        assert_eq!(pool_bytes(4 << 30, 0), 4 << 30);
        assert_eq!(
            pool_bytes(4 << 30, 1),
            (4 << 30) - (512 << 20) - (256 << 20)
        );
        // Each device's context and staging; the idle regions once.
        assert_eq!(pool_bytes(8 << 30, 2), (8 << 30) - (1 << 30) - (512 << 20));
        // Under a small limit, the process's floor too.
        assert!(is_small_limit((4 << 30) - 1) && !is_small_limit(4 << 30));
        assert_eq!(pool_bytes(1 << 30, 0), (1 << 30) - PROCESS_FLOOR_BYTES);
        assert_eq!(
            pool_bytes(3 << 30, 1),
            (3 << 30) - (512 << 20) - (192 << 20) - PROCESS_FLOOR_BYTES
        );
        // Never under half the limit.
        assert_eq!(pool_bytes(1 << 30, 1), 512 << 20);
        assert_eq!(pool_bytes(150 << 20, 0), 75 << 20);
    }

    #[test]
    fn batches_are_large_where_the_limit_holds_them() {
        // No limit, or a limit far above the rows in flight: large batches.
        assert_eq!(batch_rows(None, Some(24), 16), LARGE_BATCH_ROWS);
        assert_eq!(batch_rows(None, None, 16), LARGE_BATCH_ROWS);
        assert_eq!(batch_rows(Some(60 << 30), Some(200), 16), LARGE_BATCH_ROWS);
        // 4 GiB, 4 partitions of 160-byte rows: 1 MiB × 4 ... = a quarter of the limit.
        let rows = batch_rows(Some(4 << 30), Some(160), 4);
        assert!(
            rows > DEFAULT_BATCH_ROWS && rows < LARGE_BATCH_ROWS,
            "{rows}"
        );
        assert!(rows * 160 * 4 * BATCHES_PER_PARTITION <= (4 << 30) / SCAN_SHARE);
        // 1 GiB: DataFusion's default; unknown row sizes under a limit too.
        assert_eq!(batch_rows(Some(1 << 30), Some(160), 4), DEFAULT_BATCH_ROWS);
        assert_eq!(batch_rows(Some(60 << 30), None, 16), DEFAULT_BATCH_ROWS);
    }

    #[test]
    fn scan_partitions_fit_a_share_of_the_limit() {
        // 1 GiB limit, 32 MiB row groups: a quarter of the limit holds 5 partitions of 48 MiB.
        assert_eq!(scan_partitions(Some(1 << 30), Some(32 << 20), 16), 5);
        // A large limit: every core.
        assert_eq!(scan_partitions(Some(64 << 30), Some(32 << 20), 16), 16);
        // A tiny one: still one partition.
        assert_eq!(scan_partitions(Some(1 << 20), Some(32 << 20), 16), 1);
        // No limit, or no row groups (CSV): every core.
        assert_eq!(scan_partitions(None, Some(32 << 20), 16), 16);
        assert_eq!(scan_partitions(Some(1 << 30), None, 16), 16);
        // What the pool counts: never more than the share.
        assert_eq!(scan_bytes(Some(1 << 30), 32 << 20, 5), 5 * (48 << 20));
        assert_eq!(scan_bytes(Some(16 << 20), 32 << 20, 1), 4 << 20);
        assert_eq!(scan_bytes(None, 32 << 20, 2), 96 << 20);
    }

    #[test]
    fn the_default_is_a_share_of_this_machine() {
        if let Some(limit) = default_memory_limit() {
            let ram = mem_total(&std::fs::read_to_string("/proc/meminfo").unwrap()).unwrap();
            assert!(limit > 0 && limit <= ram / 2, "{limit} of {ram}");
        }
    }
}
