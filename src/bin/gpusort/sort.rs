//! `gpusort sort`: sort Parquet/CSV files into Parquet, with a progress display.
//!
//! The work is `gpusort::pipeline::sort_files`; this file parses sizes, draws the progress
//! bars (on a terminal, unless `--quiet`) and prints the summary line.

use std::sync::Arc;
use std::time::{Duration, Instant};

use gpusort::pipeline::{sort_files, Progress, ProgressSnapshot, SortJob, SortSummary};
use indicatif::{
    HumanBytes, HumanCount, MultiProgress, ProgressBar, ProgressDrawTarget, ProgressStyle,
};

use crate::signals;

/// Set (to anything), the job's timeline goes to stderr at its end: when the sort's
/// stages ended, rows reached the writer, row groups were appended and files flushed.
const TRACE_VARIABLE: &str = "GPUSORT_TRACE";

/// Why a job did not finish.
pub enum Stopped {
    /// It failed, for this reason.
    Failed(String),
    /// SIGINT or SIGTERM (this number) stopped it; nothing was written.
    Signal(i32),
}

/// Runs `job` until it ends or a SIGINT or SIGTERM stops it (the job is dropped: its
/// temporary output is removed, its sort cancelled); the summary line goes to stdout unless
/// `quiet`, with the stage times when `timings`.
pub async fn run(job: SortJob, quiet: bool, timings: bool) -> Result<SortSummary, Stopped> {
    let progress = Arc::new(Progress::new());
    let started = Instant::now();
    let tracing = std::env::var_os(TRACE_VARIABLE).is_some();
    gpusort::trace::enable(tracing);
    let display = (!quiet).then(|| Display::start(Arc::clone(&progress)));
    let result = tokio::select! {
        // A job that finished wins over a signal that came at the same moment.
        biased;
        result = sort_files(&job, &progress) => result.map_err(|e| Stopped::Failed(e.to_string())),
        signal = signals::received() => Err(Stopped::Signal(signal)),
    };
    gpusort::trace::event(|| "job: returned, its state dropped".to_string());
    if let Some(display) = display {
        display.finish().await;
    }
    if tracing {
        gpusort::trace::enable(false);
        eprintln!("timeline (ms from the start):");
        for (at, what) in gpusort::trace::take() {
            let ms = at.saturating_duration_since(started).as_secs_f64() * 1e3;
            eprintln!("  {ms:8.1}  {what}");
        }
    }
    let summary = result?;
    if !quiet {
        println!("{summary}");
        if timings {
            println!("stages: {}", summary.stages);
            if let Some(columns) = summary.output.device_pages() {
                println!("pages built on the device, column chunks by column: {columns}");
            }
        }
    }
    Ok(summary)
}

/// Three bars (read, sorted, written) redrawn from the job's counts: rows, rows per second,
/// bytes and bytes per second (input bytes in proportion to the rows read and sorted; the
/// output's bytes as written).
struct Display {
    stop: tokio::sync::oneshot::Sender<()>,
    task: tokio::task::JoinHandle<()>,
}

impl Display {
    fn start(progress: Arc<Progress>) -> Self {
        let bars = MultiProgress::with_draw_target(ProgressDrawTarget::stderr_with_hz(10));
        let style = ProgressStyle::with_template(
            "{prefix:>8} [{bar:40}] {human_pos}/{human_len} rows{msg}",
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
            // When each stage passed its first row: its byte rate counts from there.
            let mut began: [Option<Instant>; 3] = [None; 3];
            let mut update = |s: ProgressSnapshot| {
                let total = s.total.unwrap_or(s.read.max(1));
                let stages = [
                    (&read, s.read, s.input_bytes_of(s.read)),
                    (&sorted, s.sorted, s.input_bytes_of(s.sorted)),
                    (&written, s.written, s.written_bytes),
                ];
                for ((bar, rows, bytes), began) in stages.into_iter().zip(&mut began) {
                    bar.set_length(total.max(rows));
                    bar.set_position(rows);
                    if rows > 0 {
                        let since = *began.get_or_insert_with(Instant::now);
                        let seconds = since.elapsed().as_secs_f64().max(1e-3);
                        bar.set_message(format!(
                            ", {} rows/s; {}, {}/s",
                            HumanCount((rows as f64 / seconds) as u64),
                            HumanBytes(bytes),
                            HumanBytes((bytes as f64 / seconds) as u64)
                        ));
                    }
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
