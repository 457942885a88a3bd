//! The default memory limit of a sort job: a share of the memory this process may use (the
//! machine's RAM, or its cgroup's limit when lower), so an input larger than memory spills
//! instead of being killed for running out.

/// The share of usable memory a job's sort may hold by default. The rest is for what the
/// pool does not account: the scan's batches in flight, the writer's row groups, the
/// allocator's free pages.
pub const DEFAULT_MEMORY_SHARE: f64 = 0.5;

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

/// `MemTotal` of `/proc/meminfo`, in bytes.
fn mem_total(meminfo: &str) -> Option<usize> {
    let line = meminfo.lines().find(|l| l.starts_with("MemTotal:"))?;
    let kib: usize = line.split_whitespace().nth(1)?.parse().ok()?;
    Some(kib * 1024)
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
    fn the_default_is_a_share_of_this_machine() {
        if let Some(limit) = default_memory_limit() {
            let ram = mem_total(&std::fs::read_to_string("/proc/meminfo").unwrap()).unwrap();
            assert!(limit > 0 && limit <= ram / 2, "{limit} of {ram}");
        }
    }
}
