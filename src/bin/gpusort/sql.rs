//! `gpusort sql`: run `;`-separated SQL statements, in order, over registered files.

use std::time::Instant;

use datafusion::arrow::util::pretty::pretty_format_batches;
use datafusion::common::{plan_err, Result};
use datafusion::physical_plan::{collect, displayable};
use datafusion::prelude::{CsvReadOptions, ParquetReadOptions, SessionContext};
use datafusion::sql::parser::DFParser;
use gpusort::BackendChoice;

use crate::session::new_session;

/// Registers `tables`, then plans and runs each statement, printing its result.
pub async fn run(
    statements: &str,
    tables: &[String],
    explain: bool,
    backend: BackendChoice,
    max_rows: usize,
) -> Result<()> {
    let session = new_session(backend);
    for table in tables {
        register_table(&session.ctx, table).await?;
    }
    let parsed = DFParser::parse_sql(statements)?;
    for statement in parsed {
        let state = session.ctx.state();
        let logical = state.statement_to_plan(statement).await?;
        let frame = session.ctx.execute_logical_plan(logical).await?;
        let plan = frame.create_physical_plan().await?;
        if plan.schema().fields().is_empty() {
            collect(plan, session.ctx.task_ctx()).await?;
            println!("ok");
            continue;
        }
        if explain {
            println!("{}", displayable(plan.as_ref()).indent(true));
            println!("{}", session.rule.last_decisions_text());
        }
        let started = Instant::now();
        let batches = collect(plan, session.ctx.task_ctx()).await?;
        let rows: usize = batches.iter().map(|b| b.num_rows()).sum();
        if batches.iter().any(|b| b.num_columns() > 0) {
            print_rows(&batches, max_rows)?;
        }
        println!("{rows} row(s) in {:.3} s", started.elapsed().as_secs_f64());
    }
    Ok(())
}

fn print_rows(batches: &[datafusion::arrow::array::RecordBatch], max_rows: usize) -> Result<()> {
    let mut shown = Vec::new();
    let mut left = max_rows;
    for batch in batches {
        if left == 0 {
            break;
        }
        let take = batch.num_rows().min(left);
        shown.push(batch.slice(0, take));
        left -= take;
    }
    println!("{}", pretty_format_batches(&shown)?);
    Ok(())
}

async fn register_table(ctx: &SessionContext, spec: &str) -> Result<()> {
    let Some((name, path)) = spec.split_once('=') else {
        return plan_err!("--table expects NAME=PATH, got '{spec}'");
    };
    let lower = path.to_ascii_lowercase();
    if lower.ends_with(".csv") {
        ctx.register_csv(name, path, CsvReadOptions::new()).await
    } else if lower.ends_with(".parquet") || std::path::Path::new(path).is_dir() {
        ctx.register_parquet(name, path, ParquetReadOptions::default())
            .await
    } else {
        plan_err!("--table {name}: '{path}' is neither a .parquet/.csv file nor a directory")
    }
}
