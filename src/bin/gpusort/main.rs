//! `gpusort`: the command line.
//!
//! ```text
//! gpusort demo [--rows N]                       generate a table, ORDER BY it, verify
//! gpusort sql "<statements>" [--table name=path ...] [--explain]
//! ```
//!
//! Both run on machines without a GPU (the CPU backend answers).

mod demo;
mod session;
mod sql;

use clap::{Parser, Subcommand};
use gpusort::BackendChoice;

#[derive(Debug, Parser)]
#[command(name = "gpusort", version, about = "GPU sorting for Apache DataFusion")]
struct Cli {
    #[command(subcommand)]
    command: Command,
}

#[derive(Debug, Subcommand)]
enum Command {
    /// Generate a table, run an ORDER BY through gpusort, print the plan and time, verify.
    Demo {
        /// Rows of the generated table.
        #[arg(long, default_value_t = 10_000_000)]
        rows: usize,
        /// Seed of the generated data.
        #[arg(long, default_value_t = 42)]
        seed: u64,
        /// Sort backend: auto, cuda or cpu.
        #[arg(long, default_value = "auto")]
        backend: BackendChoice,
    },
    /// Run SQL statements (separated by ';') with gpusort registered.
    Sql {
        /// The statements, e.g. "SET gpu_sort.enabled = false; SELECT ...".
        statements: String,
        /// Register a table: name=path (Parquet or CSV, a file or a directory).
        #[arg(long = "table", value_name = "NAME=PATH")]
        tables: Vec<String>,
        /// Print each query's physical plan and gpusort's decisions before its result.
        #[arg(long)]
        explain: bool,
        /// Sort backend: auto, cuda or cpu.
        #[arg(long, default_value = "auto")]
        backend: BackendChoice,
        /// Print at most this many rows of each result.
        #[arg(long, default_value_t = 50)]
        max_rows: usize,
    },
}

#[tokio::main]
async fn main() {
    env_logger::Builder::from_env(env_logger::Env::default().default_filter_or("warn")).init();
    let cli = Cli::parse();
    let result = match cli.command {
        Command::Demo {
            rows,
            seed,
            backend,
        } => demo::run(rows, seed, backend).await,
        Command::Sql {
            statements,
            tables,
            explain,
            backend,
            max_rows,
        } => sql::run(&statements, &tables, explain, backend, max_rows).await,
    };
    if let Err(e) = result {
        eprintln!("gpusort: error: {e}");
        std::process::exit(1);
    }
}
