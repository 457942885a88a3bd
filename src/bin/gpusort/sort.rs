//! `gpusort sort`: sort Parquet/CSV files into Parquet, with a progress display.
//!
//! The work is `gpusort::pipeline::sort_files`; this file parses sizes, draws the progress
//! bars (on a terminal, unless `--quiet`) and prints the summary line.

use std::sync::Arc;
use std::time::Duration;

use gpusort::pipeline::{sort_files, Progress, ProgressSnapshot, SortJob, SortSummary};
use indicatif::{MultiProgress, ProgressBar, ProgressDrawTarget, ProgressStyle};

/// Runs `job`; the summary line goes to stdout unless `quiet`, with the stage times when
/// `timings`.
pub async fn run(job: SortJob, quiet: bool, timings: bool) -> Result<SortSummary, String> {
    let progress = Arc::new(Progress::new());
    let display = (!quiet).then(|| Display::start(Arc::clone(&progress)));
    let result = sort_files(&job, &progress).await;
    if let Some(display) = display {
        display.finish().await;
    }
    let summary = result.map_err(|e| e.to_string())?;
    if !quiet {
        println!("{summary}");
        if timings {
            println!("stages: {}", summary.stages);
        }
    }
    Ok(summary)
}

/// Parses a size: `1048576`, `512K`, `64MiB`, `2G`, `1.5GB` (binary units either way).
pub fn parse_bytes(text: &str) -> Result<usize, String> {
    let trimmed = text.trim();
    let split = trimmed
        .find(|c: char| !(c.is_ascii_digit() || c == '.'))
        .unwrap_or(trimmed.len());
    let (number, unit) = trimmed.split_at(split);
    let shift = match unit.trim().to_ascii_uppercase().as_str() {
        "" | "B" => 0,
        "K" | "KB" | "KIB" => 10,
        "M" | "MB" | "MIB" => 20,
        "G" | "GB" | "GIB" => 30,
        "T" | "TB" | "TIB" => 40,
        _ => return Err(format!("'{text}': unknown unit (use K, M, G or T)")),
    };
    let value: f64 = number
        .parse()
        .map_err(|_| format!("'{text}' is not a size like 512M or 2G"))?;
    let bytes = value * (1u64 << shift) as f64;
    if !(1.0..=usize::MAX as f64).contains(&bytes) {
        return Err(format!("'{text}' is out of range"));
    }
    Ok(bytes as usize)
}

/// Three bars (read, sorted, written) redrawn from the job's counts.
struct Display {
    stop: tokio::sync::oneshot::Sender<()>,
    task: tokio::task::JoinHandle<()>,
}

impl Display {
    fn start(progress: Arc<Progress>) -> Self {
        let bars = MultiProgress::with_draw_target(ProgressDrawTarget::stderr_with_hz(10));
        let style = ProgressStyle::with_template(
            "{prefix:>8} [{bar:40}] {human_pos}/{human_len} rows {per_sec}",
        )
        .expect("a valid template")
        .progress_chars("=> ");
        let make = |name: &'static str| {
            let bar = bars.add(ProgressBar::new(0).with_style(style.clone()));
            bar.set_prefix(name);
            bar
        };
        let [read, sorted, written] = [make("read"), make("sorted"), make("written")];
        let (stop, mut stopped) = tokio::sync::oneshot::channel();
        let task = tokio::spawn(async move {
            let update = |s: ProgressSnapshot| {
                let total = s.total.unwrap_or(s.read.max(1));
                for (bar, value) in [(&read, s.read), (&sorted, s.sorted), (&written, s.written)] {
                    bar.set_length(total.max(value));
                    bar.set_position(value);
                }
            };
            loop {
                update(progress.snapshot());
                tokio::select! {
                    _ = &mut stopped => break,
                    _ = tokio::time::sleep(Duration::from_millis(100)) => {}
                }
            }
            update(progress.snapshot());
            let _ = bars.clear();
        });
        Self { stop, task }
    }

    async fn finish(self) {
        let _ = self.stop.send(());
        let _ = self.task.await;
    }
}

#[cfg(test)]
mod tests {
    use super::parse_bytes;

    #[test]
    fn sizes_with_units() {
        assert_eq!(parse_bytes("1024").unwrap(), 1024);
        assert_eq!(parse_bytes("512K").unwrap(), 512 << 10);
        assert_eq!(parse_bytes("64MiB").unwrap(), 64 << 20);
        assert_eq!(parse_bytes("1.5G").unwrap(), 3 << 29);
        assert!(parse_bytes("12 parsecs")
            .unwrap_err()
            .contains("unknown unit"));
        assert!(parse_bytes("G").unwrap_err().contains("not a size"));
        assert!(parse_bytes("0").unwrap_err().contains("out of range"));
    }
}
