//! How many CUDA devices this process may see, told without initializing the driver
//! (which takes about 0.1 s in a fresh process): from the driver's own list in `/proc`,
//! and `CUDA_VISIBLE_DEVICES`. An upper bound, for setting memory aside per device before
//! the devices are open; the driver's count is the truth.

use std::path::Path;

/// Where the NVIDIA driver lists the GPUs it drives, one directory each.
const DRIVER_GPUS: &str = "/proc/driver/nvidia/gpus";

/// At most how many devices the driver will show this process, where the driver's list
/// can be read: its GPUs, or fewer where `CUDA_VISIBLE_DEVICES` names fewer.
pub(super) fn listed_devices() -> Option<usize> {
    let listed = gpus_in(Path::new(DRIVER_GPUS))?;
    let visible = std::env::var("CUDA_VISIBLE_DEVICES").ok();
    Some(bounded_by_visible(listed, visible.as_deref()))
}

/// The entries of the driver's list at `dir`.
fn gpus_in(dir: &Path) -> Option<usize> {
    Some(std::fs::read_dir(dir).ok()?.filter(|e| e.is_ok()).count())
}

/// `listed` devices, or fewer where `visible` (`CUDA_VISIBLE_DEVICES`) names fewer: the
/// driver shows at most one device an entry, and none from an entry that names none (empty,
/// or a negative ordinal such as `-1`) on. Entries naming MIG instances (several on one
/// listed GPU) are counted as they are, not bounded by the list.
fn bounded_by_visible(listed: usize, visible: Option<&str>) -> usize {
    let Some(value) = visible else {
        return listed;
    };
    let named = value
        .split(',')
        .map(str::trim)
        .take_while(|entry| !entry.is_empty() && !entry.starts_with('-'))
        .count();
    if value.contains("MIG-") {
        named
    } else {
        listed.min(named)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn visible_devices_bound_the_listed_ones() {
        assert_eq!(bounded_by_visible(4, None), 4);
        assert_eq!(bounded_by_visible(4, Some("1,3")), 2);
        assert_eq!(bounded_by_visible(1, Some("0,1,2")), 1);
        assert_eq!(bounded_by_visible(4, Some("")), 0);
        assert_eq!(bounded_by_visible(4, Some("-1")), 0);
        assert_eq!(bounded_by_visible(4, Some("0,-1,2")), 1);
        assert_eq!(bounded_by_visible(4, Some(" 2, 3 ")), 2);
        assert_eq!(bounded_by_visible(8, Some("GPU-1a2b,GPU-3c4d")), 2);
        assert_eq!(bounded_by_visible(1, Some("MIG-1a2b,MIG-3c4d")), 2);
    }

    #[test]
    fn the_driver_list_counts_its_entries() {
        let dir = tempfile::tempdir().unwrap();
        assert_eq!(gpus_in(dir.path()), Some(0));
        for bus in ["0000:18:00.0", "0000:2a:00.0"] {
            std::fs::create_dir(dir.path().join(bus)).unwrap();
        }
        assert_eq!(gpus_in(dir.path()), Some(2));
        assert_eq!(gpus_in(&dir.path().join("missing")), None);
    }
}
